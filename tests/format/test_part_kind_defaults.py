"""A table whose statement sets neither `min_bytes_for_wide_part` nor `min_rows_for_wide_part` gets
the part kinds ClickHouse 26.9 gives it with its defaults (Compact under 10 MiB): the same inserts
and merges make Compact parts (`data.bin`) where chdb makes Compact ones and Wide parts (a `.bin`
per column) where chdb makes Wide ones, and chdb attaches ours, checks them and reads the same rows."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from spark_mergetree import MergeTreeTable
from spark_mergetree.expressions.ddl import parse_create
from tests.format.chdb_util import close_session, open_session

MIB_10 = 10 * 1024 * 1024

# Partition 1: two small inserts (Compact), merged into a Compact part. Partition 2: two inserts of
# ~7.5 MB each in memory (Compact), merged into a Wide part (their bytes summed pass 10 MiB).
# Partition 3: one insert of ~16 MB (Wide) and a small one (Compact), merged into a Wide part.
INSERTS = [(1, 0, 1000), (1, 1000, 700), (2, 0, 240_000), (2, 240_000, 240_000), (3, 0, 520_000),
           (3, 520_000, 50)]
CREATE = ("CREATE TABLE {name} (p UInt8, id UInt64, v Int64, d Date, s String, "
          "INDEX v_minmax v TYPE minmax GRANULARITY 1) "
          "ENGINE = MergeTree PARTITION BY p ORDER BY id")
# The same rows in ClickHouse and in Arrow (`_rows`): d spans 100 days, s is the id in decimal.
SELECT = "SELECT {p}, number, -toInt64(number) * 3, toDate(19000 + number % 100), toString(number) FROM numbers({start}, {n})"


def _rows(p: int, start: int, n: int) -> pa.Table:
    ids = np.arange(start, start + n, dtype=np.uint64)
    return pa.table({
        "p": pa.array(np.full(n, p, np.uint8)), "id": ids, "v": -ids.astype(np.int64) * 3,
        "d": pa.array((19000 + ids % 100).astype(np.int32)).cast(pa.date32()),
        "s": pc.cast(pa.array(ids), pa.string()),
    })


def _kinds(session, table: str) -> dict[str, str]:
    text = session.query(f"SELECT name, part_type FROM system.parts WHERE table = '{table}' AND active",
                         "TabSeparatedRaw").bytes().decode()
    return dict(line.split("\t") for line in text.splitlines())


def _our_kinds(table: MergeTreeTable) -> dict[str, str]:
    out = {}
    for part in table.parts():
        files = {f.name for f in (table.path / part.name).iterdir()}
        compact = "data.bin" in files
        per_column = any(f.endswith(".bin") and f != "data.bin" and not f.startswith("skp_idx") for f in files)
        assert compact != per_column, (part.name, sorted(files))  # one layout or the other
        out[part.name] = "Compact" if compact else "Wide"
    return out


def test_parts_are_compact_or_wide_as_clickhouse_makes_them_by_default(tmp_path: Path) -> None:
    session = open_session(tmp_path)
    session.query(CREATE.format(name="theirs"))
    session.query("SYSTEM STOP MERGES theirs")
    for p, start, n in INSERTS:
        session.query(f"INSERT INTO theirs {SELECT.format(p=p, start=start, n=n)}")
    inserted = _kinds(session, "theirs")
    # The shapes this test relies on: every kind occurs, both before and after the merges.
    assert sorted(set(inserted.values())) == ["Compact", "Wide"], inserted
    session.query("SYSTEM START MERGES theirs")
    session.query("OPTIMIZE TABLE theirs FINAL")
    merged = _kinds(session, "theirs")
    assert sorted(merged.values()) == ["Compact", "Wide", "Wide"], merged
    statement = session.query("SHOW CREATE TABLE theirs", "TabSeparatedRaw").bytes().decode()
    assert "min_bytes_for_wide_part" not in statement and "min_rows_for_wide_part" not in statement
    expected = session.query("SELECT * FROM theirs ORDER BY p, id", "TabSeparatedRaw").bytes()
    in_range = "SELECT count() FROM {name} WHERE v BETWEEN -3000 AND -2001"
    counted = session.query(in_range.format(name="theirs"), "TabSeparatedRaw").bytes()

    ours = MergeTreeTable.new(tmp_path / "ours", parse_create(statement.replace("theirs", "ours")),
                              {"auto_merge": False})
    ours.write_directory()
    for p, start, n in INSERTS:
        ours.insert(_rows(p, start, n))
    assert _our_kinds(ours) == inserted
    ours.optimize(final=True)
    ours.cleanup()
    assert _our_kinds(ours) == merged

    session.query(CREATE.format(name="back"))
    back_dir = Path(session.query("SELECT data_paths[1] FROM system.tables WHERE name = 'back'",
                                  "TabSeparatedRaw").bytes().decode().strip())
    for part in ours.parts():
        shutil.copytree(ours.path / part.name, back_dir / "detached" / part.name)
        session.query(f"ALTER TABLE back ATTACH PART '{part.name}'")
    assert session.query("CHECK TABLE back SETTINGS check_query_single_value_result = 1",
                         "TabSeparatedRaw").bytes().decode().split() == ["1"]
    # ATTACH PART gives each part new block numbers: by partition, each holds one part.
    assert {name.split("_")[0]: kind for name, kind in _kinds(session, "back").items()} == \
        {name.split("_")[0]: kind for name, kind in merged.items()}
    assert session.query("SELECT * FROM back ORDER BY p, id", "TabSeparatedRaw").bytes() == expected
    # A query through the skip index (in the Compact part, marks in `skp_idx_v_minmax.cmrk4`).
    assert session.query(in_range.format(name="back"), "TabSeparatedRaw").bytes() == counted
    close_session()


def test_an_insert_is_sized_as_clickhouse_sizes_it_in_memory(tmp_path: Path) -> None:
    """28 bytes a row in ClickHouse's memory (id 8, Date 2, Nullable(Int32) 1 + 4, two UInt16s in an
    array 8 + 4, a LowCardinality index of 1 byte): 374,000 rows are under 10 MiB, 375,000 are not;
    and two UInt64 columns make a Wide part at exactly 10 MiB (655,360 rows), not one row before."""
    session = open_session(tmp_path)
    session.query("CREATE TABLE mixed (id UInt64, d Date, n Nullable(Int32), a Array(UInt16), "
                  "lc LowCardinality(String)) ENGINE = MergeTree ORDER BY id")
    session.query("CREATE TABLE pair (x UInt64, y UInt64) ENGINE = MergeTree ORDER BY x")
    for table in ("mixed", "pair"):
        session.query(f"SYSTEM STOP MERGES {table}")
    mixed_counts, pair_counts = (374_000, 375_000), (MIB_10 // 16 - 1, MIB_10 // 16)
    for n in mixed_counts:
        session.query("INSERT INTO mixed SELECT number, toDate(19000 + number % 50), "
                      f"if(number % 3 = 0, NULL, toInt32(number)), [1, 2], concat('k', toString(number % 10)) "
                      f"FROM numbers({n})")
    for n in pair_counts:
        session.query(f"INSERT INTO pair SELECT number, number FROM numbers({n})")
    theirs = {table: _kinds(session, table) for table in ("mixed", "pair")}
    assert sorted(theirs["mixed"].values()) == sorted(theirs["pair"].values()) == ["Compact", "Wide"], theirs
    close_session()

    mixed = MergeTreeTable.create(tmp_path / "mixed", [("id", "UInt64"), ("d", "Date"), ("n", "Nullable(Int32)"),
                                                         ("a", "Array(UInt16)"), ("lc", "LowCardinality(String)")],
                                  order_by="id", settings={"auto_merge": False})
    for n in mixed_counts:
        ids = np.arange(n, dtype=np.uint64)
        mixed.insert(pa.table({
            "id": ids, "d": pa.array((19000 + ids % 50).astype(np.int32)).cast(pa.date32()),
            "n": pa.array(ids.astype(np.int32), mask=ids % 3 == 0),
            "a": pa.ListArray.from_arrays(np.arange(0, 2 * n + 1, 2, dtype=np.int32),
                                          pa.array(np.tile(np.array([1, 2], np.uint16), n))),
            "lc": pc.binary_join_element_wise("k", pc.cast(pa.array(ids % 10), pa.string()), ""),
        }))
    pair = MergeTreeTable.create(tmp_path / "pair", [("x", "UInt64"), ("y", "UInt64")], order_by="x",
                                 settings={"auto_merge": False})
    for n in pair_counts:
        ids = np.arange(n, dtype=np.uint64)
        pair.insert(pa.table({"x": ids, "y": ids}))
    for table, name in ((mixed, "mixed"), (pair, "pair")):
        mine = {}
        for part in table.parts():
            mine[part.name] = "Compact" if (table.path / part.name / "data.bin").exists() else "Wide"
        assert mine == theirs[name], name


def test_a_merge_is_sized_by_its_sources_deleted_rows_included(tmp_path: Path) -> None:
    """Two Compact parts of ~6.8 MB each (a DELETE left their rows and a `_row_exists` column) merge
    into a Wide part of the 22 rows left, as ClickHouse sizes a merge by its sources."""
    session = open_session(tmp_path)
    session.query("CREATE TABLE theirs (x UInt64, y UInt64) ENGINE = MergeTree ORDER BY x")
    for _ in range(2):
        session.query("INSERT INTO theirs SELECT number, number FROM numbers(400000)")
    session.query("DELETE FROM theirs WHERE x > 10")
    deleted = sorted(_kinds(session, "theirs").values())
    session.query("OPTIMIZE TABLE theirs FINAL")
    merged = list(_kinds(session, "theirs").values())
    assert (deleted, merged) == (["Compact", "Compact"], ["Wide"])
    expected = session.query("SELECT * FROM theirs ORDER BY x, y", "TabSeparatedRaw").bytes()

    ours = MergeTreeTable.create(tmp_path / "ours", [("x", "UInt64"), ("y", "UInt64")], order_by="x",
                                 settings={"auto_merge": False})
    ids = np.arange(400000, dtype=np.uint64)
    for _ in range(2):
        ours.insert(pa.table({"x": ids, "y": ids}))
    ours.delete("x > 10")
    assert sorted(_our_kinds(ours).values()) == deleted
    ours.optimize(final=True)
    ours.cleanup()
    assert list(_our_kinds(ours).values()) == merged and ours.count() == 22

    session.query("CREATE TABLE back (x UInt64, y UInt64) ENGINE = MergeTree ORDER BY x")
    back_dir = Path(session.query("SELECT data_paths[1] FROM system.tables WHERE name = 'back'",
                                  "TabSeparatedRaw").bytes().decode().strip())
    (part,) = ours.parts()
    shutil.copytree(ours.path / part.name, back_dir / "detached" / part.name)
    session.query(f"ALTER TABLE back ATTACH PART '{part.name}'")
    assert session.query("CHECK TABLE back SETTINGS check_query_single_value_result = 1",
                         "TabSeparatedRaw").bytes().decode().split() == ["1"]
    assert session.query("SELECT * FROM back ORDER BY x, y", "TabSeparatedRaw").bytes() == expected
    close_session()

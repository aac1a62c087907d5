"""Projections we write into our parts (`<name>.proj/`): the same bytes ClickHouse (chdb) writes for
the same rows, inserted and merged; ClickHouse attaches our parts, CHECK TABLE passes, and a query
with force_optimize_projection = 1 (which fails unless a projection is used) returns its rows."""

from __future__ import annotations

import logging
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from click.testing import CliRunner

from spark_mergetree import MergeTreeTable
from spark_mergetree.cli import main as cli
from spark_mergetree.engine import merge_stream, projection_merge, projections
from spark_mergetree.engine.optimize import merge_step
from spark_mergetree.errors import UnsupportedError
from spark_mergetree.expressions.ddl import format_create, parse_create
from spark_mergetree.format.checksums import Checksums
from tests.engine.test_storage_policies import LAYOUTS, _policy
from tests.format.chdb_util import (
    active_part_dirs,
    attach_and_check,
    close_session,
    make_chdb_table,
    paired_part_dirs,
    part_dirs,
)

CREATE = """CREATE TABLE t (id UInt64, k UInt32, v Float64, s String,
    PROJECTION ordered (SELECT * ORDER BY k),
    PROJECTION sel (SELECT s, id ORDER BY (s, id)),
    PROJECTION by_k (SELECT k, sum(v), count(), min(id), max(v), avg(k), any(id), anyLast(v), sum(id) GROUP BY k))
    ENGINE = MergeTree ORDER BY id
    SETTINGS index_granularity = 64, compress_primary_key = 0, {kind}"""
# The marks each part kind's writer here writes as ClickHouse does (uncompressed Wide, compressed Compact).
KINDS = {"Wide": "min_bytes_for_wide_part = 0, compress_marks = 0", "Compact": "min_bytes_for_wide_part = 1000000000"}
# Rows arrive out of the table's order: projections are built from them in the order they came.
ROWS = ("SELECT (number * 7919) % {rows} + {offset} AS id, toUInt32((number * 7) % 13) AS k, (number + {offset}) / 3 AS v, "
        "toString((number * 7919) % 1000) AS s FROM numbers({rows})")
COLUMNS = "id, k, v, s"
PROJECTIONS = ("ordered", "sel", "by_k")


def _arrow(sess, query: str) -> pa.Table:
    return pa.ipc.open_file(pa.py_buffer(sess.query(query, "Arrow").bytes())).read_all()


def _rows(data: pa.Table) -> list[tuple]:
    columns = [[v.decode() if isinstance(v, bytes) else v for v in c.to_pylist()] for c in data.columns]
    return sorted(zip(*columns))


# Files our writer writes differently from ClickHouse 26 in every part, projection or not (it records
# no per-column default counts and no substreams listing); the rest must be ClickHouse's bytes.
NOT_COMPARED = ("serialization.json", "columns_substreams.txt", "checksums.txt")


def _projection_files(part: Path) -> dict[str, bytes]:
    return {f"{d.name}/{f.name}": f.read_bytes() for d in sorted(part.glob("*.proj")) for f in sorted(d.iterdir())
            if f.name not in NOT_COMPARED}


def _checksum_entries(directory: Path) -> dict:
    files = Checksums.parse((directory / "checksums.txt").read_bytes()).files
    return {name: entry for name, entry in files.items() if name != "serialization.json"}


@pytest.fixture(scope="module", params=list(KINDS))
def tables(request, tmp_path_factory):
    """chdb's table `t` (two inserts, merges stopped) and ours made from the same statement and rows."""
    tmp = tmp_path_factory.mktemp(f"proj_{request.param}")
    sess, data_dir = make_chdb_table(tmp, CREATE.format(kind=KINDS[request.param]))
    sess.query("SYSTEM STOP MERGES t")
    statement = sess.query("SHOW CREATE TABLE t", "TabSeparatedRaw").bytes().decode()
    ours = MergeTreeTable.new(tmp / "ours", parse_create(statement), {"auto_merge": False})
    ours.write_directory()
    for offset, rows in ((0, 500), (500, 300)):
        sess.query("INSERT INTO t " + ROWS.format(offset=offset, rows=rows))
        ours.insert(_arrow(sess, ROWS.format(offset=offset, rows=rows)))
    yield sess, data_dir, ours
    close_session()


def test_inserted_parts_hold_clickhouses_projection_bytes(tables) -> None:
    sess, data_dir, ours = tables
    _same_projection_files(data_dir, ours, PROJECTIONS)
    assert ours.check().ok


def _same_projection_files(data_dir: Path, ours: MergeTreeTable, names) -> None:
    """Each of ClickHouse's parts and ours (paired by name) hold the same files of projections `names`."""
    for their_part, our_part in paired_part_dirs(data_dir, ours):
        expected = _projection_files(their_part)
        assert {name.split("/")[0] for name in expected} == {f"{p}.proj" for p in names}
        assert _projection_files(our_part) == expected, our_part.name
        for projection in (f"{p}.proj" for p in names):
            assert _checksum_entries(our_part / projection) == _checksum_entries(their_part / projection)


def _attach(sess, ours: MergeTreeTable, name: str) -> None:
    sess.query(f"CREATE TABLE {name} AS t")
    attach_and_check(sess, name, [ours.path / part.name for part in ours.parts()])


def test_clickhouse_checks_and_uses_the_projections_of_our_parts(tables) -> None:
    sess, _, ours = tables
    _attach(sess, ours, "attached")
    query = "SELECT k, sum(v), count(), min(id), max(v), avg(k), sum(id) FROM {} GROUP BY k"
    forced = query.format("attached") + " SETTINGS force_optimize_projection = 1"
    assert "by_k" in sess.query(f"EXPLAIN projections = 1 {forced}", "TabSeparatedRaw").bytes().decode()
    # The same states as ClickHouse's parts: the same answers, float sums to the last bit.
    assert _rows(_arrow(sess, forced)) == _rows(_arrow(sess, query.format("t") + " SETTINGS force_optimize_projection = 1"))
    for where, projection in (("k = 5", "ordered"), ("s = '77'", "sel")):
        columns = "id, s" if projection == "sel" else COLUMNS
        forced = f"SELECT {columns} FROM attached WHERE {where} SETTINGS force_optimize_projection = 1, " \
                 f"preferred_optimize_projection_name = '{projection}'"
        explain = sess.query(f"EXPLAIN projections = 1 {forced}", "TabSeparatedRaw").bytes().decode()
        assert projection in explain, explain
        assert _rows(_arrow(sess, forced)) == _rows(_arrow(sess, f"SELECT {columns} FROM t WHERE {where}")), where


def test_merged_part_holds_clickhouses_projection_bytes(tables) -> None:
    """Merges rebuild the projections: OPTIMIZE FINAL here and in ClickHouse, the same bytes."""
    sess, data_dir, ours = tables
    sess.query("SYSTEM START MERGES t")
    sess.query("OPTIMIZE TABLE t FINAL")
    ours.optimize(final=True)
    (theirs,) = [p for p in part_dirs(data_dir) if p.name == "all_1_2_1"]
    (mine,) = [ours.path / p.name for p in ours.parts()]
    assert mine.name == "all_1_2_1"
    # Aggregate states are merged as ClickHouse merges them (float sums added in the same order,
    # any/anyLast from the first/last source): the same bytes.
    assert _projection_files(mine) == _projection_files(theirs)
    for projection in (f"{p}.proj" for p in PROJECTIONS):
        assert _checksum_entries(mine / projection) == _checksum_entries(theirs / projection)
    assert ours.check().ok
    _attach(sess, ours, "merged")
    query = "SELECT k, round(sum(v), 6), count(), min(id), max(v), avg(k), sum(id) FROM {} GROUP BY k"
    forced = query.format("merged") + " SETTINGS force_optimize_projection = 1"
    assert "by_k" in sess.query(f"EXPLAIN projections = 1 {forced}", "TabSeparatedRaw").bytes().decode()
    assert _rows(_arrow(sess, forced)) == _rows(_arrow(sess, query.format("t") + " SETTINGS optimize_use_projections = 0"))


def test_create_refuses_projections_it_cannot_write(tmp_path) -> None:
    with pytest.raises(UnsupportedError, match="by_k.*uniqUpTo"):
        MergeTreeTable.create(tmp_path / "a", [("k", "UInt32"), ("v", "Float64")], "k",
                              projections=["PROJECTION by_k (SELECT k, uniqUpTo(3)(v) GROUP BY k)"])
    assert not (tmp_path / "a").exists()
    with pytest.raises(UnsupportedError, match="needs an ORDER BY"):
        MergeTreeTable.create(tmp_path / "d", [("k", "UInt32"), ("v", "Float64")], "k", projections=["p (SELECT v, k)"])
    for offsets, reason in (("PROJECTION p INDEX v TYPE array", "TYPE array"),
                            ("PROJECTION p INDEX reverse(s) TYPE basic", "reverse"),
                            ("PROJECTION p (SELECT _part_offset ORDER BY -v)", "ORDER BY -v")):
        with pytest.raises(UnsupportedError, match=rf"'p': .*{reason}"):
            MergeTreeTable.create(tmp_path / "o", [("k", "UInt32"), ("v", "Float64"), ("s", "String")], "k",
                                  projections=[offsets])
        assert not (tmp_path / "o").exists()
    with pytest.raises(UnsupportedError, match="combine rows.*deduplicate_merge_projection_mode"):
        MergeTreeTable.create(tmp_path / "b", [("k", "UInt32"), ("v", "Float64")], "k",
                              engine="ReplacingMergeTree", projections=["p (SELECT * ORDER BY v)"])
    table = MergeTreeTable.create(tmp_path / "c", [("k", "UInt32"), ("v", "Float64")], "k",
                                  projections=["p (SELECT * ORDER BY v)"])
    table.insert(pa.table({"k": pa.array([3, 1, 2], pa.uint32()), "v": [0.5, 0.25, 0.75]}))
    (part,) = table.parts()
    assert (table.path / part.name / "p.proj" / "count.txt").read_text() == "3"
    assert "p.proj" in Checksums.parse((table.path / part.name / "checksums.txt").read_bytes()).files
    assert table.check().ok


def test_background_merges_leave_parts_with_projections_they_cannot_build(tmp_path, caplog) -> None:
    """ClickHouse's parts hold a projection we cannot build (uniqUpTo states): inserts into such a
    table are refused (their parts would lack it); with the statement declaring only what we build,
    background merges skip those parts (saying so once per part) and merge ours; OPTIMIZE refuses
    naming the projection."""
    create = ("CREATE TABLE u (k UInt32, v UInt64, PROJECTION u_k (SELECT k, uniqUpTo(3)(v) GROUP BY k), "
              "PROJECTION o (SELECT * ORDER BY v)) ENGINE = MergeTree ORDER BY k SETTINGS min_bytes_for_wide_part = 0")
    sess, data_dir = make_chdb_table(tmp_path, create)
    sess.query("SYSTEM STOP MERGES u")
    for offset in (0, 100, 200):
        sess.query(f"INSERT INTO u SELECT number % 7, number + {offset} FROM numbers(100)")
    statement = sess.query("SHOW CREATE TABLE u", "TabSeparatedRaw").bytes().decode()
    copy = tmp_path / "copy"
    shutil.copytree(data_dir, copy)
    close_session()
    rows = pa.table({"k": pa.array([1, 2], pa.uint32()), "v": pa.array([5, 6], pa.uint64())})
    table = MergeTreeTable.open(copy, create_statement=statement)
    assert table.metadata.unbuildable_projections.keys() == {"u_k"}
    with pytest.raises(UnsupportedError, match="u_k.*uniqUpTo"):
        table.insert(rows)
    assert len(table.parts()) == 3
    definition = parse_create(statement)
    ours_only = format_create(replace(definition, indexes=tuple(i for i in definition.indexes if "u_k" not in i)))
    table = MergeTreeTable.open(copy, create_statement=ours_only)
    assert [p.name for p in table.metadata.projections] == ["o"]
    table.insert(rows)
    table.insert(rows)
    with caplog.at_level(logging.INFO, logger="spark_mergetree.engine.optimize"):
        merge_step(table)
        merge_step(table)
    said = [r.getMessage() for r in caplog.records if "u_k" in r.getMessage()]
    assert len(said) == 3 and all("cannot build" in line for line in said)  # once per part
    assert {p.name for p in table.parts()} >= {"all_1_1_0", "all_2_2_0", "all_3_3_0"}
    with pytest.raises(UnsupportedError, match="u_k"):
        table.optimize(final=True)


def test_mutations_rebuild_projections_and_lightweight_delete_is_refused(tmp_path) -> None:
    """UPDATE rewrites a part with its projections built from the new rows; MATERIALIZE INDEX keeps
    them; a lightweight DELETE is refused as ClickHouse refuses it on tables with projections."""
    table = MergeTreeTable.create(tmp_path / "m", [("k", "UInt32"), ("v", "Int64")], "k",
                                  settings={"auto_merge": False},
                                  projections=["p (SELECT * ORDER BY v)", "s (SELECT k, sum(v), count() GROUP BY k)"])
    table.insert(pa.table({"k": pa.array([1, 2, 3, 1], pa.uint32()), "v": pa.array([40, 30, 20, 10], pa.int64())}))
    with pytest.raises(UnsupportedError, match="lightweight DELETE"):
        table.delete("k = 2")
    (part,) = table.update({"v": "v * -1"}, "k = 1")
    reader = table.reader(part)
    assert reader.projections == ["p", "s"]
    by_v = reader.projection_reader("p").read(["k", "v"]).to_pydict()
    assert by_v == {"k": [1, 1, 3, 2], "v": [-40, -10, 20, 30]}
    assert table.check().ok
    table.add_index("INDEX i v TYPE minmax GRANULARITY 1")
    (indexed,) = table.materialize_index("i")
    assert table.reader(indexed).projections == ["p", "s"] and table.check().ok


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_projections_on_every_storage_layout(layout, tmp_path) -> None:
    """Parts with `<name>.proj/` on every layout: written, merged, checked, scrubbed, exported as a
    plain part ClickHouse attaches with CHECK TABLE = 1 and answers from its projection."""
    table = MergeTreeTable.create(tmp_path / "t", [("k", "UInt32"), ("v", "Int64")], "k",
                                  settings={"storage_policy": _policy(tmp_path, layout, LAYOUTS[layout]),
                                            "auto_merge": False, "index_granularity": 64},
                                  projections=["p (SELECT * ORDER BY v)", "s (SELECT k, sum(v) GROUP BY k)"])
    for start in (0, 300):
        v = np.arange(start, start + 300, dtype=np.int64)
        table.insert(pa.table({"k": pa.array(v % 11, pa.uint32()), "v": -v}))
    (merged,) = table.optimize(final=True)
    assert table.reader(merged).projections == ["p", "s"]
    assert table.check().ok
    assert table.store.scrub().ok
    destination = tmp_path / "export" / merged
    result = CliRunner().invoke(cli, ["export-part", str(table.path), merged, str(destination)])
    assert result.exit_code == 0, result.output
    assert (destination / "p.proj" / "checksums.txt").is_file()
    sess, data_dir = make_chdb_table(tmp_path / "ch", "CREATE TABLE e (k UInt32, v Int64, PROJECTION p (SELECT * "
                                     "ORDER BY v), PROJECTION s (SELECT k, sum(v) GROUP BY k)) ENGINE = MergeTree "
                                     "ORDER BY k SETTINGS index_granularity = 64")
    shutil.copytree(destination, data_dir / "detached" / merged)
    sess.query(f"ALTER TABLE e ATTACH PART '{merged}'")
    assert sess.query("CHECK TABLE e", "TabSeparatedRaw").bytes().decode().split()[1] == "1"
    got = sess.query("SELECT k, sum(v) FROM e GROUP BY k ORDER BY k SETTINGS force_optimize_projection = 1",
                     "TabSeparatedRaw").bytes().decode().split()
    v = np.arange(600)
    assert got == [str(x) for k in range(11) for x in (k, -int(v[v % 11 == k].sum()))]
    close_session()


LATE = ("PROJECTION late (SELECT s, k ORDER BY (s, k))",
        "PROJECTION late_sum (SELECT s, sum(k), count(), min(k), max(id), avg(k), any(id), anyLast(id) GROUP BY s)")


@pytest.mark.parametrize("kind", list(KINDS))
def test_merges_build_big_projections_from_runs(tmp_path, monkeypatch, kind) -> None:
    """Projections whose input is above projection_merge.RUN_BYTES (made tiny here) are merged from
    runs: the normal ones held by every source as parts of their own; `late` and `late_sum`, added
    after two inserts (those parts lack them), from runs built of the first parts' rows and the third
    part's projection, two at a time level by level (FAN_IN); the aggregate ones' states combined key
    by key. ClickHouse attaches the merged
    part (CHECK TABLE) and answers from each projection with the rows it reads without them."""
    monkeypatch.setattr(projection_merge, "RUN_BYTES", 20_000)
    monkeypatch.setattr(merge_stream, "READ_BLOCK_ROWS", 256)  # sources read in blocks of a few granules
    monkeypatch.setattr(projection_merge, "FAN_IN", 2)  # runs merged two at a time, level by level
    built = []

    def counted(*args, **kwargs):
        files = projection_files(*args, **kwargs)
        built.append(args[0].name)
        return files

    projection_files = projections.projection_files
    monkeypatch.setattr(projections, "projection_files", counted)
    sess, _ = make_chdb_table(tmp_path, CREATE.format(kind=KINDS[kind]))
    sess.query("SYSTEM STOP MERGES t")
    ours = MergeTreeTable.new(tmp_path / "ours", parse_create(sess.query("SHOW CREATE TABLE t", "TabSeparatedRaw")
                                                                 .bytes().decode()), {"auto_merge": False})
    ours.write_directory()
    for number, (offset, rows) in enumerate(((0, 3000), (3000, 2500), (5500, 2000))):
        if number == 2:
            for declaration in LATE:
                sess.query(f"ALTER TABLE t ADD {declaration}")
                ours.add_projection(declaration)
        sess.query("INSERT INTO t " + ROWS.format(offset=offset, rows=rows))
        ours.insert(_arrow(sess, ROWS.format(offset=offset, rows=rows)))
    built.clear()
    # each source's states (the first two parts' from their rows, the third's its own), combined in order
    late_sum = next(p for p in ours.metadata.projections if p.name == "late_sum")
    types = ours.metadata.column_types
    first, second, third = (ours.reader(p.name) for p in ours.parts())
    states = [projections.combined_states(late_sum, r.read(["s", "k", "id"]), types) for r in (first, second)]
    expected_states = projections.combined_states(
        late_sum, pa.concat_tables([*states, third.projection_reader("late_sum").read()]), types)
    (merged,) = ours.optimize(final=True)
    # runs built from rows: `late` and `late_sum` for the first two parts (more than one run each);
    # `by_k`'s input (the sources' states of 13 groups) is under RUN_BYTES: built in memory
    assert built.count("late") > 2 and built.count("late_sum") > 2 and built.count("by_k") == 1, built
    reader = ours.reader(merged)
    assert sorted(reader.projections) == sorted([*PROJECTIONS, "late", "late_sum"])
    assert reader.projection_reader("late").rows == 7500
    # one row per group, the states combined in source order: those of all sources' rows at once
    assert reader.projection_reader("late_sum").read().equals(expected_states)
    assert ours.check().ok
    _attach(sess, ours, "merged")
    queries = {
        "by_k": "SELECT k, round(sum(v), 6), count(), min(id), max(v), avg(k), sum(id) FROM {} GROUP BY k",
        "late_sum": "SELECT s, sum(k), count(), min(k), max(id), avg(k) FROM {} GROUP BY s",
        "ordered": "SELECT * FROM {} WHERE k = 5",
        "sel": "SELECT id, s FROM {} WHERE s = '77'",
        "late": "SELECT s, k FROM {} WHERE s = '123'",
    }
    for projection, query in queries.items():
        forced = (query.format("merged") + " SETTINGS force_optimize_projection = 1, "
                  f"preferred_optimize_projection_name = '{projection}'")
        explain = sess.query(f"EXPLAIN projections = 1 {forced}", "TabSeparatedRaw").bytes().decode()
        assert projection in explain, explain
        expected = _rows(_arrow(sess, query.format("t") + " SETTINGS optimize_use_projections = 0"))
        assert expected and _rows(_arrow(sess, forced)) == expected, projection
    close_session()


OFFSETS = """CREATE TABLE o (id UInt64, k UInt32, v Float64, s String,
    PROJECTION by_k (SELECT _part_offset ORDER BY k),
    PROJECTION by_s INDEX s TYPE basic,
    PROJECTION by_kv INDEX (k, v) TYPE basic,
    PROJECTION with_id (SELECT id, _part_offset ORDER BY (s, k)),
    PROJECTION unselected (SELECT s ORDER BY k),
    PROJECTION by_length INDEX length(s) TYPE basic,
    PROJECTION by_lower (SELECT _part_offset ORDER BY (lower(s), k)))
    ENGINE = MergeTree ORDER BY id {partition}
    SETTINGS index_granularity = 64, compress_primary_key = 0, {kind}"""
OFFSET_PROJECTIONS = ("by_k", "by_s", "by_kv", "with_id", "unselected", "by_length", "by_lower")
# Filtering by a projection of offsets: ClickHouse reads the parent's rows at the offsets it finds.
BY_OFFSETS = {"by_k": "k = 5", "by_s": "s = '77'", "by_kv": "k = 3 AND v > 100", "with_id": "s < '2' AND k = 2",
              "by_length": "length(s) = 1", "by_lower": "lower(s) = '77'"}
USE_OFFSETS = "min_table_rows_to_use_projection_index = 0"


def _offset_tables(tmp, kind: str, partition: str = ""):
    """chdb's table `o` (inserts of rows out of order with many equal keys, merges stopped) and ours
    made from its statement and the same rows."""
    sess, data_dir = make_chdb_table(tmp, OFFSETS.format(kind=KINDS[kind], partition=partition))
    sess.query("SYSTEM STOP MERGES o")
    ours = MergeTreeTable.new(tmp / "ours", parse_create(sess.query("SHOW CREATE TABLE o", "TabSeparatedRaw")
                                                         .bytes().decode()), {"auto_merge": False})
    ours.write_directory()
    for offset, rows in ((0, 500), (500, 300)):
        sess.query("INSERT INTO o " + ROWS.format(offset=offset, rows=rows))
        ours.insert(_arrow(sess, ROWS.format(offset=offset, rows=rows)))
    return sess, data_dir, ours


def _uses_offsets(sess, table: str) -> None:
    """ClickHouse filters `table` by each projection of offsets and gets the rows `o` gives without them."""
    for projection, where in BY_OFFSETS.items():
        query = f"SELECT {COLUMNS} FROM {{}} WHERE {where}"
        settings = f" SETTINGS {USE_OFFSETS}, preferred_optimize_projection_name = '{projection}'"
        explain = sess.query(f"EXPLAIN projections = 1 {query.format(table)}{settings}", "TabSeparatedRaw").bytes().decode()
        assert f"Name: {projection}" in explain, explain
        expected = _rows(_arrow(sess, query.format("o") + " SETTINGS optimize_use_projections = 0"))
        assert expected and _rows(_arrow(sess, query.format(table) + settings)) == expected, projection


@pytest.mark.parametrize("kind", list(KINDS))
def test_projections_of_offsets_inserted_and_merged_as_clickhouse_writes_them(tmp_path, kind) -> None:
    """`SELECT _part_offset ORDER BY ...` and `INDEX ... TYPE basic`: the ORDER BY columns (and the
    selected ones) in table order, then `_parent_part_offset`, rows sorted stably by the key in the
    order they arrived; a merge translates every source's offsets into the merged part's. The same
    files as ClickHouse's for the same rows; ClickHouse checks our parts and filters by them."""
    sess, data_dir, ours = _offset_tables(tmp_path, kind)
    _same_projection_files(data_dir, ours, OFFSET_PROJECTIONS)
    reader = ours.reader(ours.parts()[0].name)
    assert [n for n, _ in reader.projection_reader("with_id").columns] == ["id", "k", "s", "_parent_part_offset"]
    # the offsets lead back to the rows: each projection row's key is its parent row's
    by_k = reader.projection_reader("by_k").read()
    parent_k = reader.read(["k"]).column("k").take(by_k.column("_parent_part_offset"))
    assert parent_k.equals(by_k.column("k"))
    assert ours.check().ok
    sess.query("CREATE TABLE attached AS o")
    attach_and_check(sess, "attached", [ours.path / part.name for part in ours.parts()])
    _uses_offsets(sess, "attached")

    sess.query("SYSTEM START MERGES o")
    sess.query("OPTIMIZE TABLE o FINAL")
    (merged,) = ours.optimize(final=True)
    (theirs,) = [p for p in part_dirs(data_dir) if p.name == "all_1_2_1"]
    # (ClickHouse's merge of a Compact projection part ordered by an expression ends a granule where
    # one of its merge's blocks ends: the same rows, cut into other granules; ClickHouse filters by
    # ours below)
    cut = ("by_length.proj/", "by_lower.proj/") if kind == "Compact" else ()
    assert merged == "all_1_2_1" and {n: b for n, b in _projection_files(ours.path / merged).items() if not n.startswith(
        cut or "/")} == {n: b for n, b in _projection_files(theirs).items() if not n.startswith(cut or "/")}
    assert ours.check().ok
    sess.query("CREATE TABLE merged AS o")
    attach_and_check(sess, "merged", [ours.path / merged])
    _uses_offsets(sess, "merged")
    close_session()


def test_projections_of_offsets_in_partitions_and_big_merges(tmp_path, monkeypatch) -> None:
    """A partitioned insert gives each partition's part its own offsets (ClickHouse's bytes); a merge
    streaming its rows (spill directory, several blocks per source) translates them as well."""
    monkeypatch.setattr(merge_stream, "READ_BLOCK_ROWS", 128)
    sess, data_dir, ours = _offset_tables(tmp_path, "Wide", "PARTITION BY k % 2")
    for theirs, mine in paired_part_dirs(data_dir, ours):
        assert _projection_files(mine) == _projection_files(theirs), mine.name
    sess.query("SYSTEM START MERGES o")
    sess.query("OPTIMIZE TABLE o FINAL")
    assert len(ours.optimize(final=True)) == 2
    active = {p.name: p for p in active_part_dirs(sess, "o")}
    for part in ours.parts():
        assert _projection_files(ours.path / part.name) == _projection_files(active[part.name]), part.name
    assert ours.check().ok
    sess.query("CREATE TABLE attached AS o")
    attach_and_check(sess, "attached", [ours.path / part.name for part in ours.parts()])
    _uses_offsets(sess, "attached")
    close_session()


def test_mutations_rebuild_the_projections_reading_updated_columns(tmp_path) -> None:
    """UPDATE rewrites each part: the projections reading an updated column are built from its rows
    (offsets 0, 1, ... sorted stably by the key), the others kept as they were; ClickHouse's files
    after the same UPDATEs; ClickHouse checks the parts and filters by them."""
    sess, _, ours = _offset_tables(tmp_path, "Wide")
    sess.query("SYSTEM START MERGES o")
    for column, where in (("v", "id % 3 = 0"), ("k", "id % 5 = 1")):
        sess.query(f"ALTER TABLE o UPDATE {column} = {column} + 1 WHERE {where} SETTINGS mutations_sync = 2")
        written = ours.update({column: f"{column} + 1"}, where)
        theirs = {p.name: p for p in active_part_dirs(sess, "o")}
        assert sorted(written) == sorted(theirs)
        for part in written:
            assert _projection_files(ours.path / part) == _projection_files(theirs[part]), (column, part)
    for part in written:
        reader = ours.reader(part)
        for projection in ("by_k", "by_kv"):
            held = reader.projection_reader(projection).read()
            parent = reader.read(["k", "v"]).take(held.column("_parent_part_offset"))
            assert parent.select([n for n in held.column_names if n in ("k", "v")]).equals(held.drop_columns(
                ["_parent_part_offset"]))
    assert ours.check().ok
    sess.query("CREATE TABLE attached AS o")
    attach_and_check(sess, "attached", [ours.path / part.name for part in ours.parts()])
    _uses_offsets(sess, "attached")
    close_session()

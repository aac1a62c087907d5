"""Compact parts we write are the bytes ClickHouse (chdb) writes for the same rows: `data.bin`,
`data.cmrk4`, `columns_substreams.txt` and their checksums. (The conformance corpus checks that
ClickHouse attaches them for every type and codec: tests/conformance.)"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from spark_mergetree import MergeTreeTable
from spark_mergetree.expressions.ddl import parse_create
from spark_mergetree.format.checksums import Checksums
from spark_mergetree.format.compact_writer import is_compact_part
from tests.format.chdb_util import active_part_dirs, close_session, make_chdb_table

COMPACT = "min_bytes_for_wide_part = 1000000000, min_rows_for_wide_part = 1000000000"
COLUMNS = ("id UInt64, s String, n Nullable(UInt8), a Array(LowCardinality(String)), "
           "lcn LowCardinality(Nullable(String)), x UInt32 CODEC(Delta, ZSTD), t Tuple(p Float64, q Array(Int16)), "
           "m Map(String, LowCardinality(String)), nn Nested(a UInt8, b String)")
EXPRS = ("number, repeat('x', number % 5), if(number % 3 = 0, NULL, number * (number % 3 != 0)), [toString(number % 3), 'k'], "
         "if(number % 4 = 0, NULL, toString(number % 5 * (number % 4 != 0))), toUInt32(number * 7), (number / 3, [toInt16(number)]), "
         "map('a', toString(number % 2)), range(number % 3), arrayMap(x -> toString(x), range(number % 3))")
BYTE_FILES = ("data.bin", "data.cmrk4", "columns_substreams.txt")


@pytest.mark.parametrize("rows", [10, 150, 700])
@pytest.mark.parametrize("partitioned", [False, True], ids=["flat", "partitioned"])
def test_compact_part_bytes_are_clickhouses(tmp_path, rows, partitioned):
    partition = " PARTITION BY id % 2" if partitioned else ""
    create = (f"CREATE TABLE c ({COLUMNS}) ENGINE = MergeTree{partition} ORDER BY id "
              f"SETTINGS index_granularity = 64, {COMPACT}")
    sess, data_dir = make_chdb_table(tmp_path, create, [f"INSERT INTO c SELECT {EXPRS} FROM numbers({rows})"])
    statement = sess.query("SHOW CREATE TABLE c", "TabSeparatedRaw").bytes().decode()
    theirs = active_part_dirs(sess, "c")
    close_session()
    rows_read = MergeTreeTable.open(data_dir, create_statement=statement).to_arrow().sort_by("id")
    ours = MergeTreeTable.new(tmp_path / "ours", parse_create(statement), {"auto_merge": False})
    ours.write_directory()
    ours.insert(rows_read)
    mine = sorted(ours.parts(), key=lambda p: p.name)
    assert [p.name.split("_")[0] for p in mine] == [d.name.split("_")[0] for d in theirs]
    for part, their_dir in zip(mine, theirs, strict=True):
        our_dir = ours.path / part.name
        for name in BYTE_FILES:
            assert (our_dir / name).read_bytes() == (their_dir / name).read_bytes(), (part.name, name)
        our_sums = Checksums.parse((our_dir / "checksums.txt").read_bytes(), "ours").files
        their_sums = Checksums.parse((their_dir / "checksums.txt").read_bytes(), "theirs").files
        for name in ("data.bin", "data.cmrk4"):
            assert our_sums[name] == their_sums[name], name


def test_part_type_is_chosen_as_clickhouse_chooses():
    # Without settings, ClickHouse 26.9's defaults: Compact under 10 MiB (min_bytes_for_wide_part).
    assert is_compact_part({}, 10, 100)
    assert is_compact_part({}, 10**9, 10 * 1024 * 1024 - 1)
    assert not is_compact_part({}, 1, 10 * 1024 * 1024)
    assert is_compact_part({"min_bytes_for_wide_part": "0", "min_level_for_wide_part": "2"}, 10, 10**9, level=1)
    assert not is_compact_part({"min_bytes_for_wide_part": "0", "min_level_for_wide_part": "2"}, 10, 10**9, level=2)
    assert is_compact_part({"min_bytes_for_wide_part": "1000"}, 10**6, 999)
    assert not is_compact_part({"min_bytes_for_wide_part": "1000"}, 1, 1000)
    assert is_compact_part({"min_rows_for_wide_part": "100", "min_bytes_for_wide_part": "0"}, 99, 10**9)
    assert not is_compact_part({"min_rows_for_wide_part": "100", "min_bytes_for_wide_part": "0"}, 100, 10**9)


def test_merged_compact_part_is_attached_by_clickhouse(tmp_path):
    """Parts under min_bytes_for_wide_part merge into a Compact part that ClickHouse attaches and
    checks. (Its granules follow our merge's blocks, not the blocks ClickHouse's merge happens to
    produce, so the bytes may differ from ClickHouse's merge of the same parts.)"""
    create = f"CREATE TABLE c ({COLUMNS}) ENGINE = MergeTree ORDER BY id SETTINGS index_granularity = 64, {COMPACT}"
    inserts = [f"INSERT INTO c SELECT {EXPRS} FROM numbers({start}, 150)" for start in (0, 150, 300)]
    sess, data_dir = make_chdb_table(tmp_path, create, inserts)
    statement = sess.query("SHOW CREATE TABLE c", "TabSeparatedRaw").bytes().decode()
    rows = MergeTreeTable.open(data_dir, create_statement=statement).to_arrow().sort_by("id")
    expected = sess.query("SELECT * FROM c ORDER BY id", "TabSeparatedRaw").bytes()
    ours = MergeTreeTable.new(tmp_path / "ours", parse_create(statement), {"auto_merge": False})
    ours.write_directory()
    for start in (0, 150, 300):
        ours.insert(rows.slice(start, 150))
    assert ours.optimize(final=True)
    (merged,) = ours.parts()
    assert (ours.path / merged.name / "data.bin").exists() and not (ours.path / merged.name / "id.bin").exists()
    sess.query(create.replace("TABLE c", "TABLE back"))
    back_dir = Path(sess.query("SELECT data_paths[1] FROM system.tables WHERE name = 'back'",
                               "TabSeparatedRaw").bytes().decode().strip())
    shutil.copytree(ours.path / merged.name, back_dir / "detached" / merged.name)
    sess.query(f"ALTER TABLE back ATTACH PART '{merged.name}'")
    assert sess.query("CHECK TABLE back SETTINGS check_query_single_value_result = 1",
                      "TabSeparatedRaw").bytes().decode().split() == ["1"]
    assert sess.query("SELECT DISTINCT part_type FROM system.parts WHERE table = 'back' AND active",
                      "TabSeparatedRaw").bytes().decode().split() == ["Compact"]
    assert sess.query("SELECT * FROM back ORDER BY id", "TabSeparatedRaw").bytes() == expected
    close_session()

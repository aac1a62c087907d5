"""Data-skipping indexes we write into our parts: the same bytes ClickHouse (chdb) writes for the same
rows, inserted and merged; ClickHouse attaches our parts, CHECK TABLE passes, and its EXPLAIN shows
each index skipping granules of our parts while returning the rows it returns from its own."""

from __future__ import annotations

import re
from pathlib import Path

import pyarrow as pa
import pytest

from spark_mergetree import MergeTreeTable
from spark_mergetree.errors import ExpressionError, SchemaMismatchError
from spark_mergetree.expressions.ddl import parse_create
from spark_mergetree.expressions.predicate import bind, evaluate, parse_predicate
from spark_mergetree.format.checksums import Checksums
from spark_mergetree.format.part_info import PartInfo
from tests.format.chdb_util import (
    attach_and_check,
    close_session,
    make_chdb_table,
    paired_part_dirs,
    part_dirs,
)

CREATE = """CREATE TABLE t (k UInt64, a Int64, b UInt32, s String, n Nullable(Int32), f Float64, d Date,
    doc String, t String,
    INDEX i_mm a TYPE minmax GRANULARITY 2,
    INDEX i_mm2 (n, s) TYPE minmax GRANULARITY 1,
    INDEX i_set b TYPE set(50) GRANULARITY 1,
    INDEX i_set2 (b, s) TYPE set(8) GRANULARITY 2,
    INDEX i_bf s TYPE bloom_filter GRANULARITY 1,
    INDEX i_bf2 (b, d, f, n) TYPE bloom_filter(0.01) GRANULARITY 3,
    INDEX i_ng doc TYPE ngrambf_v1(3, 512, 3, 7) GRANULARITY 1,
    INDEX i_tk t TYPE tokenbf_v1(512, 2, 11) GRANULARITY 2)
    ENGINE = MergeTree ORDER BY k
    SETTINGS index_granularity = 256, min_bytes_for_wide_part = 0, compress_marks = 0,
    compress_primary_key = 0, packed_skip_index_max_bytes = 0"""

INSERT = ("INSERT INTO t SELECT number + {offset}, intDiv(number + {offset}, 100) * 3 - 500, "
          "intDiv(number + {offset}, 300) % 97, concat('key-', toString((number + {offset}) * 7919 % 100003)), "
          "if(number % 11 = 0, NULL, toInt32(number % 1000) - 400), (number + {offset}) / 7, "
          "toDate('2024-01-01') + intDiv(number + {offset}, 1000), "
          "concat(['alpha', 'beta', 'gamma', 'delta'][number % 4 + 1], ' ', "
          "if((number + {offset}) % 887 = 0, 'zébra', 'plain'), ' w', toString(number % 13)), "
          "concat('t', toString(number % 50), if((number + {offset}) % 887 = 0, ' zebra', ' plain')) "
          "FROM numbers({rows})")

# (where, index): a selective predicate each index can skip granules for.
PREDICATES = [
    ("a BETWEEN 100 AND 130", "i_mm"),
    ("n < -390", "i_mm2"),
    ("b = 40", "i_set"),
    ("b IN (3, 77)", "i_set"),
    ("s = 'key-15838'", "i_bf"),
    ("d = '2024-01-09'", "i_bf2"),
    ("doc LIKE '%zébra%'", "i_ng"),
    ("t LIKE '%7 zebra'", "i_tk"),
    ("hasToken(t, 'zebra')", "i_tk"),
]

COLUMNS = "k, a, b, s, n, f, d, doc, t"


def _arrow(sess, query: str) -> pa.Table:
    return pa.ipc.open_file(pa.py_buffer(sess.query(query, "Arrow").bytes())).read_all()


def _rows(data: pa.Table) -> list[tuple]:
    columns = [[v.decode() if isinstance(v, bytes) else v for v in c.to_pylist()] for c in data.columns]
    return sorted(zip(*columns))


def _index_files(part: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(part.iterdir()) if p.name.startswith("skp_idx")}


def _index_checksums(part: Path) -> dict:
    files = Checksums.parse((part / "checksums.txt").read_bytes()).files
    return {name: value for name, value in files.items() if name.startswith("skp_idx")}


@pytest.fixture(scope="module")
def tables(tmp_path_factory):
    """chdb's table `t` (two inserts, merges stopped) and ours made from the same statement and rows."""
    tmp = tmp_path_factory.mktemp("skip_write")
    sess, data_dir = make_chdb_table(tmp, CREATE, [], ["SET allow_suspicious_low_cardinality_types = 1"])
    sess.query("SYSTEM STOP MERGES t")
    for offset, rows in ((0, 9000), (9000, 7000)):
        sess.query(INSERT.format(offset=offset, rows=rows))
    statement = sess.query("SHOW CREATE TABLE t", "TabSeparatedRaw").bytes().decode()
    ours = MergeTreeTable.new(tmp / "ours", parse_create(statement), {"auto_merge": False})
    ours.write_directory()
    for part in part_dirs(data_dir):
        ours.insert(_arrow(sess, f"SELECT {COLUMNS} FROM t WHERE _part = '{part.name}' ORDER BY k"))
    yield sess, data_dir, ours
    close_session()


def test_inserted_parts_hold_clickhouses_index_bytes(tables) -> None:
    sess, data_dir, ours = tables
    for their_part, our_part in paired_part_dirs(data_dir, ours):
        expected = _index_files(their_part)
        assert len(expected) == 16  # .idx/.idx2 and .mrk2 of each of the 8 indexes
        assert _index_files(our_part) == expected, our_part.name
        assert _index_checksums(our_part) == _index_checksums(their_part)


def test_clickhouse_checks_and_uses_the_indexes_of_our_parts(tables) -> None:
    sess, _, ours = tables
    sess.query("CREATE TABLE attached AS t")
    attach_and_check(sess, "attached", [ours.path / part.name for part in ours.parts()])
    for where, index in PREDICATES:
        explain = sess.query(f"EXPLAIN indexes = 1 SELECT k FROM attached WHERE {where} "
                             "SETTINGS use_query_condition_cache = 0", "TabSeparatedRaw").bytes().decode()
        found = re.search(rf"Name: {index}\n(?:.*\n)*?\s*Granules: (\d+)/(\d+)", explain)
        assert found is not None, explain
        assert int(found.group(1)) < int(found.group(2)), (where, explain)
        assert _rows(_arrow(sess, f"SELECT {COLUMNS} FROM attached WHERE {where}")) == \
            _rows(_arrow(sess, f"SELECT {COLUMNS} FROM t WHERE {where}")), where


def test_our_reads_skip_with_the_indexes_we_wrote(tables) -> None:
    sess, _, ours = tables
    for where, index in PREDICATES:
        assert _rows(ours.to_arrow(COLUMNS.split(", "), where=where)) == \
            _rows(_arrow(sess, f"SELECT {COLUMNS} FROM t WHERE {where}")), where
        assert ours.explain(where).skipped_by_index.get(index, 0) > 0, (where, str(ours.explain(where)))


@pytest.mark.parametrize("where", ["n IS NULL", "NOT (n < -390)", "n > 590 OR n IS NULL", "NOT (n >= -399)",
                                   "n != -400", "n < -390 AND s > 'key-5'", "n IN (-400, 599)"])
def test_nullable_minmax_keeps_every_row(tables, where: str) -> None:
    """Granules holding NULLs (max NULL): conditions around NULL return ClickHouse's rows."""
    sess, _, ours = tables
    assert _rows(ours.to_arrow(COLUMNS.split(", "), where=where)) == \
        _rows(_arrow(sess, f"SELECT {COLUMNS} FROM t WHERE {where}")), where


def test_merged_part_holds_clickhouses_index_bytes(tables) -> None:
    """Merges write the indexes too: OPTIMIZE FINAL here and in ClickHouse, the same index bytes."""
    sess, data_dir, ours = tables
    sess.query("SYSTEM START MERGES t")
    sess.query("OPTIMIZE TABLE t FINAL")
    ours.optimize(final=True)
    (theirs,) = [p for p in part_dirs(data_dir) if p.name == "all_1_2_1"]
    (mine,) = [ours.path / p.name for p in ours.parts()]
    assert mine.name == "all_1_2_1"
    assert _index_files(mine) == _index_files(theirs)
    assert _index_checksums(mine) == _index_checksums(theirs)


HAYSTACKS = ["ab", "xab ab", "abc", "a ab-c", "zab", "", "é ab", "éab", "ab\x00", "AB ab", "a_b ab.", "ab\tcd",
             "naïve ab", "1ab2 ab3 ab"]


@pytest.mark.parametrize("token", ["ab", "AB", "ab3", "naïve", "é", "cd", "b"])
def test_has_token_matches_clickhouse(tables, token: str) -> None:
    """hasToken over strings with separators, non-ASCII bytes, case and NUL: ClickHouse's answers."""
    sess = tables[0]
    quoted = ", ".join("'" + h.replace("\\", "\\\\").replace("'", "\\'").replace("\x00", "\\0") + "'"
                       for h in HAYSTACKS)
    expected = sess.query(f"SELECT hasToken(h, '{token}') FROM (SELECT arrayJoin([{quoted}]) AS h, "
                          "rowNumberInAllBlocks() AS i) ORDER BY i", "TabSeparatedRaw").bytes().decode().split()
    got = evaluate(bind(parse_predicate(f"hasToken(h, '{token}')"), {"h": "String"}), pa.table({"h": HAYSTACKS}))
    assert [str(int(v)) for v in got.to_pylist()] == expected


@pytest.mark.parametrize("token", ["a b", "a,b", "x-"])
def test_has_token_refuses_a_needle_with_separators(token: str) -> None:
    with pytest.raises(ExpressionError, match="separator"):
        parse_predicate(f"hasToken(h, '{token}')")


def test_add_materialize_and_drop_index(tmp_path) -> None:
    """ADD INDEX (new parts get it), MATERIALIZE INDEX (a mutation: every part a new version with the
    index, the bytes ClickHouse's MATERIALIZE INDEX writes, mutation_N.txt), DROP INDEX (files gone)."""
    create = ("CREATE TABLE m (k UInt64, s String) ENGINE = MergeTree ORDER BY k SETTINGS index_granularity = 128, "
              "min_bytes_for_wide_part = 0, compress_marks = 0, compress_primary_key = 0, "
              "packed_skip_index_max_bytes = 0")
    # One part: ClickHouse's mutation waits for merges, which would merge two parts first.
    inserts = ["INSERT INTO m SELECT number, concat('v', toString(number * 7919 % 100003)) FROM numbers(6000)"]
    sess, data_dir = make_chdb_table(tmp_path, create, inserts)
    statement = sess.query("SHOW CREATE TABLE m", "TabSeparatedRaw").bytes().decode()
    ours = MergeTreeTable.new(tmp_path / "ours", parse_create(statement), {"auto_merge": False})
    ours.write_directory()
    for part in part_dirs(data_dir):
        ours.insert(_arrow(sess, f"SELECT k, s FROM m WHERE _part = '{part.name}' ORDER BY k"))
    where = "s = 'v15838'"
    expected = _rows(_arrow(sess, f"SELECT k, s FROM m WHERE {where}"))

    ours.add_index("INDEX i_bf s TYPE bloom_filter GRANULARITY 1")
    assert "INDEX i_bf s TYPE bloom_filter GRANULARITY 1" in (ours.path / "_mergetree" / "table.sql").read_text()
    assert ours.explain(where).skipped_by_index == {}  # the parts have no files of it yet
    with pytest.raises(SchemaMismatchError, match="already has an index"):
        ours.add_index("i_bf s TYPE minmax")
    with pytest.raises(SchemaMismatchError, match="has no index"):
        ours.materialize_index("nope")

    created = ours.materialize_index("i_bf")
    assert len(created) == 1 and all(PartInfo.parse(name).mutation > 0 for name in created)
    version = PartInfo.parse(created[0]).mutation
    assert "\ncommands: (MATERIALIZE INDEX i_bf)\n" in (ours.path / f"mutation_{version}.txt").read_text()
    assert _rows(ours.to_arrow(["k", "s"], where=where)) == expected
    assert ours.explain(where).skipped_by_index.get("i_bf", 0) > 0

    sess.query("ALTER TABLE m ADD INDEX i_bf s TYPE bloom_filter GRANULARITY 1")
    sess.query("ALTER TABLE m MATERIALIZE INDEX i_bf SETTINGS mutations_sync = 2")
    theirs = {PartInfo.parse(p.name).min_block: p for p in part_dirs(data_dir)}
    for name in created:
        mine = ours.path / name
        their_part = theirs[PartInfo.parse(name).min_block]
        assert PartInfo.parse(their_part.name).mutation > 0
        assert _index_files(mine) == _index_files(their_part) and _index_files(mine)

    sess.query("CREATE TABLE m2 AS m")
    attach_and_check(sess, "m2", [ours.path / name for name in created])
    assert _rows(_arrow(sess, f"SELECT k, s FROM m2 WHERE {where}")) == expected

    dropped = ours.drop_index("i_bf")
    assert len(dropped) == 1 and not any(_index_files(ours.path / name) for name in dropped)
    assert "i_bf" not in (ours.path / "_mergetree" / "table.sql").read_text()
    version = PartInfo.parse(dropped[0]).mutation
    assert "\ncommands: (DROP INDEX i_bf)\n" in (ours.path / f"mutation_{version}.txt").read_text()
    assert _rows(ours.to_arrow(["k", "s"], where=where)) == expected
    close_session()


def test_materialize_keeps_deleted_rows_masked(tmp_path) -> None:
    """A part a lightweight DELETE masked keeps its stored rows and mask through MATERIALIZE INDEX."""
    ours = MergeTreeTable.create(tmp_path / "t", [("k", "UInt64"), ("s", "String")], order_by="k",
                                 settings={"index_granularity": 64, "auto_merge": False})
    ours.insert(pa.table({"k": pa.array(range(1000), pa.uint64()), "s": [f"v{i}" for i in range(1000)]}))
    ours.delete("k % 3 = 0")
    before = ours.to_arrow().to_pylist()
    ours.add_index("INDEX i s TYPE bloom_filter GRANULARITY 1")
    (created,) = ours.materialize_index("i")
    assert ours.to_arrow().to_pylist() == before
    assert ours.reader(created).rows == 1000 and ours.reader(created).existing_rows == len(before)
    assert ours.to_arrow(where="s = 'v500'").to_pylist() == [{"k": 500, "s": "v500"}]
    assert ours.explain("s = 'v500'").skipped_by_index.get("i", 0) > 0


MORE_TYPES = """CREATE TABLE w (k UInt64, lc LowCardinality(String), fs FixedString(6), f32 Float32, d32 Date32,
    dt DateTime('UTC'), i8 Int8, e Enum8('a' = 1, 'b' = -2), ns Nullable(String), u16 UInt16, dec Decimal(10, 2),
    dt64 DateTime64(3, 'UTC'),
    INDEX a lc TYPE bloom_filter GRANULARITY 1,
    INDEX b lc TYPE tokenbf_v1(128, 2, 3) GRANULARITY 1,
    INDEX c fs TYPE bloom_filter GRANULARITY 2,
    INDEX d (f32, i8, e, dt64) TYPE bloom_filter(0.05) GRANULARITY 1,
    INDEX e2 (d32, dt, dec, dt64) TYPE minmax GRANULARITY 1,
    INDEX f ns TYPE minmax GRANULARITY 1,
    INDEX g (u16, fs) TYPE set(0) GRANULARITY 1,
    INDEX h (i8, e, d32) TYPE set(20) GRANULARITY 1,
    INDEX i lc TYPE minmax GRANULARITY 1,
    INDEX j lc TYPE ngrambf_v1(4, 256, 2, 1) GRANULARITY 3,
    INDEX l fs TYPE ngrambf_v1(3, 128, 2, 5) GRANULARITY 1,
    INDEX m fs TYPE tokenbf_v1(128, 2, 0) GRANULARITY 2)
    ENGINE = MergeTree ORDER BY k
    SETTINGS index_granularity = 128, min_bytes_for_wide_part = 0, compress_marks = 0, compress_primary_key = 0,
    packed_skip_index_max_bytes = 0, default_compression_codec = 'ZSTD(3)'"""

MORE_ROWS = ("INSERT INTO w SELECT number, concat('v ', toString(number % 300)), toFixedString(toString(number % 1000), 6), "
             "number / 7, toDate32('1960-01-01') + number, toDateTime('2024-01-01 00:00:00', 'UTC') + number * 61, "
             "toInt8(number % 200 - 100), if(number % 3 = 0, 'a', 'b'), if(number % 5 = 0, NULL, toString(number)), "
             "number % 7000, number / 100, toDateTime64('2024-01-01 00:00:00', 3, 'UTC') + number FROM numbers(5000)")


def test_index_bytes_for_more_types_and_zstd(tmp_path) -> None:
    """LowCardinality, FixedString, Float32, Date32, DateTime, DateTime64, Enum, Decimal, Nullable
    columns in every index type, compressed with ZSTD: ClickHouse's bytes."""
    sess, data_dir = make_chdb_table(tmp_path, MORE_TYPES, [MORE_ROWS])
    statement = sess.query("SHOW CREATE TABLE w", "TabSeparatedRaw").bytes().decode()
    ours = MergeTreeTable.new(tmp_path / "ours", parse_create(statement), {"auto_merge": False, "codec": "ZSTD(3)"})
    ours.write_directory()
    ours.insert(_arrow(sess, "SELECT * FROM w ORDER BY k"))
    close_session()
    (theirs,) = part_dirs(data_dir)
    expected = _index_files(theirs)
    assert len(expected) == 24
    assert _index_files(ours.path / ours.parts()[0].name) == expected


def test_drop_index_copies_parts_without_it(tmp_path) -> None:
    """DROP INDEX gives every part the mutation's version: parts without the index unchanged."""
    ours = MergeTreeTable.create(tmp_path / "t", [("k", "UInt64"), ("a", "Int64")], order_by="k",
                                 settings={"index_granularity": 64, "auto_merge": False, "min_bytes_for_wide_part": 0})
    ours.insert(pa.table({"k": pa.array(range(500), pa.uint64()), "a": pa.array(range(500), pa.int64())}))
    ours.add_index("INDEX i a TYPE minmax GRANULARITY 1")
    ours.insert(pa.table({"k": pa.array(range(500, 900), pa.uint64()), "a": pa.array(range(500, 900), pa.int64())}))
    old = {p.name: _index_files(ours.path / p.name) for p in ours.parts()}
    assert [bool(files) for _, files in sorted(old.items())] == [False, True]
    before = ours.to_arrow().to_pylist()
    dropped = sorted(ours.drop_index("i"))
    assert [PartInfo.parse(name).min_block for name in dropped] == [1, 2]
    assert not any(_index_files(ours.path / name) for name in dropped)
    assert (ours.path / dropped[0] / "a.bin").read_bytes() == (ours.path / sorted(old)[0] / "a.bin").read_bytes()
    assert ours.to_arrow().to_pylist() == before


NULLABLE_SETS = """CREATE TABLE ns (k UInt64, ni Nullable(Int32), ns Nullable(String), lc LowCardinality(String),
    lcn LowCardinality(Nullable(String)), lu LowCardinality(UInt32),
    INDEX a ni TYPE set(50) GRANULARITY 1,
    INDEX b ns TYPE set(0) GRANULARITY 1,
    INDEX c (ni, k) TYPE set(1000) GRANULARITY 1,
    INDEX d (lc, lcn) TYPE set(100) GRANULARITY 2,
    INDEX e lu TYPE set(300) GRANULARITY 1)
    ENGINE = MergeTree ORDER BY k
    SETTINGS index_granularity = 128, min_bytes_for_wide_part = 0, compress_marks = 0, compress_primary_key = 0,
    packed_skip_index_max_bytes = 0"""
NULLABLE_ROWS = ("INSERT INTO ns SELECT number, if(number % 7 = 0, NULL, toInt32(intDiv(number, 300))), "
                 "if(number % 500 < 100, NULL, concat('w ', toString(intDiv(number, 250)))), "
                 "if(number % 9 = 0, '', toString(intDiv(number, 200))), if(number % 4 = 0, NULL, toString(intDiv(number, 400))), "
                 "intDiv(number, 100) FROM numbers(3000)")


@pytest.mark.parametrize("where", ["ni = 5", "ni IS NULL", "ns = 'w 3'", "ns IS NULL", "NOT (ni != 5)",
                                   "ni IN (1, 2) OR ns IS NULL", "ni IS NOT NULL AND ni > 8", "lc = '7'",
                                   "lc = ''", "lcn = '3'", "lcn IS NULL", "lu = 17", "lu IN (3, 29)"])
def test_nullable_set_indexes(tmp_path, where: str) -> None:
    """set indexes over Nullable and LowCardinality columns (the null map then the values; the
    dictionary and indexes), as ClickHouse writes them; our reads of ClickHouse's parts and of ours
    skip with them and return ClickHouse's rows."""
    sess, data_dir = make_chdb_table(tmp_path, NULLABLE_SETS, [NULLABLE_ROWS],
                                     ["SET allow_suspicious_low_cardinality_types = 1"])
    statement = sess.query("SHOW CREATE TABLE ns", "TabSeparatedRaw").bytes().decode()
    expected = _rows(_arrow(sess, f"SELECT k, ni, ns, lc, lcn, lu FROM ns WHERE {where}"))
    ours = MergeTreeTable.new(tmp_path / "ours", parse_create(statement), {"auto_merge": False})
    ours.write_directory()
    ours.insert(_arrow(sess, "SELECT * FROM ns ORDER BY k"))
    close_session()
    (theirs,) = part_dirs(data_dir)
    assert _index_files(ours.path / ours.parts()[0].name) == _index_files(theirs)
    for table in (ours, MergeTreeTable.open(data_dir, create_statement=statement)):
        assert _rows(table.to_arrow(["k", "ni", "ns", "lc", "lcn", "lu"], where=where)) == expected
    if where in ("ni = 5", "ns = 'w 3'", "NOT (ni != 5)", "lc = '7'", "lcn = '3'", "lu = 17"):
        assert sum(ours.explain(where).skipped_by_index.values()) > 0


ARRAYS = """CREATE TABLE arr (k UInt64, tags Array(String), nums Array(UInt32), s String,
    INDEX a tags TYPE bloom_filter GRANULARITY 1,
    INDEX b nums TYPE bloom_filter(0.01) GRANULARITY 2,
    INDEX c (tags, s) TYPE bloom_filter GRANULARITY 1)
    ENGINE = MergeTree ORDER BY k
    SETTINGS index_granularity = 128, min_bytes_for_wide_part = 0, compress_marks = 0, compress_primary_key = 0,
    packed_skip_index_max_bytes = 0"""
ARRAY_ROWS = ("INSERT INTO arr SELECT number, if(number < 300 OR number % 11 = 0, [], "
              "arrayMap(x -> concat('t', toString(x)), range(number % 4))), "
              "if(number BETWEEN 600 AND 800, [], range(number % 5)), toString(number % 77) FROM numbers(2000)")


def test_bloom_filters_over_arrays(tmp_path) -> None:
    """bloom_filter over Array columns hashes the elements (a data granule of empty arrays adds hash
    0): ClickHouse's bytes, and ClickHouse skips granules of our part for has()."""
    sess, data_dir = make_chdb_table(tmp_path, ARRAYS, [ARRAY_ROWS])
    statement = sess.query("SHOW CREATE TABLE arr", "TabSeparatedRaw").bytes().decode()
    ours = MergeTreeTable.new(tmp_path / "ours", parse_create(statement), {"auto_merge": False})
    ours.write_directory()
    ours.insert(_arrow(sess, "SELECT * FROM arr ORDER BY k"))
    (theirs,) = part_dirs(data_dir)
    mine = ours.path / ours.parts()[0].name
    assert _index_files(mine) == _index_files(theirs) and len(_index_files(mine)) == 6
    sess.query("CREATE TABLE arr2 AS arr")
    attach_and_check(sess, "arr2", [mine])
    explain = sess.query("EXPLAIN indexes = 1 SELECT k FROM arr2 WHERE has(tags, 't3')",
                         "TabSeparatedRaw").bytes().decode()
    found = re.search(r"Name: a\n(?:.*\n)*?\s*Granules: (\d+)/(\d+)", explain)
    assert found is not None and int(found.group(1)) < int(found.group(2)), explain
    close_session()

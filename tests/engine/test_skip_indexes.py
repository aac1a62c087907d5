"""Data-skipping indexes ClickHouse (chdb) wrote: our reads use them to skip granules and still
return exactly the rows ClickHouse's SELECT returns (ClickHouse is the oracle of every row set)."""

from __future__ import annotations

import random
from pathlib import Path

import pyarrow as pa
import pytest

from spark_mergetree import MergeTreeTable
from spark_mergetree.expressions.skip_index import parse_skip_index
from tests.format.chdb_util import close_session, make_chdb_table

LAYOUTS = {
    "wide": "min_bytes_for_wide_part = 0, min_rows_for_wide_part = 0",
    "compact": "min_bytes_for_wide_part = 1000000000, min_rows_for_wide_part = 1000000000",
}

CREATE = """CREATE TABLE t (k UInt64, a Int64, b UInt32, s String, doc String, d Date, t String,
    INDEX i_mm a TYPE minmax GRANULARITY 2,
    INDEX i_set b TYPE set(50) GRANULARITY 1,
    INDEX i_bf s TYPE bloom_filter GRANULARITY 1,
    INDEX i_bf2 (b, d) TYPE bloom_filter(0.01) GRANULARITY 3,
    INDEX i_ng doc TYPE ngrambf_v1(3, 512, 3, 7) GRANULARITY 1,
    INDEX i_tk t TYPE tokenbf_v1(512, 2, 11) GRANULARITY 2)
    ENGINE = MergeTree ORDER BY k
    SETTINGS index_granularity = 256, min_parts_to_merge_at_once = 1000, {layout}"""

# a: clustered in k (minmax skips), b: few values per granule (set skips), s: a unique-ish string
# (bloom filter skips), doc and t: words from a small vocabulary with a rare word every ~900 rows.
INSERT = ("INSERT INTO t SELECT number + {offset}, intDiv(number + {offset}, 100) * 3 - 500, "
          "intDiv(number + {offset}, 300) % 97, concat('key-', toString((number + {offset}) * 7919 % 100003)), "
          "concat(['alpha', 'beta', 'gamma', 'delta'][number % 4 + 1], ' ', "
          "if((number + {offset}) % 887 = 0, 'zebra', 'plain'), ' w', toString(number % 13)), "
          "toDate('2024-01-01') + intDiv(number + {offset}, 1000), "
          "concat('t', toString(number % 50), if((number + {offset}) % 887 = 0, ' zebra', ' plain')) "
          "FROM numbers({rows})")

PREDICATES = {
    "minmax range": ("a BETWEEN 100 AND 130", "i_mm"),
    "minmax equal": ("a = 3001", "i_mm"),
    "set equal": ("b = 40", "i_set"),
    "set in": ("b IN (3, 77)", "i_set"),
    "set not": ("NOT (b != 5)", "i_set"),
    "bloom equal": ("s = 'key-15838'", "i_bf"),
    "bloom in": ("s IN ('key-7919', 'key-23757', 'nope')", "i_bf"),
    "bloom of two columns": ("d = '2024-02-01'", "i_bf2"),
    "ngram like": ("doc LIKE '%zebra%'", "i_ng"),
    "ngram equal": ("doc = 'beta zebra w5'", "i_ng"),
    "token like": ("t LIKE '%7 zebra'", "i_tk"),
    "token equal": ("t = 't7 zebra'", "i_tk"),
}


def _chdb_rows(sess, where: str) -> list[tuple]:
    data = pa.ipc.open_file(pa.py_buffer(sess.query(f"SELECT k, a, b, s, doc, d, t FROM t WHERE {where}",
                                                    "Arrow").bytes())).read_all()
    return sorted(zip(*([v.decode() if isinstance(v, bytes) else v for v in c.to_pylist()] for c in data.columns)))


def _our_rows(table: MergeTreeTable, where: str) -> list[tuple]:
    data = table.to_arrow(["k", "a", "b", "s", "doc", "d", "t"], where=where)
    return sorted(zip(*(c.to_pylist() for c in data.columns)))


@pytest.fixture(scope="module", params=list(LAYOUTS))
def clickhouse_table(request, tmp_path_factory):
    tmp = tmp_path_factory.mktemp(f"skip_{request.param}")
    inserts = [INSERT.format(offset=offset, rows=rows) for offset, rows in ((0, 9000), (9000, 7000), (16000, 3000))]
    sess, data_dir = make_chdb_table(tmp, CREATE.format(layout=LAYOUTS[request.param]), inserts)
    statement = sess.query("SHOW CREATE TABLE t", "TabSeparatedRaw").bytes().decode()
    yield sess, data_dir, statement
    close_session()


@pytest.mark.parametrize("case", list(PREDICATES))
def test_clickhouse_skip_indexes_skip_granules_and_keep_every_row(clickhouse_table, case: str) -> None:
    sess, data_dir, statement = clickhouse_table
    where, index = PREDICATES[case]
    expected = _chdb_rows(sess, where)
    table = MergeTreeTable.open(data_dir, create_statement=statement)
    assert _our_rows(table, where) == expected
    plan = table.explain(where)
    assert plan.skipped_by_index.get(index, 0) > 0, str(plan)
    assert f"index {index} skipped" in str(plan)


def test_clickhouse_skip_indexes_random_predicates(clickhouse_table) -> None:
    """Random conjunctions/disjunctions over the indexed columns: never a row fewer than ClickHouse."""
    sess, data_dir, statement = clickhouse_table
    table = MergeTreeTable.open(data_dir, create_statement=statement)
    rng = random.Random(18)
    atoms = [
        lambda: f"a {rng.choice(['=', '<', '>=', '!='])} {rng.randrange(-600, 600) * 3 + rng.randrange(3)}",
        lambda: f"b {rng.choice(['=', '!=', '<'])} {rng.randrange(100)}",
        lambda: f"b IN ({rng.randrange(100)}, {rng.randrange(100)})",
        lambda: f"s = 'key-{rng.randrange(19000) * 7919 % 100003}'",
        lambda: f"s IN ('key-{rng.randrange(100003)}', 'key-{rng.randrange(19000) * 7919 % 100003}')",
        lambda: f"doc LIKE '%{rng.choice(['zebra', 'ebr', 'beta z', 'w1', 'pla', 'xyz'])}%'",
        lambda: f"doc = '{rng.choice(['alpha', 'beta', 'gamma'])} {rng.choice(['zebra', 'plain'])} w{rng.randrange(13)}'",
        lambda: f"d = '2024-0{rng.randrange(1, 10)}-1{rng.randrange(10)}'",
        lambda: f"t {rng.choice(['=', 'LIKE'])} '{rng.choice(['%', 't1', 't7 ', ''])}{rng.choice(['zebra', 'plain'])}'",
    ]
    for _ in range(25):
        first, second = rng.choice(atoms)(), rng.choice(atoms)()
        where = rng.choice([first, f"{first} AND {second}", f"{first} OR {second}", f"NOT ({first})",
                            f"({first}) AND NOT ({second})"])
        assert _our_rows(table, where) == _chdb_rows(sess, where), where


def test_index_declarations_parse() -> None:
    index = parse_skip_index("INDEX `i x` (a, `b`) TYPE bloom_filter(0.01) GRANULARITY 3")
    assert index is not None and (index.name, index.columns, index.type, index.arguments, index.granularity) == (
        "i x", ("a", "b"), "bloom_filter", (0.01,), 3)
    computed = parse_skip_index("INDEX i lower(s) TYPE tokenbf_v1(512, 2, 0) GRANULARITY 1")
    assert computed is not None and not computed.usable
    assert parse_skip_index("PROJECTION p (SELECT a ORDER BY b)") is None


def test_part_without_index_file_reads_all_granules(tmp_path: Path) -> None:
    """An index added after a part was written (no MATERIALIZE) has no files in it: nothing skipped."""
    sess, data_dir = make_chdb_table(tmp_path, "CREATE TABLE t (k UInt64, a Int64) ENGINE = MergeTree ORDER BY k "
                                     "SETTINGS index_granularity = 128",
                                     ["INSERT INTO t SELECT number, number FROM numbers(5000)"])
    sess.query("ALTER TABLE t ADD INDEX i a TYPE minmax GRANULARITY 1")
    statement = sess.query("SHOW CREATE TABLE t", "TabSeparatedRaw").bytes().decode()
    expected = _pairs(pa.ipc.open_file(pa.py_buffer(sess.query("SELECT k, a FROM t WHERE a = 4000", "Arrow")
                                                    .bytes())).read_all())
    close_session()
    table = MergeTreeTable.open(data_dir, create_statement=statement)
    assert _pairs(table.to_arrow(["k", "a"], where="a = 4000")) == expected
    assert table.explain("a = 4000").skipped_by_index == {}


def _pairs(data: pa.Table) -> list[tuple]:
    return sorted(zip(*(c.to_pylist() for c in data.columns)))

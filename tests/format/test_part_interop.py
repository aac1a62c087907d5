"""Whole parts both ways with real ClickHouse (chdb).

(a) ClickHouse writes tables of every supported type — Wide and Compact parts, partitioned or not,
    LZ4 and ZSTD — and MergeTreeTable reads exactly what SELECT returns;
(b) parts our writer makes are ATTACHed by ClickHouse, pass CHECK TABLE, and SELECT returns what
    we wrote; (c) the same for parts made by our merges.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow as pa
import pytest

from spark_mergetree import MergeTreeTable
from spark_mergetree.format.types import parse_type
from tests.format.chdb_util import close_session, make_chdb_table
from tests.format.test_serialization import COLUMNS, _chdb_arrow, _normalize

ROWS = 40
# A partition key over a column every variant has, with several values.
PARTITION = "toYYYYMM(d)"
# For our parts: two inserts put rows 16..31 into one partition twice, so merges have work.
OUR_PARTITION = "intDiv(id, 16)"

VARIANTS = {
    "wide-lz4": "min_bytes_for_wide_part = 0, min_rows_for_wide_part = 0",
    "wide-zstd-partitioned": "min_bytes_for_wide_part = 0, min_rows_for_wide_part = 0",
    "compact-lz4": "min_bytes_for_wide_part = 1000000000, min_rows_for_wide_part = 1000000000",
    "compact-partitioned": "min_bytes_for_wide_part = 1000000000, min_rows_for_wide_part = 1000000000",
    "wide-classic-strings": "min_bytes_for_wide_part = 0, string_serialization_version = 'single_stream'",
}


def _create_sql(name: str, variant: str) -> str:
    codec = " CODEC(ZSTD(3))" if "zstd" in variant else ""
    cols = ", ".join(f"`{c}` {t}{codec}" for c, t, _ in COLUMNS)
    partition = f" PARTITION BY {PARTITION}" if "partitioned" in variant else ""
    return (f"CREATE TABLE {name} (id UInt64, {cols}) ENGINE = MergeTree{partition} ORDER BY id "
            f"SETTINGS index_granularity = 4, ratio_of_defaults_for_sparse_serialization = 1, {VARIANTS[variant]}")


def _inserts(name: str) -> list[str]:
    exprs = ", ".join(e.replace("number", "(number % 10)") if "[number + 1]" in e else e for _, _, e in COLUMNS)
    # Two inserts: two parts (per partition), so reads cross part boundaries.
    return [f"INSERT INTO {name} SELECT number, {exprs} FROM numbers({start}, {ROWS // 2})"
            for start in (0, ROWS // 2)]


def _normalized_rows(table: pa.Table, types: dict[str, str]) -> list[dict]:
    rows = table.sort_by("id").to_pylist()
    parsed = {name: parse_type(t) for name, t in types.items()}
    return [{k: _normalize(parsed[k], v) for k, v in row.items()} for row in rows]


@pytest.fixture(scope="module")
def clickhouse_tables(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("interop")
    made = {}
    sess = None
    for variant in VARIANTS:
        name = "t_" + variant.replace("-", "_")
        sess, data_dir = make_chdb_table(tmp, _create_sql(name, variant), _inserts(name))
        made[variant] = (name, data_dir)
    statements = {v: sess.query(f"SHOW CREATE TABLE {n}", "TabSeparatedRaw").bytes().decode() for v, (n, _) in made.items()}
    kinds = {v: sess.query(f"SELECT DISTINCT part_type FROM system.parts WHERE table = '{n}' AND active",
                           "TabSeparatedRaw").bytes().decode().split() for v, (n, _) in made.items()}
    expected = {v: _chdb_arrow(sess, f"SELECT * FROM {n} ORDER BY id") for v, (n, _) in made.items()}
    yield {"tmp": tmp, "made": made, "statements": statements, "kinds": kinds, "expected": expected, "session": sess}
    close_session()


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_we_read_what_clickhouse_wrote(clickhouse_tables, variant):
    name, data_dir = clickhouse_tables["made"][variant]
    assert clickhouse_tables["kinds"][variant] == (["Compact"] if "compact" in variant else ["Wide"])
    table = MergeTreeTable.open(data_dir, create_statement=clickhouse_tables["statements"][variant])
    ours = table.to_arrow()
    types = {"id": "UInt64", **{c: t for c, t, _ in COLUMNS}}
    expected = clickhouse_tables["expected"][variant].to_pylist()
    assert ours.num_rows == ROWS
    assert _normalized_rows(ours, types) == expected
    # A key-range read returns the same rows as filtering in ClickHouse.
    ranged = table.to_arrow(["id", "s"], where="id BETWEEN 5 AND 13")
    assert sorted(ranged.column("id").to_pylist()) == list(range(5, 14))


def _attach_and_check(sess, table_name: str, chdb_data_dir: Path, ours: MergeTreeTable) -> None:
    for part in ours.parts():
        shutil.copytree(ours.path / part.name, chdb_data_dir / "detached" / part.name)
        sess.query(f"ALTER TABLE {table_name} ATTACH PART '{part.name}'")
    check = sess.query(f"CHECK TABLE {table_name}", "TabSeparatedRaw").bytes().decode().split()
    assert check and all(v == "1" for v in check[1::3] if v in ("0", "1")) and "0" not in check


@pytest.mark.parametrize("merge", [False, True], ids=["inserted", "merged"])
@pytest.mark.parametrize("partitioned", [False, True], ids=["flat", "partitioned"])
def test_clickhouse_attaches_our_parts(clickhouse_tables, tmp_path, merge, partitioned):
    sess = clickhouse_tables["session"]
    source = clickhouse_tables["expected"]["wide-lz4"]
    columns = [("id", "UInt64")] + [(c, t) for c, t, _ in COLUMNS]
    ours = MergeTreeTable.create(tmp_path / "ours", columns, order_by="id",
                                 partition_by=OUR_PARTITION if partitioned else None,
                                 settings={"index_granularity": 4, "auto_merge": False})
    reread = MergeTreeTable.open(*clickhouse_tables["made"]["wide-lz4"][1:],
                                 create_statement=clickhouse_tables["statements"]["wide-lz4"]).to_arrow()
    ours.insert(reread.slice(0, 25))
    ours.insert(reread.slice(25))
    if merge:
        created = ours.optimize(final=True)
        assert created and all(name.endswith("_1") for name in created)
    target = f"attach_{'m' if merge else 'i'}_{'p' if partitioned else 'f'}"
    partition = f" PARTITION BY {OUR_PARTITION}" if partitioned else ""
    cols = ", ".join(f"`{c}` {t}" for c, t in columns)
    sess.query(f"CREATE TABLE {target} ({cols}) ENGINE = MergeTree{partition} ORDER BY id "
               "SETTINGS index_granularity = 4")
    chdb_dir = Path(sess.query(f"SELECT data_paths[1] FROM system.tables WHERE name = '{target}'",
                               "TabSeparatedRaw").bytes().decode().strip())
    _attach_and_check(sess, target, chdb_dir, ours)
    # ATTACH PART gives each part new block numbers; the partitions and row counts stay.
    attached = sess.query(f"SELECT partition_id, rows FROM system.parts WHERE table = '{target}' AND active "
                          "ORDER BY partition_id", "TabSeparatedRaw").bytes().decode().split()
    assert attached == [str(v) for p in sorted(ours.parts(), key=lambda p: p.partition_id)
                        for v in (p.partition_id, p.rows)]
    got = _chdb_arrow(sess, f"SELECT * FROM {target} ORDER BY id")
    assert got.to_pylist() == source.to_pylist()


def test_we_read_sparse_columns_clickhouse_wrote(tmp_path):
    """26.x stores mostly-default columns sparse (default settings); reads must be exact."""
    create = ("CREATE TABLE sparse_t (id UInt64, rare UInt32, s String, t Tuple(a UInt8, b String)) "
              "ENGINE = MergeTree ORDER BY id SETTINGS min_bytes_for_wide_part = 0, index_granularity = 64")
    insert = ("INSERT INTO sparse_t SELECT number, if(number % 97 = 0, number, 0), if(number % 50 = 0, 'x', ''), "
              "(if(number % 61 = 0, 1, 0), '') FROM numbers(1000)")
    sess, data_dir = make_chdb_table(tmp_path, create, [insert])
    kinds = sess.query("SELECT column, serialization_kind FROM system.parts_columns WHERE table = 'sparse_t' "
                       "AND active", "TabSeparatedRaw").bytes().decode()
    assert "Sparse" in kinds
    statement = sess.query("SHOW CREATE TABLE sparse_t", "TabSeparatedRaw").bytes().decode()
    expected = _chdb_arrow(sess, "SELECT * FROM sparse_t ORDER BY id").to_pylist()
    close_session()
    table = MergeTreeTable.open(data_dir, create_statement=statement)
    assert table.to_arrow().sort_by("id").to_pylist() == expected
    assert table.to_arrow(where="id BETWEEN 190 AND 200").column("rare").to_pylist() == [0, 0, 0, 0, 194] + [0] * 6

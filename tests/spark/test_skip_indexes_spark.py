"""Spark reads of a ClickHouse table with skip indexes: pushed filters and the `where` option on
indexed non-key columns prune granules through the indexes and return exactly ClickHouse's rows."""

from __future__ import annotations

import re

import pyarrow as pa
import pytest

from tests.format.chdb_util import attach_and_check, close_session, make_chdb_table

pytestmark = pytest.mark.spark

CREATE = """CREATE TABLE t (k UInt64, b UInt32, s String,
    INDEX i_set b TYPE set(20) GRANULARITY 1,
    INDEX i_bf s TYPE bloom_filter GRANULARITY 1)
    ENGINE = MergeTree ORDER BY k SETTINGS index_granularity = 128"""
INSERT = ("INSERT INTO t SELECT number, intDiv(number, 500) % 41, concat('v', toString(number * 7919 % 10007)) "
          "FROM numbers(12000)")
QUERIES = ["s = 'v7919'", "s IN ('v15838', 'none')", "b = 7", "b IN (3, 40) AND s != 'v1'"]


def _clickhouse(sess, where: str) -> list[tuple]:
    data = pa.ipc.open_file(pa.py_buffer(sess.query(f"SELECT k, b, s FROM t WHERE {where}", "Arrow").bytes())).read_all()
    return sorted(zip(*([v.decode() if isinstance(v, bytes) else v for v in c.to_pylist()] for c in data.columns)))


def test_spark_filters_on_indexed_columns_return_clickhouse_rows(spark, tmp_path) -> None:
    sess, data_dir = make_chdb_table(tmp_path, CREATE, [INSERT])
    statement = sess.query("SHOW CREATE TABLE t", "TabSeparatedRaw").bytes().decode()
    expected = {where: _clickhouse(sess, where) for where in QUERIES}
    close_session()

    def load(**options: str):
        reader = spark.read.format("mergetree").option("create_statement", statement)
        for key, value in options.items():
            reader = reader.option(key, value)
        return reader.load(str(data_dir))

    for where in QUERIES:
        pushed = load().filter(where).select("k", "b", "s").collect()
        assert sorted(map(tuple, pushed)) == expected[where], where
        option = load(where=where).select("k", "b", "s").collect()
        assert sorted(map(tuple, option)) == expected[where], where


def test_spark_writes_parts_with_the_tables_indexes(spark, tmp_path) -> None:
    """A Spark write into a table that declares indexes: every part holds them, ClickHouse attaches
    the parts (CHECK TABLE) and skips granules with them; our reads skip too, `where` with hasToken
    (engine-only: Spark has no filter for it) included."""
    from spark_mergetree import MergeTreeTable
    from spark_mergetree.expressions.ddl import parse_create

    create = CREATE.replace("s String,", "s String, doc String,").replace(
        "INDEX i_bf s TYPE bloom_filter GRANULARITY 1)",
        "INDEX i_bf s TYPE bloom_filter GRANULARITY 1, INDEX i_tk doc TYPE tokenbf_v1(256, 2, 0) GRANULARITY 1)")
    sess, _ = make_chdb_table(tmp_path, create)
    statement = sess.query("SHOW CREATE TABLE t", "TabSeparatedRaw").bytes().decode()
    ours = MergeTreeTable.new(tmp_path / "ours", parse_create(statement), {"auto_merge": False})
    ours.write_directory()
    rows = spark.range(12000).selectExpr(
        "cast(id as long) as k", "cast((id div 500) % 41 as int) as b", "concat('v', cast(id * 7919 % 10007 as string)) as s",
        "concat('w', cast(id % 89 as string), if(id % 997 = 0, ' rare', ' common')) as doc")
    rows.repartition(3).write.format("mergetree").mode("append").save(str(ours.path))
    parts = [p.name for p in ours.parts()]
    assert len(parts) >= 2
    for name in parts:
        files = {p.name for p in (ours.path / name).iterdir()}
        # Index marks are named as the part's own: `.cmrk4` in a Compact part (these small ones), `.mrk2` in a Wide.
        marks = "skp_idx_i_tk.cmrk4" if "data.bin" in files else "skp_idx_i_tk.mrk2"
        assert {"skp_idx_i_set.idx", "skp_idx_i_bf.idx", "skp_idx_i_tk.idx", marks} <= files
    attach_and_check(sess, "t", [ours.path / name for name in parts])
    explain = sess.query("EXPLAIN indexes = 1 SELECT k FROM t WHERE s = 'v7919'", "TabSeparatedRaw").bytes().decode()
    granules = re.search(r"Name: i_bf\n(?:.*\n)*?\s*Granules: (\d+)/(\d+)", explain)
    assert granules is not None and int(granules.group(1)) < int(granules.group(2)), explain
    expected = {where: _clickhouse(sess, where) for where in [*QUERIES, "hasToken(doc, 'rare')"]}
    close_session()
    for where, found in expected.items():
        assert sorted(tuple(r.values()) for r in ours.to_arrow(["k", "b", "s"], where=where).to_pylist()) == found
    assert ours.explain("hasToken(doc, 'rare')").skipped_by_index.get("i_tk", 0) > 0
    via_spark = (spark.read.format("mergetree").option("where", "hasToken(doc, 'rare')").load(str(ours.path))
                 .select("k", "b", "s").collect())
    assert sorted(map(tuple, via_spark)) == expected["hasToken(doc, 'rare')"]

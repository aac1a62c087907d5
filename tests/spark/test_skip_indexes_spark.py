"""Spark reads of a ClickHouse table with skip indexes: pushed filters and the `where` option on
indexed non-key columns prune granules through the indexes and return exactly ClickHouse's rows."""

from __future__ import annotations

import pyarrow as pa
import pytest

from tests.format.chdb_util import close_session, make_chdb_table

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

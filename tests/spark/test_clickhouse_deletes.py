"""Spark reads a ClickHouse table after a lightweight DELETE: exactly ClickHouse's rows."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.format.chdb_util import close_session, make_chdb_table

pytestmark = pytest.mark.spark


def test_spark_does_not_return_rows_clickhouse_deleted(spark, tmp_path: Path) -> None:
    create = "CREATE TABLE t (k UInt64, v String) ENGINE = MergeTree ORDER BY k SETTINGS index_granularity = 1024"
    sess, data_dir = make_chdb_table(tmp_path, create, [
        "INSERT INTO t SELECT number, toString(number) FROM numbers(70000)",
        "DELETE FROM t WHERE k % 3 = 0",
    ])
    expected = [int(k) for k in sess.query("SELECT k FROM t ORDER BY k", "TabSeparatedRaw").bytes().split()]
    in_range = [k for k in expected if 30000 <= k < 31000]
    close_session()
    df = spark.read.format("mergetree").option("create_statement", create).load(str(data_dir))
    assert df.count() == len(expected) == 46666
    assert sorted(r["k"] for r in df.select("k").collect()) == expected
    assert sorted(r["k"] for r in df.filter("k >= 30000 AND k < 31000").select("k").collect()) == in_range

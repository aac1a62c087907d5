"""Pruning through pushed filters: it must skip granules, and stay correct when PySpark 4.3 reuses
the pushed-down reader of a loaded DataFrame for later queries that did not push anything."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.spark

ROWS = 8192


def _collect_with_scan_rows(df) -> tuple[list, int]:
    """Rows of the query and how many rows the mergetree scan handed to Spark (its SQL metric)."""
    rows = df.collect()
    plan = df._jdf.queryExecution().executedPlan()
    leaves = plan.collectLeaves()
    scanned = 0
    for position in range(leaves.size()):
        leaf = leaves.apply(position)
        if "BatchScan" in leaf.nodeName():
            scanned += leaf.metrics().apply("numOutputRows").value()
    return rows, scanned


@pytest.fixture(scope="module")
def table_path(spark, tmp_path_factory) -> str:
    path = str(tmp_path_factory.mktemp("pushdown") / "t")
    (spark.range(0, ROWS, numPartitions=2).selectExpr("id", "cast(id % 7 as string) as tag")
     .write.format("mergetree").option("order_by", "id").option("index_granularity", "128")
     .mode("append").save(path))
    return path


def test_pushed_filters_prune_granules(spark, table_path: str) -> None:
    df = spark.read.format("mergetree").load(table_path)
    rows, scanned = _collect_with_scan_rows(df.filter("id >= 1000 AND id < 1100"))
    assert sorted(r["id"] for r in rows) == list(range(1000, 1100))
    assert scanned <= 3 * 128, scanned  # two or three granules of 128, not the whole table
    rows, scanned = _collect_with_scan_rows(df.filter("id IN (5, 8000)"))
    assert sorted(r["id"] for r in rows) == [5, 8000] and scanned <= 2 * 128


def test_reused_dataframe_after_pushdown_sees_every_row(spark, table_path: str) -> None:
    df = spark.read.format("mergetree").load(table_path)
    assert df.filter("id > 8000").count() == ROWS - 8001
    # PySpark 4.3 replays the pruned scan of the query above for these: they must still see all rows.
    assert df.count() == ROWS
    assert len(df.collect()) == ROWS
    assert df.filter("tag = '3'").count() == len([i for i in range(ROWS) if i % 7 == 3])
    assert df.filter("id < 10").count() == 10
    assert df.count() == ROWS


def test_filtered_dataframe_reused_many_times(spark, table_path: str) -> None:
    df = spark.read.format("mergetree").load(table_path)
    small = df.filter("id BETWEEN 100 AND 199")
    for _ in range(3):
        assert small.count() == 100
    assert df.where("id >= 0").count() == ROWS


def test_pushdown_disabled_by_option_still_correct(spark, table_path: str) -> None:
    df = spark.read.format("mergetree").option("pushdown", "false").load(table_path)
    rows, scanned = _collect_with_scan_rows(df.filter("id < 5"))
    assert len(rows) == 5 and scanned == ROWS


def test_reads_work_with_session_pushdown_disabled(spark, table_path: str) -> None:
    key = "spark.sql.python.filterPushdown.enabled"
    spark.conf.set(key, "false")
    try:
        df = spark.read.format("mergetree").load(table_path)
        rows, scanned = _collect_with_scan_rows(df.filter("id < 5"))
        assert len(rows) == 5 and scanned == ROWS
        assert df.count() == ROWS
    finally:
        spark.conf.set(key, "true")

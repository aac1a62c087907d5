"""Spark's filters over mergetree scans: every query returns what the same query over a Parquet copy
returns, with Python filter pushdown on and off.

PySpark 4.1–4.3 keeps the planned read of a pushed-down scan on the data source provider that every
reference to one loaded DataFrame shares, so two scans of one view in one query (a self-join, a
cross join, EXISTS, a scalar subquery, a union) run the same plan, and a later query on the same
DataFrame replays it. The queries below catch a plan pruned for one scan serving another.
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.spark

ROWS = 100_000
GRANULE = 1024
PUSHDOWN = "spark.sql.python.filterPushdown.enabled"
MERGETREE_VIEW, PARQUET_VIEW = "pushdown_mergetree", "pushdown_parquet"

# Two scans of one view per query, with different filters or none.
QUERIES = {
    "cross join of two filtered scans":
        "select count(*) from (select * from {v} where id < 10) a cross join (select * from {v} where id >= 99990) b",
    "correlated exists":
        "select count(*) from {v} a where a.id < 50 and exists (select 1 from {v} b where b.id = a.id + 99000)",
    "self-join with different filters":
        "select a.id, b.id as other from {v} a join {v} b on b.id = a.id + 99900 where a.id < 20 and b.tag = '3'",
    "scalar subquery":
        "select count(*), sum(id) from {v} where id > (select max(id) - 5 from {v} where id < 1000)",
    "union of two filtered scans":
        "select id from {v} where id < 10 union all select id from {v} where id >= 99995",
    "filtered and unfiltered scan":
        "select count(*) from {v} a cross join (select * from {v} where id < 3) b",
    "anti join of two ranges":
        "select count(*) from (select id from {v} where id < 100) x left anti join "
        "(select id from {v} where id between 50 and 60) y on x.id = y.id",
}


def _collect_with_scan_rows(df) -> tuple[list, int]:
    """Rows of the query and how many rows the mergetree scans handed to Spark (their SQL metric)."""
    rows = df.collect()
    leaves = df._jdf.queryExecution().executedPlan().collectLeaves()
    scanned = 0
    for position in range(leaves.size()):
        leaf = leaves.apply(position)
        if "BatchScan" in leaf.nodeName():
            scanned += leaf.metrics().apply("numOutputRows").value()
    return rows, scanned


@pytest.fixture(scope="module")
def table_path(spark, tmp_path_factory) -> str:
    root = tmp_path_factory.mktemp("pushdown")
    path = str(root / "t")
    data = spark.range(0, ROWS, numPartitions=2).selectExpr("id", "cast(id % 7 as string) as tag")
    (data.write.format("mergetree").option("order_by", "id").option("index_granularity", str(GRANULE))
     .mode("append").save(path))
    data.write.parquet(str(root / "parquet"))
    # Each view is one loaded DataFrame: every reference to it shares one provider in Spark.
    spark.read.format("mergetree").load(path).createOrReplaceTempView(MERGETREE_VIEW)
    spark.read.parquet(str(root / "parquet")).createOrReplaceTempView(PARQUET_VIEW)
    return path


@pytest.mark.parametrize("pushdown", ["true", "false"])
@pytest.mark.parametrize("name", sorted(QUERIES))
def test_two_scans_of_one_view_match_parquet(spark, table_path: str, name: str, pushdown: str) -> None:
    query = QUERIES[name]
    spark.conf.set(PUSHDOWN, pushdown)
    try:
        ours = sorted(tuple(row) for row in spark.sql(query.format(v=MERGETREE_VIEW)).collect())
    finally:
        spark.conf.set(PUSHDOWN, "true")
    expected = sorted(tuple(row) for row in spark.sql(query.format(v=PARQUET_VIEW)).collect())
    assert ours == expected


def test_pushed_filters_never_narrow_the_scan(spark, table_path: str) -> None:
    """A pushed filter never decides which rows a scan returns: Spark filters them itself."""
    df = spark.read.format("mergetree").load(table_path)
    rows, scanned = _collect_with_scan_rows(df.filter("id >= 1000 AND id < 1100"))
    assert sorted(r["id"] for r in rows) == list(range(1000, 1100))
    assert scanned == ROWS


def test_reused_dataframe_after_a_filtered_query_sees_every_row(spark, table_path: str) -> None:
    df = spark.read.format("mergetree").load(table_path)
    assert df.filter("id > 99000").count() == ROWS - 99001
    # PySpark replays the plan of the query above for these: they must still see every row.
    assert df.count() == ROWS
    assert len(df.collect()) == ROWS
    assert df.filter("tag = '3'").count() == len([i for i in range(ROWS) if i % 7 == 3])
    assert df.filter("id < 10").count() == 10
    assert df.count() == ROWS


def test_dataframe_after_explain_of_a_filtered_query(spark, table_path: str, capsys) -> None:
    df = spark.read.format("mergetree").load(table_path)
    df.filter("id < 10").explain()  # plans a scan that never runs; the next action replays it
    assert df.count() == ROWS
    assert df.filter("id >= 99990").count() == 10


def test_filtered_dataframe_reused_many_times(spark, table_path: str) -> None:
    df = spark.read.format("mergetree").load(table_path)
    small = df.filter("id BETWEEN 100 AND 199")
    for _ in range(3):
        assert small.count() == 100
    assert df.where("id >= 0").count() == ROWS


def test_reads_work_with_session_pushdown_disabled(spark, table_path: str) -> None:
    spark.conf.set(PUSHDOWN, "false")
    try:
        df = spark.read.format("mergetree").load(table_path)
        rows, scanned = _collect_with_scan_rows(df.filter("id < 5"))
        assert len(rows) == 5 and scanned == ROWS
        assert df.count() == ROWS
    finally:
        spark.conf.set(PUSHDOWN, "true")

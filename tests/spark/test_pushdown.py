"""Spark's filters over mergetree scans: every query returns what the same query over a Parquet copy
returns, with and without the session extension and with Python filter pushdown on and off.

PySpark 4.1–4.3 keeps the planned read of a pushed-down scan on the data source provider that every
reference to one loaded DataFrame shares, so without a provider of its own per scan two scans of one
view in one query (a self-join, a cross join, EXISTS, a scalar subquery, a union) would run the same
plan, and a later query on the same DataFrame would replay it. The session extension gives every
scan its own provider, and only then do pushed filters prune. The queries below catch a plan pruned
for one scan serving another.
"""

from __future__ import annotations

import pytest

from spark_mergetree import MergeTreeTable
from spark_mergetree.spark.filters import FILTER_PUSHDOWN
from spark_mergetree.spark.session import ENABLED_CONF, PUSHDOWN_CONF
from tests.spark.settings import spark_settings

pytestmark = pytest.mark.spark

ROWS = 100_000
GRANULE = 1024
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

# (session extension active, Python filter pushdown on)
MODES = {
    "extension, pushdown": ("true", "true"),
    "extension, no pushdown": ("true", "false"),
    "no extension, pushdown": ("false", "true"),
    "no extension, no pushdown": ("false", "false"),
}


def _mode(spark, extension: str, pushdown: str):
    return spark_settings(spark, {ENABLED_CONF: extension, PUSHDOWN_CONF: pushdown})


def _collect_with_scan_rows(df) -> tuple[list, int]:
    """Rows of the query and how many rows the mergetree scans handed to Spark (their SQL metric)."""
    from pyspark.sql.utils import is_remote

    rows = df.collect()
    if is_remote():  # Spark Connect: the server sends the executed plan's metrics with the result
        _, nodes = df.executionInfo.metrics.extract_graph()
        return rows, sum(int(metric.value) for node in nodes.values() if "BatchScan" in node.name
                         for metric in node.metrics if metric.name in ("numOutputRows", "number of output rows"))
    leaves = df._jdf.queryExecution().executedPlan().collectLeaves()
    scanned = 0
    for position in range(leaves.size()):
        leaf = leaves.apply(position)
        if "BatchScan" in leaf.nodeName():
            scanned += leaf.metrics().apply("numOutputRows").value()
    return rows, scanned


def _rows(spark, query: str) -> list[tuple]:
    return sorted(tuple(row) for row in spark.sql(query).collect())


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


@pytest.fixture(scope="module")
def expected(spark, table_path: str) -> dict[str, list[tuple]]:
    return {name: _rows(spark, query.format(v=PARQUET_VIEW)) for name, query in QUERIES.items()}


@pytest.mark.parametrize("mode", sorted(MODES))
def test_two_scans_of_one_view_match_parquet(spark, table_path: str, expected, mode: str) -> None:
    with _mode(spark, *MODES[mode]):
        ours = {name: _rows(spark, query.format(v=MERGETREE_VIEW)) for name, query in QUERIES.items()}
    assert ours == expected


def _engine_rows(path: str, where: str) -> int:
    """Rows in the granules the engine itself reads for `where` (the oracle of a pruned scan)."""
    return sum(task.rows for task in MergeTreeTable.open(path).explain(where).tasks)


def test_pushed_filters_prune_granules_when_each_scan_has_its_own_plan(spark, table_path: str) -> None:
    df = spark.read.format("mergetree").load(table_path)
    with _mode(spark, "true", "true"):
        rows, scanned = _collect_with_scan_rows(df.filter("id >= 1000 AND id < 1100"))
    assert sorted(r["id"] for r in rows) == list(range(1000, 1100))
    if FILTER_PUSHDOWN:
        assert scanned == _engine_rows(table_path, "id >= 1000 AND id < 1100") < ROWS
    else:  # PySpark 4.0 offers Python sources no filters: Spark filters a full read
        assert scanned == ROWS


@pytest.mark.parametrize("mode", ["extension, no pushdown", "no extension, pushdown", "no extension, no pushdown"])
def test_pushed_filters_never_narrow_a_shared_or_unpushed_scan(spark, table_path: str, mode: str) -> None:
    """Without a plan per scan (or without pushdown) Spark filters a full read itself."""
    df = spark.read.format("mergetree").load(table_path)
    with _mode(spark, *MODES[mode]):
        rows, scanned = _collect_with_scan_rows(df.filter("id >= 1000 AND id < 1100"))
    assert sorted(r["id"] for r in rows) == list(range(1000, 1100))
    assert scanned == ROWS


@pytest.mark.parametrize("extension", ["true", "false"])
def test_reused_dataframe_after_a_filtered_query_sees_every_row(spark, table_path: str, extension: str) -> None:
    with _mode(spark, extension, "true"):
        df = spark.read.format("mergetree").load(table_path)
        assert df.filter("id > 99000").count() == ROWS - 99001
        # PySpark replays the plan of the query above for these: they must still see every row.
        assert df.count() == ROWS
        assert len(df.collect()) == ROWS
        assert df.filter("tag = '3'").count() == len([i for i in range(ROWS) if i % 7 == 3])
        assert df.filter("id < 10").count() == 10
        assert df.count() == ROWS


@pytest.mark.parametrize("extension", ["true", "false"])
def test_dataframe_after_explain_of_a_filtered_query(spark, table_path: str, extension: str) -> None:
    with _mode(spark, extension, "true"):
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

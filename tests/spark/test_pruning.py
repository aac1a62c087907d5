"""Column pruning by the session extension: every mergetree scan reads the columns Spark's own
Parquet scan of the same query reads (the oracle), for SQL and DataFrame queries; a scan that needs
no column (count(*)) reads one, never zero; and the rows equal Parquet's.

The plans are compared with adaptive execution and exchange/subquery reuse off, so every scan of
the query stays a leaf of its own in both plans.
"""

from __future__ import annotations

import contextlib
import io
import re
from collections.abc import Callable

import pytest
from pyspark.sql import functions as F
from pyspark.sql.types import StructField, StructType

from spark_mergetree.spark.session import ENABLED_CONF
from tests.spark.settings import spark_settings

pytestmark = pytest.mark.spark

ROWS = 20_000
MERGETREE_VIEW, PARQUET_VIEW = "pruning_mergetree", "pruning_parquet"
PLAN_SETTINGS = {"spark.sql.adaptive.enabled": "false", "spark.sql.exchange.reuse": "false",
                 "spark.sql.execution.reuseSubquery": "false"}

SQL = {
    "aggregate of one column": "select sum(v) from {v}",
    "grouped aggregate": "select tag, count(*), max(v) from {v} group by tag",
    "count(*)": "select count(*) from {v}",
    "count(*) with a filter": "select count(*) from {v} where day >= date'2024-02-01'",
    "select *": "select * from {v} where id < 5",
    "filter on a column not returned": "select tag from {v} where v > 39990",
    "self-join": "select a.id, b.tag from {v} a join {v} b on a.id = b.id + 1 where a.id < 50",
    "scalar subquery": "select count(*) from {v} where v > (select avg(v) from {v} where flag)",
    "exists subquery": "select count(*) from {v} a where a.id < 100 and exists "
                       "(select 1 from {v} b where b.id = a.id * 2 and b.flag)",
    "in subquery": "select sum(id) from {v} where tag in (select tag from {v} where id < 3)",
}


def _frames(source: Callable[[], object]) -> dict[str, Callable[[], object]]:
    """DataFrame queries over a fresh load of the table (`source()`)."""
    return {
        "select and aggregate": lambda: source().select("v").agg(F.sum("v")),
        "groupBy count": lambda: source().groupBy("tag").count(),
        "count": lambda: source().select(F.count(F.lit(1))),
        "filter then select": lambda: source().filter("flag").select("id", "day"),
        "self-join": lambda: source().alias("a").join(source().alias("b"), F.col("a.id") == F.col("b.id") + 7)
        .select("a.tag", "b.v"),
        "whole table": lambda: source(),
    }


def _scans(df) -> list[tuple[str, ...]]:
    """The columns every scan of the query reads: mergetree (BatchScan) and Parquet (FileScan)
    leaves of the physical plan, subqueries included (once each: the Parquet scan gets a copy of a
    subquery in a filter it also pushes down; both copies have the subquery's name)."""
    from pyspark.sql.utils import is_remote

    if is_remote():
        return _scans_of_explained(df)
    found, stack, seen = [], [df._jdf.queryExecution().executedPlan()], set()
    while stack:
        node = stack.pop()
        kind = node.getClass().getSimpleName()
        if kind == "SubqueryExec":
            if node.name() in seen:
                continue
            seen.add(node.name())
        if kind == "BatchScanExec":
            found.append(tuple(sorted(node.scan().readSchema().fieldNames())))
        elif kind == "FileSourceScanExec":
            found.append(tuple(sorted(node.requiredSchema().fieldNames())))
        for group in (node.children(), node.subqueries()):
            stack.extend(group.apply(i) for i in range(group.size()))
    return sorted(found)


def _scans_of_explained(df) -> list[tuple[str, ...]]:
    """`_scans` for Spark Connect, whose client has no JVM plan: the same leaves, read from the
    formatted explain text (`(n) BatchScan mergetree` / `(n) Scan parquet` nodes and their
    `ReadSchema`; subquery sections once per subquery name)."""
    text = io.StringIO()
    with contextlib.redirect_stdout(text):
        df.explain(mode="formatted")
    sections = re.split(r"^Subquery:\d+ Hosting operator id = \d+ Hosting Expression = ", text.getvalue(), flags=re.M)
    found, seen = [], set()
    for number, section in enumerate(sections):
        if number:
            name = section.split(",", 1)[0]  # "Subquery scalar-subquery#89"
            if name in seen:
                continue
            seen.add(name)
        for node in re.split(r"^(?=\(\d+\) )", section, flags=re.M):
            if re.match(r"\(\d+\) (BatchScan mergetree|Scan parquet)\s*$", node.split("\n", 1)[0]):
                schema = re.search(r"^ReadSchema: struct<(.*)>$", node, flags=re.M).group(1)
                found.append(tuple(sorted(field.split(":", 1)[0] for field in schema.split(",") if field)))
    return sorted(found)


@pytest.fixture(scope="module")
def paths(spark, tmp_path_factory) -> tuple[str, str]:
    root = tmp_path_factory.mktemp("pruning")
    mergetree, parquet = str(root / "t"), str(root / "parquet")
    data = spark.range(0, ROWS, numPartitions=2).selectExpr(
        "id", "cast(id % 5 as string) as tag", "id * 2.0d as v", "id % 3 = 0 as flag",
        "date_add(date'2024-01-01', cast(id % 90 as int)) as day",
        "repeat(cast(id as string), 10) as payload")
    data.write.format("mergetree").option("order_by", "id").mode("append").save(mergetree)
    data.write.parquet(parquet)
    spark.read.format("mergetree").load(mergetree).createOrReplaceTempView(MERGETREE_VIEW)
    spark.read.parquet(parquet).createOrReplaceTempView(PARQUET_VIEW)
    return mergetree, parquet


def _check(spark, ours, theirs) -> None:
    with spark_settings(spark, PLAN_SETTINGS):
        ours_scans, their_scans = _scans(ours), _scans(theirs)
    assert len(ours_scans) == len(their_scans) > 0
    # Scans that need columns read exactly Parquet's; a scan that needs none reads one column.
    table_columns = set(spark.table(MERGETREE_VIEW).columns)
    remaining = list(their_scans)
    for scan in ours_scans:
        if scan and scan in remaining:
            remaining.remove(scan)
        else:
            assert len(scan) == 1 and scan[0] in table_columns and () in remaining, (ours_scans, their_scans)
            remaining.remove(())
    assert remaining == []
    assert sorted(map(tuple, ours.collect())) == sorted(map(tuple, theirs.collect()))


@pytest.mark.parametrize("name", sorted(SQL))
def test_sql_scans_read_the_columns_parquet_reads(spark, paths, name: str) -> None:
    query = SQL[name]
    _check(spark, spark.sql(query.format(v=MERGETREE_VIEW)), spark.sql(query.format(v=PARQUET_VIEW)))


@pytest.mark.parametrize("name", sorted(_frames(lambda: None)))
def test_dataframe_scans_read_the_columns_parquet_reads(spark, paths, name: str) -> None:
    mergetree, parquet = paths
    ours = _frames(lambda: spark.read.format("mergetree").load(mergetree))[name]()
    theirs = _frames(lambda: spark.read.parquet(parquet))[name]()
    _check(spark, ours, theirs)


def test_without_the_extension_scans_read_every_column(spark, paths) -> None:
    with spark_settings(spark, {**PLAN_SETTINGS, ENABLED_CONF: "false"}):
        df = spark.sql(SQL["aggregate of one column"].format(v=MERGETREE_VIEW))
        assert _scans(df) == [tuple(sorted(spark.table(MERGETREE_VIEW).columns))]
        expected = spark.sql(SQL["aggregate of one column"].format(v=PARQUET_VIEW)).collect()
        assert df.collect() == expected


def test_explain_shows_the_pruned_schema(spark, paths, capsys) -> None:
    spark.sql(f"select tag, sum(v) from {MERGETREE_VIEW} group by tag").explain()
    scans = re.findall(r"BatchScan mergetree\[([^\]]*)\]", capsys.readouterr().out)
    assert [sorted(re.sub(r"#\d+L?", "", c).strip() for c in scan.split(",")) for scan in scans] == [["tag", "v"]]


def test_a_read_without_the_extension_says_once_how_to_enable_it(paths, capfd, monkeypatch) -> None:
    from spark_mergetree.spark import source as source_module

    monkeypatch.setattr(source_module, "_said", set())
    mergetree, _ = paths
    plain = source_module.MergeTreeDataSource({"path": mergetree})
    for _ in range(2):
        reader = plain.reader(plain.schema())
        # (PySpark 4.0's DataSourceReader has no pushFilters at all: filters came in 4.1.)
        assert getattr(type(reader), "pushFilters", None) is getattr(source_module.DataSourceReader, "pushFilters", None)
    assert capfd.readouterr().err.count("spark_mergetree.configure(") == 1
    # A scan the extension planned (its schema's fields marked) says nothing, and pushes filters
    # only when Spark pushes them; the reader's schema is the plain one.
    for scan, pushes in (("scan", False), ("pushdown", True)):
        marked = StructType([StructField(f.name, f.dataType, f.nullable, {source_module.SCAN_MARKER: scan})
                             for f in plain.schema().fields])
        reader = plain.reader(marked)
        assert (getattr(type(reader), "pushFilters", None)
                is not getattr(source_module.DataSourceReader, "pushFilters", None)) == pushes
        assert reader.target == plain.reader(plain.schema()).target
    assert "configure(" not in capfd.readouterr().err


def test_configure_adds_to_what_the_builder_already_has(spark) -> None:
    """(The `spark` fixture builds the extension's jar.)"""
    from pyspark.sql import SparkSession

    from spark_mergetree.spark.session import EXTENSION_CLASS, PUSHDOWN_CONF, configure, extension_jar

    builder = (SparkSession.builder.config("spark.jars", "/opt/other.jar")
               .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
               .config(PUSHDOWN_CONF, "false"))
    options = configure(configure(builder))._options
    assert options["spark.jars"] == f"/opt/other.jar,{extension_jar()}"
    assert options["spark.sql.extensions"] == f"io.delta.sql.DeltaSparkSessionExtension,{EXTENSION_CLASS}"
    assert options[PUSHDOWN_CONF] == "false"  # the user's choice stays
    plain = configure(SparkSession.builder, extension=False, unix_socket=False)._options
    assert "spark.sql.extensions" not in plain and "spark.jars" not in plain


def test_scans_report_their_size_so_small_tables_are_broadcast_as_parquet_ones(spark, paths, tmp_path) -> None:
    """A Python scan reports no size, which Spark takes as huge: joins with small tables would
    shuffle both sides. With the extension a mergetree scan reports its files' size."""
    small = str(tmp_path / "small")
    spark.range(0, 50).selectExpr("id", "cast(id as string) as label").write.format("mergetree") \
        .option("order_by", "id").mode("append").save(small)
    spark.range(0, 50).selectExpr("id", "cast(id as string) as label").write.parquet(small + ".parquet")
    spark.read.format("mergetree").load(small).createOrReplaceTempView("pruning_small_mergetree")
    spark.read.parquet(small + ".parquet").createOrReplaceTempView("pruning_small_parquet")
    query = "select b.label, sum(a.v) from {big} a join {small} b on a.id = b.id group by b.label"

    def joins(big: str, small_view: str) -> list[str]:
        with spark_settings(spark, {**PLAN_SETTINGS, "spark.sql.autoBroadcastJoinThreshold": str(1 << 20)}):
            text = io.StringIO()
            with contextlib.redirect_stdout(text):  # the explain text: Spark Connect has no JVM plan
                spark.sql(query.format(big=big, small=small_view)).explain()
            plan = text.getvalue()
        return re.findall(r"(BroadcastHashJoin|SortMergeJoin|ShuffledHashJoin)", plan)

    assert joins(MERGETREE_VIEW, "pruning_small_mergetree") == joins(PARQUET_VIEW, "pruning_small_parquet") \
        == ["BroadcastHashJoin"]


def test_prune_columns_of_the_reader_api_reads_only_the_columns_asked(paths) -> None:
    # SPARK-51713's reader API, as an engine that offers it (Sail) calls it: once, before partitions().
    import pyarrow as pa
    import pyarrow.dataset as ds

    from spark_mergetree.errors import InvalidOptionError
    from spark_mergetree.spark.source import MergeTreeDataSource

    mergetree, parquet = paths
    expected = ds.dataset(parquet).to_table()
    source = MergeTreeDataSource({"path": mergetree})

    def read(required: list[str]) -> tuple[StructType, pa.Table]:
        reader = source.reader(source.schema())
        full = source.schema()
        pruned = reader.pruneColumns(StructType([full[name] for name in required]))
        batches = [batch for partition in reader.partitions() for batch in reader.read(partition)]
        return pruned, pa.Table.from_batches(batches)

    pruned, got = read(["v", "tag"])
    assert pruned.fieldNames() == got.column_names == ["v", "tag"]
    assert sorted(got.to_pylist(), key=repr) == sorted(expected.select(["v", "tag"]).to_pylist(), key=repr)
    # No column asked (count(*)): the narrowest one, never zero columns, every row.
    pruned, got = read([])
    assert len(pruned.fieldNames()) == 1 and pruned.fieldNames()[0] in ("id", "v", "flag", "day")
    assert got.num_rows == ROWS
    with pytest.raises(InvalidOptionError, match="nope"):
        source.reader(source.schema()).pruneColumns(StructType([StructField("nope", source.schema()["id"].dataType)]))

"""Spark SQL by table name over an Atomic catalog root (issue 31, the catalog): namespaces are
ClickHouse databases, tables are read by the Python reader with pruned columns and pushed filters,
DESCRIBE shows ClickHouse's types and the table's structure and statistics."""

from __future__ import annotations

import pyarrow as pa
import pytest

from spark_mergetree.spark.filters import FILTER_PUSHDOWN
from tests.spark.sql_util import scan_columns, sql_catalog
from tests.spark.test_pushdown import _collect_with_scan_rows

pytestmark = pytest.mark.spark

ROWS = 20_000


@pytest.fixture
def events(spark, tmp_path):
    cat = sql_catalog(spark, tmp_path, ("db", "other"))
    table = cat.engine.create_table("db.events", [("id", "UInt64"), ("name", "String"), ("v", "Nullable(Float64)")],
                                    "id", partition_by="id % 4", settings={"index_granularity": 1024})
    table.insert(pa.table({"id": pa.array(range(ROWS), pa.uint64()), "name": [f"n{i % 10}" for i in range(ROWS)],
                           "v": [float(i) for i in range(ROWS)]}))
    return cat, table


def test_namespaces_and_tables_are_the_catalogs_databases_and_tables(spark, events) -> None:
    cat, _ = events
    assert sorted(row[0] for row in spark.sql(f"SHOW NAMESPACES IN {cat.name}").collect()) == ["db", "other"]
    assert [row.tableName for row in spark.sql(f"SHOW TABLES IN {cat.name}.db").collect()] == ["events"]
    assert spark.sql(f"SHOW TABLES IN {cat.name}.other").collect() == []
    with pytest.raises(Exception, match="SCHEMA_NOT_FOUND|NAMESPACE_NOT_FOUND|nope"):
        spark.sql(f"SHOW TABLES IN {cat.name}.nope").collect()


def test_table_by_name_reads_every_row(spark, events) -> None:
    cat, _ = events
    df = spark.table(f"{cat.name}.db.events")
    assert df.columns == ["id", "name", "v"]
    assert df.count() == ROWS
    assert spark.sql(f"SELECT sum(v), count(DISTINCT name) FROM {cat.name}.db.events").collect()[0] == (
        float(sum(range(ROWS))), 10)


def test_use_namespace_then_bare_names(spark, events) -> None:
    cat, _ = events
    current = spark.catalog.currentCatalog(), spark.catalog.currentDatabase()
    try:
        spark.sql(f"USE {cat.name}.db")
        assert spark.sql("SELECT count(*) FROM events").collect()[0][0] == ROWS
    finally:
        spark.sql(f"USE {current[0]}.{current[1]}")


def test_select_prunes_columns_and_pushes_filters(spark, events) -> None:
    cat, table = events
    query = f"SELECT name FROM {cat.name}.db.events WHERE id >= 1000 AND id < 1100"
    assert scan_columns(spark, query) == ["id", "name"]
    rows, scanned = _collect_with_scan_rows(spark.sql(query))
    assert sorted(row.name for row in rows) == sorted(f"n{i % 10}" for i in range(1000, 1100))
    if FILTER_PUSHDOWN:
        engine_rows = sum(task.rows for task in table.explain("id >= 1000 AND id < 1100").tasks)
        assert scanned == engine_rows < ROWS
    else:  # PySpark 4.0 offers Python sources no filters
        assert scanned == ROWS


def test_describe_shows_clickhouse_types_structure_and_statistics(spark, events) -> None:
    cat, table = events
    rows = spark.sql(f"DESCRIBE TABLE EXTENDED {cat.name}.db.events").collect()
    columns = {row.col_name: (row.data_type, row.comment) for row in rows[:3]}
    assert columns == {"id": ("decimal(20,0)", "UInt64"), "name": ("string", "String"),
                       "v": ("double", "Nullable(Float64)")}
    properties = next(row.data_type for row in rows if row.col_name == "Table Properties")
    parts = table.parts()
    for expected in ("engine=MergeTree", "order_by=id", "partition_by=id % 4", "index_granularity=1024",
                     f"parts={len(parts)}", f"rows={ROWS}", f"bytes={sum(p.bytes_on_disk for p in parts)}"):
        assert expected in properties
    assert spark.sql(f"DESCRIBE TABLE {cat.name}.db.events").collect()[0].comment == "UInt64"


def test_a_missing_table_is_not_found(spark, events) -> None:
    cat, _ = events
    with pytest.raises(Exception, match="TABLE_OR_VIEW_NOT_FOUND"):
        spark.sql(f"SELECT * FROM {cat.name}.db.missing").collect()
    assert not spark.catalog.tableExists(f"{cat.name}.db.missing")
    assert spark.catalog.tableExists(f"{cat.name}.db.events")


def test_reads_see_commits_made_after_the_catalog_was_loaded(spark, events) -> None:
    cat, table = events
    assert spark.table(f"{cat.name}.db.events").count() == ROWS
    table.insert(pa.table({"id": pa.array([ROWS], pa.uint64()), "name": ["late"], "v": [None]}))
    assert spark.sql(f"SELECT name FROM {cat.name}.db.events WHERE v IS NULL").collect()[0].name == "late"

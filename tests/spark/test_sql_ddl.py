"""Spark SQL DDL on a mergetree catalog (issue 31, step 2): CREATE TABLE (properties as ClickHouse
spells them, unknown ones refused by name before anything is written), CTAS, IF NOT EXISTS, DROP
(the Atomic catalog's delayed drop), RENAME, ADD COLUMNS, saveAsTable / writeTo / insertInto; and
ClickHouse (chdb) on the root sees what SQL made, SQL sees what ClickHouse made."""

from __future__ import annotations

import pytest

from tests.format import chdb_util
from tests.spark.sql_util import sql_catalog

pytestmark = pytest.mark.spark


def _rows(spark, query: str) -> list[tuple]:
    return sorted(tuple(row) for row in spark.sql(query).collect())


def test_create_table_with_clickhouse_clauses_as_properties(spark, tmp_path) -> None:
    cat = sql_catalog(spark, tmp_path)
    spark.sql(f"CREATE TABLE {cat.name}.db.events (id BIGINT NOT NULL, day DATE NOT NULL, name STRING) USING mergetree "
              "TBLPROPERTIES ('order by' = 'id', 'partition_by' = 'toYYYYMM(day)', 'index_granularity' = '1024')")
    definition = cat.engine.table_info("db.events").definition
    assert definition.order_by == ("id",)
    assert definition.partition_by == "toYYYYMM(day)"
    assert definition.settings["index_granularity"] == "1024"
    assert [(c.name, c.type) for c in definition.columns] == [("id", "Int64"), ("day", "Date32"),
                                                               ("name", "Nullable(String)")]
    spark.sql(f"INSERT INTO {cat.name}.db.events VALUES (1, DATE'2024-01-05', 'a'), (2, DATE'2024-02-05', NULL)")
    assert _rows(spark, f"SELECT id, name FROM {cat.name}.db.events") == [(1, "a"), (2, None)]
    assert {part.partition_id for part in cat.engine.table("db.events").parts()} == {"202401", "202402"}


def test_unknown_property_is_refused_by_name_before_anything_is_written(spark, tmp_path) -> None:
    cat = sql_catalog(spark, tmp_path)
    with pytest.raises(Exception, match="index_granulrity"):
        spark.sql(f"CREATE TABLE {cat.name}.db.t (id BIGINT) USING mergetree "
                  "TBLPROPERTIES ('order_by' = 'id', 'index_granulrity' = '1024')")
    with pytest.raises(Exception, match="USING parquet|mergetree tables only"):
        spark.sql(f"CREATE TABLE {cat.name}.db.t (id BIGINT) USING csv")
    with pytest.raises(Exception, match="index_granulrity"):
        spark.sql(f"CREATE TABLE {cat.name}.db.t TBLPROPERTIES ('index_granulrity' = '1') AS SELECT 1 AS id")
    assert cat.engine.tables("db") == []
    assert not list((cat.root / "store").glob("*/*/format_version.txt"))


def test_if_not_exists_keeps_the_table_and_create_twice_fails(spark, tmp_path) -> None:
    cat = sql_catalog(spark, tmp_path)
    spark.sql(f"CREATE TABLE {cat.name}.db.t (id BIGINT NOT NULL) USING mergetree TBLPROPERTIES ('order_by'='id')")
    spark.sql(f"INSERT INTO {cat.name}.db.t VALUES (7)")
    spark.sql(f"CREATE TABLE IF NOT EXISTS {cat.name}.db.t (other STRING) USING mergetree")
    assert _rows(spark, f"SELECT * FROM {cat.name}.db.t") == [(7,)]
    with pytest.raises(Exception, match="TABLE_OR_VIEW_ALREADY_EXISTS|already exists"):
        spark.sql(f"CREATE TABLE {cat.name}.db.t (id BIGINT) USING mergetree")


def test_create_table_as_select_and_partitioned_by(spark, tmp_path) -> None:
    cat = sql_catalog(spark, tmp_path)
    spark.sql(f"CREATE TABLE {cat.name}.db.src USING mergetree PARTITIONED BY (k) TBLPROPERTIES ('order_by'='id') AS "
              "SELECT id, id % 3 AS k, cast(id AS STRING) AS s FROM range(30)")
    definition = cat.engine.table_info("db.src").definition
    assert (definition.order_by, definition.partition_by) == (("id",), "k")
    assert {part.partition_id for part in cat.engine.table("db.src").parts()} == {"0", "1", "2"}
    spark.sql(f"CREATE TABLE {cat.name}.db.copy AS SELECT k, count(*) AS n FROM {cat.name}.db.src GROUP BY k")
    assert _rows(spark, f"SELECT * FROM {cat.name}.db.copy") == [(0, 10), (1, 10), (2, 10)]


def test_drop_is_the_atomic_delayed_drop(spark, tmp_path) -> None:
    cat = sql_catalog(spark, tmp_path)
    spark.sql(f"CREATE TABLE {cat.name}.db.t USING mergetree AS SELECT 1 AS id")
    uuid = cat.engine.table_uuid("db.t")
    spark.sql(f"DROP TABLE {cat.name}.db.t")
    assert not spark.catalog.tableExists(f"{cat.name}.db.t")
    assert [d.uuid for d in cat.engine.dropped_tables()] == [uuid]
    assert cat.engine.store_path(uuid).is_dir()  # data stays until the drop delay passes
    spark.sql(f"DROP TABLE IF EXISTS {cat.name}.db.t")
    with pytest.raises(Exception, match="TABLE_OR_VIEW_NOT_FOUND"):
        spark.sql(f"DROP TABLE {cat.name}.db.t")


def test_rename_and_add_columns(spark, tmp_path) -> None:
    cat = sql_catalog(spark, tmp_path)
    spark.sql(f"CREATE TABLE {cat.name}.db.t USING mergetree TBLPROPERTIES ('order_by'='id') "
              "AS SELECT id FROM range(3)")
    spark.sql(f"ALTER TABLE {cat.name}.db.t ADD COLUMNS (note STRING, n INT)")
    spark.sql(f"INSERT INTO {cat.name}.db.t VALUES (3, 'x', 5)")
    spark.sql(f"ALTER TABLE {cat.name}.db.t RENAME TO db.renamed")
    assert [r.tableName for r in spark.sql(f"SHOW TABLES IN {cat.name}.db").collect()] == ["renamed"]
    assert _rows(spark, f"SELECT * FROM {cat.name}.db.renamed") == [
        (0, None, None), (1, None, None), (2, None, None), (3, "x", 5)]
    with pytest.raises(Exception, match="ADD COLUMNS"):
        spark.sql(f"ALTER TABLE {cat.name}.db.renamed DROP COLUMN note")


def test_dataframe_writes_by_name(spark, tmp_path) -> None:
    cat = sql_catalog(spark, tmp_path)
    df = spark.range(5).selectExpr("id", "cast(id AS STRING) AS s")
    # No merges in the background: an overwrite loses to a merge running on its parts (SerializationError).
    df.write.format("mergetree").option("order_by", "id").option("setting.auto_merge", "false") \
        .saveAsTable(f"{cat.name}.db.t")
    assert cat.engine.table_info("db.t").definition.order_by == ("id",)
    df.writeTo(f"{cat.name}.db.t").append()
    df.write.insertInto(f"{cat.name}.db.t")
    assert spark.table(f"{cat.name}.db.t").count() == 15
    df.write.insertInto(f"{cat.name}.db.t", overwrite=True)
    assert spark.table(f"{cat.name}.db.t").count() == 5
    with pytest.raises(Exception, match="REPLACE TABLE|INSERT OVERWRITE"):
        df.write.format("mergetree").mode("overwrite").saveAsTable(f"{cat.name}.db.t")


def test_overwrite_partitions_replaces_only_the_written_partitions(spark, tmp_path) -> None:
    cat = sql_catalog(spark, tmp_path)
    spark.sql(f"CREATE TABLE {cat.name}.db.t USING mergetree TBLPROPERTIES ('order_by'='id', 'partition_by'='k') "
              "AS SELECT id, id % 2 AS k FROM range(6)")
    spark.range(100, 102).selectExpr("id", "1L AS k").writeTo(f"{cat.name}.db.t").overwritePartitions()
    assert _rows(spark, f"SELECT id FROM {cat.name}.db.t") == [(0,), (2,), (4,), (100,), (101,)]


def test_clickhouse_sees_sql_tables_and_sql_sees_clickhouse_tables(spark, tmp_path) -> None:
    cat = sql_catalog(spark, tmp_path)
    spark.sql(f"CREATE TABLE {cat.name}.db.from_sql (id BIGINT NOT NULL, s STRING) USING mergetree "
              "TBLPROPERTIES ('order_by' = 'id')")
    spark.sql(f"INSERT INTO {cat.name}.db.from_sql VALUES (1, 'a'), (2, 'b')")
    session = chdb_util.session_at(cat.root)
    try:
        assert session.query("SELECT id, s FROM db.from_sql ORDER BY id", "CSV").bytes().decode().split() == [
            '1,"a"', '2,"b"']
        session.query("CREATE TABLE db.from_clickhouse (k UInt32, v String) ENGINE = MergeTree ORDER BY k")
        session.query("INSERT INTO db.from_clickhouse VALUES (5, 'five'), (6, 'six')")
    finally:
        chdb_util.close_session()
    assert "from_clickhouse" in [r.tableName for r in spark.sql(f"SHOW TABLES IN {cat.name}.db").collect()]
    assert _rows(spark, f"SELECT k, v FROM {cat.name}.db.from_clickhouse") == [(5, "five"), (6, "six")]

"""Spark reads and writes of mergetree tables through the shared local SparkSession."""

from __future__ import annotations

import datetime as dt
import decimal
import shutil
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql import Row
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    ByteType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from spark_mergetree.engine.table import MergeTreeTable

pytestmark = pytest.mark.spark

ALL_TYPES = StructType([
    StructField("id", LongType(), False),
    StructField("b", ByteType()), StructField("s", ShortType()), StructField("i", IntegerType()),
    StructField("f", FloatType()), StructField("d", DoubleType()), StructField("flag", BooleanType()),
    StructField("name", StringType()), StructField("day", DateType()),
    StructField("ts", TimestampType()), StructField("money", DecimalType(10, 2)),
    StructField("wide", DecimalType(38, 10)), StructField("ints", ArrayType(IntegerType())),
    StructField("words", ArrayType(StringType(), containsNull=False)),
    StructField("attrs", MapType(StringType(), LongType())),
    StructField("point", StructType([StructField("x", IntegerType()), StructField("label", StringType())])),
])


def _all_type_rows() -> list[tuple]:
    utc = dt.timezone.utc
    rows = []
    for k in range(40):
        null = k % 7 == 3
        rows.append((
            k, None if null else k - 20, None if null else -300 * k, None if null else 70000 * k,
            None if null else k / 4, None if null else k * 1.5e10, None if null else k % 2 == 0,
            None if null else f"name-{k}-é",
            None if null else dt.date(1960, 1, 1) + dt.timedelta(days=400 * k),
            None if null else dt.datetime(1969, 12, 31, 23, 59, 59, 123456, tzinfo=utc) + dt.timedelta(hours=k),
            None if null else decimal.Decimal(f"{k * 13}.{k:02d}"),
            None if null else decimal.Decimal(f"-{k}.0123456789"),
            None if null else [k, None, -k], [] if null else [f"w{k}", ""],
            None if null else {"a": k, "b": None}, None if null else (k, None if k % 2 else f"p{k}"),
        ))
    return rows


def _clickhouse_view(row: Row) -> Row:
    """ClickHouse stores a NULL Array/Map/Tuple as the empty value (it has no NULL for them)."""
    values = row.asDict()
    values["ints"] = values["ints"] if values["ints"] is not None else []
    values["attrs"] = values["attrs"] if values["attrs"] is not None else {}
    values["point"] = values["point"] if values["point"] is not None else Row(x=None, label=None)
    return Row(**values)


def _sorted_rows(df) -> list[Row]:
    return sorted(df.collect(), key=lambda row: row["id"])


def test_round_trip_every_type(spark, tmp_path: Path) -> None:
    path = str(tmp_path / "all_types")
    source = spark.createDataFrame(_all_type_rows(), ALL_TYPES)
    source.write.format("mergetree").option("order_by", "id").mode("append").save(path)
    back = spark.read.format("mergetree").load(path)
    assert [f.name for f in back.schema.fields] == ALL_TYPES.fieldNames()
    assert back.schema["ts"].dataType == TimestampType() and back.schema["id"].nullable is False
    assert _sorted_rows(back) == [_clickhouse_view(row) for row in _sorted_rows(source)]
    # The engine sees the same data, with Spark types stored as ClickHouse types.
    table = MergeTreeTable.open(path)
    assert table.to_arrow(columns=["id"]).num_rows == 40


def test_binary_is_stored_as_clickhouse_string(spark, tmp_path: Path) -> None:
    path = str(tmp_path / "binary")
    df = spark.createDataFrame([(1, bytearray(b"abc")), (2, None)], StructType([
        StructField("id", LongType(), False), StructField("raw", BinaryType())]))
    df.write.format("mergetree").option("order_by", "id").mode("append").save(path)
    back = spark.read.format("mergetree").load(path)
    assert back.schema["raw"].dataType == StringType()
    assert sorted(back.collect()) == [Row(id=1, raw="abc"), Row(id=2, raw=None)]


def test_autoregistered_without_register_call(spark, tmp_path: Path) -> None:
    # conftest never calls register(): format("mergetree") resolves through pyspark_mergetree.
    path = str(tmp_path / "auto")
    spark.range(5).write.format("mergetree").option("order_by", "id").mode("append").save(path)
    assert spark.read.format("mergetree").load(path).count() == 5


def test_append_overwrite_and_dynamic_partition_overwrite(spark, tmp_path: Path) -> None:
    path = str(tmp_path / "modes")
    schema = "id long, month int, v string"
    first = spark.createDataFrame([(i, 1 + i % 3, f"a{i}") for i in range(30)], schema)
    (first.write.format("mergetree").option("order_by", "id").option("partition_by", "month")
     .mode("append").save(path))
    first.write.format("mergetree").mode("append").save(path)
    read = spark.read.format("mergetree").load(path)
    assert read.count() == 60

    # Dynamic: only month 2 is replaced; months 1 and 3 keep both copies.
    replacement = spark.createDataFrame([(1000 + i, 2, "new") for i in range(4)], schema)
    (replacement.write.format("mergetree").option("partition_overwrite_mode", "dynamic")
     .mode("overwrite").save(path))
    by_month = {r["month"]: r["count"] for r in
                spark.read.format("mergetree").load(path).groupBy("month").count().collect()}
    assert by_month == {1: 20, 2: 4, 3: 20}

    # Static overwrite replaces the whole table.
    spark.createDataFrame([(7, 9, "only")], schema).write.format("mergetree").mode("overwrite").save(path)
    assert [tuple(r) for r in spark.read.format("mergetree").load(path).collect()] == [(7, 9, "only")]


def test_narrow_schema_columns_option_and_where(spark, tmp_path: Path) -> None:
    path = str(tmp_path / "narrow")
    df = spark.range(0, 2000).selectExpr("id", "cast(id as double) * 0.5 as value", "cast(id % 10 as string) as tag")
    (df.write.format("mergetree").option("order_by", "id").option("index_granularity", "64")
     .mode("append").save(path))
    values = spark.read.format("mergetree").schema("value double").load(path)
    assert values.columns == ["value"]
    assert values.agg({"value": "sum"}).first()[0] == sum(i * 0.5 for i in range(2000))
    tags = spark.read.format("mergetree").option("columns", "tag,id").load(path)
    assert tags.columns == ["tag", "id"]
    assert tags.count() == 2000
    ranged = spark.read.format("mergetree").option("where", "id >= 100 AND id < 150").load(path)
    assert sorted(r["id"] for r in ranged.collect()) == list(range(100, 150))


def test_one_big_part_is_split_into_several_input_partitions(spark, tmp_path: Path) -> None:
    path = str(tmp_path / "big")
    (spark.range(0, 20000, numPartitions=1).write.format("mergetree").option("order_by", "id")
     .option("index_granularity", "256").mode("append").save(path))
    assert len(MergeTreeTable.open(path).parts()) == 1
    df = spark.read.format("mergetree").option("target_rows", "2048").load(path)
    # Works on Spark Connect too (no RDD API there): the input partitions that returned rows.
    assert df.selectExpr("spark_partition_id() as p").distinct().count() >= 8
    assert df.count() == 20000
    assert df.agg({"id": "sum"}).first()[0] == sum(range(20000))


def test_bad_options_and_schema_mismatch_fail_before_writing(spark, tmp_path: Path) -> None:
    path = tmp_path / "bad"
    df = spark.range(3)
    with pytest.raises(Exception, match="codec"):
        df.write.format("mergetree").option("codec", "snappy").mode("append").save(str(path))
    assert not path.exists()
    with pytest.raises(Exception, match="unknown write option"):
        df.write.format("mergetree").option("ordre_by", "id").mode("append").save(str(path))
    with pytest.raises(Exception, match="unknown read option"):
        spark.read.format("mergetree").option("colums", "id").load(str(path)).count()
    df.write.format("mergetree").option("order_by", "id").mode("append").save(str(path))
    with pytest.raises(Exception, match=r"\['extra'\]"):
        spark.range(3).selectExpr("id", "'x' as extra").write.format("mergetree").mode("append").save(str(path))
    with pytest.raises(Exception, match="'id'"):
        spark.range(3).selectExpr("cast(id as string) as id").write.format("mergetree").mode("append").save(str(path))
    with pytest.raises(Exception, match="nope"):
        spark.read.format("mergetree").option("where", "nope > 1").load(str(path)).count()
    assert spark.read.format("mergetree").load(str(path)).count() == 3
    # merge_schema adds the new column ('x' is a non-nullable literal, so String): rows written
    # before hold its default, the empty string, as ClickHouse reads them after ADD COLUMN.
    (spark.range(3, 6).selectExpr("id", "'x' as extra").write.format("mergetree").option("merge_schema", "true")
     .mode("append").save(str(path)))
    rows = spark.read.format("mergetree").load(str(path)).orderBy("id").collect()
    assert [r["extra"] for r in rows] == ["", "", "", "x", "x", "x"]


def test_unsigned_and_wide_types_read_from_engine_table(spark, tmp_path: Path) -> None:
    path = tmp_path / "unsigned"
    table = MergeTreeTable.create(path, [("k", "UInt64"), ("small", "UInt8"), ("big", "Int128")], order_by="k")
    table.insert(pa.table({"k": pa.array([0, 2**64 - 1], pa.uint64()), "small": pa.array([255, 0], pa.uint8()),
                           "big": pa.array([decimal.Decimal(-(2**100)), decimal.Decimal(5)], pa.decimal256(39, 0))}))
    rows = sorted(spark.read.format("mergetree").load(str(path)).collect(), key=lambda r: r["k"])
    assert rows == [Row(k=decimal.Decimal(0), small=255, big=str(-(2**100))),
                    Row(k=decimal.Decimal(2**64 - 1), small=0, big="5")]
    # Writing the Spark-typed values back into the unsigned table range-checks them.
    with pytest.raises(Exception, match="small"):
        (spark.createDataFrame([(decimal.Decimal(7), -1)], "k decimal(20,0), small short")
         .write.format("mergetree").mode("append").save(str(path)))


def test_catalog_tables_by_name(spark, tmp_path: Path) -> None:
    from spark_mergetree.catalog.catalog import Catalog

    root = str(tmp_path / "catalog")
    Catalog(root)  # a root must exist before Spark writes into it
    df = spark.range(0, 50).selectExpr("id", "cast(id % 3 as int) as k")
    (df.write.format("mergetree").option("catalog", root).option("order_by", "id")
     .mode("append").save("shop.items"))
    df.write.format("mergetree").option("catalog", root).mode("append").save("shop.items")
    assert Catalog(root).tables("shop") == ["items"]
    read = spark.read.format("mergetree").option("catalog", root).load("shop.items")
    assert read.count() == 100 and read.columns == ["id", "k"]
    with pytest.raises(Exception, match="does not exist"):
        spark.read.format("mergetree").option("catalog", root).load("shop.nothing").count()


def test_timestamps_are_instants_whatever_the_session_zone(spark, tmp_path: Path) -> None:
    path = str(tmp_path / "zones")
    instant = dt.datetime(2024, 3, 10, 7, 30, 0, 250, tzinfo=dt.timezone.utc)
    spark.conf.set("spark.sql.session.timeZone", "America/New_York")
    try:
        df = spark.createDataFrame([(1, instant)], "id long, ts timestamp")
        df.write.format("mergetree").option("order_by", "id").mode("append").save(path)
        local = spark.read.format("mergetree").load(path).selectExpr("cast(ts as string) as text").first()["text"]
        assert local == "2024-03-10 03:30:00.00025"
    finally:
        spark.conf.set("spark.sql.session.timeZone", "UTC")
    stored = MergeTreeTable.open(path).to_arrow(columns=["ts"]).column("ts")[0].as_py()
    assert stored == instant


@pytest.mark.parametrize("layout, n_disks, tolerates", [("raid5", 3, 1), ("raid6", 4, 2)])
def test_spark_reads_and_writes_a_parity_raid_table(spark, tmp_path: Path, layout: str, n_disks: int,
                                                    tolerates: int) -> None:
    """Executors write their parts through the table's storage policy; reads and merges follow it,
    and reads survive losing as many disks as the layout has parity units."""
    policy = {"name": layout, "disks": {f"d{i}": {"path": str(tmp_path / f"disk{i}")} for i in range(n_disks)},
              "volumes": [{"name": "main", "disks": [f"d{i}" for i in range(n_disks)], "layout": layout,
                           "stripe_unit_bytes": 4096}]}
    path = tmp_path / "raid_table"
    MergeTreeTable.create(path, [("id", "Int64"), ("name", "String")], order_by="id",
                          settings={"storage_policy": policy, "index_granularity": 128})
    df = spark.range(0, 5000, numPartitions=2).selectExpr("id", "concat('n', cast(id as string)) AS name")
    df.write.format("mergetree").mode("append").save(str(path))
    df.write.format("mergetree").mode("append").save(str(path))
    table = MergeTreeTable.open(path)
    assert not any(p.name.startswith("all_") for p in path.iterdir())  # parts live on the disks
    assert all(table.store.part_location(p.name).layout == layout for p in table.parts())
    assert table.optimize(final=True)
    assert spark.read.format("mergetree").load(str(path)).count() == 10000
    assert spark.read.format("mergetree").load(str(path)).filter("id BETWEEN 10 AND 19").count() == 20
    assert table.scrub().ok
    for i in range(tolerates):
        shutil.rmtree(tmp_path / f"disk{i}")
    lost = spark.read.format("mergetree").load(str(path))
    assert lost.selectExpr("count(*)", "sum(id)").first() == (10000, 2 * sum(range(5000)))


def test_columns_a_dataframe_leaves_out_get_their_defaults(spark, tmp_path: Path) -> None:
    # As ClickHouse's INSERT (id, s): DEFAULT and MATERIALIZED expressions computed, Nullable NULL.
    path = tmp_path / "defaults"
    MergeTreeTable.create(path, [("id", "UInt64"), ("s", "String"), ("doubled", "UInt64 MATERIALIZED id * 2"),
                                 ("at", "DateTime DEFAULT now()"), ("note", "Nullable(String)")], order_by="id")
    before = dt.datetime.now(dt.timezone.utc).replace(microsecond=0)
    spark.range(4).selectExpr("id", "cast(id as string) AS s").write.format("mergetree").mode("append").save(str(path))
    rows = MergeTreeTable.open(path).to_arrow().sort_by("id").to_pylist()
    assert [(r["id"], r["doubled"], r["note"]) for r in rows] == [(i, 2 * i, None) for i in range(4)]
    assert all(before <= r["at"] <= dt.datetime.now(dt.timezone.utc) for r in rows)
    with pytest.raises(Exception, match=r"non-nullable table columns \['s'\]"):
        spark.range(4).write.format("mergetree").mode("append").save(str(path))

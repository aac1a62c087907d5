"""Option parsing, type mapping and filter translation of the Spark connector (no SparkSession)."""

from __future__ import annotations

import datetime as dt
import decimal

import pyarrow as pa
import pytest
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DayTimeIntervalType,
    DecimalType,
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

from spark_mergetree.errors import InvalidOptionError, SchemaMismatchError
from spark_mergetree.expressions import predicate as p
from spark_mergetree.format.types import parse_type, to_arrow
from spark_mergetree.spark.filters import to_predicate
from spark_mergetree.spark.options import ReadOptions, WriteOptions
from spark_mergetree.spark.types import (
    check_writable,
    clickhouse_columns,
    conform_batch,
    spark_arrow_schema,
    spark_schema,
    spark_type,
)


def test_read_options_parse_and_reject() -> None:
    opts = ReadOptions.parse({"path": "/t", "columns": "a, b", "where": "a > 1", "target_rows": "1000"})
    assert opts.columns == ["a", "b"] and opts.where == "a > 1" and opts.target_rows == 1000
    with pytest.raises(InvalidOptionError, match="wher"):
        ReadOptions.parse({"path": "/t", "wher": "a > 1"})
    with pytest.raises(InvalidOptionError, match="target_rows"):
        ReadOptions.parse({"path": "/t", "target_rows": "many"})
    with pytest.raises(InvalidOptionError, match="pushdown"):
        ReadOptions.parse({"path": "/t", "pushdown": "maybe"})
    with pytest.raises(InvalidOptionError, match="needs a table"):
        ReadOptions.parse({})


def test_write_options_parse_and_reject() -> None:
    opts = WriteOptions.parse({"path": "/t", "order_by": "id", "codec": "zstd(3)", "index_granularity": "128",
                               "setting.min_bytes_for_wide_part": "0", "partition_overwrite_mode": "dynamic"},
                              overwrite=True)
    assert opts.settings == {"codec": "ZSTD(3)", "index_granularity": "128", "min_bytes_for_wide_part": "0"}
    assert opts.partition_overwrite_mode == "dynamic"
    with pytest.raises(InvalidOptionError, match="codec"):
        WriteOptions.parse({"path": "/t", "codec": "snappy"}, overwrite=False)
    with pytest.raises(InvalidOptionError, match="partition_overwrite_mode"):
        WriteOptions.parse({"path": "/t", "partition_overwrite_mode": "dynamic"}, overwrite=False)
    with pytest.raises(InvalidOptionError, match="partition_overwrite_mode"):
        WriteOptions.parse({"path": "/t", "partition_overwrite_mode": "sometimes"}, overwrite=True)
    with pytest.raises(InvalidOptionError, match="orderby"):
        WriteOptions.parse({"path": "/t", "orderby": "id"}, overwrite=False)


@pytest.mark.parametrize(("ch_type", "expected"), [
    ("UInt8", ShortType()), ("UInt32", LongType()), ("UInt64", DecimalType(20, 0)), ("Int32", IntegerType()),
    ("DateTime", TimestampType()), ("DateTime64(9, 'Asia/Tokyo')", TimestampType()),
    ("Decimal(76, 10)", StringType()), ("Int128", StringType()),
    ("Array(Nullable(Int32))", ArrayType(IntegerType(), True)),
    ("Map(String, UInt64)", MapType(StringType(), DecimalType(20, 0), False)),
    ("Tuple(a Int64, b String)", StructType([StructField("a", LongType(), False),
                                             StructField("b", StringType(), False)])),
    ("LowCardinality(Nullable(String))", StringType()), ("Enum8('a' = 1)", StringType()),
    ("IPv4", LongType()), ("IPv6", BinaryType()), ("BFloat16", FloatType()), ("Time", DayTimeIntervalType()),
    ("Time64(9)", DayTimeIntervalType()), ("JSON", StringType()), ("Nullable(JSON(a UInt32))", StringType()),
])
def test_clickhouse_to_spark_mapping(ch_type: str, expected: object) -> None:
    assert spark_type(to_arrow(parse_type(ch_type)), "c") == expected


def test_conform_batch_matches_spark_arrow_exactly() -> None:
    engine = pa.schema([pa.field("u", pa.uint64(), False), pa.field("t", pa.timestamp("s", tz="Asia/Tokyo")),
                        pa.field("big", pa.decimal256(39, 0))])
    batch = pa.RecordBatch.from_arrays(
        [pa.array([2**64 - 1, 0], pa.uint64()), pa.array([0, 86400], pa.timestamp("s", tz="Asia/Tokyo")),
         pa.array([decimal.Decimal(2**100), decimal.Decimal(-1)], pa.decimal256(39, 0))], schema=engine)
    target = spark_arrow_schema(spark_schema(engine))
    out = conform_batch(batch, target)
    assert out.schema.equals(target)
    assert out.column(0).to_pylist() == [decimal.Decimal(2**64 - 1), decimal.Decimal(0)]
    assert out.column(1).type == pa.timestamp("us", tz="UTC")
    assert out.column(2).to_pylist() == [str(2**100), "-1"]


def test_new_table_types_and_key_columns_not_nullable() -> None:
    schema = StructType([StructField("id", LongType(), True), StructField("name", StringType(), True),
                         StructField("ts", TimestampType(), True)])
    assert clickhouse_columns(schema, {"id"}) == [
        ("id", "Int64"), ("name", "Nullable(String)"), ("ts", "Nullable(DateTime64(6, 'UTC'))")]


def test_schema_mismatch_names_columns() -> None:
    table = pa.schema([pa.field("id", pa.int64(), False), pa.field("v", pa.float64(), True)])
    incoming = StructType([StructField("id", LongType()), StructField("extra", StringType())])
    with pytest.raises(SchemaMismatchError, match=r"\['extra'\].*merge_schema"):
        check_writable(table, incoming, merge_schema=False)
    assert check_writable(table, incoming, merge_schema=True) == ["extra"]
    with pytest.raises(SchemaMismatchError, match="'id'.*string"):
        check_writable(table, StructType([StructField("id", StringType())]), merge_schema=False)
    with pytest.raises(SchemaMismatchError, match=r"non-nullable.*\['id'\]"):
        check_writable(table, StructType([StructField("v", LongType())]), merge_schema=False)


def test_filters_translate_for_pruning_and_drop_what_is_unsafe() -> None:
    # PySpark 4.1+ (4.0 has no filters for Python sources; this module is collected there too).
    from pyspark.sql.datasource import (
        EqualTo,
        GreaterThan,
        In,
        IsNull,
        LessThanOrEqual,
        Not,
        StringContains,
        StringStartsWith,
    )

    schema = pa.schema([pa.field("id", pa.int64()), pa.field("s", pa.string()),
                        pa.field("t", pa.timestamp("us", tz="UTC"))])
    tree = to_predicate([GreaterThan(("id",), 3), In(("id",), [1, None, 2]), StringStartsWith(("s",), "ab"),
                         Not(IsNull(("s",))), LessThanOrEqual(("t",), dt.datetime(2024, 1, 1)),
                         EqualTo(("nested", "x"), 1), Not(StringContains(("id",), "1"))], schema)
    assert tree == p.And((
        p.Compare(">", p.Column("id"), p.Literal(3)),
        p.In(p.Column("id"), (p.Literal(1), p.Literal(2))),
        p.StartsWith(p.Column("s"), "ab"),
        p.IsNotNull(p.Column("s")),  # NOT is pushed to the leaves
    ))
    assert to_predicate([EqualTo(("id",), 2.5)], schema) is None


def test_float_filters_keep_sparks_nan_semantics() -> None:
    """Spark: NaN = NaN, NaN above every number; NOT (x <=> v) holds for NULL (tests/spark/
    test_pushdown_semantics.py checks the rows)."""
    from pyspark.sql.datasource import (
        EqualNullSafe,
        EqualTo,
        GreaterThan,
        GreaterThanOrEqual,
        In,
        LessThan,
        Not,
    )

    schema = pa.schema([pa.field("x", pa.float64()), pa.field("n", pa.int32())])
    x, nan = p.Column("x"), float("nan")

    def one(f):
        return to_predicate([f], schema)

    assert one(GreaterThan(("x",), 5.0)) == p.Or((p.Compare(">", x, p.Literal(5.0)), p.IsNaN(x)))
    assert one(Not(LessThan(("x",), 5.0))) == p.Or((p.Compare(">=", x, p.Literal(5.0)), p.IsNaN(x)))
    assert one(Not(GreaterThan(("x",), 5.0))) == p.Compare("<=", x, p.Literal(5.0))
    assert one(EqualTo(("x",), nan)) == p.IsNaN(x)
    assert one(GreaterThanOrEqual(("x",), nan)) == p.IsNaN(x)
    assert one(LessThan(("x",), nan)) is None
    assert one(In(("x",), [1.0, nan])) == p.Or((p.In(x, (p.Literal(1.0),)), p.IsNaN(x)))
    assert one(Not(In(("x",), [1.0, None]))) is None  # NOT IN with a NULL keeps no row
    assert one(Not(EqualNullSafe(("n",), 3))) == p.Or((p.Compare("!=", p.Column("n"), p.Literal(3)),
                                                       p.IsNull(p.Column("n"))))
    assert one(Not(EqualNullSafe(("n",), None))) == p.IsNotNull(p.Column("n"))
    assert one(Not(Not(GreaterThan(("n",), 3)))) == p.Compare(">", p.Column("n"), p.Literal(3))


def test_nanosecond_timestamps_truncate_to_microseconds() -> None:
    engine = pa.schema([pa.field("t", pa.timestamp("ns", tz="UTC"))])
    batch = pa.RecordBatch.from_arrays([pa.array([1_000_000_001_999, -1], pa.timestamp("ns", tz="UTC"))],
                                       schema=engine)
    out = conform_batch(batch, spark_arrow_schema(spark_schema(engine)))
    assert out.column(0).cast(pa.int64()).to_pylist() == [1_000_000_001, 0]


def test_time_columns_reach_spark_as_intervals() -> None:
    """Time64(9) ticks become Spark's microsecond intervals (truncated like DateTime64(9)); negative
    and beyond-a-day values, which ClickHouse's Time holds, stay what they are."""
    engine = pa.schema([pa.field("t", to_arrow(parse_type("Time"))), pa.field("n", to_arrow(parse_type("Time64(9)")))])
    batch = pa.RecordBatch.from_arrays([pa.array([-3599999, 90000], engine.field("t").type),
                                        pa.array([-1_500, 3_599_999_999_999_999], engine.field("n").type)], schema=engine)
    out = conform_batch(batch, spark_arrow_schema(spark_schema(engine)))
    assert out.column(0).to_pylist() == [dt.timedelta(seconds=-3599999), dt.timedelta(hours=25)]
    assert out.column(1).to_pylist() == [dt.timedelta(microseconds=-1), dt.timedelta(seconds=3599999, microseconds=999999)]

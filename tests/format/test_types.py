"""Type text ↔ DataType ↔ Arrow, checked against the columns.txt ClickHouse (chdb) writes."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_mergetree.errors import FormatError, SchemaMismatchError, UnsupportedError
from spark_mergetree.format.types import (
    Array,
    DateTime,
    DateTime64,
    Decimal,
    Enum,
    FixedString,
    LowCardinality,
    Map,
    Nullable,
    Primitive,
    Tuple,
    from_arrow,
    parse_type,
    to_arrow,
    to_arrow_field,
)
from tests.format.chdb_util import close_session, make_chdb_table, part_dirs

# What we write in CREATE TABLE → what ClickHouse writes in columns.txt.
SPELLINGS = {
    "UInt8": "UInt8", "UInt16": "UInt16", "UInt32": "UInt32", "UInt64": "UInt64", "UInt128": "UInt128",
    "Int8": "Int8", "Int16": "Int16", "Int32": "Int32", "Int64": "Int64", "Int128": "Int128",
    "Float32": "Float32", "Float64": "Float64", "Bool": "Bool", "BOOLEAN": "Bool", "String": "String",
    "FixedString(7)": "FixedString(7)", "Date": "Date", "Date32": "Date32", "DateTime": "DateTime",
    "DateTime('Europe/Moscow')": "DateTime('Europe/Moscow')", "DateTime64(3)": "DateTime64(3)",
    "DateTime64(6,'UTC')": "DateTime64(6, 'UTC')", "DateTime64(9, 'America/New_York')": "DateTime64(9, 'America/New_York')",
    "Decimal(10,2)": "Decimal(10, 2)", "Decimal(38, 0)": "Decimal(38, 0)", "Decimal32(3)": "Decimal(9, 3)",
    "Decimal64(5)": "Decimal(18, 5)", "Decimal128(20)": "Decimal(38, 20)", "Decimal(5)": "Decimal(5, 0)",
    "UUID": "UUID", "IPv4": "IPv4", "IPv6": "IPv6", "BFloat16": "BFloat16", "Time": "Time", "Time64(3)": "Time64(3)",
    "Time64( 9 )": "Time64(9)", "Point": "Point", "Ring": "Ring", "LineString": "LineString",
    "Polygon": "Polygon", "MultiLineString": "MultiLineString", "MultiPolygon": "MultiPolygon",
    "SimpleAggregateFunction(sum,UInt64)": "SimpleAggregateFunction(sum, UInt64)", "Nullable(String)": "Nullable(String)", "Array(Nullable(String))": "Array(Nullable(String))",
    "Array(Array(UInt8))": "Array(Array(UInt8))", "Map(String,UInt64)": "Map(String, UInt64)",
    "Map(LowCardinality(String), Array(Nullable(Int32)))": "Map(LowCardinality(String), Array(Nullable(Int32)))",
    "Tuple(a UInt8, b String)": "Tuple(a UInt8, b String)", "Tuple(UInt8, String)": "Tuple(UInt8, String)",
    "Tuple(`x y` Int8, z Tuple(q Date))": "Tuple(`x y` Int8, z Tuple(q Date))",
    "LowCardinality(String)": "LowCardinality(String)",
    "LowCardinality(Nullable(String))": "LowCardinality(Nullable(String))",
    "Enum8('a' = 1, 'b' = -2)": "Enum8('b' = -2, 'a' = 1)", "Enum16('it''s' = 300)": "Enum16('it\\'s' = 300)",
}


@pytest.fixture(scope="module")
def columns_txt(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("types")
    columns = ", ".join(f"c{i} {t}" for i, t in enumerate(SPELLINGS))
    _, table_dir = make_chdb_table(
        tmp, f"CREATE TABLE t (id UInt64, {columns}) ENGINE = MergeTree ORDER BY id "
             "SETTINGS min_bytes_for_wide_part = 0, min_rows_for_wide_part = 0",
        ["INSERT INTO t (id) VALUES (1)"])
    lines = (part_dirs(table_dir)[0] / "columns.txt").read_text().splitlines()[3:]
    close_session()
    return {line.split("`")[1]: line.split("` ", 1)[1] for line in lines}


@pytest.mark.parametrize("index,spelling", list(enumerate(SPELLINGS)))
def test_canonical_text_matches_clickhouse(columns_txt, index, spelling):
    written = columns_txt[f"c{index}"]
    assert written == SPELLINGS[spelling]
    assert parse_type(spelling).to_clickhouse() == written
    assert parse_type(written).to_clickhouse() == written


def test_tree_shape():
    assert parse_type("Array(Nullable(String))") == Array(Nullable(Primitive("String")))
    assert parse_type("Map(String, Tuple(a Int8, b DateTime64(3, 'UTC')))") == Map(
        Primitive("String"), Tuple((Primitive("Int8"), DateTime64(3, "UTC")), ("a", "b")))
    assert parse_type("Tuple(String, UInt8)").element_names == ("1", "2")
    assert parse_type("Decimal128(4)") == Decimal(38, 4)
    assert parse_type("Enum8('a' = 1)") == Enum(8, (("a", 1),))
    assert parse_type("LowCardinality(Nullable(FixedString(2)))") == LowCardinality(Nullable(FixedString(2)))


@pytest.mark.parametrize("text,error", [
    ("", FormatError), ("Array(", FormatError), ("Array(UInt8", FormatError), ("UInt8)", FormatError),
    ("Nullable(Array(UInt8))", FormatError), ("FixedString(0)", FormatError), ("DateTime64(12)", FormatError),
    ("Decimal(80, 2)", FormatError), ("Enum8('a' = 300)", FormatError), ("Object('json')", UnsupportedError),
    ("Int7", UnsupportedError), ("Tuple(a UInt8, String)", FormatError), ("String $", FormatError),
])
def test_bad_type_text(text, error):
    with pytest.raises(error):
        parse_type(text)


ARROW = {
    "UInt64": pa.uint64(), "Int8": pa.int8(), "Float32": pa.float32(), "Bool": pa.bool_(), "String": pa.string(),
    "FixedString(3)": pa.binary(3), "Date": pa.date32(), "Date32": pa.date32(), "UUID": pa.string(),
    "DateTime": pa.timestamp("s", "UTC"), "DateTime('Asia/Tokyo')": pa.timestamp("s", "Asia/Tokyo"),
    "DateTime64(3)": pa.timestamp("ms", "UTC"), "DateTime64(6, 'UTC')": pa.timestamp("us", "UTC"),
    "DateTime64(9)": pa.timestamp("ns", "UTC"), "DateTime64(2)": pa.timestamp("ms", "UTC"),
    "DateTime64(4)": pa.timestamp("us", "UTC"), "DateTime64(0)": pa.timestamp("s", "UTC"),
    "Decimal(10, 2)": pa.decimal128(10, 2), "Decimal(50, 2)": pa.decimal256(50, 2),
    "Int128": pa.decimal256(39, 0), "UInt128": pa.decimal256(39, 0), "Enum8('a' = 1)": pa.string(),
    "Nullable(Int32)": pa.int32(), "LowCardinality(Nullable(String))": pa.string(),
    "Array(Nullable(Int64))": pa.list_(pa.field("item", pa.int64(), nullable=True)),
    "Array(String)": pa.list_(pa.field("item", pa.string(), nullable=False)),
    "Map(String, Nullable(UInt8))": pa.map_(pa.field("key", pa.string(), nullable=False),
                                           pa.field("value", pa.uint8(), nullable=True)),
    "Tuple(a UInt8, b Nullable(String))": pa.struct([pa.field("a", pa.uint8(), nullable=False),
                                                     pa.field("b", pa.string(), nullable=True)]),
}


@pytest.mark.parametrize("text", list(ARROW))
def test_to_arrow(text):
    assert to_arrow(parse_type(text)) == ARROW[text]


def test_field_nullability():
    assert to_arrow_field("x", parse_type("Nullable(UInt8)")).nullable
    assert to_arrow_field("x", parse_type("LowCardinality(Nullable(String))")).nullable
    assert not to_arrow_field("x", parse_type("Array(Nullable(UInt8))")).nullable


@pytest.mark.parametrize("arrow,nullable,expected", [
    (pa.int64(), False, "Int64"), (pa.int64(), True, "Nullable(Int64)"), (pa.int32(), False, "Int32"),
    (pa.string(), True, "Nullable(String)"), (pa.large_string(), False, "String"), (pa.binary(), False, "String"),
    (pa.bool_(), False, "Bool"), (pa.float64(), False, "Float64"), (pa.date32(), False, "Date32"),
    (pa.timestamp("us", "UTC"), False, "DateTime64(6, 'UTC')"), (pa.timestamp("us"), False, "DateTime64(6, 'UTC')"),
    (pa.timestamp("ms", "Europe/Paris"), True, "Nullable(DateTime64(3, 'Europe/Paris'))"),
    (pa.decimal128(12, 3), False, "Decimal(12, 3)"), (pa.binary(16), False, "FixedString(16)"),
    (pa.list_(pa.field("e", pa.int64(), True)), True, "Array(Nullable(Int64))"),
    (pa.list_(pa.field("e", pa.int64(), False)), True, "Array(Int64)"),
    (pa.map_(pa.string(), pa.int32()), True, "Map(String, Nullable(Int32))"),
    (pa.struct([pa.field("a", pa.int16(), False), pa.field("b", pa.string())]), False,
     "Tuple(a Int16, b Nullable(String))"),
    (pa.dictionary(pa.int32(), pa.string()), False, "LowCardinality(String)"),
    (pa.dictionary(pa.int32(), pa.string()), True, "LowCardinality(Nullable(String))"),
    (pa.uuid(), True, "Nullable(UUID)"), (pa.string_view(), False, "String"),
    (pa.list_view(pa.field("e", pa.int8(), False)), False, "Array(Int8)"),
])
def test_from_arrow(arrow, nullable, expected):
    assert from_arrow(arrow, nullable).to_clickhouse() == expected


def test_from_arrow_without_nullable_scalars():
    struct = pa.struct([pa.field("b", pa.string(), True)])
    assert from_arrow(pa.int64(), True, nullable_scalars=False) == Primitive("Int64")
    assert from_arrow(struct, True, nullable_scalars=False).to_clickhouse() == "Tuple(b String)"
    with pytest.raises(SchemaMismatchError, match="duration"):
        from_arrow(pa.duration("s"))


def _types(depth: int = 3) -> st.SearchStrategy:
    scalars = st.sampled_from([
        Primitive(n) for n in ("UInt8", "Int64", "Float64", "Bool", "String", "Date", "Date32", "UUID", "Int128")
    ]) | st.integers(1, 9).map(FixedString) | st.sampled_from([DateTime(None), DateTime("UTC"), DateTime64(3),
                                                              DateTime64(9, "Asia/Tokyo"), Decimal(20, 4)])
    nullable_scalars = scalars | scalars.map(Nullable)
    leaves = nullable_scalars | st.sampled_from([LowCardinality(Primitive("String")),
                                                 LowCardinality(Nullable(Primitive("String")))])
    if depth == 0:
        return leaves
    inner = _types(depth - 1)
    names = st.lists(st.from_regex(r"[a-z_][a-z0-9_]{0,5}", fullmatch=True), min_size=1, max_size=3, unique=True)
    tuples = names.flatmap(lambda ns: st.tuples(*[inner for _ in ns]).map(lambda es: Tuple(tuple(es), tuple(ns))))
    return leaves | inner.map(Array) | st.tuples(scalars, inner).map(lambda kv: Map(*kv)) | tuples | \
        st.lists(inner, min_size=1, max_size=3).map(lambda es: Tuple(tuple(es)))


@settings(max_examples=200, deadline=None)
@given(_types())
def test_text_round_trip(dt):
    assert parse_type(dt.to_clickhouse()) == dt
    assert from_arrow(to_arrow(dt)) is not None

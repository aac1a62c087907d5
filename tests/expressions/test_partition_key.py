"""Partition keys: result types, row grouping and partition ids exactly as ClickHouse computes them."""

from __future__ import annotations

import datetime as dt
import decimal
import itertools
import uuid

import pyarrow as pa
import pytest

from spark_mergetree.errors import ExpressionError, UnsupportedError
from spark_mergetree.expressions.partition_key import PartitionKey
from spark_mergetree.format.siphash import siphash128_clickhouse

UTC = dt.timezone.utc


def test_siphash_matches_clickhouse_sipHash128(clickhouse):
    samples = [b"", b"a", b"abcdefg", b"abcdefgh", b"abcdefghi", bytes(range(200))]
    for data in samples:
        expected = clickhouse.query(f"SELECT lower(hex(sipHash128(unhex('{data.hex()}'))))").strip()
        assert siphash128_clickhouse(data).hex() == expected


# (case name, columns with ClickHouse types, PARTITION BY, Arrow columns of the rows)
CASES = [
    ("month", {"d": "Date"}, "toYYYYMM(d)",
     {"d": pa.array([dt.date(2024, 1, 5), dt.date(2024, 1, 31), dt.date(2024, 2, 1), dt.date(1999, 12, 31)])}),
    ("day_and_int", {"d": "Date", "x": "Int16"}, "(toYYYYMMDD(d), x)",
     {"d": pa.array([dt.date(2024, 1, 5), dt.date(2024, 1, 5), dt.date(2024, 1, 6)]), "x": pa.array([-5, 3, -5], pa.int16())}),
    ("monday", {"d": "Date32"}, "toMonday(d)",
     {"d": pa.array([dt.date(2024, 1, 1), dt.date(2024, 1, 7), dt.date(2024, 1, 8), dt.date(1960, 6, 15)])}),
    ("start_of_month", {"t": "DateTime"}, "toStartOfMonth(t)",
     {"t": pa.array([dt.datetime(2024, 1, 31, 23, 59, 59, tzinfo=UTC), dt.datetime(2024, 2, 1, tzinfo=UTC)],
                    pa.timestamp("s", "UTC"))}),
    ("date_in_zone", {"t": "DateTime('Asia/Tokyo')"}, "toDate(t)",
     {"t": pa.array([dt.datetime(2024, 1, 14, 14, 59, tzinfo=UTC), dt.datetime(2024, 1, 14, 15, 0, tzinfo=UTC)],
                    pa.timestamp("s", "UTC"))}),
    ("datetime64", {"t": "DateTime64(3, 'UTC')"}, "toYYYYMM(t)",
     {"t": pa.array([dt.datetime(1969, 12, 31, 23, 59, 59, 999000, tzinfo=UTC), dt.datetime(1970, 1, 1, tzinfo=UTC)],
                    pa.timestamp("ms", "UTC"))}),
    ("int_div", {"x": "Int32"}, "intDiv(x, 10)", {"x": pa.array([-75, -5, 0, 5, 75, 79], pa.int32())}),
    ("modulo_signed", {"x": "Int64"}, "x % 4", {"x": pa.array([-7, -4, 0, 3, 7, 9], pa.int64())}),
    ("modulo_function", {"x": "UInt64"}, "modulo(x, 300)", {"x": pa.array([1, 299, 300, 1000], pa.uint64())}),
    ("string", {"s": "String"}, "s", {"s": pa.array(["abc", "", "ünï", "abc"])}),
    ("nullable_string", {"s": "Nullable(String)"}, "s", {"s": pa.array(["a", None, "b", None])}),
    ("nullable_int", {"x": "Nullable(Int64)"}, "x", {"x": pa.array([7, None, -1], pa.int64())}),
    ("uuid", {"u": "UUID"}, "u",
     {"u": pa.array(["00112233-4455-6677-8899-aabbccddeeff", "6f1d2a8e-0000-4000-8000-000000000001"])}),
    ("tuple_with_string", {"x": "Int64", "s": "String"}, "(x % 4, s)",
     {"x": pa.array([-7, 1, 5], pa.int64()), "s": pa.array(["q", "q", "q"])}),
    ("decimal", {"p": "Decimal(10, 2)"}, "p", {"p": pa.array([decimal.Decimal("1.25"), decimal.Decimal("-3.5")], pa.decimal128(10, 2))}),
    ("bool_and_enum", {"b": "Bool", "e": "Enum8('a' = 1, 'b' = -2)"}, "(b, e)",
     {"b": pa.array([True, False, True]), "e": pa.array(["a", "b", "b"])}),
    ("low_cardinality", {"s": "LowCardinality(String)"}, "s", {"s": pa.array(["x", "y", "x"]).dictionary_encode()}),
    ("fixed_string", {"f": "FixedString(3)"}, "f", {"f": pa.array([b"ab\0", b"abc"], pa.binary(3))}),
    ("datetime_value", {"t": "DateTime"}, "t",
     {"t": pa.array([dt.datetime(2024, 1, 15, 10, tzinfo=UTC)], pa.timestamp("s", "UTC"))}),
    ("datetime64_value", {"t": "DateTime64(3)"}, "t",
     {"t": pa.array([dt.datetime(2024, 1, 15, 10, 0, 0, 500000, tzinfo=UTC)], pa.timestamp("ms", "UTC"))}),
    ("ipv4", {"ip": "IPv4"}, "ip", {"ip": pa.array([16909060, 1], pa.uint32())}),
    ("unpartitioned", {"x": "UInt8"}, None, {"x": pa.array([1, 2], pa.uint8())}),
    ("year", {"d": "Date"}, "toYear(d)",
     {"d": pa.array([dt.date(1992, 1, 2), dt.date(1992, 12, 31), dt.date(1998, 8, 2)])}),
    ("year_of_datetime_in_zone", {"t": "DateTime('America/New_York')"}, "toYear(t)",
     {"t": pa.array([dt.datetime(2024, 1, 1, 3, tzinfo=UTC), dt.datetime(2024, 1, 1, 6, tzinfo=UTC)],
                    pa.timestamp("s", "UTC"))}),
    ("start_of_year_quarter_week", {"d": "Date32"}, "(toStartOfYear(d), toStartOfQuarter(d), toStartOfWeek(d))",
     {"d": pa.array([dt.date(2024, 3, 31), dt.date(2024, 4, 1), dt.date(2024, 4, 6), dt.date(2024, 4, 7)])}),
    ("quarter_and_month", {"d": "Date"}, "(toYear(d), toQuarter(d), toMonth(d))",
     {"d": pa.array([dt.date(2023, 12, 31), dt.date(2024, 1, 1), dt.date(2024, 5, 17)])}),
    ("int_hash_modulo", {"user": "UInt64"}, "intHash32(user) % 8",
     {"user": pa.array(list(range(20)) + [2**64 - 1], pa.uint64())}),
    ("int_hash_of_signed_in_tuple", {"x": "Int32", "d": "Date"}, "(toYYYYMM(d), intHash32(x) % 3)",
     {"x": pa.array([-7, -1, 0, 5, 1000], pa.int32()), "d": pa.array([dt.date(2024, 1, 5)] * 5)}),
]


def _insert_values(arrays: dict[str, pa.Array], types: dict[str, str]) -> str:
    rows = []
    for row in range(len(next(iter(arrays.values())))):
        values = []
        for name, array in arrays.items():
            value = array[row].as_py()
            if value is None:
                values.append("NULL")
            elif isinstance(value, bool):
                values.append("true" if value else "false")
            elif isinstance(value, dt.datetime):
                ticks = value.timestamp()
                values.append(f"toDateTime64({ticks!r}, 3, 'UTC')" if "64" in types[name] else f"toDateTime({int(ticks)}, 'UTC')")
            elif isinstance(value, dt.date):
                values.append(f"'{value.isoformat()}'")
            elif isinstance(value, bytes):
                values.append(f"unhex('{value.hex()}')")
            elif isinstance(value, (str, decimal.Decimal)):
                values.append(f"'{value}'")
            else:
                values.append(str(value))
        rows.append("(" + ", ".join(values) + ")")
    return ", ".join(rows)


@pytest.mark.parametrize("case", CASES, ids=[case[0] for case in CASES])
def test_groups_and_ids_match_clickhouse_parts(clickhouse, case):
    name, types, expression, arrays = case
    columns = ", ".join(f"`{column}` {type_text}" for column, type_text in types.items())
    partition = f"PARTITION BY {expression}" if expression else ""
    clickhouse.query(f"CREATE TABLE db.{name} ({columns}) ENGINE = MergeTree {partition} ORDER BY tuple() "
                     "SETTINGS allow_nullable_key = 1")
    clickhouse.query(f"SYSTEM STOP MERGES db.{name}")
    clickhouse.query(f"INSERT INTO db.{name} VALUES {_insert_values(arrays, types)}")
    expected = sorted(
        (partition_id, int(rows))
        for partition_id, rows in clickhouse.rows(
            f"SELECT partition_id, rows FROM system.parts WHERE database = 'db' AND table = '{name}' AND active")
    )
    key = PartitionKey.parse(expression, types)
    groups = key.group_rows(pa.table(arrays))
    assert sorted((group.partition_id, len(group.row_indices)) for group in groups) == expected
    # Every row sits in exactly one group.
    all_rows = sorted(int(row) for group in groups for row in group.row_indices)
    assert all_rows == list(range(len(next(iter(arrays.values())))))


_TABLE_NUMBERS = itertools.count()


def _binary_width(type_text: str) -> int:
    widths = {"UInt8": 1, "Int8": 1, "Bool": 1, "UInt16": 2, "Int16": 2, "Date": 2, "UInt32": 4, "Int32": 4,
              "Date32": 4, "DateTime": 4, "UInt64": 8, "Int64": 8}
    if type_text.startswith("Nullable("):
        return 1 + widths[type_text[len("Nullable("):-1]]
    return widths[type_text]


@pytest.mark.parametrize(
    ("types", "expression"),
    [
        ({"d": "Date"}, "toYYYYMM(d)"),
        ({"d": "Date32"}, "(toYYYYMMDD(d), toDate(d), toMonday(d), toStartOfMonth(d))"),
        ({"t": "DateTime64(3)"}, "(toYYYYMM(t), toDate(t))"),
        ({"x": "UInt64"}, "(x % 4, x % 300, x % 70000, intDiv(x, 3))"),
        ({"x": "Int8"}, "(x % 4, x % 300, intDiv(x, 300), intDiv(x, -3))"),
        ({"x": "UInt16"}, "(modulo(x, 7), intDiv(x, -3))"),
        ({"x": "Nullable(Int32)"}, "(x % 4, intDiv(x, 2))"),
        ({"d": "Nullable(Date)"}, "toYYYYMM(d)"),
        ({"d": "Date"}, "(toYear(d), toQuarter(d), toMonth(d), toStartOfYear(d), toStartOfQuarter(d))"),
        ({"d": "Date32"}, "toStartOfWeek(d)"),
        ({"x": "Int64"}, "(intHash32(x), intHash32(x) % 16, intHash32(x) % 1000)"),
    ],
)
def test_result_types_match_partition_dat(clickhouse, types, expression):
    """partition.dat holds each value in the key's result type: its size pins the widths down."""
    key = PartitionKey.parse(expression, types)
    name = f"types_{next(_TABLE_NUMBERS)}"
    columns = ", ".join(f"`{column}` {type_text}" for column, type_text in types.items())
    clickhouse.query(f"CREATE TABLE db.{name} ({columns}) ENGINE = MergeTree PARTITION BY {expression} ORDER BY tuple() "
                     "SETTINGS allow_nullable_key = 1")
    clickhouse.query(f"INSERT INTO db.{name} SELECT * FROM generateRandom('{columns}', 1) LIMIT 1")
    part = clickhouse.query(f"SELECT path FROM system.parts WHERE database = 'db' AND table = '{name}'").strip()
    size = len(open(f"{part}/partition.dat", "rb").read())
    assert size == sum(_binary_width(t) for t in key.result_types)
    # ClickHouse's own toTypeName agrees, once modulo is spelled moduloLegacy as keys evaluate it.
    elements = _split_top(expression[1:-1] if expression.startswith("(") else expression)
    type_names = ", ".join(f"toTypeName({_as_select(element)})" for element in elements)
    shown = clickhouse.query(f"SELECT {type_names} FROM db.{name}").strip().split("\t")
    assert tuple(shown) == key.result_types
    assert key.columns == tuple(types)


def _as_select(element: str) -> str:
    if "%" in element:
        dividend, divisor = element.split("%")
        return f"moduloLegacy({dividend.strip()}, {divisor.strip()})"
    return element.replace("modulo(", "moduloLegacy(")


def _split_top(text: str) -> list[str]:
    parts, depth, current = [], 0, ""
    for char in text:
        if char == "," and depth == 0:
            parts.append(current.strip())
            current = ""
            continue
        depth += char == "("
        depth -= char == ")"
        current += char
    return parts + [current.strip()]


def test_partition_id_rules():
    key = PartitionKey.parse("(toYYYYMM(d), x)", {"d": "Date", "x": "Int64"})
    assert key.partition_id((202401, -5)) == "202401--5"
    assert PartitionKey.parse("d", {"d": "Date"}).partition_id((dt.date(2024, 1, 15),)) == "20240115"
    assert PartitionKey.parse("d", {"d": "Date"}).partition_id((19737,)) == "20240115"
    assert PartitionKey.parse(None, {}).partition_id(()) == "all"
    assert PartitionKey.parse("tuple()", {"x": "UInt8"}).is_partitioned is False
    by_uuid = PartitionKey.parse("u", {"u": "UUID"})
    text = "00112233-4455-6677-8899-aabbccddeeff"
    assert by_uuid.partition_id((text,)) == by_uuid.partition_id((uuid.UUID(text),)) == "2462615b0a052003f1dfc9e6cda040a3"


def test_columns_and_evaluation():
    key = PartitionKey.parse("(intDiv(b, 10), toYYYYMM(a), b % 3)", {"a": "Date", "b": "Int32", "c": "String"})
    assert key.columns == ("b", "a")
    assert key.result_types == ("Int32", "UInt32", "Int8")
    values = key.evaluate(pa.table({"a": pa.array([dt.date(2024, 3, 1)]), "b": pa.array([-25], pa.int32())}))
    assert [v.to_pylist() for v in values] == [[-2], [202403], [-1]]
    assert [v.type for v in values] == [pa.int32(), pa.uint32(), pa.int8()]


@pytest.mark.parametrize(
    ("expression", "types", "error", "message"),
    [
        ("f", {"f": "Float64"}, ExpressionError, "floating point"),
        ("sipHash64(s)", {"s": "String"}, UnsupportedError, "not supported"),
        ("toYYYYMM(s)", {"s": "String"}, UnsupportedError, "toYYYYMM"),
        ("intDiv(x, y)", {"x": "Int32", "y": "Int32"}, UnsupportedError, "integer constant"),
        ("toYYYYMM(nope)", {"d": "Date"}, ExpressionError, "unknown column 'nope'"),
        ("x % 0", {"x": "Int32"}, ExpressionError, "non-zero"),
    ],
)
def test_unsupported_keys_are_refused_by_name(expression, types, error, message):
    with pytest.raises(error, match=message):
        PartitionKey.parse(expression, types)


def test_wrong_values_are_refused():
    key = PartitionKey.parse("(d, s)", {"d": "Date", "s": "String"})
    with pytest.raises(ExpressionError, match="2 values"):
        key.partition_id((1,))
    with pytest.raises(ExpressionError, match="NULL"):
        key.partition_id((None, "x"))


@pytest.mark.parametrize("function", ["toDate", "toMonday", "toStartOfMonth", "toYYYYMM", "toYYYYMMDD", "toYear",
                                      "toQuarter", "toMonth", "toStartOfYear", "toStartOfQuarter", "toStartOfWeek"])
def test_date_functions_at_the_edges_match_clickhouse(clickhouse, function):
    from spark_mergetree.expressions.functions import apply_function

    days = [-25553, -3487, 0, 1, 4, 65535, 84000]  # 1900, 1960, epoch, its first Monday, 2149, 2200
    ours = apply_function(function, pa.array(days, pa.int32()).cast(pa.date32()), "Date32").to_pylist()
    values = ", ".join(f"toDate32({d}::Int32)" for d in days)
    theirs = clickhouse.query(f"SELECT arrayJoin([{values}]) AS d, {function}(d)").splitlines()
    assert [str(v) for v in ours] == [line.split("\t")[1] for line in theirs]
    stamps = [-86401, -1, 0, 86399 * 3]
    ours64 = apply_function(function, pa.array(stamps, pa.timestamp("s", "UTC")), "DateTime64(3, 'UTC')").to_pylist()
    values64 = ", ".join(f"toDateTime64({s}, 3, 'UTC')" for s in stamps)
    theirs64 = clickhouse.query(f"SELECT arrayJoin([{values64}]) AS t, {function}(t)").splitlines()
    assert [str(v) for v in ours64] == [line.split("\t")[1] for line in theirs64]

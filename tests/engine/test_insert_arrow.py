"""Inserting Arrow as users hand it: ClickHouse's own Arrow, every lossless representation, and a
clear refusal (column, Arrow type, ClickHouse type) for every lossy one.

The oracle is ClickHouse (chdb): it exports a table of every common type as Arrow, we insert that
Arrow into our table, ClickHouse attaches our parts and must SELECT exactly what it exported.
Other representations of the same values must then read back exactly as that insert does.
"""

from __future__ import annotations

import decimal
from pathlib import Path

import pyarrow as pa
import pytest

from spark_mergetree import MergeTreeTable
from spark_mergetree.errors import SchemaMismatchError
from spark_mergetree.format.types import Array, Tuple, parse_type, to_arrow
from tests.format.chdb_util import close_session, make_chdb_table
from tests.format.test_part_interop import _attach_and_check
from tests.format.test_serialization import COLUMNS

ROWS = 40
EXTRA_COLUMNS = [
    ("i256", "Int256", "toInt256(number) * toInt256('-123456789012345678901234567890123456789012345678901234567890123456789')"),
    ("u256", "UInt256", "toUInt256(number) * toUInt256('123456789012345678901234567890123456789012345678901234567890123456789')"),
    ("dec76", "Decimal(76, 20)", "toDecimal256('-12345678901234567890123456789012345678901234567890.5', 20) + number"),
    ("dtn", "Nullable(DateTime)", "if(number % 3 = 0, NULL, toDateTime(number * 1000, 'UTC'))"),
    ("uidn", "Nullable(UUID)", "if(number % 2 = 0, NULL, generateUUIDv4(number))"),
    ("e8n", "Nullable(Enum8('p' = 5, 'q' = -5))", "if(number % 2 = 0, NULL, ['p', 'q'][number % 4 DIV 2 + 1])"),
]
ALL_COLUMNS = [("id", "UInt64", "number")] + COLUMNS + EXTRA_COLUMNS
SCHEMA = [(name, type_text) for name, type_text, _ in ALL_COLUMNS]


def _columns_sql() -> str:
    return ", ".join(f"`{name}` {type_text}" for name, type_text in SCHEMA)


def _tsv(sess, sql: str) -> str:
    return sess.query(sql, "TabSeparated").bytes().decode()


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """ClickHouse's table, its Arrow export (`ArrowTable`), its SELECT text, and our table made from that Arrow."""
    tmp = tmp_path_factory.mktemp("arrow-insert")
    exprs = ", ".join(expr for _, _, expr in ALL_COLUMNS)
    sess, _ = make_chdb_table(
        tmp, f"CREATE TABLE src ({_columns_sql()}) ENGINE = MergeTree ORDER BY id",
        [f"INSERT INTO src SELECT {exprs} FROM numbers({ROWS})"])
    arrow = sess.query("SELECT * FROM src ORDER BY id", "ArrowTable")
    ours = MergeTreeTable.create(tmp / "ours", SCHEMA, order_by="id",
                                 settings={"index_granularity": 8, "auto_merge": False})
    ours.insert(arrow)
    yield {"session": sess, "arrow": arrow, "ours": ours, "tmp": tmp,
           "expected": _tsv(sess, "SELECT * FROM src ORDER BY id")}
    close_session()


def test_clickhouse_arrow_inserts_and_clickhouse_reads_it_back(exported):
    arrow = exported["arrow"]
    # What ClickHouse exports and what used to be refused: DateTime as uint32, UUID as arrow.uuid.
    assert arrow.schema.field("dt").type == pa.uint32()
    assert arrow.schema.field("uid").type.extension_name == "arrow.uuid"
    sess = exported["session"]
    sess.query(f"CREATE TABLE back ({_columns_sql()}) ENGINE = MergeTree ORDER BY id")
    back_dir = Path(sess.query("SELECT data_paths[1] FROM system.tables WHERE name = 'back'",
                               "TabSeparatedRaw").bytes().decode().strip())
    _attach_and_check(sess, "back", back_dir, exported["ours"])
    assert _tsv(sess, "SELECT * FROM back ORDER BY id") == exported["expected"]


def _column_variants(array: pa.ChunkedArray, type_text: str) -> list[pa.ChunkedArray]:
    """Other lossless Arrow representations of the same values (top level)."""
    t = array.type
    out = []
    if pa.types.is_string(t):
        out += [array.cast(pa.large_string()), array.cast(pa.string_view()), array.dictionary_encode(),
                array.cast(pa.binary())]
    elif isinstance(t, pa.BaseExtensionType) and t.extension_name == "arrow.uuid":
        out += [pa.chunked_array([c.storage for c in array.chunks])]
    elif pa.types.is_uint32(t):  # DateTime (and UInt32)
        out += [array.cast(pa.int64()), array.dictionary_encode()]
    elif pa.types.is_timestamp(t):
        out += [array.cast(pa.timestamp("ns", tz="America/New_York")), array.cast(pa.timestamp("ns"))]
    elif pa.types.is_decimal(t) and t.precision < 76:
        out += [array.cast(pa.decimal256(76, t.scale))]
    elif pa.types.is_list(t):
        out += [array.cast(pa.large_list(t.value_field)),
                pa.chunked_array([pa.ListViewArray.from_arrays(c.offsets[:-1], c.value_lengths().fill_null(0),
                                                               c.values, mask=c.is_null()) for c in array.chunks])]
    elif pa.types.is_fixed_size_binary(t) and "FixedString" in type_text:
        out += [array.cast(pa.binary())]
    elif pa.types.is_int8(t) or pa.types.is_int16(t):  # Enum values, or small integers made wider
        out += [array.cast(pa.int64())]
    elif pa.types.is_date32(t):
        out += [array.cast(pa.date64())]
    return out


def test_other_lossless_representations_read_back_the_same(exported, tmp_path):
    arrow, expected = exported["arrow"], exported["ours"].to_arrow()
    variants = {name: _column_variants(arrow.column(name), type_text) for name, type_text in SCHEMA}
    for round_number in range(max(len(v) for v in variants.values())):
        columns = {name: (v[round_number] if round_number < len(v) else arrow.column(name))
                   for name, v in variants.items()}
        data = pa.table(columns)
        table = MergeTreeTable.create(tmp_path / f"t{round_number}", SCHEMA, order_by="id",
                                      settings={"index_granularity": 8, "auto_merge": False})
        table.insert(data)
        got = table.to_arrow()
        for name in expected.column_names:
            assert got.column(name).equals(expected.column(name)), (round_number, name, data.schema.field(name).type)


ACCEPTED = [
    # (ClickHouse type, input, the same values in the type reads return)
    ("Int64", pa.array([-3, 7], pa.int8()), [-3, 7]),
    ("UInt64", pa.array([0, 65535], pa.uint16()), [0, 65535]),
    ("Int32", pa.array([1.0, -2.0]), [1, -2]),
    ("Float64", pa.array([2**53, -5], pa.int64()), [2.0**53, -5.0]),
    ("Bool", pa.array([0, 1], pa.int8()), [False, True]),
    ("Int128", pa.array([-(2**63), 2**63 - 1], pa.int64()), [decimal.Decimal(-(2**63)), decimal.Decimal(2**63 - 1)]),
    ("Decimal(9, 2)", pa.array([0.1, -2.25, 1e6]), [decimal.Decimal("0.10"), decimal.Decimal("-2.25"), decimal.Decimal("1000000.00")]),
    ("Decimal(9, 2)", pa.array([12], pa.int32()), [decimal.Decimal("12.00")]),
    ("Decimal(20, 4)", pa.array([decimal.Decimal("1.5")], pa.decimal128(3, 1)), [decimal.Decimal("1.5000")]),
    ("DateTime", pa.array([86400_000], pa.timestamp("ms", tz="Asia/Tokyo")), [86400]),
    ("DateTime('Asia/Tokyo')", pa.array([7], pa.uint32()), [7]),
    ("DateTime64(3)", pa.array([1_500_000_000], pa.timestamp("ns")), [1500]),
    ("DateTime64(2, 'Europe/Berlin')", pa.array([10], pa.timestamp("s", tz="UTC")), [10_000]),
    ("Date", pa.array([19000], pa.uint16()), [19000]),
    ("Date32", pa.array([-1], pa.int32()), [-1]),
    ("FixedString(4)", pa.array(["ab", "abcd"], pa.large_string()), [b"ab\0\0", b"abcd"]),
    ("FixedString(4)", pa.array([b"xyz"], pa.binary(3)), [b"xyz\0"]),
    ("Enum8('a' = 1, 'b' = -2)", pa.array([-2, 1], pa.int64()), ["b", "a"]),
    ("Enum8('a' = 1, 'b' = -2)", pa.array(["a", "b"]).dictionary_encode(), ["a", "b"]),
    ("UUID", pa.array([bytes(range(16))], pa.binary(16)), ["00010203-0405-0607-0809-0a0b0c0d0e0f"]),
    ("String", pa.array([b"\xff\x00"], pa.large_binary()), [b"\xff\x00"]),
    ("Array(Int64)", pa.array([[1, 2], None, []], pa.large_list(pa.int8())), [[1, 2], [], []]),
    ("Array(Int64)", pa.array([[1, 2], [3, 4]], pa.list_(pa.int16(), 2)), [[1, 2], [3, 4]]),
    ("Map(String, UInt64)", pa.array([[("k", 1)]], pa.map_(pa.large_string(), pa.uint8())), [[("k", 1)]]),
    ("Tuple(UInt8, String)", pa.array([{"x": 1, "y": "a"}], pa.struct([("x", pa.int64()), ("y", pa.string())])),
     [{"1": 1, "2": "a"}]),
    ("Tuple(b String, a Int64)", pa.array([{"a": 1, "b": "s"}], pa.struct([("a", pa.int8()), ("b", pa.string())])),
     [{"b": "s", "a": 1}]),
    ("Nullable(Int64)", pa.nulls(2), [None, None]),
]


def _as_read(values: list, type_text: str) -> pa.Array:
    """The expected values in the Arrow type reads return (timestamps and dates as their integers)."""
    target = to_arrow(parse_type(type_text))
    if pa.types.is_timestamp(target):
        return pa.array(values, pa.int64()).cast(target)
    if pa.types.is_date32(target):
        return pa.array(values, pa.int32()).cast(target)
    if pa.types.is_string(target) and values and isinstance(values[0], bytes):
        return pa.array(values, pa.binary()).view(pa.string())
    return pa.array(values, target)


@pytest.mark.parametrize("type_text,data,values", ACCEPTED, ids=[f"{t}<-{d.type}" for t, d, _ in ACCEPTED])
def test_lossless_representations_are_accepted(tmp_path, type_text, data, values):
    table = MergeTreeTable.create(tmp_path / "t", [("k", "UInt32"), ("c", type_text)], order_by="k")
    table.insert(pa.table({"k": pa.array(range(len(data)), pa.uint32()), "c": data}))
    assert table.to_arrow().sort_by("k").column("c").combine_chunks().equals(_as_read(values, type_text))


REFUSED = [
    # (ClickHouse type, input, what the error says besides column and types)
    ("UInt32", pa.array([0, 2**32], pa.int64()), "4294967296 at row 1 is outside UInt32's range"),
    ("UInt64", pa.array([-1], pa.int8()), "-1 at row 0 is outside UInt64's range"),
    ("Int32", pa.array([1.5]), "truncated"),
    ("Int32", pa.array(["12"]), "accepted Arrow types are"),
    ("Float32", pa.array([1e300]), "outside Float32's range"),
    ("Float64", pa.array([2**53 + 1], pa.int64()), "not in range"),
    ("Bool", pa.array([2], pa.int8()), "outside Bool's range"),
    ("Int128", pa.array([decimal.Decimal(10**39)], pa.decimal256(40, 0)), "outside Int128's range"),
    ("UInt128", pa.array([-1], pa.int64()), "outside UInt128's range"),
    ("Int256", pa.array([b"\xff" * 31 + b"\x7f"], pa.binary(32)), "more than the 76 digits"),
    ("DateTime", pa.array([1500], pa.timestamp("ms")), "fraction of a second"),
    ("DateTime", pa.array([-1], pa.timestamp("s", tz="UTC")), "outside DateTime's range"),
    ("DateTime", pa.array([-1], pa.int64()), "outside DateTime's range"),
    ("DateTime64(6)", pa.array([1_000_000_001], pa.timestamp("ns")), "finer than 6 decimal digits"),
    ("DateTime64(9)", pa.array([10**11], pa.timestamp("s")), "out of bounds"),
    ("DateTime64(3)", pa.array([5], pa.int64()), "accepted Arrow types are timestamps"),
    ("Date", pa.array([70000], pa.int32()), "outside Date's range"),
    ("Date", pa.array([86400001], pa.date64()), "lose data"),
    ("Decimal(9, 2)", pa.array([decimal.Decimal("1.234")], pa.decimal128(10, 3)), "data loss"),
    ("Decimal(9, 2)", pa.array([decimal.Decimal("12345678.9")], pa.decimal128(12, 1)), "does not fit in precision 9"),
    ("Decimal(9, 2)", pa.array([0.125]), "more than 2 decimal digits"),
    ("Decimal(9, 2)", pa.array([float("nan")]), "not a number"),
    ("FixedString(4)", pa.array(["abcde"]), "longer than 4 bytes"),
    ("Enum8('a' = 1)", pa.array([5], pa.int8()), "value 5 at row 0 is not a value of the enum"),
    ("Enum8('a' = 1)", pa.array(["z"]), "'z' at row 0 is not a name of the enum"),
    ("UUID", pa.array([1], pa.int64()), "arrow.uuid"),
    ("Array(UInt8)", pa.array([[1, 300]], pa.list_(pa.int64())), "column 'c\\[\\]'.*outside UInt8's range"),
    ("Array(Int32)", pa.array([[1, None]], pa.list_(pa.int32())), "NULL"),
    ("Tuple(a UInt8, b String)", pa.array([{"a": 1, "c": "x"}], pa.struct([("a", pa.int8()), ("c", pa.string())])),
     "the struct has fields a, c"),
    ("Tuple(a UInt8)", pa.array([{"a": 1}, None], pa.struct([("a", pa.int8())])), "NULL tuple"),
]


@pytest.mark.parametrize("type_text,data,reason", REFUSED, ids=[f"{t}<-{d.type}" for t, d, _ in REFUSED])
def test_lossy_representations_are_refused_naming_column_and_types(tmp_path, type_text, data, reason):
    table = MergeTreeTable.create(tmp_path / "t", [("k", "UInt32"), ("c", type_text)], order_by="k")
    with pytest.raises(SchemaMismatchError, match=reason) as caught:
        table.insert(pa.table({"k": pa.array(range(len(data)), pa.uint32()), "c": data}))
    message = str(caught.value)
    assert message.startswith("column 'c"), message
    dt = parse_type(type_text)
    parts = [dt] + ([dt.inner] if isinstance(dt, Array) else list(dt.elements) if isinstance(dt, Tuple) else [])
    source = [data.type] + ([data.type.value_type] if pa.types.is_list(data.type) else [])
    assert any(f"Arrow {t} as {p.to_clickhouse()}" in message for t in source for p in parts), message
    assert table.count() == 0
    assert not [p for p in table.path.iterdir() if p.name.startswith(("staged_", "tmp"))]

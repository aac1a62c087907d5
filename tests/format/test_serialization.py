"""Column streams against real ClickHouse (chdb) Wide parts: names, bytes, reads from any granule."""

from __future__ import annotations

import datetime
import decimal
import uuid
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spark_mergetree.errors import CorruptPartError, SchemaMismatchError, UnsupportedError
from spark_mergetree.fileops import escape_for_file_name
from spark_mergetree.format.compression import iter_blocks
from spark_mergetree.format.row_binary import deserialize_rows, serialize_rows
from spark_mergetree.format.serialization import deserialize_column, serialize_column
from spark_mergetree.format.streams import StreamBytes, stream_names
from spark_mergetree.format.types import (
    Array,
    DataType,
    DateTime,
    DateTime64,
    Decimal,
    Enum,
    FixedString,
    LowCardinality,
    Map,
    Nullable,
    Primitive,
    Time,
    Time64,
    Tuple,
    parse_type,
    to_arrow,
)
from tests.format.chdb_util import close_session, make_chdb_table, part_dirs
from tests.format.test_types import _types

ROWS = 10
GRANULARITY = 3

# name, type, expression over `number` (0..ROWS-1): NULLs, empties, Unicode, extremes.
COLUMNS: list[tuple[str, str, str]] = [
    ("u8", "UInt8", "toUInt8(number * 37 % 256)"),
    ("u16", "UInt16", "toUInt16(65535 - number)"),
    ("u32", "UInt32", "toUInt32(4294967295 - number)"),
    ("u64", "UInt64", "if(number = 9, 18446744073709551615, number * 1000003)"),
    ("i8", "Int8", "toInt8(if(number % 2, -128, 127))"),
    ("i16", "Int16", "toInt16(-32768 + number)"),
    ("i32", "Int32", "toInt32(-2147483648 + number)"),
    ("i64", "Int64", "if(number = 3, -9223372036854775808, toInt64(number) - 5)"),
    ("i128", "Int128", "toInt128(number) * toInt128('-17014118346046923173168730371588410')"),
    ("u128", "UInt128", "toUInt128(number) * toUInt128('34028236692093846346337460743176821')"),
    ("f32", "Float32", "toFloat32(number) / 3"),
    ("f64", "Float64", "if(number = 4, -inf, number / 7)"),
    ("bf16", "BFloat16", "toBFloat16(if(number = 4, -inf, if(number = 5, 3.3895313892515355e+38, number / 7 - 1)))"),
    ("nbf16", "Nullable(BFloat16)", "if(number % 3 = 0, NULL, toBFloat16(number * 1e-39))"),
    ("b", "Bool", "number % 3 = 0"),
    ("dec9", "Decimal(9, 2)", "toDecimal32(number * 1.25 - 5, 2)"),
    ("dec18", "Decimal(18, 4)", "toDecimal64(-123456789.1234 + number, 4)"),
    ("dec38", "Decimal(38, 10)", "toDecimal128('-1234567890123456789012345678.9', 10) + number"),
    ("dec32s", "Decimal32(3)", "toDecimal32(number / 8, 3)"),
    ("s", "String", "['', 'a', 'привет', 'x\\0y', repeat('z', 200), '日本', '', 'tab\\t', 'q', ''][number + 1]"),
    ("fs", "FixedString(4)", "toFixedString(['', 'ab', 'abcd', 'é'][number % 4 + 1], 4)"),
    ("d", "Date", "toDate('1970-01-01') + number * 7000"),
    ("d32", "Date32", "toDate32('1900-01-01') + number * 20000"),
    ("dt", "DateTime", "toDateTime(number * 400000000, 'UTC')"),
    ("dtz", "DateTime('Asia/Tokyo')", "toDateTime(number * 12345678, 'Asia/Tokyo')"),
    ("dt64", "DateTime64(3)", "toDateTime64(-1000.5 + number * 100000000.123, 3, 'UTC')"),
    ("dt64us", "DateTime64(6, 'UTC')", "toDateTime64(number * 1.000001, 6, 'UTC')"),
    ("dt64p2", "DateTime64(2, 'Europe/Berlin')", "toDateTime64(number * 1.01, 2, 'Europe/Berlin')"),
    ("dt64ns", "DateTime64(9)", "toDateTime64(number * 1.000000001, 9, 'UTC')"),
    ("uid", "UUID", "if(number = 0, toUUID('00112233-4455-6677-8899-aabbccddeeff'), "
                    "reinterpretAsUUID(reverse(unhex(hex(cityHash64(number)) || hex(number)))))"),
    ("e8", "Enum8('b' = -2, 'a' = 1, 'c' = 127)", "['a', 'b', 'c'][number % 3 + 1]"),
    ("e16", "Enum16('x' = 1000, 'y' = -1000)", "['x', 'y'][number % 2 + 1]"),
    ("tm", "Time", "toTime(number % 23 * 3677)"),
    ("tm64", "Nullable(Time64(3))", "if(number % 4 = 0, NULL, toTime64(number % 23 * 3677.125, 3))"),
    ("pt", "Point", "(number / 2, -number)"),
    ("ring", "Ring", "arrayMap(x -> (x, x * 2.5), range(number % 3))"),
    ("poly", "Polygon", "[arrayMap(x -> (x, 1), range(number % 3)), []]"),
    ("mpoly", "MultiPolygon", "[[arrayMap(x -> (x, 1), range(number % 2))], []]"),
    ("ls", "LineString", "arrayMap(x -> (1, x), range(number % 4))"),
    ("mls", "MultiLineString", "[arrayMap(x -> (1, x), range(number % 4)), [(0, 0)]]"),
    ("saf", "SimpleAggregateFunction(sum, UInt64)", "number * 3"),
    ("safn", "SimpleAggregateFunction(anyLast, Nullable(String))", "if(number % 2 = 1, NULL, repeat('s', number * (1 - number % 2)))"),
    ("mipbf", "Map(IPv4, BFloat16)", "mapFromArrays(arrayMap(x -> toIPv4(x * 65537), range(number % 3)), "
                                     "arrayMap(x -> toBFloat16(x / 3), range(number % 3)))"),
    ("ant", "Array(Nullable(Time))", "arrayMap(x -> if(x = 1, NULL, toTime(x * 7777)), range(number % 3))"),
    ("tpt", "Tuple(p Point, t Time64(2), ip Nullable(IPv6))",
     "((number, -1.5), toTime64(number % 23 * 3600.25, 2), if(number % 2, NULL, toIPv6('::' || toString(number + 1))))"),
    ("ip4", "IPv4", "if(number = 9, toIPv4('255.255.255.255'), toIPv4(number * 16909060))"),
    ("ip6", "IPv6", "if(number = 9, toIPv6('ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffe'), "
                    "toIPv6('2001:db8:' || toString(number * 7) || '::1'))"),
    ("nip4", "Nullable(IPv4)", "if(number % 3 = 0, NULL, toIPv4(number))"),
    ("aip6", "Array(IPv6)", "arrayMap(x -> toIPv6(toIPv4(x * 257)), range(number % 3))"),
    ("ns", "Nullable(String)", "if(number % 3 = 0, NULL, repeat('ü', number))"),
    ("ni", "Nullable(Int32)", "if(number % 4 = 1, NULL, toInt32(number) * -7)"),
    ("nd", "Nullable(Decimal(10, 3))", "if(number % 2 = 1, NULL, toDecimal64(number / 3, 3))"),
    ("an", "Array(Nullable(Int64))", "arrayMap(x -> [x, NULL][x % 2 + 1], range(number % 4))"),
    ("as", "Array(String)", "arrayMap(x -> repeat('s', x), range(number % 3))"),
    ("aa", "Array(Array(UInt8))", "arrayMap(x -> range(x), range(number % 4))"),
    ("aas", "Array(Array(Nullable(String)))", "[arrayMap(x -> if(x = 1, NULL, toString(x)), range(number % 3)), []]"),
    ("m", "Map(String, UInt64)", "mapFromArrays(arrayMap(x -> 'k' || toString(x), range(number % 3)), range(number % 3))"),
    ("ma", "Map(LowCardinality(String), Array(String))",
     "mapFromArrays(arrayMap(x -> toString(x % 2), range(number % 2)), arrayMap(x -> ['v', ''], range(number % 2)))"),
    ("t", "Tuple(a UInt8, b String)", "tuple(toUInt8(number), toString(number * 11))"),
    ("tu", "Tuple(UInt8, Nullable(String), Array(Int16))",
     "tuple(toUInt8(number), ['n', NULL][number % 2 + 1], [toInt16(number), -1])"),
    ("at", "Array(Tuple(k String, v Nullable(Float64)))",
     "arrayMap(x -> tuple(toString(x), if(x = 0, NULL, x / 2)), range(number % 3))"),
    ("lc", "LowCardinality(String)", "['', 'red', 'green', 'blue'][number % 4 + 1]"),
    ("lcn", "LowCardinality(Nullable(String))", "if(number % 3 = 0, NULL, ['', 'x', 'y'][number % 3 + 1])"),
    ("lcf", "LowCardinality(FixedString(5))", "toFixedString(toString(number % 3 * 1000), 5)"),
    ("alc", "Array(LowCardinality(String))", "arrayMap(x -> toString(x % 2), range(number % 3))"),
    ("we.ird-ü name", "Tuple(`a.b` Array(Nullable(String)), m Map(String, Tuple(x UInt8, `y z` Array(String))))",
     "tuple(arrayMap(x -> ['v', NULL][(x = 1) + 1], range(number % 3)), "
     "map('k' || toString(number), tuple(toUInt8(number), arrayMap(x -> toString(x), range(number % 2)))))"),
    ("n.a", "Array(UInt8)", "range(number % 3)"),
    ("n.b", "Array(String)", "arrayMap(x -> toString(x), range(number % 3))"),
    ("p.q.r", "Array(Array(UInt8))", "[range(number % 2)]"),
    ("u.v", "Map(String, UInt8)", "map('k', number)"),
    ("s.t", "String", "toString(number)"),
    ("amn", "Array(Map(String, Nullable(Float32)))",
     "[map('a', [toFloat32(number), NULL][(number % 2 = 0) + 1]), map()]"),
]


def _table_sql(name: str, extra_settings: str = "") -> str:
    cols = ", ".join(f"`{c}` {t}" for c, t, _ in COLUMNS)
    return (f"CREATE TABLE {name} (id UInt64, {cols}) ENGINE = MergeTree ORDER BY id SETTINGS "
            f"min_bytes_for_wide_part = 0, min_rows_for_wide_part = 0, index_granularity = {GRANULARITY}, "
            f"ratio_of_defaults_for_sparse_serialization = 1{extra_settings}")


def _insert_sql(name: str) -> str:
    exprs = ", ".join(f"{e}" for _, _, e in COLUMNS)
    return f"INSERT INTO {name} SELECT number, {exprs} FROM numbers({ROWS})"


class Part:
    """A ClickHouse-written Wide part: decompressed streams and marks as absolute offsets."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.substreams = _read_substreams(path / "columns_substreams.txt")
        self._streams: dict[str, bytes] = {}
        self._marks: dict[str, np.ndarray] = {}

    def stream(self, name: str) -> bytes:
        if name not in self._streams:
            raw = (self.path / f"{name}.bin").read_bytes()
            starts: dict[int, int] = {}
            chunks = []
            at = 0
            for block in iter_blocks(raw, str(self.path / f"{name}.bin")):
                from spark_mergetree.format.compression import decompress_block

                starts[block.offset] = at
                data = bytes(decompress_block(block, name))
                chunks.append(data)
                at += len(data)
            starts[len(raw)] = at
            self._streams[name] = b"".join(chunks)
            marks_raw = (self.path / f"{name}.cmrk2").read_bytes()
            from spark_mergetree.format.compression import decompress_all

            marks = np.frombuffer(decompress_all(marks_raw, name), "<u8").reshape(-1, 3).astype(np.int64)
            self._marks[name] = np.array([starts[int(b)] + int(o) for b, o, _ in marks], np.int64)
        return self._streams[name]

    def mark(self, name: str, granule: int) -> int:
        self.stream(name)
        return int(self._marks[name][granule])

    def marks(self, name: str) -> np.ndarray:
        self.stream(name)
        return self._marks[name]


def _read_substreams(path: Path) -> dict[str, list[str]]:
    result: dict[str, list[str]] = {}
    current = None
    for line in path.read_text().splitlines()[2:]:
        if line.startswith("\t"):
            result[current].append(line.strip())
        else:
            current = line.split("`")[1]
            result[current] = []
    return result


def _chdb_arrow(sess, sql: str) -> pa.Table:
    return pa.ipc.open_file(pa.py_buffer(sess.query(sql, "Arrow").bytes())).read_all()


@pytest.fixture(scope="module")
def parts(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ser")
    sess, sizes_dir = make_chdb_table(tmp, _table_sql("t_sizes"), [_insert_sql("t_sizes")])
    sess, classic_dir = make_chdb_table(
        tmp, _table_sql("t_classic", ", string_serialization_version = 'single_stream'"), [_insert_sql("t_classic")])
    expected = _chdb_arrow(sess, "SELECT * FROM t_sizes ORDER BY id")
    result = {"sizes": Part(part_dirs(sizes_dir)[0]), "classic": Part(part_dirs(classic_dir)[0]), "expected": expected}
    yield result
    close_session()


def _normalize(dt: DataType, value):
    """Python value of our Arrow output → the form chdb's Arrow output gives."""
    if value is None:
        return None
    if isinstance(dt, LowCardinality):
        return _normalize(dt.inner, value)
    if isinstance(dt, Nullable):
        return _normalize(dt.inner, value)
    if isinstance(dt, Array):
        return [_normalize(dt.inner, v) for v in value]
    if isinstance(dt, Map):
        return [(_normalize(dt.key, k), _normalize(dt.value, v)) for k, v in value]
    if isinstance(dt, Tuple):
        return {n: _normalize(e, value[n]) for n, e in zip(dt.element_names, dt.elements, strict=True)}
    if isinstance(dt, DateTime):
        return int(value.timestamp())
    if isinstance(dt, Primitive) and dt.name == "UUID":
        return uuid.UUID(value)
    if isinstance(dt, Primitive) and dt.name in ("Int128", "UInt128", "Int256", "UInt256"):
        return int(value).to_bytes(int(dt.name[-3:]) // 8, "little", signed=dt.name.startswith("Int"))
    if isinstance(dt, Enum):
        return dict(dt.values)[value]
    if isinstance(dt, (Time, Time64)):  # chdb's Arrow gives a time of day (its values are within one day)
        return (datetime.datetime.min + value).time()
    if isinstance(dt, Primitive) and dt.name == "BFloat16":  # chdb's Arrow gives the 2 stored bytes
        return (np.float32(value).view(np.uint32) >> 16).astype("<u2").tobytes()
    return value


def _expected_values(expected: pa.Table, name: str, start: int, count: int) -> list:
    values = expected.column(name).slice(start, count).to_pylist()
    return [(list(v.items()) if isinstance(v, dict) and False else v) for v in values]


def _streams_from(part: Part, dt: DataType, name: str, string_sizes: bool, granule: int) -> dict[str, memoryview]:
    result = {}
    for stream in stream_names(dt, name, string_sizes):
        data = part.stream(stream)
        result[stream] = memoryview(data)[part.mark(stream, granule):]
    return result


@pytest.mark.parametrize("mode", ["sizes", "classic"])
@pytest.mark.parametrize("name,type_text,expr", COLUMNS, ids=[c[0] for c in COLUMNS])
def test_stream_names_match_clickhouse(parts, mode, name, type_text, expr):
    part = parts[mode]
    assert stream_names(parse_type(type_text), name, string_sizes=mode == "sizes") == part.substreams[name]


@pytest.mark.parametrize("mode", ["sizes", "classic"])
@pytest.mark.parametrize("name,type_text,expr", COLUMNS, ids=[c[0] for c in COLUMNS])
def test_read_every_granule_start(parts, mode, name, type_text, expr):
    part = parts[mode]
    dt = parse_type(type_text)
    for granule, start in enumerate(range(0, ROWS, GRANULARITY)):
        for count in sorted({ROWS - start, min(GRANULARITY, ROWS - start)}):
            streams = _streams_from(part, dt, name, mode == "sizes", granule)
            got = deserialize_column(dt, name, streams, count, string_sizes=mode == "sizes")
            assert got.type == to_arrow(dt)
            assert [_normalize(dt, v) for v in got.to_pylist()] == \
                _expected_values(parts["expected"], name, start, count), (granule, count)


@pytest.mark.parametrize("mode", ["sizes", "classic"])
@pytest.mark.parametrize("name,type_text,expr", COLUMNS, ids=[c[0] for c in COLUMNS])
def test_serialize_matches_clickhouse_bytes(parts, mode, name, type_text, expr):
    part = parts[mode]
    dt = parse_type(type_text)
    sizes = mode == "sizes"
    column = deserialize_column(dt, name, _streams_from(part, dt, name, sizes, 0), ROWS, string_sizes=sizes)
    granules = np.array([min(GRANULARITY, ROWS - s) for s in range(0, ROWS, GRANULARITY)], np.int64)
    written = serialize_column(dt, name, column, granules, string_sizes=sizes)
    assert list(written) == part.substreams[name]
    for stream, out in written.items():
        assert isinstance(out, StreamBytes)
        assert bytes(out.data) == part.stream(stream), stream
        assert out.granule_offsets.tolist() == part.marks(stream).tolist(), stream


def test_uuid_bytes_as_documented():
    dt = Primitive("UUID")
    out = serialize_column(dt, "u", pa.array(["00112233-4455-6677-8899-aabbccddeeff"]), np.array([1]))
    assert out["u"].data.hex() == "7766554433221100ffeeddccbbaa9988"


def test_escaped_names():
    assert escape_for_file_name("a.b-c д") == "a%2Eb%2Dc%20%D0%B4"
    # A dotted Array/Map column belongs to a Nested table: its outer sizes are named by the table.
    assert stream_names(parse_type("Map(String, Array(Nullable(String)))"), "x.y") == [
        "x.size0", "x%2Ey%2Ekeys.size", "x%2Ey%2Ekeys", "x%2Ey%2Evalues.size1", "x%2Ey%2Evalues.null",
        "x%2Ey%2Evalues.size", "x%2Ey%2Evalues"]


# ------------------------------------------------------------------------- LowCardinality, many keys

@pytest.fixture(scope="module")
def big_lc(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("lc")
    sess, table_dir = make_chdb_table(
        tmp,
        "CREATE TABLE l (id UInt64, lc LowCardinality(String), lcn LowCardinality(Nullable(String))) "
        "ENGINE = MergeTree ORDER BY id SETTINGS min_bytes_for_wide_part = 0, min_rows_for_wide_part = 0, "
        "index_granularity = 4000, ratio_of_defaults_for_sparse_serialization = 1",
        ["INSERT INTO l SELECT number, toString(number * 7 % 20011), "
         "if(number % 5 = 0, NULL, toString(number % 9000)) FROM numbers(20000)"],
    )
    expected = _chdb_arrow(sess, "SELECT lc, lcn FROM l ORDER BY id")
    yield Part(part_dirs(table_dir)[0]), expected
    close_session()


@pytest.mark.parametrize("name", ["lc", "lcn"])
def test_low_cardinality_shared_dictionaries(big_lc, name):
    part, expected = big_lc
    dt = parse_type("LowCardinality(String)" if name == "lc" else "LowCardinality(Nullable(String))")
    n_granules = 5
    for granule in range(n_granules):
        streams = _streams_from(part, dt, name, True, granule)
        count = 20000 - granule * 4000
        got = deserialize_column(dt, name, streams, count)
        assert got.to_pylist() == expected.column(name).slice(granule * 4000).to_pylist(), granule
    column = expected.column(name)
    written = serialize_column(dt, name, column, np.full(n_granules, 4000))
    for stream, out in written.items():
        assert bytes(out.data) == part.stream(stream), stream
        assert out.granule_offsets.tolist() == part.marks(stream).tolist(), stream


def test_truncated_stream_is_detected():
    dt = parse_type("Array(String)")
    out = serialize_column(dt, "a", pa.array([["abc", "de"]]), np.array([1]))
    streams = {k: v.data for k, v in out.items()}
    streams["a"] = streams["a"][:-1]
    with pytest.raises(CorruptPartError, match="'a'"):
        deserialize_column(dt, "a", streams, 1)
    with pytest.raises(CorruptPartError):
        deserialize_column(parse_type("String"), "s", {"s": b"\x05ab"}, 1, string_sizes=False)


def test_bad_values_are_rejected():
    with pytest.raises(SchemaMismatchError, match="'c'"):
        serialize_column(Primitive("UInt8"), "c", pa.array([1, None]), np.array([2]))
    with pytest.raises(SchemaMismatchError, match="'c'"):
        serialize_column(Primitive("UInt8"), "c", pa.array([300]), np.array([1]))
    with pytest.raises(SchemaMismatchError, match="FixedString"):
        serialize_column(FixedString(2), "c", pa.array([b"abc"]), np.array([1]))
    with pytest.raises(SchemaMismatchError, match="not in"):
        serialize_column(parse_type("Enum8('a' = 1)"), "c", pa.array(["z"]), np.array([1]))


# ------------------------------------------------------------------------------------- single rows

def test_rows_match_clickhouse_primary_index(tmp_path):
    sess, table_dir = make_chdb_table(
        tmp_path,
        "CREATE TABLE k (s String, d Date, x Int32, u UUID) ENGINE = MergeTree ORDER BY (s, d, x, u) "
        "SETTINGS index_granularity = 2, compress_primary_key = 0, min_bytes_for_wide_part = 0",
        ["INSERT INTO k SELECT ['b', 'a', 'ccc', ''][number % 4 + 1], toDate('2024-01-01') + number, "
         "-toInt32(number), toUUID('00112233-4455-6677-8899-aabbccddeeff') FROM numbers(5)"],
    )
    part = part_dirs(table_dir)[0]
    table = _chdb_arrow(sess, "SELECT s, d, x, toString(u) AS u FROM k ORDER BY s, d, x, u")
    dts = [parse_type(t) for t in ("String", "Date", "Int32", "UUID")]
    arrays = [table.column(i) for i in range(4)]
    expected = (part / "primary.idx").read_bytes()
    assert serialize_rows(dts, arrays, [0, 2, 4, 4]) == expected
    back = deserialize_rows(dts, expected, 4)
    assert [a.to_pylist() for a in back] == [table.column(i).take([0, 2, 4, 4]).to_pylist() for i in range(4)]


NESTED_TYPES = [
    "Nullable(String)", "Array(Nullable(Int8))", "Map(String, Array(UInt16))", "Tuple(a Date, b Nullable(Float64))",
    "Array(Tuple(LowCardinality(String), Decimal(20, 3)))", "LowCardinality(Nullable(String))",
    "Array(Array(FixedString(2)))", "Tuple(DateTime64(3, 'UTC'), UUID, Enum8('a' = 1, 'b' = 2))",
]


def _values(dt: DataType, draw_from) -> st.SearchStrategy:
    if isinstance(dt, Nullable):
        return st.none() | _values(dt.inner, draw_from)
    if isinstance(dt, LowCardinality):
        return _values(dt.inner, draw_from)
    if isinstance(dt, Array):
        return st.lists(_values(dt.inner, draw_from), max_size=3)
    if isinstance(dt, Map):
        return st.dictionaries(_values(dt.key, draw_from), _values(dt.value, draw_from), max_size=3).map(
            lambda d: list(d.items()))
    if isinstance(dt, Tuple):
        return st.tuples(*[_values(e, draw_from) for e in dt.elements]).map(
            lambda vs: dict(zip(dt.element_names, vs, strict=True)))
    if isinstance(dt, FixedString):
        return st.binary(min_size=dt.length, max_size=dt.length)
    if isinstance(dt, Decimal):
        return st.integers(-10**dt.precision + 1, 10**dt.precision - 1).map(
            lambda v: decimal.Decimal(v).scaleb(-dt.scale))
    if isinstance(dt, DateTime64):
        return st.integers(-10**12, 10**12).map(
            lambda v: datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc) + datetime.timedelta(milliseconds=v))
    if isinstance(dt, Enum):
        return st.sampled_from([n for n, _ in dt.values])
    if isinstance(dt, DateTime):
        return st.integers(0, 2**32 - 1).map(
            lambda v: datetime.datetime.fromtimestamp(v, datetime.timezone.utc))
    name = dt.name
    if name == "Bool":
        return st.booleans()
    if name == "Date32":
        return st.dates(datetime.date(1900, 1, 1), datetime.date(2299, 12, 31))
    if name in ("Int128", "UInt128"):
        lo, hi = (-2**127, 2**127 - 1) if name == "Int128" else (0, 2**128 - 1)
        return st.integers(lo, hi).map(decimal.Decimal)
    if name == "String":
        return st.text(max_size=5)
    if name == "UUID":
        return st.uuids().map(str)
    if name == "Date":
        return st.dates(datetime.date(1970, 1, 1), datetime.date(2149, 6, 6))
    if name.startswith("Float"):
        return st.floats(allow_nan=False, width=64 if name == "Float64" else 32)
    bits = int(name.lstrip("UInt"))
    lo, hi = (0, 2**bits - 1) if name.startswith("U") else (-2**(bits - 1), 2**(bits - 1) - 1)
    return st.integers(lo, hi)


@pytest.mark.parametrize("type_text", NESTED_TYPES)
@pytest.mark.parametrize("string_sizes", [True, False])
def test_round_trip_random(type_text, string_sizes):
    dt = parse_type(type_text)

    @settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.lists(_values(dt, None), max_size=12), st.integers(1, 4))
    def check(values, granule):
        arr = pa.array(values, to_arrow(dt))
        granules = np.array([min(granule, len(values) - s) for s in range(0, len(values), granule)], np.int64)
        written = serialize_column(dt, "c", arr, granules, string_sizes=string_sizes)
        streams = {k: memoryview(v.data)[v.granule_offsets[0]:] for k, v in written.items()}
        assert deserialize_column(dt, "c", streams, len(values), string_sizes=string_sizes).to_pylist() == \
            arr.to_pylist()
        # From the second granule on: every stream cut at its granule offset.
        if len(granules) > 1:
            cut = {k: memoryview(v.data)[v.granule_offsets[1]:] for k, v in written.items()}
            got = deserialize_column(dt, "c", cut, len(values) - int(granules[0]), string_sizes=string_sizes)
            assert got.to_pylist() == arr.slice(int(granules[0])).to_pylist()
        rows = list(range(len(values)))
        assert deserialize_rows([dt], serialize_rows([dt], [arr], rows), len(rows))[0].to_pylist() == arr.to_pylist()

    check()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.data(), st.booleans())
def test_round_trip_random_types(data, string_sizes):
    dt = data.draw(_types(2))
    values = data.draw(st.lists(_values(dt, None), max_size=8))
    arr = pa.array(values, to_arrow(dt))
    granules = np.array([min(3, len(values) - s) for s in range(0, len(values), 3)], np.int64)
    written = serialize_column(dt, "r.c", arr, granules, string_sizes=string_sizes)
    assert list(written) == stream_names(dt, "r.c", string_sizes)
    for g in range(len(granules)):
        cut = {k: memoryview(v.data)[v.granule_offsets[g]:] for k, v in written.items()}
        got = deserialize_column(dt, "r.c", cut, len(values) - 3 * g, string_sizes=string_sizes)
        assert got.to_pylist() == arr.slice(3 * g).to_pylist()
    assert deserialize_rows([dt], serialize_rows([dt], [arr], range(len(values))), len(values))[0].to_pylist() == \
        arr.to_pylist()


# ------------------------------------------------------------------------- format_spec examples

SPEC = Path(__file__).resolve().parents[2] / "format_spec" / "types.md"


def _spec_examples() -> list[tuple[int, str, str, str, dict[str, str]]]:
    text = SPEC.read_text()
    body = text.split("<!-- examples:begin -->")[1].split("<!-- examples:end -->")[0]
    examples = []
    for line in body.strip().splitlines()[2:]:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        number, type_text, value, mode, streams = cells
        parsed = {}
        for item in streams.split("<br>"):
            name, hex_text = item.split(": ")
            parsed[name.strip("`")] = hex_text.strip("`")
        examples.append((int(number), type_text.strip("`"), value.strip("`"), mode, parsed))
    return examples


def test_spec_examples(tmp_path):
    examples = _spec_examples()
    assert len(examples) >= 20
    for mode in ("sizes", "classic"):
        chosen = [e for e in examples if e[3] == mode]
        cols = ", ".join(f"x{n} {t}" for n, t, _, _, _ in chosen)
        extra = ", string_serialization_version = 'single_stream'" if mode == "classic" else ""
        sess, table_dir = make_chdb_table(
            tmp_path,
            f"CREATE TABLE spec_{mode} (id UInt8, {cols}) ENGINE = MergeTree ORDER BY id SETTINGS "
            f"min_bytes_for_wide_part = 0, min_rows_for_wide_part = 0, "
            f"ratio_of_defaults_for_sparse_serialization = 1{extra}",
            [f"INSERT INTO spec_{mode} VALUES (0, {', '.join(v for _, _, v, _, _ in chosen)})"])
        part = Part(part_dirs(table_dir)[0])
        for number, type_text, _, _, streams in chosen:
            dt, name = parse_type(type_text), f"x{number}"
            names = stream_names(dt, name, mode == "sizes")
            assert [n.replace(name, "x", 1) for n in names] == list(streams), number
            for stream in names:
                assert part.stream(stream).hex(" ") == streams[stream.replace(name, "x", 1)], (number, stream)
            column = deserialize_column(dt, name, _streams_from(part, dt, name, mode == "sizes", 0), 1,
                                        string_sizes=mode == "sizes")
            written = serialize_column(dt, name, column, np.array([1]), string_sizes=mode == "sizes")
            assert {k.replace(name, "x", 1): bytes(v.data).hex(" ") for k, v in written.items()} == streams, number
    close_session()


# ---------------------------------------------------------------------------------------- sparse

@pytest.fixture(scope="module")
def sparse_part(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("sparse")
    sess, table_dir = make_chdb_table(
        tmp,
        "CREATE TABLE sp (id UInt64, s String, x UInt32, f Float64, d DateTime64(3, 'UTC')) ENGINE = MergeTree "
        "ORDER BY id SETTINGS min_bytes_for_wide_part = 0, min_rows_for_wide_part = 0, index_granularity = 4, "
        "ratio_of_defaults_for_sparse_serialization = 0.5",
        ["INSERT INTO sp SELECT number, if(number IN (5, 7, 11), 'hi' || toString(number), ''), "
         "if(number IN (1, 3, 4, 19), number, 0), if(number % 6 = 5, number / 2, 0), "
         "if(number = 8, toDateTime64('2020-01-01 00:00:00.123', 3, 'UTC'), toDateTime64(0, 3, 'UTC')) "
         "FROM numbers(20)"],
    )
    expected = _chdb_arrow(sess, "SELECT * FROM sp ORDER BY id")
    part = Part(part_dirs(table_dir)[0])
    kinds = {c["name"]: c["kind"] for c in __import__("json").loads((part.path / "serialization.json").read_text())["columns"]}
    yield part, expected, kinds
    close_session()


@pytest.mark.parametrize("name,type_text", [("s", "String"), ("x", "UInt32"), ("f", "Float64"),
                                            ("d", "DateTime64(3, 'UTC')")])
def test_sparse_columns_read_from_every_granule(sparse_part, name, type_text):
    part, expected, kinds = sparse_part
    assert kinds[name] == "Sparse"
    dt = parse_type(type_text)
    names = stream_names(dt, name, True, sparse=True)
    assert names == part.substreams[name]
    for granule in range(5):
        streams = {s: memoryview(part.stream(s))[part.mark(s, granule):] for s in names}
        for count in (4, 20 - 4 * granule):
            got = deserialize_column(dt, name, streams, count, sparse=True)
            assert got.to_pylist() == expected.column(name).slice(4 * granule, count).to_pylist(), (granule, count)


def test_sparse_tuple_elements(tmp_path):
    sess, table_dir = make_chdb_table(
        tmp_path,
        "CREATE TABLE spt (id UInt64, t Tuple(a UInt32, b Tuple(c String, d UInt8))) ENGINE = MergeTree "
        "ORDER BY id SETTINGS min_bytes_for_wide_part = 0, min_rows_for_wide_part = 0, index_granularity = 4",
        ["INSERT INTO spt SELECT number, (if(number = 3, 1, 0), (if(number IN (2, 9), 'x', ''), 0)) "
         "FROM numbers(40)"],
    )
    expected = _chdb_arrow(sess, "SELECT t FROM spt ORDER BY id").column("t").to_pylist()
    close_session()
    part = Part(part_dirs(table_dir)[0])
    info = {c["name"]: c for c in __import__("json").loads((part.path / "serialization.json").read_text())["columns"]}
    dt = parse_type("Tuple(a UInt32, b Tuple(c String, d UInt8))")
    names = stream_names(dt, "t", True, sparse=info["t"])
    assert names == part.substreams["t"]
    assert "t%2Ea.sparse.idx" in names
    for granule in (0, 2, 9):
        streams = {s: memoryview(part.stream(s))[part.mark(s, granule):] for s in names}
        got = deserialize_column(dt, "t", streams, 40 - 4 * granule, sparse=info["t"])
        assert got.to_pylist() == expected[4 * granule:]


def test_sparse_nested_types_are_refused():
    with pytest.raises(UnsupportedError, match="'x'"):
        deserialize_column(parse_type("Array(UInt8)"), "x", {}, 0, sparse=True)



def test_rows_with_nullable_and_low_cardinality_keys(tmp_path):
    sess, table_dir = make_chdb_table(
        tmp_path,
        "CREATE TABLE kn (n Nullable(Int32), l LowCardinality(String), f FixedString(2), e Enum8('a' = 1, 'b' = 2), "
        "t DateTime64(3, 'UTC')) ENGINE = MergeTree ORDER BY (n, l, f, e, t) "
        "SETTINGS allow_nullable_key = 1, index_granularity = 2, compress_primary_key = 0, min_bytes_for_wide_part = 0",
        ["INSERT INTO kn SELECT if(number = 4, NULL, toInt32(number) - 2), toString(number % 2), 'ab', "
         "['a', 'b'][number % 2 + 1], toDateTime64(number * 1.5, 3, 'UTC') FROM numbers(5)"],
    )
    part = part_dirs(table_dir)[0]
    table = _chdb_arrow(sess, "SELECT n, l, f, e, t FROM kn ORDER BY n, l, f, e, t")
    close_session()
    dts = [parse_type(t) for t in ("Nullable(Int32)", "LowCardinality(String)", "FixedString(2)",
                                   "Enum8('a' = 1, 'b' = 2)", "DateTime64(3, 'UTC')")]
    enum_names = pa.array(["a" if v == 1 else "b" for v in table.column("e").to_pylist()])
    arrays = [table.column(0), table.column(1), table.column(2), enum_names, table.column(4)]
    expected = (part / "primary.idx").read_bytes()
    assert serialize_rows(dts, arrays, [0, 2, 4, 4]) == expected
    back = deserialize_rows(dts, expected, 4)
    assert [a.to_pylist() for a in back] == [a.take([0, 2, 4, 4]).to_pylist() for a in arrays]
    with pytest.raises(CorruptPartError):
        deserialize_rows(dts, expected[:-1], 4)


def test_damaged_sizes_are_detected():
    dt = parse_type("Array(String)")
    out = serialize_column(dt, "a", pa.array([["abc"], []]), np.array([2]))
    streams = {k: bytearray(v.data) for k, v in out.items()}
    streams["a.size0"][7] = 0x80  # a row claiming 2^63 elements
    with pytest.raises(CorruptPartError, match=r"a\.size0.*offset 0"):
        deserialize_column(dt, "a", streams, 2)
    lc = parse_type("LowCardinality(String)")
    out = serialize_column(lc, "l", pa.array(["x", "y"]), np.array([2]))
    streams = {k: bytearray(memoryview(v.data)[v.granule_offsets[0]:]) for k, v in out.items()}
    streams["l"][0] = 0x07  # index width code 7 does not exist
    with pytest.raises(CorruptPartError, match="flags"):
        deserialize_column(lc, "l", streams, 2)


def test_256_bit_values_arrow_cannot_hold_are_refused_not_misread(tmp_path):
    """Arrow's decimal256 holds 76 digits: Int256/UInt256 values from 10^76 up (UInt256's top half,
    read as two's complement, would even turn negative) raise UnsupportedError naming the stream;
    values up to 10^76 − 1 read as ClickHouse returns them."""
    from spark_mergetree import MergeTreeTable

    edge = 10**76 - 1
    sess, data_dir = make_chdb_table(
        tmp_path, "CREATE TABLE wide (k UInt8, u UInt256, s Int256) ENGINE = MergeTree ORDER BY k "
                  "SETTINGS min_bytes_for_wide_part = 0",
        [f"INSERT INTO wide VALUES (1, {edge}, -{edge}), (2, 5, -5)"])
    statement = sess.query("SHOW CREATE TABLE wide", "TabSeparatedRaw").bytes().decode()
    expected = sess.query("SELECT toString(u), toString(s) FROM wide ORDER BY k", "TabSeparatedRaw").bytes().decode()
    table = MergeTreeTable.open(data_dir, create_statement=statement)
    got = table.to_arrow(["u", "s"])
    assert "\n".join(f"{u}\t{s}" for u, s in zip(*(got[c].to_pylist() for c in ("u", "s")))) + "\n" == expected
    sess.query("INSERT INTO wide VALUES (3, 115792089237316195423570985008687907853269984665640564039457584007913129639935, 0)")
    sess.query(f"INSERT INTO wide VALUES (4, 0, -{edge + 1})")
    close_session()
    table = MergeTreeTable.open(data_dir, create_statement=statement)
    for column, stream in (("u", "u"), ("s", "s")):
        with pytest.raises(UnsupportedError, match=rf"{stream}\.bin.*7[78] digits.*76"):
            table.to_arrow([column])


@pytest.mark.parametrize("rows", [300, 30_000])  # under and over values.COMPILED_CLASSIC_BYTES
def test_classic_strings_encode_as_a_length_then_the_bytes_on_both_paths(rows: int) -> None:
    """The scatter (small columns) and the compiled copy (big ones) give the same bytes: a LEB128
    length then the bytes of each row, also for offsets that do not start at 0 and long rows."""
    from spark_mergetree.format import values

    rng = np.random.default_rng(rows)
    texts = ["é" * int(n) for n in rng.integers(0, 90, rows)] + ["", "z" * 20_000, "y" * 127, "w" * 128]
    offsets, data = values.string_buffers(pa.array(texts))
    for first in (0, 7):
        encoded, row_offsets = values.encode_classic(offsets[first:], data[offsets[first]:])
        want = b"".join(bytes(values.encode_varuints(np.array([len(t.encode())], np.uint64))[0]) + t.encode()
                        for t in texts[first:])
        assert encoded.tobytes() == want
        assert (len(encoded) >= values.COMPILED_CLASSIC_BYTES) == (rows > 1000)
        assert row_offsets[-1] == len(want) and len(row_offsets) == len(texts) - first + 1

"""Types added for ClickHouse 26.x tables, checked against chdb: their Arrow mapping is the one
ClickHouse exports, and what writing accepts converts values as ClickHouse converts them.

Reading and writing parts of these types (Wide and Compact, attached by ClickHouse with CHECK TABLE)
runs with every other type through `COLUMNS` in tests/format/test_serialization.py and
tests/format/test_part_interop.py.
"""

from __future__ import annotations

import decimal
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from spark_mergetree import MergeTreeTable
from spark_mergetree.errors import InvalidOptionError, SchemaMismatchError, UnsupportedError
from spark_mergetree.format.aggregate_states import empty_state
from spark_mergetree.format.conform import conform_array
from spark_mergetree.format.serialization import default_column, serialize_column
from spark_mergetree.format.types import parse_type, to_arrow
from tests.format.chdb_util import close_session, make_chdb_table, open_session
from tests.format.test_part_interop import _attach_and_check, _normalized_rows
from tests.format.test_serialization import _chdb_arrow

PART_KINDS = {
    "Wide": "min_bytes_for_wide_part = 0, min_rows_for_wide_part = 0",
    "Compact": "min_bytes_for_wide_part = 1000000000, min_rows_for_wide_part = 1000000000",
}


def both_ways(tmp_path, columns: list[tuple[str, str, str]], rows: int, select: str = "*",
              ours_as_selected=None, setup: tuple[str, ...] = ()) -> None:
    """ClickHouse writes `columns` (name, type, expression over `number`) into a Wide and a Compact
    part; we read exactly what SELECT returns. Then we write what we read into parts of our own,
    ClickHouse ATTACHes them, CHECK TABLE passes and SELECT returns the same rows again.

    `select` is what ClickHouse exports, for types its Arrow cannot export; `ours_as_selected` turns
    our table into the same form."""
    cols = ", ".join(f"`{name}` {type_text}" for name, type_text, _ in columns)
    exprs = ", ".join(expr for _, _, expr in columns)
    schema = [("id", "UInt64")] + [(name, type_text) for name, type_text, _ in columns]
    for kind, settings in PART_KINDS.items():
        source = f"src_{kind.lower()}"
        sess, data_dir = make_chdb_table(
            tmp_path, f"CREATE TABLE {source} (id UInt64, {cols}) ENGINE = MergeTree ORDER BY id "
                      f"SETTINGS index_granularity = 3, {settings}",
            [f"INSERT INTO {source} SELECT number, {exprs} FROM numbers({rows})"], setup)
        written = sess.query(f"SELECT DISTINCT part_type FROM system.parts WHERE table = '{source}' AND active",
                             "TabSeparatedRaw").bytes().decode().split()
        assert written == [kind]
        statement = sess.query(f"SHOW CREATE TABLE {source}", "TabSeparatedRaw").bytes().decode()
        expected = _days(_chdb_arrow(sess, f"SELECT {select} FROM {source} ORDER BY id")).to_pylist()
        ours = MergeTreeTable.open(data_dir, create_statement=statement).to_arrow().sort_by("id")
        if ours_as_selected is None:
            assert _normalized_rows(_days(ours), dict(schema)) == expected, kind
        else:
            assert ours_as_selected(ours) == expected, kind
        mine = MergeTreeTable.create(tmp_path / f"ours_{kind}", schema, order_by="id",
                                     settings={"index_granularity": 3, "auto_merge": False})
        mine.insert(ours.slice(0, rows // 2))
        mine.insert(ours.slice(rows // 2))
        target = f"back_{kind.lower()}"
        sess.query(f"CREATE TABLE {target} (id UInt64, {cols}) ENGINE = MergeTree ORDER BY id "
                   "SETTINGS index_granularity = 3")
        target_dir = Path(sess.query(f"SELECT data_paths[1] FROM system.tables WHERE name = '{target}'",
                                     "TabSeparatedRaw").bytes().decode().strip())
        _attach_and_check(sess, target, target_dir, mine)
        assert _days(_chdb_arrow(sess, f"SELECT {select} FROM {target} ORDER BY id")).to_pylist() == expected, kind
        close_session()


def _days(table: pa.Table) -> pa.Table:
    """Top-level date32 columns as their day numbers (year 0 has no Python date)."""
    return pa.table({name: column.cast(pa.int32()) if pa.types.is_date32(column.type) else column
                     for name, column in zip(table.column_names, table.columns, strict=True)})


# Types whose Arrow mapping is ClickHouse's own Arrow export.
CLICKHOUSE_ARROW = ["IPv4", "IPv6", "Nullable(IPv4)", "Array(IPv6)"]


@pytest.fixture
def chdb(tmp_path):
    yield open_session(tmp_path)
    close_session()


@pytest.mark.parametrize("type_text", CLICKHOUSE_ARROW)
def test_arrow_type_is_what_clickhouse_exports(chdb, type_text):
    exported = _chdb_arrow(chdb, f"SELECT CAST(defaultValueOfTypeName('{type_text}') AS {type_text}) AS x")
    assert to_arrow(parse_type(type_text)) == exported.schema.field("x").type


IPV4_TEXTS = ["0.0.0.0", "1.2.3.4", "255.255.255.255", "10.0.0.1", "192.168.001.010"]
BAD_IPV4_TEXTS = ["256.1.1.1", "1.2.3", "1.2.3.4.5", "a.b.c.d", "", " 1.2.3.4"]


def test_ipv4_text_is_read_as_clickhouse_reads_it(chdb):
    listed = ", ".join(f"'{t}'" for t in IPV4_TEXTS)
    expected = _chdb_arrow(chdb, f"SELECT toIPv4(arrayJoin([{listed}])) AS x").column("x").to_pylist()
    got = conform_array(pa.array(IPV4_TEXTS + [None]), parse_type("Nullable(IPv4)"), "ip")
    assert got.to_pylist() == expected + [None]


@pytest.mark.parametrize("text", BAD_IPV4_TEXTS)
def test_text_clickhouse_refuses_as_ipv4_is_refused(chdb, text):
    refused = _chdb_arrow(chdb, f"SELECT toIPv4OrNull('{text}') IS NULL AS x").column("x").to_pylist()
    assert refused == [True]
    with pytest.raises(SchemaMismatchError, match="column 'ip'"):
        conform_array(pa.array([text]), parse_type("IPv4"), "ip")


def test_ipv4_numbers_out_of_range_are_refused():
    with pytest.raises(SchemaMismatchError, match="outside IPv4's range"):
        conform_array(pa.array([2**32], pa.int64()), parse_type("IPv4"), "ip")


def test_ipv6_takes_sixteen_bytes_in_network_order(chdb):
    addresses = ["::1", "2001:db8::ff00:42:8329", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"]
    listed = ", ".join(f"'{a}'" for a in addresses)
    exported = _chdb_arrow(chdb, f"SELECT toIPv6(arrayJoin([{listed}])) AS x").column("x").combine_chunks()
    as_binary = exported.cast(pa.binary())
    assert conform_array(as_binary, parse_type("IPv6"), "ip").to_pylist() == exported.to_pylist()
    with pytest.raises(SchemaMismatchError, match="is not 16 bytes"):
        conform_array(pa.array([b"\x01" * 15]), parse_type("IPv6"), "ip")


BFLOAT16_INPUTS = [0.0, -0.0, 1.0, 1.00390625, 1.005859375, 1.0078125, -2.5, 3.4e38, -3.38e38, 1e-40, 1e-45,
                   0.1, 1 / 3, 65504.0, 123456.789]


def test_bfloat16_values_are_converted_as_clickhouse_converts_them(chdb):
    listed = ", ".join(repr(v) for v in BFLOAT16_INPUTS)
    expected = _chdb_arrow(chdb, f"SELECT reinterpretAsUInt16(toBFloat16(arrayJoin([{listed}]))) AS x")
    got = conform_array(pa.array(BFLOAT16_INPUTS, pa.float64()), parse_type("BFloat16"), "bf")
    bits = (np.asarray(got).view(np.uint32) >> 16).tolist()
    assert bits == expected.column("x").to_pylist()
    integers = [0, 1, 255, 257, 65535, 16777217, -1000001]
    listed = ", ".join(str(v) for v in integers)
    expected = _chdb_arrow(chdb, f"SELECT reinterpretAsUInt16(toBFloat16(arrayJoin([{listed}]::Array(Int64)))) AS x")
    got = conform_array(pa.array(integers, pa.int64()), parse_type("BFloat16"), "bf")
    assert (np.asarray(got).view(np.uint32) >> 16).tolist() == expected.column("x").to_pylist()


def test_bfloat16_takes_clickhouses_arrow_bytes(chdb):
    exported = _chdb_arrow(chdb, "SELECT toBFloat16(arrayJoin([1.5, -0.25, 1e30])) AS x, toFloat32(x) AS f")
    got = conform_array(exported.column("x").combine_chunks(), parse_type("BFloat16"), "bf")
    assert got.to_pylist() == exported.column("f").to_pylist()
    with pytest.raises(SchemaMismatchError, match="outside BFloat16's range"):
        conform_array(pa.array([1e39]), parse_type("BFloat16"), "bf")


def test_enum16_extremes_both_ways(tmp_path):
    enum = "Enum16('lo' = -32768, 'z' = 0, 'hi' = 32767)"
    both_ways(tmp_path, [("e", enum, "['lo', 'z', 'hi'][number % 3 + 1]"),
                         ("ne", f"Nullable({enum})", "if(number % 4 = 0, NULL, ['hi', 'lo'][number % 2 + 1])"),
                         ("ae", f"Array({enum})", "arrayMap(x -> ['lo', 'hi'][x % 2 + 1], range(number % 3))")], 7)


# Days ClickHouse gives Date32's ends and a few dates between.
DATE32_EXPRESSIONS = ["toDate32(-1000000)", "toDate32('9999-12-31')", "toDate32('0001-01-01')",
                      "toDate32('1900-01-01')", "toDate32('1969-12-31')", "toDate32('1970-01-01')",
                      "toDate32('2299-12-31')", "toDate32('2300-01-01')"]


def test_date32_extremes_both_ways(tmp_path):
    listed = ", ".join(DATE32_EXPRESSIONS)
    both_ways(tmp_path, [("d", "Date32", f"[{listed}][number % {len(DATE32_EXPRESSIONS)} + 1]"),
                         ("nd", "Nullable(Date32)", f"if(number % 3 = 0, NULL, [{listed}][number % 4 + 1])")],
              len(DATE32_EXPRESSIONS))


def test_days_beyond_date32_are_refused(chdb):
    low, high = _chdb_arrow(chdb, "SELECT toInt32(toDate32(-1000000)) AS low, toInt32(toDate32('9999-12-31')) AS high") \
        .to_pylist()[0].values()
    for days in (low - 1, high + 1):
        # ClickHouse cannot hold the day: a cast gives another one.
        held = _chdb_arrow(chdb, f"SELECT toInt32(CAST({days} AS Date32)) AS x").column("x").to_pylist()
        assert held != [days]
        with pytest.raises(SchemaMismatchError, match="outside Date32's range"):
            conform_array(pa.array([days], pa.int32()).cast(pa.date32()), parse_type("Date32"), "d")
    inside = pa.array([low, high], pa.int32()).cast(pa.date32())
    assert conform_array(inside, parse_type("Date32"), "d").cast(pa.int32()).to_pylist() == [low, high]


# Time and Time64 values ClickHouse holds, negative and beyond a day included (its Arrow export refuses
# those, so both sides are compared as exact decimal seconds).
TIME_TEXTS = ["'-999:59:59'", "'999:59:59'", "'-12:00:01'", "'00:00:00'", "'23:59:59'", "'24:00:00'", "'100:02:03'"]
TIME64_TEXTS = ["'-999:59:59.999999'", "'999:59:59.999999'", "'-00:00:00.000001'", "'12:34:56.123456'", "'0:00:00'"]


def _seconds(value):
    """A timedelta (or a list of them) as exact decimal seconds."""
    if value is None:
        return None
    if isinstance(value, list):
        return [_seconds(v) for v in value]
    return decimal.Decimal(value.days * 86400 + value.seconds) + decimal.Decimal(value.microseconds).scaleb(-6)


def test_time_and_time64_both_ways(tmp_path):
    times = ", ".join(f"toTime({t})" for t in TIME_TEXTS)
    times6 = ", ".join(f"toTime64({t}, 6)" for t in TIME64_TEXTS)
    columns = [("t", "Time", f"[{times}][number % {len(TIME_TEXTS)} + 1]"),
               ("t6", "Time64(6)", f"[{times6}][number % {len(TIME64_TEXTS)} + 1]"),
               ("t1", "Nullable(Time64(1))", "if(number % 3 = 0, NULL, toTime64(toDecimal64(number, 1) * -3599.9, 1))"),
               ("at", "Array(Time64(3))", "arrayMap(x -> toTime64(x * 123456.789, 3), range(number % 3))")]
    select = ("id, toInt32(t) AS t, toDecimal64(t6, 6) AS t6, toDecimal64(t1, 1) AS t1, "
              "arrayMap(x -> toDecimal64(x, 3), at) AS at")

    def ours_as_selected(table: pa.Table) -> list[dict]:
        rows = table.to_pylist()
        return [{"id": r["id"], **{name: _seconds(r[name]) for name in ("t", "t6", "t1", "at")}} for r in rows]

    both_ways(tmp_path, columns, len(TIME_TEXTS) * len(TIME64_TEXTS), select, ours_as_selected)


def test_time_beyond_its_range_is_refused(chdb):
    limit = _chdb_arrow(chdb, "SELECT toInt32(toTime('999:59:59')) AS x").column("x").to_pylist()[0]
    held = _chdb_arrow(chdb, f"SELECT toInt32(CAST({limit + 1} AS Time)) AS x").column("x").to_pylist()
    assert held != [limit + 1]  # ClickHouse cannot hold it
    with pytest.raises(SchemaMismatchError, match="outside Time's range"):
        conform_array(pa.array([limit + 1], pa.duration("s")), parse_type("Time"), "t")
    with pytest.raises(SchemaMismatchError, match="finer than 3 decimal digits"):
        conform_array(pa.array([1], pa.duration("us")), parse_type("Time64(3)"), "t")


def test_time_takes_clickhouses_arrow(chdb):
    exported = _chdb_arrow(chdb, "SELECT toTime('12:34:56') AS t, toTime64('01:02:03.25', 2) AS t2, "
                                 "toInt32(t) AS s, toDecimal64(t2, 2) AS s2")
    row = exported.to_pylist()[0]
    got = conform_array(exported.column("t").combine_chunks(), parse_type("Time"), "t")
    assert got.cast(pa.int64()).to_pylist() == [row["s"]]
    got = conform_array(exported.column("t2").combine_chunks(), parse_type("Time64(2)"), "t2")
    assert decimal.Decimal(got.cast(pa.int64())[0].as_py()).scaleb(-3) == row["s2"]


def test_unflattened_nested_both_ways(tmp_path):
    """With flatten_nested = 0 a Nested column keeps its type and is stored as Array(Tuple(...))."""
    both_ways(tmp_path, [("n", "Nested(a UInt8, `b c` Nullable(String))",
                          "arrayMap(x -> (x, if(x = 1, NULL, toString(x))), range(number % 3))"),
                         ("m", "Nested(k String, v Array(Int32))", "[(toString(number), range(number % 2))]")],
              7, setup=("SET flatten_nested = 0",))


def test_geo_and_simple_aggregate_function_types_keep_their_names():
    for text in ("Point", "Ring", "LineString", "Polygon", "MultiLineString", "MultiPolygon",
                 "SimpleAggregateFunction(sum, UInt64)", "Nested(a UInt8, b String)", "Array(Point)"):
        assert parse_type(text).to_clickhouse() == text
    assert parse_type("Point") != parse_type("Tuple(Float64, Float64)")
    assert to_arrow(parse_type("Point")) == to_arrow(parse_type("Tuple(Float64, Float64)"))


# Functions whose state layout we do not know (format_spec/types.md lists those we do).
REFUSED_TYPES = [("agg", "AggregateFunction(uniqUpTo(4), UInt64)", "uniqUpToState(4)(number)"),
                 ("aggp", "AggregateFunction(histogram(3), Float64)", "histogramState(3)(toFloat64(number))")]


@pytest.mark.parametrize("kind", list(PART_KINDS))
@pytest.mark.parametrize("name,type_text,expr", REFUSED_TYPES, ids=[t[1] for t in REFUSED_TYPES])
def test_states_we_cannot_split_are_refused_naming_column_and_type(tmp_path, name, type_text, expr, kind):
    """The table's other columns are read; its states, and a new table of them, are refused."""
    sess, data_dir = make_chdb_table(
        tmp_path, f"CREATE TABLE t (id UInt64, `{name}` {type_text}) ENGINE = MergeTree ORDER BY id "
                  f"SETTINGS {PART_KINDS[kind]}",
        [f"INSERT INTO t SELECT number, {expr} FROM numbers(3) GROUP BY number"])
    statement = sess.query("SHOW CREATE TABLE t", "TabSeparatedRaw").bytes().decode()
    close_session()
    table = MergeTreeTable.open(data_dir, create_statement=statement)
    assert sorted(table.to_arrow(columns=["id"]).column("id").to_pylist()) == [0, 1, 2]
    with pytest.raises(UnsupportedError, match=rf"'{name}'.*AggregateFunction"):
        table.to_arrow()
    with pytest.raises(UnsupportedError, match=rf"column '{name}'.*AggregateFunction"):
        MergeTreeTable.create(tmp_path / "ours", [("id", "UInt64"), (name, type_text)], order_by="id")


STATE_COLUMNS = [
    ("c", "AggregateFunction(count, UInt64)", "arrayReduce('countState', range(number * 50))"),
    ("s", "AggregateFunction(sum, Int32)", "arrayReduce('sumState', arrayMap(x -> toInt32(x), [toInt64(number) - 5]))"),
    ("a", "AggregateFunction(avg, Float64)", "arrayReduce('avgState', arrayMap(x -> x / 3, range(number)))"),
    ("m", "AggregateFunction(min, DateTime)", "arrayReduce('minState', arrayMap(x -> toDateTime(x * 1000), range(number % 3)))"),
    ("u", "AggregateFunction(uniqExact, UInt16)", "arrayReduce('uniqExactState', arrayMap(x -> toUInt16(x % 5), range(number)))"),
    ("g", "AggregateFunction(groupArray, Int64)", "arrayReduce('groupArrayState', arrayMap(x -> toInt64(x) * -3, range(number % 4)))"),
    ("al", "AggregateFunction(anyLast, Float32)", "arrayReduce('anyLastState', arrayMap(x -> toFloat32(x), range(number % 2)))"),
]


def test_aggregate_function_states_both_ways(tmp_path):
    """States are compared as bytes: ClickHouse's Arrow export cannot give them, `hex(toString(state))` can."""
    select = "id, " + ", ".join(f"hex(toString({name})) AS {name}" for name, _, _ in STATE_COLUMNS)

    def ours_as_selected(table: pa.Table) -> list[dict]:
        return [{k: v if k == "id" else v.hex().upper() for k, v in row.items()} for row in table.to_pylist()]

    both_ways(tmp_path, STATE_COLUMNS, 9, select, ours_as_selected)


def test_a_value_that_is_not_one_state_is_refused():
    table_type = parse_type("AggregateFunction(avg, Float64)")
    good = bytes(8) + b"\x01"
    with pytest.raises(SchemaMismatchError, match="column 'a': row 1 is 10 bytes"):
        serialize_column(table_type, "a", pa.array([good, good + b"\x00"]), np.array([2]))
    with pytest.raises(SchemaMismatchError, match="column 'a'.*runs past the end"):
        serialize_column(table_type, "a", pa.array([good[:5]]), np.array([1]))


@pytest.mark.parametrize("name,type_text,expr", STATE_COLUMNS, ids=[c[1] for c in STATE_COLUMNS])
def test_default_state_is_the_state_of_no_rows(chdb, name, type_text, expr):
    dt = parse_type(type_text)
    argument = dt.arguments[0].to_clickhouse()
    no_rows = _chdb_arrow(chdb, f"SELECT hex(toString(arrayReduce('{dt.function}State', CAST([] AS Array({argument}))))) "
                                "AS x").column("x").to_pylist()
    assert [empty_state(dt).hex().upper()] == no_rows
    assert default_column(dt, 2).to_pylist() == [empty_state(dt)] * 2


def test_new_types_under_column_codecs_both_ways(tmp_path):
    """The codecs of time-series tables over the new types: ClickHouse's parts read, ours (written with
    the same CODEC clauses) attached and checked."""
    both_ways(tmp_path, [
        ("ip", "IPv4 CODEC(T64, LZ4)", "toIPv4(number * 1000003)"),
        ("ipd", "IPv4 CODEC(Delta, ZSTD(1))", "toIPv4(number * 7)"),
        ("t", "Time CODEC(DoubleDelta, LZ4)", "toTime(toInt32(number) * 61 - 1000)"),
        ("t6", "Time64(6) CODEC(Delta(8), ZSTD)", "toTime64(number * 1.000001, 6)"),
        ("tg", "Time CODEC(T64)", "toTime(toInt32(number) * 3)"),
        ("bf", "BFloat16 CODEC(Gorilla, LZ4)", "toBFloat16(number / 7)"),
        ("ip6", "IPv6 CODEC(ZSTD(3))", "toIPv6('::' || toString(number))"),
    ], 40, select="id, toUInt32(ip) AS ip, toUInt32(ipd) AS ipd, toInt32(t) AS t, toDecimal64(t6, 6) AS t6, "
                  "toInt32(tg) AS tg, toFloat32(bf) AS bf, hex(ip6) AS ip6",
       ours_as_selected=lambda table: [
           {"id": r["id"], "ip": r["ip"], "ipd": r["ipd"], "t": _seconds(r["t"]), "t6": _seconds(r["t6"]),
            "tg": _seconds(r["tg"]), "bf": r["bf"], "ip6": r["ip6"].hex().upper()} for r in table.to_pylist()])


CODEC_CHOICES = [("BFloat16", "Gorilla"), ("BFloat16", "FPC"), ("BFloat16", "T64"), ("BFloat16", "GCD"),
                 ("Time", "GCD"), ("Time", "Gorilla"), ("Time64(3)", "T64"), ("Time64(3)", "DoubleDelta"),
                 ("IPv4", "GCD"), ("IPv4", "T64"), ("IPv6", "Delta"), ("IPv6", "ZSTD(1)")]


@pytest.mark.parametrize("type_text,codec", CODEC_CHOICES, ids=[f"{t}-{c}" for t, c in CODEC_CHOICES])
def test_codecs_on_new_types_are_accepted_as_clickhouse_accepts_them(chdb, tmp_path, type_text, codec):
    try:
        chdb.query(f"CREATE TABLE t (a {type_text} CODEC({codec})) ENGINE = MergeTree ORDER BY tuple()")
        clickhouse_accepts = True
    except Exception:  # noqa: BLE001 - chdb raises its own error class for a refused CREATE
        clickhouse_accepts = False
    try:
        MergeTreeTable.create(tmp_path / "ours", [("id", "UInt64"), ("a", f"{type_text} CODEC({codec})")], order_by="id")
        we_accept = True
    except InvalidOptionError as error:
        assert "column 'a'" in str(error)
        we_accept = False
    assert we_accept == clickhouse_accepts


def test_low_cardinality_of_new_types_both_ways(tmp_path):
    """ClickHouse makes these only with allow_suspicious_low_cardinality_types; their parts must still read."""
    both_ways(tmp_path, [("l4", "LowCardinality(IPv4)", "toIPv4(number % 3 * 256)"),
                         ("l6", "LowCardinality(Nullable(IPv6))", "if(number % 4 = 0, NULL, toIPv6('::' || toString(number % 2)))"),
                         ("lb", "LowCardinality(BFloat16)", "toBFloat16(number % 5 / 4)")],
              13, setup=("SET allow_suspicious_low_cardinality_types = 1",))


KEY_TYPES = [("IPv4", "toIPv4(cityHash64(number) % 4294967296)"),
             ("IPv6", "toIPv6(concat(hex(cityHash64(number) % 65536), '::', hex(number)))"),
             ("Time", "toTime(toInt32(cityHash64(number) % 7000000) - 3500000)"),
             ("Time64(3)", "toTime64(toInt64(cityHash64(number) % 7000000) - 3500000 + number / 1000, 3)"),
             ("BFloat16", "toBFloat16((toInt64(cityHash64(number) % 2001) - 1000) / 7)"),
             ("Point", "(toFloat64(cityHash64(number) % 5), -toFloat64(number))")]


@pytest.mark.parametrize("type_text,expr", KEY_TYPES, ids=[t for t, _ in KEY_TYPES])
def test_parts_keyed_by_new_types_are_sorted_as_clickhouse_sorts(tmp_path, type_text, expr):
    """Our parts ORDER BY a column of a new type: ClickHouse finds each part's rows in its own order of
    the key, and a key-range query over our parts returns what a full scan returns."""
    create = f"CREATE TABLE src (id UInt64, k {type_text}) ENGINE = MergeTree ORDER BY id"
    sess, src_dir = make_chdb_table(tmp_path, create, [f"INSERT INTO src SELECT number, {expr} FROM numbers(300)"])
    statement = sess.query("SHOW CREATE TABLE src", "TabSeparatedRaw").bytes().decode()
    close_session()
    src = MergeTreeTable.open(src_dir, create_statement=statement).to_arrow()
    assert src.num_rows == 300
    ours = MergeTreeTable.create(tmp_path / "ours", [("id", "UInt64"), ("k", type_text)], order_by="k",
                                 settings={"index_granularity": 16, "auto_merge": False})
    ours.insert(src.slice(0, 150))
    ours.insert(src.slice(150))
    sess, dst_dir = make_chdb_table(tmp_path, f"CREATE TABLE dst (id UInt64, k {type_text}) ENGINE = MergeTree "
                                              "ORDER BY k SETTINGS index_granularity = 16")
    _attach_and_check(sess, "dst", dst_dir, ours)
    in_order = sess.query("SELECT _part, groupArray(k) = arraySort(groupArray(k)) FROM (SELECT _part, k FROM dst "
                          "ORDER BY _part, _part_offset) GROUP BY _part", "TabSeparatedRaw").bytes().decode().split()
    assert in_order[1::2] == ["1", "1"]
    middle = sess.query("SELECT k FROM dst ORDER BY k LIMIT 1 OFFSET 150", "TabSeparatedRaw").bytes().decode().strip()
    ranged = sess.query(f"SELECT count() FROM dst WHERE k >= '{middle}'", "TabSeparatedRaw").bytes().decode()
    scanned = sess.query(f"SELECT countIf(k >= '{middle}') FROM dst", "TabSeparatedRaw").bytes().decode()
    assert ranged == scanned
    close_session()

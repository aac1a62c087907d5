"""The conformance corpus: one ClickHouse (chdb) table per feature × part kind × partitioning.

Each feature is a list of columns (name, ClickHouse type, expression over `number`) that exercises
one type or codec, bare and nested in Array/Map/Tuple/Nullable/LowCardinality, or one way
ClickHouse changes a part (lightweight DELETE, projections). `generate` makes chdb create every
table and insert deterministic rows in two inserts (two parts per partition), with
`index_granularity = 64` so every part has several granules, and records what ClickHouse's SELECT
returns: the oracle the tests compare our reads and our parts with.

`REFUSED` lists the types this package refuses: reading a table's columns of them must raise
UnsupportedError.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
from chdb import session as chdb_session

from tests.format.chdb_util import open_session

ROWS = 300
GRANULARITY = 64
PART_KINDS = {
    "Wide": "min_bytes_for_wide_part = 0, min_rows_for_wide_part = 0",
    "Compact": "min_bytes_for_wide_part = 1000000000, min_rows_for_wide_part = 1000000000",
}
PARTITION_BY = "intDiv(id, 128)"
SETUP = ("SET allow_suspicious_codecs = 1", "SET allow_suspicious_low_cardinality_types = 1",
         "SET allow_experimental_time_time64_type = 1", "SET enable_time_time64_type = 1")

Column = tuple[str, str, str]


def _nested(name: str, type_text: str, expr: str, low_cardinality: bool = False) -> list[Column]:
    """`type_text` bare and inside Nullable, Array, Map, Tuple (and LowCardinality when it allows)."""
    e = expr.replace("number", "n_")
    columns = [
        (name, type_text, expr),
        (f"{name}_n", f"Nullable({type_text})", f"if(number % 5 = 0, NULL, {expr})"),
        (f"{name}_a", f"Array({type_text})", f"arrayMap(n_ -> {e}, range(number, number + number % 4))"),
        (f"{name}_m", f"Map(String, {type_text})",
         f"mapFromArrays(arrayMap(n_ -> 'k' || toString(n_), range(number % 3)), "
         f"arrayMap(n_ -> {e}, range(number % 3)))"),
        (f"{name}_t", f"Tuple(x {type_text}, y Array(Nullable({type_text})))",
         f"tuple({expr}, arrayMap(n_ -> if(n_ % 2 = 1, NULL, {e}), range(number % 3)))"),
    ]
    if low_cardinality:
        columns += [
            (f"{name}_lc", f"LowCardinality({type_text})", expr.replace("number", "(number % 7)")),
            (f"{name}_lcn", f"LowCardinality(Nullable({type_text}))",
             f"if(number % 4 = 0, NULL, {expr.replace('number', '(number % 9)')})"),
            (f"{name}_alc", f"Array(LowCardinality({type_text}))",
             f"arrayMap(n_ -> {e.replace('n_', '(n_ % 5)')}, range(number % 3))"),
        ]
    return columns


def _codec(name: str, codec: str, columns: list[tuple[str, str]]) -> list[Column]:
    return [(f"{name}_{i}", f"{type_text} CODEC({codec})", expr) for i, (type_text, expr) in enumerate(columns)]


_SERIES = [("UInt32", "toUInt32(1000000 + number * 3)"), ("Int64", "toInt64(number * number) - 5000"),
           ("Float64", "sin(number) * 1000"), ("DateTime", "toDateTime(1700000000 + number * 60, 'UTC')")]
_FLOATS = [("Float64", "number / 7 + 100"), ("Float32", "toFloat32(sin(number / 10))")]

FEATURES: dict[str, list[Column]] = {
    "UInt": _nested("u8", "UInt8", "toUInt8(number * 37 % 256)", True)
    + [("u16", "UInt16", "toUInt16(65535 - number)"), ("u32", "UInt32", "toUInt32(4294967295 - number)"),
       ("u64", "UInt64", "if(number = 9, 18446744073709551615, number * 1000003)"),
       ("u128", "UInt128", "toUInt128(number) * toUInt128('34028236692093846346337460743176821')"),
       ("u256", "UInt256", "toUInt256(number) * toUInt256('1' || repeat('0', 73)) + toUInt256('12345678901234567890')")],
    "Int": _nested("i32", "Int32", "toInt32(-2147483648 + number * 7)", True)
    + [("i8", "Int8", "toInt8(if(number % 2, -128, 127))"), ("i16", "Int16", "toInt16(-32768 + number)"),
       ("i64", "Int64", "if(number = 3, -9223372036854775808, toInt64(number) - 5)"),
       ("i128", "Int128", "toInt128(number) * toInt128('-17014118346046923173168730371588410')"),
       ("i256", "Int256", "toInt256(number) * toInt256('-1' || repeat('0', 73)) - toInt256('98765432109876543210')")],
    "Float": _nested("f64", "Float64", "if(number = 4, -inf, if(number = 5, nan, number / 7))", True)
    + [("f32", "Float32", "toFloat32(number) / 3")],
    "BFloat16": _nested("bf", "BFloat16", "toBFloat16(number / 7 - 1)"),
    "Bool": _nested("b", "Bool", "number % 3 = 0"),
    "Decimal": _nested("d9", "Decimal(9, 2)", "toDecimal32(number * 1.25 - 5, 2)")
    + [("d18", "Decimal(18, 4)", "toDecimal64(-123456789.1234 + number, 4)"),
       ("d38", "Decimal(38, 10)", "toDecimal128('-1234567890123456789012345678.9', 10) + number"),
       ("d76", "Decimal(76, 20)", "toDecimal256('-12345678901234567890123456789012345678.9', 20) + number")],
    "String": _nested("s", "String", "repeat(['', 'a', 'привет', 'x\\0y', '日本'][number % 5 + 1], number % 4)", True),
    "FixedString": _nested("fs", "FixedString(4)", "toFixedString(['', 'ab', 'abcd', 'é'][number % 4 + 1], 4)", True),
    "Date": _nested("d", "Date", "toDate('1970-01-01') + number * 200", True),
    "Date32": _nested("d32", "Date32", "toDate32('1900-01-01') + number * 600")
    + [("d32x", "Date32", "[toDate32('1900-01-01'), toDate32('2299-12-31'), toDate32('1970-01-01')][number % 3 + 1]")],
    "DateTime": _nested("dt", "DateTime('UTC')", "toDateTime(number * 14000000, 'UTC')", True)
    + [("dtz", "DateTime('Asia/Tokyo')", "toDateTime(number * 12345678, 'Asia/Tokyo')")],
    "DateTime64": _nested("dt64", "DateTime64(3, 'UTC')", "toDateTime64(-1000.5 + number * 10000000.123, 3, 'UTC')")
    + [("dt64ns", "DateTime64(9, 'UTC')", "toDateTime64(number * 1.000000001, 9, 'UTC')"),
       ("dt64b", "DateTime64(2, 'Europe/Berlin')", "toDateTime64(number * 1.01, 2, 'Europe/Berlin')")],
    "Time": _nested("tm", "Time", "toTime(number % 23 * 3677)"),
    "Time64": _nested("tm64", "Time64(3)", "toTime64(number % 23 * 3677.125, 3)"),
    "UUID": _nested("uid", "UUID", "reinterpretAsUUID(reverse(unhex(hex(cityHash64(number)) || hex(number))))"),
    "Enum8": _nested("e8", "Enum8('b' = -2, 'a' = 1, 'c' = 127)", "['a', 'b', 'c'][number % 3 + 1]"),
    "Enum16": _nested("e16", "Enum16('x' = 1000, 'y' = -1000, 'z' = 32767)", "['x', 'y', 'z'][number % 3 + 1]"),
    "IPv4": _nested("ip4", "IPv4", "toIPv4(number * 16909060)", True),
    "IPv6": _nested("ip6", "IPv6", "toIPv6('2001:db8:' || hex(number) || '::1')", True),
    "Geo": [("pt", "Point", "(number / 2, -number)"), ("ring", "Ring", "arrayMap(x -> (x, x * 2.5), range(number % 3))"),
            ("ls", "LineString", "arrayMap(x -> (1, x), range(number % 4))"),
            ("mls", "MultiLineString", "[arrayMap(x -> (1, x), range(number % 4)), [(0, 0)]]"),
            ("poly", "Polygon", "[arrayMap(x -> (x, 1), range(number % 3)), []]"),
            ("mpoly", "MultiPolygon", "[[arrayMap(x -> (x, 1), range(number % 2))], []]"),
            ("apt", "Array(Point)", "[(number, 1.5)]")],
    "Nested": [("n", "Nested(a UInt8, b String)", "range(number % 3), arrayMap(x -> toString(x), range(number % 3))")],
    "Nesting": [("amn", "Array(Map(String, Nullable(Float32)))",
                 "[map('a', [toFloat32(number), NULL][(number % 2 = 0) + 1]), map()]"),
                ("ma", "Map(LowCardinality(String), Array(String))",
                 "mapFromArrays(arrayMap(x -> toString(x % 2), range(number % 2)), arrayMap(x -> ['v', ''], range(number % 2)))"),
                ("aas", "Array(Array(Nullable(String)))", "[arrayMap(x -> if(x = 1, NULL, toString(x)), range(number % 3)), []]"),
                ("tt", "Tuple(a Tuple(b Array(Tuple(c UInt8, d Nullable(String)))), e Map(UInt16, Tuple(f IPv6, g Time)))",
                 "tuple(tuple(arrayMap(x -> tuple(x, if(x = 1, NULL, toString(x))), range(number % 3))), "
                 "map(toUInt16(number), tuple(toIPv6('::1'), toTime(number))))"),
                ("weird.na-me ü", "Tuple(`a.b` Array(Nullable(String)), m Map(String, Array(String)))",
                 "tuple(arrayMap(x -> ['v', NULL][(x = 1) + 1], range(number % 3)), map('k', ['a']))")],
    "SimpleAggregateFunction": [("saf", "SimpleAggregateFunction(sum, UInt64)", "number * 3"),
                                ("safn", "SimpleAggregateFunction(anyLast, Nullable(String))",
                                 "if(number % 2 = 1, NULL, toString(number))"),
                                ("safmax", "SimpleAggregateFunction(max, DateTime('UTC'))",
                                 "toDateTime(number * 1000, 'UTC')")],
    "AggregateFunction": [("af_sum", "AggregateFunction(sum, UInt64)", "initializeAggregation('sumState', number)"),
                          ("af_uniq", "AggregateFunction(uniqExact, UInt32)",
                           "initializeAggregation('uniqExactState', toUInt32(number % 5))"),
                          ("af_avg", "AggregateFunction(avg, Float64)", "initializeAggregation('avgState', number / 3)"),
                          ("af_ga", "AggregateFunction(groupArray, Date)",
                           "initializeAggregation('groupArrayState', toDate('2020-01-01') + number)"),
                          ("af_u", "AggregateFunction(uniq, UInt64)", "initializeAggregation('uniqState', number)"),
                          ("af_uc", "AggregateFunction(uniqCombined(15), String)",
                           "initializeAggregation('uniqCombinedState(15)', toString(number))"),
                          ("af_q", "AggregateFunction(quantiles(0.5, 0.9), Float64)",
                           "initializeAggregation('quantilesState(0.5, 0.9)', number / 3)"),
                          ("af_qt", "AggregateFunction(quantileTDigest, UInt32)",
                           "initializeAggregation('quantileTDigestState', toUInt32(number))"),
                          ("af_am", "AggregateFunction(argMax, String, DateTime)",
                           "initializeAggregation('argMaxState', toString(number), toDateTime(number * 1000, 'UTC'))"),
                          ("af_min", "AggregateFunction(min, String)", "initializeAggregation('minState', repeat('m', number % 4))"),
                          ("af_top", "AggregateFunction(topK(3), String)",
                           "initializeAggregation('topKState(3)', toString(number % 5))"),
                          ("af_sm", "AggregateFunction(sumMap, Map(String, UInt32))",
                           "initializeAggregation('sumMapState', map(toString(number % 3), toUInt32(number)))"),
                          ("af_qd", "AggregateFunction(1, quantileDeterministic(0.5), Float64, UInt64)",
                           "initializeAggregation('quantileDeterministicState(0.5)', toFloat64(number), number)"),
                          ("af_bm", "AggregateFunction(groupBitmap, UInt64)",
                           "initializeAggregation('groupBitmapState', number)"),
                          ("af_if", "AggregateFunction(sumIf, Int32, UInt8)",
                           "initializeAggregation('sumIfState', toInt32(-toInt64(number)), number % 2 = 0)"),
                          ("af_ent", "AggregateFunction(entropy, UInt64)", "initializeAggregation('entropyState', number)"),
                          ("af_bf", "AggregateFunction(quantileBFloat16(0.5), Float64)",
                           "initializeAggregation('quantileBFloat16State(0.5)', toFloat64(number))"),
                          ("af_var", "AggregateFunction(varSamp, Float64)", "initializeAggregation('varSampState', number / 3)"),
                          ("af_wf", "AggregateFunction(windowFunnel(60), DateTime, UInt8, UInt8)",
                           "initializeAggregation('windowFunnelState(60)', toDateTime(number, 'UTC'), number % 2 = 0, "
                           "number % 3 = 0)"),
                          ("af_ret", "AggregateFunction(retention, UInt8, UInt8)",
                           "initializeAggregation('retentionState', number % 2 = 0, number % 5 = 0)"),
                          ("af_heavy", "AggregateFunction(anyHeavy, String)",
                           "initializeAggregation('anyHeavyState', toString(number % 4))"),
                          ("af_gc", "AggregateFunction(groupConcat, String)",
                           "initializeAggregation('groupConcatState', toString(number))")],
    "codec-Delta-ZSTD": _codec("c", "Delta, ZSTD", _SERIES) + _codec("c1", "Delta(1), LZ4", [("UInt8", "toUInt8(number)")]),
    "codec-DoubleDelta-LZ4": _codec("c", "DoubleDelta, LZ4", _SERIES),
    "codec-Gorilla": _codec("c", "Gorilla", _FLOATS + [("Nullable(Float64)", "if(number % 3 = 0, NULL, number / 3)")]),
    "codec-T64": _codec("c", "T64", [("UInt32", "toUInt32(number * 11)"), ("Int64", "toInt64(number) - 100"),
                                     ("Array(UInt16)", "[toUInt16(number), 7]")]) + _codec("z", "T64, ZSTD", [("DateTime", "toDateTime(number * 7, 'UTC')")]),
    "codec-FPC": _codec("c", "FPC", _FLOATS) + _codec("l", "FPC(12, 4)", [("Float32", "toFloat32(number / 9)")]),
    "codec-GCD": _codec("c", "GCD, LZ4", [("UInt64", "number * 1000"), ("Decimal(18, 2)", "toDecimal64(number * 5, 2)"),
                                          ("Date", "toDate('2000-01-01') + number * 7")]),
    "codec-LZ4HC": _codec("c", "LZ4HC(9)", [("String", "toString(number % 17)"), ("UInt64", "number")]),
    "codec-ZSTD": _codec("c", "ZSTD(3)", [("String", "repeat('a', number % 9)")]) + _codec("n", "ZSTD(-1)", [("UInt32", "toUInt32(number)")]),
    "codec-NONE": _codec("c", "NONE", [("String", "toString(number)"), ("Nullable(UInt16)", "if(number % 2, NULL, number)")]),
}
# Features that change a part rather than add a type: (columns, extra CREATE clauses, statements after
# the inserts, extra settings).
PART_FEATURES: dict[str, tuple[list[Column], str, tuple[str, ...], str]] = {
    "lightweight-delete": ([("s", "String", "toString(number)"), ("v", "Nullable(Int32)", "if(number % 3 = 0, NULL, number)")],
                           "", ("DELETE FROM {table} WHERE id % 7 = 0 OR id BETWEEN 100 AND 140",), ""),
    "projection": ([("k", "UInt32", "toUInt32(number % 13)"), ("v", "Float64", "number / 3")],
                   ", PROJECTION by_k (SELECT k, sum(v) GROUP BY k), PROJECTION ordered (SELECT * ORDER BY k), "
                   "PROJECTION by_v INDEX v TYPE basic, PROJECTION stats (SELECT k % 4, uniq(v), uniqExact(k), "
                   "quantile(0.5)(v), countIf(v > 10), argMax(id, v) GROUP BY k % 4)", (), ""),
    # Packed part storage: each part is one `data.packed` archive of its files.
    "packed": ([("s", "String", "toString(number)"), ("a", "Array(LowCardinality(String))", "[toString(number % 3)]"),
                ("n", "Nullable(Float32)", "if(number % 4 = 0, NULL, number / 4)")], "", (),
               ", min_bytes_for_full_part_storage = 1000000000"),
}
# Types this package refuses to read or write: UnsupportedError, never wrong rows. (Of the types
# ClickHouse creates from a plain INSERT only AggregateFunction states of layouts not known here;
# JSON and Dynamic in any container are covered by tests/format/test_variant_dynamic_json.py.)
REFUSED: dict[str, list[Column]] = {
    "uniqUpTo": [("au", "AggregateFunction(uniqUpTo(4), UInt64)", "initializeAggregation('uniqUpToState(4)', number)")],
    "histogram": [("ah", "AggregateFunction(histogram(3), Float64)",
                   "initializeAggregation('histogramState(3)', toFloat64(number))")],
}


@dataclass(frozen=True)
class Case:
    feature: str
    kind: str  # "Wide" or "Compact"
    partitioned: bool

    @property
    def id(self) -> str:
        return f"{self.feature}-{self.kind}-{'partitioned' if self.partitioned else 'flat'}"

    @property
    def table(self) -> str:
        return "t_" + "".join(c if c.isalnum() else "_" for c in self.id)

    @property
    def columns(self) -> list[Column]:
        if self.feature in PART_FEATURES:
            return PART_FEATURES[self.feature][0]
        return (FEATURES | REFUSED)[self.feature]

    @property
    def state_columns(self) -> list[str]:
        """AggregateFunction columns: ClickHouse's Arrow cannot export states, so they are compared
        as `hex(toString(state))`."""
        return [name for name, type_text, _ in self.columns if type_text.startswith("AggregateFunction(")]

    def select_sql(self, table: str | None = None) -> str:
        """SELECT of every column, ordered by the key, in a form ClickHouse's Arrow export gives."""
        states = self.state_columns
        listed = "*" if not states else "* EXCEPT (" + ", ".join(states) + "), " + ", ".join(
            f"hex(toString({name})) AS {name}" for name in states)
        return f"SELECT {listed} FROM {table or self.table} ORDER BY id"

    def create_sql(self, table: str | None = None) -> str:
        extra, settings = (PART_FEATURES[self.feature][1], PART_FEATURES[self.feature][3]) \
            if self.feature in PART_FEATURES else ("", "")
        cols = ", ".join(f"`{name}` {type_text}" for name, type_text, _ in self.columns)
        partition = f" PARTITION BY {PARTITION_BY}" if self.partitioned else ""
        return (f"CREATE TABLE {table or self.table} (id UInt64, {cols}{extra}) ENGINE = MergeTree{partition} "
                f"ORDER BY id SETTINGS index_granularity = {GRANULARITY}, {PART_KINDS[self.kind]}{settings}")

    def statements(self) -> list[str]:
        exprs = ", ".join(expr for _, _, expr in self.columns)
        inserts = [f"INSERT INTO {self.table} SELECT number, {exprs} FROM numbers({start}, {ROWS // 2})"
                   for start in (0, ROWS // 2)]
        after = PART_FEATURES[self.feature][2] if self.feature in PART_FEATURES else ()
        return inserts + [s.format(table=self.table) for s in after]


def cases(features: dict | None = None) -> list[Case]:
    names = list(features if features is not None else FEATURES | PART_FEATURES)
    return [Case(f, kind, p) for f in names for kind in PART_KINDS for p in (False, True)]


@dataclass
class Made:
    """A table chdb made: its directory, statement, part kinds, and SELECT * ORDER BY id as Arrow."""

    data_dir: Path
    statement: str
    part_types: list[str]
    expected: pa.Table | None
    parts: list[Path] = field(default_factory=list)
    types: dict[str, str] = field(default_factory=dict)  # column → type, as system.columns lists them


@dataclass
class Corpus:
    session: chdb_session.Session
    root: Path
    made: dict[str, Made]


def query_text(sess: chdb_session.Session, sql: str) -> str:
    return sess.query(sql, "TabSeparatedRaw").bytes().decode()


def query_arrow(sess: chdb_session.Session, sql: str) -> pa.Table:
    return pa.ipc.open_file(pa.py_buffer(sess.query(sql, "Arrow").bytes())).read_all()


def data_dir_of(sess: chdb_session.Session, table: str) -> Path:
    return Path(query_text(sess, f"SELECT data_paths[1] FROM system.tables WHERE database = currentDatabase() "
                                 f"AND name = '{table}'").strip())


def make(sess: chdb_session.Session, case: Case, select_expected: bool = True) -> Made:
    sess.query(case.create_sql())
    for statement in case.statements():
        sess.query(statement)
    types = query_text(sess, f"SELECT DISTINCT part_type FROM system.parts WHERE database = currentDatabase() "
                             f"AND table = '{case.table}' AND active").split()
    parts = [Path(p) for p in query_text(sess, f"SELECT path FROM system.parts WHERE database = currentDatabase() "
                                               f"AND table = '{case.table}' AND active ORDER BY name").split()]
    expected = query_arrow(sess, case.select_sql()) if select_expected else None
    columns = query_text(sess, f"SELECT name, type FROM system.columns WHERE database = currentDatabase() "
                               f"AND table = '{case.table}'")
    column_types = dict(line.split("\t", 1) for line in columns.splitlines())
    return Made(data_dir_of(sess, case.table), query_text(sess, f"SHOW CREATE TABLE {case.table}"),
                types, expected, parts, column_types)


def generate(root: Path, all_cases: list[Case]) -> Corpus:
    """Make every case's table in one chdb session under `root`."""
    sess = open_session(root, SETUP)
    made = {case.id: make(sess, case, case.feature not in REFUSED) for case in all_cases}
    return Corpus(sess, root, made)

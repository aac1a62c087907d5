"""format/states_simple.py against chdb: the states it builds from groups of rows, and the states it
combines, must be ClickHouse's bytes (`<f>State` over the same rows in the same order, and
`<f>MergeState` over a column of states in order).

Each case fills a chdb MergeTree table with random values (edge values and ties among them) in
groups of rows, reads its part back with this package's reader (so the arguments are in the Arrow
form the builders get), and compares every function's states per group, then the combination of
chdb's states of sub-groups (stored in a table ordered by group and sub-group)."""

from __future__ import annotations

import functools
import random
import uuid
from collections.abc import Iterator
from datetime import date, datetime, timedelta, timezone

import numpy as np
import pyarrow as pa
import pytest

from spark_mergetree.format.part_reader import PartReader
from spark_mergetree.format.states_simple import builder
from spark_mergetree.format.types import AggregateFunction, parse_type, to_arrow
from spark_mergetree.storage.part_store import PartStore
from spark_mergetree.storage.policy import StoragePolicy
from tests.format.chdb_util import active_part_dirs, close_session, open_session

ROWS = 400


@pytest.fixture(scope="module")
def ch(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    sess = open_session(tmp_path_factory.mktemp("states_simple"))
    yield sess
    close_session()


def _sql_text(raw: bytes) -> str:
    return "'" + "".join(chr(b) if 32 <= b < 127 and b not in (39, 92) else f"\\x{b:02x}" for b in raw) + "'"


def _integers(rng: random.Random, bits: int, signed: bool) -> list[str]:
    low, high = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
    if bits == 256:  # what Arrow's decimal256 (our reader's form) holds: 76 digits
        low, high = max(low, 1 - 10 ** 76), min(high, 10 ** 76 - 1)
    pool = [low, high, 0, 1] + ([-1] if signed else [])
    return [str(rng.choice(pool) if rng.random() < 0.3 else rng.randint(low, high)) for _ in range(ROWS)]


def _floats(rng: random.Random) -> list[str]:
    pool = ["nan", "inf", "-inf", "0", "-0", "1e-300", "-1.5", "1e300"]
    return [rng.choice(pool) if rng.random() < 0.3 else repr(rng.uniform(-1e6, 1e6)) for _ in range(ROWS)]


def _decimals(rng: random.Random, precision: int, scale: int) -> list[str]:
    def one() -> str:
        digits = str(rng.randint(0, 10 ** rng.randint(0, precision) - 1)).rjust(scale + 1, "0")
        return ("-" if rng.random() < 0.5 else "") + digits[:len(digits) - scale] + ("." + digits[-scale:] if scale else "")
    return [one() for _ in range(ROWS)]


def _strings(rng: random.Random, longest: int) -> list[str]:
    pool = [b"", b"a", b"\x00", b"ab", b"\xff\x00z"]
    out = []
    for _ in range(ROWS):
        raw = rng.choice(pool) if rng.random() < 0.4 else bytes(rng.randrange(256) for _ in range(rng.randint(0, longest)))
        out.append(raw)
    return [_sql_text(raw) for raw in out]


def _values(rng: random.Random, type_text: str) -> list[str]:
    """ROWS values of a type as SQL text (a CAST of each gives the value)."""
    # A few values repeat so that ties are common.
    name = type_text.removeprefix("LowCardinality(").removesuffix(")") if type_text.startswith("Low") else type_text
    if name.startswith(("Int", "UInt")):
        bits = int(name.lstrip("UInt"))
        return [f"'{v}'" for v in _integers(rng, bits, name.startswith("Int"))]
    if name.startswith("Float"):
        return [f"'{v}'" for v in _floats(rng)]
    if name == "Bool":
        return [rng.choice(["'true'", "'false'"]) for _ in range(ROWS)]
    if name in ("Date", "Date32"):
        first, days = (date(1970, 1, 1), 65535) if name == "Date" else (date(1900, 1, 1), 146000)
        return [f"'{first + timedelta(days=rng.choice([0, days, rng.randint(0, days)]))}'" for _ in range(ROWS)]
    if name.startswith("DateTime"):
        stamps = [datetime(1970, 1, 1, tzinfo=timezone.utc) + timedelta(seconds=rng.randint(0, 0xFFFFFFFF),
                                                                          milliseconds=rng.randint(0, 999))
                  for _ in range(ROWS)]
        return [f"'{s:%Y-%m-%d %H:%M:%S.%f}'"[:-4] + "'" if name.startswith("DateTime64") else f"'{s:%Y-%m-%d %H:%M:%S}'"
                for s in stamps]
    if name.startswith("Decimal"):
        precision, scale = (int(p) for p in name[8:-1].split(","))
        return [f"'{v}'" for v in _decimals(rng, precision, scale)]
    if name == "UUID":
        pool = [str(uuid.UUID(int=rng.getrandbits(128))) for _ in range(6)]
        return [f"'{rng.choice(pool) if rng.random() < 0.5 else uuid.UUID(int=rng.getrandbits(128))}'" for _ in range(ROWS)]
    if name.startswith("FixedString"):
        return _strings(rng, int(name[12:-1]))
    if name == "String":
        return _strings(rng, 40) if rng.random() < 0.8 else _strings(rng, 300)
    raise AssertionError(name)


def _groups(rng: random.Random) -> tuple[list[int], list[int]]:
    """A group and a sub-group number per row (groups of 1 to 40 rows, sub-groups within them)."""
    groups: list[int] = []
    subs: list[int] = []
    g = 0
    while len(groups) < ROWS:
        size = rng.choice([1, 2, 3, rng.randint(1, 40)])
        sub = 0
        for k in range(size):
            if k and rng.random() < 0.3:
                sub += 1
            groups.append(g)
            subs.append(sub)
        g += 1
    return groups[:ROWS], subs[:ROWS]


_table_number = 0


def _fill(ch: object, seed: int, columns: dict[str, str]) -> tuple[str, pa.Table, np.ndarray]:
    """A chdb table of ROWS rows: i (order), g and sub (group, sub-group) and `columns` of random
    values; our reader's Arrow table of it, and the start of each group."""
    global _table_number
    _table_number += 1
    table = f"t{_table_number}"
    rng = random.Random(seed)
    groups, subs = _groups(rng)
    body = ", ".join(f"`{name}` {type_text}" for name, type_text in columns.items())
    ch.query(f"CREATE TABLE {table} (i UInt32, g UInt32, sub UInt32, {body}) ENGINE = MergeTree ORDER BY i "  # type: ignore[attr-defined]
             "SETTINGS min_bytes_for_wide_part = 0")
    selects = [f"arrayElement([{', '.join(map(str, groups))}], number + 1)",
               f"arrayElement([{', '.join(map(str, subs))}], number + 1)"]
    for type_text in columns.values():
        inner = type_text.removeprefix("LowCardinality(").removesuffix(")") if type_text.startswith("Low") else type_text
        selects.append(f"arrayElement(CAST([{', '.join(_values(rng, type_text))}] AS Array({inner})), number + 1)")
    ch.query(f"INSERT INTO {table} SELECT toUInt32(number), {', '.join(selects)} FROM numbers({ROWS})")  # type: ignore[attr-defined]
    [part] = active_part_dirs(ch, table)  # type: ignore[arg-type]
    rows = PartReader(PartStore(StoragePolicy.single(part.parent)), part.name, str(part)).read()
    g = np.asarray(rows.column("g"))
    starts = np.flatnonzero(np.r_[True, g[1:] != g[:-1]]).astype(np.int64)
    return table, rows, starts


def _hex_rows(ch: object, sql: str) -> list[list[str]]:
    text = ch.query(sql + " SETTINGS max_threads = 1, optimize_aggregation_in_order = 0", "TSV").bytes().decode()  # type: ignore[attr-defined]
    return [line.split("\t") for line in text.splitlines()]


def _without_nan_signs(states: list[str], function: str, float_width: int) -> list[str]:
    """Hex states of moments with every NaN made the positive quiet NaN: which NaN's bits a sum
    keeps when a NaN of the data meets one its additions made (inf - inf) depends on how ClickHouse's
    compiler ordered each addition's operands, which differs between accumulators of one state."""
    out = []
    for text in states:
        state = bytes.fromhex(text)
        start = 0
        if function.endswith("Stable"):  # a varuint count comes first
            while state[start] & 0x80:
                start += 1
            start += 1
        body = np.frombuffer(state[start:], f"<f{float_width}").copy()
        body[np.isnan(body)] = np.nan
        out.append((state[:start] + body.tobytes()).hex().upper())
    return out


def _unchanged(states: list[str]) -> list[str]:
    return states


def _check(ch: object, seed: int, columns: dict[str, str], calls: list[tuple[str, tuple[str, ...]]],
           nan_signs: bool = True) -> None:
    """Each call (function with its parameters, argument columns): our states of each group equal
    chdb's, and our combination of chdb's states of sub-groups equals chdb's merge of them (not
    `nan_signs`: the moments, whose NaNs are compared without their sign bit)."""
    table, rows, starts = _fill(ch, seed, columns)
    n = rows.num_rows
    for number, (call, argument_columns) in enumerate(calls):
        function, _, params = call.partition("(")
        parameters = "(" + params if params else ""
        arg_types = ", ".join(columns[c] for c in argument_columns)
        dt = parse_type(f"AggregateFunction({call}{', ' + arg_types if arg_types else ''})")
        assert isinstance(dt, AggregateFunction)
        built = builder(dt)
        assert built is not None, dt.to_clickhouse()
        sql_args = ", ".join(f"`{c}`" for c in argument_columns)
        expected = [r[1] for r in _hex_rows(ch, f"SELECT g, hex({function}State{parameters}({sql_args})) FROM {table} GROUP BY g ORDER BY g")]
        ours = built.states(dt, [rows.column(c).combine_chunks() for c in argument_columns], starts, n)
        width = 4 if all(columns[c] == "Float32" for c in argument_columns) and not function.endswith("Stable") else 8
        same = functools.partial(_without_nan_signs, function=function, float_width=width) if not nan_signs \
            else _unchanged
        assert same([s.hex().upper() for s in ours.to_pylist()]) == same(expected), f"{call}({arg_types})"

        # chdb's states of sub-groups, stored in order, merged per group.
        state_table = f"{table}_states{number}"
        ch.query(f"CREATE TABLE {state_table} (g UInt32, sub UInt32, st {dt.to_clickhouse()}) ENGINE = MergeTree "  # type: ignore[attr-defined]
                 f"ORDER BY (g, sub) AS SELECT g, sub + 1, {function}State{parameters}({sql_args}) FROM {table} GROUP BY g, sub")
        # States of no rows (what -If leaves when no row passes) first, last, or alone in a group.
        no_rows = ", ".join(f"CAST([] AS Array({columns[c]}))" for c in argument_columns) or "[]"
        ch.query(f"INSERT INTO {state_table} SELECT g, if(g % 2, 0, 1000), arrayReduce('{function}State{parameters}', "  # type: ignore[attr-defined]
                 f"{no_rows}) FROM (SELECT DISTINCT g FROM {table} WHERE g % 3 = 0 UNION ALL SELECT 100000)")
        ch.query(f"OPTIMIZE TABLE {state_table} FINAL")  # type: ignore[attr-defined]
        parts = _hex_rows(ch, f"SELECT g, hex(st) FROM {state_table} ORDER BY g, sub")
        merged = [r[1] for r in _hex_rows(ch, f"SELECT g, hex({function}MergeState{parameters}(st)) "
                                               f"FROM {state_table} GROUP BY g ORDER BY g")]
        state_groups = np.array([int(r[0]) for r in parts])
        state_starts = np.flatnonzero(np.r_[True, state_groups[1:] != state_groups[:-1]]).astype(np.int64)
        column = pa.array([bytes.fromhex(r[1]) for r in parts], pa.binary())
        combined = built.combine(dt, column, state_starts)
        assert same([s.hex().upper() for s in combined.to_pylist()]) == same(merged), f"{call}({arg_types}) combined"


_SINGLE_TYPES = ["Int8", "UInt8", "Int16", "UInt16", "Int32", "UInt32", "Int64", "UInt64", "Int128", "UInt128",
                 "Int256", "UInt256", "Float32", "Float64", "Bool", "Date", "Date32", "DateTime('UTC')",
                 "DateTime64(3, 'UTC')", "Decimal(9, 2)", "Decimal(18, 4)", "Decimal(38, 10)", "Decimal(76, 20)",
                 "UUID", "String", "FixedString(3)", "LowCardinality(String)"]


@pytest.mark.parametrize("type_text", _SINGLE_TYPES)
def test_single_values_and_lists(ch: object, type_text: str) -> None:
    """min, max, any, anyLast, argMin, argMax, groupArray (and groupArray(N)), count, over every
    type: byte for byte, built and combined."""
    calls: list[tuple[str, tuple[str, ...]]] = [
        (f, ("x",)) for f in ("min", "max", "any", "anyLast", "groupArray", "groupArray(3)", "count")]
    calls += [("count", ())]
    if type_text != "FixedString(3)":  # (not known to format/aggregate_states.py: refused, see test_refused)
        calls.append(("anyHeavy", ("x",)))
    calls += [("argMin", ("s", "x")), ("argMax", ("x", "s")), ("argMin", ("x", "x")), ("argMax", ("k", "x"))]
    _check(ch, _SINGLE_TYPES.index(type_text), {"x": type_text, "s": "String", "k": "Int32"}, calls)


_SUM_TYPES = ["Int8", "UInt8", "Int32", "UInt64", "Int64", "Float32", "Float64", "Bool", "Decimal(9, 2)",
              "Decimal(18, 4)", "Decimal(38, 10)"]


@pytest.mark.parametrize("type_text", _SUM_TYPES)
def test_sums(ch: object, type_text: str) -> None:
    calls: list[tuple[str, tuple[str, ...]]] = [(f, ("x",)) for f in ("sum", "avg", "sumCount", "sumWithOverflow")]
    if not type_text.startswith("Decimal(38"):
        calls.append(("sumKahan", ("x",)))
    _check(ch, 100 + _SUM_TYPES.index(type_text), {"x": type_text}, calls)


@pytest.mark.parametrize("type_text", ["Int128", "UInt128", "Decimal(76, 20)"])
def test_wide_sums(ch: object, type_text: str) -> None:
    calls: list[tuple[str, tuple[str, ...]]] = [("sumWithOverflow", ("x",))]
    if type_text.endswith("128"):
        calls.append(("sumKahan", ("x",)))
    _check(ch, 200 + len(type_text), {"x": type_text}, calls)


def test_refused() -> None:
    """Types whose state layout format/aggregate_states.py does not know get no builder."""
    for text in ("sumWithOverflow, Int256", "sum, Int128", "sum, Decimal(76, 2)", "min, IPv4", "groupArrayLast(3), Int8",
                 "sumCount, UInt256", "covarPop, Float32, Float64", "uniq, Int8", "anyHeavy, FixedString(3)",
                 "min, Enum8('a' = 1)", "avgWeighted, Int128, Int8", "sumMap, Map(String, UInt8)",
                 "varSampStable, Int256", "varPop, Int256", "sumKahan, Decimal(38, 2)"):
        dt = parse_type(f"AggregateFunction({text})")
        assert isinstance(dt, AggregateFunction)
        assert builder(dt) is None, text


@pytest.mark.parametrize("pair", [("Int8", "UInt8"), ("Float32", "Int8"), ("Int64", "Float64"), ("UInt64", "UInt32"),
                                  ("Float64", "Bool"), ("UInt16", "Int64")])
def test_avg_weighted(ch: object, pair: tuple[str, str]) -> None:
    _check(ch, 300 + len("".join(pair)), {"x": pair[0], "w": pair[1]}, [("avgWeighted", ("x", "w"))])


_MOMENT_TYPES = ["Float64", "Float32", "Int32", "UInt64", "Bool", "Decimal(18, 4)", "Decimal(38, 10)", "Int128",
                 "UInt8", "Decimal(76, 30)", "UInt128", "Decimal(9, 3)"]


@pytest.mark.parametrize("type_text", _MOMENT_TYPES)
def test_moments(ch: object, type_text: str) -> None:
    """The plain moments (sums of powers) and the *Stable forms (Welford), built and combined."""
    calls: list[tuple[str, tuple[str, ...]]] = [
        (f, ("x",)) for f in ("varPop", "stddevSamp", "skewPop", "kurtSamp", "varSampStable", "stddevPopStable")]
    _check(ch, 400 + _MOMENT_TYPES.index(type_text), {"x": type_text}, calls, nan_signs=False)


@pytest.mark.parametrize("pair", [("Float64", "Float64"), ("Float32", "Float32"), ("Int32", "Float64"),
                                  ("UInt64", "Int8"), ("Date", "Int16")])
def test_co_moments(ch: object, pair: tuple[str, str]) -> None:
    calls: list[tuple[str, tuple[str, ...]]] = [
        (f, ("x", "y")) for f in ("covarPop", "covarSamp", "corr", "covarPopStable", "corrStable")]
    if pair[0] == "Date":
        calls = [c for c in calls if c[0].endswith("Stable")]
    _check(ch, 500 + len("".join(pair)), {"x": pair[0], "y": pair[1]}, calls, nan_signs=False)


@pytest.mark.parametrize("type_text", ["Date", "Date32", "DateTime('UTC')", "DateTime64(3, 'UTC')"])
def test_stable_moments_of_other_types(ch: object, type_text: str) -> None:
    """The *Stable forms also take dates and times (a DateTime64 as its value in seconds)."""
    calls: list[tuple[str, tuple[str, ...]]] = [("varPopStable", ("x",)), ("covarSampStable", ("x", "y")),
                                                ("corrStable", ("y", "x"))]
    _check(ch, 600 + len(type_text), {"x": type_text, "y": "Float64"}, calls, nan_signs=False)


@pytest.mark.parametrize("text", ["min, Float64", "sum, Decimal(18, 4)", "groupArray(2), String", "varPopStable, Int32",
                                  "argMax, String, Float64", "count", "anyHeavy, String", "avgWeighted, Int8, UInt8",
                                  "sumKahan, Float32", "corr, Float64, Int8", "sumWithOverflow, Int128", "kurtPop, Float32"])
def test_no_groups(text: str) -> None:
    """No rows: no states, and no states to combine."""
    dt = parse_type(f"AggregateFunction({text})")
    assert isinstance(dt, AggregateFunction)
    built = builder(dt)
    assert built is not None
    no_rows = [pa.array([], to_arrow(a)) for a in dt.arguments]
    assert len(built.states(dt, no_rows, np.zeros(0, np.int64), 0)) == 0
    assert len(built.combine(dt, pa.array([], pa.binary()), np.zeros(0, np.int64))) == 0


def test_dictionary_and_chunked_arguments() -> None:
    """A LowCardinality argument may come dictionary-encoded, in chunks."""
    dt = parse_type("AggregateFunction(max, LowCardinality(String))")
    assert isinstance(dt, AggregateFunction)
    built = builder(dt)
    assert built is not None
    column = pa.chunked_array([pa.array(["b", "a", "c"]).dictionary_encode(), pa.array(["z", "a"]).dictionary_encode()])
    assert built.states(dt, [column], np.array([0, 2], np.int64), 5).to_pylist() == [b"\x02\0\0\0b\0", b"\x02\0\0\0z\0"]

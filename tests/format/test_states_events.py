"""States of retention, windowFunnel, sequenceMatch, sequenceCount, the -Distinct forms, entropy,
quantileBFloat16, groupConcat and topK, built from rows and combined, compared byte for byte with
chdb 26.9's.

Built states: chdb aggregates the same rows with GROUP BY in one thread (rows added in order).
Combined states: chdb makes a state per (group, part) and merges each group's states in part order
with -MergeState in one thread; our combine of the same state bytes must give the same bytes.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import pytest

from spark_mergetree.format.aggregate_states import state_layout
from spark_mergetree.format.states_events import builder
from spark_mergetree.format.types import AggregateFunction, parse_type
from tests.format.chdb_util import close_session, open_session
from tests.format.state_groups import arrow_of, group_of

V = "((number * 7919) % 6007)"
W = "((number * 31) % 13)"
VALUES = {
    "UInt8": f"toUInt8({V} % 256)",
    "Int8": f"toInt8(toInt32({V} % 251) - 125)",
    "UInt16": f"toUInt16({V})",
    "Int16": f"toInt16(toInt32({V}) - 3000)",
    "UInt32": f"toUInt32({V} * 100003)",
    "Int32": f"toInt32({V}) - 3000",
    "UInt64": f"{V} * 1000000007",
    "Int64": f"toInt64({V}) - 3000",
    "Float32": f"if({V} = 3, nan, toFloat32({V} * 0.25 - 100))",
    "Float64": f"if({V} = 5, -0., if({V} = 6, nan, {V} * 0.37 - 3))",
    "Bool": f"{V} % 2 = 1",
    "Date": f"toDate({V})",
    "Date32": f"toDate32(toInt32({V}) - 2000)",
    "String": f"if({V} % 7 = 0, '', toString({V}))",
    "FixedString(3)": f"toFixedString(leftPad(toString({V} % 1000), 3, '0'), 3)",
    "Decimal(9, 2)": f"toDecimal32({V}, 2) - 20",
    "Decimal(18, 3)": f"toDecimal64({V}, 3)",
    "Decimal(38, 5)": f"toDecimal128({V} / 7, 5) - 1",
    "Decimal(50, 10)": f"toDecimal256({V} / 3, 10) - 100",
    "Int128": f"toInt128({V}) - 3000",
    "UInt128": f"toUInt128({V}) * 1000000007",
    "UInt256": f"toUInt256({V}) * 1000000007",
    "Int256": f"toInt256({V}) - 3000",
    "DateTime('UTC')": f"toDateTime({V} * 1000, 'UTC')",
    "DateTime('Asia/Kolkata')": f"toDateTime({V} * 100000, 'Asia/Kolkata')",
    "DateTime64(3, 'UTC')": f"toDateTime64({V}, 3, 'UTC')",
    "UUID": f"reinterpretAsUUID(concat(reinterpretAsString(cityHash64({V})), reinterpretAsString(cityHash64({V} + 1))))",
}
# A few values repeated (for the maps and topK): the same types over fewer distinct values.
FEW = {name: expr.replace(V, W) for name, expr in VALUES.items()}
SIZES = [1, 2, 15, 16, 17, 40, 700]
PART_SIZES = [[3, 1, 30, 200, 17], [20, 14, 2, 700, 0], [1, 16, 500, 4, 40]]


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    yield open_session(tmp_path_factory.mktemp("states_events"))
    close_session()


def _query(session: Any, sql: str) -> str:
    return session.query(sql, "TabSeparatedRaw").bytes().decode()


def _split(function: str) -> tuple[str, str]:
    name, _, params = function.partition("(")
    return name, "(" + params if params else ""


def _type(function: str, types: tuple[str, ...]) -> AggregateFunction:
    parsed = parse_type(f"AggregateFunction({function}, {', '.join(types)})")
    assert isinstance(parsed, AggregateFunction)
    return parsed


def _chdb_states(session: Any, function: str, exprs: list[str], types: tuple[str, ...], sizes: list[int]) -> list[bytes]:
    key, _, n = group_of(sizes)
    name, params = _split(function)
    args = ", ".join(f"CAST({e} AS {t})" for e, t in zip(exprs, types, strict=True))
    text = _query(session, f"SELECT hex({name}State{params}({args})) FROM numbers({n}) GROUP BY {key} AS g ORDER BY g "
                           "SETTINGS max_threads = 1")
    return [bytes.fromhex(line) for line in text.split("\n") if line]


def _check_built(session: Any, function: str, exprs: list[str], types: tuple[str, ...], sizes: list[int]) -> None:
    dt = _type(function, types)
    made = builder(dt)
    assert made is not None, dt.to_clickhouse()
    _, starts, n = group_of(sizes)
    ours = made.states(dt, arrow_of(session, exprs, types, n), starts, n).to_pylist()
    theirs = _chdb_states(session, function, exprs, types, sizes)
    assert len(ours) == len(theirs) == len(sizes)
    for size, mine, clickhouse in zip(sizes, ours, theirs, strict=True):
        assert mine == clickhouse, f"{function}({types}) over {size} rows: {mine.hex()} != {clickhouse.hex()}"


def _check_combined(session: Any, function: str, exprs: list[str], types: tuple[str, ...],
                    part_sizes: list[list[int]] = PART_SIZES) -> None:
    """States per (group, part) made by chdb, merged per group in part order, against our combine."""
    dt = _type(function, types)
    made = builder(dt)
    assert made is not None
    name, params = _split(function)
    merge_params = params
    groups = len(part_sizes[0])
    rows = []  # (part, group, rows) in the order numbers are laid out
    for part, sizes in enumerate(part_sizes):
        for group, size in enumerate(sizes):
            rows.append((part, group, size))
    bounds = np.cumsum([r[2] for r in rows])
    n = int(bounds[-1])
    part_key = "multiIf(" + ", ".join(f"number < {b}, {p}" for b, (p, _, _) in zip(bounds[:-1], rows[:-1], strict=True)) \
        + f", {rows[-1][0]})"
    group_key = "multiIf(" + ", ".join(f"number < {b}, {g}" for b, (_, g, _) in zip(bounds[:-1], rows[:-1], strict=True)) \
        + f", {rows[-1][1]})"
    args = ", ".join(f"CAST({e} AS {t})" for e, t in zip(exprs, types, strict=True))
    # The states go through a table (written, then read back) as a merge of parts reads them.
    session.query("DROP TABLE IF EXISTS parts_states")
    session.query(f"CREATE TABLE parts_states (g UInt32, p UInt32, s {dt.to_clickhouse()}) ENGINE = MergeTree "
                  "ORDER BY (g, p)")
    session.query(f"INSERT INTO parts_states SELECT {group_key} AS g, {part_key} AS p, {name}State{params}({args}) "
                  f"FROM numbers({n}) GROUP BY g, p SETTINGS max_threads = 1")
    # The bytes the parts hold: serialized once (reading the table back would show them re-serialized).
    text = _query(session, f"SELECT {group_key} AS g, {part_key} AS p, hex({name}State{params}({args})) FROM numbers({n}) "
                           "GROUP BY g, p ORDER BY g, p SETTINGS max_threads = 1")
    states = [bytes.fromhex(line.split("\t")[2]) for line in text.split("\n") if line]
    keys = [int(line.split("\t")[0]) for line in text.split("\n") if line]
    merged = _query(session, f"SELECT g, hex({name}MergeState{merge_params}(s)) FROM (SELECT g, s FROM parts_states "
                             "ORDER BY g, p) GROUP BY g ORDER BY g SETTINGS max_threads = 1")
    theirs = [bytes.fromhex(line.split("\t")[1]) for line in merged.split("\n") if line]
    starts = np.searchsorted(np.array(keys), np.arange(groups)).astype(np.int64)
    ours = made.combine(dt, pa.array(states, pa.binary()), starts).to_pylist()
    assert len(ours) == len(theirs)
    for g, (mine, clickhouse) in enumerate(zip(ours, theirs, strict=True)):
        assert mine == clickhouse, f"{function}({types}) group {g}: {mine.hex()} != {clickhouse.hex()}"


# ---------------------------------------------------------------------------------------- retention

def test_retention(session: Any) -> None:
    conditions = [f"{V} % 3 = 0", f"{V} % 5 = 1", f"{V} % 7 = 2", "number % 11 = 4"]
    for k in (2, 4):
        types = ("UInt8",) * k
        _check_built(session, "retention", conditions[:k], types, SIZES)
        _check_combined(session, "retention", conditions[:k], types)


# ------------------------------------------------------------------------------------------- events

STAMPS = {"UInt8": f"toUInt8({W} * 3)", "UInt16": f"toUInt16({V})", "UInt32": f"toUInt32({V} * 100003)",
          "UInt64": f"{V} * 1000000007", "Date": f"toDate({V})", "DateTime('UTC')": f"toDateTime({V} * 1000, 'UTC')"}
EVENTS = [("windowFunnel(10)", 2), ("windowFunnel(100, 'strict_order')", 3), ("windowFunnel(5, 'strict_deduplication')", 2),
          ("windowFunnel(50, 'strict_increase', 'strict_order')", 3), ("sequenceMatch('(?1)(?2)')", 2),
          ("sequenceCount('(?1).*(?2)')", 3), ("sequenceMatch('(?1)(?t>10)(?2)')", 3)]


def _event_exprs(stamp: str, conditions: int) -> list[str]:
    # Conditions met by some rows, by several at once, and by none; timestamps that repeat and go back.
    return [STAMPS[stamp], *[f"({V} + {i}) % {i + 2} = 0" for i in range(conditions)]]


@pytest.mark.parametrize("stamp", list(STAMPS))
@pytest.mark.parametrize(("function", "conditions"), EVENTS)
def test_events(session: Any, function: str, conditions: int, stamp: str) -> None:
    types = (stamp, *("UInt8",) * conditions)
    exprs = _event_exprs(stamp, conditions)
    _check_built(session, function, exprs, types, SIZES)
    _check_combined(session, function, exprs, types)


def test_sorted_input_keeps_sorted_flag(session: Any) -> None:
    exprs = ["toUInt32(number)", "number % 2 = 0", "number % 3 = 1"]
    types = ("UInt32", "UInt8", "UInt8")
    _check_built(session, "windowFunnel(10)", exprs, types, SIZES)
    _check_built(session, "sequenceCount('(?1)(?2)')", exprs, types, SIZES)


def test_strict_once_is_not_built() -> None:
    """'strict_once' adds a row number to each event: a layout not known, so not built."""
    assert builder(_type("windowFunnel(10, 'strict_once')", ("UInt32", "UInt8", "UInt8"))) is None


# ------------------------------------------------------------------------------------------ Distinct

DISTINCT_TYPES = {"sumDistinct": ["UInt8", "Int16", "UInt32", "Int64", "UInt64", "Float32", "Float64", "Bool"],
                  "countDistinct": ["UInt16", "Int32", "Float64", "String"],
                  "avgDistinct": ["Int8", "UInt64", "Float32"],
                  "uniqExactDistinct": ["UInt32", "String", "Int64"]}
_DISTINCT = [(f, t) for f, ts in DISTINCT_TYPES.items() for t in ts]


@pytest.mark.parametrize(("function", "type_text"), _DISTINCT)
def test_distinct(session: Any, function: str, type_text: str) -> None:
    assert state_layout(_type(function, (type_text,))) is not None
    _check_built(session, function, [VALUES[type_text]], (type_text,), [*SIZES, 5000])
    _check_combined(session, function, [VALUES[type_text]], (type_text,))


# ------------------------------------------------------------------------------------- counting maps

ENTROPY_TYPES = ["UInt8", "Int16", "UInt32", "Int64", "UInt64", "Float32", "Float64", "Bool", "Date", "String",
                 "Decimal(9, 2)", "Decimal(18, 3)", "Int128", "UInt128"]
BFLOAT_TYPES = ["UInt8", "Int8", "UInt16", "Int32", "UInt64", "Int64", "Float32", "Float64", "Date", "Bool"]


@pytest.mark.parametrize("type_text", ENTROPY_TYPES)
def test_entropy(session: Any, type_text: str) -> None:
    for values in (VALUES, FEW):
        _check_built(session, "entropy", [values[type_text]], (type_text,), [*SIZES, 3000])
        _check_combined(session, "entropy", [values[type_text]], (type_text,))


@pytest.mark.parametrize("function", ["quantileBFloat16", "quantilesBFloat16(0.1, 0.9)"])
@pytest.mark.parametrize("type_text", BFLOAT_TYPES)
def test_bfloat16(session: Any, function: str, type_text: str) -> None:
    for values in (VALUES, FEW):
        _check_built(session, function, [values[type_text]], (type_text,), [*SIZES, 3000])
        _check_combined(session, function, [values[type_text]], (type_text,))


# --------------------------------------------------------------------------------------- groupConcat

CONCAT_TYPES = ["String", "FixedString(3)", "UInt8", "Int16", "UInt64", "Int64", "Bool", "Date", "Date32", "Int128", "UInt128",
                "UInt256", "Int256", "Decimal(9, 2)", "Decimal(18, 3)", "Decimal(38, 5)", "DateTime('UTC')", "DateTime('Asia/Kolkata')"]


@pytest.mark.parametrize("function", ["groupConcat", "groupConcat(', ')", "groupConcat('|')"])
@pytest.mark.parametrize("type_text", CONCAT_TYPES)
def test_group_concat(session: Any, function: str, type_text: str) -> None:
    _check_built(session, function, [VALUES[type_text]], (type_text,), SIZES)
    _check_combined(session, function, [VALUES[type_text]], (type_text,))


def test_group_concat_of_other_types_is_not_built() -> None:
    """Floats, DateTime64, UUID, Decimal256 and the other types: their text is ClickHouse's own."""
    for type_text in ("Float64", "Float32", "DateTime64(3, 'UTC')", "UUID", "Decimal(50, 10)", "Array(UInt8)"):
        assert builder(_type("groupConcat", (type_text,))) is None, type_text


# ---------------------------------------------------------------------------------------------- topK

TOPK_TYPES = ["UInt8", "Int32", "UInt64", "Float64", "Date", "String", "FixedString(3)", "Decimal(9, 2)", "Bool", "Int128",
              "UInt256", "DateTime('UTC')", "DateTime64(3, 'UTC')", "UUID", "Date32"]


@pytest.mark.parametrize("function", ["topK", "topK(5)", "topK(2)"])
@pytest.mark.parametrize("type_text", TOPK_TYPES)
def test_topk(session: Any, function: str, type_text: str) -> None:
    reserved = 3 * int(function[5:-1] or 10) if "(" in function else 30
    sizes = [s for s in SIZES if s <= reserved]
    exprs = [FEW[type_text].replace("% 13", f"% {min(13, reserved)}")]
    _check_built(session, function, exprs, (type_text,), [*sizes, 200])
    parts = [[min(s, reserved) for s in sizes] for sizes in PART_SIZES]
    _check_combined(session, function, exprs, (type_text,), parts)


def test_topk_of_more_than_601_counters(session: Any) -> None:
    """topK(120): ClickHouse truncates 720 counters at once, miniselect sampling a range first; the
    written 360 sort past libc++'s depth limit into its heap sort in places."""
    expr = ["toUInt32(if(number % 4 = 0, number % 13, (number * 7919) % 2003))"]
    _check_built(session, "topK(120)", expr, ("UInt32",), [6000, 800, 3000])
    _check_combined(session, "topK(120)", expr, ("UInt32",), [[3000, 900], [2500, 10], [100, 2000]])


def test_topk_weighted_is_not_built() -> None:
    """topKWeighted's layout is not known to format/aggregate_states.py: no builder."""
    assert builder(_type("topKWeighted(3)", ("UInt32", "UInt64"))) is None


@pytest.mark.parametrize(("function", "type_text"), [("topK(3)", "UInt32"), ("topK", "UInt64"), ("topK(5)", "String"),
                                                     ("topK(20)", "Int16"), ("topK(4)", "Decimal(9, 2)")])
def test_topk_evictions(session: Any, function: str, type_text: str) -> None:
    """Groups of many distinct values: ClickHouse truncates its counters into the alpha map, and
    new values start from it; merges raise the counters by the other state's largest alpha."""
    expr = [f"CAST(if(number % 3 = 0, number % 7, (number * 7919) % 997) AS {type_text})"]
    _check_built(session, function, expr, (type_text,), [5000, 300, 64, 65, 2000])
    _check_combined(session, function, expr, (type_text,), [[3000, 10, 500], [4000, 200, 100], [900, 3000, 1]])


@pytest.mark.parametrize("function", ["topK", "topK(8)", "topK(50)"])
def test_topk_sorts_many_tied_counters_as_libcxx(session: Any, function: str) -> None:
    """Written counters of 24 and more, with many ties: libc++'s introsort order (median of three,
    Tukey's ninther past 128, partitions with equals on either side)."""
    distinct = 63 if function != "topK(50)" else 299
    expr = [f"toUInt32(((number * 7919) % {distinct * 3} % {distinct}) * 11)"]
    _check_built(session, function, expr, ("UInt32",), [200, 60, 500, 31, 1000])
    _check_combined(session, function, expr, ("UInt32",), [[30, 10, 50], [40, 2, 100], [9, 39, 150]])


@pytest.mark.parametrize("type_text", ["UInt32", "String"])
def test_topk_past_capacity(session: Any, type_text: str) -> None:
    """More distinct values than 3N (but fewer than the truncation): the written counters are the
    3N first of ClickHouse's partial sort."""
    expr = [f"CAST((number * 7) % 40 AS {type_text})"]
    _check_built(session, "topK(5)", expr, (type_text,), [100, 39, 63, 20])
    _check_combined(session, "topK(5)", expr, (type_text,), [[30, 10, 5], [40, 2, 50], [9, 39, 1]])


def test_combining_states_of_no_rows() -> None:
    """Merging only states of no rows gives the fresh state ClickHouse writes (measured)."""
    cases = {("topK(2)", ("UInt8",)): b"\0\0", ("windowFunnel(10)", ("UInt32", "UInt8", "UInt8")): b"\x01" + bytes(8),
             ("sequenceCount('(?1)')", ("UInt32", "UInt8")): b"\x01" + bytes(8), ("entropy", ("String",)): b"\0",
             ("groupConcat(',')", ("String",)): b"\0", ("retention", ("UInt8", "UInt8")): bytes(4),
             ("sumDistinct", ("UInt32",)): b"\0", ("quantileBFloat16", ("Float64",)): b"\0"}
    for (function, types), fresh in cases.items():
        dt = _type(function, types)
        made = builder(dt)
        assert made is not None
        empty = state_layout(dt).empty  # type: ignore[union-attr]
        combined = made.combine(dt, pa.array([empty, empty], pa.binary()), np.array([0], np.int64)).to_pylist()
        assert combined == [fresh], function


@pytest.mark.parametrize(("function", "types", "exprs"), [
    ("topKIf(3)", ("UInt32", "UInt8"), ["toUInt32(number % 17)", "number % 3 = 0"]),
    ("entropyIf", ("String", "UInt8"), ["toString(number % 11)", "number % 4 != 1"]),
    ("sumDistinctIf", ("Int64", "UInt8"), ["toInt64(number % 23) - 5", "number % 2 = 0"]),
    ("groupConcatIf(',')", ("UInt16", "UInt8"), ["toUInt16(number)", "number % 5 = 0"]),
    ("sequenceCountIf('(?1)(?2)')", ("UInt32", "UInt8", "UInt8", "UInt8"),
     ["toUInt32(number % 50)", "number % 3 = 0", "number % 5 = 0", "number % 7 != 0"])])
def test_conditional_forms_through_the_dispatcher(session: Any, function: str, types: tuple[str, ...],
                                                  exprs: list[str]) -> None:
    """The -If forms (state_builders applies the condition, then this family builds the state)."""
    from spark_mergetree.format.state_builders import states_of_rows

    dt = _type(function, types)
    sizes = [1, 40, 300, 7]
    _, starts, n = group_of(sizes)
    ours = states_of_rows(dt, arrow_of(session, exprs, types, n), starts, n).to_pylist()
    assert ours == _chdb_states(session, function, exprs, types, sizes)


# ------------------------------------------------------------------------------------- end to end

PROJECTED = ("retention(c1, c2), windowFunnel(3600)(ts, c1, c2), sequenceCount('(?1)(?2)')(ts, c1, c2), "
             "sequenceMatch('(?1)(?t>100)(?2)')(ts, c1, c2), sumDistinct(k), avgDistinct(v), uniqExactDistinct(id), "
             "entropy(k), entropy(s), quantileBFloat16(0.5)(v), quantilesBFloat16(0.1, 0.9)(k), "
             "groupConcat(',')(k), groupConcat(s), topK(5)(k), topK(s)")
PROJECTED_ROWS = ("SELECT toDateTime('2024-03-01 00:00:00', 'UTC') + (number * 7919) % 20000 AS ts, number + {offset} AS id, "
                  "toUInt32((number * 7) % 13) AS k, (number + {offset}) / 3 AS v, toString((number * 31) % 4) AS s, "
                  "toUInt8(k % 3 = 1) AS c1, toUInt8(k % 4 = 2) AS c2 FROM numbers({rows})")


def test_projections_of_inserts_and_merges_are_clickhouses(tmp_path: Any) -> None:
    """A table with an aggregate projection of these functions, filled by the same inserts in chdb
    and here: the projection's files are ClickHouse's byte for byte after the inserts and after
    OPTIMIZE FINAL, and ClickHouse answers from our merged part as from its own. (Last in this
    file: its chdb session replaces the module's.)"""
    from spark_mergetree import MergeTreeTable
    from spark_mergetree.expressions.ddl import parse_create
    from tests.format.chdb_util import attach_and_check, make_chdb_table, paired_part_dirs

    create = (f"CREATE TABLE t (ts DateTime('UTC'), id UInt64, k UInt32, v Float64, s String, c1 UInt8, c2 UInt8, "
              f"PROJECTION ev (SELECT s, {PROJECTED} GROUP BY s)) ENGINE = MergeTree ORDER BY id "
              "SETTINGS index_granularity = 64, min_bytes_for_wide_part = 0")
    sess, data_dir = make_chdb_table(tmp_path, create)
    try:
        sess.query("SYSTEM STOP MERGES t")
        statement = sess.query("SHOW CREATE TABLE t", "TabSeparatedRaw").bytes().decode()
        ours = MergeTreeTable.new(tmp_path / "ours", parse_create(statement), {"auto_merge": False})
        ours.write_directory()
        for offset, rows in ((0, 700), (700, 400)):
            rows_sql = PROJECTED_ROWS.format(offset=offset, rows=rows)
            sess.query("INSERT INTO t " + rows_sql)
            ours.insert(ipc.open_file(pa.py_buffer(sess.query(rows_sql, "Arrow").bytes())).read_all())

        def same(theirs: Any, mine: Any) -> None:
            files = sorted(f.name for f in (theirs / "ev.proj").iterdir() if f.suffix in (".bin", ".idx")) + ["columns.txt"]
            assert files
            for name in files:
                assert (mine / "ev.proj" / name).read_bytes() == (theirs / "ev.proj" / name).read_bytes(), name

        for theirs, mine in paired_part_dirs(data_dir, ours):
            same(theirs, mine)
        ours.optimize(final=True)
        (part,) = ours.parts()
        sess.query("SYSTEM START MERGES t")
        sess.query("OPTIMIZE TABLE t FINAL")
        same(data_dir / "all_1_2_1", ours.path / part.name)
        sess.query("CREATE TABLE merged AS t")
        attach_and_check(sess, "merged", [ours.path / part.name])
        query = f"SELECT s, {PROJECTED} FROM {{}} GROUP BY s ORDER BY s SETTINGS force_optimize_projection = 1"
        assert _query(sess, query.format("merged")) == _query(sess, query.format("t"))
    finally:
        close_session()

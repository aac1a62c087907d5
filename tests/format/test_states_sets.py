"""States of uniq, uniqExact, uniqHLL12, uniqCombined(K), uniqCombined64(K) and groupUniqArray(N),
built from rows and combined, compared byte for byte with chdb 26.9's.

Built states: chdb aggregates the same rows with GROUP BY in one thread (rows added in order), over
groups of sizes where the sets change form (uniqCombined: small set → hash set → HyperLogLog;
uniqHLL12: small set → HyperLogLog; uniq: the table grows, and thins past 65536 hashes), for every
argument type the family knows and for several arguments.

Combined states: parts of an AggregatingMergeTree table (one state per key per part) are merged by
OPTIMIZE FINAL; combining the parts' states key by key gives the merged part's states. A part's
states are themselves a combination (the insert merges the block's states), so combining each built
state alone gives the part's state.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from spark_mergetree.errors import CorruptPartError
from spark_mergetree.format.aggregate_states import state_layout
from spark_mergetree.format.states_sets import builder
from spark_mergetree.format.types import AggregateFunction, parse_type
from tests.format.chdb_util import close_session, open_session
from tests.format.state_groups import arrow_of, group_of

# A value with repeats (and zero at number 0): the rows of each type below are made of it.
V = "((number * 7919) % 6007)"
TYPES = {
    "UInt8": f"toUInt8({V} % 256)",
    "Int8": f"toInt8(toInt32({V} % 251) - 125)",
    "UInt16": f"toUInt16({V})",
    "Int16": f"toInt16(toInt32({V}) - 3000)",
    "UInt32": f"toUInt32({V} * 100003)",
    "Int32": f"toInt32({V}) - 3000",
    "UInt64": f"{V} * 1000000007",
    "Int64": f"toInt64({V}) - 3000",
    "Float32": f"toFloat32({V} * 0.25 - 100)",
    "Float64": f"if({V} = 5, -0., {V} * 0.37 - 3)",
    "Bool": f"{V} % 2 = 1",
    "Date": f"toDate({V})",
    "Date32": f"toDate32(toInt32({V}) - 2000)",
    "DateTime('UTC')": f"toDateTime({V} * 1000, 'UTC')",
    "DateTime64(3, 'UTC')": f"toDateTime64({V}, 3, 'UTC')",
    "Decimal(9, 2)": f"toDecimal32({V}, 2) - 20",
    "Decimal(18, 3)": f"toDecimal64({V}, 3)",
    "Decimal(38, 5)": f"toDecimal128({V}, 5)",
    "String": f"if({V} % 7 = 0, '', toString({V}))",
    "FixedString(3)": f"toFixedString(leftPad(toString({V} % 1000), 3, '0'), 3)",
    "UUID": f"reinterpretAsUUID(concat(reinterpretAsString(cityHash64({V})), reinterpretAsString(cityHash64({V} + 1))))",
    "Int128": f"toInt128({V}) - 3000",
    "UInt128": f"toUInt128({V}) * 1000000007",
    "Int256": f"toInt256({V}) - 3000",
    "UInt256": f"toUInt256({V}) * 1000000007",
}
FUNCTIONS = ["uniq", "uniqExact", "uniqHLL12", "uniqCombined", "uniqCombined(12)", "uniqCombined(20)", "uniqCombined64",
             "uniqCombined64(15)", "groupUniqArray", "groupUniqArray(5)"]
# Group sizes: the sets change form past 16 keys, past 2^(K-4) or 2^(K-5) (uniqCombined) keys.
SIZES = [1, 2, 16, 17, 40, 700, 9000]
MULTI = [("uniq", ("UInt64", "String")), ("uniqExact", ("Int32", "String")), ("uniqExact", ("UInt8", "Decimal(9, 2)")),
         ("uniqCombined", ("String", "Float64")), ("uniqCombined64", ("Date", "FixedString(3)")),
         ("uniqHLL12", ("UInt8", "String")), ("uniqCombined(13)", ("UUID", "Int64"))]


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    yield open_session(tmp_path_factory.mktemp("states_sets"))
    close_session()


def _query(session: Any, sql: str) -> str:
    return session.query(sql, "TabSeparatedRaw").bytes().decode()


def _chdb_states(session: Any, function: str, exprs: list[str], types: tuple[str, ...], sizes: list[int]) -> list[bytes]:
    key, _, n = group_of(sizes)
    name, _, params = function.partition("(")
    state = f"{name}State{'(' + params if params else ''}"
    args = ", ".join(f"CAST({e} AS {t})" for e, t in zip(exprs, types, strict=True))
    text = _query(session, f"SELECT hex({state}({args})) FROM numbers({n}) GROUP BY {key} AS g ORDER BY g "
                           "SETTINGS max_threads = 1")
    return [bytes.fromhex(line) for line in text.split("\n") if line]


def _type(function: str, types: tuple[str, ...]) -> AggregateFunction:
    parsed = parse_type(f"AggregateFunction({function}, {', '.join(types)})")
    assert isinstance(parsed, AggregateFunction)
    return parsed


def _build(session: Any, function: str, types: tuple[str, ...], sizes: list[int]) -> tuple[list[bytes], list[bytes]]:
    dt = _type(function, types)
    made = builder(dt)
    assert made is not None, dt.to_clickhouse()
    _, starts, n = group_of(sizes)
    exprs = [TYPES[t] if i == 0 else TYPES[t].replace(V, f"(({V} * 31) % 577)") for i, t in enumerate(types)]
    ours = made.states(dt, arrow_of(session, exprs, types, n), starts, n).to_pylist()
    return ours, _chdb_states(session, function, exprs, types, sizes)


def _known(function: str, types: tuple[str, ...]) -> bool:
    return state_layout(_type(function, types)) is not None


_PAIRS = [(function, type_text) for function in FUNCTIONS for type_text in TYPES]


@pytest.mark.parametrize(("function", "type_text"), [p for p in _PAIRS if _known(p[0], (p[1],))])
def test_built_states_are_clickhouses(session: Any, function: str, type_text: str) -> None:
    ours, theirs = _build(session, function, (type_text,), SIZES)
    assert len(ours) == len(theirs) == len(SIZES)
    for size, mine, clickhouse in zip(SIZES, ours, theirs, strict=True):
        assert mine == clickhouse, f"{function}({type_text}) over {size} rows"


def test_no_builder_where_the_layout_is_not_known() -> None:
    unknown = [p for p in _PAIRS if not _known(p[0], (p[1],))]
    assert unknown  # (256-bit integers of uniq, uniqExact, uniqCombined; 128/256-bit of uniqHLL12)
    for function, type_text in unknown:
        assert builder(_type(function, (type_text,))) is None, (function, type_text)


@pytest.mark.parametrize(("function", "types"), MULTI)
def test_built_states_of_several_arguments(session: Any, function: str, types: tuple[str, ...]) -> None:
    ours, theirs = _build(session, function, types, SIZES)
    assert ours == theirs


@pytest.mark.parametrize(("function", "type_text"), [("uniq", "UInt64"), ("uniq", "String"), ("uniqExact", "Int32"),
                                                     ("uniqExact", "String"), ("groupUniqArray", "UInt32")])
def test_large_sets(session: Any, function: str, type_text: str) -> None:
    """uniq thins its hashes past 65536 (the skip degree rises); the hash sets grow through many
    resizes."""
    sizes = [90000, 200000]
    dt = _type(function, (type_text,))
    made = builder(dt)
    assert made is not None
    _, starts, n = group_of(sizes)
    expr = "number * 1000000007" if type_text == "UInt64" else "toString(number * 7)" if type_text == "String" \
        else "toInt32(number * 7) - 1000000"
    ours = made.states(dt, arrow_of(session, [expr], (type_text,), n), starts, n).to_pylist()
    theirs = _chdb_states(session, function, [expr], (type_text,), sizes)
    assert ours == theirs
    if function == "uniq":
        assert [state[0] for state in ours] == [1, 2]  # skip degrees


# ------------------------------------------------------------------------------------------- combining

COMBINED = [("uniq", "UInt64"), ("uniq", "String"), ("uniq", "Decimal(18, 3)"), ("uniqExact", "UInt64"),
            ("uniqExact", "String"), ("uniqExact", "Float64"), ("uniqExact", "UUID"), ("uniqHLL12", "Int16"),
            ("uniqHLL12", "String"), ("uniqHLL12", "Float32"), ("uniqCombined", "UInt64"), ("uniqCombined", "String"),
            ("uniqCombined(12)", "Float64"), ("uniqCombined64", "Int32"), ("uniqCombined64(14)", "UUID"),
            ("groupUniqArray", "UInt64"), ("groupUniqArray", "String"), ("groupUniqArray", "Float64"),
            ("groupUniqArray", "Int8"), ("groupUniqArray", "Decimal(38, 5)"), ("groupUniqArray(7)", "UInt16"),
            ("groupUniqArray(7)", "String"), ("groupUniqArray(3)", "UInt8")]
# Rows of each key in each of the three inserts (parts): small and large sets, forms that change as
# they are merged.
PART_SIZES = [[3, 1, 30, 200, 5000, 9000], [20, 14, 2, 700, 3000, 100], [1, 16, 500, 4, 6000, 9000]]


# Merges whose cell order may differ from ClickHouse's (the set, and every result, is the same):
# HashSetTable::merge of uniqExact and of groupUniqArray of numbers (ClickHouse 26.9 grows the merged
# table ahead of some merges and not of others, by rules not pinned down here), and uniqCombined's
# hash set merged back (the keys that wrap around the table's end can come out in another order).
INEXACT = {("uniqExact", "UInt64"), ("uniqExact", "String"), ("uniqExact", "Float64"), ("uniqExact", "UUID"),
           ("groupUniqArray", "UInt64"), ("groupUniqArray", "Float64"), ("uniqCombined64", "Int32")}


def _table_states(session: Any, table: str, where: str = "") -> list[bytes]:
    text = _query(session, f"SELECT hex(st) FROM {table} {where} ORDER BY k SETTINGS max_threads = 1")
    return [bytes.fromhex(line) for line in text.split("\n") if line]


@pytest.mark.parametrize(("function", "type_text"), COMBINED)
def test_combined_states_are_clickhouses_merge(session: Any, function: str, type_text: str) -> None:
    dt = _type(function, (type_text,))
    made = builder(dt)
    assert made is not None
    session.query("DROP TABLE IF EXISTS agg")
    session.query(f"CREATE TABLE agg (k UInt8, st {dt.to_clickhouse()}) ENGINE = AggregatingMergeTree ORDER BY k")
    built: list[list[bytes]] = []
    parts: list[list[bytes]] = []
    offset = 0
    for sizes in PART_SIZES:
        key, starts, n = group_of(sizes)
        expr = TYPES[type_text].replace("number", f"(number + {offset})")
        name, _, params = function.partition("(")
        state = f"{name}State{'(' + params if params else ''}"
        session.query(f"INSERT INTO agg SELECT {key} AS g, {state}(CAST({expr} AS {type_text})) FROM numbers({n}) "
                      "GROUP BY g SETTINGS max_threads = 1")
        built.append(made.states(dt, arrow_of(session, [expr], (type_text,), n), starts, n).to_pylist())
        parts.append(_table_states(session, "agg", "WHERE _part = (SELECT max(name) FROM system.parts "
                                                   "WHERE table = 'agg' AND active)"))
        offset += n // 2  # the parts overlap in half of their values
    keys = len(PART_SIZES[0])
    alone = [made.combine(dt, pa.array(mine, pa.binary()), np.arange(keys, dtype=np.int64)).to_pylist()
             for mine in built]
    session.query("OPTIMIZE TABLE agg FINAL")
    merged = _table_states(session, "agg")
    by_key = [part[k] for k in range(keys) for part in parts]
    ours = made.combine(dt, pa.array(by_key, pa.binary()), np.arange(0, len(by_key), len(parts), dtype=np.int64))
    # The same sets (and so the same results) always...
    assert _finalized(session, dt, ours.to_pylist()) == _finalized(session, dt, merged)
    for mine, part in zip(alone, parts, strict=True):
        assert _finalized(session, dt, mine) == _finalized(session, dt, part)
    # ... and ClickHouse's bytes: a part holds each built state merged into a fresh one; the merged
    # part, the parts' states merged in the order ClickHouse's merge took them (its sorted merge does
    # not always take equal keys of different parts in part order).
    orders = list(itertools.permutations(range(len(parts))))
    same = [any(made.combine(dt, pa.array([parts[p][k] for p in order], pa.binary()),
                             np.array([0], np.int64)).to_pylist() == [merged[k]] for order in orders)
            for k in range(keys)]
    if (function, type_text) not in INEXACT:
        assert alone == parts and all(same), (same, [a == p for a, p in zip(alone, parts, strict=True)])


def _finalized(session: Any, dt: AggregateFunction, states: list[bytes]) -> list[str]:
    session.query("SET max_query_size = 1000000000")
    values = ", ".join(f"{'arraySort' if dt.function == 'groupUniqArray' else ''}(finalizeAggregation("
                       f"CAST(unhex('{s.hex()}'), '{dt.to_clickhouse()}')))" for s in states)
    return _query(session, f"SELECT {values}").rstrip("\n").split("\t")


def test_large_exact_sets_combine_to_the_same_set(session: Any) -> None:
    """uniqExact's merged sets past 32768 keys may differ from ClickHouse's in cell order (ClickHouse
    reads states of more than 100000 keys into its two-level table): the set is the same."""
    dt = _type("uniqExact", ("UInt64",))
    made = builder(dt)
    assert made is not None
    sizes = [30000, 30000, 150000]
    _, starts, n = group_of(sizes)
    arrays = arrow_of(session, ["number % 190000"], ("UInt64",), n)
    states = made.states(dt, arrays, starts, n)
    combined = made.combine(dt, states, np.array([0], np.int64)).to_pylist()
    assert _finalized(session, dt, combined) == ["190000"]
    assert int(_query(session, "SELECT uniqExact(number % 190000) FROM numbers(210000)")) == 190000


def test_groups_of_one_row_and_empty_strings(session: Any) -> None:
    for function in ("uniqExact", "groupUniqArray", "uniq", "uniqCombined64", "uniqHLL12"):
        ours, theirs = _build(session, function, ("String",), [1, 1, 1, 7])
        assert ours == theirs, function


def test_corrupt_states_are_refused() -> None:
    dt = _type("uniqExact", ("UInt64",))
    made = builder(dt)
    assert made is not None
    with pytest.raises(CorruptPartError):
        made.combine(dt, pa.array([b"\x02\x01\0\0\0\0\0\0\0"], pa.binary()), np.array([0], np.int64))
    uc = _type("uniqCombined", ("UInt64",))
    combined = builder(uc)
    assert combined is not None
    with pytest.raises(CorruptPartError):
        combined.combine(uc, pa.array([b"\x07"], pa.binary()), np.array([0], np.int64))


def test_no_builder_for_unknown_layouts() -> None:
    for text in ("AggregateFunction(uniqHLL12, Int128)", "AggregateFunction(uniq, Int256)",
                 "AggregateFunction(quantile(0.5), UInt64)", "AggregateFunction(uniqCombined(21), UInt64)"):
        dt = parse_type(text)
        assert isinstance(dt, AggregateFunction)
        assert builder(dt) is None, text


def test_nullable_arguments_take_the_inner_type(session: Any, tmp_path: Path) -> None:
    """The dispatcher gives the values without NULLs; the builder of a Nullable type is the inner one's."""
    dt = _type("uniqExact", ("Nullable(String)",))
    made = builder(dt)
    assert made is not None
    arrays = [pa.array(["a", "b", "a", ""])]
    ours = made.states(_type("uniqExact", ("String",)), arrays, np.array([0], np.int64), 4).to_pylist()
    theirs = _query(session, "SELECT hex(uniqExactState(x)) FROM (SELECT arrayJoin(['a', 'b', 'a', '']) AS x) "
                              "SETTINGS max_threads = 1")
    assert ours == [bytes.fromhex(theirs.strip())]

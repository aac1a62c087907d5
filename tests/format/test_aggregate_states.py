"""AggregateFunction states of the functions ClickHouse tables store, checked against chdb.

Each column's states come from groups of varied sizes (none, one, a few, and sizes where a state
changes representation: uniq's hash set thinning, uniqCombined's small set → hash set → HyperLogLog,
uniqHLL12's small set → HyperLogLog, quantileTiming's tiny → medium → histogram, the reservoir filling).
ClickHouse writes them into Wide and Compact parts; we split every state exactly (its bytes are
the `hex(toString(state))` of the states inserted), write them into parts of our own that ClickHouse
attaches with CHECK TABLE, and SELECT of the states and `finalizeAggregation` give the same results
on ClickHouse's and our parts.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from spark_mergetree import MergeTreeTable
from spark_mergetree.errors import CorruptPartError, UnsupportedError
from spark_mergetree.format.aggregate_states import empty_state, state_layout, state_lengths
from spark_mergetree.format.serialization import default_column
from spark_mergetree.format.types import AggregateFunction, parse_type
from tests.format.chdb_util import close_session, make_chdb_table, open_session
from tests.format.test_part_interop import _attach_and_check

PART_KINDS = {
    "Wide": "min_bytes_for_wide_part = 0, min_rows_for_wide_part = 0",
    "Compact": "min_bytes_for_wide_part = 1000000000, min_rows_for_wide_part = 1000000000",
}
# Group size of each row: `S` in the expressions below.
SIZES = [0, 1, 2, 3, 16, 17, 33, 200, 1500, 9000, 120000]
S = f"{SIZES}[number % {len(SIZES)} + 1]"


def _reduce(function: str, *values: str) -> str:
    """The state of `function` over S values of each expression of `x` (varied by row)."""
    arrays = ", ".join(f"arrayMap(x -> {v}, range(number, number + {S}))" for v in values)
    return f"arrayReduce('{function}', {arrays})"


STATE_COLUMNS = [
    ("min_s", "AggregateFunction(min, String)", _reduce("minState", "toString(x * 7)")),
    ("max_fs", "AggregateFunction(max, FixedString(3))", _reduce("maxState", "toFixedString(toString(x % 1000), 3)")),
    ("any_d", "AggregateFunction(any, Decimal(38, 3))", _reduce("anyState", "toDecimal128(x, 3)")),
    ("last_u", "AggregateFunction(anyLast, UUID)", _reduce("anyLastState", "toUUID(concat('00000000-0000-0000-0000-', leftPad(toString(x), 12, '0')))")),
    ("min_t", "AggregateFunction(min, DateTime64(3))", _reduce("minState", "toDateTime64(x, 3)")),
    ("argmax", "AggregateFunction(argMax, String, UInt32)", _reduce("argMaxState", "toString(x)", "toUInt32(x % 77)")),
    ("argmin", "AggregateFunction(argMin, Decimal(9, 2), Date)", _reduce("argMinState", "toDecimal32(x, 2)", "toDate(x % 500)")),
    ("uniq", "AggregateFunction(uniq, UInt64)", _reduce("uniqState", "x")),
    ("bitmap", "AggregateFunction(groupBitmap, UInt32)", _reduce("groupBitmapState", "toUInt32(x * 3)")),
    ("bitmap_8", "AggregateFunction(groupBitmap, Int8)", _reduce("groupBitmapState", "toInt8(x % 100)")),
    ("uniq_sv", "AggregateFunction(uniq, String, Int32)", _reduce("uniqState", "toString(x)", "toInt32(x % 3)")),
    ("hll", "AggregateFunction(uniqHLL12, UInt32)", _reduce("uniqHLL12State", "toUInt32(x)")),
    ("hll_s", "AggregateFunction(uniqHLL12, String)", _reduce("uniqHLL12State", "toString(x)")),
    ("uc", "AggregateFunction(uniqCombined, UInt64)", _reduce("uniqCombinedState", "x")),
    ("uc_s", "AggregateFunction(uniqCombined(14), String)", _reduce("uniqCombinedState(14)", "toString(x)")),
    ("uc64", "AggregateFunction(uniqCombined64, Int16, String)", _reduce("uniqCombined64State", "toInt16(x)", "toString(x)")),
    ("ue_s", "AggregateFunction(uniqExact, String)", _reduce("uniqExactState", "toString(x % 5000)")),
    ("ue_v", "AggregateFunction(uniqExact, UInt8, String)", _reduce("uniqExactState", "toUInt8(x % 7)", "toString(x % 3)")),
    ("q", "AggregateFunction(quantiles(0.5, 0.9), UInt64)", _reduce("quantilesState(0.5, 0.9)", "x")),
    ("median", "AggregateFunction(quantile, Float32)", _reduce("medianState", "toFloat32(x / 3)")),
    ("qd", "AggregateFunction(1, quantileDeterministic(0.5), Float64, UInt64)",
     _reduce("quantileDeterministicState(0.5)", "x / 3", "x")),
    ("qd_u", "AggregateFunction(1, quantilesDeterministic(0.1, 0.9), UInt16, UInt8)",
     _reduce("quantilesDeterministicState(0.1, 0.9)", "toUInt16(x % 999)", "toUInt8(x % 200)")),
    ("qe", "AggregateFunction(quantileExact, Int16)", _reduce("quantileExactState", "toInt16(x % 30000)")),
    ("qtd", "AggregateFunction(quantilesTDigest(0.1, 0.99), Float64)", _reduce("quantilesTDigestState(0.1, 0.99)", "x / 7")),
    ("qt", "AggregateFunction(quantileTiming, UInt32)", _reduce("quantileTimingState", "toUInt32(x % 40000)")),
    ("qtw", "AggregateFunction(quantileTimingWeighted(0.3), UInt16, UInt8)",
     _reduce("quantileTimingWeightedState(0.3)", "toUInt16(x % 50)", "toUInt8(x % 200)")),
    ("ga_s", "AggregateFunction(groupArray, String)", _reduce("groupArrayState", "repeat('a', x % 5)")),
    ("ga_n", "AggregateFunction(groupArray(3), Int32)", _reduce("groupArrayState(3)", "toInt32(toInt64(x) - 10)")),
    ("gu", "AggregateFunction(groupUniqArray, String)", _reduce("groupUniqArrayState", "toString(x % 100)")),
    ("gu_n", "AggregateFunction(groupUniqArray(4), Date)", _reduce("groupUniqArrayState(4)", "toDate(x % 9)")),
    ("topk", "AggregateFunction(topK(3), UInt16)", _reduce("topKState(3)", "toUInt16(x % 7)")),
    ("topk_s", "AggregateFunction(topK, String)", _reduce("topKState", "toString(x % 13)")),
    ("sm", "AggregateFunction(sumMap, Map(String, UInt8))", _reduce("sumMapState", "map(toString(x % 10), toUInt8(x % 7))")),
    ("sm_a", "AggregateFunction(1, sumMap, Array(UInt16), Array(Float32), Array(Int8))",
     _reduce("sumMapState", "[toUInt16(x % 10)]", "[toFloat32(x)]", "[toInt8(x % 3)]")),
    ("aw", "AggregateFunction(avgWeighted, Int32, UInt8)", _reduce("avgWeightedState", "toInt32(x)", "toUInt8(x % 9)")),
    ("aw_f", "AggregateFunction(avgWeighted, Float32, Int64)", _reduce("avgWeightedState", "toFloat32(x)", "toInt64(x % 9)")),
    ("sum_if", "AggregateFunction(sumIf, UInt64, UInt8)", _reduce("sumIfState", "x", "x % 2 = 0")),
    ("count_if", "AggregateFunction(countIf, UInt8)", _reduce("countIfState", "x % 3 = 0")),
    ("avg_if", "AggregateFunction(avgIf, Float64, UInt8)", _reduce("avgIfState", "x / 3", "x % 2 = 1")),
    ("uniq_if", "AggregateFunction(uniqCombinedIf, String, UInt8)", _reduce("uniqCombinedIfState", "toString(x)", "x % 2 = 0")),
    ("uniq_n", "AggregateFunction(uniq, Nullable(String))", _reduce("uniqState", "if(x % 3 = 0, NULL, toString(x))")),
    ("sum_n", "AggregateFunction(sum, Nullable(Int32))", _reduce("sumState", "if(x % 2 = 0, NULL, toInt32(x))")),
    ("q_n", "AggregateFunction(quantile, Nullable(Float64))", _reduce("quantileState", "if(x % 2 = 0, NULL, x / 3)")),
    ("uc_n", "AggregateFunction(uniqCombined, Nullable(UInt64))", _reduce("uniqCombinedState", "if(x % 5 = 0, NULL, x)")),
    ("ga_nn", "AggregateFunction(groupArray, Nullable(UInt16))", _reduce("groupArrayState", "if(x % 3 = 0, NULL, toUInt16(x))")),
    ("var_n", "AggregateFunction(varPop, Nullable(Float64))", _reduce("varPopState", "if(x % 4 = 0, NULL, x / 3)")),
    ("delta_n", "AggregateFunction(deltaSum, Nullable(UInt32))", _reduce("deltaSumState", "if(x % 2 = 0, NULL, toUInt32(x))")),
    ("min_if_n", "AggregateFunction(minIf, UInt64, Nullable(UInt8))",
     _reduce("minIfState", "x", "if(x % 5 = 0, NULL, x % 2 = 0)")),
    ("count_if_n", "AggregateFunction(countIf, Nullable(UInt8))", _reduce("countIfState", "if(x % 5 = 0, NULL, x % 2 = 0)")),
    ("uniq_lc", "AggregateFunction(uniq, LowCardinality(String))",
     _reduce("uniqState", "toLowCardinality(toString(x % 70))")),
    ("any_lcn", "AggregateFunction(any, LowCardinality(Nullable(String)))",
     _reduce("anyState", "toLowCardinality(if(x % 2 = 0, NULL, toString(x)))")),
    ("sum_d", "AggregateFunction(sumDistinct, UInt8)", _reduce("sumDistinctState", "toUInt8(x % 200)")),
    ("count_d", "AggregateFunction(countDistinct, String)", _reduce("countDistinctState", "toString(x % 300)")),
    ("var", "AggregateFunction(varSamp, Float64)", _reduce("varSampState", "x / 3")),
    ("corr", "AggregateFunction(corr, Int64, Float64)", _reduce("corrState", "toInt64(x)", "x / 7")),
    ("funnel", "AggregateFunction(windowFunnel(100), DateTime, UInt8, UInt8)",
     _reduce("windowFunnelState(100)", "toDateTime(x)", "x % 3 = 0", "x % 5 = 1")),
    ("retention", "AggregateFunction(retention, UInt8, UInt8)", _reduce("retentionState", "x % 3 = 0", "x % 4 = 0")),
    ("entropy_s", "AggregateFunction(entropy, String)", _reduce("entropyState", "toString(x % 50)")),
    ("heavy_s", "AggregateFunction(anyHeavy, String)", _reduce("anyHeavyState", "toString(x % 3)")),
    ("bf16", "AggregateFunction(quantileBFloat16, Float64)", _reduce("quantileBFloat16State", "x / 3")),
    ("max_map", "AggregateFunction(1, maxMap, Array(UInt16), Array(Int32))",
     _reduce("maxMapState", "[toUInt16(x % 10)]", "[toInt32(x)]")),
    ("concat", "AggregateFunction(groupConcat, String)", _reduce("groupConcatState", "toString(x % 10)")),
]
ROWS = 2 * len(SIZES)


def _hex_select(columns: list[tuple[str, str, str]]) -> str:
    return "id, " + ", ".join(f"hex(toString({name})) AS {name}" for name, _, _ in columns)


def _finalized_select(columns: list[tuple[str, str, str]]) -> str:
    return "id, " + ", ".join(f"toString(finalizeAggregation({name})) AS {name}" for name, _, _ in columns)


def _rows(sess, sql: str) -> list[list[str]]:
    return [line.split("\t") for line in sess.query(sql, "TabSeparatedRaw").bytes().decode().splitlines()]


@pytest.mark.parametrize("kind", list(PART_KINDS))
def test_states_read_and_written_byte_for_byte(tmp_path, kind):
    cols = ", ".join(f"`{name}` {type_text}" for name, type_text, _ in STATE_COLUMNS)
    schema = [("id", "UInt64")] + [(name, type_text) for name, type_text, _ in STATE_COLUMNS]
    sess, data_dir = make_chdb_table(
        tmp_path, f"CREATE TABLE src (id UInt64, {cols}) ENGINE = MergeTree ORDER BY id "
                  f"SETTINGS index_granularity = 4, {PART_KINDS[kind]}",
        [f"INSERT INTO src SELECT number, {', '.join(e for _, _, e in STATE_COLUMNS)} FROM numbers({ROWS})"])
    assert _rows(sess, "SELECT DISTINCT part_type FROM system.parts WHERE table = 'src' AND active") == [[kind]]
    types = dict(_rows(sess, "SELECT name, type FROM system.columns WHERE table = 'src'"))
    assert {name: parse_type(types[name]).to_clickhouse() for name, _, _ in STATE_COLUMNS} == \
        {name: types[name] for name, _, _ in STATE_COLUMNS}
    statement = sess.query("SHOW CREATE TABLE src", "TabSeparatedRaw").bytes().decode()
    # The bytes ClickHouse inserted: a state read back is rebuilt before SELECT serializes it again,
    # and hash tables rebuilt may keep their values in another order.
    inserted = _rows(sess, f"SELECT number, {', '.join(f'hex(toString({e}))' for _, _, e in STATE_COLUMNS)} "
                           f"FROM numbers({ROWS})")
    expected = _rows(sess, f"SELECT {_hex_select(STATE_COLUMNS)} FROM src ORDER BY id")
    finalized = _rows(sess, f"SELECT {_finalized_select(STATE_COLUMNS)} FROM src ORDER BY id")

    ours = MergeTreeTable.open(data_dir, create_statement=statement).to_arrow().sort_by("id")
    assert [[str(r["id"])] + [r[name].hex().upper() for name, _, _ in STATE_COLUMNS] for r in ours.to_pylist()] == inserted
    for name, type_text, _ in STATE_COLUMNS:  # rows of no values hold the state of no rows
        assert ours.column(name)[0].as_py() == empty_state(parse_type(type_text)), name
    # Every representation is among the rows: its first byte tells which.
    for name, kinds in {"uc": {1, 2, 3}, "uc_s": {1, 2, 3}, "hll": {0, 1}, "hll_s": {0, 1}, "qt": {1, 2, 3}, "qtw": {1, 3},
                        "uniq": {0, 1}}.items():
        assert {state[0] for state in ours.column(name).to_pylist()} == kinds, name

    mine = MergeTreeTable.create(tmp_path / "ours", schema, order_by="id",
                                 settings={"index_granularity": 4, "auto_merge": False})
    mine.insert(ours.slice(0, ROWS // 3))
    mine.insert(ours.slice(ROWS // 3))
    sess.query(f"CREATE TABLE back (id UInt64, {cols}) ENGINE = MergeTree ORDER BY id "
               f"SETTINGS index_granularity = 4, {PART_KINDS[kind]}")
    target = Path(_rows(sess, "SELECT data_paths[1] FROM system.tables WHERE name = 'back'")[0][0])
    _attach_and_check(sess, "back", target, mine)
    assert _rows(sess, f"SELECT {_hex_select(STATE_COLUMNS)} FROM back ORDER BY id") == expected
    assert _rows(sess, f"SELECT {_finalized_select(STATE_COLUMNS)} FROM back ORDER BY id") == finalized
    close_session()


@pytest.mark.parametrize("name,type_text", [(n, t) for n, t, _ in STATE_COLUMNS[::4]])
def test_default_is_the_state_of_no_rows(name, type_text):
    dt = parse_type(type_text)
    assert default_column(dt, 2).to_pylist() == [empty_state(dt)] * 2


HLL_PRECISIONS = [12, 15, 20]


def test_hyperloglog_forms_of_every_precision_split(tmp_path):
    """uniqCombined's HyperLogLog is a memory image whose size depends on K and the hash width."""
    sess = open_session(tmp_path)
    for function in ("uniqCombined", "uniqCombined64"):
        for k in HLL_PRECISIONS:
            rows = _rows(sess, f"SELECT toTypeName(s), hex(toString(s)) FROM (SELECT {function}State({k})(number) s "
                               f"FROM numbers({2 ** k}) GROUP BY number % 2) ")
            dt = parse_type(rows[0][0])
            data = b"".join(bytes.fromhex(h) for _, h in rows)
            lengths = state_lengths(dt, np.frombuffer(data, np.uint8), 0, len(rows), "t")
            assert lengths.tolist() == [len(h) // 2 for _, h in rows] and data[0] == 3, (function, k)
    close_session()


def test_a_cut_or_unknown_state_names_the_stream_row_and_offset():
    dt = parse_type("AggregateFunction(uniqCombined, UInt64)")
    good = b"\x01\x02" + bytes(8)
    with pytest.raises(CorruptPartError, match=r"stream 'u.bin': state 1 of 2 .* at byte offset 10 runs past the end"):
        state_lengths(dt, np.frombuffer(good + b"\x02\x05" + bytes(4), np.uint8), 0, 2, "stream 'u.bin'")
    with pytest.raises(CorruptPartError, match=r"state 1 of 2 .* unknown representation byte 7 at byte offset 10"):
        state_lengths(dt, np.frombuffer(good + b"\x07\x00", np.uint8), 0, 2, "stream 'u.bin'")
    string = parse_type("AggregateFunction(max, String)")
    with pytest.raises(CorruptPartError, match="state 0 of 1 .* byte offset 0 runs past the end"):
        state_lengths(string, np.frombuffer(b"\x09\x00\x00\x00ab", np.uint8), 0, 1, "c")


REFUSED = ["AggregateFunction(groupBitmap, String)", "AggregateFunction(uniqHLL12, Int128)",
           "AggregateFunction(quantileTDigest, Decimal(9, 2))", "AggregateFunction(topK(3, 'counts'), UInt8)",
           "AggregateFunction(0, sumMap, Array(UInt8), Array(UInt8))",
           "AggregateFunction(uniqCombined(25), UInt64)", "AggregateFunction(quantile(2), Float64)",
           "AggregateFunction(sumOrNull, UInt64)", "AggregateFunction(groupArray, Array(UInt8))"]


@pytest.mark.parametrize("type_text", REFUSED)
def test_unknown_layouts_are_refused_naming_the_function(tmp_path, type_text):
    with pytest.raises(UnsupportedError, match=r"column 'c'.*AggregateFunction"):
        MergeTreeTable.create(tmp_path / "t", [("id", "UInt64"), ("c", type_text)], order_by="id")
    table = MergeTreeTable.create(tmp_path / "u", [("id", "UInt64")], order_by="id")
    with pytest.raises(UnsupportedError, match=r"column 'c'.*AggregateFunction"):
        table.add_columns([("c", f"Array({type_text})")])


def test_spelling_keeps_parameters_and_version_and_names_aliases_as_clickhouse_stores_them():
    assert parse_type("AggregateFunction(median, Float64)").to_clickhouse() == "AggregateFunction(quantile, Float64)"
    text = "AggregateFunction(1, sumMap, Array(UInt8), Array(UInt64))"
    assert parse_type(text).to_clickhouse() == text
    assert parse_type("AggregateFunction(quantiles(0.5, 0.9), UInt8)") == \
        AggregateFunction("quantiles", (parse_type("UInt8"),), ("0.5", "0.9"))


# Argument types × functions: every pair ClickHouse accepts is either split exactly or refused.
ARGUMENT_VALUES = {
    "UInt8": "toUInt8(x % 256)", "Int64": "toInt64(x) - 1000", "Float32": "toFloat32(x / 3)", "Date": "toDate(x % 30000)",
    "Date32": "toDate32(x % 30000)", "DateTime": "toDateTime(x)", "DateTime64(3)": "toDateTime64(x, 3)",
    "Decimal(9, 2)": "toDecimal32(x % 100000, 2)", "Decimal(18, 3)": "toDecimal64(x, 3)", "Decimal(38, 1)": "toDecimal128(x, 1)",
    "Decimal(76, 2)": "toDecimal256(x, 2)",
    "UUID": "toUUID(concat('00000000-0000-0000-0000-', leftPad(toString(x), 12, '0')))", "Int128": "toInt128(x)",
    "UInt256": "toUInt256(x)", "String": "toString(x)", "FixedString(4)": "toFixedString(toString(x % 9999), 4)",
    "Bool": "toBool(x % 2)", "Nullable(UInt8)": "if(x % 3 = 0, NULL, toUInt8(x % 100))",
    "Nullable(String)": "if(x % 3 = 1, NULL, toString(x))", "Nullable(DateTime64(3))": "if(x % 2 = 0, NULL, toDateTime64(x, 3))",
    "Nullable(Decimal(18, 3))": "if(x < 40, NULL, toDecimal64(x, 3))", "Array(UInt8)": "[toUInt8(x % 5)]",
}
# (function, its arguments: `{}` is the one varied)
FUNCTIONS = [("count", ["{}"]), ("sum", ["{}"]), ("avg", ["{}"]), ("min", ["{}"]), ("anyLast", ["{}"]),
             ("argMin", ["{}", "toUInt32(x % 77)"]), ("argMax", ["toString(x % 77)", "{}"]), ("uniq", ["{}"]),
             ("uniqHLL12", ["{}"]), ("uniqCombined", ["{}"]), ("uniqCombined64(13)", ["{}"]), ("uniqExact", ["{}"]),
             ("uniqExact", ["{}", "toString(x % 13)"]), ("uniqHLL12", ["{}", "toString(x % 13)"]), ("quantiles(0.5, 0.9)", ["{}"]), ("quantile", ["{}"]),
             ("quantilesExact(0.1)", ["{}"]), ("quantilesTDigest(0.5)", ["{}"]), ("quantilesTiming(0.5)", ["{}"]),
             ("quantilesTimingWeighted(0.5)", ["{}", "toUInt8(x % 7)"]),
             ("quantileExact", ["{}"]), ("quantileTDigest", ["{}"]), ("quantileTiming", ["{}"]),
             ("quantileTimingWeighted", ["{}", "toUInt8(x % 7)"]), ("groupArray(2)", ["{}"]), ("groupUniqArray", ["{}"]),
             ("topK(3)", ["{}"]), ("avgWeighted", ["{}", "toUInt16(x % 7)"]), ("avgWeighted", ["{}", "x / 7"]), ("avgWeighted", ["toUInt32(x)", "{}"]),
             ("sumIf", ["{}", "x % 2 = 0"]), ("uniqIf", ["{}", "x % 2 = 0"]), ("sumDistinct", ["{}"]), ("countDistinct", ["{}"]),
             ("sumMap", ["map({}, toUInt8(x % 7))"]), ("sumMap", ["map(toString(x % 10), {})"]),
             ("sumMap", ["[{}]", "[toInt32(x)]", "[x / 3]"]),
             # statistics, bit and sum variants, funnels, entropy
             ("varPop", ["{}"]), ("stddevSamp", ["{}"]), ("skewPop", ["{}"]), ("kurtSamp", ["{}"]),
             ("varSampStable", ["{}"]), ("stddevPopStable", ["{}"]), ("covarPop", ["{}", "x / 3"]), ("corr", ["{}", "{}"]),
             ("covarSampStable", ["{}", "toUInt8(x % 5)"]), ("corrStable", ["{}", "x / 3"]),
             ("simpleLinearRegression", ["{}", "x / 3"]), ("boundingRatio", ["{}", "x / 3"]), ("groupBitAnd", ["{}"]),
             ("groupBitOr", ["{}"]), ("groupBitXor", ["{}"]), ("sumWithOverflow", ["{}"]), ("sumKahan", ["{}"]),
             ("deltaSum", ["{}"]), ("sumCount", ["{}"]), ("anyHeavy", ["{}"]), ("entropy", ["{}"]),
             ("quantileBFloat16", ["{}"]), ("quantilesBFloat16(0.5)", ["{}"]), ("groupConcat", ["{}"]),
             ("groupConcat('|')", ["{}"]), ("retention", ["isNotNull({})", "x % 5 = 0", "x % 7 = 1"]),
             ("windowFunnel(100)", ["{}", "x % 3 = 0", "x % 5 = 1"]), ("sequenceMatch('(?1)(?2)')", ["{}", "x % 3 = 0", "x % 5 = 1"]),
             ("sequenceCount('(?1).*(?2)')", ["{}", "x % 3 = 0", "x % 5 = 1", "x % 11 = 2"]),
             ("minMap", ["[{}]", "[toInt32(x)]"]), ("maxMap", ["[toUInt16(x % 10)]", "[{}]"])]


def test_every_argument_type_clickhouse_accepts_is_split_exactly_or_refused(tmp_path):
    sess = open_session(tmp_path)
    split = []
    for function, around in FUNCTIONS:
        base, _, params = function.partition("(")
        state = f"{base}State" + (f"({params}" if params else "")
        for value in ARGUMENT_VALUES.values():
            arguments = [argument.format(value) for argument in around]
            try:  # groups of 1, 2, 4, ... 2^14 rows
                rows = _rows(sess, f"SELECT toTypeName(s), hex(toString(s)) FROM (SELECT {state}({', '.join(arguments)}) s FROM "
                                   f"(SELECT number AS x FROM numbers(20000)) GROUP BY toUInt32(log2(x + 1)))")
            except Exception:  # ClickHouse has no such function of this type
                continue
            dt = parse_type(rows[0][0])
            if state_layout(dt) is None:  # refused
                continue
            data = b"".join(bytes.fromhex(h) for _, h in rows)
            lengths = state_lengths(dt, np.frombuffer(data, np.uint8), 0, len(rows), rows[0][0])
            assert lengths.tolist() == [len(h) // 2 for _, h in rows], rows[0][0]
            empty_arrays = ", ".join(f"arrayMap(x -> {a}, CAST([] AS Array(UInt64)))" for a in arguments)
            quoted = state.replace("'", "\\'")
            empty = _rows(sess, f"SELECT hex(toString(arrayReduce('{quoted}', {empty_arrays})))")[0][0]
            assert empty_state(dt).hex().upper() == empty, rows[0][0]
            split.append(rows[0][0])
    close_session()
    assert len(split) > 480


def test_a_create_statement_without_state_versions_opens_clickhouses_table(tmp_path):
    # ClickHouse's CREATE gives these types version 1 (its parts' columns.txt spells it); a user's
    # statement does not.
    statement = ("CREATE TABLE q (id UInt64, qd AggregateFunction(quantileDeterministic(0.5), Float64, UInt64), "
                 "sm AggregateFunction(sumMap, Array(UInt8), Array(UInt32)), smm AggregateFunction(sumMap, Map(UInt8, UInt32))) "
                 "ENGINE = MergeTree ORDER BY id")
    sess, data = make_chdb_table(tmp_path, statement, [
        "INSERT INTO q SELECT number % 3, quantileDeterministicState(0.5)(toFloat64(number), number), "
        "sumMapState([toUInt8(number % 4)], [toUInt32(number)]), sumMapState(map(toUInt8(number % 4), toUInt32(number))) "
        "FROM numbers(20) GROUP BY number % 3"])
    theirs = sess.query("SELECT id, hex(toString(qd)), hex(toString(sm)), hex(toString(smm)) FROM q ORDER BY id",
                        "TSVRaw").bytes().decode().split()
    close_session()
    ours = MergeTreeTable.open(data, create_statement=statement).to_arrow().sort_by("id").to_pylist()
    # (A Map's entries come back from ClickHouse's SELECT re-serialized, in another order: lengths only.)
    assert [v for r in ours for v in (str(r["id"]), r["qd"].hex().upper(), r["sm"].hex().upper(), len(r["smm"]))] \
        == [len(v) // 2 if i % 4 == 3 else v for i, v in enumerate(theirs)]
    created = MergeTreeTable.create(tmp_path / "ours", [("id", "UInt64"), ("sm", "AggregateFunction(sumMap, Array(UInt8), Array(UInt32))")],
                                    order_by="id")
    assert dict(created.metadata.columns)["sm"] == "AggregateFunction(1, sumMap, Array(UInt8), Array(UInt32))"

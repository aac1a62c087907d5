"""States of the quantile family built from rows and combined (format/states_quantiles.py), byte for
byte against chdb's: `<f>State` over the same rows in the same order, `<f>MergeState` over our
states (a fresh state merged with each in turn), and the merge of parts of an AggregatingMergeTree.

Groups are sized across every change of representation: the reservoir's capacity (8192, past which
its pcg32 generator picks the samples), the t-digest's compressions (past 2048 unmerged centroids,
and from about 200 values when a state is written), the timing state's tiny (31), medium (5672) and
histogram forms. Values are computed from the row number the same way in SQL and in numpy.
"""

from __future__ import annotations

import glob
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from spark_mergetree.errors import CorruptPartError
from spark_mergetree.format.compression import decompress_all
from spark_mergetree.format.state_rows import StateBuilder
from spark_mergetree.format.states_quantiles import builder
from spark_mergetree.format.types import AggregateFunction, parse_type
from tests.format.chdb_util import close_session, open_session

SIZES = [1, 2, 3, 31, 32, 150, 260, 2049, 2500, 5672, 5673, 8192, 8193, 20000]
STARTS = np.cumsum([0, *SIZES[:-1]]).astype(np.int64)
N = sum(SIZES)
ROW = np.arange(N, dtype=np.int64)
MIX = ROW * 2654435761 % 1000003  # scrambled, with repeats in large groups

# Argument columns: (ClickHouse type, SQL of the value of row i, the same as an Arrow array).
COLUMNS = {
    "u64": ("UInt64", "toUInt64(i * 2654435761 % 1000003)", pa.array(MIX.astype(np.uint64))),
    "i16": ("Int16", "toInt16(i * 2654435761 % 1000003 % 65536 - 32768)", pa.array((MIX % 65536 - 32768).astype(np.int16))),
    "f64": ("Float64", "if(i % 97 = 5, nan, (i * 2654435761 % 1000003 - 200000) / 7)",
            pa.array(np.where(ROW % 97 == 5, np.nan, (MIX - 200000) / 7))),
    "f32": ("Float32", "toFloat32(if(i % 89 = 3, nan, (i * 2654435761 % 1000003) / 3))",
            pa.array(np.where(ROW % 89 == 3, np.nan, MIX / 3).astype(np.float32))),
    "date": ("Date", "toDate(i * 2654435761 % 1000003 % 40000)", pa.array((MIX % 40000).astype(np.int32), pa.date32())),
    "dt": ("DateTime('UTC')", "toDateTime(i * 2654435761 % 1000003 * 1000, 'UTC')",
           pa.array(MIX * 1000, pa.timestamp("s", tz="UTC"))),
    "bool": ("Bool", "toBool(i * 2654435761 % 1000003 % 3 = 0)", pa.array(MIX % 3 == 0)),
    "dec": ("Decimal(18, 3)", "toDecimal64(i * 2654435761 % 1000003 - 500000, 3)",
            pa.array(MIX - 500000).cast(pa.decimal128(38, 3)).cast(pa.decimal128(18, 3))),
    "dt64": ("DateTime64(3, 'UTC')", "fromUnixTimestamp64Milli(toInt64(i * 2654435761 % 1000003 * 1001), 'UTC')",
             pa.array(MIX * 1001, pa.timestamp("ms", tz="UTC"))),
    "i128": ("Int128", "toInt128(i * 2654435761 % 1000003) - 500000", pa.array(MIX - 500000).cast(pa.decimal256(39, 0))),
    # Milliseconds for quantileTiming: negative, past 30000 and past Int64's range too.
    "ms": ("Float64", "if(i % 50 = 7, -1, if(i % 50 = 9, 1e19, if(i % 50 = 11, nan, i * 2654435761 % 1000003 % 40000 / 1.5)))",
           pa.array(np.where(ROW % 50 == 7, -1, np.where(ROW % 50 == 9, 1e19, np.where(ROW % 50 == 11, np.nan, MIX % 40000 / 1.5))))),
    "ms_i": ("Int64", "toInt64(i * 2654435761 % 1000003 % 70000) - 20000", pa.array(MIX % 70000 - 20000)),
    "ms_u": ("UInt64", "if(i % 40 = 1, 18446744073709551615, toUInt64(i * 2654435761 % 1000003 % 1100))",
             pa.array(np.where(ROW % 40 == 1, np.uint64(2 ** 64 - 1), (MIX % 1100).astype(np.uint64)))),
    # Weights from 0 to 39 (some rows alone overflow the tiny form), and rarely large ones.
    "w8": ("UInt8", "toUInt8(i * 2654435761 % 1000003 % 40)", pa.array((MIX % 40).astype(np.uint8))),
    "w64": ("UInt64", "toUInt64(if(i % 1000 = 999, 100000, i % 3))", pa.array(np.where(ROW % 1000 == 999, 100000, ROW % 3).astype(np.uint64))),
    "det": ("UInt64", "toUInt64(i)", pa.array(ROW.astype(np.uint64))),
    "det8": ("UInt8", "toUInt8(i % 256)", pa.array((ROW % 256).astype(np.uint8))),
}

# The groups' states (by index in SIZES) in the order they are merged, in groups of MERGE_SIZES.
MERGE_ORDER = [0, 1, 2, 12, 3, 4, 5, 13, 10, 9, 6, 7, 8, 11]
MERGE_SIZES = [1, 3, 4, 6]

# (function with its parameters, argument columns, state version).
CASES = [
    ("quantile", ["u64"], None), ("quantiles(0.1, 0.9)", ["f64"], None), ("quantile(0.3)", ["f32"], None),
    ("quantile", ["i16"], None), ("quantile", ["date"], None), ("quantile", ["dt"], None), ("quantile", ["bool"], None),
    ("quantile", ["dec"], None), ("quantile", ["dt64"], None), ("quantile", ["i128"], None),
    ("quantileExact", ["f64"], None), ("quantilesExact(0.5)", ["dec"], None), ("quantileExact", ["i128"], None),
    ("quantileExact", ["date"], None), ("quantileExact", ["dt64"], None),
    ("quantileTDigest", ["f64"], None), ("quantilesTDigest(0.01, 0.99)", ["u64"], None), ("quantileTDigest", ["f32"], None),
    ("quantileTDigest", ["i16"], None), ("quantileTDigest", ["dt"], None), ("quantileTDigest", ["bool"], None),
    ("quantileTiming", ["ms"], None), ("quantilesTiming(0.5, 0.99)", ["ms_i"], None), ("quantileTiming", ["ms_u"], None),
    ("quantileTiming", ["f32"], None), ("quantileTiming", ["date"], None), ("quantileTiming", ["u64"], None),
    ("quantileTimingWeighted", ["ms", "w8"], None), ("quantilesTimingWeighted(0.2)", ["ms_u", "w64"], None),
    ("quantileDeterministic", ["f64", "det"], 1), ("quantilesDeterministic(0.5, 0.7)", ["u64", "det8"], 1),
    ("quantileDeterministic", ["date", "det"], 1),
]


def _type(function: str, columns: list[str], version: int | None) -> AggregateFunction:
    prefix = f"{version}, " if version is not None else ""
    dt = parse_type(f"AggregateFunction({prefix}{function}, {', '.join(COLUMNS[c][0] for c in columns)})")
    assert isinstance(dt, AggregateFunction)
    return dt


def _combinator(function: str, suffix: str) -> str:
    """quantiles(0.1, 0.9) → quantilesState(0.1, 0.9)."""
    name, paren, rest = function.partition("(")
    return f"{name}{suffix}" + (f"({rest}" if paren else "")


def _builder(dt: AggregateFunction) -> StateBuilder:
    found = builder(dt)
    assert found is not None, dt.to_clickhouse()
    return found


@pytest.fixture(scope="module")
def sess(tmp_path_factory):
    session = open_session(tmp_path_factory.mktemp("quantiles"))
    yield session
    close_session()


def _column(sess, sql: str, rows: pa.Table | None = None, states: pa.Table | None = None) -> list[str]:
    """The one column of a query over Python(rows) or Python(states) (chdb's Python() finds the
    tables by name among the variables of the frames calling it)."""
    return sess.query(sql, "TabSeparatedRaw").bytes().decode().split("\n")[:-1]


def _hex_column(sess, sql: str, rows: pa.Table | None = None, states: pa.Table | None = None) -> list[bytes]:
    return [bytes.fromhex(h) for h in _column(sess, sql, rows, states)]


def _groups_table(sizes: list[int]) -> pa.Table:
    n = sum(sizes)
    return _table(i=pa.array(np.arange(n, dtype=np.int64)), g=pa.array(np.repeat(np.arange(len(sizes)), sizes)))


def _table(**columns: pa.Array) -> pa.Table:
    """An Arrow table of non-nullable columns (chdb reads a nullable one as Nullable)."""
    return pa.table(list(columns.values()), schema=pa.schema([pa.field(name, array.type, nullable=False)
                                                              for name, array in columns.items()]))


@pytest.mark.parametrize("function,columns,version", CASES, ids=[f"{f}-{'-'.join(c)}" for f, c, _ in CASES])
def test_states_of_rows_and_their_merge_are_clickhouses(sess, function, columns, version):
    dt = _type(function, columns, version)
    build = _builder(dt)
    ours = build.states(dt, [COLUMNS[c][2] for c in columns], STARTS, N)
    arguments = ", ".join(COLUMNS[c][1] for c in columns)
    theirs = _hex_column(sess, f"SELECT hex({_combinator(function, 'State')}({arguments})) FROM Python(rows) "
                               "GROUP BY g ORDER BY g SETTINGS max_threads = 1", rows=_groups_table(SIZES))
    assert ours.to_pylist() == theirs

    # Our states merged in groups, against chdb's merge of the same states (a fresh state merged with
    # each in turn): small into empty, big into small, big into big, every timing form into another.
    ours = ours.take(pa.array(MERGE_ORDER))
    combined = build.combine(dt, ours, np.cumsum([0, *MERGE_SIZES[:-1]]).astype(np.int64))
    states = _table(h=pa.array([s.hex() for s in ours.to_pylist()]),
                    g=pa.array(np.repeat(np.arange(len(MERGE_SIZES)), MERGE_SIZES)))
    merged = _hex_column(sess, f"SELECT hex({_combinator(function, 'MergeState')}(CAST(unhex(h) AS "
                               f"{dt.to_clickhouse()}))) FROM Python(states) GROUP BY g ORDER BY g "
                               "SETTINGS max_threads = 1", states=states)
    assert combined.to_pylist() == merged


def test_results_of_our_states_are_clickhouses_over_the_rows(sess):
    """quantiles over our states (CAST back into ClickHouse) equal quantiles over the rows."""
    for function, column in [("quantiles(0, 0.1, 0.5, 0.77, 1)", "f64"), ("quantilesExact(0.25, 0.5)", "dec"),
                             ("quantilesTDigest(0.1, 0.5, 0.9)", "u64"), ("quantilesTiming(0.5, 0.95)", "ms")]:
        dt = _type(function, [column], None)
        sizes = [s for s in SIZES if s <= 8192]
        ours = _builder(dt).states(dt, [COLUMNS[column][2][:sum(sizes)]], np.cumsum([0, *sizes[:-1]]), sum(sizes))
        finals = _column(sess, f"SELECT toString(finalizeAggregation(CAST(unhex(h) AS {dt.to_clickhouse()}))) "
                               "FROM Python(states)", states=_table(h=pa.array([s.hex() for s in ours.to_pylist()])))
        expected = _column(sess, f"SELECT toString({function}({COLUMNS[column][1]})) FROM Python(rows) GROUP BY g "
                                 "ORDER BY g SETTINGS max_threads = 1", rows=_groups_table(sizes))
        assert len(finals) == len(sizes) and finals == expected, function


def test_a_merge_of_parts_combines_as_we_do(sess, tmp_path):
    """AggregatingMergeTree's merge of parts merges each key's states left to right into a fresh
    state: the reservoir keeps the fresh state's generator (a single state past 8192 values gets
    the initial generator back), the t-digest compresses the centroids added."""
    columns = {"q": ("quantile", "u64"), "t": ("quantileTDigest", "f64"), "m": ("quantileTiming", "ms")}
    types = {name: _type(f, [c], None) for name, (f, c) in columns.items()}
    sess.query(f"CREATE TABLE parts (k UInt8, {', '.join(f'{n} {t.to_clickhouse()}' for n, t in types.items())}) "
               "ENGINE = AggregatingMergeTree ORDER BY k SETTINGS min_bytes_for_wide_part = 0")
    sess.query("SYSTEM STOP MERGES parts")
    part_sizes = [20000, 9000, 500, 12000]
    rows = _groups_table(part_sizes)  # noqa: F841 - read by chdb's Python(rows)
    for g in range(len(part_sizes)):
        sess.query(f"INSERT INTO parts SELECT 0, {', '.join(f'{f}State({COLUMNS[c][1]})' for f, c in columns.values())} "
                   f"FROM Python(rows) WHERE g = {g} SETTINGS max_threads = 1, optimize_on_insert = 0")
    sess.query("SYSTEM START MERGES parts")
    sess.query("OPTIMIZE TABLE parts FINAL")
    part = sess.query("SELECT path FROM system.parts WHERE table = 'parts' AND active", "TabSeparatedRaw").bytes().decode().split()
    assert len(part) == 1
    starts = np.cumsum([0, *part_sizes[:-1]]).astype(np.int64)
    for name, (_, column) in columns.items():
        dt = types[name]
        states = _builder(dt).states(dt, [COLUMNS[column][2][:sum(part_sizes)]], starts, sum(part_sizes))
        combined = _builder(dt).combine(dt, states, np.zeros(1, np.int64)).to_pylist()
        [path] = glob.glob(str(Path(part[0]) / f"{name}.bin"))
        assert bytes(decompress_all(Path(path).read_bytes(), path)) == combined[0], name
    sess.query("DROP TABLE parts SYNC")


@pytest.mark.parametrize("type_text", [
    "AggregateFunction(quantileTDigest, DateTime64(3))", "AggregateFunction(quantileTiming, Date32)",
    "AggregateFunction(quantile, Date32)", "AggregateFunction(quantileTimingWeighted, UInt16, Int8)",
    "AggregateFunction(quantile, Int256)", "AggregateFunction(quantileExactWeighted, UInt8, UInt8)",
    "AggregateFunction(1, quantileDeterministic(0.5), DateTime64(3), UInt8)", "AggregateFunction(uniq, UInt8)",
    "AggregateFunction(quantile(2), Float64)",
])
def test_types_clickhouse_or_the_layouts_refuse_have_no_builder(type_text):
    dt = parse_type(type_text)
    assert isinstance(dt, AggregateFunction) and builder(dt) is None


def test_low_cardinality_arguments_are_their_values():
    dt = parse_type("AggregateFunction(quantileExact, LowCardinality(UInt16))")
    assert isinstance(dt, AggregateFunction)
    values = pa.array(np.array([5, 7, 5, 9], np.uint16)).dictionary_encode()
    states = _builder(dt).states(dt, [values], np.array([0, 3], np.int64), 4)
    assert states.to_pylist() == [b"\x03" + np.array([5, 7, 5], "<u2").tobytes(), b"\x01" + np.array([9], "<u2").tobytes()]


@pytest.mark.parametrize("function,state", [
    ("quantile", b"\x00\x20" + bytes(6) + b"\x02" + bytes(7) + b"\x00" + bytes(8)),  # two values said, one there
    ("quantileExact", b"\x02" + bytes(8)),
    ("quantileTDigest", b"\x01\x00\x00\x80\x3f\x00\x00\x00\x00"),  # a centroid of weight 0
    ("quantileTiming", b"\x04\x00"),  # no such representation
])
def test_a_state_that_cannot_be_read_names_it(function, state):
    dt = parse_type(f"AggregateFunction({function}, UInt64)")
    assert isinstance(dt, AggregateFunction)
    good = _builder(dt).states(dt, [pa.array(np.array([1], np.uint64))], np.zeros(1, np.int64), 1).to_pylist()
    with pytest.raises(CorruptPartError, match=r"state 1 \(of group 0\)"):
        _builder(dt).combine(dt, pa.array(good + [state], pa.binary()), np.zeros(1, np.int64))

"""AggregateFunction states of the quantile family, built from rows and combined as ClickHouse does.

The functions and the state each keeps (the quantiles forms, `median*` aliases and the levels, which
are parameters, keep the same state as the single-level form):

  quantile          ReservoirSampler: capacity 8192 (UInt64), the number of values seen (UInt64), its
                    pcg32 generator as text with a varuint length ("6364136223846793005 0 <state>"),
                    then min(count, 8192) samples. Up to 8192 values every value is kept in the order
                    added and the generator is never used; past that each value replaces the sample
                    the generator picks (if any). We run the same generator from the same seed, so
                    the bytes are ClickHouse's for any group size.
  quantileExact     a varuint count, then every value in the order added.
  quantileTDigest   a varuint count of Float32 (mean, weight) centroids, compressed (ClickHouse's
                    t-digest with ε = 0.01: a compression after more than 2048 centroids were added,
                    and one before the state is written), sorted by mean. Reproduced exactly.
  quantileTiming    kind 1: a UInt16 count and up to 31 UInt16 values; kind 2: a UInt64 count and up
                    to 5672 values; kind 3: a UInt64 count and a histogram of 2835 UInt64 counters
                    (whole, or as (UInt16 index, UInt64) pairs ended by index 30000 when the count is
                    at most 1417). Values are whole milliseconds capped at 30000; negative values,
                    NaN and values past Int64's range are skipped. The weighted form adds each value
                    `weight` times and goes from tiny straight to the histogram.
  quantileDeterministic (state version 1)  the sample size and the number of values seen (UInt64),
                    (value, UInt32 low half of intHash64(determinator)) pairs laid out as a C++
                    std::pair (8 or 16 bytes, zero padding), then the skip degree byte.

NaN values are skipped by every form (they do not count). Combining merges each group's states left
to right into a fresh state as ClickHouse's merge of parts does (a reservoir merged into an empty
one keeps the empty one's generator; t-digest centroids added one by one then compressed;
timing brought to the larger representation).

Argument types are those aggregate_states.py knows that ClickHouse also accepts: quantile and
quantileExact take numbers (128/256-bit integers too), Bool, Date, DateTime, DateTime64 and
Decimal; quantileTDigest, quantileTiming and quantileDeterministic take numbers up to 64 bits, Bool,
Date and DateTime; weights and determinators are unsigned integers. ClickHouse refuses the others (Date32,
DateTime64 and Decimal for the t-digest and timing forms, signed weights) when a table is created.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from spark_mergetree.errors import CorruptPartError
from spark_mergetree.format import states_quantiles_compiled as kernels
from spark_mergetree.format.aggregate_states import state_layout
from spark_mergetree.format.skip_index_writer import int_hash64
from spark_mergetree.format.state_rows import StateBuilder, concat_rows, fixed_bytes
from spark_mergetree.format.types import (
    AggregateFunction,
    DataType,
    DateTime,
    DateTime64,
    Decimal,
    LowCardinality,
    Primitive,
)
from spark_mergetree.format.values import encode_varuints, fixed_storage, fixed_width, string_buffers

__all__ = ["builder"]

RESERVOIR, EXACT, TDIGEST, TIMING, TIMING_WEIGHTED, DETERMINISTIC = (
    "reservoir", "exact", "tdigest", "timing", "timing_weighted", "deterministic")
_KIND = {**dict.fromkeys(("quantile", "quantiles"), RESERVOIR), **dict.fromkeys(("quantileExact", "quantilesExact"), EXACT),
         **dict.fromkeys(("quantileTDigest", "quantilesTDigest"), TDIGEST),
         **dict.fromkeys(("quantileTiming", "quantilesTiming"), TIMING),
         **dict.fromkeys(("quantileTimingWeighted", "quantilesTimingWeighted"), TIMING_WEIGHTED),
         **dict.fromkeys(("quantileDeterministic", "quantilesDeterministic"), DETERMINISTIC)}
_INTEGERS = ("UInt8", "UInt16", "UInt32", "UInt64", "Int8", "Int16", "Int32", "Int64")
_UNSIGNED = ("UInt8", "UInt16", "UInt32", "UInt64")
_FLOATS = ("Float32", "Float64")
_SMALL_NUMBERS = (*_INTEGERS, *_FLOATS, "Bool", "Date")
_WIDE_INTEGERS = ("Int128", "UInt128", "Int256", "UInt256")
_RNG_TEXT_PREFIX = np.frombuffer(f"{kernels.PCG_MULTIPLIER} 0 ".encode(), np.uint8)


def _plain(dt: DataType) -> DataType:
    return dt.inner if isinstance(dt, LowCardinality) else dt


def _primitive(dt: DataType, names: Sequence[str]) -> bool:
    return isinstance(dt, Primitive) and dt.name in names and dt.custom_name is None


def _accepted(kind: str, args: tuple[DataType, ...]) -> bool:
    """The argument types ClickHouse 26.9 takes for the function (measured)."""
    value = args[0] if args else None
    if value is None or value.custom_name is not None:
        return False
    small = _primitive(value, _SMALL_NUMBERS) or isinstance(value, DateTime)
    if kind in (RESERVOIR, EXACT):
        return len(args) == 1 and (small or _primitive(value, _WIDE_INTEGERS) or isinstance(value, (DateTime64, Decimal)))
    if kind in (TDIGEST, TIMING):
        return len(args) == 1 and small
    if kind == DETERMINISTIC:
        return len(args) == 2 and small and _primitive(args[1], _UNSIGNED)
    return len(args) == 2 and small and _primitive(args[1], _UNSIGNED)  # TIMING_WEIGHTED


def builder(dt: AggregateFunction) -> StateBuilder | None:
    """How states of `dt` are built and combined, None when it is not of the quantile family or its
    argument types are not ones both ClickHouse and format/aggregate_states.py take."""
    if not isinstance(dt, AggregateFunction) or dt.function not in _KIND:
        return None
    plain = AggregateFunction(dt.function, tuple(_plain(a) for a in dt.arguments), dt.parameters, dt.version)
    kind = _KIND[dt.function]
    if state_layout(plain) is None or not _accepted(kind, plain.arguments):
        return None
    return _BUILDERS[kind]


# --- values -------------------------------------------------------------------------------------

def _storage(dt: DataType, arr: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """The values as ClickHouse stores them (numpy, one row per value; 128/256-bit ones as rows of
    UInt64 words)."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    if pa.types.is_dictionary(arr.type):
        arr = arr.dictionary_decode()
    return fixed_storage(_plain(dt), arr, "aggregate function argument")


def _value_bytes(dt: DataType, arr: pa.Array) -> tuple[np.ndarray, int, np.ndarray]:
    """(the values' bytes back to back, their width, which rows count: not NaN)."""
    stored = np.ascontiguousarray(_storage(dt, arr))
    n = len(arr)
    data = stored.view(np.uint8).reshape(-1)
    width = len(data) // n if n else 1
    counted = ~np.isnan(stored) if stored.dtype.kind == "f" else np.ones(n, bool)
    return data, width, counted


def _bounds(kept_rows: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Where each group's kept rows begin in `kept_rows` (sorted row numbers), and their end."""
    return np.append(np.searchsorted(kept_rows, starts), len(kept_rows)).astype(np.int64)


def _binary(offsets: np.ndarray, data: np.ndarray) -> pa.BinaryArray:
    return pa.Array.from_buffers(pa.large_binary(), len(offsets) - 1,
                                 [None, pa.py_buffer(offsets.astype(np.int64)), pa.py_buffer(data)]).cast(pa.binary())


def _u64_piece(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return fixed_bytes(np.asarray(values, np.uint64))


def _states_of(states: pa.Array, starts: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(bytes, state offsets n+1, each group's first state and the end)."""
    offsets, data = string_buffers(states)
    return data, offsets, np.append(starts, len(states)).astype(np.int64)


def _check(outcome: int, state: int, dt: AggregateFunction, starts: np.ndarray) -> None:
    if outcome != kernels.READ_OK:
        what = "ends before its end" if outcome == kernels.READ_CUT else "holds bytes ClickHouse would not read"
        group = int(np.searchsorted(starts, state, side="right")) - 1
        raise CorruptPartError(f"{dt.to_clickhouse()}: state {state} (of group {group}) {what}")


def _slots(bounds: np.ndarray, room: int) -> np.ndarray:
    """Start of each group's slice of at most `room` items (and the end), for groups whose items
    are bounds[g]..bounds[g + 1]."""
    slots = np.zeros(len(bounds), np.int64)
    np.cumsum(np.minimum(np.diff(bounds), room), out=slots[1:])
    return slots


def _filled_items(slots: np.ndarray, filled: np.ndarray) -> np.ndarray:
    """Indices of the first filled[g] items of each group's slice."""
    total = int(filled.sum())
    firsts = np.zeros(len(filled), np.int64)
    np.cumsum(filled[:-1], out=firsts[1:])
    return np.arange(total, dtype=np.int64) + np.repeat(slots[:-1] - firsts, filled)


# --- quantile: the reservoir sampler ------------------------------------------------------------

def _reservoir_bytes(source: np.ndarray, samples: np.ndarray, slots: np.ndarray, filled: np.ndarray, width: int,
                     totals: np.ndarray, rngs: np.ndarray) -> pa.BinaryArray:
    chosen = samples[_filled_items(slots, filled)]
    bounds = np.zeros(len(filled) + 1, np.int64)
    np.cumsum(filled, out=bounds[1:])
    offsets, data = kernels.write_reservoirs(source, chosen, bounds, width, totals, rngs, _RNG_TEXT_PREFIX)
    return _binary(offsets, data)


def _reservoir_states(dt: AggregateFunction, arguments: Sequence[pa.Array], starts: np.ndarray, n: int) -> pa.BinaryArray:
    data, width, counted = _value_bytes(dt.arguments[0], arguments[0])
    rows = np.flatnonzero(counted)
    bounds = _bounds(rows, starts)
    slots = _slots(bounds, kernels.RESERVOIR_CAPACITY)
    samples = np.empty(int(slots[-1]), np.int64)
    groups = len(starts)
    totals, rngs = np.zeros(groups, np.uint64), np.zeros(groups, np.uint64)
    kernels.reservoir_sample(rows.astype(np.int64) * width, bounds, slots, samples, totals, rngs)
    filled = np.minimum(np.diff(bounds), kernels.RESERVOIR_CAPACITY)
    return _reservoir_bytes(data, samples, slots, filled, width, totals, rngs)


def _reservoir_combine(dt: AggregateFunction, states: pa.BinaryArray, starts: np.ndarray) -> pa.BinaryArray:
    data, offsets, group_states = _states_of(states, starts)
    width = fixed_width(_plain(dt.arguments[0]))
    # Room for each group's samples: what its states hold, at most the capacity.
    held = np.zeros(len(states), np.int64)
    whole = np.diff(offsets) >= 16
    if len(data) and whole.any():
        heads = offsets[:-1][whole]
        counts = np.frombuffer(np.ascontiguousarray(data[(heads + 8)[:, None] + np.arange(8)]).tobytes(), "<u8")
        held[whole] = np.minimum(counts, kernels.RESERVOIR_CAPACITY).astype(np.int64)
    room_bounds = np.append(0, np.cumsum(held))[group_states]
    slots = _slots(room_bounds, kernels.RESERVOIR_CAPACITY)
    samples = np.empty(int(slots[-1]), np.int64)
    groups = len(starts)
    filled = np.zeros(groups, np.int64)
    totals, rngs = np.zeros(groups, np.uint64), np.zeros(groups, np.uint64)
    outcome, state = kernels.reservoir_merge(data, offsets, group_states, width, slots, samples, filled, totals, rngs)
    _check(outcome, state, dt, starts)
    return _reservoir_bytes(data, samples, slots, filled, width, totals, rngs)


# --- quantileExact: every value -----------------------------------------------------------------

def _varuint_piece(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return encode_varuints(np.asarray(values, np.uint64))


def _exact_states(dt: AggregateFunction, arguments: Sequence[pa.Array], starts: np.ndarray, n: int) -> pa.BinaryArray:
    data, width, counted = _value_bytes(dt.arguments[0], arguments[0])
    rows = np.flatnonzero(counted)
    counts = np.diff(_bounds(rows, starts))
    kept = data.reshape(-1, width)[rows].reshape(-1) if width else data
    value_offsets = np.zeros(len(counts) + 1, np.int64)
    np.cumsum(counts * width, out=value_offsets[1:])
    return concat_rows([_varuint_piece(counts), (kept, value_offsets)])


def _heads(dt: AggregateFunction, data: np.ndarray, offsets: np.ndarray, starts: np.ndarray,
           item: int) -> tuple[np.ndarray, np.ndarray]:
    """(the varuint count each state starts with, where its items start), checked against each
    state's length (a count, then that many items of `item` bytes)."""
    counts, firsts, outcome, state = kernels.varuint_heads(data, offsets)
    if outcome == kernels.READ_OK:
        wrong = np.flatnonzero(firsts + counts.astype(np.int64) * item != offsets[1:])
        if len(wrong):
            outcome, state = kernels.READ_BAD, int(wrong[0])
    _check(outcome, state, dt, starts)
    return counts, firsts


def _exact_combine(dt: AggregateFunction, states: pa.BinaryArray, starts: np.ndarray) -> pa.BinaryArray:
    data, offsets, group_states = _states_of(states, starts)
    width = fixed_width(_plain(dt.arguments[0]))
    counts, firsts = _heads(dt, data, offsets, starts, width)
    # Merging appends the other state's values: a group's state is all its states' values in order.
    header = np.zeros(len(data) + 1, np.int64)
    np.add.at(header, offsets[:-1], 1)
    np.add.at(header, firsts, -1)
    payload = data[np.cumsum(header[:-1]) == 0]
    group_counts = np.add.reduceat(counts, group_states[:-1]) if len(counts) else np.zeros(0, np.uint64)
    value_offsets = np.zeros(len(starts) + 1, np.int64)
    np.cumsum(group_counts.astype(np.int64) * width, out=value_offsets[1:])
    return concat_rows([_varuint_piece(group_counts), (payload, value_offsets)])


# --- quantileTDigest ----------------------------------------------------------------------------

def _digest_bytes(means: np.ndarray, weights: np.ndarray, slots: np.ndarray, sizes: np.ndarray) -> pa.BinaryArray:
    items = _filled_items(slots, sizes)
    pairs = np.empty((len(items), 2), np.float32)
    pairs[:, 0] = means[items]
    pairs[:, 1] = weights[items]
    pair_offsets = np.zeros(len(sizes) + 1, np.int64)
    np.cumsum(sizes * 8, out=pair_offsets[1:])
    return concat_rows([_varuint_piece(sizes), (pairs.view(np.uint8).reshape(-1), pair_offsets)])


def _tdigest_states(dt: AggregateFunction, arguments: Sequence[pa.Array], starts: np.ndarray, n: int) -> pa.BinaryArray:
    # ClickHouse converts each value to Float32 (integers rounded to nearest, as numpy does).
    values = np.ascontiguousarray(_storage(dt.arguments[0], arguments[0]).astype(np.float32))
    bounds = np.append(starts, n).astype(np.int64)
    slots = _slots(bounds, kernels.TDIGEST_MAX_CENTROIDS)
    means, weights = np.empty(int(slots[-1]), np.float32), np.empty(int(slots[-1]), np.float32)
    sizes = np.zeros(len(starts), np.int64)
    kernels.tdigest_build(values, bounds, slots, means, weights, sizes)
    return _digest_bytes(means, weights, slots, sizes)


def _tdigest_combine(dt: AggregateFunction, states: pa.BinaryArray, starts: np.ndarray) -> pa.BinaryArray:
    data, offsets, group_states = _states_of(states, starts)
    counts, _ = _heads(dt, data, offsets, starts, 8)
    room_bounds = np.append(0, np.cumsum(counts.astype(np.int64)))[group_states]
    slots = _slots(room_bounds, kernels.TDIGEST_MAX_CENTROIDS)
    means, weights = np.empty(int(slots[-1]), np.float32), np.empty(int(slots[-1]), np.float32)
    sizes = np.zeros(len(starts), np.int64)
    outcome, state = kernels.tdigest_merge(data, offsets, group_states, slots, means, weights, sizes)
    _check(outcome, state, dt, starts)
    return _digest_bytes(means, weights, slots, sizes)


# --- quantileTiming -----------------------------------------------------------------------------

def _timings(dt: DataType, arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(each value as ClickHouse keeps it: whole milliseconds capped at 30000, UInt16; which rows
    it keeps: not NaN, not negative, not past Int64's greatest value)."""
    stored = _storage(dt, arr)
    if stored.dtype.kind == "f":
        wide = stored.astype(np.float64)
        kept = ~np.isnan(wide) & (wide >= 0) & (wide <= 2.0 ** 63)
        capped = np.minimum(np.where(kept, wide, 0), 30000).astype(np.uint16)  # truncated, as C++ converts
        return capped, kept
    if stored.dtype.kind == "i":
        kept = stored >= 0
    else:
        kept = stored.astype(np.uint64) <= np.uint64(2 ** 63 - 1)
    return np.minimum(np.where(kept, stored, 0), 30000).astype(np.uint16), kept


def _timing_states(dt: AggregateFunction, arguments: Sequence[pa.Array], starts: np.ndarray, n: int) -> pa.BinaryArray:
    values, kept = _timings(dt.arguments[0], arguments[0])
    weighted = len(arguments) == 2
    # Weights are read as UInt64 (ClickHouse's getUInt).
    weights = _storage(dt.arguments[1], arguments[1]).astype(np.uint64)[kept] if weighted else np.zeros(0, np.uint64)
    rows = np.flatnonzero(kept)
    offsets, data = kernels.timing_build(np.ascontiguousarray(values[rows]), np.ascontiguousarray(weights), weighted,
                                         _bounds(rows, starts), 4 * len(rows) + 16 * len(starts))
    return _binary(offsets, data)


def _timing_combine(dt: AggregateFunction, states: pa.BinaryArray, starts: np.ndarray) -> pa.BinaryArray:
    data, offsets, group_states = _states_of(states, starts)
    out_offsets, out, outcome, state = kernels.timing_merge(data, offsets, group_states, len(data) + 16)
    _check(outcome, state, dt, starts)
    return _binary(out_offsets, out)


# --- quantileDeterministic ----------------------------------------------------------------------

def _pair_width(width: int) -> int:
    """sizeof(std::pair<T, UInt32>): the hash follows the value at the value's alignment."""
    return 16 if width == 8 else 8


def _deterministic_bytes(source: np.ndarray, values: np.ndarray, hashes: np.ndarray, slots: np.ndarray,
                         filled: np.ndarray, width: int, totals: np.ndarray, degrees: np.ndarray) -> pa.BinaryArray:
    items = _filled_items(slots, filled)
    pair_width = _pair_width(width)
    pairs = kernels.write_pairs(source, values[items], hashes[items], width, pair_width)
    pair_offsets = np.zeros(len(filled) + 1, np.int64)
    np.cumsum(filled * pair_width, out=pair_offsets[1:])
    return concat_rows([_u64_piece(filled), _u64_piece(totals), (pairs, pair_offsets),
                        (degrees.astype(np.uint8), np.arange(len(filled) + 1, dtype=np.int64))])


def _deterministic_states(dt: AggregateFunction, arguments: Sequence[pa.Array], starts: np.ndarray,
                          n: int) -> pa.BinaryArray:
    data, width, counted = _value_bytes(dt.arguments[0], arguments[0])
    hashes = (int_hash64(_storage(dt.arguments[1], arguments[1]).astype(np.uint64)) & np.uint64(0xFFFFFFFF)).astype(np.uint32)
    rows = np.flatnonzero(counted)
    bounds = _bounds(rows, starts)
    slots = _slots(bounds, kernels.RESERVOIR_CAPACITY)
    values, kept_hashes = np.empty(int(slots[-1]), np.int64), np.empty(int(slots[-1]), np.uint32)
    groups = len(starts)
    filled, degrees = np.zeros(groups, np.int64), np.zeros(groups, np.int64)
    kernels.deterministic_sample(rows.astype(np.int64) * width, np.ascontiguousarray(hashes[rows]), bounds, slots,
                                 values, kept_hashes, filled, degrees)
    return _deterministic_bytes(data, values, kept_hashes, slots, filled, width, np.diff(bounds), degrees)


def _deterministic_combine(dt: AggregateFunction, states: pa.BinaryArray, starts: np.ndarray) -> pa.BinaryArray:
    data, offsets, group_states = _states_of(states, starts)
    width = fixed_width(_plain(dt.arguments[0]))
    pair_width = _pair_width(width)
    room = np.maximum(np.diff(offsets) - 17, 0) // pair_width
    slots = _slots(np.append(0, np.cumsum(room))[group_states], kernels.RESERVOIR_CAPACITY)
    values, hashes = np.empty(int(slots[-1]), np.int64), np.empty(int(slots[-1]), np.uint32)
    groups = len(starts)
    filled, degrees, totals = np.zeros(groups, np.int64), np.zeros(groups, np.int64), np.zeros(groups, np.uint64)
    outcome, state = kernels.deterministic_merge(data, offsets, group_states, pair_width, slots, values, hashes,
                                                 filled, degrees, totals)
    _check(outcome, state, dt, starts)
    return _deterministic_bytes(data, values, hashes, slots, filled, width, totals, degrees)


_BUILDERS = {
    RESERVOIR: StateBuilder(_reservoir_states, _reservoir_combine),
    EXACT: StateBuilder(_exact_states, _exact_combine),
    TDIGEST: StateBuilder(_tdigest_states, _tdigest_combine),
    TIMING: StateBuilder(_timing_states, _timing_combine),
    TIMING_WEIGHTED: StateBuilder(_timing_states, _timing_combine),
    DETERMINISTIC: StateBuilder(_deterministic_states, _deterministic_combine),
}

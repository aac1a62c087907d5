"""States of AggregateFunction types built from rows, and combined: which family builds each type,
and what every family shares: NULLs, the -If combinator and groups left without rows.

`states_of_rows` gives, for rows grouped consecutively (format/state_rows.py), one state per group
with ClickHouse's bytes; `combined_states` combines consecutive states group by group, as
ClickHouse's merge of states does. The families (states_simple: count, sums, values kept and
moments; states_sets: distinct counts; states_quantiles: quantiles; states_bits_maps: bits,
bitmaps, -Map sums, deltaSum, regressions; states_events: funnels, retention, -Distinct sets,
entropy, topK, groupConcat) see arguments without NULLs and groups with rows. Here:
- LowCardinality arguments are their values (the same states), decoded here;
- Nullable arguments (`nullable_flag`, measured in ClickHouse 26.9): rows with a NULL argument are
  left out; a flag byte comes first where ClickHouse writes one: always 1 for the functions whose
  result is never NULL (uniq, count, quantiles, ...), else 1 only when a row was added (and the
  flag 0 alone when none was);
- -If (`sumIf(x, cond)`): the function's own state of the rows whose condition is neither 0 nor
  NULL;
- a group with no rows left gets the state of no rows (aggregate_states.empty_state).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from spark_mergetree.errors import UnsupportedError
from spark_mergetree.format import (
    states_bits_maps,
    states_events,
    states_quantiles,
    states_sets,
    states_simple,
)
from spark_mergetree.format.aggregate_states import empty_state, nullable_flag, state_layout, value_type
from spark_mergetree.format.state_rows import StateBuilder, concat_rows
from spark_mergetree.format.types import AggregateFunction, DataType, Nullable, Primitive
from spark_mergetree.format.values import string_buffers

__all__ = ["why_not_buildable", "states_of_rows", "combined_states"]

_FAMILIES = (states_simple, states_sets, states_quantiles, states_bits_maps, states_events)


def _conditional(dt: AggregateFunction) -> bool:
    """Whether `dt` is a function with the -If combinator (its last argument the UInt8 condition)."""
    last = value_type(dt.arguments[-1]) if dt.arguments else None
    inner = last.inner if isinstance(last, Nullable) else last
    return dt.function.endswith("If") and inner == Primitive("UInt8") and state_layout(dt) is not None


def _unconditional(dt: AggregateFunction) -> AggregateFunction:
    return AggregateFunction(dt.function[:-2], dt.arguments[:-1], dt.parameters, dt.version)


def _without_nulls(dt: AggregateFunction) -> AggregateFunction:
    return AggregateFunction(dt.function, tuple(_plain(a) for a in dt.arguments), dt.parameters, dt.version)


def _plain(t: DataType) -> DataType:
    """An argument's type as the families see it: without LowCardinality and Nullable."""
    t = value_type(t)
    return t.inner if isinstance(t, Nullable) else t


def _has_nullable(dt: AggregateFunction) -> bool:
    return any(isinstance(value_type(a), Nullable) for a in dt.arguments)


def _builder(dt: AggregateFunction) -> StateBuilder | None:
    """The family builder of `dt` (no Nullable argument, no -If)."""
    for family in _FAMILIES:
        found = family.builder(dt)
        if found is not None:
            return found
    return None


def _core(dt: AggregateFunction) -> AggregateFunction:
    """The type a family builds for `dt`: -If and Nullable removed."""
    dt = _without_nulls(dt)
    return _unconditional(dt) if _conditional(dt) else dt


def why_not_buildable(dt: AggregateFunction) -> str | None:
    """Why states of `dt` cannot be built here (None when they can)."""
    if state_layout(dt) is None:
        return f"the layout of {dt.to_clickhouse()}'s states is not known"
    if _has_nullable(dt) and nullable_flag(dt) not in (True, False, None):
        return f"how {dt.function} treats NULL arguments is not known"
    if _builder(_core(dt)) is None:
        return f"building states of {dt.to_clickhouse()} from rows is not supported"
    return None


def _require(dt: AggregateFunction) -> None:
    reason = why_not_buildable(dt)
    if reason is not None:
        raise UnsupportedError(reason)


def _kept_starts(starts: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """Each group's start among the rows `keep` selects (equal starts: a group left without rows)."""
    before = np.zeros(len(keep) + 1, np.int64)
    np.cumsum(keep, out=before[1:])
    return before[starts]


def _with_empty_groups(dt: AggregateFunction, starts: np.ndarray, n: int,
                       build: Callable[[np.ndarray], pa.BinaryArray]) -> pa.BinaryArray:
    """`build(nonempty_starts)`'s states for the groups with rows, the state of no rows for the others."""
    sizes = np.diff(np.append(starts, n))
    full = sizes > 0
    if full.all():
        return build(starts) if len(starts) else pa.array([], pa.binary())
    built = build(starts[full]) if full.any() else pa.array([], pa.binary())
    empty = empty_state(dt, "a group without rows")
    positions = np.cumsum(full) - 1
    taken = built.take(pa.array(np.where(full, positions, 0))) if len(built) else pa.repeat(pa.scalar(b"", pa.binary()), len(starts))
    return pc.if_else(pa.array(full), taken, pa.scalar(empty, pa.binary()))


def _gathered(data: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """data[starts[i]:starts[i] + lengths[i]] of every row, back to back, and their offsets."""
    offsets = np.zeros(len(lengths) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    picks = np.repeat(starts - offsets[:-1], lengths) + np.arange(int(offsets[-1]), dtype=np.int64)
    return data[picks], offsets


def _prefixed(flags: np.ndarray, states: pa.BinaryArray, with_state: np.ndarray) -> pa.BinaryArray:
    """A flag byte before each state; rows not `with_state` hold the flag alone."""
    offsets, data = string_buffers(states)
    kept, kept_offsets = _gathered(data, offsets[:-1], np.where(with_state, np.diff(offsets), 0))
    return concat_rows([(flags.astype(np.uint8), np.arange(len(flags) + 1, dtype=np.int64)), (kept, kept_offsets)])


def _suffixes(states: pa.BinaryArray) -> pa.BinaryArray:
    """Each state without its first byte (the flag)."""
    offsets, data = string_buffers(states)
    rest, rest_offsets = _gathered(data, offsets[:-1] + 1, np.maximum(np.diff(offsets) - 1, 0))
    return pa.Array.from_buffers(pa.large_binary(), len(states), [None, pa.py_buffer(rest_offsets),
                                 pa.py_buffer(np.ascontiguousarray(rest))]).cast(pa.binary())


def states_of_rows(dt: AggregateFunction, arguments: Sequence[pa.Array | pa.ChunkedArray], starts: np.ndarray,
                   n: int) -> pa.BinaryArray:
    """One state of `dt` per group of rows (`arguments`: one array per argument of dt, NULLs where
    its type is Nullable; groups start at `starts`, in the order ClickHouse adds their rows)."""
    _require(dt)
    arrays = [a.combine_chunks() if isinstance(a, pa.ChunkedArray) else a for a in arguments]
    arrays = [a.dictionary_decode() if pa.types.is_dictionary(a.type) else a for a in arrays]
    starts = np.asarray(starts, np.int64)
    keep = np.ones(n, bool)
    conditional = _conditional(_without_nulls(dt))
    if conditional:
        keep &= np.asarray(pc.fill_null(pc.not_equal(arrays[-1].cast(pa.uint8()), 0), False))
    valued = arrays[:-1] if conditional else arrays
    for array in valued:
        if array.null_count:
            keep &= np.asarray(array.is_valid())
    core = _core(dt)
    builder = _builder(core)
    assert builder is not None
    kept_n = int(keep.sum())
    kept_arguments = [a.filter(pa.array(keep)) if kept_n < n else a for a in valued]
    kept_starts = _kept_starts(starts, keep)
    states = _with_empty_groups(core, kept_starts, kept_n, lambda s: builder.states(core, kept_arguments, s, kept_n))
    flag = nullable_flag(dt) if _has_nullable(dt) else None
    if flag is None:
        return states
    added = np.diff(np.append(kept_starts, kept_n)) > 0
    with_state = np.ones(len(starts), bool) if flag else added
    return _prefixed(with_state.astype(np.uint8), states, with_state)


def combined_states(dt: AggregateFunction, states: pa.Array | pa.ChunkedArray, starts: np.ndarray) -> pa.BinaryArray:
    """The states of each group (rows from `starts`, one state each) combined in order, as
    ClickHouse merges states of `dt`."""
    _require(dt)
    column = states.combine_chunks() if isinstance(states, pa.ChunkedArray) else states
    column = column.cast(pa.binary())
    starts = np.asarray(starts, np.int64)
    n = len(column)
    core = _core(dt)
    builder = _builder(core)
    assert builder is not None
    flag = nullable_flag(dt) if _has_nullable(dt) else None
    if flag is None:
        return builder.combine(core, column, starts) if n else pa.array([], pa.binary())
    offsets, data = string_buffers(column)
    flags = data[offsets[:-1]] if n else np.zeros(0, np.uint8)
    held = flags == 1
    inner = _suffixes(column)
    kept = inner.filter(pa.array(held)) if not held.all() else inner
    kept_starts = _kept_starts(starts, held)
    combined = _with_empty_groups(core, kept_starts, int(held.sum()), lambda s: builder.combine(core, kept, s))
    added = np.diff(np.append(kept_starts, int(held.sum()))) > 0
    with_state = np.ones(len(starts), bool) if flag else added
    return _prefixed(with_state.astype(np.uint8), combined, with_state)

"""The plumbing every builder of AggregateFunction states shares: groups of rows, and state bytes.

A builder (format/state_builders.py dispatches to the families: states_simple, states_sets,
states_quantiles) makes, for rows grouped consecutively, one state per group with ClickHouse's
bytes, and combines consecutive states group by group as ClickHouse's merge of states does. Groups
are given by `starts`: group g is rows starts[g] up to starts[g + 1] (the last one up to n), strictly
increasing, so no group is empty (the dispatcher gives empty groups the state of no rows itself).
Within a group, rows come in the order ClickHouse adds them (an insert's rows in the order they
arrived; a merge's sources in order).

Each family module exposes `builder(dt: AggregateFunction) -> StateBuilder | None`: the builder of
the types it knows (those format/aggregate_states.py can split), None for the others. Its `states`
gets the arguments with no NULLs and dt without Nullable (the dispatcher writes the Nullable flag
byte and applies -If's condition), LowCardinality arrays possibly dictionary-encoded.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from spark_mergetree.format.types import AggregateFunction

# (dt, arguments: one Arrow array per argument, non-Nullable values with no NULLs, grouped; starts; n rows)
RowsToStates = Callable[[AggregateFunction, Sequence[pa.Array], np.ndarray, int], pa.BinaryArray]
# (dt, states: one state per row, grouped; starts) -> one combined state per group
CombineStates = Callable[[AggregateFunction, pa.BinaryArray, np.ndarray], pa.BinaryArray]


@dataclass(frozen=True)
class StateBuilder:
    """How states of one AggregateFunction type are built from rows and combined."""

    states: RowsToStates
    combine: CombineStates


def group_ends(starts: np.ndarray, n: int) -> np.ndarray:
    """Where each group ends (exclusive)."""
    return np.append(starts[1:], n).astype(np.int64)


def group_sizes(starts: np.ndarray, n: int) -> np.ndarray:
    return group_ends(starts, n) - starts


def fixed_bytes(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Fixed-width little-endian values as (bytes, offsets n+1): one piece per row for `concat_rows`."""
    width = values.dtype.itemsize
    data = np.ascontiguousarray(values.astype(values.dtype.newbyteorder("<"))).view(np.uint8)
    return data, np.arange(len(values) + 1, dtype=np.int64) * width


def concat_rows(pieces: Sequence[tuple[np.ndarray, np.ndarray]]) -> pa.BinaryArray:
    """Per row, the bytes of every piece back to back (each piece is (bytes, offsets n+1)): one
    state per row."""
    lengths: np.ndarray = np.sum([np.diff(offsets) for _, offsets in pieces], axis=0)
    offsets = np.zeros(len(lengths) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    out = np.empty(int(offsets[-1]), np.uint8)
    at = offsets[:-1].copy()
    for data, piece_offsets in pieces:
        sizes = np.diff(piece_offsets)
        dest = np.arange(len(data), dtype=np.int64) + np.repeat(at - piece_offsets[:-1], sizes)
        out[dest] = data
        at += sizes
    return pa.Array.from_buffers(pa.large_binary(), len(lengths), [None, pa.py_buffer(offsets), pa.py_buffer(out)]) \
        .cast(pa.binary())


def decode_varuints(data: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """The varuint filling data[starts[i]:ends[i]] of each row (every one at least a byte)."""
    lengths = ends - starts
    firsts = np.zeros(len(lengths), np.int64)
    np.cumsum(lengths[:-1], out=firsts[1:])
    within = np.arange(int(lengths.sum()), dtype=np.int64) - np.repeat(firsts, lengths)
    digits = (data[np.repeat(starts, lengths) + within].astype(np.uint64) & np.uint64(0x7F)) << (
        np.uint64(7) * within.astype(np.uint64))
    return np.add.reduceat(digits, firsts) if len(firsts) else np.zeros(0, np.uint64)

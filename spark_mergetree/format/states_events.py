"""States of the event, distinct-value and counting-map functions, built from rows and combined as
ClickHouse 26.9 does: `retention`, `windowFunnel(window[, modes])`, `sequenceMatch(pattern)`,
`sequenceCount(pattern)`, `entropy`, `quantileBFloat16` / `quantilesBFloat16`, `groupConcat[(delimiter)]`,
`topK(N)` and the -Distinct forms `sumDistinct`, `countDistinct`, `avgDistinct`, `uniqExactDistinct`.

What each keeps (every rule measured against chdb 26.9):

- `retention(c1, ..., ck)`: a UInt32 with bit i - 1 set when some row met condition i; merged by OR.
- `windowFunnel`: a `sorted` byte, a UInt64 count, then (timestamp, UInt8 condition number) events.
  A row adds one event per condition it meets, the last condition first ('strict_order' mode: a
  row meeting none adds condition 0). Events stay in the order added (nothing is sorted when a
  state is written); `sorted` stays 1 while each event is not below the one before in (timestamp,
  condition) order. A merge sorts the events by (timestamp, condition) and sets `sorted`; a state
  without events leaves the merged one as it is. ('strict_once' adds a row number to each event:
  a layout format/aggregate_states.py does not know, so not built here.)
- `sequenceMatch` / `sequenceCount`: the same, each event a UInt64 mask of the conditions met; only
  rows meeting some condition add one. `sorted` is 0 as soon as an event is added, also by a merge,
  which appends the other state's events (sorting happens only when the result is computed).
- -Distinct: a HashSet of the distinct values (HashSetWithStackMemory, 16 cells to start):
  numbers by their bits (DefaultHash: intHash64 of the bits zero-extended; 0.0 and -0.0 distinct,
  NaN one value), strings by ClickHouse's CRC32 string hash; serialized in cell order (the zero
  key first). A merge reads each state into a table (a number set sized for its count first, a
  string set key by key from 16 cells), then inserts that table's keys in its cell order.
- `entropy`: a HashMap of value → UInt64 count (HashCRC32, 16 cells to start) of numbers and Date
  and Int128 as themselves (NaN skipped), of a String as the SipHash-128 of (its size + 1 as
  UInt64, its bytes, a zero byte), of a Decimal or UInt128 as the SipHash-128 of its bytes; `quantileBFloat16`: the same
  of BFloat16 values (the value cast to Float32, its high 16 bits; NaN skipped), the key its own
  hash. Both serialized in cell order; a merge reads each state into a table (quantileBFloat16's
  sized for its count first, entropy's key by key from 16 cells), then adds that table's counts
  in its cell order.
- `groupConcat`: the text of the values joined, the delimiter before each value but those that
  find the text still empty; a merge appends a non-empty state's text the same way. Built for
  String, FixedString, integers (128/256-bit too), Bool ('true'/'false'), Date, Date32, DateTime
  (in its time zone) and Decimal up to 38 digits (trailing zeros dropped), whose text Arrow writes
  as ClickHouse does; floats, DateTime64, UUID, Decimal256 and the other types are not (their text
  is ClickHouse's own).
- `topK(N)`: ClickHouse 26.9's SpaceSaving of capacity 3N: counters (value, count, error) kept in
  order of first appearance and counted in place; a value new once 3N are kept starts at the count
  of the alpha map at its hash (HashCRC32 of a number, the CRC32 string hash of other values'
  bytes): count alpha + 1, error alpha. At max(64, 6N) counters the list is truncated: the 3N first
  by ClickHouse's order selected (miniselect's Floyd-Rivest nth_element), each other one's count
  less its error added to the alpha map (capped at 2^32 - 1). Written: the counters partially
  sorted (Floyd-Rivest selection of the first 3N, then libc++'s std::sort of them; the order puts
  a greater count less error first, then a greater count), then the alpha map (nextPowerOf2(18N)
  varuints). A merge copies the first state with counters (its counters as serialized, its alpha
  map); into each next one it raises the merged counters by that state's largest alpha when the
  state is full, adds its counters (less that alpha) to the same values' or appends them (plus the
  merged largest alpha when the merged list is full), adds the alpha maps, then truncates. All
  replayed step by step (miniselect's sampling past 601 counters, libc++'s introsort and its heap
  sort fallback), so ties come out in ClickHouse's order, for any N and group.

Every built state is ClickHouse's bytes (GROUP BY in one thread, rows in order); every combined
state is the bytes of ClickHouse's merge, into a fresh state left to right, of the states as a
part holds them (written once: a state read back and written again may come out in another order).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from spark_mergetree.errors import CorruptPartError
from spark_mergetree.format.aggregate_states import state_layout
from spark_mergetree.format.state_rows import StateBuilder, concat_rows, fixed_bytes, group_ends
from spark_mergetree.format.types import (
    AggregateFunction,
    DataType,
    DateTime,
    Decimal,
    FixedString,
    LowCardinality,
    Primitive,
)
from spark_mergetree.format.values import (
    coerce,
    encode_classic,
    encode_varuints,
    fixed_storage,
    string_buffers,
)

__all__ = ["builder"]

_U64 = np.dtype("<u8")
_INTEGERS = ("UInt8", "UInt16", "UInt32", "UInt64", "Int8", "Int16", "Int32", "Int64")
_DISTINCT = ("sumDistinct", "countDistinct", "avgDistinct", "uniqExactDistinct")


def _sets() -> Any:
    from spark_mergetree.format import states_sets_compiled

    return states_sets_compiled


def _events_kernels() -> Any:
    from spark_mergetree.format import states_events_compiled

    return states_events_compiled


# ------------------------------------------------------------------------------------------- pieces

Piece = tuple[np.ndarray, np.ndarray]


def _array(arr: pa.Array | pa.ChunkedArray) -> pa.Array:
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    return arr.dictionary_decode() if pa.types.is_dictionary(arr.type) else arr


def _plain(dt: DataType) -> DataType:
    return dt.inner if isinstance(dt, LowCardinality) else dt


def _raw(dt: DataType, arr: pa.Array) -> np.ndarray:
    """The values' storage bytes, (n, width) uint8."""
    arr = coerce(dt, _array(arr), "argument")
    stored = np.ascontiguousarray(fixed_storage(dt, arr, "argument"))
    return stored.view(np.uint8).reshape(len(arr), -1)


def _strings(dt: DataType, arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(offsets n+1, bytes) of String or FixedString values."""
    arr = coerce(dt, _array(arr), "argument")
    offsets, data = string_buffers(arr)
    return np.asarray(offsets, np.int64), np.ascontiguousarray(data, np.uint8)


def _u64(raw: np.ndarray) -> np.ndarray:
    """(n, width ≤ 8) bytes zero-extended to UInt64."""
    padded = np.zeros((len(raw), 8), np.uint8)
    padded[:, :raw.shape[1]] = raw
    return padded.view(_U64).reshape(-1)


def _byte_piece(values: np.ndarray) -> Piece:
    return values.astype(np.uint8), np.arange(len(values) + 1, dtype=np.int64)


def _grouped_piece(items: np.ndarray, counts: np.ndarray) -> Piece:
    """Each group's `counts[g]` rows of `items` ((total, width) uint8), back to back."""
    width = items.shape[1]
    bounds = np.zeros(len(counts) + 1, np.int64)
    np.cumsum(counts, out=bounds[1:])
    return np.ascontiguousarray(items).reshape(-1), bounds * width


def _varuint_piece(values: np.ndarray) -> Piece:
    return encode_varuints(np.asarray(values, np.uint64))


def _buffers(states: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(offsets n+1, bytes) of a column of states."""
    offsets, data = string_buffers(_array(states).cast(pa.binary()))
    return np.asarray(offsets, np.int64), np.ascontiguousarray(data, np.uint8)


def _gather(data: np.ndarray, begins: np.ndarray, counts: np.ndarray, width: int) -> np.ndarray:
    """counts[i] items of `width` bytes from data[begins[i]] of each state, as (total, width)."""
    total = int(counts.sum())
    firsts = np.zeros(len(counts), np.int64)
    np.cumsum(counts[:-1], out=firsts[1:])
    base = np.repeat(begins - firsts * width, counts) + np.arange(total, dtype=np.int64) * width
    return data[base[:, None] + np.arange(width, dtype=np.int64)]


def _group_of(starts: np.ndarray, n: int) -> np.ndarray:
    return np.repeat(np.arange(len(starts), dtype=np.int64), group_ends(starts, n) - starts)


def _per_group(mask: np.ndarray, groups: np.ndarray, count: int) -> np.ndarray:
    """How many rows of each group `mask` selects."""
    return np.bincount(groups[mask], minlength=count).astype(np.int64)


def _corrupt(dt: AggregateFunction, state: int) -> CorruptPartError:
    return CorruptPartError(f"state {state} is not a state of {dt.to_clickhouse()}")


def _encode_fixed(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(id per row, distinct values) of (n, width) uint8 values; equal values, equal ids."""
    n, width = values.shape
    arr = pa.Array.from_buffers(pa.binary(width), n, [None, pa.py_buffer(np.ascontiguousarray(values))])
    encoded = arr.dictionary_encode()
    dictionary = encoded.dictionary
    m = len(dictionary)
    distinct = np.frombuffer(dictionary.buffers()[1], np.uint8)[dictionary.offset * width:(dictionary.offset + m) * width]
    ids = np.asarray(encoded.indices, np.int64) if n else np.zeros(0, np.int64)
    return ids, distinct.reshape(m, width).copy() if m else np.zeros((0, width), np.uint8)


def _encode_strings(offsets: np.ndarray, data: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(id per row, distinct strings' offsets, their bytes)."""
    arr = pa.Array.from_buffers(pa.large_binary(), len(offsets) - 1,
                                [None, pa.py_buffer(np.ascontiguousarray(offsets, np.int64)), pa.py_buffer(data)])
    encoded = arr.dictionary_encode()
    ids = np.asarray(encoded.indices, np.int64) if len(arr) else np.zeros(0, np.int64)
    d_offsets, d_data = string_buffers(encoded.dictionary)
    return ids, np.asarray(d_offsets, np.int64), np.ascontiguousarray(d_data, np.uint8)


def _string_items(offsets: np.ndarray, data: np.ndarray, order: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The strings `order` picks, each with its varuint length, as (bytes, offsets per pick)."""
    lengths = np.diff(offsets)[order]
    item_offsets = np.zeros(len(order) + 1, np.int64)
    np.cumsum(lengths, out=item_offsets[1:])
    gathered = np.zeros(0, np.uint8)
    if int(item_offsets[-1]):
        gathered = data[np.repeat(offsets[:-1][order] - item_offsets[:-1], lengths) +
                        np.arange(int(item_offsets[-1]), dtype=np.int64)]
    return encode_classic(item_offsets, gathered)


def _parse_strings(dt: AggregateFunction, offsets: np.ndarray, data: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """States that are a varuint count and that many strings: (count per state, the strings'
    offsets, their bytes)."""
    counts, item_starts, lengths, bad = _sets().parse_strings(data, offsets[:-1], offsets[1:])
    if bad >= 0:
        raise _corrupt(dt, int(bad))
    item_offsets = np.zeros(len(lengths) + 1, np.int64)
    np.cumsum(lengths, out=item_offsets[1:])
    picks = np.repeat(item_starts - item_offsets[:-1], lengths) + np.arange(int(item_offsets[-1]), dtype=np.int64)
    return counts, item_offsets, np.ascontiguousarray(data[picks])


def _parse_counted(dt: AggregateFunction, offsets: np.ndarray, data: np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray]:
    """States that are a varuint count and that many items of `width` bytes: (count per state,
    the items (total, width))."""
    counts, begins, bad = _sets().parse_counted(data, offsets[:-1], offsets[1:], 0, width)
    if bad >= 0:
        raise _corrupt(dt, int(bad))
    return counts, _gather(data, begins, counts, width)


# ---------------------------------------------------------------------------------------- retention

def _retention_states(dt: AggregateFunction, arrays: Sequence[pa.Array], starts: np.ndarray, n: int) -> pa.BinaryArray:
    bits = np.zeros(n, np.uint32)
    for i, arr in enumerate(arrays):
        met = np.asarray(_array(arr).cast(pa.uint8()).to_numpy(zero_copy_only=False)) != 0
        bits |= met.astype(np.uint32) << np.uint32(i)
    return concat_rows([fixed_bytes(np.bitwise_or.reduceat(bits, starts))])


def _retention_combine(dt: AggregateFunction, states: pa.Array, starts: np.ndarray) -> pa.BinaryArray:
    offsets, data = _buffers(states)
    if (np.diff(offsets) != 4).any():
        raise _corrupt(dt, int(np.argmax(np.diff(offsets) != 4)))
    bits = data.view("<u4") if len(data) else np.zeros(0, np.uint32)
    return concat_rows([fixed_bytes(np.bitwise_or.reduceat(bits.astype(np.uint32), starts))])


# ------------------------------------------------------------------------------------------- events

def _stamp_width(dt: DataType) -> int:
    dt = _plain(dt)
    return 4 if isinstance(dt, DateTime) else int(dt.width or 0)  # type: ignore[attr-defined]


def _conditions(arrays: Sequence[pa.Array]) -> np.ndarray:
    """(n, k) bool: which conditions each row meets."""
    return np.stack([np.asarray(_array(a).cast(pa.uint8()).to_numpy(zero_copy_only=False)) != 0 for a in arrays], axis=1)


def _event_states(dt: AggregateFunction, arrays: Sequence[pa.Array], starts: np.ndarray, n: int) -> pa.BinaryArray:
    stamps = _raw(_plain(dt.arguments[0]), arrays[0])
    met = _conditions(arrays[1:])
    groups = _group_of(starts, n)
    count = len(starts)
    if dt.function == "windowFunnel":
        k = met.shape[1]
        # A row's events: its conditions met, the last first; in 'strict_order' mode condition 0 when none.
        codes = np.arange(k, 0, -1, dtype=np.uint8)
        chosen = met[:, ::-1]
        if _strict_order(dt):
            codes = np.append(codes, np.uint8(0))
            none_met = np.asarray(~met.any(axis=1), bool)
            chosen = np.concatenate([chosen, none_met[:, None]], axis=1)
        rows, columns = np.nonzero(chosen)
        event = codes[columns][:, None]
        stamp = _u64(stamps)[rows]
        code = codes[columns]
        same = groups[rows][1:] == groups[rows][:-1]
        descending = (stamp[1:] < stamp[:-1]) | ((stamp[1:] == stamp[:-1]) & (code[1:] < code[:-1]))
        unsorted = _per_group(np.concatenate([[False], same & descending]), groups[rows], count) > 0
        flags = (~unsorted).astype(np.uint8)
    else:
        masks = (met.astype(np.uint64) << np.arange(met.shape[1], dtype=np.uint64)).sum(axis=1, dtype=np.uint64)
        rows = np.nonzero(masks)[0]
        event = masks[rows].astype(_U64).view(np.uint8).reshape(-1, 8)
        flags = np.ones(count, np.uint8)
    per_group = _per_group(np.ones(len(rows), bool), groups[rows], count)
    if dt.function != "windowFunnel":
        flags = (per_group == 0).astype(np.uint8)
    items = np.concatenate([stamps[rows], event.view(np.uint8).reshape(len(rows), -1)], axis=1)
    return concat_rows([_byte_piece(flags), fixed_bytes(per_group.astype(np.uint64)), _grouped_piece(items, per_group)])


def _strict_order(dt: AggregateFunction) -> bool:
    return any(p.strip("'\"") == "strict_order" for p in dt.parameters[1:])


def _event_combine(dt: AggregateFunction, states: pa.Array, starts: np.ndarray) -> pa.BinaryArray:
    width = _stamp_width(dt.arguments[0])
    item = width + (1 if dt.function == "windowFunnel" else 8)
    offsets, data = _buffers(states)
    lengths = np.diff(offsets)
    short = lengths < 9
    if short.any():
        raise _corrupt(dt, int(np.argmax(short)))
    counts = _gather(data, offsets[:-1] + 1, np.ones(len(lengths), np.int64), 8).view(_U64).reshape(-1)
    wrong = counts.astype(np.float64) * item != lengths - 9
    if wrong.any():
        raise _corrupt(dt, int(np.argmax(wrong)))
    counts = counts.astype(np.int64)
    items = _gather(data, offsets[:-1] + 9, counts, item)
    state_groups = _group_of(starts, len(lengths))
    item_groups = np.repeat(state_groups, counts)
    per_group = np.bincount(item_groups, minlength=len(starts)).astype(np.int64)
    if dt.function == "windowFunnel":
        # Merged states are sorted by (timestamp, condition); a group of no events keeps the fresh state's 1.
        order = np.lexsort((items[:, width], _u64(items[:, :width]), item_groups))
        items = items[order]
        flags = np.ones(len(starts), np.uint8)
    else:
        flags = (per_group == 0).astype(np.uint8)
    return concat_rows([_byte_piece(flags), fixed_bytes(per_group.astype(np.uint64)), _grouped_piece(items, per_group)])


# --------------------------------------------------------------------------------- hash sets and maps
# -Distinct keeps a HashSet, entropy and quantileBFloat16 a HashMap of counts. The cell order of both
# is replayed by states_sets_compiled's HashSet kernels (a key as an id, its hash, whether it is the
# zero key); a map's counts are then each key's rows in its group.

@dataclass
class _Keys:
    """Each row's key id; the distinct keys: fixed-width (`fixed`) or strings (`offsets`/`data`)."""

    ids: np.ndarray
    fixed: np.ndarray | None = None
    offsets: np.ndarray | None = None
    data: np.ndarray | None = None

    def zeros(self) -> np.ndarray:
        if self.fixed is not None:
            return np.asarray(~self.fixed.any(axis=1), bool)
        assert self.offsets is not None
        return np.diff(self.offsets) == 0

    def count(self) -> int:
        return len(self.fixed) if self.fixed is not None else len(self.offsets) - 1  # type: ignore[arg-type]


@dataclass(frozen=True)
class _Table:
    """How a function's table hashes its keys: `hash_keys` of the distinct keys; `width` 0 for strings."""

    width: int
    hash_keys: Callable[[_Keys], np.ndarray]
    read_reserves: bool


def _int_hash(keys: _Keys) -> np.ndarray:
    assert keys.fixed is not None
    return _sets().int_hash64_array(_u64(keys.fixed))


def _crc_hash(keys: _Keys) -> np.ndarray:
    assert keys.fixed is not None
    width = keys.fixed.shape[1]
    padded = np.zeros((len(keys.fixed), max(8, width + (-width) % 8)), np.uint8)
    padded[:, :width] = keys.fixed
    return _sets().crc_words_array(padded.view(_U64))


def _low_word(keys: _Keys) -> np.ndarray:
    assert keys.fixed is not None
    return np.ascontiguousarray(keys.fixed[:, :8]).view(_U64).reshape(-1)


def _string_hash(keys: _Keys) -> np.ndarray:
    assert keys.offsets is not None and keys.data is not None
    return _sets().string_crc_hash(keys.data, keys.offsets)


_INITIAL_DEGREE = 4  # HashSetWithStackMemory / HashMapWithStackMemory of 16 cells
_BIG_UNTIL = 23  # HashTableGrower quadruples below 2^23 cells


def _replay(table: _Table, keys: _Keys, starts: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Each group's distinct keys (ids) in serialized order, and where each group's end."""
    hashes = table.hash_keys(keys)
    return _sets().set_build(keys.ids, hashes[keys.ids], keys.zeros()[keys.ids], starts, n, _INITIAL_DEGREE,
                             _BIG_UNTIL, 0)


def _replay_merge(table: _Table, keys: _Keys, counts: np.ndarray, starts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The keys of each group's states inserted key by key, state by state, into a fresh table."""
    hashes = table.hash_keys(keys)
    return _sets().set_merge(keys.ids, hashes[keys.ids], keys.zeros()[keys.ids], np.cumsum(counts), starts,
                             _INITIAL_DEGREE, _BIG_UNTIL, 0, table.read_reserves, 0)


def _key_pieces(table: _Table, keys: _Keys, order: np.ndarray, ends: np.ndarray) -> list[Piece]:
    counts = np.diff(np.concatenate([[0], ends]))
    if table.width:
        assert keys.fixed is not None
        return [_varuint_piece(counts), _grouped_piece(keys.fixed[order], counts)]
    assert keys.offsets is not None and keys.data is not None
    encoded, item_offsets = _string_items(keys.offsets, keys.data, order)
    return [_varuint_piece(counts), (encoded, item_offsets[np.concatenate([[0], ends]).astype(np.int64)])]


def _fixed_keys(values: np.ndarray) -> _Keys:
    ids, distinct = _encode_fixed(values)
    return _Keys(ids, fixed=distinct)


def _string_keys(offsets: np.ndarray, data: np.ndarray) -> _Keys:
    ids, d_offsets, d_data = _encode_strings(offsets, data)
    return _Keys(ids, offsets=d_offsets, data=d_data)


def _distinct_table(dt: AggregateFunction) -> _Table:
    arg = _plain(dt.arguments[0])
    if _is_string(arg):
        return _Table(0, _string_hash, False)
    return _Table(int(arg.width or 0), _int_hash, True)  # type: ignore[attr-defined]


def _distinct_states(dt: AggregateFunction, arrays: Sequence[pa.Array], starts: np.ndarray, n: int) -> pa.BinaryArray:
    table = _distinct_table(dt)
    arg = _plain(dt.arguments[0])
    keys = _string_keys(*_strings(arg, arrays[0])) if not table.width else _fixed_keys(_raw(arg, arrays[0]))
    order, ends = _replay(table, keys, starts, n)
    return concat_rows(_key_pieces(table, keys, order, ends))


def _distinct_combine(dt: AggregateFunction, states: pa.Array, starts: np.ndarray) -> pa.BinaryArray:
    table = _distinct_table(dt)
    offsets, data = _buffers(states)
    if table.width:
        counts, items = _parse_counted(dt, offsets, data, table.width)
        keys = _fixed_keys(items)
    else:
        counts, item_offsets, item_data = _parse_strings(dt, offsets, data)
        keys = _string_keys(item_offsets, item_data)
    order, ends = _replay_merge(table, keys, counts, starts)
    return concat_rows(_key_pieces(table, keys, order, ends))


def _sum_u64(inverse: np.ndarray, weights: np.ndarray, count: int) -> np.ndarray:
    """Sums of UInt64 weights by `inverse` (wrapping as ClickHouse's UInt64 counts do)."""
    totals = np.zeros(count, np.uint64)
    np.add.at(totals, inverse, weights.astype(np.uint64))
    return totals


def _map_pieces(keys: _Keys, order: np.ndarray, ends: np.ndarray, totals: np.ndarray) -> list[Piece]:
    assert keys.fixed is not None
    counts = np.diff(np.concatenate([[0], ends]))
    items = np.concatenate([keys.fixed[order], totals.astype(_U64).view(np.uint8).reshape(-1, 8)], axis=1)
    return [_varuint_piece(counts), _grouped_piece(items, counts)]


def _map_keys(dt: AggregateFunction, arrays: Sequence[pa.Array]) -> tuple[_Keys, np.ndarray]:
    """entropy's or quantileBFloat16's key of each row, and the rows kept (NaN skipped by the latter)."""
    arg = _plain(dt.arguments[0])
    if dt.function in ("quantileBFloat16", "quantilesBFloat16"):
        values = _raw(arg, arrays[0])
        floats = _as_float32(arg, values)
        kept = ~np.isnan(floats)
        bfloat = (floats[kept].view("<u4") >> np.uint32(16)).astype("<u2")
        return _fixed_keys(bfloat.view(np.uint8).reshape(-1, 2)), kept
    if _entropy_width(arg):
        raw = _raw(arg, arrays[0])
        kept = np.ones(len(raw), bool)
        if isinstance(arg, Primitive) and arg.name in ("Float32", "Float64"):
            kept = ~np.isnan(raw.copy().view(f"<f{raw.shape[1]}").reshape(-1))  # NaN is skipped
        return _fixed_keys(np.ascontiguousarray(raw[kept])), kept
    if _is_string(arg):
        # A string is hashed as ClickHouse's updateHashWithValue feeds it: its size counting a
        # closing zero byte (UInt64), its bytes and the zero.
        offsets, data = _sized_strings(*_strings(arg, arrays[0]))
    else:
        raw = _raw(arg, arrays[0])
        data = np.ascontiguousarray(raw).reshape(-1)
        offsets = np.arange(len(raw) + 1, dtype=np.int64) * raw.shape[1]
    low, high = _sets().siphash128_rows(data, offsets)
    hashed = np.stack([low, high], axis=1).astype(_U64).view(np.uint8).reshape(-1, 16)
    return _fixed_keys(hashed), np.ones(len(arrays[0]), bool)


def _sized_strings(offsets: np.ndarray, data: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each string as (UInt64 size + 1, its bytes, a zero byte), as (offsets, bytes)."""
    n = len(offsets) - 1
    sizes = (np.diff(offsets) + 1).astype(_U64)
    joined = concat_rows([fixed_bytes(sizes), (data, offsets), (np.zeros(n, np.uint8), np.arange(n + 1, dtype=np.int64))])
    return _buffers(joined)


def _identity(keys: _Keys) -> np.ndarray:
    assert keys.fixed is not None
    return _u64(keys.fixed)


def _as_float32(dt: DataType, raw: np.ndarray) -> np.ndarray:
    """Values (numbers, Date) as ClickHouse's cast to Float32 gives them."""
    name = dt.name if isinstance(dt, Primitive) else ""
    if name in ("Float32", "Float64"):
        return raw.copy().view(f"<f{raw.shape[1]}").reshape(-1).astype(np.float32)
    kind = "i" if name.startswith("Int") or name == "Date32" else "u"
    return raw.copy().view(f"<{kind}{raw.shape[1]}").reshape(-1).astype(np.float32)


def _entropy_width(dt: DataType) -> int:
    """Width of the values entropy keeps as themselves (0: it keeps their 128-bit hashes)."""
    if isinstance(dt, Primitive) and dt.custom_name is None and dt.name in (*_INTEGERS, "Float32", "Float64", "Bool", "Date",
                                                                          "Int128"):
        return int(dt.width or 0)
    return 0


def _hashed_wide(dt: DataType) -> bool:
    """UInt128, which entropy keeps as the SipHash-128 of its bytes (Int128 it keeps as itself)."""
    return isinstance(dt, Primitive) and dt.custom_name is None and dt.name == "UInt128"


def _map_table(dt: AggregateFunction) -> _Table:
    if dt.function == "entropy" and not _entropy_width(_plain(dt.arguments[0])):
        return _Table(16, _low_word, False)
    if dt.function != "entropy":
        return _Table(2, _identity, True)  # BFloat16 keys are their own hash
    return _Table(_entropy_width(_plain(dt.arguments[0])), _crc_hash, False)


def _map_states(dt: AggregateFunction, arrays: Sequence[pa.Array], starts: np.ndarray, n: int) -> pa.BinaryArray:
    table = _map_table(dt)
    keys, kept = _map_keys(dt, arrays)
    groups = _group_of(starts, n)[kept]
    # (a group whose values are all NaN keeps no key: the state of no rows)
    kept_starts = np.searchsorted(groups, np.arange(len(starts)), side="left").astype(np.int64)
    order, ends = _sets().set_build(keys.ids, table.hash_keys(keys)[keys.ids], keys.zeros()[keys.ids],
                                    np.minimum(kept_starts, len(groups)), len(groups), _INITIAL_DEGREE, _BIG_UNTIL, 0) \
        if len(groups) else (np.zeros(0, np.int64), np.zeros(len(starts), np.int64))
    totals = _sum_by_pair(keys.ids, np.ones(len(groups), np.uint64), groups, order, ends, keys.count())
    return concat_rows(_map_pieces(keys, order, ends, totals))


def _map_combine(dt: AggregateFunction, states: pa.Array, starts: np.ndarray) -> pa.BinaryArray:
    table = _map_table(dt)
    offsets, data = _buffers(states)
    counts, items = _parse_counted(dt, offsets, data, table.width + 8)
    keys = _fixed_keys(np.ascontiguousarray(items[:, :table.width]))
    weights = np.ascontiguousarray(items[:, table.width:]).view(_U64).reshape(-1)
    order, ends = _replay_merge(table, keys, counts, starts)
    item_groups = np.repeat(_group_of(starts, len(counts)), counts)
    totals = _sum_by_pair(keys.ids, weights, item_groups, order, ends, keys.count())
    return concat_rows(_map_pieces(keys, order, ends, totals))


def _sum_by_pair(ids: np.ndarray, weights: np.ndarray, groups: np.ndarray, order: np.ndarray, ends: np.ndarray,
                 keys: int) -> np.ndarray:
    pair = groups * keys + ids
    distinct, inverse = np.unique(pair, return_inverse=True)
    totals = _sum_u64(inverse, weights, len(distinct))
    listed = np.repeat(np.arange(len(ends), dtype=np.int64), np.diff(np.concatenate([[0], ends]))) * keys + order
    return totals[np.searchsorted(distinct, listed)]


# --------------------------------------------------------------------------------------- groupConcat

def _delimiter(dt: AggregateFunction) -> bytes:
    if not dt.parameters:
        return b""
    text = dt.parameters[0]
    return text[1:-1].encode() if len(text) >= 2 and text[0] == text[-1] == "'" and "\\" not in text else b"\xff"


def _texts(dt: DataType, arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(offsets n+1, bytes) of each value as ClickHouse writes it as text."""
    if _is_string(dt) or isinstance(dt, FixedString):
        return _strings(dt, arr)
    arr = _array(arr)
    if isinstance(dt, Primitive) and dt.name == "Bool":
        text = pc.if_else(pc.not_equal(arr.cast(pa.uint8()), 0), "true", "false")
    elif isinstance(dt, Primitive) and dt.name in ("Date", "Date32"):
        text = coerce(dt, arr, "argument").cast(pa.date32()).cast(pa.string())
    elif isinstance(dt, DateTime):
        # The time in the column's time zone (ClickHouse's text of a DateTime)
        stamps = coerce(dt, arr, "argument").cast(pa.timestamp("s", tz=dt.timezone or "UTC"))
        text = pc.strftime(stamps, format="%Y-%m-%d %H:%M:%S")
    else:
        text = coerce(dt, arr, "argument").cast(pa.string())
        if isinstance(dt, Decimal) and dt.scale:
            # ClickHouse writes a Decimal without trailing zeros (and without the point when none is left)
            text = pc.replace_substring_regex(pc.replace_substring_regex(text, r"(\.\d*?)0+$", r"\1"), r"\.$", "")
    offsets, data = string_buffers(text)
    return np.asarray(offsets, np.int64), np.ascontiguousarray(data, np.uint8)


def _joined(pieces_offsets: np.ndarray, data: np.ndarray, starts: np.ndarray, delimiter: bytes,
            skip_empty: bool) -> pa.BinaryArray:
    """Per group, its pieces joined: the delimiter before each piece but those that find the text so
    far empty (`skip_empty`: empty pieces add nothing, not even a delimiter)."""
    n = len(pieces_offsets) - 1
    lengths = np.diff(pieces_offsets)
    groups = _group_of(starts, n)
    # Whether the text is still empty before each piece: no earlier piece of the group was non-empty.
    nonempty = (lengths > 0).astype(np.int64)
    filled = np.cumsum(nonempty)
    before: np.ndarray = filled - nonempty
    group_first: np.ndarray = np.concatenate([[0], filled])[starts][groups] if n else np.zeros(0, np.int64)
    delimited: np.ndarray = before != group_first
    if skip_empty:
        delimited &= lengths > 0
    width = len(delimiter)
    sizes = lengths + delimited * width
    out_offsets = np.zeros(n + 1, np.int64)
    np.cumsum(sizes, out=out_offsets[1:])
    out = np.empty(int(out_offsets[-1]), np.uint8)
    if width:
        marks = out_offsets[:-1][delimited]
        out[(marks[:, None] + np.arange(width)).reshape(-1)] = np.tile(np.frombuffer(delimiter, np.uint8), len(marks))
    value_at = out_offsets[:-1] + delimited * width
    out[np.repeat(value_at - pieces_offsets[:-1], lengths) + np.arange(len(data), dtype=np.int64)] = data
    ends = group_ends(starts, n)
    text_offsets = out_offsets[np.concatenate([starts, ends[-1:]])] if n else np.zeros(1, np.int64)
    encoded, encoded_offsets = encode_classic(text_offsets, out)
    return concat_rows([(encoded, encoded_offsets)])


def _concat_states(dt: AggregateFunction, arrays: Sequence[pa.Array], starts: np.ndarray, n: int) -> pa.BinaryArray:
    offsets, data = _texts(_plain(dt.arguments[0]), arrays[0])
    return _joined(offsets, data, starts, _delimiter(dt), False)


def _concat_combine(dt: AggregateFunction, states: pa.Array, starts: np.ndarray) -> pa.BinaryArray:
    offsets, data = _buffers(states)
    _, item_offsets, item_data = _parse_texts(dt, offsets, data)
    return _joined(item_offsets, item_data, starts, _delimiter(dt), True)


def _parse_texts(dt: AggregateFunction, offsets: np.ndarray, data: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """States that are one string each (varuint length, bytes)."""
    lengths = np.diff(offsets)
    prefixed = concat_rows([_varuint_piece(np.ones(len(lengths), np.uint64)), (data, offsets)])
    return _parse_strings(dt, *_buffers(prefixed))


# --------------------------------------------------------------------------------------------- topK

def _reserved(dt: AggregateFunction) -> int:
    return 3 * (int(dt.parameters[0]) if dt.parameters else 10)


def _alpha_size(capacity: int) -> int:
    """SpaceSaving's map of evicted counts: 6 cells a counter, to the next power of two above."""
    return 1 << int(capacity * 6).bit_length()


def _topk_kept_as_number(dt: DataType) -> int:
    if isinstance(dt, Primitive) and dt.custom_name is None and dt.name in (
            *_INTEGERS, "Float32", "Float64", "Bool", "Date", "Int128", "UInt128", "Int256", "UInt256"):
        return int(dt.width or 0)
    return 4 if isinstance(dt, DateTime) and dt.custom_name is None else 0


def _topk_keys(dt: DataType, arr: pa.Array) -> _Keys:
    if _topk_kept_as_number(dt):
        return _fixed_keys(_raw(dt, arr))
    if _is_string(dt) or isinstance(dt, FixedString):
        return _string_keys(*_strings(dt, arr))
    raw = _raw(dt, arr)
    return _string_keys(np.arange(len(raw) + 1, dtype=np.int64) * raw.shape[1], np.ascontiguousarray(raw).reshape(-1))


def _topk_pieces(dt: AggregateFunction, keys: _Keys, order: np.ndarray, counts: np.ndarray, errors: np.ndarray,
                 ends: np.ndarray, alphas: np.ndarray | None = None, alpha_groups: np.ndarray | None = None) -> pa.BinaryArray:
    """States of counters `order` (with `counts` and `errors`), group g's ending at ends[g], each
    with its alpha map: zeros, but `alphas[i]` for group alpha_groups[i]."""
    sizes = np.diff(np.concatenate([[0], ends]))
    if keys.fixed is not None:
        key_data, key_offsets = keys.fixed[order].reshape(-1), np.arange(len(order) + 1, dtype=np.int64) * keys.fixed.shape[1]
    else:
        assert keys.offsets is not None and keys.data is not None
        key_data, key_offsets = _string_items(keys.offsets, keys.data, order)
    counter_bytes = concat_rows([(np.ascontiguousarray(key_data), key_offsets), _varuint_piece(counts),
                                 _varuint_piece(errors)])
    c_offsets, c_data = _buffers(counter_bytes)
    group_bounds = c_offsets[np.concatenate([[0], ends]).astype(np.int64)]
    return concat_rows([_varuint_piece(sizes), (c_data, group_bounds), _alpha_piece(dt, sizes, alphas, alpha_groups)])


def _alpha_piece(dt: AggregateFunction, sizes: np.ndarray, alphas: np.ndarray | None,
                 alpha_groups: np.ndarray | None) -> Piece:
    """Each group's alpha map: its size then its varuints (all 0 but for the groups that evicted,
    alphas[i] for group alpha_groups[i]); a merge of states without counters never sized its
    SpaceSaving, so writes a size 0 alone. (As large as the written maps: no group's is dense for
    nothing.)"""
    alpha = _alpha_size(_reserved(dt))
    sized = sizes > 0
    written = np.zeros((int(sized.sum()), alpha), np.uint64)
    if alphas is not None and alpha_groups is not None and len(alpha_groups):
        written[(np.cumsum(sized) - 1)[alpha_groups]] = alphas
    values, value_offsets = encode_varuints(written.reshape(-1))
    rows = np.zeros(len(sizes) + 1, np.int64)
    np.cumsum(np.where(sized, alpha, 0), out=rows[1:])
    header = _varuint_piece(np.where(sized, alpha, 0).astype(np.uint64))
    joined = concat_rows([header, (values, value_offsets[rows])])
    offsets, data = _buffers(joined)
    return data, offsets


def _topk_hashes(keys: _Keys) -> np.ndarray:
    """The hash SpaceSaving files a key under (its alpha map cell): HashCRC32 of a number's bits,
    ClickHouse's CRC32 string hash of other values' bytes."""
    if keys.fixed is not None:
        return _crc_hash(keys)
    return _string_hash(keys)


def _truncation(dt: AggregateFunction) -> int:
    """How many counters make ClickHouse's SpaceSaving truncate its list (evicting into the alpha map)."""
    return max(64, 2 * _reserved(dt))


def _topk_states(dt: AggregateFunction, arrays: Sequence[pa.Array], starts: np.ndarray, n: int) -> pa.BinaryArray:
    keys = _topk_keys(_plain(dt.arguments[0]), arrays[0])
    may_evict = int((group_ends(starts, n) - starts >= _truncation(dt)).sum())
    order, counts, errors, ends, alphas, alpha_groups = _events_kernels().topk_build(
        keys.ids, _topk_hashes(keys), starts, n, keys.count(), _reserved(dt), _truncation(dt), _alpha_size(_reserved(dt)),
        may_evict)
    return _topk_pieces(dt, keys, order, counts, errors, ends, alphas, alpha_groups)


def _topk_combine(dt: AggregateFunction, states: pa.Array, starts: np.ndarray) -> pa.BinaryArray:
    offsets, data = _buffers(states)
    arg = _plain(dt.arguments[0])
    width = _topk_kept_as_number(arg)
    kernels = _events_kernels()
    parsed = kernels.parse_topk(data, offsets[:-1], offsets[1:], width)
    sizes, key_starts, key_lengths, counts, errors, alpha_sizes, bad, evicted, alpha_begins = parsed
    if bad >= 0:
        raise _corrupt(dt, int(bad))
    alpha_size = _alpha_size(_reserved(dt))
    wrong = (sizes > 0) & (alpha_sizes != alpha_size)
    if wrong.any():  # (ClickHouse refuses to read such a state)
        raise _corrupt(dt, int(np.argmax(wrong)))
    holding = np.nonzero(evicted)[0]
    alphas = kernels.read_alphas(data, alpha_begins[holding], alpha_sizes[holding]) if len(holding) \
        else np.zeros((0, alpha_size), np.uint64)
    state_alpha = np.full(len(sizes), -1, np.int64)
    state_alpha[holding] = np.arange(len(holding))
    key_offsets = np.zeros(len(key_lengths) + 1, np.int64)
    np.cumsum(key_lengths, out=key_offsets[1:])
    picks = np.repeat(key_starts - key_offsets[:-1], key_lengths) + np.arange(int(key_offsets[-1]), dtype=np.int64)
    key_data = np.ascontiguousarray(data[picks])
    keys = _fixed_keys(key_data.reshape(-1, width)) if width else _string_keys(key_offsets, key_data)
    # The groups that may end holding evictions: holding an evicted state, or counters enough to truncate.
    held = np.where(evicted, _truncation(dt), sizes)
    may_evict = int((np.add.reduceat(held, starts) >= _truncation(dt)).sum()) if len(sizes) else 0
    order, merged_counts, merged_errors, ends, merged_alphas, alpha_groups = kernels.topk_merge(
        keys.ids, counts, errors, _topk_hashes(keys), np.cumsum(sizes), starts, keys.count(), _reserved(dt),
        _truncation(dt), state_alpha, alphas, may_evict)
    return _topk_pieces(dt, keys, order, merged_counts, merged_errors, ends, merged_alphas, alpha_groups)


# ------------------------------------------------------------------------------------------ builder

def _is_string(dt: DataType) -> bool:
    return isinstance(dt, Primitive) and dt.name == "String" and dt.custom_name is None


def _stamp(dt: DataType) -> bool:
    dt = _plain(dt)
    return (isinstance(dt, Primitive) and dt.custom_name is None and dt.name in ("UInt8", "UInt16", "UInt32", "UInt64", "Date")) \
        or (isinstance(dt, DateTime) and dt.custom_name is None)


def _concat_text(dt: DataType) -> bool:
    """Types whose text groupConcat is built for (floats, date-times and others are not)."""
    if isinstance(dt, Decimal):
        return dt.custom_name is None and dt.precision <= 38  # (Decimal256's text differs in places: not built)
    return _is_string(dt) or (isinstance(dt, (FixedString, DateTime)) and dt.custom_name is None) or (
        isinstance(dt, Primitive) and dt.custom_name is None and dt.name in (*_INTEGERS, "Bool", "Date", "Date32", "Int128",
                                                                             "UInt128", "Int256", "UInt256"))


_FAMILIES: dict[str, tuple[Any, Any]] = {
    "retention": (_retention_states, _retention_combine),
    "windowFunnel": (_event_states, _event_combine),
    "sequenceMatch": (_event_states, _event_combine),
    "sequenceCount": (_event_states, _event_combine),
    **dict.fromkeys(_DISTINCT, (_distinct_states, _distinct_combine)),
    "entropy": (_map_states, _map_combine),
    "quantileBFloat16": (_map_states, _map_combine),
    "quantilesBFloat16": (_map_states, _map_combine),
    "groupConcat": (_concat_states, _concat_combine),
    "topK": (_topk_states, _topk_combine),
}


def _buildable(dt: AggregateFunction) -> bool:
    args = tuple(_plain(a) for a in dt.arguments)
    name = dt.function
    if name in ("windowFunnel", "sequenceMatch", "sequenceCount"):
        strict_once = any(p.strip("'\"") == "strict_once" for p in dt.parameters[1:])
        return _stamp(args[0]) and not strict_once
    if name == "groupConcat":
        return _concat_text(args[0]) and _delimiter(dt) != b"\xff"
    if name == "entropy":
        return not isinstance(args[0], DateTime) and (bool(_entropy_width(args[0])) or _is_string(args[0])
                                                       or isinstance(args[0], Decimal) or _hashed_wide(args[0]))
    return True


def builder(dt: AggregateFunction) -> StateBuilder | None:
    """The builder of `dt`'s states when it is of these families and its layout is known, else None."""
    if dt.function not in _FAMILIES or dt.version is not None or state_layout(dt) is None or not dt.arguments:
        return None
    if not _buildable(dt):
        return None
    states, combine = _FAMILIES[dt.function]
    return StateBuilder(
        states=lambda d, arrays, starts, n: states(d, arrays, np.asarray(starts, np.int64), n),
        combine=lambda d, column, starts: combine(d, column, np.asarray(starts, np.int64)))

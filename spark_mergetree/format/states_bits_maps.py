"""States of the bitwise, bitmap, -Map and ordered-series aggregate functions, built from rows and
combined.

This family (see format/state_rows.py for the contract) owns:
- groupBitAnd, groupBitOr, groupBitXor: the value in its own type, combined byte by byte;
- groupBitmap: a small set of up to 32 distinct values in the order they came, then a roaring
  bitmap in CRoaring's portable serialization (containers as ClickHouse leaves them: see
  `_bitmap_builder`);
- sumMap, minMap and maxMap of a key array and value arrays (the versioned state): the keys
  sorted, each with its values widened to 64 bits;
- sumMap, minMap and maxMap of a Map (the -Map combinator over sum, min, max): the keys in the
  order of ClickHouse's std::unordered_map, replayed, each with its nested state;
- deltaSum (rows in order; states merged by their first and last values), boundingRatio (the
  leftmost and rightmost points), simpleLinearRegression (a count and four Float64 sums).

Every state is ClickHouse 26.9's bytes for the same rows (or states) in the same order
(tests/format/test_states_bits_maps.py compares them with chdb's).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from spark_mergetree.errors import SchemaMismatchError
from spark_mergetree.format import states_bits_maps_compiled as kernels
from spark_mergetree.format import states_simple_compiled as simple_kernels
from spark_mergetree.format.aggregate_states import state_layout
from spark_mergetree.format.state_rows import StateBuilder, concat_rows, fixed_bytes, group_sizes
from spark_mergetree.format.states_simple import as_float64, moment_float, value_kind
from spark_mergetree.format.states_simple import builder as simple_builder
from spark_mergetree.format.types import AggregateFunction, DataType, DateTime, Primitive
from spark_mergetree.format.values import encode_varuints, fixed_storage, list_parts, string_buffers

__all__ = ["builder"]

Piece = tuple[np.ndarray, np.ndarray]  # (bytes, offsets n+1): one piece of each state

# The numpy type of the numbers these functions take (128-bit integers are (n, 2) uint64 words).
_NUMPY = {"Int8": "<i1", "Int16": "<i2", "Int32": "<i4", "Int64": "<i8", "UInt8": "<u1", "UInt16": "<u2",
          "UInt32": "<u4", "UInt64": "<u8", "Bool": "<u1", "Float32": "<f4", "Float64": "<f8"}
_WIDE = ("Int128", "UInt128", "Int256", "UInt256")


def _plain_array(arr: pa.Array | pa.ChunkedArray) -> pa.Array:
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks() if arr.num_chunks != 1 else arr.chunk(0)
    return arr.dictionary_decode() if pa.types.is_dictionary(arr.type) else arr


def _storage_rows(dt: DataType, arr: pa.Array) -> np.ndarray:
    """Each value's bytes as ClickHouse keeps them: (n, width) uint8."""
    storage = np.ascontiguousarray(fixed_storage(dt, _plain_array(arr), "an aggregate function's argument"))
    return storage.view(np.uint8).reshape(len(arr), storage.itemsize * int(np.prod(storage.shape[1:])))


def _numbers(dt: Primitive, arr: pa.Array) -> np.ndarray:
    rows = _storage_rows(dt, arr)
    return np.ascontiguousarray(rows).view(_NUMPY[dt.name]).reshape(-1)


def _state_buffers(states: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    return string_buffers(_plain_array(states))


def _fixed_states(column: pa.Array, width: int) -> np.ndarray:
    """States of `width` bytes each: (n, width) uint8."""
    offsets, data = _state_buffers(column)
    n = len(offsets) - 1
    if not n:
        return np.zeros((0, width), np.uint8)
    return data[(offsets[:-1, None] + np.arange(width)).reshape(-1)].reshape(n, width)


def _rows_piece(rows: np.ndarray) -> Piece:
    """One state per row of a 2-D array: its little-endian bytes."""
    flat = np.ascontiguousarray(rows).view(np.uint8).reshape(-1)
    width = rows.itemsize * int(np.prod(rows.shape[1:]))
    return flat, np.arange(len(rows) + 1, dtype=np.int64) * width


# ---------------------------------------------------------------------------------------------
# groupBitAnd / groupBitOr / groupBitXor: the value's bytes, and-ed, or-ed or xor-ed.

_BITWISE = {"groupBitAnd": np.bitwise_and, "groupBitOr": np.bitwise_or, "groupBitXor": np.bitwise_xor}


def _bitwise_builder(operation: np.ufunc, argument: DataType) -> StateBuilder:
    def reduced(rows: np.ndarray, starts: np.ndarray) -> pa.BinaryArray:
        if not len(starts):
            return pa.array([], pa.binary())
        return concat_rows([_rows_piece(operation.reduceat(rows, starts, axis=0))])

    def states(dt: AggregateFunction, arguments: Sequence[pa.Array], starts: np.ndarray, n: int) -> pa.BinaryArray:
        return reduced(_storage_rows(argument, arguments[0]), starts)

    def combine(dt: AggregateFunction, column: pa.BinaryArray, starts: np.ndarray) -> pa.BinaryArray:
        return reduced(_fixed_states(column, int(argument.width or 0)), starts)  # type: ignore[attr-defined]

    return StateBuilder(states, combine)


# ---------------------------------------------------------------------------------------------
# deltaSum: the sum of rises, the first and the last value (in the argument's type), a `seen` byte.


def _delta_sum_builder(argument: Primitive) -> StateBuilder:
    wide = argument.name in _WIDE
    signed = argument.name.startswith("Int")
    width = int(argument.width or 0)
    dtype = None if wide else np.dtype(_NUMPY[argument.name])

    def pieces(values: np.ndarray, seen: np.ndarray) -> pa.BinaryArray:
        return concat_rows([_rows_piece(values), fixed_bytes(seen.astype(np.uint8))])

    def states(dt: AggregateFunction, arguments: Sequence[pa.Array], starts: np.ndarray, n: int) -> pa.BinaryArray:
        if wide:
            words = np.ascontiguousarray(_storage_rows(argument, arguments[0])).view("<u8").reshape(n, 2)
            values = kernels.delta_sums_wide(words, starts.astype(np.int64), n, signed)
        else:
            sums, firsts, lasts = kernels.delta_sums(_numbers(argument, arguments[0]), starts.astype(np.int64), n)
            values = np.stack([sums, firsts, lasts], axis=1)
        return pieces(values, np.ones(len(starts), np.uint8))

    def combine(dt: AggregateFunction, column: pa.BinaryArray, starts: np.ndarray) -> pa.BinaryArray:
        rows = np.ascontiguousarray(_fixed_states(column, 3 * width + 1))
        seen = np.ascontiguousarray(rows[:, -1])
        if wide:
            words = np.ascontiguousarray(rows[:, :-1]).view("<u8")
            merged, merged_seen = kernels.delta_merges_wide(words, seen, starts.astype(np.int64), signed)
            return pieces(merged, merged_seen)
        assert dtype is not None
        values = np.ascontiguousarray(rows[:, :-1]).view(dtype)
        merged_sums, merged_firsts, merged_lasts, merged_seen = kernels.delta_merges(
            np.ascontiguousarray(values[:, 0]), np.ascontiguousarray(values[:, 1]), np.ascontiguousarray(values[:, 2]),
            seen, starts.astype(np.int64))
        return pieces(np.stack([merged_sums, merged_firsts, merged_lasts], axis=1), merged_seen)

    return StateBuilder(states, combine)


# ---------------------------------------------------------------------------------------------
# boundingRatio: an `empty` byte, then (when 0) the leftmost and rightmost points as Float64.


def _bounding_ratio_builder(x_type: DataType, y_type: DataType) -> StateBuilder:
    def pieces(empty: np.ndarray, points: np.ndarray) -> pa.BinaryArray:
        held = empty == 0
        point_offsets = np.zeros(len(empty) + 1, np.int64)
        np.cumsum(held * 32, out=point_offsets[1:])
        flat = np.ascontiguousarray(points[held], "<f8").view(np.uint8).reshape(-1)
        return concat_rows([fixed_bytes(empty.astype(np.uint8)), (flat, point_offsets)])

    def states(dt: AggregateFunction, arguments: Sequence[pa.Array], starts: np.ndarray, n: int) -> pa.BinaryArray:
        x = np.ascontiguousarray(as_float64(x_type, value_kind(x_type), _plain_array(arguments[0])))  # type: ignore[arg-type]
        y = np.ascontiguousarray(as_float64(y_type, value_kind(y_type), _plain_array(arguments[1])))  # type: ignore[arg-type]
        empty, points = kernels.bounding_points(x, y, np.zeros(n, np.uint8), x, y, starts.astype(np.int64), False)
        return pieces(empty, points)

    def combine(dt: AggregateFunction, column: pa.BinaryArray, starts: np.ndarray) -> pa.BinaryArray:
        offsets, data = _state_buffers(column)
        n = len(offsets) - 1
        empty = np.ascontiguousarray(data[offsets[:-1]]) if n else np.zeros(0, np.uint8)
        begins = np.where(empty == 0, offsets[:-1] + 1, 0)
        points = data[np.minimum(begins[:, None] + np.arange(32), max(len(data) - 1, 0)).reshape(-1)] if n \
            else np.zeros(0, np.uint8)
        floats = np.ascontiguousarray(points).view("<f8").reshape(n, 4)
        columns = [np.ascontiguousarray(floats[:, c]) for c in range(4)]
        merged_empty, merged = kernels.bounding_points(columns[0], columns[1], empty, columns[2], columns[3],
                                                       starts.astype(np.int64), True)
        return pieces(merged_empty, merged)

    return StateBuilder(states, combine)


# ---------------------------------------------------------------------------------------------
# simpleLinearRegression: a UInt64 count, then sums of x, y, x*x and x*y (Float64, row after row).


def _linear_regression_builder(x_type: DataType, y_type: DataType) -> StateBuilder:
    def pieces(counts: np.ndarray, sums: np.ndarray) -> pa.BinaryArray:
        return concat_rows([fixed_bytes(counts.astype("<u8")), _rows_piece(np.ascontiguousarray(sums, "<f8"))])

    def states(dt: AggregateFunction, arguments: Sequence[pa.Array], starts: np.ndarray, n: int) -> pa.BinaryArray:
        x = moment_float(x_type, value_kind(x_type), _plain_array(arguments[0]), "<f8")  # type: ignore[arg-type]
        y = moment_float(y_type, value_kind(y_type), _plain_array(arguments[1]), "<f8")  # type: ignore[arg-type]
        with np.errstate(all="ignore"):  # infinities and NaN are summed as they are
            columns = np.stack([x, y, x * x, x * y], axis=1).astype(np.float64)
        sums = simple_kernels.sequential_sums(np.ascontiguousarray(columns), starts.astype(np.int64), n, True)
        return pieces(group_sizes(starts, n), sums)

    def combine(dt: AggregateFunction, column: pa.BinaryArray, starts: np.ndarray) -> pa.BinaryArray:
        rows = np.ascontiguousarray(_fixed_states(column, 40))
        n = len(rows)
        counts = rows[:, :8].copy().view("<u8").reshape(-1)
        sums = np.ascontiguousarray(rows[:, 8:]).view("<f8").reshape(n, 4)
        merged_counts = np.add.reduceat(counts, starts) if len(starts) else np.zeros(0, np.uint64)
        merged = simple_kernels.sequential_sums(np.ascontiguousarray(sums), starts.astype(np.int64), n, True)
        return pieces(merged_counts, merged)

    return StateBuilder(states, combine)


# ---------------------------------------------------------------------------------------------
# sumMap, minMap, maxMap: per group, a map from key to values, kept sorted by key (keys compared as
# ClickHouse's Field: -0 and 0 one key, every NaN one key after all numbers, strings byte by byte;
# the key first seen is the one kept); each value widened to Int64, UInt64 or Float64, summed (in
# the order the entries came) or the smallest / largest kept (a NaN only until a number comes).

_TEMPORAL = {"Date": "<u2", "Date32": "<i4"}


def _key_dtype(dt: DataType) -> str | None:
    """The numpy type of a numeric or temporal key (None: a String, kept as its bytes)."""
    if isinstance(dt, Primitive):
        return _NUMPY.get(dt.name) or _TEMPORAL.get(dt.name)
    return "<u4" if isinstance(dt, DateTime) else "<i8"


def _widened(dtype: str) -> str:
    return {"f": "<f8", "i": "<i8", "u": "<u8"}[np.dtype(dtype).kind]


class _Entries:
    """Entries of -Map states or rows, in the order ClickHouse adds them: the group of each, its key
    (`key_rows` (n, width) uint8 for numbers, else `key_offsets` into `key_data`) and its values
    (one array per value column, widened)."""

    def __init__(self, groups: np.ndarray, key_rows: np.ndarray | None, key_offsets: np.ndarray | None,
                 key_data: np.ndarray | None, values: list[np.ndarray]) -> None:
        self.groups = groups
        self.key_rows = key_rows
        self.key_offsets = key_offsets
        self.key_data = key_data
        self.values = values


def _key_order(key_dtype: str | None, entries: _Entries) -> np.ndarray:
    """Each entry's key as numbers in ClickHouse's order of keys: integers as they are, floats with
    -0 as 0 (NaNs sort last), strings as their dense rank."""
    if key_dtype is None:
        if not len(entries.groups):
            return np.zeros(0, np.int64)
        assert entries.key_offsets is not None and entries.key_data is not None
        binary = pa.Array.from_buffers(pa.large_binary(), len(entries.key_offsets) - 1,
                                       [None, pa.py_buffer(np.ascontiguousarray(entries.key_offsets, np.int64)),
                                        pa.py_buffer(np.ascontiguousarray(entries.key_data))])
        return np.asarray(pc.rank(binary, sort_keys="ascending", tiebreaker="dense"), np.int64)
    assert entries.key_rows is not None
    keys = np.ascontiguousarray(entries.key_rows).view(key_dtype).reshape(-1)
    return np.where(keys == 0, 0.0, keys.astype(np.float64)) if keys.dtype.kind == "f" else keys


def _map_states(function: str, key_dtype: str | None, entries: _Entries, groups: int) -> pa.BinaryArray:
    """One -Map state per group of the entries."""
    n = len(entries.groups)
    keys = _key_order(key_dtype, entries)
    order = np.lexsort((keys, entries.groups)) if n else np.zeros(0, np.int64)  # stable: entries in order
    sorted_groups = entries.groups[order]
    sorted_keys = keys[order]
    new_key = np.ones(n, bool)
    new_key[1:] = (sorted_groups[1:] != sorted_groups[:-1]) | (sorted_keys[1:] != sorted_keys[:-1])
    if sorted_keys.dtype.kind == "f":  # every NaN is one key
        new_key[1:] &= ~(np.isnan(sorted_keys[1:]) & np.isnan(sorted_keys[:-1]))
    segment_starts = np.flatnonzero(new_key).astype(np.int64)
    firsts = order[segment_starts]
    if key_dtype is not None:
        assert entries.key_rows is not None
        key_piece: Piece = _rows_piece(entries.key_rows[firsts])
    else:
        assert entries.key_offsets is not None and entries.key_data is not None
        lengths = entries.key_offsets[firsts + 1] - entries.key_offsets[firsts]
        key_piece = _with_lengths(_gather(entries.key_data, entries.key_offsets[firsts], lengths))
    pieces = [key_piece]
    for values in entries.values:
        ordered = np.ascontiguousarray(values[order])
        if not len(segment_starts):
            result = ordered[:0]
        elif function == "sumMap" and ordered.dtype.kind == "f":
            result = kernels.first_then_sums(ordered, segment_starts, n)
        elif function == "sumMap":
            result = np.add.reduceat(ordered, segment_starts)
        else:
            mode = simple_kernels.SMALLEST if function == "minMap" else simple_kernels.LARGEST
            result = ordered[simple_kernels.pick_rows(ordered, np.ones(n, bool), segment_starts, n, mode)]
        pieces.append(fixed_bytes(result))
    segments = concat_rows(pieces)
    segment_offsets, segment_data = string_buffers(segments)
    counts = np.bincount(sorted_groups[segment_starts], minlength=groups).astype(np.int64)
    first_segments = np.zeros(groups + 1, np.int64)
    np.cumsum(counts, out=first_segments[1:])
    return concat_rows([encode_varuints(counts.astype(np.uint64)), (segment_data, segment_offsets[first_segments])])


def _gather(data: np.ndarray, begins: np.ndarray, lengths: np.ndarray) -> Piece:
    """data[begins[i]:begins[i] + lengths[i]] for each i, back to back: a piece."""
    offsets = np.zeros(len(lengths) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    index = np.arange(int(offsets[-1]), dtype=np.int64) + np.repeat(begins - offsets[:-1], lengths)
    return data[index], offsets


def _with_lengths(strings: Piece) -> Piece:
    """Each string after its varuint length, as one piece."""
    data, offsets = strings
    joined = concat_rows([encode_varuints(np.diff(offsets).astype(np.uint64)), (data, offsets)])
    joined_offsets, joined_data = string_buffers(joined)
    return joined_data, joined_offsets


def _map_builder(function: str, key_type: DataType, value_types: Sequence[Primitive]) -> StateBuilder:
    key_dtype = _key_dtype(key_type)
    key_width = np.dtype(key_dtype).itemsize if key_dtype is not None else 0
    widened = [_widened(_NUMPY[v.name]) for v in value_types]

    def states(dt: AggregateFunction, arguments: Sequence[pa.Array], starts: np.ndarray, n: int) -> pa.BinaryArray:
        lengths, keys = list_parts(_plain_array(arguments[0]))
        value_columns = []
        for argument in arguments[1:]:
            value_lengths, values = list_parts(_plain_array(argument))
            if not np.array_equal(value_lengths, lengths):
                raise SchemaMismatchError(f"{function}: sizes of keys and values arrays do not match")
            value_columns.append(values)
        row_groups = np.repeat(np.arange(len(starts), dtype=np.int64), group_sizes(starts, n))
        groups = np.repeat(row_groups, lengths)
        values = [_numbers(v, _plain_array(c)).astype(w) for v, c, w in zip(value_types, value_columns, widened, strict=True)]
        keys = _plain_array(keys)
        if key_dtype is not None:
            entries = _Entries(groups, _storage_rows(key_type, keys), None, None, values)
        else:
            key_offsets, key_data = string_buffers(keys)
            entries = _Entries(groups, None, key_offsets, key_data, values)
        return _map_states(function, key_dtype, entries, len(starts))

    def combine(dt: AggregateFunction, column: pa.BinaryArray, starts: np.ndarray) -> pa.BinaryArray:
        offsets, data = _state_buffers(column)
        n = len(offsets) - 1
        state_of, key_starts, key_lengths = kernels.map_entries(data, offsets[:-1].astype(np.int64), key_width,
                                                                8 * len(widened))
        state_groups = np.repeat(np.arange(len(starts), dtype=np.int64), group_sizes(starts, n))
        groups = state_groups[state_of]
        value_starts = key_starts + key_lengths
        values = [np.ascontiguousarray(data[(value_starts[:, None] + 8 * c + np.arange(8)).reshape(-1)]).view(w)
                  for c, w in enumerate(widened)]
        if key_dtype is not None:
            key_rows = data[(key_starts[:, None] + np.arange(key_width)).reshape(-1)].reshape(-1, key_width)
            entries = _Entries(groups, key_rows, None, None, values)
        else:
            key_data, key_offsets = _gather(data, key_starts, key_lengths)
            entries = _Entries(groups, None, key_offsets, key_data, values)
        return _map_states(function, key_dtype, entries, len(starts))

    return StateBuilder(states, combine)


# ---------------------------------------------------------------------------------------------
# sumMap, minMap, maxMap of a Map: ClickHouse's -Map combinator over sum, min or max. Per state, a
# varuint count of keys, then each key (as the key's type writes it; a String with its varuint
# length) followed by its nested state (sum: Int64, UInt64 or Float64, a 128/256-bit sum in its own
# width; min/max: a flag byte, always 1, then the value in its own type). The keys come in the order
# of the libc++ std::unordered_map ClickHouse keeps them in (replayed by
# states_bits_maps_compiled.node_map_ranks): rows add their entries in order; a merge reads each
# state into a table of its own and adds that table's keys to the group's table in its order.
# Each key's nested state is the nested function's state of its values in the order they came
# (states_simple builds it), or the merge of its states in the order of the states.

# Keys of the -Map combinator (the key types of format/aggregate_states.py's layout ClickHouse
# takes: no floats, Date32 or DateTime64) and DateTime.
_MAP_KEY_TYPES = {"Int8", "Int16", "Int32", "Int64", "UInt8", "UInt16", "UInt32", "UInt64", "Bool", "Date", "String"}


class _MapKeys:
    """Keys of entries as ids (equal keys, equal ids), each id's libc++ hash, and the bytes each key
    is written as: `rows` (n, width) uint8 for integers, else strings (`offsets` into `data`)."""

    def __init__(self, key_type: DataType, rows: np.ndarray | None, offsets: np.ndarray | None = None,
                 data: np.ndarray | None = None) -> None:
        self.rows, self.offsets, self.data = rows, offsets, data
        if rows is None:
            assert offsets is not None and data is not None
            encoded = pa.Array.from_buffers(pa.large_binary(), len(offsets) - 1,
                                            [None, pa.py_buffer(np.ascontiguousarray(offsets, np.int64)),
                                             pa.py_buffer(np.ascontiguousarray(data))]).dictionary_encode()
            self.ids = np.asarray(encoded.indices, np.int64) if len(offsets) > 1 else np.zeros(0, np.int64)
            distinct_offsets, distinct_data = string_buffers(encoded.dictionary)
            self.hashes = kernels.libcxx_string_hashes(np.ascontiguousarray(distinct_data, np.uint8),
                                                       np.ascontiguousarray(distinct_offsets, np.int64))
            return
        width = rows.shape[1]
        signed = isinstance(key_type, Primitive) and key_type.name.startswith("Int")
        numbers = np.ascontiguousarray(rows).view(f"<{'i' if signed else 'u'}{width}").reshape(-1)
        # std::hash of an integer is its value as a 64-bit size_t (a signed one sign-extended).
        widened = numbers.astype(np.int64).view(np.uint64) if signed else numbers.astype(np.uint64)
        self.hashes, inverse = np.unique(widened, return_inverse=True)
        self.ids = inverse.astype(np.int64).reshape(-1)

    def written(self, entries: np.ndarray) -> Piece:
        """The bytes of the keys of `entries`, one piece each."""
        if self.rows is not None:
            return _rows_piece(self.rows[entries])
        assert self.offsets is not None and self.data is not None
        lengths = self.offsets[entries + 1] - self.offsets[entries]
        return _with_lengths(_gather(self.data, self.offsets[entries], lengths))


def _node_map_states(keys: _MapKeys, ranks: np.ndarray, nested_states: Callable[[np.ndarray, np.ndarray], pa.Array],
                     entry_groups: np.ndarray, groups: int) -> pa.BinaryArray:
    """One state per group from entries whose keys take places `ranks` (numbered across groups in
    written order); `nested_states(order, starts)` gives the nested state of each key from the
    entries in `order` cut at `starts`."""
    n = len(ranks)
    order = np.argsort(ranks, kind="stable")
    new_key = np.ones(n, bool)
    new_key[1:] = ranks[order][1:] != ranks[order][:-1]
    segment_starts = np.flatnonzero(new_key).astype(np.int64)
    firsts = order[segment_starts]
    nested = nested_states(order, segment_starts) if n else pa.array([], pa.binary())
    nested_offsets, nested_data = string_buffers(nested)
    segments = concat_rows([keys.written(firsts), (nested_data, nested_offsets)])
    segment_offsets, segment_data = string_buffers(segments)
    counts = np.bincount(entry_groups[firsts], minlength=groups).astype(np.int64)
    first_segments = np.zeros(groups + 1, np.int64)
    np.cumsum(counts, out=first_segments[1:])
    return concat_rows([encode_varuints(counts.astype(np.uint64)), (segment_data, segment_offsets[first_segments])])


def _node_map_builder(function: str, key_type: DataType, value_type: Primitive) -> StateBuilder | None:
    nested_type = AggregateFunction(function[:-3], (value_type,))
    nested = simple_builder(nested_type)
    if nested is None:
        return None
    strings = isinstance(key_type, Primitive) and key_type.name == "String"
    key_width = 0 if strings else np.dtype(_key_dtype(key_type)).itemsize
    # A sum is 8 bytes (a 128/256-bit integer's its own width); min/max: a flag byte, then the value.
    value_width = int(value_type.width or 0)
    nested_width = max(8, value_width) if function == "sumMap" else 1 + value_width

    def states(dt: AggregateFunction, arguments: Sequence[pa.Array], starts: np.ndarray, n: int) -> pa.BinaryArray:
        lengths, entries = list_parts(_plain_array(arguments[0]))
        key_column = _plain_array(entries.field(0))
        if strings:
            offsets, data = string_buffers(key_column)
            keys = _MapKeys(key_type, None, offsets, data)
        else:
            keys = _MapKeys(key_type, _storage_rows(key_type, key_column))
        values = _plain_array(entries.field(1))
        sizes = group_sizes(starts, n)
        entry_groups = np.repeat(np.repeat(np.arange(len(starts), dtype=np.int64), sizes), lengths)
        group_entries = np.bincount(entry_groups, minlength=len(starts))
        entry_starts = np.zeros(len(starts), np.int64)
        np.cumsum(group_entries[:-1], out=entry_starts[1:])
        ranks = kernels.node_map_ranks(keys.ids, keys.hashes, entry_starts, len(entry_groups), len(keys.hashes))

        def nested_states(order: np.ndarray, segment_starts: np.ndarray) -> pa.Array:
            return nested.states(nested_type, [values.take(pa.array(order))], segment_starts, len(order))

        return _node_map_states(keys, ranks, nested_states, entry_groups, len(starts))

    def combine(dt: AggregateFunction, column: pa.BinaryArray, starts: np.ndarray) -> pa.BinaryArray:
        offsets, data = _state_buffers(column)
        n = len(offsets) - 1
        state_of, key_starts, key_lengths = kernels.map_entries(data, offsets[:-1].astype(np.int64), key_width,
                                                                nested_width)
        state_ends = np.searchsorted(state_of, np.arange(n), side="right").astype(np.int64)
        if strings:
            key_data, key_offsets = _gather(data, key_starts, key_lengths)
            keys = _MapKeys(key_type, None, key_offsets, key_data)
        else:
            keys = _MapKeys(key_type, data[(key_starts[:, None] + np.arange(key_width)).reshape(-1)].reshape(-1, key_width))
        ranks = kernels.node_map_merge_ranks(keys.ids, keys.hashes, state_ends, starts.astype(np.int64),
                                             len(keys.hashes))
        value_starts = key_starts + key_lengths

        def nested_states(order: np.ndarray, segment_starts: np.ndarray) -> pa.Array:
            nested_data, nested_offsets = _gather(data, value_starts[order], np.full(len(order), nested_width, np.int64))
            held = pa.Array.from_buffers(pa.large_binary(), len(order), [None, pa.py_buffer(nested_offsets),
                                                                         pa.py_buffer(np.ascontiguousarray(nested_data))])
            return nested.combine(nested_type, held.cast(pa.binary()), segment_starts)

        state_groups = np.repeat(np.arange(len(starts), dtype=np.int64), group_sizes(starts, n))
        return _node_map_states(keys, ranks, nested_states, state_groups[state_of], len(starts))

    return StateBuilder(states, combine)

# ---------------------------------------------------------------------------------------------
# groupBitmap: see states_bits_maps_compiled for the small set, the roaring containers and which
# form ClickHouse writes each container in.


def _bitmap_values(argument: Primitive, arr: pa.Array) -> np.ndarray:
    """Each value as ClickHouse's bitmap keeps it (cast to UInt32, or UInt64 for 64-bit types)."""
    numbers = _numbers(argument, arr)
    if numbers.dtype.itemsize == 8:
        return numbers.view(np.uint64)
    return (numbers.astype(np.int64) & 0xFFFFFFFF).astype(np.uint64)


def _bitmap_builder(argument: Primitive) -> StateBuilder:
    width = int(argument.width or 0)
    signed = argument.name.startswith("Int")
    wide = width == 8

    def written(group_large: np.ndarray, small_values: np.ndarray, small_offsets: np.ndarray, item_groups: np.ndarray,
                item_values: np.ndarray, item_sequence: np.ndarray, item_kinds: np.ndarray) -> pa.BinaryArray:
        keys = (item_values >> np.uint64(16)).astype(np.int64)
        order = np.lexsort((item_sequence, keys, item_groups))
        lows = (item_values & np.uint64(0xFFFF)).astype(np.int64)
        folded = kernels.bitmap_fold(item_groups[order], keys[order], item_sequence[order], item_kinds[order], lows[order])
        data, offsets = kernels.bitmap_states(group_large, small_values, small_offsets, width, *folded, wide)
        return pa.Array.from_buffers(pa.large_binary(), len(group_large), [None, pa.py_buffer(offsets), pa.py_buffer(data)]) \
            .cast(pa.binary())

    def states(dt: AggregateFunction, arguments: Sequence[pa.Array], starts: np.ndarray, n: int) -> pa.BinaryArray:
        values = _bitmap_values(argument, _plain_array(arguments[0]))
        groups = np.repeat(np.arange(len(starts), dtype=np.int64), group_sizes(starts, n))
        order = np.lexsort((np.arange(n), values, groups))
        distinct = np.ones(n, bool)
        distinct[1:] = (groups[order][1:] != groups[order][:-1]) | (values[order][1:] != values[order][:-1])
        firsts = order[distinct]  # each group's distinct values, the row where each came first
        counts = np.bincount(groups[firsts], minlength=len(starts))
        large = counts > kernels.SMALL_SET
        small_rows = np.sort(firsts[~large[groups[firsts]]])
        small_offsets = np.zeros(len(starts) + 1, np.int64)
        np.cumsum(np.where(large, 0, counts), out=small_offsets[1:])
        items = firsts[large[groups[firsts]]]  # sorted by group and value: one add of each
        return written(large, values[small_rows], small_offsets, groups[items], values[items],
                       np.zeros(len(items), np.int64), np.zeros(len(items), np.int64))

    def combine(dt: AggregateFunction, column: pa.BinaryArray, starts: np.ndarray) -> pa.BinaryArray:
        offsets, data = _state_buffers(column)
        n = len(offsets) - 1
        large, begins, _, small_values, small_offsets = kernels.bitmap_state_parts(data, offsets[:-1].astype(np.int64),
                                                                                   width, signed)
        (group_large, kept_values, kept_offsets, op_groups, op_states, op_offsets, added,
         sequence) = kernels.bitmap_merge_plan(starts.astype(np.int64), large, small_values, small_offsets)
        add_ops = np.repeat(sequence, np.diff(op_offsets))
        large_states = np.flatnonzero(large)
        owners, keys, kinds, lows, container_offsets = kernels.bitmap_containers(data, begins[large_states], wide)
        op_of_state = np.full(n, -1, np.int64)
        unions = op_states >= 0
        op_of_state[op_states[unions]] = sequence[unions]
        container_ops = op_of_state[large_states[owners]]
        cards = np.diff(container_offsets)
        union_values = (np.repeat(keys, cards).astype(np.uint64) << np.uint64(16)) | lows.astype(np.uint64)
        union_ops = np.repeat(container_ops, cards)
        return written(group_large, kept_values, kept_offsets,
                       np.concatenate([op_groups[add_ops], op_groups[union_ops]]),
                       np.concatenate([added, union_values]), np.concatenate([add_ops, union_ops]),
                       np.concatenate([np.zeros(len(added), np.int64), np.repeat(kinds, cards)]))

    return StateBuilder(states, combine)


# ---------------------------------------------------------------------------------------------


def builder(dt: AggregateFunction) -> StateBuilder | None:
    """The builder of `dt`'s states when this family knows them (see the module's docstring)."""
    arguments = dt.arguments
    if dt.parameters or state_layout(dt) is None or any(a.custom_name is not None for a in arguments):
        return None
    name = dt.function
    if name in ("sumMap", "minMap", "maxMap"):
        if dt.version is None:  # the -Map combinator over sum, min or max of a Map's values
            key, value = arguments[0].key, arguments[0].value  # type: ignore[attr-defined]
            if not (isinstance(key, (Primitive, DateTime)) and (isinstance(key, DateTime) or key.name in _MAP_KEY_TYPES)
                    and isinstance(value, Primitive)):
                return None
            return _node_map_builder(name, key, value)
        key, values = arguments[0].inner, [a.inner for a in arguments[1:]]  # type: ignore[attr-defined]
        if not all(isinstance(v, Primitive) and v.name in _NUMPY for v in values):
            return None
        return _map_builder(name, key, values)
    if dt.version is not None:
        return None
    if name in _BITWISE:
        return _bitwise_builder(_BITWISE[name], arguments[0])
    if name == "groupBitmap" and isinstance(arguments[0], Primitive):
        return _bitmap_builder(arguments[0])
    if name == "deltaSum" and isinstance(arguments[0], Primitive):
        return _delta_sum_builder(arguments[0])
    if name in ("boundingRatio", "simpleLinearRegression") and all(value_kind(a) is not None for a in arguments):
        maker = _bounding_ratio_builder if name == "boundingRatio" else _linear_regression_builder
        return maker(arguments[0], arguments[1])
    return None

"""States of the value-keeping and arithmetic aggregate functions, built from rows and combined.

This family (see format/state_rows.py for the contract) owns:
- count, and the sums: sum, avg, sumCount, sumWithOverflow, sumKahan, avgWeighted;
- the single-value holders: min, max, any, anyLast over every type format/aggregate_states.py
  knows for them, argMin / argMax (the result's holder, then the compared value's), and anyHeavy
  (the holder, then a counter);
- groupArray and groupArray(N);
- the moments: varPop, varSamp, stddevPop, stddevSamp, skewPop, skewSamp, kurtPop, kurtSamp,
  covarPop, covarSamp, corr (plain sums of powers), and their *Stable forms (Welford's running
  mean and the parallel merge of Chan et al.).

Every state is ClickHouse 26.9's bytes for the same rows in the same order (tests/format/
test_states_simple.py compares them with chdb's). Floating-point sums are added row after row and
states merged left to right, as ClickHouse's GROUP BY and its merge of states do: the compiled
kernels (format/states_simple_compiled.py) keep that order. One bit is not always ClickHouse's: when a
NaN an addition makes (inf + -inf, the processor's default NaN, sign bit set) meets a NaN of the data,
which of the two a total keeps depends on how ClickHouse's compiler ordered that addition's operands;
sums, sumKahan's merge and the *Stable forms' running moments follow the orders measured on chdb;
the plain moments' totals and the means of merged covarStable/corrStable states may keep the other
NaN (tests compare those without NaN signs).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from spark_mergetree.format import states_simple_compiled as kernels
from spark_mergetree.format.aggregate_states import state_layout
from spark_mergetree.format.state_rows import (
    StateBuilder,
    concat_rows,
    decode_varuints,
    fixed_bytes,
    group_ends,
    group_sizes,
)
from spark_mergetree.format.types import (
    AggregateFunction,
    DataType,
    DateTime,
    DateTime64,
    Decimal,
    FixedString,
    LowCardinality,
    Nullable,
    Primitive,
)
from spark_mergetree.format.values import encode_varuints, fixed_storage, string_buffers

__all__ = ["builder"]

Piece = tuple[np.ndarray, np.ndarray]  # (bytes, offsets n+1): one piece of each state

# ---------------------------------------------------------------------------------------------
# Values of one argument type: how they are kept (fixed bytes or a string) and ordered.

_NUMERIC_ORDER = {
    "Int8": "<i1", "Int16": "<i2", "Int32": "<i4", "Int64": "<i8",
    "UInt8": "<u1", "UInt16": "<u2", "UInt32": "<u4", "UInt64": "<u8", "Bool": "<u1",
    "Float32": "<f4", "Float64": "<f8", "Date": "<u2", "Date32": "<i4",
}
_WIDE = {"Int128": True, "Int256": True, "UInt128": False, "UInt256": False, "UUID": False}


@dataclasses.dataclass(frozen=True)
class _Kind:
    """How values of a type sit in states and compare: `width` bytes (None: a String), ordered as
    the numpy type `order`, or as a two's complement (`signed`) / unsigned little-endian integer of
    `width` bytes (`wide`), or byte by byte (FixedString: neither)."""

    width: int | None
    order: str | None = None
    wide: bool = False
    signed: bool = False


def value_kind(dt: DataType) -> _Kind | None:
    """How values of `dt` are kept and compared; None for a type this family builds no state of."""
    if dt.custom_name is not None:
        return None
    if isinstance(dt, Primitive):
        if dt.name == "String":
            return _Kind(None)
        if dt.name in _NUMERIC_ORDER:
            return _Kind(np.dtype(_NUMERIC_ORDER[dt.name]).itemsize, _NUMERIC_ORDER[dt.name])
        if dt.name in _WIDE:
            return _Kind(int(dt.width or 0), wide=True, signed=_WIDE[dt.name])
        return None
    if isinstance(dt, DateTime):
        return _Kind(4, "<u4")
    if isinstance(dt, DateTime64):
        return _Kind(8, "<i8")
    if isinstance(dt, Decimal):
        return _Kind(dt.width, "<i4") if dt.width == 4 else _Kind(dt.width, "<i8") if dt.width == 8 \
            else _Kind(dt.width, wide=True, signed=True)
    if isinstance(dt, FixedString):
        return _Kind(dt.length)
    return None


@dataclasses.dataclass
class _Values:
    """Values of one type, one per row: `rows` (n, width) uint8 for fixed-width types, else
    `offsets` (n + 1) into `data` (a String's bytes)."""

    rows: np.ndarray | None = None
    offsets: np.ndarray | None = None
    data: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.rows) if self.rows is not None else len(self.offsets) - 1  # type: ignore[arg-type]


def _plain_array(arr: pa.Array | pa.ChunkedArray) -> pa.Array:
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks() if arr.num_chunks != 1 else arr.chunk(0)
    return arr.dictionary_decode() if pa.types.is_dictionary(arr.type) else arr


def _row_values(dt: DataType, kind: _Kind, arr: pa.Array) -> _Values:
    arr = _plain_array(arr)
    if kind.width is None:
        offsets, data = string_buffers(arr)
        return _Values(offsets=offsets, data=data)
    storage = np.ascontiguousarray(fixed_storage(dt, arr, "an aggregate function's argument"))
    return _Values(rows=storage.view(np.uint8).reshape(len(arr), kind.width))


def _binary(offsets: np.ndarray, data: np.ndarray) -> pa.Array:
    return pa.Array.from_buffers(pa.large_binary(), len(offsets) - 1,
                                 [None, pa.py_buffer(np.ascontiguousarray(offsets, np.int64)),
                                  pa.py_buffer(np.ascontiguousarray(data, np.uint8))])


def _order_keys(kind: _Kind, values: _Values) -> np.ndarray:
    """Numbers whose order is ClickHouse's order of the values (floats as they are: NaN is handled
    by the kernel; other types as their dense rank)."""
    if kind.order is not None:
        assert values.rows is not None
        return values.rows.view(kind.order).reshape(-1) if len(values) else np.zeros(0, kind.order)
    if kind.width is None:
        assert values.offsets is not None and values.data is not None
        binary = _binary(values.offsets, values.data)
    else:
        assert values.rows is not None
        rows = values.rows
        if kind.wide:
            # Most significant byte first (and the sign flipped) so that bytes compare as numbers;
            # a UUID compares as its UInt128, the second half of its text first.
            rows = rows[:, ::-1].copy()
            if kind.signed:
                rows[:, 0] ^= 0x80
        binary = pa.Array.from_buffers(pa.binary(kind.width), len(rows), [None, pa.py_buffer(np.ascontiguousarray(rows))])
    if not len(binary):
        return np.zeros(0, np.int64)
    return np.asarray(pc.rank(binary, sort_keys="ascending", tiebreaker="dense"), np.int64)


def _gather(data: np.ndarray, begins: np.ndarray, lengths: np.ndarray) -> Piece:
    """data[begins[i]:begins[i] + lengths[i]] for each i, back to back: a piece."""
    offsets = np.zeros(len(lengths) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    index = np.arange(int(offsets[-1]), dtype=np.int64) + np.repeat(begins - offsets[:-1], lengths)
    return data[index], offsets


def _pick(kind: _Kind, values: _Values, present: np.ndarray, starts: np.ndarray, mode: int) -> np.ndarray:
    n = len(present)
    keys = np.zeros(n, np.int8) if mode in (kernels.FIRST, kernels.LAST) else _order_keys(kind, values)
    return kernels.pick_rows(keys, present, starts.astype(np.int64), n, mode)


def _held_pieces(kind: _Kind, values: _Values, picked: np.ndarray) -> list[Piece]:
    """The single-value holder of each group's picked row (-1: nothing held): a flag byte then the
    value's bytes, or a String's Int32 size counting a closing zero byte (-1 when nothing is held),
    its bytes and the zero byte."""
    held = picked >= 0
    groups = len(picked)
    if kind.width is not None:
        assert values.rows is not None
        flags = (held.astype(np.uint8), np.arange(groups + 1, dtype=np.int64))
        value_offsets = np.zeros(groups + 1, np.int64)
        np.cumsum(held * kind.width, out=value_offsets[1:])
        return [flags, (values.rows[picked[held]].reshape(-1), value_offsets)]
    assert values.offsets is not None and values.data is not None
    rows = np.where(held, picked, 0)
    lengths = np.where(held, values.offsets[rows + 1] - values.offsets[rows], 0)
    sizes = np.where(held, lengths + 1, -1).astype("<i4")
    closing = np.zeros(groups + 1, np.int64)
    np.cumsum(held, out=closing[1:])
    return [fixed_bytes(sizes), _gather(values.data, values.offsets[rows], lengths),
            (np.zeros(int(closing[-1]), np.uint8), closing)]


def _read_held(kind: _Kind, data: np.ndarray, at: np.ndarray) -> tuple[np.ndarray, _Values, np.ndarray]:
    """Single-value holders starting at data[at]: (whether one holds a value, the values, where each
    holder ends)."""
    if kind.width is not None:
        present = data[at] != 0 if len(at) else np.zeros(0, bool)
        begins = np.where(present, at + 1, 0)
        index = begins[:, None] + np.arange(kind.width)
        rows = data[np.minimum(index, max(len(data) - 1, 0))] if len(data) else np.zeros(index.shape, np.uint8)
        return present, _Values(rows=np.ascontiguousarray(rows, np.uint8)), at + 1 + present * kind.width
    sizes = data[(at[:, None] + np.arange(4)).reshape(-1)].view("<i4") if len(at) else np.zeros(0, "<i4")
    present = sizes >= 0
    lengths = np.where(present, sizes.astype(np.int64) - 1, 0)
    piece, offsets = _gather(data, at + 4, lengths)
    return present, _Values(offsets=offsets, data=piece), at + 4 + np.maximum(sizes.astype(np.int64), 0)


def _state_buffers(states: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    return string_buffers(_plain_array(states))


def _single_value(mode: int, kind: _Kind, dt_argument: DataType) -> StateBuilder:
    def states(dt: AggregateFunction, arguments: Sequence[pa.Array], starts: np.ndarray, n: int) -> pa.BinaryArray:
        values = _row_values(dt_argument, kind, arguments[0])
        return concat_rows(_held_pieces(kind, values, _pick(kind, values, np.ones(n, bool), starts, mode)))

    def combine(dt: AggregateFunction, column: pa.BinaryArray, starts: np.ndarray) -> pa.BinaryArray:
        offsets, data = _state_buffers(column)
        present, values, _ = _read_held(kind, data, offsets[:-1])
        return concat_rows(_held_pieces(kind, values, _pick(kind, values, present, starts, mode)))

    return StateBuilder(states, combine)


def _arg_extreme(mode: int, result: tuple[DataType, _Kind], compared: tuple[DataType, _Kind]) -> StateBuilder:
    """argMin / argMax: the compared value picks the row (the first of equal ones), whose result
    value is kept with it."""
    (result_type, result_kind), (compared_type, compared_kind) = result, compared

    def states(dt: AggregateFunction, arguments: Sequence[pa.Array], starts: np.ndarray, n: int) -> pa.BinaryArray:
        results = _row_values(result_type, result_kind, arguments[0])
        values = _row_values(compared_type, compared_kind, arguments[1])
        picked = _pick(compared_kind, values, np.ones(n, bool), starts, mode)
        return concat_rows(_held_pieces(result_kind, results, picked) + _held_pieces(compared_kind, values, picked))

    def combine(dt: AggregateFunction, column: pa.BinaryArray, starts: np.ndarray) -> pa.BinaryArray:
        offsets, data = _state_buffers(column)
        _, results, after = _read_held(result_kind, data, offsets[:-1])
        present, values, _ = _read_held(compared_kind, data, after)
        picked = _pick(compared_kind, values, present, starts, mode)
        return concat_rows(_held_pieces(result_kind, results, picked) + _held_pieces(compared_kind, values, picked))

    return StateBuilder(states, combine)


def _any_heavy(kind: _Kind, dt_argument: DataType) -> StateBuilder:
    """anyHeavy: the held value (a single-value holder) then its UInt64 counter."""

    def pieces(values: _Values, held: np.ndarray, counters: np.ndarray) -> pa.BinaryArray:
        return concat_rows(_held_pieces(kind, values, held) + [fixed_bytes(counters.astype("<u8"))])

    def states(dt: AggregateFunction, arguments: Sequence[pa.Array], starts: np.ndarray, n: int) -> pa.BinaryArray:
        values = _row_values(dt_argument, kind, arguments[0])
        held, counters = kernels.heavy_hitters(_order_keys(kind, values), np.ones(n, bool), np.zeros(n, np.uint64),
                                               starts.astype(np.int64), n, False)
        return pieces(values, held, counters)

    def combine(dt: AggregateFunction, column: pa.BinaryArray, starts: np.ndarray) -> pa.BinaryArray:
        offsets, data = _state_buffers(column)
        present, values, after = _read_held(kind, data, offsets[:-1])
        counters = data[(after[:, None] + np.arange(8)).reshape(-1)].view("<u8").copy() if len(after) \
            else np.zeros(0, np.uint64)
        held, merged = kernels.heavy_hitters(_order_keys(kind, values), present, counters.astype(np.uint64),
                                             starts.astype(np.int64), len(present), True)
        return pieces(values, held, merged)

    return StateBuilder(states, combine)


# ---------------------------------------------------------------------------------------------
# Sums: 64-bit integers wrap, floats add row after row, wide integers (Decimal128 sums, 128/256-bit
# sumWithOverflow) add modulo their width.


def _wide_sums(words: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Per group, the sum of little-endian integers of `words.shape[1]` uint64 words, modulo their
    width (two's complement sums of signed values are the same bits)."""
    count = words.shape[1]
    if not len(starts):
        return np.zeros((0, count), np.uint64)
    halves = np.empty((len(words), 2 * count), np.uint64)
    halves[:, 0::2] = words & np.uint64(0xFFFFFFFF)
    halves[:, 1::2] = words >> np.uint64(32)
    # Each 32-bit limb summed on its own cannot overflow (fewer than 2^32 rows), then carried.
    sums = np.add.reduceat(halves, starts, axis=0)
    out = np.zeros((len(starts), count), np.uint64)
    carry = np.zeros(len(starts), np.uint64)
    for limb in range(2 * count):
        total = sums[:, limb] + carry
        part = total & np.uint64(0xFFFFFFFF)
        carry = total >> np.uint64(32)
        out[:, limb // 2] |= part << np.uint64(32 * (limb % 2))
    return out


def _words(values: np.ndarray, count: int) -> np.ndarray:
    """Integers (1-D, up to 64 bits) sign- or zero-extended to `count` uint64 words."""
    low = values.astype(np.int64 if values.dtype.kind == "i" else np.uint64)
    out = np.empty((len(values), count), np.uint64)
    out[:, 0] = low.view(np.uint64)
    high = np.where(low < 0, np.uint64(0xFFFFFFFFFFFFFFFF), np.uint64(0)) if values.dtype.kind == "i" \
        else np.zeros(len(values), np.uint64)
    out[:, 1:] = high[:, None]
    return out


def _float_sums(values: np.ndarray, starts: np.ndarray, n: int, added_nan_wins: bool = True) -> np.ndarray:
    columns = values.reshape(n, -1) if values.ndim == 1 else values
    return kernels.sequential_sums(np.ascontiguousarray(columns), starts.astype(np.int64), n, added_nan_wins)


@dataclasses.dataclass(frozen=True)
class _Accumulator:
    """The type a sum accumulates in: a numpy type, or `words` uint64 words of a wide integer."""

    dtype: str | None
    words: int = 0

    @property
    def width(self) -> int:
        return 8 * self.words if self.dtype is None else np.dtype(self.dtype).itemsize

    def convert(self, dt: DataType, kind: _Kind, arr: pa.Array) -> np.ndarray:
        """Each row's value in the accumulator's type (what ClickHouse's static_cast gives)."""
        if self.dtype is None:
            if kind.wide:
                values = _row_values(dt, kind, arr)
                assert values.rows is not None
                words = np.ascontiguousarray(values.rows).view("<u8").reshape(len(values), int(kind.width or 0) // 8)
                return words[:, :self.words]
            return _words(_numbers(dt, kind, arr), self.words)
        return _numbers(dt, kind, arr).astype(self.dtype)

    def sums(self, values: np.ndarray, starts: np.ndarray, n: int) -> np.ndarray:
        if self.dtype is None:
            return _wide_sums(values, starts)
        if not len(starts):
            return np.zeros(0, self.dtype)
        if np.dtype(self.dtype).kind == "f":
            return _float_sums(values, starts, n)[:, 0]
        wide = np.add.reduceat(values.astype(np.int64 if np.dtype(self.dtype).kind == "i" else np.uint64), starts)
        return wide.astype(self.dtype)  # wraps to the accumulator's width, as ClickHouse's addition does

    def piece(self, sums: np.ndarray) -> Piece:
        if self.dtype is None:
            return np.ascontiguousarray(sums.astype("<u8")).view(np.uint8).reshape(-1), \
                np.arange(len(sums) + 1, dtype=np.int64) * self.width
        return fixed_bytes(sums.astype(self.dtype))

    def read(self, data: np.ndarray, at: np.ndarray) -> np.ndarray:
        rows = data[(at[:, None] + np.arange(self.width)).reshape(-1)] if len(at) else np.zeros(0, np.uint8)
        if self.dtype is None:
            return rows.view("<u8").reshape(len(at), self.words)
        return rows.view(self.dtype).copy()


def _sum_accumulator(dt: DataType, kind: _Kind) -> _Accumulator | None:
    """sum's and avg's: 64-bit for numbers (Float64, Int64, UInt64 by the argument's kind), a
    Decimal128 for Decimals up to 38 digits."""
    if isinstance(dt, Decimal):
        return _Accumulator(None, 2) if dt.precision <= 38 else None
    if kind.order is None or not isinstance(dt, Primitive) or dt.name in ("Date", "Date32"):
        return None
    return _Accumulator({"f": "<f8", "i": "<i8", "u": "<u8"}[np.dtype(kind.order).kind])


def _own_accumulator(kind: _Kind) -> _Accumulator:
    """sumWithOverflow's: the argument's own type."""
    return _Accumulator(None, int(kind.width or 0) // 8) if kind.wide else _Accumulator(kind.order)


def _counts_piece(counts: np.ndarray) -> Piece:
    return encode_varuints(counts.astype(np.uint64))


def _sum_builder(accumulator: _Accumulator, dt_argument: DataType, kind: _Kind, counted: bool) -> StateBuilder:
    """sum, sumWithOverflow (and, `counted`, avg and sumCount: the sum then a varuint count)."""

    def states(dt: AggregateFunction, arguments: Sequence[pa.Array], starts: np.ndarray, n: int) -> pa.BinaryArray:
        sums = accumulator.sums(accumulator.convert(dt_argument, kind, arguments[0]), starts, n)
        pieces = [accumulator.piece(sums)]
        return concat_rows(pieces + [_counts_piece(group_sizes(starts, n))] if counted else pieces)

    def combine(dt: AggregateFunction, column: pa.BinaryArray, starts: np.ndarray) -> pa.BinaryArray:
        offsets, data = _state_buffers(column)
        n = len(offsets) - 1
        sums = accumulator.sums(accumulator.read(data, offsets[:-1]), starts, n)
        if not counted:
            return concat_rows([accumulator.piece(sums)])
        counts = decode_varuints(data, offsets[:-1] + accumulator.width, offsets[1:])
        group_counts = np.add.reduceat(counts, starts) if len(starts) else np.zeros(0, np.uint64)
        return concat_rows([accumulator.piece(sums), _counts_piece(group_counts)])

    return StateBuilder(states, combine)


def _count_builder() -> StateBuilder:
    def states(dt: AggregateFunction, arguments: Sequence[pa.Array], starts: np.ndarray, n: int) -> pa.BinaryArray:
        return concat_rows([_counts_piece(group_sizes(starts, n))])

    def combine(dt: AggregateFunction, column: pa.BinaryArray, starts: np.ndarray) -> pa.BinaryArray:
        offsets, data = _state_buffers(column)
        counts = decode_varuints(data, offsets[:-1], offsets[1:])
        return concat_rows([_counts_piece(np.add.reduceat(counts, starts) if len(starts) else counts[:0])])

    return StateBuilder(states, combine)


def as_float64(dt: DataType, kind: _Kind, arr: pa.Array) -> np.ndarray:
    """Each value as ClickHouse's static_cast<Float64> gives it (a Decimal's unscaled integer)."""
    values = _row_values(dt, kind, arr)
    assert values.rows is not None
    if kind.wide:
        return _wide_to_float64(values.rows, kind.signed)
    return values.rows.view(kind.order or "<u1").reshape(-1).astype(np.float64) if len(values) else np.zeros(0)


def _wide_to_float64(rows: np.ndarray, signed: bool) -> np.ndarray:
    """128/256-bit integers as Float64: ClickHouse converts the magnitude through a long double,
    adding its 64-bit words from the most significant one, then rounds to double."""
    words = np.ascontiguousarray(rows).view("<u8").reshape(len(rows), rows.shape[1] // 8)
    negative = (words[:, -1] >> np.uint64(63)).astype(bool) if signed else np.zeros(len(rows), bool)
    magnitude = words.copy()
    if negative.any():
        # Two's complement negation: every bit flipped, then one added with its carry.
        flipped = ~magnitude[negative]
        carry = np.ones(len(flipped), np.uint64)
        for w in range(flipped.shape[1]):
            flipped[:, w] += carry
            carry = carry & (flipped[:, w] == 0)
        magnitude[negative] = flipped
    scale = np.longdouble(np.uint64(0xFFFFFFFFFFFFFFFF))
    out = np.zeros(len(rows), np.longdouble)
    for w in range(words.shape[1] - 1, -1, -1):
        previous = out
        out = out * scale
        out = out + previous
        out = out + magnitude[:, w].astype(np.longdouble)
    return np.where(negative, -out, out).astype(np.float64)


def _float_pairs(pairs: np.ndarray) -> pa.BinaryArray:
    """States of two Float64 each, from (groups, 2) values."""
    flat = np.ascontiguousarray(pairs, "<f8").view(np.uint8).reshape(-1)
    return concat_rows([(flat, np.arange(len(pairs) + 1, dtype=np.int64) * 16)])


def _kahan_builder(dt_argument: DataType, kind: _Kind) -> StateBuilder:
    """sumKahan over numbers: a Float64 sum and its compensation."""

    def states(dt: AggregateFunction, arguments: Sequence[pa.Array], starts: np.ndarray, n: int) -> pa.BinaryArray:
        return _float_pairs(kernels.kahan_sums(as_float64(dt_argument, kind, arguments[0]), starts.astype(np.int64), n))

    def combine(dt: AggregateFunction, column: pa.BinaryArray, starts: np.ndarray) -> pa.BinaryArray:
        offsets, data = _state_buffers(column)
        pairs = _floats_at(data, offsets[:-1], 2)
        return _float_pairs(kernels.kahan_merges(np.ascontiguousarray(pairs[:, 0]), np.ascontiguousarray(pairs[:, 1]),
                                                 starts.astype(np.int64), len(pairs)))

    return StateBuilder(states, combine)


def _floats_at(data: np.ndarray, at: np.ndarray, count: int, dtype: str = "<f8") -> np.ndarray:
    """`count` floats from data[at] of each state: (states, count)."""
    width = np.dtype(dtype).itemsize * count
    if not len(at):
        return np.zeros((0, count), dtype)
    return data[(at[:, None] + np.arange(width)).reshape(-1)].view(dtype).reshape(len(at), count)


# ---------------------------------------------------------------------------------------------
# avgWeighted: a sum of value × weight and a sum of weights, both in the weight's 64-bit type
# (ClickHouse's MaxFieldType of two 8-byte field types is the weight's).


def _field_dtype(kind: _Kind) -> str:
    """The 64-bit type a number widens to (ClickHouse's NearestFieldType): Float64, Int64, UInt64."""
    return {"f": "<f8", "i": "<i8", "u": "<u8"}[np.dtype(kind.order).kind]


def _numbers(dt: DataType, kind: _Kind, arr: pa.Array) -> np.ndarray:
    values = _row_values(dt, kind, arr)
    assert values.rows is not None
    return values.rows.view(kind.order or "<u1").reshape(-1) if len(values) else np.zeros(0, kind.order)


def _cast(values: np.ndarray, dtype: str) -> np.ndarray:
    """C++'s static_cast of numbers to a 64-bit type as ClickHouse's x86 build computes it: integers
    wrap; floats are truncated toward zero, and those out of range (NaN, infinities) give the
    processor's "integer indefinite" 0x8000000000000000. To UInt64 (measured): the Int64
    conversion, or-ed when negative with the conversion of the value less 2^63."""
    if np.dtype(dtype).kind == "f" or values.dtype.kind != "f":
        return values.astype(np.int64).astype(dtype) if values.dtype.kind == "i" and dtype == "<u8" \
            else values.astype(dtype)
    wide = values.astype(np.float64)
    with np.errstate(invalid="ignore"):
        low = wide.astype(np.int64)
        if dtype != "<u8":
            return low
        high = (wide - 2.0 ** 63).astype(np.int64)
    return (low | (high & (low >> 63))).view(np.uint64)


def _avg_weighted_builder(value: tuple[DataType, _Kind], weight: tuple[DataType, _Kind]) -> StateBuilder:
    field = _field_dtype(weight[1])
    accumulator = _Accumulator(field)
    counted = field == "<u8"  # an unsigned sum of weights is written as a varuint

    def weights_piece(sums: np.ndarray) -> Piece:
        return _counts_piece(sums) if counted else accumulator.piece(sums)

    def states(dt: AggregateFunction, arguments: Sequence[pa.Array], starts: np.ndarray, n: int) -> pa.BinaryArray:
        weights = _cast(_numbers(*weight, arguments[1]), field)
        with np.errstate(all="ignore"):  # products overflow and wrap (or are infinite, NaN) as ClickHouse's
            products = _cast(_numbers(*value, arguments[0]), field) * weights
        return concat_rows([accumulator.piece(accumulator.sums(products, starts, n)),
                            weights_piece(accumulator.sums(weights, starts, n))])

    def combine(dt: AggregateFunction, column: pa.BinaryArray, starts: np.ndarray) -> pa.BinaryArray:
        offsets, data = _state_buffers(column)
        n = len(offsets) - 1
        numerators = accumulator.read(data, offsets[:-1])
        weights = decode_varuints(data, offsets[:-1] + 8, offsets[1:]) if counted \
            else accumulator.read(data, offsets[:-1] + 8)
        return concat_rows([accumulator.piece(accumulator.sums(numerators, starts, n)),
                            weights_piece(accumulator.sums(weights, starts, n))])

    return StateBuilder(states, combine)


# ---------------------------------------------------------------------------------------------
# Moments.


def moment_float(dt: DataType, kind: _Kind, arr: pa.Array, dtype: str) -> np.ndarray:
    """A value as the moments add it: Float32 stays, a Decimal (and a DateTime64, measured) is its
    unscaled integer as Float64 divided by 10^scale as Float64, anything else static_cast to
    `dtype`."""
    if kind.order == dtype:
        return _numbers(dt, kind, arr)
    as_float = as_float64(dt, kind, arr)
    if isinstance(dt, Decimal):
        return as_float / _power_of_ten(dt.scale, dt.width)
    if isinstance(dt, DateTime64):
        return as_float / _power_of_ten(dt.precision, 8)
    return as_float.astype(dtype)


def _power_of_ten(scale: int, width: int) -> np.float64:
    """10^scale of a Decimal's native integer, as ClickHouse converts it to Float64."""
    if width <= 8:
        return np.float64(10 ** scale)
    words = np.array([[(10 ** scale >> (64 * w)) & 0xFFFFFFFFFFFFFFFF for w in range(width // 8)]], np.uint64)
    return np.float64(_wide_to_float64(words.view(np.uint8), False)[0])


def _moments_builder(arguments: Sequence[tuple[DataType, _Kind]], columns: str) -> StateBuilder:
    """The plain moments: sums of powers (`columns`: "var", "skew", "kurt", "covar", "corr"),
    Float32 when every argument is Float32, row after row."""
    dtype = "<f4" if all(kind.order == "<f4" for _, kind in arguments) else "<f8"
    power = {"var": 2, "skew": 3, "kurt": 4}.get(columns)

    def states(dt: AggregateFunction, arrays: Sequence[pa.Array], starts: np.ndarray, n: int) -> pa.BinaryArray:
        x = moment_float(*arguments[0], arrays[0], dtype)
        parts = [np.ones(n, dtype), x]
        with np.errstate(all="ignore"):  # infinities and NaN are summed as they are
            if power is not None:
                product = x * x  # x * x * x: each product rounded in turn, as ClickHouse multiplies
                parts.append(product)
                for _ in range(power - 2):
                    product = product * x
                    parts.append(product)
            else:
                y = moment_float(*arguments[1], arrays[1], dtype)
                parts += [y, x * y] + ([x * x, y * y] if columns == "corr" else [])
        return _float_rows(_float_sums(np.stack(parts, axis=1).astype(dtype), starts, n, False))

    def combine(dt: AggregateFunction, column: pa.BinaryArray, starts: np.ndarray) -> pa.BinaryArray:
        offsets, data = _state_buffers(column)
        count = 1 + (power if power is not None else 3 if columns == "covar" else 5)
        return _float_rows(_float_sums(np.ascontiguousarray(_floats_at(data, offsets[:-1], count, dtype)), starts,
                                       len(offsets) - 1))

    return StateBuilder(states, combine)


def _float_rows(values: np.ndarray) -> pa.BinaryArray:
    """One state per row of `values` (2-D floats): its little-endian bytes."""
    return concat_rows([_flat_piece(values)])


def _stable_builder(arguments: Sequence[tuple[DataType, _Kind]], marginal: bool) -> StateBuilder:
    """The *Stable forms: a varuint count, then the running means and (co-)moments."""
    paired = len(arguments) == 2

    def states(dt: AggregateFunction, arrays: Sequence[pa.Array], starts: np.ndarray, n: int) -> pa.BinaryArray:
        left = np.ascontiguousarray(moment_float(*arguments[0], arrays[0], "<f8"))
        right = np.ascontiguousarray(moment_float(*arguments[1], arrays[1], "<f8")) if paired else left
        counts, moments = kernels.welford(left, right, starts.astype(np.int64), n, paired, marginal)
        return concat_rows([_counts_piece(counts), _flat_piece(moments)])

    def combine(dt: AggregateFunction, column: pa.BinaryArray, starts: np.ndarray) -> pa.BinaryArray:
        offsets, data = _state_buffers(column)
        width = 2 if not paired else 5 if marginal else 3
        at = offsets[1:] - 8 * width  # the floats end each state; the varuint count fills the rest
        counts = decode_varuints(data, offsets[:-1], at)
        moments = np.ascontiguousarray(_floats_at(data, at, width))
        merged_counts, merged = kernels.welford_merges(counts, moments, starts.astype(np.int64), len(counts),
                                                       paired, marginal)
        return concat_rows([_counts_piece(merged_counts), _flat_piece(merged)])

    return StateBuilder(states, combine)


def _flat_piece(values: np.ndarray) -> Piece:
    width = values.dtype.itemsize * values.shape[1]
    flat = np.ascontiguousarray(values.astype(values.dtype.newbyteorder("<"))).view(np.uint8).reshape(-1)
    return flat, np.arange(len(values) + 1, dtype=np.int64) * width


# ---------------------------------------------------------------------------------------------
# groupArray: a varuint count, then the values (numbers, Date and DateTime as their bytes, others
# as a varuint length and their bytes), the first N of them under groupArray(N).


def _list_item_width(dt: DataType, kind: _Kind) -> int:
    """Bytes of an item kept as a number, 0 for one kept with a length."""
    by_number = (isinstance(dt, Primitive) and (dt.name in _NUMERIC_ORDER and dt.name != "Date32" or
                                                dt.name in ("Int128", "UInt128", "Int256", "UInt256"))) \
        or isinstance(dt, DateTime)
    return int(kind.width or 0) if by_number else 0


def _items_of_rows(dt: DataType, kind: _Kind, arr: pa.Array) -> Piece:
    values = _row_values(dt, kind, arr)
    width = _list_item_width(dt, kind)
    if width:
        assert values.rows is not None
        return values.rows.reshape(-1), np.arange(len(values) + 1, dtype=np.int64) * width
    if values.rows is not None:
        offsets = np.arange(len(values) + 1, dtype=np.int64) * values.rows.shape[1]
        data = values.rows.reshape(-1)
    else:
        assert values.offsets is not None and values.data is not None
        offsets, data = values.offsets, values.data
    prefixes = encode_varuints(np.diff(offsets).astype(np.uint64))
    return _interleave(prefixes, (data, offsets))


def _interleave(first: Piece, second: Piece) -> Piece:
    """Per row, the first piece's bytes then the second's, as one piece."""
    joined = concat_rows([first, second])
    offsets, data = string_buffers(joined)
    return data, offsets


def _first_items(items: Piece, item_starts: np.ndarray, limit: int | None) -> pa.BinaryArray:
    """List states of the items (one piece row each, grouped by `item_starts`, the start of each
    group's items): the count, then the items' bytes; at most `limit` items per group (the first)."""
    data, offsets = items
    n = len(offsets) - 1
    ends = group_ends(item_starts, n)
    kept_ends = ends if limit is None else np.minimum(ends, item_starts + limit)
    if limit is not None and (kept_ends < ends).any():
        keep = np.ones(n, bool)
        position = np.arange(n, dtype=np.int64) - np.repeat(item_starts, ends - item_starts)
        keep &= position < limit
        kept = np.flatnonzero(keep)
        sizes = offsets[kept + 1] - offsets[kept]
        data, offsets = _gather(data, offsets[kept], sizes)
        new_starts = np.zeros(len(item_starts), np.int64)
        np.cumsum((kept_ends - item_starts)[:-1], out=new_starts[1:])
        item_starts, n = new_starts, len(kept)
    group_offsets = np.append(offsets[item_starts], offsets[n]).astype(np.int64) if len(item_starts) \
        else np.zeros(1, np.int64)
    return concat_rows([_counts_piece(np.diff(np.append(item_starts, n))), (data, group_offsets)])


def _group_array_builder(dt_argument: DataType, kind: _Kind, limit: int | None) -> StateBuilder:
    width = _list_item_width(dt_argument, kind)

    def states(dt: AggregateFunction, arguments: Sequence[pa.Array], starts: np.ndarray, n: int) -> pa.BinaryArray:
        return _first_items(_items_of_rows(dt_argument, kind, arguments[0]), starts.astype(np.int64), limit)

    def combine(dt: AggregateFunction, column: pa.BinaryArray, starts: np.ndarray) -> pa.BinaryArray:
        offsets, data = _state_buffers(column)
        counts, item_begins, item_lengths = kernels.list_items(data, offsets[:-1].astype(np.int64), width)
        items = _gather(data, item_begins, item_lengths)
        state_firsts = np.zeros(len(counts) + 1, np.int64)
        np.cumsum(counts, out=state_firsts[1:])
        return _first_items(items, state_firsts[starts], limit)

    return StateBuilder(states, combine)


# ---------------------------------------------------------------------------------------------


_SINGLE = {"min": kernels.SMALLEST, "max": kernels.LARGEST, "any": kernels.FIRST, "anyLast": kernels.LAST}
_MOMENT_COLUMNS = {**dict.fromkeys(("varPop", "varSamp", "stddevPop", "stddevSamp"), "var"),
                   **dict.fromkeys(("skewPop", "skewSamp"), "skew"), **dict.fromkeys(("kurtPop", "kurtSamp"), "kurt"),
                   "covarPop": "covar", "covarSamp": "covar", "corr": "corr"}
_STABLE = ("varPopStable", "varSampStable", "stddevPopStable", "stddevSampStable", "covarPopStable",
           "covarSampStable", "corrStable")


def builder(dt: AggregateFunction) -> StateBuilder | None:
    """The builder of `dt`'s states when this family knows them (see the module's docstring)."""
    arguments = tuple(a.inner if isinstance(a, LowCardinality) else a for a in dt.arguments)
    if dt.version is not None or any(isinstance(a, Nullable) for a in arguments):
        return None
    if state_layout(AggregateFunction(dt.function, arguments, dt.parameters)) is None:
        return None
    name = dt.function
    if name == "count":
        return _count_builder()
    kinds = [value_kind(a) for a in arguments]
    if not arguments or any(k is None for k in kinds):
        return None
    typed = [(a, k) for a, k in zip(arguments, kinds, strict=True) if k is not None]
    if name == "groupArray":
        return _group_array_builder(*typed[0], int(dt.parameters[0]) if dt.parameters else None)
    if dt.parameters:
        return None
    one = typed[0]
    if name in _SINGLE:
        return _single_value(_SINGLE[name], one[1], one[0])
    if name == "anyHeavy":
        return _any_heavy(one[1], one[0])
    if name in ("argMin", "argMax"):
        return _arg_extreme(kernels.SMALLEST if name == "argMin" else kernels.LARGEST, typed[0], typed[1])
    if name in ("sum", "avg", "sumCount") or (name == "sumKahan" and isinstance(one[0], Decimal)):
        accumulator = _sum_accumulator(*one)
        return None if accumulator is None else _sum_builder(accumulator, one[0], one[1], name in ("avg", "sumCount"))
    if name == "sumWithOverflow":
        return _sum_builder(_own_accumulator(one[1]), one[0], one[1], False)
    if name == "sumKahan":
        return _kahan_builder(one[0], one[1])
    if name == "avgWeighted":
        return _avg_weighted_builder(typed[0], typed[1])
    if name in _MOMENT_COLUMNS:
        return _moments_builder(typed, _MOMENT_COLUMNS[name])
    if name in _STABLE:
        return _stable_builder(typed, name == "corrStable")
    return None


"""States of the distinct-count family, built from rows and combined as ClickHouse 26.9 does:
`uniq`, `uniqExact`, `uniqHLL12`, `uniqCombined(K)`, `uniqCombined64(K)` and `groupUniqArray`
(with or without max_size), over the argument types format/aggregate_states.py can split.

What each keeps (src/AggregateFunctions/AggregateFunctionUniq.h, AggregateFunctionUniqCombined.h,
AggregateFunctionGroupUniqArray.cpp; every rule below measured against chdb 26.9):

- `uniq`: a UniquesHashSet of 32-bit hashes. A number (sign-extended to UInt64; a float as its
  bits, -0.0 as its own bits), a 128-bit integer or UUID (intHash64 of its two halves xor-ed), or
  CityHash64 of a String/FixedString goes through intHash64 and keeps the low 32 bits; a Decimal,
  DateTime64 or several arguments are CityHash64-ed (arguments chained by Hash128to64) and keep the
  low 32 bits. Serialized: the skip degree, the count, the hashes in cell order (zero first).
- `uniqExact`: a HashSet (CRC32-C hash, 16 cells to start) of the values themselves (numbers,
  dates, UUID, 128-bit integers), or (8 cells to start, the low half as hash) of ClickHouse's
  SipHash-128 of a String/FixedString's bytes, or of a Decimal, DateTime64 or several arguments as
  updateHashWithValue feeds them (a String as its size counting a closing zero, as UInt64, its bytes
  and the zero byte).
- `uniqHLL12`: up to 16 keys in insertion order (numbers as themselves; a float as its bits
  converted to the float type, as ClickHouse's cast does; else 64-bit hashes), then HyperLogLog of
  2^12 5-bit registers fed intHash32 of the key (the low 32 bits for the variadic hash).
- `uniqCombined(K)`: up to 16 keys in insertion order, then a HashSet (TrivialHash, 256 cells,
  doubling) of up to 2^(K-4) 32-bit or 2^(K-5) 64-bit keys, then HyperLogLog with 2^K registers of 5
  or 6 bits, its memory image (the registers packed, the count of registers per rank, the count of
  zero registers). Keys are intHash64 of a number (sipHash64 of a UInt128), CityHash64 of a string,
  the variadic hash otherwise; 64-bit for uniqCombined64 and for String/FixedString, else their low
  32 bits.
- `groupUniqArray`: a HashSet of the numbers (CRC32-C hash; intHash64 of a float's bits), of
  one-byte numbers in a 256-cell lookup table (so in byte order), or of any other value's bytes
  (ClickHouse's CRC32 string hash), stopping at max_size keys.

Combining replays ClickHouse's merge of states in the order given: each state is deserialized as
ClickHouse reads it (a hash table re-filled in serialized order, at the size its count calls for),
then merged into a fresh state (uniq: the skip degree raised and the kept hashes re-inserted;
HyperLogLog: the maximum of registers; uniqCombined and uniqHLL12 switching form as they grow;
HashSetTable::merge: the first state copied, then the table grown for both sizes and the keys
inserted).

Built states are ClickHouse's bytes (ClickHouse's GROUP BY in one thread; with max_threads > 1 a
uniqExact set past 100000 keys is written from ClickHouse's two-level table, in another order).
Combined states are ClickHouse's bytes for uniq, uniqHLL12, uniqCombined without a hash set that
wraps around its end, and groupUniqArray of strings, of other non-numbers and with max_size; for
uniqExact and groupUniqArray of numbers the cell order of a merged set may differ from ClickHouse's
(the set, and so every result, is the same).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from spark_mergetree.errors import CorruptPartError
from spark_mergetree.format.aggregate_states import state_layout
from spark_mergetree.format.state_rows import StateBuilder, concat_rows
from spark_mergetree.format.types import (
    AggregateFunction,
    DataType,
    DateTime,
    DateTime64,
    Decimal,
    FixedString,
    Nullable,
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

_FUNCTIONS = ("uniq", "uniqExact", "uniqHLL12", "uniqCombined", "uniqCombined64", "groupUniqArray")
_M32 = np.uint64(0xFFFFFFFF)
_INTEGERS = {"UInt8": (1, False), "UInt16": (2, False), "UInt32": (4, False), "UInt64": (8, False), "Int8": (1, True),
             "Int16": (2, True), "Int32": (4, True), "Int64": (8, True), "Bool": (1, False), "Date": (2, False),
             "Date32": (4, True)}
_WIDE = {"Int128": True, "UInt128": False, "Int256": True, "UInt256": False}
# Bytes of the HyperLogLog memory image by precision, for 32- and 64-bit hashes.
_HLL_BITS = {32: 5, 64: 6}


def _kernels() -> Any:
    from spark_mergetree.format import states_sets_compiled

    return states_sets_compiled


# ------------------------------------------------------------------------------------ argument values

@dataclass(frozen=True)
class _Kind:
    """How ClickHouse sees an argument type: 'int' (integers up to 64 bits, Bool, Date, Date32,
    DateTime), 'float', 'wide' (128/256-bit integers), 'uuid', 'string', 'fixed' (FixedString),
    'decimal' (Decimal and DateTime64: hashed as their bytes)."""

    name: str
    width: int = 0
    signed: bool = False


def _kind(dt: DataType) -> _Kind | None:
    if isinstance(dt, Primitive) and dt.custom_name is None:
        if dt.name in _INTEGERS:
            return _Kind("int", *_INTEGERS[dt.name])
        if dt.name in ("Float32", "Float64"):
            return _Kind("float", int(dt.width or 0))
        if dt.name in _WIDE:
            return _Kind("wide", int(dt.width or 0), _WIDE[dt.name])
        if dt.name == "UUID":
            return _Kind("uuid", 16)
        if dt.name == "String":
            return _Kind("string")
        return None
    if isinstance(dt, DateTime) and dt.custom_name is None:
        return _Kind("int", 4, False)
    if isinstance(dt, (DateTime64, Decimal)) and dt.custom_name is None:
        return _Kind("decimal", 8 if isinstance(dt, DateTime64) else dt.width)
    if isinstance(dt, FixedString) and dt.custom_name is None:
        return _Kind("fixed", dt.length)
    return None


@dataclass
class _Column:
    """One argument's values: fixed-width ones as (n, width) storage bytes, strings as bytes and offsets."""

    kind: _Kind
    raw: np.ndarray | None = None  # (n, width) uint8
    data: np.ndarray | None = None  # strings' bytes
    offsets: np.ndarray | None = None  # strings' offsets, n + 1

    def bytes_and_offsets(self) -> tuple[np.ndarray, np.ndarray]:
        """The value bytes ClickHouse's getDataAt gives, as (data, offsets n+1)."""
        if self.raw is None:
            assert self.data is not None and self.offsets is not None
            return self.data, self.offsets
        n, width = self.raw.shape
        return np.ascontiguousarray(self.raw).reshape(-1), np.arange(n + 1, dtype=np.int64) * width

    def as_u64(self) -> np.ndarray:
        """A value of up to 8 bytes as UInt64: sign-extended when signed (static_cast<UInt64>)."""
        assert self.raw is not None
        n, width = self.raw.shape
        padded = np.zeros((n, 8), np.uint8)
        padded[:, :width] = self.raw
        if self.kind.signed and width < 8:
            negative = (self.raw[:, width - 1] & 0x80) != 0
            padded[negative, width:] = 0xFF
        return padded.view("<u8").reshape(n)

    def zero_extended(self) -> np.ndarray:
        """The value's bytes copied into a zeroed UInt64 (memcpy, as ClickHouse's hashes of a T)."""
        assert self.raw is not None
        n, width = self.raw.shape
        padded = np.zeros((n, 8), np.uint8)
        padded[:, :width] = self.raw
        return padded.view("<u8").reshape(n)

    def words(self) -> np.ndarray:
        assert self.raw is not None
        return np.ascontiguousarray(self.raw).view("<u8")


def _column(dt: DataType, arr: pa.Array | pa.ChunkedArray) -> _Column:
    kind = _kind(dt)
    assert kind is not None
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks() if arr.num_chunks != 1 else arr.chunk(0)
    if pa.types.is_dictionary(arr.type):
        arr = arr.dictionary_decode()
    arr = coerce(dt, arr, "argument")
    if kind.name == "string":
        offsets, data = string_buffers(arr)
        return _Column(kind, data=np.ascontiguousarray(data, np.uint8), offsets=offsets)
    stored = np.ascontiguousarray(fixed_storage(dt, arr, "argument"))
    n = len(arr)
    raw = stored.view(np.uint8).reshape(n, -1) if n else np.zeros((0, kind.width or 1), np.uint8)
    return _Column(kind, raw=raw)


def _float_bits(col: _Column) -> np.ndarray:
    """A float's bits, zero-extended to 64 (26.9 takes -0.0 as its own bits: no normalization)."""
    return col.zero_extended()


def _variadic64(cols: Sequence[_Column]) -> np.ndarray:
    """UniqVariadicHash<false>: CityHash64 of each argument's bytes, chained by Hash128to64."""
    k = _kernels()
    hashed = k.cityhash64_rows(*cols[0].bytes_and_offsets())
    for col in cols[1:]:
        hashed = k.hash128_to_64(k.cityhash64_rows(*col.bytes_and_offsets()), hashed)
    return hashed


def _join(pieces: Sequence[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """Per row, the bytes of every piece back to back, as (data, offsets n+1)."""
    joined = concat_rows(pieces).cast(pa.large_binary())
    buffers = joined.buffers()
    offsets = np.frombuffer(buffers[1], np.int64)[:len(joined) + 1].copy()
    data = np.frombuffer(buffers[2], np.uint8) if buffers[2] is not None else np.zeros(0, np.uint8)
    return np.ascontiguousarray(data[:int(offsets[-1])]), offsets


def _variadic128(cols: Sequence[_Column]) -> tuple[np.ndarray, np.ndarray]:
    """UniqVariadicHash<true>: SipHash-128 over each argument's updateHashWithValue bytes."""
    pieces = []
    for col in cols:
        data, offsets = col.bytes_and_offsets()
        if col.kind.name == "string":
            sizes = (np.diff(offsets) + 1).astype("<u8")
            pieces.append((sizes.view(np.uint8), np.arange(len(sizes) + 1, dtype=np.int64) * 8))
            pieces.append((data, offsets))
            pieces.append((np.zeros(len(sizes), np.uint8), np.arange(len(sizes) + 1, dtype=np.int64)))
        else:
            pieces.append((data, offsets))
    return _kernels().siphash128_rows(*_join(pieces))


# -------------------------------------------------------------------------------------- the functions

@dataclass(frozen=True)
class _Spec:
    function: str
    args: tuple[DataType, ...]
    precision: int = 0  # uniqCombined's K
    limit: int = 0  # groupUniqArray's max_size (0: none)


def _plain_args(dt: AggregateFunction) -> tuple[DataType, ...]:
    return tuple(a.inner if isinstance(a, Nullable) else a for a in dt.arguments)


def builder(dt: AggregateFunction) -> StateBuilder | None:
    """The builder of `dt`'s states when it is of this family and its layout is known, else None."""
    if dt.function not in _FUNCTIONS or dt.version is not None:
        return None
    args = _plain_args(dt)
    plain = AggregateFunction(dt.function, args, dt.parameters) if args != dt.arguments else dt
    if state_layout(plain) is None or not args or any(_kind(a) is None for a in args):
        return None
    if dt.function == "groupUniqArray" and len(args) != 1:
        return None
    spec = _Spec(dt.function, args,
                 precision=int(dt.parameters[0]) if dt.parameters and dt.function.startswith("uniqCombined") else 17,
                 limit=int(dt.parameters[0]) if dt.parameters and dt.function == "groupUniqArray" else 0)
    family = _FAMILIES[dt.function]
    return StateBuilder(states=lambda _dt, arrays, starts, n: family[0](spec, arrays, starts, n),
                        combine=lambda _dt, states, starts: family[1](spec, states, starts))


def _columns(spec: _Spec, arrays: Sequence[pa.Array]) -> list[_Column]:
    return [_column(a, arr) for a, arr in zip(spec.args, arrays, strict=True)]


def _single(spec: _Spec) -> _Kind | None:
    """The kind of the one argument when ClickHouse takes it as itself (not the variadic hash)."""
    if len(spec.args) != 1:
        return None
    kind = _kind(spec.args[0])
    return None if kind is None or kind.name == "decimal" else kind


# --------------------------------------------------------------------------------------------- pieces

def _counts_piece(ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    counts = np.diff(np.concatenate([[0], ends])).astype(np.uint64)
    return encode_varuints(counts)


def _byte_piece(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return values.astype(np.uint8), np.arange(len(values) + 1, dtype=np.int64)


def _fixed_piece(values: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Group g's rows of `values` ((n, width) uint8), ending at ends[g], back to back."""
    width = values.shape[1] if values.ndim == 2 else values.dtype.itemsize
    data = np.ascontiguousarray(values).view(np.uint8).reshape(-1)
    return data, np.concatenate([[0], ends]).astype(np.int64) * width


def _keep(piece: tuple[np.ndarray, np.ndarray], mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The piece with the rows not in `mask` emptied."""
    data, offsets = piece
    lengths = np.diff(offsets) * mask
    starts = offsets[:-1][mask.astype(bool)]
    kept = lengths[mask.astype(bool)]
    new_offsets = np.zeros(len(lengths) + 1, np.int64)
    np.cumsum(lengths, out=new_offsets[1:])
    if kept.sum() == 0:
        return np.zeros(0, np.uint8), new_offsets
    firsts = np.zeros(len(kept), np.int64)
    np.cumsum(kept[:-1], out=firsts[1:])
    index = np.repeat(starts - firsts, kept) + np.arange(int(kept.sum()), dtype=np.int64)
    return data[index], new_offsets


def _state_buffers(states: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    if isinstance(states, pa.ChunkedArray):
        states = states.combine_chunks()
    offsets, data = string_buffers(states)
    return np.ascontiguousarray(data, np.uint8), offsets


def _corrupt(spec: _Spec, state: int) -> CorruptPartError:
    return CorruptPartError(f"state {state} of {spec.function} is not a state of "
                            f"{AggregateFunction(spec.function, spec.args, ()).to_clickhouse()}")


def _gather(data: np.ndarray, starts: np.ndarray, counts: np.ndarray, width: int) -> np.ndarray:
    """The counts[i] values of `width` bytes from data[starts[i]] of each state, as (total, width)."""
    total = int(counts.sum())
    firsts = np.zeros(len(counts), np.int64)
    np.cumsum(counts[:-1], out=firsts[1:])
    base = np.repeat(starts - firsts * width, counts) + np.arange(total, dtype=np.int64) * width
    return data[base[:, None] + np.arange(width, dtype=np.int64)]


# ------------------------------------------------------------------------------------------------ uniq

def _uniq_hashes(spec: _Spec, cols: list[_Column]) -> np.ndarray:
    """The 32-bit hash UniquesHashSet keeps for each row."""
    k = _kernels()
    kind = _single(spec)
    if kind is None:
        return _variadic64(cols) & _M32
    col = cols[0]
    if kind.name == "int":
        value = col.as_u64()
    elif kind.name == "float":
        value = _float_bits(col)
    elif kind.name in ("wide", "uuid"):
        words = col.words()
        value = k.int_hash64_array(np.bitwise_xor.reduce(words, axis=1))
    else:
        value = k.cityhash64_rows(*col.bytes_and_offsets())
    return k.int_hash64_array(value) & _M32


def _uniq_states(spec: _Spec, arrays: Sequence[pa.Array], starts: np.ndarray, n: int) -> pa.BinaryArray:
    hashes = _uniq_hashes(spec, _columns(spec, arrays))
    skips, values, ends = _kernels().uniq_build(hashes, np.asarray(starts, np.int64), n)
    return concat_rows([_byte_piece(skips), _counts_piece(ends), _fixed_piece(values.astype("<u4"), ends)])


def _uniq_combine(spec: _Spec, states: pa.Array, starts: np.ndarray) -> pa.BinaryArray:
    k = _kernels()
    data, offsets = _state_buffers(states)
    counts, begins, bad = k.parse_counted(data, offsets[:-1], offsets[1:], 1, 4)
    if bad >= 0:
        raise _corrupt(spec, bad)
    skips = data[offsets[:-1]].astype(np.int64) if len(data) else np.zeros(len(counts), np.int64)
    bad_state = (skips > 18) | (counts > 1 << 16)
    if bad_state.any():
        raise _corrupt(spec, int(np.argmax(bad_state)))
    values = _gather(data, begins, counts, 4).copy().view("<u4").reshape(-1).astype(np.uint64)
    out_skips, merged, ends = k.uniq_merge(skips, values, np.cumsum(counts), np.asarray(starts, np.int64))
    return concat_rows([_byte_piece(out_skips), _counts_piece(ends), _fixed_piece(merged.astype("<u4"), ends)])


# ------------------------------------------------------------------------------------ hash-set functions
# uniqExact and groupUniqArray keep a HashSet: the keys (fixed-width bytes or strings), each key's hash
# and whether it is the zero key; equal keys get equal ids (dictionary encoding).

@dataclass
class _Keys:
    """Distinct keys: fixed-width (`fixed`, (m, width) uint8) or strings (`data`/`offsets`), their
    hashes and zero flags; `ids` maps rows to them."""

    ids: np.ndarray
    hashes: np.ndarray
    zeros: np.ndarray
    fixed: np.ndarray | None = None
    data: np.ndarray | None = None
    offsets: np.ndarray | None = None


def _encode_fixed(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(ids per row, distinct values) of (n, width) uint8 values."""
    n, width = values.shape
    arr = pa.Array.from_buffers(pa.binary(width), n, [None, pa.py_buffer(np.ascontiguousarray(values))])
    encoded = arr.dictionary_encode()
    ids = np.asarray(encoded.indices, np.int64) if n else np.zeros(0, np.int64)
    dictionary = encoded.dictionary
    m = len(dictionary)
    distinct = np.frombuffer(dictionary.buffers()[1], np.uint8)[dictionary.offset * width:(dictionary.offset + m) * width]
    return ids, distinct.reshape(m, width) if m else np.zeros((0, width), np.uint8)


def _encode_strings(data: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    arr = pa.Array.from_buffers(pa.large_binary(), len(offsets) - 1,
                                [None, pa.py_buffer(np.ascontiguousarray(offsets, np.int64)), pa.py_buffer(data)])
    encoded = arr.dictionary_encode()
    ids = np.asarray(encoded.indices, np.int64) if len(arr) else np.zeros(0, np.int64)
    d_offsets, d_data = string_buffers(encoded.dictionary)
    return ids, np.ascontiguousarray(d_data, np.uint8), d_offsets


@dataclass(frozen=True)
class _SetForm:
    """How one function keeps its HashSet: the key width (0: strings), the initial size degree, the
    hash of distinct keys, and how ClickHouse reads and merges the set."""

    width: int
    initial: int
    hash_keys: Callable[[_Keys], np.ndarray]
    table_merge: int  # 1: HashSetTable::merge; 0: key-by-key insertion
    read_reserves: bool


def _crc_hash(width: int) -> Callable[[_Keys], np.ndarray]:
    def hashed(keys: _Keys) -> np.ndarray:
        assert keys.fixed is not None
        padded = np.zeros((len(keys.fixed), max(8, width + (-width) % 8)), np.uint8)
        padded[:, :width] = keys.fixed
        return _kernels().crc_words_array(padded.view("<u8"))
    return hashed


def _low_word(keys: _Keys) -> np.ndarray:
    assert keys.fixed is not None
    return np.ascontiguousarray(keys.fixed[:, :8]).view("<u8").reshape(-1)


def _float_hash(width: int) -> Callable[[_Keys], np.ndarray]:
    """groupUniqArray's DefaultHash of a float: intHash64 of its bits."""
    def hashed(keys: _Keys) -> np.ndarray:
        assert keys.fixed is not None
        padded = np.zeros((len(keys.fixed), 8), np.uint8)
        padded[:, :width] = keys.fixed
        return _kernels().int_hash64_array(padded.view("<u8").reshape(-1))
    return hashed


def _string_hash(keys: _Keys) -> np.ndarray:
    assert keys.data is not None and keys.offsets is not None
    return _kernels().string_crc_hash(keys.data, keys.offsets)


def _set_form(spec: _Spec) -> _SetForm:
    kind = _single(spec)
    if spec.function == "uniqExact":
        if kind is not None and kind.name in ("int", "float", "wide", "uuid"):
            return _SetForm(kind.width, 4, _crc_hash(kind.width), 1, True)
        return _SetForm(16, 3, _low_word, 1, True)
    # groupUniqArray keeps numbers, Date and DateTime as themselves, any other value as its bytes.
    # (One-byte numbers are kept in a lookup table: see _byte_states.)
    kind = _kind(spec.args[0])
    assert kind is not None
    if kind.name == "float":
        return _SetForm(kind.width, 4, _float_hash(kind.width), 0 if spec.limit else 1, True)
    if kind.name in ("int", "wide") and spec.args[0].family != "Date32":
        return _SetForm(kind.width, 4, _crc_hash(kind.width), 0 if spec.limit else 1, True)
    return _SetForm(0, 3, _string_hash, 0, False)


def _set_keys(spec: _Spec, form: _SetForm, cols: list[_Column]) -> _Keys:
    """The keys of each row as the set keeps them."""
    kind = _single(spec)
    if form.width == 0:
        ids, data, offsets = _encode_strings(*cols[0].bytes_and_offsets())
        keys = _Keys(ids, np.zeros(0, np.uint64), np.zeros(0, bool), data=data, offsets=offsets)
        keys.zeros = np.diff(offsets) == 0
    else:
        if spec.function == "uniqExact" and (kind is None or kind.name in ("string", "fixed")):
            if kind is None:
                low, high = _variadic128(cols)
            else:
                low, high = _kernels().siphash128_rows(*cols[0].bytes_and_offsets())
            values = np.stack([low, high], axis=1).astype("<u8").view(np.uint8).reshape(-1, 16)
        else:
            assert cols[0].raw is not None
            values = cols[0].raw
        ids, distinct = _encode_fixed(np.ascontiguousarray(values))
        keys = _Keys(ids, np.zeros(0, np.uint64), np.asarray(~distinct.any(axis=1), bool), fixed=distinct)
    keys.hashes = form.hash_keys(keys)
    return keys


def _set_pieces(form: _SetForm, keys: _Keys, order: np.ndarray, ends: np.ndarray) -> pa.BinaryArray:
    if form.width:
        assert keys.fixed is not None
        return concat_rows([_counts_piece(ends), _fixed_piece(keys.fixed[order], ends)])
    assert keys.data is not None and keys.offsets is not None
    lengths = np.diff(keys.offsets)[order]
    item_offsets = np.zeros(len(order) + 1, np.int64)
    np.cumsum(lengths, out=item_offsets[1:])
    gathered = np.zeros(0, np.uint8)
    if len(order) and int(lengths.sum()):
        index = np.repeat(keys.offsets[:-1][order] - item_offsets[:-1], lengths) + np.arange(int(lengths.sum()))
        gathered = keys.data[index]
    encoded, encoded_offsets = encode_classic(item_offsets, gathered)
    group_offsets = encoded_offsets[np.concatenate([[0], ends]).astype(np.int64)]
    return concat_rows([_counts_piece(ends), (encoded, group_offsets)])


def _one_byte(spec: _Spec) -> bool:
    """groupUniqArray of a one-byte number keeps a 256-cell lookup table (FixedHashSet): its
    values come out in the order of their unsigned bytes."""
    kind = _kind(spec.args[0])
    return spec.function == "groupUniqArray" and kind is not None and kind.name == "int" and kind.width == 1


def _byte_sets(groups: np.ndarray, values: np.ndarray, limit: int, count: int) -> tuple[np.ndarray, np.ndarray]:
    """Each group's distinct byte values (at most `limit`, the first ones in sequence order, when
    limit > 0), sorted; returns (values, ends per group)."""
    pairs = groups.astype(np.int64) * 256 + values.astype(np.int64)
    distinct, first = np.unique(pairs, return_index=True)
    if limit > 0 and len(distinct):
        by_first = np.argsort(first, kind="stable")
        group_of = distinct[by_first] // 256
        order = np.argsort(group_of, kind="stable")
        ranked = by_first[order]
        sorted_groups = distinct[ranked] // 256
        starts = np.searchsorted(sorted_groups, sorted_groups, side="left")
        keep = np.zeros(len(distinct), bool)
        keep[ranked] = np.arange(len(ranked)) - starts < limit
        distinct = distinct[keep]
    ends = np.searchsorted(distinct // 256, np.arange(count), side="right")
    return (distinct % 256).astype(np.uint8), ends.astype(np.int64)


def _set_states(spec: _Spec, arrays: Sequence[pa.Array], starts: np.ndarray, n: int) -> pa.BinaryArray:
    if _one_byte(spec):
        col = _columns(spec, arrays)[0]
        assert col.raw is not None
        groups = np.repeat(np.arange(len(starts)), np.diff(np.append(np.asarray(starts, np.int64), n)))
        values, ends = _byte_sets(groups, col.raw[:, 0], spec.limit, len(starts))
        return concat_rows([_counts_piece(ends), _fixed_piece(values, ends)])
    form = _set_form(spec)
    keys = _set_keys(spec, form, _columns(spec, arrays))
    order, ends = _kernels().set_build(keys.ids, keys.hashes[keys.ids], keys.zeros[keys.ids],
                                       np.asarray(starts, np.int64), n, form.initial, 23, spec.limit)
    return _set_pieces(form, keys, order, ends)


def _set_combine(spec: _Spec, states: pa.Array, starts: np.ndarray) -> pa.BinaryArray:
    k = _kernels()
    data, offsets = _state_buffers(states)
    if _one_byte(spec):
        counts, begins, bad = k.parse_counted(data, offsets[:-1], offsets[1:], 0, 1)
        if bad >= 0:
            raise _corrupt(spec, bad)
        state_groups = np.repeat(np.arange(len(starts)), np.diff(np.append(np.asarray(starts, np.int64), len(counts))))
        values, ends = _byte_sets(np.repeat(state_groups, counts), _gather(data, begins, counts, 1)[:, 0], spec.limit,
                                  len(starts))
        return concat_rows([_counts_piece(ends), _fixed_piece(values, ends)])
    form = _set_form(spec)
    if form.width:
        counts, begins, bad = k.parse_counted(data, offsets[:-1], offsets[1:], 0, form.width)
        if bad >= 0:
            raise _corrupt(spec, bad)
        ids, distinct = _encode_fixed(np.ascontiguousarray(_gather(data, begins, counts, form.width)))
        keys = _Keys(ids, np.zeros(0, np.uint64), np.asarray(~distinct.any(axis=1), bool), fixed=distinct)
    else:
        counts, item_starts, lengths, bad = k.parse_strings(data, offsets[:-1], offsets[1:])
        if bad >= 0:
            raise _corrupt(spec, bad)
        item_offsets = np.zeros(len(lengths) + 1, np.int64)
        np.cumsum(lengths, out=item_offsets[1:])
        index = np.repeat(item_starts - item_offsets[:-1], lengths) + np.arange(int(lengths.sum()), dtype=np.int64)
        ids, d_data, d_offsets = _encode_strings(np.ascontiguousarray(data[index]), item_offsets)
        keys = _Keys(ids, np.zeros(0, np.uint64), np.diff(d_offsets) == 0, data=d_data, offsets=d_offsets)
    keys.hashes = form.hash_keys(keys)
    order, ends = k.set_merge(keys.ids, keys.hashes[keys.ids], keys.zeros[keys.ids], np.cumsum(counts),
                              np.asarray(starts, np.int64), form.initial, 23, spec.limit, form.read_reserves,
                              form.table_merge)
    return _set_pieces(form, keys, order, ends)


# --------------------------------------------------------------------------- uniqCombined and uniqHLL12

@dataclass(frozen=True)
class _Sketch:
    """uniqCombined's or uniqHLL12's form: the key width (bytes), the HLL's precision and hash bits,
    the largest medium set (0: none) and the bytes of the HLL image."""

    key_width: int
    precision: int
    hash_bits: int
    medium_max: int

    @property
    def image_len(self) -> int:
        buckets = 1 << self.precision
        max_rank = self.hash_bits - self.precision + 1
        return (buckets * _HLL_BITS[self.hash_bits] + 7) // 8 + 4 * (max_rank + 1) + (2 if buckets < 65536 else 4)


def _sketch(spec: _Spec) -> _Sketch:
    kind = _single(spec)
    if spec.function == "uniqHLL12":
        width = kind.width if kind is not None and kind.name in ("int", "float") else 8
        return _Sketch(width, 12, 32, 0)
    wide = spec.function == "uniqCombined64" or (kind is not None and kind.name in ("string", "fixed"))
    width = 8 if wide else 4
    return _Sketch(width, spec.precision, 8 * width, 1 << (spec.precision - 5 + (1 if width == 4 else 0)))


def _combined_keys(spec: _Spec, sketch: _Sketch, cols: list[_Column]) -> tuple[np.ndarray, np.ndarray]:
    """(key, HLL hash) of each row."""
    k = _kernels()
    kind = _single(spec)
    if spec.function == "uniqHLL12":
        if kind is None:
            key = _variadic64(cols)
            return key, key & _M32
        col = cols[0]
        if kind.name == "int":
            key = col.zero_extended()
        elif kind.name == "float":
            bits = _float_bits(col)
            # The small set keeps the bits converted to the float type (static_cast of the integer).
            key = (bits.astype(np.float32).view("<u4").astype(np.uint64) if kind.width == 4
                   else bits.astype(np.float64).view("<u8"))
        elif kind.name in ("wide", "uuid"):
            key = k.int_hash64_array(np.bitwise_xor.reduce(col.words(), axis=1))
        else:
            key = k.cityhash64_rows(*col.bytes_and_offsets())
        return key, k.int_hash32_array(key)
    if kind is None:
        key = _variadic64(cols)
    else:
        col = cols[0]
        if kind.name == "int":
            key = k.int_hash64_array(col.as_u64())
        elif kind.name == "float":
            key = k.int_hash64_array(_float_bits(col))
        elif kind.name == "wide" and spec.args[0].family == "UInt128":
            key = k.siphash64_words(col.words())
        elif kind.name in ("wide", "uuid"):
            key = k.int_hash64_array(np.bitwise_xor.reduce(col.words(), axis=1))
        else:
            key = k.cityhash64_rows(*col.bytes_and_offsets())
    if sketch.key_width == 4:
        key = key & _M32
    return key, key


def _hll12_key_hash(spec: _Spec, keys: np.ndarray) -> np.ndarray:
    """The HLL hash of uniqHLL12's kept keys (when a state's small set is merged)."""
    if _single(spec) is None:
        return keys & _M32
    return _kernels().int_hash32_array(keys)


def _sketch_pieces(spec: _Spec, sketch: _Sketch, kinds: np.ndarray, keys: np.ndarray, ends: np.ndarray,
                   images: np.ndarray) -> pa.BinaryArray:
    large = kinds == 3
    if spec.function == "uniqHLL12":
        head = _byte_piece(large.astype(np.uint8))
    else:
        head = _byte_piece(kinds.astype(np.uint8))
    counted = ~large
    # (the images of the large sets only, in group order: a dense row per group would hold an image
    # of tens of kilobytes for every small set too)
    image_offsets = np.zeros(len(kinds) + 1, np.int64)
    np.cumsum(large.astype(np.int64) * sketch.image_len, out=image_offsets[1:])
    width = sketch.key_width
    stored = keys.astype(f"<u{width}")
    return concat_rows([head, _keep(_counts_piece(ends), counted), _fixed_piece(stored, ends),
                        (np.ascontiguousarray(images, np.uint8).reshape(-1), image_offsets)])


def _sketch_states(spec: _Spec, arrays: Sequence[pa.Array], starts: np.ndarray, n: int) -> pa.BinaryArray:
    sketch = _sketch(spec)
    keys, hlls = _combined_keys(spec, sketch, _columns(spec, arrays))
    starts = np.asarray(starts, np.int64)
    kinds, kept, ends, images = _kernels().combined_build(
        keys.astype(np.uint64), hlls.astype(np.uint64), starts, n, sketch.medium_max, sketch.precision,
        sketch.hash_bits, sketch.image_len, _large_bound(starts, n, sketch))
    return _sketch_pieces(spec, sketch, kinds, kept, ends, images)


def _large_bound(starts: np.ndarray, n: int, sketch: _Sketch) -> int:
    """How many groups can be large: those of more rows than the largest small or medium set
    (a row past a full set turns it large, even a repeated value)."""
    sizes = np.diff(np.append(starts, n))
    return int((sizes > (sketch.medium_max or 16)).sum())


def _sketch_combine(spec: _Spec, states: pa.Array, starts: np.ndarray) -> pa.BinaryArray:
    k = _kernels()
    sketch = _sketch(spec)
    data, offsets = _state_buffers(states)
    n = len(offsets) - 1
    heads = data[offsets[:-1]] if n and len(data) else np.zeros(n, np.uint8)
    if (np.diff(offsets) == 0).any():
        raise _corrupt(spec, int(np.argmax(np.diff(offsets) == 0)))
    if spec.function == "uniqHLL12":
        if (heads > 1).any():
            raise _corrupt(spec, int(np.argmax(heads > 1)))
        kinds = np.where(heads == 1, 3, 1).astype(np.int8)
    else:
        if ((heads < 1) | (heads > 3)).any():
            raise _corrupt(spec, int(np.argmax((heads < 1) | (heads > 3))))
        kinds = heads.astype(np.int8)
    large = kinds == 3
    bad_image = large & (np.diff(offsets) != 1 + sketch.image_len)
    if bad_image.any():
        raise _corrupt(spec, int(np.argmax(bad_image)))
    counts = np.zeros(n, np.int64)
    begins = np.zeros(n, np.int64)
    listed = np.nonzero(~large)[0]
    if len(listed):
        c, b, bad = k.parse_counted(data, offsets[:-1][listed], offsets[1:][listed], 1, sketch.key_width)
        if bad >= 0:
            raise _corrupt(spec, int(listed[bad]))
        limit = np.where(kinds[listed] == 1, 16, max(sketch.medium_max, 16))
        if (c > limit).any():
            raise _corrupt(spec, int(listed[np.argmax(c > limit)]))
        counts[listed] = c
        begins[listed] = b
    keys = _gather(data, begins, counts, sketch.key_width).copy().view(f"<u{sketch.key_width}").reshape(-1) \
        .astype(np.uint64)
    hlls = _hll12_key_hash(spec, keys) if spec.function == "uniqHLL12" else keys
    registers = np.zeros((int(large.sum()), 1 << sketch.precision), np.uint8)
    for row, state in enumerate(np.nonzero(large)[0]):
        image = data[offsets[state] + 1:offsets[state + 1]]
        k.hll_registers(image, sketch.precision, sketch.hash_bits, registers[row])
    group_starts = np.asarray(starts, np.int64)
    # The groups that may end large: holding a large state, or more keys in all than a medium set holds.
    held = np.where(large, max(sketch.medium_max, 16) + 1, counts)
    bound = int((np.add.reduceat(held, group_starts) > max(sketch.medium_max, 16)).sum()) if n else 0
    out_kinds, kept, ends, images = k.combined_merge(kinds, keys, hlls.astype(np.uint64), np.cumsum(counts), registers,
                                                     group_starts, sketch.medium_max, sketch.precision,
                                                     sketch.hash_bits, sketch.image_len, bound)
    return _sketch_pieces(spec, sketch, out_kinds, kept, ends, images)


_Family = tuple[Callable[[_Spec, Sequence[pa.Array], np.ndarray, int], pa.BinaryArray],
                Callable[[_Spec, pa.Array, np.ndarray], pa.BinaryArray]]
_FAMILIES: dict[str, _Family] = {
    "uniq": (_uniq_states, _uniq_combine),
    "uniqExact": (_set_states, _set_combine),
    "groupUniqArray": (_set_states, _set_combine),
    "uniqHLL12": (_sketch_states, _sketch_combine),
    "uniqCombined": (_sketch_states, _sketch_combine),
    "uniqCombined64": (_sketch_states, _sketch_combine),
}

"""Values of each leaf type ↔ bytes: numbers, Bool, dates, DateTime(64), Decimal, UUID, FixedString,
Enum, String (ClickHouse's `SerializationNumber`, `SerializationString`, `SerializationDecimal`, ...).

Arrow → bytes (`fixed_storage`, `encode_classic`, `string_buffers`), bytes → Arrow
(`fixed_to_arrow`, `read_classic`, `strings_from_parts`), the safe cast of an input column to its
type's Arrow type (`coerce`), default values, and the read position in a decompressed stream
(`Cursor`). Composite types (Nullable, Array, Map, Tuple) are built from these by `serialization`.
format_spec/types.md describes every encoding.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from spark_mergetree.errors import CorruptPartError, SchemaMismatchError, UnsupportedError
from spark_mergetree.format.aggregate_states import empty_state
from spark_mergetree.format.compiled import lazy_njit
from spark_mergetree.format.conform import fixed_bytes, uuid_text, with_validity
from spark_mergetree.format.numpy_views import as_numpy
from spark_mergetree.format.types import (
    AggregateFunction,
    DataType,
    DateTime,
    DateTime64,
    Decimal,
    Enum,
    FixedString,
    Primitive,
    Time,
    Time64,
    datetime64_arrow_unit,
    time_ticks,
    to_arrow,
)

__all__ = [
    "Cursor", "is_string", "value_width", "fixed_width", "combine", "coerce", "string_buffers", "fixed_storage",
    "varuint_sizes", "encode_varuints", "encode_classic", "strings_from_parts", "list_parts", "default_scalar", "read_classic",
    "apply_nulls", "fixed_to_arrow",
]


def is_string(dt: DataType) -> bool:
    return isinstance(dt, Primitive) and dt.name == "String"


def value_width(dt: DataType) -> int | None:
    """Bytes per value on disk of a fixed-width type, None for any other type."""
    try:
        return fixed_width(dt)
    except UnsupportedError:
        return None


def fixed_width(dt: DataType) -> int:
    """Bytes per value on disk; UnsupportedError for a type of variable width (String)."""
    if isinstance(dt, Primitive):
        if dt.width is None:
            raise UnsupportedError(f"{dt.to_clickhouse()} has no fixed width")
        return dt.width
    if isinstance(dt, FixedString):
        return dt.length
    if isinstance(dt, DateTime):
        return 4
    if isinstance(dt, DateTime64):
        return 8
    if isinstance(dt, Time):
        return 4
    if isinstance(dt, Time64):
        return 8
    if isinstance(dt, Decimal):
        return dt.width
    if isinstance(dt, Enum):
        return dt.bits // 8
    raise UnsupportedError(f"{dt.to_clickhouse()} has no fixed width")


def combine(arr: pa.Array | pa.ChunkedArray) -> pa.Array:
    if isinstance(arr, pa.ChunkedArray):
        return arr.combine_chunks() if arr.num_chunks != 1 else arr.chunk(0)
    return arr


def coerce(dt: DataType, arr: pa.Array, column: str) -> pa.Array:
    """Cast an input column to the Arrow type of `dt` (safe casts only: no silent truncation)."""
    target = to_arrow(dt)
    if arr.type == target:
        return arr
    if is_string(dt) and (pa.types.is_binary(arr.type) or pa.types.is_large_binary(arr.type)
                           or pa.types.is_large_string(arr.type)):
        return arr  # String holds any bytes: no UTF-8 check on the way in
    if pa.types.is_dictionary(arr.type):
        arr = arr.dictionary_decode()
        if arr.type == target:
            return arr
    if isinstance(dt, Primitive) and dt.name == "UUID" and pa.types.is_fixed_size_binary(arr.type) \
            and arr.type.byte_width == 16:
        return arr  # raw RFC 4122 bytes are accepted as they are
    if isinstance(dt, FixedString) and (pa.types.is_binary(arr.type) or pa.types.is_string(arr.type)
                                        or pa.types.is_large_binary(arr.type) or pa.types.is_large_string(arr.type)):
        return _pad_fixed(arr, dt.length, column)
    try:
        return arr.cast(target)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
        raise SchemaMismatchError(
            f"column {column!r}: cannot store Arrow {arr.type} as {dt.to_clickhouse()} ({exc})") from exc


def string_buffers(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(offsets int64 from 0, bytes uint8) of a string/binary array, NULL entries empty."""
    if arr.null_count:
        arr = arr.fill_null(pa.scalar(b"", pa.binary()).cast(arr.type))
    if pa.types.is_string(arr.type) or pa.types.is_binary(arr.type):
        width = np.int32
    elif pa.types.is_large_string(arr.type) or pa.types.is_large_binary(arr.type):
        width = np.int64
    else:
        arr = arr.cast(pa.large_binary())
        width = np.int64
    buffers = arr.buffers()
    offsets = np.frombuffer(buffers[1], dtype=width)[arr.offset: arr.offset + len(arr) + 1].astype(np.int64)
    start, stop = int(offsets[0]), int(offsets[-1])
    data = np.frombuffer(buffers[2], dtype=np.uint8)[start:stop] if buffers[2] is not None and stop > start \
        else np.zeros(0, np.uint8)
    return (offsets - start if start else offsets), data


def _pad_fixed(arr: pa.Array, length: int, column: str) -> pa.Array:
    offsets, data = string_buffers(arr)
    lengths = np.diff(offsets)
    if len(lengths) and lengths.max() > length:
        row = int(np.argmax(lengths > length))
        raise SchemaMismatchError(
            f"column {column!r}: value at row {row} is {int(lengths[row])} bytes, longer than FixedString({length})")
    out = np.zeros(len(arr) * length, np.uint8)
    dest = np.arange(len(data), dtype=np.int64) + np.repeat(np.arange(len(arr), dtype=np.int64) * length - offsets[:-1], lengths)
    out[dest] = data
    return with_validity(pa.Array.from_buffers(pa.binary(length), len(arr), [None, pa.py_buffer(out)]), arr)


_UUID_DASHES = (8, 13, 18, 23)
_UUID_HEX_POS = np.array([i for i in range(36) if i not in _UUID_DASHES])


def _uuid_storage(arr: pa.Array, column: str) -> np.ndarray:
    """UUIDs (36-char text or 16 raw bytes) → (n, 16) uint8 in ClickHouse's order."""
    n = len(arr)
    if pa.types.is_fixed_size_binary(arr.type):
        raw = fixed_bytes(arr, 16)
    else:
        offsets, data = string_buffers(arr)
        lengths = np.diff(offsets)
        nulls = as_numpy(arr.is_null()) if arr.null_count else np.zeros(n, bool)
        bad = (lengths != 36) & ~nulls
        if bad.any():
            row = int(np.argmax(bad))
            raise SchemaMismatchError(f"column {column!r}: row {row} is not a 36-character UUID")
        text = np.zeros((n, 36), np.uint8)
        text[~nulls] = data.reshape(-1, 36) if len(data) else text[~nulls]
        text[nulls] = np.frombuffer(b"00000000-0000-0000-0000-000000000000", np.uint8)
        digits = text[:, _UUID_HEX_POS].astype(np.int16)
        lower = digits | 0x20
        value = np.where((digits >= 48) & (digits <= 57), digits - 48, np.where((lower >= 97) & (lower <= 102), lower - 87, -1))
        dashes_ok = (text[:, list(_UUID_DASHES)] == ord("-")).all(axis=1)
        bad = (value < 0).any(axis=1) | ~dashes_ok
        if bad.any():
            row = int(np.argmax(bad))
            raise SchemaMismatchError(f"column {column!r}: row {row} is not a UUID")
        raw = ((value[:, 0::2] << 4) | value[:, 1::2]).astype(np.uint8)
    # ClickHouse stores each 8-byte half as a little-endian UInt64 of the big-endian text order.
    return np.ascontiguousarray(np.concatenate([raw[:, 7::-1], raw[:, 15:7:-1]], axis=1))


def _uuid_to_arrow(raw: np.ndarray) -> pa.Array:
    return uuid_text(np.concatenate([raw[:, 7::-1], raw[:, 15:7:-1]], axis=1))


def _decimal_words(arr: pa.Array, words: int) -> np.ndarray:
    """Arrow decimal128/256 values as (n, words) little-endian uint64 two's complement."""
    n = len(arr)
    return np.frombuffer(arr.buffers()[1], "<u8")[arr.offset * words:(arr.offset + n) * words].reshape(n, words)


def fixed_storage(dt: DataType, arr: pa.Array, column: str) -> np.ndarray:
    """Values of a fixed-width type as a numpy array whose bytes are the stream bytes; NULL → default."""
    if isinstance(dt, Primitive):
        name = dt.name
        if name == "UUID":
            return _uuid_storage(arr, column)
        if name in ("Int128", "UInt128", "Int256", "UInt256"):
            arr = arr.fill_null(0) if arr.null_count else arr
            words = _decimal_words(arr, 4)
            signed = name.startswith("Int")
            if name.endswith("256"):
                if not signed and (words[:, 3] >> np.uint64(63)).any():
                    raise SchemaMismatchError(f"column {column!r}: negative value for {name}")
                return np.ascontiguousarray(words)
            # The value fits 128 bits iff the upper half only repeats the sign (signed) or is zero.
            sign = (words[:, 1] >> np.uint64(63)).astype(bool) if signed else np.zeros(len(words), bool)
            expect = np.where(sign, np.uint64(0xFFFFFFFFFFFFFFFF), np.uint64(0))
            ok = (words[:, 2:] == expect[:, None]).all(axis=1)
            if not ok.all():
                row = int(np.argmax(~ok))
                raise SchemaMismatchError(f"column {column!r}: value at row {row} is out of range for {name}")
            return np.ascontiguousarray(words[:, :2])
        if name == "Date":
            days = as_numpy(arr.fill_null(0).cast(pa.int32()) if arr.null_count else arr.cast(pa.int32()))
            if len(days) and (days.min() < 0 or days.max() > 65535):
                row = int(np.argmax((days < 0) | (days > 65535)))
                raise SchemaMismatchError(f"column {column!r}: row {row} is outside Date's range 1970-01-01..2149-06-06")
            return days.astype("<u2")
        if name == "Date32":
            return as_numpy((arr.fill_null(0) if arr.null_count else arr).cast(pa.int32())).astype("<i4")
        if name == "IPv6":
            return fixed_bytes(arr, 16)
        if name == "BFloat16":
            # The upper half of the float32: what ClickHouse keeps when it converts (toward zero).
            bits = np.asarray(as_numpy(arr.fill_null(0) if arr.null_count else arr), dtype=np.float32).view("<u4")
            return (bits >> np.uint32(16)).astype("<u2")
        if name == "Bool":
            return np.asarray(as_numpy(arr.fill_null(False) if arr.null_count else arr), dtype=bool).astype(np.uint8)
        return as_numpy(arr.fill_null(0) if arr.null_count else arr)
    if isinstance(dt, FixedString):
        return fixed_bytes(arr, dt.length)
    if isinstance(dt, DateTime):
        seconds = as_numpy((arr.fill_null(0) if arr.null_count else arr).cast(pa.int64()))
        if len(seconds) and (seconds.min() < 0 or seconds.max() > 0xFFFFFFFF):
            row = int(np.argmax((seconds < 0) | (seconds > 0xFFFFFFFF)))
            raise SchemaMismatchError(f"column {column!r}: row {row} is outside DateTime's range 1970..2106")
        return seconds.astype("<u4")
    if isinstance(dt, (Time, Time64)):
        ticks = _ticks_of(dt, arr, dt.precision if isinstance(dt, Time64) else 0, column)
        _, limit = time_ticks(dt)
        if len(ticks) and np.abs(ticks).max() > limit:
            row = int(np.argmax(np.abs(ticks) > limit))
            raise SchemaMismatchError(f"column {column!r}: row {row} is outside {dt.to_clickhouse()}'s range "
                                      "-999:59:59..999:59:59")
        return ticks.astype("<i4" if isinstance(dt, Time) else "<i8")
    if isinstance(dt, DateTime64):
        return _ticks_of(dt, arr, dt.precision, column).astype("<i8")
    if isinstance(dt, Decimal):
        words_in = 2 if dt.precision <= 38 else 4
        if arr.null_count:
            arr = arr.fill_null(pa.scalar(0, arr.type))
        words = _decimal_words(arr, words_in)
        if dt.width == 32 or dt.width == 16:
            return np.ascontiguousarray(words)
        low = words[:, 0].view("<i8")
        return low.astype("<i4") if dt.width == 4 else low.copy()
    if isinstance(dt, Enum):
        names = pa.array([name for name, _ in dt.values], pa.string())
        values = np.array([value for _, value in dt.values], np.int64)
        position = pc.index_in(arr, value_set=names)
        unknown = pc.and_(pc.is_null(position), pc.is_valid(arr))
        if pc.any(unknown).as_py():
            row = int(np.argmax(as_numpy(unknown)))
            raise SchemaMismatchError(f"column {column!r}: row {row} value {arr[row].as_py()!r} is not in {dt.to_clickhouse()}")
        # NULL maps to the Enum's first value, which is what ClickHouse stores under a NULL.
        idx = as_numpy(position.fill_null(0))
        return values[idx].astype("<i1" if dt.bits == 8 else "<i2")
    raise UnsupportedError(f"no fixed-width encoding for {dt.to_clickhouse()}")


def _ticks_of(dt: DataType, arr: pa.Array, precision: int, column: str) -> np.ndarray:
    """Arrow timestamps/durations (NULL as 0) → int64 ticks of 10^-precision seconds, refusing finer values."""
    _, factor = datetime64_arrow_unit(precision)
    ticks = as_numpy((arr.fill_null(0) if arr.null_count else arr).cast(pa.int64()))
    if factor != 1:
        if (ticks % factor).any():
            row = int(np.argmax(ticks % factor != 0))
            raise SchemaMismatchError(f"column {column!r}: row {row} has more precision than {dt.to_clickhouse()} keeps")
        ticks = ticks // factor
    return ticks


def varuint_sizes(values: np.ndarray) -> np.ndarray:
    sizes = np.ones(len(values), np.int64)
    for shift in range(7, 64, 7):
        sizes += values >= (np.uint64(1) << np.uint64(shift))
    return sizes


def encode_classic(offsets: np.ndarray, data: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Classic String encoding (varuint length + bytes per row) → (bytes, row offsets n+1)."""
    offsets = np.asarray(offsets, np.int64)
    offsets = offsets - offsets[0]  # data starts at the first row's bytes
    lengths = np.diff(offsets)
    row_offsets = np.zeros(len(offsets), np.int64)
    np.cumsum(varuint_sizes(lengths.astype(np.uint64)) + lengths, out=row_offsets[1:])
    out = np.empty(int(row_offsets[-1]), np.uint8)
    if len(out) >= COMPILED_CLASSIC_BYTES:
        _write_classic(offsets, np.ascontiguousarray(data, np.uint8), out)
    elif len(lengths):
        # Small columns skip the kernel, whose first call in a process loads numba (a fresh Spark
        # worker's first small write would pay that): a scatter through index arrays instead.
        prefixes, prefix_offsets = encode_varuints(lengths.astype(np.uint64))
        nbytes = np.diff(prefix_offsets)
        starts = row_offsets[:-1]
        out[np.arange(len(prefixes), dtype=np.int64) + np.repeat(starts - prefix_offsets[:-1], nbytes)] = prefixes
        out[np.arange(len(data), dtype=np.int64) + np.repeat(starts + nbytes - offsets[:-1], lengths)] = data
    return out, row_offsets


#: Classic String columns of at least this many encoded bytes are written by the compiled kernel.
COMPILED_CLASSIC_BYTES = 1 << 20


@lazy_njit(nogil=True)
def _write_classic(offsets: np.ndarray, data: np.ndarray, out: np.ndarray) -> None:  # pragma: no cover - compiled
    """Each row's length as a varuint, then its bytes, back to back into `out` (sized exactly).
    A copy loop: index arrays as long as the data (arange + repeat + scatter) cost ten times more."""
    position = 0
    base = offsets[0]
    for row in range(len(offsets) - 1):
        begin = offsets[row] - base
        length = offsets[row + 1] - offsets[row]
        value = length
        while value >= 0x80:
            out[position] = (value & 0x7F) | 0x80
            value >>= 7
            position += 1
        out[position] = value
        position += 1
        out[position:position + length] = data[begin:begin + length]
        position += length


def varuint_bytes(value: int) -> bytes:
    """One unsigned LEB128 integer (for a single value: `encode_varuints` is for arrays of them)."""
    if value < 0x80:
        return bytes((value,))
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def encode_varuints(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Unsigned LEB128 of each value → (bytes, offsets n+1)."""
    nbytes = varuint_sizes(values)
    offsets = np.zeros(len(values) + 1, np.int64)
    np.cumsum(nbytes, out=offsets[1:])
    out = np.empty(int(offsets[-1]), np.uint8)
    for k in range(int(nbytes.max()) if len(nbytes) else 0):
        rows = nbytes > k
        byte = (values[rows] >> np.uint64(7 * k)) & np.uint64(0x7F)
        byte |= np.where(nbytes[rows] > k + 1, np.uint64(0x80), np.uint64(0))
        out[offsets[:-1][rows] + k] = byte.astype(np.uint8)
    return out, offsets


@lazy_njit
def _scan_classic(buf: np.ndarray, start: int, n: int) -> tuple[np.ndarray, np.ndarray, int]:  # pragma: no cover - compiled
    """Find n classic strings from buf[start]: (chars start per row, lengths, end position)."""
    starts = np.empty(n, np.int64)
    lengths = np.empty(n, np.int64)
    pos = start
    size = buf.shape[0]
    for i in range(n):
        value = 0
        shift = 0
        while True:
            if pos >= size or shift > 63:
                return starts, lengths, -1 - i
            b = buf[pos]
            pos += 1
            value |= (b & 0x7F) << shift
            shift += 7
            if b < 0x80:
                break
        starts[i] = pos
        lengths[i] = value
        pos += value
        if pos > size:
            return starts, lengths, -1 - i
    return starts, lengths, pos


@lazy_njit
def _gather(buf: np.ndarray, starts: np.ndarray, lengths: np.ndarray, total: int) -> np.ndarray:  # pragma: no cover - compiled
    out = np.empty(total, np.uint8)
    at = 0
    for i in range(starts.shape[0]):
        s = starts[i]
        for j in range(lengths[i]):
            out[at + j] = buf[s + j]
        at += lengths[i]
    return out


def strings_from_parts(lengths: np.ndarray, data: np.ndarray | memoryview | bytes, binary: bool = False) -> pa.Array:
    n = len(lengths)
    offsets = np.empty(n + 1, np.int64)
    offsets[0] = 0
    np.cumsum(lengths, out=offsets[1:])
    large = offsets[-1] >= 2**31
    kind = (pa.large_binary() if large else pa.binary()) if binary else (pa.large_string() if large else pa.string())
    offsets_buf = pa.py_buffer(offsets if large else offsets.astype(np.int32))
    return pa.Array.from_buffers(kind, n, [None, offsets_buf, pa.py_buffer(data)])


def list_parts(arr: pa.Array) -> tuple[np.ndarray, pa.Array]:
    """(per-row lengths, flattened child) of a list/map array; NULL lists count as empty."""
    if pa.types.is_map(arr.type):
        # Map kernels are sparse in Arrow: view it as a list of key/value structs.
        mask = arr.is_null() if arr.null_count else None
        arr = pa.ListArray.from_arrays(arr.offsets, arr.values, mask=mask)
    lengths = pc.list_value_length(arr)
    lengths = as_numpy(lengths.fill_null(0) if lengths.null_count else lengths).astype(np.int64)
    return lengths, arr.flatten()


def default_scalar(dt: DataType, arrow_type: pa.DataType) -> Any:
    if isinstance(dt, AggregateFunction):
        return empty_state(dt)
    if is_string(dt):
        return "" if pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type) else b""
    if isinstance(dt, FixedString) or (isinstance(dt, Primitive) and dt.name == "IPv6"):
        return b"\0" * fixed_width(dt)
    if isinstance(dt, Primitive) and dt.name == "UUID":
        return "00000000-0000-0000-0000-000000000000"
    if isinstance(dt, Enum):
        return dt.values[0][0]
    if isinstance(dt, Primitive) and dt.name == "Bool":
        return False
    if pa.types.is_decimal(arrow_type):
        return 0
    zero = pa.scalar(0, pa.int32() if pa.types.is_date32(arrow_type) else pa.int64())
    return zero.cast(arrow_type).as_py()


class Cursor:
    """Read position in one decompressed stream."""

    __slots__ = ("name", "buf", "pos")

    def __init__(self, name: str, buf: bytes | memoryview) -> None:
        self.name = name
        self.buf = np.frombuffer(buf, np.uint8) if len(buf) else np.zeros(0, np.uint8)
        self.pos = 0

    def take(self, nbytes: int) -> np.ndarray:
        if nbytes < 0 or self.pos + nbytes > len(self.buf):
            raise CorruptPartError(
                f"stream {self.name!r}: need {nbytes} bytes at offset {self.pos}, only {len(self.buf) - self.pos} left")
        chunk = self.buf[self.pos:self.pos + nbytes]
        self.pos += nbytes
        return chunk

    def sizes(self, n: int) -> np.ndarray:
        """n UInt64 lengths, as int64 (a view of the stream); anything past 2^40 can only be damage."""
        at = self.pos
        values = self.take(8 * n).view("<u8")
        if len(values) and values.max() >= 1 << 40:
            row = int(np.argmax(values >= 1 << 40))
            raise CorruptPartError(
                f"stream {self.name!r}: implausible size {int(values[row])} at byte offset {at + 8 * row}")
        return values.view("<i8")  # every value is below 2^40: the same numbers

    def uint64(self) -> int:
        return int(self.take(8).view("<u8")[0])

    def varuint(self) -> int:
        """One LEB128 unsigned integer (at most 10 bytes)."""
        value = shift = 0
        for _ in range(10):
            byte = int(self.take(1)[0])
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                return value
            shift += 7
        raise CorruptPartError(f"stream {self.name!r}: a varint longer than 10 bytes ends at offset {self.pos}")

    def at_end(self) -> bool:
        return self.pos >= len(self.buf)


def read_classic(cursor: Cursor, n: int, binary: bool = False) -> pa.Array:
    starts, lengths, end = _scan_classic(cursor.buf, cursor.pos, n)
    if end < 0:
        raise CorruptPartError(
            f"stream {cursor.name!r}: string {-1 - end} of {n} starting at offset {cursor.pos} runs past the end")
    data = _gather(cursor.buf, starts, lengths, int(lengths.sum()))
    cursor.pos = int(end)
    return strings_from_parts(lengths, data, binary)


def apply_nulls(values: pa.Array, nulls: np.ndarray) -> pa.Array:
    if not nulls.any():
        return values
    validity = pa.py_buffer(np.packbits(~nulls, bitorder="little"))
    if values.offset == 0 and values.null_count == 0 and not pa.types.is_nested(values.type):
        return pa.Array.from_buffers(values.type, len(values), [validity] + values.buffers()[1:],
                                     null_count=int(nulls.sum()))
    return pc.if_else(pa.array(nulls), pa.nulls(len(values), values.type), values)


_DECIMAL256_LIMIT = 10**76  # Arrow's decimal256 holds 76 digits
_DECIMAL256_TOP = _DECIMAL256_LIMIT >> 192


def _check_decimal256_digits(words: np.ndarray, name: str, stream: str) -> None:
    """Int256/UInt256 values (n, 4) little-endian words, read as Arrow's decimal256(76, 0): a value of
    77 or 78 digits cannot be held (UInt256's upper half would even read as negative), so it is
    refused rather than returned wrong. Only rows whose top word is that large are looked at exactly."""
    top = words[:, 3]
    negative = (top >> np.uint64(63)).astype(bool) if name == "Int256" else np.zeros(len(top), bool)
    magnitude_top = np.where(negative, ~top, top)
    for row in np.flatnonzero(magnitude_top >= np.uint64(_DECIMAL256_TOP - 1)):
        value = int.from_bytes(words[row].tobytes(), "little", signed=name == "Int256")
        if abs(value) >= _DECIMAL256_LIMIT:
            raise UnsupportedError(f"{stream}.bin: {name} value {value} at row {int(row)} of the granules read has "
                                   f"{len(str(abs(value)))} digits; Arrow's decimal256 holds 76 (types.md)")


def _aligned(raw: np.ndarray, width: int) -> np.ndarray:
    """`raw` itself when its values sit at addresses Arrow expects (a multiple of their width),
    else a copy: the array then holds the decompressed stream rather than a copy of it."""
    return raw if raw.ctypes.data % min(width, 8) == 0 else raw.copy()


def fixed_to_arrow(dt: DataType, raw: np.ndarray, n: int, stream: str) -> pa.Array:
    target = to_arrow(dt)
    if isinstance(dt, Primitive):
        name = dt.name
        if name == "UUID":
            return _uuid_to_arrow(raw.reshape(n, 16))
        if name in ("Int128", "UInt128", "Int256", "UInt256"):
            words = raw.view("<u8").reshape(n, fixed_width(dt) // 8)
            if words.shape[1] == 4:
                _check_decimal256_digits(words, name, stream)
            if words.shape[1] == 2:
                fill = (words[:, 1] >> np.uint64(63)) * np.uint64(0xFFFFFFFFFFFFFFFF) if name == "Int128" \
                    else np.zeros(n, np.uint64)
                words = np.concatenate([words, np.stack([fill, fill], axis=1)], axis=1)
            return pa.Array.from_buffers(target, n, [None, pa.py_buffer(np.ascontiguousarray(words))])
        if name == "BFloat16":
            bits = raw.view("<u2").astype("<u4") << np.uint32(16)
            return pa.Array.from_buffers(target, n, [None, pa.py_buffer(bits)])
        if name == "Bool":
            return pa.array(raw != 0, pa.bool_())
        if name == "Date":
            return pa.Array.from_buffers(target, n, [None, pa.py_buffer(raw.view("<u2").astype(np.int32))])
        if name == "Date32":
            return pa.Array.from_buffers(target, n, [None, pa.py_buffer(_aligned(raw, 4))])
        return pa.Array.from_buffers(target, n, [None, pa.py_buffer(_aligned(raw, fixed_width(dt)))])
    if isinstance(dt, FixedString):
        return pa.Array.from_buffers(target, n, [None, pa.py_buffer(raw.copy())])
    if isinstance(dt, DateTime):
        return pa.Array.from_buffers(target, n, [None, pa.py_buffer(raw.view("<u4").astype(np.int64))])
    if isinstance(dt, Time):
        return pa.Array.from_buffers(target, n, [None, pa.py_buffer(raw.view("<i4").astype(np.int64))])
    if isinstance(dt, (Time64, DateTime64)):
        _, factor = datetime64_arrow_unit(dt.precision)
        ticks = raw.view("<i8")
        return pa.Array.from_buffers(target, n, [None, pa.py_buffer(ticks * factor if factor != 1 else ticks.copy())])
    if isinstance(dt, Decimal):
        if dt.width in (16, 32):
            return pa.Array.from_buffers(target, n, [None, pa.py_buffer(raw.copy())])
        low = raw.view("<i4" if dt.width == 4 else "<i8").astype(np.int64)
        words = np.stack([low, low >> 63], axis=1)
        return pa.Array.from_buffers(target, n, [None, pa.py_buffer(np.ascontiguousarray(words))])
    if isinstance(dt, Enum):
        codes = raw.view("<i1" if dt.bits == 8 else "<i2").astype(np.int64)
        values = np.array([v for _, v in dt.values], np.int64)
        idx = np.searchsorted(values, codes)
        idx_clipped = np.minimum(idx, len(values) - 1)
        bad = values[idx_clipped] != codes
        if bad.any():
            row = int(np.argmax(bad))
            raise CorruptPartError(f"stream {stream!r}: row {row} holds {int(codes[row])}, not a value of {dt.to_clickhouse()}")
        return pa.array([name for name, _ in dt.values], pa.string()).take(pa.array(idx_clipped))
    raise UnsupportedError(f"cannot read {dt.to_clickhouse()}")

"""Column streams of every supported type: stream names, Arrow → bytes per granule, bytes → Arrow.

A column of a Wide part is one or more streams (null maps, array sizes, string sizes, values,
LowCardinality dictionaries). This module names them as ClickHouse does, turns an Arrow column into
each stream's bytes cut at granule boundaries, and reads streams positioned at a granule back into
Arrow. It also encodes single rows the way ClickHouse's binary value format does (primary.idx,
partition.dat, minmax indexes). format_spec/types.md describes every encoding.
"""

from __future__ import annotations

import struct
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from spark_mergetree.errors import CorruptPartError, FormatError, SchemaMismatchError, UnsupportedError
from spark_mergetree.fileops import escape_for_file_name
from spark_mergetree.format.compiled import lazy_njit
from spark_mergetree.format.conform import uuid_text
from spark_mergetree.format.types import (
    Array,
    DataType,
    DateTime,
    DateTime64,
    Decimal,
    Enum,
    FixedString,
    LowCardinality,
    Map,
    Nullable,
    Primitive,
    Tuple,
    datetime64_arrow_unit,
    to_arrow,
)

__all__ = [
    "StreamBytes", "escape_for_file_name", "stream_names", "serialize_column", "deserialize_column",
    "serialize_rows", "deserialize_rows", "sparse_streams", "SparseSpec", "LOW_CARDINALITY_MAX_DICTIONARY_SIZE",
    "stream_value_types", "value_width",
]

# ClickHouse writes a shared LowCardinality dictionary once it holds this many keys.
LOW_CARDINALITY_MAX_DICTIONARY_SIZE = 8192

_LC_NEED_GLOBAL_DICTIONARY = 1 << 8
_LC_HAS_ADDITIONAL_KEYS = 1 << 9
_LC_NEED_UPDATE_DICTIONARY = 1 << 10
_LC_KEYS_VERSION = 1
_INDEX_DTYPES = (np.dtype("<u1"), np.dtype("<u2"), np.dtype("<u4"), np.dtype("<u8"))


@dataclass(frozen=True)
class StreamBytes:
    """One stream of one column: bytes of granule g are data[granule_offsets[g]:granule_offsets[g+1]].

    Bytes before granule_offsets[0] are the stream's prefix (only LowCardinality `.dict` streams have
    one: the keys version); granule_offsets[-1] == len(data).
    """

    data: bytes
    granule_offsets: np.ndarray


# ----------------------------------------------------------------------------------------- names

def _element_base(base: str, element: str) -> str:
    return f"{base}%2E{escape_for_file_name(element)}"


SparseSpec = bool | Mapping[str, Any] | Collection[str] | None


def sparse_streams(dt: DataType, column_name: str, sparse: SparseSpec) -> frozenset[str]:
    """Escaped stream bases of a column that are stored sparse.

    `sparse` is True/False for the whole column, the column's entry of serialization.json (a dict
    with "kind" and, for tuples, "subcolumns" in element order), or a ready set of bases.
    """
    base = escape_for_file_name(column_name)
    if sparse is None or sparse is False:
        return frozenset()
    if sparse is True:
        return frozenset([base])
    if isinstance(sparse, Mapping):
        found: set[str] = set()
        _walk_serialization_info(dt, base, sparse, column_name, found)
        return frozenset(found)
    return frozenset(sparse)


def _walk_serialization_info(dt: DataType, base: str, info: Mapping[str, Any], column: str, found: set[str]) -> None:
    kind = info.get("kind", "Default")
    if kind == "Sparse":
        found.add(base)
    elif kind != "Default":
        raise UnsupportedError(f"column {column!r}: serialization kind {kind!r} is not supported")
    subcolumns = info.get("subcolumns")
    if subcolumns and isinstance(dt, Tuple):
        if len(subcolumns) != len(dt.elements):
            raise CorruptPartError(
                f"column {column!r}: serialization.json lists {len(subcolumns)} subcolumns for {dt.to_clickhouse()}")
        for name, element, sub in zip(dt.element_names, dt.elements, subcolumns, strict=True):
            _walk_serialization_info(element, _element_base(base, name), sub, column, found)


def stream_names(dt: DataType, column_name: str, string_sizes: bool = True, sparse: SparseSpec = False) -> list[str]:
    """Stream names (without `.bin`) of a column, in the order ClickHouse writes them.

    LowCardinality `.dict` streams come first: their keys version is written before any data. A
    sparse column or tuple element (see `sparse_streams`) starts with its `.sparse.idx` stream.
    """
    return [_external_name(dt, column_name, n) for n in _internal_names(dt, column_name, string_sizes, sparse)]


def _internal_names(dt: DataType, column_name: str, string_sizes: bool, sparse: SparseSpec) -> list[str]:
    names: list[str] = []
    _collect_names(dt, escape_for_file_name(column_name), 0, string_sizes, names,
                   sparse_streams(dt, column_name, sparse))
    return [n for n in names if n.endswith(".dict")] + [n for n in names if not n.endswith(".dict")]


def _external_name(dt: DataType, column_name: str, internal: str) -> str:
    """The file name of a stream: a dotted top-level Array/Map column is part of a Nested table.

    Its outermost sizes are shared by the table and named after the part before the first dot
    (`n.a Array(UInt8)` → `n.size0`); every other stream keeps the full escaped column name.
    """
    if "." in column_name and isinstance(dt, (Array, Map)) and internal == f"{escape_for_file_name(column_name)}.size0":
        return f"{escape_for_file_name(column_name.split('.', 1)[0])}.size0"
    return internal


def _collect_names(dt: DataType, base: str, level: int, string_sizes: bool, out: list[str],
                   sparse: frozenset[str] = frozenset()) -> None:
    streams: list[tuple[str, DataType | None]] = []
    _collect_streams(dt, base, level, string_sizes, streams, sparse)
    out.extend(name for name, _ in streams)


def _collect_streams(dt: DataType, base: str, level: int, string_sizes: bool, out: list[tuple[str, DataType | None]],
                     sparse: frozenset[str] = frozenset()) -> None:
    """(stream, type of its values) in file order; the type is None for streams of positions and
    sizes (sparse offsets, null maps, array sizes, LowCardinality indexes)."""
    if base in sparse and level == 0:
        if not _sparse_capable(dt):
            raise UnsupportedError(f"stream {base!r}: sparse serialization of {dt.to_clickhouse()} is not supported")
        out.append((base + ".sparse.idx", None))
    if isinstance(dt, Nullable):
        out.append((base + ".null", None))
        _collect_streams(dt.inner, base, level, string_sizes, out)
    elif isinstance(dt, Array):
        out.append((f"{base}.size{level}", None))
        _collect_streams(dt.inner, base, level + 1, string_sizes, out)
    elif isinstance(dt, Map):
        out.append((f"{base}.size{level}", None))
        _collect_streams(dt.key, _element_base(base, "keys"), level + 1, string_sizes, out)
        _collect_streams(dt.value, _element_base(base, "values"), level + 1, string_sizes, out)
    elif isinstance(dt, Tuple):
        for name, element in zip(dt.element_names, dt.elements, strict=True):
            _collect_streams(element, _element_base(base, name), level, string_sizes, out, sparse)
    elif isinstance(dt, LowCardinality):
        out.extend([(base + ".dict", _dictionary_base(dt)[0]), (base, None)])
    elif _is_string(dt) and string_sizes:
        out.extend([(base + ".size", dt), (base, dt)])
    else:
        out.append((base, dt))


def stream_value_types(dt: DataType, column_name: str, string_sizes: bool = True) -> dict[str, DataType | None]:
    """Each stream of a column → the type of its values, or None for streams of sizes and positions:
    ClickHouse applies a column's type-specific codecs (Delta, T64, ...) to the former only."""
    streams: list[tuple[str, DataType | None]] = []
    _collect_streams(dt, escape_for_file_name(column_name), 0, string_sizes, streams)
    return {_external_name(dt, column_name, name): value_type for name, value_type in streams}


def _is_string(dt: DataType) -> bool:
    return isinstance(dt, Primitive) and dt.name == "String"


# ------------------------------------------------------------------------ Arrow values → storage

def value_width(dt: DataType) -> int | None:
    """Bytes per value on disk of a fixed-width type, None for any other type."""
    try:
        return _fixed_width(dt)
    except UnsupportedError:
        return None


def _fixed_width(dt: DataType) -> int | None:
    """Bytes per value on disk, or None for String."""
    if isinstance(dt, Primitive):
        return dt.width
    if isinstance(dt, FixedString):
        return dt.length
    if isinstance(dt, DateTime):
        return 4
    if isinstance(dt, DateTime64):
        return 8
    if isinstance(dt, Decimal):
        return dt.width
    if isinstance(dt, Enum):
        return dt.bits // 8
    raise UnsupportedError(f"{dt.to_clickhouse()} has no fixed width")


def _combine(arr: pa.Array | pa.ChunkedArray) -> pa.Array:
    if isinstance(arr, pa.ChunkedArray):
        return arr.combine_chunks() if arr.num_chunks != 1 else arr.chunk(0)
    return arr


def _coerce(dt: DataType, arr: pa.Array, column: str) -> pa.Array:
    """Cast an input column to the Arrow type of `dt` (safe casts only: no silent truncation)."""
    target = to_arrow(dt)
    if arr.type == target:
        return arr
    if _is_string(dt) and (pa.types.is_binary(arr.type) or pa.types.is_large_binary(arr.type)
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


def _string_buffers(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
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
    return offsets - start, data


def _pad_fixed(arr: pa.Array, length: int, column: str) -> pa.Array:
    offsets, data = _string_buffers(arr)
    lengths = np.diff(offsets)
    if len(lengths) and lengths.max() > length:
        row = int(np.argmax(lengths > length))
        raise SchemaMismatchError(
            f"column {column!r}: value at row {row} is {int(lengths[row])} bytes, longer than FixedString({length})")
    out = np.zeros(len(arr) * length, np.uint8)
    dest = np.arange(len(data), dtype=np.int64) + np.repeat(np.arange(len(arr), dtype=np.int64) * length - offsets[:-1], lengths)
    out[dest] = data
    return _with_validity(pa.Array.from_buffers(pa.binary(length), len(arr), [None, pa.py_buffer(out)]), arr)


def _with_validity(values: pa.Array, like: pa.Array) -> pa.Array:
    if like.null_count == 0:
        return values
    return pc.if_else(pc.is_valid(like), values, pa.nulls(len(like), values.type))


_UUID_DASHES = (8, 13, 18, 23)
_UUID_HEX_POS = np.array([i for i in range(36) if i not in _UUID_DASHES])


def _uuid_storage(arr: pa.Array, column: str) -> np.ndarray:
    """UUIDs (36-char text or 16 raw bytes) → (n, 16) uint8 in ClickHouse's order."""
    n = len(arr)
    if pa.types.is_fixed_size_binary(arr.type):
        raw = np.frombuffer(arr.buffers()[1], np.uint8)[arr.offset * 16:(arr.offset + n) * 16].reshape(n, 16).copy()
        if arr.null_count:
            raw[~np.asarray(arr.is_valid())] = 0
    else:
        offsets, data = _string_buffers(arr)
        lengths = np.diff(offsets)
        nulls = np.asarray(arr.is_null()) if arr.null_count else np.zeros(n, bool)
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


def _fixed_storage(dt: DataType, arr: pa.Array, column: str) -> np.ndarray:
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
            days = np.asarray(arr.fill_null(0).cast(pa.int32()) if arr.null_count else arr.cast(pa.int32()))
            if len(days) and (days.min() < 0 or days.max() > 65535):
                row = int(np.argmax((days < 0) | (days > 65535)))
                raise SchemaMismatchError(f"column {column!r}: row {row} is outside Date's range 1970-01-01..2149-06-06")
            return days.astype("<u2")
        if name == "Date32":
            return np.asarray((arr.fill_null(0) if arr.null_count else arr).cast(pa.int32())).astype("<i4")
        if name == "Bool":
            return np.asarray(arr.fill_null(False) if arr.null_count else arr, dtype=bool).astype(np.uint8)
        return np.asarray(arr.fill_null(0) if arr.null_count else arr)
    if isinstance(dt, FixedString):
        n = len(arr)
        raw = np.frombuffer(arr.buffers()[1], np.uint8)[arr.offset * dt.length:(arr.offset + n) * dt.length]
        raw = raw.reshape(n, dt.length)
        if arr.null_count:
            raw = raw.copy()
            raw[~np.asarray(arr.is_valid())] = 0
        return raw
    if isinstance(dt, DateTime):
        seconds = np.asarray((arr.fill_null(0) if arr.null_count else arr).cast(pa.int64()))
        if len(seconds) and (seconds.min() < 0 or seconds.max() > 0xFFFFFFFF):
            row = int(np.argmax((seconds < 0) | (seconds > 0xFFFFFFFF)))
            raise SchemaMismatchError(f"column {column!r}: row {row} is outside DateTime's range 1970..2106")
        return seconds.astype("<u4")
    if isinstance(dt, DateTime64):
        _, factor = datetime64_arrow_unit(dt.precision)
        values = np.asarray((arr.fill_null(0) if arr.null_count else arr).cast(pa.int64()))
        if factor != 1:
            if (values % factor).any():
                row = int(np.argmax(values % factor != 0))
                raise SchemaMismatchError(
                    f"column {column!r}: row {row} has more precision than {dt.to_clickhouse()} keeps")
            values = values // factor
        return values.astype("<i8")
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
            row = int(np.argmax(np.asarray(unknown)))
            raise SchemaMismatchError(f"column {column!r}: row {row} value {arr[row].as_py()!r} is not in {dt.to_clickhouse()}")
        # NULL maps to the Enum's first value, which is what ClickHouse stores under a NULL.
        idx = np.asarray(position.fill_null(0))
        return values[idx].astype("<i1" if dt.bits == 8 else "<i2")
    raise UnsupportedError(f"no fixed-width encoding for {dt.to_clickhouse()}")


# ------------------------------------------------------------------------------ varuint strings

def _varuint_sizes(values: np.ndarray) -> np.ndarray:
    sizes = np.ones(len(values), np.int64)
    for shift in range(7, 64, 7):
        sizes += values >= (np.uint64(1) << np.uint64(shift))
    return sizes


def _encode_classic(offsets: np.ndarray, data: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Classic String encoding (varuint length + bytes per row) → (bytes, row offsets n+1)."""
    lengths = np.diff(offsets).astype(np.uint64)
    nbytes = _varuint_sizes(lengths)
    row_sizes = nbytes + lengths.astype(np.int64)
    row_offsets = np.zeros(len(lengths) + 1, np.int64)
    np.cumsum(row_sizes, out=row_offsets[1:])
    out = np.empty(int(row_offsets[-1]), np.uint8)
    starts = row_offsets[:-1]
    for k in range(int(nbytes.max()) if len(nbytes) else 0):
        rows = nbytes > k
        byte = (lengths[rows] >> np.uint64(7 * k)) & np.uint64(0x7F)
        byte |= np.where(nbytes[rows] > k + 1, np.uint64(0x80), np.uint64(0))
        out[starts[rows] + k] = byte.astype(np.uint8)
    dest = np.arange(len(data), dtype=np.int64) + np.repeat(starts + nbytes - offsets[:-1], lengths.astype(np.int64))
    out[dest] = data
    return out, row_offsets


@lazy_njit
def _scan_classic(buf, start, n):  # pragma: no cover - compiled
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
def _gather(buf, starts, lengths, total):  # pragma: no cover - compiled
    out = np.empty(total, np.uint8)
    at = 0
    for i in range(starts.shape[0]):
        s = starts[i]
        for j in range(lengths[i]):
            out[at + j] = buf[s + j]
        at += lengths[i]
    return out


def _strings_from_parts(lengths: np.ndarray, data: np.ndarray | memoryview | bytes, binary: bool = False) -> pa.Array:
    n = len(lengths)
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    large = offsets[-1] >= 2**31
    kind = (pa.large_binary() if large else pa.binary()) if binary else (pa.large_string() if large else pa.string())
    offsets_buf = pa.py_buffer(offsets if large else offsets.astype(np.int32))
    return pa.Array.from_buffers(kind, n, [None, offsets_buf, pa.py_buffer(data)])


# ---------------------------------------------------------------------------------- serialize

def serialize_column(
    dt: DataType,
    column_name: str,
    array: pa.Array | pa.ChunkedArray,
    granule_rows: np.ndarray,
    string_sizes: bool = True,
) -> dict[str, StreamBytes]:
    """Every stream of a column, cut into granules of `granule_rows` rows (must sum to len(array))."""
    arr = _combine(array)
    granule_rows = np.asarray(granule_rows, dtype=np.int64)
    if (granule_rows < 0).any() or int(granule_rows.sum()) != len(arr):
        raise FormatError(
            f"column {column_name!r}: granule sizes sum to {int(granule_rows.sum())} but the column has {len(arr)} rows")
    bounds = np.zeros(len(granule_rows) + 1, np.int64)
    np.cumsum(granule_rows, out=bounds[1:])
    out: dict[str, StreamBytes] = {}
    _serialize(dt, escape_for_file_name(column_name), 0, arr, bounds, string_sizes, column_name, out)
    return {_external_name(dt, column_name, name): out[name]
            for name in _internal_names(dt, column_name, string_sizes, False)}


def _list_parts(arr: pa.Array) -> tuple[np.ndarray, pa.Array]:
    """(per-row lengths, flattened child) of a list/map array; NULL lists count as empty."""
    if pa.types.is_map(arr.type):
        # Map kernels are sparse in Arrow: view it as a list of key/value structs.
        mask = arr.is_null() if arr.null_count else None
        arr = pa.ListArray.from_arrays(arr.offsets, arr.values, mask=mask)
    lengths = pc.list_value_length(arr)
    lengths = np.asarray(lengths.fill_null(0) if lengths.null_count else lengths).astype(np.int64)
    return lengths, arr.flatten()


def _serialize(dt: DataType, base: str, level: int, arr: pa.Array, bounds: np.ndarray, string_sizes: bool,
               column: str, out: dict[str, StreamBytes]) -> None:
    if isinstance(dt, Nullable):
        nulls = np.asarray(arr.is_null()).astype(np.uint8) if arr.null_count else np.zeros(len(arr), np.uint8)
        out[base + ".null"] = StreamBytes(nulls.tobytes(), bounds.copy())
        _serialize_values(dt.inner, base, arr, bounds, string_sizes, column, out, allow_nulls=True)
        return
    if isinstance(dt, LowCardinality):
        arr = _coerce(dt, arr, column)
        _serialize_low_cardinality(dt, base, arr, bounds, column, out)
        return
    if isinstance(dt, (Array, Map)):
        arr = _coerce(dt, arr, column)
        lengths, child = _list_parts(arr)
        child_offsets = np.zeros(len(lengths) + 1, np.int64)
        np.cumsum(lengths, out=child_offsets[1:])
        out[f"{base}.size{level}"] = StreamBytes(lengths.astype("<u8").tobytes(), bounds * 8)
        child_bounds = child_offsets[bounds]
        if isinstance(dt, Array):
            _serialize(dt.inner, base, level + 1, child, child_bounds, string_sizes, column, out)
        else:
            keys, values = child.flatten()
            _serialize(dt.key, _element_base(base, "keys"), level + 1, keys, child_bounds, string_sizes, column, out)
            _serialize(dt.value, _element_base(base, "values"), level + 1, values, child_bounds, string_sizes, column, out)
        return
    if isinstance(dt, Tuple):
        arr = _coerce(dt, arr, column)
        if arr.null_count:
            raise SchemaMismatchError(f"column {column!r}: {dt.to_clickhouse()} cannot hold NULL tuples")
        for name, element, child in zip(dt.element_names, dt.elements, arr.flatten(), strict=True):
            _serialize(element, _element_base(base, name), level, child, bounds, string_sizes, column, out)
        return
    _serialize_values(dt, base, arr, bounds, string_sizes, column, out, allow_nulls=False)


def _serialize_values(dt: DataType, base: str, arr: pa.Array, bounds: np.ndarray, string_sizes: bool, column: str,
                      out: dict[str, StreamBytes], allow_nulls: bool) -> None:
    if arr.null_count and not allow_nulls:
        raise SchemaMismatchError(f"column {column!r} has NULLs but its type {dt.to_clickhouse()} is not Nullable")
    arr = _coerce(dt, arr, column)
    if _is_string(dt):
        offsets, data = _string_buffers(arr)
        if string_sizes:
            out[base + ".size"] = StreamBytes(np.diff(offsets).astype("<u8").tobytes(), bounds * 8)
            out[base] = StreamBytes(data.tobytes(), offsets[bounds])
        else:
            encoded, row_offsets = _encode_classic(offsets, data)
            out[base] = StreamBytes(encoded.tobytes(), row_offsets[bounds])
        return
    values = _fixed_storage(dt, arr, column)
    out[base] = StreamBytes(values.tobytes(), bounds * _fixed_width(dt))


def _dictionary_base(dt: LowCardinality) -> tuple[DataType, bool]:
    if isinstance(dt.inner, Nullable):
        return dt.inner.inner, True
    return dt.inner, False


def _key_bytes(key_type: DataType, keys: pa.Array) -> bytes:
    """Dictionary keys as ClickHouse bulk-writes them: strings classic, others fixed width."""
    if _is_string(key_type):
        offsets, data = _string_buffers(keys)
        return _encode_classic(offsets, data)[0].tobytes()
    return _fixed_storage(key_type, keys, "<dictionary>").tobytes()


def _serialize_low_cardinality(dt: LowCardinality, base: str, arr: pa.Array, bounds: np.ndarray, column: str,
                               out: dict[str, StreamBytes]) -> None:
    key_type, nullable = _dictionary_base(dt)
    if arr.null_count and not nullable:
        raise SchemaMismatchError(f"column {column!r} has NULLs but its type {dt.to_clickhouse()} is not Nullable")
    default = pa.array([_default_scalar(key_type, arr.type)], arr.type)
    reserved = 2 if nullable else 1  # NULL slot (nullable only), then the default value
    dict_parts: list[bytes] = [struct.pack("<Q", _LC_KEYS_VERSION)]
    dict_size = 8
    index_parts: list[bytes] = []
    index_size = 0
    dict_offsets = np.zeros(len(bounds), np.int64)
    index_offsets = np.zeros(len(bounds), np.int64)
    shared: pa.Array | None = None  # keys after the reserved slots, in order of first appearance

    def flush_dictionary(keys: pa.Array) -> None:
        nonlocal dict_size
        full = pa.concat_arrays([default] * reserved + [keys])
        piece = struct.pack("<Q", len(full)) + _key_bytes(key_type, full)
        dict_parts.append(piece)
        dict_size += len(piece)

    for g in range(len(bounds) - 1):
        dict_offsets[g], index_offsets[g] = dict_size, index_size
        start, stop = int(bounds[g]), int(bounds[g + 1])
        if stop == start:
            continue  # ClickHouse writes nothing for an empty piece (empty arrays)
        values = arr.slice(start, stop - start)
        fresh = shared is None
        if fresh:
            shared = default.slice(0, 0)
        uniques = pc.unique(values.drop_null())
        uniques = uniques.filter(pc.not_equal(uniques, default[0])) if len(uniques) else uniques
        known = pc.is_in(uniques, value_set=shared) if len(shared) else pa.array(np.zeros(len(uniques), bool))
        new_keys = uniques.filter(pc.invert(known))
        room = LOW_CARDINALITY_MAX_DICTIONARY_SIZE - reserved - len(shared)
        shared = pa.concat_arrays([shared, new_keys.slice(0, max(room, 0))])
        additional = new_keys.slice(max(room, 0))
        lookup = pa.concat_arrays([shared, additional])
        position = pc.index_in(values, value_set=lookup)
        idx = np.asarray(position.fill_null(-1)).astype(np.int64) + reserved
        is_default = np.asarray(pc.fill_null(pc.equal(values, default[0]), False))
        idx[is_default] = reserved - 1
        if values.null_count:
            idx[np.asarray(values.is_null())] = 0
        width_code = _index_width_code(int(idx.max()))
        flags = width_code | _LC_NEED_GLOBAL_DICTIONARY
        if fresh:
            flags |= _LC_NEED_UPDATE_DICTIONARY
        if len(additional):
            flags |= _LC_HAS_ADDITIONAL_KEYS
        piece = [struct.pack("<Q", flags)]
        if reserved + len(shared) >= LOW_CARDINALITY_MAX_DICTIONARY_SIZE:
            flush_dictionary(shared)
            shared = None
        if len(additional):
            # Additional keys are addressed from the end of the (full) shared dictionary.
            piece.append(struct.pack("<Q", len(additional)) + _key_bytes(key_type, additional))
        piece.append(struct.pack("<Q", len(idx)))
        piece.append(idx.astype(_INDEX_DTYPES[width_code]).tobytes())
        blob = b"".join(piece)
        index_parts.append(blob)
        index_size += len(blob)
    if shared is not None:
        flush_dictionary(shared)
    dict_offsets[-1], index_offsets[-1] = dict_size, index_size
    out[base + ".dict"] = StreamBytes(b"".join(dict_parts), dict_offsets)
    out[base] = StreamBytes(b"".join(index_parts), index_offsets)


def _index_width_code(max_index: int) -> int:
    for code, dtype in enumerate(_INDEX_DTYPES):
        if max_index < 1 << (8 * dtype.itemsize):
            return code
    return 3


def default_column(dt: DataType, num_rows: int) -> pa.Array:
    """`num_rows` default values of a type (what a part written before a column existed holds):
    NULL for Nullable, empty for Array/Map, zero/empty for the rest, element-wise for Tuple."""
    arrow_type = to_arrow(dt)
    inner = dt.inner if isinstance(dt, LowCardinality) else dt
    if isinstance(inner, Nullable):
        return pa.nulls(num_rows, arrow_type)
    if isinstance(inner, (Array, Map)):
        one = pa.array([[]], arrow_type)
    elif isinstance(inner, Tuple):
        fields = [default_column(element, 1) for element in inner.elements]
        one = pa.StructArray.from_arrays(fields, fields=list(arrow_type))
    else:
        one = pa.array([_default_scalar(inner, arrow_type)], arrow_type)
    return one.take(pa.array(np.zeros(num_rows, np.int64)))


def _default_scalar(dt: DataType, arrow_type: pa.DataType):
    if _is_string(dt):
        return "" if pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type) else b""
    if isinstance(dt, FixedString):
        return b"\0" * dt.length
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


# -------------------------------------------------------------------------------- deserialize

class _Cursor:
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
        """n UInt64 lengths; anything past 2^40 can only be damage."""
        at = self.pos
        values = self.take(8 * n).view("<u8")
        if len(values) and values.max() >= 1 << 40:
            row = int(np.argmax(values >= 1 << 40))
            raise CorruptPartError(
                f"stream {self.name!r}: implausible size {int(values[row])} at byte offset {at + 8 * row}")
        return values.astype(np.int64)

    def uint64(self) -> int:
        return int(self.take(8).view("<u8")[0])

    def at_end(self) -> bool:
        return self.pos >= len(self.buf)


def deserialize_column(
    dt: DataType,
    column_name: str,
    streams: Mapping[str, bytes | memoryview],
    num_rows: int,
    string_sizes: bool = True,
    sparse: SparseSpec = False,
    exact: bool = False,
) -> pa.Array:
    """Read `num_rows` rows of a column from streams positioned at the first requested granule.

    `exact`: the streams end exactly where the rows end (the caller cut them between two marks), so
    bytes left over mean the part's columns.txt or marks do not describe its data.

    `streams` maps each name of `stream_names(dt, column_name, string_sizes)` to decompressed bytes
    starting at that stream's mark of the first requested granule. For LowCardinality `.dict`
    streams, pass the bytes from that mark to the end of the stream: marks of later granules can point
    back to a dictionary written before them. `sparse` says which parts of the column are stored
    sparse: pass the column's serialization.json entry (tuple elements can be sparse on their own),
    or True for a whole sparse column; the stream names then include the `.sparse.idx` streams.
    """
    sparse_bases = sparse_streams(dt, column_name, sparse)
    cursors: dict[str, _Cursor] = {}
    for name in _internal_names(dt, column_name, string_sizes, sparse_bases):
        external = _external_name(dt, column_name, name)
        if external not in streams:
            raise CorruptPartError(f"column {column_name!r}: stream {external!r} is missing")
        cursors[name] = _Cursor(external, streams[external])
    result = _deserialize(dt, escape_for_file_name(column_name), 0, num_rows, string_sizes, cursors, sparse_bases)
    if exact:
        for cursor in cursors.values():
            if cursor.pos != len(cursor.buf) and not cursor.name.endswith((".dict", ".sparse.idx")):
                raise CorruptPartError(
                    f"column {column_name!r}: stream {cursor.name!r} has {len(cursor.buf) - cursor.pos} bytes "
                    f"left after {num_rows} rows; the part's columns.txt or marks do not match its data")
    return result


def _deserialize_sparse(dt: DataType, base: str, n: int, string_sizes: bool, cursors: dict[str, _Cursor]) -> pa.Array:
    if not _sparse_capable(dt):
        raise UnsupportedError(f"stream {base!r}: sparse serialization of {dt.to_clickhouse()} is not supported")
    index_cursor = cursors[base + ".sparse.idx"]
    positions, end = _scan_sparse(index_cursor.buf, index_cursor.pos, n)
    if end < 0:
        raise CorruptPartError(
            f"stream {index_cursor.name!r}: sparse offsets at byte offset {index_cursor.pos} are truncated")
    index_cursor.pos = int(end)
    values = _deserialize(dt, base, 0, len(positions), string_sizes, cursors)
    # Row r takes values[k] when it is the k-th non-default row, else the default in slot 0.
    default = _deserialize(dt, base, 0, 1, string_sizes, _default_cursors(dt, base, string_sizes))
    selector = np.zeros(n, np.int64)
    selector[positions] = np.arange(1, len(positions) + 1)
    return pa.concat_arrays([default, values]).take(pa.array(selector))


def _sparse_capable(dt: DataType) -> bool:
    return isinstance(dt, (Primitive, FixedString, DateTime, DateTime64, Decimal))


def _default_cursors(dt: DataType, base: str, string_sizes: bool) -> dict[str, _Cursor]:
    if _is_string(dt):
        if string_sizes:
            return {base + ".size": _Cursor(base + ".size", bytes(8)), base: _Cursor(base, b"")}
        return {base: _Cursor(base, b"\0")}
    return {base: _Cursor(base, bytes(_fixed_width(dt)))}


_SPARSE_END_OF_GRANULE = 1 << 62


@lazy_njit
def _scan_sparse(buf, start, n_rows):  # pragma: no cover - compiled
    """Row numbers of the non-default values among the next n_rows, and the end position (-1: bad)."""
    positions = np.empty(n_rows, np.int64)
    count = 0
    row = 0
    pos = start
    size = buf.shape[0]
    end_flag = np.uint64(1) << np.uint64(62)
    while row < n_rows:
        group_start = pos
        value = np.uint64(0)
        shift = 0
        while True:
            if pos >= size or shift > 63:
                return positions[:0], -1
            b = buf[pos]
            pos += 1
            value |= np.uint64(b & 0x7F) << np.uint64(shift)
            shift += 7
            if b < 0x80:
                break
        if value & end_flag:
            row += np.int64(value & ~end_flag)
            continue
        row += np.int64(value)
        if row >= n_rows:
            # The next value lies past the requested rows: leave it for a later read.
            pos = group_start
            break
        positions[count] = row
        count += 1
        row += 1
    return positions[:count], pos


def _deserialize(dt: DataType, base: str, level: int, n: int, string_sizes: bool,
                 cursors: dict[str, _Cursor], sparse: frozenset[str] = frozenset()) -> pa.Array:
    if level == 0 and base in sparse:
        return _deserialize_sparse(dt, base, n, string_sizes, cursors)
    if isinstance(dt, Nullable):
        nulls = cursors[base + ".null"].take(n)
        values = _deserialize(dt.inner, base, level, n, string_sizes, cursors)
        return _apply_nulls(values, nulls.astype(bool))
    if isinstance(dt, LowCardinality):
        return _deserialize_low_cardinality(dt, base, n, cursors)
    if isinstance(dt, (Array, Map)):
        lengths = cursors[f"{base}.size{level}"].sizes(n)
        offsets = np.zeros(n + 1, np.int64)
        np.cumsum(lengths, out=offsets[1:])
        total = int(offsets[-1])
        if total >= 2**31:
            raise CorruptPartError(f"stream {base}.size{level}: {total} nested values in {n} rows is implausible")
        offsets_arr = pa.array(offsets.astype(np.int32))
        if isinstance(dt, Array):
            child = _deserialize(dt.inner, base, level + 1, total, string_sizes, cursors)
            return pa.ListArray.from_arrays(offsets_arr, child, type=to_arrow(dt))
        keys = _deserialize(dt.key, _element_base(base, "keys"), level + 1, total, string_sizes, cursors)
        values = _deserialize(dt.value, _element_base(base, "values"), level + 1, total, string_sizes, cursors)
        return pa.MapArray.from_arrays(offsets_arr, keys, values, type=to_arrow(dt))
    if isinstance(dt, Tuple):
        children = [_deserialize(e, _element_base(base, name), level, n, string_sizes, cursors, sparse)
                    for name, e in zip(dt.element_names, dt.elements, strict=True)]
        return pa.StructArray.from_arrays(children, fields=list(to_arrow(dt)))
    if _is_string(dt):
        if string_sizes:
            lengths = cursors[base + ".size"].sizes(n)
            data = cursors[base].take(int(lengths.sum()))
            return _strings_from_parts(lengths, data)
        return _read_classic(cursors[base], n)
    width = _fixed_width(dt)
    raw = cursors[base].take(n * width)
    return _fixed_to_arrow(dt, raw, n, base)


def _read_classic(cursor: _Cursor, n: int, binary: bool = False) -> pa.Array:
    starts, lengths, end = _scan_classic(cursor.buf, cursor.pos, n)
    if end < 0:
        raise CorruptPartError(
            f"stream {cursor.name!r}: string {-1 - end} of {n} starting at offset {cursor.pos} runs past the end")
    data = _gather(cursor.buf, starts, lengths, int(lengths.sum()))
    cursor.pos = int(end)
    return _strings_from_parts(lengths, data, binary)


def _apply_nulls(values: pa.Array, nulls: np.ndarray) -> pa.Array:
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


def _fixed_to_arrow(dt: DataType, raw: np.ndarray, n: int, stream: str) -> pa.Array:
    target = to_arrow(dt)
    if isinstance(dt, Primitive):
        name = dt.name
        if name == "UUID":
            return _uuid_to_arrow(raw.reshape(n, 16))
        if name in ("Int128", "UInt128", "Int256", "UInt256"):
            words = raw.view("<u8").reshape(n, dt.width // 8)
            if words.shape[1] == 4:
                _check_decimal256_digits(words, name, stream)
            if words.shape[1] == 2:
                fill = (words[:, 1] >> np.uint64(63)) * np.uint64(0xFFFFFFFFFFFFFFFF) if name == "Int128" \
                    else np.zeros(n, np.uint64)
                words = np.concatenate([words, np.stack([fill, fill], axis=1)], axis=1)
            return pa.Array.from_buffers(target, n, [None, pa.py_buffer(np.ascontiguousarray(words))])
        if name == "Bool":
            return pa.array(raw != 0, pa.bool_())
        if name == "Date":
            return pa.Array.from_buffers(target, n, [None, pa.py_buffer(raw.view("<u2").astype(np.int32))])
        if name == "Date32":
            return pa.Array.from_buffers(target, n, [None, pa.py_buffer(raw.copy())])
        return pa.Array.from_buffers(target, n, [None, pa.py_buffer(raw.copy())])
    if isinstance(dt, FixedString):
        return pa.Array.from_buffers(target, n, [None, pa.py_buffer(raw.copy())])
    if isinstance(dt, DateTime):
        return pa.Array.from_buffers(target, n, [None, pa.py_buffer(raw.view("<u4").astype(np.int64))])
    if isinstance(dt, DateTime64):
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


def _read_keys(key_type: DataType, cursor: _Cursor, count: int) -> pa.Array:
    if _is_string(key_type):
        return _read_classic(cursor, count)
    width = _fixed_width(key_type)
    return _fixed_to_arrow(key_type, cursor.take(width * count), count, cursor.name)


def _deserialize_low_cardinality(dt: LowCardinality, base: str, n: int, cursors: dict[str, _Cursor]) -> pa.Array:
    key_type, nullable = _dictionary_base(dt)
    keys_cursor, index_cursor = cursors[base + ".dict"], cursors[base]
    dictionary: pa.Array | None = None
    pieces: list[pa.Array] = []
    remaining = n
    while remaining:
        if index_cursor.at_end():
            raise CorruptPartError(f"stream {base!r}: ended with {remaining} of {n} rows unread")
        flags_at = index_cursor.pos
        flags = index_cursor.uint64()
        width_code = flags & 0xFF
        if width_code > 3 or flags >> 11:
            raise CorruptPartError(f"stream {base!r}: bad LowCardinality index flags {flags:#x} at offset {flags_at}")
        needs_global = bool(flags & _LC_NEED_GLOBAL_DICTIONARY)
        if needs_global and (dictionary is None or (flags & _LC_NEED_UPDATE_DICTIONARY and not keys_cursor.at_end())):
            count = keys_cursor.uint64()
            dictionary = _read_keys(key_type, keys_cursor, count)
        additional = None
        if flags & _LC_HAS_ADDITIONAL_KEYS:
            count = index_cursor.uint64()
            additional = _read_keys(key_type, index_cursor, count)
        rows = index_cursor.uint64()
        take = min(rows, remaining)
        dtype = _INDEX_DTYPES[width_code]
        indexes = index_cursor.take(take * dtype.itemsize).view(dtype).astype(np.int64)
        if take < rows:
            index_cursor.pos += (rows - take) * dtype.itemsize
        if needs_global:
            if dictionary is None:
                raise CorruptPartError(f"stream {base}.dict: no dictionary for the piece at offset {flags_at}")
            lookup = dictionary if additional is None else pa.concat_arrays([dictionary, additional])
        else:
            if additional is None:
                raise CorruptPartError(f"stream {base!r}: piece at offset {flags_at} has neither dictionary nor keys")
            lookup = additional
        if len(indexes) and indexes.max() >= len(lookup):
            raise CorruptPartError(
                f"stream {base!r}: index {int(indexes.max())} beyond {len(lookup)} keys in the piece at offset {flags_at}")
        values = lookup.take(pa.array(indexes))
        if nullable:
            values = _apply_nulls(values, indexes == 0)
        pieces.append(values)
        remaining -= take
    if not pieces:
        return pa.array([], to_arrow(dt))
    return pa.concat_arrays(pieces) if len(pieces) > 1 else pieces[0]


# -------------------------------------------------------------------------------- single rows

def _strip_low_cardinality(dt: DataType) -> DataType:
    if isinstance(dt, LowCardinality):
        return _strip_low_cardinality(dt.inner)
    if isinstance(dt, Nullable):
        return Nullable(_strip_low_cardinality(dt.inner))
    if isinstance(dt, Array):
        return Array(_strip_low_cardinality(dt.inner))
    if isinstance(dt, Map):
        return Map(_strip_low_cardinality(dt.key), _strip_low_cardinality(dt.value))
    if isinstance(dt, Tuple):
        return Tuple(tuple(_strip_low_cardinality(e) for e in dt.elements), dt.names)
    return dt


def _interleave(parts: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """Row-wise concatenation: row i of the result is row i of every part, in order."""
    n = len(parts[0][1]) - 1
    sizes = [np.diff(offsets) for _, offsets in parts]
    row_sizes = np.sum(sizes, axis=0) if parts else np.zeros(n, np.int64)
    row_offsets = np.zeros(n + 1, np.int64)
    np.cumsum(row_sizes, out=row_offsets[1:])
    out = np.empty(int(row_offsets[-1]), np.uint8)
    before = row_offsets[:-1].copy()
    for (data, offsets), size in zip(parts, sizes, strict=True):
        dest = np.arange(int(size.sum()), dtype=np.int64) + np.repeat(before - offsets[:-1] + offsets[0], size)
        out[dest] = data[int(offsets[0]):int(offsets[-1])]
        before += size
    return out, row_offsets


def _row_chunks(dt: DataType, arr: pa.Array, column: str) -> tuple[np.ndarray, np.ndarray]:
    """Each row's value in ClickHouse's binary value format → (bytes, row offsets n+1)."""
    n = len(arr)
    if isinstance(dt, LowCardinality):
        return _row_chunks(dt.inner, arr, column)
    if isinstance(dt, Nullable):
        nulls = np.asarray(arr.is_null()).astype(np.uint8) if arr.null_count else np.zeros(n, np.uint8)
        data, offsets = _row_chunks(dt.inner, arr.fill_null(_default_scalar(dt.inner, arr.type)) if arr.null_count
                                    else arr, column)
        sizes = np.where(nulls.astype(bool), 0, np.diff(offsets))
        kept_offsets = np.zeros(n + 1, np.int64)
        np.cumsum(sizes, out=kept_offsets[1:])
        keep = np.repeat(~nulls.astype(bool), np.diff(offsets))
        kept = data[int(offsets[0]):int(offsets[-1])][keep]
        return _interleave([(nulls, np.arange(n + 1, dtype=np.int64)), (kept, kept_offsets)])
    if isinstance(dt, (Array, Map)):
        arr = _coerce(dt, arr, column)
        lengths, child = _list_parts(arr)
        child_offsets = np.zeros(n + 1, np.int64)
        np.cumsum(lengths, out=child_offsets[1:])
        if isinstance(dt, Array):
            inner, inner_offsets = _row_chunks(dt.inner, child, column)
        else:
            keys, values = child.flatten()
            inner, inner_offsets = _interleave([_row_chunks(dt.key, keys, column), _row_chunks(dt.value, values, column)])
        sizes = _encode_varuints(lengths.astype(np.uint64))
        return _interleave([sizes, (inner, inner_offsets[child_offsets])])
    if isinstance(dt, Tuple):
        arr = _coerce(dt, arr, column)
        return _interleave([_row_chunks(e, child, column) for e, child in zip(dt.elements, arr.flatten(), strict=True)])
    arr = _coerce(dt, arr, column)
    if _is_string(dt):
        return _encode_classic(*_string_buffers(arr))
    values = _fixed_storage(dt, arr, column)
    width = _fixed_width(dt)
    return np.frombuffer(values.tobytes(), np.uint8), np.arange(n + 1, dtype=np.int64) * width


def _encode_varuints(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    nbytes = _varuint_sizes(values)
    offsets = np.zeros(len(values) + 1, np.int64)
    np.cumsum(nbytes, out=offsets[1:])
    out = np.empty(int(offsets[-1]), np.uint8)
    for k in range(int(nbytes.max()) if len(nbytes) else 0):
        rows = nbytes > k
        byte = (values[rows] >> np.uint64(7 * k)) & np.uint64(0x7F)
        byte |= np.where(nbytes[rows] > k + 1, np.uint64(0x80), np.uint64(0))
        out[offsets[:-1][rows] + k] = byte.astype(np.uint8)
    return out, offsets


def serialize_rows(dts: Sequence[DataType], arrays: Sequence[pa.Array | pa.ChunkedArray],
                   row_indices: np.ndarray | Sequence[int]) -> bytes:
    """The values at `row_indices`, row by row, each column in ClickHouse's binary value format."""
    if len(dts) != len(arrays):
        raise FormatError(f"serialize_rows: {len(dts)} types but {len(arrays)} columns")
    indices = pa.array(np.asarray(row_indices, dtype=np.int64))
    if not dts:
        return b""
    parts = [_row_chunks(dt, _combine(arr).take(indices), f"#{i}") for i, (dt, arr) in enumerate(zip(dts, arrays, strict=True))]
    return _interleave(parts)[0].tobytes()


def _read_varuint(buf: memoryview, pos: int, where: str) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise CorruptPartError(f"{where}: truncated variable-length integer at byte offset {pos}")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if b < 0x80:
            return value, pos


def _split_row(dt: DataType, base: str, level: int, buf: memoryview, pos: int, out: dict[str, bytearray]) -> int:
    """Move one value from row-binary form into column-stream form (classic strings)."""
    if isinstance(dt, Nullable):
        if pos >= len(buf):
            raise CorruptPartError(f"row data: truncated NULL flag at byte offset {pos}")
        is_null = buf[pos]
        out[base + ".null"].append(is_null)
        if is_null:
            _write_default(dt.inner, base, out)
            return pos + 1
        return _split_row(dt.inner, base, level, buf, pos + 1, out)
    if isinstance(dt, (Array, Map)):
        count, pos = _read_varuint(buf, pos, "row data")
        out[f"{base}.size{level}"] += struct.pack("<Q", count)
        for _ in range(count):
            if isinstance(dt, Array):
                pos = _split_row(dt.inner, base, level + 1, buf, pos, out)
            else:
                pos = _split_row(dt.key, _element_base(base, "keys"), level + 1, buf, pos, out)
                pos = _split_row(dt.value, _element_base(base, "values"), level + 1, buf, pos, out)
        return pos
    if isinstance(dt, Tuple):
        for name, e in zip(dt.element_names, dt.elements, strict=True):
            pos = _split_row(e, _element_base(base, name), level, buf, pos, out)
        return pos
    if _is_string(dt):
        length, start = _read_varuint(buf, pos, "row data")
        end = start + length
        if end > len(buf):
            raise CorruptPartError(f"row data: string at byte offset {pos} runs past the end")
        out[base] += buf[pos:end]
        return end
    width = _fixed_width(dt)
    if pos + width > len(buf):
        raise CorruptPartError(f"row data: {dt.to_clickhouse()} value at byte offset {pos} runs past the end")
    out[base] += buf[pos:pos + width]
    return pos + width


def _split_rows_vectorised(plain: Sequence[DataType], view: memoryview, n_rows: int) -> list[bytes] | None:
    """Row-binary rows of fixed-width and String values → one column stream per value, without a
    Python loop per row (primary indexes hold a row per granule: millions in a big table). None
    for other types (Nullable, arrays, tuples), which take the general path."""
    widths = []
    for dt in plain:
        if _is_string(dt):
            widths.append(-1)
        elif isinstance(dt, (Primitive, FixedString, DateTime, DateTime64, Decimal, Enum)):
            widths.append(_fixed_width(dt))
        else:
            return None
    data = np.frombuffer(view, np.uint8)
    if -1 not in widths:
        row = sum(widths)
        if row * n_rows != len(data):
            raise CorruptPartError(f"row data: {len(data)} bytes are not {n_rows} rows of {row} bytes")
        if len(widths) == 1:
            return [data.tobytes()]
        matrix = data.reshape(n_rows, row)
        offsets = np.cumsum([0, *widths])
        return [matrix[:, offsets[i]:offsets[i + 1]].tobytes() for i in range(len(widths))]
    starts, end = _row_value_starts(data, np.array(widths, np.int64), n_rows)
    if end < 0:
        raise CorruptPartError(f"row data: a value of row {-1 - end} runs past the end of {len(data)} bytes")
    if end != len(data):
        raise CorruptPartError(f"row data: {len(data) - end} bytes left after {n_rows} rows")
    ends = np.empty_like(starts)
    ends[:, :-1] = starts[:, 1:]
    ends[:-1, -1] = starts[1:, 0]
    if n_rows:
        ends[-1, -1] = end
    streams = []
    for i in range(len(widths)):
        lengths = ends[:, i] - starts[:, i]
        total = int(lengths.sum())
        # Positions of every byte of the column's values, in row order.
        shift = np.repeat(starts[:, i] - (np.cumsum(lengths) - lengths), lengths)
        streams.append(data[shift + np.arange(total)].tobytes())
    return streams


@lazy_njit
def _row_value_starts(buf, widths, n):  # pragma: no cover - compiled
    """Byte offset of every value of n row-binary rows (width -1: a String, varint length first);
    and the end offset, or -1 - row when that row runs past the buffer."""
    starts = np.empty((n, widths.shape[0]), np.int64)
    pos = 0
    size = buf.shape[0]
    for i in range(n):
        for j in range(widths.shape[0]):
            starts[i, j] = pos
            width = widths[j]
            if width < 0:
                value = 0
                shift = 0
                while True:
                    if pos >= size or shift > 63:
                        return starts, -1 - i
                    b = buf[pos]
                    pos += 1
                    value |= (b & 0x7F) << shift
                    shift += 7
                    if b < 0x80:
                        break
                width = value
            pos += width
            if pos > size:
                return starts, -1 - i
    return starts, pos


def _write_default(dt: DataType, base: str, out: dict[str, bytearray]) -> None:
    if _is_string(dt):
        out[base].append(0)
    elif isinstance(dt, Enum):
        out[base] += struct.pack("<b" if dt.bits == 8 else "<h", dt.values[0][1])
    else:
        out[base] += bytes(_fixed_width(dt))


def deserialize_rows(dts: Sequence[DataType], buf: bytes | memoryview, n_rows: int) -> list[pa.Array]:
    """Inverse of serialize_rows: `n_rows` rows of row-binary values → one Arrow array per column."""
    plain = [_strip_low_cardinality(dt) for dt in dts]
    view = memoryview(buf).cast("B")
    streams = _split_rows_vectorised(plain, view, n_rows)
    if streams is not None:
        return [deserialize_column(dt, f"c{i}", {f"c{i}": streams[i]}, n_rows, string_sizes=False)
                for i, dt in enumerate(plain)]
    columns = [{name: bytearray() for name in stream_names(dt, f"c{i}", string_sizes=False)} for i, dt in enumerate(plain)]
    pos = 0
    for _ in range(n_rows):
        for i, dt in enumerate(plain):
            pos = _split_row(dt, f"c{i}", 0, view, pos, columns[i])
    if pos != len(view):
        raise CorruptPartError(f"row data: {len(view) - pos} bytes left after {n_rows} rows")
    return [deserialize_column(dt, f"c{i}", {k: bytes(v) for k, v in columns[i].items()}, n_rows, string_sizes=False)
            for i, dt in enumerate(plain)]

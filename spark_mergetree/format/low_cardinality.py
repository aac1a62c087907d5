"""LowCardinality columns: the `.dict` stream of shared dictionaries and the index stream of pieces
(ClickHouse's `SerializationLowCardinality`, keys version 1).

Each non-empty granule is one piece: flags (index width, whether it uses the shared dictionary,
whether it carries additional keys), optional additional keys, the row count and the indexes. A
shared dictionary is flushed to `.dict` once it holds LOW_CARDINALITY_MAX_DICTIONARY_SIZE keys and
at the end. Slot 0 is NULL (Nullable keys only), the next slot the type's default.
format_spec/types.md describes the bytes.
"""

from __future__ import annotations

import struct

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from spark_mergetree.errors import CorruptPartError, SchemaMismatchError
from spark_mergetree.format.streams import StreamBytes
from spark_mergetree.format.types import DataType, LowCardinality, Nullable, to_arrow
from spark_mergetree.format.values import (
    Cursor,
    apply_nulls,
    default_scalar,
    encode_classic,
    fixed_storage,
    fixed_to_arrow,
    fixed_width,
    is_string,
    read_classic,
    string_buffers,
)

__all__ = [
    "LOW_CARDINALITY_MAX_DICTIONARY_SIZE", "LowCardinalityState", "serialize_low_cardinality",
    "deserialize_low_cardinality",
]


LOW_CARDINALITY_MAX_DICTIONARY_SIZE = 8192
_LC_NEED_GLOBAL_DICTIONARY = 1 << 8
_LC_HAS_ADDITIONAL_KEYS = 1 << 9
_LC_NEED_UPDATE_DICTIONARY = 1 << 10
_LC_KEYS_VERSION = 1
_INDEX_DTYPES: tuple[np.dtype, ...] = (np.dtype("<u1"), np.dtype("<u2"), np.dtype("<u4"), np.dtype("<u8"))


def _key_bytes(key_type: DataType, keys: pa.Array) -> bytes:
    """Dictionary keys as ClickHouse bulk-writes them: strings classic, others fixed width."""
    if is_string(key_type):
        offsets, data = string_buffers(keys)
        return encode_classic(offsets, data)[0].tobytes()
    return fixed_storage(key_type, keys, "<dictionary>").tobytes()


class LowCardinalityState:
    """What a LowCardinality stream carries from one block of granules to the next when a column is
    written in several blocks: whether the keys version was written and the shared dictionary not
    yet flushed (keys after the reserved slots, in order of first appearance)."""

    __slots__ = ("started", "shared")

    def __init__(self) -> None:
        self.started = False
        self.shared: pa.Array | None = None


def serialize_low_cardinality(dt: LowCardinality, base: str, arr: pa.Array, bounds: np.ndarray, column: str,
                               out: dict[str, StreamBytes], state: LowCardinalityState | None = None,
                               last: bool = True) -> None:
    """The `.dict` and index streams of rows cut at `bounds`. Written in blocks, the rows of one
    column pass the same `state` each time, `last` set for the last block only (it flushes the shared
    dictionary): the bytes are those of one call over all rows."""
    key_type, nullable = dt.dictionary_type, isinstance(dt.inner, Nullable)
    if arr.null_count and not nullable:
        raise SchemaMismatchError(f"column {column!r} has NULLs but its type {dt.to_clickhouse()} is not Nullable")
    state = state if state is not None else LowCardinalityState()
    default = pa.array([default_scalar(key_type, arr.type)], arr.type)
    reserved = 2 if nullable else 1  # NULL slot (nullable only), then the default value
    dict_parts: list[bytes] = [] if state.started else [struct.pack("<Q", _LC_KEYS_VERSION)]
    dict_size = 0 if state.started else 8
    state.started = True
    index_parts: list[bytes] = []
    index_size = 0
    dict_offsets = np.zeros(len(bounds), np.int64)
    index_offsets = np.zeros(len(bounds), np.int64)
    shared = state.shared

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
        if shared is None:
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
    if shared is not None and last:
        flush_dictionary(shared)
        shared = None
    state.shared = shared
    dict_offsets[-1], index_offsets[-1] = dict_size, index_size
    out[base + ".dict"] = StreamBytes(b"".join(dict_parts), dict_offsets)
    out[base] = StreamBytes(b"".join(index_parts), index_offsets)


def _index_width_code(max_index: int) -> int:
    for code, dtype in enumerate(_INDEX_DTYPES):
        if max_index < 1 << (8 * dtype.itemsize):
            return code
    return 3


def _read_keys(key_type: DataType, cursor: Cursor, count: int) -> pa.Array:
    if is_string(key_type):
        return read_classic(cursor, count)
    width = fixed_width(key_type)
    return fixed_to_arrow(key_type, cursor.take(width * count), count, cursor.name)


def deserialize_low_cardinality(dt: LowCardinality, base: str, n: int, cursors: dict[str, Cursor]) -> pa.Array:
    key_type, nullable = dt.dictionary_type, isinstance(dt.inner, Nullable)
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
            values = apply_nulls(values, indexes == 0)
        pieces.append(values)
        remaining -= take
    if not pieces:
        return pa.array([], to_arrow(dt))
    return pa.concat_arrays(pieces) if len(pieces) > 1 else pieces[0]

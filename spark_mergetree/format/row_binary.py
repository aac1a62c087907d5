"""Row-binary values: rows of several columns in ClickHouse's binary value format (`serializeBinary`),
as `primary.idx`, `partition.dat` and the `minmax_*.idx` files hold them.

Each value is written whole, row after row: Nullable as a flag byte then the value, arrays and maps
as a varuint count then the elements, strings as a varuint length then the bytes, LowCardinality as
its inner type. A Dynamic value is its type's binary encoding then the value (0x00 alone: NULL),
kept as those bytes (its Arrow form); a JSON object is a varuint count of paths, then each path's
name and its value as a Dynamic value, kept as the stored form of JSON (map path → value bytes).
Reading splits the rows into column streams (vectorised for fixed-width and String columns) and
hands them to `serialization.deserialize_column`; a Dynamic or JSON value is found by walking it
value by value (its type decides its length), which only values of those types pay for.
"""

from __future__ import annotations

import struct
from collections import defaultdict
from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from spark_mergetree.errors import CorruptPartError, FormatError, SchemaMismatchError
from spark_mergetree.format.compiled import lazy_njit
from spark_mergetree.format.serialization import default_column, deserialize_column
from spark_mergetree.format.streams import element_base, stream_names
from spark_mergetree.format.type_codes import decode_type, encode_type, text_bytes
from spark_mergetree.format.types import (
    Array,
    DataType,
    DateTime,
    DateTime64,
    Decimal,
    Dynamic,
    Enum,
    FixedString,
    Json,
    LowCardinality,
    Map,
    Nullable,
    Primitive,
    Time,
    Time64,
    Tuple,
    contains_type,
    to_arrow,
)
from spark_mergetree.format.values import (
    Cursor,
    coerce,
    combine,
    default_scalar,
    encode_classic,
    encode_varuints,
    fixed_storage,
    fixed_width,
    is_string,
    list_parts,
    string_buffers,
    varuint_bytes,
)

__all__ = ["serialize_rows", "deserialize_rows"]


_STRING = Primitive("String")
# A JSON object's values are the bytes of Dynamic values; the stored form of JSON holds them so.
_STORED_JSON = pa.map_(pa.string(), pa.binary())


def _holds_objects(dt: DataType) -> bool:
    return contains_type(dt, Dynamic) or contains_type(dt, Json)


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
        filled = (arr.fill_null([]) if isinstance(dt.inner, Json) else arr.fill_null(default_scalar(dt.inner, arr.type))) \
            if arr.null_count else arr
        data, offsets = _row_chunks(dt.inner, filled, column)
        sizes = np.where(nulls.astype(bool), 0, np.diff(offsets))
        kept_offsets = np.zeros(n + 1, np.int64)
        np.cumsum(sizes, out=kept_offsets[1:])
        keep = np.repeat(~nulls.astype(bool), np.diff(offsets))
        kept = data[int(offsets[0]):int(offsets[-1])][keep]
        return _interleave([(nulls, np.arange(n + 1, dtype=np.int64)), (kept, kept_offsets)])
    if isinstance(dt, Dynamic):
        return _dynamic_chunks(arr, column)
    if isinstance(dt, Json):
        return _object_chunks(dt, arr, column)
    if isinstance(dt, (Array, Map)):
        arr = arr if _holds_objects(dt) else coerce(dt, arr, column)
        lengths, child = list_parts(arr)
        child_offsets = np.zeros(n + 1, np.int64)
        np.cumsum(lengths, out=child_offsets[1:])
        if isinstance(dt, Array):
            inner, inner_offsets = _row_chunks(dt.inner, child, column)
        else:
            keys, values = child.flatten()
            inner, inner_offsets = _interleave([_row_chunks(dt.key, keys, column), _row_chunks(dt.value, values, column)])
        return _interleave([encode_varuints(lengths.astype(np.uint64)), (inner, inner_offsets[child_offsets])])
    if isinstance(dt, Tuple):
        arr = arr if _holds_objects(dt) else coerce(dt, arr, column)
        return _interleave([_row_chunks(e, child, column) for e, child in zip(dt.elements, arr.flatten(), strict=True)])
    arr = coerce(dt, arr, column)
    if is_string(dt):
        return encode_classic(*string_buffers(arr))
    values = fixed_storage(dt, arr, column)
    width = fixed_width(dt)
    return np.frombuffer(values.tobytes(), np.uint8), np.arange(n + 1, dtype=np.int64) * width


def _dynamic_chunks(arr: pa.Array, column: str) -> tuple[np.ndarray, np.ndarray]:
    """Dynamic values in their Arrow form (type encoding + value, binary) are their binary value
    format already; a NULL is the type Nothing (0x00)."""
    if not (pa.types.is_binary(arr.type) or pa.types.is_large_binary(arr.type)):
        raise FormatError(f"column {column!r}: Dynamic values are binary (type encoding, then the value), not {arr.type}")
    if arr.null_count:
        arr = arr.fill_null(pa.scalar(b"\x00", arr.type))
    offsets, data = string_buffers(arr)
    return data, offsets


def _object_chunks(dt: Json, arr: pa.Array, column: str) -> tuple[np.ndarray, np.ndarray]:
    """JSON objects in their stored form (map path → Dynamic value bytes) → a varuint count, then
    each path's name and value bytes: the typed paths first (every one, in the type's order, each
    value in its type's binary format: no type encoding), then the other paths as Dynamic values."""
    if not pa.types.is_map(arr.type):
        raise FormatError(f"column {column!r}: {dt.to_clickhouse()} inside a Dynamic value is written from its stored "
                          f"form (map path → value bytes), not {arr.type}")
    lengths, entries = list_parts(arr)
    keys, values = entries.flatten()
    n = len(lengths)
    typed_parts: list[tuple[np.ndarray, np.ndarray]] = []
    if dt.typed_paths:
        entry_rows = np.repeat(np.arange(n, dtype=np.int64), lengths)
        others = np.ones(len(keys), bool)
        for path, t in dt.typed_paths:
            hit = np.asarray(pc.fill_null(pc.equal(keys, path), False), dtype=bool)
            others &= ~hit
            name = np.frombuffer(text_bytes(path), np.uint8)
            typed_parts.append((np.tile(name, n), np.arange(n + 1, dtype=np.int64) * len(name)))
            typed_parts.append(_typed_value_chunks(t, entry_rows[hit], values.filter(pa.array(hit)), n,
                                                   f"column {column!r}, typed path {path!r}"))
        lengths = np.bincount(entry_rows[others], minlength=n).astype(np.int64)
        keys, values = keys.filter(pa.array(others)), values.filter(pa.array(others))
    entry_offsets = np.zeros(n + 1, np.int64)
    np.cumsum(lengths, out=entry_offsets[1:])
    inner, inner_offsets = _interleave([encode_classic(*string_buffers(keys)), _dynamic_chunks(values, column)])
    count = encode_varuints((lengths + len(dt.typed_paths)).astype(np.uint64))
    return _interleave([count, *typed_parts, (inner, inner_offsets[entry_offsets])])


def _typed_value_chunks(dt: DataType, rows: np.ndarray, values: pa.Array, n: int, where: str
                        ) -> tuple[np.ndarray, np.ndarray]:
    """A typed path's values, given at `rows` (ascending) as Dynamic values of its type (its type's
    encoding, then the value; a NULL of a Nullable type may be absent or the Nothing code), → each
    of the `n` rows' value in the type's binary format (its default where a row has none)."""
    nullable = isinstance(dt, Nullable)
    inner = dt.inner if isinstance(dt, Nullable) else dt
    encoding = np.frombuffer(encode_type(inner), np.uint8)
    offsets, data = string_buffers(values.cast(pa.binary())) if len(values) else (np.zeros(1, np.int64), np.zeros(0, np.uint8))
    starts, ends = offsets[:-1], offsets[1:]
    given = np.asarray(values.is_valid(), dtype=bool) & (ends > starts)
    given[given] = data[starts[given]] != 0x00  # (Nothing: NULL)
    if len(np.unique(rows)) != len(rows):
        raise FormatError(f"{where}: a row holds the path twice")
    fits = ends - starts >= len(encoding)
    head = starts[:, None] + np.arange(len(encoding))
    fits[fits] = (data[np.minimum(head[fits], max(len(data) - 1, 0))] == encoding).all(axis=1)
    if (given & ~fits).any():
        raise SchemaMismatchError(f"{where}: a value not of type {dt.to_clickhouse()} (a typed path holds its own "
                                  "type only)")
    rows, starts, ends = rows[given], starts[given] + len(encoding), ends[given]
    lengths = ends - starts
    body = np.zeros(int(lengths.sum()), np.uint8)
    if len(body):
        body = data[np.repeat(starts - np.concatenate([[0], np.cumsum(lengths)[:-1]]), lengths) + np.arange(len(body))]
    present = np.zeros(n, np.int64)
    present[rows] = lengths
    if nullable:
        default = np.array([1], np.uint8)
    else:
        chunk, _ = value_chunks(dt, default_column(dt, 1))
        default = np.asarray(chunk, np.uint8)
    missing = np.ones(n, bool)
    missing[rows] = False
    flags = (np.zeros(len(rows), np.uint8), np.arange(len(rows) + 1, dtype=np.int64))
    parts = []
    if nullable:  # 0x00 before a value, 0x01 alone for NULL
        flag_sizes = np.zeros(n, np.int64)
        flag_sizes[rows] = 1
        parts.append((flags[0], _offsets(flag_sizes)))
    parts.append((body, _offsets(present)))
    parts.append((np.tile(default, int(missing.sum())), _offsets(np.where(missing, len(default), 0))))
    return _interleave(parts)


def _offsets(sizes: np.ndarray) -> np.ndarray:
    out = np.zeros(len(sizes) + 1, np.int64)
    np.cumsum(sizes, out=out[1:])
    return out


def serialize_rows(dts: Sequence[DataType], arrays: Sequence[pa.Array | pa.ChunkedArray],
                   row_indices: np.ndarray | Sequence[int]) -> bytes:
    """The values at `row_indices`, row by row, each column in ClickHouse's binary value format."""
    if len(dts) != len(arrays):
        raise FormatError(f"serialize_rows: {len(dts)} types but {len(arrays)} columns")
    indices = pa.array(np.asarray(row_indices, dtype=np.int64))
    if not dts:
        return b""
    parts = [_row_chunks(dt, combine(arr).take(indices), f"#{i}") for i, (dt, arr) in enumerate(zip(dts, arrays, strict=True))]
    return _interleave(parts)[0].tobytes()


def value_chunks(dt: DataType, arr: pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
    """Each value of `arr` in ClickHouse's binary value format: (bytes, offsets of the n + 1 value bounds)."""
    return _row_chunks(dt, combine(arr), "")


def interleave_chunks(parts: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """Chunked byte arrays (bytes, offsets) joined entry by entry: entry i of the result is entry i of
    every part, in order. Returns (bytes, offsets)."""
    return _interleave(parts)


def read_varuint(buf: memoryview | np.ndarray, pos: int, where: str) -> tuple[int, int]:
    """The LEB128 unsigned integer at `pos` and the position after it."""
    value = shift = 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise CorruptPartError(f"{where}: truncated variable-length integer at byte offset {pos}")
        b = int(buf[pos])
        pos += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if b < 0x80:
            return value, pos


def _span_type(dt: DataType) -> DataType:
    """The type whose column streams `_split_row` writes a value of `dt` into: a Dynamic value as a
    String of its bytes, a JSON object as a Map(String, String) of its paths and value bytes."""
    if isinstance(dt, Dynamic):
        return _STRING
    if isinstance(dt, Json):
        return Map(_STRING, _STRING)
    if isinstance(dt, Nullable) and isinstance(dt.inner, Json):
        # A NULL map and the object's map: streams only (a Nullable of a Map is no type of its own)
        span = object.__new__(Nullable)
        object.__setattr__(span, "inner", _span_type(dt.inner))
        return span
    if isinstance(dt, (Array, Nullable)) and _holds_objects(dt):
        return type(dt)(_span_type(dt.inner))
    if isinstance(dt, Map) and _holds_objects(dt):
        return Map(dt.key, _span_type(dt.value))
    if isinstance(dt, Tuple) and _holds_objects(dt):
        return Tuple(tuple(_span_type(e) for e in dt.elements), dt.names)
    return dt


def _arrow_of(dt: DataType) -> pa.DataType:
    """The Arrow type of `dt`'s values with each Dynamic as binary and each JSON in its stored form."""
    if isinstance(dt, Dynamic):
        return pa.binary()
    if isinstance(dt, Json):
        return _STORED_JSON
    arrow = to_arrow(dt)
    if isinstance(dt, Array) and _holds_objects(dt):
        return pa.list_(arrow.value_field.with_type(_arrow_of(dt.inner)))
    if isinstance(dt, Nullable):
        return _arrow_of(dt.inner)
    if isinstance(dt, Map) and _holds_objects(dt):
        return pa.map_(arrow.key_field, arrow.item_field.with_type(_arrow_of(dt.value)))
    if isinstance(dt, Tuple) and _holds_objects(dt):
        return pa.struct([f.with_type(_arrow_of(e)) for f, e in zip(arrow, dt.elements, strict=True)])
    return arrow


def _value_end(dt: DataType, buf: memoryview, pos: int) -> int:
    """Where the row-binary value of `dt` at `pos` ends."""
    return _split_row(_strip_low_cardinality(dt), "v", 0, buf, pos, defaultdict(bytearray))


def _dynamic_end(buf: memoryview, pos: int) -> int:
    """Where the Dynamic value at `pos` ends: its type's encoding, then a value of that type."""
    if pos >= len(buf):
        raise CorruptPartError(f"row data: truncated Dynamic value at byte offset {pos}")
    if buf[pos] == 0x00:  # Nothing: NULL
        return pos + 1
    cursor = Cursor("row data", bytes(buf[pos:pos + 4096]))
    try:
        found = decode_type(cursor)
    except CorruptPartError:  # a type encoding longer than the window: decode it from the whole buffer
        cursor = Cursor("row data", bytes(buf[pos:]))
        found = decode_type(cursor)
    return _value_end(found, buf, pos + cursor.pos)


def _put_classic(out: bytearray, raw: memoryview) -> None:
    out += varuint_bytes(len(raw))
    out += raw


def _split_row(dt: DataType, base: str, level: int, buf: memoryview, pos: int, out: dict[str, bytearray]) -> int:
    """Move one value from row-binary form into column-stream form (classic strings)."""
    if isinstance(dt, Dynamic):
        end = _dynamic_end(buf, pos)
        _put_classic(out[base], buf[pos:end])
        return end
    if isinstance(dt, Json):
        # (typed paths' values are in their types' binary format: kept as Dynamic values of their
        # types, as the stored form holds them, a NULL left out)
        typed = {path.encode("utf-8", "surrogateescape"): t for path, t in dt.typed_paths}
        count, pos = read_varuint(buf, pos, "row data")
        kept = 0
        for _ in range(count):
            length, start = read_varuint(buf, pos, "row data")
            if start + length > len(buf):
                raise CorruptPartError(f"row data: a JSON path at byte offset {pos} runs past the end")
            key = buf[start:start + length]
            pos = start + length
            t = typed.get(bytes(key)) if typed else None
            if t is None:
                end = _dynamic_end(buf, pos)
                value = bytes(buf[pos:end])
            else:
                end = _value_end(t, buf, pos)
                if isinstance(t, Nullable) and buf[pos]:
                    pos = end
                    continue
                value = encode_type(t.inner if isinstance(t, Nullable) else t) + \
                    bytes(buf[pos + (1 if isinstance(t, Nullable) else 0):end])
            _put_classic(out[element_base(base, "keys")], key)
            _put_classic(out[element_base(base, "values")], memoryview(value))
            kept += 1
            pos = end
        out[f"{base}.size{level}"] += struct.pack("<Q", kept)
        return pos
    if isinstance(dt, Nullable):
        if pos >= len(buf):
            raise CorruptPartError(f"row data: truncated NULL flag at byte offset {pos}")
        is_null = buf[pos]
        out[base + ".null"].append(is_null)
        if is_null and isinstance(dt.inner, Json):  # (a NULL object: no paths)
            out[f"{base}.size{level}"] += struct.pack("<Q", 0)
            return pos + 1
        if is_null:
            _write_default(dt.inner, base, out)
            return pos + 1
        return _split_row(dt.inner, base, level, buf, pos + 1, out)
    if isinstance(dt, (Array, Map)):
        count, pos = read_varuint(buf, pos, "row data")
        out[f"{base}.size{level}"] += struct.pack("<Q", count)
        for _ in range(count):
            if isinstance(dt, Array):
                pos = _split_row(dt.inner, base, level + 1, buf, pos, out)
            else:
                pos = _split_row(dt.key, element_base(base, "keys"), level + 1, buf, pos, out)
                pos = _split_row(dt.value, element_base(base, "values"), level + 1, buf, pos, out)
        return pos
    if isinstance(dt, Tuple):
        for name, e in zip(dt.element_names, dt.elements, strict=True):
            pos = _split_row(e, element_base(base, name), level, buf, pos, out)
        return pos
    if is_string(dt):
        length, start = read_varuint(buf, pos, "row data")
        end = start + length
        if end > len(buf):
            raise CorruptPartError(f"row data: string at byte offset {pos} runs past the end")
        out[base] += buf[pos:end]
        return end
    width = fixed_width(dt)
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
        if is_string(dt):
            widths.append(-1)
        elif isinstance(dt, (Primitive, FixedString, DateTime, DateTime64, Time, Time64, Decimal, Enum)):
            widths.append(fixed_width(dt))
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
def _row_value_starts(buf: np.ndarray, widths: np.ndarray, n: int) -> tuple[np.ndarray, int]:  # pragma: no cover - compiled
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
    if is_string(dt):
        out[base].append(0)
    elif isinstance(dt, Enum):
        out[base] += struct.pack("<b" if dt.bits == 8 else "<h", dt.values[0][1])
    else:
        out[base] += bytes(fixed_width(dt))


def deserialize_rows(dts: Sequence[DataType], buf: bytes | memoryview, n_rows: int) -> list[pa.Array]:
    """Inverse of serialize_rows: `n_rows` rows of row-binary values → one Arrow array per column."""
    plain = [_strip_low_cardinality(dt) for dt in dts]
    view = memoryview(buf).cast("B")
    streams = _split_rows_vectorised(plain, view, n_rows)
    if streams is not None:
        return [deserialize_column(dt, f"c{i}", {f"c{i}": streams[i]}, n_rows, string_sizes=False)
                for i, dt in enumerate(plain)]
    spans = [_span_type(dt) for dt in plain]
    columns = [{name: bytearray() for name in stream_names(dt, f"c{i}", string_sizes=False)} for i, dt in enumerate(spans)]
    pos = 0
    for _ in range(n_rows):
        for i, dt in enumerate(plain):
            pos = _split_row(dt, f"c{i}", 0, view, pos, columns[i])
    if pos != len(view):
        raise CorruptPartError(f"row data: {len(view) - pos} bytes left after {n_rows} rows")
    out = []
    for i, (dt, span) in enumerate(zip(plain, spans, strict=True)):
        arr = deserialize_column(span, f"c{i}", {k: bytes(v) for k, v in columns[i].items()}, n_rows, string_sizes=False)
        out.append(arr.cast(_arrow_of(dt)) if span is not dt else arr)
    return out

"""Column serialization: an Arrow column ↔ the bytes of its streams, cut at granule boundaries.

This module composes the per-type encodings of `values` through Nullable (a `.null` map), Array and
Map (`.sizeN` streams of UInt64 lengths) and Tuple (one set of streams per element), and hands
LowCardinality and sparse streams to `low_cardinality` and `sparse`. Stream names come from
`streams`. The writer serializes a column once into per-granule byte ranges; the reader
deserializes rows from streams positioned at a granule's mark. format_spec/types.md describes every
encoding.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from spark_mergetree.errors import CorruptPartError, FormatError, SchemaMismatchError, UnsupportedError
from spark_mergetree.fileops import escape_for_file_name
from spark_mergetree.format.aggregate_states import state_lengths
from spark_mergetree.format.conform import conform_array
from spark_mergetree.format.json_text import OBJECT_STRUCTURE, stored_json_arrow
from spark_mergetree.format.low_cardinality import (
    LowCardinalityState,
    deserialize_low_cardinality,
    serialize_low_cardinality,
)
from spark_mergetree.format.numpy_views import as_numpy
from spark_mergetree.format.sparse import default_cursors, read_sparse_positions, spread_sparse
from spark_mergetree.format.streams import (
    DISCRIMINATORS,
    SparseSpec,
    StreamBytes,
    element_base,
    external_name,
    internal_names,
    sparse_streams,
    variant_base,
)
from spark_mergetree.format.types import (
    VARIANT_NULL,
    AggregateFunction,
    Array,
    DataType,
    Dynamic,
    Json,
    LowCardinality,
    Map,
    Nullable,
    Tuple,
    Variant,
    contains_type,
    to_arrow,
    to_arrow_holding,
)
from spark_mergetree.format.values import (
    Cursor,
    apply_nulls,
    coerce,
    combine,
    default_scalar,
    encode_classic,
    encode_varuints,
    fixed_storage,
    fixed_to_arrow,
    fixed_width,
    is_string,
    list_parts,
    read_classic,
    string_buffers,
    strings_from_parts,
)

__all__ = ["serialize_column", "deserialize_column", "default_column", "ObjectReader", "ObjectWriter"]

# Reads the objects of a JSON inside another type (`deserialize_column`'s `objects`): (its type, its
# streams' base, its nesting level, how many objects) → their Arrow values.
ObjectReader = Callable[[Json, str, int, int], pa.Array]
# Writes the values of a JSON (or a Dynamic) inside another type (`serialize_column`'s `objects`): (its type, its
# streams' base, its nesting level, its values, their granule bounds) → its streams in order.
ObjectWriter = Callable[[DataType, str, int, pa.Array, np.ndarray], dict[str, StreamBytes]]


def serialize_column(
    dt: DataType,
    column_name: str,
    array: pa.Array | pa.ChunkedArray,
    granule_rows: np.ndarray,
    string_sizes: bool = True,
    states: dict[str, LowCardinalityState] | None = None,
    last: bool = True,
    base: str | None = None,
    level: int = 0,
    objects: ObjectWriter | None = None,
) -> dict[str, StreamBytes]:
    """Every stream of a column, cut into granules of `granule_rows` rows (must sum to len(array)).

    A column written in blocks of granules passes one `states` dict for all its blocks and `last`
    for the last one: the streams' bytes then continue one another as one call's would. `base`
    names the streams of a subcolumn stored on its own (a JSON path: `j.a`) instead of the escaped
    column name, and `level` its nesting depth in Arrays and Maps. `objects` writes each JSON inside
    the column (in an Array, Map or Tuple): called with the JSON type, its stream base, its nesting
    level, its values and their granule bounds, it gives the JSON's streams in order."""
    arr = combine(array)
    granule_rows = np.asarray(granule_rows, dtype=np.int64)
    if (granule_rows < 0).any() or int(granule_rows.sum()) != len(arr):
        raise FormatError(
            f"column {column_name!r}: granule sizes sum to {int(granule_rows.sum())} but the column has {len(arr)} rows")
    bounds = np.zeros(len(granule_rows) + 1, np.int64)
    np.cumsum(granule_rows, out=bounds[1:])
    out: dict[str, StreamBytes] = {}
    _serialize(dt, escape_for_file_name(column_name) if base is None else base, level, arr, bounds, string_sizes,
               column_name, out, {} if states is None else states, last, objects)
    if objects is not None:  # (a JSON's streams follow from its values: `out` has them in order)
        return {external_name(dt, column_name, name): data for name, data in out.items()}
    if base is not None:
        return {name: out[name] for name in internal_names(dt, column_name, string_sizes, False, base, level)}
    return {external_name(dt, column_name, name): out[name]
            for name in internal_names(dt, column_name, string_sizes, False)}


def _serialize(dt: DataType, base: str, level: int, arr: pa.Array, bounds: np.ndarray, string_sizes: bool,
               column: str, out: dict[str, StreamBytes], states: dict[str, LowCardinalityState], last: bool,
               objects: ObjectWriter | None = None) -> None:
    if isinstance(dt, Nullable):
        nulls = as_numpy(arr.is_null()).astype(np.uint8) if arr.null_count else np.zeros(len(arr), np.uint8)
        out[base + ".null"] = StreamBytes(nulls.tobytes(), bounds.copy())
        if isinstance(dt.inner, Json):  # (a NULL object is written as `{}` in the JSON's streams)
            _serialize(dt.inner, base, level, arr, bounds, string_sizes, column, out, states, last, objects)
            return
        _serialize_values(dt.inner, base, arr, bounds, string_sizes, column, out, allow_nulls=True)
        return
    if isinstance(dt, LowCardinality):
        arr = coerce(dt, arr, column)
        serialize_low_cardinality(dt, base, arr, bounds, column, out, states.setdefault(base, LowCardinalityState()),
                                  last)
        return
    # (a column holding JSON comes conformed already, its JSON as text or a merge's stored form)
    held_json = objects is not None and (contains_type(dt, Json) or contains_type(dt, Dynamic))
    if isinstance(dt, (Array, Map)):
        arr = arr if held_json else coerce(dt, arr, column)
        lengths, child = list_parts(arr)
        child_offsets = np.zeros(len(lengths) + 1, np.int64)
        np.cumsum(lengths, out=child_offsets[1:])
        out[f"{base}.size{level}"] = StreamBytes(lengths.astype("<u8").tobytes(), bounds * 8)
        child_bounds = child_offsets[bounds]
        if isinstance(dt, Array):
            _serialize(dt.inner, base, level + 1, child, child_bounds, string_sizes, column, out, states, last,
                       objects)
        else:
            keys, values = child.flatten()
            _serialize(dt.key, element_base(base, "keys"), level + 1, keys, child_bounds, string_sizes, column, out,
                       states, last, objects)
            _serialize(dt.value, element_base(base, "values"), level + 1, values, child_bounds, string_sizes, column,
                       out, states, last, objects)
        return
    if isinstance(dt, Tuple):
        arr = arr if held_json else coerce(dt, arr, column)
        if arr.null_count:
            raise SchemaMismatchError(f"column {column!r}: {dt.to_clickhouse()} cannot hold NULL tuples")
        for name, element, child in zip(dt.element_names, dt.elements, arr.flatten(), strict=True):
            _serialize(element, element_base(base, name), level, child, bounds, string_sizes, column, out, states, last,
                       objects)
        return
    if isinstance(dt, Dynamic) and objects is not None:  # (a Dynamic inside a Dynamic value's type)
        out.update(objects(dt, base, level, arr, bounds))
        return
    if isinstance(dt, Dynamic):  # its streams follow from its rows: format/dynamic.py writes it whole
        raise UnsupportedError(f"column {column!r}: {dt.to_clickhouse()} is written as a whole column only")
    if isinstance(dt, Json) and objects is not None:
        out.update(objects(dt, base, level, arr, bounds))
        return
    if isinstance(dt, Json):  # a JSON column is written whole (format/json_write.py); one inside another type is not
        raise UnsupportedError(f"column {column!r}: {dt.to_clickhouse()} inside an Array, Map or Tuple (stream "
                               f"{base!r}) is read but not written")
    if isinstance(dt, Variant):
        arr = arr if held_json else conform_array(arr, dt, column)
        _serialize_variant(dt, base, level, arr, bounds, string_sizes, column, out, states, last, objects)
        return
    _serialize_values(dt, base, arr, bounds, string_sizes, column, out, allow_nulls=False)


def variant_discriminators(dt: Variant, arr: pa.Array) -> np.ndarray:
    """Each row's discriminator: the position of its set field in the struct, VARIANT_NULL for none."""
    discriminators = np.full(len(arr), VARIANT_NULL, np.uint8)
    for i, field in enumerate(arr.flatten()):
        discriminators[as_numpy(field.is_valid())] = i
    return discriminators


def _serialize_variant(dt: Variant, base: str, level: int, arr: pa.Array, bounds: np.ndarray, string_sizes: bool,
                       column: str, out: dict[str, StreamBytes], states: dict[str, LowCardinalityState],
                       last: bool, objects: ObjectWriter | None = None) -> None:
    """Compact discriminators mode (the 26.x default): per granule of rows, VarUInt rows, then format
    1 + the one discriminator when every row has it, else format 0 + one discriminator per row."""
    discriminators = variant_discriminators(dt, arr)
    state = states.setdefault(base + DISCRIMINATORS, LowCardinalityState())
    pieces = [] if state.started else [np.array([DISCRIMINATORS_COMPACT], "<u8").view(np.uint8)]
    state.started = True
    offsets = np.zeros(len(bounds), np.int64)
    offsets[0] = written = sum(len(p) for p in pieces)
    for g in range(len(bounds) - 1):
        rows = discriminators[bounds[g]:bounds[g + 1]]
        if len(rows):
            count, _ = encode_varuints(np.array([len(rows)], np.uint64))
            if (rows == rows[0]).all():
                pieces += [count, np.array([GRANULE_COMPACT, rows[0]], np.uint8)]
            else:
                pieces += [count, np.array([GRANULE_PLAIN], np.uint8), rows]
            written += len(count) + 1 + (1 if (rows == rows[0]).all() else len(rows))
        offsets[g + 1] = written
    data = np.concatenate(pieces) if pieces else np.zeros(0, np.uint8)
    out[base + DISCRIMINATORS] = StreamBytes(data.tobytes(), offsets)
    for i, (name, variant, field) in enumerate(zip(dt.names, dt.variants, arr.flatten(), strict=True)):
        mine = discriminators == i
        before = np.zeros(len(mine) + 1, np.int64)
        np.cumsum(mine, out=before[1:])
        _serialize(variant, variant_base(base, name), level, field.filter(pa.array(mine)), before[bounds],
                   string_sizes, column, out, states, last, objects)


def _memory(values: np.ndarray) -> memoryview:
    """The bytes of an array as a flat memoryview (no copy when it is contiguous)."""
    return np.ascontiguousarray(values).reshape(-1).view(np.uint8).data


def _serialize_values(dt: DataType, base: str, arr: pa.Array, bounds: np.ndarray, string_sizes: bool, column: str,
                      out: dict[str, StreamBytes], allow_nulls: bool) -> None:
    if arr.null_count and not allow_nulls:
        raise SchemaMismatchError(f"column {column!r} has NULLs but its type {dt.to_clickhouse()} is not Nullable")
    arr = coerce(dt, arr, column)
    if is_string(dt):
        offsets, data = string_buffers(arr)
        if string_sizes:
            out[base + ".size"] = StreamBytes(_memory(np.diff(offsets)), bounds * 8)  # int64 lengths: the bytes of UInt64
            out[base] = StreamBytes(_memory(data), offsets[bounds])
        else:
            encoded, row_offsets = encode_classic(offsets, data)
            out[base] = StreamBytes(_memory(encoded), row_offsets[bounds])
        return
    if isinstance(dt, AggregateFunction):
        offsets, data = string_buffers(arr)
        given = np.diff(offsets)
        found = state_lengths(dt, data, 0, len(given), f"column {column!r}", SchemaMismatchError)
        if (found != given).any():
            row = int(np.argmax(found != given))
            raise SchemaMismatchError(f"column {column!r}: row {row} is {int(given[row])} bytes, not one state of "
                                      f"{dt.to_clickhouse()} (whose layout takes {int(found[row])} bytes there)")
        out[base] = StreamBytes(data.tobytes(), offsets[bounds])
        return
    values = fixed_storage(dt, arr, column)
    # A view, not a copy: a copy holds the GIL and the threads encoding other columns wait for it.
    out[base] = StreamBytes(_memory(values), bounds * fixed_width(dt))


def default_column(dt: DataType, num_rows: int, stored_json: bool = False) -> pa.Array:
    """`num_rows` default values of a type (what a part written before a column existed holds):
    NULL for Nullable, Variant and Dynamic, empty for Array/Map, zero/empty for the rest, element-wise for Tuple.
    `stored_json`: each JSON inside in a merge's stored form (an empty map), not as text."""
    arrow_type = stored_json_arrow(dt) if stored_json else to_arrow(dt)
    inner = dt.inner if isinstance(dt, LowCardinality) else dt
    if isinstance(inner, (Nullable, Variant, Dynamic)):  # the default of Variant and Dynamic is NULL
        return pa.nulls(num_rows, arrow_type)
    if isinstance(inner, Json):
        return pa.array([[] if stored_json else "{}"] * num_rows, arrow_type)
    if isinstance(inner, (Array, Map)):
        one = pa.array([[]], arrow_type)
    elif isinstance(inner, Tuple):
        fields = [default_column(element, 1, stored_json) for element in inner.elements]
        one = pa.StructArray.from_arrays(fields, fields=list(arrow_type))
    else:
        one = pa.array([default_scalar(inner, arrow_type)], arrow_type)
    return one.take(pa.array(np.zeros(num_rows, np.int64)))


def deserialize_column(
    dt: DataType,
    column_name: str,
    streams: Mapping[str, bytes | memoryview],
    num_rows: int,
    string_sizes: bool = True,
    sparse: SparseSpec = False,
    exact: bool = False,
    base: str | None = None,
    level: int = 0,
    objects: ObjectReader | None = None,
) -> pa.Array:
    """Read `num_rows` rows of a column from streams positioned at the first requested granule.

    `base`: the streams' names start with it instead of the escaped column name (`stream_names`),
    and `level` is their nesting depth in Arrays and Maps.

    `objects` reads each JSON inside the column (in an Array, Map or Tuple) from its own streams:
    called with the JSON type, its stream base, its nesting level and the number of objects; the
    JSON's structure and path streams are not among `streams`.

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
    cursors: dict[str, Cursor] = {}
    for name in internal_names(dt, column_name, string_sizes, sparse_bases, base, level):
        if objects is not None and name.endswith(OBJECT_STRUCTURE):
            continue
        external = external_name(dt, column_name, name)
        if external not in streams:
            raise CorruptPartError(f"column {column_name!r}: stream {external!r} is missing")
        cursors[name] = Cursor(external, streams[external])
    result = _deserialize(dt, escape_for_file_name(column_name) if base is None else base, level, num_rows,
                          string_sizes, cursors, sparse_bases, objects)
    if exact:
        for cursor in cursors.values():
            if cursor.pos != len(cursor.buf) and not cursor.name.endswith((".dict", ".sparse.idx")):
                raise CorruptPartError(
                    f"column {column_name!r}: stream {cursor.name!r} has {len(cursor.buf) - cursor.pos} bytes "
                    f"left after {num_rows} rows; the part's columns.txt or marks do not match its data")
    return result


def _deserialize_sparse(dt: DataType, base: str, n: int, string_sizes: bool, cursors: dict[str, Cursor]) -> pa.Array:
    positions = read_sparse_positions(dt, base, n, cursors)
    values = _deserialize(dt, base, 0, len(positions), string_sizes, cursors)
    default = _deserialize(dt, base, 0, 1, string_sizes, default_cursors(dt, base, string_sizes))
    return spread_sparse(default, values, positions, n)


def _deserialize(dt: DataType, base: str, level: int, n: int, string_sizes: bool,
                 cursors: dict[str, Cursor], sparse: frozenset[str] = frozenset(),
                 objects: ObjectReader | None = None) -> pa.Array:
    if level == 0 and base in sparse:
        return _deserialize_sparse(dt, base, n, string_sizes, cursors)
    if isinstance(dt, Nullable):
        nulls = cursors[base + ".null"].take(n)
        values = _deserialize(dt.inner, base, level, n, string_sizes, cursors, objects=objects)
        return apply_nulls(values, nulls.astype(bool))
    if isinstance(dt, LowCardinality):
        return deserialize_low_cardinality(dt, base, n, cursors)
    if isinstance(dt, (Array, Map)):
        lengths = cursors[f"{base}.size{level}"].sizes(n)
        offsets = np.zeros(n + 1, np.int64)
        np.cumsum(lengths, out=offsets[1:])
        total = int(offsets[-1])
        if total >= 2**31:
            raise CorruptPartError(f"stream {base}.size{level}: {total} nested values in {n} rows is implausible")
        offsets_arr = pa.array(offsets.astype(np.int32))
        if isinstance(dt, Array):
            child = _deserialize(dt.inner, base, level + 1, total, string_sizes, cursors, objects=objects)
            return pa.ListArray.from_arrays(offsets_arr, child, type=_holding(dt, [child], objects))
        keys = _deserialize(dt.key, element_base(base, "keys"), level + 1, total, string_sizes, cursors,
                            objects=objects)
        values = _deserialize(dt.value, element_base(base, "values"), level + 1, total, string_sizes, cursors,
                              objects=objects)
        return pa.MapArray.from_arrays(offsets_arr, keys, values, type=_holding(dt, [keys, values], objects))
    if isinstance(dt, Tuple):
        children = [_deserialize(e, element_base(base, name), level, n, string_sizes, cursors, sparse, objects)
                    for name, e in zip(dt.element_names, dt.elements, strict=True)]
        return pa.StructArray.from_arrays(children, fields=list(_holding(dt, children, objects)))
    if isinstance(dt, Variant):
        return _deserialize_variant(dt, base, level, n, string_sizes, cursors, objects)
    if isinstance(dt, Json) and objects is not None:
        return objects(dt, base, level, n)
    if isinstance(dt, (Dynamic, Json)):
        raise UnsupportedError(f"stream {base!r}: {dt.family} inside another type is not supported (a column of "
                               f"type {dt.family} is)")
    if is_string(dt):
        if string_sizes:
            lengths = cursors[base + ".size"].sizes(n)
            data = cursors[base].take(int(lengths.sum()))
            return strings_from_parts(lengths, data)
        return read_classic(cursors[base], n)
    if isinstance(dt, AggregateFunction):
        cursor = cursors[base]
        lengths = state_lengths(dt, cursor.buf, cursor.pos, n, f"stream {cursor.name!r}")
        return strings_from_parts(lengths, cursor.take(int(lengths.sum())), binary=True)
    width = fixed_width(dt)
    raw = cursors[base].take(n * width)
    return fixed_to_arrow(dt, raw, n, base)


def _holding(dt: DataType, children: list[pa.Array], objects: ObjectReader | None) -> pa.DataType:
    """The Arrow type of an Array, Map or Tuple of `children`: `to_arrow(dt)`, but with its children's
    own types when a JSON inside may be read in another form (a merge's stored form)."""
    if objects is None:
        return to_arrow(dt)
    return to_arrow_holding(dt, [child.type for child in children])


# Discriminators serialization modes (the 8-byte prefix of `.variant_discr`) and, in compact mode,
# the format byte of each granule: its discriminators follow, or one discriminator stands for all rows.
DISCRIMINATORS_BASIC, DISCRIMINATORS_COMPACT = 0, 1
GRANULE_PLAIN, GRANULE_COMPACT = 0, 1


def read_discriminators(cursor: Cursor, n: int) -> np.ndarray:
    """`n` discriminators from a `.variant_discr` stream that starts with its mode (the prefix)."""
    mode = cursor.uint64()
    if mode == DISCRIMINATORS_BASIC:
        return cursor.take(n)
    if mode != DISCRIMINATORS_COMPACT:
        raise UnsupportedError(f"stream {cursor.name!r}: discriminators serialization mode {mode} is not supported")
    pieces = []
    left = n
    while left:
        at = cursor.pos
        rows = cursor.varuint()
        kind = int(cursor.take(1)[0])
        if rows == 0 or rows > left:
            raise CorruptPartError(f"stream {cursor.name!r}: a granule of {rows} discriminators at offset {at} "
                                   f"where {left} rows are left to read")
        if kind == GRANULE_COMPACT:
            pieces.append(np.full(rows, cursor.take(1)[0], np.uint8))
        elif kind == GRANULE_PLAIN:
            pieces.append(cursor.take(rows))
        else:
            raise CorruptPartError(f"stream {cursor.name!r}: unknown granule format {kind} at offset {at}")
        left -= rows
    return np.concatenate(pieces) if pieces else np.zeros(0, np.uint8)


def spread_variant(dt: DataType, values: pa.Array, mine: np.ndarray) -> pa.Array:
    """One field of a Variant's struct: row r takes the variant's k-th value when it is the k-th row
    holding this variant (`mine`), and is NULL elsewhere. Fields of a Tuple stay non-NULL under a NULL
    tuple (they keep their defaults), as the Arrow type says they are."""
    n = len(mine)
    filled = values.take(pa.array(np.maximum(np.cumsum(mine, dtype=np.int64) - 1, 0))) if len(values) \
        else default_column(dt, n)
    if isinstance(dt, Tuple):
        return pa.StructArray.from_arrays(filled.flatten(), fields=list(filled.type), mask=pa.array(~mine))
    return apply_nulls(filled, ~mine)


def _deserialize_variant(dt: Variant, base: str, level: int, n: int, string_sizes: bool,
                         cursors: dict[str, Cursor], objects: ObjectReader | None = None) -> pa.Array:
    cursor = cursors[base + DISCRIMINATORS]
    discriminators = read_discriminators(cursor, n)
    bad = (discriminators >= len(dt.variants)) & (discriminators != VARIANT_NULL)
    if bad.any():
        raise CorruptPartError(f"stream {cursor.name!r}: discriminator {int(discriminators[np.argmax(bad)])} "
                               f"for {dt.to_clickhouse()}")
    fields = []
    for i, (name, variant) in enumerate(zip(dt.names, dt.variants, strict=True)):
        mine = discriminators == i
        values = _deserialize(variant, variant_base(base, name), level, int(np.count_nonzero(mine)), string_sizes,
                              cursors, objects=objects)
        fields.append(spread_variant(variant, values, mine))
    validity = pa.array(discriminators != VARIANT_NULL)
    # (a JSON inside a variant's type, a Dynamic value's Array(JSON(...)), may be read in its stored form)
    arrow = [f.with_type(a.type) for f, a in zip(to_arrow(dt), fields, strict=True)] if objects is not None \
        else list(to_arrow(dt))
    return pa.StructArray.from_arrays(fields, fields=arrow, mask=pc.invert(validity))

"""Dynamic columns: the structure a part stores them with, and their Arrow form.

A part stores a `Dynamic` column as a Variant over the types its rows hold, plus the variant
`SharedVariant` holding the values of types beyond `max_types` (each as its type's binary encoding,
then the value). The list of types is the prefix of the `.dynamic_structure` stream. We read the
column as that Variant (serialization.py) and give each row as ClickHouse's binary form of a Dynamic
value: the binary encoding of its type, then the value in ClickHouse's binary value format (what a
`RowBinary` export of the column holds) — the `SharedVariant` rows are already stored so.
Writing goes the other way (`split_dynamic`): rows are grouped by their type's encoding, the
part's types are chosen from the rows, and the column is written as that Variant after the
structure. A Dynamic inside Array, Map values or Tuple is stored the same way under its element's
stream names (`stored_type`, `from_stored`, `split_for_write`), and so is a Dynamic inside one of a
Dynamic's own types (`Array(Dynamic)`: under the variant's stream base, `nested_structures`,
`expand_nested`); a JSON inside one of them is read in its stored form and printed from it
(`nested_text`). The binary encoding of types lives in type_codes.py. format_spec/types.md
(*Dynamic*, *JSON*) describes the bytes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from spark_mergetree.errors import CorruptPartError, FormatError, SchemaMismatchError, UnsupportedError
from spark_mergetree.fileops import escape_for_file_name
from spark_mergetree.format.conform import conform_array
from spark_mergetree.format.json_text import NestedText, object_text, value_text, values_by_path
from spark_mergetree.format.row_binary import deserialize_rows, interleave_chunks, value_chunks
from spark_mergetree.format.serialization import spread_variant
from spark_mergetree.format.streams import StreamBytes, element_base, variant_base
from spark_mergetree.format.type_codes import (
    DEFAULT_MAX_TYPES,
    decode_type,
    encode_type,
    read_text,
    text_bytes,
)
from spark_mergetree.format.types import (
    Array,
    DataType,
    Dynamic,
    Json,
    Map,
    Nullable,
    Primitive,
    Tuple,
    Variant,
    contains_type,
    parse_type,
    to_arrow,
)
from spark_mergetree.format.values import Cursor, combine, string_buffers, varuint_bytes

__all__ = ["binary_values", "binary_values_text", "SHARED_VARIANT", "DynamicStructure", "parse_structure", "decode_type", "encode_type", "dynamic_values", "dynamic_text",
           "DynamicColumn", "split_dynamic", "DEFAULT_MAX_TYPES",
           "has_dynamic", "dynamic_bases", "stored_type", "nested_structures", "expand_nested", "holds_objects",
           "nested_text", "stored_object_text", "from_stored", "split_nested",
           "nested_stored_type", "split_for_write", "structure_stream"]

SHARED_VARIANT = "SharedVariant"
# Versions of the structure prefix: V1 starts with max_types, V2 does not; V3 (written by 26.x,
# MergeTree setting dynamic_serialization_version = 'v3') adds a flag byte saying statistics follow.
_V1, _V2, _V3 = 1, 2, 4
_NOTHING = 0x00  # the binary encoding of Nothing: a NULL Dynamic value

class DynamicStructure:
    """The types of one part's Dynamic column, in the order its structure lists them, and the Variant
    the part stores it as (those types and SharedVariant, sorted by name)."""

    def __init__(self, types: list[DataType], encodings: list[bytes]) -> None:
        self.types = types
        self.encodings = dict(zip((t.to_clickhouse() for t in types), encodings, strict=True))
        shared = replace(Primitive("String"), custom_name=SHARED_VARIANT)
        self.variant = Variant((shared, *types))


def parse_structure(buf: bytes | bytearray | memoryview, name: str) -> DynamicStructure:
    """The prefix of a `.dynamic_structure` stream (the statistics after the types are not needed)."""
    cursor = Cursor(name, bytes(buf))
    version = cursor.uint64()
    if version not in (_V1, _V2, _V3):
        raise UnsupportedError(f"stream {name!r}: Dynamic structure serialization version {version} is not supported")
    if version == _V1:
        cursor.varuint()  # max_types
    count = cursor.varuint()
    if count > 255:
        raise CorruptPartError(f"stream {name!r}: {count} Dynamic types")
    types: list[DataType] = []
    for _ in range(count):
        # V3 lists the types in their binary encoding, V1 and V2 by name.
        types.append(decode_type(cursor) if version == _V3 else parse_type(read_text(cursor)))
    return DynamicStructure(types, [encode_type(t) for t in types])


def _binary(data: np.ndarray, offsets: np.ndarray) -> pa.Array:
    n = len(offsets) - 1
    return pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer((offsets - offsets[0]).astype(np.int32)),
                                                  pa.py_buffer(data[int(offsets[0]):int(offsets[-1])].tobytes())])


def dynamic_values(structure: DynamicStructure, struct: pa.StructArray) -> pa.Array:
    """The rows of the Variant a part stores a Dynamic column as → each row's type encoding + value
    (binary; NULL stays NULL)."""
    n = len(struct)
    pieces: list[pa.Array] = []
    index = np.full(n, -1, np.int64)
    start = 0
    for name, dt, field in zip(structure.variant.names, structure.variant.variants, struct.flatten(), strict=True):
        mine = np.asarray(field.is_valid(), dtype=bool)
        count = int(np.count_nonzero(mine))
        if not count:
            continue
        values = field.filter(pa.array(mine))
        if name == SHARED_VARIANT:
            offsets, data = string_buffers(values)
        else:
            encoding = np.frombuffer(structure.encodings[name], np.uint8)
            head = (np.tile(encoding, count), np.arange(count + 1, dtype=np.int64) * len(encoding))
            data, offsets = interleave_chunks([head, value_chunks(dt, values)])
        pieces.append(_binary(np.asarray(data, np.uint8), np.asarray(offsets, np.int64)))
        index[mine] = start + np.arange(count)
        start += count
    if not pieces:
        return pa.nulls(n, pa.binary())
    every = pa.concat_arrays(pieces)
    return every.take(pa.array(np.maximum(index, 0), mask=index < 0))


def dynamic_text(structure: DynamicStructure, struct: pa.StructArray, where: str) -> pa.Array:
    """The rows of a stored Dynamic as JSON text of their values (NULL for NULL); values in the
    shared variant are refused."""
    texts = []
    for name, dt, field in zip(structure.variant.names, structure.variant.variants, struct.flatten(), strict=True):
        if name == SHARED_VARIANT:
            if field.null_count != len(field):  # types beyond max_types: each value carries its type
                texts.append(binary_values_text(field.cast(pa.binary()), where, where))
            continue
        text = value_text(dt, field, where, nested_text(where))
        # (a Map's or Tuple's text of a row another variant holds is not NULL: `{}`)
        texts.append(pc.if_else(field.is_valid(), text, pa.nulls(len(text), pa.string())) if field.null_count else text)
    return pc.coalesce(*texts) if texts else pa.nulls(len(struct), pa.string())


def nested_text(where: str) -> NestedText:
    """How `value_text` renders a Dynamic or JSON value inside a Dynamic value's type (Array(Dynamic),
    Array(JSON(...))): a Dynamic from its binary form, a JSON from its stored form (or its text)."""

    def render(dt: DataType, values: pa.Array) -> pa.Array:
        if isinstance(dt, Dynamic):
            return binary_values_text(values.cast(pa.binary()), where, where)
        if pa.types.is_string(values.type):
            return values
        return stored_object_text(values, where, cast(Json, dt))

    return render


def stored_object_text(maps: pa.Array, where: str, dt: Json | None = None) -> pa.Array:
    """JSON objects in their stored form (map path → type encoding + value) → the text ClickHouse
    prints for each (NULL stays NULL); a Nullable typed path of `dt` a row lacks prints `null`."""
    n = len(maps)
    filled = maps.fill_null([]) if maps.null_count else maps
    offsets = np.asarray(filled.offsets, np.int64)
    first, last = int(offsets[0]), int(offsets[-1])
    entry_rows = np.repeat(np.arange(n, dtype=np.int64), np.diff(offsets))
    by_path = values_by_path(entry_rows, filled.keys.slice(first, last - first), filled.items.slice(first, last - first), n)
    texts = {path: binary_values_text(values, where, f"{where}, path {path!r}") for path, values in by_path.items()}
    for path, t in dt.typed_paths if dt is not None else ():
        if isinstance(t, Nullable):
            texts[path] = pc.fill_null(texts[path], "null") if path in texts else pa.array(["null"] * n, pa.string())
    text = object_text(texts, n, where)
    return pc.if_else(maps.is_null(), pa.nulls(n, pa.string()), text) if maps.null_count else text


def _gather(data: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The byte ranges data[starts[i]:ends[i]] one after the other, and their offsets."""
    lengths = ends - starts
    offsets = np.zeros(len(lengths) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    index = np.arange(int(offsets[-1]), dtype=np.int64) - np.repeat(offsets[:-1] - starts, lengths)
    return data[index], offsets


class DynamicColumn:
    """A Dynamic column's rows as one part stores them: its structure, the Variant's struct array, the
    structure stream's prefix (version 'v3' and the types) and statistics (flag 1, then the rows per
    variant and per type in the shared variant)."""

    def __init__(self, structure: DynamicStructure, struct: pa.StructArray, prefix: bytes, statistics: bytes) -> None:
        self.structure = structure
        self.struct = struct
        self.prefix = prefix
        self.statistics = statistics


def split_dynamic(dt: Dynamic, values: pa.Array | pa.ChunkedArray, column: str,
                  held: Sequence[DataType] = ()) -> DynamicColumn:
    """Rows of a Dynamic column in their Arrow form (type encoding + value, see `dynamic_values`) →
    the part's structure and Variant. As an insert does, the first `max_types` types in row order get
    variants of their own; the values of later types go to SharedVariant as they are. `held`: types
    the column holds first, in this order, values or not (those an insert's failed attempt added)."""
    arr = combine(values)
    if not (pa.types.is_binary(arr.type) or pa.types.is_large_binary(arr.type)):
        raise SchemaMismatchError(f"column {column!r}: Dynamic values are written from binary (each a type's binary "
                                  f"encoding then the value), not {arr.type}")
    offsets, data = string_buffers(arr)
    n = len(arr)
    starts, ends = offsets[:-1], offsets[1:]
    left = np.asarray(arr.is_valid(), dtype=bool) & (ends > starts)
    left[left] = data[starts[left]] != _NOTHING
    type_of = np.full(n, -1, np.int64)
    types: list[DataType] = list(held)
    encodings: list[bytes] = [encode_type(t) for t in held]
    # (one type may come in several encodings: a JSON's typed paths are listed in the order of the
    # value's column, its name sorts them; the type is one variant, the first encoding its structure's)
    reordered: set[int] = set()
    valued: set[int] = set()  # (a held type takes the encoding of its first value)
    while left.any():
        row = int(np.argmax(left))
        cursor = Cursor(f"column {column!r} row {row}", data[int(starts[row]):int(ends[row])].tobytes())
        found = decode_type(cursor)
        width = cursor.pos
        encoding = data[int(starts[row]):int(starts[row]) + width]
        candidates = np.flatnonzero(left & (ends - starts >= width))
        # The binary type encoding is prefix-free: rows starting with these bytes hold this type.
        same = (data[starts[candidates][:, None] + np.arange(width)] == encoding).all(axis=1)
        mine = candidates[same]
        left[mine] = False
        names = [t.to_clickhouse() for t in types]
        if found.to_clickhouse() in names:
            i = names.index(found.to_clickhouse())
            type_of[mine] = i
            if i in valued:
                reordered.add(i)
            else:
                encodings[i] = encoding.tobytes()
            valued.add(i)
            continue
        valued.add(len(types))
        type_of[mine] = len(types)
        types.append(found)
        encodings.append(encoding.tobytes())
    max_types = DEFAULT_MAX_TYPES if dt.max_types is None else dt.max_types
    kept = sorted(range(min(len(types), max_types)), key=lambda i: types[i].to_clickhouse())
    structure = DynamicStructure([types[i] for i in kept], [encodings[i] for i in kept])
    fields: list[pa.Array] = []
    counts: list[int] = []
    for name, variant in zip(structure.variant.names, structure.variant.variants, strict=True):
        if name == SHARED_VARIANT:
            mine = type_of >= max_types
            stored: pa.Array = arr.filter(pa.array(mine)).cast(pa.binary())
        else:
            i = next(i for i in kept if types[i].to_clickhouse() == name)
            mine = type_of == i
            rows = np.flatnonzero(mine)
            head = len(encodings[i])  # (another encoding of the type has the same length)
            body, given = _gather(data, starts[rows] + head, ends[rows])
            try:
                stored = deserialize_rows([variant], body.tobytes(), len(rows))[0]
            except (CorruptPartError, FormatError) as exc:
                raise SchemaMismatchError(f"column {column!r}: a value of type {name} is not in ClickHouse's binary "
                                          f"format: {exc}") from exc
            # The rows were read one after another: each must also end where its own bytes end.
            again, ends_again = value_chunks(variant, stored)
            if not np.array_equal(ends_again, given) or (
                    i not in reordered and not np.array_equal(np.asarray(again, np.uint8), body)):
                wrong = np.diff(ends_again) != np.diff(given) if len(ends_again) == len(given) else np.ones(1, bool)
                raise SchemaMismatchError(f"column {column!r}: row {int(rows[np.argmax(wrong)])}: a value of type "
                                          f"{name} is not in ClickHouse's binary format (its bytes do not end with the value)")
        counts.append(int(np.count_nonzero(mine)))
        fields.append(spread_variant(variant, stored, mine))
    struct = pa.StructArray.from_arrays(fields, names=list(structure.variant.names),
                                        mask=pa.array(type_of < 0))
    prefix = np.array([_V3], "<u8").tobytes() + varuint_bytes(len(structure.types)) + b"".join(
        structure.encodings[t.to_clickhouse()] for t in structure.types)
    shared = [(types[i].to_clickhouse(), int(np.count_nonzero(type_of == i))) for i in range(max_types, len(types))]
    statistics = b"\x01" + b"".join(varuint_bytes(c) for c in counts) + varuint_bytes(len(shared)) + b"".join(
        text_bytes(name) + varuint_bytes(count) for name, count in shared)
    return DynamicColumn(structure, struct, prefix, statistics)


def binary_values_text(values: pa.Array, column: str, where: str) -> pa.Array:
    """Values in the binary form of Dynamic values (type encoding, then the value; NULL where a row
    has none) as JSON text: how a JSON column's shared data holds each path's values."""
    split = split_dynamic(Dynamic(254), values, column)
    return dynamic_text(split.structure, split.struct, where)


def binary_values(dt: DataType, values: pa.Array) -> pa.Array:
    """Values of one type → their binary form as Dynamic values (the type's binary encoding, then the
    value); a NULL (of a Nullable type) stays NULL."""
    inner = dt.inner if isinstance(dt, Nullable) else dt
    valid = np.asarray(values.is_valid(), dtype=bool)
    present = values.filter(pa.array(valid)) if values.null_count else values
    encoding = np.frombuffer(encode_type(inner), np.uint8)
    count = len(present)
    head = (np.tile(encoding, count), np.arange(count + 1, dtype=np.int64) * len(encoding))
    data, offsets = interleave_chunks([head, value_chunks(inner, present)])
    out = _binary(np.asarray(data, np.uint8), np.asarray(offsets, np.int64))
    if not values.null_count:
        return out
    index = np.cumsum(valid, dtype=np.int64) - 1
    return out.take(pa.array(np.maximum(index, 0), mask=~valid))


def has_dynamic(dt: DataType) -> bool:
    """Whether a Dynamic is `dt` or inside it (in an Array, a Map's keys or values or a Tuple element)."""
    if isinstance(dt, Dynamic):
        return True
    if isinstance(dt, Array):
        return has_dynamic(dt.inner)
    if isinstance(dt, Map):
        return has_dynamic(dt.key) or has_dynamic(dt.value)
    if isinstance(dt, Tuple):
        return any(has_dynamic(e) for e in dt.elements)
    return False


def dynamic_bases(dt: DataType, base: str) -> list[str]:
    """The stream bases of the Dynamic values in `dt` (whose streams start with `base`): an Array's
    elements share its base, a Map's keys and values are `<base>%2Ekeys` and `<base>%2Evalues`, a
    Tuple's element `<base>%2E<name>` — ClickHouse names a nested Dynamic's streams
    (`.dynamic_structure`, `.variant_discr`, ...) so."""
    if isinstance(dt, Dynamic):
        return [base]
    if isinstance(dt, Array):
        return dynamic_bases(dt.inner, base)
    if isinstance(dt, Map):
        return dynamic_bases(dt.key, element_base(base, "keys")) + dynamic_bases(dt.value, element_base(base, "values"))
    if isinstance(dt, Tuple):
        return [b for name, e in zip(dt.element_names, dt.elements, strict=True)
                for b in dynamic_bases(e, element_base(base, name))]
    return []


def holds_objects(dt: DataType) -> bool:
    """Whether a Dynamic or a JSON is inside `dt` (a Dynamic value's type: Array(Dynamic), Array(JSON))."""
    return contains_type(dt, Dynamic) or contains_type(dt, Json)


def nested_structures(structure_at: Callable[[str], DynamicStructure], dt: DataType, base: str,
                      out: dict[str, DynamicStructure]) -> dict[str, DynamicStructure]:
    """The part's structure of every Dynamic in `dt` (streams under `base`) by stream base, and of
    every Dynamic inside the types those structures list (a variant `Array(Dynamic)` of a Dynamic at
    base b keeps its own Dynamic under `b.Array%28Dynamic%29`), read with `structure_at`."""
    for b in dynamic_bases(dt, base):
        structure = out[b] = structure_at(b)
        for name, variant in zip(structure.variant.names, structure.variant.variants, strict=True):
            if has_dynamic(variant):
                nested_structures(structure_at, variant, variant_base(b, name), out)
    return out


def _stored_variant(structure: DynamicStructure, base: str, structures: Mapping[str, DynamicStructure]) -> Variant:
    """The Variant a Dynamic at `base` is stored as, each Dynamic inside its types whose structure
    `structures` holds replaced by its own Variant (the type keeps its name: the streams are named
    by it)."""
    variant = structure.variant
    if not any(has_dynamic(t) for t in variant.variants):
        return variant
    kept = []
    for name, t in zip(variant.names, variant.variants, strict=True):
        # (a writer splits only the outer Dynamics: one inside a variant's type is written whole,
        # from its values, by `serialize_column`'s `objects`)
        held = has_dynamic(t) and all(b in structures for b in dynamic_bases(t, variant_base(base, name)))
        inner = stored_type(t, variant_base(base, name), structures) if held else t
        kept.append(inner if inner is t else replace(inner, custom_name=name))
    return Variant(tuple(kept))


def stored_type(dt: DataType, base: str, structures: Mapping[str, DynamicStructure]) -> DataType:
    """`dt` as one part stores it: each Dynamic (at stream base b) replaced by the Variant of
    `structures[b]`, the part's structure for it (and so on for Dynamics inside its types)."""
    if isinstance(dt, Dynamic):
        return _stored_variant(structures[base], base, structures)
    if isinstance(dt, Array) and has_dynamic(dt):
        return Array(stored_type(dt.inner, base, structures))
    if isinstance(dt, Map) and has_dynamic(dt):
        return Map(stored_type(dt.key, element_base(base, "keys"), structures),
                   stored_type(dt.value, element_base(base, "values"), structures))
    if isinstance(dt, Tuple) and has_dynamic(dt):
        return Tuple(tuple(stored_type(e, element_base(base, name), structures)
                           for name, e in zip(dt.element_names, dt.elements, strict=True)), dt.names)
    return dt


def from_stored(dt: DataType, arr: pa.Array, base: str, structures: Mapping[str, DynamicStructure]) -> pa.Array:
    """Values read as `stored_type` → their Arrow form for `dt`: each Dynamic's Variant struct becomes
    the binary form of its values (`dynamic_values`), the containers around it are rebuilt on the
    same offsets (no per-row work)."""
    if not has_dynamic(dt):
        return arr
    if isinstance(dt, Dynamic):
        return dynamic_values(structures[base], expand_nested(structures[base], arr, base, structures))
    if isinstance(dt, Array):
        lists = cast(pa.ListArray, arr)
        inner = from_stored(dt.inner, lists.values, base, structures)
        # (the element's field as `arr` has it, with the Dynamic's binary type: a JSON beside it may be
        # in a merge's stored form, not to_arrow's text)
        # (NULL lists stay NULL: an Array variant's field is NULL where a row holds another variant)
        return pa.ListArray.from_arrays(lists.offsets, inner, type=pa.list_(lists.type.value_field.with_type(inner.type)),
                                        mask=lists.is_null() if lists.null_count else None)
    if isinstance(dt, Map):
        maps = cast(pa.MapArray, arr)
        keys = from_stored(dt.key, maps.keys, element_base(base, "keys"), structures)
        items = from_stored(dt.value, maps.items, element_base(base, "values"), structures)
        return pa.MapArray.from_arrays(maps.offsets, keys, items,
                                       type=pa.map_(maps.type.key_field.with_type(keys.type),
                                                    maps.type.item_field.with_type(items.type)))
    tup = cast(Tuple, dt)
    struct = cast(pa.StructArray, arr)
    fields = [from_stored(e, f, element_base(base, name), structures)
              for name, e, f in zip(tup.element_names, tup.elements, struct.flatten(), strict=True)]
    return pa.StructArray.from_arrays(fields, fields=[f.with_type(a.type) for f, a in zip(struct.type, fields, strict=True)],
                                      mask=struct.is_null() if struct.null_count else None)


def expand_nested(structure: DynamicStructure, struct: pa.StructArray, base: str,
                  structures: Mapping[str, DynamicStructure]) -> pa.StructArray:
    """A Dynamic's Variant struct as read (`stored_type`) → the same struct with every Dynamic inside
    its variants in binary form (`from_stored`), so each field holds its variant type's Arrow form."""
    variant = structure.variant
    if not any(has_dynamic(t) for t in variant.variants):
        return struct
    fields = [from_stored(t, f, variant_base(base, name), structures) if has_dynamic(t) else f
              for name, t, f in zip(variant.names, variant.variants, struct.flatten(), strict=True)]
    return pa.StructArray.from_arrays(fields, names=list(variant.names),
                                      mask=struct.is_null() if struct.null_count else None)


def split_nested(dt: DataType, arr: pa.Array, base: str, column: str, out: dict[str, DynamicColumn]) -> pa.Array:
    """Rows of `dt` in their Arrow form → the same rows as `stored_type` stores them, each Dynamic in
    them split (`split_dynamic`) over all of its values in the part (a nested Dynamic has one
    structure per part, like a column): `out` gets each one's split form by stream base."""
    if not has_dynamic(dt):
        return arr
    if isinstance(dt, Dynamic):
        out[base] = split = split_dynamic(dt, arr, column)
        # SharedVariant holds binary values in a String variant: view them as the variant's Arrow
        # type (no copy, no UTF-8 check) so the containers around it are of their exact types.
        struct = split.struct
        fields = [f.view(pa.string()) if name == SHARED_VARIANT else f
                  for name, f in zip(split.structure.variant.names, struct.flatten(), strict=True)]
        # (a variant holding a JSON, Array(JSON(...)), keeps its stored form: each field its own type)
        return pa.StructArray.from_arrays(fields, fields=[field.with_type(f.type) for field, f in
                                                          zip(to_arrow(split.structure.variant), fields, strict=True)],
                                          mask=struct.is_null() if struct.null_count else None)
    if isinstance(dt, (Array, Map)):
        if arr.null_count:
            raise SchemaMismatchError(f"column {column!r} has NULLs but its type {dt.to_clickhouse()} is not Nullable")
        # (offsets of a sliced list array may not start at 0: take the values they point at)
        lists = cast(pa.ListArray, arr)
        offsets = np.asarray(lists.offsets, np.int64)
        first, last = int(offsets[0]), int(offsets[-1])
        offsets_arr = pa.array((offsets - first).astype(np.int32))
        if isinstance(dt, Array):
            inner = split_nested(dt.inner, combine(lists.values.slice(first, last - first)), base, column, out)
            return pa.ListArray.from_arrays(offsets_arr, inner)
        maps = cast(pa.MapArray, arr)
        keys = split_nested(dt.key, combine(maps.keys.slice(first, last - first)), element_base(base, "keys"),
                            column, out)
        items = split_nested(dt.value, combine(maps.items.slice(first, last - first)), element_base(base, "values"),
                             column, out)
        return pa.MapArray.from_arrays(offsets_arr, keys, items)
    tup = cast(Tuple, dt)
    struct = cast(pa.StructArray, arr)
    if struct.null_count:
        raise SchemaMismatchError(f"column {column!r}: {dt.to_clickhouse()} cannot hold NULL tuples")
    fields = [split_nested(e, f, element_base(base, name), column, out)
              for name, e, f in zip(tup.element_names, tup.elements, struct.flatten(), strict=True)]
    return pa.StructArray.from_arrays(fields, names=list(tup.element_names))


def nested_stored_type(dt: DataType, base: str, splits: Mapping[str, DynamicColumn]) -> DataType:
    """`stored_type` of the structures `split_nested` chose."""
    return stored_type(dt, base, {b: split.structure for b, split in splits.items()})


def split_for_write(dt: DataType, values: pa.Array | pa.ChunkedArray, column: str
                    ) -> tuple[DataType, pa.Array, dict[str, DynamicColumn]]:
    """A whole part's column holding Dynamic values (a Dynamic column, or Dynamic inside Array, Map
    values or Tuple) → the type it is stored as, its rows in that type, and each Dynamic's split form
    by stream base (the writer adds their `.dynamic_structure` streams)."""
    base = escape_for_file_name(column)
    arr = combine(values)
    if not isinstance(dt, Dynamic):
        arr = conform_array(arr, dt, column)
    splits: dict[str, DynamicColumn] = {}
    stored = split_nested(dt, arr, base, column, splits)
    return nested_stored_type(dt, base, splits), stored, splits


def structure_stream(split: DynamicColumn, granules: int) -> StreamBytes:
    """A Wide part's `.dynamic_structure` stream: the prefix before mark 0 (every granule's mark points
    after it), the statistics after the last granule."""
    offsets = np.full(granules + 1, len(split.prefix), np.int64)
    offsets[-1] += len(split.statistics)
    return StreamBytes(split.prefix + split.statistics, offsets)

"""Writing JSON columns: JSON text → the paths, types and streams ClickHouse 26.9 stores for it.

An insert of JSON text into a `JSON` column makes ClickHouse parse every document into *paths*
(nested objects flattened with `.`, `null` members left out), type each value (json_infer.py: the
inference, and how each Dynamic offers a value to the types it holds first), keep the first
`max_dynamic_paths` paths it meets (row by row, members in document order) as *dynamic paths* —
each stored as a `Dynamic(max_types=max_dynamic_types)` column — and put the values of later paths
into the *shared data*, a map path → (type's binary encoding + value) per row, split into buckets
by SipHash-2-4 of the path. Typed paths (`JSON(a UInt32)`) are ordinary columns of their types.
A path's values of types holding a Dynamic or a JSON (Array(Dynamic), Array(JSON(...))) are given
in their binary form and written with their nested Dynamic and JSON columns under the variant's
stream base (`nested_object_writer`). format_spec/types.md (*JSON*) specifies the bytes;
`serialize_object` makes them.

`pyarrow.json` cannot parse the text: it gives a field one type for the whole column (promoting 1
and 1.5 to double, failing on 1 and "a"), while ClickHouse infers every value's type separately, and
it cannot hold integers beyond 64 bits (which ClickHouse keeps as String); it also keeps one of
duplicated keys, which ClickHouse refuses. A column of at least `json_columns.COMPILED_JSON_BYTES`
is read column-wise instead: a compiled tokenizer validates every document as
`json.loads` would and gives its leaf members as flat arrays (json_tokens.py), whose values are
typed a path and a type at a time with pyarrow and numpy (json_columns.py); a path whose values a
Dynamic's held types would take otherwise than as their own type (arrays, mixed strings and dates,
more types than it holds, text ClickHouse parses best-effort) is typed value by value by its `_Slot`
as before (`_columnwise`); skipped paths are left out by name (then no key may hold a `.`). Typed
paths of integer, float, Bool, string, date and date-time types (and Nullable of them) are converted
column-wise from their leaves (json_typed.py) into the array the per-row conversion builds, then by
the same code (`_conformed`). Smaller columns, typed paths of other types (arrays, tuples, JSON,
Decimal, ...), and columns the tokenizer or json_typed leaves alone (invalid documents, duplicated
paths, escaped keys, a value refused; an object at a typed path; a typed path's value of another
kind, out of range, or text read otherwise) are parsed per row with Python's `json` module
(`_parse`, `_typed_column`), which also gives every error. Both give each path's values grouped by
type (`Group`), converted and serialized column-wise by the same code (`_path_entries`): both write
the same bytes.
"""

from __future__ import annotations

import json
import re
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from spark_mergetree.errors import SchemaMismatchError, UnsupportedError
from spark_mergetree.format import json_columns, json_typed
from spark_mergetree.format.conform import conform_array
from spark_mergetree.format.dynamic import DynamicColumn, binary_values, holds_objects, split_dynamic
from spark_mergetree.format.json_columns import Group
from spark_mergetree.format.json_infer import (
    _DATE,
    _DATE_RE,
    _DATETIME,
    _DATETIME64,
    _DATETIME_RE,
    _INT64_MAX,
    _INT64_MIN,
    _STRING,
    _Ambiguous,
    _days,
    _name,
    _Object,
    _refuse_constant,
    _Slot,
    holds_nested,
    nested_json,
)
from spark_mergetree.format.json_text import OBJECT_STRUCTURE, STORED_JSON_TYPE, path_base
from spark_mergetree.format.json_typed import zoned_times
from spark_mergetree.format.serialization import ObjectWriter, default_column, serialize_column
from spark_mergetree.format.streams import STRUCTURE, StreamBytes, variant_base
from spark_mergetree.format.type_codes import (
    DEFAULT_MAX_DYNAMIC_PATHS,
    DEFAULT_MAX_DYNAMIC_TYPES,
    encode_type,
    json_limits,
    text_bytes,
)
from spark_mergetree.format.types import (
    Array,
    DataType,
    DateTime,
    DateTime64,
    Dynamic,
    Json,
    LowCardinality,
    Nullable,
    Primitive,
    Tuple,
    contains_type,
    is_nullable,
)
from spark_mergetree.format.values import (
    combine,
    encode_classic,
    string_buffers,
    varuint_bytes,
)

__all__ = ["STORED_JSON_TYPE", "ObjectColumn", "split_object", "serialize_object", "nested_object_writer", "shared_data_bucket", "DEFAULT_MAX_DYNAMIC_PATHS",
           "DEFAULT_MAX_DYNAMIC_TYPES", "WIDE_BUCKETS", "COMPACT_BUCKETS", "SHARED_DATA"]

# Shared data buckets of parts an insert makes (MergeTree settings object_shared_data_buckets_for_wide_part
# and ..._for_compact_part, 26.9 defaults).
WIDE_BUCKETS, COMPACT_BUCKETS = 32, 8
SHARED_DATA = ".object_shared_data"
_V3 = 4  # object structure version written by 26.x (object_serialization_version = 'v3')
_MAP_WITH_BUCKETS = 1  # shared data serialization of inserted parts



# ------------------------------------------------------------------------------ documents → paths


@dataclass
class _Rows:
    """Every value of one path: rows, types and values, in row order."""

    rows: list[int] = field(default_factory=list)
    types: list[str] = field(default_factory=list)
    values: list[Any] = field(default_factory=list)


def _skipped(path: str, dt: Json, patterns: list[re.Pattern[str]]) -> bool:
    if not dt.skips and not patterns:
        return False
    return any(path == s or path.startswith(s + ".") for s in dt.skips) or any(p.search(path) for p in patterns)


def _leaves(obj: _Object, prefix: str, dt: Json, typed: dict[str, DataType],
            patterns: list[re.Pattern[str]]) -> list[tuple[str, Any]]:
    """An object's (path, value) members in document order, nested objects flattened (a typed path
    keeps its object whole), NULL members and skipped paths left out."""
    out: list[tuple[str, Any]] = []
    for key, value in obj:
        path = prefix + key
        if _skipped(path, dt, patterns):
            continue
        if isinstance(value, _Object) and path not in typed:
            out += _leaves(value, path + ".", dt, typed, patterns)
        elif value is not None:
            out.append((path, value))
    return out


def _parse(texts: pa.Array, dt: Json, column: str, slots: dict[str, _Slot] | None = None
           ) -> tuple[dict[str, _Rows], dict[str, DataType], dict[str, list[Any]]]:
    """Per path (in order of first appearance) its inferred values; typed paths' raw values per row.
    `slots` gets each dynamic path's Dynamic as the insert filled it."""
    typed = dict(dt.typed_paths)
    typed_values: dict[str, list[Any]] = {p: [None] * len(texts) for p in typed}
    patterns = [re.compile(p) for p in dt.skip_regexps]
    paths: dict[str, _Rows] = {}
    kinds: dict[str, DataType] = {}
    max_paths, max_types = json_limits(dt)
    objects = nested_json(dt)
    # Each dynamic path's Dynamic as the insert fills it (a value goes to a type it holds already
    # when that type takes it); a path in the shared data types each value on its own.
    slots = {} if slots is None else slots
    for row, text in enumerate(texts.to_pylist()):
        if text is None:
            continue  # inserts refuse NULLs first (conform); a NULL reaching here stores nothing: {}
        try:
            doc = json.loads(text, parse_constant=_refuse_constant, object_pairs_hook=_Object)
        except (ValueError, RecursionError) as exc:
            raise SchemaMismatchError(f"column {column!r} ({dt.to_clickhouse()}): row {row} is not a JSON object: "
                                      f"{exc}") from None
        if not isinstance(doc, _Object):
            raise SchemaMismatchError(f"column {column!r} ({dt.to_clickhouse()}): row {row} is not a JSON object")
        seen: set[str] = set()
        for path, value in _leaves(doc, "", dt, typed, patterns):
            if path in seen:
                raise SchemaMismatchError(f"column {column!r} ({dt.to_clickhouse()}): row {row}: path {path!r} "
                                          "appears twice (ClickHouse refuses duplicated paths)")
            seen.add(path)
            if path in typed:
                typed_values[path][row] = value
                continue
            slot = slots.get(path)
            if slot is None:
                dynamic = path not in paths and len(paths) < max_paths
                slot = _Slot(max_types, objects, absorb=dynamic)
                if dynamic:
                    slots[path] = slot
            _place(slot, value, paths.setdefault(path, _Rows()), kinds, row, path, dt, column)
    return paths, kinds, typed_values


def _place(slot: _Slot, value: Any, rows: _Rows, kinds: dict[str, DataType], row: int, path: str, dt: Json,
           column: str) -> None:
    """A path's value typed by its Dynamic (`slot`: the path's own for a dynamic path, a fresh one
    for each value of a shared path) and added to the path's values."""
    try:
        kind, stored, own, strict = slot.place(value)
        if holds_nested(kind):  # Array(JSON(...)), Array(Dynamic): its binary form
            stored = slot.value_bytes(kind, stored, own, strict)
    except _Ambiguous:
        raise UnsupportedError(
            f"column {column!r} ({dt.to_clickhouse()}): row {row}, path {path!r}: the value "
            f"{json.dumps(_plain(value))[:80]} is not written here: ClickHouse's type for it (a date or time "
            "parsed best-effort, a mixed array whose common type this writer "
            "does not derive, a number out of range) is not derived by this writer; give the path a type "
            "in the column's type") from None
    name = _name(kind)
    kinds.setdefault(name, kind)
    rows.rows.append(row)
    rows.types.append(name)
    rows.values.append(stored)


def _columnwise(texts: pa.Array, dt: Json, column: str, slots: dict[str, _Slot]
                ) -> tuple[list[str], dict[str, list[Group]], dict[str, pa.Array]] | None:
    """The paths (in order of first appearance) and each one's typed values of a column of JSON
    objects, typed column-wise (json_columns), and the typed paths' columns (json_typed); the paths
    it leaves to their Dynamic's rules typed value by value here (`slots` gets those dynamic paths'
    Dynamics as they were filled). None where the column is left to `_parse`: one it does not read,
    or one where a value is refused or a typed path's value not converted column-wise (`_parse`
    converts it, or refuses the first row's, as before)."""
    max_paths, max_types = json_limits(dt)
    patterns = [re.compile(p) for p in dt.skip_regexps]

    def skipped(path: str) -> bool:  # (its every `.` nesting: the path or an object it is in skipped)
        keys = path.split(".")
        return any(_skipped(".".join(keys[:i]), dt, patterns) for i in range(1, len(keys) + 1))

    typed = dict(dt.typed_paths)
    found = json_columns.type_columnwise(texts, max_paths, max_types,
                                         skipped if dt.skips or dt.skip_regexps else None, typed)
    if found is None:
        return None
    plain = json_typed.plain_arrays(found.typed, typed, len(texts))
    if plain is None:
        return None
    objects = nested_json(dt)
    groups = found.groups
    dynamic_paths = set(found.paths[:max_paths])
    for path, values in found.per_value.items():
        dynamic = path in dynamic_paths
        slot = _Slot(max_types, objects, absorb=dynamic)
        if dynamic:
            slots[path] = slot
        rows: _Rows = _Rows()
        kinds: dict[str, DataType] = {}
        try:
            for row, value in values:
                _place(slot if dynamic else _Slot(max_types, objects, absorb=False), value, rows, kinds, row, path,
                       dt, column)
        except Exception:  # noqa: BLE001 - whatever fails, `_parse` fails on it from the first row on, as before
            return None
        groups[path] = _groups(kinds, rows)
    try:
        columns = {path: _conformed(arr, typed[path], column) for path, arr in plain.items()}
    except (SchemaMismatchError, UnsupportedError):
        return None  # (`_parse` refuses it, after what it refuses first)
    return found.paths, groups, columns


def _columnwise_readable(texts: pa.Array, dt: Json) -> bool:
    """Whether a column is typed column-wise: one whose typed paths (if any) json_typed converts,
    large enough for the compiled tokenizer to pay its loading."""
    return all(json_typed.covers(t) for _, t in dt.typed_paths) and texts.nbytes >= json_columns.COMPILED_JSON_BYTES


def _plain(value: Any) -> Any:
    if isinstance(value, _Object):
        return {k: _plain(v) for k, v in value}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _arrow_values(kind: DataType, values: list[Any] | np.ndarray | pa.Array) -> pa.Array:
    """Inferred values of one type as Arrow (Date as days, DateTime as seconds, DateTime64(9) as ns),
    from a list or a numpy array of them (strings typed column-wise come as Arrow already)."""
    if isinstance(values, pa.Array):
        return values
    if kind == _DATE:
        return pa.array(values, pa.int32()).cast(pa.date32())
    if kind == _DATETIME:
        return pa.array(values, pa.int64()).cast(pa.timestamp("s", "UTC"))
    if kind == _DATETIME64:
        return pa.array(values, pa.int64()).cast(pa.timestamp("ns", "UTC"))
    if isinstance(kind, Array):
        inner = kind.inner.inner if isinstance(kind.inner, Nullable) else kind.inner
        offsets = np.zeros(len(values) + 1, np.int32)
        np.cumsum([len(v) for v in values], out=offsets[1:])
        flat = [x for v in values for x in v]
        items = _arrow_values(inner, flat) if any(x is not None for x in flat) or inner == _STRING \
            else pa.nulls(len(flat), _arrow_type(inner))
        return pa.ListArray.from_arrays(pa.array(offsets), items)
    return pa.array(values, _arrow_type(kind))


def _arrow_type(kind: DataType) -> pa.DataType:
    from spark_mergetree.format.types import to_arrow
    return to_arrow(kind)


def _from_stored(dt: Json, arr: pa.Array, column: str) -> tuple[list[str], Any, dict[str, pa.Array]]:
    """The stored form (map path → binary value per row) → the paths in order of first appearance,
    each path's values over all rows, and the typed paths' columns (decoded from their values)."""
    if not (pa.types.is_string(arr.type.key_type) and pa.types.is_binary(arr.type.item_type)):
        raise SchemaMismatchError(f"column {column!r}: the stored form of {dt.to_clickhouse()} is "
                                  f"{STORED_JSON_TYPE}, not {arr.type}")
    n = len(arr)
    arr = arr.fill_null([]) if arr.null_count else arr
    offsets = np.asarray(arr.offsets, np.int64)
    entry_rows = np.repeat(np.arange(n, dtype=np.int64), np.diff(offsets))
    keys = arr.keys.slice(int(offsets[0]), int(offsets[-1] - offsets[0]))
    items = arr.items.slice(int(offsets[0]), int(offsets[-1] - offsets[0]))
    unique = pc.unique(keys)  # in order of first appearance
    codes = np.asarray(pc.index_in(keys, unique), np.int64)
    by_path = np.argsort(codes, kind="stable")
    starts = np.searchsorted(codes[by_path], np.arange(len(unique) + 1))
    index = {path: i for i, path in enumerate(unique.to_pylist())}

    def entries_of(path: str) -> tuple[np.ndarray, pa.Array]:
        i = index.get(path)
        if i is None:
            return np.zeros(0, np.int64), pa.array([], pa.binary())
        mine = by_path[starts[i]:starts[i + 1]]  # entry order: ascending rows
        return entry_rows[mine], items.take(pa.array(mine))

    typed = dict(dt.typed_paths)
    typed_arrays = {}
    for path, t in typed.items():
        inner = t.inner if isinstance(t, Nullable) else t
        row_index, held = entries_of(path)
        split = split_dynamic(Dynamic(254), _spread(row_index, held, n), column)
        names = split.structure.variant.names
        shared = split.struct.field(names.index("SharedVariant"))
        if set(names) - {"SharedVariant", inner.to_clickhouse()} or shared.null_count != n:
            raise SchemaMismatchError(f"column {column!r}, typed path {path!r}: stored values of types "
                                      f"{[x for x in names if x != 'SharedVariant']}, not {inner.to_clickhouse()}")
        values = split.struct.field(names.index(inner.to_clickhouse())) if inner.to_clickhouse() in names \
            else pa.nulls(n, _arrow_type(inner))
        if not is_nullable(t) and values.null_count:
            values = pc.if_else(values.is_null(), default_column(t, n, stored_json=True), values)
        typed_arrays[path] = values
    return [p for p in unique.to_pylist() if p not in typed], entries_of, typed_arrays


def _groups(kinds: dict[str, DataType], rows: _Rows) -> list[Group]:
    """A path's values typed value by value, grouped by type."""
    row_index = np.asarray(rows.rows, np.int64)
    type_names = np.asarray(rows.types, object)
    out = []
    for name in dict.fromkeys(rows.types):
        mine = np.flatnonzero(type_names == name)
        out.append((kinds[name], row_index[mine], [rows.values[i] for i in mine]))
    return out


def _path_entries(groups: list[Group]) -> tuple[np.ndarray, pa.Array]:
    """The rows holding a path (ascending) and its values there in the binary form of Dynamic values
    (type encoding, then the value): values of one type are converted together."""
    pieces: list[pa.Array] = []
    order: list[np.ndarray] = []
    for kind, rows, values in groups:
        if holds_nested(kind):  # (given in binary form already)
            encoding = encode_type(kind)
            pieces.append(pa.array([encoding + v for v in values], pa.binary()))
        else:
            pieces.append(binary_values(kind, _arrow_values(kind, values)))
        order.append(rows)
    if not pieces:
        return np.zeros(0, np.int64), pa.array([], pa.binary())
    held = np.concatenate(order)
    ascending = np.argsort(held, kind="stable")
    return held[ascending], pa.concat_arrays(pieces).take(pa.array(ascending))


def _spread(row_index: np.ndarray, values: pa.Array, n: int) -> pa.Array:
    """Values held by some rows → one per row, NULL where a row holds none (what `split_dynamic` takes)."""
    if not len(values):
        return pa.nulls(n, pa.binary())
    where = np.full(n, -1, np.int64)
    where[row_index] = np.arange(len(values))
    return values.take(pa.array(np.maximum(where, 0), mask=where < 0))


# ------------------------------------------------------------------------------ shared data


def _siphash64(data: bytes) -> int:
    """SipHash-2-4 with zero keys, 64-bit output (ClickHouse's SipHash `get64`)."""
    mask = 0xFFFFFFFFFFFFFFFF

    def rotl(x: int, b: int) -> int:
        return ((x << b) | (x >> (64 - b))) & mask

    def rounds(v: list[int], count: int) -> None:
        for _ in range(count):
            v[0] = (v[0] + v[1]) & mask
            v[1] = rotl(v[1], 13) ^ v[0]
            v[0] = rotl(v[0], 32)
            v[2] = (v[2] + v[3]) & mask
            v[3] = rotl(v[3], 16) ^ v[2]
            v[0] = (v[0] + v[3]) & mask
            v[3] = rotl(v[3], 21) ^ v[0]
            v[2] = (v[2] + v[1]) & mask
            v[1] = rotl(v[1], 17) ^ v[2]
            v[2] = rotl(v[2], 32)

    v = [0x736F6D6570736575, 0x646F72616E646F6D, 0x6C7967656E657261, 0x7465646279746573]
    tail = len(data) % 8
    for (word,) in struct.iter_unpack("<Q", data[:len(data) - tail]):
        v[3] ^= word
        rounds(v, 2)
        v[0] ^= word
    last = int.from_bytes(data[len(data) - tail:], "little") | ((len(data) & 0xFF) << 56)
    v[3] ^= last
    rounds(v, 2)
    v[0] ^= last
    v[2] ^= 0xFF
    rounds(v, 4)
    return v[0] ^ v[1] ^ v[2] ^ v[3]


def shared_data_bucket(path: str, buckets: int) -> int:
    """The bucket a shared-data path is stored in: SipHash-2-4 (zero keys, 64 bits) of its bytes
    modulo the number of buckets (ClickHouse's getSharedDataPathBucket)."""
    return _siphash64(path.encode("utf-8", "surrogateescape")) % buckets


# ------------------------------------------------------------------------------ the column


@dataclass
class ObjectColumn:
    """A JSON column's rows as one part stores them."""

    paths: list[str]  # dynamic paths, sorted
    dynamic: dict[str, DynamicColumn]
    typed: list[tuple[str, DataType, pa.Array]]  # sorted by path
    shared_rows: np.ndarray  # per shared entry: its row
    shared_buckets: np.ndarray  # ... its bucket
    shared_paths: pa.Array  # ... its path (string)
    shared_values: pa.Array  # ... its value (binary: type encoding + value)
    buckets: int
    prefix: bytes
    statistics: bytes
    # Types and paths nested Dynamic and JSON columns hold first, values or not (`_left_behind`),
    # by stream base relative to the column's.
    held: dict[str, list[Any]] = field(default_factory=dict)


def _typed_column(path: str, dt: DataType, values: list[Any], column: str) -> pa.Array:
    """A typed path's values (NULL or the type's default where a row lacks it)."""
    where = f"column {column!r}, typed path {path!r} ({dt.to_clickhouse()})"
    plain = [None if v is None else _shaped(_plain(v), dt) for v in values]
    try:
        try:  # numbers straight into the path's Arrow type (an int64 cannot hold every UInt64)
            arr = pa.array(plain, _arrow_type(dt)) if isinstance(dt, Primitive) and dt.name.startswith(("UInt", "Int")) \
                else pa.array(plain)
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
            arr = pa.array(plain)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as exc:
        raise SchemaMismatchError(f"{where}: values of mixed JSON types: {exc}") from None
    inner = dt.inner if isinstance(dt, Nullable) else dt
    if pa.types.is_string(arr.type) and isinstance(inner, (DateTime, DateTime64)) or \
            pa.types.is_string(arr.type) and inner in (_DATE, Primitive("Date32")):
        arr = _parse_times(arr, inner, where)
    return _conformed(arr, dt, column)


def _conformed(arr: pa.Array, dt: DataType, column: str) -> pa.Array:
    """A typed path's values as `pa.array` gives them (dates and times read) → its column."""
    if pa.types.is_null(arr.type):
        arr = pa.nulls(len(arr), _arrow_type(dt))
    missing = np.asarray(arr.is_null(), dtype=bool)
    if not missing.any() or is_nullable(dt):
        return conform_array(arr, dt, column)
    # A row without the path holds the type's default (a Tuple, Array or number cannot be NULL).
    present = conform_array(arr.filter(pa.array(~missing)), dt, column)
    both = pa.concat_arrays([present, default_column(dt, 1).cast(present.type)])
    index = np.where(missing, len(present), np.cumsum(~missing) - 1)
    return both.take(pa.array(index))


def _shaped(value: Any, dt: DataType) -> Any:
    """A JSON value in the shape Arrow builds the typed path's type from: an unnamed tuple from an
    array (its elements are named 1, 2, ...), a tuple's elements and an array's items shaped too."""
    if isinstance(dt, Nullable) or (isinstance(dt, LowCardinality)):
        return _shaped(value, dt.inner)
    if isinstance(dt, Json):  # a JSON inside the typed path (`items Array(JSON)`) is written from its text
        return json.dumps(value) if isinstance(value, dict) else value
    if isinstance(dt, Array) and isinstance(value, list):
        return [None if v is None else _shaped(v, dt.inner) for v in value]
    if isinstance(dt, Tuple) and isinstance(value, list) and dt.names is None:
        return {name: None if v is None else _shaped(v, e)
                for name, e, v in zip(dt.element_names, dt.elements, value, strict=False)}
    if isinstance(dt, Tuple) and isinstance(value, dict):
        # A member the object lacks holds its type's default, as ClickHouse fills it.
        return {name: _shaped(value[name], e) if value.get(name) is not None
                else None if is_nullable(e) else default_column(e, 1).to_pylist()[0]
                for name, e in zip(dt.element_names, dt.elements, strict=True)}
    return value


def _parse_times(arr: pa.Array, dt: DataType, where: str) -> pa.Array:
    """Dates and date-times of a typed path from text `YYYY-MM-DD[( |T)hh:mm:ss[.fffffffff]][Z]`:
    as `zoned_times` takes them (json_typed reads whole columns of the common ones alike)."""
    out: list[int | None] = []
    utc: list[bool] = []
    for text in arr.to_pylist():
        if text is None:
            out.append(None)
            utc.append(True)
            continue
        m = _DATETIME_RE.match(text)
        d = None if m else _DATE_RE.match(text)
        try:
            if m is None and d is None:
                raise _Ambiguous
            groups = (m or d).groups()  # type: ignore[union-attr]
            year, month, day = (int(g) for g in groups[:3])
            hour, minute, second = (int(g) for g in groups[3:6]) if m else (0, 0, 0)
            if hour > 23 or minute > 59 or second > 59:
                raise _Ambiguous
            nanos = int((groups[6] or "").ljust(9, "0")) if m else 0
            value = (_days(year, month, day) * 86400 + hour * 3600 + minute * 60 + second) * 10**9 + nanos
        except _Ambiguous:
            raise UnsupportedError(f"{where}: {text!r} is not read as a date or time here (only "
                                   "YYYY-MM-DD[ hh:mm:ss[.fffffffff]][Z] is)") from None
        if not _INT64_MIN <= value <= _INT64_MAX:
            raise UnsupportedError(f"{where}: {text!r} is beyond the nanosecond range of this writer")
        out.append(value)
        utc.append(text.endswith("Z"))
    return zoned_times(pa.array(out, pa.int64()), pa.array(utc), dt)


def split_object(dt: Json, values: pa.Array | pa.ChunkedArray, column: str, buckets: int,
                 one_bucket_when_empty: bool = False, held: Mapping[str, list[Any]] | None = None) -> ObjectColumn:
    """A JSON column's rows → the paths, Dynamic columns and shared data of a part. The rows are JSON
    text (one object per row, types inferred as ClickHouse infers them), or the stored form a merge
    reads (`STORED_JSON_TYPE`: per row a map path → its value's binary form, types kept). ClickHouse
    writes a Wide part whose rows hold no shared data with one bucket (`one_bucket_when_empty`), a
    Compact part with all of them. `held`: the dynamic paths (key "") and each one's types (key
    `.<escaped path>`) the column holds first, as an insert of text filled them, with the same for
    the Dynamic and JSON columns nested in them (see `_left_behind`)."""
    arr = combine(values)
    if pa.types.is_large_string(arr.type) or pa.types.is_string_view(arr.type):
        arr = arr.cast(pa.string())
    n = len(arr)
    holds = dict(held or {})
    if pa.types.is_map(arr.type):
        order, entries_of, typed_arrays = _from_stored(dt, arr, column)
    elif pa.types.is_string(arr.type):
        slots: dict[str, _Slot] = {}
        columnwise = _columnwise(arr, dt, column, slots) if _columnwise_readable(arr, dt) else None
        if columnwise is not None:
            order, groups, typed_arrays = columnwise
        else:
            slots.clear()
            paths, kinds, typed_values = _parse(arr, dt, column, slots)
            order = list(paths)  # first appearance
            groups = {path: _groups(kinds, rows) for path, rows in paths.items()}
            typed_arrays = {path: _typed_column(path, t, typed_values[path], column) for path, t in dt.typed_paths}
        holds.update(_left_behind(slots))

        def entries_of(path: str) -> tuple[np.ndarray, pa.Array]:
            return _path_entries(groups.get(path, []))  # (a path held first may have no value)
    else:
        raise SchemaMismatchError(f"column {column!r}: {dt.to_clickhouse()} is written from JSON text (string), "
                                  f"not {arr.type}")
    first = holds.get("", [])  # (paths held first: their values, if any, come later)
    order = first + [p for p in order if p not in set(first)]
    max_paths, max_types = json_limits(dt)
    chosen = sorted(order[:max_paths])
    dynamic = {}
    for path in chosen:
        row_index, values_held = entries_of(path)
        dynamic[path] = split_dynamic(Dynamic(max_types), _spread(row_index, values_held, n), column,
                                      holds.get(path_base("", path), []))
    typed = [(path, t, typed_arrays[path]) for path, t in sorted(dict(dt.typed_paths).items())]
    rows: list[np.ndarray] = []
    names: list[np.ndarray] = []
    binaries: list[pa.Array] = []
    shared_counts: list[tuple[str, int]] = []
    for path in order[max_paths:]:
        row_index, held = entries_of(path)  # shared paths need only the rows holding them
        rows.append(row_index)
        names.append(np.full(len(row_index), path, object))
        binaries.append(held)
        shared_counts.append((path, len(row_index)))
    if not rows and one_bucket_when_empty:
        buckets = 1
    if rows:
        all_rows = np.concatenate(rows)
        all_paths = np.concatenate(names)
        bucket_of = {path: shared_data_bucket(path, buckets) for path, _ in shared_counts}
        all_buckets = np.array([bucket_of[p] for p in all_paths], np.int64)
        # Within a bucket, a row's paths are stored sorted (ClickHouse keeps shared data sorted by path).
        order_index = np.lexsort((all_paths.astype(str), all_rows, all_buckets))
        shared_rows, shared_buckets = all_rows[order_index], all_buckets[order_index]
        shared_paths = pa.array(all_paths[order_index].tolist(), pa.string())
        shared_values = pa.concat_arrays(binaries).take(pa.array(order_index))
    else:
        shared_rows = shared_buckets = np.zeros(0, np.int64)
        shared_paths, shared_values = pa.array([], pa.string()), pa.array([], pa.binary())
    prefix = np.array([_V3], "<u8").tobytes() + varuint_bytes(len(chosen)) + b"".join(text_bytes(p) for p in chosen) + \
        bytes([_MAP_WITH_BUCKETS]) + varuint_bytes(buckets)
    counts = [int(n - dynamic[p].struct.null_count) for p in chosen]
    # ClickHouse lists the shared paths' statistics in an order of its hash table; we list them in
    # reverse order of first appearance (what it gave in the cases we compared). Reading ignores it.
    statistics = b"\x01" + b"".join(varuint_bytes(c) for c in counts) + varuint_bytes(len(shared_counts)) + b"".join(
        text_bytes(p) + varuint_bytes(c) for p, c in reversed(shared_counts))
    return ObjectColumn(chosen, dynamic, typed, shared_rows, shared_buckets, shared_paths, shared_values, buckets,
                        prefix, statistics, holds)


def _shared_streams(obj: ObjectColumn, base: str, bounds: np.ndarray, n: int, level: int = 0) -> dict[str, StreamBytes]:
    """Each bucket's Map(String, String) of the rows: `.size0` (UInt64 entries per row), then the
    paths and the values as classic strings (varuint length + bytes)."""
    out: dict[str, StreamBytes] = {}
    for b in range(obj.buckets):
        mine = obj.shared_buckets == b
        rows = obj.shared_rows[mine]
        counts = np.bincount(rows, minlength=n).astype("<u8")
        entry_bounds = np.zeros(n + 1, np.int64)
        np.cumsum(counts, out=entry_bounds[1:])
        stem = f"{base}{SHARED_DATA}.{b}"
        out[f"{stem}.size{level}"] = StreamBytes(counts.tobytes(), bounds * 8)  # (deeper inside an Array or Map)
        for suffix, values in (("%2Epaths", obj.shared_paths), ("%2Evalues", obj.shared_values)):
            picked = values.filter(pa.array(mine))
            offsets, data = string_buffers(picked)
            encoded, entry_offsets = encode_classic(offsets, data)
            out[stem + suffix] = StreamBytes(encoded.tobytes(), entry_offsets[entry_bounds[bounds]])
    return out


def _structure(prefix: bytes, statistics: bytes, granules: int) -> StreamBytes:
    """A structure stream: `prefix` before mark 0 (every mark points after it), the statistics after
    the last granule."""
    offsets = np.full(granules + 1, len(prefix), np.int64)
    offsets[-1] += len(statistics)
    return StreamBytes(prefix + statistics, offsets)


def serialize_object(obj: ObjectColumn, column: str, base: str, granule_rows: np.ndarray,
                     string_sizes: bool, level: int = 0, nested: ObjectWriter | None = None
                     ) -> tuple[list[tuple[str, StreamBytes]], list[tuple[str, StreamBytes]]]:
    """A part's JSON column as streams cut at granules: (structure streams: the object structure
    and each dynamic path's Dynamic structure, each `prefix + statistics` with every mark after the
    prefix; the data streams in ClickHouse's order: typed paths, dynamic paths, shared data). For a
    JSON inside an Array or Map (`level` > 0) its sizes streams count the depth on. A path's values
    of types holding a Dynamic or a JSON (Array(Dynamic), Array(JSON(...))) are written by `nested`
    (`nested_object_writer`); their structure streams follow their path's, depth first."""
    granule_rows = np.asarray(granule_rows, np.int64)
    bounds = np.zeros(len(granule_rows) + 1, np.int64)
    np.cumsum(granule_rows, out=bounds[1:])
    n = int(bounds[-1])
    granules = len(granule_rows)
    if obj.held and isinstance(nested, _NestedObjects):
        nested = nested.holding({base + at: held for at, held in obj.held.items()})
    heads = [(base + OBJECT_STRUCTURE, _structure(obj.prefix, obj.statistics, granules))]
    body: list[tuple[str, StreamBytes]] = []
    for path, dt, values in obj.typed:
        held = nested is not None and contains_type(dt, Json)
        for name, data in serialize_column(dt, column, values, granule_rows, string_sizes, base=path_base(base, path),
                                           level=level, objects=nested if held else None).items():
            (heads if name.endswith((STRUCTURE, OBJECT_STRUCTURE)) else body).append((name, data))
    for path in obj.paths:
        split = obj.dynamic[path]
        stem = path_base(base, path)
        heads.append((stem + STRUCTURE, _structure(split.prefix, split.statistics, granules)))
        held = nested is not None and holds_objects(split.structure.variant)
        for name, data in serialize_column(split.structure.variant, column, split.struct, granule_rows, string_sizes,
                                           base=stem, level=level, objects=nested if held else None).items():
            (heads if name.endswith((STRUCTURE, OBJECT_STRUCTURE)) else body).append((name, data))
        if not held and holds_objects(split.structure.variant):
            raise UnsupportedError(f"column {column!r}, path {path!r}: values of "
                                   f"{[t.to_clickhouse() for t in split.structure.types if holds_objects(t)]} are not "
                                   "written here")
    body += list(_shared_streams(obj, base, bounds, n, level).items())
    return heads, body


def nested_object_writer(column: str, buckets: int, one_bucket_when_empty: bool, string_sizes: bool) -> ObjectWriter:
    """How `serialize_column` writes each JSON inside an Array, Map or Tuple of column `column`, and
    each JSON or Dynamic inside the type of a Dynamic value (a JSON path's Array(JSON(...)) or
    Array(Dynamic)): all of the part's values of it (every array element of every row) as one JSON
    (or Dynamic) column under its stream base, cut at the granules of the column's rows. Its streams
    come in ClickHouse's order: the structures, then the data (a Compact part moves the prefixes
    before the column's data)."""
    return _NestedObjects(column, buckets, one_bucket_when_empty, string_sizes, {})


class _NestedObjects:
    """`nested_object_writer`'s writer; `held` (by absolute stream base) are the types and paths the
    nested columns hold first, as the insert of the column's text filled them (`_left_behind`)."""

    def __init__(self, column: str, buckets: int, one_bucket_when_empty: bool, string_sizes: bool,
                 held: dict[str, list[Any]]) -> None:
        self.column, self.buckets, self.one_bucket_when_empty = column, buckets, one_bucket_when_empty
        self.string_sizes = string_sizes
        self.held = held

    def holding(self, held: Mapping[str, list[Any]]) -> _NestedObjects:
        return _NestedObjects(self.column, self.buckets, self.one_bucket_when_empty, self.string_sizes,
                              {**self.held, **held})

    def __call__(self, dt: DataType, base: str, level: int, values: pa.Array, bounds: np.ndarray
                 ) -> dict[str, StreamBytes]:
        piece = values.slice(int(bounds[0]), int(bounds[-1] - bounds[0]))
        if isinstance(dt, Dynamic):
            split = split_dynamic(dt, piece, self.column, self.held.get(base, []))
            out = {base + STRUCTURE: _structure(split.prefix, split.statistics, len(bounds) - 1)}
            out.update(serialize_column(split.structure.variant, self.column, split.struct, np.diff(bounds),
                                        self.string_sizes, base=base, level=level,
                                        objects=self if holds_objects(split.structure.variant) else None))
            return out
        inside = {at[len(base):]: held for at, held in self.held.items() if at == base or at.startswith(base + ".")}
        obj = split_object(cast(Json, dt), piece, self.column, self.buckets, self.one_bucket_when_empty, inside)
        heads, body = serialize_object(obj, self.column, base, np.diff(bounds), self.string_sizes, level, nested=self)
        return dict(heads + body)


def _left_behind(slots: Mapping[str, _Slot]) -> dict[str, list[Any]]:
    """What an insert of text put into the Dynamic and JSON columns nested in its dynamic paths'
    values (an Array(Array(Dynamic)) value's Dynamic, an Array(JSON(...)) value's JSON, and deeper):
    each nested Dynamic's types and each nested JSON's dynamic paths, in the order they came, by
    stream base relative to the column's. A held type that fails to take an array leaves the types
    (and paths) of the items it parsed before failing there without values (format_spec/types.md,
    *Writing JSON*); ClickHouse lists them in the part all the same, so the part written lists them."""
    out: dict[str, list[Any]] = {}

    def walk(slot: _Slot, base: str) -> None:
        for name, holder in slot.nested.items():
            at = variant_base(base, name)
            if isinstance(holder, _Slot):
                out[at] = list(holder.kinds)
                walk(holder, at)
                continue
            out[at] = list(holder.paths)
            for path, inner in holder.paths.items():
                out[path_base(at, path)] = list(inner.kinds)
                walk(inner, path_base(at, path))

    for path, slot in slots.items():
        walk(slot, path_base("", path))
    return out

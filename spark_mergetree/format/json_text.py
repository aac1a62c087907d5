"""JSON columns: the structure a part stores them with, and their text.

A part stores a `JSON` column path by path: its `.object_structure` prefix lists the *dynamic paths*
(each stored as a Dynamic column whose streams are named `<col>.<escaped path>...`), and the
*shared data* holds the paths beyond `max_dynamic_paths` (a Map(path, value) per row, in buckets).
We read the typed paths, dynamic paths and shared data and give each row as the text ClickHouse
prints for the object (`toString(json)`): keys sorted, dotted paths as nested objects, absent paths
left out; or, for merges, in the stored form (`STORED_JSON_TYPE`), every value with its type.
format/json_write.py writes JSON columns.
format_spec/types.md (*JSON*) describes the bytes and what is refused.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from spark_mergetree.errors import UnsupportedError
from spark_mergetree.fileops import escape_for_file_name
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
    Variant,
    contains_type,
    to_arrow,
)
from spark_mergetree.format.values import Cursor
from spark_mergetree.format.zones import wall_clock

__all__ = ["STORED_JSON_TYPE", "stored_json_arrow", "stored_map", "OBJECT_STRUCTURE", "ObjectStructure", "parse_object_structure", "path_base", "shared_data_sizes",
           "value_text", "object_text", "values_by_path", "NestedText"]

OBJECT_STRUCTURE = ".object_structure"
# Renders Dynamic or JSON values held inside another type as JSON text (see `value_text`).
NestedText = Callable[[DataType, pa.Array], pa.Array]
# What a merge reads a JSON column as and writes it from: per row, path → the value's binary form
# (its type's binary encoding, then the value), so every value keeps its type (its text would not:
# a Float64 1.0 prints as 1, which an insert of the text stores as Int64).
STORED_JSON_TYPE = pa.map_(pa.string(), pa.binary())


def stored_json_arrow(dt: DataType) -> pa.DataType:
    """The Arrow type a merge reads a column as: `to_arrow(dt)` with STORED_JSON_TYPE for each JSON
    (a JSON column, or one inside Array, Map, Tuple or Variant)."""
    if isinstance(dt, Json) or (isinstance(dt, Nullable) and isinstance(dt.inner, Json)):
        return STORED_JSON_TYPE  # (a NULL object is a NULL map)
    arrow = to_arrow(dt)
    if isinstance(dt, Array) and contains_type(dt, Json):
        return pa.list_(arrow.value_field.with_type(stored_json_arrow(dt.inner)))
    if isinstance(dt, Map) and contains_type(dt, Json):
        return pa.map_(arrow.key_field.with_type(stored_json_arrow(dt.key)),
                       arrow.item_field.with_type(stored_json_arrow(dt.value)))
    if isinstance(dt, (Tuple, Variant)) and contains_type(dt, Json):
        elements = dt.elements if isinstance(dt, Tuple) else dt.variants
        return pa.struct([field.with_type(stored_json_arrow(element))
                          for field, element in zip(arrow, elements, strict=True)])
    return arrow
# Object serialization versions (MergeTree setting object_serialization_version): v2 writes 2, v3 4.
_V2, _V3 = 2, 4
# Shared data serialization versions in a v3 structure: a Map per row in buckets (inserted parts);
# `advanced` (merged parts), whose `copy.sizes` stream holds each row's number of shared paths.
_SHARED_MAP_WITH_BUCKETS, _SHARED_ADVANCED = 1, 2


@dataclass(frozen=True)
class ObjectStructure:
    paths: tuple[str, ...]  # dynamic paths, in the order listed (sorted)
    buckets: int | None  # None: one shared-data Map (v2); else its number of buckets (v3)
    advanced: bool = False  # shared data in the `advanced` layout


def parse_object_structure(buf: bytes | bytearray | memoryview, name: str) -> ObjectStructure:
    cursor = Cursor(name, bytes(buf))
    version = cursor.uint64()
    if version not in (_V2, _V3):
        raise UnsupportedError(f"stream {name!r}: JSON object serialization version {version} is not supported "
                               "(object_serialization_version 'v2' and 'v3' are)")
    count = cursor.varuint()
    paths = tuple(bytes(cursor.take(cursor.varuint())).decode("utf-8", "surrogateescape") for _ in range(count))
    if version == _V2:
        return ObjectStructure(paths, None)
    shared = int(cursor.take(1)[0])
    if shared not in (_SHARED_MAP_WITH_BUCKETS, _SHARED_ADVANCED):
        raise UnsupportedError(f"stream {name!r}: JSON shared data serialization version {shared} is not supported "
                               "('map_with_buckets' and 'advanced' are)")
    return ObjectStructure(paths, cursor.varuint(), shared == _SHARED_ADVANCED)


def path_base(column_base: str, path: str) -> str:
    """The stream name base of a dynamic path: `<col>.<escaped path>` (`j.b%2Ec`)."""
    return f"{column_base}.{escape_for_file_name(path)}"


def shared_data_sizes(column_base: str, structure: ObjectStructure) -> list[str]:
    """The streams holding each row's number of shared-data paths: the `.size0` of each bucket's
    Map, or the `advanced` layout's `copy.sizes`."""
    if structure.advanced:
        return [f"{column_base}.object_shared_data.copy.sizes"]
    if structure.buckets is None:
        return [f"{column_base}.object_shared_data.size0"]
    return [f"{column_base}.object_shared_data.{b}.size0" for b in range(structure.buckets)]


def _quoted(strings: pa.Array, where: str) -> pa.Array:
    """Strings as JSON string literals, escaped as ClickHouse escapes them: `"`, `\\`, `/` and the
    control characters with short escapes get them, other control characters `\\u00XX`."""
    if not pa.types.is_string(strings.type):
        strings = strings.cast(pa.string())
    for raw, escaped in (("\\", "\\\\"), ('"', '\\"'), ("/", "\\/"), ("\b", "\\b"), ("\f", "\\f"),
                         ("\n", "\\n"), ("\r", "\\r"), ("\t", "\\t")):
        strings = pc.replace_substring(strings, raw, escaped)
    control = pc.match_substring_regex(strings, r"[\x00-\x1f]")
    if pc.any(control).as_py():
        for code in (*range(0, 8), 0x0B, *range(0x0E, 0x20)):
            strings = pc.replace_substring(strings, chr(code), f"\\u{code:04x}")
    return pc.binary_join_element_wise('"', strings, '"', "")


def _float_text(values: pa.Array) -> pa.Array:
    """Floats as ClickHouse writes them in JSON: the shortest round-trip digits, plain for decimal
    exponents -6..20 and `1e21`/`1.5e-7` beyond (no `+`), `-0` for negative zero, `null` for NaN and
    infinities."""
    text = pc.replace_substring(pc.cast(values, pa.string()), "e+", "e")
    # Arrow writes some values of exponents 1..20 with an exponent (2.5e10, 1e15) that ClickHouse
    # writes out (25000000000): their digits are padded, or cut by a point, exponent by exponent.
    parts = pc.extract_regex(text, r"^(?P<sign>-?)(?P<lead>\d)(?:\.(?P<rest>\d+))?e(?P<exp>1?\d|20)$")
    matched = np.asarray(pc.fill_null(pc.is_valid(parts), False), dtype=bool)
    if matched.any():
        rows = np.flatnonzero(matched)
        found = parts.take(pa.array(rows))
        digits = pc.binary_join_element_wise(pc.struct_field(found, "lead"), pc.struct_field(found, "rest"), "")
        exponents = np.asarray(pc.struct_field(found, "exp").cast(pa.int64()))
        by_exponent = np.argsort(exponents, kind="stable")
        pieces = []
        for exponent in np.unique(exponents):
            chosen = digits.take(pa.array(np.flatnonzero(exponents == exponent)))
            width = int(exponent) + 1
            whole = pc.utf8_rpad(pc.utf8_slice_codeunits(chosen, 0, width), width=width, padding="0")
            fraction = pc.utf8_slice_codeunits(chosen, width)
            point = pc.if_else(pc.equal(pc.utf8_length(fraction), 0), "", ".")
            pieces.append(pc.binary_join_element_wise(whole, point, fraction, ""))
        # The pieces hold the values grouped by exponent: put them back in row order.
        plain = pa.concat_arrays(pieces).take(pa.array(np.argsort(by_exponent, kind="stable")))
        signed = pc.binary_join_element_wise(pc.struct_field(found, "sign"), plain, "")
        text = pc.replace_with_mask(text, pa.array(matched), signed)
    finite = pc.is_finite(values)
    return pc.if_else(pc.fill_null(finite, True), text, pa.scalar("null", pa.string()))


def _time_text(dt: DataType, values: pa.Array) -> pa.Array:
    """DateTime as `YYYY-MM-DD hh:mm:ss`, DateTime64(p) with p decimals, in the type's time zone (UTC
    when it has none: the server time zone a reader of these parts is taken to have)."""
    unit, zone = values.type.unit, values.type.tz or "UTC"
    per_second = 10 ** {"s": 0, "ms": 3, "us": 6, "ns": 9}[unit]
    ticks = np.asarray(values.cast(pa.int64()).fill_null(0), np.int64)
    seconds = np.floor_divide(ticks, per_second)
    # The zone's wall clock from format/zones.py, which follows summer time after 2037 (Arrow's does not).
    wall = wall_clock(seconds, zone) * per_second + (ticks - seconds * per_second)
    naive = pa.array(wall, pa.int64(), mask=np.asarray(values.is_null(), bool)).cast(pa.timestamp(unit))
    text = pc.strftime(naive, "%Y-%m-%d %H:%M:%S")
    if isinstance(dt, DateTime64):
        unit_digits = {"s": 0, "ms": 3, "us": 6, "ns": 9}[values.type.unit]
        if dt.precision < unit_digits:
            text = pc.utf8_slice_codeunits(text, 0, 19 + (dt.precision + 1 if dt.precision else 0))
    return text


def _duration_text(dt: DataType, values: pa.Array) -> pa.Array:
    """Time as `[-]hh:mm:ss` (hours at least two digits, up to 999), Time64(p) with p decimals."""
    unit_digits = {"s": 0, "ms": 3, "us": 6, "ns": 9}[values.type.unit]
    ticks = np.asarray(values.cast(pa.int64()).fill_null(0), np.int64)
    per_second = 10 ** unit_digits
    magnitude = np.abs(ticks)
    seconds, fraction = np.divmod(magnitude, per_second)
    hours, rest = np.divmod(seconds, 3600)
    minutes, secs = np.divmod(rest, 60)
    text = [f"{'-' if t < 0 else ''}{h:02d}:{m:02d}:{s:02d}" for t, h, m, s in
            zip(ticks.tolist(), hours.tolist(), minutes.tolist(), secs.tolist(), strict=True)]
    precision = dt.precision if isinstance(dt, Time64) else 0
    if precision:
        scaled = fraction // 10 ** (unit_digits - precision)
        text = [f"{t}.{f:0{precision}d}" for t, f in zip(text, scaled.tolist(), strict=True)]
    return pc.if_else(values.is_null(), pa.nulls(len(values), pa.string()), pa.array(text, pa.string()))


def _ipv6_text(values: pa.Array) -> pa.Array:
    """IPv6 addresses as ClickHouse prints them: RFC 5952 text, an IPv4-mapped one as `::ffff:a.b.c.d`."""
    out: list[str | None] = []
    for raw in values.to_pylist():
        if raw is None:
            out.append(None)
            continue
        address = ipaddress.IPv6Address(raw)
        mapped = address.ipv4_mapped
        out.append(f"::ffff:{mapped}" if mapped is not None else str(address))
    return pa.array(out, pa.string())


def _decimal_text(values: pa.Array) -> pa.Array:
    """Decimals as numbers without trailing zeros (`1.5`, `100`), as ClickHouse writes them in JSON."""
    text = pc.cast(values, pa.string())
    if values.type.scale == 0:
        return text
    trimmed = pc.utf8_rtrim(pc.utf8_rtrim(text, characters="0"), characters=".")
    return pc.if_else(pc.equal(trimmed, "-0"), "0", trimmed)


def scalar_text(dt: DataType, values: pa.Array, where: str) -> pa.Array:
    """Each value as ClickHouse's `toString` gives it (NULL entries stay NULL): integers, Bool, Date,
    DateTime in its zone, String and UUID as text, unquoted."""
    if isinstance(dt, Primitive) and dt.name in ("String", "UUID"):
        return values.cast(pa.string())
    if isinstance(dt, Primitive) and dt.name in ("Date", "Date32"):
        return pc.cast(values, pa.string())
    if isinstance(dt, (DateTime, DateTime64)):
        return _time_text(dt, values)
    if isinstance(dt, Primitive) and (dt.name == "Bool" or "Int" in dt.name):
        return value_text(dt, values, where)
    raise UnsupportedError(f"{where}: toString() of {dt.to_clickhouse()} values is not computed here")


def value_text(dt: DataType, values: pa.Array, where: str, nested: NestedText | None = None) -> pa.Array:
    """Each value as ClickHouse writes it inside JSON text (NULL entries stay NULL). `nested` renders
    the Dynamic and JSON values inside an Array (a JSON path's Array(JSON(...)) or Array(Dynamic))."""
    if isinstance(dt, (Dynamic, Json)) and nested is not None:
        return nested(dt, values)
    if isinstance(dt, Nullable):
        return value_text(dt.inner, values, where, nested)
    if isinstance(dt, Primitive) and dt.name in ("Int8", "Int16", "Int32", "Int64", "UInt8", "UInt16", "UInt32",
                                                 "UInt64"):
        return pc.cast(values, pa.string())
    if isinstance(dt, Primitive) and dt.name == "Bool":
        return pc.if_else(values, "true", "false")
    if isinstance(dt, Primitive) and dt.name in ("Float32", "Float64"):
        return _float_text(values)
    if isinstance(dt, Primitive) and dt.name in ("Int128", "UInt128", "Int256", "UInt256"):
        return pc.cast(values, pa.string())
    if isinstance(dt, Primitive) and dt.name in ("String", "UUID"):
        return _quoted(values, where)
    if isinstance(dt, (FixedString, Enum)):
        return _quoted(values.cast(pa.string()) if isinstance(dt, Enum) else values.cast(pa.binary()).cast(pa.string()),
                       where)
    if isinstance(dt, Primitive) and dt.name in ("Date", "Date32"):
        return _quoted(pc.cast(values, pa.string()), where)
    if isinstance(dt, Primitive) and dt.name == "IPv4":
        octets = [pc.cast(pc.bit_wise_and(pc.shift_right(values.cast(pa.uint32()), shift), 255), pa.string())
                  for shift in (24, 16, 8, 0)]
        return _quoted(pc.binary_join_element_wise(*octets, "."), where)
    if isinstance(dt, (DateTime, DateTime64)):
        return _quoted(_time_text(dt, values), where)
    if isinstance(dt, (Time, Time64)):
        return _quoted(_duration_text(dt, values), where)
    if isinstance(dt, Primitive) and dt.name == "IPv6":
        return _quoted(_ipv6_text(values), where)
    if isinstance(dt, Decimal):
        return _decimal_text(values)
    if isinstance(dt, LowCardinality):
        return value_text(dt.inner, values, where, nested)
    if isinstance(dt, Tuple):
        # A named tuple prints as an object, an unnamed one as an array.
        children = [pc.fill_null(value_text(e, values.field(i), where, nested), "null") for i, e in enumerate(dt.elements)]
        if dt.names is None:
            body = pc.binary_join_element_wise(*children, ",")
            return pc.binary_join_element_wise("[", body, "]", "")
        members = [pc.binary_join_element_wise(_quoted(pa.array([name]), where)[0].as_py() + ":", child, "")
                   for name, child in zip(dt.names, children, strict=True)]
        return pc.binary_join_element_wise("{", pc.binary_join_element_wise(*members, ","), "}", "")
    if isinstance(dt, Map) and isinstance(dt.key, Primitive) and dt.key.name == "String":
        keys = _quoted(values.keys, where)
        items = pc.fill_null(value_text(dt.value, values.items, where, nested), "null")
        pairs = pc.binary_join_element_wise(keys, items, ":")
        offsets = values.offsets
        lists = pa.ListArray.from_arrays(pc.subtract(offsets, offsets[0]), pairs)
        return pc.binary_join_element_wise("{", pc.binary_join(lists, ","), "}", "")
    if isinstance(dt, Array):
        items = values.flatten() if values.null_count == 0 else values.fill_null([]).flatten()
        item_text = pc.fill_null(value_text(dt.inner, items, where, nested), "null")
        offsets = values.offsets if values.null_count == 0 else values.fill_null([]).offsets
        lists = pa.ListArray.from_arrays(pc.subtract(offsets, offsets[0]), item_text)
        joined = pc.binary_join(lists, ",")
        text = pc.binary_join_element_wise("[", joined, "]", "")
        return pc.if_else(values.is_null(), pa.nulls(len(values), pa.string()), text)
    raise UnsupportedError(f"{where}: values of type {dt.to_clickhouse()} are not rendered as JSON text here")


def object_text(paths: dict[str, pa.Array], n: int, where: str) -> pa.Array:
    """Each row's object: `paths` maps a dotted path to its values' JSON text (NULL where the row
    lacks the path). Keys in sorted order of the full path; nested objects for dotted paths. (`where`
    names the column in errors.)"""
    return _render(sorted(paths), paths, "", n, root=True)


def _render(names: list[str], paths: dict[str, pa.Array], prefix: str, n: int, root: bool = False) -> pa.Array:
    parts = []
    groups: dict[str, list[str]] = {}
    order: list[str] = []
    for name in names:
        key = name[len(prefix):].split(".", 1)[0]
        if key not in groups:
            order.append(key)
            groups[key] = []
        groups[key].append(name)
    for key in order:
        members = groups[key]
        full = prefix + key
        label = _quoted(pa.array([key]), full)[0].as_py() + ":"
        # A path may hold values in some rows and be an object in others (`{"o":1}`, `{"o":{"p":1}}`):
        # a row prints what it has (one that has both prints the value, then the object, as
        # ClickHouse does for a typed path inside a dynamic one).
        inner = [m for m in members if m != full]
        values = ([paths[full]] if full in members else []) + ([_render(inner, paths, full + ".", n)] if inner else [])
        for value in values:
            # `"key":value,` where the row has the key, "" where not; a JSON value never ends in a
            # comma, so trimming the trailing commas leaves the members joined by commas.
            parts.append(pc.fill_null(pc.binary_join_element_wise(label, value, ",", ""), ""))
    empty = pa.array(np.full(n, ""), pa.string())
    body = pc.utf8_rtrim(pc.binary_join_element_wise(*parts, empty, ""), characters=",") if parts else empty
    text = pc.binary_join_element_wise("{", body, "}", "")
    if root:
        return text
    present = pc.invert(pc.equal(body, ""))
    return pc.if_else(present, text, pa.nulls(n, pa.string()))



def stored_map(binaries: dict[str, pa.Array], n: int) -> pa.Array:
    """Each path's values in binary form (NULL where a row lacks it) → one map per row, paths sorted."""
    rows: list[np.ndarray] = []
    keys: list[pa.Array] = []
    values: list[pa.Array] = []
    for path in sorted(binaries):
        arr = binaries[path]
        present = np.flatnonzero(np.asarray(arr.is_valid(), dtype=bool))
        rows.append(present)
        keys.append(pa.array([path], pa.string()).take(pa.array(np.zeros(len(present), np.int64))))
        values.append(arr.take(pa.array(present)).cast(pa.binary()))
    all_rows = np.concatenate(rows) if rows else np.zeros(0, np.int64)
    order = pa.array(np.argsort(all_rows, kind="stable"))  # by row, then path (paths came sorted)
    offsets = np.zeros(n + 1, np.int32)
    np.cumsum(np.bincount(all_rows, minlength=n), out=offsets[1:])
    key_array = pa.concat_arrays(keys).take(order) if keys else pa.array([], pa.string())
    value_array = pa.concat_arrays(values).take(order) if values else pa.array([], pa.binary())
    return pa.MapArray.from_arrays(pa.array(offsets), key_array, value_array, type=STORED_JSON_TYPE)


def values_by_path(entry_rows: np.ndarray, entry_paths: pa.Array, entry_values: pa.Array, rows: int
                    ) -> dict[str, pa.Array]:
    """Shared-data entries (row, path, value) → each path's values over the rows (NULL where a row
    lacks it)."""
    out: dict[str, pa.Array] = {}
    unique = pc.unique(entry_paths)
    codes = np.asarray(pc.index_in(entry_paths, unique), np.int64)
    order = np.argsort(codes, kind="stable")
    bounds = np.searchsorted(codes[order], np.arange(len(unique) + 1))
    for i, path in enumerate(unique.to_pylist()):
        mine = order[bounds[i]:bounds[i + 1]]
        spot = np.full(rows, -1, np.int64)
        spot[entry_rows[mine]] = mine
        out[path] = entry_values.take(pa.array(np.maximum(spot, 0), mask=spot < 0))
    return out

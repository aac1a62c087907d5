"""JSON columns: the structure a part stores them with, and their text.

A part stores a `JSON` column path by path: its `.object_structure` prefix lists the *dynamic paths*
(each stored as a Dynamic column whose streams are named `<col>.<escaped path>...`), and the
*shared data* holds the paths beyond `max_dynamic_paths` (a Map(path, value) per row, in buckets).
We read the dynamic paths and give each row as the text ClickHouse prints for the object
(`toString(json)`): keys sorted, dotted paths as nested objects, absent paths left out.
format_spec/types.md (*JSON*) describes the bytes and what is refused.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from spark_mergetree.errors import UnsupportedError
from spark_mergetree.fileops import escape_for_file_name
from spark_mergetree.format.types import Array, DataType, Nullable, Primitive
from spark_mergetree.format.values import Cursor

__all__ = ["OBJECT_STRUCTURE", "ObjectStructure", "parse_object_structure", "path_base", "shared_data_sizes",
           "value_text", "object_text", "check_counts"]

OBJECT_STRUCTURE = ".object_structure"
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
    """Strings as JSON string literals, escaped as ClickHouse escapes them."""
    if not pa.types.is_string(strings.type):
        strings = strings.cast(pa.string())
    control = pc.match_substring_regex(strings, r"[\x00-\x07\x0b\x0e-\x1f\x7f]")
    if pc.any(control).as_py():
        raise UnsupportedError(f"{where}: a string with control characters other than \\b \\t \\n \\f \\r")
    for raw, escaped in (("\\", "\\\\"), ('"', '\\"'), ("/", "\\/"), ("\b", "\\b"), ("\f", "\\f"), ("\n", "\\n"),
                         ("\r", "\\r"), ("\t", "\\t")):
        strings = pc.replace_substring(strings, raw, escaped)
    return pc.binary_join_element_wise('"', strings, '"', "")


def value_text(dt: DataType, values: pa.Array, where: str) -> pa.Array:
    """Each value as ClickHouse writes it inside JSON text (NULL entries stay NULL)."""
    if isinstance(dt, Nullable):
        return value_text(dt.inner, values, where)
    if isinstance(dt, Primitive) and dt.name in ("Int8", "Int16", "Int32", "Int64", "UInt8", "UInt16", "UInt32",
                                                 "UInt64"):
        return pc.cast(values, pa.string())
    if isinstance(dt, Primitive) and dt.name == "Bool":
        return pc.if_else(values, "true", "false")
    if isinstance(dt, Primitive) and dt.name in ("Float32", "Float64"):
        text = pc.cast(values, pa.string())
        odd = pc.match_substring_regex(text, "[eEnN]|^-0$")
        if pc.any(odd).as_py():
            raise UnsupportedError(f"{where}: a {dt.name} value {text.filter(odd)[0].as_py()} whose text in JSON is not "
                                   "known here (exponent, infinity, NaN or -0)")
        return text
    if isinstance(dt, Primitive) and dt.name == "String":
        return _quoted(values, where)
    if isinstance(dt, Primitive) and dt.name == "Date":
        return _quoted(pc.cast(values, pa.string()), where)
    if isinstance(dt, Array):
        items = values.flatten() if values.null_count == 0 else values.fill_null([]).flatten()
        item_text = pc.fill_null(value_text(dt.inner, items, where), "null")
        offsets = values.offsets if values.null_count == 0 else values.fill_null([]).offsets
        lists = pa.ListArray.from_arrays(pc.subtract(offsets, offsets[0]), item_text)
        joined = pc.binary_join(lists, ",")
        text = pc.binary_join_element_wise("[", joined, "]", "")
        return pc.if_else(values.is_null(), pa.nulls(len(values), pa.string()), text)
    raise UnsupportedError(f"{where}: values of type {dt.to_clickhouse()} are not rendered as JSON text here")


def object_text(paths: dict[str, pa.Array], n: int, where: str) -> pa.Array:
    """Each row's object: `paths` maps a dotted path to its values' JSON text (NULL where the row
    lacks the path). Keys in sorted order of the full path; nested objects for dotted paths."""
    names = sorted(paths)
    for a, b in zip(names, names[1:], strict=False):
        if b.startswith(a + "."):
            raise UnsupportedError(f"{where}: path {a!r} holds values and is also an object ({b!r})")
    return _render(names, paths, "", n, root=True)


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
        value = paths[full] if members == [full] else _render(members, paths, full + ".", n)
        label = _quoted(pa.array([key]), full)[0].as_py() + ":"
        # `"key":value,` where the row has the key, "" where not; a JSON value never ends in a comma,
        # so trimming the trailing commas leaves the members joined by commas.
        parts.append(pc.fill_null(pc.binary_join_element_wise(label, value, ",", ""), ""))
    empty = pa.array(np.full(n, ""), pa.string())
    body = pc.utf8_rtrim(pc.binary_join_element_wise(*parts, empty, ""), characters=",") if parts else empty
    text = pc.binary_join_element_wise("{", body, "}", "")
    if root:
        return text
    present = pc.invert(pc.equal(body, ""))
    return pc.if_else(present, text, pa.nulls(n, pa.string()))


def check_counts(counts: np.ndarray, where: str) -> None:
    if counts.any():
        raise UnsupportedError(f"{where}: {int(np.count_nonzero(counts))} row(s) hold paths in the JSON column's "
                               "shared data (paths beyond max_dynamic_paths), which are not read here")


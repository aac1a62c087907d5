"""Stream names and serialization info: which files a column is stored in, and what each holds.

A column of a Wide part is one or more streams (sparse offsets, null maps, array sizes, string
sizes, values, LowCardinality dictionaries), named as ClickHouse's `ISerialization` names its
substreams (`a.size0`, `m%2Ekeys`, `s.null`, `lc.dict`, `x.sparse.idx`). This module lists them in
write order, says which parts of a column serialization.json marks sparse, and which streams hold
values (the ones type-specific codecs apply to). It does not touch bytes: `serialization` does.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from spark_mergetree.errors import CorruptPartError, UnsupportedError
from spark_mergetree.fileops import escape_for_file_name
from spark_mergetree.format.siphash import siphash128_clickhouse
from spark_mergetree.format.sparse import sparse_capable
from spark_mergetree.format.types import (
    Array,
    DataType,
    Dynamic,
    Json,
    LowCardinality,
    Map,
    Nullable,
    Tuple,
    Variant,
)
from spark_mergetree.format.values import is_string

__all__ = [
    "StreamBytes", "SparseSpec", "stream_names", "stream_value_types", "sparse_streams",
    "internal_names", "external_name", "element_base", "file_stem", "MAX_FILE_NAME_LENGTH", "variant_base", "DISCRIMINATORS", "PREFIX", "STRUCTURE",
]

# The stream of a Variant's discriminators, and the suffix of the substream a Compact part keeps a
# stream's prefix in (a Wide part keeps it at the start of the stream's file, before the first mark).
DISCRIMINATORS = ".variant_discr"
PREFIX = "_prefix"
# The stream whose prefix lists the types a part's Dynamic column holds (its other streams follow
# from them: see format/dynamic.py).
STRUCTURE = ".dynamic_structure"


@dataclass(frozen=True)
class StreamBytes:
    """One stream of one column: bytes of granule g are data[granule_offsets[g]:granule_offsets[g+1]].

    Bytes before granule_offsets[0] are the stream's prefix (only LowCardinality `.dict` streams have
    one: the keys version); granule_offsets[-1] == len(data).
    """

    data: bytes | memoryview  # a memoryview (bytes 'B') may be a view of the input's own buffers
    granule_offsets: np.ndarray


# A Wide part's stream whose name is longer than this (MergeTree setting max_file_name_length) is
# stored in files named by a hash of the name (replace_long_file_name_to_hash, on by default).
MAX_FILE_NAME_LENGTH = 127


def file_stem(stream: str) -> str:
    """The file name (without `.bin` or the marks' extension) a Wide part keeps `stream` in: the name
    itself, or for a name longer than MAX_FILE_NAME_LENGTH bytes the 32 hex digits of its 128-bit
    SipHash (ClickHouse's sipHash128, read as a number: the second 8 bytes, then the first, each
    little-endian)."""
    raw = stream.encode("utf-8", "surrogateescape")
    if len(raw) <= MAX_FILE_NAME_LENGTH:
        return stream
    digest = siphash128_clickhouse(raw)
    return (digest[8:][::-1] + digest[:8][::-1]).hex()


def element_base(base: str, element: str) -> str:
    return f"{base}%2E{escape_for_file_name(element)}"


def variant_base(base: str, type_name: str) -> str:
    """Streams of one variant of a Variant column: `<column>.<escaped type name>` (`v.Array%28UInt8%29`)."""
    return f"{base}.{escape_for_file_name(type_name)}"


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
            _walk_serialization_info(element, element_base(base, name), sub, column, found)


def stream_names(dt: DataType, column_name: str, string_sizes: bool = True, sparse: SparseSpec = False,
                 base: str | None = None, level: int = 0) -> list[str]:
    """Stream names (without `.bin`) of a column, in the order ClickHouse writes them.

    LowCardinality `.dict` streams come first: their keys version is written before any data. A
    sparse column or tuple element (see `sparse_streams`) starts with its `.sparse.idx` stream.
    `base` names the streams of a subcolumn stored on its own (a JSON path: `j.a`) instead of
    the escaped column name, and `level` its nesting depth in Arrays and Maps (a JSON path inside an
    Array(JSON) has `.size1` streams for its outermost arrays).
    """
    return [external_name(dt, column_name, n) for n in internal_names(dt, column_name, string_sizes, sparse, base,
                                                                      level)]


def internal_names(dt: DataType, column_name: str, string_sizes: bool, sparse: SparseSpec,
                   base: str | None = None, level: int = 0) -> list[str]:
    names: list[str] = []
    _collect_names(dt, escape_for_file_name(column_name) if base is None else base, level, string_sizes, names,
                   sparse_streams(dt, column_name, sparse))
    return [n for n in names if n.endswith(".dict")] + [n for n in names if not n.endswith(".dict")]


def external_name(dt: DataType, column_name: str, internal: str) -> str:
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
        if not sparse_capable(dt):
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
        _collect_streams(dt.key, element_base(base, "keys"), level + 1, string_sizes, out)
        _collect_streams(dt.value, element_base(base, "values"), level + 1, string_sizes, out)
    elif isinstance(dt, Tuple):
        for name, element in zip(dt.element_names, dt.elements, strict=True):
            _collect_streams(element, element_base(base, name), level, string_sizes, out, sparse)
    elif isinstance(dt, Dynamic):
        out.append((base + STRUCTURE, None))
    elif isinstance(dt, Json):
        out.append((base + ".object_structure", None))
    elif isinstance(dt, Variant):
        out.append((base + DISCRIMINATORS, None))
        for name, variant in zip(dt.names, dt.variants, strict=True):
            _collect_streams(variant, variant_base(base, name), level, string_sizes, out)
    elif isinstance(dt, LowCardinality):
        out.extend([(base + ".dict", dt.dictionary_type), (base, None)])
    elif is_string(dt) and string_sizes:
        out.extend([(base + ".size", dt), (base, dt)])
    else:
        out.append((base, dt))


def stream_value_types(dt: DataType, column_name: str, string_sizes: bool = True) -> dict[str, DataType | None]:
    """Each stream of a column → the type of its values, or None for streams of sizes and positions:
    ClickHouse applies a column's type-specific codecs (Delta, T64, ...) to the former only."""
    streams: list[tuple[str, DataType | None]] = []
    _collect_streams(dt, escape_for_file_name(column_name), 0, string_sizes, streams)
    return {external_name(dt, column_name, name): value_type for name, value_type in streams}

"""Writes one Compact part (ClickHouse's `MergeTreeDataPartWriterCompact`), and decides, as ClickHouse
does, whether a table's new part is Wide or Compact.

A Compact part keeps every column in one `data.bin`: for each granule, for each column (in
`columns.txt` order), the column's substreams one after the other; each column of each granule ends
its compressed block. Substreams whose codecs differ (a column's CODEC on its values, the generic
codecs on its null map and sizes) are cut into separate blocks as well. `data.cmrk4` holds one
(block offset, offset in block) pair per substream per granule and the granule's rows, then a final
mark at the end of `data.bin`; `columns_substreams.txt` names the substreams. Granules are
self-contained: LowCardinality columns write their keys version (`<col>.dict_prefix`) and their keys
as the piece's additional keys in every granule, and no shared dictionary. format_spec/part.md,
marks.md, blocks.md and types.md describe the bytes.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping, Sequence

import numpy as np
import pyarrow as pa

from spark_mergetree.errors import SchemaMismatchError
from spark_mergetree.fileops import escape_for_file_name
from spark_mergetree.format import granularity
from spark_mergetree.format.checksums import FileChecksum, combine_stream_hashes
from spark_mergetree.format.cityhash import FileHasher, file_hash
from spark_mergetree.format.compression import CompressedStreamWriter
from spark_mergetree.format.compression_codecs import Codec, CodecChain
from spark_mergetree.format.dynamic import DynamicColumn, has_dynamic, holds_objects, split_for_write
from spark_mergetree.format.json_text import OBJECT_STRUCTURE
from spark_mergetree.format.json_write import (
    COMPACT_BUCKETS,
    nested_object_writer,
    serialize_object,
    split_object,
)
from spark_mergetree.format.marks import CompactMarks, format_columns_substreams, write_compact_marks
from spark_mergetree.format.part import COMPACT_DATA_FILE, PartFiles
from spark_mergetree.format.part_writer import (
    PartitionValue,
    WriterSettings,
    _finish_part,
    in_memory_width,
    plan_granules_of,
    write_wide_part,
    write_wide_part_by_column,
)
from spark_mergetree.format.serialization import ObjectWriter, serialize_column
from spark_mergetree.format.streams import DISCRIMINATORS, PREFIX, STRUCTURE
from spark_mergetree.format.types import DataType, Json, contains_type, parse_type

__all__ = [
    "COMPACT_MARKS_FILE", "SUBSTREAMS_FILE", "is_compact_part", "plan_compact_granules", "write_compact_part",
    "encode_part", "write_part_by_column",
]

COMPACT_MARKS_FILE = "data.cmrk4"
SUBSTREAMS_FILE = "columns_substreams.txt"
# ClickHouse's defaults of the table settings that choose the part type.
DEFAULT_MIN_BYTES_FOR_WIDE_PART = 10 * 1024 * 1024
DEFAULT_MIN_ROWS_FOR_WIDE_PART = 0
DEFAULT_MIN_LEVEL_FOR_WIDE_PART = 0

_DICT = ".dict"
_DICT_PREFIX = ".dict_prefix"
_LC_NEED_GLOBAL_DICTIONARY = 1 << 8
_LC_HAS_ADDITIONAL_KEYS = 1 << 9


def is_compact_part(settings: Mapping[str, str], rows: int, in_memory_bytes: int, level: int = 0) -> bool:
    """Whether ClickHouse makes a new part of `rows` rows and `in_memory_bytes` bytes at merge level
    `level` Compact: when it is under `min_bytes_for_wide_part` or `min_rows_for_wide_part`, or below
    `min_level_for_wide_part` (the table's settings, else ClickHouse's defaults: 10 MiB, 0, 0).

    An insert measures its block in memory (`in_memory_width`); a merge the uncompressed column
    bytes and rows of its sources (`engine/merge.py`)."""
    min_bytes = int(settings.get("min_bytes_for_wide_part", DEFAULT_MIN_BYTES_FOR_WIDE_PART))
    min_rows = int(settings.get("min_rows_for_wide_part", DEFAULT_MIN_ROWS_FOR_WIDE_PART))
    min_level = int(settings.get("min_level_for_wide_part", DEFAULT_MIN_LEVEL_FOR_WIDE_PART))
    return in_memory_bytes < min_bytes or rows < min_rows or level < min_level


def plan_compact_granules(blocks: Sequence[tuple[int, int]], settings: WriterSettings) -> np.ndarray:
    """Rows per granule of a Compact part written from blocks of (rows, in-memory bytes)."""
    return granularity.part_granules(blocks, settings.index_granularity, settings.index_granularity_bytes,
                                     compact=True)


def _compact_low_cardinality(dict_bytes: bytes, index_bytes: bytes) -> tuple[bytes, bytes] | None:
    """One granule's LowCardinality streams as a Wide part writes them (keys version + one dictionary;
    one piece using it) → the Compact form: (keys version, piece carrying the dictionary as additional
    keys). None when the Wide form is not that (more keys than one dictionary holds)."""
    prefix, dictionary = dict_bytes[:8], dict_bytes[8:]
    if not index_bytes:  # no rows in the granule (all arrays empty): no piece
        return prefix, b""
    flags = struct.unpack_from("<Q", index_bytes)[0]
    if flags & _LC_HAS_ADDITIONAL_KEYS or not flags & _LC_NEED_GLOBAL_DICTIONARY:
        return None
    flags = (flags & ~_LC_NEED_GLOBAL_DICTIONARY) | _LC_HAS_ADDITIONAL_KEYS
    return prefix, struct.pack("<Q", flags) + dictionary + index_bytes[8:]


def _has_low_cardinality(dt: DataType) -> bool:
    return "LowCardinality(" in dt.to_clickhouse()


def _granule_streams(dt: DataType, name: str, column: pa.Array | pa.ChunkedArray, granule_rows: np.ndarray,
                     string_sizes: bool, objects: ObjectWriter | None = None) -> list[list[tuple[str, bytes]]] | None:
    """Each granule's substreams of one column, in the order they are written: [(name, bytes)].
    `objects`: how JSON inside the column is written (its streams follow from all of its values, so
    a column holding LowCardinality too, serialized granule by granule here, gives None)."""
    if objects is not None and _has_low_cardinality(dt):
        return None
    if not _has_low_cardinality(dt):
        streams = serialize_column(dt, name, column, granule_rows, string_sizes=string_sizes, objects=objects)
        # A stream's prefix (a Variant's discriminators mode) is a substream of its own in every granule,
        # all prefixes before the column's other substreams.
        heads = [(stream + PREFIX, bytes(s.data[:int(s.granule_offsets[0])])) for stream, s in streams.items()
                 if int(s.granule_offsets[0])]
        return [heads + [(stream, bytes(s.data[int(s.granule_offsets[g]):int(s.granule_offsets[g + 1])]))
                            for stream, s in streams.items()] for g in range(len(granule_rows))]
    granules = []
    start = 0
    for rows in granule_rows.tolist():
        streams = serialize_column(dt, name, column.slice(start, rows), np.array([rows]), string_sizes=string_sizes)
        start += rows
        prefixes: list[tuple[str, bytes]] = []
        body: list[tuple[str, bytes]] = []
        for stream, s in streams.items():
            if stream.endswith(_DICT):
                continue
            data = bytes(s.data)
            head = int(s.granule_offsets[0])
            if head:  # a Variant's discriminators mode
                prefixes.append((stream + PREFIX, data[:head]))
                data = data[head:]
            dictionary = streams.get(stream + _DICT)
            if dictionary is not None:
                # The keys version is written first (the state prefix); the piece carries the keys.
                converted = _compact_low_cardinality(bytes(dictionary.data), data)
                if converted is None:
                    return None
                prefixes.append((stream + _DICT_PREFIX, converted[0]))
                body.append((stream + _DICT, b""))
                data = converted[1]
            body.append((stream, data))
        granules.append(prefixes + body)
    return granules


def _with_object_structures(granules: list[list[tuple[str, bytes]]]) -> list[list[tuple[str, bytes]]]:
    """Granules of a column holding JSON inside an Array, Map or Tuple, as ClickHouse lays them out:
    each structure stream (a JSON's `.object_structure`, its paths' `.dynamic_structure`) is one
    substream repeated in every granule (the prefix, then the statistics in the first granule and a
    0 flag in the others), and each path's discriminators prefix follows its path's structure."""
    if not granules:
        return granules
    structural = {stream[:-len(PREFIX)] for stream, _ in granules[0]
                  if stream.endswith(OBJECT_STRUCTURE + PREFIX) or stream.endswith(STRUCTURE + PREFIX)}
    statistics = {stream: data for stream, data in granules[-1] if stream in structural}
    out = []
    for g, granule in enumerate(granules):
        pieces = dict(granule)
        heads: list[tuple[str, bytes]] = []
        body: list[tuple[str, bytes]] = []
        for stream, data in granule:
            if stream in structural:
                continue  # (its statistics go with its prefix)
            if stream[:-len(PREFIX)] in structural:
                whole = stream[:-len(PREFIX)]
                heads.append((whole, data + (statistics[whole] if g == 0 else b"\x00")))
                if whole.endswith(STRUCTURE):
                    discriminators = whole[:-len(STRUCTURE)] + DISCRIMINATORS + PREFIX
                    if discriminators in pieces:
                        heads.append((discriminators, pieces[discriminators]))
            elif stream.endswith(DISCRIMINATORS + PREFIX) and \
                    stream[:-len(DISCRIMINATORS + PREFIX)] + STRUCTURE in structural:
                continue  # (placed after its structure)
            elif stream.endswith(PREFIX):
                heads.append((stream, data))
            else:
                body.append((stream, data))
        out.append(heads + body)
    return out


def _with_structures(granule: list[tuple[str, bytes]], splits: Mapping[str, DynamicColumn],
                     first: bool) -> list[tuple[str, bytes]]:
    """A granule's substreams with each Dynamic's structure just before its discriminators prefix
    (ClickHouse writes a Dynamic's state prefix, then its Variant's). Every granule repeats the
    structure: the first with the statistics, the others with a 0 flag."""
    out = []
    for stream, data in granule:
        base = stream[:-len(DISCRIMINATORS + PREFIX)] if stream.endswith(DISCRIMINATORS + PREFIX) else None
        if base is not None and base in splits:
            split = splits[base]
            out.append((base + STRUCTURE, split.prefix + (split.statistics if first else b"\x00")))
        out.append((stream, data))
    return out


def _object_granules(dt: Json, name: str, column: pa.Array | pa.ChunkedArray, granule_rows: np.ndarray,
                     string_sizes: bool) -> list[list[tuple[str, bytes]]] | None:
    """Each granule's substreams of a JSON column, as ClickHouse orders them: the object structure,
    each dynamic path's structure and discriminators prefix (every granule repeats the prefixes, the
    first with the statistics, the others with a 0 flag), then the data: typed paths, dynamic paths,
    shared data buckets. None when a path holds LowCardinality values (their self-contained Compact
    pieces are not written here): the caller writes a Wide part."""
    obj = split_object(dt, column, name, COMPACT_BUCKETS)
    heads, body = serialize_object(obj, name, escape_for_file_name(name), granule_rows, string_sizes,
                                   nested=nested_object_writer(name, COMPACT_BUCKETS, False, string_sizes))
    if any(stream.endswith(_DICT) for stream, _ in body):
        return None
    prefixes = {stream: bytes(data.data[:int(data.granule_offsets[0])]) for stream, data in body
                if int(data.granule_offsets[0])}
    granules = []
    for g in range(len(granule_rows)):
        substreams: list[tuple[str, bytes]] = []
        for stream, data in heads:
            cut = int(data.granule_offsets[0])
            tail = bytes(data.data[cut:]) if g == 0 else b"\x00"
            substreams.append((stream, bytes(data.data[:cut]) + tail))
            discriminators = stream[:-len(STRUCTURE)] + DISCRIMINATORS if stream.endswith(STRUCTURE) else None
            if discriminators in prefixes:
                substreams.append((discriminators + PREFIX, prefixes.pop(discriminators)))
        substreams += [(stream + PREFIX, prefix) for stream, prefix in prefixes.items()]
        prefixes_again = {stream for stream, data in body if int(data.granule_offsets[0])}
        substreams += [(stream, bytes(data.data[int(data.granule_offsets[g]):int(data.granule_offsets[g + 1])]))
                       for stream, data in body]
        granules.append(substreams)
        prefixes = {stream: bytes(data.data[:int(data.granule_offsets[0])]) for stream, data in body
                    if stream in prefixes_again}
    return granules


def encode_part(table: pa.Table, columns: Sequence[tuple[str, str]],
               primary_key: Sequence[tuple[str, pa.Array | pa.ChunkedArray]], partition: PartitionValue | None,
               settings: WriterSettings, table_settings: Mapping[str, str]) -> PartFiles:
    """An inserted block as the part ClickHouse would make of it: Compact or Wide (`is_compact_part`,
    by the block's size in memory; an insert's part is at level 0)."""
    missing = [name for name, _ in columns if name not in table.column_names]
    if missing:
        raise SchemaMismatchError(f"rows to write lack column(s) {', '.join(missing)}")
    types = [parse_type(type_text) for _, type_text in columns]
    total = sum(in_memory_width(dt, table.column(name)) for (name, _), dt in zip(columns, types, strict=True))
    if is_compact_part(table_settings, table.num_rows, total):
        granules = plan_compact_granules([(table.num_rows, total)], settings)
        files = write_compact_part(table, columns, primary_key, partition, settings, granules)
        if files is not None:
            return files
        # Rows a Compact part of this version cannot hold (write_compact_part): a Wide part reads the same.
    return write_wide_part(table, columns, primary_key, partition, settings,
                           plan_granules_of(table.num_rows, total, settings))


def write_part_by_column(compact: bool, rows: int, columns: Sequence[tuple[str, str]],
                         column_of: Callable[[str], pa.Array | pa.ChunkedArray],
                         primary_key: Sequence[tuple[str, pa.Array | pa.ChunkedArray]],
                         partition: PartitionValue | None, settings: WriterSettings,
                         granule_rows: np.ndarray) -> PartFiles:
    """A part of `rows` rows in the granules `granule_rows`, Compact when `compact` (then every column
    is held at once: a Compact part interleaves them granule by granule) else Wide, one column in
    memory at a time (`write_wide_part_by_column`). A Compact part this version cannot write
    (`write_compact_part` returns None) is written Wide: ClickHouse reads both kinds the same."""
    if compact:
        table = pa.table({name: column_of(name) for name, _ in columns})
        files = write_compact_part(table, columns, primary_key, partition, settings, granule_rows)
        if files is not None:
            return files
    return write_wide_part_by_column(rows, columns, column_of, primary_key, partition, settings, granule_rows)


def _column_granules(table: pa.Table, columns: Sequence[tuple[str, str]], types: Sequence[DataType],
                     granule_rows: np.ndarray, settings: WriterSettings
                     ) -> tuple[list[list[list[tuple[str, bytes]]]], list[dict[str, Codec | CodecChain]]] | None:
    """Per column, each granule's substreams [(name, bytes)] and each substream's codec (None: rows
    a Compact part of this version cannot hold)."""
    per_column: list[list[list[tuple[str, bytes]]]] = []
    codecs: list[dict[str, Codec | CodecChain]] = []
    for (name, _), dt, column in zip(columns, types, table.columns, strict=True):
        if isinstance(dt, Json):
            object_granules = _object_granules(dt, name, column, granule_rows, settings.string_sizes)
            if object_granules is None:
                return None
            chain = dict(settings.column_codecs).get(name)
            generic = chain.for_stream(None, settings.codec) if chain is not None else settings.codec
            per_column.append(object_granules)
            codecs.append(dict.fromkeys((s for s, _ in object_granules[0]) if object_granules else (), generic))
            continue
        stored = dt
        splits: dict[str, DynamicColumn] = {}
        if has_dynamic(dt):  # each Dynamic stored as a Variant over the types of its values
            stored, column, splits = split_for_write(dt, column, name)
        # (a JSON inside the column, or a Dynamic or JSON inside the types its Dynamics hold)
        objects = nested_object_writer(name, COMPACT_BUCKETS, False, settings.string_sizes) \
            if contains_type(dt, Json) or holds_objects(stored) else None
        granules = _granule_streams(stored, name, column, granule_rows, settings.string_sizes, objects)
        if granules is None:
            return None
        if objects is not None:
            granules = _with_object_structures(granules)
        if splits:
            granules = [_with_structures(granule, splits, g == 0) for g, granule in enumerate(granules)]
        per_column.append(granules)
        stream_codecs = settings.stream_codecs(name, dt) | settings.stream_codecs(name, stored)
        chain = dict(settings.column_codecs).get(name)
        generic = chain.for_stream(None, settings.codec) if chain is not None else settings.codec
        if objects is not None and granules:  # a JSON's streams take the generic codec, as a JSON column's do
            stream_codecs = {stream: stream_codecs.get(stream, generic) for stream, _ in granules[0]} | stream_codecs
        codecs.append({**{s + _DICT_PREFIX: generic for s in stream_codecs if s + _DICT in stream_codecs},
                       **{s + PREFIX: generic for s in stream_codecs if s.endswith(DISCRIMINATORS)},
                       **stream_codecs})
    return per_column, codecs


def write_compact_part(
    table: pa.Table,
    columns: Sequence[tuple[str, str]],
    primary_key: Sequence[tuple[str, pa.Array | pa.ChunkedArray]],
    partition: PartitionValue | None,
    settings: WriterSettings,
    granule_rows: np.ndarray | None = None,
) -> PartFiles | None:
    """Serialize sorted rows into a Compact part (the arguments are `write_wide_part`'s).

    Returns None for rows a Compact part of this version cannot hold (a LowCardinality granule with
    more distinct keys than one dictionary takes): the caller writes a Wide part instead."""
    missing = [name for name, _ in columns if name not in table.column_names]
    if missing:
        raise SchemaMismatchError(f"rows to write lack column(s) {', '.join(missing)}")
    types = [parse_type(type_text) for _, type_text in columns]
    table = table.select([name for name, _ in columns])
    n = table.num_rows
    if granule_rows is None:
        total = sum(in_memory_width(dt, table.column(i)) for i, dt in enumerate(types))
        granule_rows = plan_compact_granules([(n, total)], settings)
    granule_rows = np.asarray(granule_rows, np.int64)

    built = _column_granules(table, columns, types, granule_rows, settings)
    if built is None:
        return None
    per_column, codecs = built
    if len(granule_rows):
        substreams = [[stream for stream, _ in granules[0]] for granules in per_column]
    else:  # no row (a merge that kept none): each column's substreams as an empty granule has them,
        # and no mark at all, as ClickHouse writes such a part
        empty = _column_granules(table, columns, types, np.zeros(1, np.int64), settings)
        if empty is None:
            return None
        substreams = [[stream for stream, _ in granules[0]] for granules in empty[0]]
    blocks: list[bytes | memoryview] = []
    offset = 0
    hashers: dict[str, FileHasher] = {}  # uncompressed bytes per codec, in order of first use
    marks: list[list[tuple[int, int]]] = []
    for g in range(len(granule_rows)):
        row: list[tuple[int, int]] = []
        for c, granules in enumerate(per_column):
            writer: CompressedStreamWriter | None = None
            for stream, data in granules[g]:
                codec = codecs[c][stream]
                if writer is not None and writer.codec != codec:
                    offset = _close(writer, blocks, offset)
                    writer = None
                if writer is None:
                    writer = CompressedStreamWriter(codec, 0, settings.max_compress_block_size)
                    base = offset
                position = writer.position
                row.append((base + position[0], position[1]))
                writer.write(data)
                hashers.setdefault(codec.text, FileHasher()).update(data)
            if writer is not None:
                offset = _close(writer, blocks, offset)
        marks.append(row)
    all_streams = [s for streams in substreams for s in streams]
    if n:
        marks.append([(offset, 0)] * len(all_streams))
    body = b"".join(blocks)

    files = PartFiles(rows=n)
    files.files[COMPACT_DATA_FILE] = body
    checksums = {COMPACT_DATA_FILE: FileChecksum(
        len(body), file_hash(body), True, sum(h.size for h in hashers.values()),
        combine_stream_hashes([h.digest() for h in hashers.values()]))}
    offsets = np.array(marks, np.uint64).reshape(len(marks), len(all_streams), 2)
    rows = (np.append(granule_rows, 0) if n else granule_rows).astype(np.uint64)
    files.files[COMPACT_MARKS_FILE] = write_compact_marks(CompactMarks(offsets, rows), compressed=True)
    files.files[SUBSTREAMS_FILE] = format_columns_substreams(
        [(name, streams) for (name, _), streams in zip(columns, substreams, strict=True)]).encode()
    column_of: Callable[[str], pa.Array | pa.ChunkedArray] = table.column
    return _finish_part(files, checksums, n, columns, primary_key, partition, settings, granule_rows, column_of,
                        compact=True)


def _close(writer: CompressedStreamWriter, blocks: list[bytes | memoryview], offset: int) -> int:
    """End a column's (or a codec run's) blocks; returns the new end of data.bin."""
    writer.finish()
    value = writer.getvalue()
    blocks.append(value)
    return offset + len(value)

"""Writes one Wide part from rows that are already sorted by the table's ORDER BY key.

The output is a `PartFiles` (file name → bytes) that storage places on disk atomically. Every file
is one ClickHouse would write for the same rows: column streams of compressed blocks, `.mrk2` marks,
`primary.idx`, `partition.dat` and `minmax_<col>.idx`, the table's data-skipping indexes
(`skp_idx_<name>.idx`/`.idx2` + `.mrk2`, skip_index_writer.py), `count.txt`, `columns.txt`,
`serialization.json`, `default_compression_codec.txt` and `checksums.txt`.
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, BinaryIO

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from spark_mergetree.errors import SchemaMismatchError
from spark_mergetree.fileops import escape_for_file_name
from spark_mergetree.format import granularity
from spark_mergetree.format.checksums import (
    Checksums,
    FileChecksum,
    compute_file_checksum,
    is_compressed_file,
)
from spark_mergetree.format.compression import (
    DEFAULT_MAX_COMPRESS_BLOCK_SIZE,
    DEFAULT_MIN_COMPRESS_BLOCK_SIZE,
    CompressedStreamWriter,
)
from spark_mergetree.format.compression_codecs import LZ4, Codec, CodecChain
from spark_mergetree.format.dynamic import has_dynamic, holds_objects, split_for_write, structure_stream
from spark_mergetree.format.json_write import (
    WIDE_BUCKETS,
    nested_object_writer,
    serialize_object,
    split_object,
)
from spark_mergetree.format.low_cardinality import LowCardinalityState
from spark_mergetree.format.marks import wide_marks_with_rows, write_wide_marks
from spark_mergetree.format.part import (
    CHECKSUMS_FILE,
    CODEC_FILE,
    COLUMNS_FILE,
    COUNT_FILE,
    METADATA_VERSION_FILE,
    NOT_CHECKSUMMED,
    SERIALIZATION_FILE,
    PartFiles,
    SerializationInfo,
    format_columns,
    format_count,
)
from spark_mergetree.format.row_binary import serialize_rows
from spark_mergetree.format.serialization import serialize_column
from spark_mergetree.format.skip_index_writer import (
    IndexSpec,
    SkipIndexBuilder,
    skip_index_builders,
    skip_indexes_from_columns,
)
from spark_mergetree.format.streams import STRUCTURE, StreamBytes, file_stem, stream_value_types
from spark_mergetree.format.types import (
    Array,
    DataType,
    DateTime,
    DateTime64,
    Decimal,
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
    parse_type,
    to_arrow,
)

PRIMARY_INDEX_FILE = "primary.idx"
PARTITION_FILE = "partition.dat"

# Parts of fewer rows are written on the calling thread; bigger ones use WRITER_THREADS threads.
PARALLEL_MIN_ROWS = 100_000
WRITER_THREADS = max(2, min(8, os.cpu_count() or 2))

# How many rows a merge feeds the writer at a time; granules are planned per such block (as in
# ClickHouse, whose merges write blocks of merge_max_block_size rows).
MERGE_BLOCK_ROWS = 8192


@dataclass(frozen=True)
class WriterSettings:
    """Table settings that shape the bytes of a part."""

    index_granularity: int = granularity.DEFAULT_INDEX_GRANULARITY
    index_granularity_bytes: int = granularity.DEFAULT_INDEX_GRANULARITY_BYTES
    codec: Codec = LZ4
    min_compress_block_size: int = DEFAULT_MIN_COMPRESS_BLOCK_SIZE
    max_compress_block_size: int = DEFAULT_MAX_COMPRESS_BLOCK_SIZE
    string_sizes: bool = True  # the 26.x String encoding: lengths in `<col>.size.bin`
    # (column, its CODEC(...) chain) for columns with a codec clause; the others use `codec`.
    column_codecs: tuple[tuple[str, CodecChain], ...] = ()
    # The table's data-skipping indexes, written into every part.
    skip_indexes: tuple[IndexSpec, ...] = ()

    def stream_codecs(self, column: str, dt: DataType) -> dict[str, Codec | CodecChain]:
        """The codec of each stream of a column, as ClickHouse picks it: the column's chain bound to
        the stream's value type, its generic codecs only for sizes, null maps and indexes."""
        chain = dict(self.column_codecs).get(column)
        types = stream_value_types(dt, column, self.string_sizes)
        return {stream: chain.for_stream(value_type, self.codec) if chain is not None else self.codec
                for stream, value_type in types.items()}


@dataclass(frozen=True)
class PartitionValue:
    """The partition a part belongs to: key values (one Arrow scalar array of length 1 each, in the
    key's result types) and the columns the key reads (for `minmax_<col>.idx`)."""

    values: Sequence[pa.Array]
    result_types: Sequence[str]
    minmax_columns: Sequence[str]


def in_memory_width(dt: DataType, array: pa.ChunkedArray | pa.Array) -> int:
    """Bytes a column takes in ClickHouse's memory (its `IColumn::byteSize`): what adaptive
    granularity is computed from, and an insert's Compact or Wide choice (`min_bytes_for_wide_part`)."""
    n = len(array)
    if n == 0:
        return 0
    if isinstance(dt, LowCardinality):
        return _low_cardinality_width(dt, array)
    known = in_memory_width_of_type(dt, array.type, n)
    if known is not None:
        return known
    if isinstance(dt, Nullable):  # a null map byte per row, and the values under NULLs too
        return n + in_memory_width(dt.inner, array)
    if isinstance(dt, Primitive) and dt.name == "String":
        # Characters plus an 8-byte offset per row.
        return int(pc.sum(pc.binary_length(array)).as_py() or 0) + 8 * n
    if isinstance(dt, (Array, Map)) and (pa.types.is_list(array.type) or pa.types.is_map(array.type)):
        # An 8-byte offset per row, then the elements (a Map's are its keys and values).
        if pa.types.is_map(array.type):  # list_flatten takes lists: a map is a list of (key, value)
            kind = array.type
            array = array.cast(pa.list_(pa.field("entries", pa.struct([kind.key_field, kind.item_field]), False)))
        items = pc.list_flatten(array)
        if isinstance(dt, Map):
            return 8 * n + in_memory_width(dt.key, pc.struct_field(items, [0])) + \
                in_memory_width(dt.value, pc.struct_field(items, [1]))
        assert isinstance(dt, Array)
        return 8 * n + in_memory_width(dt.inner, items)
    if isinstance(dt, Tuple) and pa.types.is_struct(array.type):
        return sum(in_memory_width(element, pc.struct_field(array, [i])) for i, element in enumerate(dt.elements))
    return int(array.nbytes)  # Variant, Dynamic, JSON, aggregate states: Arrow's size stands in


def _low_cardinality_width(dt: LowCardinality, array: pa.ChunkedArray | pa.Array) -> int:
    """A LowCardinality column in memory: an index per row, as narrow as the dictionary allows
    (UInt8 up to 256 keys, then UInt16, UInt32), and the dictionary's keys (the default value and,
    for Nullable, a NULL slot among them). The dictionary's hash table is not counted."""
    keys = pc.unique(array).drop_null()
    size = len(keys) + 1 + isinstance(dt.inner, Nullable)
    index = 1 if size <= 1 << 8 else 2 if size <= 1 << 16 else 4
    return len(array) * index + in_memory_width(dt.dictionary_type, keys) + (in_memory_width_of_type(
        dt.dictionary_type, keys.type, 1) or 8) * (size - len(keys))


def _fixed_width(dt: DataType) -> int | None:
    """Bytes per value of a type whose values all take the same room in ClickHouse's memory."""
    if isinstance(dt, Primitive):
        return dt.width
    if isinstance(dt, FixedString):
        return dt.length
    if isinstance(dt, (DateTime, Time)):
        return 4
    if isinstance(dt, (DateTime64, Time64)):
        return 8
    if isinstance(dt, Decimal):
        return dt.width
    if isinstance(dt, Enum):
        return dt.bits // 8
    if isinstance(dt, Nullable):
        inner = _fixed_width(dt.inner)
        return None if inner is None else 1 + inner
    if isinstance(dt, Tuple):
        widths = [_fixed_width(e) for e in dt.elements]
        return None if any(w is None for w in widths) else sum(w or 0 for w in widths)
    return None


def in_memory_width_of_type(dt: DataType, arrow_type: pa.DataType, n: int) -> int | None:
    """`in_memory_width` of `n` values when the type alone decides it (fixed-width values), else None.

    A LowCardinality column counts 4 bytes a row here (merges plan granules with it unread; an
    insert measures its dictionary, `in_memory_width`)."""
    if n == 0:
        return 0
    if isinstance(dt, LowCardinality):
        return n * 4
    width = _fixed_width(dt)
    return None if width is None else n * width


def plan_granules(table: pa.Table, types: Sequence[DataType], settings: WriterSettings,
                  block_rows: int | None = None) -> np.ndarray:
    """Rows per granule for `table`, written as one block (an insert) or in blocks of `block_rows`."""
    total_bytes = sum(in_memory_width(dt, table.column(i)) for i, dt in enumerate(types))
    return plan_granules_of(table.num_rows, total_bytes, settings, block_rows)


def plan_granules_of(n: int, total_bytes: int, settings: WriterSettings, block_rows: int | None = None) -> np.ndarray:
    """Rows per granule for `n` rows taking `total_bytes` in memory (see `plan_granules`)."""
    if block_rows is None or n <= block_rows:
        blocks = [(n, total_bytes)]
    else:
        per_row = total_bytes / max(n, 1)
        starts = range(0, n, block_rows)
        blocks = [(min(block_rows, n - s), int(per_row * min(block_rows, n - s))) for s in starts]
    return granularity.part_granules(blocks, settings.index_granularity, settings.index_granularity_bytes)


class _StreamFile:
    """One compressed stream being written: its writer and, when spilled, its file."""

    def __init__(self, writer: CompressedStreamWriter, path: str | None, handle: BinaryIO | None) -> None:
        self.writer, self.path, self.handle = writer, path, handle


class PartStreamWriter:
    """Writes one Wide part incrementally: the one way parts are written.

    The granules of the part (`granule_rows`) are planned up front. Each column then arrives in
    blocks of any size, in row order (`write`), columns in any interleaving (a vertical merge writes
    one column after another; an insert all at once); the whole granules of each block are
    serialized and their streams compressed and appended as they come (the rows of a granule not yet
    complete wait for the next block), so memory holds a block per column, not the part.
    The primary key's values come in blocks the same way (`primary_key`). `finish()` writes marks,
    `primary.idx`, `partition.dat`, `minmax_*.idx`, the metadata files and `checksums.txt`.

    With `spill_dir`, compressed streams go to files there as they are written and the finished
    part's column files are read-only memory maps of them (the caller removes the directory once
    storage holds the part); otherwise they stay in memory. The bytes are the same either way, and
    the same however the rows were cut into blocks.
    """

    def __init__(self, columns: Sequence[tuple[str, str]], granule_rows: np.ndarray,
                 primary_key_types: Sequence[str], partition: PartitionValue | None,
                 settings: WriterSettings = WriterSettings(), spill_dir: str | None = None,
                 stream_pool: ThreadPoolExecutor | None = None) -> None:
        self.columns = list(columns)
        self.types = {name: parse_type(t) for name, t in self.columns}
        self.granule_rows = np.asarray(granule_rows, np.int64)
        self.granule_starts = granularity.granule_offsets(self.granule_rows)
        self.rows = int(self.granule_starts[-1])
        self.settings = settings
        self.partition = partition
        self.spill_dir = spill_dir
        self.stream_pool = stream_pool  # compresses the streams of one block side by side
        self._key_types = [parse_type(t) for t in primary_key_types]
        self._key_rows: list[list[pa.Array]] = []  # per block: the key values at granule starts
        self._key_last: list[pa.Array] = []
        self._key_row = 0  # primary key rows given so far
        self._cursor = dict.fromkeys(self.types, 0)  # next granule of each column
        self._pending: dict[str, pa.ChunkedArray] = {}  # rows short of a whole granule, per column
        self._lc_states: dict[str, dict[str, LowCardinalityState]] = {name: {} for name in self.types}
        self._minmax: dict[str, list[Any]] = {}
        self._minmax_type: dict[str, pa.DataType] = {}
        # Skip indexes are built as their columns' granules come (format/skip_index_writer.py).
        self._indexes = skip_index_builders(settings.skip_indexes, dict(self.columns), self.granule_rows,
                                            settings.codec, settings.min_compress_block_size,
                                            settings.max_compress_block_size)
        self._indexes_of: dict[str, list[SkipIndexBuilder]] = {}
        for builder in self._indexes:
            for column in builder.spec.columns:
                self._indexes_of.setdefault(column, []).append(builder)
        self._streams: dict[str, _StreamFile] = {}
        self._done: set[str] = set()
        self._files = PartFiles(rows=self.rows)
        self._checksums: dict[str, FileChecksum] = {}
        # Columns of one Nested table share their sizes stream (n.size0): the first column writes it.
        self._owner: dict[str, str] = {}
        for name, dt in self.types.items():
            for stream in stream_value_types(dt, name, settings.string_sizes):
                self._owner.setdefault(stream, name)

    def write(self, name: str, values: pa.Array | pa.ChunkedArray) -> None:
        """The next rows of column `name`, any number: the rows up to the last whole granule are
        serialized and compressed now, the rest (less than a granule) when more rows come."""
        if name not in self.types:
            raise SchemaMismatchError(f"the part has no column {name!r}")
        if name in self._done:
            raise SchemaMismatchError(f"column {name!r} got rows after the part's {self.rows}")
        pending = self._pending.pop(name, None)
        if pending is not None:
            chunks = values.chunks if isinstance(values, pa.ChunkedArray) else [values]
            values = pa.chunked_array([*pending.chunks, *chunks], pending.type)
        first = self._cursor[name]
        begin = int(self.granule_starts[first])
        if begin + len(values) > self.rows:
            raise SchemaMismatchError(f"column {name!r} got {begin + len(values)} rows, the part has {self.rows}")
        if (has_dynamic(self.types[name]) or contains_type(self.types[name], Json)) and begin + len(values) < self.rows:
            # A Dynamic column's streams follow from the types of all its rows, a JSON column's from
            # its paths: they are written whole.
            self._pending[name] = values if isinstance(values, pa.ChunkedArray) else pa.chunked_array([values])
            return
        last = int(np.searchsorted(self.granule_starts, begin + len(values), side="right")) - 1
        whole = int(self.granule_starts[last]) - begin
        if whole < len(values):
            rest = values.slice(whole)
            self._pending[name] = rest if isinstance(rest, pa.ChunkedArray) else pa.chunked_array([rest])
            values = values.slice(0, whole)
        if last > first or last == len(self.granule_rows):
            self._write_granules(name, values, first, last)

    def _write_granules(self, name: str, values: pa.Array | pa.ChunkedArray, first: int, last: int) -> None:
        self._cursor[name] = last
        for builder in self._indexes_of.get(name, ()):
            builder.add(name, values, last)
        dt = self.types[name]
        ends = last == len(self.granule_rows)
        granules = self.granule_rows[first:last]
        if isinstance(dt, Json):
            streams, codecs = self._object_streams(dt, name, values, granules)
        elif has_dynamic(dt) or contains_type(dt, Json):
            streams, codecs = self._dynamic_streams(dt, name, values, granules)
        else:
            streams = serialize_column(dt, name, values, granules, string_sizes=self.settings.string_sizes,
                                       states=self._lc_states[name], last=ends)
            codecs = self.settings.stream_codecs(name, dt)
        jobs = [(stream, codecs[stream], data) for stream, data in streams.items() if self._owner.get(stream, name) == name]
        if self.stream_pool is not None and len(jobs) > 1:
            list(self.stream_pool.map(lambda job: self._append(*job), jobs))
        else:
            for job in jobs:
                self._append(*job)
        if self.partition is not None and name in self.partition.minmax_columns and len(values):
            bounds = [pc.min(values).as_py(), pc.max(values).as_py()]
            self._minmax_type.setdefault(name, values.type)
            seen = self._minmax.setdefault(name, bounds)
            if bounds[0] is not None:
                seen[0] = bounds[0] if seen[0] is None else min(seen[0], bounds[0])
                seen[1] = bounds[1] if seen[1] is None else max(seen[1], bounds[1])
        if ends:
            for stream in streams:
                if self._owner.get(stream, name) == name:
                    self._finish_stream(stream)
            self._done.add(name)

    def _dynamic_streams(self, dt: DataType, name: str, values: pa.Array | pa.ChunkedArray, granules: np.ndarray
                         ) -> tuple[dict[str, StreamBytes], dict[str, Codec | CodecChain]]:
        """A whole column holding Dynamic values (a Dynamic column, or Dynamic inside Array, Map or
        Tuple): each Dynamic's structure stream (the types before the first mark, the statistics
        after the last granule) and the streams of the type it is stored as (each Dynamic a Variant)."""
        stored, rows, splits = split_for_write(dt, values, name)
        streams = {base + STRUCTURE: structure_stream(split, len(granules)) for base, split in splits.items()}
        # (a JSON inside the column, or a Dynamic or JSON inside the types its Dynamics hold)
        objects = nested_object_writer(name, WIDE_BUCKETS, True, self.settings.string_sizes) \
            if contains_type(dt, Json) or holds_objects(stored) else None
        streams.update(serialize_column(stored, name, rows, granules, self.settings.string_sizes, objects=objects))
        codecs = {**self.settings.stream_codecs(name, dt), **self.settings.stream_codecs(name, stored)}
        # A JSON's streams inside the column take the column's generic codec, as a JSON column's do.
        chain = dict(self.settings.column_codecs).get(name)
        generic = chain.for_stream(None, self.settings.codec) if chain is not None else self.settings.codec
        return streams, {stream: codecs.get(stream, generic) for stream in streams}

    def _object_streams(self, dt: Json, name: str, values: pa.Array | pa.ChunkedArray, granules: np.ndarray
                        ) -> tuple[dict[str, StreamBytes], dict[str, Codec | CodecChain]]:
        """A whole JSON column: its structure streams and those of its typed paths, dynamic paths and
        shared data (format/json_write.py). Every stream takes the column's generic codec: the
        streams' value types differ from part to part."""
        obj = split_object(dt, values, name, WIDE_BUCKETS, one_bucket_when_empty=True)
        heads, body = serialize_object(obj, name, escape_for_file_name(name), granules, self.settings.string_sizes,
                                       nested=nested_object_writer(name, WIDE_BUCKETS, True, self.settings.string_sizes))
        streams = dict(heads + body)
        chain = dict(self.settings.column_codecs).get(name)
        codec = chain.for_stream(None, self.settings.codec) if chain is not None else self.settings.codec
        return streams, dict.fromkeys(streams, codec)

    def write_columns(self, block: pa.Table, pool: ThreadPoolExecutor | None = None) -> None:
        """The next rows of every column of `block` (columns side by side on `pool`'s threads)."""
        names = [name for name, _ in self.columns if name in block.column_names]
        if pool is None or len(names) < 2:
            for name in names:
                self.write(name, block.column(name))
        else:
            list(pool.map(lambda name: self.write(name, block.column(name)), names))

    def primary_key(self, values: Sequence[pa.Array | pa.ChunkedArray]) -> None:
        """The next rows of the PRIMARY KEY's elements (one array each, of equal lengths)."""
        if not self._key_types or not len(values) or not len(values[0]):
            return
        n = len(values[0])
        begin = self._key_row
        first, stop = np.searchsorted(self.granule_starts[:-1], [begin, begin + n])
        starts = self.granule_starts[first:stop] - begin
        self._key_row += n
        chosen = pa.array(starts, pa.int64())
        self._key_rows.append([combine_chunks(v).take(chosen) for v in values])
        self._key_last = [combine_chunks(v).slice(n - 1, 1) for v in values]

    def _append(self, stream: str, codec: Codec | CodecChain, data: StreamBytes) -> None:
        target = self._streams.get(stream)
        if target is None:
            path = handle = None
            if self.spill_dir is not None:
                path = os.path.join(self.spill_dir, file_stem(stream) + ".bin")  # (file names, however long the stream's)
                handle = open(path, "wb")  # noqa: SIM115 (closed by _finish_stream)
            target = self._streams[stream] = _StreamFile(
                CompressedStreamWriter(codec, self.settings.min_compress_block_size,
                                       self.settings.max_compress_block_size, sink=handle), path, handle)
        target.writer.append_granules(memoryview(data.data), data.granule_offsets)

    def _finish_stream(self, stream: str) -> None:
        target = self._streams[stream]
        writer = target.writer
        final = writer.finish()
        bin_name = file_stem(stream) + ".bin"
        body: bytes | memoryview
        if target.handle is not None and target.path is not None:
            target.handle.close()
            body = _map_file(target.path)
        else:
            body = writer.getvalue()
        self._files.files[bin_name] = body
        self._files.boundaries[bin_name] = np.unique(writer.marks[:, 0]).astype(np.int64)
        self._checksums[bin_name] = FileChecksum(writer.compressed_size, writer.file_hash, True,
                                                 writer.uncompressed_size, writer.uncompressed_hash)
        marks = wide_marks_with_rows(writer.marks, self.granule_rows, final)
        self._files.files[file_stem(stream) + ".mrk2"] = write_wide_marks(marks)
        target.writer = CompressedStreamWriter()  # drop the finished stream's blocks

    def finish(self) -> PartFiles:
        """The whole part, once every column got all its rows."""
        for name in self.types:
            if name not in self._done and self._cursor[name] == len(self.granule_rows):
                self.write(name, pa.array([], to_arrow(self.types[name])))  # a part of no rows
        short = [name for name in self.types if name not in self._done]
        if short:
            raise SchemaMismatchError(f"column(s) {', '.join(short)} got fewer rows than the part's {self.rows}")
        files = self._files
        if self._key_types and self.rows:
            key_values = [pa.concat_arrays([block[i] for block in self._key_rows] + [self._key_last[i]])
                          for i in range(len(self._key_types))]
            files.files[PRIMARY_INDEX_FILE] = serialize_rows(self._key_types, key_values,
                                                             np.arange(len(key_values[0])))
        elif self._key_types:
            files.files[PRIMARY_INDEX_FILE] = b""
        partition = self.partition
        if partition is not None and partition.result_types:
            files.files[PARTITION_FILE] = serialize_rows(
                [parse_type(t) for t in partition.result_types], list(partition.values), [0])
            for column_name in partition.minmax_columns:
                dt = self.types[column_name]
                low, high = self._minmax.get(column_name, [None, None])
                bounds = pa.chunked_array([pa.array([low, high], type=self._minmax_type.get(column_name, to_arrow(dt)))])
                files.files[f"minmax_{escape_for_file_name(column_name)}.idx"] = serialize_rows([dt], [bounds], [0, 1])

        return _finish_metadata(files, self._checksums, self.rows, self.columns, self.settings, self._indexes)


def _map_file(path: str) -> memoryview:
    """A read-only memory map of a whole file (empty files: empty bytes)."""
    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size == 0:
            return memoryview(b"")
        return memoryview(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ))


def combine_chunks(values: pa.Array | pa.ChunkedArray) -> pa.Array:
    return values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values


def write_wide_part(
    table: pa.Table,
    columns: Sequence[tuple[str, str]],
    primary_key: Sequence[tuple[str, pa.Array | pa.ChunkedArray]],
    partition: PartitionValue | None,
    settings: WriterSettings = WriterSettings(),
    granule_rows: np.ndarray | None = None,
) -> PartFiles:
    """Serialize sorted rows into a Wide part (`PartStreamWriter` given all rows as one block).

    `columns` are (name, ClickHouse type) in table order; `table` must hold them (by name).
    `primary_key` gives each PRIMARY KEY element's (ClickHouse type, values over these rows).
    `granule_rows` overrides granule planning (merges plan per block of rows).
    """
    missing = [name for name, _ in columns if name not in table.column_names]
    if missing:
        raise SchemaMismatchError(f"rows to write lack column(s) {', '.join(missing)}")
    types = [parse_type(type_text) for _, type_text in columns]
    table = table.select([name for name, _ in columns])
    if granule_rows is None:
        granule_rows = plan_granules(table, types, settings)
    writer = PartStreamWriter(columns, granule_rows, [t for t, _ in primary_key], partition, settings)
    # Columns are independent: serialize and compress them on all cores (LZ4, ZSTD and the hash
    # chain release the GIL); small parts stay on this thread.
    if table.num_rows >= PARALLEL_MIN_ROWS and len(columns) > 1:
        with ThreadPoolExecutor(max_workers=WRITER_THREADS) as pool:
            writer.write_columns(table, pool)
    else:
        writer.write_columns(table)
    writer.primary_key([values for _, values in primary_key])
    return writer.finish()


def write_wide_part_by_column(
    num_rows: int,
    columns: Sequence[tuple[str, str]],
    column_of: Callable[[str], pa.Array | pa.ChunkedArray],
    primary_key: Sequence[tuple[str, pa.Array | pa.ChunkedArray]],
    partition: PartitionValue | None,
    settings: WriterSettings,
    granule_rows: np.ndarray,
) -> PartFiles:
    """`write_wide_part` with one column in memory at a time (ClickHouse's vertical merge writes a
    part so): `column_of(name)` gives a column's `num_rows` sorted values when its turn comes; the
    column's streams are compressed in parallel, then its values are dropped."""
    with ThreadPoolExecutor(max_workers=WRITER_THREADS) as pool:
        writer = PartStreamWriter(columns, granule_rows, [t for t, _ in primary_key], partition, settings,
                                  stream_pool=pool)
        for name, _ in columns:
            values = column_of(name)
            if len(values) != num_rows:
                raise SchemaMismatchError(f"column {name!r} has {len(values)} rows, the part {num_rows}")
            writer.write(name, values)
            del values
        writer.primary_key([values for _, values in primary_key])
        return writer.finish()


def _finish_part(files: PartFiles, checksums: dict[str, FileChecksum], n: int, columns: Sequence[tuple[str, str]],
                 primary_key: Sequence[tuple[str, pa.Array | pa.ChunkedArray]], partition: PartitionValue | None,
                 settings: WriterSettings, granule_rows: np.ndarray,
                 column_of: Callable[[str], pa.Array | pa.ChunkedArray], compact: bool = False) -> PartFiles:
    """The part's index, partition, metadata files and checksums.txt, after its column streams
    (for writers given whole columns: the Compact writer, `compact`)."""
    if primary_key:
        starts = granularity.granule_offsets(granule_rows)[:-1]
        index_rows = np.append(starts, n - 1) if n else starts
        files.files[PRIMARY_INDEX_FILE] = serialize_rows(
            [parse_type(t) for t, _ in primary_key], [values for _, values in primary_key], index_rows)

    if partition is not None and partition.result_types:
        files.files[PARTITION_FILE] = serialize_rows(
            [parse_type(t) for t in partition.result_types], list(partition.values), [0])
        type_of = dict(columns)
        for column_name in partition.minmax_columns:
            dt = parse_type(type_of[column_name])
            values = column_of(column_name)
            bounds = pa.chunked_array([pa.array([pc.min(values).as_py(), pc.max(values).as_py()],
                                                type=values.type)])
            files.files[f"minmax_{escape_for_file_name(column_name)}.idx"] = serialize_rows([dt], [bounds], [0, 1])
    indexes = skip_indexes_from_columns(settings.skip_indexes, dict(columns), granule_rows, column_of, settings.codec,
                                        settings.min_compress_block_size, settings.max_compress_block_size)
    return _finish_metadata(files, checksums, n, columns, settings, indexes, compact)


def _finish_metadata(files: PartFiles, checksums: dict[str, FileChecksum], n: int,
                     columns: Sequence[tuple[str, str]], settings: WriterSettings,
                     indexes: Sequence[SkipIndexBuilder], compact: bool = False) -> PartFiles:
    """Skip indexes (their builders fed every column; a Compact part's index marks named as its own),
    count.txt, columns.txt and the other metadata files, then checksums.txt."""
    for builder in indexes:
        builder.finish(files.files, checksums, compact)
    files.files[COUNT_FILE] = format_count(n)
    files.files[COLUMNS_FILE] = format_columns(list(columns))
    files.files[CODEC_FILE] = settings.codec.text.encode()
    files.files[METADATA_VERSION_FILE] = b"0"
    files.files[SERIALIZATION_FILE] = SerializationInfo(string_sizes=settings.string_sizes).to_bytes([])
    for name, data in files.files.items():
        if name not in NOT_CHECKSUMMED and name not in checksums:
            checksums[name] = compute_file_checksum(data, is_compressed_file(name))
    files.files[CHECKSUMS_FILE] = Checksums(dict(sorted(checksums.items()))).to_bytes()
    return files

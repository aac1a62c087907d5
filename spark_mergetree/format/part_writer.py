"""Writes one Wide part from rows that are already sorted by the table's ORDER BY key.

The output is a `PartFiles` (file name → bytes) that storage places on disk atomically. Every file
is one ClickHouse would write for the same rows: column streams of compressed blocks, `.mrk2` marks,
`primary.idx`, `partition.dat` and `minmax_<col>.idx`, the table's data-skipping indexes
(`skp_idx_<name>.idx`/`.idx2` + `.mrk2`, skip_index_writer.py), `count.txt`, `columns.txt`,
`serialization.json`, `default_compression_codec.txt` and `checksums.txt`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

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
from spark_mergetree.format.cityhash import file_hash
from spark_mergetree.format.compression import (
    DEFAULT_MAX_COMPRESS_BLOCK_SIZE,
    DEFAULT_MIN_COMPRESS_BLOCK_SIZE,
    CompressedStreamWriter,
)
from spark_mergetree.format.compression_codecs import LZ4, Codec, CodecChain
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
from spark_mergetree.format.skip_index_writer import IndexSpec, write_skip_indexes
from spark_mergetree.format.streams import StreamBytes, stream_value_types
from spark_mergetree.format.types import DataType, LowCardinality, Nullable, Primitive, parse_type

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
    """Bytes a column takes in ClickHouse's memory: what adaptive granularity is computed from."""
    n = len(array)
    if n == 0:
        return 0
    known = in_memory_width_of_type(dt, array.type, n)
    if known is not None:
        return known
    if isinstance(dt, Nullable):
        return n + in_memory_width(dt.inner, array)
    if isinstance(dt, Primitive) and dt.name == "String":
        # Characters plus an 8-byte offset per row.
        return int(pc.sum(pc.binary_length(array)).as_py() or 0) + 8 * n
    return int(array.nbytes)


def in_memory_width_of_type(dt: DataType, arrow_type: pa.DataType, n: int) -> int | None:
    """`_in_memory_width` of `n` values when the type alone decides it (fixed-width values), else None."""
    if n == 0:
        return 0
    if isinstance(dt, Nullable):
        inner = in_memory_width_of_type(dt.inner, arrow_type, n)
        return None if inner is None else n + inner
    if isinstance(dt, LowCardinality):
        return n * 4
    if isinstance(dt, Primitive) and dt.name == "String":
        return None
    try:
        return n * (arrow_type.bit_width // 8)
    except ValueError:  # not a fixed-width Arrow type
        return None


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


def _write_stream(files: PartFiles, checksums: dict[str, FileChecksum], stream: str, data: memoryview,
                  offsets: np.ndarray, granule_rows: np.ndarray, settings: WriterSettings,
                  codec: Codec | CodecChain) -> None:
    writer = CompressedStreamWriter(codec, settings.min_compress_block_size, settings.max_compress_block_size)
    # (a stream prefix, the LowCardinality keys version, may precede the first granule)
    writer.write_granules(data[: offsets[len(granule_rows)]], offsets[: len(granule_rows) + 1])
    final = writer.finish()
    body = writer.getvalue()
    bin_name = stream + ".bin"
    files.files[bin_name] = body
    files.boundaries[bin_name] = np.unique(writer.marks[:, 0]).astype(np.int64)
    checksums[bin_name] = FileChecksum(len(body), file_hash(body), True, writer.uncompressed_size,
                                       writer.uncompressed_hash)
    marks = wide_marks_with_rows(writer.marks, granule_rows, final)
    files.files[stream + ".mrk2"] = write_wide_marks(marks)


def write_wide_part(
    table: pa.Table,
    columns: Sequence[tuple[str, str]],
    primary_key: Sequence[tuple[str, pa.Array | pa.ChunkedArray]],
    partition: PartitionValue | None,
    settings: WriterSettings = WriterSettings(),
    granule_rows: np.ndarray | None = None,
) -> PartFiles:
    """Serialize sorted rows into a Wide part.

    `columns` are (name, ClickHouse type) in table order; `table` must hold them (by name).
    `primary_key` gives each PRIMARY KEY element's (ClickHouse type, values over these rows).
    `granule_rows` overrides granule planning (merges plan per block of rows).
    """
    missing = [name for name, _ in columns if name not in table.column_names]
    if missing:
        raise SchemaMismatchError(f"rows to write lack column(s) {', '.join(missing)}")
    types = [parse_type(type_text) for _, type_text in columns]
    table = table.select([name for name, _ in columns])
    n = table.num_rows
    if granule_rows is None:
        granule_rows = plan_granules(table, types, settings)
    files = PartFiles(rows=n)
    checksums: dict[str, FileChecksum] = {}

    def serialize(item: tuple[tuple[str, str], DataType, pa.ChunkedArray]) -> dict[str, StreamBytes]:
        (name, _), dt, column = item
        return serialize_column(dt, name, column, granule_rows, string_sizes=settings.string_sizes)

    def compress(stream: str, stream_bytes: StreamBytes, codec: Codec | CodecChain) -> PartFiles:
        out = PartFiles()
        _write_stream(out, checksums, stream, memoryview(stream_bytes.data), stream_bytes.granule_offsets,
                      granule_rows, settings, codec)
        return out

    # Columns are independent: serialize and compress them on all cores (LZ4, ZSTD and the hash
    # chain release the GIL); small parts stay on this thread.
    items = list(zip(columns, types, table.columns))
    parallel = n >= PARALLEL_MIN_ROWS and len(items) > 1
    with ThreadPoolExecutor(max_workers=WRITER_THREADS if parallel else 1) as pool:
        all_streams = list(pool.map(serialize, items)) if parallel else [serialize(i) for i in items]
        jobs: list[tuple[str, StreamBytes, Codec | CodecChain]] = []
        for ((name, _), dt, _), streams in zip(items, all_streams, strict=True):
            codecs = settings.stream_codecs(name, dt)
            for stream, stream_bytes in streams.items():
                # Columns of one Nested table share their sizes stream (n.size0): write it once.
                if all(stream != s for s, _, _ in jobs):
                    jobs.append((stream, stream_bytes, codecs[stream]))
        results = list(pool.map(lambda job: compress(*job), jobs)) if parallel else [compress(*j) for j in jobs]
    for result in results:
        files.files.update(result.files)
        files.boundaries.update(result.boundaries)

    return _finish_part(files, checksums, n, columns, primary_key, partition, settings, granule_rows, table.column)


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
    column's streams are compressed in parallel, then its values are dropped. The bytes are those
    `write_wide_part` writes for the same rows and granules."""
    files = PartFiles(rows=num_rows)
    checksums: dict[str, FileChecksum] = {}
    written: set[str] = set()
    # The columns skip indexes are built from stay until the part's indexes are written.
    indexed = {column for spec in settings.skip_indexes for column in spec.columns}
    kept: dict[str, pa.Array | pa.ChunkedArray] = {}
    with ThreadPoolExecutor(max_workers=WRITER_THREADS) as pool:
        for name, type_text in columns:
            dt = parse_type(type_text)
            values = column_of(name)
            if len(values) != num_rows:
                raise SchemaMismatchError(f"column {name!r} has {len(values)} rows, the part {num_rows}")
            if name in indexed:
                kept[name] = values
            streams = serialize_column(dt, name, values, granule_rows, string_sizes=settings.string_sizes)
            del values
            codecs = settings.stream_codecs(name, dt)
            jobs = [(stream, data) for stream, data in streams.items() if stream not in written]
            written.update(stream for stream, _ in jobs)

            def compress(job: tuple[str, StreamBytes], codecs: dict[str, Codec | CodecChain] = codecs) -> PartFiles:
                out = PartFiles()
                stream, data = job
                _write_stream(out, checksums, stream, memoryview(data.data), data.granule_offsets, granule_rows,
                              settings, codecs[stream])
                return out

            for result in pool.map(compress, jobs):
                files.files.update(result.files)
                files.boundaries.update(result.boundaries)
            del streams, jobs
    return _finish_part(files, checksums, num_rows, columns, primary_key, partition, settings, granule_rows,
                        lambda name: kept[name] if name in kept else column_of(name))


def _finish_part(files: PartFiles, checksums: dict[str, FileChecksum], n: int, columns: Sequence[tuple[str, str]],
                 primary_key: Sequence[tuple[str, pa.Array | pa.ChunkedArray]], partition: PartitionValue | None,
                 settings: WriterSettings, granule_rows: np.ndarray,
                 column_of: Callable[[str], pa.Array | pa.ChunkedArray]) -> PartFiles:
    """The part's index, partition, metadata files and checksums.txt, after its column streams."""
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

    write_skip_indexes(settings.skip_indexes, dict(columns), granule_rows, column_of, settings.codec,
                       settings.min_compress_block_size, settings.max_compress_block_size, files.files, checksums)

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

"""Reads granule ranges of one part — Wide or Compact, as ClickHouse or we wrote it — into Arrow.

A `PartReader` opens a part through a file source (storage's `PartStore`: `read_file`,
`read_range`, `list_files`, `file_size`), checks that the part is whole (every file checksums.txt
names is there with its size; marks add up to `count.txt`), and then serves column reads. Every
compressed block is verified against its checksum as it is decompressed.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import cached_property
from typing import Protocol

import numpy as np
import pyarrow as pa

from spark_mergetree.errors import CorruptPartError, FormatError
from spark_mergetree.format.checksums import Checksums
from spark_mergetree.format.compression import decompress_all, decompress_range
from spark_mergetree.format.marks import (
    COMPACT_EXTENSIONS,
    WIDE_EXTENSIONS,
    CompactMarks,
    parse_columns_substreams,
    read_compact_marks,
    read_wide_marks,
)
from spark_mergetree.format.part import (
    CHECKSUMS_FILE,
    COLUMNS_FILE,
    COMPACT_DATA_FILE,
    COUNT_FILE,
    SERIALIZATION_FILE,
    SerializationInfo,
    parse_columns,
    parse_count,
)
from spark_mergetree.format.part_writer import PARTITION_FILE
from spark_mergetree.format.serialization import (
    default_column,
    deserialize_column,
    deserialize_rows,
    escape_for_file_name,
    stream_names,
)
from spark_mergetree.format.types import DataType, parse_type, to_arrow

GranuleRange = tuple[int, int]


class FileSource(Protocol):
    """What a reader needs from storage (storage.PartStore provides it)."""

    def list_files(self, part: str) -> list[str]: ...
    def read_file(self, part: str, name: str) -> bytes: ...
    def read_range(self, part: str, name: str, start: int, end: int, verify: bool = True) -> bytes | memoryview: ...
    def file_size(self, part: str, name: str) -> int: ...


def merge_ranges(ranges: Iterable[GranuleRange]) -> list[GranuleRange]:
    """Sorted, non-overlapping, non-adjacent granule ranges."""
    merged: list[list[int]] = []
    for begin, end in sorted(ranges):
        if begin >= end:
            continue
        if merged and begin <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([begin, end])
    return [(b, e) for b, e in merged]


class PartReader:
    """One part, opened for reading. Cheap to create; metadata is loaded once and cached."""

    def __init__(self, source: FileSource, part: str, location: str = "") -> None:
        self.source = source
        self.part = part
        self.location = location or part
        self._lock = threading.Lock()
        self._marks_cache: dict[str, np.ndarray] = {}
        self.files = set(source.list_files(part))
        self._require(COLUMNS_FILE)
        self._require(COUNT_FILE)
        self.columns: list[tuple[str, str]] = parse_columns(self._read(COLUMNS_FILE), self._path(COLUMNS_FILE))
        self.rows = parse_count(self._read(COUNT_FILE), self._path(COUNT_FILE))
        self.types: dict[str, DataType] = {name: parse_type(text) for name, text in self.columns}
        self.serialization = SerializationInfo.parse(
            self._read(SERIALIZATION_FILE) if SERIALIZATION_FILE in self.files else None,
            self._path(SERIALIZATION_FILE))
        self.is_compact = COMPACT_DATA_FILE in self.files
        self._check_files_present()
        self.granule_rows = self._granule_rows()
        total = int(self.granule_rows.sum())
        if total != self.rows:
            raise CorruptPartError(
                f"{self._path(COUNT_FILE)}: says {self.rows} rows but the marks hold {total} rows")

    # ------------------------------------------------------------------ files

    def _path(self, name: str) -> str:
        return f"{self.location}/{name}"

    def _require(self, name: str) -> None:
        if name not in self.files:
            raise CorruptPartError(f"{self._path(name)}: file is missing")

    def _read(self, name: str) -> bytes:
        self._require(name)
        return self.source.read_file(self.part, name)

    @cached_property
    def checksums(self) -> Checksums | None:
        if CHECKSUMS_FILE not in self.files:
            return None
        return Checksums.parse(self._read(CHECKSUMS_FILE), self._path(CHECKSUMS_FILE))

    def _check_files_present(self) -> None:
        """Files checksums.txt names must exist with the size it records (as ClickHouse checks on attach)."""
        if self.checksums is None:
            return
        for name, entry in self.checksums.files.items():
            if name not in self.files:
                raise CorruptPartError(f"{self._path(name)}: file listed in checksums.txt is missing")
            size = self.source.file_size(self.part, name)
            if size != entry.file_size:
                raise CorruptPartError(
                    f"{self._path(name)}: {size} bytes, checksums.txt says {entry.file_size}")

    # ------------------------------------------------------------------ marks

    def _marks_file(self, stream: str, extensions: dict[str, tuple[bool, bool]]) -> tuple[str, bool, bool]:
        for extension, (adaptive, compressed) in extensions.items():
            if stream + extension in self.files:
                return stream + extension, adaptive, compressed
        raise CorruptPartError(
            f"{self._path(stream)}: no marks file ({', '.join(stream + e for e in extensions)})")

    def wide_marks(self, stream: str) -> np.ndarray:
        """(n_marks, 3) uint64 marks of a Wide stream (rows column 0 for non-adaptive marks)."""
        with self._lock:
            cached = self._marks_cache.get(stream)
        if cached is not None:
            return cached
        name, adaptive, compressed = self._marks_file(stream, WIDE_EXTENSIONS)
        marks = read_wide_marks(self._read(name), self._path(name), compressed=compressed, adaptive=adaptive)
        if not adaptive:
            marks = np.concatenate([marks, np.zeros((len(marks), 1), np.uint64)], axis=1)
        with self._lock:
            self._marks_cache[stream] = marks
        return marks

    @cached_property
    def compact_layout(self) -> tuple[CompactMarks, list[str]]:
        """Compact marks and the stream name of each marks column, in file order."""
        if "columns_substreams.txt" in self.files:
            listing = parse_columns_substreams(self._read("columns_substreams.txt").decode(),
                                               self._path("columns_substreams.txt"))
            streams = [s for _column, subs in listing for s in subs]
        else:
            streams = [escape_for_file_name(name) for name, _ in self.columns]
        name, _, compressed = self._marks_file("data", COMPACT_EXTENSIONS)
        return read_compact_marks(self._read(name), len(streams), self._path(name), compressed=compressed), streams

    def _granule_rows(self) -> np.ndarray:
        if not self.columns:
            return np.zeros(0, np.int64)
        if self.is_compact:
            marks, _ = self.compact_layout
            rows = marks.rows.astype(np.int64)
        else:
            column = self.columns[0][0]
            first = stream_names(self.types[column], column, self.serialization.string_sizes,
                                 self.serialization.sparse_spec(column))[0]
            marks = self.wide_marks(first)
            rows = marks[:, 2].astype(np.int64)
            if not rows.any() and self.rows:
                raise FormatError(f"{self._path(first)}: non-adaptive marks are not supported; "
                                  "write the table with index_granularity_bytes > 0")
        # A final mark with 0 rows ends adaptive marks files.
        if len(rows) and rows[-1] == 0:
            rows = rows[:-1]
        return rows

    @property
    def n_granules(self) -> int:
        return len(self.granule_rows)

    @cached_property
    def granule_starts(self) -> np.ndarray:
        starts = np.zeros(self.n_granules + 1, np.int64)
        np.cumsum(self.granule_rows, out=starts[1:])
        return starts

    # ------------------------------------------------------------------ indexes

    def primary_index(self, key_types: Sequence[str]) -> list[pa.Array]:
        """The sparse index: per key column, the key of each granule's first row (+ the last row's)."""
        if "primary.idx" in self.files:
            data = self._read("primary.idx")
        elif "primary.cidx" in self.files:
            data = decompress_all(self._read("primary.cidx"), self._path("primary.cidx"))
        else:
            raise CorruptPartError(f"{self._path('primary.idx')}: file is missing")
        types = [parse_type(t) for t in key_types]
        for rows in (self.n_granules + 1, self.n_granules):
            try:
                return deserialize_rows(types, data, rows)
            except CorruptPartError:
                continue
        raise CorruptPartError(f"{self._path('primary.idx')}: does not hold {self.n_granules} keys "
                               f"of types {', '.join(key_types)}")

    def partition_values(self, result_types: Sequence[str]) -> list[object]:
        if not result_types:
            return []
        arrays = deserialize_rows([parse_type(t) for t in result_types], self._read(PARTITION_FILE), 1)
        return [array[0].as_py() for array in arrays]

    def minmax(self, column: str) -> tuple[object, object]:
        name = f"minmax_{escape_for_file_name(column)}.idx"
        (array,) = deserialize_rows([self.types[column]], self._read(name), 2)
        return array[0].as_py(), array[1].as_py()

    # ------------------------------------------------------------------ data

    def _read_verified_blocks(self, file: str, start: int, stop: int, decode: Callable[[bytes], bytes]) -> bytes:
        """Read compressed bytes [start, stop) and decode them. Storage skips its own unit checksums
        (every block carries one); if a block is damaged, the bytes are read again with storage
        verifying each unit, which repairs them from a mirror or parity where the layout can."""
        try:
            return decode(self.source.read_range(self.part, file, start, stop, verify=False))
        except CorruptPartError:
            return decode(self.source.read_range(self.part, file, start, stop, verify=True))

    def _wide_stream(self, stream: str, begin: int, end: int, to_file_end: bool) -> bytes:
        marks = self.wide_marks(stream)
        file = stream + ".bin"
        self._require(file)
        size = self.source.file_size(self.part, file)
        start_block, start_inner = int(marks[begin, 0]), int(marks[begin, 1])
        path = self._path(file)
        if to_file_end or end >= self.n_granules:
            return self._read_verified_blocks(
                file, start_block, size, lambda buf: decompress_range(buf, path, (0, start_inner), None))
        end_block, end_inner = int(marks[end, 0]), int(marks[end, 1])
        stop = end_block
        if end_inner:
            later = marks[end:, 0]
            later = later[later > end_block]
            stop = int(later[0]) if len(later) else size
        return self._read_verified_blocks(
            file, start_block, stop,
            lambda buf: decompress_range(buf, path, (0, start_inner), (end_block - start_block, end_inner)))

    def _compact_streams(self, wanted: Sequence[str], begin: int, end: int) -> dict[str, bytes]:
        marks, streams = self.compact_layout
        data = self._read(COMPACT_DATA_FILE)
        path = self._path(COMPACT_DATA_FILE)
        flat = marks.offsets.reshape(-1, 2)
        n_streams = len(streams)
        out: dict[str, bytes] = {}
        for stream in wanted:
            if stream not in streams:
                raise CorruptPartError(f"{path}: no substream {stream!r} in the part's marks")
            s = streams.index(stream)
            pieces = []
            for g in range(begin, end):
                at = g * n_streams + s
                start = (int(flat[at, 0]), int(flat[at, 1]))
                stop = (int(flat[at + 1, 0]), int(flat[at + 1, 1])) if at + 1 < len(flat) else None
                pieces.append(decompress_range(data, path, start, stop))
            out[stream] = b"".join(pieces)
        return out

    def read_column(self, name: str, ranges: Sequence[GranuleRange]) -> pa.Array:
        """A column's values over granule ranges (as from merge_ranges), concatenated."""
        if name not in self.types:
            raise CorruptPartError(f"{self.location}: part has no column {name!r}")
        dt = self.types[name]
        sparse = self.serialization.sparse_spec(name)
        names = stream_names(dt, name, self.serialization.string_sizes, sparse)
        chunks = []
        for begin, end in ranges:
            rows = int(self.granule_starts[end] - self.granule_starts[begin])
            if self.is_compact:
                streams = self._compact_streams(names, begin, end)
            else:
                streams = {s: self._wide_stream(s, begin, end, s.endswith(".dict")) for s in names}
            chunks.append(deserialize_column(dt, name, streams, rows, self.serialization.string_sizes, sparse,
                                             exact=True))
        if not chunks:
            return pa.array([], type=to_arrow(dt))
        return chunks[0] if len(chunks) == 1 else pa.concat_arrays(chunks)

    def read(self, columns: Sequence[str] | None = None, ranges: Sequence[GranuleRange] | None = None,
             added_columns: Mapping[str, str] | None = None) -> pa.Table:
        """Columns over granule ranges (all granules by default) as an Arrow table.

        `added_columns` (name → type) are columns the table gained after this part was written:
        the part holds their default values, as ClickHouse reads them.
        """
        names = list(columns) if columns is not None else [n for n, _ in self.columns]
        ranges = merge_ranges(ranges) if ranges is not None else [(0, self.n_granules)]
        added = added_columns or {}
        rows = sum(int(self.granule_starts[e] - self.granule_starts[b]) for b, e in ranges)
        arrays = [default_column(parse_type(added[n]), rows) if n not in self.types and n in added
                  else self.read_column(n, ranges) for n in names]
        fields = [pa.field(n, a.type) for n, a in zip(names, arrays)]
        return pa.Table.from_arrays(arrays, schema=pa.schema(fields))

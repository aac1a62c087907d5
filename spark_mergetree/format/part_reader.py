"""Reads granule ranges of one part — Wide or Compact, as ClickHouse or we wrote it — into Arrow.

A `PartReader` opens a part through a file source (storage's `PartStore`: `read_file`,
`read_range`, `list_files`, `file_size`), checks that the part is whole (every file checksums.txt
names is there with its size; marks add up to `count.txt`) and that it holds nothing this version
cannot interpret, and then serves column reads. Every compressed block is verified against its
checksum as it is decompressed; every other file a read interprets (count, partition values,
min/max and primary indexes, serialization info, marks) is verified against `checksums.txt` when
it is loaded: the part-wide ones when the reader opens the part, marks when a column's are first
needed. `columns.txt` and `columns_substreams.txt` are not listed there (ClickHouse never lists
them); they are checked against the files and marks instead.

A packed part (one `data.packed` archive, format/packed.py) is read through the files inside it.

Rows a lightweight DELETE removed stay in the part, marked 0 in its `_row_exists` column: reads
drop them, as ClickHouse does. Projections (`<name>.proj/`) are read past: the part's own columns
are the table. A patch part of a lightweight UPDATE is read only when opened as one (`patch=True`:
engine/patches.py applies its rows to other parts'). What could change which rows a part holds and
is not understood here (parts of ClickHouse transactions, unknown files) raises UnsupportedError
naming the feature, the part and the file. See format_spec/part.md.
"""

from __future__ import annotations

import os
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from functools import cached_property
from typing import Protocol, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from spark_mergetree.errors import (
    CorruptPartError,
    FormatError,
    SchemaMismatchError,
    UnsupportedError,
)
from spark_mergetree.fileops import escape_for_file_name
from spark_mergetree.format.checksums import PROJECTION_SUFFIX, Checksums
from spark_mergetree.format.cityhash import file_hash
from spark_mergetree.format.compression import (
    CHECKSUM_SIZE,
    decompress_all,
    decompress_range,
    decompress_ranges,
    iter_blocks,
)
from spark_mergetree.format.compression_codecs import BLOCK_HEADER, HEADER_SIZE
from spark_mergetree.format.dynamic import (
    DynamicStructure,
    binary_values,
    binary_values_text,
    dynamic_text,
    dynamic_values,
    expand_nested,
    from_stored,
    has_dynamic,
    nested_structures,
    nested_text,
    parse_structure,
    stored_type,
)
from spark_mergetree.format.json_text import (
    OBJECT_STRUCTURE,
    STORED_JSON_TYPE,
    ObjectStructure,
    object_text,
    parse_object_structure,
    path_base,
    shared_data_sizes,
    stored_json_arrow,
    stored_map,
    value_text,
    values_by_path,
)
from spark_mergetree.format.marks import (
    COMPACT_EXTENSIONS,
    WIDE_EXTENSIONS,
    CompactMarks,
    check_mark_offsets,
    mark_label,
    parse_columns_substreams,
    read_compact_marks,
    read_wide_marks,
)
from spark_mergetree.format.packed import PackedSource, is_packed
from spark_mergetree.format.part import (
    CHECKSUMS_FILE,
    CODEC_FILE,
    COLUMNS_FILE,
    COMPACT_DATA_FILE,
    COUNT_FILE,
    METADATA_VERSION_FILE,
    SERIALIZATION_FILE,
    SerializationInfo,
    parse_columns,
    parse_count,
)
from spark_mergetree.format.part_writer import PARTITION_FILE
from spark_mergetree.format.patch_part import PATCH_PART_PREFIX, SOURCE_PARTS_FILE, SourceParts
from spark_mergetree.format.row_binary import deserialize_rows
from spark_mergetree.format.serialization import default_column, deserialize_column
from spark_mergetree.format.skip_index import SkipIndexData, index_stream
from spark_mergetree.format.streams import DISCRIMINATORS, PREFIX, STRUCTURE, file_stem, stream_names
from spark_mergetree.format.types import (
    DataType,
    Dynamic,
    Json,
    contains_type,
    parse_column_type,
    parse_type,
    to_arrow,
)
from spark_mergetree.format.values import Cursor, read_classic

GranuleRange = tuple[int, int]

# The lightweight-delete mask: a UInt8 column ClickHouse adds to a part, 0 for deleted rows.
ROW_EXISTS_COLUMN = "_row_exists"
# Columns ClickHouse stores in parts that are not table columns (the mask, and the row ids tables
# with enable_block_number_column / enable_block_offset_column keep).
HIDDEN_COLUMNS = frozenset({ROW_EXISTS_COLUMN, "_block_number", "_block_offset"})
SUBSTREAMS_FILE = "columns_substreams.txt"
# Files that describe a part, index it or hold statistics: none of them changes which rows it holds.
_KNOWN_FILES = frozenset({
    CHECKSUMS_FILE, COLUMNS_FILE, COUNT_FILE, SERIALIZATION_FILE, CODEC_FILE, METADATA_VERSION_FILE,
    SUBSTREAMS_FILE, PARTITION_FILE, "primary.idx", "primary.cidx", "uuid.txt", "ttl.txt",
    "delete-on-destroy.txt",
})
# Files whose compressed blocks are verified whenever they are read: no whole-file hash needed.
_BLOCK_CHECKED_SUFFIXES = (".bin", ".cmrk", ".cmrk2", ".cmrk3", ".cmrk4")
_KNOWN_PREFIXES = ("minmax_", "skp_idx", "statistics")
MINMAX_PREFIX = "minmax_"
# Part-wide files a read interprets: loaded and verified against checksums.txt when the part is opened.
_PART_METADATA = (COUNT_FILE, SERIALIZATION_FILE, PARTITION_FILE, "primary.idx", "primary.cidx")
_HASHED_STEM = re.compile(r"[0-9a-f]{32}")


@contextmanager
def _naming(where: str, what: str) -> Iterator[None]:
    """Name the column and the JSON path in a refusal raised while reading the path's values."""
    try:
        yield
    except UnsupportedError as exc:
        text = str(exc)
        if text.startswith(where):
            text = text[len(where):].lstrip(":, ")
        raise UnsupportedError(f"{where}, {what}: {text}") from exc
_STREAM_SUFFIXES = (".bin", *WIDE_EXTENSIONS, *COMPACT_EXTENSIONS)
# Files that change which rows a part holds in ways this version does not apply.
_ROW_CHANGING_FILES = {
    "txn_version.txt": "a part created or removed inside a ClickHouse transaction (its visibility is "
                       "decided by ClickHouse's transaction log)",
    SOURCE_PARTS_FILE: "a patch part of a lightweight UPDATE (its rows replace values of other parts' "
                       "rows when ClickHouse reads them; only a table's read applies them)",
}


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


def _unpacked(source: FileSource, part: str, location: str, files: list[str] | None = None) -> FileSource:
    """The source itself, or for a packed part (one `data.packed` archive) the files inside it.
    `files`: the part's listing, when the caller has it already."""
    if is_packed(source.list_files(part) if files is None else files):
        return PackedSource(source, location)
    return source


def verify_part(source: FileSource, part: str, location: str = "") -> list[str]:
    """Like CHECK TABLE for one part: every file checksums.txt lists, projections included, is
    re-hashed; returns every problem found (none when the part is intact). Needs no reader, so a
    part too damaged to open still gets all its problems listed."""
    where = location or part
    source = _unpacked(source, part, where)
    if CHECKSUMS_FILE not in source.list_files(part):
        return [f"{where}/{CHECKSUMS_FILE}: file is missing"]
    try:
        checksums = Checksums.parse(source.read_file(part, CHECKSUMS_FILE), f"{where}/{CHECKSUMS_FILE}")
    except (CorruptPartError, FormatError, UnsupportedError) as exc:
        return [str(exc)]
    return checksums.problems(lambda name: source.read_file(part, name), lambda name: source.file_size(part, name),
                              where)


class _IndexCache:
    """Parsed primary indexes of this process, least recently used first out, bounded by keys."""

    def __init__(self, max_keys: int) -> None:
        self.max_keys = max_keys
        self._entries: OrderedDict[tuple[object, ...], tuple[list[pa.Array], int]] = OrderedDict()
        self._keys = 0
        self._lock = threading.Lock()

    def get(self, key: tuple[object, ...]) -> list[pa.Array] | None:
        with self._lock:
            found = self._entries.get(key)
            if found is None:
                return None
            self._entries.move_to_end(key)
            return found[0]

    def put(self, key: tuple[object, ...], index: list[pa.Array], keys: int) -> None:
        with self._lock:
            if key in self._entries:
                return
            self._entries[key] = (index, keys)
            self._keys += keys
            while self._keys > self.max_keys and len(self._entries) > 1:
                _, (_, dropped) = self._entries.popitem(last=False)
                self._keys -= dropped


# Primary index keys kept parsed in a process (about 16 bytes each for a numeric key).
_PRIMARY_INDEXES = _IndexCache(max_keys=16 << 20)

# Threads reading the columns of one read at once, for sources whose every range is a request with
# latency (object storage: `parallel_reads` on the source). One pool per process (fork-safe).
_COLUMN_POOLS: dict[int, ThreadPoolExecutor] = {}
_COLUMN_POOLS_LOCK = threading.Lock()


def _column_pool() -> ThreadPoolExecutor:
    with _COLUMN_POOLS_LOCK:
        pool = _COLUMN_POOLS.get(os.getpid())
        if pool is None:
            pool = _COLUMN_POOLS[os.getpid()] = ThreadPoolExecutor(16, thread_name_prefix="mergetree-columns")
        return pool


# Ranges of one file a read needs, closer than this, are fetched by one ranged read (for sources
# with `parallel_reads`, where every read is a request with latency): a request costs about what
# reading this many more bytes does. No coalesced read grows beyond COALESCE_MAX_BYTES.
COALESCE_HOLE_BYTES = 1 << 20
COALESCE_MAX_BYTES = 64 << 20


def coalesce_spans(spans: Sequence[tuple[int, int]], hole: int = COALESCE_HOLE_BYTES,
                   most: int = COALESCE_MAX_BYTES) -> list[tuple[int, int]]:
    """Byte ranges [start, stop) merged where they overlap or lie less than `hole` bytes apart (a
    merged range stays within `most` bytes unless ranges that overlap make it longer). Empty ranges
    need no bytes and are left out."""
    merged: list[tuple[int, int]] = []
    for start, stop in sorted(span for span in spans if span[1] > span[0]):
        if merged and (start < merged[-1][1] or (start - merged[-1][1] <= hole
                                                  and max(stop, merged[-1][1]) - merged[-1][0] <= most)):
            merged[-1] = (merged[-1][0], max(stop, merged[-1][1]))
        else:
            merged.append((start, stop))
    return merged


class SubpartSource:
    """The files of a projection (`<name>.proj/`) of a part, as a source of their own."""

    def __init__(self, source: FileSource, projection: str) -> None:
        self.source = source
        self.prefix = projection + PROJECTION_SUFFIX + "/"

    def list_files(self, part: str) -> list[str]:
        return [n[len(self.prefix):] for n in self.source.list_files(part) if n.startswith(self.prefix)]

    def read_file(self, part: str, name: str) -> bytes:
        return self.source.read_file(part, self.prefix + name)

    def read_range(self, part: str, name: str, start: int, end: int, verify: bool = True) -> bytes | memoryview:
        return self.source.read_range(part, self.prefix + name, start, end, verify)

    def file_size(self, part: str, name: str) -> int:
        return self.source.file_size(part, self.prefix + name)


class PartReader:
    """One part, opened for reading. Cheap to create; metadata is loaded once and cached."""

    def __init__(self, source: FileSource, part: str, location: str = "", index_granularity: int | None = None, *,
                 patch: bool = False) -> None:
        """`patch`: the part is a patch part (engine/patches.py reads its rows as updates of others)."""
        self.part = part
        self.is_patch = patch
        self.location = location or part
        # Rows per granule of a part with non-adaptive marks (`.mrk`, no row counts): the table's
        # `index_granularity`, which such a part does not record. Without it, such a part is refused.
        self.index_granularity = index_granularity
        listed = source.list_files(part)
        self.source = _unpacked(source, part, self.location, listed)
        self._lock = threading.Lock()
        self._marks_cache: dict[str, np.ndarray] = {}
        self._primary: dict[tuple[str, ...], list[pa.Array]] = {}
        self._decoded: dict[tuple[str, ...], object] = {}  # partition values and minmax ranges
        self._prefetched = threading.local()  # per reading thread: coalesced reads (`_prefetch`)
        self._checked_types: set[tuple[str, str]] = set()
        # The part's own files; a projection's (`<name>.proj/<file>`) are checked by verify().
        self.files = {name for name in (listed if self.source is source else self.source.list_files(part))
                      if "/" not in name}
        self._refuse_row_changing_features()
        self._metadata: dict[str, bytes] = {}
        for name in sorted(self.files):
            if name in _PART_METADATA or (name.startswith(MINMAX_PREFIX) and name.endswith(".idx")):
                self._metadata[name] = self._read(name)
        self._require(COLUMNS_FILE)
        self._require(COUNT_FILE)
        self.columns: list[tuple[str, str]] = parse_columns(self._read(COLUMNS_FILE), self._path(COLUMNS_FILE))
        self.rows = parse_count(self._read(COUNT_FILE), self._path(COUNT_FILE))
        self.types: dict[str, DataType] = {name: self._parse_column_type(name, text) for name, text in self.columns}
        self.serialization = SerializationInfo.parse(
            self._read(SERIALIZATION_FILE) if SERIALIZATION_FILE in self.files else None,
            self._path(SERIALIZATION_FILE))
        self.is_compact = COMPACT_DATA_FILE in self.files
        self._check_row_mask_type()
        self._check_files_present()
        self._check_files_known()
        self.granule_rows = self._granule_rows()
        total = int(self.granule_rows.sum())
        if total != self.rows:
            raise CorruptPartError(
                f"{self._path(COUNT_FILE)}: says {self.rows} rows but the marks hold {total} rows")

    def _parse_column_type(self, name: str, text: str) -> DataType:
        return parse_column_type(name, text, f"{self._path(COLUMNS_FILE)}: ")

    # ------------------------------------------------------------------ files

    def _path(self, name: str) -> str:
        return f"{self.location}/{name}"

    def _require(self, name: str) -> None:
        if name not in self.files:
            raise CorruptPartError(f"{self._path(name)}: file is missing")

    def _read(self, name: str) -> bytes:
        """A whole file of the part. Files other than column data and compressed marks (`.bin`,
        `.cmrk*`: every block carries its own checksum, verified as it is decompressed, and the size
        was checked against checksums.txt on opening) are checked against their checksums.txt entry,
        if they have one. (primary.cidx is hashed too: its parsed index is cached by part identity,
        so a damaged copy might otherwise never be decompressed.)"""
        cached = self._metadata.get(name)
        if cached is not None:
            return cached
        self._require(name)
        data = self.source.read_file(self.part, name)
        if not name.endswith(_BLOCK_CHECKED_SUFFIXES):
            self._check_against_checksums(name, data)
        return data

    def _check_against_checksums(self, name: str, data: bytes) -> None:
        entry = self.checksums.files.get(name) if self.checksums is not None else None
        if entry is None:
            return
        actual = file_hash(data) if len(data) == entry.file_size else None
        if actual != entry.file_hash:
            shown = "" if actual is None else f" hash {actual.hex()}"
            raise CorruptPartError(f"{self._path(name)}: {len(data)} bytes{shown} do not match {CHECKSUMS_FILE} "
                                   f"({entry.file_size} bytes, hash {entry.file_hash.hex()})")

    @cached_property
    def checksums(self) -> Checksums | None:
        if CHECKSUMS_FILE not in self.files:
            return None
        return Checksums.parse(self.source.read_file(self.part, CHECKSUMS_FILE), self._path(CHECKSUMS_FILE))

    def _refuse_row_changing_features(self) -> None:
        """Parts whose rows ClickHouse changes in ways this version does not apply are refused."""
        if self.is_patch:
            if not self.part.startswith(PATCH_PART_PREFIX) or SOURCE_PARTS_FILE not in self.files:
                raise UnsupportedError(f"{self._path(SOURCE_PARTS_FILE)}: not a patch part (its name must start "
                                       f"with {PATCH_PART_PREFIX!r} and it must hold {SOURCE_PARTS_FILE})")
        for name, feature in _ROW_CHANGING_FILES.items():
            if name in self.files and not (self.is_patch and name == SOURCE_PARTS_FILE):
                raise UnsupportedError(f"{self._path(name)}: {feature}; this version cannot read such a part")
        if self.part.startswith(PATCH_PART_PREFIX) and not self.is_patch:
            raise UnsupportedError(f"{self._path(COLUMNS_FILE)}: {_ROW_CHANGING_FILES[SOURCE_PARTS_FILE]}; "
                                   "it is not a part of the table's rows")

    def _check_row_mask_type(self) -> None:
        mask_type = self.types.get(ROW_EXISTS_COLUMN)
        if mask_type is not None and mask_type.to_clickhouse() != "UInt8":
            raise UnsupportedError(f"{self._path(COLUMNS_FILE)}: lightweight-delete mask {ROW_EXISTS_COLUMN!r} "
                                   f"has type {mask_type.to_clickhouse()}, not UInt8; this version cannot apply it")

    def _check_files_known(self) -> None:
        """Every file must be a stream of a column in columns.txt or a file whose meaning is known:
        an unknown file may change which rows the part holds, so it is never read around."""
        stems = {escape_for_file_name(name) for name, _ in self.columns} | ({"data"} if self.is_compact else set())
        prefixes = tuple(stem + sep for stem in stems for sep in (".", "%2E"))
        # A dotted Array column belongs to a Nested table whose sizes stream is named after the table.
        prefixes += tuple(escape_for_file_name(name.split(".", 1)[0]) + ".size" for name, _ in self.columns if "." in name)
        hashed: set[str] | bool | None = None
        for name in self.files:
            if name in _KNOWN_FILES or name.startswith(_KNOWN_PREFIXES):
                continue
            if self.is_patch and name == SOURCE_PARTS_FILE:
                continue
            stem = next((name[: -len(s)] for s in _STREAM_SUFFIXES if name.endswith(s)), None)
            if stem is not None and (stem in stems or stem.startswith(prefixes)):
                continue
            if stem is not None and _HASHED_STEM.fullmatch(stem):
                if hashed is None:
                    hashed = self._hashed_stems()
                if hashed is True or (isinstance(hashed, set) and stem in hashed):
                    continue
            raise UnsupportedError(
                f"{self._path(name)}: file is neither a stream of a column in {COLUMNS_FILE} nor one this version "
                "knows; it may change which rows the part holds, so the part is not read (a newer ClickHouse "
                f"feature, or a damaged {COLUMNS_FILE})")

    def _hashed_stems(self) -> set[str] | bool:
        """The files of streams whose names are too long to be file names (`file_stem`): the hashes
        of the streams columns_substreams.txt lists; without it, True (any such hash) when a column
        holds Dynamic or JSON values (whose stream names follow from the values' types and paths)."""
        if SUBSTREAMS_FILE in self.files:
            listing = parse_columns_substreams(self._read_text(SUBSTREAMS_FILE), self._path(SUBSTREAMS_FILE))
            return {file_stem(stream) for _column, subs in listing for stream in subs}
        return any(contains_type(dt, Dynamic) or contains_type(dt, Json) for dt in self.types.values())

    @cached_property
    def projections(self) -> list[str]:
        """Names of the projections the part holds (`<name>.proj/` directories listed in checksums.txt)."""
        if self.checksums is None:
            return []
        return sorted(name[: -len(PROJECTION_SUFFIX)] for name in self.checksums.files if name.endswith(PROJECTION_SUFFIX))

    def projection_reader(self, name: str) -> PartReader:
        """A reader of the part's projection `name` (a part of its own in `<name>.proj/`)."""
        return PartReader(SubpartSource(self.source, name), self.part, f"{self.location}/{name}{PROJECTION_SUFFIX}",
                          self.index_granularity)

    def _check_files_present(self) -> None:
        """Files checksums.txt names must exist with the size it records (as ClickHouse checks on attach).
        Projection directories (`<name>.proj`) are read past: `verify()` checks them."""
        if self.checksums is None:
            return
        for name, entry in self.checksums.files.items():
            if name.endswith(PROJECTION_SUFFIX):
                continue
            if name not in self.files:
                raise CorruptPartError(f"{self._path(name)}: file listed in checksums.txt is missing")
            size = self.source.file_size(self.part, name)
            if size != entry.file_size:
                raise CorruptPartError(
                    f"{self._path(name)}: {size} bytes, checksums.txt says {entry.file_size}")

    def verify(self) -> list[str]:
        """Like CHECK TABLE for this part (see `verify_part`)."""
        return verify_part(self.source, self.part, self.location)

    # ------------------------------------------------------------------ marks

    def _marks_file(self, stream: str, extensions: dict[str, tuple[bool, bool]]) -> tuple[str, bool, bool]:
        for extension, (adaptive, compressed) in extensions.items():
            if file_stem(stream) + extension in self.files:
                return file_stem(stream) + extension, adaptive, compressed
        raise CorruptPartError(
            f"{self._path(stream)}: no marks file ({', '.join(stream + e for e in extensions)})")

    def wide_marks(self, stream: str) -> np.ndarray:
        """(n_marks, 3) uint64 marks of a Wide stream (rows column 0 for non-adaptive marks), checked
        against the stream's file and the part's granules (CorruptPartError names the marks file)."""
        with self._lock:
            cached = self._marks_cache.get(stream)
        if cached is not None:
            return cached
        name, adaptive, compressed = self._marks_file(stream, WIDE_EXTENSIONS)
        path = self._path(name)
        marks = read_wide_marks(self._read(name), path, compressed=compressed, adaptive=adaptive)
        if not adaptive:
            marks = np.concatenate([marks, np.zeros((len(marks), 1), np.uint64)], axis=1)
        data = file_stem(stream) + ".bin"
        self._require(data)
        check_mark_offsets(marks[:, :2], self.source.file_size(self.part, data), path, data)
        # While the first stream's marks decide the granules, there is nothing to compare with yet.
        expected = getattr(self, "granule_rows", None)
        if adaptive and expected is not None:
            self._check_mark_rows(marks[:, 2], expected, path)
        with self._lock:
            self._marks_cache[stream] = marks
        return marks

    @staticmethod
    def _check_mark_rows(rows: np.ndarray, expected: np.ndarray, path: str) -> None:
        """Every stream's marks give the same rows per granule, then a final mark of 0 rows."""
        n = len(expected)
        if len(rows) not in (n, n + 1):
            raise CorruptPartError(f"{path}: {len(rows)} marks for {n} granules")
        wanted = np.append(expected, 0)[: len(rows)]
        differ = np.flatnonzero(rows.astype(np.int64) != wanted)
        if len(differ):
            at = int(differ[0])
            raise CorruptPartError(f"{path}: mark {at} says {int(rows[at])} rows, the part's granule {at} has "
                                   f"{int(wanted[at])} (per its first column's marks)")

    @cached_property
    def compact_layout(self) -> tuple[CompactMarks, list[str]]:
        """Compact marks and the stream name of each marks column, in file order."""
        if SUBSTREAMS_FILE in self.files:
            listing = parse_columns_substreams(self._read_text(SUBSTREAMS_FILE), self._path(SUBSTREAMS_FILE))
            listed = [column for column, _subs in listing]
            described = [name for name, _ in self.columns]
            if listed != described:
                raise CorruptPartError(
                    f"{self._path(SUBSTREAMS_FILE)}: lists columns {listed} but {COLUMNS_FILE} lists {described}")
            streams = [s for _column, subs in listing for s in subs]
        else:
            streams = [escape_for_file_name(name) for name, _ in self.columns]
        name, _, compressed = self._marks_file("data", COMPACT_EXTENSIONS)
        path = self._path(name)
        marks = read_compact_marks(self._read(name), len(streams), path, compressed=compressed)
        self._require(COMPACT_DATA_FILE)
        check_mark_offsets(marks.offsets.reshape(-1, 2), self.source.file_size(self.part, COMPACT_DATA_FILE), path,
                           COMPACT_DATA_FILE, streams)
        return marks, streams

    def _read_text(self, name: str) -> str:
        data = self._read(name)
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise CorruptPartError(f"{self._path(name)}: not UTF-8 text (byte offset {exc.start})") from None

    def _granule_rows(self) -> np.ndarray:
        if not self.columns:
            return np.zeros(0, np.int64)
        if self.is_compact:
            compact, _ = self.compact_layout
            rows = compact.rows.astype(np.int64)
        else:
            column = self.columns[0][0]
            first = stream_names(self.types[column], column, self.serialization.string_sizes,
                                 self.serialization.sparse_spec(column))[0]
            rows = self.wide_marks(first)[:, 2].astype(np.int64)
            if not rows.any() and self.rows:
                return self._fixed_granule_rows(first, len(rows))
        # A final mark with 0 rows ends adaptive marks files.
        if len(rows) and rows[-1] == 0:
            rows = rows[:-1]
        return rows

    def _fixed_granule_rows(self, stream: str, marks: int) -> np.ndarray:
        """Granule sizes of non-adaptive marks: `index_granularity` rows each, the last the rest (as
        ClickHouse wrote parts before adaptive granularity, and still does with
        `index_granularity_bytes = 0`); one mark per granule, no final mark."""
        granularity = self.index_granularity
        if granularity is None:
            raise FormatError(f"{self._path(stream)}: non-adaptive marks (no row counts) need the table's "
                              "index_granularity; open the part through its table")
        if marks != -(-self.rows // granularity):
            raise CorruptPartError(f"{self._path(stream)}: {marks} marks, but {self.rows} rows in granules of "
                                   f"{granularity} (index_granularity) take {-(-self.rows // granularity)}")
        rows = np.full(marks, granularity, np.int64)
        rows[-1] = self.rows - granularity * (marks - 1)
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
        """The sparse index: per key column, the key of each granule's first row (+ the last row's).

        Parsed once per content in a process: cached by the index file's checksum (parts never
        change, and the same bytes are the same index in any part or table object)."""
        types = tuple(key_types)
        cached = self._primary.get(types)
        if cached is None:
            name = "primary.idx" if "primary.idx" in self.files else "primary.cidx"
            entry = self.checksums.files.get(name) if self.checksums is not None else None
            identity = None if entry is None else (name, entry.file_hash, entry.file_size, types)
            cached = None if identity is None else _PRIMARY_INDEXES.get(identity)
            if cached is None:
                cached = self._parse_primary_index(types)
                if identity is not None:
                    _PRIMARY_INDEXES.put(identity, cached, len(cached[0]) if cached else 0)
            self._primary[types] = cached
        return cached

    def _parse_primary_index(self, key_types: Sequence[str]) -> list[pa.Array]:
        data: bytes | bytearray | memoryview
        if "primary.idx" in self.files:
            data = self._read("primary.idx")
        elif "primary.cidx" in self.files:
            data = decompress_all(self._read("primary.cidx"), self._path("primary.cidx"))
        else:
            raise CorruptPartError(f"{self._path('primary.idx')}: file is missing")
        types = [parse_type(t) for t in key_types]
        for rows in (self.n_granules + 1, self.n_granules):
            try:
                return deserialize_rows(types, cast(bytes, data), rows)
            except CorruptPartError:
                continue
        raise CorruptPartError(f"{self._path('primary.idx')}: does not hold {self.n_granules} keys "
                               f"of types {', '.join(key_types)} (the table's primary key: is the statement's "
                               "ORDER BY / PRIMARY KEY the one the part was written with?)")

    def partition_values(self, result_types: Sequence[str]) -> list[object]:
        key = ("partition", *result_types)
        if key not in self._decoded:
            self._decoded[key] = self._partition_values(result_types)
        return list(cast(list[object], self._decoded[key]))

    def _partition_values(self, result_types: Sequence[str]) -> list[object]:
        if not result_types:
            return []
        if PARTITION_FILE not in self.files:
            raise CorruptPartError(f"{self._path(PARTITION_FILE)}: file is missing, but the table's statement "
                                   f"has a PARTITION BY (of types {', '.join(result_types)})")
        arrays = deserialize_rows([parse_type(t) for t in result_types], self._read(PARTITION_FILE), 1)
        return [array[0].as_py() for array in arrays]

    def minmax(self, column: str) -> tuple[object, object]:
        key = ("minmax", column)
        if key not in self._decoded:
            name = f"{MINMAX_PREFIX}{escape_for_file_name(column)}.idx"
            (array,) = deserialize_rows([self.types[column]], self._read(name), 2)
            self._decoded[key] = (array[0].as_py(), array[1].as_py())
        return self._decoded[key]  # type: ignore[return-value]

    def skip_index(self, name: str) -> SkipIndexData | None:
        """The decompressed granule stream of skip index `name` (None: the part has no such index)."""
        key = ("skip_index", name)
        if key not in self._decoded:
            self._decoded[key] = index_stream(name, self.files, self._read, self.location)
        return cast("SkipIndexData | None", self._decoded[key])

    # ------------------------------------------------------------------ data

    def _read_verified_blocks(self, file: str, start: int, stop: int,
                              decode: Callable[[bytes | memoryview], memoryview]) -> memoryview:
        """Read compressed bytes [start, stop) and decode them. Storage skips its own unit checksums
        (every block carries one); if a block is damaged, the bytes are read again with storage
        verifying each unit, which repairs them from a mirror or parity where the layout can."""
        try:
            return decode(self._fetched(file, start, stop))
        except CorruptPartError:
            return decode(self.source.read_range(self.part, file, start, stop, verify=True))

    def _fetched(self, file: str, start: int, stop: int) -> bytes | memoryview:
        """Bytes [start, stop) of `file`, from a coalesced read `_prefetch` made if one holds them."""
        for first, last, data in getattr(self._prefetched, "spans", {}).get(file, ()):
            if first <= start and stop <= last:
                return memoryview(data)[start - first: stop - first]
        return self.source.read_range(self.part, file, start, stop, verify=False)

    def _prefetch(self, streams: Sequence[str], ranges: Sequence[GranuleRange]) -> None:
        """Read the blocks several granule ranges of a Wide part's streams need with one ranged read
        per group of nearby ranges of a file (`coalesce_spans`), for this thread's next reads."""
        spans: dict[str, dict[tuple[int, int], bytes | memoryview]] = {}
        for stream in streams:
            file = file_stem(stream) + ".bin"
            wanted = coalesce_spans([self._wide_span(stream, b, e, stream.endswith(".dict"))[:2] for b, e in ranges])
            if len(wanted) < len(ranges):
                spans[file] = {(a, z): self.source.read_range(self.part, file, a, z, verify=False) for a, z in wanted}
        self._prefetched.spans = {file: [(a, z, data) for (a, z), data in held.items()] for file, held in spans.items()}

    def _wide_span(self, stream: str, begin: int, end: int, to_file_end: bool) -> tuple[int, int, int, int]:
        """The compressed bytes [start, stop) granules [begin, end) of `stream` lie in, the offset of
        granule `begin` in its block, and where granule `end` starts in its block (-1: read to the
        last block's end)."""
        marks = self.wide_marks(stream)
        file = file_stem(stream) + ".bin"
        self._require(file)
        size = self.source.file_size(self.part, file)
        start_block, start_inner = int(marks[begin, 0]), int(marks[begin, 1])
        if to_file_end or end >= self.n_granules:
            return start_block, size, start_inner, -1
        end_block, end_inner = int(marks[end, 0]), int(marks[end, 1])
        stop = end_block
        if end_inner:
            later = marks[end:, 0]
            later = later[later > end_block]
            stop = int(later[0]) if len(later) else size
        return start_block, stop, start_inner, end_inner

    def _wide_stream(self, stream: str, begin: int, end: int, to_file_end: bool) -> memoryview:
        start, stop, start_inner, end_inner = self._wide_span(stream, begin, end, to_file_end)
        file = file_stem(stream) + ".bin"
        path = self._path(file)
        if end_inner < 0:
            return self._read_verified_blocks(
                file, start, stop, lambda buf: decompress_range(buf, path, (0, start_inner), None))
        end_block = int(self.wide_marks(stream)[end, 0])
        return self._read_verified_blocks(
            file, start, stop,
            lambda buf: decompress_range(buf, path, (0, start_inner), (end_block - start, end_inner)))

    def _compact_streams(self, wanted: Sequence[str], begin: int, end: int) -> dict[str, bytes | memoryview]:
        """Granules [begin, end) of Compact substreams: a range of `data.bin` per granule (from the
        stream's mark to the next one), decompressed together."""
        marks, streams = self.compact_layout
        data = self._read(COMPACT_DATA_FILE)
        path = self._path(COMPACT_DATA_FILE)
        flat = marks.offsets.reshape(-1, 2)
        n_streams = len(streams)
        out: dict[str, bytes | memoryview] = {}
        for stream in wanted:
            if stream not in streams:
                raise CorruptPartError(f"{path}: no substream {stream!r} in the part's marks")
            at = np.arange(begin * n_streams + streams.index(stream), end * n_streams, n_streams)
            starts = [(int(block), int(inner)) for block, inner in flat[at].tolist()]
            # A granule's piece ends at the next mark; the part's very last piece at the file's end.
            stops: list[tuple[int, int] | None] = [(int(block), int(inner)) for block, inner in
                                                   flat[at[at + 1 < len(flat)] + 1].tolist()]
            stops += [None] * (len(starts) - len(stops))
            out[stream] = decompress_ranges(data, path, list(zip(starts, stops, strict=True)))
        return out

    def _refuse_raw_variant_names(self, name: str) -> None:
        """Parts written with escape_variant_subcolumn_filenames = 0 name a variant's streams by the
        raw type name (`v.Array(UInt8).bin`): an escaped name never holds `(` or a space."""
        stem = escape_for_file_name(name) + "."
        names = self.compact_layout[1] if self.is_compact else self.files
        raw = next((f for f in names if f.startswith(stem) and ("(" in f or " " in f)), None)
        if raw is not None:
            raise UnsupportedError(f"{self._path(raw)}: a variant stream named by the raw type name (the part was "
                                   "written with escape_variant_subcolumn_filenames = 0), which is not supported")

    def _dynamic_structure(self, name: str, base: str | None = None) -> DynamicStructure:
        """The types a Dynamic column (or a JSON column's dynamic path, streams named from `base`)
        holds in this part: the prefix of its `.dynamic_structure` stream."""
        stream = (escape_for_file_name(name) if base is None else base) + STRUCTURE
        key = ("dynamic", stream)
        if key not in self._decoded:
            try:
                self._decoded[key] = parse_structure(self._structure_prefix(stream), stream)
            except (CorruptPartError, UnsupportedError) as exc:
                raise type(exc)(f"{self.location}: column {name!r} ({self.types[name].to_clickhouse()}): {exc}") from exc
        return cast(DynamicStructure, self._decoded[key])

    def _structure_prefix(self, stream: str) -> bytes | memoryview:
        """A structure stream's prefix: the whole stream of a Wide part; a Compact part repeats it
        in every granule (the first granule's is read)."""
        if self.is_compact:
            return self._compact_streams([stream], 0, 1)[stream] if self.n_granules else b""
        file = file_stem(stream) + ".bin"
        self._require(file)
        return decompress_all(self._read(file), self._path(file))

    def _range_streams(self, names: Sequence[str], begin: int, end: int) -> dict[str, bytes | bytearray | memoryview]:
        streams: Mapping[str, bytes | memoryview]
        if self.is_compact:
            streams = self._compact_streams(names, begin, end)
        else:
            streams = {s: self._wide_stream(s, begin, end, s.endswith(".dict")) for s in names}
        return self._with_prefixes(streams, names)

    def _read_json(self, name: str, ranges: Sequence[GranuleRange], stored: bool = False) -> pa.Array:
        """A JSON column as ClickHouse's text of each row's object (format/json_text.py): its typed
        paths, dynamic paths (read as Dynamic columns) and shared data. `stored`: as the stored form
        a merge writes back (STORED_JSON_TYPE: per row, path → the value's binary form)."""
        chunks = []
        for begin, end in ranges:
            rows = int(self.granule_starts[end] - self.granule_starts[begin])
            chunks.append(self._json_range(name, cast(Json, self.types[name]), escape_for_file_name(name), 0, begin,
                                           end, rows, stored))
        if not chunks:
            return pa.array([], type=STORED_JSON_TYPE if stored else pa.string())
        return chunks[0] if len(chunks) == 1 else pa.concat_arrays(chunks)

    def _object_structure(self, name: str, base: str) -> ObjectStructure:
        """The dynamic paths and shared-data layout of the JSON stored under `base` in this part."""
        key = ("object", base)
        if key not in self._decoded:
            try:
                self._decoded[key] = parse_object_structure(self._structure_prefix(base + OBJECT_STRUCTURE),
                                                            base + OBJECT_STRUCTURE)
            except (CorruptPartError, UnsupportedError) as exc:
                raise type(exc)(f"{self.location}: column {name!r} ({self.types[name].to_clickhouse()}): {exc}") from exc
        return cast(ObjectStructure, self._decoded[key])

    def _json_range(self, name: str, dt: Json, base: str, level: int, begin: int, end: int, rows: int,
                    stored: bool) -> pa.Array:
        """The `rows` JSON objects stored under stream base `base` in granules [begin, end) of column
        `name`: the column's rows, or (`level` > 0: inside an Array or Map) the objects those rows'
        arrays hold, whose sizes streams are `.size<level>` (ClickHouse counts the nesting depth
        on into the paths' streams)."""
        where = f"{self.location}: column {name!r} ({self.types[name].to_clickhouse()})"
        if base != escape_for_file_name(name):
            where += f", stream {base!r}"
        structure = self._object_structure(name, base)
        texts: dict[str, pa.Array] = {}
        for path, values in self._json_shared_data(base, structure, begin, end, rows, where, level).items():
            with _naming(where, f"path {path!r} (shared data)"):
                texts[path] = values if stored else \
                    binary_values_text(values, name, f"{where}, path {path!r} (shared data)")
        for path, typed in dt.typed_paths:
            # A typed path is stored as an ordinary column of its type; every row prints it. (A JSON
            # inside it, `items Array(JSON)`, has its streams under the path's base.)
            path_streams = path_base(base, path)
            names = [n for n in stream_names(typed, name, self.serialization.string_sizes, False, base=path_streams,
                                             level=level) if not n.endswith(OBJECT_STRUCTURE)]

            def objects(json: Json, at: str, depth: int, n: int) -> pa.Array:
                return self._json_range(name, json, at, depth, begin, end, n, stored)

            with _naming(where, f"path {path!r}"):
                values = deserialize_column(typed, name, cast(Mapping[str, bytes], self._range_streams(names, begin, end)),
                                            rows, self.serialization.string_sizes, False, exact=True, base=path_streams,
                                            level=level, objects=objects if contains_type(typed, Json) else None)
                texts[path] = binary_values(typed, values) if stored else \
                    pc.fill_null(value_text(typed, values, f"{where}, path {path!r}", nested_text(where)), "null")
        for path in structure.paths:
            with _naming(where, f"path {path!r}"):
                texts[path] = self._json_path(name, path_base(base, path), level, begin, end, rows, stored,
                                              f"{where}, path {path!r}")
        return stored_map(texts, rows) if stored else object_text(texts, rows, where)

    def _json_path(self, name: str, path_streams: str, level: int, begin: int, end: int, rows: int, stored: bool,
                   where: str) -> pa.Array:
        """A JSON's dynamic path (streams under `path_streams`) in granules [begin, end): its
        values' text, or their binary form (`stored`)."""
        # A path's values of type Array(Dynamic) or Array(JSON(...)) keep their Dynamic's and JSON's
        # streams under the variant's base: each nested Dynamic's structure is read too.
        structures = nested_structures(lambda b: self._dynamic_structure(name, b), Dynamic(), path_streams, {})
        dynamic = structures[path_streams]
        variant = stored_type(Dynamic(), path_streams, structures)
        names = [n for n in stream_names(variant, name, self.serialization.string_sizes, False, base=path_streams,
                                         level=level) if not n.endswith(OBJECT_STRUCTURE)]

        def objects(json: Json, at: str, depth: int, n: int) -> pa.Array:
            # (a JSON inside a Dynamic value is read in its stored form: the value's binary form needs it)
            return self._json_range(name, json, at, depth, begin, end, n, True)

        struct = deserialize_column(variant, name, cast(Mapping[str, bytes], self._range_streams(names, begin, end)),
                                    rows, self.serialization.string_sizes, False, exact=True, base=path_streams,
                                    level=level, objects=objects if contains_type(variant, Json) else None)
        struct = expand_nested(dynamic, struct, path_streams, structures)
        return dynamic_values(dynamic, struct) if stored else dynamic_text(dynamic, struct, where)

    def _json_shared_data(self, base: str, structure: ObjectStructure, begin: int, end: int, rows: int,
                          where: str, level: int = 0) -> dict[str, pa.Array]:
        """Every path a JSON column's shared data holds in granules [begin, end), with its values
        in binary form (NULL where a row lacks it): each bucket (one for version 2) is a
        Map(String, String) per row — `.size0` (UInt64 entries per row), then the paths and the
        values (a type's binary encoding, then the value) as classic strings."""
        if structure.advanced:
            # (inside an Array or Map its streams keep their names; its chunks count the objects)
            return self._json_shared_advanced(base, structure, begin, end, rows, where)
        row_parts: list[np.ndarray] = []
        path_parts: list[pa.Array] = []
        value_parts: list[pa.Array] = []
        for sizes in shared_data_sizes(base, structure):
            stem = sizes[:-len(".size0")]
            sizes = f"{stem}.size{level}"  # (inside an Array the bucket's Map is one level deeper)
            names = [sizes, stem + "%2Epaths", stem + "%2Evalues"]
            streams = self._range_streams(names, begin, end)
            counts = np.frombuffer(bytes(streams[sizes]), "<u8").astype(np.int64)
            if len(counts) != rows:
                raise CorruptPartError(f"{where}: stream {sizes!r} holds {len(counts)} rows, the granules {rows}")
            total = int(counts.sum())
            if not total:
                continue
            paths = read_classic(Cursor(names[1], bytes(streams[names[1]])), total)
            values = read_classic(Cursor(names[2], bytes(streams[names[2]])), total, binary=True)
            row_parts.append(np.repeat(np.arange(rows, dtype=np.int64), counts))
            path_parts.append(paths)
            value_parts.append(values)
        if not row_parts:
            return {}
        return values_by_path(np.concatenate(row_parts), pa.concat_arrays(path_parts), pa.concat_arrays(value_parts),
                               rows)

    def _json_shared_advanced(self, base: str, structure: ObjectStructure, begin: int, end: int, rows: int,
                              where: str) -> dict[str, pa.Array]:
        """Shared data in the `advanced` layout (ClickHouse's merges). Its copy streams hold every
        row's entries: `copy.sizes` (UInt64 entries per row), `copy.values` (classic strings, each a
        type's binary encoding then the value) and `copy.paths_indexes`, per written chunk of rows an
        index into the chunk's paths — the paths each bucket's `structure` lists for the chunk
        (VarUInt rows, VarUInt count, the paths; in a Wide part then six UInt64 marks of the bucket's
        other streams, in a Compact part those are its `structure_suffix`), buckets in order. An index
        is UInt8, UInt16, UInt32 or UInt64: the narrowest whose maximum is at least the chunk's number
        of paths. Chunks start at granule starts (a Compact granule is one chunk)."""
        stem = f"{base}.object_shared_data"
        buckets = structure.buckets or 0
        suffix = ".structure_prefix" if self.is_compact else ".structure"
        bucket_names = [f"{stem}.{b}{suffix}" for b in range(buckets)]
        names = [f"{stem}.copy.sizes", f"{stem}.copy.paths_indexes", f"{stem}.copy.values", *bucket_names]
        streams = self._range_streams(names, begin, end)
        counts = np.frombuffer(bytes(streams[names[0]]), "<u8").astype(np.int64)
        if len(counts) != rows:
            raise CorruptPartError(f"{where}: stream {names[0]!r} holds {len(counts)} rows, the granules {rows}")
        total = int(counts.sum())
        if not total:
            return {}
        values = read_classic(Cursor(names[2], bytes(streams[names[2]])), total, binary=True)
        indexes = Cursor(names[1], bytes(streams[names[1]]))
        cursors = [Cursor(name, bytes(streams[name])) for name in bucket_names]
        starts = np.zeros(rows + 1, np.int64)
        np.cumsum(counts, out=starts[1:])
        entry_paths: list[str] = []
        row = 0
        while row < rows:
            chunk_rows: int | None = None
            paths: list[str] = []
            for cursor in cursors:
                at = cursor.pos
                found = cursor.varuint()
                if chunk_rows is not None and found != chunk_rows:
                    raise CorruptPartError(f"{where}: stream {cursor.name!r} has a chunk of {found} rows at offset "
                                           f"{at}, the other buckets {chunk_rows}")
                chunk_rows = found
                paths += [bytes(cursor.take(cursor.varuint())).decode("utf-8", "surrogateescape")
                          for _ in range(cursor.varuint())]
                if not self.is_compact:
                    cursor.take(48)  # marks of the bucket's data streams (its paths' Dynamic columns)
            if not chunk_rows or row + chunk_rows > rows:
                raise CorruptPartError(f"{where}: shared data chunk of {chunk_rows} rows where {rows - row} are left")
            count = int(starts[row + chunk_rows] - starts[row])
            width = next(w for w, top in ((1, 0xFF), (2, 0xFFFF), (4, 0xFFFFFFFF), (8, 2**64 - 1)) if len(paths) <= top)
            chosen = np.frombuffer(bytes(indexes.take(count * width)), f"<u{width}").astype(np.int64)
            if len(chosen) and int(chosen.max()) >= len(paths):
                raise CorruptPartError(f"{where}: stream {indexes.name!r}: path index {int(chosen.max())} of "
                                       f"{len(paths)} paths")
            entry_paths += [paths[i] for i in chosen.tolist()]
            row += chunk_rows
        entry_rows = np.repeat(np.arange(rows, dtype=np.int64), counts)
        return values_by_path(entry_rows, pa.array(entry_paths, pa.string()), values, rows)

    def _with_prefixes(self, streams: Mapping[str, bytes | memoryview],
                       names: Sequence[str]) -> dict[str, bytes | bytearray | memoryview]:
        """Streams whose prefix (a state written once, before the first granule) the deserializer
        reads first: a Variant's `.variant_discr` starts with its discriminators mode. A Wide part
        keeps the prefix at the start of the stream's file, before mark 0; a Compact part keeps it
        in the substream `<stream>_prefix` of every granule (the first granule's is read)."""
        out: dict[str, bytes | bytearray | memoryview] = dict(streams)
        for stream in names:
            if stream.endswith(DISCRIMINATORS):
                out[stream] = self._stream_prefix(stream) + streams[stream]
        return out

    def _stream_prefix(self, stream: str) -> bytearray:
        key = ("prefix", stream)
        if key not in self._decoded:
            prefix: bytes | memoryview
            if self.is_compact:
                _marks, substreams = self.compact_layout
                if stream + PREFIX not in substreams:
                    raise CorruptPartError(f"{self._path(SUBSTREAMS_FILE)}: no substream {stream + PREFIX!r}")
                prefix = self._compact_streams([stream + PREFIX], 0, 1)[stream + PREFIX]
            else:
                first = (int(self.wide_marks(stream)[0, 0]), int(self.wide_marks(stream)[0, 1]))
                file = file_stem(stream) + ".bin"
                self._require(file)
                stop = first[0]
                if first[1]:  # the prefix ends inside the block mark 0 points into: read through that block
                    header = self.source.read_range(self.part, file, first[0], first[0] + CHECKSUM_SIZE + HEADER_SIZE)
                    stop = first[0] + CHECKSUM_SIZE + BLOCK_HEADER.unpack_from(header, CHECKSUM_SIZE)[1]
                prefix = self._read_verified_blocks(
                    file, 0, stop, lambda buf: decompress_range(buf, self._path(file), (0, 0), first))
            self._decoded[key] = prefix
        return bytearray(cast(bytearray, self._decoded[key]))

    def read_column(self, name: str, ranges: Sequence[GranuleRange], stored_json: bool = False) -> pa.Array:
        """A column's values over granule ranges (as from merge_ranges), concatenated; every row the
        part holds, deleted or not (`read` drops deleted rows). `stored_json`: a JSON column in the stored form a merge writes back
        (format/json_text.py STORED_JSON_TYPE) rather than as text."""
        if name not in self.types:
            raise CorruptPartError(f"{self.location}: part has no column {name!r}")
        dt = self.types[name]
        self._refuse_raw_variant_names(name)
        if isinstance(dt, Json):
            return self._read_json(name, ranges, stored_json)
        sparse = self.serialization.sparse_spec(name)
        # Each Dynamic in the column (the column itself, or inside an Array, Map or Tuple) is read as
        # the Variant its `.dynamic_structure` prefix lists, then turned into its binary form.
        structure = nested_structures(lambda b: self._dynamic_structure(name, b), dt, escape_for_file_name(name), {}) \
            if has_dynamic(dt) else None
        stored = stored_type(dt, escape_for_file_name(name), structure) if structure is not None else dt
        # A JSON inside the column reads its own streams (`_json_range`): its structure is no cursor's.
        names = [n for n in stream_names(stored, name, self.serialization.string_sizes, sparse)
                 if not n.endswith(OBJECT_STRUCTURE)]
        chunks = []
        coalescing = len(ranges) > 1 and not self.is_compact and getattr(self.source, "parallel_reads", False)
        if coalescing:
            self._prefetch(names, ranges)
        try:
            for begin, end in ranges:
                chunks.append(self._read_range_of(name, stored, names, sparse, structure, begin, end, stored_json))
        finally:
            if coalescing:
                self._prefetched.spans = {}
        if not chunks:
            return pa.array([], type=stored_json_arrow(dt) if stored_json else to_arrow(dt))
        return chunks[0] if len(chunks) == 1 else pa.concat_arrays(chunks)

    def _read_range_of(self, name: str, stored: DataType, names: Sequence[str], sparse: dict | bool,
                       structure: Mapping[str, DynamicStructure] | None, begin: int, end: int,
                       stored_json: bool = False) -> pa.Array:
        """Column `name`'s values in granules [begin, end)."""
        rows = int(self.granule_starts[end] - self.granule_starts[begin])
        try:
            streams = self._range_streams(names, begin, end)
            # (deserialize_column reads bytearrays as it reads bytes)
            inside = tuple(b + "." for b in structure) if structure is not None else ()

            def objects(json: Json, base: str, level: int, n: int) -> pa.Array:
                # (a JSON inside a Dynamic value is read in its stored form: the value's binary form needs it)
                return self._json_range(name, json, base, level, begin, end, n, stored_json or base.startswith(inside))

            chunk = deserialize_column(stored, name, cast(Mapping[str, bytes], streams), rows,
                                       self.serialization.string_sizes, sparse, exact=True,
                                       objects=objects if contains_type(stored, Json) else None)
            return from_stored(self.types[name], chunk, escape_for_file_name(name), structure) \
                if structure is not None else chunk
        except CorruptPartError as exc:
            raise self._explain_read_error(name, names, begin, end, exc) from exc
        except UnsupportedError as exc:
            if self.location in str(exc):
                raise
            raise UnsupportedError(f"{self.location}/{exc}") from exc

    def _explain_read_error(self, column: str, streams: Sequence[str], begin: int, end: int,
                            error: CorruptPartError) -> CorruptPartError:
        """Name the file at fault when a column cannot be read: a mark that points where no block
        or byte is (the marks file), a damaged block (the data file, already named), or data that
        does not decode as columns.txt says (the column, its type, its files and the granules)."""
        if self.is_compact:
            marks, substreams = self.compact_layout
            located = [(COMPACT_DATA_FILE, self._marks_file("data", COMPACT_EXTENSIONS)[0],
                        marks.offsets.reshape(-1, 2), substreams)]
        else:
            located = [(file_stem(s) + ".bin", self._marks_file(s, WIDE_EXTENSIONS)[0], self.wide_marks(s)[:, :2], [])
                       for s in streams]
        for data_file, marks_file, offsets, labels in located:
            misfit = self._misplaced_mark(data_file, marks_file, offsets, labels)
            if misfit is not None:
                return misfit
        if self.location in str(error):
            return error
        files = sorted({name for data_file, marks_file, _, _ in located for name in (data_file, marks_file)})
        return CorruptPartError(
            f"{self.location}: column {column!r} ({self.types[column].to_clickhouse()} per {COLUMNS_FILE}) does not "
            f"decode from {', '.join(files)} in granules [{begin}, {end}): {error}")

    def _misplaced_mark(self, data_file: str, marks_file: str, offsets: np.ndarray,
                        substreams: Sequence[str]) -> CorruptPartError | None:
        """The first mark that points neither at a byte of an intact block nor at the end of the file
        (None if every mark fits, or if the file has a damaged block: that block is the fault)."""
        data = self._read(data_file)
        try:
            blocks = {block.offset: block.decompressed_size for block in iter_blocks(data, self._path(data_file))}
        except (CorruptPartError, UnsupportedError):
            return None
        for index, (block, inner) in enumerate(offsets.tolist()):
            if block == len(data) and inner == 0:
                continue
            size = blocks.get(block)
            if size is None or inner > size:
                where = f"no block starts at byte {block}" if size is None else f"the block there holds {size} bytes"
                return CorruptPartError(f"{self._path(marks_file)}: {mark_label(index, substreams)} points at "
                                        f"({block}, {inner}) in {data_file}, where {where}")
        return None

    @cached_property
    def source_parts(self) -> SourceParts:
        """A patch part's `source_parts.dat` (checked against checksums.txt)."""
        if not self.is_patch:
            raise UnsupportedError(f"{self._path(SOURCE_PARTS_FILE)}: {self.part} is not opened as a patch part")
        return SourceParts.parse(self._read(SOURCE_PARTS_FILE), self._path(SOURCE_PARTS_FILE))

    @property
    def has_row_mask(self) -> bool:
        """Whether a lightweight DELETE marked rows of this part as deleted (`_row_exists`)."""
        return ROW_EXISTS_COLUMN in self.types

    def row_mask(self, ranges: Sequence[GranuleRange]) -> np.ndarray | None:
        """Per row of the granule ranges: whether it exists (None when the part has no mask)."""
        if not self.has_row_mask:
            return None
        values = self.read_column(ROW_EXISTS_COLUMN, ranges)
        return values.to_numpy(zero_copy_only=False) != 0

    @cached_property
    def existing_rows(self) -> int:
        """Rows a read returns: `count.txt` minus the rows a lightweight DELETE removed."""
        mask = self.row_mask([(0, self.n_granules)])
        return self.rows if mask is None else int(np.count_nonzero(mask))

    def _check_type(self, name: str, table_type: str) -> None:
        """A column the part holds must have the type the table declares (no silent conversion)."""
        if (name, table_type) in self._checked_types:
            return
        declared = parse_type(table_type).to_clickhouse()
        stored = self.types[name].to_clickhouse()
        if declared != stored:
            raise SchemaMismatchError(
                f"{self._path(COLUMNS_FILE)}: column {name!r} is {stored} in the part but {declared} in the table's "
                "statement (a statement that does not describe this table, or a damaged columns.txt)")
        with self._lock:
            self._checked_types.add((name, table_type))

    def _check_added(self, name: str, declared: Mapping[str, str]) -> None:
        """A column the part lacks reads as defaults only if the part has no column the table lacks:
        otherwise the statement does not describe this part (a wrong CREATE, or a column renamed
        in ClickHouse whose parts were not rewritten yet) and defaults would be wrong rows."""
        extra = [n for n, _ in self.columns if n not in declared and n not in HIDDEN_COLUMNS]
        if extra:
            raise SchemaMismatchError(
                f"{self._path(COLUMNS_FILE)}: the table's statement has column {name!r}, which the part does not "
                f"store, and lacks the part's column(s) {', '.join(map(repr, extra))}: the statement does not "
                "describe this table")

    def read(self, columns: Sequence[str] | None = None, ranges: Sequence[GranuleRange] | None = None,
             table_types: Mapping[str, str] | None = None, *, apply_mask: bool = True,
             stored_json: bool = False) -> pa.Table:
        """Columns over granule ranges (all granules by default) as an Arrow table, without the rows
        a lightweight DELETE removed (with them, in stored order, when not `apply_mask`: a mutation
        rewriting the part keeps every stored row and its mask).

        `table_types` (name → ClickHouse type) are the table's columns: a column the part holds must
        have that type (SchemaMismatchError otherwise); a column the table gained after this part was
        written reads as its default values, as ClickHouse reads it. `stored_json`: JSON columns in
        the stored form a merge writes back (see `read_column`).
        """
        names = list(columns) if columns is not None else [n for n, _ in self.columns]
        ranges = merge_ranges(ranges) if ranges is not None else [(0, self.n_granules)]
        declared = table_types or {}
        for n in names:
            if n in self.types and n in declared:
                self._check_type(n, declared[n])
            elif n in declared:
                self._check_added(n, declared)
        rows = sum(int(self.granule_starts[e] - self.granule_starts[b]) for b, e in ranges)
        def column(n: str) -> pa.Array:
            if n not in self.types and n in declared:
                # (a JSON inside in the stored form a merge writes back: `{}`, a NULL for Nullable(JSON))
                return default_column(parse_type(declared[n]), rows, stored_json)
            return self.read_column(n, ranges, stored_json)

        if len(names) > 1 and getattr(self.source, "parallel_reads", False):
            arrays = list(_column_pool().map(column, names))  # each column's ranged reads at once
        else:
            arrays = [column(n) for n in names]
        fields = [pa.field(n, a.type) for n, a in zip(names, arrays)]
        table = pa.Table.from_arrays(arrays, schema=pa.schema(fields))
        mask = self.row_mask(ranges) if arrays and apply_mask else None
        if mask is not None and not mask.all():
            table = table.filter(pa.array(mask))
        return table

"""The small metadata files of a part and the description of a part as a whole.

Owns `count.txt`, `columns.txt`, `serialization.json`, `default_compression_codec.txt`,
`metadata_version.txt`, and `PartFiles` (a part as a set of file bytes ready for storage).
Column data, marks and indexes have modules of their own.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from spark_mergetree.errors import CorruptPartError
from spark_mergetree.format.checksums import Checksums, compute_file_checksum

COUNT_FILE = "count.txt"
COLUMNS_FILE = "columns.txt"
SERIALIZATION_FILE = "serialization.json"
CODEC_FILE = "default_compression_codec.txt"
METADATA_VERSION_FILE = "metadata_version.txt"
CHECKSUMS_FILE = "checksums.txt"
COMPACT_DATA_FILE = "data.bin"

# Files ClickHouse keeps out of checksums.txt (they describe the part rather than hold its data).
NOT_CHECKSUMMED = frozenset({CHECKSUMS_FILE, COLUMNS_FILE, CODEC_FILE, METADATA_VERSION_FILE,
                             "columns_substreams.txt", "txn_version.txt", "uuid.txt"})

_COLUMNS_HEADER = re.compile(r"columns format version: 1\n(\d+) columns:\n", re.ASCII)
_COLUMN_LINE = re.compile(r"`((?:[^`\\]|\\.)*)` (.+)")


def format_count(rows: int) -> bytes:
    return str(int(rows)).encode()


def parse_count(data: bytes, path: str) -> int:
    text = data.decode("ascii", errors="replace").strip()
    if not text.isdigit():
        raise CorruptPartError(f"{path}: expected a row count, found {text[:40]!r}")
    return int(text)


def _escape_backquoted(name: str) -> str:
    return name.replace("\\", "\\\\").replace("`", "\\`")


def _unescape_backquoted(name: str) -> str:
    return re.sub(r"\\(.)", r"\1", name)


def format_columns(columns: list[tuple[str, str]]) -> bytes:
    """`columns.txt`: a header, then one "`name` Type" line per column."""
    lines = [f"columns format version: 1\n{len(columns)} columns:\n"]
    lines += [f"`{_escape_backquoted(name)}` {type_text}\n" for name, type_text in columns]
    return "".join(lines).encode()


def parse_columns(data: bytes, path: str) -> list[tuple[str, str]]:
    """(name, type text) per line of `columns.txt`; CorruptPartError names the file, line and byte offset."""
    try:
        text = bytes(data).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CorruptPartError(f"{path}: not UTF-8 text (byte offset {exc.start})") from None
    header = _COLUMNS_HEADER.match(text)
    if header is None:
        raise CorruptPartError(f"{path}: not a 'columns format version: 1' file")
    if not text.endswith("\n"):
        raise CorruptPartError(f"{path}: truncated: the last line has no end of line (byte offset {len(data)})")
    lines = text[header.end():].split("\n")[:-1]
    if len(lines) != int(header.group(1)):
        raise CorruptPartError(f"{path}: header announces {header.group(1)} columns, file lists {len(lines)}")
    columns = []
    seen: set[str] = set()
    offset = len(text[:header.end()].encode())
    for number, line in enumerate(lines, start=3):
        match = _COLUMN_LINE.fullmatch(line)
        if match is None:
            raise CorruptPartError(f"{path}: line {number} (byte offset {offset}) is not \"`name` Type\": {line[:80]!r}")
        name = _unescape_backquoted(match.group(1))
        if name in seen:
            raise CorruptPartError(f"{path}: line {number} (byte offset {offset}) repeats column {name!r}")
        seen.add(name)
        columns.append((name, match.group(2)))
        offset += len(line.encode()) + 1
    return columns


@dataclass(frozen=True)
class SerializationInfo:
    """What `serialization.json` says: which String encoding, which columns are sparse."""

    string_sizes: bool = False
    sparse_columns: frozenset[str] = frozenset()
    entries: Mapping[str, dict] = field(default_factory=dict)  # column name -> its entry in the file

    def sparse_spec(self, column: str) -> dict | bool:
        """What streams.sparse_streams takes for a column: its entry (tuple elements can be
        sparse on their own), or False."""
        return self.entries.get(column, False)

    @classmethod
    def parse(cls, data: bytes | None, path: str) -> SerializationInfo:
        if data is None:  # absent: classic strings, no sparse columns
            return cls()
        try:
            doc = json.loads(data)
        except ValueError as exc:
            raise CorruptPartError(f"{path}: not JSON ({exc})") from exc
        versions = doc.get("types_serialization_versions") or {}
        columns = [c for c in doc.get("columns", []) if isinstance(c, dict) and "name" in c]
        sparse = frozenset(c["name"] for c in columns if c.get("kind") == "Sparse")
        return cls(string_sizes=str(versions.get("string", 0)) == "1", sparse_columns=sparse,
                   entries={c["name"]: c for c in columns})

    def to_bytes(self, columns: list[tuple[str, int, int]]) -> bytes:
        """The file as ClickHouse 26.x writes it; `columns` gives (name, rows, default values)."""
        doc = {
            "columns": [{"kind": "Default", "name": name, "num_defaults": defaults, "num_rows": rows,
                         "exact_num_defaults": True} for name, rows, defaults in sorted(columns)],
            "propagate_types_serialization_versions_to_nested_types": True,
            "types_serialization_versions": {"string": 1} if self.string_sizes else {},
            "version": 1,
        }
        return json.dumps(doc, separators=(",", ":")).encode()


@dataclass
class PartFiles:
    """A part as file bytes, ready to hand to storage. `boundaries[file]` are the offsets of the
    compressed blocks that start granules: where storage may cut the file into stripe units."""

    files: dict[str, bytes | memoryview] = field(default_factory=dict)
    boundaries: dict[str, np.ndarray] = field(default_factory=dict)
    rows: int = 0

    @property
    def size(self) -> int:
        return sum(len(data) for data in self.files.values())

    def with_file(self, name: str, data: bytes) -> PartFiles:
        """These files plus an uncompressed metadata file (`ttl.txt`), listed in checksums.txt."""
        checksums = Checksums.parse(bytes(self.files[CHECKSUMS_FILE]), CHECKSUMS_FILE)
        entries = dict(checksums.files)
        entries[name] = compute_file_checksum(data, False)
        self.files[name] = data
        self.files[CHECKSUMS_FILE] = Checksums(dict(sorted(entries.items()))).to_bytes()
        return self

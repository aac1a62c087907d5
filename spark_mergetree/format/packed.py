"""Packed part storage (ClickHouse 26.x, `min_bytes_for_full_part_storage` and friends): a part
directory holding one file, `data.packed`, an archive of the files a Wide or Compact part otherwise
keeps side by side. `PackedSource` serves the files inside the archive to a reader as if they were
the part's own files. format_spec/part.md describes the archive.
"""

from __future__ import annotations

import struct
import threading
from typing import Protocol

from spark_mergetree.errors import CorruptPartError, UnsupportedError
from spark_mergetree.format.row_binary import read_varuint

__all__ = ["PACKED_PART_FILE", "PackedSource", "is_packed", "parse_packed_part"]

PACKED_PART_FILE = "data.packed"
_VERSION = 0
_U64 = struct.Struct("<Q")
_ENTRY = struct.Struct("<QQ")


class _Source(Protocol):
    def list_files(self, part: str) -> list[str]: ...
    def read_file(self, part: str, name: str) -> bytes: ...
    def read_range(self, part: str, name: str, start: int, end: int, verify: bool = True) -> bytes | memoryview: ...
    def file_size(self, part: str, name: str) -> int: ...


def is_packed(files: list[str] | set[str]) -> bool:
    """Whether a part directory with these files is stored packed."""
    return PACKED_PART_FILE in files


def parse_packed_part(data: bytes | memoryview, path: str) -> dict[str, tuple[int, int]]:
    """`data.packed` → {file name: (offset, size) of its bytes inside the archive}."""
    view = memoryview(data).cast("B")
    if len(view) < 9:
        raise CorruptPartError(f"{path}: {len(view)} bytes is too short for a packed part's header")
    if view[0] != _VERSION:
        raise UnsupportedError(f"{path}: packed part archive version {view[0]}; this version reads version {_VERSION}")
    (count,) = _U64.unpack_from(view, 1)
    pos, files = 9, {}
    for number in range(count):
        length, pos = read_varuint(view, pos, f"{path}: entry {number} of the archive's header")
        if pos + length + _ENTRY.size > len(view):
            raise CorruptPartError(f"{path}: entry {number} runs past the end of the archive ({len(view)} bytes)")
        name = bytes(view[pos:pos + length]).decode("utf-8", "replace")
        pos += length
        offset, size = _ENTRY.unpack_from(view, pos)
        pos += _ENTRY.size
        if offset + size > len(view):
            raise CorruptPartError(f"{path}: {name!r} at byte {offset} ({size} bytes) lies past the archive's end "
                                   f"({len(view)} bytes)")
        if "/" in name:
            raise UnsupportedError(f"{path}: {name!r} is a file of a subdirectory (a projection) inside a packed "
                                   "part; this version reads packed parts without projections")
        files[name] = (offset, size)
    return files


class PackedSource:
    """A file source (part_reader.FileSource) over the packed parts of another: a packed part's files
    are those inside its `data.packed`; other parts pass through."""

    def __init__(self, source: _Source, location: str = "") -> None:
        self.source = source
        self.location = location
        self._archives: dict[str, tuple[bytes, dict[str, tuple[int, int]]]] = {}
        self._lock = threading.Lock()

    def _archive(self, part: str) -> tuple[bytes, dict[str, tuple[int, int]]] | None:
        with self._lock:
            found = self._archives.get(part)
        if found is not None:
            return found
        if not is_packed(self.source.list_files(part)):
            return None
        data = self.source.read_file(part, PACKED_PART_FILE)
        where = f"{self.location or part}/{PACKED_PART_FILE}"
        found = (data, parse_packed_part(data, where))
        with self._lock:
            self._archives[part] = found
        return found

    def list_files(self, part: str) -> list[str]:
        archive = self._archive(part)
        return self.source.list_files(part) if archive is None else sorted(archive[1])

    def read_file(self, part: str, name: str) -> bytes:
        archive = self._archive(part)
        if archive is None:
            return self.source.read_file(part, name)
        data, entries = archive
        if name not in entries:
            raise CorruptPartError(f"{self.location or part}/{PACKED_PART_FILE}: holds no file {name!r}")
        offset, size = entries[name]
        return data[offset:offset + size]

    def read_range(self, part: str, name: str, start: int, end: int, verify: bool = True) -> bytes | memoryview:
        archive = self._archive(part)
        if archive is None:
            return self.source.read_range(part, name, start, end, verify)
        return memoryview(self.read_file(part, name))[start:end]

    def file_size(self, part: str, name: str) -> int:
        archive = self._archive(part)
        if archive is None:
            return self.source.file_size(part, name)
        if name not in archive[1]:
            raise CorruptPartError(f"{self.location or part}/{PACKED_PART_FILE}: holds no file {name!r}")
        return archive[1][name][1]

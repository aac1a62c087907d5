"""The file-system primitives every part operation is built from, and their local implementation.

Layouts and the part store never touch `os` directly: they write whole files, read byte ranges,
list, rename, delete and sync through a `FileSystem`, in the spirit of fsspec's small
`AbstractFileSystem` (`pipe_file`, `cat_file(start, end)`, `ls`, `mv`, `rm`). Another backend
(object storage) implements these eleven methods; paths are plain strings joined with "/".

Contract, for every implementation:
* Failures raise `OSError` (`FileNotFoundError` when a path does not exist), never anything else.
* `write` is durable when it returns (local: fsynced); a crash leaves the file whole or absent
  only after `rename` publishes it, so parts are written under a temporary name first.
* `rename` is atomic and replaces a file (or an empty directory) at the destination. It is the
  publish step of a part; `sync_dir` then makes it durable (a no-op where renames are durable).
"""

from __future__ import annotations

import os
import shutil
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from types import TracebackType

import numpy as np

from spark_mergetree.fileops import fsync_dir, write_file

#: Bytes as storage takes them: anything exporting a contiguous buffer of bytes.
Buffer = bytes | bytearray | memoryview | np.ndarray
#: Files as (name, chunks written back to back).
Files = Sequence[tuple[str, Sequence[Buffer]]]


def byte_view(data: Buffer) -> memoryview:
    """A flat view of the bytes of any buffer (bytes, bytearray, memoryview, contiguous numpy array)."""
    return (data.data if isinstance(data, np.ndarray) else memoryview(data)).cast("B")


@dataclass(frozen=True)
class Entry:
    """One name in a directory listing."""

    name: str
    is_dir: bool


class RangeReader(ABC):
    """Reads byte ranges into caller buffers; may keep files open until `close`."""

    @abstractmethod
    def read_into(self, path: str, offset: int, buffer: memoryview) -> int:
        """Fill `buffer` from `path` at `offset`; the number of bytes read (short at end of file)."""

    @abstractmethod
    def close(self) -> None: ...

    def __enter__(self) -> RangeReader:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.close()


class FileSystem(ABC):
    """Where a disk's bytes are kept."""

    @abstractmethod
    def write(self, path: str, chunks: Sequence[Buffer]) -> None:
        """Create or replace the file `path` with the chunks back to back, durably."""

    @abstractmethod
    def read_range(self, path: str, start: int, end: int) -> bytes:
        """Bytes [start, end) of a file (fewer if the file is shorter)."""

    @abstractmethod
    def reader(self) -> RangeReader:
        """A reader for many ranges of a few files (one per thread)."""

    @abstractmethod
    def size(self, path: str) -> int: ...

    @abstractmethod
    def ls(self, path: str) -> list[Entry]:
        """The entries of a directory; FileNotFoundError (or NotADirectoryError) if it is none."""

    @abstractmethod
    def isdir(self, path: str) -> bool: ...

    @abstractmethod
    def isfile(self, path: str) -> bool: ...

    @abstractmethod
    def makedirs(self, path: str) -> None:
        """Create a directory and its parents; nothing if it exists."""

    @abstractmethod
    def rename(self, source: str, destination: str) -> None:
        """Atomically give `source` the name `destination` (replacing a file there)."""

    @abstractmethod
    def remove(self, path: str) -> None:
        """Delete a file or a whole directory tree; nothing if it does not exist."""

    @abstractmethod
    def sync_dir(self, path: str) -> None:
        """Make the creates, renames and deletes in a directory durable."""


class _LocalReader(RangeReader):
    def __init__(self) -> None:
        self._descriptors: dict[str, int] = {}

    def read_into(self, path: str, offset: int, buffer: memoryview) -> int:
        fd = self._descriptors.get(path)
        if fd is None:
            fd = self._descriptors[path] = os.open(path, os.O_RDONLY)
        return os.preadv(fd, [buffer], offset) if len(buffer) else 0

    def close(self) -> None:
        for fd in self._descriptors.values():
            os.close(fd)
        self._descriptors.clear()


class LocalFileSystem(FileSystem):
    """A directory tree on this machine (a local disk or a mount every process sees)."""

    def write(self, path: str, chunks: Sequence[Buffer]) -> None:
        write_file(path, [byte_view(chunk) for chunk in chunks])

    def read_range(self, path: str, start: int, end: int) -> bytes:
        fd = os.open(path, os.O_RDONLY)  # no file object: opening a part reads a dozen small files
        try:
            return os.pread(fd, end - start, start)
        finally:
            os.close(fd)

    def reader(self) -> RangeReader:
        return _LocalReader()

    def size(self, path: str) -> int:
        return os.stat(path).st_size

    def ls(self, path: str) -> list[Entry]:
        with os.scandir(path) as entries:
            return [Entry(e.name, e.is_dir()) for e in entries]

    def isdir(self, path: str) -> bool:
        return os.path.isdir(path)

    def isfile(self, path: str) -> bool:
        return os.path.isfile(path)

    def makedirs(self, path: str) -> None:
        os.makedirs(path, exist_ok=True)

    def rename(self, source: str, destination: str) -> None:
        os.replace(source, destination)

    def remove(self, path: str) -> None:
        if os.path.isdir(path) and not os.path.islink(path):
            # A concurrent deleter of the same tree is not an error: both finish the job.
            shutil.rmtree(path, ignore_errors=True)
            return
        try:
            os.unlink(path)
        except (FileNotFoundError, NotADirectoryError):
            pass

    def sync_dir(self, path: str) -> None:
        fsync_dir(path)


LOCAL = LocalFileSystem()

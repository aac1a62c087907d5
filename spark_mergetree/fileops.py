"""File operations on local file systems, for every layer: the one place that fsyncs and renames.

Buffers about to be filled with file bytes (`scratch`), durable writes
(`write_file`, `write_file_atomically`, `write_new_file`, `fsync_dir`), atomic
renames (`rename_noreplace`, `rename_exchange` with renameat2; `replace_symlink`), deletions
that a crash or a second deleter cannot disturb (`remove_directory`, `remove_quietly`),
ClickHouse's escaping of names in file names (`escape_for_file_name`), and advisory locks
(`FileLock`, flock).

Imports only `errors`: format/, storage/, txn/, catalog/ and engine/ all build on it.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import mmap
import os
import re
import shutil
import sys
import uuid
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa

from spark_mergetree.errors import StorageError, TableExistsError, TableNotFoundError, UnsupportedError

RENAME_NOREPLACE = 1
RENAME_EXCHANGE = 2
_AT_FDCWD = -100
# renameat2 syscall numbers, used when the C library predates its wrapper (glibc < 2.28).
_RENAMEAT2_SYSCALL = {"x86_64": 316, "aarch64": 276, "i686": 353, "armv7l": 382}

_libc = ctypes.CDLL(None, use_errno=True)
_renameat2_fn = getattr(_libc, "renameat2", None)


def _renameat2(old: Path, new: Path, flags: int) -> None:
    """Call renameat2(2); raise OSError with the kernel's errno on failure."""
    if not sys.platform.startswith("linux"):
        raise UnsupportedError(
            f"renameat2 is Linux-only (platform {sys.platform!r}); atomic RENAME/EXCHANGE of "
            f"{old} -> {new} cannot be done safely here"
        )
    old_b, new_b = os.fsencode(old), os.fsencode(new)
    if _renameat2_fn is not None:
        result = _renameat2_fn(_AT_FDCWD, old_b, _AT_FDCWD, new_b, ctypes.c_uint(flags))
    else:
        number = _RENAMEAT2_SYSCALL.get(os.uname().machine)
        if number is None:
            raise UnsupportedError(f"renameat2 is not available on machine {os.uname().machine!r}")
        result = _libc.syscall(number, _AT_FDCWD, old_b, _AT_FDCWD, new_b, ctypes.c_uint(flags))
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), os.fsdecode(old_b), None, os.fsdecode(new_b))


def rename_noreplace(old: Path, new: Path, what: str) -> None:
    """Rename ``old`` to ``new`` atomically, failing if ``new`` exists (the CREATE/RENAME commit point).

    ``what`` names the object for error messages. Filesystems without RENAME_NOREPLACE are refused:
    a check-then-rename fallback would let two creators both win.
    """
    try:
        _renameat2(old, new, RENAME_NOREPLACE)
    except OSError as exc:
        if exc.errno == errno.EEXIST:
            raise TableExistsError(f"{what} already exists ({new} is present)") from None
        if exc.errno == errno.ENOENT:
            raise TableNotFoundError(f"{what}: {old} does not exist") from None
        if exc.errno in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
            raise UnsupportedError(
                f"the filesystem holding {old} does not support renameat2(RENAME_NOREPLACE); "
                f"the catalog needs it for atomic {what}"
            ) from None
        raise StorageError(f"cannot rename {old} -> {new} for {what}: {exc.strerror}") from exc


def rename_exchange(first: Path, second: Path, what: str) -> None:
    """Swap two paths in one syscall (renameat2 RENAME_EXCHANGE); both must exist.

    There is deliberately no fallback: three plain renames would expose a moment where one
    name is missing, and a crash there would lose a table name.
    """
    try:
        _renameat2(first, second, RENAME_EXCHANGE)
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            missing = first if not os.path.lexists(first) else second
            raise TableNotFoundError(f"{what}: {missing} does not exist") from None
        if exc.errno in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
            raise UnsupportedError(
                f"the filesystem holding {first} does not support renameat2(RENAME_EXCHANGE); "
                f"{what} is refused rather than done non-atomically"
            ) from None
        raise StorageError(f"cannot exchange {first} <-> {second} for {what}: {exc.strerror}") from exc


Buffer = bytes | bytearray | memoryview
#: A directory being deleted is first renamed to `delete_tmp_<name>_<random>` (as ClickHouse does).
DELETE_PREFIX = "delete_tmp_"


def fsync_dir(path: str | os.PathLike[str]) -> None:
    """Make a directory's entries (creates, renames, unlinks) durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# Bytes written per write() call of a memory-mapped chunk, whose pages are unmapped once written.
MAPPED_WRITE_BYTES = 16 << 20


def _write_fd(fd: int, chunks: Sequence[Buffer]) -> None:
    try:
        for chunk in chunks:
            view = memoryview(chunk).cast("B")
            if isinstance(view.obj, mmap.mmap):
                # A slice at a time, its pages dropped once written: a big memory-mapped file (a
                # merge's spilled column) never becomes resident whole.
                for start in range(0, len(view), MAPPED_WRITE_BYTES):
                    piece = view[start:start + MAPPED_WRITE_BYTES]
                    while piece:
                        piece = piece[os.write(fd, piece):]
                    release_mapped(view[start:start + MAPPED_WRITE_BYTES])
                continue
            while view:
                view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)


def scratch(length: int) -> memoryview:
    """A writable buffer that is about to be filled completely, from Arrow's memory pool: neither
    zero-filled (as a bytearray) nor fresh pages the kernel faults in and zeroes each time (as a big
    numpy array): a freed buffer's memory serves the next one. Reads and decompression allocate
    one per range, column after column, so this is most of what their memory costs."""
    return memoryview(pa.allocate_buffer(length)).cast("B")


def release_mapped(view: memoryview) -> None:
    """Drop from this process the pages of a memory-mapped file's bytes `view` covers (nothing for
    other buffers): they are read from the file again if touched, so RSS holds only what is in use."""
    source = view.obj
    if not isinstance(source, mmap.mmap) or not len(view):
        return
    begin = int(np.frombuffer(view, np.uint8).ctypes.data - np.frombuffer(source, np.uint8).ctypes.data)
    aligned = begin - begin % mmap.PAGESIZE
    source.madvise(mmap.MADV_DONTNEED, aligned, begin + len(view) - aligned)


def write_file(path: str | os.PathLike[str], chunks: Sequence[Buffer]) -> None:
    """Create or truncate `path`, write the chunks back to back and fsync the file."""
    _write_fd(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), chunks)


def write_new_file(path: str | os.PathLike[str], data: Buffer) -> None:
    """Create ``path`` with O_EXCL, write and fsync it (raises FileExistsError if it exists)."""
    _write_fd(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644), [data])


def write_file_atomically(path: Path, data: Buffer, *, replace: bool = True, sync_directory: bool = True) -> bool:
    """Write a temporary file beside `path` (`.<name>.tmp-<pid>-<random>`), fsync it, rename it into
    place, fsync the directory. Readers see the old file or the new one, never a part of either.

    With `replace=False` an existing file wins (the temporary is hard-linked, never renamed over)
    and False is returned.
    """
    temporary = path.with_name(f".{path.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    write_file(temporary, [data])
    try:
        if replace:
            os.replace(temporary, path)
        else:
            try:
                os.link(temporary, path)
            except FileExistsError:
                return False
    finally:
        if not replace:
            temporary.unlink(missing_ok=True)
    if sync_directory:
        fsync_dir(path.parent)
    return True


#: The temporaries `write_file_atomically` leaves when a crash interrupts it.
BEING_WRITTEN = re.compile(r"\A\..+\.tmp-")


def remove_directory(path: Path) -> bool:
    """Delete a directory tree: first rename it to `delete_tmp_<name>_<random>` (one atomic step, so
    the name is free at once and no reader sees half a directory), then delete that. Two deleters of
    one directory do not disturb each other. Returns False if it did not exist."""
    doomed = path.with_name(f"{DELETE_PREFIX}{path.name}_{uuid.uuid4().hex[:8]}")
    try:
        os.rename(path, doomed)
    except (FileNotFoundError, NotADirectoryError):
        return False
    shutil.rmtree(doomed, ignore_errors=True)
    return True


def remove_tree(path: Path) -> None:
    """Delete a directory tree in place (nothing if it does not exist); errors other than a missing
    file propagate."""
    try:
        shutil.rmtree(path)
    except FileNotFoundError:
        pass


class Subdirectories:
    """The subdirectories of one directory, listed, probed and deleted (`remove_directory`)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    def names(self) -> set[str]:
        """Names of the subdirectories (symbolic links are not followed); none if `path` is absent."""
        try:
            with os.scandir(self.path) as entries:
                return {entry.name for entry in entries if entry.is_dir(follow_symlinks=False)}
        except (FileNotFoundError, NotADirectoryError):
            return set()

    def exists(self, name: str) -> bool:
        return (self.path / name).is_dir()

    def remove(self, name: str) -> None:
        remove_directory(self.path / name)


SYMLINK_TEMPORARY = re.compile(r"\Asymlink_tmp\.(\d+)\.", re.ASCII)


def replace_symlink(link: Path, target: str, scratch_dir: Path) -> None:
    """Point ``link`` at ``target`` atomically: a symlink made in ``scratch_dir``, renamed over.

    The temporary lives in ``scratch_dir`` (same filesystem) so a crash never leaves a stray entry
    next to the links ClickHouse reads; ``remove_stale_symlink_temporaries`` clears it later.
    """
    if os.path.islink(link) and os.readlink(link) == target:
        return
    temporary = scratch_dir / f"symlink_tmp.{os.getpid()}.{link.name}"
    try:
        os.unlink(temporary)
    except FileNotFoundError:
        pass
    os.symlink(target, temporary)
    os.rename(temporary, link)


def remove_stale_symlink_temporaries(scratch_dir: Path) -> list[Path]:
    """Remove replace_symlink leftovers of processes that no longer run."""
    removed = []
    for entry in scratch_dir.iterdir():
        match = SYMLINK_TEMPORARY.match(entry.name)
        if match is None or not entry.is_symlink():
            continue
        try:
            os.kill(int(match.group(1)), 0)
            continue  # its process is alive and may be about to rename it
        except ProcessLookupError:
            pass
        except PermissionError:
            continue
        if remove_quietly(entry):
            removed.append(entry)
    return removed


def remove_quietly(path: Path) -> bool:
    """Unlink a file or symlink; return False if it was already gone."""
    try:
        os.unlink(path)
        return True
    except FileNotFoundError:
        return False


_SAFE_BYTES = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")


def escape_for_file_name(name: str) -> str:
    """ClickHouse's escaping of database/table names in paths: bytes other than [A-Za-z0-9_] → %XX."""
    return "".join(chr(b) if b in _SAFE_BYTES else f"%{b:02X}" for b in name.encode("utf-8"))


def unescape_for_file_name(escaped: str) -> str:
    """Inverse of escape_for_file_name (also accepts lower-case hex, as ClickHouse does)."""
    out = bytearray()
    i = 0
    raw = escaped.encode("utf-8")
    while i < len(raw):
        hex_digits = raw[i + 1:i + 3]
        if raw[i] == 0x25 and len(hex_digits) == 2 and all(c in b"0123456789abcdefABCDEF" for c in hex_digits):
            out.append(int(hex_digits, 16))
            i += 3
        else:
            out.append(raw[i])
            i += 1
    return out.decode("utf-8")


class FileLock:
    """An flock(2) lock on a file, shared or exclusive; released on close or process death.

    flock locks belong to the open file description, so two FileLocks on the same file in one
    process conflict exactly as they would across processes — what lets one process both read a
    table and run the collector without fooling itself.
    """

    def __init__(self, path: Path, *, exclusive: bool, blocking: bool, create: bool = True) -> None:
        self.path = path
        self._fd: int | None = None
        flags = os.O_RDWR | (os.O_CREAT if create else 0)
        self._fd = os.open(path, flags, 0o644)
        operation = fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH
        if not blocking:
            operation |= fcntl.LOCK_NB
        try:
            fcntl.flock(self._fd, operation)
        except BlockingIOError:
            os.close(self._fd)
            self._fd = None
            raise

    @classmethod
    def try_acquire(cls, path: Path, *, exclusive: bool, create: bool = True) -> FileLock | None:
        """The lock if it is free right now, else None (never waits)."""
        try:
            return cls(path, exclusive=exclusive, blocking=False, create=create)
        except BlockingIOError:
            return None

    def still_linked(self) -> bool:
        """True if the locked file is still the one at ``path`` (not unlinked or renamed away)."""
        if self._fd is None:
            return False
        try:
            on_disk = os.stat(self.path)
        except FileNotFoundError:
            return False
        mine = os.fstat(self._fd)
        return (on_disk.st_dev, on_disk.st_ino) == (mine.st_dev, mine.st_ino)

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> FileLock:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()

    def __del__(self) -> None:
        self.release()

"""PartStore: one table's parts on a storage policy, whatever the layout.

Writes a part atomically (temporary directory on each disk, fsync, rename), reads whole files or
byte ranges with the units fetched from several disks in parallel and each unit's checksum
verified, serves degraded reads from a mirror or from parity with a warning, and keeps the
maintenance operations: rename, remove, move between volumes, export to a plain ClickHouse part
directory, rebuild of a replaced disk and scrub. The on-disk layout is format_spec/storage.md.
"""

from __future__ import annotations

import os
import shutil
import struct
import threading
import uuid
import warnings
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from tqdm import tqdm

from spark_mergetree.errors import InvalidOptionError, StorageError
from spark_mergetree.storage.parity import unit_checksum, xor_parity
from spark_mergetree.storage.policy import Disk, StoragePolicy, Volume
from spark_mergetree.storage.stripe_map import (
    IN_PLAIN_FILE,
    PLAIN_MAP_SUFFIX,
    STRIPED_MAP_NAME,
    UNITS_FILE_NAME,
    StripeMap,
    check_file_name,
    plan,
)

FileBytes = bytes | bytearray | memoryview
TMP_PREFIX = "tmp_"
DELETE_PREFIX = "delete_tmp_"
_NOT_PARTS = ("tmp", "delete_tmp_", "detached", "_", ".", "moving")
#: A compressed block starts with a 16-byte checksum and a 9-byte header (method, sizes).
_BLOCK_HEADER = 25
#: Method bytes of ClickHouse codecs: NONE, LZ4, and the 0x90.. family (ZSTD, Multiple, Delta, ...).
_CODEC_BYTES = frozenset({0x02, 0x82, *range(0x90, 0xA0)})


class DegradedReadWarning(UserWarning):
    """Bytes were served from a mirror or rebuilt from parity because a disk failed (names disk, part)."""


@dataclass(frozen=True)
class PartLocation:
    """Where a part lives: its volume, that volume's layout, and the disks holding its bytes."""

    volume: str
    layout: str
    disks: tuple[str, ...]


@dataclass
class ScrubProblem:
    part: str
    disk: str
    kind: str  # "missing", "truncated", "checksum", "parity", "map"
    file: str | None = None
    unit: int | None = None
    detail: str = ""

    def __str__(self) -> str:
        where = f"part {self.part} disk {self.disk}"
        if self.file is not None:
            where += f" file {self.file}"
        if self.unit is not None:
            where += f" unit {self.unit}"
        return f"{where}: {self.kind} {self.detail}".rstrip()


@dataclass
class ScrubReport:
    parts_checked: int = 0
    units_checked: int = 0
    parity_checked: int = 0
    unverified_parts: list[str] = field(default_factory=list)
    problems: list[ScrubProblem] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def __str__(self) -> str:
        head = (f"scrub: {self.parts_checked} parts, {self.units_checked} unit copies, "
                f"{self.parity_checked} parity units, {len(self.problems)} problems")
        return "\n".join([head, *map(str, self.problems)])


@dataclass
class RebuildReport:
    disk: str
    parts_rebuilt: list[str] = field(default_factory=list)
    bytes_written: int = 0


class _UnitFault(Exception):
    """A unit copy that could not be used: missing file, short read or checksum mismatch."""

    def __init__(self, disk: str, kind: str, detail: str) -> None:
        super().__init__(f"disk {disk}: {kind} ({detail})")
        self.disk, self.kind, self.detail = disk, kind, detail


@dataclass
class _OpenPart:
    name: str
    volume: Volume
    disks: list[Disk]  # the map's disks (plain layouts: the disks holding a copy)
    stripe_map: StripeMap | None  # None: a plain directory written without a map (e.g. by ClickHouse)
    map_bytes: bytes | None = None
    map_problems: list[tuple[str, str]] = field(default_factory=list)  # (disk, what is wrong)


def compressed_block_starts(data: FileBytes) -> np.ndarray | None:
    """Offsets of the compressed blocks of a ClickHouse `.bin` stream, or None if it is not one.

    Used to re-stripe parts that carry no recorded cut points; one Python step per block.
    """
    view = memoryview(data).cast("B")
    starts = []
    position = 0
    while position < len(view):
        if position + _BLOCK_HEADER > len(view) or view[position + 16] not in _CODEC_BYTES:
            return None
        compressed_size = struct.unpack_from("<I", view, position + 17)[0]
        if compressed_size < 9:
            return None
        starts.append(position)
        position += 16 + compressed_size
    return np.asarray(starts, dtype=np.int64) if position == len(view) else None


# Ranges at least this long are returned as read-only memoryviews rather than copied into bytes.
_ZERO_COPY_BYTES = 1 << 20


def _scratch(length: int) -> memoryview:
    """A writable buffer that is about to be filled completely: numpy skips bytearray's zero fill."""
    return memoryview(np.empty(length, dtype=np.uint8))


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_file(path: Path, chunks: Sequence[FileBytes]) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        for chunk in chunks:
            view = memoryview(chunk).cast("B")
            while view:
                written = os.write(fd, view)
                view = view[written:]
        os.fsync(fd)
    finally:
        os.close(fd)


_POOL: ThreadPoolExecutor | None = None
_POOL_LOCK = threading.Lock()


def _shared_pool() -> ThreadPoolExecutor:
    """One pool for every store: stores are cheap to create and must not leak threads. Only the
    calling thread submits and waits, never a pool task, so sharing cannot deadlock."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = ThreadPoolExecutor(max_workers=16, thread_name_prefix="mergetree-storage")
        return _POOL


class PartStore:
    """The parts of one table on a StoragePolicy. Obtain with `StoragePolicy.part_store(table_path)`."""

    def __init__(self, policy: StoragePolicy, table_path: str = "") -> None:
        if os.path.isabs(table_path) or ".." in Path(table_path).parts:
            raise InvalidOptionError(f"table_path must be relative to each disk, got {table_path!r}")
        self.policy = policy
        self.table_path = table_path
        self._pool = _shared_pool()
        self._open_parts: dict[str, _OpenPart] = {}
        self._lock = threading.Lock()

    # ---------------------------------------------------------------- paths and lookup

    def table_dir(self, disk: Disk) -> Path:
        return Path(disk.path) / self.table_path

    def _part_dir(self, disk: Disk, part: str) -> Path:
        return self.table_dir(disk) / part

    def _map_path(self, volume: Volume, disk: Disk, part: str) -> Path:
        if volume.striped:
            return self._part_dir(disk, part) / STRIPED_MAP_NAME
        # Plain parts stay byte-for-byte ClickHouse directories (CHECK TABLE rejects unknown files),
        # so their map sits beside the directory.
        return self.table_dir(disk) / (part + PLAIN_MAP_SUFFIX)

    @staticmethod
    def _check_part_name(part: str) -> None:
        if not isinstance(part, str) or not part or "/" in part or part.startswith(_NOT_PARTS) \
                or part.endswith(PLAIN_MAP_SUFFIX):
            raise InvalidOptionError(
                f"part name {part!r} is not valid: it must be non-empty, contain no '/', and not start with "
                f"{', '.join(repr(p) for p in _NOT_PARTS)}")

    def _holders(self, part: str) -> tuple[Volume, list[Disk]] | None:
        for volume in self.policy.volumes:
            holders = [d for d in volume.disks if self._part_dir(d, part).is_dir()]
            if holders:
                return volume, holders
        return None

    def list_parts(self) -> list[str]:
        """Names of the part directories on every disk of the policy (temporary ones excluded)."""
        names: set[str] = set()
        for volume in self.policy.volumes:
            for disk in volume.disks:
                try:
                    entries = list(os.scandir(self.table_dir(disk)))
                except (FileNotFoundError, NotADirectoryError):
                    continue
                names.update(e.name for e in entries if e.is_dir() and not e.name.startswith(_NOT_PARTS))
        return sorted(names)

    def _open(self, part: str) -> _OpenPart:
        with self._lock:
            cached = self._open_parts.get(part)
        if cached is not None:
            return cached
        self._check_part_name(part)
        found = self._holders(part)
        if found is None:
            missing = [f"{d.name} ({d.path})" for v in self.policy.volumes for d in v.disks
                       if not os.path.isdir(d.path)]
            raise StorageError(f"part {part!r} not found on any disk of storage policy {self.policy.name!r} "
                               f"(table path {self.table_path!r})"
                               + (f"; missing disk directories: {', '.join(missing)}" if missing else ""))
        volume, holders = found
        stripe_map, map_bytes, damaged = None, None, []
        for disk in holders:
            path = self._map_path(volume, disk, part)
            try:
                data = path.read_bytes()
                stripe_map = StripeMap.from_bytes(data, f"part {part} disk {disk.name} {path.name}")
                map_bytes = data
                break
            except FileNotFoundError:
                damaged.append((disk.name, f"{path.name} missing"))
            except StorageError as e:
                damaged.append((disk.name, str(e)))
        if stripe_map is None and volume.striped:
            raise StorageError(f"part {part!r}: no readable stripe map on any disk of volume {volume.name!r}: "
                               + "; ".join(f"disk {d}: {what}" for d, what in damaged))
        if stripe_map is not None:
            try:
                disks = [volume.disk(name) for name in stripe_map.disks]
            except InvalidOptionError as e:
                raise StorageError(f"part {part!r}: its stripe map names a disk not in volume "
                                   f"{volume.name!r}: {e}") from e
        else:
            disks = holders
        opened = _OpenPart(part, volume, disks, stripe_map, map_bytes,
                           [(d, what) for d, what in damaged if "missing" not in what or stripe_map is not None])
        with self._lock:
            self._open_parts[part] = opened
        return opened

    def _forget(self, *parts: str) -> None:
        with self._lock:
            for part in parts:
                self._open_parts.pop(part, None)

    # ---------------------------------------------------------------- metadata queries

    def part_location(self, part: str) -> PartLocation:
        opened = self._open(part)
        return PartLocation(opened.volume.name, opened.volume.layout, tuple(d.name for d in opened.disks))

    def list_files(self, part: str) -> list[str]:
        opened = self._open(part)
        if opened.stripe_map is not None:
            return sorted(opened.stripe_map.files)
        for disk in opened.disks:
            try:
                return sorted(e.name for e in os.scandir(self._part_dir(disk, part)) if e.is_file())
            except FileNotFoundError:
                continue
        raise StorageError(f"part {part!r}: directory vanished from disks {[d.name for d in opened.disks]}")

    def exists(self, part: str, name: str | None = None) -> bool:
        """Whether the part (and, with `name`, that file of it) exists."""
        if self._holders(part) is None:
            self._forget(part)  # another process may have removed it since it was opened here
            return False
        try:
            opened = self._open(part)
        except StorageError:
            return False
        if name is None:
            return True
        if opened.stripe_map is not None:
            return name in opened.stripe_map.files
        return any((self._part_dir(d, part) / name).is_file() for d in opened.disks)

    def file_size(self, part: str, name: str) -> int:
        opened = self._open(part)
        if opened.stripe_map is not None:
            entry = opened.stripe_map.files.get(name)
            if entry is None:
                raise StorageError(f"part {part!r} has no file {name!r}; files: {', '.join(opened.stripe_map.files)}")
            return entry.size
        for disk in opened.disks:
            try:
                return (self._part_dir(disk, part) / name).stat().st_size
            except FileNotFoundError:
                continue
        raise StorageError(f"part {part!r} has no file {name!r} on disks {[d.name for d in opened.disks]}")

    def boundaries(self, part: str, name: str) -> np.ndarray | None:
        """The cut points recorded when the file was written (None for files stored whole)."""
        opened = self._open(part)
        if opened.stripe_map is None:
            return None
        entry = opened.stripe_map.files.get(name)
        if entry is None:
            raise StorageError(f"part {part!r} has no file {name!r}")
        return None if entry.boundaries is None else np.asarray(entry.boundaries, dtype=np.int64)

    def part_bytes(self, part: str) -> int:
        return sum(self.file_size(part, name) for name in self.list_files(part))

    # ---------------------------------------------------------------- writing

    def write_part(self, part_name: str, files: Mapping[str, FileBytes],
                   boundaries: Mapping[str, np.ndarray] | None = None) -> None:
        """Write a new part atomically on the volume the policy chooses for its size.

        `boundaries[file]` are byte offsets where the file may be cut (compressed block starts);
        such files are striped over raid0/raid5 disks in units of whole blocks. Other files are
        stored whole (and on every disk of a striped volume).
        """
        self._check_part_name(part_name)
        views = self._check_files(part_name, files)
        if self._holders(part_name) is not None:
            raise StorageError(f"part {part_name!r} already exists in table path {self.table_path!r}")
        volume = self.policy.choose_volume(sum(len(v) for v in views.values()))
        self._write(part_name, views, boundaries, volume)

    def _check_files(self, part: str, files: Mapping[str, FileBytes]) -> dict[str, memoryview]:
        if not isinstance(files, Mapping) or not files:
            raise InvalidOptionError(f"part {part!r}: files must be a non-empty mapping of name to bytes")
        views = {}
        for name, data in files.items():
            check_file_name(name, part)
            try:
                views[name] = memoryview(data).cast("B")
            except TypeError as e:
                raise InvalidOptionError(f"part {part!r} file {name!r}: expected bytes or memoryview, "
                                         f"got {type(data).__name__}") from e
        return views

    def _write(self, part: str, views: dict[str, memoryview], boundaries: Mapping[str, np.ndarray] | None,
               volume: Volume) -> None:
        if volume.layout == "single":
            # One plain directory: ClickHouse's own block checksums verify it; no map to keep.
            self._write_plain(part, views, volume.disks[0])
            return
        if volume.layout == "jbod":
            targets = [volume.choose_jbod_disk()]
        else:
            targets = list(volume.disks)
        stripe_map = plan(volume.layout, [d.name for d in targets], volume.stripe_unit_bytes, views, boundaries)
        names = list(stripe_map.files)
        unit_views = [views[names[f]][o:o + n] for f, o, n in
                      zip(stripe_map.unit_file.tolist(), stripe_map.unit_offset.tolist(),
                          stripe_map.unit_length.tolist())]
        stripe_map.unit_hash = [unit_checksum(v) for v in unit_views]
        parities = list(self._pool.map(
            lambda s: xor_parity(unit_views[stripe_map.stripe_first_unit[s]:
                                            stripe_map.stripe_first_unit[s] + stripe_map.stripe_unit_count[s]],
                                 int(stripe_map.parity_length[s])),
            range(stripe_map.stripe_first_unit.size)))
        stripe_map.parity_hash = [unit_checksum(p) for p in parities]
        map_bytes = stripe_map.to_bytes()

        def write_disk(index: int) -> None:
            disk = targets[index]
            table_dir = self.table_dir(disk)
            tmp_dir = table_dir / (TMP_PREFIX + part)
            table_dir.mkdir(parents=True, exist_ok=True)
            if tmp_dir.exists():
                shutil.rmtree(tmp_dir)  # left by a crashed write of the same part
            tmp_dir.mkdir()
            if volume.striped:
                for name, entry in stripe_map.files.items():
                    if not entry.striped:
                        _write_file(tmp_dir / name, [views[name]])
                pieces = [(o, unit_views[u]) for u, o in enumerate(stripe_map.unit_disk_offset.tolist())
                          if stripe_map.unit_disk[u] == index]
                pieces += [(o, parities[s]) for s, o in enumerate(stripe_map.parity_disk_offset.tolist())
                           if stripe_map.parity_disk[s] == index]
                pieces.sort(key=lambda p: p[0])
                _write_file(tmp_dir / UNITS_FILE_NAME, [p[1] for p in pieces])
                _write_file(tmp_dir / STRIPED_MAP_NAME, [map_bytes])
            else:
                for name in stripe_map.files:
                    _write_file(tmp_dir / name, [views[name]])
                _write_file(table_dir / (TMP_PREFIX + part + PLAIN_MAP_SUFFIX), [map_bytes])
            _fsync_dir(tmp_dir)

        # Wait for every disk before judging, so a failure never races a cleanup with a running write.
        futures = [self._pool.submit(write_disk, i) for i in range(len(targets))]
        wait(futures)
        errors = [(targets[i].name, f.exception()) for i, f in enumerate(futures) if f.exception() is not None]
        if errors:
            self._discard_tmp(part, targets)
            disk_name, first = errors[0]
            if not isinstance(first, OSError):
                raise first
            raise StorageError(f"part {part!r}: writing to volume {volume.name!r} failed on disk "
                               f"{', '.join(d for d, _e in errors)}: {first}") from first
        for disk in targets:
            table_dir = self.table_dir(disk)
            if not volume.striped:
                # The map first: a visible plain part then always has its checksums.
                os.replace(table_dir / (TMP_PREFIX + part + PLAIN_MAP_SUFFIX), table_dir / (part + PLAIN_MAP_SUFFIX))
            os.rename(table_dir / (TMP_PREFIX + part), table_dir / part)
            _fsync_dir(table_dir)
        self._forget(part)

    def _write_plain(self, part: str, views: dict[str, memoryview], disk: Disk) -> None:
        table_dir = self.table_dir(disk)
        tmp_dir = table_dir / (TMP_PREFIX + part)
        try:
            table_dir.mkdir(parents=True, exist_ok=True)
            if tmp_dir.exists():
                shutil.rmtree(tmp_dir)  # left by a crashed write of the same part
            tmp_dir.mkdir()
            for name, view in views.items():
                _write_file(tmp_dir / name, [view])
            _fsync_dir(tmp_dir)
        except OSError as error:
            self._discard_tmp(part, [disk])
            raise StorageError(f"part {part!r}: writing to disk {disk.name!r} failed: {error}") from error
        os.rename(tmp_dir, table_dir / part)
        _fsync_dir(table_dir)
        self._forget(part)

    def _discard_tmp(self, part: str, disks: Sequence[Disk]) -> None:
        for disk in disks:
            shutil.rmtree(self.table_dir(disk) / (TMP_PREFIX + part), ignore_errors=True)
            try:
                os.unlink(self.table_dir(disk) / (TMP_PREFIX + part + PLAIN_MAP_SUFFIX))
            except (FileNotFoundError, NotADirectoryError):
                pass  # never written, or the disk itself is what failed

    def cleanup_tmp(self) -> list[str]:
        """Remove leftovers of interrupted writes and removals; returns the paths removed.

        Run it when no writer is active on the table (e.g. when the table is opened): an
        in-progress write's `tmp_*` directory looks exactly like a leftover.
        """
        removed = []
        for volume in self.policy.volumes:
            for disk in volume.disks:
                table_dir = self.table_dir(disk)
                if not table_dir.is_dir():
                    continue
                for entry in os.scandir(table_dir):
                    stale = entry.name.startswith((TMP_PREFIX, DELETE_PREFIX)) or (
                        entry.name.endswith(PLAIN_MAP_SUFFIX)
                        and not (table_dir / entry.name[: -len(PLAIN_MAP_SUFFIX)]).is_dir())
                    if stale:
                        if entry.is_dir():
                            shutil.rmtree(entry.path, ignore_errors=True)
                        else:
                            os.unlink(entry.path)
                        removed.append(entry.path)
        return removed

    # ---------------------------------------------------------------- reading

    def read_file(self, part: str, name: str) -> bytes:
        """The whole file, every unit verified; degraded reads warn with DegradedReadWarning."""
        data = self.read_range(part, name, 0, self.file_size(part, name))
        return data if isinstance(data, bytes) else data.tobytes()

    def read_range(self, part: str, name: str, start: int, end: int, verify: bool = True) -> bytes | memoryview:
        """Bytes [start, end) of a file of a part.

        `verify=False` skips the unit checksums (missing and short units are still repaired): for
        callers that verify the bytes themselves, such as compressed blocks, and retry with
        `verify=True` when they find damage."""
        opened = self._open(part)
        size = self.file_size(part, name)
        if not (isinstance(start, (int, np.integer)) and isinstance(end, (int, np.integer))
                and 0 <= start <= end <= size):
            raise InvalidOptionError(f"part {part!r} file {name!r}: range [{start}, {end}) is not within "
                                     f"[0, {size}]")
        start, end = int(start), int(end)
        if opened.stripe_map is None:
            return self._read_unmapped(opened, name, start, end)
        stripe_map = opened.stripe_map
        units = stripe_map.units_of(name)
        offsets = stripe_map.unit_offset[units.start:units.stop]
        lengths = stripe_map.unit_length[units.start:units.stop]
        first = units.start + int(np.searchsorted(offsets + lengths, start, side="right"))
        last = units.start + int(np.searchsorted(offsets, end, side="left"))
        if start == end:
            return b""
        complete = opened.volume.layout != "raid1" or all(self._part_dir(d, part).is_dir() for d in opened.disks)
        if not opened.volume.striped and complete:
            # Plain copies (jbod, raid1 with every mirror present): one read from one copy; mirrors
            # take turns by range so concurrent reads spread over the disks. A missing mirror
            # takes the unit path, which reports it.
            disk = opened.disks[(start // max(1, opened.volume.stripe_unit_bytes)) % len(opened.disks)]
            fast = self._read_contiguous(opened, name, first, last, start, end, verify, disk)
            if fast is not None:
                return fast
        out_view = _scratch(end - start)
        targets: dict[int, memoryview] = {}
        partial: list[tuple[int, memoryview]] = []
        for u in range(first, last):
            a, n = int(stripe_map.unit_offset[u]), int(stripe_map.unit_length[u])
            if a >= start and a + n <= end:
                targets[u] = out_view[a - start:a - start + n]
            else:
                buffer = _scratch(n)
                targets[u] = buffer
                partial.append((u, buffer))
        self._fetch_units(opened, targets, verify)
        for u, buffer in partial:
            a, n = int(stripe_map.unit_offset[u]), int(stripe_map.unit_length[u])
            lo, hi = max(a, start), min(a + n, end)
            out_view[lo - start:hi - start] = buffer[lo - a:hi - a]
        # Big ranges (column data) go out without another copy; small files as bytes.
        return out_view.toreadonly() if end - start >= _ZERO_COPY_BYTES else out_view.tobytes()

    def _read_contiguous(self, opened: _OpenPart, name: str, first: int, last: int, start: int, end: int,
                         verify: bool, disk: Disk) -> bytes | None:
        """Plain parts: a single read of the units' span from one copy, each unit verified in place.

        Returns None when anything is off, so the unit-by-unit path reports it precisely.
        """
        stripe_map = opened.stripe_map
        assert stripe_map is not None
        span_start = int(stripe_map.unit_offset[first])
        span_end = int(stripe_map.unit_offset[last - 1] + stripe_map.unit_length[last - 1])
        try:
            with open(self._part_dir(disk, opened.name) / name, "rb", buffering=0) as f:
                data = os.pread(f.fileno(), span_end - span_start, span_start)
        except OSError:
            return None
        if len(data) != span_end - span_start:
            return None
        view = memoryview(data)
        for u in range(first, last) if verify else ():
            a = int(stripe_map.unit_offset[u]) - span_start
            if unit_checksum(view[a:a + int(stripe_map.unit_length[u])]) != stripe_map.unit_hash[u]:
                return None
        if span_start == start and span_end == end:
            return data
        return data[start - span_start:end - span_start]

    def _read_unmapped(self, opened: _OpenPart, name: str, start: int, end: int) -> bytes:
        faults = []
        for disk in opened.disks:
            try:
                with open(self._part_dir(disk, opened.name) / name, "rb") as f:
                    f.seek(start)
                    data = f.read(end - start)
                if len(data) == end - start:
                    if faults:
                        self._warn(opened, faults, name)
                    return data
                faults.append(_UnitFault(disk.name, "truncated", f"{len(data)} of {end - start} bytes"))
            except OSError as e:
                faults.append(_UnitFault(disk.name, "missing", str(e)))
        raise StorageError(f"part {opened.name!r} file {name!r}: unreadable on every disk: "
                           + "; ".join(map(str, faults)))

    def _unit_sources(self, opened: _OpenPart, unit: int) -> list[tuple[Disk, Path, int]]:
        """Where copies of a unit can be read, preferred first: (disk, file, offset)."""
        stripe_map = opened.stripe_map
        assert stripe_map is not None
        disk_index = int(stripe_map.unit_disk[unit])
        if disk_index != IN_PLAIN_FILE:
            disk = opened.disks[disk_index]
            return [(disk, self._part_dir(disk, opened.name) / UNITS_FILE_NAME, int(stripe_map.unit_disk_offset[unit]))]
        name = stripe_map.file_names[int(stripe_map.unit_file[unit])]
        n = len(opened.disks)
        # Mirrors take turns unit by unit, so a raid1 read draws on every disk at once.
        order = [opened.disks[(unit + k) % n] for k in range(n)]
        return [(d, self._part_dir(d, opened.name) / name, int(stripe_map.unit_offset[unit])) for d in order]

    @staticmethod
    def _read_copy(disk: Disk, path: Path, offset: int, target: memoryview, checksum: str | None,
                   descriptors: dict[Path, int]) -> None:
        try:
            fd = descriptors.get(path)
            if fd is None:
                fd = descriptors[path] = os.open(path, os.O_RDONLY)
            got = os.preadv(fd, [target], offset) if len(target) else 0
        except FileNotFoundError as e:
            raise _UnitFault(disk.name, "missing", f"{path}: {e.strerror}") from None
        except OSError as e:
            raise _UnitFault(disk.name, "missing", f"{path}: {e}") from None
        if got != len(target):
            raise _UnitFault(disk.name, "truncated", f"{path} has {got} of {len(target)} bytes at offset {offset}")
        if checksum is not None and unit_checksum(target) != checksum:
            raise _UnitFault(disk.name, "checksum", f"{path} at offset {offset}, {len(target)} bytes")

    def _fetch_units(self, opened: _OpenPart, targets: dict[int, memoryview], verify: bool = True) -> None:
        """Fill each target with its verified unit: first choices in parallel, one task per disk."""
        stripe_map = opened.stripe_map
        assert stripe_map is not None
        by_disk: dict[str, list[int]] = {}
        for u in targets:
            by_disk.setdefault(self._unit_sources(opened, u)[0][0].name, []).append(u)

        def read_disk(units: list[int]) -> list[tuple[int, _UnitFault]]:
            failed = []
            descriptors: dict[Path, int] = {}
            try:
                for u in units:
                    disk, path, offset = self._unit_sources(opened, u)[0]
                    try:
                        self._read_copy(disk, path, offset, targets[u],
                                        stripe_map.unit_hash[u] if verify else None, descriptors)
                    except _UnitFault as fault:
                        failed.append((u, fault))
            finally:
                for fd in descriptors.values():
                    os.close(fd)
            return failed

        groups = list(by_disk.values())
        if len(groups) == 1:
            results = [read_disk(groups[0])]
        else:
            results = list(self._pool.map(read_disk, groups))
        failures = [f for result in results for f in result]
        if not failures:
            return
        # Recovery reads the rest of each stripe (or another mirror); spread it over the pool too.
        list(self._pool.map(lambda failure: self._recover_unit(opened, failure[0], targets[failure[0]],
                                                               [failure[1]]), failures))
        self._warn(opened, [fault for _u, fault in failures],
                   opened.stripe_map.file_names[int(opened.stripe_map.unit_file[failures[0][0]])],
                   from_parity=any(stripe_map.unit_disk[u] != IN_PLAIN_FILE for u, _f in failures))

    def _recover_unit(self, opened: _OpenPart, unit: int, target: memoryview, faults: list[_UnitFault]) -> None:
        """Fill `target` from another mirror or from the rest of the stripe, or raise StorageError."""
        stripe_map = opened.stripe_map
        assert stripe_map is not None
        descriptors: dict[Path, int] = {}
        try:
            for disk, path, offset in self._unit_sources(opened, unit)[1:]:
                try:
                    self._read_copy(disk, path, offset, target, stripe_map.unit_hash[unit], descriptors)
                    return
                except _UnitFault as fault:
                    faults.append(fault)
            stripe = int(stripe_map.unit_stripe[unit])
            if opened.volume.layout == "raid5" and stripe >= 0:
                rebuilt = self._rebuild_from_stripe(opened, stripe, unit, faults, descriptors)
                if rebuilt is not None:
                    target[:] = rebuilt
                    return
        finally:
            for fd in descriptors.values():
                os.close(fd)
        name = stripe_map.file_names[int(stripe_map.unit_file[unit])]
        a, n = int(stripe_map.unit_offset[unit]), int(stripe_map.unit_length[unit])
        disks = sorted({f.disk for f in faults})
        raise StorageError(
            f"part {opened.name!r} file {name!r}: bytes [{a}, {a + n}) cannot be recovered on volume "
            f"{opened.volume.name!r} ({opened.volume.layout}); failed disks: {', '.join(disks)}: "
            + "; ".join(map(str, faults)))

    def _rebuild_from_stripe(self, opened: _OpenPart, stripe: int, unit: int, faults: list[_UnitFault],
                             descriptors: dict[Path, int]) -> np.ndarray | None:
        """XOR of the stripe's other data units and its parity, cut to the unit's length."""
        stripe_map = opened.stripe_map
        assert stripe_map is not None
        first, count = int(stripe_map.stripe_first_unit[stripe]), int(stripe_map.stripe_unit_count[stripe])
        pieces: list[memoryview] = []
        for member in range(first, first + count):
            if member == unit:
                continue
            buffer = _scratch(int(stripe_map.unit_length[member]))
            disk, path, offset = self._unit_sources(opened, member)[0]
            try:
                self._read_copy(disk, path, offset, buffer, stripe_map.unit_hash[member], descriptors)
            except _UnitFault as fault:
                faults.append(fault)
                return None
            pieces.append(buffer)
        parity_disk = opened.disks[int(stripe_map.parity_disk[stripe])]
        parity = _scratch(int(stripe_map.parity_length[stripe]))
        try:
            self._read_copy(parity_disk, self._part_dir(parity_disk, opened.name) / UNITS_FILE_NAME,
                            int(stripe_map.parity_disk_offset[stripe]), parity,
                            stripe_map.parity_hash[stripe], descriptors)
        except _UnitFault as fault:
            faults.append(fault)
            return None
        rebuilt = xor_parity([parity, *pieces], len(parity))[: int(stripe_map.unit_length[unit])]
        if unit_checksum(rebuilt) != stripe_map.unit_hash[unit]:
            faults.append(_UnitFault(parity_disk.name, "parity", f"stripe {stripe} does not rebuild unit {unit}"))
            return None
        return rebuilt

    def _warn(self, opened: _OpenPart, faults: list[_UnitFault], name: str | None,
              from_parity: bool = False) -> None:
        disks = sorted({f.disk for f in faults})
        what = f" file {name!r}" if name else ""
        warnings.warn(
            f"degraded read of part {opened.name!r}{what} on volume {opened.volume.name!r} "
            f"({opened.volume.layout}): disk {', '.join(disks)} failed ({faults[0]}"
            f"{f' and {len(faults) - 1} more' if len(faults) > 1 else ''}); served from "
            f"{'parity' if from_parity else 'another copy'}",
            DegradedReadWarning, stacklevel=3)

    # ---------------------------------------------------------------- part operations

    def remove_part(self, part: str, *, missing_ok: bool = False) -> None:
        """Delete the part from every disk (renamed to delete_tmp_* first, as ClickHouse does).

        Safe beside another deleter of the same part: each renames it to a name of its own first,
        and a part already gone is skipped (with `missing_ok`, also when gone everywhere)."""
        self._check_part_name(part)
        found = self._holders(part)
        if found is None:
            if missing_ok:
                return
            raise StorageError(f"part {part!r} not found in table path {self.table_path!r}")
        volume, holders = found
        for disk in holders:
            table_dir = self.table_dir(disk)
            doomed = table_dir / f"{DELETE_PREFIX}{part}_{uuid.uuid4().hex[:8]}"
            try:
                os.rename(table_dir / part, doomed)
            except FileNotFoundError:
                continue  # another deleter was first
            _fsync_dir(table_dir)
            if not volume.striped:
                try:
                    os.unlink(self._map_path(volume, disk, part))
                except FileNotFoundError:
                    pass
            # Recovery may be deleting this delete_tmp_ directory too: both finish the job.
            shutil.rmtree(doomed, ignore_errors=True)
        self._forget(part)

    def rename_part(self, old: str, new: str) -> None:
        self._check_part_name(old)
        self._check_part_name(new)
        found = self._holders(old)
        if found is None:
            raise StorageError(f"part {old!r} not found in table path {self.table_path!r}")
        if self._holders(new) is not None:
            raise StorageError(f"cannot rename part {old!r} to {new!r}: {new!r} already exists")
        volume, holders = found
        for disk in holders:
            table_dir = self.table_dir(disk)
            os.rename(table_dir / old, table_dir / new)
            if not volume.striped and self._map_path(volume, disk, old).exists():
                os.replace(self._map_path(volume, disk, old), self._map_path(volume, disk, new))
            _fsync_dir(table_dir)
        self._forget(old, new)

    def _read_all(self, part: str) -> tuple[dict[str, bytes], dict[str, np.ndarray]]:
        files = {name: self.read_file(part, name) for name in self.list_files(part)}
        cut: dict[str, np.ndarray] = {}
        for name, data in files.items():
            bounds = self.boundaries(part, name)
            if bounds is None and self._open(part).stripe_map is None and name.endswith(".bin"):
                bounds = compressed_block_starts(data)
            if bounds is not None:
                cut[name] = bounds
        return files, cut

    def move_part(self, part: str, volume: str) -> None:
        """Move a part to another volume of the policy, re-laid out for that volume."""
        opened = self._open(part)
        destination = self.policy.volume(volume)
        if destination is opened.volume:
            return
        files, cut = self._read_all(part)
        views = {name: memoryview(data) for name, data in files.items()}
        size = sum(len(v) for v in views.values())
        if destination.max_data_part_size is not None and size > destination.max_data_part_size:
            raise InvalidOptionError(f"part {part!r} ({size} bytes) exceeds max_data_part_size_bytes "
                                     f"{destination.max_data_part_size} of volume {volume!r}")
        self._write(part, views, cut, destination)
        source, holders = opened.volume, [d for d in opened.disks if self._part_dir(d, part).is_dir()]
        for disk in holders:
            table_dir = self.table_dir(disk)
            doomed = table_dir / (DELETE_PREFIX + part)
            os.rename(table_dir / part, doomed)
            if not source.striped:
                try:
                    os.unlink(self._map_path(source, disk, part))
                except FileNotFoundError:
                    pass
            # Recovery may be deleting this delete_tmp_ directory too: both finish the job.
            shutil.rmtree(doomed, ignore_errors=True)
        self._forget(part)

    def move_parts_by_factor(self) -> list[tuple[str, str, str]]:
        """Background move: while a volume's free fraction is below move_factor, move its biggest
        parts to the next volume. Returns (part, from volume, to volume) per move."""
        moves = []
        volumes = self.policy.volumes
        for index, volume in enumerate(volumes[:-1]):
            while volume.free_fraction() < self.policy.move_factor:
                parts = [p for p in self.list_parts() if self._open(p).volume is volume]
                if not parts:
                    break
                biggest = max(parts, key=self.part_bytes)
                size = self.part_bytes(biggest)
                target = next((v for v in volumes[index + 1:]
                               if v.max_data_part_size is None or size <= v.max_data_part_size), None)
                if target is None:
                    break
                self.move_part(biggest, target.name)
                moves.append((biggest, volume.name, target.name))
        return moves

    def import_plain(self, source_dir: str | os.PathLike[str], part_name: str | None = None) -> str:
        """Store a plain part directory (e.g. one ClickHouse wrote) as a new part of this table.

        `.bin` files are cut at their compressed block starts, so striped volumes spread them.
        Returns the part name (the directory's name unless `part_name` is given).
        """
        source = Path(source_dir)
        if not source.is_dir():
            raise InvalidOptionError(f"import_plain: {source} is not a directory")
        files = {p.name: p.read_bytes() for p in sorted(source.iterdir()) if p.is_file()}
        if not files:
            raise InvalidOptionError(f"import_plain: {source} holds no files")
        cuts = {}
        for name, data in files.items():
            if name.endswith(".bin"):
                starts = compressed_block_starts(data)
                if starts is not None:
                    cuts[name] = starts
        part = part_name or source.name
        self.write_part(part, files, cuts)
        return part

    def export_plain(self, part: str, dest_dir: str | os.PathLike[str]) -> Path:
        """Write the part as a plain ClickHouse part directory at `dest_dir` (which must not exist)."""
        destination = Path(dest_dir)
        if destination.exists():
            raise StorageError(f"cannot export part {part!r}: {destination} already exists")
        destination.parent.mkdir(parents=True, exist_ok=True)
        staging = destination.parent / (TMP_PREFIX + "export_" + destination.name)
        if staging.exists():
            shutil.rmtree(staging)
        staging.mkdir()
        try:
            for name in self.list_files(part):
                _write_file(staging / name, [self.read_file(part, name)])
            _fsync_dir(staging)
            os.rename(staging, destination)
            _fsync_dir(destination.parent)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        return destination

    # ---------------------------------------------------------------- maintenance

    def rebuild(self, disk_name: str, progress: bool = True) -> RebuildReport:
        """Restore every part's bytes on a replaced (empty or damaged) disk from the other disks.

        The rebuilt files are byte-identical to what was written. Layouts without redundancy
        (single, jbod, raid0) raise StorageError naming the disk.
        """
        volume = next((v for v in self.policy.volumes if any(d.name == disk_name for d in v.disks)), None)
        if volume is None:
            raise InvalidOptionError(f"no disk {disk_name!r} in storage policy {self.policy.name!r}; disks: "
                                     + ", ".join(d.name for v in self.policy.volumes for d in v.disks))
        if volume.layout not in ("raid1", "raid5"):
            raise StorageError(f"disk {disk_name!r} of volume {volume.name!r} cannot be rebuilt: layout "
                               f"{volume.layout} keeps no redundant copy (raid1 and raid5 do)")
        disk = volume.disk(disk_name)
        report = RebuildReport(disk_name)
        self._forget(*self.list_parts())
        parts = [p for p in self.list_parts() if self._open(p).volume is volume]
        table_dir = self.table_dir(disk)
        table_dir.mkdir(parents=True, exist_ok=True)
        for part in tqdm(parts, desc=f"rebuild {disk_name}", unit="part", disable=not progress):
            opened = self._open(part)
            if disk not in opened.disks:
                continue
            staging = table_dir / (TMP_PREFIX + part)
            if staging.exists():
                shutil.rmtree(staging)
            staging.mkdir()
            written = 0
            if volume.striped:
                written += self._rebuild_striped(opened, disk, staging)
            else:
                for name in self.list_files(part):
                    data = self._read_excluding(opened, name, disk)
                    _write_file(staging / name, [data])
                    written += len(data)
                if opened.map_bytes is not None:
                    _write_file(table_dir / (TMP_PREFIX + part + PLAIN_MAP_SUFFIX), [opened.map_bytes])
                    written += len(opened.map_bytes)
            _fsync_dir(staging)
            old = table_dir / part
            if old.exists():
                os.rename(old, table_dir / (DELETE_PREFIX + part))
            if not volume.striped and opened.map_bytes is not None:
                os.replace(table_dir / (TMP_PREFIX + part + PLAIN_MAP_SUFFIX), table_dir / (part + PLAIN_MAP_SUFFIX))
            os.rename(staging, old)
            _fsync_dir(table_dir)
            shutil.rmtree(table_dir / (DELETE_PREFIX + part), ignore_errors=True)
            report.parts_rebuilt.append(part)
            report.bytes_written += written
        self._forget(*parts)
        return report

    def _read_excluding(self, opened: _OpenPart, name: str, excluded: Disk) -> bytes:
        """A file read, verified, from disks other than `excluded` (the one being rebuilt)."""
        if opened.stripe_map is None:
            others = _OpenPart(opened.name, opened.volume, [d for d in opened.disks if d != excluded], None)
            return self._read_unmapped(others, name, 0, self.file_size(opened.name, name))
        stripe_map = opened.stripe_map
        size = stripe_map.files[name].size
        output = bytearray(size)
        out_view = memoryview(output)
        faults: list[_UnitFault] = []
        for u in stripe_map.units_of(name):
            a, n = int(stripe_map.unit_offset[u]), int(stripe_map.unit_length[u])
            descriptors: dict[Path, int] = {}
            try:
                for disk, path, offset in self._unit_sources(opened, u):
                    if disk == excluded:
                        continue  # its copy may be empty or stale: never trust the disk being rebuilt
                    try:
                        self._read_copy(disk, path, offset, out_view[a:a + n], stripe_map.unit_hash[u], descriptors)
                        break
                    except _UnitFault as fault:
                        faults.append(fault)
                else:
                    raise StorageError(f"part {opened.name!r} file {name!r}: no good copy of bytes [{a}, {a + n}) "
                                       f"outside disk {excluded.name}: " + "; ".join(map(str, faults)))
            finally:
                for fd in descriptors.values():
                    os.close(fd)
        return bytes(output)

    def _rebuild_striped(self, opened: _OpenPart, disk: Disk, staging: Path) -> int:
        stripe_map = opened.stripe_map
        assert stripe_map is not None and opened.map_bytes is not None
        index = opened.disks.index(disk)
        written = 0
        for name, entry in stripe_map.files.items():
            if not entry.striped:
                data = self._read_excluding(opened, name, disk)
                _write_file(staging / name, [data])
                written += len(data)
        units = bytearray(stripe_map.disk_units_bytes(index))
        view = memoryview(units)
        descriptors: dict[Path, int] = {}
        try:
            for u in np.flatnonzero(stripe_map.unit_disk == index).tolist():
                stripe = int(stripe_map.unit_stripe[u])
                faults: list[_UnitFault] = []
                rebuilt = self._rebuild_from_stripe(opened, stripe, u, faults, descriptors) if stripe >= 0 else None
                if rebuilt is None:
                    raise StorageError(f"part {opened.name!r}: unit {u} of disk {disk.name} cannot be rebuilt: "
                                       + "; ".join(map(str, faults)))
                o = int(stripe_map.unit_disk_offset[u])
                view[o:o + rebuilt.size] = rebuilt
            for s in np.flatnonzero(stripe_map.parity_disk == index).tolist():
                first, count = int(stripe_map.stripe_first_unit[s]), int(stripe_map.stripe_unit_count[s])
                members = []
                for u in range(first, first + count):
                    buffer = bytearray(int(stripe_map.unit_length[u]))
                    d, path, offset = self._unit_sources(opened, u)[0]
                    try:
                        self._read_copy(d, path, offset, memoryview(buffer), stripe_map.unit_hash[u], descriptors)
                    except _UnitFault as fault:
                        raise StorageError(f"part {opened.name!r}: parity of stripe {s} on disk {disk.name} "
                                           f"cannot be rebuilt: {fault}") from None
                    members.append(buffer)
                parity = xor_parity(members, int(stripe_map.parity_length[s]))
                o = int(stripe_map.parity_disk_offset[s])
                view[o:o + parity.size] = parity
        finally:
            for fd in descriptors.values():
                os.close(fd)
        _write_file(staging / UNITS_FILE_NAME, [units])
        _write_file(staging / STRIPED_MAP_NAME, [opened.map_bytes])
        return written + len(units) + len(opened.map_bytes)

    def scrub(self, progress: bool = False) -> ScrubReport:
        """Read every copy of every unit and every parity unit; report what does not verify."""
        report = ScrubReport()
        self._forget(*self.list_parts())
        for part in tqdm(self.list_parts(), desc="scrub", unit="part", disable=not progress):
            report.parts_checked += 1
            try:
                opened = self._open(part)
            except StorageError as e:
                report.problems.append(ScrubProblem(part, "?", "map", detail=str(e)))
                continue
            if opened.stripe_map is None:
                # A plain directory without a map (a ClickHouse part) or whose only map copy is damaged.
                report.problems.extend(ScrubProblem(part, disk, "map", detail=what)
                                       for disk, what in opened.map_problems)
                report.unverified_parts.append(part)
                continue
            for problem in self._scrub_part(opened, report):
                report.problems.append(problem)
        return report

    def _scrub_part(self, opened: _OpenPart, report: ScrubReport) -> Iterator[ScrubProblem]:
        stripe_map = opened.stripe_map
        assert stripe_map is not None
        part = opened.name
        for disk in opened.disks:
            path = self._map_path(opened.volume, disk, part)
            try:
                if path.read_bytes() != opened.map_bytes:
                    StripeMap.from_bytes(path.read_bytes(), f"{path}")
                    yield ScrubProblem(part, disk.name, "map", detail=f"{path.name} differs from other disks")
            except FileNotFoundError:
                yield ScrubProblem(part, disk.name, "missing", STRIPED_MAP_NAME if opened.volume.striped
                                   else path.name, detail=str(path))
            except StorageError as e:
                yield ScrubProblem(part, disk.name, "map", path.name, detail=str(e))
        descriptors: dict[Path, int] = {}
        data_ok = np.ones(stripe_map.unit_file.size, dtype=bool)
        try:
            for u in range(stripe_map.unit_file.size):
                buffer = _scratch(int(stripe_map.unit_length[u]))
                for disk, path, offset in self._unit_sources(opened, u):
                    report.units_checked += 1
                    try:
                        self._read_copy(disk, path, offset, buffer, stripe_map.unit_hash[u], descriptors)
                    except _UnitFault as fault:
                        data_ok[u] = False
                        yield ScrubProblem(part, disk.name, fault.kind,
                                           stripe_map.file_names[int(stripe_map.unit_file[u])], u, fault.detail)
            for s in range(stripe_map.stripe_first_unit.size):
                report.parity_checked += 1
                disk = opened.disks[int(stripe_map.parity_disk[s])]
                parity = _scratch(int(stripe_map.parity_length[s]))
                try:
                    self._read_copy(disk, self._part_dir(disk, part) / UNITS_FILE_NAME,
                                    int(stripe_map.parity_disk_offset[s]), parity, stripe_map.parity_hash[s],
                                    descriptors)
                except _UnitFault as fault:
                    yield ScrubProblem(part, disk.name, fault.kind, UNITS_FILE_NAME, None,
                                       f"parity of stripe {s}: {fault.detail}")
                    continue
                first, count = int(stripe_map.stripe_first_unit[s]), int(stripe_map.stripe_unit_count[s])
                if not data_ok[first:first + count].all():
                    continue
                members = []
                for u in range(first, first + count):
                    buffer = bytearray(int(stripe_map.unit_length[u]))
                    d, path, offset = self._unit_sources(opened, u)[0]
                    self._read_copy(d, path, offset, memoryview(buffer), stripe_map.unit_hash[u], descriptors)
                    members.append(buffer)
                if unit_checksum(xor_parity(members, len(parity))) != stripe_map.parity_hash[s]:
                    yield ScrubProblem(part, disk.name, "parity", UNITS_FILE_NAME, None,
                                       f"stripe {s}: XOR of its data units differs from the stored parity")
        finally:
            for fd in descriptors.values():
                os.close(fd)

    # ---------------------------------------------------------------- lifecycle

    def close(self) -> None:
        """Drop cached stripe maps (the thread pool is shared and stays)."""
        self._forget(*list(self._open_parts))

    def __enter__(self) -> PartStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

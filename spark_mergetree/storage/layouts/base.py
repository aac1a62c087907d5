"""The interface every layout implements, and what layouts share: reading verified unit copies in
parallel, falling back to another copy or to parity, and the generic parts of rebuild and scrub.

A layout turns a part's files into what each disk receives (`stage`), reads byte ranges back
(`read_range`), recreates one disk's share (`rebuild_part`) and checks every copy (`scrub_part`).
All I/O goes through the `FileSystem` of each disk, all placement through the part's `StripeMap`.
"""

from __future__ import annotations

import os
import threading
import warnings
from abc import ABC, abstractmethod
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from spark_mergetree.errors import StorageError
from spark_mergetree.fileops import scratch
from spark_mergetree.storage.filesystem import Files, RangeReader
from spark_mergetree.storage.parity import unit_checksum
from spark_mergetree.storage.policy import Disk, Volume
from spark_mergetree.storage.reports import DegradedReadWarning, ScrubProblem, ScrubReport
from spark_mergetree.storage.stripe_map import (
    IN_PLAIN_FILE,
    STRIPED_MAP_NAME,
    SUBPART_SUFFIX,
    UNITS_FILE_NAME,
    StripeMap,
    cut_files,
)
from spark_mergetree.storage.table_dirs import TableDirs

# Ranges at least this long are returned as read-only memoryviews rather than copied into bytes.
_ZERO_COPY_BYTES = 1 << 20

_POOL: ThreadPoolExecutor | None = None
_POOL_PID = 0
_POOL_LOCK = threading.Lock()


def shared_pool() -> ThreadPoolExecutor:
    """One pool for every store: stores are cheap to create and must not leak threads. Only the
    calling thread submits and waits, never a pool task, so sharing cannot deadlock. A forked
    child gets a pool of its own (the parent's threads do not exist in it)."""
    global _POOL, _POOL_PID
    with _POOL_LOCK:
        if _POOL is None or _POOL_PID != os.getpid():
            _POOL = ThreadPoolExecutor(max_workers=16, thread_name_prefix="mergetree-storage")
            _POOL_PID = os.getpid()
        return _POOL


class UnitFault(Exception):
    """A unit copy that could not be used: missing file, short read or checksum mismatch."""

    def __init__(self, disk: str, kind: str, detail: str) -> None:
        super().__init__(f"disk {disk}: {kind} ({detail})")
        self.disk, self.kind, self.detail = disk, kind, detail


@dataclass
class OpenPart:
    """A part found on a volume, with its stripe map (None: a plain directory written without one,
    e.g. by ClickHouse)."""

    name: str
    volume: Volume
    layout: Layout
    disks: list[Disk]  # the map's disks (plain layouts: the disks holding a copy)
    stripe_map: StripeMap | None
    map_bytes: bytes | None = None
    map_problems: list[tuple[str, str]] = field(default_factory=list)  # (disk, what is wrong)


@dataclass
class DiskWrite:
    """What one disk receives for a new part: the files of `tmp_<part>/` and, for plain layouts,
    the map beside it."""

    disk: Disk
    files: Files
    sidecar: bytes | None = None


class UnitReader:
    """Reads unit copies from any disk, verifying them; keeps one RangeReader per file system."""

    def __init__(self, dirs: TableDirs) -> None:
        self.dirs = dirs
        self._readers: dict[int, RangeReader] = {}

    def read(self, disk: Disk, path: str, offset: int, target: memoryview, checksum: str | None) -> None:
        fs = self.dirs.fs(disk)
        reader = self._readers.get(id(fs))
        if reader is None:
            reader = self._readers[id(fs)] = fs.reader()
        try:
            got = reader.read_into(path, offset, target)
        except FileNotFoundError as e:
            raise UnitFault(disk.name, "missing", f"{path}: {e.strerror}") from None
        except OSError as e:
            raise UnitFault(disk.name, "missing", f"{path}: {e}") from None
        if got != len(target):
            raise UnitFault(disk.name, "truncated", f"{path} has {got} of {len(target)} bytes at offset {offset}")
        if checksum is not None and unit_checksum(target) != checksum:
            raise UnitFault(disk.name, "checksum", f"{path} at offset {offset}, {len(target)} bytes")

    def close(self) -> None:
        for reader in self._readers.values():
            reader.close()
        self._readers.clear()

    def __enter__(self) -> UnitReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Layout(ABC):
    """How the parts of one volume are laid out on its disks."""

    #: The stripe map lives in the part directory (striped layouts) rather than beside it.
    map_inside: ClassVar[bool] = False
    #: Big files are cut into units dealt over the disks.
    stripes: ClassVar[bool] = False
    #: Every byte survives the loss of a disk, so a replaced disk can be rebuilt.
    redundant: ClassVar[bool] = False

    def __init__(self, volume: Volume, dirs: TableDirs) -> None:
        self.volume = volume
        self.dirs = dirs

    @property
    def pool(self) -> ThreadPoolExecutor:
        return shared_pool()

    # ---------------------------------------------------------------- writing

    @abstractmethod
    def targets(self) -> list[Disk]:
        """The disks a new part is written to."""

    @abstractmethod
    def stage(self, part: str, views: Mapping[str, memoryview], boundaries: Mapping[str, np.ndarray] | None,
              targets: list[Disk]) -> list[DiskWrite]:
        """What each target disk receives for a new part."""

    def plan(self, views: Mapping[str, memoryview], boundaries: Mapping[str, np.ndarray] | None,
             targets: list[Disk], checksums: bool = True) -> tuple[StripeMap, list[memoryview]]:
        """The part's map with units placed (and checksummed), and the bytes of every unit."""
        stripe_map = cut_files(self.volume.layout, [d.name for d in targets], self.volume.stripe_unit_bytes,
                               views, boundaries, self.stripes)
        self.place(stripe_map)
        names = stripe_map.file_names
        unit_views = [views[names[f]][o:o + n] for f, o, n in
                      zip(stripe_map.unit_file.tolist(), stripe_map.unit_offset.tolist(),
                          stripe_map.unit_length.tolist())]
        if checksums:
            stripe_map.unit_hash = [unit_checksum(v) for v in unit_views]
        return stripe_map, unit_views

    def place(self, stripe_map: StripeMap) -> None:
        """Assign disks (and stripes) to the striped units; plain layouts keep files whole."""
        return None

    # ---------------------------------------------------------------- where copies are

    def map_path(self, disk: Disk, part: str) -> str:
        if self.map_inside:
            return f"{self.dirs.part_dir(disk, part)}/{STRIPED_MAP_NAME}"
        # Plain parts stay byte-for-byte ClickHouse directories (CHECK TABLE rejects unknown files),
        # so their map sits beside the directory.
        return self.dirs.sidecar_map(disk, part)

    def unit_sources(self, opened: OpenPart, unit: int) -> list[tuple[Disk, str, int]]:
        """Where copies of a unit can be read, preferred first: (disk, file, offset)."""
        stripe_map = opened.stripe_map
        assert stripe_map is not None
        disk_index = int(stripe_map.unit_disk[unit])
        if disk_index != IN_PLAIN_FILE:
            disk = opened.disks[disk_index]
            return [(disk, f"{self.dirs.part_dir(disk, opened.name)}/{UNITS_FILE_NAME}",
                     int(stripe_map.unit_disk_offset[unit]))]
        name = stripe_map.file_of(unit)
        n = len(opened.disks)
        # Copies take turns unit by unit, so a raid1 read draws on every disk at once.
        order = [opened.disks[(unit + k) % n] for k in range(n)]
        return [(d, f"{self.dirs.part_dir(d, opened.name)}/{name}", int(stripe_map.unit_offset[unit])) for d in order]

    def list_files(self, opened: OpenPart, excluded: Disk | None = None) -> list[str]:
        """The part's file names: from its map, or listed from a disk holding it."""
        if opened.stripe_map is not None:
            return sorted(opened.stripe_map.files)
        for disk in opened.disks:
            if disk == excluded:
                continue
            fs, directory = self.dirs.fs(disk), self.dirs.part_dir(disk, opened.name)
            try:
                entries = fs.ls(directory)
                names = [e.name for e in entries if not e.is_dir]
                for sub in (e.name for e in entries if e.is_dir and e.name.endswith(SUBPART_SUFFIX)):
                    names += [f"{sub}/{e.name}" for e in fs.ls(f"{directory}/{sub}") if not e.is_dir]
                return sorted(names)
            except (FileNotFoundError, NotADirectoryError):
                continue
        raise StorageError(f"part {opened.name!r}: directory vanished from disks {[d.name for d in opened.disks]}")

    # ---------------------------------------------------------------- reading

    def whole_copy_disk(self, opened: OpenPart, start: int) -> Disk | None:
        """A disk holding the whole file, to serve a range in one read (plain layouts)."""
        return None

    def read_range(self, opened: OpenPart, name: str, start: int, end: int, verify: bool) -> bytes | memoryview:
        """Bytes [start, end) of a file (the range is already checked against its size)."""
        if opened.stripe_map is None:
            return self.read_unmapped(opened, name, start, end)
        if start == end:
            return b""
        stripe_map = opened.stripe_map
        units = stripe_map.units_of(name)
        offsets = stripe_map.unit_offset[units.start:units.stop]
        lengths = stripe_map.unit_length[units.start:units.stop]
        first = units.start + int(np.searchsorted(offsets + lengths, start, side="right"))
        last = units.start + int(np.searchsorted(offsets, end, side="left"))
        disk = self.whole_copy_disk(opened, start)
        if disk is not None:
            fast = self._read_span(opened, name, first, last, start, end, verify, disk)
            if fast is not None:
                return fast
        out_view = scratch(end - start)
        targets: dict[int, memoryview] = {}
        partial: list[tuple[int, memoryview]] = []
        for u in range(first, last):
            a, n = int(stripe_map.unit_offset[u]), int(stripe_map.unit_length[u])
            if a >= start and a + n <= end:
                targets[u] = out_view[a - start:a - start + n]
            else:
                buffer = scratch(n)
                targets[u] = buffer
                partial.append((u, buffer))
        self.fetch_units(opened, targets, verify)
        for u, buffer in partial:
            a, n = int(stripe_map.unit_offset[u]), int(stripe_map.unit_length[u])
            lo, hi = max(a, start), min(a + n, end)
            out_view[lo - start:hi - start] = buffer[lo - a:hi - a]
        # Big ranges (column data) go out without another copy; small files as bytes.
        return out_view.toreadonly() if end - start >= _ZERO_COPY_BYTES else out_view.tobytes()

    def _read_span(self, opened: OpenPart, name: str, first: int, last: int, start: int, end: int,
                   verify: bool, disk: Disk) -> bytes | None:
        """One read of the units' span from one whole copy, each unit verified in place.

        Returns None when anything is off, so the unit-by-unit path reports it precisely.
        """
        stripe_map = opened.stripe_map
        assert stripe_map is not None
        span_start = int(stripe_map.unit_offset[first])
        span_end = int(stripe_map.unit_offset[last - 1] + stripe_map.unit_length[last - 1])
        try:
            data = self.dirs.fs(disk).read_range(f"{self.dirs.part_dir(disk, opened.name)}/{name}", span_start,
                                                 span_end)
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

    def read_unmapped(self, opened: OpenPart, name: str, start: int, end: int,
                      excluded: Disk | None = None) -> bytes:
        """A range of a part without a map, from the first disk whose copy is long enough."""
        faults: list[UnitFault] = []
        for disk in opened.disks:
            if disk == excluded:
                continue
            try:
                data = self.dirs.fs(disk).read_range(f"{self.dirs.part_dir(disk, opened.name)}/{name}", start, end)
                if len(data) == end - start:
                    if faults:
                        self.warn(opened, faults, name)
                    return data
                faults.append(UnitFault(disk.name, "truncated", f"{len(data)} of {end - start} bytes"))
            except OSError as e:
                faults.append(UnitFault(disk.name, "missing", str(e)))
        raise StorageError(f"part {opened.name!r} file {name!r}: unreadable on every disk: "
                           + "; ".join(map(str, faults)))

    def fetch_units(self, opened: OpenPart, targets: dict[int, memoryview], verify: bool = True) -> None:
        """Fill each target with its unit: first choices in parallel, one task per disk, then
        every failed unit from another copy or its stripe's parity (one task per stripe)."""
        stripe_map = opened.stripe_map
        assert stripe_map is not None
        by_disk: dict[str, list[int]] = {}
        for u in targets:
            by_disk.setdefault(self.unit_sources(opened, u)[0][0].name, []).append(u)

        def read_disk(units: list[int]) -> list[tuple[int, UnitFault]]:
            failed = []
            with UnitReader(self.dirs) as reader:
                for u in units:
                    disk, path, offset = self.unit_sources(opened, u)[0]
                    try:
                        reader.read(disk, path, offset, targets[u], stripe_map.unit_hash[u] if verify else None)
                    except UnitFault as fault:
                        failed.append((u, fault))
            return failed

        groups = list(by_disk.values())
        results = [read_disk(groups[0])] if len(groups) == 1 else list(self.pool.map(read_disk, groups))
        failures = [f for result in results for f in result]
        if not failures:
            return
        by_stripe: dict[tuple[int, int], list[tuple[int, UnitFault]]] = {}
        for u, fault in failures:
            stripe = int(stripe_map.unit_stripe[u])
            by_stripe.setdefault((stripe, u if stripe < 0 else -1), []).append((u, fault))
        list(self.pool.map(lambda failed: self.recover_units(opened, failed, targets), by_stripe.values()))
        self.warn(opened, [fault for _u, fault in failures], stripe_map.file_of(failures[0][0]),
                  from_parity=any(stripe_map.unit_disk[u] != IN_PLAIN_FILE for u, _f in failures))

    def recover_units(self, opened: OpenPart, failed: list[tuple[int, UnitFault]],
                      targets: Mapping[int, memoryview]) -> None:
        """Fill the targets of units whose first copy failed (all of one stripe, or one whole-file
        unit) from other copies or from parity, or raise StorageError."""
        stripe_map = opened.stripe_map
        assert stripe_map is not None
        faults = [fault for _u, fault in failed]
        remaining = []
        with UnitReader(self.dirs) as reader:
            for u, _fault in failed:
                for disk, path, offset in self.unit_sources(opened, u)[1:]:
                    try:
                        reader.read(disk, path, offset, targets[u], stripe_map.unit_hash[u])
                        break
                    except UnitFault as fault:
                        faults.append(fault)
                else:
                    remaining.append(u)
            if not remaining:
                return
            stripe = int(stripe_map.unit_stripe[remaining[0]])
            data = self.stripe_data(opened, stripe, set(remaining), faults, reader) if stripe >= 0 else None
        if data is not None:
            first = stripe_map.stripe_units(stripe).start
            for u in remaining:
                targets[u][:] = data[u - first].data
            return
        u = remaining[0]
        a, n = int(stripe_map.unit_offset[u]), int(stripe_map.unit_length[u])
        disks = sorted({f.disk for f in faults})
        raise StorageError(
            f"part {opened.name!r} file {stripe_map.file_of(u)!r}: bytes [{a}, {a + n}) cannot be recovered on "
            f"volume {opened.volume.name!r} ({opened.volume.layout}); failed disks: {', '.join(disks)}: "
            + "; ".join(map(str, faults)))

    def stripe_data(self, opened: OpenPart, stripe: int, lost: set[int], faults: list[UnitFault],
                    reader: UnitReader, excluded: int | None = None) -> list[np.ndarray] | None:
        """Every data unit of a stripe, verified, those in `lost` rebuilt from parity; None (with
        the reasons added to `faults`) when that is impossible. Layouts without parity: None."""
        return None

    def warn(self, opened: OpenPart, faults: list[UnitFault], name: str | None, from_parity: bool = False) -> None:
        disks = sorted({f.disk for f in faults})
        what = f" file {name!r}" if name else ""
        warnings.warn(
            f"degraded read of part {opened.name!r}{what} on volume {opened.volume.name!r} "
            f"({opened.volume.layout}): disk {', '.join(disks)} failed ({faults[0]}"
            f"{f' and {len(faults) - 1} more' if len(faults) > 1 else ''}); served from "
            f"{'parity' if from_parity else 'another copy'}",
            DegradedReadWarning, stacklevel=4)

    # ---------------------------------------------------------------- rebuild

    def rebuild_part(self, opened: OpenPart, disk: Disk) -> tuple[Files, bytes | None]:
        """The files of `tmp_<part>/` on a replaced disk (and the map beside it), from the other
        disks only. Layouts without redundancy raise StorageError."""
        raise StorageError(f"disk {disk.name!r} of volume {self.volume.name!r} cannot be rebuilt: layout "
                           f"{self.volume.layout} keeps no redundant copy (raid1, raid5 and raid6 do)")

    def read_excluding(self, opened: OpenPart, name: str, excluded: Disk) -> bytes:
        """A whole file, verified, from copies on disks other than `excluded` (being rebuilt)."""
        if opened.stripe_map is None:
            sizes = []
            for disk in (d for d in opened.disks if d != excluded):
                try:
                    sizes.append(self.dirs.fs(disk).size(f"{self.dirs.part_dir(disk, opened.name)}/{name}"))
                except OSError:
                    continue
            return self.read_unmapped(opened, name, 0, max(sizes, default=0), excluded)
        stripe_map = opened.stripe_map
        out_view = memoryview(bytearray(stripe_map.files[name].size))
        faults: list[UnitFault] = []
        with UnitReader(self.dirs) as reader:
            for u in stripe_map.units_of(name):
                a, n = int(stripe_map.unit_offset[u]), int(stripe_map.unit_length[u])
                for disk, path, offset in self.unit_sources(opened, u):
                    if disk == excluded:
                        continue  # its copy may be empty or stale: never trust the disk being rebuilt
                    try:
                        reader.read(disk, path, offset, out_view[a:a + n], stripe_map.unit_hash[u])
                        break
                    except UnitFault as fault:
                        faults.append(fault)
                else:
                    raise StorageError(f"part {opened.name!r} file {name!r}: no good copy of bytes [{a}, {a + n}) "
                                       f"outside disk {excluded.name}: " + "; ".join(map(str, faults)))
        return bytes(out_view)

    # ---------------------------------------------------------------- scrub

    def scrub_part(self, opened: OpenPart, report: ScrubReport) -> list[ScrubProblem]:
        """Every map copy, every copy of every unit and (parity layouts) every parity unit."""
        stripe_map = opened.stripe_map
        assert stripe_map is not None
        part = opened.name
        problems = []
        for disk in opened.disks:
            path = self.map_path(disk, part)
            fs = self.dirs.fs(disk)
            try:
                data = fs.read_range(path, 0, fs.size(path))
                if data != opened.map_bytes:
                    StripeMap.from_bytes(data, path)
                    problems.append(ScrubProblem(part, disk.name, "map",
                                                 detail=f"{path.rsplit('/', 1)[-1]} differs from other disks"))
            except FileNotFoundError:
                problems.append(ScrubProblem(part, disk.name, "missing", path.rsplit("/", 1)[-1], detail=path))
            except StorageError as e:
                problems.append(ScrubProblem(part, disk.name, "map", path.rsplit("/", 1)[-1], detail=str(e)))
        data_ok = np.ones(stripe_map.unit_file.size, dtype=bool)
        with UnitReader(self.dirs) as reader:
            for u in range(stripe_map.unit_file.size):
                buffer = scratch(int(stripe_map.unit_length[u]))
                for disk, path, offset in self.unit_sources(opened, u):
                    report.units_checked += 1
                    try:
                        reader.read(disk, path, offset, buffer, stripe_map.unit_hash[u])
                    except UnitFault as fault:
                        data_ok[u] = False
                        problems.append(ScrubProblem(part, disk.name, fault.kind, stripe_map.file_of(u), u,
                                                     fault.detail))
            problems += self.scrub_parity(opened, report, data_ok, reader)
        return problems

    def scrub_parity(self, opened: OpenPart, report: ScrubReport, data_ok: np.ndarray,
                     reader: UnitReader) -> list[ScrubProblem]:
        """Problems of the parity units (layouts with parity)."""
        return []

"""One table's parts on a storage policy, through the layout of the volume each part is on.

Finds a part (the first volume with its directory) and opens it (its stripe map, first good copy,
cached); lists parts and files; writes a part atomically (every target disk stages `tmp_<part>`,
then each publishes it by a rename); reads byte ranges; renames and removes parts. What the bytes
look like on the disks is the layout's business (storage/layouts/); maintenance and transfers are
built on this in maintenance.py and transfer.py.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from concurrent.futures import wait
from pathlib import Path

import numpy as np

from spark_mergetree.errors import InvalidOptionError, StorageError
from spark_mergetree.storage.filesystem import Buffer, LocalFileSystem, byte_view
from spark_mergetree.storage.layouts import DiskWrite, Layout, OpenPart, layout_for, shared_pool
from spark_mergetree.storage.policy import Disk, StoragePolicy, Volume
from spark_mergetree.storage.reports import PartLocation
from spark_mergetree.storage.stripe_map import StripeMap, check_file_name
from spark_mergetree.storage.table_dirs import TableDirs, check_part_name


class TableParts:
    """The parts of one table on a StoragePolicy, whatever the layout."""

    def __init__(self, policy: StoragePolicy, table_path: str = "") -> None:
        self.dirs = TableDirs(policy, table_path)
        self.policy = policy
        self.table_path = table_path
        self._layouts = {volume.name: layout_for(volume, self.dirs) for volume in policy.volumes}
        self._open_parts: dict[str, OpenPart] = {}
        self._lock = threading.Lock()

    def layout(self, volume: Volume) -> Layout:
        return self._layouts[volume.name]

    def table_dir(self, disk: Disk) -> Path:
        return Path(self.dirs.table_dir(disk))

    def list_parts(self) -> list[str]:
        """Names of the part directories on every disk of the policy (temporary ones excluded)."""
        return self.dirs.list_parts()

    def cleanup_tmp(self) -> list[str]:
        """Remove leftovers of interrupted writes and removals (see TableDirs.cleanup_tmp)."""
        return self.dirs.cleanup_tmp()

    # ---------------------------------------------------------------- opening

    def open(self, part: str) -> OpenPart:
        """The part with its map (cached until it is renamed, removed or forgotten)."""
        with self._lock:
            cached = self._open_parts.get(part)
        if cached is not None:
            return cached
        check_part_name(part)
        found = self.dirs.holders(part)
        if found is None:
            missing = [f"{d.name} ({d.path})" for d in self.dirs.all_disks() if not self.dirs.fs(d).isdir(d.path)]
            raise StorageError(f"part {part!r} not found on any disk of storage policy {self.policy.name!r} "
                               f"(table path {self.table_path!r})"
                               + (f"; missing disk directories: {', '.join(missing)}" if missing else ""))
        volume, holders = found
        layout = self.layout(volume)
        stripe_map, map_bytes, damaged = None, None, []
        for disk in holders:
            path = layout.map_path(disk, part)
            fs = self.dirs.fs(disk)
            try:
                data = fs.read_range(path, 0, fs.size(path))
                stripe_map = StripeMap.from_bytes(data, f"part {part} disk {disk.name} {path.rsplit('/', 1)[-1]}")
                map_bytes = data
                break
            except FileNotFoundError:
                damaged.append((disk.name, f"{path.rsplit('/', 1)[-1]} missing"))
            except StorageError as e:
                damaged.append((disk.name, str(e)))
        if stripe_map is None and layout.map_inside:
            raise StorageError(f"part {part!r}: no readable stripe map on any disk of volume {volume.name!r}: "
                               + "; ".join(f"disk {d}: {what}" for d, what in damaged))
        disks = holders
        if stripe_map is not None:
            try:
                disks = [volume.disk(name) for name in stripe_map.disks]
            except InvalidOptionError as e:
                raise StorageError(f"part {part!r}: its stripe map names a disk not in volume "
                                   f"{volume.name!r}: {e}") from e
        opened = OpenPart(part, volume, layout, disks, stripe_map, map_bytes,
                          [(d, what) for d, what in damaged if "missing" not in what or stripe_map is not None])
        with self._lock:
            self._open_parts[part] = opened
        return opened

    def forget(self, *parts: str) -> None:
        with self._lock:
            for part in parts:
                self._open_parts.pop(part, None)

    # ---------------------------------------------------------------- metadata queries

    def part_location(self, part: str) -> PartLocation:
        opened = self.open(part)
        return PartLocation(opened.volume.name, opened.volume.layout, tuple(d.name for d in opened.disks))

    def list_files(self, part: str) -> list[str]:
        opened = self.open(part)
        return opened.layout.list_files(opened)

    def exists(self, part: str, name: str | None = None) -> bool:
        """Whether the part (and, with `name`, that file of it) exists."""
        if self.dirs.holders(part) is None:
            self.forget(part)  # another process may have removed it since it was opened here
            return False
        try:
            opened = self.open(part)
        except StorageError:
            return False
        if name is None:
            return True
        if opened.stripe_map is not None:
            return name in opened.stripe_map.files
        return any(self.dirs.fs(d).isfile(f"{self.dirs.part_dir(d, part)}/{name}") for d in opened.disks)

    def file_size(self, part: str, name: str) -> int:
        opened = self.open(part)
        if opened.stripe_map is not None:
            entry = opened.stripe_map.files.get(name)
            if entry is None:
                raise StorageError(f"part {part!r} has no file {name!r}; files: {', '.join(opened.stripe_map.files)}")
            return entry.size
        for disk in opened.disks:
            try:
                return self.dirs.fs(disk).size(f"{self.dirs.part_dir(disk, part)}/{name}")
            except FileNotFoundError:
                continue
        raise StorageError(f"part {part!r} has no file {name!r} on disks {[d.name for d in opened.disks]}")

    def boundaries(self, part: str, name: str) -> np.ndarray | None:
        """The cut points recorded when the file was written (None for files stored whole)."""
        opened = self.open(part)
        if opened.stripe_map is None:
            return None
        entry = opened.stripe_map.files.get(name)
        if entry is None:
            raise StorageError(f"part {part!r} has no file {name!r}")
        return None if entry.boundaries is None else np.asarray(entry.boundaries, dtype=np.int64)

    def part_bytes(self, part: str) -> int:
        return sum(self.file_size(part, name) for name in self.list_files(part))

    # ---------------------------------------------------------------- writing

    def write_part(self, part_name: str, files: Mapping[str, Buffer],
                   boundaries: Mapping[str, np.ndarray] | None = None) -> None:
        """Write a new part atomically on the volume the policy chooses for its size.

        `boundaries[file]` are byte offsets where the file may be cut (compressed block starts);
        such files are striped over raid0/raid5/raid6 disks in units of whole blocks. Other files
        are stored whole (and on every disk of a striped volume).
        """
        check_part_name(part_name)
        views = self._check_files(part_name, files)
        if self.dirs.holders(part_name) is not None:
            raise StorageError(f"part {part_name!r} already exists in table path {self.table_path!r}")
        volume = self.policy.choose_volume(sum(len(v) for v in views.values()))
        self.write_to_volume(part_name, views, boundaries, volume)

    @staticmethod
    def _check_files(part: str, files: Mapping[str, Buffer]) -> dict[str, memoryview]:
        if not isinstance(files, Mapping) or not files:
            raise InvalidOptionError(f"part {part!r}: files must be a non-empty mapping of name to bytes")
        views = {}
        for name, data in files.items():
            check_file_name(name, part)
            try:
                views[name] = byte_view(data)
            except TypeError as e:
                raise InvalidOptionError(f"part {part!r} file {name!r}: expected bytes or memoryview, "
                                         f"got {type(data).__name__}") from e
        return views

    def write_to_volume(self, part: str, views: Mapping[str, memoryview],
                        boundaries: Mapping[str, np.ndarray] | None, volume: Volume) -> None:
        """Stage the part on every target disk in parallel, then publish it disk by disk."""
        layout = self.layout(volume)
        targets = layout.targets()
        writes = layout.stage(part, views, boundaries, targets)

        def write_disk(write: DiskWrite) -> None:
            self.dirs.stage(write.disk, part, write.files, write.sidecar)

        errors: list[tuple[str, BaseException]] = []
        if len(writes) == 1:
            try:
                write_disk(writes[0])
            except Exception as error:  # judged below, like the parallel case
                errors.append((writes[0].disk.name, error))
        else:
            # Wait for every disk before judging, so a failure never races a cleanup with a running write.
            futures = [shared_pool().submit(write_disk, write) for write in writes]
            wait(futures)
            errors = [(w.disk.name, failure) for w, f in zip(writes, futures)
                      if (failure := f.exception()) is not None]
        if errors:
            for write in writes:
                self.dirs.discard_staged(write.disk, part)
            first = errors[0][1]
            if not isinstance(first, OSError):
                raise first
            raise StorageError(f"part {part!r}: writing to volume {volume.name!r} failed on disk "
                               f"{', '.join(d for d, _e in errors)}: {first}") from first
        for write in writes:
            self.dirs.publish(write.disk, part, write.sidecar is not None)
        self.forget(part)

    # ---------------------------------------------------------------- reading

    def read_file(self, part: str, name: str) -> bytes:
        """The whole file, every unit verified; degraded reads warn with DegradedReadWarning."""
        opened = self.open(part)
        data = opened.layout.read_range(opened, name, 0, self.file_size(part, name), True)
        return data if isinstance(data, bytes) else data.tobytes()

    def read_range(self, part: str, name: str, start: int, end: int, verify: bool = True) -> bytes | memoryview:
        """Bytes [start, end) of a file of a part.

        `verify=False` skips the unit checksums (missing and short units are still repaired): for
        callers that verify the bytes themselves, such as compressed blocks, and retry with
        `verify=True` when they find damage."""
        opened = self.open(part)
        size = self.file_size(part, name)
        if not (isinstance(start, (int, np.integer)) and isinstance(end, (int, np.integer))
                and 0 <= start <= end <= size):
            raise InvalidOptionError(f"part {part!r} file {name!r}: range [{start}, {end}) is not within "
                                     f"[0, {size}]")
        return opened.layout.read_range(opened, name, int(start), int(end), verify)

    # ---------------------------------------------------------------- part operations

    def remove_part(self, part: str, *, missing_ok: bool = False) -> None:
        """Delete the part from every disk (renamed to delete_tmp_* first, as ClickHouse does).

        Safe beside another deleter of the same part: each renames it to a name of its own first,
        and a part already gone is skipped (with `missing_ok`, also when gone everywhere)."""
        check_part_name(part)
        found = self.dirs.holders(part)
        if found is None:
            if missing_ok:
                return
            raise StorageError(f"part {part!r} not found in table path {self.table_path!r}")
        volume, holders = found
        for disk in holders:
            self.dirs.retire(disk, part, sidecar=not self.layout(volume).map_inside)
        self.forget(part)

    def clone_part(self, source: str, target: str, replaced: Mapping[str, Buffer] | None = None,
                   boundaries: Mapping[str, np.ndarray] | None = None) -> None:
        """Write `source`'s files as the new part `target`, atomically like `write_part`, with the
        files of `replaced` (and their `boundaries`, as `write_part` takes them) instead of or beside
        its own: the others are hard links on a single local disk (as ClickHouse's mutations make
        them; parts never change once written), copies elsewhere."""
        replaced = dict(replaced or {})
        volume, holders = self._existing_to_free(source, target)
        fs = self.dirs.fs(holders[0])
        origin = self.dirs.part_dir(holders[0], source)
        entries = os.listdir(origin) if volume.layout == "single" and isinstance(fs, LocalFileSystem) else None
        if entries is None or any(os.path.isdir(os.path.join(origin, name)) for name in entries):
            files: dict[str, Buffer] = {name: self.read_file(source, name) for name in self.list_files(source)
                                        if name not in replaced}
            cuts = {name: b for name in files if (b := self.boundaries(source, name)) is not None}
            files.update(replaced)
            cuts.update(boundaries or {})
            self.write_part(target, files, cuts)
            return
        disk = holders[0]
        staging = self.dirs.staging_dir(disk, target)
        fs.remove(staging)  # left by a crashed clone of the same part
        fs.makedirs(staging)
        try:
            for name in entries:
                if name not in replaced:
                    os.link(os.path.join(origin, name), os.path.join(staging, name))
            for name, data in (self._check_files(target, replaced) if replaced else {}).items():
                fs.write(f"{staging}/{name}", [data])
            fs.sync_dir(staging)
        except BaseException:
            self.dirs.discard_staged(disk, target)
            raise
        self.dirs.publish(disk, target, False)
        self.forget(target)

    def _existing_to_free(self, old: str, new: str) -> tuple[Volume, list[Disk]]:
        """Where part `old` is, checking that the name `new` is free (for a rename or a clone)."""
        check_part_name(old)
        check_part_name(new)
        found = self.dirs.holders(old)
        if found is None:
            raise StorageError(f"part {old!r} not found in table path {self.table_path!r}")
        if self.dirs.holders(new) is not None:
            raise StorageError(f"cannot name part {old!r}'s successor {new!r}: {new!r} already exists")
        return found

    def rename_part(self, old: str, new: str) -> None:
        volume, holders = self._existing_to_free(old, new)
        for disk in holders:
            fs = self.dirs.fs(disk)
            fs.rename(self.dirs.part_dir(disk, old), self.dirs.part_dir(disk, new))
            if not self.layout(volume).map_inside and fs.isfile(self.dirs.sidecar_map(disk, old)):
                fs.rename(self.dirs.sidecar_map(disk, old), self.dirs.sidecar_map(disk, new))
            fs.sync_dir(self.dirs.table_dir(disk))
        self.forget(old, new)

    # ---------------------------------------------------------------- lifecycle

    def close(self) -> None:
        """Drop cached stripe maps (the thread pool is shared and stays)."""
        self.forget(*list(self._open_parts))

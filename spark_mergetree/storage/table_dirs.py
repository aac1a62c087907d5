"""One table's directory on every disk of a storage policy: where its part directories are, which
names are parts, and the directory steps every layout shares (publish, retire, leftovers).

On each disk the table directory is `<disk path>/<table path>`; a part is a subdirectory there.
Plain layouts keep a part's stripe map beside its directory as `<part>.stripe_map`. A new part is
written as `tmp_<part>` and published by a rename; a part is deleted by renaming it to a name of
its own, `delete_tmp_<part>_<random>`, first (as ClickHouse does), so concurrent deleters of one
part never disturb each other.
"""

from __future__ import annotations

import os
import posixpath
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from spark_mergetree.errors import InvalidOptionError
from spark_mergetree.fileops import DELETE_PREFIX
from spark_mergetree.storage.filesystem import Files, FileSystem
from spark_mergetree.storage.object_store import filesystem_for
from spark_mergetree.storage.policy import Disk, StoragePolicy, Volume
from spark_mergetree.storage.stripe_map import PLAIN_MAP_SUFFIX

TMP_PREFIX = "tmp_"
#: A part's files are written by several threads at once from this many bytes on.
PARALLEL_WRITE_BYTES = 16 << 20
WRITE_THREADS = 4
#: Directory names that are never parts (ClickHouse's own temporary and detached directories).
NOT_PARTS = ("tmp", "delete_tmp_", "detached", "_", ".", "moving")


def check_part_name(part: str) -> None:
    if not isinstance(part, str) or not part or "/" in part or part.startswith(NOT_PARTS) \
            or part.endswith(PLAIN_MAP_SUFFIX):
        raise InvalidOptionError(
            f"part name {part!r} is not valid: it must be non-empty, contain no '/', and not start with "
            f"{', '.join(repr(p) for p in NOT_PARTS)}")


class TableDirs:
    """The directories of one table on the disks of a policy."""

    def __init__(self, policy: StoragePolicy, table_path: str = "") -> None:
        if os.path.isabs(table_path) or ".." in Path(table_path).parts:
            raise InvalidOptionError(f"table_path must be relative to each disk, got {table_path!r}")
        self.policy = policy
        self.table_path = table_path

    def fs(self, disk: Disk) -> FileSystem:
        return filesystem_for(disk.path)

    def table_dir(self, disk: Disk) -> str:
        return posixpath.join(disk.path, self.table_path) if self.table_path else disk.path

    def part_dir(self, disk: Disk, part: str) -> str:
        return posixpath.join(self.table_dir(disk), part)

    def staging_dir(self, disk: Disk, part: str) -> str:
        return posixpath.join(self.table_dir(disk), TMP_PREFIX + part)

    def sidecar_map(self, disk: Disk, part: str, staged: bool = False) -> str:
        """The map of a plain part, beside its directory (`tmp_<part>.stripe_map` while staged)."""
        return posixpath.join(self.table_dir(disk), (TMP_PREFIX if staged else "") + part + PLAIN_MAP_SUFFIX)

    def all_disks(self) -> list[Disk]:
        return [d for v in self.policy.volumes for d in v.disks]

    def holders(self, part: str) -> tuple[Volume, list[Disk]] | None:
        """The first volume with a directory of the part, and its disks that have one."""
        for volume in self.policy.volumes:
            holders = [d for d in volume.disks if self.fs(d).isdir(self.part_dir(d, part))]
            if holders:
                return volume, holders
        return None

    def list_parts(self) -> list[str]:
        """Names of the part directories on every disk of the policy (temporary ones excluded)."""
        names: set[str] = set()
        for disk in self.all_disks():
            try:
                entries = self.fs(disk).ls(self.table_dir(disk))
            except (FileNotFoundError, NotADirectoryError):
                continue
            names.update(e.name for e in entries if e.is_dir and not e.name.startswith(NOT_PARTS))
        return sorted(names)

    def stage(self, disk: Disk, part: str, files: Files,
              sidecar: bytes | None) -> None:
        """Write `tmp_<part>/` (and `tmp_<part>.stripe_map` beside it) on a disk, durably."""
        fs, staging = self.fs(disk), self.staging_dir(disk, part)
        fs.makedirs(self.table_dir(disk))
        fs.remove(staging)  # left by a crashed write of the same part
        fs.makedirs(staging)
        subdirectories = sorted({name.rsplit("/", 1)[0] for name, _ in files if "/" in name})
        for sub in subdirectories:  # projections' directories (`<name>.proj/`)
            fs.makedirs(f"{staging}/{sub}")
        big = sum(len(chunk) for _, chunks in files for chunk in chunks) >= PARALLEL_WRITE_BYTES
        if big and len(files) > 1:
            # Each write copies into the page cache and waits for its fsync without the GIL: files
            # written side by side overlap both (a big part's columns are tens of MB each).
            with ThreadPoolExecutor(max_workers=min(WRITE_THREADS, len(files)),
                                    thread_name_prefix="mergetree-write") as pool:
                list(pool.map(lambda file: fs.write(f"{staging}/{file[0]}", file[1]), files))
        else:
            for name, chunks in files:
                fs.write(f"{staging}/{name}", chunks)
        for sub in subdirectories:
            fs.sync_dir(f"{staging}/{sub}")
        if sidecar is not None:
            fs.write(self.sidecar_map(disk, part, staged=True), [sidecar])
        fs.sync_dir(staging)

    def publish(self, disk: Disk, part: str, sidecar: bool) -> None:
        """Rename a staged part into place: the map first, so a visible plain part has its map."""
        fs = self.fs(disk)
        if sidecar:
            fs.rename(self.sidecar_map(disk, part, staged=True), self.sidecar_map(disk, part))
        fs.rename(self.staging_dir(disk, part), self.part_dir(disk, part))
        fs.sync_dir(self.table_dir(disk))

    def retire(self, disk: Disk, part: str, sidecar: bool) -> bool:
        """Delete a part's directory on one disk; False if another deleter got there first."""
        fs = self.fs(disk)
        doomed = posixpath.join(self.table_dir(disk), f"{DELETE_PREFIX}{part}_{uuid.uuid4().hex[:8]}")
        try:
            fs.rename(self.part_dir(disk, part), doomed)
        except FileNotFoundError:
            return False
        fs.sync_dir(self.table_dir(disk))
        if sidecar:
            fs.remove(self.sidecar_map(disk, part))
        # Recovery may be deleting this delete_tmp_ directory too: both finish the job.
        fs.remove(doomed)
        return True

    def discard_staged(self, disk: Disk, part: str) -> None:
        """Remove what a failed or interrupted write of `part` staged on a disk."""
        fs = self.fs(disk)
        try:
            fs.remove(self.staging_dir(disk, part))
            fs.remove(self.sidecar_map(disk, part, staged=True))
        except OSError:
            pass  # the disk itself is what failed

    def cleanup_tmp(self) -> list[str]:
        """Remove leftovers of interrupted writes and removals; returns the paths removed.

        Run it when no writer is active on the table (e.g. when the table is opened): an
        in-progress write's `tmp_*` directory looks exactly like a leftover.
        """
        removed = []
        for disk in self.all_disks():
            fs, table_dir = self.fs(disk), self.table_dir(disk)
            try:
                entries = fs.ls(table_dir)
            except (FileNotFoundError, NotADirectoryError):
                continue
            directories = {e.name for e in entries if e.is_dir}
            for entry in entries:
                stale = entry.name.startswith((TMP_PREFIX, DELETE_PREFIX)) or (
                    entry.name.endswith(PLAIN_MAP_SUFFIX) and entry.name[: -len(PLAIN_MAP_SUFFIX)] not in directories)
                if stale:
                    path = posixpath.join(table_dir, entry.name)
                    fs.remove(path)
                    removed.append(path)
        return removed

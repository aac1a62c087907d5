"""raid1: the same plain part directory (and its map beside it) on every disk of the volume.

While every mirror holds the part, a range comes from one mirror in one read, mirrors taking turns
by range; otherwise unit `u` comes from disk `(u + k) mod n`, `k = 0, 1, ...`, a bad copy falling
through to the next mirror. A replaced disk is rebuilt by copying verified units from the others.
"""

from __future__ import annotations

from spark_mergetree.storage.filesystem import Files
from spark_mergetree.storage.layouts.base import OpenPart
from spark_mergetree.storage.layouts.plain import PlainLayout
from spark_mergetree.storage.policy import Disk


class MirrorLayout(PlainLayout):
    redundant = True

    def targets(self) -> list[Disk]:
        return list(self.volume.disks)

    def whole_copy_disk(self, opened: OpenPart, start: int) -> Disk | None:
        # A missing mirror takes the unit path, which reports it.
        if not all(self.dirs.fs(d).isdir(self.dirs.part_dir(d, opened.name)) for d in opened.disks):
            return None
        return super().whole_copy_disk(opened, start)

    def rebuild_part(self, opened: OpenPart, disk: Disk) -> tuple[Files, bytes | None]:
        files: Files = [
            (name, [self.read_excluding(opened, name, disk)]) for name in self.list_files(opened, disk)]
        return files, opened.map_bytes

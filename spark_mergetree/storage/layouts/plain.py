"""single and jbod: a part is a plain ClickHouse part directory on one disk.

`single` (the default policy: the table directory itself) writes exactly what ClickHouse writes
and no map: ClickHouse's block checksums and checksums.txt verify it. `jbod` picks a disk per part
(round robin, or the one with most free space) and keeps the part's stripe map beside the
directory, so every unit (here: a checksummed range of a whole file) is verified on read.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from spark_mergetree.storage.layouts.base import DiskWrite, Layout, OpenPart
from spark_mergetree.storage.policy import Disk


class PlainLayout(Layout):
    """Whole files in one directory per disk; a range is read from one copy in one read."""

    def targets(self) -> list[Disk]:
        if self.volume.layout == "single":
            return [self.volume.disks[0]]
        return [self.volume.choose_jbod_disk()]

    def stage(self, part: str, views: Mapping[str, memoryview], boundaries: Mapping[str, np.ndarray] | None,
              targets: list[Disk]) -> list[DiskWrite]:
        # A single disk keeps no map: the boundaries are only checked.
        with_map = self.volume.layout != "single"
        stripe_map, _units = self.plan(views, boundaries, targets, checksums=with_map)
        files = [(name, [views[name]]) for name in stripe_map.files]
        return [DiskWrite(disk, files, stripe_map.to_bytes() if with_map else None) for disk in targets]

    def whole_copy_disk(self, opened: OpenPart, start: int) -> Disk | None:
        # Copies take turns by range, so concurrent reads spread over the disks.
        return opened.disks[(start // max(1, self.volume.stripe_unit_bytes)) % len(opened.disks)]

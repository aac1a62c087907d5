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
        stripe_map, _units = self.plan(views, boundaries, targets)  # also checks the boundaries
        files = [(name, [views[name]]) for name in stripe_map.files]
        map_bytes = None if self.volume.layout == "single" else stripe_map.to_bytes()
        return [DiskWrite(disk, files, map_bytes) for disk in targets]

    def whole_copy_disk(self, opened: OpenPart, start: int) -> Disk | None:
        # Copies take turns by range, so concurrent reads spread over the disks.
        return opened.disks[(start // max(1, self.volume.stripe_unit_bytes)) % len(opened.disks)]

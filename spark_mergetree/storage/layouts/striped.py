"""raid0: big files cut into units dealt round robin over the disks; everything else on every disk.

On each disk the part directory holds every file without cut points (whole), `stripe_map.json`,
and `units.bin`: the units this disk holds, back to back in unit order. Striped unit `k` goes to
disk `k mod n`. Nothing is redundant but the whole files: losing a disk loses the part's columns.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from spark_mergetree.storage.filesystem import Buffer
from spark_mergetree.storage.layouts.base import DiskWrite, Layout
from spark_mergetree.storage.policy import Disk
from spark_mergetree.storage.stripe_map import STRIPED_MAP_NAME, UNITS_FILE_NAME, StripeMap, striped_units


class StripedLayout(Layout):
    map_inside = True
    stripes = True

    def targets(self) -> list[Disk]:
        return list(self.volume.disks)

    def place(self, stripe_map: StripeMap) -> None:
        n_disks = len(stripe_map.disks)
        fill = np.zeros(n_disks, dtype=np.int64)
        for k, u in enumerate(striped_units(stripe_map).tolist()):
            d = k % n_disks
            stripe_map.unit_disk[u] = d
            stripe_map.unit_disk_offset[u] = fill[d]
            fill[d] += stripe_map.unit_length[u]

    def encode(self, stripe_map: StripeMap, unit_views: list[memoryview]) -> list[tuple[int, int, Buffer]]:
        """Parity units to store beside the data, as (disk index, offset in units.bin, bytes)."""
        return []

    def stage(self, part: str, views: Mapping[str, memoryview], boundaries: Mapping[str, np.ndarray] | None,
              targets: list[Disk]) -> list[DiskWrite]:
        stripe_map, unit_views = self.plan(views, boundaries, targets)
        parity = self.encode(stripe_map, unit_views)
        map_bytes = stripe_map.to_bytes()
        whole = [(name, [views[name]]) for name, entry in stripe_map.files.items() if not entry.striped]
        writes = []
        for index, disk in enumerate(targets):
            on_disk = np.flatnonzero(stripe_map.unit_disk == index).tolist()
            pieces: list[tuple[int, Buffer]] = [(int(stripe_map.unit_disk_offset[u]), unit_views[u]) for u in on_disk]
            pieces += [(offset, data) for d, offset, data in parity if d == index]
            pieces.sort(key=lambda piece: piece[0])
            writes.append(DiskWrite(disk, [*whole, (UNITS_FILE_NAME, [p[1] for p in pieces]),
                                           (STRIPED_MAP_NAME, [map_bytes])]))
        return writes

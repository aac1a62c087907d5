"""Where part bytes live: plain directories, JBOD, and granule-level RAID0/1/5 over several disks.

`StoragePolicy` (volumes of `Disk`s with a layout) hands out a `PartStore` per table; every part,
whatever the layout, is written, read, moved, exported, rebuilt and scrubbed through it.
"""

from spark_mergetree.storage.parity import unit_checksum, xor_parity
from spark_mergetree.storage.part_store import (
    DegradedReadWarning,
    PartLocation,
    PartStore,
    RebuildReport,
    ScrubProblem,
    ScrubReport,
    compressed_block_starts,
)
from spark_mergetree.storage.policy import LAYOUTS, Disk, Layout, StoragePolicy, Volume
from spark_mergetree.storage.stripe_map import StripeMap, cut_points

__all__ = [
    "LAYOUTS",
    "DegradedReadWarning",
    "Disk",
    "Layout",
    "PartLocation",
    "PartStore",
    "RebuildReport",
    "ScrubProblem",
    "ScrubReport",
    "StoragePolicy",
    "StripeMap",
    "Volume",
    "compressed_block_starts",
    "cut_points",
    "unit_checksum",
    "xor_parity",
]

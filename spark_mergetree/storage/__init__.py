"""Where part bytes live: plain directories, JBOD, and granule-level RAID 0/1/5/6 over several disks.

`StoragePolicy` (volumes of `Disk`s with a layout) configures where a table's parts go;
`PartStore(policy, table_path)` writes, reads, moves, exports, rebuilds and scrubs every part
through the strategy of its volume's layout (`layouts/`), on disks reached through the
`FileSystem` primitives (`filesystem.py`). May import: errors, fileops, and format's compiled kernels.
"""

from spark_mergetree.storage.parity import unit_checksum, xor_parity
from spark_mergetree.storage.part_store import PartStore
from spark_mergetree.storage.policy import LAYOUTS, Disk, Layout, StoragePolicy, Volume
from spark_mergetree.storage.reports import (
    DegradedReadWarning,
    PartLocation,
    RebuildReport,
    ScrubProblem,
    ScrubReport,
)
from spark_mergetree.storage.stripe_map import StripeMap, cut_points
from spark_mergetree.storage.transfer import compressed_block_starts

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

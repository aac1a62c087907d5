"""Storage layouts as strategies: one class per way of laying a part out on a volume's disks.

| layout | module | class |
| --- | --- | --- |
| single, jbod | `plain.py` | `PlainLayout` |
| raid1 | `mirror.py` | `MirrorLayout` |
| raid0 | `striped.py` | `StripedLayout` |
| raid5, raid6 | `striped_parity.py` | `StripedParityLayout` |

`base.py` holds the interface (`Layout`) and what they share. `layout_for(volume, ...)` is the
factory the part store uses.
"""

from __future__ import annotations

from spark_mergetree.storage.layouts.base import (
    DiskWrite,
    Layout,
    OpenPart,
    UnitFault,
    UnitReader,
    shared_pool,
)
from spark_mergetree.storage.layouts.mirror import MirrorLayout
from spark_mergetree.storage.layouts.plain import PlainLayout
from spark_mergetree.storage.layouts.striped import StripedLayout
from spark_mergetree.storage.layouts.striped_parity import StripedParityLayout
from spark_mergetree.storage.policy import LAYOUTS, Volume
from spark_mergetree.storage.table_dirs import TableDirs

LAYOUT_CLASSES: dict[str, type[Layout]] = {
    "single": PlainLayout, "jbod": PlainLayout, "raid1": MirrorLayout, "raid0": StripedLayout,
    "raid5": StripedParityLayout, "raid6": StripedParityLayout,
}
assert set(LAYOUT_CLASSES) == set(LAYOUTS), "every configurable layout has a strategy"


def layout_for(volume: Volume, dirs: TableDirs) -> Layout:
    """The strategy laying out parts on `volume`."""
    return LAYOUT_CLASSES[volume.layout](volume, dirs)


__all__ = ["LAYOUT_CLASSES", "DiskWrite", "Layout", "MirrorLayout", "OpenPart", "PlainLayout", "StripedLayout",
           "StripedParityLayout", "UnitFault", "UnitReader", "layout_for", "shared_pool"]

"""Catalog tests: catalog tables on every storage layout."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from spark_mergetree.storage import Disk, StoragePolicy, Volume

#: (layout, disks) a catalog table is placed on; None: no policy, the data directory itself.
STORAGE_LAYOUTS = [(None, 0), ("single", 1), ("jbod", 3), ("raid0", 3), ("raid1", 2), ("raid5", 3)]


@pytest.fixture(params=STORAGE_LAYOUTS, ids=[layout or "none" for layout, _ in STORAGE_LAYOUTS])
def storage_settings(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, Any]:
    """Table settings placing a catalog table on one layout, its disks under `tmp_path/disks/`."""
    layout, n_disks = request.param
    settings: dict[str, Any] = {"index_granularity": 256, "auto_merge": False}
    if layout is not None:
        disks = [Disk(f"d{i}", str(tmp_path / "disks" / f"d{i}")) for i in range(n_disks)]
        policy = StoragePolicy(layout, [Volume("main", disks, layout, stripe_unit_bytes=4096)])
        settings["storage_policy"] = policy.to_dict()
    return settings

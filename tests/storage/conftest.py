"""Shared fixtures: one PartStore per layout over temporary disk directories, and synthetic parts."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from spark_mergetree.storage import Disk, PartStore, StoragePolicy, StripeMap, Volume

UNIT_BYTES = 8192

#: (layout, number of disks) every conformance test runs against.
LAYOUT_CASES = [("jbod", 1), ("jbod", 3), ("raid0", 3), ("raid1", 2), ("raid1", 3), ("raid5", 3), ("raid5", 4)]


@dataclass
class Setup:
    layout: str
    disks: list[Disk]
    policy: StoragePolicy
    store: PartStore

    @property
    def redundant(self) -> bool:
        return self.layout in ("raid1", "raid5")


def make_store(root: Path, layout: str, n_disks: int, unit_bytes: int = UNIT_BYTES) -> Setup:
    disks = [Disk(f"disk{i}", str(root / f"disk{i}")) for i in range(n_disks)]
    policy = StoragePolicy("p", [Volume("main", disks, layout, stripe_unit_bytes=unit_bytes)])
    return Setup(layout, disks, policy, PartStore(policy, "store/abc/table"))


@pytest.fixture(params=LAYOUT_CASES, ids=[f"{layout}x{n}" for layout, n in LAYOUT_CASES])
def setup(request: pytest.FixtureRequest, tmp_path: Path) -> Setup:
    layout, n_disks = request.param
    made = make_store(tmp_path, layout, n_disks)
    yield made
    made.store.close()


def synthetic_part(rng: np.random.Generator, n_columns: int = 3, max_bytes: int = 120_000
                   ) -> tuple[dict[str, bytes], dict[str, np.ndarray]]:
    """Column files of random bytes cut at random block-like offsets, plus small metadata files."""
    files: dict[str, bytes] = {}
    boundaries: dict[str, np.ndarray] = {}
    for c in range(n_columns):
        size = int(rng.integers(1, max_bytes))
        blocks = np.cumsum(rng.integers(500, 6000, size=size // 500 + 1))
        files[f"c{c}.bin"] = rng.integers(0, 256, size, dtype=np.uint8).tobytes()
        boundaries[f"c{c}.bin"] = np.concatenate(([0], blocks[blocks < size])).astype(np.int64)
        files[f"c{c}.mrk2"] = rng.integers(0, 256, 24 * (len(boundaries[f"c{c}.bin"]) + 1), dtype=np.uint8).tobytes()
    files["count.txt"] = str(int(rng.integers(1, 10**6))).encode()
    files["columns.txt"] = b"columns format version: 1\n1 columns:\n`c0` UInt64\n"
    files["checksums.txt"] = rng.integers(0, 256, 200, dtype=np.uint8).tobytes()
    files["primary.idx"] = rng.integers(0, 256, 64, dtype=np.uint8).tobytes()
    return files, boundaries


def disk_files(root: Path) -> dict[str, bytes]:
    """Every file under a directory, by relative path."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def stored_map(setup: Setup, part: str) -> StripeMap:
    volume = setup.policy.volumes[0]
    for disk in setup.disks:
        path = Path(setup.store.layout(volume).map_path(disk, part))
        if path.exists():
            return StripeMap.from_bytes(path.read_bytes(), str(path))
    raise AssertionError(f"no map for {part}")

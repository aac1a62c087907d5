"""Shared fixtures: one PartStore per layout over temporary disk directories, synthetic parts, and
an independent (byte by byte, table driven) computation of RAID 6's Q parity."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from spark_mergetree.storage import Disk, PartStore, StoragePolicy, StripeMap, Volume

UNIT_BYTES = 8192

#: (layout, number of disks) every conformance test runs against: the one list of what is tested.
LAYOUT_CASES = [("jbod", 1), ("jbod", 3), ("raid0", 3), ("raid1", 2), ("raid1", 3), ("raid5", 3), ("raid5", 4),
                ("raid6", 4), ("raid6", 5)]
#: Disks a stripe survives losing, per layout (raid1: all mirrors but one).
PARITY = {"raid5": 1, "raid6": 2}


@dataclass
class Setup:
    layout: str
    disks: list[Disk]
    policy: StoragePolicy
    store: PartStore

    @property
    def tolerance(self) -> int:
        """How many disks may be lost with every byte still readable."""
        if self.layout == "raid1":
            return len(self.disks) - 1
        return PARITY.get(self.layout, 0)

    @property
    def redundant(self) -> bool:
        return self.tolerance > 0

    @property
    def striped(self) -> bool:
        return self.layout in ("raid0", "raid5", "raid6")

    @property
    def parities(self) -> int:
        return PARITY.get(self.layout, 0)

    def fresh_store(self) -> PartStore:
        """A new store on the same disks: nothing cached from before a fault."""
        return PartStore(self.policy, self.store.table_path)


def make_store(root: Path, layout: str, n_disks: int, unit_bytes: int = UNIT_BYTES) -> Setup:
    disks = [Disk(f"disk{i}", str(root / f"disk{i}")) for i in range(n_disks)]
    policy = StoragePolicy("p", [Volume("main", disks, layout, stripe_unit_bytes=unit_bytes)])
    return Setup(layout, disks, policy, PartStore(policy, "store/abc/table"))


def _cases(layouts: Sequence[str] | None = None) -> list[tuple[str, int]]:
    return [case for case in LAYOUT_CASES if layouts is None or case[0] in layouts]


def _setup(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Setup]:
    layout, n_disks = request.param
    made = make_store(tmp_path, layout, n_disks)
    yield made
    made.store.close()


@pytest.fixture(params=_cases(), ids=[f"{layout}x{n}" for layout, n in _cases()])
def setup(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Setup]:
    """Every layout."""
    yield from _setup(request, tmp_path)


REDUNDANT_CASES = _cases(["raid1", *PARITY])


@pytest.fixture(params=REDUNDANT_CASES, ids=[f"{layout}x{n}" for layout, n in REDUNDANT_CASES])
def redundant_setup(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Setup]:
    """The layouts that survive losing a disk."""
    yield from _setup(request, tmp_path)


PARITY_CASES = _cases(list(PARITY))


@pytest.fixture(params=PARITY_CASES, ids=[f"{layout}x{n}" for layout, n in PARITY_CASES])
def parity_setup(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Setup]:
    """The layouts whose stripes carry parity units."""
    yield from _setup(request, tmp_path)


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


# ---------------------------------------------------------------- an independent GF(2^8)

def _product_table() -> np.ndarray:
    """a·b for every pair of bytes, by shift-and-add multiplication modulo x^8+x^4+x^3+x^2+1
    (the field's definition; the code under test uses 64-bit lanes and log tables instead)."""
    a = np.repeat(np.arange(256, dtype=np.int64)[:, None], 256, axis=1)
    b = np.repeat(np.arange(256, dtype=np.int64)[None, :], 256, axis=0)
    product = np.zeros((256, 256), dtype=np.int64)
    for _bit in range(8):
        product ^= np.where(b & 1, a, 0)
        b >>= 1
        a = ((a << 1) & 0xFF) ^ np.where(a & 0x80, 0x1D, 0)
    return product.astype(np.uint8)


PRODUCT = _product_table()


def reference_pq(units: Sequence[bytes], length: int) -> tuple[bytes, bytes]:
    """P = XOR of the units and Q = sum of 2^i·unit_i, units zero-padded to `length`."""
    p = np.zeros(length, dtype=np.uint8)
    q = np.zeros(length, dtype=np.uint8)
    power = 1  # 2^i
    for unit in units:
        padded = np.zeros(length, dtype=np.uint8)
        padded[: len(unit)] = np.frombuffer(unit, dtype=np.uint8)
        p ^= padded
        q ^= PRODUCT[power][padded]
        power = int(PRODUCT[power][2])
    return p.tobytes(), q.tobytes()

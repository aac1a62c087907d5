"""Benchmark of the storage layouts: write and full read of a table-sized part on single, jbod,
raid0, raid1 and raid5 over several disk directories, degraded raid5 reads, and XOR parity speed.

Times are printed as ratios against a single-disk plain store measured in the same run. The
synthetic part imitates what 10M rows of (id UInt64, ts UInt64, value Float64, name String)
compress to; `parts_source` can be swapped for a function yielding real parts from the engine.

    python benchmarks/raid.py                      # ~300 MB, 4 disk directories under a temp dir
    python benchmarks/raid.py --rows 2000000 --disks 4 --root /mnt/bench
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
import warnings
from pathlib import Path
from typing import Callable, Iterator

import numpy as np

from spark_mergetree.storage import DegradedReadWarning, Disk, StoragePolicy, Volume, xor_parity

Part = tuple[str, dict[str, bytes], dict[str, np.ndarray]]

#: Compressed bytes per row per column file, roughly what ClickHouse's LZ4 leaves of each stream
#: for realistic data (ids and timestamps compress well, doubles and names less).
DEFAULT_COLUMN_BYTES_PER_ROW = {"id.bin": 7.0, "ts.bin": 7.0, "value.bin": 8.0, "name.size.bin": 2.0,
                                "name.bin": 6.0}


def synthetic_part(rows: int, column_bytes_per_row: dict[str, float], seed: int = 0,
                   granule_rows: int = 8192) -> Part:
    """One part of random column files cut into compressed-block-sized pieces at granule marks."""
    rng = np.random.default_rng(seed)
    granules = max(1, -(-rows // granule_rows))
    files: dict[str, bytes] = {}
    boundaries: dict[str, np.ndarray] = {}
    for name, per_row in column_bytes_per_row.items():
        size = max(1, int(rows * per_row))
        # Blocks of one or more granules, 64 KiB .. 1 MiB, like the writer cuts them.
        blocks = rng.integers(64 << 10, 1 << 20, size=size // (64 << 10) + 2)
        starts = np.concatenate(([0], np.cumsum(blocks)))
        boundaries[name] = starts[starts < size].astype(np.int64)
        files[name] = rng.integers(0, 256, size, dtype=np.uint8).tobytes()
        files[name.removesuffix(".bin") + ".mrk2"] = rng.integers(0, 256, 24 * (granules + 1), dtype=np.uint8).tobytes()
    files["count.txt"] = str(rows).encode()
    files["columns.txt"] = (b"columns format version: 1\n4 columns:\n`id` UInt64\n`ts` UInt64\n"
                            b"`value` Float64\n`name` String\n")
    files["primary.idx"] = rng.integers(0, 256, 8 * (granules + 1), dtype=np.uint8).tobytes()
    files["checksums.txt"] = rng.integers(0, 256, 400, dtype=np.uint8).tobytes()
    return "all_1_1_0", files, boundaries


def make_policy(root: Path, layout: str, n_disks: int, unit_bytes: int) -> StoragePolicy:
    disks = [Disk(f"disk{i}", str(root / layout / f"disk{i}")) for i in range(n_disks)]
    return StoragePolicy(layout, [Volume("main", disks, layout, stripe_unit_bytes=unit_bytes)])


def timed(action: Callable[[], object]) -> float:
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def measure(policy: StoragePolicy, parts: list[Part], repeats: int) -> dict[str, float]:
    store = policy.part_store("table")
    names = [(name, list(files)) for name, files, _b in parts]
    write_times = []
    for r in range(repeats):
        write_times.append(timed(lambda: [store.write_part(f"{n}_{r}", f, b) for n, f, b in parts]))
        if r:
            for n, _f, _b in parts:
                store.remove_part(f"{n}_{r}")
    write = min(write_times)

    def read_all() -> int:
        return sum(len(store.read_file(f"{n}_0", f)) for n, files in names for f in files)

    read_all()  # warm the page cache, so every layout is measured on equal terms
    read = min(timed(read_all) for _ in range(repeats))
    result = {"write": write, "read": read}
    if policy.volumes[0].layout == "raid5":
        shutil.rmtree(policy.volumes[0].disks[1].path)
        degraded_store = policy.part_store("table")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DegradedReadWarning)
            result["degraded read"] = min(timed(lambda: sum(
                len(degraded_store.read_file(f"{n}_0", f)) for n, files in names for f in files))
                for _ in range(repeats))
        degraded_store.close()
    store.close()
    return result


def xor_throughput(unit_bytes: int = 1 << 20, width: int = 3, total_bytes: int = 256 << 20) -> float:
    """GB/s of data units folded into parity by one thread."""
    rng = np.random.default_rng(1)
    units = [rng.integers(0, 256, unit_bytes, dtype=np.uint8) for _ in range(width)]
    stripes = max(1, total_bytes // (unit_bytes * width))
    xor_parity(units, unit_bytes)
    seconds = timed(lambda: [xor_parity(units, unit_bytes) for _ in range(stripes)])
    return stripes * unit_bytes * width / seconds / 1e9


def main(argv: list[str] | None = None, parts_source: Callable[[argparse.Namespace], Iterator[Part]] | None = None
         ) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--disks", type=int, default=4)
    parser.add_argument("--unit-bytes", type=int, default=1 << 20)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--layouts", default="jbod,raid0,raid1,raid5")
    parser.add_argument("--root", help="directory for the disk directories (default: a temporary one)")
    args = parser.parse_args(argv)

    parts = list(parts_source(args)) if parts_source else [synthetic_part(args.rows, DEFAULT_COLUMN_BYTES_PER_ROW)]
    total = sum(len(d) for _n, files, _b in parts for d in files.values())
    root = Path(args.root) if args.root else Path(tempfile.mkdtemp(prefix="raid-bench-"))
    print(f"{total / 1e6:.0f} MB in {len(parts)} part(s), {args.disks} disk directories under {root}, "
          f"stripe unit {args.unit_bytes} B, {os.cpu_count()} cores; reads are from the page cache")
    try:
        baseline = measure(make_policy(root, "single", 1, args.unit_bytes), parts, args.repeats)
        print(f"{'layout':<8} {'write s':>8} {'write x':>8} {'read s':>8} {'read x':>8} {'MB/s read':>10}")
        print(f"{'single':<8} {baseline['write']:8.3f} {1.0:8.2f} {baseline['read']:8.3f} {1.0:8.2f} "
              f"{total / baseline['read'] / 1e6:10.0f}")
        for layout in args.layouts.split(","):
            result = measure(make_policy(root, layout, args.disks, args.unit_bytes), parts, args.repeats)
            print(f"{layout:<8} {result['write']:8.3f} {result['write'] / baseline['write']:8.2f} "
                  f"{result['read']:8.3f} {result['read'] / baseline['read']:8.2f} {total / result['read'] / 1e6:10.0f}")
            if "degraded read" in result:
                d = result["degraded read"]
                print(f"{'raid5-1':<8} {'':>8} {'':>8} {d:8.3f} {d / baseline['read']:8.2f} {total / d / 1e6:10.0f}"
                      f"   (one disk lost: units rebuilt from parity)")
            shutil.rmtree(root / layout, ignore_errors=True)
        print(f"XOR parity: {xor_throughput(args.unit_bytes):.2f} GB/s per core "
              f"(units of {args.unit_bytes} B, {args.disks - 1} per stripe)")
    finally:
        if not args.root:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()

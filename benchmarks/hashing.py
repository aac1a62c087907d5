"""Benchmark of part hashing: the chained file hash of checksums.txt and block checksums.

Prints throughput in MB/s of
  * `file hash`: `file_hash` over one buffer (the compiled CityHash128WithSeed chain over 2048-byte
    blocks), after a warm-up call that pays numba's first compile (reported separately), and
  * `block checksum`: `cityhash128` over 1 MiB compressed-block-sized buffers (the C extension).

    python benchmarks/hashing.py              # 64 MiB, best of 5
    python benchmarks/hashing.py --mib 256 --runs 3
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from spark_mergetree.format.cityhash import cityhash128, file_hash  # noqa: E402


def best_rate(action: Callable[[], object], size: int, runs: int) -> float:
    """The best of `runs` timings of `action`, as MB/s over `size` bytes."""
    best = float("inf")
    for _ in range(runs):
        started = time.perf_counter()
        action()
        best = min(best, time.perf_counter() - started)
    return size / best / 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mib", type=int, default=64, help="bytes hashed per run, in MiB")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    data = os.urandom(args.mib << 20)

    started = time.perf_counter()
    file_hash(data[: 1 << 20])
    print(f"first call (numba compile or cache load): {time.perf_counter() - started:.2f} s")
    print(f"file hash      {best_rate(lambda: file_hash(data), len(data), args.runs):8.0f} MB/s")

    block = 1 << 20
    blocks = [memoryview(data)[start:start + block] for start in range(0, len(data), block)]
    rate = best_rate(lambda: [cityhash128(b) for b in blocks], len(data), args.runs)
    print(f"block checksum {rate:8.0f} MB/s")


if __name__ == "__main__":
    main()

"""Storage layouts through the engine: write and full read of a real table on jbod, raid0, raid1,
raid5 and raid6 over several disk directories, degraded reads (raid5 with one disk gone, raid6 with
two), and the speed of P (XOR) and Q (Reed–Solomon) parity on one core.

Times are medians. Each layout's runs alternate with runs of a plain single-disk table, and its
ratio is against the plain runs of that same window, so a machine busy with other work slows both
sides alike. The last lines compare raid6 with its goals (write ≤ 1.5× plain, healthy read ≤ 1.1×,
read with two disks lost ≤ 3×, Q parity ≥ 1 GB/s per core).

    python benchmarks/raid.py                          # 10M rows, 4 disk directories in a temp dir
    python benchmarks/raid.py --rows 2000000 --root /mnt/bench
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
from harness import private_coordinator  # benchmarks/ is the script's directory

from spark_mergetree import MergeTreeTable
from spark_mergetree.storage import DegradedReadWarning
from spark_mergetree.storage.parity import q_parity, xor_parity

COLUMNS = [("id", "UInt64"), ("ts", "UInt64"), ("value", "Float64"), ("name", "String")]
LAYOUTS = ("jbod", "raid0", "raid1", "raid5", "raid6")
#: Disks each layout loses in the degraded read (a raid6 stripe survives two).
DEGRADED = {"raid5": 1, "raid6": 2}


def make_data(rows: int) -> pa.Table:
    ids = np.arange(rows, dtype=np.uint64)
    return pa.table({"id": ids, "ts": ids * 1000 + 1_700_000_000, "value": np.random.default_rng(1).random(rows),
                     "name": pa.array(np.char.add("name_", (ids % 100_000).astype(str)))})


def policy(root: Path, layout: str, disks: int, unit_bytes: int) -> dict:
    return {"name": layout, "disks": {f"d{i}": {"path": str(root / f"{layout}-disk{i}")} for i in range(disks)},
            "volumes": [{"name": "main", "disks": [f"d{i}" for i in range(disks)], "layout": layout,
                         "stripe_unit_bytes": unit_bytes}]}


def paired(baseline: Callable[[], object], action: Callable[[], object], repeats: int) -> tuple[float, float]:
    """Median seconds of `action` and its ratio to `baseline`, the two run alternately."""
    base_times, times = [], []
    for _ in range(repeats):
        for run, into in ((baseline, base_times), (action, times)):
            start = time.perf_counter()
            run()
            into.append(time.perf_counter() - start)
    return statistics.median(times), statistics.median(times) / statistics.median(base_times)


def writer(root: Path, name: str, settings: dict, data: pa.Table) -> Callable[[], None]:
    def write() -> None:
        shutil.rmtree(root / name, ignore_errors=True)
        for disk in root.glob(f"{name}-disk*"):
            shutil.rmtree(disk, ignore_errors=True)
        MergeTreeTable.create(root / name, COLUMNS, order_by="id", settings={"auto_merge": False, **settings}) \
            .insert(data)

    return write


def parity_throughput(parity: Callable[[list[np.ndarray], int], np.ndarray], unit_bytes: int = 1 << 20,
                      width: int = 3, total_bytes: int = 256 << 20) -> float:
    """GB/s of data units turned into one parity unit, on one core (best of five passes)."""
    units = [np.random.default_rng(i).integers(0, 255, unit_bytes, dtype=np.uint8) for i in range(width)]
    parity(units, unit_bytes)  # compile / warm up
    rounds = max(1, total_bytes // (unit_bytes * width) // 5)
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(rounds):
            parity(units, unit_bytes)
        best = min(best, time.perf_counter() - start)
    return rounds * unit_bytes * width / best / 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--disks", type=int, default=4)
    parser.add_argument("--unit-bytes", type=int, default=1 << 20)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--root", default=None, help="where the disk directories go (default: a temp dir)")
    args = parser.parse_args()
    root = Path(args.root or tempfile.mkdtemp(prefix="mergetree-raid-"))
    private_coordinator(root)
    data = make_data(args.rows)

    write_plain = writer(root, "plain", {}, data)
    write_plain()
    read_plain = MergeTreeTable.open(root / "plain").to_arrow
    print(f"rows: {args.rows:,}  disks: {args.disks}  stripe unit: {args.unit_bytes:,} B  (medians of {args.repeats})")
    print(f"{'layout':22}{'write s':>9}{'ratio':>7}{'read s':>9}{'ratio':>7}")
    write, _ = paired(write_plain, write_plain, args.repeats)
    read, _ = paired(read_plain, read_plain, args.repeats)
    print(f"{'plain (1 disk)':22}{write:9.2f}{1:7.2f}{read:9.2f}{1:7.2f}")
    ratios: dict[str, float] = {}
    for layout in LAYOUTS:
        disks = 2 if layout == "raid1" else args.disks
        write_layout = writer(root, layout, {"storage_policy": policy(root, layout, disks, args.unit_bytes)}, data)
        write, ratios[f"{layout} write"] = paired(write_plain, write_layout, args.repeats)
        table = MergeTreeTable.open(root / layout)
        read, ratios[f"{layout} read"] = paired(read_plain, table.to_arrow, args.repeats)
        print(f"{layout:22}{write:9.2f}{ratios[f'{layout} write']:7.2f}{read:9.2f}{ratios[f'{layout} read']:7.2f}")
        lost = DEGRADED.get(layout, 0)
        if lost:
            for disk in range(1, 1 + lost):
                shutil.rmtree(root / f"{layout}-disk{disk}")
            degraded = MergeTreeTable.open(table.path)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DegradedReadWarning)
                rows = degraded.to_arrow().num_rows
                assert rows == args.rows, rows
                read, ratios[f"{layout} degraded read"] = paired(read_plain, degraded.to_arrow, args.repeats)
            label = f"{layout} {lost} disk{'s' if lost > 1 else ''} lost"
            print(f"{label:22}{'':16}{read:9.2f}{ratios[f'{layout} degraded read']:7.2f}")
    p_speed = parity_throughput(xor_parity)
    q_speed = parity_throughput(q_parity)
    print(f"P parity (XOR): {p_speed:.2f} GB/s per core")
    print(f"Q parity (GF(2^8) Reed-Solomon): {q_speed:.2f} GB/s per core")
    print("raid6 goals:")
    for what, value, goal, unit in (("write", ratios["raid6 write"], 1.5, "x plain"),
                                    ("healthy read", ratios["raid6 read"], 1.1, "x plain"),
                                    ("read, 2 disks lost", ratios["raid6 degraded read"], 3.0, "x plain")):
        print(f"  {what:20} {value:6.2f} {unit} (goal <= {goal}) {'met' if value <= goal else 'MISSED'}")
    print(f"  {'Q parity':20} {q_speed:6.2f} GB/s (goal >= 1.0) {'met' if q_speed >= 1.0 else 'MISSED'}")
    if args.root is None:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()

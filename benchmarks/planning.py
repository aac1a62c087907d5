"""Planning benchmark: how long choosing the parts and granules of a key-range read takes as tables grow.

    python benchmarks/planning.py [--parts 1000] [--granules 10000000] [--sizes 1e6,1e7,1e8] [--runs 5]

1. Planning at scale: a table of `parts` parts and `granules` granules in all (index_granularity 1,
   PARTITION BY id % parts, so every part spans the whole key range and partition pruning cannot
   help: the primary index of every part is evaluated). A key range of 1,000 ids is planned
   - cold: in a new Python process that opens the table and plans once (imports excluded, printed
     separately), so nothing is cached;
   - warm: again in this process, on a table opened once (part metadata cached by part identity).
2. The key-range curve: tables of `sizes` rows (ORDER BY id, PARTITION BY intDiv(id, rows / 16), the
   default granularity 8192), a read of 10,000 ids; the time should stay flat as the table grows.

Medians of `runs` warm runs after one warm-up. Prints seconds and milliseconds; no oracle is needed
(the plans' granule counts are printed so a wrong plan shows).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from harness import private_coordinator, warm_median  # noqa: E402 - benchmarks/ is the script's directory

_COLD = """
import sys, time
started = time.perf_counter()
from spark_mergetree import MergeTreeTable
imported = time.perf_counter()
table = MergeTreeTable.open(sys.argv[1])
plan = table.explain(sys.argv[2])
done = time.perf_counter()
print(imported - started, done - imported, plan.granules_read)
"""


def _insert_in_blocks(table, rows: int, block: int = 10_000_000) -> None:
    for start in range(0, rows, block):
        ids = np.arange(start, min(rows, start + block), dtype=np.uint64)
        table.insert(pa.table({"id": ids, "value": ids.astype(np.float64) * 0.5}))


def planning_at_scale(work: Path, parts: int, granules: int, runs: int) -> None:
    from spark_mergetree import MergeTreeTable

    path = work / "wide"
    table = MergeTreeTable.create(path, [("id", "UInt64"), ("value", "Float64")], order_by="id",
                                  partition_by=f"id % {parts}",
                                  settings={"index_granularity": 1, "auto_merge": False})
    started = time.perf_counter()
    _insert_in_blocks(table, granules, block=granules)  # one insert: one part per partition
    print(f"table: {parts:,} parts, {granules:,} granules (written in {time.perf_counter() - started:.1f} s)")
    low = granules // 2
    where = f"id BETWEEN {low} AND {low + 999}"
    out = subprocess.run([sys.executable, "-c", _COLD, str(path), where], check=True, capture_output=True,
                         text=True, cwd=REPO_ROOT, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    imports, cold, cold_granules = out.stdout.split()
    opened = MergeTreeTable.open(path)
    warm, _ = warm_median(runs, lambda: opened.explain(where))
    plan = opened.explain(where)
    assert plan.granules_read == int(cold_granules)
    print(f"  key range of 1,000 ids: {plan.granules_read:,} granules of {len(plan.parts):,} parts")
    print(f"  plan cold (new process, open + plan): {float(cold) * 1000:8.1f} ms   (imports {float(imports):.2f} s)")
    print(f"  plan warm (table opened once):        {warm * 1000:8.1f} ms")


def key_range_curve(work: Path, sizes: list[int], runs: int) -> None:
    from spark_mergetree import MergeTreeTable

    print("key-range read of 10,000 ids (ORDER BY id, 16 partitions, granularity 8192):")
    print(f"  {'rows':>13} {'parts':>6} {'granules read':>14} {'plan ms':>9} {'read ms':>9}")
    for rows in sizes:
        path = work / f"curve_{rows}"
        table = MergeTreeTable.create(path, [("id", "UInt64"), ("value", "Float64")], order_by="id",
                                      partition_by=f"intDiv(id, {max(1, rows // 16)})",
                                      settings={"auto_merge": False})
        _insert_in_blocks(table, rows)
        low = rows // 3
        where = f"id BETWEEN {low} AND {low + 9_999}"
        plan_time, _ = warm_median(runs, lambda t=table, w=where: t.explain(w))
        read_time, _ = warm_median(runs, lambda t=table, w=where: t.to_arrow(["id", "value"], w))
        result = table.to_arrow(["id"], where)
        assert result.num_rows == 10_000, result.num_rows
        plan = table.explain(where)
        print(f"  {rows:>13,} {len(plan.parts):>6} {plan.granules_read:>14,} {plan_time * 1000:>9.1f} "
              f"{read_time * 1000:>9.1f}")
        shutil.rmtree(path, ignore_errors=True)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--parts", type=int, default=1000)
    parser.add_argument("--granules", type=int, default=10_000_000)
    parser.add_argument("--sizes", default="1e6,1e7,1e8")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="mergetree-planning-"))
    private_coordinator(work)
    try:
        planning_at_scale(work, args.parts, args.granules, args.runs)
        key_range_curve(work, [int(float(size)) for size in args.sizes.split(",")], args.runs)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Merge benchmark: merge throughput against chdb (ClickHouse) on the same data in one run, peak
memory of a big merge, and insert latency with background merges running vs without.

1. Throughput: `--parts` parts of `--rows` rows in all (id UInt64 shuffled across parts, ts UInt64,
   value Float64, name String; ORDER BY id), merged into one: ours `optimize(final=True)`, chdb
   `OPTIMIZE TABLE ... FINAL` (its parts inserted with merges stopped, then merges started and
   OPTIMIZE timed). MB/s of input = bytes on disk of the source parts / seconds.
2. Peak RSS of a big merge (`--big-rows`, by default ~2 GB of uncompressed column data): a fresh
   process opens the table and runs `optimize(final=True)`; its resident memory before the merge,
   its peak (VmHWM) and the merge's time.
3. Peak RSS of a merge building a normal and an aggregate projection from the sources' rows
   (`--projection-rows`; the projections added after the inserts), with the projections built from
   runs, built whole in memory (as before runs), and without projections.
4. Insert latency: `--appends` single-row inserts into a table with `auto_merge` on (merges in
   the inserting process's merge workers) and into one with it off, three rounds alternating;
   p50 and p99.

The machine is shared: numbers are noisy. Usage:
    python benchmarks/merge.py [--rows 4000000] [--parts 8] [--big-rows 52000000] [--appends 300]
                               [--projection-rows 8000000]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from harness import private_coordinator  # noqa: E402 - benchmarks/ is the script's directory

from spark_mergetree import MergeTreeTable  # noqa: E402

COLUMNS = [("id", "UInt64"), ("ts", "UInt64"), ("value", "Float64"), ("name", "String")]


def make_parts(rows: int, parts: int, seed: int = 7) -> Iterator[pa.Table]:
    """`parts` batches whose ids interleave (a real merge, not a concatenation), made one at a time."""
    rng = np.random.default_rng(seed)
    ids = rng.permutation(rows).astype(np.uint64)
    for chunk in np.array_split(ids, parts):
        names = pc.binary_join_element_wise("name_", pc.cast(pa.array(chunk % 100_000), pa.string()), "")
        yield pa.table({"id": chunk, "ts": chunk * 1000 + 1_700_000_000, "value": rng.random(len(chunk)),
                        "name": names})


def ours_table(path: Path, batches: list[pa.Table]) -> MergeTreeTable:
    table = MergeTreeTable.create(path, COLUMNS, order_by="id", settings={"auto_merge": False})
    for batch in batches:
        table.insert(batch)
    return table


def throughput(work: Path, rows: int, parts: int) -> None:
    from chdb import session

    batches = list(make_parts(rows, parts))
    table = ours_table(work / "ours", batches)
    input_bytes = sum(p.bytes_on_disk for p in table.parts())
    started = time.perf_counter()
    table.optimize(final=True)
    ours = time.perf_counter() - started
    assert len(table.parts()) == 1 and table.count() == rows

    chdb = session.Session(str(work / "chdb"))
    chdb.query("CREATE DATABASE IF NOT EXISTS bench")
    chdb.query("CREATE TABLE bench.t (id UInt64, ts UInt64, value Float64, name String) ENGINE = MergeTree "
               "ORDER BY id")
    chdb.query("SYSTEM STOP MERGES bench.t")
    for data in batches:  # noqa: B007 - chdb's Python() table function reads the local name `data`
        chdb.query("INSERT INTO bench.t SELECT * FROM Python(data)")
    chdb_parts = int(str(chdb.query("SELECT count() FROM system.parts WHERE database = 'bench' AND table = 't' "
                                    "AND active", "CSV")).strip())
    chdb_bytes = int(str(chdb.query("SELECT sum(bytes_on_disk) FROM system.parts WHERE database = 'bench' "
                                    "AND table = 't' AND active", "CSV")).strip())
    chdb.query("SYSTEM START MERGES bench.t")
    started = time.perf_counter()
    chdb.query("OPTIMIZE TABLE bench.t FINAL")
    theirs = time.perf_counter() - started
    print(f"merge of {parts} parts, {rows:,} rows into one")
    print(f"  ours: {input_bytes / 1e6:8.1f} MB in {ours:6.2f} s = {input_bytes / 1e6 / ours:7.1f} MB/s")
    print(f"  chdb: {chdb_bytes / 1e6:8.1f} MB in {theirs:6.2f} s = {chdb_bytes / 1e6 / theirs:7.1f} MB/s "
          f"({chdb_parts} parts before OPTIMIZE FINAL)")
    print(f"  time ratio ours/chdb: {ours / theirs:.2f}x  (goal ≤ 1.5x)")


# The peak is the child's VmHWM: ru_maxrss would include the parent's memory, from the fork
# before exec (on Linux), and the parent holds chdb.
_MERGE_CHILD = """
import json, sys, time
from spark_mergetree import MergeTreeTable
def status(field):
    line = next(l for l in open('/proc/self/status') if l.startswith(field + ':'))
    return int(line.split()[1]) * 1024
if len(sys.argv) > 2:  # the projections' run size (a huge one: built whole in memory, as before runs)
    from spark_mergetree.engine import projection_merge
    projection_merge.RUN_BYTES = int(sys.argv[2])
table = MergeTreeTable.open(sys.argv[1])
parts = table.parts()
decoded = 0
for p in parts:
    checksums = table.reader(p.name).checksums
    decoded += sum(e.uncompressed_size for n, e in checksums.files.items() if e.is_compressed and n.endswith('.bin'))
before = status('VmRSS')
started = time.perf_counter()
table.optimize(final=True)
seconds = time.perf_counter() - started
print(json.dumps({"input": sum(p.bytes_on_disk for p in parts), "decoded": decoded, "rows": sum(p.rows for p in parts),
                  "before": before, "peak": status('VmHWM'), "seconds": seconds, "parts": len(table.parts())}))
"""


def peak_memory(work: Path, rows: int, parts: int) -> None:
    path = work / "big"
    table = MergeTreeTable.create(path, COLUMNS, order_by="id", settings={"auto_merge": False})
    for batch in make_parts(rows, parts, seed=11):
        table.insert(batch)
    del table
    result = merge_child(path)
    print(f"big merge: {result['rows']:,} rows, {result['decoded'] / 1e9:.2f} GB of column data "
          f"({result['input'] / 1e6:.0f} MB of parts on disk) in {result['seconds']:.1f} s")
    print(f"  RSS before the merge {result['before'] / 1e6:.0f} MB, peak {result['peak'] / 1e6:.0f} MB "
          f"(goal: 2 GB under 512 MB)")


def merge_child(path: Path, *args: str) -> dict[str, float]:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    out = subprocess.run([sys.executable, "-c", _MERGE_CHILD, str(path), *args], check=True, capture_output=True,
                         text=True, env=env).stdout
    result = json.loads(out.strip().splitlines()[-1])
    assert result["parts"] == 1
    return result


PROJECTIONS = ("PROJECTION by_name (SELECT name, id, value ORDER BY name)",
               "PROJECTION name_stats (SELECT name, sum(value), count(), max(ts) GROUP BY name)")


def projection_memory(work: Path, rows: int, parts: int) -> None:
    """A merge that builds a normal and an aggregate projection from the sources' rows (added after
    the inserts, so no source holds them): peak RSS with the projections built from runs, built
    whole in memory (as before runs), and of the same merge without projections."""
    results = {}
    for label, projections, run_bytes in (("without projections", (), None), ("projections from runs", PROJECTIONS, None),
                                          ("projections built whole", PROJECTIONS, str(1 << 62))):
        path = work / label.replace(" ", "_")
        table = MergeTreeTable.create(path, COLUMNS, order_by="id", settings={"auto_merge": False})
        for batch in make_parts(rows, parts, seed=13):
            table.insert(batch)
        for declaration in projections:
            table.add_projection(declaration)
        del table
        results[label] = merge_child(path, *([run_bytes] if run_bytes else []))
    print(f"merge of {parts} parts, {rows:,} rows, building a normal and an aggregate projection from rows")
    for label, result in results.items():
        print(f"  {label:26} peak RSS {result['peak'] / 1e6:5.0f} MB (before {result['before'] / 1e6:4.0f} MB), "
              f"{result['seconds']:5.1f} s")


def latencies(table: MergeTreeTable, appends: int) -> np.ndarray:
    times = []
    for i in range(appends):
        batch = pa.table({"id": pa.array([i], pa.uint64()), "ts": pa.array([i], pa.uint64()),
                          "value": pa.array([0.5]), "name": pa.array([f"n{i}"])})
        started = time.perf_counter()
        table.insert(batch)
        times.append(time.perf_counter() - started)
    return np.array(times) * 1000


def insert_latency(work: Path, appends: int, rounds: int = 3) -> None:
    """Rounds alternate between a table without background merges and one with them (in this
    process's merge workers), so the machine's load changes touch both alike; p50/p99 over all."""
    without, background = [], []
    merging = None
    for n in range(rounds):
        without.append(latencies(MergeTreeTable.create(work / f"plain{n}", COLUMNS, order_by="id",
                                                       settings={"auto_merge": False}), appends))
        merging = MergeTreeTable.create(work / f"merging{n}", COLUMNS, order_by="id")
        background.append(latencies(merging, appends))
        MergeTreeTable.wait_for_merges(timeout=300)
    plain, merged = np.concatenate(without), np.concatenate(background)
    print(f"insert latency, {rounds} rounds of {appends} single-row appends each way (ms)")
    for label, values in (("without background merges", plain), ("with background merges", merged)):
        print(f"  {label:28} p50 {np.percentile(values, 50):6.1f}  p99 {np.percentile(values, 99):6.1f}")
    print(f"  ratio with/without: p50 {np.percentile(merged, 50) / np.percentile(plain, 50):.2f}x  "
          f"p99 {np.percentile(merged, 99) / np.percentile(plain, 99):.2f}x  (goal: p99 within 1.2x); "
          f"parts left in the last table: {len(merging.parts()) if merging else 0}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=4_000_000)
    parser.add_argument("--parts", type=int, default=8)
    parser.add_argument("--big-rows", type=int, default=52_000_000)  # ~2.1 GB of column data
    parser.add_argument("--appends", type=int, default=300)
    parser.add_argument("--projection-rows", type=int, default=8_000_000)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="mergetree-merge-bench-"))
    private_coordinator(work)
    throughput(work / "throughput", args.rows, args.parts)
    peak_memory(work / "memory", args.big_rows, args.parts)
    projection_memory(work / "projections", args.projection_rows, args.parts)
    insert_latency(work / "latency", args.appends)


if __name__ == "__main__":
    main()

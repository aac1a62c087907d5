"""Structured Streaming sink benchmark: writeStream.format("mergetree") against Spark's own Parquet
file sink (also exactly once), on the same input, in one SparkSession.

    python benchmarks/streaming.py [--batches 20] [--rows 200000] [--runs 3] [--dir /tmp/mergetree-streaming]

Input: `batches` Parquet files of `rows` rows (id long, ts long, value double, name string), read
one file per micro-batch (`maxFilesPerTrigger=1`) with Trigger.AvailableNow. Each sink runs the
whole input from a fresh checkpoint and table/directory, once to warm up and `runs` times timed:
sustained rows/s is all rows over the query's wall time (start to termination), and the batch
latency is the median of the micro-batches' `triggerExecution` durations Spark reports in
`recentProgress`. The report gives the median run of each sink and the ratios mergetree / Parquet.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from harness import REPO_ROOT, local_session, private_coordinator  # benchmarks/ is the script's directory

sys.path.insert(0, str(REPO_ROOT))

SCHEMA = "id long, ts long, value double, name string"


def write_input(directory: Path, batches: int, rows: int) -> None:
    rng = np.random.default_rng(7)
    names = np.array([f"name-{i}" for i in range(1000)], dtype=object)
    directory.mkdir(parents=True)
    for batch in range(batches):
        ids = np.arange(batch * rows, (batch + 1) * rows, dtype=np.int64)
        pq.write_table(pa.table({"id": ids, "ts": 1_700_000_000_000 + ids, "value": rng.random(rows),
                                 "name": pa.array(names[rng.integers(0, 1000, rows)], pa.string())}),
                       directory / f"b{batch:05d}.parquet")


def run_sink(spark: Any, sink: str, source: Path, work: Path) -> tuple[float, float, int]:
    """(wall seconds, median batch seconds, batches) of one run of the whole input into `sink`."""
    shutil.rmtree(work, ignore_errors=True)
    stream = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).parquet(str(source))
    writer = stream.writeStream.option("checkpointLocation", str(work / "checkpoint")).trigger(availableNow=True)
    if sink == "mergetree":
        writer = writer.format("mergetree").option("order_by", "id")
    else:
        writer = writer.format("parquet")
    started = time.perf_counter()
    query = writer.start(str(work / "out"))
    if not query.awaitTermination(3600):
        query.stop()
        raise SystemExit(f"the {sink} query did not finish within an hour")
    wall = time.perf_counter() - started
    if query.exception() is not None:
        raise SystemExit(f"the {sink} query failed: {query.exception()}")
    durations = [p["durationMs"]["triggerExecution"] / 1000 for p in query.recentProgress
                 if p.get("numInputRows", 0) > 0]
    return wall, statistics.median(durations), len(durations)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--dir", type=Path, default=Path("/tmp/mergetree-streaming"))
    args = parser.parse_args(argv)
    shutil.rmtree(args.dir, ignore_errors=True)
    args.dir.mkdir(parents=True)
    private_coordinator(args.dir)
    source = args.dir / "input"
    write_input(source, args.batches, args.rows)
    spark = local_session("mergetree-streaming-benchmark", {"spark.sql.shuffle.partitions": "2"})
    total = args.batches * args.rows
    results: dict[str, list[tuple[float, float, int]]] = {"parquet": [], "mergetree": []}
    for sink in results:
        run_sink(spark, sink, source, args.dir / f"warm-{sink}")  # warm-up
    for _ in range(args.runs):
        for sink in results:  # interleaved: both see the same machine
            results[sink].append(run_sink(spark, sink, source, args.dir / sink))
            print(f"{sink}: {results[sink][-1][0]:.2f} s, median batch {results[sink][-1][1]:.3f} s", flush=True)
    summary = {}
    for sink, runs in results.items():
        wall = statistics.median(run[0] for run in runs)
        batch = statistics.median(run[1] for run in runs)
        summary[sink] = (total / wall, batch)
    print(f"\n{args.batches} micro-batches of {args.rows:,} rows, median of {args.runs} runs")
    print(f"{'sink':<10} {'rows/s':>12} {'batch s':>9}")
    for sink, (rate, batch) in summary.items():
        print(f"{sink:<10} {rate:>12,.0f} {batch:>9.3f}")
    print(f"mergetree / parquet: throughput {summary['mergetree'][0] / summary['parquet'][0]:.2f}x, "
          f"batch latency {summary['mergetree'][1] / summary['parquet'][1]:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

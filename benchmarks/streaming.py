"""Structured Streaming sink benchmark: writeStream.format("mergetree") against Spark's own Parquet
file sink (also exactly once), on the same input, in one SparkSession.

    python benchmarks/streaming.py [--batches 20] [--rows 200000] [--runs 3] [--dir /tmp/mergetree-streaming]

Input: `batches` Parquet files of `rows` rows (id long, ts long, value double, name string), read
one file per micro-batch (`maxFilesPerTrigger=1`) with Trigger.AvailableNow. Each sink runs the
whole input from a fresh checkpoint and table/directory, once to warm up and `runs` times timed:
sustained rows/s is all rows over the query's wall time (start to termination), and the batch
latency is the median of the micro-batches' `triggerExecution` durations Spark reports in
`recentProgress`. The report gives the median run of each sink and the ratios mergetree / Parquet.

The source's end-to-end latency (`--latency-commits`, 0 to leave it out): a query reading
`readStream.format("mergetree")` (default trigger: the next micro-batch as soon as the last ended)
into a foreachBatch function that notes when it sees each commit's rows, while this process
commits `--latency-rows` rows every `--latency-interval` seconds into the table; the latency of a
commit is from `insert()` returning (committed) to the function seeing its rows. Beside it, the same
for Spark's Parquet file source (a file renamed into its directory, which is how a file lands
there at once), in the same session.
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


def source_latency(spark: Any, kind: str, work: Path, commits: int, rows: int, interval: float) -> list[float]:
    """Seconds from each commit (a mergetree insert, or a Parquet file renamed into place) to a
    streaming query's foreachBatch seeing its rows."""
    from spark_mergetree import MergeTreeTable

    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    committed: dict[int, float] = {}
    seen: dict[int, float] = {}

    def note(batch_df: Any, batch_id: int) -> None:
        now = time.time()
        for row in batch_df.select("k").distinct().collect():
            seen.setdefault(row[0], now)

    def data(k: int) -> pa.Table:
        return pa.table({"id": np.arange(k * rows, (k + 1) * rows, dtype=np.int64),
                         "k": pa.array(np.full(rows, k, np.int32))})

    if kind == "mergetree":
        table = MergeTreeTable.create(work / "table", [("id", "Int64"), ("k", "Int32")], "id")
        stream = spark.readStream.format("mergetree").option("startingSnapshot", "latest").load(str(work / "table"))

        def commit(k: int) -> None:
            table.insert(data(k))
    else:
        (work / "input").mkdir()
        stream = spark.readStream.schema("id long, k int").parquet(str(work / "input"))

        def commit(k: int) -> None:
            pq.write_table(data(k), work / f".{k}.parquet")
            (work / f".{k}.parquet").rename(work / "input" / f"{k}.parquet")

    query = stream.writeStream.foreachBatch(note).option("checkpointLocation", str(work / "checkpoint")).start()
    try:
        deadline = time.monotonic() + 120
        while not query.recentProgress and time.monotonic() < deadline:  # the query runs its first trigger
            time.sleep(0.1)
        for k in range(commits):
            commit(k)
            committed[k] = time.time()
            time.sleep(interval)
        deadline = time.monotonic() + 120
        while len(seen) < commits and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        query.stop()
    if len(seen) < commits:
        raise SystemExit(f"the {kind} source query saw {len(seen)} of {commits} commits within 120 s")
    return [seen[k] - committed[k] for k in range(commits)]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--dir", type=Path, default=Path("/tmp/mergetree-streaming"))
    parser.add_argument("--latency-commits", type=int, default=20)
    parser.add_argument("--latency-rows", type=int, default=10_000)
    parser.add_argument("--latency-interval", type=float, default=1.0)
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
    if args.latency_commits:
        print(f"\nsource end-to-end latency: {args.latency_commits} commits of {args.latency_rows:,} rows, one "
              f"every {args.latency_interval:g} s, committed -> seen by foreachBatch")
        print(f"{'source':<10} {'median s':>9} {'p90 s':>7} {'max s':>7}")
        for kind in ("parquet", "mergetree"):
            latencies = sorted(source_latency(spark, kind, args.dir / f"latency-{kind}", args.latency_commits,
                                              args.latency_rows, args.latency_interval))
            p90 = latencies[min(len(latencies) - 1, int(0.9 * len(latencies)))]
            print(f"{kind:<10} {statistics.median(latencies):>9.3f} {p90:>7.3f} {latencies[-1]:>7.3f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

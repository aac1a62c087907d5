"""Does a table stay healthy under a stream? One micro-batch a second into writeStream.format("mergetree")
for `--minutes`, with background merges on as a user has them (the table setting `auto_merge`, on by
default: nothing to set), sampled every `--every` seconds.

    nice -n 5 python benchmarks/streaming_health.py [--minutes 10] [--rows 4000] [--every 30] [--dir DIR]

Input: Spark's `rate-micro-batch` source, exactly `--rows` rows per micro-batch, turned into a
realistic schema (ts timestamp, key long, amount decimal(18,4), name string), trigger
processingTime='1 second'. The table is ORDER BY (key, ts), PARTITION BY toYYYYMMDD(ts).

Each sample: the table's active parts (in all and per partition), its rows, the time of a key-range
read and of a full count through the engine (`MergeTreeTable.to_arrow(where=...)`, `count()`) and
through Spark (`spark.read.format("mergetree")`, the second of two runs: warm), and the durations of
the micro-batches since the last sample from the query's progress (`triggerExecution`); the minutes
(and the times in the table) count from the first committed micro-batch. At the end:
the table of samples, a summary (max active parts, parts at the end, read times in the first vs the
last minute, batch duration p50/p90) and whether rows = batches x rows per batch exactly.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from harness import REPO_ROOT, local_session, private_coordinator  # benchmarks/ is the script's directory

sys.path.insert(0, str(REPO_ROOT))

KEYS = 10_000  # distinct keys; the key-range read asks for 1% of them
KEY_RANGE = "key >= 5000 AND key < 5100"


def timed(action: Any) -> tuple[float, Any]:
    started = time.perf_counter()
    result = action()
    return time.perf_counter() - started, result


def sample(spark: Any, path: Path, started: float) -> dict[str, Any] | None:
    """None before the first micro-batch committed."""
    from spark_mergetree import MergeTreeTable

    if not (path / "_mergetree").exists():
        return None
    table = MergeTreeTable.open(path)
    csn, visible = table.visible_parts()  # every read of the sample at this snapshot: they must agree
    if csn is None:
        return None
    per_partition = Counter(name.split("_", 1)[0] for name in visible)
    engine_range, got = timed(lambda: table.to_arrow(["key"], where=KEY_RANGE, snapshot=csn).num_rows)
    engine_count, rows = timed(lambda: table.count(snapshot=csn))
    frame = spark.read.format("mergetree").option("snapshot", str(csn)).load(str(path))
    spark_range = spark_count = 0.0
    for _ in range(2):  # the second run is the warm one
        spark_range, spark_got = timed(lambda: frame.filter(KEY_RANGE).count())
        spark_count, spark_rows = timed(frame.count)
    return {"t": time.monotonic() - started, "parts": len(visible), "per_partition": dict(per_partition),
            "rows": rows, "range_rows": got, "engine_range": engine_range, "engine_count": engine_count,
            "spark_range": spark_range, "spark_count": spark_count,
            "spark_agrees": spark_rows == rows and spark_got == got}


def batch_seconds(progress: list[dict[str, Any]], seen: set[int]) -> list[float]:
    """Durations of the micro-batches in `progress` not counted before (by batch id)."""
    out = []
    for p in progress:
        if p.get("numInputRows", 0) > 0 and p["batchId"] not in seen:
            seen.add(p["batchId"])
            out.append(p["durationMs"]["triggerExecution"] / 1000)
    return out


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--rows", type=int, default=4000, help="rows per micro-batch")
    parser.add_argument("--every", type=float, default=30.0, help="seconds between samples")
    parser.add_argument("--dir", default="/tmp/mergetree-streaming-health")
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                        help="another Spark setting (e.g. spark.python.worker.reuse=false)")
    args = parser.parse_args()

    work = Path(args.dir)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    private_coordinator(work)
    settings = {"spark.sql.shuffle.partitions": "2", "spark.sql.session.timeZone": "UTC"}
    settings.update(item.split("=", 1) for item in args.conf)
    spark = local_session("streaming-health", settings)
    table = work / "events"
    stream = (spark.readStream.format("rate-micro-batch").option("rowsPerBatch", args.rows)
              .option("numPartitions", 2).option("startTimestamp", int(time.time() * 1000)).load()
              .selectExpr("timestamp AS ts", f"value % {KEYS} AS key",
                          "CAST((value % 100000) / 100.0 AS DECIMAL(18, 4)) AS amount",
                          "concat('user-', CAST(value % 997 AS STRING)) AS name"))
    query = (stream.writeStream.format("mergetree").option("checkpointLocation", str(work / "checkpoint"))
             .option("order_by", "(key, ts)").option("partition_by", "toYYYYMMDD(ts)")
             .trigger(processingTime="1 second").start(str(table)))
    started = time.monotonic()
    deadline = started + args.minutes * 60
    samples: list[dict[str, Any]] = []
    durations: list[tuple[float, float]] = []  # (seconds since start at the sample, batch seconds)
    seen: set[int] = set()
    print(f"{'t s':>6} {'parts':>5} {'rows':>9} {'eng range':>9} {'eng count':>9} {'spk range':>9} "
          f"{'spk count':>9} {'batches':>7} {'batch p50':>9}  per partition", flush=True)
    try:
        next_sample = started + 1
        while time.monotonic() < deadline:
            time.sleep(max(0.0, min(next_sample, deadline) - time.monotonic()))
            if query.exception() is not None:
                raise SystemExit(f"the query failed: {query.exception()}")
            s = sample(spark, table, started)
            if s is None:  # no batch committed yet: the minutes count from the first one
                started = time.monotonic()
                deadline, next_sample = started + args.minutes * 60, started + 1
                continue
            if not samples:
                next_sample = started  # then every `every` seconds from the first commit
            next_sample += args.every
            fresh = batch_seconds(query.recentProgress, seen)
            durations += [(s["t"], d) for d in fresh]
            s["batches"] = len(fresh)
            samples.append(s)
            print(f"{s['t']:6.0f} {s['parts']:5d} {s['rows']:9d} {s['engine_range']:9.3f} {s['engine_count']:9.3f} "
                  f"{s['spark_range']:9.3f} {s['spark_count']:9.3f} {len(fresh):7d} "
                  f"{statistics.median(fresh) if fresh else float('nan'):9.2f}  {s['per_partition']}"
                  + ("" if s["spark_agrees"] else "  SPARK DISAGREES"), flush=True)
    finally:
        query.stop()
    durations += [(time.monotonic() - started, d) for d in batch_seconds(query.recentProgress, seen)]

    from spark_mergetree import MergeTreeTable

    final = MergeTreeTable.open(table)
    batches = final.app_version(str(query.id))
    rows = final.count()
    expected = (batches + 1) * args.rows if batches is not None else 0
    _, visible = final.visible_parts()
    first = [s for s in samples if s["t"] <= 60 + args.every / 2] or samples[:1]
    last = [s for s in samples if s["t"] >= samples[-1]["t"] - 60] if samples else []
    seconds = [d for _, d in durations]

    def mean(key: str, group: list[dict[str, Any]]) -> float:
        return statistics.mean(s[key] for s in group) if group else float("nan")

    print("\nsummary")
    print(f"  micro-batches committed: {0 if batches is None else batches + 1} (last batch id {batches}), "
          f"{args.rows} rows each, over {args.minutes:g} min")
    print(f"  active parts: max {max((s['parts'] for s in samples), default=0)} "
          f"(per partition max {max((max(s['per_partition'].values(), default=0) for s in samples), default=0)}), "
          f"at the end {len(visible)}")
    for key, label in (("engine_range", "engine key range"), ("engine_count", "engine count"),
                       ("spark_range", "Spark key range"), ("spark_count", "Spark count")):
        print(f"  {label}: first minute {mean(key, first):.3f} s, last minute {mean(key, last):.3f} s")
    print(f"  batch duration (triggerExecution, {len(seconds)} batches): p50 {percentile(seconds, 0.5):.2f} s, "
          f"p90 {percentile(seconds, 0.9):.2f} s, max {max(seconds, default=float('nan')):.2f} s")
    verdict = "exactly" if rows == expected else "MISMATCH"
    print(f"  rows: {rows} = batches x rows per batch ({expected}): {verdict}")


if __name__ == "__main__":
    main()

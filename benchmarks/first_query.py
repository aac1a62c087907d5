"""First queries: what a new SparkSession's first read and first write cost above warm ones.

    python benchmarks/first_query.py [--rows 1000000] [--sessions 3]

A table of `rows` rows (id, value, name; ORDER BY id) is written once by the engine. Then each of
`sessions` new SparkSessions (each a new JVM and new Python workers, as a user's new notebook gets)
runs, in order: a key-range read of 1,000 rows (twice), and a 1,000-row append (twice). The first of
each pair pays what only a first query pays (importing the package in a new worker, compiling or
loading kernels, opening the table and its parts); the second is warm. The report prints the
medians over sessions of first, warm, and first - warm. Neither the session's start nor its
first Spark job (run before, on spark.range) is counted.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from harness import REPO_ROOT, local_session, private_coordinator  # benchmarks/ is the script's directory

sys.path.insert(0, str(REPO_ROOT))


def _one_session(path: str, rows: int, scratch: Path) -> dict[str, float]:
    spark = local_session("mergetree-first-query", {"spark.sql.shuffle.partitions": "2"})
    try:
        low = rows // 2
        timings: dict[str, float] = {}
        spark.range(10).count()  # the JVM's own first job (any source pays it) is not counted
        for label in ("read first", "read warm"):
            started = time.perf_counter()
            got = (spark.read.format("mergetree").load(path)
                   .filter(f"id BETWEEN {low} AND {low + 999}").collect())
            timings[label] = time.perf_counter() - started
            assert len(got) == 1000, len(got)
        batch = spark.range(1000).selectExpr("id", "rand() AS value", "cast(id AS string) AS name")
        batch.cache().count()  # the rows are ready before the clock starts
        for number, label in enumerate(("write first", "write warm")):
            started = time.perf_counter()
            (batch.write.format("mergetree").option("order_by", "id").mode("append")
             .save(str(scratch / f"written-{number}")))
            timings[label] = time.perf_counter() - started
        return timings
    finally:
        spark.stop()
        from pyspark.sql import SparkSession

        SparkSession._instantiatedSession = None  # the next session starts a new JVM context


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--sessions", type=int, default=3)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="mergetree-first-query-"))
    private_coordinator(work)
    import numpy as np
    import pyarrow as pa

    from spark_mergetree import MergeTreeTable

    ids = np.arange(args.rows, dtype=np.int64)
    table = MergeTreeTable.create(work / "events", [("id", "Int64"), ("value", "Float64"), ("name", "String")],
                                  order_by="id", settings={"auto_merge": False})
    table.insert(pa.table({"id": ids, "value": np.random.default_rng(1).random(args.rows),
                           "name": pa.array(ids % 1000).cast(pa.string())}))
    results = []
    for session in range(args.sessions):
        scratch = work / f"session-{session}"
        scratch.mkdir()
        results.append(_one_session(str(work / "events"), args.rows, scratch))
        print(f"session {session}: " + ", ".join(f"{k} {v:.2f}s" for k, v in results[-1].items()), flush=True)
    print(f"{args.rows:,}-row table, {args.sessions} new sessions (medians), local[2]")
    print(f"{'':28}{'first s':>9}{'warm s':>9}{'first - warm':>14}")
    for action in ("read", "write"):
        first = statistics.median(r[f"{action} first"] for r in results)
        warm = statistics.median(r[f"{action} warm"] for r in results)
        label = "key range of 1,000 rows" if action == "read" else "append of 1,000 rows"
        print(f"{label:28}{first:9.2f}{warm:9.2f}{first - warm:14.2f}")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

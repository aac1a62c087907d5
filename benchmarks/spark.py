"""Spark benchmark: mergetree against Parquet on the same data, one SparkSession.

    python benchmarks/spark.py [--rows 10000000] [--runs 3] [--dir /tmp/mt-bench] [--profile]

Data: `rows` rows of (id long, ts long, value double, name string), written as Parquet and as a
mergetree table ORDER BY id. Each measurement is the median of `runs` runs; the report prints
seconds for both formats and the ratio mergetree / Parquet for: write, a full scan of all four
columns, a projected sum(value), and the key range `id BETWEEN 5000000 AND 5010000` (with the
granules the range reads). `--profile` runs the mergetree reads once more under cProfile inside
the Python workers (spark.python.profile) and prints the top functions.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


def _session(profile: bool):
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(REPO_ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
    from pyspark.sql import SparkSession

    builder = (SparkSession.builder.master("local[2]").appName("mergetree-benchmark")
               .config("spark.sql.python.filterPushdown.enabled", "true")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.ui.enabled", "false")
               .config("spark.driver.memory", "3g"))
    if profile:
        builder = builder.config("spark.python.profile", "true")
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _median(runs: int, action: Callable[[], object]) -> tuple[float, object]:
    times, result = [], None
    for _ in range(runs):
        started = time.perf_counter()
        result = action()
        times.append(time.perf_counter() - started)
    return statistics.median(times), result


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--dir", default="/tmp/mergetree-benchmark")
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args(argv)
    root = Path(args.dir)
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    parquet_path, mergetree_path = str(root / "parquet"), str(root / "mergetree")

    spark = _session(args.profile)
    from spark_mergetree.engine.table import MergeTreeTable
    from spark_mergetree.spark import register

    register(spark)
    data = spark.range(0, args.rows, numPartitions=2).selectExpr(
        "id", "1700000000000 + id * 10 as ts", "rand(42) * 1000 as value",
        "concat('name-', cast(id % 10000 as string)) as name")
    low = args.rows // 2
    high = low + 10_000
    key_range = f"id BETWEEN {low} AND {high}"
    results: list[tuple[str, float, float, str]] = []

    def write_parquet() -> None:
        data.write.mode("overwrite").parquet(parquet_path)

    def write_mergetree() -> None:
        data.write.format("mergetree").option("order_by", "id").mode("overwrite").save(mergetree_path)

    parquet_write, _ = _median(args.runs, write_parquet)
    mergetree_write, _ = _median(args.runs, write_mergetree)
    results.append(("write", parquet_write, mergetree_write, ""))
    print(f"write: parquet {parquet_write:.2f}s, mergetree {mergetree_write:.2f}s", flush=True)

    parquet = spark.read.parquet(parquet_path)
    mergetree = spark.read.format("mergetree").load(mergetree_path)
    full_scan = "sum(id)", "sum(ts - 1700000000000)", "sum(value)", "sum(length(name))"
    p_full, p_full_result = _median(args.runs, lambda: parquet.selectExpr(*full_scan).collect())
    m_full, m_full_result = _median(args.runs, lambda: mergetree.selectExpr(*full_scan).collect())
    assert p_full_result[0][0] == m_full_result[0][0], (p_full_result, m_full_result)
    results.append(("full scan, 4 columns", p_full, m_full, ""))

    projected = spark.read.format("mergetree").option("columns", "value").load(mergetree_path)
    p_sum, p_sum_result = _median(args.runs, lambda: parquet.selectExpr("sum(value)").collect())
    m_sum, m_sum_result = _median(args.runs, lambda: projected.selectExpr("sum(value)").collect())
    assert abs(p_sum_result[0][0] - m_sum_result[0][0]) < 1e-6 * abs(p_sum_result[0][0])
    results.append(("projected sum(value)", p_sum, m_sum, "columns=value"))

    p_range, p_count = _median(args.runs, lambda: parquet.filter(key_range).count())
    m_range, m_count = _median(args.runs,
                               lambda: spark.read.format("mergetree").load(mergetree_path).filter(key_range).count())
    assert p_count == m_count == high - low + 1, (p_count, m_count)
    table = MergeTreeTable.open(mergetree_path)
    plan = table.explain(where=key_range)
    granules = f"granules read {getattr(plan, 'granules_read', '?')} of {getattr(plan, 'granules_total', '?')}"
    results.append((f"key range {key_range}", p_range, m_range, granules))

    print(f"\n{args.rows:,} rows, median of {args.runs} runs, local[2]")
    print(f"{'measurement':<48} {'parquet s':>10} {'mergetree s':>12} {'ratio':>7}  notes")
    for name, p_seconds, m_seconds, notes in results:
        print(f"{name:<48} {p_seconds:>10.2f} {m_seconds:>12.2f} {m_seconds / p_seconds:>7.2f}  {notes}")

    if args.profile:
        mergetree.selectExpr(*full_scan).collect()
        spark.sparkContext.show_profiles()
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""The spark-mergetree demo, on embedded defaults: a local Spark and the local file coordinator.

    python examples/demo.py [--rows 2000000] [--root /tmp/spark-mergetree-demo]

It writes a partitioned table from Spark, reads it back with partition and granule pruning (Spark's
own filters prune, and only the columns a query uses are read, in a session set up with
spark_mergetree.configure), shows what a read touches, commits two tables in one transaction (and rolls one back), merges parts, and
checks every file against its checksums — the parts on disk are ClickHouse parts throughout.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from pathlib import Path


def run(spark, root: Path, rows: int) -> dict:
    """The demo proper, on an existing SparkSession; returns the figures it printed."""
    import spark_mergetree
    from spark_mergetree import MergeTreeTable

    spark_mergetree.register(spark)
    events, totals = str(root / "events"), str(root / "daily_totals")
    data = spark.range(rows).selectExpr(
        "id", "date_add(date'2024-01-01', cast(id % 120 as int)) as day",
        "rand(7) * 100 as value", "concat('user-', cast(id % 1000 as string)) as name")

    started = time.perf_counter()
    (data.write.format("mergetree").option("order_by", "id").option("partition_by", "toYYYYMM(day)")
     .mode("overwrite").save(events))
    print(f"wrote {rows:,} rows in {time.perf_counter() - started:.2f}s as ClickHouse parts:")
    table = MergeTreeTable.open(events)
    for part in table.parts():
        print(f"  {part.name:24} {part.rows:>10,} rows {part.granules:>6} granules")

    low = rows // 2
    where = f"id BETWEEN {low} AND {low + 999}"
    plan = table.explain(where)
    print(f"{where}: reads {plan.granules_read} of {plan.granules_total} granules")
    # The first query of a session pays for starting Spark's Python workers and importing the
    # package in them; the same query again shows what a query costs.
    seconds = []
    for _ in range(2):
        started = time.perf_counter()
        hits = spark.read.format("mergetree").load(events).filter(where).count()
        seconds.append(time.perf_counter() - started)
    print(f"  {hits} rows: first query (cold: Python workers start) {seconds[0]:.2f}s, "
          f"repeated (warm) {seconds[1]:.2f}s")
    january = spark.read.format("mergetree").load(events).filter("day < '2024-02-01'").count()
    print(f"January (partitions pruned by Spark's pushed filter): {january:,} rows")
    spark.read.format("mergetree").load(events).createOrReplaceTempView("events")
    started = time.perf_counter()
    total = spark.sql("SELECT sum(value) FROM events").first()[0]
    print(f"sum(value) = {total:,.0f} in {time.perf_counter() - started:.2f}s, reading only the value column")

    # Two tables change together or not at all.
    with spark_mergetree.transaction(spark):
        data.selectExpr(f"id + {rows} as id", "day", "value", "name").write.format("mergetree") \
            .mode("append").save(events)
        (spark.read.format("mergetree").load(events).groupBy("day").sum("value")
         .withColumnRenamed("sum(value)", "total")
         .write.format("mergetree").option("order_by", "day").mode("overwrite").save(totals))
    try:
        with spark_mergetree.transaction(spark):
            data.write.format("mergetree").mode("append").save(events)
            raise RuntimeError("something went wrong mid-transaction")
    except RuntimeError as error:
        print(f"rolled back: {error}")
    after = spark.read.format("mergetree").load(events).count()
    days = spark.read.format("mergetree").load(totals).count()
    print(f"after the transactions: {after:,} events (the rolled-back append left nothing), {days} daily totals")

    merged = MergeTreeTable.open(events).optimize(final=True)
    report = MergeTreeTable.open(events).check()
    print(f"merged into {', '.join(merged) or 'nothing'}; {report}")
    return {"rows": rows, "hits": hits, "january": january, "after": after, "days": days,
            "granules_read": plan.granules_read, "check_ok": report.ok, "first_seconds": seconds[0],
            "repeated_seconds": seconds[1]}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--root", default="/tmp/spark-mergetree-demo")
    args = parser.parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    root = Path(args.root)
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    # The demo's transactions commit to a coordinator beside its tables (unless one is set), not to
    # the user's own: the demo deletes its tables on every run.
    os.environ.setdefault("SPARK_MERGETREE_COORDINATOR", (root.resolve() / "coordinator").as_uri())
    import spark_mergetree

    builder = (SparkSession.builder.master("local[2]").appName("spark-mergetree-demo")
               .config("spark.sql.session.timeZone", "UTC").config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false"))
    # The session extension: column pruning, and Spark's filters prune partitions and granules.
    spark = spark_mergetree.configure(builder).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    try:
        run(spark, root, args.rows)
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

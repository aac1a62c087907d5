"""A spark-submit job: write a mergetree table, read it back with pruning, then commit two tables
in one transaction.

    spark-submit examples/spark_job.py /tmp/mergetree-demo [--rows 1000000]

With the package pip-installed, format("mergetree") needs no registration; the job registers it
anyway so it also runs from a source checkout (PYTHONPATH=. spark-submit ...). The session is set
up with spark_mergetree.configure: only the columns a query uses are read, and Spark's filters prune
partitions and granules.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from pyspark.sql import SparkSession

import spark_mergetree.spark as mergetree


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("root", help="directory for the demo tables")
    parser.add_argument("--rows", type=int, default=1_000_000)
    args = parser.parse_args(argv)
    os.makedirs(args.root, exist_ok=True)
    events = os.path.join(os.path.abspath(args.root), "events")
    totals = os.path.join(os.path.abspath(args.root), "daily_totals")

    spark = mergetree.configure(SparkSession.builder.appName("mergetree-example")).getOrCreate()
    mergetree.register(spark)

    data = spark.range(args.rows).selectExpr(
        "id", "date_add(date'2024-01-01', cast(id % 90 as int)) as day",
        "rand(7) * 100 as value", "concat('user-', cast(id % 1000 as string)) as name")
    started = time.perf_counter()
    (data.write.format("mergetree").option("order_by", "id").option("partition_by", "toYYYYMM(day)")
     .mode("overwrite").save(events))
    print(f"wrote {args.rows} rows in {time.perf_counter() - started:.2f}s")

    table = spark.read.format("mergetree").load(events)
    table.printSchema()
    middle = args.rows // 2
    started = time.perf_counter()
    key_range = f"id BETWEEN {middle} AND {middle + 999}"
    hits = table.filter(key_range).count()
    print(f"key range: {hits} rows in {time.perf_counter() - started:.2f}s (granules skipped via the primary index)")
    january = spark.read.format("mergetree").option("where", "day < '2024-02-01'").load(events).count()
    print(f"January rows (partition pruning through the where option): {january}")

    # Both tables change together or not at all.
    with mergetree.transaction(spark):
        more = data.selectExpr(f"id + {args.rows} as id", "day", "value", "name")
        more.write.format("mergetree").mode("append").save(events)
        (spark.read.format("mergetree").load(events).groupBy("day").sum("value")
         .withColumnRenamed("sum(value)", "total")
         .write.format("mergetree").option("order_by", "day").mode("overwrite").save(totals))
    print(f"after the transaction: {spark.read.format('mergetree').load(events).count()} events, "
          f"{spark.read.format('mergetree').load(totals).count()} daily totals")
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

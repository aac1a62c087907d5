"""A Spark job: write a mergetree table, read it back with pruning, then commit two tables in one
transaction. It runs unchanged as a classic job and against a Spark Connect server:

    spark-submit examples/spark_job.py /tmp/mergetree-demo [--rows 1000000]
    SPARK_REMOTE=sc://host:15002 python examples/spark_job.py /tmp/mergetree-demo
    SPARK_REMOTE=local[2] python examples/spark_job.py /tmp/mergetree-demo   # a local Connect server

(a Databricks job's Python script task, serverless included, runs it the same way). It uses only
what every session allows: no SparkContext, no restricted confs, and the transaction joined
through `.option("transaction", tx.id)` rather than the session conf. A session the job starts
itself is set up with spark_mergetree.configure (only the columns a query uses are read, and
Spark's filters prune partitions and granules); a Connect server is set up by whoever runs it.
With the package pip-installed, format("mergetree") needs no registration; the job registers it
anyway (harmless) so it also runs in a session started before the install, or from a source
checkout (PYTHONPATH=. spark-submit ...).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import pyspark
from pyspark.sql import SparkSession
from pyspark.sql.utils import is_remote

import spark_mergetree.spark as mergetree


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("root", help="directory for the demo tables")
    parser.add_argument("--rows", type=int, default=1_000_000)
    args = parser.parse_args(argv)
    os.makedirs(args.root, exist_ok=True)
    events = os.path.join(os.path.abspath(args.root), "events")
    totals = os.path.join(os.path.abspath(args.root), "daily_totals")

    builder = SparkSession.builder.appName("mergetree-example")
    if not (is_remote() or os.environ.get("SPARK_REMOTE")):
        builder = mergetree.configure(builder)  # static settings: only a session started here takes them
    spark = builder.getOrCreate()
    mergetree.register(spark)
    print(f"PySpark {pyspark.__version__}, {'Spark Connect' if is_remote() else 'classic'} session")

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

    # Both tables change together or not at all. Each read and write names the transaction.
    with mergetree.transaction(spark, session_conf=False) as tx:
        more = data.selectExpr(f"id + {args.rows} as id", "day", "value", "name")
        more.write.format("mergetree").option("transaction", tx.id).mode("append").save(events)
        (spark.read.format("mergetree").option("transaction", tx.id).load(events)
         .groupBy("day").sum("value").withColumnRenamed("sum(value)", "total")
         .write.format("mergetree").option("transaction", tx.id).option("order_by", "day")
         .mode("overwrite").save(totals))
    print(f"after the transaction: {spark.read.format('mergetree').load(events).count()} events, "
          f"{spark.read.format('mergetree').load(totals).count()} daily totals")
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Planning time of a SELECT by catalog name (Spark SQL, spark/sql_catalog.py) against the same
query by path (`format("mergetree").load(path)`): analysis, optimization and physical planning of a
new DataFrame each time, median of N, on one table of a catalog root.

    python benchmarks/sql_planning.py [--rows 1000000] [--runs 30]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

import pyarrow as pa


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=30)
    args = parser.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    import spark_mergetree

    root = tempfile.mkdtemp(prefix="sql-planning-")
    catalog = spark_mergetree.Catalog(root)
    catalog.create_database("db")
    table = catalog.create_table("db.events", [("id", "UInt64"), ("v", "Float64"), ("s", "String")], "id")
    table.insert(pa.table({"id": pa.array(range(args.rows), pa.uint64()), "v": [1.0] * args.rows,
                           "s": ["x"] * args.rows}))
    # The same table by path: a catalog table's directory has no statement of its own, so give it.
    statement = catalog.table_info("db.events").statement
    path = str(catalog.data_path("db.events"))
    spark = spark_mergetree.configure(SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false"),
                                      catalog=root, catalog_name="lake").getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    where = "id BETWEEN 1000 AND 2000"
    shapes = {
        "by path: load(path)": lambda: spark.read.format("mergetree").option("create_statement", statement).load(path).where(where).select("v"),
        "by name: spark.sql": lambda: spark.sql(f"SELECT v FROM lake.db.events WHERE {where}"),
        "by name: spark.table": lambda: spark.table("lake.db.events").where(where).select("v"),
    }

    def plan_seconds(make) -> float:
        start = time.perf_counter()
        make()._jdf.queryExecution().executedPlan()
        return time.perf_counter() - start

    for make in shapes.values():  # warm up: Python workers, classes
        for _ in range(3):
            plan_seconds(make)
    results = {name: [] for name in shapes}
    for _ in range(args.runs):  # interleaved, so load on the machine hits all alike
        for name, make in shapes.items():
            results[name].append(plan_seconds(make))
    for name, times in results.items():
        print(f"{name:24s} median {statistics.median(times) * 1000:7.1f} ms  "
              f"p10 {sorted(times)[len(times) // 10] * 1000:7.1f} ms")
    spark.stop()


if __name__ == "__main__":
    main()

"""Spark benchmark: mergetree against Parquet and against the floor of a Python data source, on the
same data, in one SparkSession set up with spark_mergetree.configure (the session extension).

    python benchmarks/spark.py [--rows 10000000] [--runs 3] [--dir /tmp/mergetree-benchmark] [--profile]
                               [--chart docs/img/spark_benchmark.png | --chart ''] [--chart-from-docs]

Data: `rows` rows of (id long, ts long, value double, name string), written as Parquet and as a
mergetree table ORDER BY id (merged into one part), plus the same rows as a partitioned table of many
parts (PARTITION BY intDiv(id, rows / 84), written by two tasks that each hold rows of every
partition: 254 parts with the default options, as a Spark write into a table partitioned by month
makes them).

The floors are what any Python data source costs in this PySpark, measured in the same run
(benchmarks/spark_floors.py):
* reads: a Python source that yields ready Arrow batches (the Parquet copy, loaded into the worker
  once and cached) of the same columns — all rows for scans, only the rows of the granules a pruned
  read returns for the key range;
* write: a Python Arrow writer that only counts the rows it is handed.

Every measurement is warmed up once, then the median of `runs` is taken; Python workers never idle
a minute between runs (Spark kills idle workers after 60 s). The report prints seconds and the
ratios mergetree / floor and mergetree / Parquet. Key ranges are Spark filters (`.filter(...)`),
which prune granules through pushed filters when the extension is on. `--profile` runs the
mergetree reads once more under cProfile inside the Python workers and prints the top functions.

The run ends by drawing its figures as a bar chart (`--chart`, by default docs/img/spark_benchmark.png,
the chart of docs/spark.md, "Performance"; `--chart ''`: none). `--chart-from-docs` only draws the
chart of the figures in that doc's table, without measuring.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path
from typing import Any

import charts
from harness import (  # benchmarks/ is the script's directory
    REPO_ROOT,
    local_session,
    private_coordinator,
    warm_median,
)

sys.path.insert(0, str(REPO_ROOT))  # this checkout's package, in the driver as in the workers
MANY_PARTITIONS = 84


# ------------------------------------------------------------------------------------ harness


def _session(profile: bool):
    settings = {"spark.sql.shuffle.partitions": "2", "spark.driver.memory": "3g"}
    if profile:
        settings["spark.python.profile"] = "true"
    return local_session("mergetree-benchmark", settings, (str(REPO_ROOT / "benchmarks"),))


class Report:
    def __init__(self) -> None:
        self.rows: list[tuple[str, float, float, float | None, str]] = []

    def add(self, name: str, parquet: float, mergetree: float, floor: float | None, notes: str = "") -> None:
        self.rows.append((name, parquet, mergetree, floor, notes))
        shown = "" if floor is None else f", floor {floor:.2f}s"
        print(f"{name}: parquet {parquet:.2f}s, mergetree {mergetree:.2f}s{shown}", flush=True)

    def print(self, title: str) -> None:
        print(f"\n{title}")
        print(f"{'measurement':<44} {'parquet s':>9} {'mergetree s':>11} {'floor s':>8} "
              f"{'mt/floor':>8} {'mt/parquet':>10}  notes")
        for name, parquet, mergetree, floor, notes in self.rows:
            floor_text = "" if floor is None else f"{floor:.2f}"
            ratio = "" if floor is None else f"{mergetree / floor:.2f}"
            print(f"{name:<44} {parquet:>9.2f} {mergetree:>11.2f} {floor_text:>8} {ratio:>8} "
                  f"{mergetree / parquet:>10.2f}  {notes}")


CHART = charts.IMAGES / "spark_benchmark.png"
DOC = REPO_ROOT / "docs" / "spark.md"


def write_chart(path: Path, title: str, rows: list[tuple[str, float, float, float | None]]) -> None:
    """The measurements (name, Parquet s, mergetree s, floor s) as bars, at `path`."""
    charts.grouped_bars(path, title, [name for name, *_ in rows],
                        {"Parquet": [row[1] for row in rows], "Python-source floor": [row[3] for row in rows],
                         "mergetree": [row[2] for row in rows]})


def chart_from_docs(path: Path) -> None:
    """The chart of the figures docs/spark.md shows (its "Performance" table), without measuring."""
    rows = [(name, charts.seconds(parquet), charts.seconds(mergetree), charts.seconds(floor))
            for name, parquet, mergetree, floor, *_ in charts.markdown_table(DOC, "| | Parquet | mergetree | floor |")]
    write_chart(path, "benchmarks/spark.py: 10,000,000 rows, local[2] on 2 cores, warm medians of 3 (docs/spark.md)",
                rows)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--dir", default="/tmp/mergetree-benchmark")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--chart", default=str(CHART), help="PNG of the results ('' for none)")
    parser.add_argument("--chart-from-docs", action="store_true", help="only draw the chart of docs/spark.md's figures")
    args = parser.parse_args(argv)
    if args.chart_from_docs:
        chart_from_docs(Path(args.chart or CHART))
        return 0
    root = Path(args.dir)
    private_coordinator(root)  # before the session: its workers inherit it
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    parquet_path, mergetree_path, many_path = str(root / "parquet"), str(root / "mergetree"), str(root / "many")

    spark = _session(args.profile)
    from spark_floors import FloorSource  # benchmarks/ is on sys.path: the script's directory

    from spark_mergetree import MergeTreeTable, register
    from spark_mergetree.spark.session import extension_jar

    register(spark)
    spark.dataSource.register(FloorSource)
    print(f"session extension: {'on' if extension_jar() else 'NOT BUILT (run scripts/build-jvm)'}", flush=True)

    rows = args.rows
    data = spark.range(0, rows, numPartitions=2).selectExpr(
        "id", "1700000000000 + id * 10 as ts", "rand(42) * 1000 as value",
        "concat('name-', cast(id % 10000 as string)) as name")
    low = rows // 2
    high = low + 10_000
    key_range = f"id BETWEEN {low} AND {high}"
    report = Report()

    def floor_read(columns: str, start: int = 0, stop: int = rows, partitions: int = 2) -> Any:
        return (spark.read.format("mergetree_floor").option("path", parquet_path).option("columns", columns)
                .option("start", str(start)).option("stop", str(stop)).option("partitions", str(partitions)).load())

    # Writes.
    parquet_write, _ = warm_median(args.runs, lambda: data.write.mode("overwrite").parquet(parquet_path))
    mergetree_write, _ = warm_median(args.runs, lambda: data.write.format("mergetree").option("order_by", "id")
                                 .mode("overwrite").save(mergetree_path))
    floor_write, _ = warm_median(args.runs, lambda: data.write.format("mergetree_floor").option("columns", "id")
                             .mode("append").save())
    report.add("write", parquet_write, mergetree_write, floor_write, "floor: an Arrow writer that only counts")

    # The many-part table: every write task holds rows of every partition.
    (data.repartition(2).write.format("mergetree").option("order_by", "id")
     .option("partition_by", f"intDiv(id, {-(-rows // MANY_PARTITIONS)})").mode("overwrite").save(many_path))
    MergeTreeTable.open(mergetree_path).optimize(final=True)
    parts_one, parts_many = len(MergeTreeTable.open(mergetree_path).parts()), len(MergeTreeTable.open(many_path).parts())

    parquet = spark.read.parquet(parquet_path)
    mergetree = spark.read.format("mergetree").load(mergetree_path)
    many = spark.read.format("mergetree").load(many_path)
    full_scan = ("sum(id)", "sum(ts - 1700000000000)", "sum(value)", "sum(length(name))")

    p_full, p_result = warm_median(args.runs, lambda: parquet.selectExpr(*full_scan).collect())
    m_full, m_result = warm_median(args.runs, lambda: mergetree.selectExpr(*full_scan).collect())
    f_full, f_result = warm_median(args.runs, lambda: floor_read("id,ts,value,name").selectExpr(*full_scan).collect())
    assert p_result[0][0] == m_result[0][0] == f_result[0][0], (p_result, m_result, f_result)
    report.add("full scan, 4 columns", p_full, m_full, f_full, f"{parts_one} part")
    many_full, many_result = warm_median(args.runs, lambda: many.selectExpr(*full_scan).collect())
    assert many_result[0][0] == p_result[0][0], (many_result, p_result)
    report.add(f"full scan, 4 columns, {parts_many} parts", p_full, many_full, f_full,
               f"{many_full / m_full:.2f}x the one-part table")

    p_sum, p_sum_result = warm_median(args.runs, lambda: parquet.selectExpr("sum(value)").collect())
    m_sum, m_sum_result = warm_median(args.runs, lambda: mergetree.selectExpr("sum(value)").collect())
    f_sum, _ = warm_median(args.runs, lambda: floor_read("value").selectExpr("sum(value)").collect())
    assert abs(p_sum_result[0][0] - m_sum_result[0][0]) < 1e-6 * abs(p_sum_result[0][0])
    report.add("projected sum(value)", p_sum, m_sum, f_sum, "pruned by the extension")
    many_sum, _ = warm_median(args.runs, lambda: many.selectExpr("sum(value)").collect())
    report.add(f"projected sum(value), {parts_many} parts", p_sum, many_sum, f_sum,
               f"{many_sum / m_sum:.2f}x the one-part table")

    one_part = MergeTreeTable.open(mergetree_path)
    plan = one_part.explain(where=key_range)
    granule_rows = sum(task.rows for task in plan.tasks)
    first_row = int(one_part.reader(plan.tasks[0].part).granule_starts[plan.tasks[0].ranges[0][0]])
    p_range, p_count = warm_median(args.runs, lambda: parquet.filter(key_range).count())
    m_range, m_count = warm_median(args.runs,
                               lambda: spark.read.format("mergetree").load(mergetree_path).filter(key_range).count())
    f_range, _ = warm_median(args.runs, lambda: floor_read("id,ts,value,name", first_row, first_row + granule_rows, 1)
                         .filter(key_range).count())
    assert p_count == m_count == high - low + 1, (p_count, m_count)
    report.add(f"key range {key_range}", p_range, m_range, f_range,
               f"{plan.granules_read} of {plan.granules_total} granules ({granule_rows:,} rows)")
    many_range, many_count = warm_median(args.runs,
                                     lambda: spark.read.format("mergetree").load(many_path).filter(key_range).count())
    assert many_count == p_count
    report.add(f"key range, {parts_many} parts", p_range, many_range, f_range, "")

    title = (f"{rows:,} rows, warm, median of {args.runs} runs, local[2], "
             f"{'with' if extension_jar() else 'WITHOUT'} the session extension")
    report.print(title)
    if args.chart:
        write_chart(Path(args.chart), f"benchmarks/spark.py: {title}",
                    [(name, parquet, mergetree, floor) for name, parquet, mergetree, floor, _ in report.rows])
    if args.profile:
        mergetree.selectExpr(*full_scan).collect()
        spark.sparkContext.show_profiles()
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""First queries: what a new Spark application's first read and first write cost above warm ones.

    python benchmarks/first_query.py [--rows 1000000] [--sessions 3] [--chart PATH | --chart ''] [--chart-from-docs]

A table of `rows` rows (id, value, name; ORDER BY id) is written once by the engine, with a Parquet
copy. Then, for each of `sessions` rounds, three new Python processes (each a new JVM and new
Python workers, as a user's new notebook or job gets) run one kind of source each:

* `parquet`: Spark's own Parquet reader and writer (no Python worker at all);
* `floor`: a Python data source that makes the 1,000 rows in memory and a writer that only counts
  (benchmarks/spark_floors.py): what PySpark itself costs any Python source on a first query;
* `mergetree`: this package, with `spark_mergetree.configure`.

Each process runs, after the JVM's own first job (spark.range, not counted): a key-range read of
1,000 rows (twice) and a 1,000-row append (twice). The first of each pair pays what only a first
query pays; the second is warm. The report prints medians over rounds of first, warm and
first - warm per kind, and mergetree's first-query cost above the floor's, and draws first - warm
as a bar chart (`--chart`, by default docs/img/first_query.png, the chart of docs/spark.md, "First
queries"; `--chart ''`: none). `--chart-from-docs` only draws the chart of the figures in that doc's
table, without measuring.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import charts
from harness import REPO_ROOT, local_session, private_coordinator

sys.path.insert(0, str(REPO_ROOT))

KINDS = ("parquet", "floor", "mergetree")
LABELS = {"read": "key range of 1,000 rows", "write": "append of 1,000 rows"}
CHART = charts.IMAGES / "first_query.png"
DOC = REPO_ROOT / "docs" / "spark.md"


def write_chart(path: Path, title: str, extra: dict[tuple[str, str], float]) -> None:
    """First - warm seconds by (action, kind) as bars, at `path`."""
    names = {"parquet": "Parquet", "floor": "Python-source floor", "mergetree": "mergetree"}
    charts.grouped_bars(path, title, [LABELS[action] for action in ("read", "write")],
                        {names[kind]: [extra[(action, kind)] for action in ("read", "write")] for kind in KINDS})


def chart_from_docs(path: Path) -> None:
    """The chart of the figures docs/spark.md shows ("First queries"), without measuring."""
    action = {label: action for action, label in LABELS.items()}
    extra = {(action[label], kind): charts.seconds(cell)
             for label, *cells in charts.markdown_table(DOC, "| first query above a warm one |")
             for kind, cell in zip(KINDS, cells, strict=True)}
    write_chart(path, "benchmarks/first_query.py: a new application's first query, seconds above a warm one "
                "(1,000,000-row table, medians of 2 new applications, docs/spark.md)", extra)


def _read(spark, kind: str, work: Path, low: int):  # type: ignore[no-untyped-def]
    if kind == "parquet":
        frame = spark.read.parquet(str(work / "events.parquet"))
    elif kind == "floor":
        frame = (spark.read.format("mergetree_floor").option("path", "generate").option("columns", "id,value,name")
                 .option("start", str(low)).option("stop", str(low + 1000)).load())
    else:
        frame = spark.read.format("mergetree").load(str(work / "events"))
    return frame.filter(f"id BETWEEN {low} AND {low + 999}").collect()


def _write(batch, kind: str, target: Path) -> None:  # type: ignore[no-untyped-def]
    if kind == "parquet":
        batch.write.mode("append").parquet(str(target))
    elif kind == "floor":
        batch.write.format("mergetree_floor").mode("append").save()
    else:
        batch.write.format("mergetree").option("order_by", "id").mode("append").save(str(target))


def one_process(kind: str, work: Path, rows: int, scratch: Path) -> dict[str, float]:
    """One new application's first and warm read and append of `kind` (run in a process of its own)."""
    spark = local_session("mergetree-first-query", {"spark.sql.shuffle.partitions": "2"},
                          extra_paths=(str(Path(__file__).resolve().parent),))
    try:
        if kind == "floor":
            from spark_floors import FloorSource

            spark.dataSource.register(FloorSource)
        low = rows // 2
        timings: dict[str, float] = {}
        spark.range(10).count()  # the JVM's own first job (any source pays it) is not counted
        for label in ("read first", "read warm"):
            started = time.perf_counter()
            got = _read(spark, kind, work, low)
            timings[label] = time.perf_counter() - started
            assert len(got) == 1000, (kind, len(got))
        batch = spark.range(1000).selectExpr("id", "rand() AS value", "cast(id AS string) AS name")
        batch.cache().count()  # the rows are ready before the clock starts
        for number, label in enumerate(("write first", "write warm")):
            started = time.perf_counter()
            _write(batch, kind, scratch / f"written-{number}")
            timings[label] = time.perf_counter() - started
        return timings
    finally:
        spark.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--sessions", type=int, default=3)
    parser.add_argument("--one", choices=KINDS, help=argparse.SUPPRESS)  # a child process's kind
    parser.add_argument("--work", help=argparse.SUPPRESS)
    parser.add_argument("--chart", default=str(CHART), help="PNG of first - warm ('' for none)")
    parser.add_argument("--chart-from-docs", action="store_true", help="only draw the chart of docs/spark.md's figures")
    args = parser.parse_args()
    if args.chart_from_docs:
        chart_from_docs(Path(args.chart or CHART))
        return
    if args.one:
        work = Path(args.work)
        private_coordinator(work)
        scratch = Path(tempfile.mkdtemp(prefix=f"{args.one}-", dir=work))
        print("TIMINGS " + json.dumps(one_process(args.one, work, args.rows, scratch)), flush=True)
        return
    work = Path(tempfile.mkdtemp(prefix="mergetree-first-query-"))
    private_coordinator(work)
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from spark_mergetree import MergeTreeTable

    ids = np.arange(args.rows, dtype=np.int64)
    data = pa.table({"id": ids, "value": np.random.default_rng(1).random(args.rows),
                     "name": pa.array(ids % 1000).cast(pa.string())})
    MergeTreeTable.create(work / "events", [("id", "Int64"), ("value", "Float64"), ("name", "String")],
                          order_by="id", settings={"auto_merge": False}).insert(data)
    pq.write_table(data, work / "events.parquet")
    results: dict[str, list[dict[str, float]]] = {kind: [] for kind in KINDS}
    for session in range(args.sessions):
        for kind in KINDS:
            child = subprocess.run([sys.executable, __file__, "--one", kind, "--work", str(work),
                                    "--rows", str(args.rows)], capture_output=True, text=True, timeout=600)
            lines = [line for line in child.stdout.splitlines() if line.startswith("TIMINGS ")]
            if child.returncode != 0 or not lines:
                raise SystemExit(f"the {kind} process failed:\n{child.stderr[-3000:]}")
            results[kind].append(json.loads(lines[-1].removeprefix("TIMINGS ")))
            print(f"round {session} {kind}: " + ", ".join(f"{k} {v:.2f}s" for k, v in results[kind][-1].items()),
                  flush=True)
    print(f"{args.rows:,}-row table, {args.sessions} new applications per kind (medians), local[2]")
    print(f"{'':34}{'first s':>9}{'warm s':>9}{'first - warm':>14}")
    extra: dict[tuple[str, str], float] = {}
    for action in ("read", "write"):
        label = LABELS[action]
        for kind in KINDS:
            first = statistics.median(r[f"{action} first"] for r in results[kind])
            warm = statistics.median(r[f"{action} warm"] for r in results[kind])
            extra[(action, kind)] = first - warm
            print(f"{label + ', ' + kind:34}{first:9.2f}{warm:9.2f}{first - warm:14.2f}")
    for action in ("read", "write"):
        print(f"first {action}: mergetree pays {extra[(action, 'mergetree')] - extra[(action, 'floor')]:.2f} s "
              f"above the Python-source floor's first-query cost of {extra[(action, 'floor')]:.2f} s")
    if args.chart:
        write_chart(Path(args.chart), f"benchmarks/first_query.py: a new application's first query, seconds above "
                    f"a warm one ({args.rows:,}-row table, medians of {args.sessions} new applications)", extra)
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

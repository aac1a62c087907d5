"""Where a Spark read of a Python source spends its time, per column type: mergetree against the
Python-source floor and Spark's own Parquet reader, in one run.

    python benchmarks/type_floors.py [--rows 2000000] [--runs 3]

For each type (decimal(18,2), string, date, timestamp, double, nullable double with a tenth NULL)
a one-column table of `rows` rows is written three ways: Parquet, a MergeTree table, and the
Parquet copy loaded into each Python worker and yielded as ready Arrow batches by a source that
does nothing else (format("mergetree_type_floor"), the floor: what turning Arrow values into
Spark's rows costs any Python source). Each is read with `max(c)` (every value reaches Spark) and
timed as the warm median of `runs`; mergetree once more with the session extension's decimal fast
path off (spark.mergetree.extension.fastTypes=false, docs/spark.md). The report prints seconds and
the ratios floor/Parquet, mergetree/Parquet and mergetree/floor per type: the floor's share is what only the JVM side (the
session extension, or Spark) can remove; mergetree's share above it is ours.
"""

from __future__ import annotations

import argparse
import datetime
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

BENCHMARKS = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCHMARKS))

from harness import local_session, private_coordinator, warm_median  # noqa: E402
from spark_floors import ready_table  # noqa: E402

# Column type: (ClickHouse type of the MergeTree table, Spark DDL type of the floor source)
TYPES = {
    "decimal": ("Decimal(18, 2)", "decimal(18,2)"),
    "string": ("String", "string"),
    "date": ("Date32", "date"),
    "timestamp": ("DateTime64(6, 'UTC')", "timestamp"),
    "double": ("Float64", "double"),
    "nullable": ("Nullable(Float64)", "double"),
}


def column_of(kind: str, rows: int) -> pa.Array:
    """`rows` values of one type, the same in every copy."""
    ids = np.arange(rows, dtype=np.int64)
    if kind == "decimal":
        return pa.array(ids * 7 % 10_000_000).cast(pa.decimal128(20, 0)).cast(pa.decimal128(18, 2))
    if kind == "string":
        return pa.array(ids % 100_003).cast(pa.string())
    if kind == "date":
        return pa.array((ids % 20_000).astype(np.int32)).cast(pa.date32())
    if kind == "timestamp":
        return pa.array(ids * 1_000_003).cast(pa.timestamp("us", tz="UTC"))
    values = pa.array(ids * 0.5)
    if kind == "nullable":
        return pa.array(ids * 0.5, mask=ids % 10 == 0)
    return values


class Share(InputPartition):
    def __init__(self, start: int, stop: int) -> None:
        super().__init__((start, stop))
        self.start, self.stop = start, stop


class TypeFloorReader(DataSourceReader):
    def __init__(self, options: dict[str, str]) -> None:
        self.path, self.rows = options["path"], int(options["rows"])

    def partitions(self) -> list[InputPartition]:
        half = self.rows // 2
        return [Share(0, half), Share(half, self.rows)]

    def read(self, partition: Any) -> Iterator[pa.RecordBatch]:
        table = ready_table(self.path, "c").slice(partition.start, partition.stop - partition.start)
        yield from table.to_batches(max_chunksize=1 << 16)


class TypeFloorSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "mergetree_type_floor"

    def schema(self) -> str:
        return f"c {self.options['type']}"

    def reader(self, schema: Any) -> TypeFloorReader:
        return TypeFloorReader(self.options)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="mergetree-type-floors-"))
    private_coordinator(work)
    import pyarrow.parquet as pq

    from spark_mergetree import MergeTreeTable

    for kind, (clickhouse, _) in TYPES.items():
        data = pa.table({"c": column_of(kind, args.rows)})
        pq.write_table(data, work / f"{kind}.parquet")
        MergeTreeTable.create(work / kind, [("c", clickhouse)], order_by="tuple()",
                              settings={"auto_merge": False}).insert(data)
    spark = local_session("mergetree-type-floors", {"spark.sql.shuffle.partitions": "2"},
                          extra_paths=(str(BENCHMARKS),))
    try:
        spark.dataSource.register(TypeFloorSource)
        print(f"{args.rows:,} rows of one column, max(c), warm medians of {args.runs}, local[2] "
              f"({datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC)")
        print(f"{'type':10}{'parquet s':>11}{'floor s':>9}{'mergetree s':>13}{'fastTypes off':>15}"
              f"{'floor/pq':>10}{'mt/pq':>8}{'mt/floor':>10}")
        for kind, (_, spark_type) in TYPES.items():
            frames = {
                "parquet": spark.read.parquet(str(work / f"{kind}.parquet")),
                "floor": spark.read.format("mergetree_type_floor").option("path", str(work / f"{kind}.parquet"))
                .option("type", spark_type).option("rows", str(args.rows)).load(),
                "mergetree": spark.read.format("mergetree").load(str(work / kind)),
            }
            seconds, results = {}, {}
            for name, frame in frames.items():
                seconds[name], results[name] = warm_median(args.runs, lambda f=frame: f.agg({"c": "max"}).collect())
            # The session extension's decimal fast path off (spark.mergetree.extension.fastTypes).
            spark.conf.set("spark.mergetree.extension.fastTypes", "false")
            try:
                seconds["slow"], results["slow"] = warm_median(
                    args.runs, lambda f=frames["mergetree"]: f.agg({"c": "max"}).collect())
            finally:
                spark.conf.unset("spark.mergetree.extension.fastTypes")
            assert results["parquet"] == results["floor"] == results["mergetree"] == results["slow"], (kind, results)
            pq_s, floor_s, mt_s, slow_s = seconds["parquet"], seconds["floor"], seconds["mergetree"], seconds["slow"]
            print(f"{kind:10}{pq_s:11.2f}{floor_s:9.2f}{mt_s:13.2f}{slow_s:15.2f}{floor_s / pq_s:10.2f}"
                  f"{mt_s / pq_s:8.2f}{mt_s / floor_s:10.2f}", flush=True)
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

"""Benchmark of reads through a normal projection: a point filter on the projection's key.

    python benchmarks/projection_reads.py                   # 2M rows, median of 5
    python benchmarks/projection_reads.py --rows 4000000 --runs 7

A table of `--rows` rows (id UInt64, user UInt64 of ~200,000 values in no order, ts DateTime,
value Float64, name String) ORDER BY id, one part, with `PROJECTION by_user (SELECT * ORDER BY
user)`; a second table of the same rows without the projection; the same rows in Parquet (pyarrow,
row groups of 1M rows, as a Spark job would write them ordered by id). The query `user = <value>`,
every column:

* through the engine: `MergeTreeTable.to_arrow(where=...)`, with the projection and with
  `use_projections=False` (ClickHouse's `optimize_use_projections = 0`);
* through Spark (local[2], `spark_mergetree.configure`: the session extension and filter pushdown):
  `spark.read.format("mergetree").load(p).filter(...).collect()` on the table with the projection
  and on the one without, and `spark.read.parquet(p).filter(...).collect()`.

Each is the median of `--runs` runs after one warm-up run, all in one process; every read must
return the same rows (checked). Ratios are printed against the projection read.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from benchmarks.harness import local_session, private_coordinator, warm_median  # noqa: E402
from spark_mergetree import MergeTreeTable  # noqa: E402

COLUMNS = [("id", "UInt64"), ("user", "UInt64"), ("ts", "DateTime('UTC')"), ("value", "Float64"), ("name", "String")]
PROJECTION = "PROJECTION by_user (SELECT * ORDER BY user)"


def _rows(n: int) -> pa.Table:
    rng = np.random.default_rng(42)
    return pa.table({
        "id": pa.array(np.arange(n, dtype=np.uint64)),
        "user": pa.array(rng.integers(0, 200_000, n).astype(np.uint64)),
        "ts": pa.array(1_700_000_000 + np.arange(n) // 4, pa.timestamp("s", "UTC")),
        "value": rng.random(n),
        "name": pa.array(np.char.add("name-", (rng.integers(0, 5000, n)).astype(str)).astype(object), pa.string()),
    })


def _table(path: Path, rows: pa.Table, projections: list[str]) -> MergeTreeTable:
    table = MergeTreeTable.create(path, COLUMNS, "id", settings={"auto_merge": False}, projections=projections)
    half = rows.num_rows // 2
    table.insert(rows.slice(0, half))
    table.insert(rows.slice(half))
    table.optimize(final=True)
    return table


def _ids(rows: object) -> list[int]:
    if isinstance(rows, pa.Table):
        return sorted(rows.column("id").to_pylist())
    return sorted(int(row["id"]) for row in rows)  # type: ignore[attr-defined]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="projection-reads-bench-") as tmp:
        work = Path(tmp)
        private_coordinator(work)
        rows = _rows(args.rows)
        projected = _table(work / "projected", rows, [PROJECTION])
        plain = _table(work / "plain", rows, [])
        pq.write_table(rows, work / "rows.parquet", row_group_size=1 << 20)
        user = int(rows.column("user")[args.rows // 3].as_py())
        where = f"user = {user}"
        expected = sorted(rows.filter(pa.compute.equal(rows.column("user"), user)).column("id").to_pylist())
        through, own = projected.explain(where), projected.explain(where, use_projections=False)
        assert through.projection == "by_user" and own.projection is None
        print(f"{args.rows:,} rows ORDER BY id, one part, {PROJECTION}; query: SELECT * WHERE {where} "
              f"({len(expected)} rows)")
        print(f"granules read: {through.granules_read} through by_user, {own.granules_read} of "
              f"{own.granules_total} without it")

        timings: dict[str, float] = {}

        def measure(name: str, action) -> None:  # type: ignore[no-untyped-def]
            seconds, result = warm_median(args.runs, action)
            if _ids(result) != expected:
                raise SystemExit(f"{name}: rows differ")
            timings[name] = seconds
            print(f"  {name:<44} {seconds * 1000:>9.1f} ms", flush=True)

        measure("engine, through the projection", lambda: projected.to_arrow(where=where))
        measure("engine, use_projections=False", lambda: projected.to_arrow(where=where, use_projections=False))
        spark = local_session("mergetree-projection-reads", {"spark.sql.shuffle.partitions": "2",
                                                             "spark.driver.memory": "2g"})
        try:
            measure("Spark, mergetree through the projection",
                    lambda: spark.read.format("mergetree").load(str(projected.path)).filter(where).collect())
            measure("Spark, mergetree without a projection",
                    lambda: spark.read.format("mergetree").load(str(plain.path)).filter(where).collect())
            measure("Spark, Parquet", lambda: spark.read.parquet(str(work / "rows.parquet")).filter(where).collect())
        finally:
            spark.stop()
        print("ratios (higher: the projection read is faster)")
        print(f"  engine: without / with projection        {timings['engine, use_projections=False'] / timings['engine, through the projection']:>6.2f}x")
        spark_projection = timings["Spark, mergetree through the projection"]
        print(f"  Spark: mergetree without / with           {timings['Spark, mergetree without a projection'] / spark_projection:>6.2f}x")
        print(f"  Spark: Parquet / mergetree with projection {timings['Spark, Parquet'] / spark_projection:>6.2f}x")


if __name__ == "__main__":
    main()

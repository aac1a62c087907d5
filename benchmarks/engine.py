"""Engine benchmark: our insert, full read and key-range read against chdb (ClickHouse) in one run.

10M rows (id UInt64, ts UInt64, value Float64, name String), ORDER BY id. Prints medians of
several runs and the ratios ours/chdb. Usage: python benchmarks/engine.py [--rows N] [--runs K]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
from harness import private_coordinator  # benchmarks/ is the script's directory


def make_data(rows: int) -> pa.Table:
    rng = np.random.default_rng(42)
    ids = np.arange(rows, dtype=np.uint64)
    names = pa.array(np.char.add("name_", (ids % 100_000).astype(str)))
    return pa.table({"id": ids, "ts": ids * 1000 + 1_700_000_000, "value": rng.random(rows), "name": names})


def timed(fn, runs: int) -> tuple[float, object]:
    times, result = [], None
    for _ in range(runs):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="mergetree-bench-"))
    private_coordinator(work)
    from chdb import session

    from spark_mergetree import MergeTreeTable

    data = make_data(args.rows)
    columns = [("id", "UInt64"), ("ts", "UInt64"), ("value", "Float64"), ("name", "String")]
    low, high = args.rows // 2, args.rows // 2 + 10_000
    where = f"id BETWEEN {low} AND {high}"

    def our_insert() -> MergeTreeTable:
        path = work / "ours"
        shutil.rmtree(path, ignore_errors=True)
        table = MergeTreeTable.create(path, columns, order_by="id", settings={"auto_merge": False})
        table.insert(data)
        return table

    t_insert, table = timed(our_insert, args.runs)
    t_full, full = timed(lambda: table.to_arrow(), args.runs)
    assert full.num_rows == args.rows
    t_range, ranged = timed(lambda: table.to_arrow(where=where), args.runs)
    granules = table.explain(where).granules_read

    chdb = session.Session(str(work / "chdb"))
    chdb.query("CREATE DATABASE IF NOT EXISTS bench")

    def chdb_insert() -> None:
        chdb.query("DROP TABLE IF EXISTS bench.t SYNC")
        chdb.query("CREATE TABLE bench.t (id UInt64, ts UInt64, value Float64, name String) "
                   "ENGINE = MergeTree ORDER BY id")
        chdb.query("INSERT INTO bench.t SELECT * FROM Python(data)")

    t_chdb_insert, _ = timed(chdb_insert, args.runs)
    chdb.query("OPTIMIZE TABLE bench.t FINAL")
    t_chdb_full, _ = timed(lambda: chdb.query("SELECT * FROM bench.t", "ArrowTable"), args.runs)
    t_chdb_range, _ = timed(lambda: chdb.query(f"SELECT * FROM bench.t WHERE {where}", "ArrowTable"), args.runs)

    print(f"rows: {args.rows:,}   runs: {args.runs} (medians)")
    print(f"{'':24}{'ours s':>10}{'chdb s':>10}{'ratio':>8}")
    for label, ours, theirs in (("insert", t_insert, t_chdb_insert), ("full read into Arrow", t_full, t_chdb_full),
                                (f"key range ({ranged.num_rows} rows)", t_range, t_chdb_range)):
        print(f"{label:24}{ours:10.3f}{theirs:10.3f}{ours / theirs:8.2f}")
    print(f"key range granules read: {granules} of {table.explain().granules_read}")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

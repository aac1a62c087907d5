"""Benchmark of aggregate projections: what building them adds to an insert and to a merge, ours
against ClickHouse's (chdb), on the same rows in one run.

A web-analytics table of `--rows` rows per insert (DateTime, UInt64 user, String page of a few
hundred values, Float64 duration, UInt8 status), ordered by (page, ts), with one aggregate
projection per function family, each grouped by (toStartOfHour(ts), page):

  * sums:      count(), sum(ms), avg(ms), max(ms), countIf(status = 0), sum(ms * 2)
  * sets:      uniq(user), uniqExact(user), uniqCombined(page)
  * quantiles: quantile(0.9)(ms), quantiles(0.5, 0.99)(ms), quantileTDigest(0.9)(ms)

For each: the median (of `--runs`, after a warm-up) of an insert into a table with only that
projection, minus an insert into the table without projections, for us (MergeTreeTable.insert of
an Arrow table) and for chdb (INSERT ... SELECT FROM Python(arrow)); then a merge of two such
parts (our optimize(final=True), chdb's OPTIMIZE TABLE ... FINAL) minus the merge without
projections. The ratios are ours / chdb's (chdb runs its aggregation on several threads).

    python benchmarks/aggregate_projections.py               # 1M rows, median of 3
    python benchmarks/aggregate_projections.py --rows 3000000 --runs 5
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.harness import private_coordinator  # noqa: E402
from spark_mergetree import MergeTreeTable  # noqa: E402
from spark_mergetree.expressions.ddl import parse_create  # noqa: E402

COLUMNS = "ts DateTime('UTC'), user UInt64, page String, ms Float64, status UInt8"
GROUP = "toStartOfHour(ts), page"
FAMILIES = {
    "none": "",
    "sums": "count(), sum(ms), avg(ms), max(ms), countIf(status = 0), sum(ms * 2)",
    "sets": "uniq(user), uniqExact(user), uniqCombined(page)",
    "quantiles": "quantile(0.9)(ms), quantiles(0.5, 0.99)(ms), quantileTDigest(0.9)(ms)",
}


def _rows(n: int, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    return pa.table({
        "ts": pa.array(1_700_000_000 + np.sort(rng.integers(0, 86_400 * 7, n)), pa.timestamp("s", "UTC")),
        "user": pa.array(rng.zipf(1.3, n).astype(np.uint64) % 200_000, pa.uint64()),
        "page": pa.array(np.char.add("/page/", (rng.zipf(1.5, n) % 300).astype(str)).astype(object), pa.string()),
        "ms": rng.gamma(2.0, 40.0, n),
        "status": pa.array((rng.random(n) < 0.03).astype(np.uint8), pa.uint8()),
    })


def _statement(family: str) -> str:
    select = FAMILIES[family]
    projection = f", PROJECTION p (SELECT {GROUP}, {select} GROUP BY {GROUP})" if select else ""
    return (f"CREATE TABLE t ({COLUMNS}{projection}) ENGINE = MergeTree ORDER BY (page, ts) "
            "SETTINGS min_bytes_for_wide_part = 0")


def ours(work: Path, family: str, batches: tuple[pa.Table, pa.Table], runs: int) -> tuple[float, float]:
    """(insert seconds, merge seconds) of our table with `family`'s projection."""
    inserts, merges = [], []
    for run in range(runs + 1):  # (the first run warms up: numba kernels compiled or loaded)
        path = work / f"ours_{family}_{run}"
        table = MergeTreeTable.new(path, parse_create(_statement(family)), {"auto_merge": False})
        table.write_directory()
        started = time.perf_counter()
        table.insert(batches[0])
        inserts.append(time.perf_counter() - started)
        table.insert(batches[1])
        started = time.perf_counter()
        table.optimize(final=True)
        merges.append(time.perf_counter() - started)
        shutil.rmtree(path)
    return statistics.median(inserts[1:]), statistics.median(merges[1:])


def theirs(work: Path, family: str, batches: tuple[pa.Table, pa.Table], runs: int) -> tuple[float, float]:
    """(insert seconds, merge seconds) of chdb's table with `family`'s projection."""
    import chdb.session

    inserts, merges = [], []
    sess = chdb.session.Session(str(work / f"chdb_{family}"))
    try:
        for _ in range(runs + 1):  # (the first run warms up)
            sess.query("DROP TABLE IF EXISTS t SYNC")
            sess.query(_statement(family))
            sess.query("SYSTEM STOP MERGES t")
            first, second = batches  # noqa: F841 (read by chdb's Python() table function)
            started = time.perf_counter()
            sess.query("INSERT INTO t SELECT * FROM Python(first)")
            inserts.append(time.perf_counter() - started)
            sess.query("INSERT INTO t SELECT * FROM Python(second)")
            sess.query("SYSTEM START MERGES t")
            started = time.perf_counter()
            sess.query("OPTIMIZE TABLE t FINAL")
            merges.append(time.perf_counter() - started)
    finally:
        sess.close()
    return statistics.median(inserts[1:]), statistics.median(merges[1:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    batches = (_rows(args.rows, 1), _rows(args.rows, 2))
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        private_coordinator(work)  # (never the user's own coordinator)
        base_ours = ours(work, "none", batches, args.runs)
        base_theirs = theirs(work, "none", batches, args.runs)
        print(f"{args.rows:,} rows per insert; without projections: ours insert {base_ours[0]:.2f} s, merge "
              f"{base_ours[1]:.2f} s; chdb insert {base_theirs[0]:.2f} s, merge {base_theirs[1]:.2f} s")
        print("| projection | ours insert +s | chdb insert +s | ratio | ours merge +s | chdb merge +s | ratio |")
        print("| --- | --- | --- | --- | --- | --- | --- |")
        for family in FAMILIES:
            if family == "none":
                continue
            mine = ours(work, family, batches, args.runs)
            chdb = theirs(work, family, batches, args.runs)
            added = [max(mine[i] - base_ours[i], 1e-3) for i in (0, 1)]
            added_chdb = [max(chdb[i] - base_theirs[i], 1e-3) for i in (0, 1)]
            print(f"| {family} | {added[0]:.2f} | {added_chdb[0]:.2f} | {added[0] / added_chdb[0]:.1f} | "
                  f"{added[1]:.2f} | {added_chdb[1]:.2f} | {added[1] / added_chdb[1]:.1f} |")


if __name__ == "__main__":
    main()

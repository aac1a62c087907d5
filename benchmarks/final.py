"""Benchmark of FINAL reads: `to_arrow(final=True)` against a plain `to_arrow()` of the same
ReplacingMergeTree(version) table, and ClickHouse (chdb) `SELECT ... FINAL` against its plain SELECT on
the same rows, in one run.

The table: `--rows` rows of (id UInt64, version UInt64, value Float64, name String), ORDER BY id,
PARTITION BY id % 4, written in `--inserts` appends of upserts (each append re-writes a random
`--updates` share of earlier ids with a higher version), merges off, so every partition holds
`--inserts` parts whose keys overlap. Reported: rows returned, median seconds of `--runs` warm runs,
and the final/plain ratio. The machine is shared: numbers are noisy.

    python benchmarks/final.py                     # 2M rows in 8 appends
    python benchmarks/final.py --rows 10000000 --inserts 16
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.harness import private_coordinator, warm_median  # noqa: E402
from spark_mergetree import MergeTreeTable  # noqa: E402


def batches(rows: int, inserts: int, updates: float) -> list[pa.Table]:
    rng = np.random.default_rng(7)
    per = rows // inserts
    out, next_id = [], 0
    for number in range(inserts):
        fresh = per - int(per * updates) if number else per
        ids = np.arange(next_id, next_id + fresh, dtype=np.uint64)
        if number:
            ids = np.concatenate([ids, rng.integers(0, next_id, per - fresh).astype(np.uint64)])
        next_id += fresh
        out.append(pa.table({"id": ids, "version": np.full(len(ids), number, np.uint64),
                             "value": rng.random(len(ids)), "name": pa.array([f"n{i % 1000}" for i in ids])}))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--inserts", type=int, default=8)
    parser.add_argument("--updates", type=float, default=0.3, help="share of each append that updates earlier ids")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--no-chdb", action="store_true", help="skip the ClickHouse comparison")
    args = parser.parse_args()
    data = batches(args.rows, args.inserts, args.updates)
    with tempfile.TemporaryDirectory() as tmp:
        private_coordinator(Path(tmp))
        table = MergeTreeTable.create(Path(tmp) / "t", [("id", "UInt64"), ("version", "UInt64"), ("value", "Float64"),
                                                        ("name", "String")], order_by="id", partition_by="id % 4",
                                      engine="ReplacingMergeTree(version)", settings={"auto_merge": False})
        for batch in data:
            table.insert(batch)
        plain_s, plain = warm_median(args.runs, table.to_arrow)
        final_s, final = warm_median(args.runs, lambda: table.to_arrow(final=True))
        print(f"{'read':<22}{'rows':>12}{'seconds':>10}")
        print(f"{'ours plain':<22}{plain.num_rows:>12}{plain_s:>10.3f}")
        print(f"{'ours final':<22}{final.num_rows:>12}{final_s:>10.3f}")
        print(f"ours final/plain: {final_s / plain_s:.2f}x")
        if args.no_chdb:
            return
        from chdb import session as chdb_session

        sess = chdb_session.Session(str(Path(tmp) / "chdb"))
        sess.query("CREATE TABLE t (id UInt64, version UInt64, value Float64, name String) "
                   "ENGINE = ReplacingMergeTree(version) PARTITION BY id % 4 ORDER BY id "
                   "SETTINGS min_parts_to_merge_at_once = 1000")
        for number, batch in enumerate(data):
            pq.write_table(batch, Path(tmp) / f"b{number}.parquet")
            sess.query(f"INSERT INTO t SELECT * FROM file('{tmp}/b{number}.parquet', Parquet)")

        def clickhouse(sql: str) -> int:
            return pa.ipc.open_file(pa.py_buffer(sess.query(sql, "Arrow").bytes())).read_all().num_rows

        ch_plain_s, ch_plain = warm_median(args.runs, lambda: clickhouse("SELECT * FROM t"))
        ch_final_s, ch_final = warm_median(args.runs, lambda: clickhouse("SELECT * FROM t FINAL"))
        print(f"{'chdb plain':<22}{ch_plain:>12}{ch_plain_s:>10.3f}")
        print(f"{'chdb final':<22}{ch_final:>12}{ch_final_s:>10.3f}")
        print(f"chdb final/plain: {ch_final_s / ch_plain_s:.2f}x")
        sess.close()


if __name__ == "__main__":
    main()

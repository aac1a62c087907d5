"""JSON write benchmark: our insert of a JSON column from its text against chdb (ClickHouse) inserting
the same text into a MergeTree JSON column, in one run; and our per-row reader (the column-wise
one switched off) against the column-wise one.

Log/event documents of about ten paths (`ts`, `level`, `service`, `host`, `latency_ms` (integers,
some floats), `ok`, `msg` (some with escapes), nested `request.*` and `user.*`, sparse `error.*`
and `trace_id`), one JSON column beside an id, ORDER BY id, one Wide part. The column is `JSON`,
then `TYPED` (the same documents with seven of their paths declared: `ts DateTime`, `level
LowCardinality(String)`, `service String`, `latency_ms Float64`, `ok Bool`, `request.status UInt16`,
`user.id UInt64`). Every measurement is warmed once (numba's loading and compilation, chdb's first
query) and is the median of --runs.
Usage: python benchmarks/json_write.py [--rows N] [--runs K]
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import tempfile
from pathlib import Path

import pyarrow as pa
from harness import private_coordinator, warm_median  # benchmarks/ is the script's directory


def make_documents(rows: int) -> list[str]:
    rng = random.Random(42)
    out = []
    for i in range(rows):
        doc = {
            "ts": f"2024-05-{1 + i % 28:02d} {i % 24:02d}:{i % 60:02d}:{i * 7 % 60:02d}",
            "level": rng.choice(["INFO", "INFO", "WARN", "ERROR", "DEBUG"]),
            "service": rng.choice(["api", "auth", "billing", "search"]),
            "host": f"10.0.{i % 256}.{i * 13 % 256}",
            "latency_ms": rng.randint(1, 5000) if rng.random() < 0.8 else round(rng.random() * 100, 3),
            "request": {"method": rng.choice(["GET", "POST"]), "path": f"/v1/items/{rng.randint(1, 10**6)}",
                        "status": rng.choice([200, 200, 200, 404, 500])},
            "user": {"id": rng.randint(1, 10**9), "name": f"user_{rng.randint(1, 99999)}"},
            "ok": rng.random() < 0.9,
            "msg": rng.choice(["request served", 'cache miss for key "k"', "retrying\tlater", "slow query"]),
        }
        if rng.random() < 0.05:
            doc["error"] = {"code": rng.randint(1, 99), "detail": "timeout"}
        if rng.random() < 0.02:
            doc["trace_id"] = f"{rng.getrandbits(128):032x}"
        out.append(json.dumps(doc, separators=(",", ":")))
    return out


TYPED = ("JSON(ts DateTime, level LowCardinality(String), service String, latency_ms Float64, ok Bool, "
         "`request.status` UInt16, `user.id` UInt64)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="mergetree-json-bench-"))
    private_coordinator(work)
    from chdb import session

    from spark_mergetree import MergeTreeTable
    from spark_mergetree.format import json_columns

    texts = make_documents(args.rows)
    data = pa.table({"id": pa.array(range(args.rows), pa.uint64()), "j": pa.array(texts, pa.string())})
    megabytes = data.column("j").nbytes / 1e6
    wide = {"min_bytes_for_wide_part": 0, "min_rows_for_wide_part": 0, "auto_merge": False}
    chdb = session.Session(str(work / "chdb"))
    chdb.query("CREATE DATABASE IF NOT EXISTS bench")
    print(f"rows: {args.rows:,}   JSON text: {megabytes:.1f} MB   runs: {args.runs} (warm medians)")

    for json_type in ("JSON", TYPED):
        def our_insert(name: str, json_type: str = json_type) -> MergeTreeTable:
            path = work / name
            shutil.rmtree(path, ignore_errors=True)
            table = MergeTreeTable.create(path, [("id", "UInt64"), ("j", json_type)], order_by="id", settings=wide)
            table.insert(data)
            return table

        t_ours, table = warm_median(args.runs, lambda: our_insert("ours"))
        columnwise_threshold = json_columns.COMPILED_JSON_BYTES
        json_columns.COMPILED_JSON_BYTES = 1 << 62  # every column parsed per row
        try:
            t_per_row, per_row = warm_median(args.runs, lambda: our_insert("per_row"))
        finally:
            json_columns.COMPILED_JSON_BYTES = columnwise_threshold
        assert table.to_arrow().column("j").to_pylist() == per_row.to_arrow().column("j").to_pylist()

        def chdb_insert(json_type: str = json_type) -> None:
            chdb.query("DROP TABLE IF EXISTS bench.t SYNC")
            chdb.query(f"CREATE TABLE bench.t (id UInt64, j {json_type}) ENGINE = MergeTree ORDER BY id "
                       "SETTINGS min_bytes_for_wide_part = 0, min_rows_for_wide_part = 0")
            chdb.query("INSERT INTO bench.t SELECT id, j FROM Python(data)")

        t_chdb, _ = warm_median(args.runs, chdb_insert)
        paths = chdb.query("SELECT arraySort(groupUniqArrayArray(JSONAllPaths(j))) FROM bench.t",
                           "CSV").bytes().decode()
        assert "'user.id'" in paths and "'request.status'" in paths, paths  # (chdb parsed the text into paths)

        print(f"\n{json_type}")
        print(f"{'insert':28}{'s':>8}{'rows/s':>12}{'MB/s':>8}")
        for label, seconds in (("ours, column-wise", t_ours), ("ours, per row", t_per_row), ("chdb", t_chdb)):
            print(f"{label:28}{seconds:8.3f}{args.rows / seconds:12,.0f}{megabytes / seconds:8.1f}")
        print(f"ours column-wise / chdb: {t_ours / t_chdb:.2f}x the time; per row / column-wise: "
              f"{t_per_row / t_ours:.2f}x")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

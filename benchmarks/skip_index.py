"""Skip index benchmark: a selective query on a non-key column, with and without a bloom_filter index.

    python benchmarks/skip_index.py [--rows 4000000] [--runs 5]

ClickHouse (chdb) writes the same rows into two tables, ORDER BY id: `plain` and `indexed`, the
second with `INDEX i_s s TYPE bloom_filter GRANULARITY 1` on a high-cardinality String column `s`
whose values are not ordered by the key. The query `s = '<one value>'` is then run
- by us (`MergeTreeTable.to_arrow(where=...)` on each table's data directory): granules read (from
  `explain()`), median time;
- by ClickHouse (chdb, the same tables): granules read (`EXPLAIN indexes = 1`), median time.
Then we write the same rows ourselves into two tables of the same statements (`ours-plain`,
`ours-indexed`: one insert, then OPTIMIZE FINAL, our writer building the index), timing the writes
(median of `runs`), and read them the same way. Every read must return the same rows (checked).
Medians of `runs` runs after one warm-up.
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from benchmarks.harness import private_coordinator, warm_median  # noqa: E402
from spark_mergetree import MergeTreeTable  # noqa: E402
from spark_mergetree.expressions.ddl import parse_create  # noqa: E402
from tests.format.chdb_util import close_session, make_chdb_table  # noqa: E402

CREATE = """CREATE TABLE {name} (id UInt64, s String, v Float64{index})
ENGINE = MergeTree ORDER BY id SETTINGS index_granularity = 8192"""
INSERT = ("INSERT INTO {name} SELECT number, concat('user-', toString(cityHash64(number) % 100000000)), "
          "number / 7 FROM numbers({rows})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=4_000_000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="skip-index-bench-") as tmp:
        private_coordinator(Path(tmp))  # the tables we write commit there, not to the user's coordinator
        dirs = {}
        for name, index in (("plain", ""), ("indexed", ",\n INDEX i_s s TYPE bloom_filter GRANULARITY 1")):
            sess, dirs[name] = make_chdb_table(Path(tmp), CREATE.format(name=name, index=index),
                                               [INSERT.format(name=name, rows=args.rows), f"OPTIMIZE TABLE {name} FINAL"])
        value = sess.query(f"SELECT s FROM plain WHERE id = {args.rows // 3}", "TabSeparatedRaw").bytes().decode().strip()
        where = f"s = '{value}'"
        statements = {name: sess.query(f"SHOW CREATE TABLE {name}", "TabSeparatedRaw").bytes().decode() for name in dirs}
        print(f"{args.rows:,} rows, ORDER BY id, index_granularity 8192; query: WHERE {where}")
        print(f"{'table':<12} {'engine':<11} {'granules read':>16} {'rows':>5} {'median ms':>10}")
        clickhouse_rows = {}
        for name in dirs:
            explained = sess.query(f"EXPLAIN indexes = 1 SELECT * FROM {name} WHERE {where}", "TabSeparatedRaw").bytes().decode()
            granules = re.findall(r"Granules: (\d+)/(\d+)", explained)
            seconds, result = warm_median(args.runs, lambda name=name: sess.query(f"SELECT id, s, v FROM {name} WHERE {where}",
                                                                                  "Arrow"))
            table = pa.ipc.open_file(pa.py_buffer(result.bytes())).read_all()  # type: ignore[attr-defined]
            clickhouse_rows[name] = sorted(table.column("id").to_pylist())
            shown = f"{granules[-1][0]}/{granules[-1][1]}" if granules else "?"
            print(f"{name:<12} {'ClickHouse':<11} {shown:>16} {len(clickhouse_rows[name]):>5} {seconds * 1000:>10.1f}")
        close_session()
        for name, data_dir in dirs.items():
            ours = MergeTreeTable.open(data_dir, create_statement=statements[name])
            plan = ours.explain(where)
            seconds, result = warm_median(args.runs, lambda ours=ours: ours.to_arrow(["id", "s", "v"], where=where))
            ids = sorted(result.column("id").to_pylist())  # type: ignore[attr-defined]
            if ids != clickhouse_rows[name]:
                raise SystemExit(f"{name}: our rows differ from ClickHouse's")
            print(f"{name:<12} {'ours':<11} {f'{plan.granules_read}/{plan.granules_total}':>16} {len(ids):>5} "
                  f"{seconds * 1000:>10.1f}")
        rows = MergeTreeTable.open(dirs["plain"], create_statement=statements["plain"]).to_arrow()
        for name in dirs:
            target = Path(tmp) / f"ours-{name}"
            writes = []
            for _ in range(args.runs):
                shutil.rmtree(target, ignore_errors=True)
                ours = MergeTreeTable.new(target, parse_create(statements[name]), {"auto_merge": False})
                ours.write_directory()
                start = time.perf_counter()
                ours.insert(rows)
                ours.optimize(final=True)
                writes.append(time.perf_counter() - start)
            plan = ours.explain(where)
            seconds, result = warm_median(args.runs, lambda ours=ours: ours.to_arrow(["id", "s", "v"], where=where))
            ids = sorted(result.column("id").to_pylist())  # type: ignore[attr-defined]
            if ids != clickhouse_rows[name]:
                raise SystemExit(f"ours-{name}: our rows differ from ClickHouse's")
            write_ms = sorted(writes)[len(writes) // 2] * 1000
            print(f"{'ours-' + name:<12} {'ours':<11} {f'{plan.granules_read}/{plan.granules_total}':>16} {len(ids):>5} "
                  f"{seconds * 1000:>10.1f}   (written by us: insert + merge {write_ms:.0f} ms)")


if __name__ == "__main__":
    main()

"""Benchmark of the transaction layer: commit latency of each coordinator backend.

Per backend it measures, over N transactions, the latency of
  * `coordinator`: begin + commit at the coordinator alone (one removal lock per commit), and
  * `two-table`: a full `Transaction` adding one (empty) part to each of two tables — pending
    entries, coordinator commit, finalize — the cost a write pays on top of writing its parts,
  * `snapshot`: the visible parts of a table whose log holds a long history (checkpointed),
and prints p50 / p99 / mean in milliseconds. The ZooKeeper backend starts Debian's zookeeper on
127.0.0.1 (or uses --zk-hosts).

    python benchmarks/txn.py                  # 300 transactions per case
    python benchmarks/txn.py -n 1000 --zk-hosts 10.0.0.5:2181
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from spark_mergetree.txn import Coordinator, LocalCoordinator, TableLog, Transaction  # noqa: E402


def percentile(samples: list[float], fraction: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def report(backend: str, case: str, samples: list[float]) -> None:
    millis = [sample * 1000 for sample in samples]
    print(f"{backend:<10} {case:<12} n={len(millis):<5} p50={percentile(millis, 0.50):8.2f} ms  "
          f"p99={percentile(millis, 0.99):8.2f} ms  mean={statistics.fmean(millis):8.2f} ms")


def bench_coordinator(coordinator: Coordinator, count: int) -> list[float]:
    samples = []
    table_id = f"bench-{uuid.uuid4().hex[:8]}"
    for index in range(count):
        part = f"all_{index}_{index}_0"
        started = time.perf_counter()
        info = coordinator.begin()
        coordinator.lock_removal(info.tid, table_id, part)
        coordinator.commit(info.tid, [(table_id, part)])
        samples.append(time.perf_counter() - started)
    return samples


def bench_two_tables(coordinator: Coordinator, root: Path, count: int) -> list[float]:
    tables = [root / "a", root / "b"]
    samples = []
    for index in range(count):
        name = f"all_{index}_{index}_0"
        for table in tables:
            (table / name).mkdir(parents=True)
        started = time.perf_counter()
        with Transaction(coordinator) as transaction:
            for table in tables:
                transaction.add_parts(table, [name])
        samples.append(time.perf_counter() - started)
    return samples


def bench_long_history(coordinator: Coordinator, root: Path, history: int, count: int) -> list[float]:
    """Snapshots of one table after `history` commits, each adding a part and removing the one before."""
    table = root / f"history-{uuid.uuid4().hex[:6]}"
    for index in range(1, history + 1):
        name = f"all_{index}_{index}_0"
        (table / name).mkdir(parents=True)
        with Transaction(coordinator) as transaction:
            transaction.add_parts(table, [name])
            if index > 1:
                transaction.remove_parts(table, [f"all_{index - 1}_{index - 1}_0"])
    log = TableLog(table)
    now = coordinator.current_timestamp()
    samples = []
    for _ in range(count):
        started = time.perf_counter()
        log.snapshot(now, coordinator)
        samples.append(time.perf_counter() - started)
    return samples


def bench_write_overhead(coordinator: Coordinator, root: Path, rows: int, runs: int) -> None:
    """A transactional insert (parts + commit) against the same parts written with no commit."""
    import numpy as np
    import pyarrow as pa

    from spark_mergetree import MergeTreeTable

    ids = np.arange(rows, dtype=np.uint64)
    data = pa.table({"id": ids, "value": np.random.default_rng(0).random(rows),
                     "name": pa.array(np.char.add("n", (ids % 1000).astype(str)))})
    table = MergeTreeTable.create(root / f"overhead-{uuid.uuid4().hex[:6]}",
                                  [("id", "UInt64"), ("value", "Float64"), ("name", "String")],
                                  order_by="id", settings={"auto_merge": False}, coordinator=coordinator)
    plain, transactional = [], []
    for _ in range(runs):
        started = time.perf_counter()
        staged = table.stage(data)
        plain.append(time.perf_counter() - started)
        table.discard_staged(staged[0].tag)
        started = time.perf_counter()
        table.insert(data)
        transactional.append(time.perf_counter() - started)
    p, t = statistics.median(plain), statistics.median(transactional)
    print(f"{coordinator.url.split(':')[0]:<10} write {rows:>10,} rows: plain {p * 1000:.0f} ms, "
          f"transactional {t * 1000:.0f} ms, overhead {100 * (t - p) / p:+.1f}%")


def run_backend(backend: str, make: Callable[[], Coordinator], count: int, rows: int) -> None:
    coordinator = make()
    work = Path(tempfile.mkdtemp(prefix="txn-bench-"))
    try:
        bench_coordinator(coordinator, min(20, count))  # warm-up
        report(backend, "coordinator", bench_coordinator(coordinator, count))
        report(backend, "two-table", bench_two_tables(coordinator, work, count))
        report(backend, "snapshot", bench_long_history(coordinator, work, count, min(100, count)))
        for size in (rows // 10, rows):
            bench_write_overhead(coordinator, work, size, 3)
    finally:
        coordinator.close()
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-n", "--transactions", type=int, default=300)
    parser.add_argument("--rows", type=int, default=10_000_000, help="rows of the write-overhead case")
    parser.add_argument("--zk-hosts", help="use this ZooKeeper instead of starting one")
    parser.add_argument("--dir", help="directory for the local coordinator (default: a temp dir)")
    args = parser.parse_args()

    local_dir = Path(args.dir or tempfile.mkdtemp(prefix="txn-bench-coordinator-")) / uuid.uuid4().hex
    run_backend("local", lambda: LocalCoordinator(local_dir), args.transactions, args.rows)

    from spark_mergetree.txn.zookeeper import ZooKeeperCoordinator

    server = None
    hosts = args.zk_hosts
    if hosts is None:
        from tests.zookeeper_server import ZooKeeperServer
        server = ZooKeeperServer().start()
        hosts = server.hosts
    try:
        root = f"/bench_{uuid.uuid4().hex[:8]}"
        run_backend("zookeeper", lambda: ZooKeeperCoordinator(hosts, root), args.transactions, args.rows)
    finally:
        if server is not None:
            server.close()


if __name__ == "__main__":
    main()

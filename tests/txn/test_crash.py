"""kill -9 of writers in the middle of two-table commits, on both backends.

A child process commits mirrored transactions (the same part names in two tables) in a loop and
is killed at a random moment; every kill is one trial. After each kill a reader must see both
tables alike; after recovery every table holds all or none of each transaction, no pending entry
is left, and cleanup leaves exactly the visible part directories.
"""

from __future__ import annotations

import multiprocessing
import os
import random
import signal
import time
from pathlib import Path

from spark_mergetree.errors import SerializationError
from spark_mergetree.txn import Coordinator, TableLog, Transaction, TxnState, coordinator_from_url
from spark_mergetree.txn.zookeeper import ZooKeeperCoordinator
from tests.txn.conftest import part_directories
from tests.txn.workload import mirrored_insert

FORK = multiprocessing.get_context("fork")
TRIALS = {"local": 70, "zookeeper": 40, "s3": 15}
# How long a writer runs before it is killed, at most: a commit on the object-store coordinator is
# several HTTP round trips, so its writers get longer to reach (and be killed inside) commits.
KILL_WITHIN = {"local": 0.25, "zookeeper": 0.25, "s3": 0.75}
SESSION_TIMEOUT = 1.0


def child_coordinator(url: str) -> Coordinator:
    if url.startswith("zk://"):
        hosts, _, root = url[len("zk://"):].partition("/")
        # A short session: the killed writer's transactions die ~1 s after the kill.
        return ZooKeeperCoordinator(hosts, "/" + root, session_timeout=SESSION_TIMEOUT)
    return coordinator_from_url(url)


def _write_forever(url: str, tables: tuple[Path, Path], seed: int, ready: multiprocessing.Event) -> None:
    coordinator = child_coordinator(url)
    coordinator.current_timestamp()  # connected (an S3 client is made on first use) before the clock starts
    rng = random.Random(seed)
    ready.set()
    while True:
        try:
            mirrored_insert(coordinator, tables, rng)
        except SerializationError:
            pass  # a killed predecessor's lock lives until its session expires
        if rng.random() < 0.2:
            # Kills land inside cleanups too.
            TableLog(rng.choice(tables)).cleanup(coordinator, retention_seconds=0)


def wait_until_no_running(coordinator: Coordinator, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while coordinator.running() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert coordinator.running() == []


def check_mirrored(coordinator: Coordinator, tables: tuple[Path, Path]) -> set[str]:
    with Transaction(coordinator) as reader:
        first, second = (reader.visible_parts(table) for table in tables)
    assert first == second
    for table in tables:
        missing = {name for name in first if not (table / name).is_dir()}
        assert not missing, f"visible parts without a directory in {table}: {missing}"
    return first


def test_kill_writers_mid_commit(coordinator_url: str, coordinator: Coordinator, tmp_path: Path,
                                 request) -> None:
    backend = {"zk": "zookeeper", "s3": "s3"}.get(coordinator_url.split(":", 1)[0], "local")
    tables = (tmp_path / "a", tmp_path / "b")
    rng = random.Random(1174)
    rolled_back = finalized = orphans = 0
    for trial in range(TRIALS[backend]):
        ready = FORK.Event()
        child = FORK.Process(target=_write_forever, args=(coordinator_url, tables, trial, ready))
        child.start()
        assert ready.wait(30)
        time.sleep(rng.uniform(0.0, KILL_WITHIN[backend]))
        os.kill(child.pid, signal.SIGKILL)
        child.join()
        check_mirrored(coordinator, tables)
        if trial % 10 == 9:
            for table in tables:
                report = TableLog(table).recover(coordinator)
                rolled_back += len(report.rolled_back)
                finalized += len(report.finalized)
                orphans += len(report.deleted_directories)
            check_mirrored(coordinator, tables)
    wait_until_no_running(coordinator)
    reports = [TableLog(table).recover(coordinator) for table in tables]
    visible = check_mirrored(coordinator, tables)
    assert len(visible) > 0
    for table, report in zip(tables, reports, strict=True):
        rolled_back += len(report.rolled_back)
        finalized += len(report.finalized)
        orphans += len(report.deleted_directories)
        log = TableLog(table)
        assert all(entry.csn is not None for entry in log.entries()), "pending entries left"
        for entry in log.entries():
            state, csn = coordinator.status(entry.tid)
            assert state is TxnState.COMMITTED and csn == entry.csn
        log.cleanup(coordinator, retention_seconds=0)
        # No orphans: exactly the visible parts remain, no tmp_ directories.
        assert part_directories(table) == visible
    print(f"{backend}: rolled back {rolled_back}, finalized {finalized}, orphan directories {orphans}")
    # The kills landed in different phases of the commit.
    assert rolled_back + orphans > 0

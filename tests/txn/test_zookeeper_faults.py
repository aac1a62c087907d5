"""ZooKeeper failures: the server killed and restarted under running commits, an unreachable
server, and session expiry. Nothing committed may be lost, nothing may be committed twice, and a
transaction is in all its tables or in none."""

from __future__ import annotations

import multiprocessing
import random
import threading
import time
import traceback
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from spark_mergetree.errors import SerializationError, TransactionError
from spark_mergetree.txn import CommitOutcomeUnknownError, TableLog, Transaction, TxnState
from spark_mergetree.txn.zookeeper import ZooKeeperCoordinator
from tests.txn.conftest import part_directories, write_part
from tests.txn.test_crash import check_mirrored, wait_until_no_running
from tests.txn.workload import mirrored_insert
from tests.zookeeper_server import ZooKeeperServer

FORK = multiprocessing.get_context("fork")


@pytest.fixture
def server() -> Iterator[ZooKeeperServer]:
    """A server of our own: these tests crash it."""
    instance = ZooKeeperServer().start()
    yield instance
    instance.close()


@pytest.fixture
def root() -> str:
    return f"/faults_{uuid.uuid4().hex[:10]}"


def decision_tids(coordinator: ZooKeeperCoordinator) -> list[int]:
    names = coordinator.client.get_children(coordinator._path("log"))
    return [int(name.split("-")[1]) for name in names if name.startswith("c-")]


def verify_after_faults(coordinator: ZooKeeperCoordinator, tables: tuple[Path, Path],
                        reported: dict[int, int]) -> None:
    wait_until_no_running(coordinator)
    for table in tables:
        TableLog(table).recover(coordinator)
    visible = check_mirrored(coordinator, tables)
    tids = decision_tids(coordinator)
    assert len(tids) == len(set(tids)), "a transaction was committed twice"
    for tid, csn in reported.items():
        assert coordinator.status(tid) == (TxnState.COMMITTED, csn)
    for table in tables:
        log = TableLog(table)
        assert all(entry.csn is not None for entry in log.entries())
        for entry in log.entries():
            assert coordinator.status(entry.tid) == (TxnState.COMMITTED, entry.csn)
        log.cleanup(coordinator, retention_seconds=0)
        assert part_directories(table) == visible


def _commit_through_restarts(hosts: str, root: str, tables: tuple[Path, Path], seconds: float,
                             queue: multiprocessing.Queue) -> None:
    try:
        coordinator = ZooKeeperCoordinator(hosts, root, session_timeout=10.0, operation_timeout=8.0)
        committed: dict[int, int] = {}
        failures = {"unknown": 0, "failed": 0}
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            try:
                with Transaction(coordinator) as transaction:
                    name = f"all_{uuid.uuid4().int % 10**9}_{transaction.tid}_0"
                    for table in tables:
                        write_part(table, name, 1)
                        transaction.add_parts(table, [name])
                committed[transaction.tid] = transaction.csn
            except CommitOutcomeUnknownError:
                failures["unknown"] += 1
            except (TransactionError, SerializationError):
                failures["failed"] += 1
        coordinator.close()
        queue.put((committed, failures, None))
    except BaseException:
        queue.put(({}, {}, traceback.format_exc()))


def test_server_killed_and_restarted_mid_commit(server: ZooKeeperServer, root: str, tmp_path: Path) -> None:
    tables = (tmp_path / "a", tmp_path / "b")
    queue = FORK.Queue()
    writers = [FORK.Process(target=_commit_through_restarts, args=(server.hosts, root, tables, 6.0, queue))
               for _ in range(2)]
    for writer in writers:
        writer.start()
    rng = random.Random(7)
    for _ in range(3):
        time.sleep(rng.uniform(0.5, 1.2))
        server.kill()
        time.sleep(rng.uniform(0.1, 0.8))
        server.start()
    results = [queue.get(timeout=120) for _ in writers]
    for writer in writers:
        writer.join(timeout=30)
    assert not [error for *_, error in results if error], [error for *_, error in results if error]
    reported = {tid: csn for committed, _, _ in results for tid, csn in committed.items()}
    assert len(reported) >= 5
    coordinator = ZooKeeperCoordinator(server.hosts, root)
    try:
        verify_after_faults(coordinator, tables, reported)
        # Part names end in their transaction's tid: nothing committed was lost, and nothing
        # visible comes from a transaction that did not commit.
        visible_tids = {int(name.split("_")[2]) for name in check_mirrored(coordinator, tables)}
        assert set(reported) <= visible_tids
        for tid in visible_tids:
            assert coordinator.status(tid)[0] is TxnState.COMMITTED
    finally:
        coordinator.close()


def test_unreachable_server_times_out_and_commit_resolves_later(server: ZooKeeperServer, root: str,
                                                                 tmp_path: Path) -> None:
    tables = (tmp_path / "a", tmp_path / "b")
    coordinator = ZooKeeperCoordinator(server.hosts, root, session_timeout=20.0, operation_timeout=1.5)
    try:
        transaction = Transaction(coordinator)
        for table in tables:
            write_part(table, "all_1_1_0", 1)
            transaction.add_parts(table, ["all_1_1_0"])
        server.stop()
        # The call gives up after the operation timeout, not the (much longer) session timeout.
        with pytest.raises(TransactionError, match=r"did not .* within 1\.5 s"):
            coordinator.begin()
        with pytest.raises(CommitOutcomeUnknownError):
            transaction.commit()
        assert transaction.state == "unknown"
        server.start()
        # The queued commit request reaches the server once the session resumes.
        deadline = time.monotonic() + 20
        while coordinator.status(transaction.tid)[0] is TxnState.RUNNING and time.monotonic() < deadline:
            time.sleep(0.1)
        state, csn = coordinator.status(transaction.tid)
        assert state in (TxnState.COMMITTED, TxnState.ABORTED)
        visible = check_mirrored(coordinator, tables)
        assert visible == ({"all_1_1_0"} if state is TxnState.COMMITTED else set())
        for table in tables:
            TableLog(table).recover(coordinator)
            assert part_directories(table) == visible
        assert coordinator.begin().tid > transaction.tid
    finally:
        coordinator.close()


def expire_session(coordinator: ZooKeeperCoordinator) -> None:
    """Real expiry: a second client takes over the session and closes it."""
    session_id, password = coordinator.client.client_id
    thief = KazooClient(hosts=coordinator.hosts, client_id=(session_id, password))
    thief.start(timeout=10)
    thief.stop()
    thief.close()


def test_session_expiry_aborts_running_transactions(server: ZooKeeperServer, root: str, tmp_path: Path) -> None:
    tables = (tmp_path / "a", tmp_path / "b")
    coordinator = ZooKeeperCoordinator(server.hosts, root, session_timeout=4.0)
    other = ZooKeeperCoordinator(server.hosts, root)
    try:
        with Transaction(coordinator) as setup:
            for table in tables:
                write_part(table, "all_1_1_0", 1)
                setup.add_parts(table, ["all_1_1_0"])
        doomed = Transaction(coordinator)
        doomed.remove_parts(tables[0], ["all_1_1_0"])
        for table in tables:
            write_part(table, "all_2_2_0", 1)
            doomed.add_parts(table, ["all_2_2_0"])
        old_session = coordinator.client.client_id
        expire_session(coordinator)
        deadline = time.monotonic() + 20
        while (coordinator.client.client_id == old_session or not coordinator.client.connected) \
                and time.monotonic() < deadline:
            time.sleep(0.05)
        assert other.status(doomed.tid) == (TxnState.ABORTED, None)
        # A dead transaction cannot take new locks with the new session either.
        with pytest.raises(TransactionError, match="no longer running"):
            coordinator.lock_removal(doomed.tid, TableLog(tables[1]).table_id, "all_1_1_0")
        with pytest.raises(TransactionError, match="session expired|no longer running"):
            doomed.commit()
        assert doomed.state == "aborted"
        for table in tables:
            assert part_directories(table) == {"all_1_1_0"}
        # The expired transaction's removal lock is gone; the coordinator works on.
        with Transaction(coordinator) as after:
            after.remove_parts(tables[0], ["all_1_1_0"])
            after.remove_parts(tables[1], ["all_1_1_0"])
        assert check_mirrored(other, tables) == set()
    finally:
        coordinator.close()
        other.close()


def test_expiry_at_random_moments_never_half_commits(server: ZooKeeperServer, root: str, tmp_path: Path) -> None:
    tables = (tmp_path / "a", tmp_path / "b")
    coordinator = ZooKeeperCoordinator(server.hosts, root, session_timeout=4.0, operation_timeout=10.0)
    rng = random.Random(1167)
    reported: dict[int, int] = {}
    outcomes = {"committed": 0, "failed": 0}
    try:
        for _ in range(12):
            timer = threading.Timer(rng.uniform(0.0, 0.08), expire_session, args=(coordinator,))
            timer.start()
            try:
                for _ in range(4):
                    transaction_csn = mirrored_insert(coordinator, tables, rng)
                    assert transaction_csn is not None
                    outcomes["committed"] += 1
            except (TransactionError, SerializationError):
                outcomes["failed"] += 1
            timer.join()
            deadline = time.monotonic() + 20
            while not coordinator.client.connected and time.monotonic() < deadline:
                time.sleep(0.05)
            check_mirrored(coordinator, tables)
        for record in coordinator.list_transactions(1000):
            if record.state is TxnState.COMMITTED:
                reported[record.tid] = record.csn
        assert outcomes["failed"] > 0 and outcomes["committed"] > 0
        verify_after_faults(coordinator, tables, reported)
    finally:
        coordinator.close()

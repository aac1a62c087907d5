"""The Coordinator contract, run against both backends (local files and a real ZooKeeper)."""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from collections.abc import Callable

import pytest

from spark_mergetree.errors import InvalidOptionError, SerializationError, TransactionError
from spark_mergetree.txn import (
    COORDINATOR_ENV,
    Coordinator,
    LocalCoordinator,
    TxnState,
    coordinator_from_url,
    default_coordinator,
)

FORK = multiprocessing.get_context("fork")


def test_timestamps_snapshots_and_states(coordinator: Coordinator) -> None:
    first = coordinator.begin()
    second = coordinator.begin()
    assert first.tid < second.tid
    assert first.snapshot < first.tid and second.snapshot < second.tid
    assert coordinator.status(first.tid) == (TxnState.RUNNING, None)
    csn = coordinator.commit(first.tid)
    assert csn > second.tid  # one sequence for tids and csns
    assert coordinator.status(first.tid) == (TxnState.COMMITTED, csn)
    # A transaction that began before the commit does not see it; one that begins after does.
    assert second.snapshot < csn
    third = coordinator.begin()
    assert third.snapshot >= csn
    coordinator.abort(second.tid)
    assert coordinator.status(second.tid) == (TxnState.ABORTED, None)
    coordinator.abort(second.tid)  # idempotent
    with pytest.raises(TransactionError, match="committed"):
        coordinator.abort(first.tid)
    with pytest.raises(TransactionError):
        coordinator.commit(second.tid)
    assert coordinator.commit(first.tid) == csn  # repeating a successful commit answers the same csn
    coordinator.abort(third.tid)


def test_running_and_min_running_snapshot(coordinator: Coordinator) -> None:
    assert coordinator.running() == []
    idle = coordinator.min_running_snapshot()
    old = coordinator.begin()
    newer = coordinator.begin()
    assert [info.tid for info in coordinator.running()] == [old.tid, newer.tid]
    assert coordinator.min_running_snapshot() == old.snapshot
    assert idle <= old.snapshot
    coordinator.commit(old.tid)
    assert coordinator.min_running_snapshot() == newer.snapshot
    coordinator.abort(newer.tid)
    assert coordinator.running() == []
    assert coordinator.min_running_snapshot() >= newer.tid


def test_first_remover_wins(coordinator: Coordinator) -> None:
    winner, loser = coordinator.begin(), coordinator.begin()
    coordinator.lock_removal(winner.tid, "table", "all_1_1_0")
    coordinator.lock_removal(winner.tid, "table", "all_1_1_0")  # re-locking is fine
    with pytest.raises(SerializationError, match="all_1_1_0"):
        coordinator.lock_removal(loser.tid, "table", "all_1_1_0")
    coordinator.lock_removal(loser.tid, "other_table", "all_1_1_0")  # parts are per table
    csn = coordinator.commit(winner.tid, [("table", "all_1_1_0")])
    with pytest.raises(SerializationError, match="already removed"):
        coordinator.commit(loser.tid, [("table", "all_1_1_0")])
    # The loser was aborted by its failed commit, and its lock went with it.
    assert coordinator.status(loser.tid) == (TxnState.ABORTED, None)
    late = coordinator.begin()
    coordinator.lock_removal(late.tid, "other_table", "all_1_1_0")
    assert coordinator.commit(late.tid, [("other_table", "all_1_1_0")]) > csn


def test_commit_without_prior_lock_conflicts_with_a_lock_holder(coordinator: Coordinator) -> None:
    holder, other = coordinator.begin(), coordinator.begin()
    coordinator.lock_removal(holder.tid, "t", "p_1_1_0")
    with pytest.raises(SerializationError):
        coordinator.commit(other.tid, [("t", "p_1_1_0"), ("t", "p_2_2_0")])
    # Nothing of the failed commit happened: p_2_2_0 is still free.
    coordinator.commit(holder.tid, [("t", "p_1_1_0")])
    third = coordinator.begin()
    coordinator.commit(third.tid, [("t", "p_2_2_0")])


def test_appends_never_conflict(coordinator: Coordinator) -> None:
    transactions = [coordinator.begin() for _ in range(5)]
    csns = [coordinator.commit(info.tid, [], tables=["t"]) for info in transactions]
    assert csns == sorted(set(csns))


def test_aborted_lock_is_released(coordinator: Coordinator) -> None:
    first, second = coordinator.begin(), coordinator.begin()
    coordinator.lock_removal(first.tid, "t", "p")
    coordinator.abort(first.tid)
    coordinator.lock_removal(second.tid, "t", "p")
    coordinator.commit(second.tid, [("t", "p")])


def test_two_instances_share_state(make_coordinator: Callable[[], Coordinator]) -> None:
    one, two = make_coordinator(), make_coordinator()
    info = one.begin()
    assert two.status(info.tid) == (TxnState.RUNNING, None)
    other = two.begin()
    assert other.tid > info.tid
    two.lock_removal(other.tid, "t", "p")
    with pytest.raises(SerializationError):
        one.lock_removal(info.tid, "t", "p")
    with pytest.raises(TransactionError, match="another process|owned"):
        two.commit(info.tid)
    csn = one.commit(info.tid)
    assert two.status(info.tid) == (TxnState.COMMITTED, csn)
    assert {record.tid for record in two.list_transactions(10)} >= {info.tid, other.tid}
    two.abort(other.tid)


def test_list_transactions(coordinator: Coordinator) -> None:
    committed = coordinator.begin()
    coordinator.lock_removal(committed.tid, "t", "p")
    csn = coordinator.commit(committed.tid, [("t", "p")], tables=["/data/t"])
    aborted = coordinator.begin()
    coordinator.abort(aborted.tid)
    running = coordinator.begin()
    records = {record.tid: record for record in coordinator.list_transactions(10)}
    assert records[running.tid].state is TxnState.RUNNING
    assert records[committed.tid].state is TxnState.COMMITTED
    assert records[committed.tid].csn == csn
    assert records[committed.tid].tables == ("/data/t",)
    assert records[committed.tid].removals == (("t", "p"),)
    assert records[aborted.tid].state is TxnState.ABORTED
    assert len(coordinator.list_transactions(2)) == 2
    coordinator.abort(running.tid)


def _allocate_many(url: str, table: str, rounds: int, queue: multiprocessing.Queue[list[int]]) -> None:
    coordinator = coordinator_from_url(url)
    queue.put([coordinator.allocate_blocks(table, 3) for _ in range(rounds)])


def test_block_numbers_unique_across_processes(coordinator_url: str, coordinator: Coordinator) -> None:
    assert coordinator.allocate_blocks("a", 1) == 1
    assert coordinator.allocate_blocks("a", 5) == 2
    assert coordinator.allocate_blocks("b", 1) == 1
    with pytest.raises(InvalidOptionError):
        coordinator.allocate_blocks("a", 0)
    queue = FORK.Queue()
    workers = [FORK.Process(target=_allocate_many, args=(coordinator_url, "a", 20, queue)) for _ in range(3)]
    for worker in workers:
        worker.start()
    results = [queue.get(timeout=60) for _ in workers]
    for worker in workers:
        worker.join()
    firsts = sorted(first for result in results for first in result)
    for result in results:
        assert result == sorted(result)  # increasing within one process
    for previous, following in zip(firsts, firsts[1:], strict=False):
        assert following >= previous + 3  # ranges never overlap
    assert coordinator.allocate_blocks("a", 1) > firsts[-1]


def _begin_lock_and_hang(url: str, queue: multiprocessing.Queue[int], session_timeout: float) -> None:
    if url.startswith("zk://"):
        from spark_mergetree.txn.zookeeper import ZooKeeperCoordinator
        hosts, _, root = url[len("zk://"):].partition("/")
        coordinator: Coordinator = ZooKeeperCoordinator(hosts, "/" + root, session_timeout=session_timeout)
    else:
        coordinator = coordinator_from_url(url)
    info = coordinator.begin()
    coordinator.lock_removal(info.tid, "t", "p_1_1_0")
    queue.put(info.tid)
    time.sleep(600)


def test_dead_owner_counts_as_aborted(coordinator_url: str, coordinator: Coordinator) -> None:
    queue = FORK.Queue()
    child = FORK.Process(target=_begin_lock_and_hang, args=(coordinator_url, queue, 1.0))
    child.start()
    tid = queue.get(timeout=60)
    assert coordinator.status(tid) == (TxnState.RUNNING, None)
    assert tid in [info.tid for info in coordinator.running()]
    mine = coordinator.begin()
    with pytest.raises(SerializationError):
        coordinator.lock_removal(mine.tid, "t", "p_1_1_0")
    os.kill(child.pid, signal.SIGKILL)
    child.join()
    # Locally the lock file is free at once; ZooKeeper needs the session (1 s) to expire.
    deadline = time.monotonic() + 20
    while coordinator.status(tid)[0] is TxnState.RUNNING and time.monotonic() < deadline:
        time.sleep(0.2)
    assert coordinator.status(tid) == (TxnState.ABORTED, None)
    assert tid not in [info.tid for info in coordinator.running()]
    coordinator.lock_removal(mine.tid, "t", "p_1_1_0")
    coordinator.commit(mine.tid, [("t", "p_1_1_0")])


def test_urls(coordinator_url: str, coordinator: Coordinator, tmp_path, monkeypatch) -> None:
    assert coordinator.url == coordinator_url
    same = coordinator_from_url(coordinator_url)
    assert same is coordinator_from_url(coordinator_url)
    info = same.begin()
    assert coordinator.status(info.tid)[0] is TxnState.RUNNING
    same.abort(info.tid)
    same.close()
    assert same.closed
    reopened = coordinator_from_url(coordinator_url)
    assert reopened is not same and not reopened.closed
    reopened.abort(reopened.begin().tid)
    for bad in ("ftp://x/y", "zk:///no-hosts", "file://somehost/x"):
        with pytest.raises(InvalidOptionError):
            coordinator_from_url(bad)
    monkeypatch.setenv(COORDINATOR_ENV, coordinator_url)
    assert default_coordinator().url == coordinator_url
    monkeypatch.delenv(COORDINATOR_ENV)
    monkeypatch.setenv("HOME", str(tmp_path))
    fallback = default_coordinator()
    assert isinstance(fallback, LocalCoordinator)
    assert fallback.url == (tmp_path / ".spark_mergetree" / "coordinator").as_uri()


def test_plain_paths_and_file_urls_name_local_coordinators(tmp_path, monkeypatch) -> None:
    directory = tmp_path / "a dir"  # as_uri() percent-encodes the space
    by_path = coordinator_from_url(str(directory))
    assert isinstance(by_path, LocalCoordinator) and by_path.directory == directory.resolve()
    assert coordinator_from_url(directory.as_uri()) is by_path
    assert coordinator_from_url(by_path.url) is by_path
    monkeypatch.chdir(tmp_path)
    assert coordinator_from_url("a dir") is by_path
    monkeypatch.setenv(COORDINATOR_ENV, str(directory))  # as the README describes it
    assert default_coordinator() is by_path
    info = by_path.begin()
    by_path.abort(info.tid)
    assert by_path.status(info.tid)[0] is TxnState.ABORTED
    for bad in ("", "  ", "hdfs://nn/coordinator"):
        with pytest.raises(InvalidOptionError):
            coordinator_from_url(bad)


def test_local_log_with_a_torn_tail(tmp_path) -> None:
    directory = tmp_path / "coordinator"
    first = LocalCoordinator(directory)
    info = first.begin()
    csn = first.commit(info.tid, [("t", "p")])
    first.close()
    with open(directory / "log.jsonl", "ab") as log:
        log.write(b'{"op":"commit","tid":99,"cs')  # a writer died mid-append
    second = LocalCoordinator(directory)
    try:
        assert second.status(info.tid) == (TxnState.COMMITTED, csn)
        assert second.status(99) == (TxnState.ABORTED, None)
        later = second.begin()
        assert later.tid > csn
        with pytest.raises(SerializationError):
            second.lock_removal(later.tid, "t", "p")
        assert second.commit(later.tid) > later.tid
        assert (directory / "log.jsonl").read_bytes().endswith(b"}\n")
    finally:
        second.close()
    with open(directory / "log.jsonl", "ab") as log:
        log.write(b"not json\n")
    broken = LocalCoordinator(directory)
    with pytest.raises(TransactionError, match="corrupt record"):
        broken.begin()


def test_tables_staged_for_a_transaction_by_other_processes(coordinator_url: str,
                                                            make_coordinator: Callable[[], Coordinator]) -> None:
    owner, other = make_coordinator(), make_coordinator()
    info = owner.begin()
    assert owner.staged_tables(info.tid) == []
    for table in ("/data/a", "/data/b", "/data/a"):
        other.add_staged_table(info.tid, table)
    assert sorted(owner.staged_tables(info.tid)) == ["/data/a", "/data/b"]
    csn = owner.commit(info.tid)
    assert owner.staged_tables(info.tid) == [] and other.staged_tables(info.tid) == []
    with pytest.raises(TransactionError, match=f"committed at csn {csn}"):
        other.add_staged_table(info.tid, "/data/c")
    assert owner.staged_tables(info.tid) == []
    aborted = owner.begin()
    other.add_staged_table(aborted.tid, "/data/a")
    owner.abort(aborted.tid)
    assert other.staged_tables(aborted.tid) == []
    with pytest.raises(TransactionError, match="aborted"):
        other.add_staged_table(aborted.tid, "/data/a")
    # A dead owner's records go too (ZooKeeper: once the session expired, by log pruning).
    queue = FORK.Queue()
    child = FORK.Process(target=_begin_lock_and_hang, args=(coordinator_url, queue, 1.0))
    child.start()
    tid = queue.get(timeout=60)
    other.add_staged_table(tid, "/data/a")
    assert owner.staged_tables(tid) == ["/data/a"]
    os.kill(child.pid, signal.SIGKILL)
    child.join()
    deadline = time.monotonic() + 20
    while owner.status(tid)[0] is TxnState.RUNNING and time.monotonic() < deadline:
        time.sleep(0.2)
    with pytest.raises(TransactionError, match="aborted"):
        other.add_staged_table(tid, "/data/b")
    if coordinator_url.startswith("zk://"):
        owner.prune_log()  # type: ignore[attr-defined]
    assert owner.staged_tables(tid) == []


def test_zookeeper_log_pruning_keeps_every_status(zookeeper) -> None:
    from spark_mergetree.txn.zookeeper import ZooKeeperCoordinator

    coordinator = ZooKeeperCoordinator(zookeeper.hosts, "/prune_test")
    try:
        decided = []
        for index in range(6):
            info = coordinator.begin()
            if index % 3 == 2:
                coordinator.abort(info.tid)
                decided.append((info.tid, TxnState.ABORTED, None))
            else:
                decided.append((info.tid, TxnState.COMMITTED, coordinator.commit(info.tid)))
        assert coordinator.prune_log(keep=1) >= 4
        fresh = ZooKeeperCoordinator(zookeeper.hosts, "/prune_test")
        try:
            for tid, state, csn in decided:
                assert fresh.status(tid) == (state, csn)
            assert len(fresh.list_transactions(100)) == 1
        finally:
            fresh.close()
    finally:
        coordinator.close()


def test_forgotten_removals(coordinator: Coordinator) -> None:
    remover, holder = coordinator.begin(), coordinator.begin()
    coordinator.commit(remover.tid, [("t", "gone")])
    coordinator.lock_removal(holder.tid, "t", "held")
    coordinator.forget_removals("t", ["gone", "held", "never"])
    late = coordinator.begin()
    coordinator.lock_removal(late.tid, "t", "gone")  # the record is gone
    with pytest.raises(SerializationError):
        coordinator.lock_removal(late.tid, "t", "held")  # a live lock is not forgotten
    coordinator.abort(holder.tid)
    coordinator.commit(late.tid, [("t", "gone")])


def test_local_log_compaction(tmp_path) -> None:
    directory = tmp_path / "coordinator"
    writer = LocalCoordinator(directory, compact_threshold_bytes=4096)
    reader = LocalCoordinator(directory)
    try:
        outcomes = {}
        for index in range(120):
            info = writer.begin()
            if index % 4 == 3:
                writer.abort(info.tid)
                outcomes[info.tid] = (TxnState.ABORTED, None)
            else:
                outcomes[info.tid] = (TxnState.COMMITTED, writer.commit(info.tid, [("t", f"p{index}")]))
            if index == 10:
                assert reader.status(info.tid) == outcomes[info.tid]  # reader caught up before
        writer.forget_removals("t", [f"p{index}" for index in range(50)])
        writer.allocate_blocks("t", 7)
        size = (directory / "log.jsonl").stat().st_size
        assert writer.compact() < size
        last_block = 7
        for coordinator in (writer, reader, LocalCoordinator(directory)):
            for tid, outcome in outcomes.items():
                assert coordinator.status(tid) == outcome
            probe = coordinator.begin()
            coordinator.lock_removal(probe.tid, "t", "p1")  # forgotten
            with pytest.raises(SerializationError):
                coordinator.lock_removal(probe.tid, "t", "p100")  # still removed
            coordinator.abort(probe.tid)
            block = coordinator.allocate_blocks("t", 1)
            assert block > last_block
            last_block = block
            assert len(coordinator.list_transactions(500)) >= 100
    finally:
        writer.close()
        reader.close()

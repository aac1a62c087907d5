"""Snapshots, table logs and the Transaction object, on both backends.

The isolation cases follow the anomalies of the hermitage suite (as ClickHouse's
01167_isolation_hermitage runs them): dirty writes and reads, aborted reads, non-repeatable reads,
read skew, phantoms and lost updates must not happen; write skew is allowed (snapshot isolation).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from spark_mergetree.errors import InvalidOptionError, SerializationError, TransactionError
from spark_mergetree.txn import Coordinator, LocalCoordinator, TableLog, Transaction, TxnState
from spark_mergetree.txn.table_log import CHECKPOINT_EVERY
from tests.txn.conftest import part_directories, write_part


@pytest.fixture
def table(tmp_path: Path) -> Path:
    return tmp_path / "table"


@pytest.fixture
def other_table(tmp_path: Path) -> Path:
    return tmp_path / "other"


def insert(coordinator: Coordinator, table: Path, *names: str) -> int:
    with Transaction(coordinator) as transaction:
        for name in names:
            write_part(table, name)
        transaction.add_parts(table, names)
    assert transaction.csn is not None
    return transaction.csn


def test_entry_format_and_visibility_rule(coordinator: Coordinator, table: Path) -> None:
    first = insert(coordinator, table, "all_1_1_0")
    second = insert(coordinator, table, "all_2_2_0")
    merge = Transaction(coordinator)
    write_part(table, "all_1_2_1")
    merge.add_parts(table, ["all_1_2_1"])
    merge.remove_parts(table, ["all_1_1_0", "all_2_2_0"])
    assert merge.visible_parts(table) == {"all_1_2_1"}
    merged = merge.commit()
    log = TableLog(table)
    assert log.snapshot(first - 1, coordinator) == set()
    assert log.snapshot(first, coordinator) == {"all_1_1_0"}
    assert log.snapshot(second, coordinator) == {"all_1_1_0", "all_2_2_0"}
    assert log.snapshot(merged - 1, coordinator) == {"all_1_1_0", "all_2_2_0"}
    assert log.snapshot(merged, coordinator) == {"all_1_2_1"}
    entry = json.loads((log.directory / f"{merge.tid:020d}.json").read_text())
    assert entry["tid"] == merge.tid and entry["csn"] == merged
    assert entry["coordinator"] == coordinator.url
    assert entry["added"] == ["all_1_2_1"] and sorted(entry["removed"]) == ["all_1_1_0", "all_2_2_0"]
    assert json.loads((log.directory / "table.json").read_text())["coordinator"] == coordinator.url


def test_dirty_read_and_aborted_read(coordinator: Coordinator, table: Path) -> None:
    insert(coordinator, table, "all_1_1_0")
    writer = Transaction(coordinator)
    write_part(table, "all_2_2_0")
    writer.add_parts(table, ["all_2_2_0"])
    # The writer's pending entry is on disk (as during commit) but undecided.
    TableLog(table).write_pending(writer.tid, coordinator.url, ["all_2_2_0"], [])
    reader = Transaction(coordinator)
    assert reader.visible_parts(table) == {"all_1_1_0"}
    assert TableLog(table).snapshot(writer.snapshot, coordinator, own_tid=writer.tid) == {"all_1_1_0", "all_2_2_0"}
    assert writer.visible_parts(table) == {"all_1_1_0", "all_2_2_0"}
    writer.rollback()
    assert not (table / "all_2_2_0").exists()
    assert Transaction(coordinator).visible_parts(table) == {"all_1_1_0"}
    assert reader.visible_parts(table) == {"all_1_1_0"}


def test_repeatable_reads_read_skew_and_phantoms(coordinator: Coordinator, table: Path, other_table: Path) -> None:
    insert(coordinator, table, "all_1_1_0")
    insert(coordinator, other_table, "all_1_1_0")
    reader = Transaction(coordinator)
    assert reader.visible_parts(table) == {"all_1_1_0"}
    with Transaction(coordinator) as writer:
        write_part(table, "all_1_1_1")
        write_part(other_table, "all_2_2_0")
        writer.remove_parts(table, ["all_1_1_0"])
        writer.add_parts(table, ["all_1_1_1"])
        writer.add_parts(other_table, ["all_2_2_0"])
    # Same snapshot across tables: no new rows (phantoms), no changed rows, no skew.
    assert reader.visible_parts(table) == {"all_1_1_0"}
    assert reader.visible_parts(other_table) == {"all_1_1_0"}
    fresh = Transaction(coordinator)
    assert fresh.visible_parts(table) == {"all_1_1_1"}
    assert fresh.visible_parts(other_table) == {"all_1_1_0", "all_2_2_0"}
    # The removed part stays on disk while the old reader runs.
    assert TableLog(table).cleanup(coordinator) == []
    assert (table / "all_1_1_0").is_dir()
    reader.rollback()
    fresh.rollback()
    assert TableLog(table).cleanup(coordinator) == ["all_1_1_0"]
    assert part_directories(table) == {"all_1_1_1"}


def test_lost_update_first_committer_wins(coordinator: Coordinator, table: Path) -> None:
    insert(coordinator, table, "all_1_1_0")
    first, second = Transaction(coordinator), Transaction(coordinator)
    for transaction, name in ((first, "all_1_1_1"), (second, "all_1_1_2")):
        write_part(table, name)
        transaction.add_parts(table, [name])
    first.remove_parts(table, ["all_1_1_0"])
    with pytest.raises(SerializationError):
        second.remove_parts(table, ["all_1_1_0"])  # the lock is taken at once
    second.rollback()
    first.commit()
    assert Transaction(coordinator).visible_parts(table) == {"all_1_1_1"}
    assert part_directories(table) == {"all_1_1_0", "all_1_1_1"}


def test_overwrite_conflict_leaves_nothing(coordinator: Coordinator, table: Path, other_table: Path) -> None:
    """Two overwrites of the same parts: the first commit wins, the other leaves no trace."""
    insert(coordinator, table, "all_1_1_0")
    first, second = Transaction(coordinator), Transaction(coordinator)
    write_part(table, "all_2_2_0")
    write_part(table, "all_3_3_0")
    write_part(other_table, "all_3_3_0")
    first.add_parts(table, ["all_2_2_0"])
    second.add_parts(table, ["all_3_3_0"])
    second.add_parts(other_table, ["all_3_3_0"])
    first.remove_parts(table, ["all_1_1_0"])
    first.commit()
    # second saw all_1_1_0 in its snapshot; removing it now loses the race.
    assert second.visible_parts(table) == {"all_1_1_0", "all_3_3_0"}
    with pytest.raises(SerializationError):
        second.remove_parts(table, ["all_1_1_0"])
        second.commit()
    assert second.state == "aborted"
    assert coordinator.status(second.tid) == (TxnState.ABORTED, None)
    assert Transaction(coordinator).visible_parts(table) == {"all_2_2_0"}
    assert Transaction(coordinator).visible_parts(other_table) == set()
    assert part_directories(table) == {"all_1_1_0", "all_2_2_0"}
    assert part_directories(other_table) == set()
    assert not list(TableLog(table).directory.glob(f"{second.tid:020d}.json"))


def test_conflict_detected_at_commit(coordinator: Coordinator, table: Path, other_table: Path) -> None:
    """Without the early lock (another coordinator instance raced in between), commit still
    refuses and rolls back every table."""
    insert(coordinator, table, "all_1_1_0")
    loser = Transaction(coordinator)
    write_part(other_table, "all_5_5_0")
    loser.add_parts(other_table, ["all_5_5_0"])
    loser.visible_parts(table)
    loser._table(table).removed.append("all_1_1_0")  # skip the early lock on purpose
    with Transaction(coordinator) as winner:
        winner.remove_parts(table, ["all_1_1_0"])
    with pytest.raises(SerializationError):
        loser.commit()
    assert part_directories(other_table) == set()
    assert TableLog(other_table).entries() == []


def test_write_skew_is_allowed(coordinator: Coordinator, table: Path, other_table: Path) -> None:
    insert(coordinator, table, "all_1_1_0")
    insert(coordinator, other_table, "all_1_1_0")
    first, second = Transaction(coordinator), Transaction(coordinator)
    assert first.visible_parts(other_table) == second.visible_parts(table) == {"all_1_1_0"}
    first.remove_parts(table, ["all_1_1_0"])
    second.remove_parts(other_table, ["all_1_1_0"])
    first.commit()
    second.commit()
    assert Transaction(coordinator).visible_parts(table) == set()


def test_multi_table_commit_is_atomic_and_bad_requests_fail(coordinator: Coordinator, table: Path,
                                                            other_table: Path) -> None:
    with pytest.raises(RuntimeError, match="boom"):
        with Transaction(coordinator) as transaction:
            write_part(table, "all_1_1_0")
            write_part(other_table, "all_1_1_0")
            transaction.add_parts(table, ["all_1_1_0"])
            transaction.add_parts(other_table, ["all_1_1_0"])
            raise RuntimeError("boom")
    assert part_directories(table) == part_directories(other_table) == set()
    csn = insert(coordinator, table, "all_2_2_0")
    with Transaction(coordinator) as transaction:
        with pytest.raises(InvalidOptionError, match="not visible"):
            transaction.remove_parts(table, ["all_9_9_0"])
        with pytest.raises(InvalidOptionError, match="already"):
            transaction.add_parts(table, ["all_2_2_0"])
    assert transaction.csn is None  # read-only
    with pytest.raises(TransactionError, match="already"):
        transaction.visible_parts(table)
    assert csn > 0
    # A part named but never placed: the commit refuses before the commit point, nothing changes.
    with pytest.raises(InvalidOptionError, match="do not exist"):
        with Transaction(coordinator) as transaction:
            transaction.add_parts(table, ["all_3_3_0"])
    assert transaction.state == "aborted"
    assert TableLog(table).snapshot(coordinator.current_timestamp(), coordinator) == {"all_2_2_0"}


def test_tables_of_another_coordinator_are_refused(coordinator: Coordinator, table: Path, tmp_path: Path) -> None:
    insert(coordinator, table, "all_1_1_0")
    stranger = LocalCoordinator(tmp_path / "another_coordinator")
    try:
        transaction = Transaction(stranger)
        with pytest.raises(TransactionError, match="different coordinators"):
            transaction.visible_parts(table)
        transaction.rollback()
    finally:
        stranger.close()


def test_own_changes_and_pending_resolution(coordinator: Coordinator, table: Path) -> None:
    """A committed transaction whose process died before finalizing is visible through the
    coordinator; recovery fills in the csn."""
    transaction = Transaction(coordinator)
    write_part(table, "all_1_1_0")
    log = TableLog(table)
    log.write_pending(transaction.tid, coordinator.url, ["all_1_1_0"], [])
    csn = coordinator.commit(transaction.tid, [])
    reader = Transaction(coordinator)
    assert reader.visible_parts(table) == {"all_1_1_0"}
    report = log.recover(coordinator)
    assert report.finalized == [transaction.tid]
    assert log.entries()[0].csn == csn
    reader.rollback()


def test_time_travel_and_retention(coordinator: Coordinator, table: Path) -> None:
    first = insert(coordinator, table, "all_1_1_0")
    with Transaction(coordinator) as replace:
        write_part(table, "all_2_2_0")
        replace.remove_parts(table, ["all_1_1_0"])
        replace.add_parts(table, ["all_2_2_0"])
    log = TableLog(table)
    assert log.cleanup(coordinator, retention_seconds=3600) == []
    assert log.snapshot(first, coordinator) == {"all_1_1_0"}
    assert log.snapshot(replace.csn, coordinator) == {"all_2_2_0"}
    with Transaction(coordinator, snapshot=first) as past:
        assert past.visible_parts(table) == {"all_1_1_0"}
        with pytest.raises(TransactionError, match="cannot write"):
            past.remove_parts(table, ["all_1_1_0"])
    with pytest.raises(InvalidOptionError, match="snapshot"):
        Transaction(coordinator, snapshot=10**9)
    with pytest.warns(DeprecationWarning, match="snapshot"):
        with Transaction(coordinator, as_of=first) as deprecated:
            assert deprecated.snapshot == first and deprecated.read_only
    assert log.cleanup(coordinator, retention_seconds=0) == ["all_1_1_0"]
    with pytest.raises(TransactionError, match="older than the retained history"):
        log.snapshot(first, coordinator)
    assert log.snapshot(replace.csn, coordinator) == {"all_2_2_0"}
    with pytest.raises(InvalidOptionError):
        log.cleanup(coordinator, retention_seconds=-1)


def test_block_numbers_through_the_transaction(coordinator: Coordinator, table: Path) -> None:
    with Transaction(coordinator) as transaction:
        first = transaction.allocate_blocks(table, 2)
        second = transaction.allocate_blocks(table, 1)
    assert second == first + 2
    assert coordinator.allocate_blocks(TableLog(table).table_id, 1) == second + 1


def test_checkpoints_keep_long_histories_short(coordinator: Coordinator, table: Path) -> None:
    csns = []
    for block in range(1, CHECKPOINT_EVERY + 31):
        with Transaction(coordinator) as transaction:
            name = write_part(table, f"all_{block}_{block}_0")
            transaction.add_parts(table, [name])
            if block % 2 == 0:
                transaction.remove_parts(table, [f"all_{block - 1}_{block - 1}_0"])
        csns.append(transaction.csn)
    log = TableLog(table)
    assert (log.directory / "checkpoint.json").exists()
    assert len(log.entries()) < CHECKPOINT_EVERY
    expected = {f"all_{block}_{block}_0" for block in range(2, CHECKPOINT_EVERY + 31, 2)}
    assert log.snapshot(csns[-1], coordinator) == expected
    # History inside the checkpoint is still exact.
    assert log.snapshot(csns[0], coordinator) == {"all_1_1_0"}
    assert log.snapshot(csns[2], coordinator) == {"all_2_2_0", "all_3_3_0"}
    removed = log.cleanup(coordinator)
    assert len(removed) == (CHECKPOINT_EVERY + 30) // 2
    assert log.entries() == []
    assert part_directories(table) == expected
    assert log.snapshot(csns[-1], coordinator) == expected


def _stage_from_another_process(url: str, tid: int, tables: list[Path], name: str, removed: list[str]) -> None:
    for table in tables:
        write_part(table, name)
        TableLog(table).stage(tid, url, [name], removed)


def test_changes_staged_by_another_process(coordinator: Coordinator, table: Path, other_table: Path) -> None:
    import multiprocessing

    fork = multiprocessing.get_context("fork")
    insert(coordinator, table, "all_1_1_0")
    owner = Transaction(coordinator)
    child = fork.Process(target=_stage_from_another_process,
                         args=(coordinator.url, owner.tid, [table, other_table], "all_2_2_0", []))
    child.start()
    child.join()
    assert child.exitcode == 0
    # Staged proposals are invisible, even to the owner, until adopted.
    assert owner.visible_parts(table) == {"all_1_1_0"}
    assert Transaction(coordinator).visible_parts(other_table) == set()
    assert owner.adopt_staged(table) == (["all_2_2_0"], [])
    assert owner.adopt_staged(other_table) == (["all_2_2_0"], [])
    assert owner.adopt_staged(table) == ([], [])
    owner.remove_parts(table, ["all_1_1_0"])
    owner.commit()
    fresh = Transaction(coordinator)
    assert fresh.visible_parts(table) == {"all_2_2_0"}
    assert fresh.visible_parts(other_table) == {"all_2_2_0"}
    fresh.rollback()
    assert TableLog(table).staged() == []
    # Proposals the owner never adopted are garbage once it finished.
    forgetful = Transaction(coordinator)
    _stage_from_another_process(coordinator.url, forgetful.tid, [table, other_table], "all_3_3_0", [])
    assert TableLog(table).recover(coordinator).deleted_directories == []  # still running
    forgetful.rollback()
    for each in (table, other_table):
        assert "all_3_3_0" in TableLog(each).recover(coordinator).deleted_directories
        assert TableLog(each).staged() == []
        assert part_directories(each) == ({"all_1_1_0", "all_2_2_0"} if each == table else {"all_2_2_0"})


def test_proposals_seen_by_their_transaction_and_adopted_in_any_order(coordinator: Coordinator,
                                                                      table: Path) -> None:
    insert(coordinator, table, "all_1_1_0")
    owner = Transaction(coordinator)
    log = TableLog(table)
    # Two jobs of one transaction: an append, then an overwrite that replaces the append too. The
    # later proposal's file name sorts first, as a random one may.
    write_part(table, "all_2_2_0")
    first = log.stage(owner.tid, coordinator.url, ["all_2_2_0"])
    first.rename(first.with_name(f"{owner.tid:020d}.staged-ffffffffffff.json"))
    write_part(table, "all_3_3_0")
    second = log.stage(owner.tid, coordinator.url, ["all_3_3_0"], ["all_1_1_0", "all_2_2_0"])
    second.rename(second.with_name(f"{owner.tid:020d}.staged-000000000000.json"))
    assert log.snapshot(owner.snapshot, coordinator, own_tid=owner.tid) == {"all_3_3_0"}
    assert log.snapshot(owner.snapshot, coordinator) == {"all_1_1_0"}
    assert owner.adopt_staged(table) == (["all_3_3_0", "all_2_2_0"], ["all_1_1_0", "all_2_2_0"])
    owner.commit()
    assert Transaction(coordinator).visible_parts(table) == {"all_3_3_0"}
    # Proposals of a transaction that ends without adopting them are discarded with their parts.
    quitter = Transaction(coordinator)
    write_part(table, "all_4_4_0")
    log.stage(quitter.tid, coordinator.url, ["all_4_4_0"], ["all_3_3_0"])
    assert log.snapshot(quitter.snapshot, coordinator, own_tid=quitter.tid) == {"all_4_4_0"}
    quitter.rollback()
    log.discard_staged(quitter.tid)
    assert log.staged() == []
    assert "all_4_4_0" not in part_directories(table) and "all_3_3_0" in part_directories(table)


def test_reading_a_table_without_a_log_creates_nothing(coordinator: Coordinator, table: Path) -> None:
    table.mkdir()
    with Transaction(coordinator) as reader:
        assert reader.visible_parts(table) == set()
    assert list(table.iterdir()) == []
    assert TableLog(table).snapshot(coordinator.current_timestamp(), coordinator) == set()
    assert list(table.iterdir()) == []


def test_the_log_finds_and_deletes_part_directories_only_through_its_owner(coordinator, tmp_path: Path) -> None:
    """Where part directories live is not the log's business: it lists, probes and deletes them through
    the `PartDirectories` it is given (here: another directory than the table's)."""
    from spark_mergetree.fileops import Subdirectories

    table, elsewhere = tmp_path / "table", tmp_path / "disk"
    log = TableLog(table, Subdirectories(elsewhere))
    with Transaction(coordinator) as transaction:
        staged = write_part(elsewhere, f"staged_t{transaction.tid}_a")
        with log.commit_lock():
            transaction.add_parts(log, ["all_1_1_0"])
            os.rename(elsewhere / staged, elsewhere / "all_1_1_0")
    assert log.snapshot(coordinator.current_timestamp(), coordinator) == {"all_1_1_0"}
    loser = Transaction(coordinator)
    write_part(elsewhere, f"staged_t{loser.tid}_b")
    loser.add_parts(log, ["all_2_2_0"])
    write_part(elsewhere, "all_2_2_0")
    loser.rollback()  # deletes what its entry named, where the owner keeps it
    write_part(elsewhere, "delete_tmp_all_7_7_0_ab12")  # an interrupted deletion: garbage
    write_part(elsewhere, "all_9_9_0")  # named by nobody: another writer's part (ClickHouse's), kept
    write_part(table, "delete_tmp_all_8_8_0_ab12")  # not a directory of this owner: never touched
    report = log.recover(coordinator)
    assert sorted(report.deleted_directories) == sorted(["delete_tmp_all_7_7_0_ab12", f"staged_t{loser.tid}_b"])
    assert report.foreign_parts == ["all_9_9_0"]
    assert part_directories(elsewhere) == {"all_1_1_0", "all_9_9_0"}
    assert "delete_tmp_all_8_8_0_ab12" in part_directories(table)

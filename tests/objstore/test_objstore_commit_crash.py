"""A two-table commit on the object-store coordinator whose writer dies at each step (os._exit in a
forked writer just before its k-th request that changes the store during commit: the decision in
clock.json, the record, clearing the decision, releasing the lease and staged prefix; or between
finalizing the two tables' entries): after the lease lapses and recovery runs on both tables (what cleanup does), the
transaction is visible in both tables or in neither, exactly as the coordinator's status says.
Also a writer that lives but whose record write fails after the decision."""

from __future__ import annotations

import multiprocessing
import os
import threading
import time
from pathlib import Path

from spark_mergetree.txn import TableLog, Transaction, TxnState
from spark_mergetree.txn.object_store import ObjectStoreCoordinator
from tests.txn.conftest import publish

FORK = multiprocessing.get_context("fork")
LEASE = 1.0


def _writer(url: str, tables: list[Path], die_at: int, die_after_first_finalize: bool) -> None:
    coordinator = ObjectStoreCoordinator(url)
    tx = Transaction(coordinator)
    for number, table in enumerate(tables):
        publish(tx, table, f"all_{tx.tid}_{tx.tid}_{number}")
    bucket = coordinator._bucket
    changes = [0]

    def dying(method):  # type: ignore[no-untyped-def]
        def call(*args, **kwargs):  # type: ignore[no-untyped-def]
            if threading.current_thread() is not threading.main_thread():
                return method(*args, **kwargs)  # the lease renewals: not steps of the commit
            changes[0] += 1
            if changes[0] == die_at:
                os._exit(17)
            return method(*args, **kwargs)
        return call

    bucket.put = dying(bucket.put)  # type: ignore[method-assign]
    bucket.delete = dying(bucket.delete)  # type: ignore[method-assign]
    if die_after_first_finalize:
        finalize = TableLog.finalize

        def finalize_then_die(self, *args, **kwargs):  # type: ignore[no-untyped-def]
            finalize(self, *args, **kwargs)
            os._exit(17)

        TableLog.finalize = finalize_then_die  # type: ignore[method-assign]
    tx.commit()
    os._exit(0)


def test_writer_death_at_every_commit_step(s3_bucket: str, tmp_path: Path) -> None:
    url = ObjectStoreCoordinator.url_for(f"s3://{s3_bucket}/coordinator", lease=LEASE)
    checker = ObjectStoreCoordinator(url)
    outcomes = []
    try:
        for step in range(1, 12):
            for after_finalize in (False, True):
                if after_finalize and step > 1:
                    continue
                tables = [tmp_path / f"s{step}{after_finalize:d}" / name for name in ("x", "y")]
                before = checker.current_timestamp()
                process = FORK.Process(target=_writer, args=(url, tables, 0 if after_finalize else step,
                                                             after_finalize))
                process.start()
                process.join(60)
                assert process.exitcode in (0, 17), process.exitcode
                tid = before + 1  # nothing else begins on this coordinator meanwhile
                # The dead writer's lease lapses by the server's clock, which liveness reads from the
                # HTTP Date header: whole seconds, so up to one second behind its LastModified times.
                time.sleep(LEASE + 1.5)
                for table in tables:
                    TableLog(table).recover(checker)
                state, csn = checker.status(tid)
                assert state is not TxnState.RUNNING
                probe = Transaction(checker)
                seen = [f"all_{tid}_{tid}_{n}" in TableLog(table).snapshot(probe.snapshot, checker)
                        for n, table in enumerate(tables)]
                probe.rollback()
                outcomes.append((step, after_finalize, process.exitcode, state.value, seen))
                assert seen == [state is TxnState.COMMITTED] * 2, outcomes[-1]
                if process.exitcode == 0 and not after_finalize:
                    break
            else:
                continue
            break
    finally:
        checker.close()
    # Deaths before the decision abort, deaths after it commit; the writer ran to the end at last.
    assert outcomes[-1][2] == 0 and outcomes[-1][3] == "committed"
    assert {o[3] for o in outcomes} == {"committed", "aborted"}


def test_failed_record_write_after_the_decision(s3_bucket: str, tmp_path: Path) -> None:
    """The commit's decision is in clock.json but writing its record fails (a store error): the
    writer must not roll back what a reader may already have seen committed. Here a reader asks
    for the transaction's fate just after the writer's record write failed (so it records the
    decision as committed); then the writer's table entries must stay."""
    url = ObjectStoreCoordinator.url_for(f"s3://{s3_bucket}/coordinator", lease=30.0)
    writer, reader = ObjectStoreCoordinator(url), ObjectStoreCoordinator(url)
    tables = [tmp_path / name for name in ("x", "y")]
    try:
        tx = Transaction(writer)
        for number, table in enumerate(tables):
            publish(tx, table, f"all_{tx.tid}_{tx.tid}_{number}")
        bucket = writer._bucket
        put = bucket.put
        record_key = writer._record_key(tx.tid)
        failed = []

        def flaky_put(key, data, **kwargs):  # type: ignore[no-untyped-def]
            if key == record_key and not failed:
                failed.append(key)
                raise OSError("injected: the record's PUT failed")
            if key == record_key:
                reader.status(tx.tid)  # a reader between the failure and the writer's next step
            return put(key, data, **kwargs)

        bucket.put = flaky_put  # type: ignore[method-assign]
        try:
            tx.commit()
        except Exception:  # noqa: BLE001 - failing is allowed; disagreeing with the coordinator is not
            pass
        bucket.put = put  # type: ignore[method-assign]
        assert failed
        state, _ = reader.status(tx.tid)
        probe = Transaction(reader)
        seen = [f"all_{tx.tid}_{tx.tid}_{n}" in TableLog(table).snapshot(probe.snapshot, reader)
                for n, table in enumerate(tables)]
        probe.rollback()
        assert seen == [state is TxnState.COMMITTED] * 2, (state, seen)
    finally:
        writer.close()
        reader.close()

"""A two-table commit on the object-store coordinator whose writer dies at each step (os._exit in a
forked writer just before its k-th request that changes the store during commit: the decision in
clock.json, the record, clearing the decision, releasing the lease and staged prefix; or between
finalizing the two tables' entries): after the lease lapses and recovery runs on both tables (what cleanup does), the
transaction is visible in both tables or in neither, exactly as the coordinator's status says."""

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
                time.sleep(LEASE + 0.5)  # the dead writer's lease lapses
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

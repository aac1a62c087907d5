"""Several processes at once: transfers between two tables while readers check, in every snapshot,
that the total is unchanged (no dirty, non-repeatable or skewed reads) and a cleaner deletes old
parts underneath them. Both backends."""

from __future__ import annotations

import multiprocessing
import random
import time
import traceback
from pathlib import Path

from spark_mergetree.txn import Coordinator, TableLog, Transaction, coordinator_from_url
from tests.txn.conftest import part_directories, write_part
from tests.txn.workload import total, transfer

FORK = multiprocessing.get_context("fork")
TOTAL = 1000
SECONDS = 2.5


def seconds(url: str) -> float:
    """How long the workers run: the object-store coordinator pays an HTTP round trip per step (and
    the test server is a Python process on this shared machine), so it gets longer for as much work."""
    return SECONDS * (3 if url.startswith("s3:") else 1)


MINIMUM = 5  # operations each writer and reader does, however slow the machine (the test's claims need some)


def _going_on(deadline: float, url: str, done: int) -> bool:
    """Until the deadline, and past it until `MINIMUM` operations are done (up to five times as long
    again): on a loaded machine the work is slower, not smaller."""
    now = time.monotonic()
    return now < deadline or (done < MINIMUM and now < deadline + 5 * seconds(url))


def _writer(url: str, tables: tuple[Path, Path], seed: int, queue: multiprocessing.Queue) -> None:
    try:
        coordinator = coordinator_from_url(url)
        rng = random.Random(seed)
        done = conflicts = 0
        deadline = time.monotonic() + seconds(url)
        while _going_on(deadline, url, done):
            if transfer(coordinator, tables, rng):
                done += 1
            else:
                conflicts += 1
        queue.put(("writer", done, conflicts, None))
    except BaseException:
        queue.put(("writer", 0, 0, traceback.format_exc()))


def _reader(url: str, tables: tuple[Path, Path], queue: multiprocessing.Queue) -> None:
    try:
        coordinator = coordinator_from_url(url)
        checks = 0
        problems = []
        deadline = time.monotonic() + seconds(url)
        while _going_on(deadline, url, checks):
            with Transaction(coordinator) as transaction:
                first = {table: transaction.visible_parts(table) for table in tables}
                seen = total(transaction, tables)
                if seen != TOTAL:
                    problems.append(f"snapshot {transaction.snapshot}: total {seen}")
                time.sleep(0.01)
                # Fresh log reads must agree with the first ones (repeatable reads).
                again = {table: TableLog(table).snapshot(transaction.snapshot, coordinator) for table in tables}
                if again != first:
                    problems.append(f"snapshot {transaction.snapshot}: parts changed between reads")
            checks += 1
        queue.put(("reader", checks, 0, "\n".join(problems) or None))
    except BaseException:
        queue.put(("reader", 0, 0, traceback.format_exc()))


def _cleaner(url: str, tables: tuple[Path, Path], queue: multiprocessing.Queue) -> None:
    try:
        coordinator = coordinator_from_url(url)
        deleted = 0
        deadline = time.monotonic() + seconds(url)
        while time.monotonic() < deadline:
            for table in tables:
                deleted += len(TableLog(table).cleanup(coordinator, retention_seconds=0))
            time.sleep(0.05)
        queue.put(("cleaner", deleted, 0, None))
    except BaseException:
        queue.put(("cleaner", 0, 0, traceback.format_exc()))


def test_transfers_keep_the_total_in_every_snapshot(coordinator_url: str, coordinator: Coordinator,
                                                    tmp_path: Path) -> None:
    tables = (tmp_path / "a", tmp_path / "b")
    with Transaction(coordinator) as setup:
        for table, value in zip(tables, (TOTAL // 2, TOTAL - TOTAL // 2), strict=True):
            write_part(table, "all_0_0_0", value)
            setup.add_parts(table, ["all_0_0_0"])
    queue = FORK.Queue()
    workers = [FORK.Process(target=_writer, args=(coordinator_url, tables, seed, queue)) for seed in range(2)]
    workers += [FORK.Process(target=_reader, args=(coordinator_url, tables, queue)) for _ in range(2)]
    workers.append(FORK.Process(target=_cleaner, args=(coordinator_url, tables, queue)))
    for worker in workers:
        worker.start()
    results = [queue.get(timeout=120) for _ in workers]
    for worker in workers:
        worker.join(timeout=30)
    errors = [error for *_, error in results if error]
    assert not errors, "\n".join(errors)
    transfers = sum(done for kind, done, _, _ in results if kind == "writer")
    checks = sum(done for kind, done, _, _ in results if kind == "reader")
    assert transfers >= 10 and checks >= 10
    with Transaction(coordinator) as final:
        assert total(final, tables) == TOTAL
        visible = {table: final.visible_parts(table) for table in tables}
    for table in tables:
        TableLog(table).cleanup(coordinator, retention_seconds=0)
        assert part_directories(table) == visible[table]

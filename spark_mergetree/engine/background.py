"""Background merges: off the commit path, and the back-pressure on writers that outrun them.

A commit returns as soon as it is durable; then (table setting `auto_merge`) it asks this
process's `BackgroundMerges` to merge the table. A bounded number of daemon threads (at most
`MAX_THREADS` tables at once, one thread per table) each have the automatic selector's merges
(optimize.py `merge_step`) run, one transaction per merge, until it finds nothing more: in a merge
worker process (merge_worker.py: a merge in a thread would hold the interpreter lock the process's
writes need), or in the thread itself for tables a worker cannot open. Merges commit
through the same protocol as every write, so a process that exits (or is killed) mid-merge leaves
nothing visible half-done: only garbage that recovery and cleanup remove. Merges of several
processes (writers, `mergetree merge-daemon`s) on one table meet at the removal locks: one wins,
the others lose before writing anything or roll back what they wrote.

`throttle` is ClickHouse's back-pressure on inserts: with more than `parts_to_delay_insert`
active parts in a partition an insert sleeps (longer as the count approaches
`parts_to_throw_insert`), with `parts_to_throw_insert` or more it fails with TooManyPartsError
before writing anything.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from spark_mergetree.engine import merge_worker
from spark_mergetree.engine import optimize as optimizing
from spark_mergetree.errors import SerializationError, TooManyPartsError
from spark_mergetree.format.part_info import PartInfo

if TYPE_CHECKING:
    from spark_mergetree.engine.table import MergeTreeTable

log = logging.getLogger(__name__)

MAX_THREADS = 2  # tables merged at once in one process (one thread each)
# Whether merges run in worker processes (merge_worker.py) where they can; off, in this process's threads.
USE_WORKERS = True
# A merge that loses a race to another merger is retried after this pause, this many times in a row.
LOST_RACE_PAUSE = 0.05
LOST_RACES_IN_A_ROW = 20

# ClickHouse's defaults for the insert back-pressure settings (system.merge_tree_settings).
PARTS_TO_DELAY_INSERT = 1000
PARTS_TO_THROW_INSERT = 3000
MAX_DELAY_TO_INSERT = 1  # seconds
MIN_DELAY_TO_INSERT_MS = 10
# ClickHouse's merge_selecting_sleep_ms (its default is 5000 ms; ours is shorter: a writing process
# may be short-lived, and its merges should finish before it exits).
MERGE_SELECTING_SLEEP_MS = 1000


def merge_until_settled(table: MergeTreeTable, stop: threading.Event | None = None,
                        on_merge: Callable[[str, float], None] | None = None) -> list[str]:
    """Run the automatic selector's merges one after another until it finds nothing (or `stop` is
    set); return the new parts. A merge lost to another merger is retried with a fresh snapshot."""
    created: list[str] = []
    lost = 0
    while stop is None or not stop.is_set():
        started = time.monotonic()
        try:
            name = optimizing.merge_step(table)
        except SerializationError as error:
            lost += 1
            if lost >= LOST_RACES_IN_A_ROW:
                log.info("background merge of %s keeps losing to other mergers: %s", table.path, error)
                return created
            time.sleep(LOST_RACE_PAUSE)
            continue
        lost = 0
        if name is None:
            return created
        created.append(name)
        if on_merge is not None:
            on_merge(name, time.monotonic() - started)
    return created


class BackgroundMerges:
    """One process's background merge threads: at most `max_threads` tables at once."""

    def __init__(self, max_threads: int = MAX_THREADS) -> None:
        self.max_threads = max_threads
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._running: dict[str, threading.Thread] = {}
        self._again: set[str] = set()  # tables committed to while their thread ran
        self._queued: dict[str, MergeTreeTable] = {}  # tables waiting for a thread
        self._stop = threading.Event()
        self._idle_workers: list[merge_worker.Worker] = []
        self._workers: list[merge_worker.Worker] = []  # every live worker, idle or busy

    def schedule(self, table: MergeTreeTable) -> None:
        """Merge `table` in the background (no-op if it is being merged: that thread looks again)."""
        key = str(table.path)
        with self._lock:
            if self._stop.is_set():
                return
            if key in self._running:
                self._again.add(key)
            elif len(self._running) >= self.max_threads:
                self._queued.setdefault(key, table)
            else:
                self._start(key, table)

    def _start(self, key: str, table: MergeTreeTable) -> None:
        name = str(table.path).rstrip("/").rsplit("/", 1)[-1]  # (a local path or an object-store URL)
        thread = threading.Thread(target=self._run, args=(key, table), name=f"mergetree-merge-{name}", daemon=True)
        self._running[key] = thread
        thread.start()

    def _run(self, key: str, table: MergeTreeTable) -> None:
        pause = selecting_pause(table)
        while True:
            # Like ClickHouse's merge selecting task: look a moment after the commit, so that one
            # merge takes the parts of several commits and merges do not contend with every insert.
            if not self._stop.wait(pause):
                try:
                    self._merge(table)
                except Exception as error:  # noqa: BLE001 - a background merge never fails a write
                    if not self._stop.is_set():  # (stopping ends merges in progress on purpose)
                        log.warning("background merge of %s failed (the table is unchanged): %r", table.path, error)
            with self._lock:
                if key in self._again and not self._stop.is_set():
                    self._again.discard(key)
                    continue
                self._again.discard(key)
                del self._running[key]
                if self._queued and not self._stop.is_set():
                    next_key = next(iter(self._queued))
                    self._start(next_key, self._queued.pop(next_key))
                self._idle.notify_all()
                return

    def _merge(self, table: MergeTreeTable) -> None:
        description = table.merge_worker_description() if USE_WORKERS else None
        if description is None:
            merge_until_settled(table, self._stop)
            return
        with self._lock:
            if self._stop.is_set():
                return
            worker = None
            while worker is None and self._idle_workers:
                worker = self._idle_workers.pop()
                if not worker.alive():  # it died while idle: reaped and forgotten
                    self._forget(worker)
                    worker = None
        if worker is None:
            worker = merge_worker.Worker()
            with self._lock:
                self._workers.append(worker)
                if self._stop.is_set():  # stop() ran while it started: it must not outlive the stop
                    worker.close()
        healthy = False
        try:
            worker.merge(description)
            healthy = True
        finally:
            with self._lock:
                if healthy and not self._stop.is_set():
                    self._idle_workers.append(worker)
                else:  # its answer came (or it died): nothing runs there now
                    self._forget(worker)

    def _forget(self, worker: merge_worker.Worker) -> None:
        """Close a worker nothing runs in (waiting for it to exit) and drop it (the lock held)."""
        worker.close(idle=True)
        self._workers.remove(worker)

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until no merge thread runs or is queued; return False on timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            while self._running or self._queued:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                self._idle.wait(remaining)
        return True

    def stop(self) -> None:
        """Start no further merge (a running one finishes or is abandoned with the process)."""
        self._stop.set()
        with self._lock:
            self._queued.clear()
            for worker in [w for w in self._workers if w not in self._idle_workers]:
                worker.close()  # a busy one stops after its merge (its thread then forgets it)
            for worker in self._idle_workers:
                self._forget(worker)
            self._idle_workers.clear()


_PROCESS: BackgroundMerges | None = None
_PROCESS_LOCK = threading.Lock()


def _forget_after_fork() -> None:
    # A forked child has none of its parent's threads: it starts its own pool on first use.
    global _PROCESS, _PROCESS_LOCK
    _PROCESS = None
    _PROCESS_LOCK = threading.Lock()


os.register_at_fork(after_in_child=_forget_after_fork)


def process_merges() -> BackgroundMerges:
    """This process's background merges (created on first use; stopped at interpreter exit)."""
    global _PROCESS
    with _PROCESS_LOCK:
        if _PROCESS is None:
            _PROCESS = BackgroundMerges()
            atexit.register(_PROCESS.stop)
        return _PROCESS


def after_commit(table: MergeTreeTable) -> None:
    """What a committed write does about merges: schedule them in the background if the table
    merges automatically. Never raises (the commit happened)."""
    try:
        if table.metadata.setting("auto_merge") and not merge_worker.in_worker():
            process_merges().schedule(table)
    except Exception as error:  # noqa: BLE001 - see above
        log.warning("could not schedule background merges of %s: %r", table.path, error)


def _setting(table: MergeTreeTable, name: str, default: int) -> int:
    return int(table.metadata.definition.settings.get(name, default))


def selecting_pause(table: MergeTreeTable) -> float:
    """Seconds a background merge thread waits after being woken before it selects merges."""
    return _setting(table, "merge_selecting_sleep_ms", MERGE_SELECTING_SLEEP_MS) / 1000.0


def insert_delay(parts: int, delay_at: int, throw_at: int, max_delay: float) -> float:
    """Seconds an insert waits with `parts` active parts in a partition (ClickHouse's formula since
    23.1: max(min_delay_to_insert_ms, max_delay_to_insert · (parts − delay_at + 1) / (throw_at − delay_at)))."""
    if delay_at <= 0 or parts < delay_at:
        return 0.0
    span = max(1, throw_at - delay_at) if throw_at > delay_at else 1
    return max(MIN_DELAY_TO_INSERT_MS / 1000.0, max_delay * min(1.0, (parts - delay_at + 1) / span))


def throttle(table: MergeTreeTable, visible: Iterable[str]) -> None:
    """Back-pressure before a write: sleep or raise TooManyPartsError (naming the partition and the
    counts) by the most crowded partition among `visible`, as ClickHouse does for an INSERT."""
    delay_at = _setting(table, "parts_to_delay_insert", PARTS_TO_DELAY_INSERT)
    throw_at = _setting(table, "parts_to_throw_insert", PARTS_TO_THROW_INSERT)
    if delay_at <= 0 and throw_at <= 0:
        return
    counts: dict[str, int] = {}
    for name in visible:
        partition = PartInfo.parse(name).partition_id
        counts[partition] = counts.get(partition, 0) + 1
    if not counts:
        return
    partition, parts = max(counts.items(), key=lambda item: item[1])
    if throw_at > 0 and parts >= throw_at:
        after_commit(table)  # let merges catch up for the next attempt
        raise TooManyPartsError(
            f"{table.path}: too many parts ({parts}) in partition {partition!r}: parts_to_throw_insert is "
            f"{throw_at}; merges are slower than inserts (insert bigger batches, or raise the setting)")
    delay = insert_delay(parts, delay_at, throw_at, float(_setting(table, "max_delay_to_insert", MAX_DELAY_TO_INSERT)))
    if delay > 0:
        after_commit(table)
        log.info("%s: partition %r has %d active parts (parts_to_delay_insert %d): insert delayed %.3f s",
                 table.path, partition, parts, delay_at, delay)
        time.sleep(delay)


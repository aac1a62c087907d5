"""A write job's lease: a process on the job's driver that keeps a transaction open at the
coordinator for as long as the job runs, so the coordinator can tell whether the job is alive.

A Spark job stages parts from its tasks long before its `commit()` publishes them, and no Python
process of Spark's lives from the first to the second: the planner that makes the writer and the
process that runs `commit()` are short-lived workers of the driver's JVM. So the planner starts
this keeper (`start`), detached from the worker, and waits until it has registered the job in the
table's log with its lease (`TableLog.register_job(tag, leases=...)`): a transaction it began and
never commits. The coordinator ties that transaction's life to the keeper's, as it does every
owner's (a flock, a ZooKeeper session, an object-store lease it renews). Cleanup keeps the job's
staged directories while the lease runs, however long the job takes, and deletes them once it
does not.

The keeper ends the lease and exits when the job ended (its commit or abort ends it:
`discard_staged`), or when the driver process it watches is gone (the driver died: nothing will
publish what the job staged). Every `RENEW_SECONDS` it swaps its transaction for a new one (the
registration names both while they overlap), so a long job does not hold back the snapshot horizon
below which cleanup deletes removed parts.

A table in object storage registers its jobs in its `_mergetree/jobs/` objects (txn/object_log.py):
the keeper takes the table's URL in place of its directory, and holds the lease the same way.

Run as `python -m spark_mergetree.txn.job_lease <table dir or URL> <coordinator url> <tag> <driver pid>`;
it says `ready <tid>` (`ended <tag>` if the job ended before it started, or `error <message>`) on
its standard output, then nothing more there.
"""

from __future__ import annotations

import json
import os
import selectors
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from spark_mergetree.errors import TransactionError
from spark_mergetree.storage.object_base import is_object_url, parse_object_url
from spark_mergetree.storage.object_store import ObjectParts
from spark_mergetree.txn.connect import coordinator_from_url
from spark_mergetree.txn.coordinator import Coordinator
from spark_mergetree.txn.object_log import ObjectTableLog
from spark_mergetree.txn.table_log import TableLog

POLL_SECONDS = 1.0  # how often the keeper looks at the job and the driver
RENEW_SECONDS = 300.0  # how long one lease transaction lives before it is swapped for a new one
READY_TIMEOUT = 60.0  # how long `start` waits for the keeper to register the job
# How `start` hands a keeper the storage options of a table in object storage (its environment only).
STORAGE_OPTIONS_ENV = "SPARK_MERGETREE_JOB_STORAGE_OPTIONS"


def process_start(pid: int) -> str | None:
    """What identifies process `pid` across pid reuse: its start time in clock ticks (Linux), ""
    where /proc does not tell (the pid alone then), None if there is no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        if Path("/proc/self/stat").exists():
            return None
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:
            pass
        return ""
    except OSError:
        return None
    return stat[stat.rindex(")") + 2:].split()[19]


def driver_process() -> int:
    """The process whose life a job's driver is: the nearest ancestor running `java` (the Spark
    driver's JVM, parent of the Python worker daemon that forked this planner), else the parent."""
    pid = os.getppid()
    for _ in range(16):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            break
        if stat[stat.index("(") + 1:stat.rindex(")")] == "java":
            return pid
        pid = int(stat[stat.rindex(")") + 2:].split()[1])
        if pid <= 1:
            break
    return os.getppid()


def start(table_dir: str | os.PathLike[str], coordinator_url: str, tag: str, *, driver: int | None = None,
          wait: bool = True, timeout: float = READY_TIMEOUT,
          storage_options: Mapping[str, Any] | None = None) -> int | None:
    """Start the keeper of job `tag`'s lease (watching process `driver`, by default the Spark
    driver this process belongs to) and, with `wait`, return its tid once the job is registered
    with it.

    Without `wait` it returns None at once (a Spark write does not wait the half second the keeper
    takes to start: its tasks' registrations, made meanwhile, are replaced by the keeper's, and a
    keeper that fails says why on the standard error, Spark's driver log). With `wait`, raises
    TransactionError naming the table and the cause if the keeper cannot register the job within
    `timeout` seconds (it is then stopped). `storage_options`: how the keeper reaches a table in
    object storage (its endpoint and credentials, when the environment does not say), handed to
    it in its environment only."""
    driver = driver_process() if driver is None else driver
    environment = dict(os.environ)
    if storage_options:
        environment[STORAGE_OPTIONS_ENV] = json.dumps(dict(storage_options))
    command = [sys.executable, "-m", "spark_mergetree.txn.job_lease", os.fspath(table_dir), coordinator_url, tag,
               str(driver)]
    keeper = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE if wait else subprocess.DEVNULL,
                              start_new_session=True, env=environment)
    if not wait:
        return None
    assert keeper.stdout is not None
    line = b""
    deadline = time.monotonic() + timeout
    while not line.endswith(b"\n") and (left := deadline - time.monotonic()) > 0:
        if not _readable(keeper.stdout.fileno(), left):
            break
        chunk = os.read(keeper.stdout.fileno(), 4096)
        if not chunk:
            break
        line += chunk
    keeper.stdout.close()
    word, _, rest = line.decode(errors="replace").strip().partition(" ")
    if word == "ready":
        return int(rest)
    if word == "ended":  # the job ended before its keeper registered: nothing is staged to keep
        keeper.wait(timeout=10)
        return None
    if keeper.poll() is None:
        keeper.kill()
    keeper.wait(timeout=10)
    cause = rest if word == "error" else (f"it exited with status {keeper.returncode}" if line == b""
                                          and keeper.returncode else f"no answer within {timeout:g} s")
    raise TransactionError(f"write job {tag} of {table_dir}: the process holding its lease at coordinator "
                           f"{coordinator_url} could not start: {cause}")


def _readable(descriptor: int, seconds: float) -> bool:
    """Whether `descriptor` has something to read within `seconds` (a selector, not select(): a
    process holding a thousand files, as a long-lived Spark worker may, has descriptors past its limit)."""
    with selectors.DefaultSelector() as watch:
        watch.register(descriptor, selectors.EVENT_READ)
        return bool(watch.select(seconds))


def job_log(table_dir: str) -> TableLog:
    """Where a table registers its write jobs: its log directory, or for a table in object storage
    (an s3://, gs://, abfss:// URL; the store reached as the environment says) its
    `_mergetree/jobs/` objects (txn/object_log.py)."""
    if is_object_url(table_dir):
        location = parse_object_url(table_dir)
        options = os.environ.get(STORAGE_OPTIONS_ENV)
        return ObjectTableLog(location, ObjectParts(location, json.loads(options) if options else None), table_id="")
    return TableLog(table_dir)


def hold(table_dir: str, coordinator_url: str, tag: str, driver: int) -> int:
    """The keeper's life: begin the lease, register the job, watch, end the lease. Returns the exit status."""
    driver_started = process_start(driver)
    log = job_log(table_dir)
    try:
        coordinator = coordinator_from_url(coordinator_url)
        tid = coordinator.begin().tid
    except Exception as error:  # noqa: BLE001 - reported to the planner, which raises it
        _report(tag, table_dir, error)
        return 1
    try:
        try:
            if driver_started is None:
                raise TransactionError(f"the driver process {driver} is not running")
            log.register_job(tag, leases=[(coordinator_url, tid)])
        except TransactionError as error:
            if log.job_ended(tag):  # a short job committed before its keeper started: nothing to hold
                print(f"ended {tag}", flush=True)
                return 0
            _report(tag, table_dir, error)
            return 1
        except Exception as error:  # noqa: BLE001 - reported to the planner, which raises it
            _report(tag, table_dir, error)
            return 1
        print(f"ready {tid}", flush=True)
        _quiet_stdout()
        renewed = time.monotonic()
        while log.job_leased(tag) and process_start(driver) == driver_started:
            time.sleep(POLL_SECONDS)
            if time.monotonic() - renewed >= RENEW_SECONDS:
                tid = _renew(log, coordinator, coordinator_url, tag, tid)
                renewed = time.monotonic()
        return 0
    finally:
        try:
            coordinator.abort(tid)
        finally:
            coordinator.close()


def _renew(log: TableLog, coordinator: Coordinator, url: str, tag: str, tid: int) -> int:
    """Swap lease `tid` for a new transaction: the registration names both before the old one ends."""
    fresh = coordinator.begin().tid
    try:
        log.register_job(tag, leases=[(url, fresh), (url, tid)])
    except TransactionError:  # the job ended meanwhile: the watch loop sees it
        coordinator.abort(fresh)
        return tid
    coordinator.abort(tid)
    try:
        log.register_job(tag, leases=[(url, fresh)])
    except TransactionError:
        pass  # ended meanwhile: the registration is gone or dead either way
    return fresh


def _report(tag: str, table_dir: str, error: Exception) -> None:
    """A keeper that could not take its lease: one line for a waiting `start`, one on the standard
    error for the driver's log."""
    print(f"error {type(error).__name__}: {error}", flush=True)
    print(f"spark_mergetree: the lease of write job {tag} of {table_dir} could not start: "
          f"{type(error).__name__}: {error}", file=sys.stderr, flush=True)


def _quiet_stdout() -> None:
    """Nothing more goes to the pipe the planner stopped reading."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


if __name__ == "__main__":
    if len(sys.argv) != 5:
        print("usage: python -m spark_mergetree.txn.job_lease <table dir> <coordinator url> <tag> <driver pid>",
              file=sys.stderr)
        sys.exit(2)
    sys.exit(hold(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])))

"""Crash safety: a process doing DDL in a loop is SIGKILLed at random moments; reopening repairs all."""

from __future__ import annotations

import os
import random
import selectors
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from spark_mergetree.catalog import Catalog
from tests.catalog.chdb_runner import rows, run_chdb

WORKER = Path(__file__).with_name("ddl_worker.py")
TRIALS = 150


def _assert_consistent(root: Path, journal: Path) -> Catalog:
    catalog = Catalog(root, drop_delay=3600)
    catalog.recover()
    assert not list((root / "metadata").glob("*.tmp"))
    assert not list((root / "store").glob("*/*/*.sql.tmp"))
    assert not list((root / "tmp").glob("mergetree_dropping.*"))
    owner: dict[str, str] = {}

    def claim(table_uuid: str, who: str) -> None:
        assert table_uuid not in owner, f"{table_uuid} is both {owner[table_uuid]} and {who}"
        owner[table_uuid] = who

    databases = catalog.databases()
    for link in (root / "metadata").iterdir():
        if link.is_symlink():
            assert link.with_name(link.name + ".sql").exists(), f"dangling database symlink {link}"
    for database in databases:
        database_uuid = catalog.database_uuid(database)
        claim(database_uuid, f"database {database}")
        database_dir = catalog.database_path(database)
        assert os.readlink(root / "metadata" / database.replace("-", "%2D")) == \
            f"../store/{database_uuid[:3]}/{database_uuid}"
        for marker in database_dir.glob("*.sql.detached"):
            assert marker.with_name(marker.name[:-9]).exists(), f"marker without table: {marker}"
        attached = catalog.tables(database)
        for table in attached + catalog.detached_tables(database):
            info = catalog.table_info((database, table), allow_detached=True)
            claim(info.uuid, f"{database}.{table}")
            assert (info.data_path / "format_version.txt").read_text() == "1"
        links = {p.name: os.readlink(p) for p in (root / "data" / database.replace("-", "%2D")).iterdir()}
        expected = {}
        for table in attached + catalog.detached_tables(database):
            table_uuid = catalog.table_info((database, table), allow_detached=True).uuid
            expected[table.replace(".", "%2E")] = f"../../store/{table_uuid[:3]}/{table_uuid}"
        assert links == expected
    for dropped in catalog.dropped_tables():
        claim(dropped.uuid, f"dropped {dropped.database}.{dropped.name}")
        assert (dropped.data_path / "format_version.txt").exists()
    assert catalog.unreferenced_store_dirs() == []

    lines = journal.read_text().splitlines() if journal.exists() else []
    created = {line.split()[1] for line in lines if line.startswith("created ")}
    purging = {line.split()[1] for line in lines if line.startswith("purging ")}
    lost = created - purging - owner.keys()
    assert not lost, f"tables lost: {lost}"
    return catalog


def _readable(descriptor: int, seconds: float) -> bool:
    """Whether the pipe has something to read within `seconds` (a selector: select() refuses the
    descriptors past 1023 a long test process reaches)."""
    with selectors.DefaultSelector() as watch:
        watch.register(descriptor, selectors.EVENT_READ)
        return bool(watch.select(seconds))


class Launcher:
    """The warm launcher process of ddl_worker.py: forks workers on request."""

    #: How long a line the test waits for may take, and how many other lines may come first: a
    #: worker that never opens its catalog (it died, or hangs) fails the test instead of hanging it.
    EXPECT_SECONDS = 60.0
    EXPECT_LINES = 10_000

    def __init__(self) -> None:
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
        self.process = subprocess.Popen([sys.executable, str(WORKER)], env=env, stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, text=True, bufsize=1)
        self._pending: list[str] = []
        self._unread = b""

    def _send(self, line: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(line + "\n")
        self.process.stdin.flush()

    def _next_line(self, deadline: float, prefix: str) -> str:
        """The launcher's next output line, read from its pipe without blocking past `deadline`."""
        assert self.process.stdout is not None
        descriptor = self.process.stdout.fileno()
        while b"\n" not in self._unread:
            left = deadline - time.monotonic()
            if left <= 0 or not _readable(descriptor, left):
                raise AssertionError(f"no line {prefix!r} from the launcher within {self.EXPECT_SECONDS:.0f} s "
                                     f"(a worker never got ready, or the launcher hangs); lines seen meanwhile: "
                                     f"{self._pending[-5:]}")
            chunk = os.read(descriptor, 65536)
            assert chunk, f"the launcher died (exit status {self.process.poll()}) before printing {prefix!r}"
            self._unread += chunk
        line, _, self._unread = self._unread.partition(b"\n")
        return line.decode().strip()

    def expect(self, prefix: str) -> str:
        """The next line starting with ``prefix`` (other lines are kept for later), within
        EXPECT_SECONDS and EXPECT_LINES lines; an AssertionError naming what was awaited otherwise."""
        for index, line in enumerate(self._pending):
            if line.startswith(prefix):
                return self._pending.pop(index)
        deadline = time.monotonic() + self.EXPECT_SECONDS
        for _ in range(self.EXPECT_LINES):
            line = self._next_line(deadline, prefix)
            if line.startswith(prefix):
                return line
            self._pending.append(line)
        raise AssertionError(f"no line {prefix!r} from the launcher among its next {self.EXPECT_LINES} lines "
                             f"(the last: {self._pending[-5:]})")

    def spawn(self, root: Path, journal: Path, seed: int) -> int:
        self._send(f"spawn {root} {journal} {seed}")
        return int(self.expect("pid ").split()[1])

    def kill(self, pid: int) -> None:
        os.kill(pid, signal.SIGKILL)
        self._send(f"reap {pid}")
        assert self.expect(f"status {pid} ").split()[2] == str(int(signal.SIGKILL)), "a worker stopped by itself"
        self._pending = [line for line in self._pending if line != f"ready {pid}"]

    def close(self) -> None:
        """End the launcher; it kills any worker still running (killed itself after 30 s)."""
        assert self.process.stdin is not None
        self.process.stdin.close()
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(30)
            raise


def test_waiting_for_a_worker_that_never_gets_ready_fails_in_bounded_time(tmp_path: Path) -> None:
    """A worker that dies before opening its catalog (here: its root is a file) never prints `ready`:
    the wait for it ends with an error naming what it waited for, not a hung test run."""
    not_a_directory = tmp_path / "root"
    not_a_directory.write_text("a file")
    launcher = Launcher()
    outcome: list[BaseException | str] = []

    def wait() -> None:
        try:
            outcome.append(launcher.expect(f"ready {pid}"))
        except BaseException as error:  # the outcome is what the test checks
            outcome.append(error)

    try:
        pid = launcher.spawn(not_a_directory, tmp_path / "journal", 1)
        launcher.EXPECT_SECONDS = 3.0  # (after the launcher's warm start)
        started = time.monotonic()
        waiter = threading.Thread(target=wait, daemon=True)
        waiter.start()
        waiter.join(30)
        assert not waiter.is_alive(), "the wait for a worker that never gets ready did not end"
        assert time.monotonic() - started < 20
        (error,) = outcome
        assert isinstance(error, AssertionError) and f"no line 'ready {pid}'" in str(error)
        launcher._send(f"reap {pid}")
        assert launcher.expect(f"status {pid} ") == f"status {pid} -1"  # it exited by itself
    finally:
        launcher.close()


def test_sigkill_during_ddl_leaves_consistent_catalog(tmp_path: Path) -> None:
    root = tmp_path / "root"
    journal = tmp_path / "journal"
    rng = random.Random(20261122)
    operations_seen = 0
    launcher = Launcher()
    try:
        for trial in range(TRIALS):
            # Odd trials run two workers at once: their DDL races on the same names.
            pids = [launcher.spawn(root, journal, trial * 2 + k) for k in range(1 + trial % 2)]
            # Every third trial dies while opening (recovery itself must be crash-safe); the
            # others once the loop runs.
            if trial % 3 == 0:
                time.sleep(rng.uniform(0.0, 0.02))
            else:
                for pid in pids:
                    launcher.expect(f"ready {pid}")
                time.sleep(rng.uniform(0.0, 0.12))
            for pid in pids:
                launcher.kill(pid)
            catalog = _assert_consistent(root, journal)
            operations_seen += len(journal.read_text().splitlines()) if journal.exists() else 0
            # Keep the root small: finish the drops so far (the journal learns they are gone).
            purged = Catalog(root, drop_delay=0).collect_dropped()
            with open(journal, "a") as log:
                log.writelines(f"purging {table_uuid}\n" for table_uuid in purged)
    finally:
        launcher.close()
    assert operations_seen > 50, "the worker never got to do DDL"

    # After all that, a ClickHouse server on the same root agrees with us.
    ours = sorted([database, table, catalog.table_uuid((database, table))]
                  for database in catalog.databases() for table in catalog.tables(database))
    theirs = rows(run_chdb(root, "SELECT database, name, uuid FROM system.tables "
                                 "WHERE database IN ('a', 'b-b') ORDER BY 1, 2")[0])
    assert theirs == ours

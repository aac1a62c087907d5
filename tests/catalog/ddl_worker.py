"""Crash-test worker: random DDL on a catalog root in a tight loop until killed.

Run as a launcher (`python ddl_worker.py`): it imports everything once, then for each stdin line
`spawn ROOT JOURNAL SEED` forks a worker process and prints `pid <n>`, and for `reap <n>` waits
for that child and prints `status <n> <signal>`. Forking from a warm process makes a fresh worker
cost milliseconds instead of a Python start-up, so many kill trials stay fast; each worker is still
a separate process whose death releases its locks as any crash would.

A worker prints `ready <pid>` once its catalog is open, then appends to JOURNAL `created <uuid>`
after each committed CREATE TABLE and `purging <uuid>` before purging a dropped table's data,
so the test can tell which tables must still exist somewhere (attached, detached or in
metadata_dropped/) after a SIGKILL.
"""

from __future__ import annotations

import os
import random
import signal
import sys
import traceback

import spark_mergetree.expressions.ddl  # noqa: F401  (warm the import before forking)
from spark_mergetree.catalog import Catalog
from spark_mergetree.errors import MergeTreeError

DATABASES = ["a", "b-b"]
TABLES = ["t0", "t1", "t.2"]


def run(root: str, journal_path: str, seed: int) -> None:
    rng = random.Random(seed)
    catalog = Catalog(root, drop_delay=3600)
    journal = open(journal_path, "a", buffering=1)
    _say(f"ready {os.getpid()}")

    def name() -> tuple[str, str]:
        return rng.choice(DATABASES), rng.choice(TABLES)

    while True:
        op = rng.choices(
            ["create_db", "drop_db", "create", "rename", "exchange", "drop", "drop_sync", "detach", "attach",
             "undrop", "recover"],
            weights=[3, 1, 10, 6, 4, 4, 2, 3, 3, 3, 1],
        )[0]
        try:
            if op == "create_db":
                catalog.create_database(rng.choice(DATABASES), if_not_exists=True)
            elif op == "drop_db":
                catalog.drop_database(rng.choice(DATABASES), if_exists=True)
            elif op == "create":
                info = catalog.define_table(name(), [("id", "UInt64"), ("s", "String")], "id")
                journal.write(f"created {info.uuid}\n")
            elif op == "rename":
                catalog.rename_table(name(), name())
            elif op == "exchange":
                catalog.exchange_tables(name(), name())
            elif op == "drop":
                catalog.drop_table(name())
            elif op == "drop_sync":
                # DROP then purge (what sync=True does), so the journal names the right UUID
                # even when another worker renames tables meanwhile.
                dropped = catalog.drop_table(name())
                assert dropped is not None
                journal.write(f"purging {dropped.uuid}\n")
                catalog.purge_dropped(dropped.uuid)
            elif op == "detach":
                catalog.detach_table(name())
            elif op == "attach":
                catalog.attach_table(name())
            elif op == "undrop":
                catalog.undrop_table(name())
            elif op == "recover":
                catalog.recover()
        except MergeTreeError:
            pass  # names collide or are missing all the time; that is the point


def _say(line: str) -> None:
    # One write(2) per line: parent and children share the pipe, and print() may split a line.
    os.write(1, (line + "\n").encode())


def _warm_up() -> None:
    """One CREATE TABLE in a scratch root before forking: what its first run loads and compiles
    lazily (key checks) then costs the workers nothing, so they reach their DDL loop at once."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="ddl-worker-warm-") as scratch:
        catalog = Catalog(scratch)
        catalog.create_database("warm")
        catalog.define_table("warm.t", [("id", "UInt64"), ("s", "String")], "id")


def launcher() -> None:
    _warm_up()
    children: set[int] = set()
    try:
        for line in sys.stdin:
            command, *args = line.split()
            if command == "spawn":
                root, journal_path, seed = args
                pid = os.fork()
                if pid == 0:
                    try:
                        run(root, journal_path, int(seed))
                    except BaseException:
                        traceback.print_exc()  # a worker must only ever die by SIGKILL
                    finally:
                        os._exit(1)
                children.add(pid)
                _say(f"pid {pid}")
            elif command == "reap":
                pid = int(args[0])
                _, status = os.waitpid(pid, 0)
                children.discard(pid)
                _say(f"status {pid} {os.WTERMSIG(status) if os.WIFSIGNALED(status) else -1}")
    finally:
        # The test went away (or failed): no worker may outlive it.
        for pid in children:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)


if __name__ == "__main__":
    launcher()

"""Background merges in a worker process, so that they do not slow the writes of the process that
asked for them.

A merge is mostly Python code between numpy calls, and it holds the interpreter lock while it runs:
in the writing process it made every insert wait for the lock at each of its many file operations
(measured: single-row inserts' p99 doubled while merges ran in a thread, and stayed as without
merges when the same merges ran in another process). So `BackgroundMerges` hands each table to a
worker: a child process (merge_worker_main.py) that opens the same table
from its description (`MergeTreeTable.merge_worker_description`) and runs the automatic selector's merges until it finds nothing
(`background.merge_until_settled`), then answers with the parts it made.

Protocol: one JSON line per request on the worker's stdin (a table's description), one JSON line per answer
on its stdout (`{"created": [...]}` or `{"error": "..."}`). A worker serves one request at a time and
lives exactly as long as its parent wants it: at the end of its input (the parent stopped its
merges, exited or died) it exits at once, abandoning a merge in progress as a merge thread dies
with its process. A merge is a transaction: what an abandoned one wrote is never visible, and
recovery and cleanup remove it. Its stderr is the parent's (its warnings reach the same log).

Tables without a description are merged in a thread as before (the description is None):
object-store tables, whose merges mostly wait on the network without the lock, and whose clients
(credentials, retry settings, endpoints) a URL does not always reproduce.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

# Set in a worker: its own commits (merges) must not start merges of their own.
IN_WORKER_ENV = "SPARK_MERGETREE_MERGE_WORKER"


def in_worker() -> bool:
    return os.environ.get(IN_WORKER_ENV) == "1"


class Worker:
    """The parent's end of one worker process."""

    def __init__(self) -> None:
        package_root = str(Path(__file__).resolve().parents[2])  # the directory holding spark_mergetree/
        env = dict(os.environ)
        env[IN_WORKER_ENV] = "1"
        env["PYTHONPATH"] = os.pathsep.join([package_root, *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))])
        # A session of its own: a terminal's Ctrl-C reaches the parent, which then closes the
        # worker's input; the worker finishes its merge instead of dying in the middle of it.
        # (-c, not -m: the package imports the module, and runpy warns when -m runs such a module)
        self.process = subprocess.Popen([sys.executable, "-c", "from spark_mergetree.engine.merge_worker_main import main; main()"],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
                                        start_new_session=True)

    def merge(self, description: dict[str, Any]) -> list[str]:
        """Ask the worker to merge one table until settled; the parts it made. Raises RuntimeError
        if the worker failed or died (the table is unchanged by what did not commit)."""
        stdin, stdout = self.process.stdin, self.process.stdout
        assert stdin is not None and stdout is not None
        try:
            stdin.write(json.dumps(description) + "\n")
            stdin.flush()
        except (BrokenPipeError, ValueError, OSError) as error:
            raise RuntimeError(f"merge worker {self.process.pid} is gone: {error!r}") from None
        answer = stdout.readline()  # blocks without the interpreter lock
        if not answer:
            raise RuntimeError(f"merge worker {self.process.pid} exited (code {self.process.poll()})")
        reply = json.loads(answer)
        if reply.get("error"):
            raise RuntimeError(reply["error"])
        return list(reply["created"])

    def alive(self) -> bool:
        return self.process.poll() is None

    def close(self, *, idle: bool = False) -> None:
        """End the worker's input: it exits at once. Wait for an `idle` one (no request of it is
        being answered), so nothing is left behind; a busy one's answer is not waited for."""
        try:
            if self.process.stdin is not None:
                self.process.stdin.close()
        except OSError:
            pass
        if idle:
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                log.warning("merge worker %d did not exit at the end of its input", self.process.pid)
            if self.process.stdout is not None:
                self.process.stdout.close()

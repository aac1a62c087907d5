"""The merge worker process's side (merge_worker.py has the parent's): it opens the tables its
parent describes (`MergeTreeTable.merge_worker_description`) and runs their background merges,
one request at a time. A module of its own so that nothing the package imports depends on it."""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
from queue import Queue
from typing import IO, Any

from spark_mergetree.engine import background
from spark_mergetree.engine.metadata import TableMetadata
from spark_mergetree.engine.table import MergeTreeTable
from spark_mergetree.expressions.ddl import parse_create
from spark_mergetree.txn.connect import coordinator_from_url

# Table handles a worker keeps open between requests (their part caches make the next merge cheap).
KEPT_TABLES = 8


def open_described(description: dict[str, Any]) -> MergeTreeTable:
    """The table a description names, with the same definition and coordinator."""
    metadata = TableMetadata(parse_create(description["statement"]), description["engine_settings"])
    table = MergeTreeTable(description["path"], metadata, coordinator_from_url(description["coordinator"]))
    table._external_definition = bool(description["external"])
    return table


def _serve(requests: IO[str], answers: IO[str]) -> None:
    lines: Queue[str] = Queue()

    def read() -> None:
        for line in requests:
            lines.put(line)
        # The parent is gone or stopped its merges: nobody waits for what this process does now.
        os._exit(0)

    threading.Thread(target=read, name="mergetree-worker-input", daemon=True).start()
    tables: dict[str, MergeTreeTable] = {}
    while True:
        line = lines.get()
        try:
            description = json.loads(line)
            key = json.dumps(description, sort_keys=True)
            table = tables.pop(key, None) or open_described(description)
            tables[key] = table  # the most recently used last
            while len(tables) > KEPT_TABLES:
                del tables[next(iter(tables))]
            reply: dict[str, Any] = {"created": background.merge_until_settled(table)}
        except Exception as error:  # noqa: BLE001 - reported to the parent, which logs it
            reply = {"error": f"{type(error).__name__}: {error}"}
        try:
            answers.write(json.dumps(reply) + "\n")
            answers.flush()
        except OSError:  # the parent is gone
            os._exit(0)


def main() -> None:
    # The protocol owns the real stdout; anything else printed goes to stderr.
    answers = os.fdopen(os.dup(sys.stdout.fileno()), "w")
    sys.stdout = sys.stderr
    # This package's warnings (a failed merge) reach the parent's stderr; other libraries' logging
    # stays unconfigured, as in a parent that did not configure it.
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("mergetree merge worker: %(message)s"))
    logging.getLogger("spark_mergetree").addHandler(handler)
    _serve(sys.stdin, answers)

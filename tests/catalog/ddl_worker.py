"""Crash-test worker: random DDL on a catalog root in a tight loop until killed.

Usage: python ddl_worker.py ROOT JOURNAL SEED. Appends to JOURNAL `created <uuid>` after each
committed CREATE TABLE and `purging <uuid>` before purging a dropped table's data, so the test can tell which
tables must still exist somewhere (attached, detached or in metadata_dropped/) after a SIGKILL.
"""

from __future__ import annotations

import random
import sys

from spark_mergetree.catalog import Catalog
from spark_mergetree.errors import MergeTreeError

DATABASES = ["a", "b-b"]
TABLES = ["t0", "t1", "t.2"]


def main() -> None:
    root, journal_path, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
    rng = random.Random(seed)
    catalog = Catalog(root, drop_delay=3600)
    journal = open(journal_path, "a", buffering=1)
    import spark_mergetree.expressions.ddl  # noqa: F401  (load before announcing readiness)

    print("ready", flush=True)

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


if __name__ == "__main__":
    main()

"""Crash safety: a process doing DDL in a loop is SIGKILLed at random moments; reopening repairs all."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from spark_mergetree.catalog import Catalog
from tests.catalog.chdb_runner import rows, run_chdb

WORKER = Path(__file__).with_name("ddl_worker.py")
TRIALS = 60


def _assert_consistent(root: Path, journal: Path) -> Catalog:
    catalog = Catalog(root, drop_delay=3600)
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


def test_sigkill_during_ddl_leaves_consistent_catalog(tmp_path: Path) -> None:
    root = tmp_path / "root"
    journal = tmp_path / "journal"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    rng = random.Random(20261122)
    operations_seen = 0
    for trial in range(TRIALS):
        # Odd trials run two workers at once: their DDL races on the same names.
        workers = [
            subprocess.Popen([sys.executable, str(WORKER), str(root), str(journal), str(trial * 2 + k)], env=env,
                             stdout=subprocess.PIPE, text=True)
            for k in range(1 + trial % 2)
        ]
        # Every third trial dies while opening (recovery itself must be crash-safe); the
        # others once the loop runs.
        if trial % 3 == 0:
            time.sleep(rng.uniform(0.0, 0.15))
        else:
            for worker in workers:
                assert worker.stdout is not None and worker.stdout.readline().strip() == "ready"
            time.sleep(rng.uniform(0.0, 0.25))
        for worker in workers:
            os.kill(worker.pid, signal.SIGKILL)
            worker.wait()
            assert worker.returncode == -signal.SIGKILL, "a worker stopped by itself"
        catalog = _assert_consistent(root, journal)
        operations_seen += len(journal.read_text().splitlines()) if journal.exists() else 0
        # Keep the root small: finish the drops so far (the journal learns they are gone).
        purged = Catalog(root, drop_delay=0, recover=False).collect_dropped()
        with open(journal, "a") as log:
            log.writelines(f"purging {table_uuid}\n" for table_uuid in purged)
    assert operations_seen > 50, "the worker never got to do DDL"

    # After all that, a ClickHouse server on the same root agrees with us.
    ours = sorted([database, table, catalog.table_uuid((database, table))]
                  for database in catalog.databases() for table in catalog.tables(database))
    theirs = rows(run_chdb(root, "SELECT database, name, uuid FROM system.tables "
                                 "WHERE database IN ('a', 'b-b') ORDER BY 1, 2")[0])
    assert theirs == ours

"""Delayed DROP: the delay is honoured, a leased (being read) table's data outlives DROP, nothing waits."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from spark_mergetree.catalog import Catalog
from spark_mergetree.errors import TableNotFoundError
from tests.catalog.chdb_runner import run_chdb

COLUMNS = [("id", "UInt64")]

_HOLDER = r"""
import sys
from spark_mergetree.catalog import Catalog
lease = Catalog(sys.argv[1]).pin(sys.argv[2])
print("pinned", flush=True)
sys.stdin.read()  # hold until the test closes our stdin
lease.release()
"""


def _parts(data_path: Path) -> list[str]:
    return sorted(p.name for p in data_path.iterdir() if p.is_dir() and p.name != "detached")


class ReaderProcess:
    """Another process holding a reader lease, as a running query would."""

    def __init__(self, root: Path, name_or_uuid: str) -> None:
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
        self.process = subprocess.Popen([sys.executable, "-c", _HOLDER, str(root), name_or_uuid],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        assert self.process.stdout is not None and self.process.stdout.readline().strip() == "pinned"

    def finish(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        assert self.process.wait(10) == 0


def test_delay_is_honoured(tmp_path: Path) -> None:
    catalog = Catalog(tmp_path, drop_delay=0.6)
    catalog.create_database("db")
    info = catalog.define_table("db.t", COLUMNS, "id")
    dropped = catalog.drop_table("db.t")
    assert dropped is not None and dropped.due_time - dropped.drop_time == pytest.approx(0.6)
    assert catalog.collect_dropped() == []
    assert info.data_path.is_dir() and dropped.metadata_path.exists()
    time.sleep(0.7)
    assert catalog.collect_dropped() == [info.uuid]
    assert not info.data_path.exists() and not dropped.metadata_path.exists()
    assert catalog.dropped_tables() == [] and catalog.unreferenced_store_dirs() == []


def test_drop_time_survives_reopen(tmp_path: Path) -> None:
    catalog = Catalog(tmp_path, drop_delay=3600)
    catalog.create_database("db")
    info = catalog.define_table("db.t", COLUMNS, "id")
    dropped = catalog.drop_table("db.t")
    assert dropped is not None
    # A reopen with the same delay keeps the data; its drop time is the file's mtime.
    again = Catalog(tmp_path, drop_delay=3600)
    assert [d.drop_time for d in again.dropped_tables()] == [pytest.approx(dropped.drop_time, abs=0.01)]
    assert info.data_path.is_dir()
    # An hour later (mtime moved back), recovery finishes the drop.
    past = time.time() - 3601
    os.utime(dropped.metadata_path, (past, past))
    reopened = Catalog(tmp_path, drop_delay=3600)
    assert reopened.recover().collected == [info.uuid]
    assert not info.data_path.exists()


def test_leased_table_survives_drop_until_released(tmp_path: Path) -> None:
    catalog = Catalog(tmp_path, drop_delay=0.0)
    catalog.create_database("db")
    info = catalog.define_table("db.t", [("id", "UInt64"), ("s", "String")], "id")
    run_chdb(tmp_path, "INSERT INTO db.t VALUES (1, 'a'), (2, 'b')")
    parts_before = _parts(info.data_path)
    assert parts_before == ["all_1_1_0"]
    reader = ReaderProcess(tmp_path, "db.t")
    assert catalog.in_use(info.uuid)

    # DROP SYNC does not wait for the reader: it returns while the lease is still held, the name is
    # gone, the data stays.
    dropped = catalog.drop_table("db.t", sync=True)
    assert catalog.in_use(info.uuid)
    assert dropped is not None and not dropped.data_removed
    assert catalog.tables("db") == []
    assert catalog.collect_dropped() == []
    assert _parts(info.data_path) == parts_before
    assert (info.data_path / "all_1_1_0" / "count.txt").read_text() == "2"
    # A new table may take the name while the old one is being read.
    catalog.define_table("db.t", COLUMNS, "id")

    reader.finish()
    assert not catalog.in_use(info.uuid)
    assert catalog.collect_dropped() == [info.uuid]
    assert not info.data_path.exists()


def test_sync_drop_of_unused_table_deletes_now(tmp_path: Path) -> None:
    catalog = Catalog(tmp_path, drop_delay=3600)
    catalog.create_database("db")
    info = catalog.define_table("db.t", COLUMNS, "id")
    dropped = catalog.drop_table("db.t", sync=True)
    assert dropped is not None and dropped.data_removed
    assert not info.data_path.exists() and catalog.dropped_tables() == []


def test_lease_follows_uuid_through_rename_exchange_and_drop(tmp_path: Path) -> None:
    catalog = Catalog(tmp_path, drop_delay=0.0)
    catalog.create_database("db")
    a = catalog.define_table("db.a", COLUMNS, "id")
    catalog.define_table("db.b", COLUMNS, "id")
    with catalog.pin("db.a") as lease:
        assert lease.data_path == a.data_path
        catalog.rename_table("db.a", "db.c")
        catalog.exchange_tables("db.c", "db.b")
        assert catalog.table_uuid("db.b") == a.uuid
        catalog.drop_table("db.b")
        # The same process collecting is refused by its own lease, as another process would be.
        assert catalog.collect_dropped() == []
        assert (lease.data_path / "format_version.txt").read_text() == "1"
    assert catalog.collect_dropped() == [a.uuid]
    with pytest.raises(TableNotFoundError):
        catalog.pin(a.uuid)


def test_undrop_within_delay_keeps_data(tmp_path: Path) -> None:
    catalog = Catalog(tmp_path, drop_delay=3600)
    catalog.create_database("db")
    catalog.define_table("db.t", [("id", "UInt64")], "id")
    run_chdb(tmp_path, "INSERT INTO db.t VALUES (1), (2), (3)")
    catalog.drop_table("db.t")
    catalog.undrop_table("db.t")
    assert run_chdb(tmp_path, "SELECT sum(id) FROM db.t")[0] == "6\n"


def test_background_collector(tmp_path: Path) -> None:
    catalog = Catalog(tmp_path, drop_delay=0.2)
    catalog.create_database("db")
    info = catalog.define_table("db.t", COLUMNS, "id")
    collector = catalog.start_collector(interval=0.05)
    try:
        catalog.drop_table("db.t")
        deadline = time.monotonic() + 5
        while info.data_path.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        collector.stop()
    assert not info.data_path.exists() and collector.collected == [info.uuid]
    assert collector.last_error is None and not collector.is_alive()

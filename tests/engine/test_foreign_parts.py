"""Parts a ClickHouse server writes into a table whose log we keep (a catalog root it runs on): its
INSERTs' `all_N_N_0` parts and its merges are never deleted by our cleanup. They are adopted into
the log, as ClickHouse loads them (a merge's result replaces the parts it covers), so our reads
return the rows ClickHouse's users inserted; what cannot be adopted is kept and reported."""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow as pa
import pytest

from spark_mergetree import Catalog, MergeTreeTable
from spark_mergetree.errors import SerializationError
from spark_mergetree.txn import TableLog
from tests.format.chdb_util import close_session, session_at


def _batch(*ids: int) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.uint64()), "s": [f"s{i}" for i in ids]})


def _ids(table: MergeTreeTable) -> list[int]:
    return sorted(table.to_arrow(["id"]).column("id").to_pylist())


def _dirs(table: MergeTreeTable) -> set[str]:
    return {p.name for p in table.path.iterdir() if p.name.startswith("all_")}


@pytest.fixture
def catalog_table(tmp_path: Path) -> tuple[Path, Catalog]:
    """A catalog root with db.t (no background merges, no retention of removed parts) holding ids 1
    and 2 in one part of ours."""
    catalog = Catalog(tmp_path)
    catalog.create_database("db")
    catalog.create_table("db.t", [("id", "UInt64"), ("s", "String")], "id",
                         settings={"auto_merge": False, "old_parts_lifetime": 0})
    catalog.table("db.t").insert(_batch(1, 2))
    return tmp_path, catalog


def _clickhouse(root: Path, *statements: str) -> list[str]:
    """Run statements on a ClickHouse (chdb) server started on the catalog root; the session is
    closed after, as a server that stops."""
    session = session_at(root)
    try:
        return [session.query(statement, "TabSeparated").bytes().decode() for statement in statements]
    finally:
        close_session()


def test_cleanup_keeps_and_adopts_a_part_clickhouse_inserted(catalog_table) -> None:
    root, catalog = catalog_table
    _clickhouse(root, "SYSTEM STOP MERGES db.t", "INSERT INTO db.t VALUES (3, 's3')")
    table = catalog.table("db.t")
    assert _dirs(table) == {"all_1_1_0", "all_2_2_0"}
    # The log alone keeps it and reports it (it deleted it as garbage before).
    report = table.log.recover(table.coordinator)
    assert report.deleted_directories == [] and _dirs(table) == {"all_1_1_0", "all_2_2_0"}
    assert report.foreign_parts == ["all_2_2_0"] == TableLog(table.path).foreign_parts()
    assert table.cleanup() == []
    assert _dirs(table) == {"all_1_1_0", "all_2_2_0"}
    assert _ids(table) == [1, 2, 3]  # adopted: the row ClickHouse's user inserted reads back
    assert TableLog(table.path).foreign_parts() == []
    # Our next write is numbered above it, and ClickHouse sees every row.
    table.insert(_batch(4))
    assert _ids(table) == [1, 2, 3, 4]
    (count,) = _clickhouse(root, "SELECT groupArray(id) FROM (SELECT id FROM db.t ORDER BY id)")
    assert count.strip() == "[1,2,3,4]"


def test_a_clickhouse_merge_replaces_the_parts_it_covers(catalog_table) -> None:
    root, catalog = catalog_table
    _clickhouse(root, "SYSTEM STOP MERGES db.t", "INSERT INTO db.t VALUES (3, 's3')",
                "SYSTEM START MERGES db.t", "OPTIMIZE TABLE db.t FINAL")
    table = catalog.table("db.t")
    assert "all_1_2_1" in _dirs(table)
    table.cleanup()
    # The merge result is adopted and replaces our all_1_1_0 (deleted by cleanup, no retention);
    # ClickHouse's own outdated all_2_2_0 is left for ClickHouse to remove.
    assert table.log.snapshot(table.coordinator.current_timestamp(), table.coordinator) == {"all_1_2_1"}
    assert "all_1_1_0" not in _dirs(table) and "all_1_2_1" in _dirs(table)
    assert _ids(table) == [1, 2, 3]
    assert table.log.recover(table.coordinator).foreign_parts == (["all_2_2_0"] if "all_2_2_0" in _dirs(table) else [])


def test_a_part_that_cannot_be_adopted_is_kept(catalog_table) -> None:
    """A foreign part covering a part our log already removed (histories that diverged) is neither
    adopted nor deleted; a merge of ours never replaces a foreign part of its result's name."""
    root, catalog = catalog_table
    table = catalog.table("db.t")
    table.insert(_batch(3))
    table.optimize(final=True)  # all_1_2_1 replaces all_1_1_0 and all_2_2_0 in our log
    # A stray merge over blocks 1..3 that our log knows nothing of, covering parts it removed.
    shutil.copytree(table.path / "all_1_2_1", table.path / "all_1_3_1")
    with table.log.commit_lock(), pytest.raises(SerializationError, match="does not name it"):
        table.log.claim_name("all_1_3_1", table.coordinator, table.coordinator.begin().tid)
    assert "all_1_3_1" in _dirs(table)
    assert table.adopt_directory_parts() == []
    assert table.cleanup() == ["all_1_1_0", "all_2_2_0"]
    assert _dirs(table) == {"all_1_2_1", "all_1_3_1"}
    assert _ids(table) == [1, 2, 3]

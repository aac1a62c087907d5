"""A table ClickHouse wrote, opened from its data directory: its parts are taken into our log before
our first write, merge or mutation, and never belong to a transaction that may roll back (rolling
back would delete them). Every snapshot sees them, so a transaction begun before the adoption does."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from spark_mergetree import MergeTreeTable, Transaction
from tests.catalog.chdb_runner import rows, run_chdb

STATEMENT = "CREATE TABLE db.t (id UInt64, s String) ENGINE = MergeTree ORDER BY id SETTINGS index_granularity = 2"


@pytest.fixture
def clickhouse_table(tmp_path: Path) -> tuple[Path, str]:
    """(server root, data directory) of db.t, which ClickHouse wrote in two inserts (two parts)."""
    root = tmp_path / "root"
    out = run_chdb(root, "CREATE DATABASE db ENGINE = Atomic", STATEMENT, "SYSTEM STOP MERGES db.t",
                   "INSERT INTO db.t VALUES (1, 'a'), (2, 'b')", "INSERT INTO db.t VALUES (3, 'c')",
                   "SELECT arrayJoin(data_paths) FROM system.tables WHERE name = 't'")
    return root, Path(rows(out[-1])[0][0])


def _open(directory: Path) -> MergeTreeTable:
    return MergeTreeTable.open(directory, create_statement=STATEMENT)


def _ids(table: MergeTreeTable, transaction: Transaction | None = None) -> list[int]:
    return sorted(table.to_arrow(["id"], transaction=transaction).column("id").to_pylist())


def _batch(*ids: int) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.uint64()), "s": [str(i) for i in ids]})


def test_a_rolled_back_first_write_leaves_clickhouse_parts_in_place(clickhouse_table) -> None:
    _root, directory = clickhouse_table
    parts = sorted(p.name for p in directory.iterdir() if p.name.startswith("all_"))
    table = _open(directory)
    with pytest.raises(RuntimeError, match="user code"):
        with Transaction(table.coordinator) as tx:
            assert _ids(table, tx) == [1, 2, 3]
            table.insert(_batch(4), transaction=tx)
            raise RuntimeError("user code fails")
    assert all((directory / name).is_dir() for name in parts)
    table = _open(directory)
    assert _ids(table) == [1, 2, 3]
    table.cleanup()
    assert all((directory / name).is_dir() for name in parts)
    assert _ids(_open(directory)) == [1, 2, 3]


def test_a_transaction_begun_before_the_adoption_sees_and_replaces_clickhouse_rows(clickhouse_table) -> None:
    _root, directory = clickhouse_table
    table = _open(directory)
    with Transaction(table.coordinator) as tx:
        _open(directory).insert(_batch(10))  # another writer adopts the parts and commits after tx began
        assert _ids(table, tx) == [1, 2, 3]
        table.overwrite(_batch(7, 8), transaction=tx)
    assert _ids(_open(directory)) == [7, 8, 10]


def test_optimize_merges_the_parts_clickhouse_wrote(clickhouse_table) -> None:
    root, directory = clickhouse_table
    table = _open(directory)
    (merged,) = table.optimize(final=True)
    assert [p.name for p in table.parts()] == [merged]
    assert _ids(table) == [1, 2, 3]
    check, data, active = run_chdb(root, "CHECK TABLE db.t", "SELECT id, s FROM db.t ORDER BY id",
                                   "SELECT name FROM system.parts WHERE table = 't' AND active")
    assert [row[1] for row in rows(check)] == ["1"]
    assert rows(data) == [["1", "a"], ["2", "b"], ["3", "c"]]
    assert rows(active) == [[merged]]

"""A MergeTreeTable handle whose table was dropped, or dropped and re-created at the same path, writes
nothing: the table's UUID in `_mergetree/table.sql` is checked when rows are staged and committed."""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow as pa
import pytest

from spark_mergetree import MergeTreeTable
from spark_mergetree.errors import TableNotFoundError


def _rows(*ids: int) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.uint64()), "v": pa.array(ids, pa.int64())})


def _recreate(path: Path) -> MergeTreeTable:
    shutil.rmtree(path)
    return MergeTreeTable.create(path, [("id", "UInt64"), ("v", "Float64")], "id")


def _files(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*"))


def test_a_stale_handle_refuses_to_insert_into_a_re_created_table(tmp_path: Path) -> None:
    path = tmp_path / "t"
    stale = MergeTreeTable.create(path, [("id", "UInt64"), ("v", "Int64")], "id")
    stale.insert(_rows(1, 2))
    fresh = _recreate(path)
    before = _files(path)
    message = f"the table at {path} was re-created \\(UUID {stale.uuid} → {fresh.uuid}\\).*reopen it"
    with pytest.raises(TableNotFoundError, match=message):
        stale.insert(_rows(3))
    with pytest.raises(TableNotFoundError, match=message):
        stale.overwrite(_rows(3))
    with pytest.raises(TableNotFoundError, match=message):
        stale.optimize(final=True)
    assert _files(path) == before and fresh.count() == 0
    # A reopened handle writes with the new schema.
    MergeTreeTable.open(path).insert(_rows(4))
    assert fresh.to_arrow().column("v").to_pylist() == [4.0]


def test_parts_staged_before_the_table_was_re_created_are_not_committed(tmp_path: Path) -> None:
    path = tmp_path / "t"
    stale = MergeTreeTable.create(path, [("id", "UInt64"), ("v", "Int64")], "id")
    staged = stale.stage(_rows(1))
    fresh = _recreate(path)
    with pytest.raises(TableNotFoundError, match="re-created"):
        stale.commit_staged(staged)
    assert fresh.count() == 0


def test_a_handle_of_a_dropped_table_writes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "t"
    stale = MergeTreeTable.create(path, [("id", "UInt64"), ("v", "Int64")], "id")
    shutil.rmtree(path)
    with pytest.raises(TableNotFoundError, match=f"the table at {path} was dropped"):
        stale.insert(_rows(1))
    assert not path.exists()


def test_columns_added_through_another_handle_do_not_make_a_handle_stale(tmp_path: Path) -> None:
    path = tmp_path / "t"
    first = MergeTreeTable.create(path, [("id", "UInt64"), ("v", "Int64")], "id")
    MergeTreeTable.open(path).add_columns([("w", "String")])
    first.insert(_rows(1))
    assert MergeTreeTable.open(path).to_arrow().to_pylist() == [{"id": 1, "v": 1, "w": ""}]

"""`MergeTreeTable.insert(progress=...)` draws rows written of the total on stderr for large inserts
(several parts, or more than PROGRESS_MIN_ROWS rows), through the same bar as `optimize`; quiet by
default, and quiet for a small one-part insert even when asked."""

from __future__ import annotations

import pyarrow as pa
import pytest

from spark_mergetree import MergeTreeTable
from spark_mergetree.engine import insert as inserting


def _rows(start: int, count: int, months: int) -> pa.Table:
    return pa.table({"id": pa.array(range(start, start + count), pa.uint64()),
                     "m": pa.array([i % months for i in range(count)], pa.uint8())})


def test_insert_of_several_parts_shows_rows_written_of_the_total_when_asked(tmp_path, capsys) -> None:
    table = MergeTreeTable.create(tmp_path / "t", [("id", "UInt64"), ("m", "UInt8")], order_by="id",
                                  partition_by="m", settings={"auto_merge": False})
    assert len(table.insert(_rows(0, 3000, 3), progress=True)) == 3
    err = capsys.readouterr().err
    assert "insert" in err and "3.00k/3.00k" in err and "row" in err
    table.insert(_rows(3000, 3000, 3))  # quiet by default, as optimize is
    table.overwrite(_rows(0, 10, 2))
    assert capsys.readouterr().err == ""
    assert table.count() == 10


def test_insert_of_one_small_part_stays_quiet_even_when_asked(tmp_path, capsys) -> None:
    table = MergeTreeTable.create(tmp_path / "t", [("id", "UInt64"), ("m", "UInt8")], order_by="id")
    table.insert(_rows(0, 1000, 1), progress=True)
    assert capsys.readouterr().err == ""


def test_insert_of_many_rows_in_one_part_shows_progress(tmp_path, capsys, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(inserting, "PROGRESS_MIN_ROWS", 500)
    table = MergeTreeTable.create(tmp_path / "t", [("id", "UInt64"), ("m", "UInt8")], order_by="id")
    table.insert(_rows(0, 1000, 1), progress=True)
    assert "1.00k/1.00k" in capsys.readouterr().err


def test_insert_progress_none_is_quiet_when_stderr_is_not_a_terminal(tmp_path, capsys) -> None:
    table = MergeTreeTable.create(tmp_path / "t", [("id", "UInt64"), ("m", "UInt8")], order_by="id",
                                  partition_by="m")
    table.insert(_rows(0, 100, 4), progress=None)  # pytest's captured stderr is no terminal
    assert capsys.readouterr().err == ""
    assert table.count() == 100


def test_insert_into_object_storage_shows_progress(s3_bucket: str, capsys) -> None:
    table = MergeTreeTable.create(f"s3://{s3_bucket}/progress", [("id", "UInt64"), ("m", "UInt8")], order_by="id",
                                  partition_by="m", settings={"auto_merge": False})
    assert len(table.insert(_rows(0, 2000, 2), progress=True)) == 2
    assert "2.00k/2.00k" in capsys.readouterr().err
    assert table.count() == 2000

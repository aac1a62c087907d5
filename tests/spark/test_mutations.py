"""spark_mergetree.delete / update: one task per part, one commit, exactly once under task retries;
rows as an independent computation over the inserted data says."""

from __future__ import annotations

import functools
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from pyspark import TaskContext

import spark_mergetree
from spark_mergetree import MergeTreeTable
from spark_mergetree.errors import UnsupportedError
from spark_mergetree.format.part_info import PartInfo

pytestmark = pytest.mark.spark


def _data(start: int, count: int) -> pa.Table:
    ids = pa.array(range(start, start + count), pa.uint64())
    return pa.table({"id": ids, "m": pc.cast(pc.bit_wise_and(ids, 1), pa.uint8()),
                     "v": pa.array([f"v{i}" for i in range(start, start + count)])})


def _table(path: Path) -> MergeTreeTable:
    table = MergeTreeTable.create(path, [("id", "UInt64"), ("m", "UInt8"), ("v", "String")], order_by="id",
                                  partition_by="m", settings={"auto_merge": False, "index_granularity": 16,
                                                              "old_parts_lifetime": 0})
    for start in (0, 100, 200):
        table.insert(_data(start, 100))
    return table


def _fail_first_attempt_of_part_zero(marker: str, index: int) -> None:
    context = TaskContext.get()
    if index == 0 and context is not None and context.attemptNumber() == 0:
        Path(marker).write_text("failed once")
        raise RuntimeError("injected failure after staging the part's new version")


def _directories(table: MergeTreeTable) -> set[str]:
    return {p.name for p in table.path.iterdir() if p.is_dir() and p.name not in ("_mergetree", "detached")}


def test_delete_survives_a_task_retry_and_commits_once(spark, tmp_path: Path) -> None:
    table = _table(tmp_path / "t")
    before = {p.name for p in table.parts()}
    marker = tmp_path / "failed-once"
    created = spark_mergetree.delete(spark, str(table.path), "id % 7 = 0 OR v = 'v5'",
                                     task_hook=functools.partial(_fail_first_attempt_of_part_zero, str(marker)))
    assert marker.exists()
    inserted = _data(0, 300)
    ids = inserted["id"]
    gone = pc.or_(pc.equal(pc.subtract(ids, pc.multiply(pc.divide(ids, 7), 7)), 0), pc.equal(inserted["v"], "v5"))
    expected = inserted.filter(pc.invert(gone))
    assert table.to_arrow().sort_by("id").equals(expected.cast(table.schema))
    assert {PartInfo(**{**PartInfo.parse(n).__dict__, "mutation": 0}).name for n in created} == before
    assert len({PartInfo.parse(n).mutation for n in created}) == 1
    assert len(list(table.path.glob("mutation_*.txt"))) == 1
    table.cleanup()
    # The failed attempt's staged part and the old versions are gone; nothing else is left.
    assert _directories(table) == set(created)
    assert table.check().ok


def test_update_on_the_executors(spark, tmp_path: Path) -> None:
    table = _table(tmp_path / "t")
    created = spark_mergetree.update(spark, str(table.path), {"v": "'x'"}, "id < 150 AND m = 1")
    assert len(created) == 6
    rows = table.to_arrow().sort_by("id").to_pylist()
    assert rows == [{**row, "v": "x" if row["id"] < 150 and row["m"] == 1 else row["v"]}
                    for row in _data(0, 300).to_pylist()]
    with pytest.raises(UnsupportedError, match="'m' is a key column"):
        spark_mergetree.update(spark, str(table.path), {"m": 0}, "id < 5")
    with pytest.raises(UnsupportedError, match="CONCAT"):  # refused on the driver, before any task
        spark_mergetree.update(spark, str(table.path), {"v": "concat(v, '-x')"}, "id < 5")
    assert len(list(table.path.glob("mutation_*.txt"))) == 1


def test_no_matching_row_changes_nothing(spark, tmp_path: Path) -> None:
    table = _table(tmp_path / "t")
    before = _directories(table)
    assert spark_mergetree.delete(spark, str(table.path), "id > 5000") == []
    assert _directories(table) == before and not list(table.path.glob("mutation_*.txt"))

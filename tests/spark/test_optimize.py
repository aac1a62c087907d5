"""spark_mergetree.optimize: merges spread over executors, committed once, exactly once under task
retries; the result is what chdb reads from the same parts."""

from __future__ import annotations

import functools
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark import TaskContext

import spark_mergetree
from spark_mergetree import MergeTreeTable, Transaction
from spark_mergetree.format.part_info import PartInfo

pytestmark = pytest.mark.spark

COLUMNS = [("d", "Date"), ("id", "UInt64"), ("v", "String")]


def _table(path: Path, parts: int) -> MergeTreeTable:
    table = MergeTreeTable.create(path, COLUMNS, order_by="id", partition_by="toYYYYMM(d)",
                                  settings={"auto_merge": False, "index_granularity": 16, "old_parts_lifetime": 0})
    for n in range(parts):
        ids = list(range(n * 50, n * 50 + 50))
        months = [f"2024-0{1 + (i % 3)}-15" for i in ids]
        table.insert(pa.table({"d": pa.array(months).cast(pa.date32()), "id": pa.array(ids, pa.uint64()),
                               "v": [f"v{i}" for i in ids]}))
    return table


def _fail_first_attempt_of_group_zero(marker: str, group: int) -> None:
    context = TaskContext.get()
    if group == 0 and context is not None and context.attemptNumber() == 0:
        Path(marker).write_text("failed once")
        raise RuntimeError("injected failure after staging the merged part")


def _directories(table: MergeTreeTable) -> set[str]:
    return {p.name for p in table.path.iterdir() if p.is_dir() and p.name not in ("_mergetree", "detached")}


def test_optimize_final_survives_a_task_retry_and_commits_once(spark, tmp_path: Path) -> None:
    table = _table(tmp_path / "t", 6)
    before = table.to_arrow().sort_by("id")
    old = Transaction(table.coordinator)  # a reader whose snapshot predates the merges
    marker = tmp_path / "failed-once"
    created = spark_mergetree.optimize(spark, str(table.path), final=True,
                                       task_hook=functools.partial(_fail_first_attempt_of_group_zero, str(marker)))
    assert marker.exists()  # the first attempt did fail, after staging its part
    assert sorted(PartInfo.parse(n).partition_id for n in created) == ["202401", "202402", "202403"]
    assert sorted(p.name for p in table.parts()) == sorted(created)
    assert table.to_arrow().sort_by("id").equals(before)
    assert table.to_arrow(transaction=old).sort_by("id").equals(before)  # MVCC: the old snapshot is unchanged
    old.commit()
    table.cleanup()
    # The failed attempt's staged part and the merged-away sources are gone; nothing else is left.
    assert _directories(table) == set(created)
    assert not list((table.path / "_mergetree" / "jobs").glob("*.json"))


def test_optimize_where_and_non_final_merge_only_matching_partitions(spark, tmp_path: Path) -> None:
    table = _table(tmp_path / "t", 5)
    before = table.to_arrow().sort_by("id")
    created = spark_mergetree.optimize(spark, str(table.path), where="d >= '2024-03-01'")
    assert {PartInfo.parse(n).partition_id for n in created} == {"202403"}
    counts = {}
    for part in table.parts():
        counts[part.partition_id] = counts.get(part.partition_id, 0) + 1
    assert counts == {"202401": 5, "202402": 5, "202403": 1}
    assert table.to_arrow().sort_by("id").equals(before)
    assert spark_mergetree.optimize(spark, str(table.path), where="d >= '2024-03-01'") == []


def test_optimize_that_loses_to_an_overwrite_leaves_nothing(spark, tmp_path: Path) -> None:
    table = _table(tmp_path / "t", 3)
    rival = Transaction(table.coordinator)
    rival.remove_parts(table.log, [p.name for p in table.parts() if p.partition_id == "202401"])
    with pytest.raises(spark_mergetree.SerializationError):  # (final=True waits for it: test_optimize_final_spark.py)
        spark_mergetree.optimize(spark, str(table.path))
    rival.rollback()
    assert len(table.parts()) == 9
    table.cleanup()
    assert _directories(table) == {p.name for p in table.parts()}

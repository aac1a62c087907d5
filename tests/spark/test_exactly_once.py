"""Exactly-once writes: a task that fails after staging parts is retried, and its first attempt's
parts never become visible or stay behind as garbage."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark import TaskContext
from pyspark.sql.functions import udf

from spark_mergetree.spark.adapter import TableRef, part_sets

pytestmark = pytest.mark.spark


def _garbage(path: Path) -> list[str]:
    """Directories no log entry names: staged leftovers or parts of attempts that never committed.

    (Parts merged away stay named by the log until cleanup, so they are not garbage.)"""
    known = part_sets(TableRef(str(path))).known
    return sorted(p.name for p in path.iterdir()
                  if p.is_dir() and p.name not in known and p.name not in ("detached", "_mergetree"))


def _fail_first_attempt_midway(value: int) -> int:
    context = TaskContext.get()
    if context.partitionId() == 0 and context.attemptNumber() == 0 and value == 150:
        raise RuntimeError("injected failure on the first attempt")
    return value


def test_retried_task_writes_each_row_once(spark, tmp_path: Path) -> None:
    path = tmp_path / "retry"
    flaky = udf(_fail_first_attempt_midway, "long")
    df = spark.range(0, 400, numPartitions=2).select(flaky("id").alias("id"), (flaky("id") * 2).alias("twice"))
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "20")
    try:
        # stage_rows=20 stages parts while the task still runs, so the failed attempt leaves some.
        # No background merges: one still running stages its part, which the check below would see.
        (df.write.format("mergetree").option("order_by", "id").option("stage_rows", "20")
         .option("setting.auto_merge", "false").mode("append").save(str(path)))
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    ids = [r["id"] for r in spark.read.format("mergetree").load(str(path)).collect()]
    assert sorted(ids) == list(range(400))
    assert _garbage(path) == []


def test_failed_job_leaves_nothing(spark, tmp_path: Path) -> None:
    path = tmp_path / "aborted"
    # No background merges (see above): two parts of the first write could be merging at the check.
    (spark.range(10).write.format("mergetree").option("order_by", "id").option("setting.auto_merge", "false")
     .mode("append").save(str(path)))

    def always_fail(value: int) -> int:
        if value == 77:
            raise RuntimeError("injected failure on every attempt")
        return value

    bad = spark.range(0, 100, numPartitions=2).select(udf(always_fail, "long")("id").alias("id"))
    with pytest.raises(Exception, match="injected"):
        bad.write.format("mergetree").option("stage_rows", "10").mode("overwrite").save(str(path))
    assert sorted(r["id"] for r in spark.read.format("mergetree").load(str(path)).collect()) == list(range(10))
    assert _garbage(path) == []


def test_commit_keeps_one_message_per_task_partition(tmp_path: Path) -> None:
    """A speculative duplicate that also reports success never doubles rows; its parts are removed."""
    import pyarrow as pa

    from spark_mergetree.engine.table import MergeTreeTable
    from spark_mergetree.spark import adapter
    from spark_mergetree.spark.source import MergeTreeCommitMessage, MergeTreeWriter

    path = tmp_path / "dup"
    table = MergeTreeTable.create(path, [("id", "Int64")], order_by="id", settings={"auto_merge": False})
    ref = TableRef(str(path))
    writer = MergeTreeWriter(ref, table.schema, "append", "jobtag", stage_rows=1000)
    rows = pa.table({"id": pa.array(range(10), pa.int64())})
    first = MergeTreeCommitMessage(0, 0, adapter.stage(ref, rows, writer.tag), None)
    duplicate = MergeTreeCommitMessage(0, 1, adapter.stage(ref, rows, writer.tag), None)
    other = MergeTreeCommitMessage(1, 0, adapter.stage(ref, pa.table({"id": pa.array([99], pa.int64())}),
                                                       writer.tag), None)
    writer.commit([first, None, duplicate, other])
    assert sorted(MergeTreeTable.open(path).to_arrow()["id"].to_pylist()) == list(range(10)) + [99]
    assert _garbage(path) == []

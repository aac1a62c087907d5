"""Input partitions of a read: small parts share partitions (as Spark packs small files), a big part
is cut so it feeds every core, and partitions come in whole waves over the cores."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from spark_mergetree.engine.select import ReadTask
from spark_mergetree.engine.table import MergeTreeTable
from spark_mergetree.spark.adapter import PartSets
from spark_mergetree.spark.source import _pack


def _tasks(count: int, rows: int, prefix: str = "p") -> list[ReadTask]:
    return [ReadTask(f"{prefix}{i}", ((0, 1),), rows) for i in range(count)]


def _parts(tasks: list[ReadTask], hidden: list[ReadTask] = ()) -> PartSets:
    names = frozenset(task.part for task in tasks)
    return PartSets(None, names, names | frozenset(task.part for task in hidden))


def test_small_parts_are_packed_into_one_wave_in_order() -> None:
    tasks = _tasks(168, 12_000)
    shares = _pack(tasks, _parts(tasks), target_rows=16 << 20, open_rows=32_768, cores=2)
    assert len(shares) == 2
    assert [task for share in shares for task in share] == tasks
    assert abs(len(shares[0]) - len(shares[1])) <= 1


def test_partitions_come_in_whole_waves() -> None:
    tasks = _tasks(100, 100_000)
    # 100 tasks cost 10.1M rows; 3M per partition needs 4 partitions, 6 on 3 cores.
    shares = _pack(tasks, _parts(tasks), target_rows=3_000_000, open_rows=1_000, cores=3)
    assert len(shares) == 6
    assert [task for share in shares for task in share] == tasks


def test_big_tasks_keep_a_partition_each() -> None:
    tasks = _tasks(4, 5_000_000)
    shares = _pack(tasks, _parts(tasks), target_rows=16 << 20, open_rows=32_768, cores=4)
    assert shares == [[task] for task in tasks]


def test_explicit_target_rows_is_a_cap_not_rounded_to_waves() -> None:
    tasks = _tasks(10, 2048)
    shares = _pack(tasks, _parts(tasks), target_rows=2048, open_rows=10, cores=None)
    assert shares == [[task] for task in tasks]
    shares = _pack(tasks, _parts(tasks), target_rows=3 * 2058, open_rows=10, cores=None)
    assert len(shares) == 4 and [task for share in shares for task in share] == tasks


def test_parts_only_a_transaction_sees_ride_along() -> None:
    visible, hidden = _tasks(6, 1_000), _tasks(5, 1_000, prefix="t")
    shares = _pack(visible + hidden, _parts(visible, hidden), target_rows=1 << 20, open_rows=10, cores=2)
    assert len(shares) == 2
    assert sorted(task.part for share in shares for task in share) == sorted(t.part for t in visible + hidden)
    assert _pack(hidden, _parts([], hidden), target_rows=1 << 20, open_rows=10, cores=2) == [hidden]


@pytest.mark.spark
def test_a_table_of_many_small_parts_reads_in_few_partitions(spark, tmp_path: Path) -> None:
    path = str(tmp_path / "many")
    data = spark.range(0, 40_000, numPartitions=2).selectExpr("id", "id * 0.5 as value")
    (data.repartition(2).write.format("mergetree").option("order_by", "id")
     .option("partition_by", "intDiv(id, 2000)").mode("append").save(path))
    parts = len(MergeTreeTable.open(path).parts())
    assert parts == 40
    df = spark.read.format("mergetree").load(path)
    # Input partitions that returned rows (every one here holds parts with rows); Spark Connect has
    # no RDD API, so this is counted the same way on both.
    assert df.selectExpr("spark_partition_id() as p").distinct().count() <= max(2, os.cpu_count() or 2) < parts
    assert df.count() == 40_000
    assert df.selectExpr("sum(id)", "sum(value)").first() == data.selectExpr("sum(id)", "sum(value)").first()


def test_a_python_worker_freezes_its_heap_once_at_its_first_task(tmp_path: Path) -> None:
    # PySpark's daemon runs gc.collect() after every task of a reused worker: the package's long-lived
    # objects are frozen once, so those collections skip them. In a process of its own (a worker's).
    import subprocess
    import sys
    import textwrap

    probe = textwrap.dedent(f"""
        import gc
        import pyarrow as pa
        from spark_mergetree import MergeTreeTable
        from spark_mergetree.spark import adapter, source
        MergeTreeTable.create({str(tmp_path / "t")!r}, [("id", "Int64")], order_by="id").insert(
            pa.table({{"id": pa.array([1, 2], pa.int64())}}))
        ref = adapter.resolve({str(tmp_path / "t")!r}, None, None, None, ())
        before = gc.get_freeze_count()
        source._freeze_worker_heap(ref)
        first = gc.get_freeze_count()
        gc.collect()
        source._freeze_worker_heap(ref)
        print(before, first > 1000, gc.get_freeze_count() == first)
    """)
    env = {**os.environ, "SPARK_MERGETREE_COORDINATOR": str(tmp_path / "coordinator")}
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split() == ["0", "True", "True"]

"""readStream.format("mergetree"): the rows each commit inserted, once, across merges and restarts.

Every query runs with Trigger.AvailableNow into Spark's Parquet file sink (exactly once itself), so
what the source fed is what `spark.read.parquet` of the output holds; a second run on the same
checkpoint is a restart. Where each micro-batch ended is read from the checkpoint's offset log
(`offsets/<batch id>`: the source's `{"csn": N}` on its last line).
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

from spark_mergetree import MergeTreeTable
from spark_mergetree.spark.streaming_source import ADMISSION_CONTROL

pytestmark = pytest.mark.spark

WAIT_SECONDS = 300  # bound of every wait for a streaming query (a loaded 2-core machine is slow)


def _table(path: Path) -> MergeTreeTable:
    # No merges of its own: the tests merge when they mean to.
    return MergeTreeTable.create(path, [("id", "Int64"), ("batch", "Int32")], "id", settings={"auto_merge": False})


def _insert(table: MergeTreeTable, batch: int, rows: int = 100) -> int:
    """Insert ids batch*rows .. (batch+1)*rows-1 in one commit; return the commit's csn."""
    table.insert(pa.table({"id": pa.array(range(batch * rows, (batch + 1) * rows), pa.int64()),
                           "batch": pa.array([batch] * rows, pa.int32())}))
    return table.coordinator.current_timestamp()


def _run(spark, table: Path, out: Path, checkpoint: Path, **options: object) -> object:
    stream = spark.readStream.format("mergetree").options(**{k: str(v) for k, v in options.items()}).load(str(table))
    query = (stream.writeStream.format("parquet").option("checkpointLocation", str(checkpoint))
             .trigger(availableNow=True).start(str(out)))
    try:
        finished = query.awaitTermination(WAIT_SECONDS)
    except Exception:  # noqa: BLE001 - the query failed: query.exception() holds why, for the test to judge
        finished = True
    finally:
        if query.isActive:
            query.stop()
    assert finished, f"the streaming query from {table} did not finish within {WAIT_SECONDS} s"
    return query


def _ids(spark, out: Path) -> list[int]:
    return sorted(row[0] for row in spark.read.parquet(str(out)).select("id").collect())


def _batch_ends(checkpoint: Path) -> list[int]:
    """The csn each micro-batch of the query ended at, in batch order."""
    files = sorted((p for p in (checkpoint / "offsets").iterdir() if p.name.isdigit()), key=lambda p: int(p.name))
    return [json.loads(p.read_text().strip().splitlines()[-1])["csn"] for p in files]


def test_rows_of_each_commit_arrive_once_across_merges_and_a_restart(spark, tmp_path: Path) -> None:
    table_dir, out, checkpoint = tmp_path / "t", tmp_path / "out", tmp_path / "ck"
    table = _table(table_dir)
    for batch in range(3):
        _insert(table, batch)
    first = _run(spark, table_dir, out, checkpoint)
    assert first.exception() is None, first.exception()
    assert _ids(spark, out) == list(range(300))  # the table as it was: one first micro-batch
    # Between triggers: a merge of every part fed (it adds a part holding the same rows), then new commits.
    assert table.optimize(final=True)
    later = [_insert(table, batch) for batch in (3, 4)]
    restarted = _run(spark, table_dir, out, checkpoint)  # the same checkpoint: a restart
    assert restarted.exception() is None, restarted.exception()
    assert str(restarted.id) == str(first.id)
    assert _ids(spark, out) == list(range(500))  # each row once: nothing of the merge, nothing twice
    assert _batch_ends(checkpoint)[-1] == later[-1]
    # Another merge and no insert: a restart feeds nothing.
    table.optimize(final=True)
    _run(spark, table_dir, out, checkpoint)
    assert _ids(spark, out) == list(range(500))


def test_starting_snapshot_feeds_only_later_commits(spark, tmp_path: Path) -> None:
    table_dir = tmp_path / "t"
    table = _table(table_dir)
    _insert(table, 0)
    after_first = _insert(table, 1)
    _insert(table, 2)
    _run(spark, table_dir, tmp_path / "out", tmp_path / "ck", startingSnapshot=after_first)
    assert _ids(spark, tmp_path / "out") == list(range(200, 300))
    _run(spark, table_dir, tmp_path / "out2", tmp_path / "ck2", startingSnapshot="latest")
    assert not (tmp_path / "out2").exists() or _ids(spark, tmp_path / "out2") == []
    _insert(table, 3)
    _run(spark, table_dir, tmp_path / "out2", tmp_path / "ck2", startingSnapshot="latest")
    assert _ids(spark, tmp_path / "out2") == list(range(300, 400))


def test_a_delete_fails_the_stream_naming_its_commit_unless_change_commits_are_skipped(spark, tmp_path: Path) -> None:
    table_dir, out, checkpoint = tmp_path / "t", tmp_path / "out", tmp_path / "ck"
    table = _table(table_dir)
    _insert(table, 0)
    _run(spark, table_dir, out, checkpoint)
    assert _ids(spark, out) == list(range(100))
    inserted = _insert(table, 1)
    assert table.delete("id < 10")
    deleted = table.coordinator.current_timestamp()
    _insert(table, 2)
    failed = _run(spark, table_dir, out, checkpoint)
    assert failed.exception() is not None, "a DELETE upstream must fail the stream"
    message = str(failed.exception())
    assert f"commit at csn {deleted} changes rows" in message and "skipChangeCommits" in message
    if ADMISSION_CONTROL:  # PySpark 4.2+: the commits before the DELETE were fed first
        assert _batch_ends(checkpoint)[-1] == inserted
        assert _ids(spark, out) == list(range(200))
    skipped = _run(spark, table_dir, out, checkpoint, skipChangeCommits="true")
    assert skipped.exception() is None, skipped.exception()
    # The DELETE is passed over: rows fed before it stay fed, later inserts arrive, nothing twice.
    assert _ids(spark, out) == list(range(300))


def test_max_rows_and_parts_per_trigger_admit_whole_commits_in_steps(spark, tmp_path: Path) -> None:
    table_dir = tmp_path / "t"
    table = _table(table_dir)
    start = table.coordinator.current_timestamp()
    commits = [_insert(table, batch) for batch in range(4)]
    if not ADMISSION_CONTROL:  # PySpark 4.0 / 4.1: no read limits for Python stream readers
        refused = _run(spark, table_dir, tmp_path / "out", tmp_path / "ck", startingSnapshot=start,
                       maxRowsPerTrigger=150)
        assert "need PySpark 4.2 or later" in str(refused.exception())
        return
    by_rows = _run(spark, table_dir, tmp_path / "out", tmp_path / "ck", startingSnapshot=start, maxRowsPerTrigger=150)
    assert by_rows.exception() is None, by_rows.exception()
    assert _batch_ends(tmp_path / "ck") == commits  # 100 + 100 > 150: one commit per micro-batch
    assert _ids(spark, tmp_path / "out") == list(range(400))
    by_parts = _run(spark, table_dir, tmp_path / "out2", tmp_path / "ck2", startingSnapshot=start,
                    maxPartsPerTrigger=2)
    assert by_parts.exception() is None, by_parts.exception()
    assert _batch_ends(tmp_path / "ck2") == [commits[1], commits[3]]
    assert _ids(spark, tmp_path / "out2") == list(range(400))
    # A limit below one commit's size still admits that commit whole.
    _run(spark, table_dir, tmp_path / "out3", tmp_path / "ck3", startingSnapshot=start, maxRowsPerTrigger=1)
    assert _batch_ends(tmp_path / "ck3") == commits


def test_batch_only_options_are_refused_by_name(spark, tmp_path: Path) -> None:
    table_dir = tmp_path / "t"
    _insert(_table(table_dir), 0)
    refused = _run(spark, table_dir, tmp_path / "out", tmp_path / "ck", snapshot=1)
    assert "option 'snapshot' cannot be given to readStream" in str(refused.exception())
    with pytest.raises(Exception, match="apply to spark.readStream.format"):
        spark.read.format("mergetree").option("maxRowsPerTrigger", 10).load(str(table_dir)).collect()

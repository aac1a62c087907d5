"""Background merges under a stream: a micro-batch a second into writeStream.format("mergetree") keeps
the table's active parts bounded, with nothing set beyond what a user writes (`auto_merge` is on by
default). A batch's commit runs in a Python worker Spark keeps between batches, whose background
merge thread (engine/background.py) hands the merges to a merge worker process.

The full-length version is benchmarks/streaming_health.py (10 minutes; figures in docs/spark.md,
"Merges under a stream").
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from spark_mergetree import MergeTreeTable
from spark_mergetree.format.part_info import PartInfo

pytestmark = pytest.mark.spark

STREAM_SECONDS = 40
ROWS_PER_BATCH = 2000
FIRST_COMMIT_SECONDS = 180  # bound of the wait for the first micro-batch (a loaded machine is slow)
# Each micro-batch commits two parts (two input partitions, one part each): 40 batches make 80
# without merges. The bound leaves room for merges that start late on a loaded machine.
MAX_ACTIVE_PARTS = 30


def test_active_parts_stay_bounded_under_a_stream_of_a_batch_a_second(spark, tmp_path: Path) -> None:
    table = tmp_path / "events"
    stream = (spark.readStream.format("rate-micro-batch").option("rowsPerBatch", ROWS_PER_BATCH)
              .option("numPartitions", 2).option("startTimestamp", int(time.time() * 1000)).load()
              .selectExpr("timestamp AS ts", "value % 1000 AS key",
                          "CAST(value / 100.0 AS DECIMAL(18, 4)) AS amount",
                          "concat('user-', CAST(value % 97 AS STRING)) AS name"))
    query = (stream.writeStream.format("mergetree").option("checkpointLocation", str(tmp_path / "ck"))
             .option("order_by", "(key, ts)").trigger(processingTime="1 second").start(str(table)))
    counts: list[int] = []
    levels: set[int] = set()
    try:
        deadline = time.monotonic() + FIRST_COMMIT_SECONDS
        while not (table / "_mergetree" / "log").exists() or MergeTreeTable.open(table).visible_parts()[0] is None:
            assert query.exception() is None, query.exception()
            assert time.monotonic() < deadline, f"no micro-batch committed within {FIRST_COMMIT_SECONDS} s"
            time.sleep(0.5)
        end = time.monotonic() + STREAM_SECONDS
        while time.monotonic() < end:
            assert query.exception() is None, query.exception()
            _, visible = MergeTreeTable.open(table).visible_parts()
            counts.append(len(visible))
            levels.update(PartInfo.parse(name).level for name in visible)
            time.sleep(1)
    finally:
        query.stop()
    merged = MergeTreeTable.open(table)
    last_batch = merged.app_version(str(query.id))
    assert last_batch is not None and last_batch >= 10, f"only {last_batch} micro-batches ran in {STREAM_SECONDS} s"
    # Without merges the parts would number two per batch; merges ran while the stream did.
    assert max(levels) > 0, f"no merged part appeared while {last_batch + 1} micro-batches committed"
    assert max(counts) <= MAX_ACTIVE_PARTS, f"active parts while streaming: {counts}"
    # Every committed batch's rows, once.
    assert merged.count() == (last_batch + 1) * ROWS_PER_BATCH

"""`df.writeStream.format("mergetree")`: each micro-batch one atomic commit, exactly once.

How a micro-batch goes:

* Spark's planner calls `streamWriter` (spark/source.py) for every batch (and again in the process that runs the
  batch's `commit`): the options are checked, the table is created on the first batch, and the
  writer is cheap to make again.
* Tasks stage their rows as invisible parts under a job tag of their own run and batch
  (`s<run id>b<batch id>`), read from the task's local properties Spark sets for a streaming
  query (`sql.streaming.queryId`, `streaming.sql.batchId`, and the run id as the job group); the
  commit message carries the query id.
* `commit(messages, batchId)` publishes every staged part of the batch in one transaction whose log
  entry also records (query id, batch id) (`MergeTreeTable.commit_staged(app_version=...)`, as
  Delta records a txn app id and version). If the driver dies after that commit and before Spark
  writes its own commit log, the restarted query runs the same batch id again: the table's log
  already holds it, so nothing is published twice (the replay's staged parts are deleted).

Only `outputMode("append")` is supported: `complete` reaches the source as an overwrite and is
refused here by name; Spark itself refuses `update` for a source that does not declare it.
A batch's staged parts are registered without a driver lease (a lease process per micro-batch
would cost more than the batch): parts a killed driver staged are garbage for `cleanup()` once
the staged-part lifetime has passed since they were written.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamWriter, WriterCommitMessage

from spark_mergetree.errors import InvalidOptionError, TransactionError, UnsupportedError
from spark_mergetree.spark import adapter
from spark_mergetree.spark.adapter import TableRef
from spark_mergetree.spark.options import WriteOptions
from spark_mergetree.spark.task_writes import freeze_worker_heap, stage_batches
from spark_mergetree.storage.object_store import is_object_url

# Options Spark's DataStreamWriter passes to the sink besides ours.
STREAM_ONLY_OPTIONS = {"checkpointlocation"}
# Local properties Spark's micro-batch execution sets on every job of a streaming query.
QUERY_ID_PROPERTY = "sql.streaming.queryId"
BATCH_ID_PROPERTY = "streaming.sql.batchId"
RUN_ID_PROPERTY = "spark.jobGroup.id"  # each run of the query is its jobs' group


def stream_options(options: Any, overwrite: bool) -> WriteOptions:
    """The write options of a streaming write, checked: append only, no `transaction`, a table on
    a file system (spark/source.py `streamWriter` then prepares the table as a batch write does)."""
    if overwrite:
        raise InvalidOptionError(
            "writeStream.format('mergetree') supports outputMode('append') only: outputMode('complete') would "
            "replace the table with every batch; write the aggregate with foreachBatch and "
            "batch_df.write.mode('overwrite') if that is what you want")
    given = {str(key).lower(): value for key, value in options.items()}
    opts = WriteOptions.parse({key: value for key, value in given.items() if key not in STREAM_ONLY_OPTIONS},
                              False)
    if opts.transaction is not None:
        raise InvalidOptionError(
            f"option {adapter.TXN_OPTION!r} cannot be given to writeStream: each micro-batch commits by itself, "
            "exactly once; to write several tables in one commit per batch use foreachBatch with "
            "spark_mergetree.transaction(batch_df.sparkSession)")
    if is_object_url(opts.path):
        raise UnsupportedError(f"writeStream.format('mergetree'): table {opts.path} is in object storage, whose "
                               "commit log does not record micro-batches yet; stream into a table on a file system")
    return opts


@dataclass
class MergeTreeBatchMessage(WriterCommitMessage):
    """What one task of a micro-batch staged, and which query and run it belongs to."""

    partition_id: int
    attempt: int
    staged: list[Any]
    query_id: str
    tag: str
    coordinator: str | None = None


def _job_tag(run_id: str, batch_id: str) -> str:
    """The job tag of one run's micro-batch: letters and digits, unique per run and batch (a replay
    in a new run stages under a new tag, so the earlier run's ended job never refuses it)."""
    return f"s{''.join(ch for ch in run_id if ch.isalnum())[:40]}b{int(batch_id)}"


class MergeTreeStreamWriter(DataSourceStreamWriter, DataSourceArrowWriter):
    """Tasks get Spark's Arrow batches (DataSourceArrowWriter: PySpark 4.0 has no
    DataSourceStreamArrowWriter, and 4.0 to 4.3 hand Arrow to any DataSourceArrowWriter)."""

    def __init__(self, ref: TableRef, table_arrow: pa.Schema, stage_rows: int) -> None:
        self.ref = ref
        self.table_arrow = table_arrow
        self.stage_rows = stage_rows

    def write(self, iterator: Iterator[pa.RecordBatch]) -> MergeTreeBatchMessage:
        from pyspark import TaskContext

        freeze_worker_heap(self.ref)
        context = TaskContext.get()
        assert context is not None, "write() runs in a Spark task"
        query_id = context.getLocalProperty(QUERY_ID_PROPERTY)
        batch_id = context.getLocalProperty(BATCH_ID_PROPERTY)
        run_id = context.getLocalProperty(RUN_ID_PROPERTY)
        if not query_id or not batch_id or not run_id:
            raise TransactionError(f"{self.ref.describe()}: this task runs no streaming micro-batch (Spark set no "
                                   f"{QUERY_ID_PROPERTY!r}/{BATCH_ID_PROPERTY!r}); use df.write for batch writes")
        ref = adapter.session_coordinator_for_task(self.ref)
        tag = _job_tag(run_id, batch_id)
        staged = stage_batches(ref, self.table_arrow, self.stage_rows, tag, iterator)
        return MergeTreeBatchMessage(context.partitionId(), context.attemptNumber(), staged, query_id, tag,
                                     ref.coordinator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # type: ignore[override]  # noqa: N803
        chosen: dict[int, MergeTreeBatchMessage] = {}
        for message in messages:
            if isinstance(message, MergeTreeBatchMessage) and message.partition_id not in chosen:
                chosen[message.partition_id] = message
        if not chosen:
            return
        queries = {message.query_id for message in chosen.values()}
        if len(queries) > 1:
            raise TransactionError(f"tasks of micro-batch {batchId} belong to different queries: {sorted(queries)}")
        query_id = queries.pop()
        ref = self._ref_of(chosen.values())
        tags = {message.tag for message in chosen.values()}
        staged = [part for message in chosen.values() for part in message.staged]
        try:
            committed = adapter.commit_batch(ref, staged, (query_id, int(batchId))) if staged else True
        except BaseException:
            for tag in tags:
                adapter.discard(ref, tag)
            raise
        for tag in tags:  # the batch's job is over: what failed or duplicate attempts staged goes
            adapter.discard(ref, tag, keep=staged if committed else ())
        if not committed:
            print(f"spark_mergetree: {ref.describe()}: micro-batch {batchId} of streaming query {query_id} was "
                  "committed before (a replay after a restart); nothing was written again", file=sys.stderr,
                  flush=True)

    def _ref_of(self, messages: Any) -> TableRef:
        return adapter.ref_with_tasks_coordinator(self.ref, (m.coordinator for m in messages), "one micro-batch")

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # type: ignore[override]  # noqa: N803
        for message in messages:
            if isinstance(message, MergeTreeBatchMessage):
                adapter.discard(self._ref_of([message]), message.tag)

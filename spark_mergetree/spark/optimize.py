"""`spark_mergetree.optimize(spark, table)`: OPTIMIZE TABLE spread over Spark's executors.

The driver chooses disjoint groups of parts in one transaction and takes their removal locks;
one Spark task per group merges it (on a local table into a staged part owned by a write job, as a
write's tasks stage theirs; in object storage under the result's name); the driver publishes one
result per group and commits them all in that transaction. A task retried (or run twice) leaves
extra staged parts nobody publishes: they are deleted when the job ends, so the merges happen
exactly once. With `final`, the engine's OPTIMIZE FINAL (engine/optimize.py `run_final`) plans
rounds of such jobs and waits for merges running elsewhere; this module only runs each round's
merges on the executors. Losing to a concurrent overwrite or merge (SerializationError) leaves
nothing behind.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pyarrow as pa

from spark_mergetree.errors import InvalidOptionError, TransactionError
from spark_mergetree.spark import adapter
from spark_mergetree.spark.options import storage_options

_RESULT_SCHEMA = pa.schema([("group", pa.int64()), ("name", pa.string()), ("partition_id", pa.string()),
                            ("rows", pa.int64()), ("bytes", pa.int64())])


def optimize(spark: Any, path_or_name: str, where: str | None = None, final: bool = False, *,
             timeout: float | None = None, options: Mapping[str, str] | None = None,
             catalog: str | None = None, coordinator: str | None = None,
             task_hook: Callable[[int], None] | None = None) -> list[str]:
    """Merge a table's parts on the executors (one task per group of parts); return the new parts.

    `path_or_name`: a table directory or object-store URL, or `<database>.<table>` with `catalog`
    (the catalog root). `where`: only partitions where this predicate may hold. `options`: the
    object store's `s3.*`, `gcs.*` or `azure.*` options, as `spark.read.format("mergetree")`
    takes them (endpoint, credentials).

    Without `final`, one job: each partition merges in runs of up to `max_parts_to_merge` adjacent
    parts, all committed in one transaction; a merge running elsewhere that holds a part fails it
    with SerializationError. `final=True` keeps `MergeTreeTable.optimize(final=True)`'s promise on
    every backend: once it returns, every partition holds one part of all the rows committed before
    the call. It works in rounds; a round is one Spark job of one task per merge (each partition's
    parts, or each run between blocks a running write holds) whose results commit together in one
    transaction, exactly once even when Spark retries tasks; rounds repeat, planned again from what
    the last one left, until one part per partition is left. Merges already running (in any
    process) are waited for, up to `timeout` seconds (default 120) as the engine waits, while the
    other partitions go on merging; one still holding a partition's parts then raises
    SerializationError naming the partition and its transaction (what was merged stays merged).

    `task_hook(group)` runs in each task after its part is staged (for fault injection in tests).
    """
    if not isinstance(path_or_name, str) or not path_or_name:
        raise InvalidOptionError(f"optimize() needs a table directory or <database>.<table>, got {path_or_name!r}")
    storage = storage_options(options or {}, path_or_name) if catalog is None else ()
    ref = adapter.resolve(path_or_name, catalog, None, coordinator, storage)
    if where is not None:
        adapter.check_where(ref, where)

    def run_job(job: adapter.MergeJob) -> list[tuple[str, str, int, int]]:
        return _merge_on_executors(spark, ref, job, task_hook)

    return adapter.optimize(ref, where, final, timeout, run_job)


def _merge_on_executors(spark: Any, ref: adapter.TableRef, job: adapter.MergeJob,
                        task_hook: Callable[[int], None] | None) -> list[tuple[str, str, int, int]]:
    """One Spark job, one task per group of `job`: each group's staged result (name, partition id,
    rows, bytes), in the groups' order."""
    groups, names, tag = job.groups, job.names, job.tag

    def merge_groups(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for number in batch.column(0).to_pylist():
                staged = adapter.stage_merge(ref, groups[number], tag, names[number])
                if task_hook is not None:
                    task_hook(number)
                yield pa.RecordBatch.from_pylist(
                    [{"group": number, "name": staged.name, "partition_id": staged.partition_id, "rows": staged.rows,
                      "bytes": staged.bytes}], schema=_RESULT_SCHEMA)

    results = (spark.range(len(groups), numPartitions=len(groups))
               .mapInArrow(merge_groups, "group long, name string, partition_id string, rows long, bytes long")
               .collect())
    chosen: dict[int, tuple[str, str, int, int]] = {}
    for row in results:  # one row per group: Spark keeps the output of one attempt per task
        chosen.setdefault(int(row["group"]), (row["name"], row["partition_id"], int(row["rows"]), int(row["bytes"])))
    lost = [number for number in range(len(groups)) if number not in chosen]
    if lost:
        raise TransactionError(f"{ref.describe()}: optimize got no merged part for group(s) {lost}")
    return [chosen[number] for number in range(len(groups))]

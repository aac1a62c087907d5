"""`spark_mergetree.optimize(spark, table)`: OPTIMIZE TABLE spread over Spark's executors.

The driver chooses disjoint groups of parts in one transaction and takes their removal locks;
one Spark task per group merges it into a staged part (owned by a write job, as a write's tasks
stage theirs); the driver publishes one result per group and commits them all in that transaction.
A task retried (or run twice) leaves extra staged parts nobody publishes: they are deleted when the
job ends, so the merges happen exactly once. Losing to a concurrent overwrite or merge
(SerializationError) leaves nothing behind.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa

from spark_mergetree.errors import InvalidOptionError, TransactionError
from spark_mergetree.spark import adapter

_RESULT_SCHEMA = pa.schema([("group", pa.int64()), ("name", pa.string()), ("partition_id", pa.string()),
                            ("rows", pa.int64()), ("bytes", pa.int64())])


def optimize(spark: Any, path_or_name: str, where: str | None = None, final: bool = False, *,
             catalog: str | None = None, coordinator: str | None = None,
             task_hook: Callable[[int], None] | None = None) -> list[str]:
    """Merge a table's parts on the executors (one task per group of parts); return the new parts.

    `path_or_name`: a table directory, or `<database>.<table>` with `catalog` (the catalog root).
    `where`: only partitions where this predicate may hold. `final`: every partition down to one
    part (as OPTIMIZE ... FINAL); otherwise each partition merges in runs of up to
    `max_parts_to_merge` adjacent parts. All merges commit in one transaction, exactly once even
    when Spark retries tasks. `task_hook(group)` runs in each task after its part is staged (for
    fault injection in tests).
    """
    if not isinstance(path_or_name, str) or not path_or_name:
        raise InvalidOptionError(f"optimize() needs a table directory or <database>.<table>, got {path_or_name!r}")
    ref = adapter.resolve(path_or_name, catalog, None, coordinator)
    if where is not None:
        adapter.check_where(ref, where)
    job = adapter.plan_merges(ref, where, final)
    if not job.groups:
        return []
    groups, tag = job.groups, job.tag

    def merge_groups(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for number in batch.column(0).to_pylist():
                staged = adapter.stage_merge(ref, groups[number], tag)
                if task_hook is not None:
                    task_hook(number)
                yield pa.RecordBatch.from_pylist(
                    [{"group": number, "name": staged.name, "partition_id": staged.partition_id, "rows": staged.rows,
                      "bytes": staged.bytes}], schema=_RESULT_SCHEMA)

    try:
        results = (spark.range(len(groups), numPartitions=len(groups))
                   .mapInArrow(merge_groups, "group long, name string, partition_id string, rows long, bytes long")
                   .collect())
        chosen: dict[int, tuple[str, str, int, int]] = {}
        for row in results:  # one row per group: Spark keeps the output of one attempt per task
            chosen.setdefault(int(row["group"]), (row["name"], row["partition_id"], int(row["rows"]), int(row["bytes"])))
        lost = [number for number in range(len(groups)) if number not in chosen]
        if lost:
            raise TransactionError(f"{ref.describe()}: optimize got no merged part for group(s) {lost}")
        return adapter.commit_merges(ref, job, [chosen[number] for number in range(len(groups))])
    finally:
        adapter.end_merges(ref, job)

"""`spark_mergetree.delete(spark, table, where)` and `update(spark, table, set, where)`: ClickHouse's
lightweight DELETE and ALTER TABLE ... UPDATE run as Spark jobs (engine/mutations.py says what a
mutation writes).

The driver takes one transaction and lists the table's visible parts; one Spark task per part
writes that part's new version (rewritten where a row changes, else copied) as a staged part of a
write job; the driver publishes one new version per part and commits them all in that
transaction (then `mutation_N.txt` is written). A task retried or run twice leaves extra staged
parts nobody publishes: they are deleted when the job ends, so the mutation happens exactly once.
Losing to a concurrent merge, overwrite or insert (SerializationError) leaves nothing behind.

Inside `with spark_mergetree.transaction(spark) as tx:` (its session conf, or `transaction=tx`)
the driver works in that transaction instead, which this process owns: the new versions and the
removals join it (reads inside the block see them), it commits them with everything else the
block wrote and only then writes `mutation_N.txt`; a rollback leaves the table as it was.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pyarrow as pa

from spark_mergetree.errors import InvalidOptionError, TransactionError
from spark_mergetree.spark import adapter
from spark_mergetree.spark.adapter import TXN_CONF, TxnContext

_RESULT_SCHEMA = pa.schema([("index", pa.int64()), ("name", pa.string()), ("rewritten", pa.bool_())])


def delete(spark: Any, path_or_name: str, where: str, *, catalog: str | None = None, coordinator: str | None = None,
           transaction: Any = None, task_hook: Callable[[int], None] | None = None) -> list[str]:
    """Delete the rows matching `where` (ClickHouse syntax) from a table, as `MergeTreeTable.delete`
    does, on the executors; return the new parts' names (none when no row matches).

    `path_or_name`: a table directory, or `<database>.<table>` with `catalog` (the catalog root).
    Inside `with spark_mergetree.transaction(spark) as tx:` the delete is part of that transaction
    (found through the session conf; `transaction=tx` or `tx.id` names it explicitly).
    `task_hook(part index)` runs in each task after its part is staged (fault injection in tests)."""
    return _run(spark, path_or_name, None, where, catalog, coordinator, transaction, task_hook)


def update(spark: Any, path_or_name: str, set: Mapping[str, Any], where: str, *,  # noqa: A002 - ClickHouse's word
           catalog: str | None = None, coordinator: str | None = None, transaction: Any = None,
           task_hook: Callable[[int], None] | None = None) -> list[str]:
    """Set columns in the rows matching `where`, as `MergeTreeTable.update` does (`set`: column →
    ClickHouse expression text or Python value; key columns cannot be updated), on the executors;
    inside a transaction as `delete` is."""
    if not isinstance(set, Mapping):
        raise InvalidOptionError(f"update() needs a mapping of column → new value, got {set!r}")
    return _run(spark, path_or_name, dict(set), where, catalog, coordinator, transaction, task_hook)


def _transaction_of(spark: Any, transaction: Any) -> TxnContext | None:
    """The transaction the mutation joins: `transaction` (a `transaction(spark)` object or its id),
    else the one the session conf names."""
    explicit = None
    if transaction is not None:
        text = transaction if isinstance(transaction, str) else getattr(transaction, "id", None)
        if not isinstance(text, str):
            raise InvalidOptionError(f"transaction= takes the object of `with spark_mergetree.transaction(spark) as "
                                     f"tx` or its `tx.id`, got {transaction!r}")
        explicit = TxnContext.parse(text, "argument 'transaction'")
    try:
        conf_value = spark.conf.get(TXN_CONF, None)
    except Exception:  # noqa: BLE001 - a session that hides the conf cannot have it set either
        conf_value = None
    return adapter.joined_txn(explicit, adapter.session_txn_owned_here(conf_value))


def _run(spark: Any, path_or_name: str, assignments: dict[str, Any] | None, where: str, catalog: str | None,
         coordinator: str | None, transaction: Any, task_hook: Callable[[int], None] | None) -> list[str]:
    if not isinstance(path_or_name, str) or not path_or_name:
        raise InvalidOptionError(f"needs a table directory or <database>.<table>, got {path_or_name!r}")
    ref = adapter.resolve(path_or_name, catalog, None, coordinator)
    job = adapter.plan_mutation(ref, assignments, where, _transaction_of(spark, transaction))
    parts, candidates, tag = job.parts, job.candidates, job.tag

    def stage_parts(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for index in batch.column(0).to_pylist():
                name, rewritten = adapter.stage_mutation(ref, assignments, where, parts[index],
                                                         parts[index] in candidates, tag)
                if task_hook is not None:
                    task_hook(index)
                yield pa.RecordBatch.from_pylist([{"index": index, "name": name, "rewritten": rewritten}],
                                                 schema=_RESULT_SCHEMA)

    try:
        if not parts:
            return []
        results = (spark.range(len(parts), numPartitions=min(len(parts), 64))
                   .mapInArrow(stage_parts, "index long, name string, rewritten boolean")
                   .collect())
        chosen: dict[int, tuple[str, bool]] = {}
        for row in results:  # one row per part: Spark keeps the output of one attempt per task
            chosen.setdefault(int(row["index"]), (row["name"], bool(row["rewritten"])))
        lost = [index for index in range(len(parts)) if index not in chosen]
        if lost:
            raise TransactionError(f"{ref.describe()}: the mutation got no new version of part(s) "
                                   f"{', '.join(parts[i] for i in lost)}")
        if not any(rewritten for _, rewritten in chosen.values()):
            return []  # no row matched: nothing changes (the job's end deletes the copies)
        return adapter.commit_mutation(ref, job, assignments, where,
                                       {parts[index]: chosen[index][0] for index in range(len(parts))})
    finally:
        adapter.end_mutation(ref, job)

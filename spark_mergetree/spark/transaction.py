"""`transaction(spark)`: several Spark writes (and reads) of mergetree tables as one transaction.

The transaction lives in the user's process; Spark runs each job's commit() in a separate
driver-side Python worker that cannot reach it. What does cross into Spark's processes is a
thread-local *local property* of the SparkContext: it carries the coordinator URL, tid, snapshot
and a journal directory. Write tasks copy it into their commit messages; commit() then writes the
job's parts as entries pending under that tid (and notes the table in the journal) instead of
committing. Leaving the `with` block commits the tid here, making every table's entries visible at
once; an exception or `rollback()` aborts it and nothing becomes visible. Read tasks see the same
property and read the transaction's snapshot plus its own pending writes.
"""

from __future__ import annotations

from types import TracebackType
from typing import Any

from spark_mergetree.errors import TransactionError
from spark_mergetree.spark import adapter
from spark_mergetree.spark.adapter import TXN_PROPERTY, TxnContext


class SparkTransaction:
    """Context manager returned by `transaction(spark)`; use it from the thread that runs the jobs."""

    def __init__(self, spark: Any, coordinator: str | None = None) -> None:
        self._spark = spark
        self._coordinator = coordinator
        self._handle: Any = None
        self.context: TxnContext | None = None
        self._previous: str | None = None
        self._finished = False

    @property
    def tid(self) -> int:
        return self._require().tid

    @property
    def snapshot(self) -> int:
        return self._require().snapshot

    def _require(self) -> TxnContext:
        if self.context is None:
            raise TransactionError("the transaction has not begun: use it as `with transaction(spark) as tx:`")
        return self.context

    def __enter__(self) -> SparkTransaction:
        if self.context is not None:
            raise TransactionError("a transaction object can be entered only once")
        self._handle, self.context = adapter.begin(self._coordinator)
        context = self._spark.sparkContext
        self._previous = context.getLocalProperty(TXN_PROPERTY)
        if self._previous:
            adapter.finish(self._handle, self.context, commit_it=False)
            raise TransactionError("transactions do not nest: this thread is already inside one")
        context.setLocalProperty(TXN_PROPERTY, self.context.to_property())
        return self

    def _detach(self) -> None:
        self._spark.sparkContext.setLocalProperty(TXN_PROPERTY, None)

    def commit(self) -> None:
        """Commit now (the `with` block does this on a normal exit)."""
        context = self._require()
        if self._finished:
            raise TransactionError(f"transaction {context.tid} is already finished")
        self._finished = True
        self._detach()
        adapter.finish(self._handle, context, commit_it=True)

    def rollback(self) -> None:
        """Abort: nothing written inside the transaction becomes visible."""
        context = self._require()
        if self._finished:
            raise TransactionError(f"transaction {context.tid} is already finished")
        self._finished = True
        self._detach()
        adapter.finish(self._handle, context, commit_it=False)

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        if self._finished:
            return
        if kind is None:
            self.commit()
        else:
            self.rollback()


def transaction(spark: Any, coordinator: str | None = None) -> SparkTransaction:
    """`with transaction(spark) as tx:` — writes inside become visible together at exit, or never.

    `coordinator` is a coordinator URL (file:///dir or zk://host:port/root); by default the
    process default coordinator ($SPARK_MERGETREE_COORDINATOR or ~/.spark_mergetree).
    """
    return SparkTransaction(spark, coordinator)

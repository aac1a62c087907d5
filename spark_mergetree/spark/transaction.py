"""`transaction(spark)`: several Spark writes (and reads) of mergetree tables as one transaction.

Works alike on classic and Spark Connect sessions: it needs no SparkContext. The transaction lives
in the user's process; Spark's processes learn it from the session conf `spark.mergetree.transaction`
(set while the block runs, where the session allows it; tasks see it) or from the read/write
option `transaction` = `tx.id` (the planner, the tasks and a write's commit() see it). A write job's
commit() stages its parts for the tid in each table's log and records the table at the coordinator;
leaving the `with` block adopts what was staged and commits the tid, making every table's changes
visible at once. An exception or `rollback()` aborts it and discards what was staged.

Inside `foreachBatch`, a streaming query runs each micro-batch in a copy of the session made at
`start()` (and `batch_df` belongs to that copy), so the conf set on the session the batch function
closes over would never reach the batch's writes. `transaction(spark)` there finds the batch's
session and sets the conf on it too (`_batch_session`): on a classic session, the JVM session active
on the micro-batch's thread; on Spark Connect, the session the foreachBatch worker made active for
the batch. Where it cannot be found, it refuses, naming `transaction(batch_df.sparkSession)`.
"""

from __future__ import annotations

import logging
import os
import sys
from types import TracebackType
from typing import Any

from spark_mergetree.errors import MergeTreeError, TransactionError
from spark_mergetree.spark import adapter
from spark_mergetree.spark.adapter import TXN_CONF, TXN_OPTION, TxnContext

log = logging.getLogger(__name__)


class SparkTransaction:
    """Context manager returned by `transaction(spark)`."""

    def __init__(self, spark: Any, coordinator: str | None = None, *, session_conf: bool = True) -> None:
        self._spark = spark
        self._coordinator = coordinator
        self._session_conf = session_conf
        self._conf_set = False
        self._batch_conf: Any = None  # the conf of the micro-batch's session, also joined (foreachBatch)
        self._handle: Any = None
        self.context: TxnContext | None = None
        self._finished = False

    @property
    def id(self) -> str:
        """The value for `.option("transaction", tx.id)` on a read or write inside the block."""
        return self._require().id

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
        if self._session_conf:
            try:
                self._join_session(self.context)
            except BaseException:
                self._finished = True
                adapter.finish(self._handle, commit_it=False)
                raise
        return self

    def _join_session(self, context: TxnContext) -> None:
        conf = self._spark.conf
        try:
            current = conf.get(TXN_CONF, None)
        except Exception:  # noqa: BLE001 - a session that hides the conf cannot have it set either
            current = None
        other = None
        if current:
            try:
                other = TxnContext.parse(current, f"session conf {TXN_CONF!r}")
            except MergeTreeError:
                other = None  # not ours to judge: overwrite it
        if other is not None and adapter.transaction_state(other) == "running":
            raise TransactionError(f"transactions do not nest: this Spark session is already inside transaction "
                                   f"{other.tid} (one transaction per session at a time)")
        try:
            conf.set(TXN_CONF, context.id)
        except Exception as error:  # noqa: BLE001 - any refusal: Databricks restricts confs
            raise TransactionError(
                f"this Spark session does not allow setting {TXN_CONF!r} ({type(error).__name__}: "
                f"{str(error).splitlines()[0] if str(error) else ''}); open the transaction with "
                f"transaction(spark, session_conf=False) and give every read and write inside it "
                f".option({TXN_OPTION!r}, tx.id)") from error
        self._conf_set = True
        batch_conf = _batch_session_conf(self._spark)
        if batch_conf is not None:
            batch_conf.set(TXN_CONF, context.id)
            self._batch_conf = batch_conf

    def _leave_session(self) -> None:
        if self._batch_conf is not None:
            batch_conf, self._batch_conf = self._batch_conf, None
            try:
                batch_conf.unset(TXN_CONF)
            except Exception as error:  # noqa: BLE001 - the copy ends with its batch anyway
                log.warning("could not unset %s on the micro-batch's session after transaction %s: %r", TXN_CONF,
                            self.context.tid if self.context else None, error)
        if not self._conf_set:
            return
        self._conf_set = False
        try:
            self._spark.conf.unset(TXN_CONF)
        except Exception as error:  # noqa: BLE001 - a stale value names an ended transaction: harmless
            log.warning("could not unset %s after transaction %s: %r", TXN_CONF, self.tid, error)

    def _finish(self, commit_it: bool) -> None:
        context = self._require()
        if self._finished:
            raise TransactionError(f"transaction {context.tid} is already finished")
        self._finished = True
        self._leave_session()
        adapter.finish(self._handle, commit_it=commit_it)

    def commit(self) -> None:
        """Commit now (the `with` block does this on a normal exit)."""
        self._finish(commit_it=True)

    def rollback(self) -> None:
        """Abort: nothing written inside the transaction becomes visible."""
        self._finish(commit_it=False)

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        if self._finished:
            return
        self._finish(commit_it=kind is None)


# Local property Spark's micro-batch execution sets on its thread (and the jobs a batch runs).
_QUERY_ID_PROPERTY = "sql.streaming.queryId"
# The module Spark Connect runs a foreachBatch function in (`python -m`, PySpark 4.0 to 4.3).
_FOREACH_BATCH_WORKER = "pyspark.sql.connect.streaming.worker.foreach_batch_worker"
_USE_BATCH_SESSION = ("inside foreachBatch, open the transaction on the batch's own session: "
                      "`with transaction(batch_df.sparkSession):`")


class _JvmConf:
    """The runtime conf of a JVM session (a classic micro-batch's copy), as `spark.conf` is used here."""

    def __init__(self, jconf: Any) -> None:
        self._jconf = jconf

    def set(self, key: str, value: str) -> None:
        self._jconf.set(key, value)

    def unset(self, key: str) -> None:
        self._jconf.unset(key)


def _batch_session_conf(spark: Any) -> Any:
    """The conf of the session a streaming micro-batch runs this code in, when that is not `spark`
    (foreachBatch closing over the session the query started from); None outside micro-batches.
    TransactionError when this runs inside a micro-batch whose session cannot be found."""
    jsession = getattr(spark, "_jsparkSession", None)
    if jsession is not None:  # classic: the callback runs on the micro-batch's JVM thread (pinned threads)
        try:
            in_batch = bool(spark.sparkContext.getLocalProperty(_QUERY_ID_PROPERTY))
        except Exception:  # noqa: BLE001 - no context to ask: not a micro-batch of ours to find
            return None
        if not in_batch:
            return None
        try:
            active = spark._jvm.org.apache.spark.sql.SparkSession.getActiveSession()
            batch = active.get() if active.isDefined() else None
        except Exception as error:  # noqa: BLE001 - a JVM that hides it: refuse rather than tear batches
            raise TransactionError(f"cannot find the session of this streaming micro-batch ({error!r}); "
                                   f"{_USE_BATCH_SESSION}") from error
        if batch is None:
            raise TransactionError(f"cannot find the session of this streaming micro-batch; {_USE_BATCH_SESSION}")
        return None if batch.equals(jsession) else _JvmConf(batch.conf())
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if getattr(spec, "name", None) != _FOREACH_BATCH_WORKER or os.environ.get("SPARK_CONNECT_MODE_ENABLED") != "1":
        return None
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is None:
        raise TransactionError(f"cannot find the session of this foreachBatch micro-batch; {_USE_BATCH_SESSION}")
    same = getattr(active, "session_id", None) == getattr(spark, "session_id", None)
    return None if same else active.conf


def transaction(spark: Any, coordinator: str | None = None, *, session_conf: bool = True) -> SparkTransaction:
    """`with transaction(spark) as tx:` — writes inside become visible together at exit, or never.

    Works on classic and Spark Connect sessions. Reads and writes of the session join it through
    the session conf `spark.mergetree.transaction`; where a session refuses that conf (Databricks
    serverless and standard access mode restrict confs), pass `session_conf=False` and give each
    read and write `.option("transaction", tx.id)` (which works everywhere).

    Inside a streaming query's `foreachBatch` function, `transaction(spark)` on the session the
    query started from also covers the writes of the batch's own session (`batch_df.sparkSession`,
    a copy Spark makes), so `with transaction(spark):` around two tables' writes makes each batch
    atomic; `transaction(batch_df.sparkSession)` works too.

    `coordinator` is a coordinator URL (file:///dir or zk://host:port/root); by default the
    process default coordinator ($SPARK_MERGETREE_COORDINATOR or ~/.spark_mergetree).
    """
    return SparkTransaction(spark, coordinator, session_conf=session_conf)

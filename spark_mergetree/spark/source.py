"""The Python DataSource `mergetree`: schema, reader (partitions, pruning, Arrow batches) and writer.

Reading: the driver plans granule ranges grouped into input partitions of about `target_rows` rows
(so one big part still feeds every core); executors read their ranges as Arrow and cast them to
Spark's Arrow schema in one step. The `where` option prunes partitions and granules.

Spark's filters prune only where a scan has a plan of its own. PySpark 4.1–4.3 stores the planned
read of a pushed-down scan (its partitions and pickled reader) on the data source provider, which
every reference to one loaded DataFrame shares: two scans of one view in one query (a self-join,
EXISTS, a union) would all run the plan made last. The session extension (spark/session.py,
jvm/src) rebuilds every relation over this source with a provider of its own and with only the
columns the query uses, and marks the fields of its schema with SCAN_MARKER; only such a scan
gets a reader with pushFilters. Without the extension the reader has no pushFilters (Spark applies every
filter to a full read) and reads every column of its schema. Pushed filters only prune granules:
every filter goes back to Spark, which applies it to the rows.

Writing: tasks cast Spark's batches to the table schema and stage invisible parts (the engine
sorts and splits by partition); the driver's commit() makes all of a job's parts visible in one step, once
per task partition id, and removes everything else the job staged.
"""

from __future__ import annotations

import math
import os
import sys
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.types import StructField, StructType

from spark_mergetree.errors import (
    InvalidOptionError,
    SchemaMismatchError,
    TableNotFoundError,
    TransactionError,
)
from spark_mergetree.spark import adapter
from spark_mergetree.spark.adapter import TableRef, TxnContext
from spark_mergetree.spark.lazy_pandas import defer_pandas
from spark_mergetree.spark.options import DEFAULT_TARGET_BYTES, OPEN_COST_BYTES, ReadOptions, WriteOptions
from spark_mergetree.spark.session import ENABLE_HINT
from spark_mergetree.spark.task_writes import freeze_worker_heap as _freeze_worker_heap
from spark_mergetree.spark.task_writes import stage_batches
from spark_mergetree.spark.types import (
    check_readable_columns,
    check_writable,
    clickhouse_columns,
    conform_batch,
    key_columns,
    object_type,
    spark_arrow_schema,
    spark_schema,
    spark_type,
    unscaled_columns,
    with_unscaled,
)

SOURCE_NAME = "mergetree"

# Every Spark Python worker that runs this source imports this module first: pyarrow must not
# import pandas in it before something uses pandas (spark/lazy_pandas.py).
defer_pandas()


def _parse_where(text: str | None) -> Any:
    if text is None:
        return None
    from spark_mergetree.errors import ExpressionError, UnsupportedError
    from spark_mergetree.expressions.predicate import parse_predicate

    try:
        return parse_predicate(text)
    except (ExpressionError, UnsupportedError) as error:
        raise InvalidOptionError(f"option 'where': {error}") from None


class MergeTreeDataSource(DataSource):
    """`spark.read.format("mergetree")` / `df.write.format("mergetree")` (see docs/spark.md)."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def _read_options(self) -> tuple[ReadOptions, TableRef]:
        from spark_mergetree.spark.streaming_source import without_stream_options

        # schema() serves readStream too, whose own options (streaming_source.py) it leaves alone.
        opts = ReadOptions.parse(without_stream_options(self.options))
        ref = adapter.resolve(opts.path, opts.catalog, opts.create_statement, opts.coordinator, opts.storage)
        adapter.check_snapshot(ref, opts.snapshot)
        adapter.check_transaction(ref, opts.transaction)
        return opts, ref

    def schema(self) -> StructType:
        from spark_mergetree.spark import sql_catalog

        if sql_catalog.is_call(self.options):  # the SQL catalog plugin asking Python (spark/sql_catalog.py)
            return sql_catalog.answer(self.options)
        opts, ref = self._read_options()
        arrow = adapter.table_schema(ref)
        if opts.columns is not None:
            missing = [name for name in opts.columns if arrow.get_field_index(name) < 0]
            if missing:
                raise InvalidOptionError(f"option 'columns' names {missing}, not in {ref.describe()}; "
                                         f"columns: {arrow.names}")
            arrow = pa.schema([arrow.field(name) for name in opts.columns])
        return spark_schema(arrow)

    def reader(self, schema: StructType) -> DataSourceReader:
        from spark_mergetree.spark.streaming_source import refuse_stream_options

        refuse_stream_options(self.options)
        scan, schema = _scan_marker(schema)
        schema, unscaled = unscaled_columns(schema)
        opts, ref = self._read_options()
        table_arrow = adapter.table_schema(ref)
        check_readable_columns(table_arrow, schema)
        if opts.columns is not None:
            outside = [f.name for f in schema.fields if f.name not in opts.columns]
            if outside:
                raise InvalidOptionError(f"the read schema names {outside}, which option 'columns' leaves out")
        where = _parse_where(opts.where)
        if where is not None:
            adapter.check_where(ref, where)
        if scan is None:
            _say_once(ENABLE_HINT)
        if scan == "pushdown" and opts.pushdown:
            return MergeTreePushdownReader(ref, opts, schema, where, table_arrow, unscaled)
        return MergeTreeReader(ref, opts, schema, where, table_arrow, unscaled)

    def writer(self, schema: StructType, overwrite: bool) -> MergeTreeWriter:
        opts = WriteOptions.parse(self.options, overwrite)
        ref, table_arrow = prepare_write(opts, schema)
        tag = uuid.uuid4().hex
        adapter.start_job(ref, tag, opts.transaction)
        return MergeTreeWriter(ref, table_arrow, "overwrite" if overwrite else "append", tag,
                               opts.stage_rows, opts.partition_overwrite_mode, opts.transaction)

    def streamWriter(self, schema: StructType, overwrite: bool) -> Any:  # noqa: N802 - the API's name
        """`df.writeStream.format("mergetree")`: spark/streaming_sink.py. Every option is checked
        before a table is created."""
        from spark_mergetree.spark.streaming_sink import MergeTreeStreamWriter, stream_options

        opts = stream_options(self.options, overwrite)
        ref, table_arrow = prepare_write(opts, schema)
        return MergeTreeStreamWriter(ref, table_arrow, opts.stage_rows)

    def streamReader(self, schema: StructType) -> Any:  # noqa: N802 - the API's name
        """`spark.readStream.format("mergetree")`: spark/streaming_source.py, which reads each
        micro-batch's parts with this module's reader. Every option is checked here."""
        from spark_mergetree.errors import UnsupportedError
        from spark_mergetree.spark.streaming_source import MergeTreeStreamReader, StreamOptions

        stream = StreamOptions.parse(self.options)
        _, schema = _scan_marker(schema)
        opts, ref = self._read_options()
        if ref.in_object_store:
            raise UnsupportedError(f"readStream.format('mergetree'): {ref.describe()} is in object storage, whose "
                                   "log the stream source does not follow yet; stream from a table on a file system")
        if not adapter.table_exists(ref):
            raise TableNotFoundError(f"readStream.format('mergetree'): {ref.describe()} does not exist")
        table_arrow = adapter.table_schema(ref)
        check_readable_columns(table_arrow, schema)
        where = _parse_where(opts.where)
        if where is not None:
            adapter.check_where(ref, where)
        return MergeTreeStreamReader(ref, stream, MergeTreeReader(ref, opts, schema, where, table_arrow),
                                     stream_partitions)


def prepare_write(opts: WriteOptions, schema: StructType) -> tuple[TableRef, pa.Schema]:
    """The table a write goes to, created if absent, its columns added if `merge_schema` says so,
    and the columns the write's batches carry. Every option and the DataFrame's schema are checked
    before a table is created."""
    ref = adapter.resolve(opts.path, opts.catalog, opts.create_statement, opts.coordinator, opts.storage)
    adapter.check_transaction(ref, opts.transaction)
    table_options = (opts.order_by, opts.partition_by, opts.primary_key, opts.settings)
    if not adapter.table_exists(ref):
        non_nullable = key_columns(opts.order_by, opts.partition_by, opts.primary_key) & set(schema.fieldNames())
        columns = clickhouse_columns(schema, non_nullable)
        _check_storable(schema, columns, adapter.new_table_schema(columns, *table_options, engine=opts.engine))
        ref = adapter.create_table(ref, columns, *table_options, opts.catalog, engine=opts.engine,
                                   projections=opts.projections)
    # Also after a create: a concurrent first writer may have created the table differently.
    adapter.check_table_options(ref, *table_options, engine=opts.engine)
    table_arrow = _written_schema(ref, schema)
    new_columns = check_writable(table_arrow, schema, opts.merge_schema)
    if new_columns:
        subset = StructType([schema[name] for name in new_columns])
        adapter.add_columns(ref, clickhouse_columns(subset, set()))
        table_arrow = _written_schema(ref, schema)
    return ref, table_arrow


def _check_storable(schema: StructType, columns: list[tuple[str, str]], table_arrow: pa.Schema) -> None:
    """A new table's columns must read back as the DataFrame's types: SchemaMismatchError naming the
    first column whose Spark type has no ClickHouse type of its own (a VARIANT would become a
    Tuple of its two binary parts) and saying what to write instead."""
    ch_types = dict(columns)
    for spark_field in schema.fields:
        table_field = table_arrow.field(spark_field.name)
        try:
            check_writable(pa.schema([table_field]), StructType([spark_field]), False)
        except SchemaMismatchError:
            name, simple = spark_field.name, spark_field.dataType.simpleString()
            advice = (f"write JSON text instead, e.g. to_json({name}) AS {name}, which is stored as String"
                      if simple == "variant" else f"cast {name} to a type the table can hold")
            raise SchemaMismatchError(
                f"column {name!r} of Spark type {simple} cannot be stored in a new MergeTree table: it would be "
                f"stored as {ch_types[name]} and read back as {spark_type(table_field.type, name).simpleString()}; "
                f"{advice}") from None


def _written_schema(ref: adapter.TableRef, incoming: StructType) -> pa.Schema:
    """The table's columns a write's batches carry: all but those the DataFrame leaves out that have
    a DEFAULT or MATERIALIZED expression, which the engine computes as ClickHouse's INSERT does."""
    left_out = adapter.defaulted_columns(ref) - set(incoming.fieldNames())
    return pa.schema([f for f in adapter.table_schema(ref) if f.name not in left_out])


# ------------------------------------------------------------------------------------------ read

# Field metadata the session extension (jvm/src) puts on the schema of every scan it gave a plan of
# its own: "pushdown" when Spark pushes filters to Python in that query, "scan" when it does not.
SCAN_MARKER = "spark_mergetree.scan"


def _scan_marker(schema: StructType) -> tuple[str | None, StructType]:
    """The extension's marker of a read schema (None without the extension), and the schema without it."""
    marks = {field.metadata.get(SCAN_MARKER) for field in schema.fields}
    if marks == {None} or not marks:
        return None, schema
    fields = [StructField(field.name, field.dataType, field.nullable,
                          {key: value for key, value in field.metadata.items() if key != SCAN_MARKER} or None)
              for field in schema.fields]
    mark = next(iter(marks - {None}))
    return (mark if mark in ("pushdown", "scan") else None), StructType(fields)



class MergeTreePartition(InputPartition):
    """One input partition: read tasks (granule ranges of parts) and the parts the plan covers."""

    def __init__(self, index: int, tasks: list[Any], parts: adapter.PartSets) -> None:
        super().__init__(index)
        self.index = index
        self.tasks = tasks
        self.parts = parts


class MergeTreeReader(DataSourceReader):
    """Plans input partitions on the driver and reads them as Arrow batches on executors.

    It defines no pushFilters (see the module doc): the plan it makes is right for every scan of
    the loaded DataFrame, whatever filters each scan has.
    """

    def __init__(self, ref: TableRef, opts: ReadOptions, schema: StructType, where: Any,
                 table_arrow: pa.Schema | None = None, unscaled: frozenset[str] = frozenset()) -> None:
        self.ref = ref
        # Decimal columns Spark takes as their unscaled longs (the session extension's fast path).
        self.unscaled = unscaled
        # The table's columns that are or hold Dynamic and JSON values, marked (spark/types.py mark_objects).
        self.objects = pa.schema([f for f in table_arrow or () if object_type(f) is not None])
        self.opts = opts
        self.schema = schema
        self.columns = schema.fieldNames()
        self.target = spark_arrow_schema(schema)
        self.where = where
        self.pushed: Any = None  # the filters Spark pushed, as a predicate that prunes granules
        self.target_rows = opts.target_rows or _target_rows(schema)

    def pruneColumns(self, requiredSchema: StructType) -> StructType:  # noqa: N802, N803 - the API's names
        """Read only the columns a query uses, where the engine running the query offers them
        (SPARK-51713's reader API: Sail calls it; no PySpark 4.0–4.3 release does, the session
        extension narrows the schema instead). Whole top-level columns, in the order asked; when no
        column is asked for (`count(*)`), the narrowest one, as a reader of no columns would return
        no rows. Returns the schema `read()` then yields."""
        unknown = [name for name in requiredSchema.fieldNames() if name not in self.columns]
        if unknown:
            raise InvalidOptionError(f"pruneColumns asks for {unknown}, not in the read schema {self.columns} "
                                     f"of {self.ref.describe()}")
        names = requiredSchema.fieldNames() or [min(self.columns, key=lambda name: _row_bytes(
            spark_arrow_schema(StructType([self.schema[name]]))))]
        pruned = StructType([self.schema[name] for name in names])
        self.schema, self.columns, self.target = pruned, names, spark_arrow_schema(pruned)
        self.target_rows = self.opts.target_rows or _target_rows(pruned)
        return pruned

    def partitions(self) -> list[InputPartition]:
        parts = adapter.part_sets(self.ref, self.opts.snapshot, self.opts.transaction)
        prune = self.where if self.pushed is None else adapter.conjunction(self.where, self.pushed)
        if self.opts.final:  # one input partition per group of rows FINAL merges together (engine final_tasks)
            return [MergeTreePartition(i, tasks, parts)
                    for i, tasks in enumerate(adapter.final_tasks(self.ref, parts, prune))]
        explicit = self.opts.target_rows is not None
        # Big parts are cut into tasks of a share of the rows (so one part feeds every core); the
        # tasks are then packed into partitions of about `target_rows` rows, counting a cost for
        # every part opened.
        split_rows = _balanced_target(self.target_rows, adapter.visible_rows(self.ref, parts), explicit)
        planned = adapter.plan(self.ref, self.columns, prune, split_rows, parts, self.opts.use_projections)
        open_rows = max(1, OPEN_COST_BYTES // _row_bytes(self.target))
        shares = _pack(planned.tasks, parts, self.target_rows, open_rows, None if explicit else _cores())
        return [MergeTreePartition(i, share, parts) for i, share in enumerate(shares)]

    def read(self, partition: MergeTreePartition) -> Iterator[pa.RecordBatch]:  # type: ignore[override]
        _freeze_worker_heap(self.ref)
        txn = adapter.txn_for_task(self.opts.transaction)
        visible = adapter.visible_for_task(self.ref, partition.parts, txn)
        tasks = adapter.tasks_in_view(self.ref, [task for task in partition.tasks if task.part in visible],
                                      partition.parts, txn)
        # Batches of small parts are handed over together: Spark pays per batch, not per row only.
        pending: list[pa.RecordBatch] = []
        pending_rows = 0
        batches = (adapter.read_final(self.ref, tasks, self.columns, self.where) if self.opts.final
                   else adapter.read(self.ref, tasks, self.columns, self.where))
        for batch in batches:
            if not batch.num_rows:
                continue
            pending.append(batch)
            pending_rows += batch.num_rows
            if pending_rows >= _BATCH_ROWS:
                yield self._handed(_combined(pending))
                pending, pending_rows = [], 0
        if pending:
            yield self._handed(_combined(pending))

    def _handed(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """A batch as Spark takes it: the read schema's types, decimals read as longs as longs."""
        conformed = conform_batch(batch, self.target, self.objects)
        unscaled = self.unscaled.intersection(self.columns) if self.unscaled else self.unscaled
        return with_unscaled(conformed, unscaled) if unscaled else conformed


def stream_partitions(reader: MergeTreeReader, tasks: list[Any], parts: adapter.PartSets) -> list[InputPartition]:
    """The input partitions of a micro-batch's read tasks (spark/streaming_source.py), packed as a
    batch read's are, for `reader`'s columns."""
    open_rows = max(1, OPEN_COST_BYTES // _row_bytes(reader.target))
    shares = _pack(tasks, parts, reader.target_rows, open_rows, None)
    return [MergeTreePartition(i, share, parts) for i, share in enumerate(shares) if share]


# Rows per batch handed to Spark when parts are smaller than that.
_BATCH_ROWS = 1 << 16

def _combined(batches: list[pa.RecordBatch]) -> pa.RecordBatch:
    if len(batches) == 1:
        return batches[0]
    return pa.Table.from_batches(batches).combine_chunks().to_batches()[0]


class MergeTreePushdownReader(MergeTreeReader):
    """The reader of a scan with a plan of its own (the session extension made it): the filters
    Spark pushes prune partitions and granules. All of them go back to Spark, which applies them to
    the rows: a filter only ever narrows which granules are read."""

    def pushFilters(self, filters: list[Any]) -> Iterator[Any]:
        # PySpark 4.1+ only (4.0 has no Filter classes and never pushes filters to Python).
        from spark_mergetree.spark.filters import to_predicate

        filters = list(filters)
        self.pushed = adapter.usable_predicate(self.ref, to_predicate(filters, adapter.table_schema(self.ref)))
        return iter(filters)


_said: set[str] = set()


def _say_once(message: str) -> None:
    """Print a hint once per process (Python workers pass their stderr on to Spark's log)."""
    if message not in _said:
        _said.add(message)
        print(f"spark_mergetree: {message}", file=sys.stderr, flush=True)


def _row_bytes(arrow: pa.Schema) -> int:
    """Estimated bytes of one row of the columns read (strings and nested values: 32)."""
    total = 0
    for field in arrow:
        try:
            total += max(1, field.type.bit_width // 8)
        except ValueError:  # variable width: strings, binaries, nested values
            total += 32
    return max(1, total)


def _target_rows(schema: StructType) -> int:
    """Rows per input partition: ~128 MiB of the columns read, between 64 Ki and 16 Mi rows.

    Every Python task costs Spark a fixed ~0.1 s, so partitions should be big; the byte target
    keeps them as big as Spark's own file splits.
    """
    return max(1 << 16, min(1 << 24, DEFAULT_TARGET_BYTES // _row_bytes(spark_arrow_schema(schema))))


def _cores() -> int:
    return max(2, os.cpu_count() or 2)


def _balanced_target(target_rows: int, total_rows: int, explicit: bool) -> int:
    """Rows per partition such that the partitions come in whole waves over the cores: a 10M-row
    one-column read must not run as one task on one core, nor five tasks on two cores."""
    if explicit or total_rows <= 0:
        return target_rows
    count = max(1, -(-total_rows // target_rows))
    count = -(-count // _cores()) * _cores()
    return max(1 << 16, -(-total_rows // count))


def _pack(tasks: list[Any], parts: adapter.PartSets, target_rows: int, open_rows: int,
          cores: int | None) -> list[list[Any]]:
    """Input partitions of read tasks, as Spark packs small files into splits: each task costs its
    rows plus `open_rows` (opening a part, like spark.sql.files.openCostInBytes), and the tasks,
    in order, are cut into as many partitions as `target_rows` of cost needs, rounded up to whole
    waves over `cores` (None: `target_rows` was given explicitly), each of an equal share of the cost.
    Hundreds of small parts then make a few partitions, not a Python task each. Tasks of parts only
    a transaction may see ride along (outside transactions they are skipped, so they must not cost
    partitions of their own)."""
    visible = [task for task in tasks if task.part in parts.visible]
    others = [task for task in tasks if task.part not in parts.visible]
    shares: list[list[Any]] = []
    if visible:
        costs = np.array([task.rows + open_rows for task in visible], np.float64)
        total = float(costs.sum())
        count = max(1, math.ceil(total / max(1, target_rows)))
        if cores is not None:
            count = -(-count // cores) * cores
        # A task goes to the share its cost's midpoint falls in: contiguous, balanced, `count` at most.
        middles = np.cumsum(costs) - costs / 2
        bins = np.minimum(count - 1, (middles * count / total).astype(np.int64))
        for share in np.split(np.arange(len(visible)), np.flatnonzero(np.diff(bins)) + 1):
            shares.append([visible[i] for i in share.tolist()])
    shares = shares or [[]]
    for position, task in enumerate(others):
        shares[position % len(shares)].append(task)
    return shares


# ----------------------------------------------------------------------------------------- write


@dataclass
class MergeTreeCommitMessage(WriterCommitMessage):
    partition_id: int
    attempt: int
    staged: list[Any]
    txn: TxnContext | None
    coordinator: str | None = None  # the session's (conf COORDINATOR_CONF), when the options name none


class MergeTreeWriter(DataSourceArrowWriter):
    def __init__(self, ref: TableRef, table_arrow: pa.Schema, mode: str, tag: str, stage_rows: int,
                 partition_overwrite_mode: str = "static", txn: TxnContext | None = None) -> None:
        self.ref = ref
        self.txn = txn  # the `transaction` option (the session conf reaches only the tasks)
        self.stage_rows = stage_rows
        self.table_arrow = table_arrow
        self.mode = mode
        self.partition_overwrite_mode = partition_overwrite_mode
        self.tag = tag  # names every tmp part of this job, so abort() and commit() can find leftovers

    def write(self, iterator: Iterator[pa.RecordBatch]) -> MergeTreeCommitMessage:
        from pyspark import TaskContext

        _freeze_worker_heap(self.ref)
        context = TaskContext.get()
        assert context is not None, "write() runs in a Spark task"
        txn = adapter.txn_for_task(self.txn)
        ref = adapter.session_coordinator_for_task(self.ref)
        staged = stage_batches(ref, self.table_arrow, self.stage_rows, self.tag, iterator)
        return MergeTreeCommitMessage(context.partitionId(), context.attemptNumber(), staged, txn, ref.coordinator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        chosen: dict[int, MergeTreeCommitMessage] = {}
        for message in messages:
            if isinstance(message, MergeTreeCommitMessage) and message.partition_id not in chosen:
                chosen[message.partition_id] = message
        contexts = {message.txn for message in chosen.values()} | ({self.txn} if self.txn else set())
        if len(contexts) > 1:
            raise TransactionError(f"tasks of one write disagree on the transaction: {sorted(map(str, contexts))}")
        txn = next(iter(contexts), None)
        ref = self._ref_of(chosen.values())
        staged = [part for message in chosen.values() for part in message.staged]
        try:
            adapter.commit(ref, staged, self.mode, txn, self.partition_overwrite_mode)
        except BaseException:
            adapter.discard(ref, self.tag)
            raise
        # The job is over: ending it drops what failed, duplicate or killed attempts staged under its
        # tag (and their unfinished tmp_ directories), and what a late attempt stages after this.
        adapter.discard(ref, self.tag, keep=staged)

    def _ref_of(self, messages: Iterable[MergeTreeCommitMessage]) -> TableRef:
        """The table's ref with the session's coordinator the tasks saw (the options' wins)."""
        return adapter.ref_with_tasks_coordinator(self.ref, (m.coordinator for m in messages), "one write")

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        adapter.discard(self.ref, self.tag)


def register(spark: Any) -> None:
    """Register format("mergetree") on a session.

    Sessions started after the package was installed find it by themselves (pyspark_mergetree);
    a session that was running before the install (a notebook's %pip) fails with
    DATA_SOURCE_NOT_FOUND until this is called once. Calling it again, or in a session that found
    the package by itself, changes nothing; it works on classic and Spark Connect sessions.
    """
    try:
        spark.dataSource.register(MergeTreeDataSource)
    except Exception as error:  # noqa: BLE001 - Spark's error class differs between classic and Connect
        # PySpark 4.0 refuses to register over a source it found by itself (4.1+ replaces it):
        # mergetree is registered either way, so a second call is harmless on every version.
        if "DATA_SOURCE_ALREADY_EXISTS" not in str(error):
            raise


__all__ = ["MergeTreeDataSource", "register", "TableNotFoundError"]

"""Every call the Spark layer makes into engine/, txn/ and catalog/, behind one small surface.

The DataSource classes never touch MergeTreeTable or a coordinator directly: they hold a picklable
`TableRef` (how any process reopens the table) and a picklable `TxnContext` (which transaction a
job runs in), and call the functions here. Keeping the engine contract in one module keeps the rest
of the connector independent of how the engine spells things.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import pyarrow as pa

from spark_mergetree.errors import (
    ExpressionError,
    InvalidOptionError,
    MergeTreeError,
    SchemaMismatchError,
    TableNotFoundError,
    TransactionError,
    UnsupportedError,
)
from spark_mergetree.storage.object_store import is_object_url
from spark_mergetree.txn.table_log import table_dir_of

# How a Spark job learns its transaction. `transaction(spark)` sets this session conf where the
# session allows it; Spark hands `spark.*` session confs to every task as local properties (classic
# and Connect alike), but not to the planner nor to a write's commit(), so write tasks copy it into
# their commit messages. The read/write option `transaction` carries the same value explicitly, to
# the planner, every task and commit(): the way that works wherever confs are restricted.
TXN_CONF = "spark.mergetree.transaction"
TXN_OPTION = "transaction"
# The coordinator of writes that name none (`configure(builder, coordinator=...)` sets it, or
# `spark.conf.set`). Spark's Python processes are started with the driver JVM's environment, so a
# SPARK_MERGETREE_COORDINATOR set in the user's os.environ after the session started never reaches
# them; this session conf reaches the write tasks, which carry it to the job's commit().
COORDINATOR_CONF = "spark.mergetree.coordinator"


@dataclass(frozen=True)
class TableRef:
    """Enough to reopen a table in any process: its data directory and defining statement."""

    path: str
    create_statement: str | None = None
    coordinator: str | None = None
    name: str | None = None  # "db.table" when it came from a catalog (for messages)
    storage: tuple[tuple[str, str], ...] = ()  # endpoint/credentials of an object-store table

    def __post_init__(self) -> None:
        # A ref read back from JSON (a transaction's record of staged tables) has lists here; the
        # ref keys the per-process table cache, so it must stay hashable.
        object.__setattr__(self, "storage", tuple((str(key), str(value)) for key, value in self.storage))

    @property
    def in_object_store(self) -> bool:
        return is_object_url(self.path)

    def describe(self) -> str:
        return f"table {self.name} ({self.path})" if self.name else f"table at {self.path}"


@dataclass(frozen=True)
class TxnContext:
    """A running transaction as seen from Spark's processes: its coordinator, tid and snapshot."""

    coordinator: str
    tid: int
    snapshot: int

    @property
    def id(self) -> str:
        """The text of the option / session conf: `<tid>:<snapshot>:<coordinator url>`."""
        return f"{self.tid}:{self.snapshot}:{self.coordinator}"

    @classmethod
    def parse(cls, text: str | None, source: str = f"option {TXN_OPTION!r}") -> TxnContext | None:
        if text is None or not str(text).strip():
            return None
        tid, _, rest = str(text).strip().partition(":")
        snapshot, _, url = rest.partition(":")
        try:
            if not url:
                raise ValueError
            return cls(url, int(tid), int(snapshot))
        except ValueError:
            raise InvalidOptionError(
                f"{source}={text!r} is not a transaction id; give the `id` of spark_mergetree.transaction(spark) "
                "('<tid>:<snapshot>:<coordinator url>')") from None


def current_txn_from_task() -> TxnContext | None:
    """The transaction of the session that runs this task's job (its conf TXN_CONF), if any."""
    from pyspark import TaskContext

    context = TaskContext.get()
    if context is None:
        return None
    return TxnContext.parse(context.getLocalProperty(TXN_CONF), f"session conf {TXN_CONF!r}")


def session_coordinator_for_task(ref: TableRef) -> TableRef:
    """`ref` with the coordinator of the session that runs this task's job (conf COORDINATOR_CONF)
    when the options name none."""
    from pyspark import TaskContext

    context = TaskContext.get()
    url = context.getLocalProperty(COORDINATOR_CONF) if context is not None else None
    if ref.coordinator or not url or not url.strip():
        return ref
    from spark_mergetree.txn.connect import reachable_everywhere

    url = url.strip()
    if ref.in_object_store and not reachable_everywhere(url):
        # The session's coordinator is a default, as $SPARK_MERGETREE_COORDINATOR is: a local one
        # does not apply to a table in object storage, which then uses the one under its prefix.
        return ref
    return replace(ref, coordinator=url)


def ref_with_tasks_coordinator(ref: TableRef, seen: Iterable[str | None], job: str) -> TableRef:
    """On the driver, committing: `ref` with the session coordinator the tasks of `job` saw
    (`session_coordinator_for_task`, carried in their commit messages); the options' coordinator wins."""
    urls = {url for url in seen if url}
    if ref.coordinator or not urls:
        return ref
    if len(urls) > 1:
        raise TransactionError(f"tasks of {job} saw different coordinators in {COORDINATOR_CONF!r}: {sorted(urls)}")
    return replace(ref, coordinator=urls.pop())


def txn_for_task(explicit: TxnContext | None) -> TxnContext | None:
    """A task's transaction: the `transaction` option's, else its session's; they must agree."""
    return joined_txn(explicit, current_txn_from_task())


def joined_txn(explicit: TxnContext | None, session: TxnContext | None) -> TxnContext | None:
    """The transaction a job runs in: the explicitly named one, else its session's; they must agree."""
    if explicit is not None and session is not None and session != explicit:
        raise TransactionError(
            f"option {TXN_OPTION!r} names transaction {explicit.tid}, but the session runs inside transaction "
            f"{session.tid}: one job cannot belong to two transactions")
    return explicit if explicit is not None else session


def check_transaction(ref: TableRef, txn: TxnContext | None) -> None:
    """On the driver, before anything is written: the `transaction` option names a running
    transaction, of the coordinator the table is bound to."""
    if txn is None:
        return
    from spark_mergetree.txn import TxnState, coordinator_from_url

    state, csn = coordinator_from_url(txn.coordinator).status(txn.tid)
    if state is not TxnState.RUNNING:
        raise InvalidOptionError(
            f"option {TXN_OPTION!r}: transaction {txn.tid} is {state.value}"
            + (f" at csn {csn}" if csn is not None else "")
            + ": use the id of a transaction inside its `with` block")
    identity = _log_of(ref).identity() if ref.path else None
    if identity is not None and identity["coordinator"] != txn.coordinator:
        raise InvalidOptionError(
            f"option {TXN_OPTION!r}: {ref.describe()} is coordinated by {identity['coordinator']}, but "
            f"transaction {txn.tid} runs on {txn.coordinator}: a transaction cannot span coordinators")


# --------------------------------------------------------------------------------- opening tables


def _coordinator(url: str | None) -> Any:
    if not url:
        return None
    from spark_mergetree.txn import coordinator_from_url

    return coordinator_from_url(url)


def resolve(path: str, catalog: str | None, create_statement: str | None, coordinator: str | None,
            storage: tuple[tuple[str, str], ...] = ()) -> TableRef:
    """Turn the user's location options into a TableRef (a catalog name resolves to its directory).

    A catalog table that does not exist yet gets a TableRef with an empty path (a write creates it).
    """
    if catalog:
        from spark_mergetree.catalog.catalog import Catalog

        if create_statement:
            raise InvalidOptionError("options 'catalog' and 'create_statement' exclude each other: "
                                     "a catalog table's statement comes from the catalog")
        if "." not in path:
            raise InvalidOptionError(f"with option 'catalog', load()/save() takes '<database>.<table>', got {path!r}")
        if not (Path(catalog) / "metadata").is_dir():
            raise InvalidOptionError(
                f"option 'catalog': {catalog} is not a catalog root (it has no metadata/ directory); create one "
                f"first with spark_mergetree.Catalog({catalog!r}) or `mergetree catalog --root {catalog} "
                "create-database <db>`")
        try:
            info = Catalog(catalog).table_info(path)
        except TableNotFoundError:
            return TableRef("", None, coordinator, name=path)
        return TableRef(str(info.data_path), info.statement, coordinator, name=path)
    if is_object_url(path):
        if create_statement:
            raise InvalidOptionError(f"option 'create_statement' is not supported for a table in object storage ({path})")
        return TableRef(path, None, coordinator, storage=storage)
    return TableRef(str(Path(path).absolute()), create_statement, coordinator)


def table_exists(ref: TableRef) -> bool:
    if not ref.path:
        return False
    if ref.create_statement:
        return True
    from spark_mergetree.engine.table import MergeTreeTable

    try:
        MergeTreeTable.open(ref.path, coordinator=_coordinator(ref.coordinator), storage_options=dict(ref.storage))
    except TableNotFoundError:
        return False
    return True


_open_tables: dict[tuple[Any, ...], Any] = {}


def open_table(ref: TableRef) -> Any:
    """The table of `ref`, cached per process: Spark reuses Python workers across tasks, and parts
    (whose readers the table caches) never change once written. A new definition file (the table
    was dropped and created again) opens it afresh."""
    from spark_mergetree.engine.table import MergeTreeTable

    if not ref.path:
        raise TableNotFoundError(f"table {ref.name} does not exist in the catalog")
    try:
        stamp = None if ref.in_object_store else os.stat(os.path.join(ref.path, "_mergetree", "table.sql")).st_mtime_ns
    except OSError:
        stamp = None
    key = (ref.path, ref.create_statement, ref.coordinator, stamp, ref.storage)
    table = _open_tables.get(key)
    if table is None:
        table = MergeTreeTable.open(ref.path, create_statement=ref.create_statement,
                                    coordinator=_coordinator(ref.coordinator), storage_options=dict(ref.storage))
        if len(_open_tables) > 64:
            _open_tables.clear()
        _open_tables[key] = table
    return table


def create_table(ref: TableRef, columns: Sequence[tuple[str, str]], order_by: str | None,
                 partition_by: str | None, primary_key: str | None, settings: dict[str, str],
                 catalog: str | None, *, engine: str | None = None, projections: Sequence[str] = ()) -> TableRef:
    """Create the table a first write goes to (if_not_exists: concurrent first writers agree)."""
    engine_settings = dict(settings)
    order = order_by or "tuple()"
    if catalog and projections:
        raise UnsupportedError("option 'projections': tables of a catalog get projections from their CREATE statement, "
                               "not from a write")
    if catalog:
        from spark_mergetree.catalog.catalog import Catalog

        cat = Catalog(catalog)
        assert ref.name is not None
        cat.create_database(ref.name.partition(".")[0], if_not_exists=True)
        cat.define_table(ref.name, list(columns), order, partition_by, primary_key, engine_settings or None,
                         if_not_exists=True, engine=engine)
        info = cat.table_info(ref.name)
        return TableRef(str(info.data_path), info.statement, ref.coordinator, name=ref.name)
    from spark_mergetree.engine.table import MergeTreeTable

    MergeTreeTable.create(ref.path, list(columns), order, partition_by, primary_key, engine_settings or None,
                          if_not_exists=True, coordinator=_coordinator(ref.coordinator),
                          storage_options=dict(ref.storage), engine=engine, projections=projections)
    return ref


def new_table_schema(columns: Sequence[tuple[str, str]], order_by: str | None, partition_by: str | None,
                     primary_key: str | None, settings: dict[str, str], *, engine: str | None = None) -> pa.Schema:
    """The Arrow schema of the table a first write would create, after checking, before anything
    exists, everything its inserts will need: keys and settings parse as the engine reads them, and
    every sort and partition key can be computed over values of its columns' types."""
    from spark_mergetree.engine.metadata import TableMetadata, split_settings
    from spark_mergetree.expressions.ddl import build_definition

    clickhouse_settings, engine_settings = split_settings(settings)
    options = {"order_by": order_by, "partition_by": partition_by, "primary_key": primary_key, "engine": engine}
    try:
        definition = build_definition(columns, order_by or "tuple()", partition_by, primary_key, clickhouse_settings,
                                      engine=engine)
        metadata = TableMetadata(definition, engine_settings)
        _ = metadata.order_by, metadata.primary_key, metadata.partition_key, metadata.writer_settings
        _ = metadata.merging_engine
    except (ExpressionError, SchemaMismatchError) as error:
        given = ", ".join(f"option {key!r}={value!r}" for key, value in options.items() if value)
        raise InvalidOptionError(f"{given or 'a new table'}: {error}") from error
    try:
        metadata.validate_keys()
    except UnsupportedError as error:
        clause = str(error).split(":", 1)[0]
        option = {"ORDER BY": "order_by", "PRIMARY KEY": "primary_key", "PARTITION BY": "partition_by"}[clause]
        raise UnsupportedError(f"option {option!r}: {str(error).split(':', 1)[1].strip()}") from None
    from spark_mergetree.spark.types import mark_objects

    return mark_objects(metadata.arrow_schema, metadata.columns)


def check_table_options(ref: TableRef, order_by: str | None, partition_by: str | None, primary_key: str | None,
                        settings: dict[str, str], *, engine: str | None = None) -> None:
    """A write into an existing table cannot change its definition: every table-shaping option it
    gives must equal the table's (spelled any way), or the write is refused naming both."""
    from spark_mergetree.engine.metadata import ENGINE_SETTINGS, validate_engine_settings
    from spark_mergetree.expressions.ddl import build_definition, check_settings, engine_text
    from spark_mergetree.format.granularity import DEFAULT_INDEX_GRANULARITY

    table = open_table(ref)
    definition = table.definition
    columns = table.metadata.columns

    def refuse(option: str, given: object, table_value: object) -> None:
        current = "(not set)" if table_value is None else repr(table_value)
        raise InvalidOptionError(
            f"option {option!r}={given!r} differs from the table's {current} ({ref.describe()}): a write "
            "cannot change an existing table; leave the option out or give the table's value")

    def parsed(option: str, text: str) -> tuple[str, ...]:
        try:
            if option == "partition_by":
                return _spelling((build_definition(columns, None, text).partition_by or "",))
            return _spelling(build_definition(columns, text).order_by)
        except (ExpressionError, SchemaMismatchError) as error:
            raise InvalidOptionError(f"option {option!r}={text!r}: {error}") from error

    if engine is not None:
        try:
            given_engine = engine_text(build_definition(columns, None, engine=engine))
        except (ExpressionError, SchemaMismatchError) as error:
            raise InvalidOptionError(f"option 'engine'={engine!r}: {error}") from error
        if given_engine.replace(" ", "") != engine_text(definition).replace(" ", ""):
            refuse("engine", engine, engine_text(definition))
    keys = {"order_by": (order_by, definition.order_by), "primary_key": (primary_key, definition.primary_key),
            "partition_by": (partition_by, (definition.partition_by or "",))}
    for option, (given, current) in keys.items():
        if given is not None and parsed(option, given) != _spelling(current):
            refuse(option, given, ", ".join(current) or ("tuple()" if option != "partition_by" else None))
    for name, value in settings.items():
        option = name if name in ("codec", "index_granularity") else f"setting.{name}"
        if name in ENGINE_SETTINGS:
            if validate_engine_settings({name: value})[name] != table.metadata.setting(name):
                refuse(option, value, table.metadata.setting(name))
            continue
        current = definition.settings.get(name)
        if current is None and name == "index_granularity":
            current = str(DEFAULT_INDEX_GRANULARITY)
        # Compared in the canonical form the statement stores (true → 1, 08192 → 8192).
        if check_settings({name: value})[name] != current:
            refuse(option, value, current)


def _spelling(elements: Sequence[str]) -> tuple[str, ...]:
    """Key elements without the spacing and backquotes that do not change their meaning."""
    return tuple(element.replace("`", "").replace(" ", "") for element in elements)


def check_snapshot(ref: TableRef, snapshot: int | None) -> None:
    """A snapshot must be one the table's coordinator has reached: a later one would read "now"
    and then, as commits arrive, other rows."""
    if snapshot is None:
        return
    latest = open_table(ref).coordinator.current_timestamp()
    if snapshot > latest:
        raise InvalidOptionError(
            f"option 'snapshot'={snapshot} is beyond the latest commit sequence number of {ref.describe()}'s "
            f"coordinator, {latest}: a snapshot must be a commit that has happened")


def add_columns(ref: TableRef, columns: Sequence[tuple[str, str]]) -> None:
    table = open_table(ref)
    add = getattr(table, "add_columns", None)
    if add is None:
        raise UnsupportedError(
            f"merge_schema=true: the engine cannot add columns {[name for name, _ in columns]} to "
            f"{ref.describe()} yet; write only the table's columns"
        )
    add(list(columns))


# --------------------------------------------------------------------------------------- reading


@dataclass(frozen=True)
class PartSets:
    """The parts a read plan covers (`known`) and the parts visible at planning time (`visible`).

    A read given the `transaction` option plans exactly that transaction's view. Otherwise planning
    cannot tell whether the query runs inside a transaction (the session conf reaches tasks only),
    so it covers every part the table's log names (also in pending entries and staged proposals);
    each task then keeps the parts visible to it: `visible` outside a transaction, the
    transaction's view inside. A read at an explicit `snapshot` (`time_travel`) reads that
    snapshot, inside a transaction too.
    """

    snapshot: int | None
    visible: frozenset[str]
    known: frozenset[str]
    time_travel: bool = False


@dataclass(frozen=True)
class PlannedRead:
    tasks: list[Any]  # engine ReadTasks (picklable; `.part` names the part)
    granules_total: int
    granules_read: int


def part_sets(ref: TableRef, snapshot: int | None = None, txn: TxnContext | None = None) -> PartSets:
    table = open_table(ref)
    if txn is not None and snapshot is None and table.log.identity() is not None:
        view = frozenset(visible_in_transaction(table.log, txn))
        return PartSets(txn.snapshot, view, view)
    csn, visible = table.visible_parts(snapshot=snapshot)
    known = set(visible)
    if table.log.identity() is not None and snapshot is None:
        _, versions = table.log.versions(None)
        known.update(versions)
        for entry in table.log.entries():
            known.update(entry.added)
        for _, proposal in table.log.staged():
            known.update(proposal.added)
        known = {name for name in known if name in visible or table.store.exists(name)}
    return PartSets(csn, frozenset(visible), frozenset(known), time_travel=snapshot is not None)


def visible_rows(ref: TableRef, parts: PartSets) -> int:
    table = open_table(ref)
    return sum(table.reader(name).rows for name in parts.visible)


def plan(ref: TableRef, columns: list[str], where: Any, target_rows: int, parts: PartSets,
         use_projections: bool = True) -> PlannedRead:
    table = open_table(ref)
    read_plan = table.plan_read(columns, where, parts=set(parts.known), snapshot=parts.snapshot,
                                target_rows=target_rows, use_projections=use_projections)
    counted = [p for p in read_plan.parts if p.part in parts.visible]
    return PlannedRead(list(read_plan.tasks), sum(p.granules for p in counted),
                       sum(p.granules_read for p in counted))


def final_tasks(ref: TableRef, parts: PartSets, where: Any) -> list[list[Any]]:
    """The read tasks of a FINAL read over the parts a plan covers, in groups merged together."""
    return open_table(ref).final_tasks(where, parts=set(parts.known), snapshot=parts.snapshot)


def read_final(ref: TableRef, tasks: Sequence[Any], columns: list[str], where: Any) -> Iterator[pa.RecordBatch]:
    """Batches of one table partition's rows as `SELECT ... FINAL` returns them."""
    table = open_table(ref)
    if ref.name is None:
        yield from table.read_final(tasks, columns, where).to_batches()
        return
    from spark_mergetree.catalog.leases import ReaderLease

    with ReaderLease(ref.name, Path(ref.path)):
        yield from table.read_final(tasks, columns, where).to_batches()


def check_where(ref: TableRef, where: Any) -> None:
    """Bind the `where` option on the driver so a bad column or constant fails before any task."""
    from spark_mergetree.engine.select import bind_where

    table = open_table(ref)
    try:
        bind_where(where, table.metadata.column_types)
    except Exception as error:  # noqa: BLE001 - any binding failure is a bad option value
        raise InvalidOptionError(f"option 'where': {error}") from error


def conjunction(left: Any, right: Any) -> Any:
    """AND of two predicates, either of which may be None (no condition)."""
    if left is None or right is None:
        return right if left is None else left
    from spark_mergetree.expressions.predicate import And

    return And((left, right))


def usable_predicate(ref: TableRef, predicate: Any) -> Any:
    """`predicate` (translated from Spark's pushed filters) if it binds to the table, else None:
    such a predicate only prunes, so one the engine cannot use is simply not used."""
    if predicate is None:
        return None
    from spark_mergetree.engine.select import bind_where

    try:
        bind_where(predicate, open_table(ref).metadata.column_types)
    except Exception:  # noqa: BLE001 - pruning is optional; Spark applies every filter anyway
        return None
    return predicate


def visible_for_task(ref: TableRef, parts: PartSets, txn: TxnContext | None) -> frozenset[str]:
    """The parts one read task may return: the planning snapshot's, or its transaction's view."""
    if txn is None or parts.time_travel:
        return parts.visible
    table = open_table(ref)
    if table.log.identity() is None:
        return parts.visible
    visible = frozenset(visible_in_transaction(table.log, txn))
    unplanned = visible - parts.known
    if unplanned:
        raise TransactionError(
            f"{ref.describe()}: transaction {txn.tid} sees parts {sorted(unplanned)[:5]} that did not exist when "
            "this DataFrame was planned; load it again inside the transaction")
    return visible


def tasks_in_view(ref: TableRef, tasks: Sequence[Any], parts: PartSets, txn: TxnContext | None) -> list[Any]:
    """A task's read tasks with the lightweight UPDATEs its view applies: inside a transaction, those
    committed before its snapshot (engine `patches_at`), not the planning snapshot's."""
    if txn is None or parts.time_travel:
        return list(tasks)
    table = open_table(ref)
    if table.log.identity() is None:
        return list(tasks)
    patches = table.patches_at(txn.snapshot)
    return [replace(task, patches=patches.for_part(task.part) if patches else ()) for task in tasks]


def read(ref: TableRef, tasks: Sequence[Any], columns: list[str], where: Any) -> Iterator[pa.RecordBatch]:
    """Batches of read tasks (of any parts of the table), in order."""
    table = open_table(ref)
    if ref.name is None:
        # Decoding of the next chunk overlaps with Spark taking the current one.
        yield from table.iter_tasks(tasks, columns, where)
        return
    from spark_mergetree.catalog.leases import ReaderLease

    # A catalog table: hold its data directory (by UUID, not by name) while reading, so a DROP
    # ... SYNC in another process waits for this task instead of deleting under it.
    with ReaderLease(ref.name, Path(ref.path)):
        yield from table.iter_tasks(tasks, columns, where)


def table_schema(ref: TableRef) -> pa.Schema:
    """The table's Arrow schema, its Dynamic and JSON columns marked (spark/types.py OBJECT_MARK)."""
    from spark_mergetree.spark.types import mark_objects

    table = open_table(ref)
    return mark_objects(table.schema, table.metadata.columns)


def defaulted_columns(ref: TableRef) -> set[str]:
    """Columns a write may leave out: the engine fills them (DEFAULT/MATERIALIZED expressions, NULL)."""
    from spark_mergetree.engine import insert as inserting

    return set(inserting.defaulted_columns(open_table(ref).metadata))


# --------------------------------------------------------------------------------------- writing


def start_job(ref: TableRef, tag: str, txn: TxnContext | None) -> None:
    """On the driver, as a write job begins: register it with a lease its driver holds while it
    runs (txn/job_lease.py), at the transaction's coordinator or the table's, so cleanup keeps what
    its tasks stage for exactly as long as the job can still publish it (in object storage, the
    uploads its tasks record in the table's `_mergetree/jobs/`)."""
    from spark_mergetree.txn import job_lease

    table = open_table(ref)
    url = txn.coordinator if txn is not None else table.coordinator.url
    job_lease.start(table.log.table_dir, url, tag, wait=False, storage_options=getattr(table, "storage_options", None))


def stage(ref: TableRef, data: pa.Table, tag: str) -> list[Any]:
    return list(open_table(ref).stage(data, tag))


def commit(ref: TableRef, staged: list[Any], mode: str, txn: TxnContext | None,
           partition_overwrite_mode: str = "static") -> list[str]:
    """Make a job's staged parts visible (or, inside a transaction, staged for its owner to adopt)."""
    table = open_table(ref)
    if txn is None:
        return list(table.commit_staged(staged, mode=mode, partition_overwrite_mode=partition_overwrite_mode))
    _check_coordinator_of_transaction(ref, table, txn)
    job = _JobTransaction(txn)
    # Recorded first, so the owner finds every proposal this job writes (refused once it ended).
    job.coordinator.add_staged_table(txn.tid, json.dumps(asdict(ref), sort_keys=True))
    try:
        names = list(table.commit_staged(staged, mode=mode, partition_overwrite_mode=partition_overwrite_mode,
                                         transaction=job))
        job.flush()
        job.check_still_running()
    except BaseException:
        job.withdraw()
        raise
    return names


def commit_batch(ref: TableRef, staged: list[Any], app_version: tuple[str, int]) -> bool:
    """Append a streaming micro-batch's staged parts in one commit that also records
    `app_version` (query id, batch id) in the table's log; False (nothing published, the staged
    parts deleted) if the log holds that batch already: a replay after a crash."""
    from spark_mergetree.errors import AlreadyCommittedError

    try:
        open_table(ref).commit_staged(staged, mode="append", app_version=app_version)
    except AlreadyCommittedError:
        return False
    return True


def _check_coordinator_of_transaction(ref: TableRef, table: Any, txn: TxnContext) -> None:
    """A job of a transaction on another coordinator than the table's is refused, saying how the
    table came to be bound to the other one and what to do."""
    identity = table.log.identity() if not ref.in_object_store else None
    bound = identity["coordinator"] if identity is not None else None
    if bound is None or bound == txn.coordinator:
        return
    from spark_mergetree.txn import COORDINATOR_ENV

    raise TransactionError(
        f"{ref.describe()} is coordinated by {bound}, but transaction {txn.tid} runs on {txn.coordinator}: a "
        f"transaction cannot span coordinators. Spark's processes take their default coordinator from the "
        f"environment the Spark driver started with (${COORDINATOR_ENV}, else ~/.spark_mergetree/coordinator), "
        f"not from os.environ changed after the SparkSession started, so a write outside a transaction may have "
        f"bound the table to that default. Name the coordinator of every write: "
        f"spark_mergetree.configure(SparkSession.builder, coordinator=url), spark.conf.set({COORDINATOR_CONF!r}, "
        f"url) or .option('coordinator', url), or set ${COORDINATOR_ENV} before the session starts; this table "
        f"stays on its coordinator: open its transactions with transaction(spark, coordinator={bound!r})")


def discard(ref: TableRef, tag: str, keep: Iterable[Any] = ()) -> None:
    open_table(ref).discard_staged(tag, keep=tuple(part.name for part in keep))


# ---------------------------------------------------------------------------------- transactions
#
# The user's process owns the transaction (txn.Transaction: it holds the coordinator's liveness of
# the tid). A job's commit() runs in another Spark process, so it works through `_JobTransaction`,
# a stand-in with the Transaction methods the engine calls, which stages each change as a proposal
# in the table's log for the tid (naming new parts there before they are renamed into place, under
# the table's commit lock) after recording the table at the coordinator. That is the one channel:
# read tasks of the transaction see its proposals, and the owner adopts them when it commits.


class _JobTransaction:
    """One job's changes in a transaction another process owns, seen through the Transaction interface."""

    def __init__(self, txn: TxnContext) -> None:
        from spark_mergetree.txn import coordinator_from_url

        self.context = txn
        self.coordinator = coordinator_from_url(txn.coordinator)
        self.state = "running"
        self._removed: dict[Path | str, list[str]] = {}  # removals not written into a proposal yet
        self._logs: dict[Path | str, Any] = {}  # table directory -> its TableLog
        self._proposals: list[tuple[Any, Path]] = []  # (table log, proposal file)

    @property
    def tid(self) -> int:
        return self.context.tid

    @property
    def snapshot(self) -> int:
        return self.context.snapshot

    def visible_parts(self, table: Any) -> set[str]:
        key = table_dir_of(table)
        return visible_in_transaction(self._log(table), self.context) - set(self._removed.get(key, ()))

    def remove_parts(self, table: Any, names: Iterable[str]) -> None:
        self._removed.setdefault(table_dir_of(table), []).extend(names)

    def add_parts(self, table: Any, names: Iterable[str]) -> None:
        """Name new parts (with the removals so far) in a proposal now: the engine calls this under
        the table's commit lock, before the directories get these names."""
        self._stage(self._log(table), list(names))

    def _log(self, table: Any) -> Any:
        """The table's log: the engine's own (it knows where the part directories live) once seen."""
        from spark_mergetree.txn.table_log import TableLog

        key = table_dir_of(table)
        if isinstance(table, TableLog):
            self._logs[key] = table
        return self._logs.setdefault(key, TableLog(key))

    def _stage(self, log: Any, added: list[str]) -> None:
        removed = self._removed.pop(table_dir_of(log), [])
        self._proposals.append((log, log.stage(self.tid, self.context.coordinator, added, removed)))

    def flush(self) -> None:
        """Stage the removals no addition carried (an overwrite with no rows)."""
        for key in [key for key, removed in self._removed.items() if removed]:
            self._stage(self._log(key), [])

    def check_still_running(self) -> None:
        from spark_mergetree.txn.coordinator import TxnState

        state, _ = self.coordinator.status(self.tid)
        if state is not TxnState.RUNNING:
            raise TransactionError(f"transaction {self.tid} ended ({state.value}) while this write ran: the "
                                   "write is not part of it and was discarded")

    def withdraw(self) -> None:
        """Take back this job's proposals and the directories they named (the job failed)."""
        for log, path in self._proposals:
            log.discard_staged(self.tid, only=[path])
        self._proposals.clear()


def visible_in_transaction(log: Any, txn: TxnContext) -> set[str]:
    """Parts a transaction sees in a table (its log): its snapshot plus its own pending entry and proposals."""
    from spark_mergetree.txn import coordinator_from_url

    return set(log.snapshot(txn.snapshot, coordinator_from_url(txn.coordinator), own_tid=txn.tid))


def transaction_state(txn: TxnContext) -> str:
    from spark_mergetree.txn import coordinator_from_url

    return coordinator_from_url(txn.coordinator).status(txn.tid)[0].value


def begin(coordinator_url: str | None) -> tuple[Any, TxnContext]:
    """Begin a transaction in the user's process; returns the txn layer's handle and its context."""
    from spark_mergetree.txn import coordinator_from_url
    from spark_mergetree.txn.transaction import Transaction

    handle = Transaction(coordinator_from_url(coordinator_url) if coordinator_url else None)
    context = TxnContext(handle.coordinator.url, int(handle.tid), int(handle.snapshot))
    _owned[context] = handle
    return handle, context


# The transactions this process opened and has not finished: a driver-side job of this process
# (a DELETE/UPDATE) works in its owner's transaction directly.
_owned: dict[TxnContext, Any] = {}


def owned_transaction(txn: TxnContext) -> Any:
    """The engine transaction this process opened for `txn` (TransactionError if another process did)."""
    handle = _owned.get(txn)
    if handle is None:
        raise TransactionError(
            f"transaction {txn.tid} was not opened in this process: DELETE and UPDATE join a transaction only in "
            "the process that runs its `with spark_mergetree.transaction(spark)` block")
    return handle


def session_txn_owned_here(conf_value: str | None) -> TxnContext | None:
    """The transaction the session conf names, when this process owns it or it still runs (a stale
    value left after its block ended names nothing)."""
    txn = TxnContext.parse(conf_value, f"session conf {TXN_CONF!r}")
    if txn is None or txn in _owned or transaction_state(txn) == "running":
        return txn
    return None


def _log_of(ref: TableRef) -> Any:
    """The table's log as its engine opens it (it knows on which disks the table's parts are); the
    bare log of the table directory if the table cannot be opened any more."""
    from spark_mergetree.txn.table_log import TableLog

    try:
        return open_table(ref).log
    except (MergeTreeError, OSError):
        return TableLog(ref.path)


def finish(handle: Any, commit_it: bool) -> None:
    """Commit (adopting what every job staged for the tid) or roll back (discarding it)."""
    try:
        logs = [_log_of(TableRef(**json.loads(text))) for text in handle.coordinator.staged_tables(handle.tid)]
    except BaseException:
        handle.rollback()
        raise
    try:
        if commit_it:
            try:
                for log in logs:
                    handle.adopt_staged(log)
            except BaseException:
                handle.rollback()
                raise
            handle.commit()
        else:
            handle.rollback()
    finally:
        _owned.pop(TxnContext(handle.coordinator.url, int(handle.tid), int(handle.snapshot)), None)
        if handle.state == "aborted":
            for log in logs:
                log.discard_staged(handle.tid)


# ------------------------------------------------------------------------------- optimize
#
# A distributed OPTIMIZE: the driver plans the groups and holds their transaction (removal locks
# taken), tasks stage one merged part per group under a write job's tag, the driver publishes one
# result per group and commits them all at once; leftovers of failed or duplicate attempts go with
# the job's end.


@dataclass
class MergeJob:
    """A distributed OPTIMIZE (or one round of OPTIMIZE FINAL) in progress on the driver (not sent
    to tasks: `groups`, `names` and `tag` are)."""

    transaction: Any
    groups: list[Any]
    tag: str
    names: list[str] = field(default_factory=list)  # each group's result name


def _merge_job(table: Any, tx: Any, groups: list[Any]) -> MergeJob:
    """The job merging `groups` in `tx` (their removal locks taken): a tag for the staged results and
    the names they are published under. On failure `tx` is rolled back."""
    from spark_mergetree.engine import insert as inserting
    from spark_mergetree.engine import optimize as optimizing

    tag = inserting.new_tag()
    try:
        names = optimizing.group_result_names(table, groups)
        if groups:
            table.log.register_job(tag, leases=[(tx.coordinator.url, tx.tid)])  # alive while tx runs
    except BaseException:
        tx.rollback()
        raise
    return MergeJob(tx, groups, tag, names)


def plan_merges(ref: TableRef, where: str | None, final: bool) -> MergeJob:
    from spark_mergetree.engine import optimize as optimizing

    table = open_table(ref)
    tx, groups = optimizing.plan_group_merges(table, where, final)
    return _merge_job(table, tx, groups)


def optimize_final(ref: TableRef, where: str | None, timeout: float | None,
                   run_job: Callable[[MergeJob], list[tuple[str, str, int, int]]]) -> list[str]:
    """OPTIMIZE FINAL in rounds (`engine/optimize.py run_final`): each round's merges are one job
    (`run_job(job)` returns one staged result per group, in order), committed in the round's
    transaction; return the new parts' names."""
    from spark_mergetree.engine import optimize as optimizing

    table = open_table(ref)

    def run_round(tx: Any, groups: list[Any]) -> list[str]:
        job = _merge_job(table, tx, groups)
        try:
            return commit_merges(ref, job, run_job(job))
        finally:
            end_merges(ref, job)

    return optimizing.run_final(table, optimizing.FINAL_WAIT_SECONDS if timeout is None else timeout,
                                where=where, run_round=run_round)



def optimize(ref: TableRef, where: str | None, final: bool, timeout: float | None,
             run_job: Callable[[MergeJob], list[tuple[str, str, int, int]]]) -> list[str]:
    """OPTIMIZE [FINAL] of the table `ref` names, its merges run by `run_job` (on executors, or in
    this process): FINAL in rounds (`optimize_final`), else one job committed in one transaction.
    Returns the new parts' names."""
    if final:
        return optimize_final(ref, where, timeout, run_job)
    job = plan_merges(ref, where, False)
    if not job.groups:
        return []
    try:
        return commit_merges(ref, job, run_job(job))
    finally:
        end_merges(ref, job)

def stage_merge(ref: TableRef, group: Any, tag: str, result_name: str | None = None) -> Any:
    from spark_mergetree.engine import optimize as optimizing

    return optimizing.stage_group_merge(open_table(ref), group, tag, result_name)


def commit_merges(ref: TableRef, job: MergeJob, staged: Sequence[tuple[str, str, int, int]]) -> list[str]:
    """Publish the staged results ((name, partition id, rows, bytes), one per group, in order) and
    commit them all in the job's transaction."""
    from spark_mergetree.engine import optimize as optimizing
    from spark_mergetree.engine.insert import StagedPart

    parts = [StagedPart(name, partition, rows, size, job.tag) for name, partition, rows, size in staged]
    return optimizing.commit_group_merges(open_table(ref), job.transaction, job.groups, parts)


def end_merges(ref: TableRef, job: MergeJob) -> None:
    """Roll back what did not commit and delete every staged result nobody published."""
    if job.transaction.state == "running":
        job.transaction.rollback()
    if job.groups:
        discard(ref, job.tag)


# ---------------------------------------------------------------------------------- mutations


@dataclass
class MutationJob:
    """A distributed DELETE/UPDATE in progress on the driver (tasks get `parts`, `candidates`, `tag`).
    `own`: the job's own transaction (committed by the job), else the user's (committed at its end)."""

    transaction: Any
    parts: list[str]
    candidates: set[str]
    tag: str
    own: bool = True


def _mutation(table: Any, assignments: Mapping[str, Any] | None, where: Any) -> Any:
    from spark_mergetree.engine import mutations

    if assignments is None:
        return mutations.delete_mutation(table, where)
    return mutations.update_mutation(table, assignments, where)


def plan_mutation(ref: TableRef, assignments: Mapping[str, Any] | None, where: Any,
                  txn: TxnContext | None = None) -> MutationJob:
    """The transaction (`txn`, which this process owns, or one of the job's own), the parts that get
    new versions and those the condition may match; every bad input (column, value, condition)
    fails here, before any task."""
    from spark_mergetree.engine import insert as inserting
    from spark_mergetree.engine import mutations

    table = open_table(ref)
    mutation = _mutation(table, assignments, where)
    owner = None
    if txn is not None:
        check_transaction(ref, txn)
        owner = owned_transaction(txn)
        owner.adopt_staged(table.log)  # what Spark jobs of the transaction wrote to the table so far
    tx, parts, candidates = mutations.begin(table, mutation, owner)
    tag = inserting.new_tag()
    try:
        table.log.register_job(tag, leases=[(tx.coordinator.url, tx.tid)])  # alive while tx runs
    except BaseException:
        if owner is None:
            tx.rollback()
        raise
    return MutationJob(tx, parts, candidates, tag, own=owner is None)


def stage_mutation(ref: TableRef, assignments: Mapping[str, Any] | None, where: Any, part: str, candidate: bool,
                   tag: str) -> tuple[str | None, bool]:
    """One part's new version, staged for the job `tag` (executor side)."""
    from spark_mergetree.engine import mutations

    table = open_table(ref)
    table.log.register_job(tag)
    return mutations.stage_part(table, _mutation(table, assignments, where), part, candidate, tag)


def commit_mutation(ref: TableRef, job: MutationJob, assignments: Mapping[str, Any] | None, where: Any,
                    staged: Mapping[str, str]) -> list[str]:
    """Publish every part's staged new version in the job's transaction and commit it if it is the
    job's own (else the user's transaction commits it, then writes `mutation_N.txt`)."""
    from spark_mergetree.engine import mutations

    table = open_table(ref)
    return mutations.finish(table, _mutation(table, assignments, where).command, job.transaction, staged,
                            own=job.own)


def end_mutation(ref: TableRef, job: MutationJob) -> None:
    """Roll back the job's own transaction if it did not commit and delete every staged part nobody
    published."""
    if job.own and job.transaction.state == "running":
        job.transaction.rollback()
    discard(ref, job.tag)

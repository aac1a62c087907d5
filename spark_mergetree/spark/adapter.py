"""Every call the Spark layer makes into engine/, txn/ and catalog/, behind one small surface.

The DataSource classes never touch MergeTreeTable or a coordinator directly: they hold a picklable
`TableRef` (how any process reopens the table) and a picklable `TxnContext` (which transaction a
job runs in), and call the functions here. Keeping the engine contract in one module keeps the rest
of the connector independent of how the engine spells things.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from spark_mergetree.errors import (
    InvalidOptionError,
    TableNotFoundError,
    TransactionError,
    UnsupportedError,
)

# The local property a transaction sets in the user's driver thread; tasks read it from TaskContext.
TXN_PROPERTY = "spark_mergetree.transaction"


@dataclass(frozen=True)
class TableRef:
    """Enough to reopen a table in any process: its data directory and defining statement."""

    path: str
    create_statement: str | None = None
    coordinator: str | None = None
    name: str | None = None  # "db.table" when it came from a catalog (for messages)

    def describe(self) -> str:
        return f"table {self.name} ({self.path})" if self.name else f"table at {self.path}"


@dataclass(frozen=True)
class TxnContext:
    """A running transaction as seen from tasks and from the driver-side commit worker."""

    coordinator: str
    tid: int
    snapshot: int
    journal: str  # directory (on the driver host) where commits of this transaction are recorded

    def to_property(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_property(cls, text: str | None) -> TxnContext | None:
        if not text:
            return None
        return cls(**json.loads(text))


def current_txn_from_task() -> TxnContext | None:
    """The transaction of the Spark job this task belongs to (set by `transaction()`), if any."""
    from pyspark import TaskContext

    context = TaskContext.get()
    if context is None:
        return None
    return TxnContext.from_property(context.getLocalProperty(TXN_PROPERTY))


# --------------------------------------------------------------------------------- opening tables


def _coordinator(url: str | None) -> Any:
    if not url:
        return None
    from spark_mergetree.txn.coordinator import coordinator_from_url

    return coordinator_from_url(url)


def resolve(path: str, catalog: str | None, create_statement: str | None, coordinator: str | None) -> TableRef:
    """Turn the user's location options into a TableRef (a catalog name resolves to its directory)."""
    if catalog:
        from spark_mergetree.catalog.catalog import Catalog

        if create_statement:
            raise InvalidOptionError("options 'catalog' and 'create_statement' exclude each other: "
                                     "a catalog table's statement comes from the catalog")
        if "." not in path:
            raise InvalidOptionError(f"with option 'catalog', load()/save() takes '<database>.<table>', got {path!r}")
        info = Catalog(catalog, recover=False).table_info(path)
        return TableRef(str(info.data_path), info.statement, coordinator, name=path)
    return TableRef(str(Path(path).absolute()), create_statement, coordinator)


def table_exists(ref: TableRef) -> bool:
    if ref.create_statement:
        return True
    from spark_mergetree.engine.table import MergeTreeTable

    try:
        MergeTreeTable.open(ref.path, coordinator=_coordinator(ref.coordinator))
    except TableNotFoundError:
        return False
    return True


def open_table(ref: TableRef) -> Any:
    from spark_mergetree.engine.table import MergeTreeTable

    return MergeTreeTable.open(ref.path, create_statement=ref.create_statement,
                               coordinator=_coordinator(ref.coordinator))


def create_table(ref: TableRef, columns: Sequence[tuple[str, str]], order_by: str | None,
                 partition_by: str | None, primary_key: str | None, settings: dict[str, str],
                 catalog: str | None) -> TableRef:
    """Create the table a first write goes to (if_not_exists: concurrent first writers agree)."""
    engine_settings = dict(settings)
    order = order_by or "tuple()"
    if catalog:
        from spark_mergetree.catalog.catalog import Catalog

        cat = Catalog(catalog, recover=False)
        assert ref.name is not None
        cat.define_table(ref.name, list(columns), order, partition_by, primary_key, engine_settings or None,
                         if_not_exists=True)
        info = cat.table_info(ref.name)
        return TableRef(str(info.data_path), info.statement, ref.coordinator, name=ref.name)
    from spark_mergetree.engine.table import MergeTreeTable

    MergeTreeTable.create(ref.path, list(columns), order, partition_by, primary_key, engine_settings or None,
                          if_not_exists=True, coordinator=_coordinator(ref.coordinator))
    return ref


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
class PlannedRead:
    snapshot: Any
    tasks: list[Any]  # engine ReadTasks, picklable
    granules_total: int | None
    granules_selected: int | None


def plan(ref: TableRef, columns: list[str], where: Any, target_rows: int, snapshot: Any = None) -> PlannedRead:
    table = open_table(ref)
    read_plan = table.plan_read(columns, where, snapshot=snapshot, target_rows=target_rows)
    return PlannedRead(
        snapshot=getattr(read_plan, "snapshot", snapshot),
        tasks=list(read_plan.tasks),
        granules_total=getattr(read_plan, "granules_total", None),
        granules_selected=getattr(read_plan, "granules_selected", None),
    )


def read(ref: TableRef, task: Any, columns: list[str], where: Any) -> Iterator[pa.RecordBatch]:
    table = open_table(ref)
    yield from table.read_task(task, columns, where)


def table_schema(ref: TableRef) -> pa.Schema:
    return open_table(ref).schema


# --------------------------------------------------------------------------------------- writing


def stage(ref: TableRef, data: pa.Table, tag: str) -> list[Any]:
    return list(open_table(ref).stage(data, tag))


def commit(ref: TableRef, staged: list[Any], mode: str, txn: TxnContext | None) -> list[str]:
    """Make a job's staged parts visible (or, inside a transaction, pending under its tid)."""
    table = open_table(ref)
    if txn is None:
        return list(table.commit_staged(staged, mode=mode))
    handle = _attach_transaction(table, txn)
    names = list(table.commit_staged(staged, mode=mode, transaction=handle))
    _journal(txn, ref, names, mode)
    return names


def discard(ref: TableRef, tag: str, keep: Iterable[Any] = ()) -> None:
    open_table(ref).discard_staged(tag, keep=tuple(keep))


# ---------------------------------------------------------------------------------- transactions


def _attach_transaction(table: Any, txn: TxnContext) -> Any:
    """A handle on a transaction begun in another process (the user's), for writing its entries."""
    from spark_mergetree.txn import transaction as txn_module  # type: ignore[attr-defined]

    attach = getattr(txn_module, "attach", None)
    if attach is None:
        raise UnsupportedError("the transaction layer cannot attach to a transaction of another process")
    return attach(txn.coordinator, txn.tid, txn.snapshot)


def _journal(txn: TxnContext, ref: TableRef, names: list[str], mode: str) -> None:
    """Record, for the user's process, which table a job wrote under the transaction."""
    record = {"path": ref.path, "create_statement": ref.create_statement, "coordinator": ref.coordinator,
              "parts": names, "mode": mode, "time": time.time()}
    journal = Path(txn.journal)
    temporary = journal / f".tmp-{uuid.uuid4().hex}"
    temporary.write_text(json.dumps(record))
    os.replace(temporary, journal / f"{time.time_ns()}-{uuid.uuid4().hex}.json")


def journal_entries(txn: TxnContext) -> list[dict[str, Any]]:
    journal = Path(txn.journal)
    return [json.loads(p.read_text()) for p in sorted(journal.glob("*.json"))]


def begin(coordinator_url: str | None) -> tuple[Any, TxnContext]:
    """Begin a transaction in the user's process; returns the txn layer's handle and its context."""
    from spark_mergetree.txn import transaction as txn_module  # type: ignore[attr-defined]

    handle = txn_module.begin(coordinator_url) if coordinator_url else txn_module.begin()
    url = getattr(handle, "coordinator_url", None) or handle.coordinator.url
    journal = tempfile.mkdtemp(prefix=f"mergetree-txn-{handle.tid}-")
    return handle, TxnContext(url, int(handle.tid), int(handle.snapshot), journal)


def finish(handle: Any, txn: TxnContext, commit_it: bool) -> None:
    try:
        if commit_it:
            for entry in journal_entries(txn):
                handle.adopt(entry["path"], entry["parts"])  # removals recorded by the entries
            handle.commit()
        else:
            handle.rollback()
    except TransactionError:
        raise
    finally:
        import shutil

        shutil.rmtree(txn.journal, ignore_errors=True)

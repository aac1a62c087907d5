"""Transaction: one snapshot across tables, and an all-or-nothing commit of part changes.

Commit protocol: write a pending entry into the log of every touched table (fsynced), commit at
the coordinator (the one commit point), then fill the csn into the entries. A crash before the
coordinator decision leaves pending entries of a dead transaction (rolled back by recovery); a
crash after it leaves pending entries of a committed one (readers already see them; recovery
finalizes them).
"""

from __future__ import annotations

import logging
import time
import warnings
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from spark_mergetree.errors import InvalidOptionError, SerializationError, TransactionError
from spark_mergetree.txn.connect import default_coordinator
from spark_mergetree.txn.coordinator import (
    CommitOutcomeUnknownError,
    Coordinator,
    TxnInfo,
    TxnState,
)
from spark_mergetree.txn.table_log import TableLike, TableLog, table_dir_of

log = logging.getLogger(__name__)


class _TableChanges:
    def __init__(self, log: TableLog) -> None:
        self.log = log
        self.added: list[str] = []
        self.removed: list[str] = []
        self.base: set[str] | None = None  # parts at the snapshot, cached: reads are repeatable
        self.adopted: list[Path] = []  # staged proposals taken in, deleted once decided
        self.apps: dict[str, int] = {}  # application versions recorded with the changes (LogEntry.apps)
        self.written: tuple[Any, ...] | None = None  # last pending entry written


class Transaction:
    """A transaction of one coordinator. Use as a context manager: commit on success,
    rollback on exception."""

    def __init__(self, coordinator: Coordinator | None = None, *, snapshot: int | None = None,
                 as_of: int | None = None) -> None:
        """Begin a transaction. `snapshot` makes it a read-only transaction reading that older
        snapshot (a csn; time travel within the tables' retention), as `snapshot=` does on reads.
        `as_of` is the deprecated name of `snapshot`."""
        if as_of is not None:
            warnings.warn("Transaction(as_of=...) is deprecated; use snapshot=...", DeprecationWarning, stacklevel=2)
            if snapshot is not None:
                raise InvalidOptionError("give snapshot= only (as_of is its deprecated name), not both")
            snapshot = as_of
        if snapshot is not None and (isinstance(snapshot, bool) or not isinstance(snapshot, int) or snapshot < 0):
            raise InvalidOptionError(f"snapshot must be a csn (an integer ≥ 0), got {snapshot!r}")
        self.coordinator = coordinator if coordinator is not None else default_coordinator()
        self.info: TxnInfo = self.coordinator.begin()
        self.read_only = snapshot is not None
        self._snapshot = self.info.snapshot
        if snapshot is not None:
            if snapshot > self.info.snapshot:
                self.coordinator.abort(self.tid)
                raise InvalidOptionError(
                    f"snapshot must be a csn between 0 and the current snapshot {self.info.snapshot}, got {snapshot!r}")
            self._snapshot = snapshot
        self._tables: dict[Path | str, _TableChanges] = {}
        self.state = "running"
        self.csn: int | None = None
        self._on_commit: list[Callable[[int], None]] = []

    @property
    def tid(self) -> int:
        return self.info.tid

    @property
    def snapshot(self) -> int:
        return self._snapshot

    def __repr__(self) -> str:
        return f"Transaction(tid={self.tid}, snapshot={self.snapshot}, state={self.state}, {self.coordinator.url})"

    def _require_running(self) -> None:
        if self.state != "running":
            raise TransactionError(f"transaction {self.tid} is already {self.state}")

    def _require_writable(self) -> None:
        self._require_running()
        if self.read_only:
            raise TransactionError(f"transaction {self.tid} reads the past (snapshot={self.snapshot}) and cannot write")

    def _table(self, table: TableLike) -> _TableChanges:
        key = table_dir_of(table)
        changes = self._tables.get(key)
        if changes is not None and isinstance(table, TableLog):
            changes.log = table  # the engine's log, with the owner of the table's directories
        if changes is None:
            changes = _TableChanges(table if isinstance(table, TableLog) else TableLog(key))
            identity = changes.log.identity()
            if identity is not None and identity["coordinator"] != self.coordinator.url:
                raise TransactionError(
                    f"table {key} is coordinated by {identity['coordinator']}, but transaction "
                    f"{self.tid} runs on {self.coordinator.url}: a transaction cannot span tables of "
                    "different coordinators")
            self._tables[key] = changes
        return changes

    def _base(self, changes: _TableChanges) -> set[str]:
        if changes.base is None:
            changes.base = changes.log.snapshot(self.snapshot, self.coordinator)
        return changes.base

    def visible_parts(self, table: TableLike) -> set[str]:
        """Parts of the table at this transaction's snapshot, with its own changes applied."""
        self._require_running()
        changes = self._table(table)
        visible = set(self._base(changes))
        visible.update(changes.added)
        visible.difference_update(changes.removed)
        return visible

    def add_parts(self, table: TableLike, names: Iterable[str]) -> None:
        """Name new parts of the table in this transaction's pending entry (durably, now).

        Call it before the directories get their final names (under the table's `commit_lock`):
        from then on the log says who owns them, so cleanup never takes them for garbage. They
        must exist when the transaction commits."""
        self._require_writable()
        changes = self._table(table)
        for name in names:
            if not isinstance(name, str) or not name or "/" in name or name.startswith("."):
                raise InvalidOptionError(f"bad part name {name!r} for table {changes.log.table_dir}")
            # Only this transaction's own names are checked: reading the table's log just to
            # append would cost every insert; block numbers make names unique anyway.
            if name in changes.added or (changes.base is not None and name in changes.base):
                raise InvalidOptionError(f"part {name!r} is already in table {changes.log.table_dir}")
            changes.added.append(name)
        self._write_pending(changes)

    def _write_pending(self, changes: _TableChanges) -> None:
        content = (tuple(changes.added), tuple(changes.removed), tuple(sorted(changes.apps.items())))
        if changes.written == content:
            return
        changes.log.write_pending(self.tid, self.coordinator.url, changes.added, changes.removed,
                                  apps=content[2])
        changes.written = content

    def record_app_version(self, table: TableLike, app_id: str, version: int) -> None:
        """Record with this transaction's changes to `table` that application `app_id` (a streaming
        query) reached `version` (a micro-batch id): committed exactly when the changes are, so
        `TableLog.app_version` tells a replayed batch whether it was committed (Delta's txn app id
        and version). Written into the pending entry now, if the transaction already has one, else
        with its first part."""
        self._require_writable()
        if not isinstance(app_id, str) or not app_id or isinstance(version, bool) or not isinstance(version, int):
            raise InvalidOptionError(f"an application version needs a non-empty id and an integer version, "
                                     f"got {app_id!r}, {version!r}")
        changes = self._table(table)
        changes.apps[app_id] = version
        if changes.written is not None:
            self._write_pending(changes)

    def remove_parts(self, table: TableLike, names: Iterable[str]) -> None:
        """Remove visible parts, taking their removal locks now. If another transaction removed
        or is removing one of them, raise SerializationError and roll this transaction back."""
        self._require_writable()
        changes = self._table(table)
        for name in names:
            if name in changes.added:
                # Added and removed by us: record both, so the directory is cleaned up like any
                # removed part and never becomes visible.
                changes.removed.append(name)
                continue
            if name not in self._base(changes) or name in changes.removed:
                raise InvalidOptionError(
                    f"part {name!r} is not visible in table {changes.log.table_dir} at snapshot {self.snapshot}")
            table_id = changes.log.bind(self.coordinator.url)
            try:
                self.coordinator.lock_removal(self.tid, table_id, name)
            except SerializationError:
                # The loser of a conflict cannot commit anything any more: end it now.
                self._rollback_tables(self._tables.values())
                raise
            changes.removed.append(name)

    def adopt_staged(self, table: TableLike) -> tuple[list[str], list[str]]:
        """Take in the changes other processes staged for this transaction in the table
        (`TableLog.stage`); return (added, removed) part names."""
        self._require_writable()
        changes = self._table(table)
        proposals = [(path, staged) for path, staged in changes.log.staged(self.tid) if path not in changes.adopted]
        for path, staged in proposals:
            if staged.coordinator != self.coordinator.url:
                raise TransactionError(f"{path} was staged for coordinator {staged.coordinator}, "
                                       f"not {self.coordinator.url}")
        # Every addition before every removal: a later proposal may remove a part an earlier one
        # added, and proposals carry no order (part names are never reused, so this is exact).
        added = [name for _, staged in proposals for name in staged.added]
        removed = [name for _, staged in proposals for name in staged.removed]
        if added:
            self.add_parts(table, added)
        if removed:
            self.remove_parts(table, removed)
        changes.adopted.extend(path for path, _ in proposals)
        return added, removed

    def allocate_blocks(self, table: TableLike, count: int = 1) -> int:
        """Reserve `count` block numbers for new parts of the table; return the first."""
        self._require_writable()
        table_id = self._table(table).log.bind(self.coordinator.url)
        return self.coordinator.allocate_blocks(table_id, count)

    def on_commit(self, callback: Callable[[int], None]) -> None:
        """Run `callback(csn)` once this transaction has committed (never if it does not): for what
        may only exist once the change is visible (a mutation's `mutation_N.txt`, which ClickHouse
        would otherwise apply). A failing callback is logged; the commit stands."""
        self._require_writable()
        self._on_commit.append(callback)

    def commit(self) -> int | None:
        """Make every change visible at once; return the csn (None for a read-only transaction).

        On SerializationError or any failure before the coordinator decided, nothing becomes
        visible: pending entries and added directories are removed.
        """
        self._require_running()
        touched = {path: changes for path, changes in self._tables.items()
                   if changes.added or changes.removed or changes.apps}
        if not touched:
            self.coordinator.abort(self.tid)
            self.state = "committed"
            return None
        removals: list[tuple[str, str]] = []
        try:
            for changes in touched.values():
                table_id = changes.log.bind(self.coordinator.url)
                missing = [n for n in changes.added if n not in changes.removed
                           and not changes.log.directories.exists(n)]
                if missing:
                    raise InvalidOptionError(
                        f"transaction {self.tid} adds part(s) {', '.join(missing)} to {changes.log.table_dir} "
                        "but their directories do not exist")
                self._write_pending(changes)
                removals.extend((table_id, name) for name in changes.removed if name not in changes.added)
        except BaseException:
            self._rollback_tables(touched.values())
            raise
        try:
            csn = self.coordinator.commit(self.tid, removals, tables=[str(path) for path in touched])
        except CommitOutcomeUnknownError:
            # Pending entries and directories stay: readers and recovery resolve them once the
            # coordinator answers; nothing may be deleted before the outcome is known.
            self.state = "unknown"
            raise
        except SerializationError:
            self._rollback_tables(touched.values())
            raise
        except BaseException as error:
            # Anything else: only roll back once the coordinator says the commit did not happen.
            try:
                state, committed_csn = self.coordinator.status(self.tid)
            except Exception:
                self.state = "unknown"
                raise CommitOutcomeUnknownError(
                    f"commit of transaction {self.tid} failed ({error!r}) and its outcome is "
                    "unknown; pending entries are left for recovery") from error
            if state is not TxnState.COMMITTED or committed_csn is None:
                self._rollback_tables(touched.values())
                raise
            csn = committed_csn
        self.state = "committed"
        self.csn = csn
        # Past the commit point nothing may raise: the commit happened. What fails here (finalizing
        # is an optimisation; a checkpoint is housekeeping) is left to readers and recovery.
        commit_time = time.time()
        for changes in touched.values():
            try:
                changes.log.finalize(self.tid, csn, commit_time)
            except Exception as error:  # noqa: BLE001 - see above
                log.warning("transaction %s committed at csn %s; finalizing %s failed: %r",
                            self.tid, csn, changes.log.directory, error)
        try:
            self._drop_adopted()
        except Exception as error:  # noqa: BLE001
            log.warning("transaction %s committed; removing adopted proposals failed: %r", self.tid, error)
        for callback in self._on_commit:
            try:
                callback(csn)
            except Exception as error:  # noqa: BLE001 - past the commit point
                log.warning("transaction %s committed at csn %s; an after-commit step failed: %r",
                            self.tid, csn, error)
        for changes in touched.values():
            try:
                changes.log.maybe_checkpoint()
            except Exception as error:  # noqa: BLE001 - a later commit or cleanup checkpoints
                log.info("checkpoint of %s deferred: %r", changes.log.directory, error)
        return csn

    def _drop_adopted(self) -> None:
        for changes in self._tables.values():
            for path in changes.adopted:
                changes.log.drop_staged(path)
            changes.adopted.clear()

    def _rollback_tables(self, touched: Iterable[_TableChanges]) -> None:
        try:
            self.coordinator.abort(self.tid)
        except Exception as error:  # noqa: BLE001 - a transaction that is not committed dies anyway
            log.info("abort of transaction %s not recorded (%r): it ends with its owner", self.tid, error)
        self.state = "aborted"
        for changes in touched:
            if not (changes.added or changes.removed or changes.written):
                continue  # only read: nothing to undo, and no log directory to create
            # Each log deletes only the directories no other transaction has claimed since.
            changes.log.discard(self.tid, delete_added_parts=True, also=changes.added)
        self._drop_adopted()

    def rollback(self) -> None:
        """Abort: nothing becomes visible; directories this transaction added are deleted."""
        if self.state != "running":
            return
        self._rollback_tables(self._tables.values())

    def __enter__(self) -> Transaction:
        return self

    def __exit__(self, exc_type: type | None, exc: BaseException | None, traceback: object) -> None:
        if exc_type is None:
            self.commit()
        else:
            self.rollback()


def begin(coordinator: Coordinator | None = None) -> Transaction:
    """Start a transaction on `coordinator` (default: `default_coordinator()`)."""
    return Transaction(coordinator)


__all__ = ["Transaction", "begin", "SerializationError"]

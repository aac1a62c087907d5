"""CommitLog: what transactions and the table engine ask of a table's commit log, wherever it lives.

Two implementations satisfy it: `TableLog` (table_log.py: files under `<table>/_mergetree/log/`,
flock'ed, entries rewritten in place with their csn) and `ObjectTableLog` (object_log.py: write-once
objects under a bucket prefix, fates only at the coordinator). `Transaction` (transaction.py) and
the engine read and write a log only through these methods, so a transaction spans tables in any
location and one table class serves every location. Features of one log alone (adopting parts
ClickHouse placed in a directory; a job's per-part records in a bucket) are reached through
`adopts_foreign_parts` and the job methods below, which each log implements its own way.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from spark_mergetree.txn.coordinator import Coordinator
from spark_mergetree.txn.table_log import LogEntry, PartDirectories, PartVersion


@runtime_checkable
class CommitLog(Protocol):
    """One table's commit log: identity and binding to a coordinator, entries (pending, staged,
    final), snapshots, write jobs, checkpoints and cleanup."""

    #: The table's part directories, which the log probes and deletes garbage from.
    directories: PartDirectories

    # ---- identity
    def table_key(self) -> Path | str:
        """What names this table in a transaction (its directory, or its URL)."""
        ...

    def default_coordinator(self) -> Coordinator:
        """The coordinator of a table that names none, for this log's location."""
        ...

    def check_coordinator(self, coordinator: Coordinator) -> None:
        """Refuse, naming why, a coordinator this log cannot commit through."""
        ...

    def identity(self) -> dict[str, str] | None:
        """{"table_id", "coordinator", ...} once a transaction bound the log, else None."""
        ...

    def bind(self, coordinator_url: str) -> str:
        """Bind the log to a coordinator (first writer) and return the table id."""
        ...

    def commit_lock(self) -> contextlib.AbstractContextManager[None]:
        """Held while a commit publishes its parts (a no-op where nothing is renamed)."""
        ...

    # ---- entries
    def entries(self) -> list[LogEntry]: ...
    def write_pending(self, tid: int, coordinator_url: str, added: Iterable[str], removed: Iterable[str],
                      apps: Iterable[tuple[str, int]] = ()) -> None: ...
    def finalize(self, tid: int, csn: int, commit_time: float | None = None) -> None: ...
    def stage(self, tid: int, coordinator_url: str, added: Iterable[str], removed: Iterable[str] = ()) -> Any: ...
    def staged(self, tid: int | None = None) -> Sequence[tuple[Any, LogEntry]]: ...
    def drop_staged(self, key: Any) -> None: ...
    def discard(self, tid: int, delete_added_parts: bool = True, also: Iterable[str] = ()) -> None: ...
    def maybe_checkpoint(self, every: int = ...) -> bool: ...

    # ---- visibility
    def versions(self, coordinator: Coordinator | None) -> tuple[int, dict[str, PartVersion]]: ...
    def snapshot(self, snapshot_csn: int, coordinator: Coordinator, own_tid: int | None = None) -> set[str]: ...
    def allocation_fence(self, coordinator: Coordinator) -> tuple[int, bool] | None: ...
    def app_version(self, app_id: str, coordinator: Coordinator | None) -> int | None: ...

    # ---- write jobs
    def register_job(self, tag: str, leases: Sequence[tuple[str, int]] = ()) -> None: ...
    def record_staged(self, tag: str, part: str) -> None:
        """Record, before it is written, that job `tag` writes part `part` under its final name."""
        ...

    def end_job(self, tag: str) -> None: ...
    def job_ended(self, tag: str) -> bool: ...

    def discard_job(self, tag: str, keep: Iterable[str] = ()) -> list[str]:
        """End the write job `tag` (it committed, publishing `keep`, or gave up) and delete what it
        wrote that neither `keep` nor an entry names; return the names deleted."""
        ...

    # ---- upkeep
    def cleanup(self, coordinator: Coordinator, retention_seconds: float = 0.0, *,
                orphan_seconds: float = 3600.0) -> list[str]:
        """Delete what no snapshot reads any more; return the part names deleted. `orphan_seconds`:
        the age past which a part no entry and no live job names is a crash's leftover (where
        parts are written under final names before an entry names them)."""
        ...


if TYPE_CHECKING:  # mypy checks here that both logs satisfy the protocol
    from spark_mergetree.txn.object_log import ObjectTableLog
    from spark_mergetree.txn.table_log import TableLog

    def _both_are_commit_logs(files: TableLog, objects: ObjectTableLog) -> tuple[CommitLog, CommitLog]:
        return files, objects

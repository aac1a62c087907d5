"""The coordinator contract: timestamps, transaction fates, removal locks, block numbers.

A coordinator hands out one increasing sequence of timestamps used both as transaction ids
(taken at begin) and as commit sequence numbers (taken at commit), and durably records each
transaction's fate. Backends: `LocalCoordinator` (files, one machine) and `ZooKeeperCoordinator`
(kazoo). `connect.coordinator_from_url` / `connect.default_coordinator` pick one by URL.
"""

from __future__ import annotations

import abc
import enum
from collections.abc import Iterable
from dataclasses import dataclass

from spark_mergetree.errors import InvalidOptionError, TransactionError


class TxnState(str, enum.Enum):
    RUNNING = "running"
    COMMITTED = "committed"
    ABORTED = "aborted"


@dataclass(frozen=True)
class TxnInfo:
    """A running transaction: its id and the snapshot (every csn ≤ snapshot is visible to it)."""

    tid: int
    snapshot: int
    started: float = 0.0  # wall-clock seconds at begin (used to age orphan directories)


@dataclass(frozen=True)
class TxnRecord:
    """One transaction as `list_transactions` reports it."""

    tid: int
    state: TxnState
    csn: int | None = None
    snapshot: int | None = None
    tables: tuple[str, ...] = ()
    removals: tuple[tuple[str, str], ...] = ()
    time: float | None = None
    owner: str = ""


class CommitOutcomeUnknownError(TransactionError):
    """The coordinator could not say whether the commit happened (it stopped answering).

    The transaction's pending log entries stay in place; readers and `TableLog.recover` resolve
    them from the coordinator once it answers again.
    """


class Coordinator(abc.ABC):
    """Timestamps and transaction fates. Every method is safe across threads and processes."""

    @property
    @abc.abstractmethod
    def url(self) -> str:
        """The URL that `coordinator_from_url` turns back into an equivalent coordinator."""

    @abc.abstractmethod
    def begin(self) -> TxnInfo:
        """Start a transaction: a fresh tid and the snapshot `tid - 1`."""

    @abc.abstractmethod
    def commit(self, tid: int, removals: Iterable[tuple[str, str]] = (),
               tables: Iterable[str] = ()) -> int:
        """Commit `tid`, removing the given (table_id, part_name) pairs; return its csn.

        First remover wins: a part already removed by another committed transaction, or locked
        for removal by another live one, raises SerializationError and the transaction is
        aborted. Durable when it returns. `tables` is recorded for introspection only.
        """

    @abc.abstractmethod
    def abort(self, tid: int) -> None:
        """End a running transaction without effect (idempotent; no-op once decided)."""

    @abc.abstractmethod
    def status(self, tid: int) -> tuple[TxnState, int | None]:
        """(state, csn): csn is set for committed transactions; dead owners count as aborted."""

    @abc.abstractmethod
    def lock_removal(self, tid: int, table_id: str, part_name: str) -> None:
        """Reserve a part for removal by `tid` now, so a competing remover fails early.

        Raises SerializationError if another transaction removed it or holds the lock. The lock
        dies with its transaction (commit makes it a permanent removal record).
        """

    @abc.abstractmethod
    def forget_removals(self, table_id: str, part_names: Iterable[str]) -> None:
        """Drop the committed-removal records of parts that cleanup deleted (no snapshot can see
        them any more, so nobody can try to remove them again)."""

    @abc.abstractmethod
    def running(self) -> list[TxnInfo]:
        """Live running transactions (dead owners are not listed)."""

    @abc.abstractmethod
    def current_timestamp(self) -> int:
        """The last timestamp handed out; a transaction beginning now gets a larger one."""

    def min_running_snapshot(self) -> int:
        """The oldest snapshot any live transaction reads; the current timestamp if none."""
        snapshots = [info.snapshot for info in self.running()]
        return min(snapshots) if snapshots else self.current_timestamp()

    @abc.abstractmethod
    def allocate_blocks(self, table_id: str, count: int = 1) -> int:
        """Reserve `count` consecutive block numbers for a table; return the first one (≥ 1)."""

    @abc.abstractmethod
    def add_staged_table(self, tid: int, table: str) -> None:
        """Record, for the owner of running transaction `tid`, that another process (a Spark job's
        commit()) staged changes for it in `table` (text that names the table, e.g. its directory).

        Raises TransactionError once `tid` is no longer running. Recording twice is harmless. The
        records end with the transaction (commit, abort or its owner's death)."""

    @abc.abstractmethod
    def staged_tables(self, tid: int) -> list[str]:
        """The tables recorded by `add_staged_table` for `tid` (its owner reads them before committing)."""

    @abc.abstractmethod
    def list_transactions(self, limit: int = 100) -> list[TxnRecord]:
        """Running transactions and the most recent decided ones, newest first."""

    @property
    def closed(self) -> bool:
        return getattr(self, "_closed", False)

    def close(self) -> None:  # noqa: B027 - closing is optional for backends
        """Release connections and files (transactions still running in this process die)."""

    def __enter__(self) -> Coordinator:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.url!r})"


def _check_count(count: int) -> None:
    if not isinstance(count, int) or count < 1:
        raise InvalidOptionError(f"allocate_blocks count must be a positive integer, got {count!r}")

"""Transactions: timestamps, snapshots, per-table commit logs, local and ZooKeeper coordinators."""

from spark_mergetree.txn.coordinator import (
    COORDINATOR_ENV,
    CommitOutcomeUnknownError,
    Coordinator,
    TxnInfo,
    TxnRecord,
    TxnState,
    coordinator_from_url,
    default_coordinator,
)
from spark_mergetree.txn.local import LocalCoordinator
from spark_mergetree.txn.table_log import LogEntry, PartVersion, RecoveryReport, TableLog
from spark_mergetree.txn.transaction import Transaction, begin


def __getattr__(name: str) -> object:
    # kazoo is imported only when a ZooKeeper coordinator is asked for.
    if name == "ZooKeeperCoordinator":
        from spark_mergetree.txn.zookeeper import ZooKeeperCoordinator

        return ZooKeeperCoordinator
    raise AttributeError(name)


__all__ = [
    "COORDINATOR_ENV", "CommitOutcomeUnknownError", "Coordinator", "LocalCoordinator", "LogEntry",
    "PartVersion", "RecoveryReport", "TableLog", "Transaction", "TxnInfo", "TxnRecord", "TxnState",
    "ZooKeeperCoordinator", "begin", "coordinator_from_url", "default_coordinator",
]

"""Transactions: timestamps, snapshots, per-table commit logs, local and ZooKeeper coordinators.

Owns which parts a snapshot sees and every file of `<table>/_mergetree/log/` and of a coordinator
(format_spec/transactions.md). Decides which part directories are garbage but finds and deletes
them only through the `PartDirectories` it is given. May import format/ (part names), storage/,
fileops, recovery and errors; never expressions/, engine/ or above.
"""

from spark_mergetree.recovery import RecoveryReport
from spark_mergetree.txn.connect import COORDINATOR_ENV, coordinator_from_url, default_coordinator
from spark_mergetree.txn.coordinator import (
    CommitOutcomeUnknownError,
    Coordinator,
    TxnInfo,
    TxnRecord,
    TxnState,
)
from spark_mergetree.txn.local import LocalCoordinator
from spark_mergetree.txn.table_log import LogEntry, PartVersion, TableLog
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

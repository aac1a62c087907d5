"""spark-mergetree: ClickHouse MergeTree tables for Spark and Python.

The public API is what `__all__` lists: tables (`MergeTreeTable`), the catalog (`Catalog`),
transactions (`Transaction` and the coordinators that decide them), the Spark entry points
(`configure`, `register`, `transaction`; importing them imports pyspark), the reports and the errors.
Everything else is internal and may change.

Packages, highest first; a package imports only from the ones below it (tests/test_layering.py):

    spark/        the PySpark DataSource (the only package that imports pyspark); cli.py
    catalog/      Atomic databases and tables by name over UUID directories
    engine/       one table: its parts at a snapshot, insert, select, merge, check, cleanup
    txn/          coordinators, transactions, per-table commit logs (visibility)
    expressions/  SQL text → expression trees: CREATE statements, WHERE, partition and sort keys
    storage/      where part bytes live: disks, volumes, layouts (plain, JBOD, RAID)
    format/       the bytes of one part, as ClickHouse writes them
    fileops.py    durable file operations; errors.py  the one error hierarchy
"""

from spark_mergetree.catalog import Catalog
from spark_mergetree.engine.check import CheckReport
from spark_mergetree.engine.select import ReadPlan
from spark_mergetree.engine.table import MergeTreeTable, PartSummary
from spark_mergetree.errors import (
    CorruptPartError,
    ExpressionError,
    FormatError,
    InvalidOptionError,
    MergeTreeError,
    SchemaMismatchError,
    SerializationError,
    StorageError,
    TableExistsError,
    TableNotFoundError,
    TransactionError,
    UnsupportedError,
)
from spark_mergetree.recovery import RecoveryReport
from spark_mergetree.storage import RebuildReport, ScrubReport
from spark_mergetree.txn import CommitOutcomeUnknownError, Coordinator, LocalCoordinator, Transaction

__version__ = "0.1.0"


def __getattr__(name: str) -> object:
    # The Spark entry points import pyspark, and ZooKeeperCoordinator kazoo: neither is needed by
    # the engine, the catalog or the CLI.
    if name in ("configure", "register", "transaction"):
        from spark_mergetree import spark as spark_layer

        return getattr(spark_layer, name)
    if name == "ZooKeeperCoordinator":
        from spark_mergetree.txn.zookeeper import ZooKeeperCoordinator

        return ZooKeeperCoordinator
    raise AttributeError(f"module 'spark_mergetree' has no attribute {name!r}")


__all__ = [
    # tables, catalog, transactions
    "MergeTreeTable",
    "Catalog",
    "Transaction",
    "Coordinator",
    "LocalCoordinator",
    "ZooKeeperCoordinator",
    # Spark
    "configure",
    "register",
    "transaction",
    # reports
    "CheckReport",
    "PartSummary",
    "ReadPlan",
    "RecoveryReport",
    "RebuildReport",
    "ScrubReport",
    # errors
    "MergeTreeError",
    "CommitOutcomeUnknownError",
    "CorruptPartError",
    "ExpressionError",
    "FormatError",
    "InvalidOptionError",
    "SchemaMismatchError",
    "SerializationError",
    "StorageError",
    "TableExistsError",
    "TableNotFoundError",
    "TransactionError",
    "UnsupportedError",
]

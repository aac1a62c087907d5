"""spark-mergetree: ClickHouse MergeTree tables for Spark and Python.

The public API is what `__all__` lists: tables (`MergeTreeTable`), the catalog (`Catalog`),
transactions (`Transaction` and the coordinators that decide them), the Spark entry points
(`configure`, `register`, `transaction`, `optimize`, `delete`, `update`; importing them imports pyspark), the reports and the errors.
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
    jvm.py        the Spark session extension's jar: its build, the spark-submit arguments (stdlib only)
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

__version__ = "0.1.0"

# Each public name and the module that owns it. They are imported on first use: a Spark Python
# worker that unpickles a reader imports the modules that read parts, not the SQL parser, the
# catalog or pyspark's entry points, so a fresh worker starts in a fraction of the time.
_OWNERS = {
    "MergeTreeTable": "spark_mergetree.engine.table",
    "PartSummary": "spark_mergetree.engine.table",
    "CheckReport": "spark_mergetree.engine.check",
    "ReadPlan": "spark_mergetree.engine.select",
    "Catalog": "spark_mergetree.catalog",
    "Transaction": "spark_mergetree.txn",
    "Coordinator": "spark_mergetree.txn",
    "LocalCoordinator": "spark_mergetree.txn",
    "CommitOutcomeUnknownError": "spark_mergetree.txn",
    "ZooKeeperCoordinator": "spark_mergetree.txn.zookeeper",  # imports kazoo
    "RecoveryReport": "spark_mergetree.recovery",
    "RebuildReport": "spark_mergetree.storage",
    "ScrubReport": "spark_mergetree.storage",
    "configure": "spark_mergetree.spark",  # the Spark entry points import pyspark
    "register": "spark_mergetree.spark",
    "transaction": "spark_mergetree.spark",
    "optimize": "spark_mergetree.spark",
    "delete": "spark_mergetree.spark",
    "update": "spark_mergetree.spark",
    **{name: "spark_mergetree.errors" for name in (
        "CorruptPartError", "ExpressionError", "FormatError", "InvalidOptionError", "MergeTreeError",
        "SchemaMismatchError", "SerializationError", "StorageError", "TableExistsError", "TableNotFoundError",
        "TooManyPartsError", "TransactionError", "UnsupportedError")},
}


def __getattr__(name: str) -> object:
    owner = _OWNERS.get(name)
    if owner is None:
        raise AttributeError(f"module 'spark_mergetree' has no attribute {name!r}")
    value = getattr(importlib.import_module(owner), name)
    globals()[name] = value  # found once
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_OWNERS))


if TYPE_CHECKING:
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
        TooManyPartsError,
        TransactionError,
        UnsupportedError,
    )
    from spark_mergetree.recovery import RecoveryReport
    from spark_mergetree.spark.mutations import delete, update
    from spark_mergetree.spark.optimize import optimize
    from spark_mergetree.spark.session import configure
    from spark_mergetree.spark.source import register
    from spark_mergetree.spark.transaction import transaction
    from spark_mergetree.storage import RebuildReport, ScrubReport
    from spark_mergetree.txn import CommitOutcomeUnknownError, Coordinator, LocalCoordinator, Transaction
    from spark_mergetree.txn.zookeeper import ZooKeeperCoordinator

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
    "optimize",
    "delete",
    "update",
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
    "TooManyPartsError",
    "TransactionError",
    "UnsupportedError",
]

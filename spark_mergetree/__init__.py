"""spark-mergetree: ClickHouse MergeTree tables for Spark and Python.

The public API is re-exported here; everything else is internal and may change.
"""

from spark_mergetree.engine.select import ReadPlan
from spark_mergetree.engine.table import CheckReport, MergeTreeTable, PartSummary
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

__version__ = "0.1.0"


def __getattr__(name: str) -> object:
    # The Spark entry points import pyspark, which the engine, CLI and catalog do not need.
    if name in ("configure", "register", "transaction"):
        from spark_mergetree import spark as spark_layer

        return getattr(spark_layer, name)
    raise AttributeError(f"module 'spark_mergetree' has no attribute {name!r}")


__all__ = [
    "CheckReport",
    "MergeTreeTable",
    "PartSummary",
    "ReadPlan",
    "CorruptPartError",
    "ExpressionError",
    "FormatError",
    "InvalidOptionError",
    "MergeTreeError",
    "SchemaMismatchError",
    "SerializationError",
    "StorageError",
    "TableExistsError",
    "TableNotFoundError",
    "TransactionError",
    "UnsupportedError",
    "configure",
    "register",
    "transaction",
]

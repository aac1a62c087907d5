"""spark-mergetree: ClickHouse MergeTree tables for Spark and Python.

The public API is re-exported here; everything else is internal and may change.
"""

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

from spark_mergetree.engine.table import CheckReport, MergeTreeTable, PartSummary
from spark_mergetree.engine.select import ReadPlan

__version__ = "0.1.0"

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
]

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

__version__ = "0.1.0"

__all__ = [
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

"""The Atomic catalog: databases and tables by name over UUID directories, laid out as ClickHouse does."""

from spark_mergetree.catalog.catalog import (
    DEFAULT_DROP_DELAY_SECONDS,
    READER_LEASE_FILE,
    Catalog,
    DropCollector,
    DroppedTable,
    ReaderLease,
    RecoveryReport,
    TableInfo,
)

__all__ = [
    "DEFAULT_DROP_DELAY_SECONDS",
    "READER_LEASE_FILE",
    "Catalog",
    "DropCollector",
    "DroppedTable",
    "ReaderLease",
    "RecoveryReport",
    "TableInfo",
]

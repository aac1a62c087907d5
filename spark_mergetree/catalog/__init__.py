"""The Atomic catalog: databases and tables by name over UUID directories, laid out as ClickHouse does.

Owns the catalog root (`metadata/`, `metadata_dropped/`, `store/`, `data/`, `tmp/`): names,
DDL, drops, reader leases and recovery. May import engine/ (tables are created, opened and
deleted through it), txn/, expressions/, format/, storage/, fileops and errors; never spark/.
"""

from spark_mergetree.catalog.catalog import DEFAULT_DROP_DELAY_SECONDS, Catalog
from spark_mergetree.catalog.drops import DropCollector
from spark_mergetree.catalog.layout import DroppedTable, TableInfo
from spark_mergetree.catalog.leases import READER_LEASE_FILE, ReaderLease
from spark_mergetree.recovery import RecoveryReport

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

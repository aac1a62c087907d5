"""Reader leases: a reader holds a table's data directory against deletion while it reads.

A lease is a shared flock on `<data dir>/mergetree_readers.lock`; deleting a dropped table's data
takes it exclusively without waiting, and leaves the table for a later collection if a reader
holds it. The lease names the UUID directory, which no DDL moves.
"""

from __future__ import annotations

from pathlib import Path

from spark_mergetree.catalog.layout import UUID_RE, CatalogLayout, TableName
from spark_mergetree.errors import TableNotFoundError
from spark_mergetree.fileops import FileLock

READER_LEASE_FILE = "mergetree_readers.lock"


class ReaderLease:
    """A shared flock on `<data dir>/mergetree_readers.lock`: while held, the data is never deleted.

    Works across processes (the collector takes the lock exclusively, without waiting, and skips
    the table if a reader holds it). Release it, or use it as a context manager.
    """

    def __init__(self, table_uuid: str, data_path: Path) -> None:
        self.uuid = table_uuid
        self.data_path = data_path
        lease_path = data_path / READER_LEASE_FILE
        try:
            # Blocking is bounded: the collector holds the exclusive lock only across one rename.
            self._lock = FileLock(lease_path, exclusive=False, blocking=True, create=True)
        except (FileNotFoundError, NotADirectoryError):
            raise TableNotFoundError(f"table {table_uuid}: data directory {data_path} does not exist") from None
        if not self._lock.still_linked():
            self._lock.release()
            raise TableNotFoundError(f"table {table_uuid}: data directory {data_path} was deleted")

    @property
    def held(self) -> bool:
        return self._lock.held

    def release(self) -> None:
        self._lock.release()

    def __enter__(self) -> ReaderLease:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()


def pin(layout: CatalogLayout, name_or_uuid: TableName) -> ReaderLease:
    """Hold a table's data against deletion while reading (by name or by UUID).

    The lease names the UUID directory, so a RENAME/EXCHANGE/DROP meanwhile changes nothing
    for the holder. Use as a context manager or call ``release()``.
    """
    if isinstance(name_or_uuid, str) and UUID_RE.match(name_or_uuid.lower()):
        table_uuid = name_or_uuid.lower()
    else:
        table_uuid = layout.table_info(name_or_uuid).uuid
    return ReaderLease(table_uuid, layout.store_path(table_uuid))


def in_use(layout: CatalogLayout, table_uuid: str) -> bool:
    """True if some process holds a reader lease on the table's data."""
    lease_path = layout.store_path(table_uuid) / READER_LEASE_FILE
    try:
        probe = FileLock.try_acquire(lease_path, exclusive=True, create=False)
    except FileNotFoundError:
        return False
    if probe is None:
        return True
    probe.release()
    return False

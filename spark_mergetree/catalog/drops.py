"""DROP, UNDROP and the deletion of dropped tables' data.

DROP TABLE moves the metadata file into `metadata_dropped/<db>.<t>.<uuid>.sql` (one rename, the
commit point; its mtime is the drop time). The data stays until the drop delay has passed and no
reader lease is held; then `purge` renames the data directory into
`tmp/mergetree_dropping.<uuid>` (away from every later reader), deletes the table's directories on
every disk through the engine, and unlinks the metadata_dropped/ entry.
"""

from __future__ import annotations

import dataclasses
import os
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

from spark_mergetree import fileops
from spark_mergetree.catalog.layout import CatalogLayout, DroppedTable, TableInfo, TableName, split_name
from spark_mergetree.catalog.leases import READER_LEASE_FILE
from spark_mergetree.engine.directories import remove_table_directory
from spark_mergetree.errors import MergeTreeError, StorageError, TableExistsError, TableNotFoundError
from spark_mergetree.fileops import FileLock, escape_for_file_name

if TYPE_CHECKING:
    from spark_mergetree.catalog.catalog import Catalog


def drop_table(layout: CatalogLayout, name: TableName, drop_delay: float, *, sync: bool = False,
               if_exists: bool = False) -> DroppedTable | None:
    """DROP TABLE: move the metadata to metadata_dropped/ (the commit point); data stays for now.

    The data is deleted by ``collect_dropped`` once ``drop_delay`` has passed and no reader
    lease is held. ``sync=True`` deletes it right away unless a reader holds it (then it is
    left due for the next collection); ``data_removed`` in the result tells which happened.
    Never waits for readers.
    """
    database, table = split_name(name)
    with layout.guard_tables((database, table)):
        try:
            database_dir = layout.database_path(database)
            layout.table_info((database, table))
        except TableNotFoundError:
            if if_exists:
                return None
            raise
        dropped = drop_locked(layout, database, database_dir, table, drop_delay, allow_detached=False)
    if sync:
        return drop_now(layout, dropped, drop_delay)
    return dropped



def drop_locked(layout: CatalogLayout, database: str, database_dir: Path, table: str, drop_delay: float, *,
                allow_detached: bool) -> DroppedTable:
    info = layout.table_info((database, table), allow_detached=allow_detached)
    target = layout.dropped_file(database, table, info.uuid)
    now = time.time()
    # The mtime is the drop time (ClickHouse reads it the same way after a restart); set it
    # before the rename so no crash can leave an older, earlier-due time behind.
    os.utime(info.metadata_path, (now, now))
    fileops.rename_noreplace(info.metadata_path, target, f"dropped table {database}.{table} ({info.uuid})")
    fileops.fsync_dir(layout.dropped_dir)
    fileops.fsync_dir(database_dir)
    marker = database_dir / (escape_for_file_name(table) + ".sql.detached")
    fileops.remove_quietly(marker)
    fileops.remove_quietly(layout.data_link(database, table))
    return DroppedTable(database, table, info.uuid, target, info.data_path, now, now + drop_delay)



def drop_now(layout: CatalogLayout, dropped: DroppedTable, drop_delay: float) -> DroppedTable:
    if purge(layout, dropped):
        return dataclasses.replace(dropped, data_removed=True)
    # In use: make it due, so the first collection after the last reader leaves removes it.
    due_now = time.time() - drop_delay
    try:
        os.utime(dropped.metadata_path, (due_now, due_now))
    except FileNotFoundError:
        pass
    return dataclasses.replace(dropped, due_time=due_now + drop_delay)



def purge_dropped(layout: CatalogLayout, table_uuid: str, drop_delay: float) -> DroppedTable:
    """Delete a dropped table's data now, without waiting for the delay (DROP ... SYNC after the fact).

    If a reader holds it, nothing is deleted and the entry is made due, so the first
    collection after the last reader leaves removes it; ``data_removed`` says which happened.
    """
    for dropped in layout.dropped_tables(drop_delay):
        if dropped.uuid == table_uuid:
            return drop_now(layout, dropped, drop_delay)
    raise TableNotFoundError(f"no dropped table with UUID {table_uuid} in {layout.dropped_dir}")



def undrop_table(layout: CatalogLayout, name: TableName, *, uuid: str | None = None) -> TableInfo:
    """UNDROP TABLE: move the newest (or the given ``uuid``) dropped entry back under its name."""
    database, table = split_name(name)
    candidates = [d for d in layout.dropped_tables(0.0)
                  if (d.database, d.name) == (database, table) and (uuid is None or d.uuid == uuid)]
    if not candidates:
        raise TableNotFoundError(f"no dropped table {database}.{table}"
                                 + (f" with UUID {uuid}" if uuid else "") + " in metadata_dropped/")
    dropped = candidates[-1]
    with layout.guard_tables((database, table)):
        database_dir = layout.database_path(database)
        guard = layout.try_guard("dropped", dropped.uuid)
        if guard is None:
            raise StorageError(f"dropped table {database}.{table} ({dropped.uuid}) is being deleted right now")
        with guard:
            if not dropped.metadata_path.exists():
                raise TableNotFoundError(f"dropped table {database}.{table} ({dropped.uuid}) was already deleted")
            if not dropped.data_path.is_dir():
                raise TableNotFoundError(
                    f"dropped table {database}.{table} ({dropped.uuid}): data {dropped.data_path} is gone")
            target = layout.table_file(database_dir, table)
            if target.with_name(target.name + ".detached").exists():
                raise TableExistsError(f"table {database}.{table} exists (detached)")
            fileops.rename_noreplace(dropped.metadata_path, target, f"table {database}.{table}")
            fileops.fsync_dir(database_dir)
            fileops.fsync_dir(layout.dropped_dir)
        layout.link_table(database, table, dropped.uuid)
        return layout.table_info((database, table))



def collect_dropped(layout: CatalogLayout, drop_delay: float, now: float | None = None) -> list[str]:
    """Delete the data of dropped tables that are due and unused; returns their UUIDs.

    Safe to run from several processes at once; a table in use is skipped, not waited for.
    """
    now = time.time() if now is None else now
    collected = []
    failures = []
    for dropped in layout.dropped_tables(drop_delay):
        data_missing = not dropped.data_path.exists()
        if dropped.due_time > now and not data_missing:
            continue
        try:
            if purge(layout, dropped):
                collected.append(dropped.uuid)
        except OSError as exc:  # one bad directory must not keep the others forever
            failures.append(f"{dropped.database}.{dropped.name} ({dropped.data_path}): {exc}")
    if failures:
        raise StorageError(f"could not delete dropped tables (deleted {len(collected)}): " + "; ".join(failures))
    return collected



def purge(layout: CatalogLayout, dropped: DroppedTable) -> bool:
    """Delete a dropped table's data then its metadata_dropped/ entry, unless a reader holds it."""
    guard = layout.try_guard("dropped", dropped.uuid)
    if guard is None:
        return False
    with guard:
        if not dropped.metadata_path.exists():
            return False
        trash = layout.trash_path(dropped.uuid)
        if dropped.data_path.is_dir():
            lease = FileLock.try_acquire(dropped.data_path / READER_LEASE_FILE, exclusive=True)
            if lease is None:
                return False
            with lease:
                if trash.exists():
                    remove_table_directory(trash)
                # One rename takes the directory away from every later reader, so deleting
                # its contents afterwards can never race a new lease.
                os.rename(dropped.data_path, trash)
                fileops.fsync_dir(dropped.data_path.parent)
        if trash.exists():
            # With the parts on every disk of the table's storage policy.
            remove_table_directory(trash)
        fileops.remove_quietly(dropped.metadata_path)
        fileops.fsync_dir(layout.dropped_dir)
        return True


class DropCollector(threading.Thread):
    """The background drop: a daemon thread calling ``Catalog.collect_dropped`` periodically."""

    def __init__(self, catalog: Catalog, interval: float) -> None:
        super().__init__(name=f"mergetree-drop-collector:{catalog.root}", daemon=True)
        self.catalog = catalog
        self.interval = interval
        self.collected: list[str] = []
        self.last_error: Exception | None = None
        self._stopping = threading.Event()

    def run(self) -> None:
        while not self._stopping.wait(self.interval):
            try:
                self.collected += self.catalog.collect_dropped()
            except (OSError, MergeTreeError) as exc:  # retried next round, as ClickHouse does
                self.last_error = exc

    def stop(self) -> None:
        self._stopping.set()
        self.join()

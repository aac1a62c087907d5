"""Catalog: Atomic databases and tables on a root laid out exactly as a ClickHouse server's path.

The user-facing facade. Each concept lives in its own module: layout.py (names → metadata files →
UUID directories, the DDL guards; format_spec/catalog.md), ddl.py (CREATE, RENAME, EXCHANGE,
DETACH, ATTACH), drops.py (DROP, UNDROP, deleting dropped tables' data), leases.py (reader
leases), recovery.py (repairs after crashes).

Names appear only in file names, so RENAME and EXCHANGE are one renameat2 call each, DROP is one
rename into metadata_dropped/, and nothing waits for readers: a reader holds a table by its UUID
directory, which no DDL moves. Data is deleted only by the collector, only after the delay, and
only when no reader lease is held.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spark_mergetree.catalog import ddl, drops, leases, recovery
from spark_mergetree.catalog.drops import DropCollector
from spark_mergetree.catalog.layout import CatalogLayout, DroppedTable, TableInfo, TableName
from spark_mergetree.catalog.leases import ReaderLease
from spark_mergetree.errors import InvalidOptionError
from spark_mergetree.recovery import RecoveryReport

if TYPE_CHECKING:
    from spark_mergetree.engine.table import MergeTreeTable

DEFAULT_DROP_DELAY_SECONDS = 480.0  # ClickHouse's database_atomic_delay_before_drop_table_sec


class Catalog:
    """Atomic databases and tables under ``root`` (a ClickHouse server path; chdb can share it).

    ``drop_delay`` seconds pass between DROP and deleting the data (ClickHouse's default: 480).
    Opening and reading never delete anything. ``recover()`` (discards half-done DDL, repairs
    symlinks, collects due drops) runs when called, and before this object's first DDL statement.
    """

    def __init__(self, root: str | os.PathLike[str], *, drop_delay: float = DEFAULT_DROP_DELAY_SECONDS) -> None:
        if drop_delay < 0:
            raise InvalidOptionError(f"drop_delay={drop_delay!r} must be >= 0 seconds")
        self.layout = CatalogLayout(root)
        self.root = self.layout.root
        self.drop_delay = float(drop_delay)
        self.layout.make_directories()
        self.last_recovery: RecoveryReport | None = None  # set by recover()

    def _before_writing(self) -> None:
        """The first DDL through this object repairs what crashes left (recovery, once)."""
        if self.last_recovery is None:
            self.recover()

    # ----------------------------------------------------------------- paths

    @property
    def metadata_dir(self) -> Path:
        return self.layout.metadata_dir

    @property
    def dropped_dir(self) -> Path:
        return self.layout.dropped_dir

    def store_path(self, some_uuid: str) -> Path:
        """`store/<first 3 hex>/<uuid>/`: where a table's data or a database's metadata lives."""
        return self.layout.store_path(some_uuid)

    # ----------------------------------------------------------------- databases

    def databases(self) -> list[str]:
        """Names of the Atomic databases, sorted."""
        return self.layout.databases()

    def database_uuid(self, database: str) -> str:
        return self.layout.database_uuid(database)

    def database_path(self, database: str) -> Path:
        """The database's metadata directory `store/xxx/<db uuid>/` (holds its tables' .sql files)."""
        return self.layout.database_path(database)

    def create_database(self, database: str, *, if_not_exists: bool = False) -> str:
        """Create an Atomic database; returns its UUID. Commit point: rename of `<db>.sql.tmp`."""
        self._before_writing()
        return ddl.create_database(self.layout, database, if_not_exists=if_not_exists)

    def drop_database(self, database: str, *, if_exists: bool = False) -> list[DroppedTable]:
        """Drop every table of the database (into metadata_dropped/), then the database itself.

        Commit point of the database removal: unlinking `metadata/<db>.sql`. Returns the tables
        moved to metadata_dropped/ (their data is deleted later, as for DROP TABLE).
        """
        self._before_writing()
        return ddl.drop_database(self.layout, database, self.drop_delay, if_exists=if_exists)

    # ----------------------------------------------------------------- tables: reading

    def tables(self, database: str) -> list[str]:
        """Attached tables of ``database``, sorted."""
        entries = self.layout.table_entries(database, self.layout.database_path(database))
        return sorted(info.name for info in entries if not info.detached)

    def detached_tables(self, database: str) -> list[str]:
        """Permanently detached tables of ``database``, sorted."""
        entries = self.layout.table_entries(database, self.layout.database_path(database))
        return sorted(info.name for info in entries if info.detached)

    def table_info(self, name: TableName, *, allow_detached: bool = False) -> TableInfo:
        return self.layout.table_info(name, allow_detached=allow_detached)

    def table_uuid(self, name: TableName) -> str:
        return self.table_info(name).uuid

    def data_path(self, name: TableName) -> Path:
        """The table's data directory `store/<first 3>/<uuid>/` (stable across RENAME/EXCHANGE)."""
        return self.table_info(name).data_path

    def table(self, name: TableName) -> MergeTreeTable:
        """Open the table with the engine, from its data directory and metadata statement."""
        from spark_mergetree.engine.table import MergeTreeTable

        info = self.table_info(name)
        return MergeTreeTable.open(info.data_path, create_statement=info.statement)

    # ----------------------------------------------------------------- tables: DDL

    def create_table(
        self,
        name: TableName,
        schema: Sequence[tuple[str, str]] | Any,
        order_by: str | Sequence[str] | None = None,
        partition_by: str | Sequence[str] | None = None,
        primary_key: str | Sequence[str] | None = None,
        settings: Mapping[str, Any] | None = None,
        *,
        if_not_exists: bool = False,
        engine: str | None = None,
    ) -> MergeTreeTable:
        """CREATE TABLE and open it (see ``define_table`` for what happens on disk)."""
        self.define_table(name, schema, order_by, partition_by, primary_key, settings, if_not_exists=if_not_exists,
                          engine=engine)
        return self.table(name)

    def define_table(
        self,
        name: TableName,
        schema: Sequence[tuple[str, str]] | Any,
        order_by: str | Sequence[str] | None = None,
        partition_by: str | Sequence[str] | None = None,
        primary_key: str | Sequence[str] | None = None,
        settings: Mapping[str, Any] | None = None,
        *,
        if_not_exists: bool = False,
        engine: str | None = None,
    ) -> TableInfo:
        """CREATE TABLE without opening it: data directory first, metadata rename last.

        ``schema`` is ``[(column, ClickHouse type), ...]`` or a parsed TableDefinition.
        ``engine``: one of the MergeTree family, e.g. "ReplacingMergeTree(version)" (None: MergeTree).
        ``settings``: ClickHouse MergeTree settings go into the statement; the engine's own
        (codec, auto_merge, storage_policy, ...) into `_mergetree/settings.json` of the data
        directory, where ClickHouse never looks. The commit point is renameat2(`<t>.sql.tmp`,
        `<t>.sql`, RENAME_NOREPLACE): of two concurrent creators exactly one wins, the other gets
        TableExistsError (or the winner's table with ``if_not_exists``).
        """
        self._before_writing()
        return ddl.define_table(self.layout, name, schema, order_by, partition_by, primary_key, settings,
                                if_not_exists=if_not_exists, engine=engine)

    def rename_table(self, source: TableName, target: TableName) -> TableInfo:
        """RENAME TABLE (also to another database): one renameat2 RENAME_NOREPLACE of the metadata file."""
        self._before_writing()
        return ddl.rename_table(self.layout, source, target)

    def exchange_tables(self, first: TableName, second: TableName) -> None:
        """EXCHANGE TABLES: swap two metadata files with one renameat2 RENAME_EXCHANGE."""
        self._before_writing()
        ddl.exchange_tables(self.layout, first, second)

    def detach_table(self, name: TableName) -> TableInfo:
        """DETACH TABLE ... PERMANENTLY: an empty `<t>.sql.detached` marker next to `<t>.sql`.

        The name stays taken (CREATE/RENAME onto it fail) until ATTACH or DROP; readers holding
        the UUID are unaffected.
        """
        self._before_writing()
        return ddl.detach_table(self.layout, name)

    def attach_table(self, name: TableName, statement: str | None = None) -> TableInfo:
        """ATTACH TABLE: of a detached table, or (with ``statement``) of an existing data directory.

        Without ``statement`` the table must be detached; an attached table cannot be attached
        again. With a full `ATTACH/CREATE TABLE ... UUID '<uuid>' (...)` statement, the data
        directory `store/<p>/<uuid>/` must exist (e.g. made by MergeTreeTable.create or copied
        from another server) and its UUID must not belong to any table of this root; the
        metadata file is then committed exactly as CREATE does, without touching the data.
        """
        self._before_writing()
        return ddl.attach_table(self.layout, name, statement)

    # ----------------------------------------------------------------- drops

    def drop_table(self, name: TableName, *, sync: bool = False, if_exists: bool = False) -> DroppedTable | None:
        """DROP TABLE: move the metadata to metadata_dropped/ (the commit point); data stays for now.

        The data is deleted by ``collect_dropped`` once ``drop_delay`` has passed and no reader
        lease is held. ``sync=True`` deletes it right away unless a reader holds it (then it is
        left due for the next collection); ``data_removed`` in the result tells which happened.
        Never waits for readers.
        """
        self._before_writing()
        return drops.drop_table(self.layout, name, self.drop_delay, sync=sync, if_exists=if_exists)

    def purge_dropped(self, table_uuid: str) -> DroppedTable:
        """Delete a dropped table's data now, without waiting for the delay (DROP ... SYNC after the fact).

        If a reader holds it, nothing is deleted and the entry is made due, so the first
        collection after the last reader leaves removes it; ``data_removed`` says which happened.
        """
        self._before_writing()
        return drops.purge_dropped(self.layout, table_uuid, self.drop_delay)

    def dropped_tables(self) -> list[DroppedTable]:
        """Tables in metadata_dropped/, oldest drop first."""
        return self.layout.dropped_tables(self.drop_delay)

    def undrop_table(self, name: TableName, *, uuid: str | None = None) -> TableInfo:
        """UNDROP TABLE: move the newest (or the given ``uuid``) dropped entry back under its name."""
        self._before_writing()
        return drops.undrop_table(self.layout, name, uuid=uuid)

    def collect_dropped(self, now: float | None = None) -> list[str]:
        """Delete the data of dropped tables that are due and unused; returns their UUIDs.

        Safe to run from several processes at once; a table in use is skipped, not waited for.
        (This is the last step of `recover()`; it does not run the rest of it.)
        """
        return drops.collect_dropped(self.layout, self.drop_delay, now)

    def start_collector(self, interval: float = 60.0) -> DropCollector:
        """Run ``collect_dropped`` every ``interval`` seconds in a daemon thread (stop() to end it)."""
        if interval <= 0:
            raise InvalidOptionError(f"interval={interval!r} must be > 0 seconds")
        collector = DropCollector(self, interval)
        collector.start()
        return collector

    # ----------------------------------------------------------------- readers

    def pin(self, name_or_uuid: TableName) -> ReaderLease:
        """Hold a table's data against deletion while reading (by name or by UUID).

        The lease names the UUID directory, so a RENAME/EXCHANGE/DROP meanwhile changes nothing
        for the holder. Use as a context manager or call ``release()``.
        """
        return leases.pin(self.layout, name_or_uuid)

    def in_use(self, table_uuid: str) -> bool:
        """True if some process holds a reader lease on the table's data."""
        return leases.in_use(self.layout, table_uuid)

    # ----------------------------------------------------------------- recovery

    def recover(self) -> RecoveryReport:
        """Bring the root to a consistent state after crashes; safe while other processes run DDL.

        Every step takes the guard of what it repairs without waiting and skips what is busy:
        a busy guard means a live process, not a crash.
        """
        self.last_recovery = recovery.recover(self.layout, self.drop_delay)
        return self.last_recovery

    def unreferenced_store_dirs(self) -> list[Path]:
        """`store/xxx/<uuid>` directories no metadata names and no create in progress claims."""
        return recovery.unreferenced_store_dirs(self.layout)

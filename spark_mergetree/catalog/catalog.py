"""Catalog: Atomic databases and tables on a root laid out exactly as a ClickHouse server's path.

Layout (see format_spec/catalog.md):

    metadata/<db>.sql                       ATTACH DATABASE _ UUID '<db uuid>' ENGINE = Atomic
    metadata/<db> -> ../store/xxx/<db uuid>  the database's metadata directory (chdb's `default`:
                                             this symlink alone, no default.sql; it names the UUID)
    store/xxx/<db uuid>/<t>.sql             ATTACH TABLE _ UUID '<uuid>' (...) ENGINE = MergeTree ...
    store/xxx/<db uuid>/<t>.sql.detached    empty marker: table detached permanently
    store/xxx/<uuid>/                       the table's data (format_version.txt, detached/, parts)
    data/<db>/<t> -> ../../store/xxx/<uuid>  convenience symlinks (repaired, never trusted)
    metadata_dropped/<db>.<t>.<uuid>.sql    dropped, data deleted once due and unused

Names appear only in file names, so RENAME and EXCHANGE are one renameat2 call each, DROP is one
rename into metadata_dropped/, and nothing waits for readers: a reader holds a table by its UUID
directory, which no DDL moves. Data is deleted only by the collector, only after the delay, and
only when no reader lease is held.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spark_mergetree import fileops
from spark_mergetree.catalog import statements
from spark_mergetree.errors import (
    FormatError,
    InvalidOptionError,
    MergeTreeError,
    StorageError,
    TableExistsError,
    TableNotFoundError,
    UnsupportedError,
)
from spark_mergetree.fileops import FileLock, escape_for_file_name, unescape_for_file_name
from spark_mergetree.storage.location import local_path

if TYPE_CHECKING:
    from spark_mergetree.engine.table import MergeTreeTable
    from spark_mergetree.expressions.ddl import TableDefinition

DEFAULT_DATABASE = "default"  # ClickHouse's; chdb keeps it as a symlink without a `.sql` file
DEFAULT_DROP_DELAY_SECONDS = 480.0  # ClickHouse's database_atomic_delay_before_drop_table_sec
READER_LEASE_FILE = "mergetree_readers.lock"
_GUARD_DIR = "mergetree_guards"
_TRASH_PREFIX = "mergetree_dropping."
_UUID_RE = re.compile(r"\A[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\Z")

TableName = str | tuple[str, str]


@dataclass(frozen=True)
class TableInfo:
    """One table entry of a database (attached or permanently detached)."""

    database: str
    name: str
    uuid: str
    data_path: Path
    metadata_path: Path
    detached: bool
    statement: str

    @property
    def definition(self) -> TableDefinition:
        """The metadata statement parsed (columns, keys, settings)."""
        from spark_mergetree.expressions.ddl import parse_create

        return parse_create(self.statement)


@dataclass(frozen=True)
class DroppedTable:
    """A table in metadata_dropped/: invisible by name, data kept until ``due_time`` and unused."""

    database: str
    name: str
    uuid: str
    metadata_path: Path
    data_path: Path
    drop_time: float
    due_time: float
    data_removed: bool = False


@dataclass
class RecoveryReport:
    """What opening the catalog repaired; ``unreferenced_store_dirs`` are reported, never removed."""

    removed_temporary_files: list[Path] = field(default_factory=list)
    removed_orphan_store_dirs: list[Path] = field(default_factory=list)
    repaired_symlinks: list[Path] = field(default_factory=list)
    removed_leftovers: list[Path] = field(default_factory=list)
    collected: list[str] = field(default_factory=list)
    unreferenced_store_dirs: list[Path] = field(default_factory=list)
    # `metadata/<db>` symlinks pointing at a directory with tables that `<db>.sql` does not name: left alone.
    conflicting_database_links: list[Path] = field(default_factory=list)


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


def _split_settings(settings: Mapping[str, Any] | None) -> tuple[dict[str, Any] | None, dict[str, Any]]:
    """(ClickHouse settings for the metadata statement, the engine's own settings, validated)."""
    from spark_mergetree.engine.metadata import split_settings

    clickhouse, ours = split_settings(settings)
    return (clickhouse or None), ours


def _split_name(name: TableName) -> tuple[str, str]:
    if isinstance(name, tuple):
        if len(name) != 2 or not all(isinstance(x, str) for x in name):
            raise InvalidOptionError(f"table name {name!r} must be 'db.table' or a (database, table) pair")
        database, table = name
    elif isinstance(name, str):
        database, dot, table = name.partition(".")
        if not dot:
            raise InvalidOptionError(f"table name {name!r} must be qualified as 'database.table'")
    else:
        raise InvalidOptionError(f"table name {name!r} must be 'db.table' or a (database, table) pair")
    _check_name(database, "database")
    _check_name(table, "table")
    return database, table


def _check_name(name: str, what: str) -> None:
    if not isinstance(name, str) or not name:
        raise InvalidOptionError(f"{what} name {name!r} is empty")
    if "\0" in name:
        raise InvalidOptionError(f"{what} name {name!r} contains a NUL byte")
    if len(escape_for_file_name(name)) > 200:
        raise InvalidOptionError(f"{what} name {name[:40]!r}... is too long for a file name once escaped")


def _file_size(path: Path) -> int | None:
    """Size of a file, or None if it is gone (other processes unlink markers at any moment)."""
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return None


def _read_text(path: Path) -> str:
    with open(path, encoding="utf-8") as handle:
        return handle.read()


class Catalog:
    """Atomic databases and tables under ``root`` (a ClickHouse server path; chdb can share it).

    ``drop_delay`` seconds pass between DROP and deleting the data (ClickHouse's default: 480).
    Opening runs ``recover()``: discards half-done DDL, repairs symlinks, collects due drops.
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        drop_delay: float = DEFAULT_DROP_DELAY_SECONDS,
        recover: bool = True,
    ) -> None:
        if drop_delay < 0:
            raise InvalidOptionError(f"drop_delay={drop_delay!r} must be >= 0 seconds")
        self.root = local_path(root).absolute()  # URLs of other file systems are refused, not made local
        self.drop_delay = float(drop_delay)
        for sub in ("metadata", "metadata_dropped", "store", "data", "tmp", f"tmp/{_GUARD_DIR}"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        self.last_recovery: RecoveryReport | None = self.recover() if recover else None

    # ----------------------------------------------------------------- paths

    @property
    def metadata_dir(self) -> Path:
        return self.root / "metadata"

    @property
    def _scratch_dir(self) -> Path:
        return self.root / "tmp"

    @property
    def dropped_dir(self) -> Path:
        return self.root / "metadata_dropped"

    def store_path(self, some_uuid: str) -> Path:
        """`store/<first 3 hex>/<uuid>/`: where a table's data or a database's metadata lives."""
        return self.root / "store" / some_uuid[:3] / some_uuid

    def _database_file(self, database: str) -> Path:
        return self.metadata_dir / f"{escape_for_file_name(database)}.sql"

    def _table_file(self, database_dir: Path, table: str) -> Path:
        return database_dir / f"{escape_for_file_name(table)}.sql"

    def _data_link(self, database: str, table: str) -> Path:
        return self.root / "data" / escape_for_file_name(database) / escape_for_file_name(table)

    def _dropped_file(self, database: str, table: str, table_uuid: str) -> Path:
        return self.dropped_dir / f"{escape_for_file_name(database)}.{escape_for_file_name(table)}.{table_uuid}.sql"

    # ----------------------------------------------------------------- guards

    def _guard_path(self, kind: str, *names: str) -> Path:
        return self.root / "tmp" / _GUARD_DIR / (kind + "." + ".".join(escape_for_file_name(n) for n in names) + ".lock")

    def _database_guard(self, database: str, *, exclusive: bool) -> FileLock:
        # DDL on tables holds its database shared; CREATE/DROP DATABASE hold it exclusively.
        return FileLock(self._guard_path("db", database), exclusive=exclusive, blocking=True)

    def _table_guard(self, database: str, table: str) -> FileLock:
        return FileLock(self._guard_path("table", database, table), exclusive=True, blocking=True)

    @contextmanager
    def _guard_tables(self, *names: tuple[str, str]) -> Iterator[None]:
        """DDLGuard: the databases shared, then the table names exclusively, in sorted order."""
        with ExitStack() as stack:
            for database in sorted({db for db, _ in names}):
                stack.enter_context(self._database_guard(database, exclusive=False))
            for database, table in sorted(set(names)):
                stack.enter_context(self._table_guard(database, table))
            yield

    # ----------------------------------------------------------------- databases

    def databases(self) -> list[str]:
        """Names of the Atomic databases, sorted."""
        names = []
        for entry in self.metadata_dir.iterdir():
            if entry.suffix != ".sql" or not entry.is_file():
                continue
            try:
                uuid, engine = statements.parse_database_statement(_read_text(entry), str(entry))
            except (FormatError, FileNotFoundError):
                continue
            if uuid is not None and engine.lower() == "atomic":
                names.append(unescape_for_file_name(entry.name[:-4]))
        if DEFAULT_DATABASE not in names and self._linked_default_uuid() is not None:
            names.append(DEFAULT_DATABASE)
        return sorted(names)

    def _linked_default_uuid(self) -> str | None:
        """The UUID of ClickHouse's `default` database when only its symlink says it exists.

        clickhouse-local and chdb never write `metadata/default.sql`: on every start they take the
        database's UUID from the name of the directory `metadata/default` points to (and make that
        symlink with the first table). A server writes the `.sql` file; then that one is the truth.
        """
        try:
            target = os.readlink(self.metadata_dir / DEFAULT_DATABASE)
        except OSError:  # missing, or not a symlink
            return None
        name = Path(target).name.lower()
        return name if _UUID_RE.match(name) else None

    def database_uuid(self, database: str) -> str:
        _check_name(database, "database")
        path = self._database_file(database)
        try:
            text = _read_text(path)
        except FileNotFoundError:
            linked = self._linked_default_uuid() if database == DEFAULT_DATABASE else None
            if linked is not None:
                return linked
            raise TableNotFoundError(f"database {database!r} does not exist ({path} is missing)") from None
        uuid, engine = statements.parse_database_statement(text, str(path))
        if uuid is None or engine.lower() != "atomic":
            raise UnsupportedError(
                f"database {database!r} has engine {engine or 'unknown'!r} ({path}); only Atomic is supported"
            )
        return uuid

    def database_path(self, database: str) -> Path:
        """The database's metadata directory `store/xxx/<db uuid>/` (holds its tables' .sql files)."""
        return self.store_path(self.database_uuid(database))

    def create_database(self, database: str, *, if_not_exists: bool = False) -> str:
        """Create an Atomic database; returns its UUID. Commit point: rename of `<db>.sql.tmp`."""
        _check_name(database, "database")
        with self._database_guard(database, exclusive=True):
            database_file = self._database_file(database)
            link = self.metadata_dir / escape_for_file_name(database)
            if database_file.exists() or (database == DEFAULT_DATABASE and self._linked_default_uuid()):
                if if_not_exists:
                    return self.database_uuid(database)
                where = database_file if database_file.exists() else link
                raise TableExistsError(f"database {database!r} already exists ({where})")
            temporary = database_file.with_name(database_file.name + ".tmp")
            if temporary.exists():
                self._discard_database_temporary(temporary, RecoveryReport())
            # A symlink without `<db>.sql` is what an interrupted DROP DATABASE leaves; it is the
            # last pointer to the old directory, so clear that before our symlink replaces it.
            # One whose directory holds tables is never replaced: that would hide them all.
            if link.is_symlink():
                self._remove_database_leftovers(database)
                if link.is_symlink():
                    raise StorageError(
                        f"CREATE DATABASE {database!r}: {link} points to {link.parent / os.readlink(link)}, which "
                        f"holds tables, but {database_file} is missing; restore that file (ATTACH DATABASE _ UUID "
                        f"'<the directory's UUID>' ENGINE = Atomic) instead of creating the database again")
            database_uuid = statements.new_uuid()
            # The temporary file names the UUID before its directory exists, so a crash leaves
            # nothing recovery cannot attribute.
            fileops.write_new_file(temporary, statements.database_statement(database_uuid).encode())
            fileops.fsync_dir(self.metadata_dir)
            directory = self.store_path(database_uuid)
            directory.mkdir(parents=True)
            fileops.fsync_dir(directory.parent)
            # The symlink goes in before the commit: from the commit on, the directory always has
            # a pointer that recovery follows, even if DROP DATABASE is interrupted right after.
            self._link_database(database, database_uuid)
            try:
                fileops.rename_noreplace(temporary, database_file, f"database {database!r}")
            except TableExistsError:
                shutil.rmtree(directory, ignore_errors=True)
                fileops.remove_quietly(temporary)
                if if_not_exists:
                    return self.database_uuid(database)
                raise
            fileops.fsync_dir(self.metadata_dir)
            return database_uuid

    def _link_database(self, database: str, database_uuid: str) -> bool:
        escaped = escape_for_file_name(database)
        link = self.metadata_dir / escaped
        target = f"../store/{database_uuid[:3]}/{database_uuid}"
        changed = not (link.is_symlink() and os.readlink(link) == target)
        if changed and link.is_symlink():
            current = link.parent / os.readlink(link)
            if current.resolve() != self.store_path(database_uuid).resolve() and any(current.glob("*.sql")):
                raise StorageError(
                    f"database {database!r}: {link} points to {current}, which holds tables, while "
                    f"{self._database_file(database)} names {database_uuid}; left as it is")
        fileops.replace_symlink(link, target, self._scratch_dir)
        (self.root / "data" / escaped).mkdir(parents=True, exist_ok=True)
        return changed

    def drop_database(self, database: str, *, if_exists: bool = False) -> list[DroppedTable]:
        """Drop every table of the database (into metadata_dropped/), then the database itself.

        Commit point of the database removal: unlinking `metadata/<db>.sql`. Returns the tables
        moved to metadata_dropped/ (their data is deleted later, as for DROP TABLE).
        """
        _check_name(database, "database")
        with self._database_guard(database, exclusive=True):
            try:
                database_dir = self.database_path(database)
            except TableNotFoundError:
                if if_exists:
                    return []
                raise
            dropped = []
            for info in self._table_entries(database, database_dir):
                with self._table_guard(database, info.name):
                    dropped.append(self._drop_locked(database, database_dir, info.name, allow_detached=True))
            report = RecoveryReport()
            for temporary in database_dir.glob("*.sql.tmp"):
                self._discard_table_temporary(temporary, report)
            database_file = self._database_file(database)
            try:
                os.unlink(database_file)
            except FileNotFoundError:
                # ClickHouse's `default` without a `.sql` file: its symlink is the database.
                os.unlink(self.metadata_dir / escape_for_file_name(database))
            fileops.fsync_dir(self.metadata_dir)
            self._remove_database_leftovers(database)
            if database_dir.is_dir() and not any(database_dir.glob("*.sql")):
                shutil.rmtree(database_dir, ignore_errors=True)  # also when its symlink was missing
            return dropped

    def _remove_database_leftovers(self, database: str) -> list[Path]:
        """After `<db>.sql` is gone: the symlink, its directory (markers only) and data/<db>/."""
        escaped = escape_for_file_name(database)
        removed = []
        link = self.metadata_dir / escaped
        if link.is_symlink():
            target = (link.parent / os.readlink(link)).resolve()
            if target.is_dir() and any(target.glob("*.sql")):
                return removed  # tables still live there: not ours to remove
            if target.is_dir():
                report = RecoveryReport()
                for temporary in target.glob("*.sql.tmp"):  # creates that crashed in it
                    self._discard_table_temporary(temporary, report)
                removed += report.removed_orphan_store_dirs
                shutil.rmtree(target, ignore_errors=True)
                removed.append(target)
            fileops.remove_quietly(link)
            removed.append(link)
        data_dir = self.root / "data" / escaped
        if data_dir.is_dir() and all(entry.is_symlink() for entry in data_dir.iterdir()):
            shutil.rmtree(data_dir, ignore_errors=True)
            removed.append(data_dir)
        return removed

    # ----------------------------------------------------------------- tables: reading

    def _table_entries(self, database: str, database_dir: Path) -> list[TableInfo]:
        entries = []
        for path in sorted(database_dir.glob("*.sql")):
            table = unescape_for_file_name(path.name[:-4])
            try:
                text = _read_text(path)
            except FileNotFoundError:
                continue  # renamed or dropped concurrently
            table_uuid = statements.table_uuid_of(text, str(path))
            marker = path.with_name(path.name + ".detached")
            entries.append(TableInfo(database, table, table_uuid, self.store_path(table_uuid), path,
                                     marker.exists(), text))
        # Older servers moved the statement itself to `<t>.sql.detached`.
        for marker in sorted(database_dir.glob("*.sql.detached")):
            if marker.with_name(marker.name[:-9]).exists() or not _file_size(marker):
                continue
            table = unescape_for_file_name(marker.name[:-13])
            try:
                text = _read_text(marker)
            except FileNotFoundError:
                continue  # attached or dropped concurrently
            table_uuid = statements.table_uuid_of(text, str(marker))
            entries.append(TableInfo(database, table, table_uuid, self.store_path(table_uuid), marker, True, text))
        return entries

    def tables(self, database: str) -> list[str]:
        """Attached tables of ``database``, sorted."""
        return sorted(info.name for info in self._table_entries(database, self.database_path(database))
                      if not info.detached)

    def detached_tables(self, database: str) -> list[str]:
        """Permanently detached tables of ``database``, sorted."""
        return sorted(info.name for info in self._table_entries(database, self.database_path(database))
                      if info.detached)

    def table_info(self, name: TableName, *, allow_detached: bool = False) -> TableInfo:
        database, table = _split_name(name)
        database_dir = self.database_path(database)
        path = self._table_file(database_dir, table)
        marker = path.with_name(path.name + ".detached")
        try:
            text = _read_text(path)
            source = path
        except FileNotFoundError:
            if not (allow_detached and _file_size(marker)):
                raise TableNotFoundError(f"table {database}.{table} does not exist ({path} is missing)") from None
            text, source = _read_text(marker), marker
        detached = marker.exists()
        if detached and not allow_detached:
            raise TableNotFoundError(f"table {database}.{table} is detached ({marker}); attach it first")
        table_uuid = statements.table_uuid_of(text, str(source))
        return TableInfo(database, table, table_uuid, self.store_path(table_uuid), source, detached, text)

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
    ) -> MergeTreeTable:
        """CREATE TABLE and open it (see ``define_table`` for what happens on disk)."""
        self.define_table(name, schema, order_by, partition_by, primary_key, settings, if_not_exists=if_not_exists)
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
    ) -> TableInfo:
        """CREATE TABLE without opening it: data directory first, metadata rename last.

        ``schema`` is ``[(column, ClickHouse type), ...]`` or a parsed TableDefinition.
        ``settings``: ClickHouse MergeTree settings go into the statement; the engine's own
        (codec, auto_merge, storage_policy, ...) into `_mergetree/settings.json` of the data
        directory, where ClickHouse never looks. The commit point is renameat2(`<t>.sql.tmp`, `<t>.sql`, RENAME_NOREPLACE): of two concurrent
        creators exactly one wins, the other gets TableExistsError (or the winner's table with
        ``if_not_exists``).
        """
        from spark_mergetree.engine.table import MergeTreeTable, remove_table_directory
        from spark_mergetree.expressions.ddl import format_attach

        database, table = _split_name(name)
        table_uuid = statements.new_uuid()
        clickhouse_settings, engine_settings = _split_settings(settings)
        definition = statements.table_definition(table_uuid, schema, order_by, partition_by, primary_key,
                                                 clickhouse_settings)
        statement = format_attach(definition)
        data_path = self.store_path(table_uuid)
        # Everything is checked (keys, settings, storage policy) before anything is written.
        new_table = MergeTreeTable.new(data_path, definition, engine_settings)
        with self._guard_tables((database, table)):
            database_dir = self.database_path(database)
            metadata_file = self._table_file(database_dir, table)
            if metadata_file.exists() or metadata_file.with_name(metadata_file.name + ".detached").exists():
                if if_not_exists:
                    return self.table_info((database, table), allow_detached=True)
                raise TableExistsError(f"table {database}.{table} already exists ({metadata_file})")
            temporary = metadata_file.with_name(metadata_file.name + ".tmp")
            if temporary.exists():  # we hold the name's guard, so this is a crashed create
                self._discard_table_temporary(temporary, RecoveryReport())
            fileops.write_new_file(temporary, statement.encode())
            fileops.fsync_dir(database_dir)
            # The engine's own creation path; the statement stays in the metadata file alone.
            new_table.write_directory(with_statement=False)
            try:
                fileops.rename_noreplace(temporary, metadata_file, f"table {database}.{table}")
            except TableExistsError:
                remove_table_directory(data_path)
                fileops.remove_quietly(temporary)
                if if_not_exists:
                    return self.table_info((database, table), allow_detached=True)
                raise
            fileops.fsync_dir(database_dir)
            self._link_table(database, table, table_uuid)
            return TableInfo(database, table, table_uuid, data_path, metadata_file, False, statement)

    def _link_table(self, database: str, table: str, table_uuid: str) -> None:
        link = self._data_link(database, table)
        link.parent.mkdir(parents=True, exist_ok=True)
        fileops.replace_symlink(link, f"../../store/{table_uuid[:3]}/{table_uuid}", self._scratch_dir)

    def rename_table(self, source: TableName, target: TableName) -> TableInfo:
        """RENAME TABLE (also to another database): one renameat2 RENAME_NOREPLACE of the metadata file."""
        source_db, source_table = _split_name(source)
        target_db, target_table = _split_name(target)
        if (source_db, source_table) == (target_db, target_table):
            raise InvalidOptionError(f"cannot rename table {source_db}.{source_table} to itself")
        with self._guard_tables((source_db, source_table), (target_db, target_table)):
            info = self.table_info((source_db, source_table))
            target_dir = self.database_path(target_db)
            target_file = self._table_file(target_dir, target_table)
            if target_file.with_name(target_file.name + ".detached").exists():
                raise TableExistsError(f"table {target_db}.{target_table} exists (detached)")
            fileops.rename_noreplace(info.metadata_path, target_file, f"table {target_db}.{target_table}")
            fileops.fsync_dir(target_dir)
            if info.metadata_path.parent != target_dir:
                fileops.fsync_dir(info.metadata_path.parent)
            self._link_table(target_db, target_table, info.uuid)
            fileops.remove_quietly(self._data_link(source_db, source_table))
            return TableInfo(target_db, target_table, info.uuid, info.data_path, target_file, False, info.statement)

    def exchange_tables(self, first: TableName, second: TableName) -> None:
        """EXCHANGE TABLES: swap two metadata files with one renameat2 RENAME_EXCHANGE."""
        first_db, first_table = _split_name(first)
        second_db, second_table = _split_name(second)
        if (first_db, first_table) == (second_db, second_table):
            raise InvalidOptionError(f"cannot exchange table {first_db}.{first_table} with itself")
        with self._guard_tables((first_db, first_table), (second_db, second_table)):
            first_info = self.table_info((first_db, first_table))
            second_info = self.table_info((second_db, second_table))
            fileops.rename_exchange(first_info.metadata_path, second_info.metadata_path,
                                  f"EXCHANGE TABLES {first_db}.{first_table} AND {second_db}.{second_table}")
            fileops.fsync_dir(first_info.metadata_path.parent)
            if second_info.metadata_path.parent != first_info.metadata_path.parent:
                fileops.fsync_dir(second_info.metadata_path.parent)
            self._link_table(first_db, first_table, second_info.uuid)
            self._link_table(second_db, second_table, first_info.uuid)

    def drop_table(self, name: TableName, *, sync: bool = False, if_exists: bool = False) -> DroppedTable | None:
        """DROP TABLE: move the metadata to metadata_dropped/ (the commit point); data stays for now.

        The data is deleted by ``collect_dropped`` once ``drop_delay`` has passed and no reader
        lease is held. ``sync=True`` deletes it right away unless a reader holds it (then it is
        left due for the next collection); ``data_removed`` in the result tells which happened.
        Never waits for readers.
        """
        database, table = _split_name(name)
        with self._guard_tables((database, table)):
            try:
                database_dir = self.database_path(database)
                self.table_info((database, table))
            except TableNotFoundError:
                if if_exists:
                    return None
                raise
            dropped = self._drop_locked(database, database_dir, table, allow_detached=False)
        if sync:
            return self._drop_now(dropped)
        return dropped

    def _drop_locked(self, database: str, database_dir: Path, table: str, *, allow_detached: bool) -> DroppedTable:
        info = self.table_info((database, table), allow_detached=allow_detached)
        target = self._dropped_file(database, table, info.uuid)
        now = time.time()
        # The mtime is the drop time (ClickHouse reads it the same way after a restart); set it
        # before the rename so no crash can leave an older, earlier-due time behind.
        os.utime(info.metadata_path, (now, now))
        fileops.rename_noreplace(info.metadata_path, target, f"dropped table {database}.{table} ({info.uuid})")
        fileops.fsync_dir(self.dropped_dir)
        fileops.fsync_dir(database_dir)
        marker = database_dir / (escape_for_file_name(table) + ".sql.detached")
        fileops.remove_quietly(marker)
        fileops.remove_quietly(self._data_link(database, table))
        return DroppedTable(database, table, info.uuid, target, info.data_path, now, now + self.drop_delay)

    def purge_dropped(self, table_uuid: str) -> DroppedTable:
        """Delete a dropped table's data now, without waiting for the delay (DROP ... SYNC after the fact).

        If a reader holds it, nothing is deleted and the entry is made due, so the first
        collection after the last reader leaves removes it; ``data_removed`` says which happened.
        """
        for dropped in self.dropped_tables():
            if dropped.uuid == table_uuid:
                return self._drop_now(dropped)
        raise TableNotFoundError(f"no dropped table with UUID {table_uuid} in {self.dropped_dir}")

    def _drop_now(self, dropped: DroppedTable) -> DroppedTable:
        if self._purge(dropped):
            return dataclasses.replace(dropped, data_removed=True)
        # In use: make it due, so the first collection after the last reader leaves removes it.
        due_now = time.time() - self.drop_delay
        try:
            os.utime(dropped.metadata_path, (due_now, due_now))
        except FileNotFoundError:
            pass
        return dataclasses.replace(dropped, due_time=due_now + self.drop_delay)

    def dropped_tables(self) -> list[DroppedTable]:
        """Tables in metadata_dropped/, oldest drop first."""
        result = []
        for path in self.dropped_dir.glob("*.sql"):
            pieces = path.name[:-4].split(".")
            if len(pieces) != 3 or not _UUID_RE.match(pieces[2]):
                continue
            try:
                drop_time = path.stat().st_mtime
            except FileNotFoundError:
                continue
            result.append(DroppedTable(unescape_for_file_name(pieces[0]), unescape_for_file_name(pieces[1]),
                                       pieces[2], path, self.store_path(pieces[2]), drop_time,
                                       drop_time + self.drop_delay))
        return sorted(result, key=lambda d: (d.drop_time, d.uuid))

    def undrop_table(self, name: TableName, *, uuid: str | None = None) -> TableInfo:
        """UNDROP TABLE: move the newest (or the given ``uuid``) dropped entry back under its name."""
        database, table = _split_name(name)
        candidates = [d for d in self.dropped_tables()
                      if (d.database, d.name) == (database, table) and (uuid is None or d.uuid == uuid)]
        if not candidates:
            raise TableNotFoundError(f"no dropped table {database}.{table}"
                                     + (f" with UUID {uuid}" if uuid else "") + " in metadata_dropped/")
        dropped = candidates[-1]
        with self._guard_tables((database, table)):
            database_dir = self.database_path(database)
            guard = FileLock.try_acquire(self._guard_path("dropped", dropped.uuid), exclusive=True)
            if guard is None:
                raise StorageError(f"dropped table {database}.{table} ({dropped.uuid}) is being deleted right now")
            with guard:
                if not dropped.metadata_path.exists():
                    raise TableNotFoundError(f"dropped table {database}.{table} ({dropped.uuid}) was already deleted")
                if not dropped.data_path.is_dir():
                    raise TableNotFoundError(
                        f"dropped table {database}.{table} ({dropped.uuid}): data {dropped.data_path} is gone")
                target = self._table_file(database_dir, table)
                if target.with_name(target.name + ".detached").exists():
                    raise TableExistsError(f"table {database}.{table} exists (detached)")
                fileops.rename_noreplace(dropped.metadata_path, target, f"table {database}.{table}")
                fileops.fsync_dir(database_dir)
                fileops.fsync_dir(self.dropped_dir)
            self._link_table(database, table, dropped.uuid)
            return self.table_info((database, table))

    def detach_table(self, name: TableName) -> TableInfo:
        """DETACH TABLE ... PERMANENTLY: an empty `<t>.sql.detached` marker next to `<t>.sql`.

        The name stays taken (CREATE/RENAME onto it fail) until ATTACH or DROP; readers holding
        the UUID are unaffected.
        """
        database, table = _split_name(name)
        with self._guard_tables((database, table)):
            info = self.table_info((database, table))
            marker = info.metadata_path.with_name(info.metadata_path.name + ".detached")
            try:
                fileops.write_new_file(marker, b"")
            except FileExistsError:
                raise TableNotFoundError(f"table {database}.{table} is already detached ({marker})") from None
            fileops.fsync_dir(marker.parent)
            return TableInfo(database, table, info.uuid, info.data_path, info.metadata_path, True, info.statement)

    def attach_table(self, name: TableName, statement: str | None = None) -> TableInfo:
        """ATTACH TABLE: of a detached table, or (with ``statement``) of an existing data directory.

        Without ``statement`` the table must be detached; an attached table cannot be attached
        again. With a full `ATTACH/CREATE TABLE ... UUID '<uuid>' (...)` statement, the data
        directory `store/<p>/<uuid>/` must exist (e.g. made by MergeTreeTable.create or copied
        from another server) and its UUID must not belong to any table of this root; the
        metadata file is then committed exactly as CREATE does, without touching the data.
        """
        if statement is not None:
            return self._attach_statement(name, statement)
        database, table = _split_name(name)
        with self._guard_tables((database, table)):
            database_dir = self.database_path(database)
            metadata_file = self._table_file(database_dir, table)
            marker = metadata_file.with_name(metadata_file.name + ".detached")
            if not marker.exists():
                if metadata_file.exists():
                    raise TableExistsError(f"table {database}.{table} is already attached ({metadata_file})")
                raise TableNotFoundError(f"no detached table {database}.{table} ({marker} is missing)")
            if metadata_file.exists():
                os.unlink(marker)
            elif _file_size(marker) == 0:
                # An empty marker with no table: the leftover of a dropped table, not a table.
                fileops.remove_quietly(marker)
                raise TableNotFoundError(f"no detached table {database}.{table} (removed the stale marker {marker})")
            else:
                fileops.rename_noreplace(marker, metadata_file, f"table {database}.{table}")
            fileops.fsync_dir(database_dir)
            info = self.table_info((database, table))
            self._link_table(database, table, info.uuid)
            return info

    def _attach_statement(self, name: TableName, statement: str) -> TableInfo:
        from spark_mergetree.expressions.ddl import parse_create

        database, table = _split_name(name)
        definition = parse_create(statement)
        if definition.uuid is None or not _UUID_RE.match(definition.uuid.lower()):
            raise InvalidOptionError(
                f"ATTACH TABLE {database}.{table} with a definition needs UUID '<uuid>' naming its data directory "
                f"store/<first 3>/<uuid>/ (got {definition.uuid!r})"
            )
        table_uuid = definition.uuid.lower()
        text = statements.table_statement(table_uuid, definition, None)
        with self._guard_tables((database, table)):
            database_dir = self.database_path(database)
            metadata_file = self._table_file(database_dir, table)
            if metadata_file.exists() or metadata_file.with_name(metadata_file.name + ".detached").exists():
                raise TableExistsError(f"table {database}.{table} already exists ({metadata_file})")
            data_path = self.store_path(table_uuid)
            if not data_path.is_dir():
                raise TableNotFoundError(f"ATTACH TABLE {database}.{table}: data directory {data_path} does not exist")
            if table_uuid in self._referenced_uuids():
                raise TableExistsError(f"UUID {table_uuid} already belongs to a table or database of {self.root}")
            temporary = metadata_file.with_name(metadata_file.name + ".tmp")
            if temporary.exists():
                self._discard_table_temporary(temporary, RecoveryReport())
            fileops.write_new_file(temporary, text.encode())
            fileops.fsync_dir(database_dir)
            try:
                fileops.rename_noreplace(temporary, metadata_file, f"table {database}.{table}")
            except TableExistsError:
                fileops.remove_quietly(temporary)
                raise
            fileops.fsync_dir(database_dir)
            self._link_table(database, table, table_uuid)
            return TableInfo(database, table, table_uuid, data_path, metadata_file, False, text)

    # ----------------------------------------------------------------- readers and collection

    def pin(self, name_or_uuid: TableName) -> ReaderLease:
        """Hold a table's data against deletion while reading (by name or by UUID).

        The lease names the UUID directory, so a RENAME/EXCHANGE/DROP meanwhile changes nothing
        for the holder. Use as a context manager or call ``release()``.
        """
        if isinstance(name_or_uuid, str) and _UUID_RE.match(name_or_uuid.lower()):
            table_uuid = name_or_uuid.lower()
        else:
            table_uuid = self.table_uuid(name_or_uuid)
        return ReaderLease(table_uuid, self.store_path(table_uuid))

    def in_use(self, table_uuid: str) -> bool:
        """True if some process holds a reader lease on the table's data."""
        lease_path = self.store_path(table_uuid) / READER_LEASE_FILE
        try:
            probe = FileLock.try_acquire(lease_path, exclusive=True, create=False)
        except FileNotFoundError:
            return False
        if probe is None:
            return True
        probe.release()
        return False

    def collect_dropped(self, now: float | None = None) -> list[str]:
        """Delete the data of dropped tables that are due and unused; returns their UUIDs.

        Safe to run from several processes at once; a table in use is skipped, not waited for.
        """
        now = time.time() if now is None else now
        collected = []
        failures = []
        for dropped in self.dropped_tables():
            data_missing = not dropped.data_path.exists()
            if dropped.due_time > now and not data_missing:
                continue
            try:
                if self._purge(dropped):
                    collected.append(dropped.uuid)
            except OSError as exc:  # one bad directory must not keep the others forever
                failures.append(f"{dropped.database}.{dropped.name} ({dropped.data_path}): {exc}")
        if failures:
            raise StorageError(f"could not delete dropped tables (deleted {len(collected)}): " + "; ".join(failures))
        return collected

    def start_collector(self, interval: float = 60.0) -> DropCollector:
        """Run ``collect_dropped`` every ``interval`` seconds in a daemon thread (stop() to end it)."""
        if interval <= 0:
            raise InvalidOptionError(f"interval={interval!r} must be > 0 seconds")
        collector = DropCollector(self, interval)
        collector.start()
        return collector

    def _purge(self, dropped: DroppedTable) -> bool:
        """Delete a dropped table's data then its metadata_dropped/ entry, unless a reader holds it."""
        from spark_mergetree.engine.table import remove_table_directory

        guard = FileLock.try_acquire(self._guard_path("dropped", dropped.uuid), exclusive=True)
        if guard is None:
            return False
        with guard:
            if not dropped.metadata_path.exists():
                return False
            trash = self.root / "tmp" / (_TRASH_PREFIX + dropped.uuid)
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
            fileops.fsync_dir(self.dropped_dir)
            return True

    # ----------------------------------------------------------------- recovery

    def _referenced_uuids(self) -> set[str]:
        """UUIDs named by any committed metadata: databases, tables (attached/detached), dropped."""
        referenced: set[str] = set()
        for database in self.databases():
            database_uuid = self.database_uuid(database)
            referenced.add(database_uuid)
            try:
                referenced.update(info.uuid for info in self._table_entries(database, self.store_path(database_uuid)))
            except FileNotFoundError:
                pass
        referenced.update(d.uuid for d in self.dropped_tables())
        return referenced

    def _discard_table_temporary(self, temporary: Path, report: RecoveryReport) -> None:
        """Undo a create that crashed before its commit: its data directory (if no one else's), the file."""
        try:
            text = _read_text(temporary)
        except FileNotFoundError:
            return
        try:
            orphan_uuid = statements.table_uuid_of(text, str(temporary))
        except FormatError:
            orphan_uuid = None  # cut off before the UUID: nothing was created for it yet
        if orphan_uuid is not None and orphan_uuid not in self._referenced_uuids():
            data_path = self.store_path(orphan_uuid)
            # Only a directory exactly as CREATE makes it is provably ours to remove: an ATTACH
            # of existing data writes the same kind of temporary file, and that data must stay
            # (it is then reported as unreferenced instead).
            if data_path.exists() and self._is_fresh_data_dir(data_path):
                from spark_mergetree.engine.table import remove_table_directory

                remove_table_directory(data_path)
                report.removed_orphan_store_dirs.append(data_path)
        fileops.remove_quietly(temporary)
        report.removed_temporary_files.append(temporary)

    @staticmethod
    def _is_fresh_data_dir(data_path: Path) -> bool:
        """True if the directory holds nothing beyond what a new table's directory holds
        (`MergeTreeTable.write_directory`): format_version.txt, an empty detached/, and in
        `_mergetree/` the engine settings and the storage policy's part roots. A `.<name>.tmp-*`
        file is one a crash interrupted while it was being written."""
        from spark_mergetree.engine.metadata import META_DIR, SETTINGS_FILE
        from spark_mergetree.txn.table_log import PART_ROOTS_FILE

        def only_files(directory: Path, names: set[str]) -> bool:
            return all(entry.is_file() and (entry.name in names or fileops.BEING_WRITTEN.match(entry.name))
                       for entry in directory.iterdir())

        for entry in data_path.iterdir():
            if entry.name == META_DIR and entry.is_dir():
                if only_files(entry, {SETTINGS_FILE, PART_ROOTS_FILE.name}):
                    continue
            elif entry.name == "detached" and entry.is_dir():
                if not any(entry.iterdir()):
                    continue
            elif entry.is_file() and (entry.name == "format_version.txt" or fileops.BEING_WRITTEN.match(entry.name)):
                continue
            return False
        return True

    def _discard_database_temporary(self, temporary: Path, report: RecoveryReport) -> None:
        try:
            text = _read_text(temporary)
            orphan_uuid, _ = statements.parse_database_statement(text, str(temporary))
        except (FileNotFoundError, FormatError):
            orphan_uuid = None
        committed = temporary.with_name(temporary.name[:-4])
        committed_uuid = None
        if committed.exists():
            committed_uuid, _ = statements.parse_database_statement(_read_text(committed), str(committed))
        if orphan_uuid is not None and orphan_uuid != committed_uuid:
            directory = self.store_path(orphan_uuid)
            if directory.exists() and not any(directory.glob("*.sql")):
                shutil.rmtree(directory)
                report.removed_orphan_store_dirs.append(directory)
        fileops.remove_quietly(temporary)
        report.removed_temporary_files.append(temporary)

    def recover(self) -> RecoveryReport:
        """Bring the root to a consistent state after crashes; safe while other processes run DDL.

        Every step takes the guard of what it repairs without waiting and skips what is busy:
        a busy guard means a live process, not a crash.
        """
        report = RecoveryReport()
        report.removed_leftovers += fileops.remove_stale_symlink_temporaries(self._scratch_dir)
        # 1. databases: crashed CREATE (a `.sql.tmp`) and crashed DROP (a symlink without `.sql`).
        for temporary in self.metadata_dir.glob("*.sql.tmp"):
            database = unescape_for_file_name(temporary.name[:-8])
            guard = FileLock.try_acquire(self._guard_path("db", database), exclusive=True)
            if guard is not None:
                with guard:
                    self._discard_database_temporary(temporary, report)
        for link in self.metadata_dir.iterdir():
            if not link.is_symlink() or link.with_name(link.name + ".sql").exists():
                continue
            if link.name == DEFAULT_DATABASE and self._linked_default_uuid() is not None:
                continue  # ClickHouse's `default`, not a crashed DROP DATABASE
            guard = FileLock.try_acquire(self._guard_path("db", unescape_for_file_name(link.name)), exclusive=True)
            if guard is not None:
                with guard:
                    if not link.with_name(link.name + ".sql").exists():
                        report.removed_leftovers += self._remove_database_leftovers(unescape_for_file_name(link.name))
        for database in self.databases():
            with self._database_guard(database, exclusive=False):
                try:
                    database_uuid = self.database_uuid(database)
                except TableNotFoundError:
                    continue
                try:
                    if self._link_database(database, database_uuid):
                        report.repaired_symlinks.append(self.metadata_dir / escape_for_file_name(database))
                except StorageError:
                    report.conflicting_database_links.append(self.metadata_dir / escape_for_file_name(database))
                self._recover_tables(database, self.store_path(database_uuid), report)
        # 2. half-finished deletions: a trash directory whose entry may or may not be gone.
        for trash in (self.root / "tmp").glob(_TRASH_PREFIX + "*"):
            guard = FileLock.try_acquire(self._guard_path("dropped", trash.name[len(_TRASH_PREFIX):]), exclusive=True)
            if guard is not None:
                with guard:
                    from spark_mergetree.engine.table import remove_table_directory

                    try:
                        remove_table_directory(trash)
                    except OSError:
                        continue  # retried on the next open; a stuck directory must not block opening
                    report.removed_leftovers.append(trash)
        # 3. drops that are due (or whose data is already gone).
        report.collected = self.collect_dropped()
        report.unreferenced_store_dirs = self.unreferenced_store_dirs()
        return report

    def _recover_tables(self, database: str, database_dir: Path, report: RecoveryReport) -> None:
        database_dir.mkdir(parents=True, exist_ok=True)
        for temporary in database_dir.glob("*.sql.tmp"):
            table = unescape_for_file_name(temporary.name[:-8])
            guard = FileLock.try_acquire(self._guard_path("table", database, table), exclusive=True)
            if guard is not None:
                with guard:
                    self._discard_table_temporary(temporary, report)
        for marker in database_dir.glob("*.sql.detached"):
            # An empty marker whose table was dropped (crash between the move and its removal).
            if _file_size(marker) == 0 and not marker.with_name(marker.name[:-9]).exists():
                guard = FileLock.try_acquire(
                    self._guard_path("table", database, unescape_for_file_name(marker.name[:-13])), exclusive=True)
                if guard is not None:
                    with guard:
                        if not marker.with_name(marker.name[:-9]).exists():
                            fileops.remove_quietly(marker)
                            report.removed_leftovers.append(marker)
        expected = {escape_for_file_name(info.name): info.uuid for info in self._table_entries(database, database_dir)}
        data_dir = self.root / "data" / escape_for_file_name(database)
        data_dir.mkdir(parents=True, exist_ok=True)
        for link in data_dir.iterdir():
            if link.is_symlink() and link.name not in expected and not link.name.startswith("."):
                guard = FileLock.try_acquire(
                    self._guard_path("table", database, unescape_for_file_name(link.name)), exclusive=True)
                if guard is not None:
                    with guard:
                        if not self._table_file(database_dir, unescape_for_file_name(link.name)).exists():
                            fileops.remove_quietly(link)
                            report.repaired_symlinks.append(link)
        for escaped, table_uuid in expected.items():
            link = data_dir / escaped
            target = f"../../store/{table_uuid[:3]}/{table_uuid}"
            if not (link.is_symlink() and os.readlink(link) == target):
                guard = FileLock.try_acquire(
                    self._guard_path("table", database, unescape_for_file_name(escaped)), exclusive=True)
                if guard is not None:
                    with guard:
                        fileops.replace_symlink(link, target, self._scratch_dir)
                        report.repaired_symlinks.append(link)

    def unreferenced_store_dirs(self) -> list[Path]:
        """`store/xxx/<uuid>` directories no metadata names and no create in progress claims."""
        referenced = self._referenced_uuids()
        for database in self.databases():
            try:
                database_dir = self.database_path(database)
            except TableNotFoundError:
                continue
            for temporary in database_dir.glob("*.sql.tmp"):
                try:
                    referenced.add(statements.table_uuid_of(_read_text(temporary), str(temporary)))
                except (FormatError, FileNotFoundError):
                    pass
        for temporary in self.metadata_dir.glob("*.sql.tmp"):
            try:
                database_uuid, _ = statements.parse_database_statement(_read_text(temporary), str(temporary))
                if database_uuid:
                    referenced.add(database_uuid)
            except (FormatError, FileNotFoundError):
                pass
        unreferenced = []
        for prefix in (self.root / "store").iterdir():
            if not prefix.is_dir():
                continue
            for directory in prefix.iterdir():
                if _UUID_RE.match(directory.name) and directory.name not in referenced:
                    unreferenced.append(directory)
        return sorted(unreferenced)

"""The catalog's layout on disk: names → metadata files → UUID directories, and the guards of names.

    metadata/<db>.sql                       ATTACH DATABASE _ UUID '<db uuid>' ENGINE = Atomic
    metadata/<db> -> ../store/xxx/<db uuid>  the database's metadata directory (chdb's `default`:
                                             this symlink alone, no default.sql; it names the UUID)
    store/xxx/<db uuid>/<t>.sql             ATTACH TABLE _ UUID '<uuid>' (...) ENGINE = MergeTree ...
    store/xxx/<db uuid>/<t>.sql.detached    empty marker: table detached permanently
    store/xxx/<uuid>/                       the table's data (format_version.txt, detached/, parts)
    data/<db>/<t> -> ../../store/xxx/<uuid>  convenience symlinks (repaired, never trusted)
    metadata_dropped/<db>.<t>.<uuid>.sql    dropped, data deleted once due and unused
    tmp/mergetree_guards/                   DDL guards (flock), one file per database and table name

`CatalogLayout` computes every path from names, reads the metadata (which databases and tables
exist, their UUIDs and statements) and holds the guards DDL takes; it changes nothing but
symlinks. DDL (ddl.py), drops (drops.py) and recovery (recovery.py) work through it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from spark_mergetree import fileops
from spark_mergetree.catalog import statements
from spark_mergetree.errors import (
    FormatError,
    InvalidOptionError,
    StorageError,
    TableNotFoundError,
    UnsupportedError,
)
from spark_mergetree.fileops import FileLock, escape_for_file_name, unescape_for_file_name
from spark_mergetree.storage.location import local_path

if TYPE_CHECKING:
    from spark_mergetree.expressions.ddl import TableDefinition

DEFAULT_DATABASE = "default"  # ClickHouse's; chdb keeps it as a symlink without a `.sql` file
GUARD_DIR = "mergetree_guards"
TRASH_PREFIX = "mergetree_dropping."
UUID_RE = re.compile(r"\A[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\Z")
_SUBDIRECTORIES = ("metadata", "metadata_dropped", "store", "data", "tmp", f"tmp/{GUARD_DIR}")

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


def split_name(name: TableName) -> tuple[str, str]:
    """(database, table) of 'db.table' or a pair, both checked."""
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
    check_name(database, "database")
    check_name(table, "table")
    return database, table


def check_name(name: str, what: str) -> None:
    if not isinstance(name, str) or not name:
        raise InvalidOptionError(f"{what} name {name!r} is empty")
    if "\0" in name:
        raise InvalidOptionError(f"{what} name {name!r} contains a NUL byte")
    if len(escape_for_file_name(name)) > 200:
        raise InvalidOptionError(f"{what} name {name[:40]!r}... is too long for a file name once escaped")


def file_size(path: Path) -> int | None:
    """Size of a file, or None if it is gone (other processes unlink markers at any moment)."""
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return None


def read_text(path: Path) -> str:
    with open(path, encoding="utf-8") as handle:
        return handle.read()


class CatalogLayout:
    """Paths, metadata reads and DDL guards of one catalog root."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = local_path(root).absolute()  # URLs of other file systems are refused, not made local

    def exists(self) -> bool:
        return all((self.root / sub).is_dir() for sub in _SUBDIRECTORIES)

    def make_directories(self) -> None:
        for sub in _SUBDIRECTORIES:
            (self.root / sub).mkdir(parents=True, exist_ok=True)

    # ----------------------------------------------------------------- paths

    @property
    def metadata_dir(self) -> Path:
        return self.root / "metadata"

    @property
    def scratch_dir(self) -> Path:
        return self.root / "tmp"

    @property
    def dropped_dir(self) -> Path:
        return self.root / "metadata_dropped"

    def store_path(self, some_uuid: str) -> Path:
        """`store/<first 3 hex>/<uuid>/`: where a table's data or a database's metadata lives."""
        return self.root / "store" / some_uuid[:3] / some_uuid

    def database_file(self, database: str) -> Path:
        return self.metadata_dir / f"{escape_for_file_name(database)}.sql"

    def table_file(self, database_dir: Path, table: str) -> Path:
        return database_dir / f"{escape_for_file_name(table)}.sql"

    def data_link(self, database: str, table: str) -> Path:
        return self.root / "data" / escape_for_file_name(database) / escape_for_file_name(table)

    def dropped_file(self, database: str, table: str, table_uuid: str) -> Path:
        return self.dropped_dir / f"{escape_for_file_name(database)}.{escape_for_file_name(table)}.{table_uuid}.sql"

    def trash_path(self, table_uuid: str) -> Path:
        """Where a dropped table's data directory is renamed to before it is deleted."""
        return self.scratch_dir / (TRASH_PREFIX + table_uuid)

    # ----------------------------------------------------------------- guards

    def guard_path(self, kind: str, *names: str) -> Path:
        return self.scratch_dir / GUARD_DIR / (kind + "." + ".".join(escape_for_file_name(n) for n in names) + ".lock")

    def database_guard(self, database: str, *, exclusive: bool) -> FileLock:
        # DDL on tables holds its database shared; CREATE/DROP DATABASE hold it exclusively.
        return FileLock(self.guard_path("db", database), exclusive=exclusive, blocking=True)

    def table_guard(self, database: str, table: str) -> FileLock:
        return FileLock(self.guard_path("table", database, table), exclusive=True, blocking=True)

    def try_guard(self, kind: str, *names: str) -> FileLock | None:
        """The guard if it is free right now (recovery and collection never wait: busy means alive)."""
        return FileLock.try_acquire(self.guard_path(kind, *names), exclusive=True)

    @contextmanager
    def guard_tables(self, *names: tuple[str, str]) -> Iterator[None]:
        """DDLGuard: the databases shared, then the table names exclusively, in sorted order."""
        with ExitStack() as stack:
            for database in sorted({db for db, _ in names}):
                stack.enter_context(self.database_guard(database, exclusive=False))
            for database, table in sorted(set(names)):
                stack.enter_context(self.table_guard(database, table))
            yield

    # ----------------------------------------------------------------- databases

    def databases(self) -> list[str]:
        """Names of the Atomic databases, sorted."""
        names = []
        for entry in self.metadata_dir.iterdir():
            if entry.suffix != ".sql" or not entry.is_file():
                continue
            try:
                uuid, engine = statements.parse_database_statement(read_text(entry), str(entry))
            except (FormatError, FileNotFoundError):
                continue
            if uuid is not None and engine.lower() == "atomic":
                names.append(unescape_for_file_name(entry.name[:-4]))
        if DEFAULT_DATABASE not in names and self.linked_default_uuid() is not None:
            names.append(DEFAULT_DATABASE)
        return sorted(names)

    def linked_default_uuid(self) -> str | None:
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
        return name if UUID_RE.match(name) else None

    def database_uuid(self, database: str) -> str:
        check_name(database, "database")
        path = self.database_file(database)
        try:
            text = read_text(path)
        except FileNotFoundError:
            linked = self.linked_default_uuid() if database == DEFAULT_DATABASE else None
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

    def link_database(self, database: str, database_uuid: str) -> bool:
        """Point `metadata/<db>` at the database's directory; True if it changed. A symlink whose
        directory holds tables is never re-pointed (StorageError)."""
        escaped = escape_for_file_name(database)
        link = self.metadata_dir / escaped
        target = f"../store/{database_uuid[:3]}/{database_uuid}"
        changed = not (link.is_symlink() and os.readlink(link) == target)
        if changed and link.is_symlink():
            current = link.parent / os.readlink(link)
            if current.resolve() != self.store_path(database_uuid).resolve() and any(current.glob("*.sql")):
                raise StorageError(
                    f"database {database!r}: {link} points to {current}, which holds tables, while "
                    f"{self.database_file(database)} names {database_uuid}; left as it is")
        fileops.replace_symlink(link, target, self.scratch_dir)
        (self.root / "data" / escaped).mkdir(parents=True, exist_ok=True)
        return changed

    # ----------------------------------------------------------------- tables

    def table_entries(self, database: str, database_dir: Path) -> list[TableInfo]:
        entries = []
        for path in sorted(database_dir.glob("*.sql")):
            table = unescape_for_file_name(path.name[:-4])
            try:
                text = read_text(path)
            except FileNotFoundError:
                continue  # renamed or dropped concurrently
            table_uuid = statements.table_uuid_of(text, str(path))
            marker = path.with_name(path.name + ".detached")
            entries.append(TableInfo(database, table, table_uuid, self.store_path(table_uuid), path,
                                     marker.exists(), text))
        # Older servers moved the statement itself to `<t>.sql.detached`.
        for marker in sorted(database_dir.glob("*.sql.detached")):
            if marker.with_name(marker.name[:-9]).exists() or not file_size(marker):
                continue
            table = unescape_for_file_name(marker.name[:-13])
            try:
                text = read_text(marker)
            except FileNotFoundError:
                continue  # attached or dropped concurrently
            table_uuid = statements.table_uuid_of(text, str(marker))
            entries.append(TableInfo(database, table, table_uuid, self.store_path(table_uuid), marker, True, text))
        return entries

    def table_info(self, name: TableName, *, allow_detached: bool = False) -> TableInfo:
        database, table = split_name(name)
        database_dir = self.database_path(database)
        path = self.table_file(database_dir, table)
        marker = path.with_name(path.name + ".detached")
        try:
            text = read_text(path)
            source = path
        except FileNotFoundError:
            if not (allow_detached and file_size(marker)):
                raise TableNotFoundError(f"table {database}.{table} does not exist ({path} is missing)") from None
            text, source = read_text(marker), marker
        detached = marker.exists()
        if detached and not allow_detached:
            raise TableNotFoundError(f"table {database}.{table} is detached ({marker}); attach it first")
        table_uuid = statements.table_uuid_of(text, str(source))
        return TableInfo(database, table, table_uuid, self.store_path(table_uuid), source, detached, text)

    def link_table(self, database: str, table: str, table_uuid: str) -> None:
        link = self.data_link(database, table)
        link.parent.mkdir(parents=True, exist_ok=True)
        fileops.replace_symlink(link, f"../../store/{table_uuid[:3]}/{table_uuid}", self.scratch_dir)

    def dropped_tables(self, drop_delay: float) -> list[DroppedTable]:
        """Tables in metadata_dropped/, oldest drop first (due `drop_delay` seconds after the drop)."""
        result = []
        for path in self.dropped_dir.glob("*.sql"):
            pieces = path.name[:-4].split(".")
            if len(pieces) != 3 or not UUID_RE.match(pieces[2]):
                continue
            try:
                drop_time = path.stat().st_mtime
            except FileNotFoundError:
                continue
            result.append(DroppedTable(unescape_for_file_name(pieces[0]), unescape_for_file_name(pieces[1]),
                                       pieces[2], path, self.store_path(pieces[2]), drop_time,
                                       drop_time + drop_delay))
        return sorted(result, key=lambda d: (d.drop_time, d.uuid))

    def referenced_uuids(self) -> set[str]:
        """UUIDs named by any committed metadata: databases, tables (attached/detached), dropped."""
        referenced: set[str] = set()
        for database in self.databases():
            try:
                database_uuid = self.database_uuid(database)
            except TableNotFoundError:
                continue  # dropped since it was listed: its DROP owns its directory now
            referenced.add(database_uuid)
            try:
                referenced.update(info.uuid for info in self.table_entries(database, self.store_path(database_uuid)))
            except FileNotFoundError:
                pass
        referenced.update(d.uuid for d in self.dropped_tables(0.0))
        return referenced

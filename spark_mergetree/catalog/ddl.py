"""Catalog DDL: CREATE/DROP DATABASE, CREATE, RENAME, EXCHANGE, DETACH and ATTACH TABLE.

Names appear only in file names, so every statement commits with one atomic step: RENAME and
EXCHANGE are one renameat2 call each, CREATE renames `<t>.sql.tmp` over nothing
(RENAME_NOREPLACE: of two concurrent creators exactly one wins), DETACH creates an empty marker.
Each statement holds the DDL guards of the names it touches (layout.py). Tables are created
through the engine (`MergeTreeTable.new(...).write_directory`), the one way table directories
come to be; DROP is in drops.py.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping, Sequence
from typing import Any

from spark_mergetree import fileops
from spark_mergetree.catalog import statements
from spark_mergetree.catalog.drops import drop_locked
from spark_mergetree.catalog.layout import (
    DEFAULT_DATABASE,
    UUID_RE,
    CatalogLayout,
    DroppedTable,
    TableInfo,
    TableName,
    check_name,
    file_size,
    split_name,
)
from spark_mergetree.catalog.recovery import (
    discard_database_temporary,
    discard_table_temporary,
    remove_database_leftovers,
)
from spark_mergetree.engine.directories import remove_table_directory
from spark_mergetree.engine.metadata import split_settings
from spark_mergetree.engine.table import MergeTreeTable
from spark_mergetree.errors import InvalidOptionError, StorageError, TableExistsError, TableNotFoundError
from spark_mergetree.expressions.ddl import format_attach, parse_create
from spark_mergetree.fileops import escape_for_file_name
from spark_mergetree.recovery import RecoveryReport


def create_database(layout: CatalogLayout, database: str, *, if_not_exists: bool = False) -> str:
    """Create an Atomic database; returns its UUID. Commit point: rename of `<db>.sql.tmp`."""
    check_name(database, "database")
    with layout.database_guard(database, exclusive=True):
        database_file = layout.database_file(database)
        link = layout.metadata_dir / escape_for_file_name(database)
        if database_file.exists() or (database == DEFAULT_DATABASE and layout.linked_default_uuid()):
            if if_not_exists:
                return layout.database_uuid(database)
            where = database_file if database_file.exists() else link
            raise TableExistsError(f"database {database!r} already exists ({where})")
        temporary = database_file.with_name(database_file.name + ".tmp")
        if temporary.exists():
            discard_database_temporary(layout, temporary, RecoveryReport())
        # A symlink without `<db>.sql` is what an interrupted DROP DATABASE leaves; it is the
        # last pointer to the old directory, so clear that before our symlink replaces it.
        # One whose directory holds tables is never replaced: that would hide them all.
        if link.is_symlink():
            remove_database_leftovers(layout, database)
            if link.is_symlink():
                raise StorageError(
                    f"CREATE DATABASE {database!r}: {link} points to {link.parent / os.readlink(link)}, which "
                    f"holds tables, but {database_file} is missing; restore that file (ATTACH DATABASE _ UUID "
                    f"'<the directory's UUID>' ENGINE = Atomic) instead of creating the database again")
        database_uuid = statements.new_uuid()
        # The temporary file names the UUID before its directory exists, so a crash leaves
        # nothing recovery cannot attribute.
        fileops.write_new_file(temporary, statements.database_statement(database_uuid).encode())
        fileops.fsync_dir(layout.metadata_dir)
        directory = layout.store_path(database_uuid)
        directory.mkdir(parents=True)
        fileops.fsync_dir(directory.parent)
        # The symlink goes in before the commit: from the commit on, the directory always has
        # a pointer that recovery follows, even if DROP DATABASE is interrupted right after.
        layout.link_database(database, database_uuid)
        try:
            fileops.rename_noreplace(temporary, database_file, f"database {database!r}")
        except TableExistsError:
            shutil.rmtree(directory, ignore_errors=True)
            fileops.remove_quietly(temporary)
            if if_not_exists:
                return layout.database_uuid(database)
            raise
        fileops.fsync_dir(layout.metadata_dir)
        return database_uuid



def drop_database(layout: CatalogLayout, database: str, drop_delay: float, *, if_exists: bool = False) -> list[DroppedTable]:
    """Drop every table of the database (into metadata_dropped/), then the database itself.

    Commit point of the database removal: unlinking `metadata/<db>.sql`. Returns the tables
    moved to metadata_dropped/ (their data is deleted later, as for DROP TABLE).
    """
    check_name(database, "database")
    with layout.database_guard(database, exclusive=True):
        try:
            database_dir = layout.database_path(database)
        except TableNotFoundError:
            if if_exists:
                return []
            raise
        dropped = []
        for info in layout.table_entries(database, database_dir):
            with layout.table_guard(database, info.name):
                dropped.append(drop_locked(layout, database, database_dir, info.name, drop_delay, allow_detached=True))
        report = RecoveryReport()
        for temporary in database_dir.glob("*.sql.tmp"):
            discard_table_temporary(layout, temporary, report)
        database_file = layout.database_file(database)
        try:
            os.unlink(database_file)
        except FileNotFoundError:
            # ClickHouse's `default` without a `.sql` file: its symlink is the database.
            os.unlink(layout.metadata_dir / escape_for_file_name(database))
        fileops.fsync_dir(layout.metadata_dir)
        remove_database_leftovers(layout, database)
        if database_dir.is_dir() and not any(database_dir.glob("*.sql")):
            shutil.rmtree(database_dir, ignore_errors=True)  # also when its symlink was missing
        return dropped



def define_table(layout: CatalogLayout, name: TableName, schema: Sequence[tuple[str, str]] | Any,
                 order_by: str | Sequence[str] | None, partition_by: str | Sequence[str] | None,
                 primary_key: str | Sequence[str] | None, settings: Mapping[str, Any] | None, *,
                 if_not_exists: bool, engine: str | None = None) -> TableInfo:
    """CREATE TABLE (`Catalog.define_table`): the data directory first, through the engine; the
    metadata rename (RENAME_NOREPLACE: of two concurrent creators exactly one wins) last."""
    database, table = split_name(name)
    table_uuid = statements.new_uuid()
    clickhouse, engine_settings = split_settings(settings)
    clickhouse_settings = clickhouse or None
    definition = statements.table_definition(table_uuid, schema, order_by, partition_by, primary_key,
                                             clickhouse_settings, engine)
    statement = format_attach(definition)
    data_path = layout.store_path(table_uuid)
    # Everything is checked (keys, settings, storage policy) before anything is written.
    new_table = MergeTreeTable.new(data_path, definition, engine_settings)
    with layout.guard_tables((database, table)):
        database_dir = layout.database_path(database)
        metadata_file = layout.table_file(database_dir, table)
        if metadata_file.exists() or metadata_file.with_name(metadata_file.name + ".detached").exists():
            if if_not_exists:
                return layout.table_info((database, table), allow_detached=True)
            raise TableExistsError(f"table {database}.{table} already exists ({metadata_file})")
        temporary = metadata_file.with_name(metadata_file.name + ".tmp")
        if temporary.exists():  # we hold the name's guard, so this is a crashed create
            discard_table_temporary(layout, temporary, RecoveryReport())
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
                return layout.table_info((database, table), allow_detached=True)
            raise
        fileops.fsync_dir(database_dir)
        layout.link_table(database, table, table_uuid)
        return TableInfo(database, table, table_uuid, data_path, metadata_file, False, statement)



def rename_table(layout: CatalogLayout, source: TableName, target: TableName) -> TableInfo:
    """RENAME TABLE (also to another database): one renameat2 RENAME_NOREPLACE of the metadata file."""
    source_db, source_table = split_name(source)
    target_db, target_table = split_name(target)
    if (source_db, source_table) == (target_db, target_table):
        raise InvalidOptionError(f"cannot rename table {source_db}.{source_table} to itself")
    with layout.guard_tables((source_db, source_table), (target_db, target_table)):
        info = layout.table_info((source_db, source_table))
        target_dir = layout.database_path(target_db)
        target_file = layout.table_file(target_dir, target_table)
        if target_file.with_name(target_file.name + ".detached").exists():
            raise TableExistsError(f"table {target_db}.{target_table} exists (detached)")
        fileops.rename_noreplace(info.metadata_path, target_file, f"table {target_db}.{target_table}")
        fileops.fsync_dir(target_dir)
        if info.metadata_path.parent != target_dir:
            fileops.fsync_dir(info.metadata_path.parent)
        layout.link_table(target_db, target_table, info.uuid)
        fileops.remove_quietly(layout.data_link(source_db, source_table))
        return TableInfo(target_db, target_table, info.uuid, info.data_path, target_file, False, info.statement)



def exchange_tables(layout: CatalogLayout, first: TableName, second: TableName) -> None:
    """EXCHANGE TABLES: swap two metadata files with one renameat2 RENAME_EXCHANGE."""
    first_db, first_table = split_name(first)
    second_db, second_table = split_name(second)
    if (first_db, first_table) == (second_db, second_table):
        raise InvalidOptionError(f"cannot exchange table {first_db}.{first_table} with itself")
    with layout.guard_tables((first_db, first_table), (second_db, second_table)):
        first_info = layout.table_info((first_db, first_table))
        second_info = layout.table_info((second_db, second_table))
        fileops.rename_exchange(first_info.metadata_path, second_info.metadata_path,
                              f"EXCHANGE TABLES {first_db}.{first_table} AND {second_db}.{second_table}")
        fileops.fsync_dir(first_info.metadata_path.parent)
        if second_info.metadata_path.parent != first_info.metadata_path.parent:
            fileops.fsync_dir(second_info.metadata_path.parent)
        layout.link_table(first_db, first_table, second_info.uuid)
        layout.link_table(second_db, second_table, first_info.uuid)



def detach_table(layout: CatalogLayout, name: TableName) -> TableInfo:
    """DETACH TABLE ... PERMANENTLY: an empty `<t>.sql.detached` marker next to `<t>.sql`.

    The name stays taken (CREATE/RENAME onto it fail) until ATTACH or DROP; readers holding
    the UUID are unaffected.
    """
    database, table = split_name(name)
    with layout.guard_tables((database, table)):
        info = layout.table_info((database, table))
        marker = info.metadata_path.with_name(info.metadata_path.name + ".detached")
        try:
            fileops.write_new_file(marker, b"")
        except FileExistsError:
            raise TableNotFoundError(f"table {database}.{table} is already detached ({marker})") from None
        fileops.fsync_dir(marker.parent)
        return TableInfo(database, table, info.uuid, info.data_path, info.metadata_path, True, info.statement)



def attach_table(layout: CatalogLayout, name: TableName, statement: str | None = None) -> TableInfo:
    """ATTACH TABLE: of a detached table, or (with ``statement``) of an existing data directory.

    Without ``statement`` the table must be detached; an attached table cannot be attached
    again. With a full `ATTACH/CREATE TABLE ... UUID '<uuid>' (...)` statement, the data
    directory `store/<p>/<uuid>/` must exist (e.g. made by MergeTreeTable.create or copied
    from another server) and its UUID must not belong to any table of this root; the
    metadata file is then committed exactly as CREATE does, without touching the data.
    """
    if statement is not None:
        return attach_statement(layout, name, statement)
    database, table = split_name(name)
    with layout.guard_tables((database, table)):
        database_dir = layout.database_path(database)
        metadata_file = layout.table_file(database_dir, table)
        marker = metadata_file.with_name(metadata_file.name + ".detached")
        if not marker.exists():
            if metadata_file.exists():
                raise TableExistsError(f"table {database}.{table} is already attached ({metadata_file})")
            raise TableNotFoundError(f"no detached table {database}.{table} ({marker} is missing)")
        if metadata_file.exists():
            os.unlink(marker)
        elif file_size(marker) == 0:
            # An empty marker with no table: the leftover of a dropped table, not a table.
            fileops.remove_quietly(marker)
            raise TableNotFoundError(f"no detached table {database}.{table} (removed the stale marker {marker})")
        else:
            fileops.rename_noreplace(marker, metadata_file, f"table {database}.{table}")
        fileops.fsync_dir(database_dir)
        info = layout.table_info((database, table))
        layout.link_table(database, table, info.uuid)
        return info



def attach_statement(layout: CatalogLayout, name: TableName, statement: str) -> TableInfo:
    database, table = split_name(name)
    definition = parse_create(statement)
    if definition.uuid is None or not UUID_RE.match(definition.uuid.lower()):
        raise InvalidOptionError(
            f"ATTACH TABLE {database}.{table} with a definition needs UUID '<uuid>' naming its data directory "
            f"store/<first 3>/<uuid>/ (got {definition.uuid!r})"
        )
    table_uuid = definition.uuid.lower()
    text = statements.table_statement(table_uuid, definition, None)
    with layout.guard_tables((database, table)):
        database_dir = layout.database_path(database)
        metadata_file = layout.table_file(database_dir, table)
        if metadata_file.exists() or metadata_file.with_name(metadata_file.name + ".detached").exists():
            raise TableExistsError(f"table {database}.{table} already exists ({metadata_file})")
        data_path = layout.store_path(table_uuid)
        if not data_path.is_dir():
            raise TableNotFoundError(f"ATTACH TABLE {database}.{table}: data directory {data_path} does not exist")
        if table_uuid in layout.referenced_uuids():
            raise TableExistsError(f"UUID {table_uuid} already belongs to a table or database of {layout.root}")
        temporary = metadata_file.with_name(metadata_file.name + ".tmp")
        if temporary.exists():
            discard_table_temporary(layout, temporary, RecoveryReport())
        fileops.write_new_file(temporary, text.encode())
        fileops.fsync_dir(database_dir)
        try:
            fileops.rename_noreplace(temporary, metadata_file, f"table {database}.{table}")
        except TableExistsError:
            fileops.remove_quietly(temporary)
            raise
        fileops.fsync_dir(database_dir)
        layout.link_table(database, table, table_uuid)
        return TableInfo(database, table, table_uuid, data_path, metadata_file, False, text)

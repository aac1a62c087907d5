"""Catalog recovery: bring a root to a consistent state after crashes, and report what was done.

Crashed CREATE (a `<name>.sql.tmp` whose UUID no metadata names: the temporary and the table
directory it made are removed, if the directory is exactly what CREATE makes), crashed DROP
DATABASE (a symlink without its `.sql`), stale symlinks, half-finished deletions of dropped
tables (`tmp/mergetree_dropping.<uuid>`), and dropped tables that are due. Every step takes
the guard of what it repairs without waiting and skips what is busy: a busy guard means a live
process, not a crash. Directories no metadata names are reported, never removed.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from spark_mergetree import fileops
from spark_mergetree.catalog import statements
from spark_mergetree.catalog.drops import collect_dropped
from spark_mergetree.catalog.layout import (
    DEFAULT_DATABASE,
    TRASH_PREFIX,
    UUID_RE,
    CatalogLayout,
    file_size,
    read_text,
)
from spark_mergetree.engine.directories import PART_ROOTS_FILE, remove_table_directory
from spark_mergetree.engine.metadata import META_DIR, SETTINGS_FILE
from spark_mergetree.errors import FormatError, StorageError, TableNotFoundError
from spark_mergetree.fileops import escape_for_file_name, unescape_for_file_name
from spark_mergetree.recovery import RecoveryReport


def recover(layout: CatalogLayout, drop_delay: float) -> RecoveryReport:
    """Bring the root to a consistent state after crashes; safe while other processes run DDL.

    Every step takes the guard of what it repairs without waiting and skips what is busy:
    a busy guard means a live process, not a crash.
    """
    report = RecoveryReport()
    report.removed_leftovers += fileops.remove_stale_symlink_temporaries(layout.scratch_dir)
    # 1. databases: crashed CREATE (a `.sql.tmp`) and crashed DROP (a symlink without `.sql`).
    for temporary in layout.metadata_dir.glob("*.sql.tmp"):
        database = unescape_for_file_name(temporary.name[:-8])
        guard = layout.try_guard("db", database)
        if guard is not None:
            with guard:
                discard_database_temporary(layout, temporary, report)
    for link in layout.metadata_dir.iterdir():
        if not link.is_symlink() or link.with_name(link.name + ".sql").exists():
            continue
        if link.name == DEFAULT_DATABASE and layout.linked_default_uuid() is not None:
            continue  # ClickHouse's `default`, not a crashed DROP DATABASE
        guard = layout.try_guard("db", unescape_for_file_name(link.name))
        if guard is not None:
            with guard:
                if not link.with_name(link.name + ".sql").exists():
                    report.removed_leftovers += remove_database_leftovers(layout, unescape_for_file_name(link.name))
    for database in layout.databases():
        with layout.database_guard(database, exclusive=False):
            try:
                database_uuid = layout.database_uuid(database)
            except TableNotFoundError:
                continue
            try:
                if layout.link_database(database, database_uuid):
                    report.repaired_symlinks.append(layout.metadata_dir / escape_for_file_name(database))
            except StorageError:
                report.conflicting_database_links.append(layout.metadata_dir / escape_for_file_name(database))
            recover_tables(layout, database, layout.store_path(database_uuid), report)
    # 2. half-finished deletions: a trash directory whose entry may or may not be gone.
    for trash in layout.scratch_dir.glob(TRASH_PREFIX + "*"):
        guard = layout.try_guard("dropped", trash.name[len(TRASH_PREFIX):])
        if guard is not None:
            with guard:
                try:
                    remove_table_directory(trash)
                except OSError:
                    continue  # retried on the next open; a stuck directory must not block opening
                report.removed_leftovers.append(trash)
    # 3. drops that are due (or whose data is already gone).
    report.collected = collect_dropped(layout, drop_delay)
    report.unreferenced_store_dirs = unreferenced_store_dirs(layout)
    return report



def recover_tables(layout: CatalogLayout, database: str, database_dir: Path, report: RecoveryReport) -> None:
    database_dir.mkdir(parents=True, exist_ok=True)
    for temporary in database_dir.glob("*.sql.tmp"):
        table = unescape_for_file_name(temporary.name[:-8])
        guard = layout.try_guard("table", database, table)
        if guard is not None:
            with guard:
                discard_table_temporary(layout, temporary, report)
    for marker in database_dir.glob("*.sql.detached"):
        # An empty marker whose table was dropped (crash between the move and its removal).
        if file_size(marker) == 0 and not marker.with_name(marker.name[:-9]).exists():
            guard = layout.try_guard("table", database, unescape_for_file_name(marker.name[:-13]))
            if guard is not None:
                with guard:
                    if not marker.with_name(marker.name[:-9]).exists():
                        fileops.remove_quietly(marker)
                        report.removed_leftovers.append(marker)
    expected = {escape_for_file_name(info.name): info.uuid for info in layout.table_entries(database, database_dir)}
    data_dir = layout.root / "data" / escape_for_file_name(database)
    data_dir.mkdir(parents=True, exist_ok=True)
    for link in data_dir.iterdir():
        if link.is_symlink() and link.name not in expected and not link.name.startswith("."):
            guard = layout.try_guard("table", database, unescape_for_file_name(link.name))
            if guard is not None:
                with guard:
                    if not layout.table_file(database_dir, unescape_for_file_name(link.name)).exists():
                        fileops.remove_quietly(link)
                        report.repaired_symlinks.append(link)
    for escaped, table_uuid in expected.items():
        link = data_dir / escaped
        target = f"../../store/{table_uuid[:3]}/{table_uuid}"
        if not (link.is_symlink() and os.readlink(link) == target):
            guard = layout.try_guard("table", database, unescape_for_file_name(escaped))
            if guard is not None:
                with guard:
                    fileops.replace_symlink(link, target, layout.scratch_dir)
                    report.repaired_symlinks.append(link)



def discard_table_temporary(layout: CatalogLayout, temporary: Path, report: RecoveryReport) -> None:
    """Undo a create that crashed before its commit: its data directory (if no one else's), the file."""
    try:
        text = read_text(temporary)
    except FileNotFoundError:
        return
    try:
        orphan_uuid = statements.table_uuid_of(text, str(temporary))
    except FormatError:
        orphan_uuid = None  # cut off before the UUID: nothing was created for it yet
    if orphan_uuid is not None and orphan_uuid not in layout.referenced_uuids():
        data_path = layout.store_path(orphan_uuid)
        # Only a directory exactly as CREATE makes it is provably ours to remove: an ATTACH
        # of existing data writes the same kind of temporary file, and that data must stay
        # (it is then reported as unreferenced instead).
        if data_path.exists() and is_fresh_data_dir(data_path):
            remove_table_directory(data_path)
            report.removed_orphan_store_dirs.append(data_path)
    fileops.remove_quietly(temporary)
    report.removed_temporary_files.append(temporary)



def is_fresh_data_dir(data_path: Path) -> bool:
    """True if the directory holds nothing beyond what a new table's directory holds
    (`MergeTreeTable.write_directory`): format_version.txt, an empty detached/, and in
    `_mergetree/` the engine settings and the storage policy's part roots. A `.<name>.tmp-*`
    file is one a crash interrupted while it was being written."""
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



def discard_database_temporary(layout: CatalogLayout, temporary: Path, report: RecoveryReport) -> None:
    try:
        text = read_text(temporary)
        orphan_uuid, _ = statements.parse_database_statement(text, str(temporary))
    except (FileNotFoundError, FormatError):
        orphan_uuid = None
    committed = temporary.with_name(temporary.name[:-4])
    committed_uuid = None
    if committed.exists():
        committed_uuid, _ = statements.parse_database_statement(read_text(committed), str(committed))
    if orphan_uuid is not None and orphan_uuid != committed_uuid:
        directory = layout.store_path(orphan_uuid)
        if directory.exists() and not any(directory.glob("*.sql")):
            shutil.rmtree(directory)
            report.removed_orphan_store_dirs.append(directory)
    fileops.remove_quietly(temporary)
    report.removed_temporary_files.append(temporary)



def remove_database_leftovers(layout: CatalogLayout, database: str) -> list[Path]:
    """After `<db>.sql` is gone: the symlink, its directory (markers only) and data/<db>/."""
    escaped = escape_for_file_name(database)
    removed: list[Path] = []
    link = layout.metadata_dir / escaped
    if link.is_symlink():
        target = (link.parent / os.readlink(link)).resolve()
        if target.is_dir() and any(target.glob("*.sql")):
            return removed  # tables still live there: not ours to remove
        if target.is_dir():
            report = RecoveryReport()
            for temporary in target.glob("*.sql.tmp"):  # creates that crashed in it
                discard_table_temporary(layout, temporary, report)
            removed += report.removed_orphan_store_dirs
            shutil.rmtree(target, ignore_errors=True)
            removed.append(target)
        fileops.remove_quietly(link)
        removed.append(link)
    data_dir = layout.root / "data" / escaped
    if data_dir.is_dir() and all(entry.is_symlink() for entry in data_dir.iterdir()):
        shutil.rmtree(data_dir, ignore_errors=True)
        removed.append(data_dir)
    return removed



def unreferenced_store_dirs(layout: CatalogLayout) -> list[Path]:
    """`store/xxx/<uuid>` directories no metadata names and no create in progress claims."""
    referenced = layout.referenced_uuids()
    for database in layout.databases():
        try:
            database_dir = layout.database_path(database)
        except TableNotFoundError:
            continue
        for temporary in database_dir.glob("*.sql.tmp"):
            try:
                referenced.add(statements.table_uuid_of(read_text(temporary), str(temporary)))
            except (FormatError, FileNotFoundError):
                pass
    for temporary in layout.metadata_dir.glob("*.sql.tmp"):
        try:
            database_uuid, _ = statements.parse_database_statement(read_text(temporary), str(temporary))
            if database_uuid:
                referenced.add(database_uuid)
        except (FormatError, FileNotFoundError):
            pass
    unreferenced = []
    for prefix in (layout.root / "store").iterdir():
        if not prefix.is_dir():
            continue
        for directory in prefix.iterdir():
            if UUID_RE.match(directory.name) and directory.name not in referenced:
                unreferenced.append(directory)
    return sorted(unreferenced)

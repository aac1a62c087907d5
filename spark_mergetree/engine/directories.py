"""Where a table's directories are, and the one way to delete them.

A table directory holds the table's metadata (`_mergetree/`, `format_version.txt`, `detached/`)
and, without a storage policy, its part directories. With a storage policy the part directories
live in `<disk>/store/<first 3>/<uuid>/` on every disk of the policy; `_mergetree/part_roots.json`
records those directories so that a table directory can be deleted whole without opening the
table (a dropped catalog table is renamed before its data is deleted).

`write_table_directory` creates a table directory (the one way: `MergeTreeTable.create` and the
catalog both go through `MergeTreeTable.new(...).write_directory`). `TableDirectories` is what the commit log (`txn.TableLog`) is given to list, probe and delete part
directories: the log decides which directories are garbage, storage's layout (`PartStore`'s
disks) says where they are, and this module deletes them. `remove_table_directory` deletes a
whole table on every disk.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from spark_mergetree.engine.metadata import META_DIR, SETTINGS_FILE, STATEMENT_FILE
from spark_mergetree.errors import StorageError, TableExistsError
from spark_mergetree.fileops import fsync_dir, remove_tree, write_file_atomically
from spark_mergetree.storage.part_store import PartStore
from spark_mergetree.storage.stripe_map import PLAIN_MAP_SUFFIX

#: The table's directories on the disks of its storage policy:
#: {"roots": [absolute directories], "sidecar_suffixes": [suffixes of files kept beside a part]}
PART_ROOTS_FILE = Path("_mergetree") / "part_roots.json"


class TableDirectories:
    """The part directories of one table on every disk of its `PartStore` (implements
    `txn.PartDirectories`), through storage's own directory steps: a name is deleted on every disk
    the way storage deletes a part (renamed to `delete_tmp_*` first, then removed, with the map a
    plain layout keeps beside it)."""

    def __init__(self, store: PartStore) -> None:
        self.dirs = store.dirs
        self.disks = self.dirs.all_disks()

    def names(self) -> set[str]:
        names: set[str] = set()
        for disk in self.disks:
            try:
                entries = self.dirs.fs(disk).ls(self.dirs.table_dir(disk))
            except (FileNotFoundError, NotADirectoryError):
                continue
            names.update(entry.name for entry in entries if entry.is_dir)
        return names

    def exists(self, name: str) -> bool:
        return any(self.dirs.fs(disk).isdir(self.dirs.part_dir(disk, name)) for disk in self.disks)

    def remove(self, name: str) -> None:
        for disk in self.disks:
            self.dirs.retire(disk, name, sidecar=True)

    def record(self, table_dir: Path) -> None:
        """Write `_mergetree/part_roots.json` into the table directory."""
        roots = list(dict.fromkeys(self.dirs.table_dir(disk) for disk in self.disks))
        payload = {"roots": roots, "sidecar_suffixes": [PLAIN_MAP_SUFFIX]}
        write_file_atomically(table_dir / PART_ROOTS_FILE, json.dumps(payload, indent=1).encode())


def write_table_directory(target: Path, statement: str | None, engine_settings: Mapping[str, Any]) -> None:
    """Create a table directory: what ClickHouse puts in a new MergeTree directory
    (format_version.txt, detached/), our engine settings, and the table's statement.

    With `statement` (`_mergetree/table.sql`, written last and never over another: the commit point
    of a standalone table) the directory may already exist; without it (a catalog keeps the
    statement in its own metadata file, and names the directory by a new UUID) it must not.
    """
    target.mkdir(parents=True, exist_ok=statement is not None)
    meta_dir = target / META_DIR
    (target / "detached").mkdir(exist_ok=True)
    if not (target / "format_version.txt").exists():
        write_file_atomically(target / "format_version.txt", b"1")
    if engine_settings or statement is not None:
        meta_dir.mkdir(exist_ok=True)
    if engine_settings:
        write_file_atomically(meta_dir / SETTINGS_FILE, json.dumps(dict(engine_settings), sort_keys=True).encode())
    fsync_dir(target.parent)
    if statement is not None and not write_file_atomically(meta_dir / STATEMENT_FILE, statement.encode(),
                                                           replace=False):
        raise TableExistsError(f"a table already exists at {target} (created concurrently)")


def _is_uuid(text: str) -> bool:
    try:
        return str(uuid.UUID(text)) == text
    except ValueError:
        return False


def remove_table_directory(path: str | os.PathLike[str]) -> None:
    """Delete a table directory and its directories on the disks of its storage policy (as
    `_mergetree/part_roots.json` names them). The table directory goes last, so an interrupted
    deletion is finished by calling this again; it may have been renamed since it was written."""
    path = Path(path)
    try:
        roots = json.loads((path / PART_ROOTS_FILE).read_bytes())["roots"]
    except FileNotFoundError:
        roots = []
    except (ValueError, KeyError, TypeError) as exc:
        raise StorageError(f"{path / PART_ROOTS_FILE} is damaged ({exc}): cannot tell which disks hold the "
                           "table's parts; nothing was deleted") from None
    for root in map(Path, roots):
        # Only what the engine lays out, `<disk>/store/<first 3>/<uuid>`: never whatever a damaged
        # file might name.
        if root.is_absolute() and _is_uuid(root.name) and root.parent.name == root.name[:3]:
            remove_tree(root)
    remove_tree(path)

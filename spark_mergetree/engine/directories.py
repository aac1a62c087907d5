"""Where a table's directories are, and the one way to delete them.

A table directory holds the table's metadata (`_mergetree/`, `format_version.txt`, `detached/`)
and, without a storage policy, its part directories. With a storage policy the part directories
live in `<disk>/store/<first 3>/<uuid>/` on every disk of the policy; `_mergetree/part_roots.json`
records those directories so that a table directory can be deleted whole without opening the
table (a dropped catalog table is renamed before its data is deleted).

`TableDirectories` is what the commit log (`txn.TableLog`) is given to list, probe and delete part
directories: the log decides which directories are garbage, storage's layout (`PartStore`'s
disks) says where they are, and this module deletes them. `remove_table_directory` deletes a
whole table on every disk.
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

from spark_mergetree.errors import StorageError
from spark_mergetree.fileops import Subdirectories, remove_tree, write_file_atomically
from spark_mergetree.storage.part_store import PartStore
from spark_mergetree.storage.stripe_map import PLAIN_MAP_SUFFIX

#: The table's directories on the disks of its storage policy:
#: {"roots": [absolute directories], "sidecar_suffixes": [suffixes of files kept beside a part]}
PART_ROOTS_FILE = Path("_mergetree") / "part_roots.json"


class TableDirectories:
    """The part directories of one table on every disk of its `PartStore` (implements
    `txn.PartDirectories`). A name is deleted on every disk, each deletion atomic (renamed to
    `delete_tmp_*` first), with the files the layout keeps beside a part directory."""

    def __init__(self, store: PartStore) -> None:
        roots = dict.fromkeys(store.table_dir(disk) for volume in store.policy.volumes for disk in volume.disks)
        self.roots = [Subdirectories(root) for root in roots]
        self.sidecar_suffixes = (PLAIN_MAP_SUFFIX,)

    def names(self) -> set[str]:
        return set().union(*(root.names() for root in self.roots))

    def exists(self, name: str) -> bool:
        return any(root.exists(name) for root in self.roots)

    def remove(self, name: str) -> None:
        for root in self.roots:
            for suffix in self.sidecar_suffixes:
                try:
                    os.unlink(root.path / (name + suffix))
                except FileNotFoundError:
                    pass
            root.remove(name)

    def record(self, table_dir: Path) -> None:
        """Write `_mergetree/part_roots.json` into the table directory."""
        payload = {"roots": [str(root.path) for root in self.roots], "sidecar_suffixes": list(self.sidecar_suffixes)}
        write_file_atomically(table_dir / PART_ROOTS_FILE, json.dumps(payload, indent=1).encode())


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

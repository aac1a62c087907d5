"""Cloning a table: a new table holding another's rows as they are now, with an id of its own.

A table's id (`_mergetree/log/table.json`) names its state at the coordinator, so a copy made
with `cp -a` is a new table only once its log has re-keyed it (txn/table_log.py `bind`). `clone`
is the supported way: it takes one snapshot of the source (a transaction, which also keeps
cleanup away from the parts it copies), and writes a new table with a new UUID whose only parts
are the parts that snapshot sees (and, in a local table, the active patch parts of ClickHouse's
lightweight UPDATEs, which reads apply from the directory), as ClickHouse gives an attached copy a
UUID of its own.

* Local: every file of a part is hard-linked (parts never change once written), or copied where
  the destination is on another file system. The clone is built in a hidden sibling directory and
  renamed into place at once, so `destination` is a whole table or nothing. Its log starts with a
  checkpoint in which every part exists since csn 0 (`TableLog.adopt`), and it is bound to the
  source's coordinator under a new id.
* Object storage: every object is copied on the server (no bytes through this machine), within one
  bucket. The clone's block numbers at its coordinator start above every copied part's, and one
  transaction names its parts in its log; the statement goes last, so an interrupted clone is no
  table (its objects are deleted).
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import uuid
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spark_mergetree.engine.directories import write_table_directory
from spark_mergetree.engine.metadata import META_DIR, SETTINGS_FILE, STATEMENT_FILE
from spark_mergetree.errors import InvalidOptionError, TableExistsError, UnsupportedError
from spark_mergetree.expressions.ddl import format_attach
from spark_mergetree.fileops import fsync_dir, remove_tree, rename_noreplace
from spark_mergetree.format.part_info import PartInfo
from spark_mergetree.storage.location import local_path
from spark_mergetree.storage.object_store import ObjectUrl, is_object_url, parse_object_url
from spark_mergetree.txn import TableLog, Transaction, coordinator_from_url
from spark_mergetree.txn.object_log import default_coordinator_url

if TYPE_CHECKING:
    from spark_mergetree.engine.object_table import ObjectStoreTable
    from spark_mergetree.engine.table import MergeTreeTable

_MUTATION_FILE = re.compile(r"mutation_[0-9]+\.txt")
# Errors of os.link that mean "cannot link here" (another file system, or one without hard links).
_NO_LINK = {errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP, errno.EOPNOTSUPP}


def _link_or_copy(source: Path, target: Path) -> bool:
    """Hard-link `source` as `target`, or copy it (fsynced) where it cannot be linked; True if linked."""
    try:
        os.link(source, target)
        return True
    except OSError as error:
        if error.errno not in _NO_LINK:
            raise
    shutil.copyfile(source, target)
    descriptor = os.open(target, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
    return False


def _link_tree(source: Path, target: Path) -> None:
    """A part directory (with its projections' subdirectories) rebuilt at `target` of links or copies."""
    target.mkdir()
    for entry in sorted(os.scandir(source), key=lambda e: e.name):
        if entry.is_dir(follow_symlinks=False):
            _link_tree(Path(entry.path), target / entry.name)
        else:
            _link_or_copy(Path(entry.path), target / entry.name)
    fsync_dir(target)


def _check_destination_free(target: Path) -> None:
    if (target / META_DIR / STATEMENT_FILE).exists():
        raise TableExistsError(f"cannot clone into {target}: a table already exists there")
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise TableExistsError(f"cannot clone into {target}: it exists and is not an empty directory; "
                               "name a new directory")


def clone_local(source: MergeTreeTable, destination: str | os.PathLike[str]) -> Path:
    """`MergeTreeTable.clone` of a table in a local directory (see the module docstring); returns
    the clone's directory."""
    if isinstance(destination, str) and is_object_url(destination):
        raise UnsupportedError(f"cannot clone {source.path} into {destination}: a local table clones into a "
                               "local directory (copy it into object storage by inserting its rows)")
    if source.metadata.setting("storage_policy"):
        raise UnsupportedError(f"cannot clone {source.path}: its storage policy spreads parts over several "
                               "disks; cloning such a table is not supported")
    target = local_path(destination)
    if target == source.path or source.path in target.parents:
        raise InvalidOptionError(f"cannot clone {source.path} into {target}: the destination is inside the table")
    _check_destination_free(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    identity = source.log.identity()
    coordinator = source.coordinator
    tx = Transaction(coordinator)  # one snapshot; its running snapshot keeps cleanup off the parts
    building = target.with_name(f".{target.name}.clone-{uuid.uuid4().hex[:12]}")
    try:
        parts = sorted(tx.visible_parts(source.log))
        patches = sorted(source.patch_part_names())
        definition = replace(source.definition, uuid=str(uuid.uuid4()))
        # The directory without its statement first; table.sql is written once the parts are in.
        write_table_directory(building, None, source.metadata.engine_settings)
        for name in [*parts, *patches]:
            _link_tree(source.path / name, building / name)
        for entry in os.scandir(source.path):
            if _MUTATION_FILE.fullmatch(entry.name) and entry.is_file():
                _link_or_copy(Path(entry.path), building / entry.name)
        TableLog(building).adopt(parts)
        (building / META_DIR).mkdir(exist_ok=True)
        write_table_directory(building, format_attach(definition), {})
        fsync_dir(building)
        if target.is_dir():  # an empty directory the caller made: taken over by an exchange-free swap
            target.rmdir()
        rename_noreplace(building, target, f"clone of {source.path}")
        fsync_dir(target.parent)
    except BaseException:
        remove_tree(building)
        raise
    finally:
        tx.rollback()
    if identity is not None:
        TableLog(target).bind(coordinator.url)  # the source's coordinator, under an id of the clone's own
    return target


def _copy_objects(bucket: Any, pairs: Iterable[tuple[str, str]]) -> None:
    """Server-side copies, 16 at a time."""
    pairs = list(pairs)
    with ThreadPoolExecutor(16, thread_name_prefix="mergetree-clone") as pool:
        for future in [pool.submit(bucket.copy, key, new_key) for key, new_key in pairs]:
            future.result()


def clone_object(source: ObjectStoreTable, destination: str) -> ObjectUrl:
    """`MergeTreeTable.clone` of a table in object storage (see the module docstring). Returns the
    clone's location."""
    if not (isinstance(destination, str) and is_object_url(destination)):
        raise UnsupportedError(f"cannot clone {source.location.url} into {destination}: a table in object "
                               "storage clones into the same bucket (server-side copies)")
    target: ObjectUrl = parse_object_url(destination)
    if target.root != source.location.root:
        raise UnsupportedError(f"cannot clone {source.location.url} into {target.url}: server-side copies stay "
                               f"in one bucket; clone into {source.location.root}/...")
    if not target.key or target.key == source.location.key or target.key.startswith(source.location.key + "/"):
        raise InvalidOptionError(f"cannot clone {source.location.url} into {target.url}: name a new prefix "
                                 "outside the table")
    bucket = source.parts_store.bucket
    found, prefixes = bucket.list_objects(target.key + "/")
    if found or prefixes:
        raise TableExistsError(f"cannot clone into {target.url}: objects already exist under it; name a new prefix")
    coordinator = source.coordinator
    # A coordinator kept under the source's own prefix goes with the source: the clone gets its own.
    own_default = coordinator.url == default_coordinator_url(source.location)
    clone_coordinator = (coordinator_from_url(default_coordinator_url(target)) if own_default else coordinator)
    tx = Transaction(coordinator)
    try:
        parts = sorted(tx.visible_parts(source.log))
        definition = replace(source.definition, uuid=str(uuid.uuid4()))
        keys = [(source.location.child(part, name).key, target.child(part, name).key)
                for part in parts for name in source.parts_store.files(part)]
        top, _ = bucket.list_objects(source.location.key + "/")
        mutations = [key for key in top if _MUTATION_FILE.fullmatch(key.rsplit("/", 1)[-1])]
        keys += [(key, target.child(key.rsplit("/", 1)[-1]).key) for key in mutations]
        _copy_objects(bucket, keys)
        settings = source.metadata.engine_settings
        if settings:
            try:
                bucket.copy(source.location.child(META_DIR, SETTINGS_FILE).key, target.child(META_DIR, SETTINGS_FILE).key)
            except FileNotFoundError:
                pass
        clone = type(source)(target, source.metadata.with_definition(definition), clone_coordinator,
                             source.storage_options)
        # Block numbers above every copied part's and mutation's, so no new part takes a copied name.
        highest = max([0, *(max(PartInfo.parse(p).max_block, PartInfo.parse(p).mutation) for p in parts),
                       *(int(key.rsplit("_", 1)[-1].removesuffix(".txt")) for key in mutations)])
        table_id = clone.log.bind(clone_coordinator.url)
        if highest:
            clone_coordinator.allocate_blocks(table_id, highest)
        naming = Transaction(clone_coordinator)
        try:
            if parts:
                naming.add_parts(clone.log, parts)
            naming.commit()
        except BaseException:
            naming.rollback()
            raise
        statement = format_attach(definition)
        bucket.put(target.child(META_DIR, STATEMENT_FILE).key, statement.encode(), if_absent=True)
    except BaseException:
        bucket.delete_prefix(target.key + "/")
        raise
    finally:
        tx.rollback()
    return target

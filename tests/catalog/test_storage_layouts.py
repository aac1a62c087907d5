"""Catalog tables on every storage layout: create, insert, read, DROP ... SYNC, UNDROP, recovery.

A table on a storage policy keeps its parts in `<disk>/store/<p>/<uuid>/` on each disk of the
policy; the catalog's `store/<p>/<uuid>/` holds its settings and log. Creating, reading and
deleting must reach every one of those directories.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from spark_mergetree.catalog import Catalog
from spark_mergetree.catalog.statements import new_uuid, table_definition
from spark_mergetree.engine.metadata import split_settings
from spark_mergetree.engine.table import MergeTreeTable
from spark_mergetree.expressions.ddl import format_attach
from tests.catalog.chdb_runner import run_chdb

COLUMNS = [("id", "UInt64"), ("s", "String")]


def _rows(start: int, count: int) -> pa.Table:
    ids = np.arange(start, start + count, dtype=np.uint64)
    return pa.table({"id": ids, "s": pa.array([f"value-{i % 97}" for i in range(start, start + count)])})


def _disk_dirs(settings: dict[str, Any], table_uuid: str) -> list[Path]:
    """Where the policy's disks keep the table (none without a policy)."""
    policy = settings.get("storage_policy") or {"disks": {}}
    return [Path(d["path"]) / "store" / table_uuid[:3] / table_uuid for d in policy["disks"].values()]


def _files(directories: list[Path]) -> list[Path]:
    return [p for d in directories if d.exists() for p in d.rglob("*") if p.is_file()]


def _catalog_with_rows(root: Path, settings: dict[str, Any], drop_delay: float = 3600) -> tuple[Catalog, pa.Table]:
    catalog = Catalog(root, drop_delay=drop_delay)
    catalog.create_database("db")
    table = catalog.create_table("db.t", COLUMNS, "id", settings=settings)
    first, second = _rows(0, 3000), _rows(3000, 2000)
    table.insert(first)
    table.insert(second)
    return catalog, pa.concat_tables([first, second])


def test_create_insert_read(tmp_path: Path, storage_settings: dict[str, Any]) -> None:
    root = tmp_path / "root"
    catalog, expected = _catalog_with_rows(root, storage_settings)
    table = Catalog(root).table("db.t")  # opened afresh, as another process would
    assert table.to_arrow().sort_by("id").to_pydict() == expected.to_pydict()
    assert table.to_arrow(where="id BETWEEN 10 AND 20").column("id").to_pylist() == list(range(10, 21))
    assert table.count() == expected.num_rows and table.check().ok
    parts = {part.name for part in table.parts()}
    assert len(parts) == 2
    disks = _disk_dirs(storage_settings, table.uuid)
    on_disks = {p.name for d in disks if d.exists() for p in d.iterdir() if p.is_dir()}
    in_data_dir = {p.name for p in catalog.data_path("db.t").iterdir() if p.name in parts}
    if disks:  # the parts are on the policy's disks, not in the catalog's directory
        assert parts <= on_disks and not in_data_dir
    else:
        assert in_data_dir == parts
    # ClickHouse on the root loads the table; it sees the parts in the catalog's directory only.
    assert run_chdb(root, "SELECT count() FROM db.t")[0] == f"{0 if disks else expected.num_rows}\n"


def test_drop_sync_deletes_every_disk(tmp_path: Path, storage_settings: dict[str, Any]) -> None:
    catalog, _ = _catalog_with_rows(tmp_path / "root", storage_settings)
    info = catalog.table_info("db.t")
    directories = [info.data_path, *_disk_dirs(storage_settings, info.uuid)]
    assert _files(directories)
    dropped = catalog.drop_table("db.t", sync=True)
    assert dropped is not None and dropped.data_removed
    assert [d for d in directories if d.exists()] == []
    assert catalog.dropped_tables() == [] and catalog.unreferenced_store_dirs() == []


def test_drop_sync_while_read_waits_for_the_reader(tmp_path: Path, storage_settings: dict[str, Any]) -> None:
    catalog, expected = _catalog_with_rows(tmp_path / "root", storage_settings)
    info = catalog.table_info("db.t")
    directories = [info.data_path, *_disk_dirs(storage_settings, info.uuid)]
    with catalog.pin("db.t"):
        dropped = catalog.drop_table("db.t", sync=True)
        assert dropped is not None and not dropped.data_removed
        assert Catalog(tmp_path / "root").collect_dropped() == []
        held = MergeTreeTable.open(info.data_path, create_statement=info.statement)
        assert held.to_arrow().sort_by("id").to_pydict() == expected.to_pydict()
    assert catalog.collect_dropped() == [info.uuid]
    assert [d for d in directories if d.exists()] == []


def test_undrop_then_delayed_drop(tmp_path: Path, storage_settings: dict[str, Any]) -> None:
    root = tmp_path / "root"
    catalog, expected = _catalog_with_rows(root, storage_settings)
    info = catalog.table_info("db.t")
    catalog.drop_table("db.t")
    assert catalog.collect_dropped() == []
    catalog.undrop_table("db.t")
    assert catalog.table("db.t").to_arrow().sort_by("id").to_pydict() == expected.to_pydict()
    catalog.table("db.t").insert(_rows(5000, 10))
    assert catalog.table("db.t").count() == expected.num_rows + 10
    catalog.drop_table("db.t")
    report = Catalog(root, drop_delay=0).recover()  # recovery collects what is due
    assert report is not None and report.collected == [info.uuid]
    assert [d for d in [info.data_path, *_disk_dirs(storage_settings, info.uuid)] if d.exists()] == []


def test_interrupted_deletion_is_finished_on_every_disk(tmp_path: Path, storage_settings: dict[str, Any]) -> None:
    root = tmp_path / "root"
    catalog, _ = _catalog_with_rows(root, storage_settings)
    info = catalog.table_info("db.t")
    catalog.drop_table("db.t")
    # What a deletion killed right after its first step leaves: the data directory in tmp/.
    os.rename(info.data_path, root / "tmp" / f"mergetree_dropping.{info.uuid}")
    Catalog(root, drop_delay=3600).recover()
    assert _files([root / "tmp" / f"mergetree_dropping.{info.uuid}", *_disk_dirs(storage_settings, info.uuid)]) == []
    assert catalog.dropped_tables() == []


def test_crashed_create_is_undone(tmp_path: Path, storage_settings: dict[str, Any]) -> None:
    """A CREATE killed just before its commit leaves the directory the engine made; recovery removes it."""
    root = tmp_path / "root"
    catalog = Catalog(root, drop_delay=3600)
    catalog.create_database("db")
    table_uuid = new_uuid()
    clickhouse_settings, engine_settings = split_settings(storage_settings)
    definition = table_definition(table_uuid, COLUMNS, "id", settings=clickhouse_settings)
    temporary = catalog.database_path("db") / "t.sql.tmp"
    temporary.write_text(format_attach(definition))
    data_path = catalog.store_path(table_uuid)
    MergeTreeTable.new(data_path, definition, engine_settings).write_directory(with_statement=False)
    report = Catalog(root).recover()
    assert report is not None and report.removed_orphan_store_dirs == [data_path]
    assert not data_path.exists() and not temporary.exists()
    catalog.create_table("db.t", COLUMNS, "id", settings=storage_settings).insert(_rows(0, 5))

"""Catalog recovery: exactly the leftovers of crashed DDL are removed, live work and strangers are not;
opening and reading a catalog remove nothing."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

from spark_mergetree.catalog import Catalog
from spark_mergetree.catalog.statements import database_statement, table_statement
from spark_mergetree.fileops import FileLock

COLUMNS = [("id", "UInt64")]


def _fresh(tmp_path: Path) -> Catalog:
    catalog = Catalog(tmp_path, drop_delay=3600)
    catalog.create_database("db")
    return catalog


def _crashed_create(catalog: Catalog, table: str) -> tuple[Path, Path]:
    """What a CREATE TABLE killed just before its commit rename leaves behind."""
    table_uuid = str(uuid.uuid4())
    temporary = catalog.database_path("db") / f"{table}.sql.tmp"
    temporary.write_text(table_statement(table_uuid, COLUMNS, "id"))
    data_path = catalog.store_path(table_uuid)
    data_path.mkdir(parents=True)
    (data_path / "format_version.txt").write_text("1")
    return temporary, data_path


def test_crashed_create_table_is_undone(tmp_path: Path) -> None:
    catalog = _fresh(tmp_path)
    temporary, data_path = _crashed_create(catalog, "t")
    cut_off = catalog.database_path("db") / "u.sql.tmp"
    cut_off.write_text("ATTACH TABLE _ UU")  # killed mid-write: no UUID yet, nothing else made
    assert catalog.unreferenced_store_dirs() == []  # a create in progress claims its directory
    report = Catalog(tmp_path).recover()
    assert report is not None
    assert sorted(report.removed_temporary_files) == sorted([temporary, cut_off])
    assert report.removed_orphan_store_dirs == [data_path]
    assert not temporary.exists() and not data_path.exists() and not cut_off.exists()
    # The name is free again.
    catalog.define_table("db.t", COLUMNS, "id")


def test_create_in_progress_elsewhere_is_left_alone(tmp_path: Path) -> None:
    catalog = _fresh(tmp_path)
    temporary, data_path = _crashed_create(catalog, "t")
    # A live creator holds the name's guard (as another process's CREATE would).
    with FileLock(catalog.layout.guard_path("table", "db", "t"), exclusive=True, blocking=True):
        report = Catalog(tmp_path).recover()
        assert report is not None and report.removed_temporary_files == []
        assert temporary.exists() and data_path.exists()


def test_crashed_create_database_and_drop_database(tmp_path: Path) -> None:
    catalog = _fresh(tmp_path)
    orphan_uuid = str(uuid.uuid4())
    (tmp_path / "metadata" / "new.sql.tmp").write_text(database_statement(orphan_uuid))
    catalog.store_path(orphan_uuid).mkdir(parents=True)
    # DROP DATABASE killed after its commit (the .sql unlinked) but before the cleanup.
    catalog.create_database("old")
    old_dir = catalog.database_path("old")
    os.unlink(tmp_path / "metadata" / "old.sql")
    report = Catalog(tmp_path).recover()
    assert report is not None
    assert report.removed_orphan_store_dirs == [catalog.store_path(orphan_uuid)]
    assert not (tmp_path / "metadata" / "old").exists() and not old_dir.exists()
    assert not (tmp_path / "data" / "old").exists()
    assert catalog.databases() == ["db"] and report.unreferenced_store_dirs == []


def test_symlinks_and_markers_are_repaired(tmp_path: Path) -> None:
    catalog = _fresh(tmp_path)
    a = catalog.define_table("db.a", COLUMNS, "id")
    b = catalog.define_table("db.b", COLUMNS, "id")
    data = tmp_path / "data" / "db"
    os.unlink(data / "a")
    os.unlink(data / "b")
    os.symlink(f"../../store/{a.uuid[:3]}/{a.uuid}", data / "b")  # an EXCHANGE cut short
    os.symlink("../../store/xyz/gone", data / "dropped_long_ago")
    os.unlink(tmp_path / "metadata" / "db")
    (catalog.database_path("db") / "c.sql.detached").write_text("")  # marker of a dropped table
    Catalog(tmp_path).recover()
    assert os.readlink(data / "a").endswith(a.uuid) and os.readlink(data / "b").endswith(b.uuid)
    assert not os.path.lexists(data / "dropped_long_ago")
    assert os.readlink(tmp_path / "metadata" / "db").endswith(catalog.database_uuid("db"))
    assert not (catalog.database_path("db") / "c.sql.detached").exists()


def test_interrupted_deletion_is_finished_and_strangers_are_only_reported(tmp_path: Path) -> None:
    catalog = _fresh(tmp_path)
    info = catalog.define_table("db.t", COLUMNS, "id")
    dropped = catalog.drop_table("db.t")
    assert dropped is not None
    # Killed after moving the data into the trash, before unlinking the dropped entry.
    trash = tmp_path / "tmp" / f"mergetree_dropping.{info.uuid}"
    os.rename(info.data_path, trash)
    stranger = catalog.store_path(str(uuid.uuid4()))
    stranger.mkdir(parents=True)
    report = Catalog(tmp_path, drop_delay=3600).recover()
    assert report is not None
    assert not trash.exists() and not dropped.metadata_path.exists()
    assert report.collected == [info.uuid]
    assert report.unreferenced_store_dirs == [stranger] and stranger.exists()


def test_crashed_attach_keeps_the_data_it_was_attaching(tmp_path: Path) -> None:
    catalog = _fresh(tmp_path)
    temporary, data_path = _crashed_create(catalog, "t")
    (data_path / "all_1_1_0").mkdir()  # not a directory CREATE made: it holds a part
    report = Catalog(tmp_path).recover()
    assert report is not None and report.removed_temporary_files == [temporary]
    assert report.removed_orphan_store_dirs == [] and report.unreferenced_store_dirs == [data_path]
    assert (data_path / "all_1_1_0").is_dir()


def test_opening_and_reading_delete_nothing(tmp_path: Path) -> None:
    """Only `recover()` and DDL repair: `Catalog(root)`, its reads and read-only CLI commands leave
    every leftover (a crashed CREATE, a due drop) where it is."""
    from click.testing import CliRunner

    from spark_mergetree.cli import main

    catalog = _fresh(tmp_path)
    temporary, data_path = _crashed_create(catalog, "t")
    dropped = catalog.define_table("db.gone", COLUMNS, "id")
    catalog.drop_table("db.gone")
    reader = Catalog(tmp_path, drop_delay=0)  # the drop is due for this one
    assert reader.databases() == ["db"] and reader.tables("db") == []
    assert [d.uuid for d in reader.dropped_tables()] == [dropped.uuid]
    for command in (["databases"], ["tables", "db"]):
        result = CliRunner().invoke(main, ["catalog", "--root", str(tmp_path), *command])
        assert result.exit_code == 0, result.output
    assert temporary.exists() and data_path.exists() and dropped.data_path.exists()
    assert reader.last_recovery is None
    reader.create_database("other")  # the first DDL repairs first
    assert reader.last_recovery is not None and reader.last_recovery.collected == [dropped.uuid]
    assert not temporary.exists() and not data_path.exists() and not dropped.data_path.exists()

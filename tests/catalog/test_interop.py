"""The catalog and ClickHouse (chdb, in its own process) share one root, both ways."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from spark_mergetree.catalog import Catalog
from spark_mergetree.errors import TableExistsError, TableNotFoundError
from tests.catalog.chdb_runner import rows, run_chdb

TABLES_SQL = "SELECT database, name, uuid FROM system.tables WHERE database IN ('db', 'we-ird', 'other') ORDER BY 1, 2"


def _tables(root: Path) -> list[list[str]]:
    return rows(run_chdb(root, TABLES_SQL)[0])


def test_our_ddl_is_what_clickhouse_sees(tmp_path: Path) -> None:
    catalog = Catalog(tmp_path, drop_delay=3600)
    catalog.create_database("db")
    catalog.create_database("we-ird")
    events = catalog.define_table(
        "db.events", [("id", "UInt64"), ("name", "String"), ("d", "Date")], "id",
        partition_by="toYYYYMM(d)", settings={"index_granularity": 128},
    )
    catalog.define_table("db.small", [("k", "Int32"), ("v b", "Nullable(String)")], ["k"])
    catalog.define_table("we-ird.odd.name", [("x", "UInt8")], [])
    catalog.define_table("db.to_drop", [("x", "UInt8")], "x")
    catalog.define_table("db.to_detach", [("x", "UInt8")], "x")

    # A restarted server sees every table under the same UUID, and can write into it.
    seen = _tables(tmp_path)
    assert seen == [
        ["db", "events", events.uuid],
        ["db", "small", catalog.table_uuid("db.small")],
        ["db", "to_detach", catalog.table_uuid("db.to_detach")],
        ["db", "to_drop", catalog.table_uuid("db.to_drop")],
        ["we-ird", "odd.name", catalog.table_uuid("we-ird.odd.name")],
    ]
    inserted = run_chdb(
        tmp_path,
        "INSERT INTO db.events VALUES (1, 'a', '2024-01-05'), (2, 'b', '2024-02-06')",
        "INSERT INTO db.small VALUES (7, 'seven'), (8, NULL)",
        "INSERT INTO db.to_drop VALUES (1)",
        "SELECT arrayJoin(data_paths) FROM system.tables WHERE database = 'db' AND name = 'events'",
    )
    assert Path(inserted[3].strip()) == catalog.data_path("db.events")
    assert sorted(p.name for p in catalog.data_path("db.events").iterdir() if p.name[0].isdigit()) == [
        "202401_1_1_0", "202402_2_2_0"]

    # RENAME across databases, EXCHANGE, DROP, DETACH: a new server follows every change.
    catalog.rename_table("db.events", "we-ird.events2")
    catalog.exchange_tables("db.small", "we-ird.odd.name")
    dropped = catalog.drop_table("db.to_drop")
    catalog.detach_table("db.to_detach")
    out = run_chdb(
        tmp_path,
        TABLES_SQL,
        "SELECT id, name FROM `we-ird`.events2 ORDER BY id",
        "SELECT k, `v b` FROM `we-ird`.`odd.name` ORDER BY k",
        "SELECT table, uuid FROM system.dropped_tables",
        "SELECT count() FROM db.to_detach",
        allow_errors=True,
    )
    assert rows(out[0]) == [
        ["db", "small", catalog.table_uuid("db.small")],
        ["we-ird", "events2", events.uuid],
        ["we-ird", "odd.name", catalog.table_uuid("we-ird.odd.name")],
    ]
    assert rows(out[1]) == [["1", "a"], ["2", "b"]]
    assert rows(out[2]) == [["7", "seven"], ["8", "\\N"]]
    assert rows(out[3]) == [["to_drop", dropped.uuid]]
    assert out[4].startswith("ERROR") and "UNKNOWN_TABLE" in out[4]

    # ClickHouse's ATTACH of our detached table, and our UNDROP, are seen by the next server.
    run_chdb(tmp_path, "ATTACH TABLE db.to_detach")
    assert catalog.tables("db") == ["small", "to_detach"] and catalog.detached_tables("db") == []
    catalog.undrop_table("db.to_drop")
    assert run_chdb(tmp_path, "SELECT count() FROM db.to_drop")[0] == "1\n"

    # DROP DATABASE: the database disappears, its tables wait in metadata_dropped/.
    catalog.drop_database("db")
    assert not (tmp_path / "metadata" / "db").exists() and not (tmp_path / "data" / "db").exists()
    out = run_chdb(tmp_path, "SELECT name FROM system.databases WHERE name = 'db'",
                   "SELECT table FROM system.dropped_tables ORDER BY table")
    assert out[0] == ""
    assert rows(out[1]) == [["small"], ["to_detach"], ["to_drop"]]
    assert catalog.unreferenced_store_dirs() == []


def test_clickhouse_ddl_is_what_we_see(tmp_path: Path) -> None:
    out = run_chdb(
        tmp_path,
        "CREATE DATABASE db ENGINE = Atomic",
        "CREATE DATABASE other ENGINE = Atomic",
        "CREATE TABLE db.a (id UInt64, s String) ENGINE = MergeTree ORDER BY id",
        "CREATE TABLE db.b (id UInt64) ENGINE = MergeTree ORDER BY id",
        "CREATE TABLE db.`c-d` (id UInt64) ENGINE = MergeTree ORDER BY id",
        "CREATE TABLE db.gone (id UInt64) ENGINE = MergeTree ORDER BY id",
        "CREATE TABLE db.det (id UInt64) ENGINE = MergeTree ORDER BY id",
        "INSERT INTO db.a VALUES (1, 'x')",
        "INSERT INTO db.b VALUES (2)",
        "EXCHANGE TABLES db.a AND db.b",
        "RENAME TABLE db.`c-d` TO other.moved",
        "DROP TABLE db.gone",
        "DETACH TABLE db.det PERMANENTLY",
        TABLES_SQL,
        "SELECT database, name, arrayJoin(data_paths) FROM system.tables WHERE database IN ('db', 'other')",
    )
    catalog = Catalog(tmp_path, drop_delay=3600)
    assert catalog.databases() == ["db", "other"]
    assert catalog.tables("db") == ["a", "b"]
    assert catalog.detached_tables("db") == ["det"]
    assert catalog.tables("other") == ["moved"]
    for database, name, table_uuid in rows(out[-2]):
        assert catalog.table_uuid(f"{database}.{name}") == table_uuid
    for database, name, path in rows(out[-1]):
        assert catalog.data_path((database, name)) == Path(path.rstrip("/"))
    assert [(d.database, d.name) for d in catalog.dropped_tables()] == [("db", "gone")]
    assert catalog.unreferenced_store_dirs() == []
    assert catalog.recover().removed_orphan_store_dirs == []

    # Our DDL on their tables, then their server again.
    with pytest.raises(TableExistsError):
        catalog.rename_table("db.a", "db.b")
    with pytest.raises(TableExistsError):
        catalog.define_table("db.det", [("id", "UInt64")], "id")
    catalog.exchange_tables("db.a", "db.b")
    catalog.attach_table("db.det")
    catalog.undrop_table("db.gone")
    catalog.rename_table("other.moved", "db.back")
    out = run_chdb(tmp_path, "SELECT s FROM db.a", "SELECT id FROM db.b", TABLES_SQL)
    assert out[0] == "x\n" and out[1] == "2\n"
    assert [r[:2] for r in rows(out[2])] == [["db", "a"], ["db", "b"], ["db", "back"], ["db", "det"], ["db", "gone"]]
    with pytest.raises(TableNotFoundError):
        catalog.table_uuid("other.moved")


def test_metadata_text_matches_clickhouse(tmp_path: Path) -> None:
    """Our ATTACH TABLE text is byte-identical to ClickHouse's for the same definition."""
    run_chdb(
        tmp_path,
        "CREATE DATABASE db ENGINE = Atomic",
        "CREATE TABLE db.theirs (a UInt64, `b c` Nullable(String), d DateTime('UTC')) ENGINE = MergeTree "
        "PARTITION BY (toYYYYMM(d), a % 4) PRIMARY KEY a ORDER BY (a, `b c`) "
        "SETTINGS allow_nullable_key = 1, index_granularity = 256",
    )
    catalog = Catalog(tmp_path)
    theirs = catalog.table_info("db.theirs")
    ours = catalog.define_table(
        "db.ours", [("a", "UInt64"), ("b c", "Nullable(String)"), ("d", "DateTime('UTC')")],
        ["a", "`b c`"], partition_by=["toYYYYMM(d)", "a % 4"], primary_key="a",
        settings={"allow_nullable_key": 1, "index_granularity": 256},
    )
    assert ours.statement.replace(ours.uuid, theirs.uuid) == theirs.statement
    database_file = (tmp_path / "metadata" / "db.sql").read_text()
    catalog.create_database("mine")
    assert (tmp_path / "metadata" / "mine.sql").read_text().replace(catalog.database_uuid("mine"), "U") == \
        database_file.replace(catalog.database_uuid("db"), "U")
    for database in ("db", "mine"):
        database_uuid = catalog.database_uuid(database)
        assert os.readlink(tmp_path / "metadata" / database) == f"../store/{database_uuid[:3]}/{database_uuid}"
    data_link = tmp_path / "data" / "db" / "ours"
    assert os.readlink(data_link) == f"../../store/{ours.uuid[:3]}/{ours.uuid}"
    assert os.readlink(tmp_path / "data" / "db" / "theirs") == f"../../store/{theirs.uuid[:3]}/{theirs.uuid}"

"""Catalog.create_table / Catalog.table hand tables to the engine; DDL never disturbs an open table."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from spark_mergetree.catalog import Catalog
from tests.catalog.chdb_runner import rows, run_chdb


def test_created_table_is_written_by_us_and_read_by_clickhouse(tmp_path: Path) -> None:
    catalog = Catalog(tmp_path, drop_delay=0.0)
    catalog.create_database("db")
    table = catalog.create_table("db.t", [("id", "UInt64"), ("s", "String")], "id")
    assert table.uuid == catalog.table_uuid("db.t") and table.path == catalog.data_path("db.t")
    table.insert(pa.table({"id": pa.array([3, 1, 2], pa.uint64()), "s": ["c", "a", "b"]}))
    assert rows(run_chdb(tmp_path, "SELECT id, s FROM db.t ORDER BY id")[0]) == [["1", "a"], ["2", "b"], ["3", "c"]]

    # RENAME, EXCHANGE and DROP while the table is open and leased: it keeps working.
    catalog.create_table("db.other", [("id", "UInt64"), ("s", "String")], "id")
    with catalog.pin(table.uuid):
        catalog.rename_table("db.t", "db.renamed")
        catalog.exchange_tables("db.renamed", "db.other")
        assert catalog.table("db.other").to_arrow().column("id").to_pylist() == [1, 2, 3]
        catalog.drop_table("db.other", sync=True)
        assert catalog.collect_dropped() == []
        table.insert(pa.table({"id": pa.array([4], pa.uint64()), "s": ["d"]}))
        assert table.to_arrow().column("id").to_pylist() == [1, 2, 3, 4]
    assert catalog.collect_dropped() == [table.uuid]
    assert not table.path.exists()


def test_clickhouse_table_opens_through_the_catalog(tmp_path: Path) -> None:
    run_chdb(
        tmp_path,
        "CREATE DATABASE db ENGINE = Atomic",
        "CREATE TABLE db.t (d Date, k UInt32, v Float64) ENGINE = MergeTree PARTITION BY toYYYYMM(d) ORDER BY k",
        "INSERT INTO db.t VALUES ('2024-01-01', 2, 0.5), ('2024-02-01', 1, 1.5)",
    )
    catalog = Catalog(tmp_path)
    table = catalog.table("db.t")
    assert table.uuid == catalog.table_uuid("db.t")
    assert table.to_arrow().sort_by("k").column("v").to_pylist() == [1.5, 0.5]


def test_attach_existing_data_directory_with_its_statement(tmp_path: Path) -> None:
    """Zero-copy hand-off: a table directory made elsewhere joins the catalog by ATTACH ... UUID."""
    import shutil

    import pytest

    from spark_mergetree.errors import InvalidOptionError, TableExistsError, TableNotFoundError

    elsewhere = tmp_path / "elsewhere"
    out = run_chdb(
        elsewhere,
        "CREATE DATABASE src ENGINE = Atomic",
        "CREATE TABLE src.t (id UInt64, s String) ENGINE = MergeTree ORDER BY id",
        "INSERT INTO src.t VALUES (5, 'five'), (6, 'six')",
        "SELECT uuid, arrayJoin(data_paths), metadata_path FROM system.tables WHERE database = 'src'",
    )
    table_uuid, data_path, metadata_path = rows(out[-1])[0]
    statement = (elsewhere / metadata_path).read_text()

    root = tmp_path / "root"
    catalog = Catalog(root)
    catalog.create_database("db")
    with pytest.raises(TableNotFoundError, match="does not exist"):
        catalog.attach_table("db.imported", statement=statement)
    shutil.copytree(data_path, catalog.store_path(table_uuid))
    with pytest.raises(InvalidOptionError, match="UUID"):
        catalog.attach_table("db.imported", statement="CREATE TABLE x (id UInt64) ENGINE = MergeTree ORDER BY id")
    info = catalog.attach_table("db.imported", statement=statement)
    assert info.uuid == table_uuid and info.statement == statement
    with pytest.raises(TableExistsError, match=table_uuid):
        catalog.attach_table("db.again", statement=statement)
    assert catalog.table("db.imported").to_arrow().column("s").to_pylist() == ["five", "six"]
    assert rows(run_chdb(root, "SELECT id FROM db.imported ORDER BY id")[0]) == [["5"], ["6"]]
    assert catalog.unreferenced_store_dirs() == []


def test_engine_settings_stay_out_of_the_clickhouse_statement(tmp_path: Path) -> None:
    catalog = Catalog(tmp_path)
    catalog.create_database("db")
    table = catalog.create_table("db.t", [("id", "UInt64")], "id",
                                 settings={"codec": "ZSTD(3)", "index_granularity": 64, "auto_merge": False})
    statement = catalog.table_info("db.t").statement
    assert statement.endswith("ORDER BY id\nSETTINGS index_granularity = 64\n")
    assert table.metadata.setting("codec") == "ZSTD(3)" and table.metadata.setting("auto_merge") is False
    table.insert(pa.table({"id": pa.array([1, 2], pa.uint64())}))
    assert run_chdb(tmp_path, "SELECT sum(id) FROM db.t")[0] == "3\n"

"""A root ClickHouse made: its `default` database has a symlink and no `metadata/default.sql`.

clickhouse-local and chdb keep `default` as `metadata/default -> ../store/<p>/<uuid>` alone and take
the database's UUID from the symlink's target on every start. The catalog must see that database,
add tables beside ClickHouse's, and never replace the symlink (that hides every table behind it).
"""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pytest

from spark_mergetree.catalog import Catalog
from spark_mergetree.catalog.statements import database_statement, new_uuid
from spark_mergetree.errors import StorageError, TableExistsError
from tests.catalog.chdb_runner import rows, run_chdb

# system.tables shows a nil UUID for tables of chdb's `default` (an overlay database): the data path names it.
TABLES_SQL = ("SELECT name, splitByChar('/', trimRight(arrayJoin(data_paths), '/'))[-1] FROM system.tables "
              "WHERE database = 'default' ORDER BY name")


def _clickhouse_root(root: Path) -> str:
    """Two tables ClickHouse created in `default`; returns the symlink's target."""
    run_chdb(
        root,
        "CREATE TABLE default.a (id UInt64, s String) ENGINE = MergeTree ORDER BY id",
        "CREATE TABLE default.b (k Int32, d Date) ENGINE = MergeTree PARTITION BY toYYYYMM(d) ORDER BY k",
        "INSERT INTO default.a SELECT number, toString(number * 7) FROM numbers(1000)",
        "INSERT INTO default.b VALUES (1, '2024-01-05'), (-2, '2024-02-06')",
    )
    link = root / "metadata" / "default"
    assert link.is_symlink() and not (root / "metadata" / "default.sql").exists()
    return os.readlink(link)


def test_clickhouse_default_database_round_trip(tmp_path: Path) -> None:
    root = tmp_path / "root"
    target = _clickhouse_root(root)
    theirs = dict(map(tuple, rows(run_chdb(root, TABLES_SQL)[0])))
    a_rows = rows(run_chdb(root, "SELECT id, s FROM default.a ORDER BY id")[0])

    catalog = Catalog(root, drop_delay=3600)
    assert catalog.databases() == ["default"]
    assert catalog.database_uuid("default") == Path(target).name
    assert catalog.tables("default") == ["a", "b"]
    assert {name: catalog.table_uuid(("default", name)) for name in ("a", "b")} == theirs
    a = catalog.table("default.a").to_arrow().sort_by("id")
    assert [[str(i), s] for i, s in zip(a["id"].to_pylist(), a["s"].to_pylist())] == a_rows
    assert catalog.unreferenced_store_dirs() == []

    # It exists: CREATE DATABASE leaves it alone; our table goes in beside ClickHouse's.
    assert catalog.create_database("default", if_not_exists=True) == Path(target).name
    with pytest.raises(TableExistsError, match="default"):
        catalog.create_database("default")
    ours = catalog.create_table("default.ours", [("id", "UInt64"), ("v", "Float64")], "id")
    ours.insert(pa.table({"id": pa.array([5, 6, 7], pa.uint64()), "v": [0.5, 1.5, 2.5]}))
    assert os.readlink(root / "metadata" / "default") == target
    assert not (root / "metadata" / "default.sql").exists()

    # ClickHouse restarted on the root sees all three tables with their rows.
    out = run_chdb(root, TABLES_SQL, "SELECT count(), sum(id) FROM default.a", "SELECT k FROM default.b ORDER BY k",
                   "SELECT id, v FROM default.ours ORDER BY id")
    assert dict(map(tuple, rows(out[0]))) == {**theirs, "ours": ours.uuid}
    assert out[1] == f"1000\t{sum(range(1000))}\n" and rows(out[2]) == [["-2"], ["1"]]
    assert rows(out[3]) == [["5", "0.5"], ["6", "1.5"], ["7", "2.5"]]

    # ClickHouse's RENAME and EXCHANGE are what we see next.
    run_chdb(root, "RENAME TABLE default.a TO default.a2", "EXCHANGE TABLES default.b AND default.ours")
    catalog = Catalog(root, drop_delay=3600)
    assert catalog.tables("default") == ["a2", "b", "ours"]
    assert catalog.table_uuid("default.a2") == theirs["a"]
    assert catalog.table_uuid("default.b") == ours.uuid and catalog.table_uuid("default.ours") == theirs["b"]
    assert catalog.table("default.b").to_arrow().column("v").to_pylist() == [0.5, 1.5, 2.5]
    assert sorted(catalog.table("default.ours").to_arrow().column("k").to_pylist()) == [-2, 1]
    assert catalog.table("default.a2").count() == 1000
    assert os.readlink(root / "metadata" / "default") == target


def test_spark_first_write_into_clickhouse_default(spark, tmp_path: Path) -> None:
    root = tmp_path / "root"
    target = _clickhouse_root(root)
    (spark.range(0, 40).selectExpr("id", "cast(id % 4 as int) as k")
     .write.format("mergetree").option("catalog", str(root)).option("order_by", "id").mode("append")
     .save("default.from_spark"))
    assert os.readlink(root / "metadata" / "default") == target
    out = run_chdb(root, "SELECT name FROM system.tables WHERE database = 'default' ORDER BY name",
                   "SELECT count(), sum(k) FROM default.from_spark", "SELECT count() FROM default.a")
    assert rows(out[0]) == [["a"], ["b"], ["from_spark"]]
    assert out[1] == f"40\t{sum(i % 4 for i in range(40))}\n" and out[2] == "1000\n"
    read = spark.read.format("mergetree").option("catalog", str(root)).load("default.a")
    assert read.count() == 1000


def test_recovery_keeps_an_empty_clickhouse_default(tmp_path: Path) -> None:
    """All of ClickHouse's tables dropped: `default` still exists for it, with the same UUID."""
    root = tmp_path / "root"
    target = _clickhouse_root(root)
    run_chdb(root, "DROP TABLE default.a SYNC", "DROP TABLE default.b SYNC")
    catalog = Catalog(root)
    assert os.readlink(root / "metadata" / "default") == target
    assert catalog.databases() == ["default"] and catalog.tables("default") == []
    catalog.create_table("default.t", [("id", "UInt64")], "id").insert(pa.table({"id": pa.array([3], pa.uint64())}))
    assert run_chdb(root, "SELECT id FROM default.t")[0] == "3\n"


def test_drop_clickhouse_default(tmp_path: Path) -> None:
    root = tmp_path / "root"
    target = _clickhouse_root(root)
    catalog = Catalog(root, drop_delay=3600)
    dropped = catalog.drop_database("default")
    assert sorted(d.name for d in dropped) == ["a", "b"]
    assert not (root / "metadata" / "default").is_symlink() and catalog.databases() == []
    assert not (root / "metadata" / target).exists()
    # ClickHouse starts afresh with an empty default; the dropped tables can still be brought back.
    assert run_chdb(root, TABLES_SQL)[0] == ""
    catalog.create_database("default")
    catalog.undrop_table("default.a")
    assert catalog.table("default.a").count() == 1000
    assert run_chdb(root, "SELECT count() FROM default.a")[0] == "1000\n"


def test_database_link_holding_tables_is_never_replaced(tmp_path: Path) -> None:
    """A `metadata/<db>` symlink without `<db>.sql` whose directory holds tables is not ours to re-point."""
    root = tmp_path / "root"
    catalog = Catalog(root)
    catalog.create_database("db")
    catalog.define_table("db.t", [("id", "UInt64")], "id")
    (root / "metadata" / "db.sql").unlink()  # e.g. removed by hand
    link_target = os.readlink(root / "metadata" / "db")
    catalog = Catalog(root)
    assert os.readlink(root / "metadata" / "db") == link_target
    with pytest.raises(StorageError, match="holds tables"):
        catalog.create_database("db")
    assert os.readlink(root / "metadata" / "db") == link_target
    assert list((root / "metadata").glob("db.sql*")) == []


def test_recovery_reports_a_database_link_that_disagrees(tmp_path: Path) -> None:
    """`<db>.sql` names another UUID than the directory with tables its symlink points to: reported, not repaired."""
    root = tmp_path / "root"
    catalog = Catalog(root)
    catalog.create_database("db")
    catalog.define_table("db.t", [("id", "UInt64")], "id")
    link = root / "metadata" / "db"
    link_target = os.readlink(link)
    (root / "metadata" / "db.sql").write_text(database_statement(new_uuid()))
    report = Catalog(root).recover()
    assert report is not None and report.conflicting_database_links == [link]
    assert os.readlink(link) == link_target

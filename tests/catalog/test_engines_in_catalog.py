"""Catalog tables of the MergeTree family: created with `engine=` (Python) or option `engine`
(Spark), they are what ClickHouse opening the same root sees, and FINAL reads and merges agree."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from spark_mergetree.catalog import Catalog
from tests.catalog.chdb_runner import rows, run_chdb

COLUMNS = [("k", "UInt64"), ("version", "UInt32"), ("name", "String")]


def _batch(keys: list[int], version: int) -> pa.Table:
    return pa.table({"k": pa.array(keys, pa.uint64()), "version": pa.array([version] * len(keys), pa.uint32()),
                     "name": [f"{key}@{version}" for key in keys]})


def _ours(table, final: bool) -> list[list[str]]:
    got = table.to_arrow(final=final).sort_by("k").to_pylist()
    return [[str(r["k"]), str(r["version"]), r["name"]] for r in got]


def test_a_replacing_table_in_the_catalog_is_clickhouses(tmp_path: Path) -> None:
    root = tmp_path / "root"
    catalog = Catalog(root)
    catalog.create_database("db")
    table = catalog.create_table("db.users", COLUMNS, "k", engine="ReplacingMergeTree(version)",
                                 settings={"auto_merge": False})
    table.insert(_batch([1, 2, 3], 2))
    table.insert(_batch([2, 3, 4], 1))   # older versions of 2 and 3: replaced
    table.insert(_batch([3], 5))
    statement, final, plain = run_chdb(root, "SHOW CREATE TABLE db.users", "SELECT * FROM db.users FINAL ORDER BY k",
                                       "SELECT count() FROM db.users")
    assert "ReplacingMergeTree(version)" in statement
    assert rows(final) == _ours(table, final=True) == [["1", "2", "1@2"], ["2", "2", "2@2"], ["3", "5", "3@5"],
                                                       ["4", "1", "4@1"]]
    assert rows(plain) == [["7"]]
    table.optimize(final=True)
    (merged,) = run_chdb(root, "SELECT * FROM db.users ORDER BY k")
    assert rows(merged) == _ours(table, final=False) == rows(final)


@pytest.mark.spark
def test_spark_creates_a_catalog_table_with_an_engine(spark, tmp_path: Path) -> None:
    root = str(tmp_path / "root")
    Catalog(root)  # a new catalog root (a database is created by the first write)
    for number, (keys, version) in enumerate([([1, 2], 1), ([2, 3], 2)]):
        df = spark.createDataFrame([(k, version, f"{k}@{version}") for k in keys], "k long not null, version int not null, name string")
        writer = df.write.format("mergetree").option("catalog", root).mode("append")
        if number == 0:
            writer = writer.option("order_by", "k").option("engine", "ReplacingMergeTree(version)")
        writer.save("db.users")
    final = spark.read.format("mergetree").option("catalog", root).option("final", "true").load("db.users")
    assert sorted(tuple(r) for r in final.collect()) == [(1, 1, "1@1"), (2, 2, "2@2"), (3, 2, "3@2")]
    (clickhouse,) = run_chdb(root, "SELECT k, version, name FROM db.users FINAL ORDER BY k")
    assert rows(clickhouse) == [["1", "1", "1@1"], ["2", "2", "2@2"], ["3", "2", "3@2"]]

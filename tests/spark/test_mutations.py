"""spark_mergetree.delete / update: one task per part, one commit, exactly once under task retries,
inside a Spark transaction with its other writes; rows as an independent computation over the
inserted data says, and as chdb reads them."""

from __future__ import annotations

import functools
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from pyspark import TaskContext

import spark_mergetree
from spark_mergetree import MergeTreeTable
from spark_mergetree.catalog import Catalog
from spark_mergetree.errors import UnsupportedError
from spark_mergetree.format.part_info import PartInfo
from tests.catalog.chdb_runner import rows, run_chdb

pytestmark = pytest.mark.spark


def _data(start: int, count: int) -> pa.Table:
    ids = pa.array(range(start, start + count), pa.uint64())
    return pa.table({"id": ids, "m": pc.cast(pc.bit_wise_and(ids, 1), pa.uint8()),
                     "v": pa.array([f"v{i}" for i in range(start, start + count)])})


def _table(path: Path) -> MergeTreeTable:
    table = MergeTreeTable.create(path, [("id", "UInt64"), ("m", "UInt8"), ("v", "String")], order_by="id",
                                  partition_by="m", settings={"auto_merge": False, "index_granularity": 16,
                                                              "old_parts_lifetime": 0})
    for start in (0, 100, 200):
        table.insert(_data(start, 100))
    return table


def _fail_first_attempt_of_part_zero(marker: str, index: int) -> None:
    context = TaskContext.get()
    if index == 0 and context is not None and context.attemptNumber() == 0:
        Path(marker).write_text("failed once")
        raise RuntimeError("injected failure after staging the part's new version")


def _directories(table: MergeTreeTable) -> set[str]:
    return {p.name for p in table.path.iterdir() if p.is_dir() and p.name not in ("_mergetree", "detached")}


def test_delete_survives_a_task_retry_and_commits_once(spark, tmp_path: Path) -> None:
    table = _table(tmp_path / "t")
    before = {p.name for p in table.parts()}
    marker = tmp_path / "failed-once"
    created = spark_mergetree.delete(spark, str(table.path), "id % 7 = 0 OR v = 'v5'",
                                     task_hook=functools.partial(_fail_first_attempt_of_part_zero, str(marker)))
    assert marker.exists()
    inserted = _data(0, 300)
    ids = inserted["id"]
    gone = pc.or_(pc.equal(pc.subtract(ids, pc.multiply(pc.divide(ids, 7), 7)), 0), pc.equal(inserted["v"], "v5"))
    expected = inserted.filter(pc.invert(gone))
    assert table.to_arrow().sort_by("id").equals(expected.cast(table.schema))
    assert {PartInfo(**{**PartInfo.parse(n).__dict__, "mutation": 0}).name for n in created} == before
    assert len({PartInfo.parse(n).mutation for n in created}) == 1
    assert len(list(table.path.glob("mutation_*.txt"))) == 1
    table.cleanup()
    # The failed attempt's staged part and the old versions are gone; nothing else is left.
    assert _directories(table) == set(created)
    assert table.check().ok


def test_update_on_the_executors(spark, tmp_path: Path) -> None:
    table = _table(tmp_path / "t")
    created = spark_mergetree.update(spark, str(table.path), {"v": "'x'"}, "id < 150 AND m = 1")
    assert len(created) == 6
    rows = table.to_arrow().sort_by("id").to_pylist()
    assert rows == [{**row, "v": "x" if row["id"] < 150 and row["m"] == 1 else row["v"]}
                    for row in _data(0, 300).to_pylist()]
    with pytest.raises(UnsupportedError, match="'m' is a key column"):
        spark_mergetree.update(spark, str(table.path), {"m": 0}, "id < 5")
    with pytest.raises(UnsupportedError, match="reverse"):  # refused on the driver, before any task
        spark_mergetree.update(spark, str(table.path), {"v": "reverse(v)"}, "id < 5")
    assert len(list(table.path.glob("mutation_*.txt"))) == 1


def test_no_matching_row_changes_nothing(spark, tmp_path: Path) -> None:
    table = _table(tmp_path / "t")
    before = _directories(table)
    assert spark_mergetree.delete(spark, str(table.path), "id > 5000") == []
    assert _directories(table) == before and not list(table.path.glob("mutation_*.txt"))


def _spark_rows(spark, table: str, **options: str) -> list[dict]:
    frame = spark.read.format("mergetree").options(**options).load(table)
    return sorted((row.asDict() for row in frame.collect()), key=lambda row: row["id"])


def test_delete_and_writes_of_one_transaction_commit_together(spark, tmp_path: Path) -> None:
    root = tmp_path / "root"
    Catalog(root).create_database("db")
    b = Catalog(root).create_table("db.b", [("id", "UInt64"), ("m", "UInt8"), ("v", "String")], "id",
                                   partition_by="m", settings={"auto_merge": False})
    b.insert(_data(0, 60))
    a = tmp_path / "a"
    spark.range(10).write.format("mergetree").option("order_by", "id").mode("append").save(str(a))
    schema = "id long, m tinyint, v string"
    with spark_mergetree.transaction(spark):
        spark.range(10, 15).write.format("mergetree").mode("append").save(str(a))
        # An append to B earlier in the transaction is seen by its delete.
        (spark.createDataFrame([(i, i % 2, f"v{i}") for i in range(60, 70)], schema)
         .write.format("mergetree").option("catalog", str(root)).mode("append").save("db.b"))
        marker = tmp_path / "failed-once"  # a task retried inside the transaction: still exactly once
        created = spark_mergetree.delete(spark, "db.b", "id % 4 = 1 OR id >= 66", catalog=str(root),
                                         task_hook=functools.partial(_fail_first_attempt_of_part_zero, str(marker)))
        assert created and marker.exists()
        # Inside the block Spark reads see the delete and the appends; outside nothing changed yet.
        inside = [row["id"] for row in _spark_rows(spark, "db.b", catalog=str(root))]
        assert len(_spark_rows(spark, str(a))) == 15
        assert b.count() == 60 and MergeTreeTable.open(a).count() == 10
        assert not list(b.path.glob("mutation_*.txt"))
    inserted = _data(0, 70)
    ids = inserted["id"]
    gone = pc.or_(pc.equal(pc.bit_wise_and(ids, 3), 1), pc.greater_equal(ids, 66))
    expected = inserted.filter(pc.invert(gone)).cast(b.schema)
    assert inside == expected["id"].to_pylist()
    assert b.to_arrow().sort_by("id").equals(expected) and MergeTreeTable.open(a).count() == 15
    assert {p.name for p in b.parts()} == set(created)
    (mutation_file,) = b.path.glob("mutation_*.txt")
    assert mutation_file.name == f"mutation_{PartInfo.parse(created[0]).mutation}.txt"
    check, select, pending = run_chdb(
        root, "CHECK TABLE db.b SETTINGS check_query_single_value_result = 1", "SELECT * FROM db.b ORDER BY id",
        "SELECT count() FROM system.mutations WHERE database = 'db' AND table = 'b' AND NOT is_done")
    assert rows(check) == [["1"]] and rows(pending) == [["0"]]
    assert rows(select) == [[str(value) for value in row.values()] for row in expected.to_pylist()]


def test_exception_in_the_transaction_rolls_back_the_update_and_the_write(spark, tmp_path: Path) -> None:
    table = _table(tmp_path / "b")
    a = tmp_path / "a"
    spark.range(10).write.format("mergetree").option("order_by", "id").mode("append").save(str(a))
    before = _directories(table) | {p.name for p in a.iterdir()}
    rows_before = table.to_arrow().sort_by("id")
    with pytest.raises(RuntimeError, match="boom"):
        with spark_mergetree.transaction(spark, session_conf=False) as tx:
            spark.range(10, 15).write.format("mergetree").option("transaction", tx.id).mode("append").save(str(a))
            assert spark_mergetree.update(spark, str(table.path), {"v": "'x'"}, "id < 150", transaction=tx)
            inside = _spark_rows(spark, str(table.path), transaction=tx.id)
            assert sum(row["v"] == "x" for row in inside) == 150
            raise RuntimeError("boom")
    assert table.to_arrow().sort_by("id").equals(rows_before) and MergeTreeTable.open(a).count() == 10
    after = _directories(table) | {p.name for p in a.iterdir()}
    assert {name for name in after - before if not name.startswith("delete_tmp")} == set()
    assert not list(table.path.glob("mutation_*.txt"))

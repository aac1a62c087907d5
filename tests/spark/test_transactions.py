"""Multi-table transactions around Spark writes: all tables at exit, or none."""

from __future__ import annotations

from pathlib import Path

import pyspark
import pytest

from spark_mergetree.engine.table import MergeTreeTable
from spark_mergetree.errors import TransactionError
from spark_mergetree.spark import transaction
from spark_mergetree.spark.session import ENABLED_CONF

pytestmark = pytest.mark.spark

# PySpark 4.1+ replays a DataFrame's first plan for its later actions; 4.0 plans each action.
REPLAYS_PLANS = tuple(int(part) for part in pyspark.__version__.split(".")[:2]) >= (4, 1)


def _count(spark, path: Path) -> int:
    return spark.read.format("mergetree").load(str(path)).count()


def _make(spark, path: Path, rows: int) -> None:
    spark.range(rows).write.format("mergetree").option("order_by", "id").mode("append").save(str(path))


def _engine_count(path: Path) -> int:
    return MergeTreeTable.open(path).to_arrow(columns=["id"]).num_rows


def test_writes_to_two_tables_become_visible_together(spark, tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    _make(spark, a, 10)
    _make(spark, b, 20)
    with transaction(spark) as tx:
        spark.range(100, 105).write.format("mergetree").mode("append").save(str(a))
        spark.range(200, 203).write.format("mergetree").mode("overwrite").save(str(b))
        # Nobody outside the transaction sees either write yet...
        assert (_engine_count(a), _engine_count(b)) == (10, 20)
        # ...but reads inside it see its own writes.
        assert (_count(spark, a), _count(spark, b)) == (15, 3)
        assert tx.tid > 0
    assert (_engine_count(a), _engine_count(b)) == (15, 3)
    assert (_count(spark, a), _count(spark, b)) == (15, 3)


def test_exception_rolls_back_every_table(spark, tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    _make(spark, a, 10)
    _make(spark, b, 20)
    before = {p.name for p in a.iterdir()} | {p.name for p in b.iterdir()}
    with pytest.raises(RuntimeError, match="boom"):
        with transaction(spark):
            spark.range(100, 105).write.format("mergetree").mode("append").save(str(a))
            spark.range(200, 203).write.format("mergetree").mode("append").save(str(b))
            raise RuntimeError("boom")
    assert (_count(spark, a), _count(spark, b)) == (10, 20)
    with transaction(spark) as tx:
        spark.range(100, 105).write.format("mergetree").mode("append").save(str(a))
        tx.rollback()
    assert _count(spark, a) == 10
    after = {p.name for p in a.iterdir()} | {p.name for p in b.iterdir()}
    assert {name for name in after - before if not name.startswith("delete_tmp")} == set()
    with pytest.raises(TransactionError):
        tx.commit()


def test_reads_inside_a_transaction_are_repeatable(spark, tmp_path: Path) -> None:
    a = tmp_path / "a"
    _make(spark, a, 10)
    with transaction(spark):
        assert _count(spark, a) == 10
        # A write committed by someone else after the transaction began stays invisible to it.
        MergeTreeTable.open(a).insert(spark.range(50, 60).toArrow())
        assert _engine_count(a) == 20
        assert _count(spark, a) == 10
    assert _count(spark, a) == 20


def test_dataframe_planned_before_the_transaction_fails_clearly(spark, tmp_path: Path) -> None:
    a = tmp_path / "a"
    _make(spark, a, 10)
    spark.conf.set(ENABLED_CONF, "false")  # without the session extension: one plan per DataFrame
    try:
        early = spark.read.format("mergetree").load(str(a))
        assert early.count() == 10  # planned now; PySpark 4.3 replays this plan for later actions
        with transaction(spark):
            spark.range(100, 105).write.format("mergetree").mode("append").save(str(a))
            if REPLAYS_PLANS:
                with pytest.raises(Exception, match="load it again"):
                    early.count()
            else:  # PySpark 4.0 plans every action afresh: the transaction's view
                assert early.count() == 15
            assert _count(spark, a) == 15
        assert _count(spark, a) == 15
    finally:
        spark.conf.unset(ENABLED_CONF)


def test_dataframe_loaded_before_the_transaction_is_planned_again_with_the_extension(spark, tmp_path: Path) -> None:
    """The session extension plans every query's scans afresh: a query on a DataFrame loaded before
    the transaction sees the transaction's view."""
    a = tmp_path / "a"
    _make(spark, a, 10)
    early = spark.read.format("mergetree").load(str(a))
    assert early.count() == 10
    with transaction(spark):
        spark.range(100, 105).write.format("mergetree").mode("append").save(str(a))
        assert early.count() == 15
    assert early.count() == 15


def test_time_travel_with_the_snapshot_option(spark, tmp_path: Path) -> None:
    a = tmp_path / "a"
    _make(spark, a, 10)
    table = MergeTreeTable.open(a)
    before, _ = table.visible_parts()
    spark.range(10, 15).write.format("mergetree").mode("append").save(str(a))
    old = spark.read.format("mergetree").option("snapshot", str(before)).load(str(a))
    assert old.count() == 10 and _count(spark, a) == 15


def test_a_transaction_on_a_table_spread_over_disks(spark, tmp_path: Path) -> None:
    """The user's process commits or rolls back parts it never wrote itself, on every disk of the
    table's storage policy (the coordinator's record names the table; its engine knows where the parts are)."""
    policy = {"name": "j", "disks": {f"d{i}": {"path": str(tmp_path / f"disk{i}")} for i in range(2)},
              "volumes": [{"name": "main", "disks": ["d0", "d1"], "layout": "raid1"}]}
    path = tmp_path / "mirrored"
    MergeTreeTable.create(path, [("id", "Int64")], order_by="id", settings={"storage_policy": policy})
    with transaction(spark):
        spark.range(0, 7).write.format("mergetree").mode("append").save(str(path))
    assert _engine_count(path) == 7
    with pytest.raises(RuntimeError, match="boom"):
        with transaction(spark):
            spark.range(100, 105).write.format("mergetree").mode("append").save(str(path))
            raise RuntimeError("boom")
    assert _engine_count(path) == 7
    parts = {p.name for disk in ("disk0", "disk1") for p in (tmp_path / disk).glob("store/*/*/*")
             if p.is_dir() and not p.name.startswith("delete_tmp")}
    assert parts == {p.name for p in MergeTreeTable.open(path).parts()}, "the rolled back part is gone from both disks"


def test_time_travel_inside_a_transaction_reads_the_older_snapshot(spark, tmp_path: Path) -> None:
    a = tmp_path / "a"
    _make(spark, a, 10)
    before, _ = MergeTreeTable.open(a).visible_parts()
    _make(spark, a, 5)
    with transaction(spark) as tx:
        spark.range(100, 103).write.format("mergetree").mode("append").save(str(a))
        old = spark.read.format("mergetree").option("snapshot", str(before)).load(str(a))
        assert old.count() == 10 and _count(spark, a) == 18
        with pytest.raises(Exception, match="'transaction' and 'snapshot' exclude each other"):
            spark.read.format("mergetree").option("snapshot", str(before)).option("transaction", tx.id).load(
                str(a)).count()
    assert _count(spark, a) == 18


def test_the_transaction_option_works_without_the_session_conf(spark, tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    _make(spark, a, 10)
    _make(spark, b, 20)
    with transaction(spark, session_conf=False) as tx:
        assert spark.conf.get("spark.mergetree.transaction", None) is None
        (spark.range(100, 105).write.format("mergetree").option("transaction", tx.id)
         .mode("append").save(str(a)))
        # An overwrite with no rows at all still belongs to the transaction (the option reaches commit()).
        (spark.range(0).write.format("mergetree").option("transaction", tx.id)
         .mode("overwrite").save(str(b)))
        # Without the option (and without the conf) a read is outside the transaction...
        assert (_count(spark, a), _count(spark, b)) == (10, 20)
        # ...with it, the transaction's own view.
        inside = spark.read.format("mergetree").option("transaction", tx.id)
        assert (inside.load(str(a)).count(), inside.load(str(b)).count()) == (15, 0)
    assert (_count(spark, a), _count(spark, b)) == (15, 0)
    with pytest.raises(Exception, match=f"transaction {tx.tid} is committed"):
        spark.range(3).write.format("mergetree").option("transaction", tx.id).mode("append").save(str(a))
    with pytest.raises(Exception, match="is not a transaction id"):
        spark.read.format("mergetree").option("transaction", "17").load(str(a)).count()
    assert _count(spark, a) == 15


def test_rollback_discards_what_jobs_staged_with_the_option(spark, tmp_path: Path) -> None:
    a = tmp_path / "a"
    _make(spark, a, 10)
    before = {p.name for p in a.iterdir()}
    with pytest.raises(RuntimeError, match="boom"):
        with transaction(spark, session_conf=False) as tx:
            spark.range(100, 105).write.format("mergetree").option("transaction", tx.id).mode("overwrite").save(str(a))
            assert spark.read.format("mergetree").option("transaction", tx.id).load(str(a)).count() == 5
            raise RuntimeError("boom")
    assert _count(spark, a) == 10
    assert {name for name in {p.name for p in a.iterdir()} - before if not name.startswith("delete_tmp")} == set()
    assert not list((a / "_mergetree" / "log").glob("*.staged-*"))


def test_transactions_do_not_nest_in_one_session(spark, tmp_path: Path) -> None:
    with transaction(spark) as outer:
        with pytest.raises(TransactionError, match=f"already inside transaction {outer.tid}"):
            with transaction(spark):
                pass
        assert spark.conf.get("spark.mergetree.transaction") == outer.id
    assert spark.conf.get("spark.mergetree.transaction", None) is None

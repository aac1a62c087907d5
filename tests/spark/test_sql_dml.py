"""Spark SQL DML on a mergetree catalog (issue 31, step 3): INSERT INTO / INSERT OVERWRITE (the
Python writer), DELETE FROM, UPDATE and OPTIMIZE [FINAL] (the engine steps of spark_mergetree.delete,
update and optimize, run when the statement runs, never by EXPLAIN); INSERT joins an open
transaction(spark), the mutations refuse it naming the function that joins."""

from __future__ import annotations

import pytest

import spark_mergetree
from tests.format import chdb_util
from tests.spark.sql_util import sql_catalog

pytestmark = pytest.mark.spark


def _rows(spark, query: str) -> list[tuple]:
    return sorted(tuple(row) for row in spark.sql(query).collect())


@pytest.fixture
def table(spark, tmp_path):
    cat = sql_catalog(spark, tmp_path)
    spark.sql(f"CREATE TABLE {cat.name}.db.t USING mergetree TBLPROPERTIES ('order_by' = 'id', 'partition_by' = 'k') "
              "AS SELECT id, id % 2 AS k, cast(id AS STRING) AS s FROM range(10)")
    return cat, f"{cat.name}.db.t"


def test_insert_into_and_insert_overwrite(spark, table) -> None:
    cat, name = table
    spark.sql(f"INSERT INTO {name} VALUES (100, 0, 'x'), (101, 1, 'y')")
    assert spark.table(name).count() == 12
    spark.sql(f"INSERT INTO {name} SELECT id + 200, k, s FROM {name} WHERE id < 2")
    assert _rows(spark, f"SELECT id FROM {name} WHERE id >= 100") == [(100,), (101,), (200,), (201,)]
    spark.sql(f"INSERT OVERWRITE {name} VALUES (7, 1, 'only')")
    assert _rows(spark, f"SELECT * FROM {name}") == [(7, 1, "only")]


def test_delete_update_and_clickhouse_agrees(spark, table) -> None:
    cat, name = table
    spark.sql(f"DELETE FROM {name} WHERE id = 1 OR s = '3'")
    spark.sql(f"UPDATE {name} SET s = concat(s, '!') WHERE id >= 8")
    expected = [(0, "0"), (2, "2"), (4, "4"), (5, "5"), (6, "6"), (7, "7"), (8, "8!"), (9, "9!")]
    assert _rows(spark, f"SELECT id, s FROM {name}") == expected
    session = chdb_util.session_at(cat.root)
    try:
        lines = session.query("SELECT id, s FROM db.t ORDER BY id", "CSV").bytes().decode().split()
    finally:
        chdb_util.close_session()
    assert lines == [f'{i},"{s}"' for i, s in expected]


def test_bad_conditions_and_values_change_nothing(spark, table) -> None:
    _, name = table
    with pytest.raises(Exception, match="nope"):
        spark.sql(f"UPDATE {name} SET s = 'z' WHERE nope = 1")
    with pytest.raises(Exception, match="WHERE"):
        spark.sql(f"UPDATE {name} SET s = 'z'")
    with pytest.raises(Exception, match="id|key"):
        spark.sql(f"UPDATE {name} SET id = 5 WHERE id = 1")  # a sort key column
    assert _rows(spark, f"SELECT id, s FROM {name}") == [(i, str(i)) for i in range(10)]


def test_delete_without_where_empties_the_table(spark, table) -> None:
    _, name = table
    spark.sql(f"DELETE FROM {name}")
    assert spark.table(name).count() == 0


def test_explain_runs_nothing(spark, table) -> None:
    _, name = table
    spark.sql(f"EXPLAIN DELETE FROM {name} WHERE id < 5").collect()
    spark.sql(f"EXPLAIN UPDATE {name} SET s = 'z' WHERE id < 5").collect()
    assert _rows(spark, f"SELECT id, s FROM {name}") == [(i, str(i)) for i in range(10)]


def test_optimize_and_optimize_final(spark, table) -> None:
    cat, name = table
    spark.sql(f"INSERT INTO {name} SELECT id + 10, id % 2, 'more' FROM range(10)")
    before = cat.engine.table("db.t").parts()
    assert len(before) > 2
    spark.sql(f"OPTIMIZE {name} FINAL")
    after = cat.engine.table("db.t").parts()
    assert sorted(p.partition_id for p in after) == ["0", "1"]
    assert spark.table(name).count() == 20
    spark.sql(f"INSERT INTO {name} VALUES (50, 0, 'a')")
    spark.sql(f"OPTIMIZE TABLE {name} WHERE k = 1")  # partition 1 has one part: nothing to merge
    assert spark.table(name).count() == 21


def test_insert_joins_a_transaction_and_mutations_say_what_joins(spark, table) -> None:
    _, name = table
    with spark_mergetree.transaction(spark):
        spark.sql(f"INSERT INTO {name} VALUES (300, 0, 'tx')")
        with pytest.raises(Exception, match=r"spark_mergetree\.delete"):
            spark.sql(f"DELETE FROM {name} WHERE id = 300")
    assert _rows(spark, f"SELECT id FROM {name} WHERE id = 300") == [(300,)]
    with pytest.raises(RuntimeError, match="roll back"):
        with spark_mergetree.transaction(spark):
            spark.sql(f"INSERT INTO {name} VALUES (301, 1, 'gone')")
            raise RuntimeError("roll back")
    assert _rows(spark, f"SELECT id FROM {name} WHERE id = 301") == []

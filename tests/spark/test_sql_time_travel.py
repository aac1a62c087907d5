"""Time travel in Spark SQL on a mergetree catalog (issue 31): `SELECT ... FROM c.db.t VERSION AS OF
<version>` reads the table as of that commit (the reader's `snapshot` option), and the metadata
table `c.db.t.history` lists the table's commits (version, time, operation, parts and rows added
and removed; `DESCRIBE HISTORY c.db.t` lists the same), whose versions are what VERSION AS OF takes."""

from __future__ import annotations

import datetime

import pytest

from tests.spark.sql_util import sql_catalog

pytestmark = pytest.mark.spark


@pytest.fixture
def table(spark, tmp_path):
    cat = sql_catalog(spark, tmp_path)
    spark.sql(f"CREATE TABLE {cat.name}.db.t (id BIGINT, s STRING) USING mergetree TBLPROPERTIES ('order_by' = 'id')")
    return cat, f"{cat.name}.db.t"


def _history(spark, name: str) -> list:
    return spark.sql(f"SELECT * FROM {name}.history ORDER BY version").collect()


def test_history_lists_commits_and_version_as_of_reads_each(spark, table) -> None:
    cat, name = table
    started = datetime.datetime.now() - datetime.timedelta(minutes=1)
    spark.sql(f"INSERT INTO {name} VALUES (1, 'a'), (2, 'b'), (3, 'c')")
    spark.sql(f"INSERT INTO {name} VALUES (4, 'd')")
    spark.sql(f"DELETE FROM {name} WHERE id = 2")
    spark.sql(f"OPTIMIZE {name} FINAL")
    history = _history(spark, name)
    assert [row.operation for row in history] == ["INSERT", "INSERT", "MUTATION", "MERGE"]
    # how many parts an INSERT writes is Spark's partitioning; the rows each commit adds net are not
    assert [row.rows_added - row.rows_removed for row in history] == [3, 1, -1, 0]
    assert [row.parts_removed for row in history[:2]] == [0, 0]
    written = history[0].parts_added + history[1].parts_added
    assert history[2].parts_added == history[2].parts_removed == written  # every part gets a new version
    assert (history[3].parts_added, history[3].rows_added) == (1, 3)  # OPTIMIZE FINAL: one part of every row
    assert history[3].parts_removed == written
    assert all(started <= row.timestamp <= datetime.datetime.now() for row in history)
    versions = [row.version for row in history]
    assert versions == sorted(versions)
    seen = [sorted(r.id for r in spark.sql(f"SELECT id FROM {name} VERSION AS OF {v}").collect()) for v in versions]
    assert seen == [[1, 2, 3], [1, 2, 3, 4], [1, 3, 4], [1, 3, 4]]
    # DESCRIBE HISTORY (Delta's spelling) lists the same rows
    assert spark.sql(f"DESCRIBE HISTORY {name}").collect() == history
    # the history is a relation: it filters and aggregates like any other
    assert spark.sql(f"SELECT sum(rows_added) FROM {name}.history WHERE operation = 'INSERT'").collect()[0][0] == 4
    # a version read is a table read: pruned and filtered, the current table unchanged
    assert spark.sql(f"SELECT s FROM {name} VERSION AS OF {versions[0]} WHERE id = 2").collect()[0][0] == "b"
    assert spark.table(name).count() == 3


def test_bad_versions_and_timestamps_are_refused_naming_what_to_use(spark, table) -> None:
    _, name = table
    spark.sql(f"INSERT INTO {name} VALUES (1, 'a')")
    latest = _history(spark, name)[-1].version
    with pytest.raises(Exception, match="beyond the latest commit"):
        spark.sql(f"SELECT * FROM {name} VERSION AS OF {latest + 1_000_000}").collect()
    with pytest.raises(Exception, match="commit sequence number"):
        spark.sql(f"SELECT * FROM {name} VERSION AS OF 'yesterday'").collect()
    with pytest.raises(Exception, match="VERSION AS OF"):
        spark.sql(f"SELECT * FROM {name} TIMESTAMP AS OF '2026-01-01 00:00:00'").collect()
    with pytest.raises(Exception, match="TABLE_OR_VIEW_NOT_FOUND"):
        spark.sql(f"SELECT * FROM {name}_nope.history").collect()
    assert spark.table(name).count() == 1

"""Path tables in Spark SQL (issue 31), as Delta reads ``delta.`/path` ``: a mergetree catalog
(`mergetree` by default) resolves a backquoted directory to the table in it, outside its root.
SELECT (pruned, at a version), INSERT, DELETE, UPDATE, OPTIMIZE and the history work on it; DDL,
which names catalog tables, is refused before anything is written."""

from __future__ import annotations

import pyarrow as pa
import pytest

from spark_mergetree import MergeTreeTable
from tests.spark.sql_util import scan_columns, sql_catalog

pytestmark = pytest.mark.spark


def _rows(spark, query: str) -> list[tuple]:
    return sorted(tuple(row) for row in spark.sql(query).collect())


@pytest.fixture
def path_table(spark, tmp_path):
    cat = sql_catalog(spark, tmp_path)
    directory = tmp_path / "events"
    table = MergeTreeTable.create(directory, [("id", "UInt64"), ("s", "String")], order_by="id")
    table.insert(pa.table({"id": pa.array(range(10), pa.uint64()), "s": [str(i) for i in range(10)]}))
    return cat, table, f"{cat.name}.`{directory}`"


def test_select_and_dml_on_a_path_table(spark, path_table) -> None:
    _, table, name = path_table
    assert spark.sql(f"SELECT count(*) FROM {name}").collect()[0][0] == 10
    assert scan_columns(spark, f"SELECT s FROM {name} WHERE id = 3") == ["id", "s"]
    spark.sql(f"INSERT INTO {name} VALUES (100, 'x')")
    spark.sql(f"DELETE FROM {name} WHERE id < 5")
    spark.sql(f"UPDATE {name} SET s = 'y' WHERE id = 100")
    spark.sql(f"OPTIMIZE {name} FINAL")
    expected = [(5, "5"), (6, "6"), (7, "7"), (8, "8"), (9, "9"), (100, "y")]
    assert _rows(spark, f"SELECT id, s FROM {name}") == expected
    # the directory's own table agrees: the same engine steps ran on it
    rows = table.to_arrow().sort_by("id")
    assert list(zip(rows["id"].to_pylist(), rows["s"].to_pylist())) == expected
    history = spark.sql(f"SELECT * FROM {name}.history ORDER BY version").collect()
    assert [row.operation for row in history] == ["INSERT", "INSERT", "MUTATION", "MUTATION", "MERGE"]
    first = history[0].version
    assert spark.sql(f"SELECT count(*) FROM {name} VERSION AS OF {first}").collect()[0][0] == 10


def test_missing_directory_and_ddl_on_paths_are_refused(spark, path_table, tmp_path) -> None:
    cat, table, name = path_table
    with pytest.raises(Exception, match="TABLE_OR_VIEW_NOT_FOUND"):
        spark.sql(f"SELECT * FROM {cat.name}.`{tmp_path / 'nothing'}`").collect()
    with pytest.raises(Exception, match="path table"):
        spark.sql(f"CREATE TABLE {cat.name}.`{tmp_path / 'new'}` (id BIGINT) USING mergetree")
    with pytest.raises(Exception, match="path table"):
        spark.sql(f"ALTER TABLE {name} ADD COLUMNS (z STRING)")
    with pytest.raises(Exception, match="path table"):
        spark.sql(f"DROP TABLE {name}")
    assert not (tmp_path / "new").exists()
    assert table.to_arrow().num_rows == 10

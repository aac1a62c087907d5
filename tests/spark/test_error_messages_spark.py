"""What a Spark user reads at the end of a failed job: one sentence of ours that names the option,
the text or the column at fault (never sqlglot's classes, never the placeholder table name `_`),
raised while the query is planned rather than while its rows are read."""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = pytest.mark.spark


def _last_line(error: BaseException) -> str:
    """The line of a Spark failure a user reads: the last of its text but Spark's SQLSTATE line (and,
    on Spark Connect, the server's JVM stack trace the client appends)."""
    text = str(error).split("\nJVM stacktrace:")[0]
    lines = [line for line in text.splitlines() if line.strip() and not line.strip().startswith("SQLSTATE")]
    return lines[-1]


def _table(spark, path: Path) -> str:
    spark.createDataFrame([(1, "apple"), (2, "banana")], "id long, s string") \
        .write.format("mergetree").option("order_by", "id").mode("append").save(str(path))
    return str(path)


def test_rlike_in_where_is_refused_when_planned_naming_rlike(spark, tmp_path: Path) -> None:
    path = _table(spark, tmp_path / "t")
    df = spark.read.format("mergetree").option("where", "s RLIKE '^a'").load(path)
    with pytest.raises(Exception) as caught:
        df.count()
    line = _last_line(caught.value)
    assert "option 'where': RLIKE (REGEXP, match()) in \"s RLIKE '^a'\" is not supported" in line
    assert "use LIKE" in line
    assert "cannot be evaluated here" not in str(caught.value)
    # Spark's own rlike on the DataFrame still works: it is never pushed to the source.
    assert spark.read.format("mergetree").load(path).filter("s RLIKE '^a'").count() == 1


def test_unknown_function_in_where_is_refused_when_planned(spark, tmp_path: Path) -> None:
    path = _table(spark, tmp_path / "t")
    with pytest.raises(Exception) as caught:
        spark.read.format("mergetree").option("where", "reverse(s) = 'elppa'").load(path).count()
    assert "option 'where': function reverse() in reverse(s) cannot be evaluated in a condition" in \
        _last_line(caught.value)


def test_unparsable_where_names_the_text_and_position(spark, tmp_path: Path) -> None:
    path = _table(spark, tmp_path / "t")
    with pytest.raises(Exception) as caught:
        spark.read.format("mergetree").option("where", "id > 1 AND").load(path).count()
    line = _last_line(caught.value)
    assert "option 'where': cannot parse 'id > 1 AND': it ends too early, after 'AND' at position 8" in line
    assert "sqlglot" not in str(caught.value) and "<class" not in str(caught.value)


def test_unparsable_keys_of_a_new_table_name_the_option(spark, tmp_path: Path) -> None:
    df = spark.range(3)
    with pytest.raises(Exception) as caught:
        df.write.format("mergetree").option("order_by", "id +").mode("append").save(str(tmp_path / "a"))
    line = _last_line(caught.value)
    assert "order_by: cannot parse 'id +': it ends too early, after '+' at position 4" in line
    with pytest.raises(Exception) as caught:
        df.write.format("mergetree").option("order_by", "id").option("partition_by", "toYYYYMM(") \
            .mode("append").save(str(tmp_path / "b"))
    line = _last_line(caught.value)
    assert "partition_by: cannot parse 'toYYYYMM(': a ')' is missing at its end" in line
    assert "table '_'" not in str(caught.value) and "needs ORDER BY" not in str(caught.value)
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_a_variant_column_written_to_a_new_table_is_stored_as_dynamic(spark, tmp_path: Path) -> None:
    """Once refused with a message about a table that did not exist yet: a new table's VARIANT
    column is now a Dynamic column, read back as the same variant values."""
    from spark_mergetree import MergeTreeTable

    df = spark.sql("SELECT id, parse_json(concat('{\"a\": ', id, '}')) AS v FROM range(2)")
    target = tmp_path / "new"
    df.write.format("mergetree").option("order_by", "id").mode("append").save(str(target))
    assert dict(MergeTreeTable.open(target).metadata.column_types)["v"] == "Dynamic"
    back = spark.read.format("mergetree").load(str(target)).selectExpr("id", "to_json(v) AS v").collect()
    assert sorted(map(tuple, back)) == [(0, '{"a":0}'), (1, '{"a":1}')]

"""What the driver refuses before any table is created or any task runs: locations that are not
local, and options a table cannot honour. Each error names what is wrong."""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.spark


def _jvm_cwd(spark) -> Path:
    """Where Spark's Python workers run (a relative path there is where a stray directory lands).
    The JVM of the tests' session runs in this process, also behind a local Connect server."""
    from pyspark import SparkContext

    return Path(SparkContext._active_spark_context._jvm.System.getProperty("user.dir"))


def test_urls_are_refused_before_anything_is_written(spark, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    df = spark.range(3)
    with pytest.raises(Exception, match=r"'hdfs://nn/events'.*not supported"):
        df.write.format("mergetree").option("order_by", "id").mode("append").save("hdfs://nn/events")
    with pytest.raises(Exception, match=r"'wasbs://c@a.blob.core.windows.net/events'.*not supported"):
        spark.read.format("mergetree").load("wasbs://c@a.blob.core.windows.net/events").count()
    with pytest.raises(Exception, match=r"'abfss://c@a/root'.*object storage, which holds tables"):
        df.write.format("mergetree").option("catalog", "abfss://c@a/root").mode("append").save("db.t")
    for directory in {tmp_path, _jvm_cwd(spark)}:
        assert not any(entry.name.endswith(":") for entry in directory.iterdir()), directory
    target = tmp_path / "by url"
    df.write.format("mergetree").option("order_by", "id").mode("append").save(target.as_uri())
    assert spark.read.format("mergetree").load(str(target)).count() == 3
    assert spark.read.format("mergetree").load(f"file:{target}").count() == 3


def _count(spark, path: Path) -> int:
    return spark.read.format("mergetree").load(str(path)).count()


def test_a_write_cannot_change_the_table_definition(spark, tmp_path: Path) -> None:
    path = tmp_path / "events"
    df = spark.range(20).selectExpr("id", "date_add(date'2024-01-20', cast(id as int)) as day")

    def write(**options: str) -> None:
        writer = df.write.format("mergetree").mode("append")
        for key, value in options.items():
            writer = writer.option(key, value)
        writer.save(str(path))

    write(order_by="id", partition_by="toYYYYMM(day)", codec="ZSTD(3)", index_granularity="16")
    for option, value, table_value in [("order_by", "day", "id"), ("partition_by", "toYYYYMMDD(day)", "toYYYYMM(day)"),
                                       ("codec", "LZ4", "ZSTD(3)"), ("index_granularity", "8192", "16"),
                                       ("primary_key", "day", "id"), ("setting.min_bytes_for_wide_part", "0", "(not set)")]:
        with pytest.raises(Exception, match=rf"option '{option}'.*{re.escape(value)}.*{re.escape(table_value)}"):
            write(**{option: value})
    assert _count(spark, path) == 20
    # The table's own values (spelled differently) are accepted: nothing to ignore.
    write(order_by="(`id`)", partition_by="toYYYYMM( day )", codec="zstd(3)", index_granularity="16")
    assert _count(spark, path) == 40
    df.write.format("mergetree").mode("overwrite").option("order_by", "id").save(str(path))
    with pytest.raises(Exception, match="option 'order_by'"):
        df.write.format("mergetree").mode("overwrite").option("order_by", "day").save(str(path))
    assert _count(spark, path) == 20
    # A setting given again in another spelling of the same value is the table's own value.
    flagged = tmp_path / "flagged"
    for spelling in ("true", "1"):
        (df.write.format("mergetree").mode("append").option("order_by", "id")
         .option("setting.ttl_only_drop_parts", spelling).save(str(flagged)))
    assert _count(spark, flagged) == 40


def test_timestamp_ntz_is_stored_as_utc_datetime64(spark, tmp_path: Path) -> None:
    from spark_mergetree.engine.table import MergeTreeTable

    path = tmp_path / "ntz"
    df = spark.sql("select id, timestamp_ntz'2024-03-01 10:30:00.123456' + make_interval(0, 0, 0, 0, cast(id as int)) "
                   "as t from range(3)")
    df.write.format("mergetree").option("order_by", "id").mode("append").save(str(path))
    df.write.format("mergetree").mode("append").save(str(path))
    assert dict(MergeTreeTable.open(path).metadata.columns)["t"] == "DateTime64(6, 'UTC')"
    back = spark.read.format("mergetree").load(str(path)).orderBy("id", "t").collect()
    # The wall-clock time is kept, as a UTC instant (the session time zone of the tests is UTC).
    expected = [dt.datetime(2024, 3, 1, 10 + k, 30, 0, 123456) for k in (0, 0, 1, 1, 2, 2)]
    assert [row["t"] for row in back] == expected


def test_unorderable_keys_and_bad_keys_are_refused_before_the_table_exists(spark, tmp_path: Path) -> None:
    df = spark.sql("select id, map('a', id) as attrs, array(id) as ids from range(3)")
    cases = [("order_by", "attrs", "attrs"), ("order_by", "(id, ids)", "ids"), ("partition_by", "attrs", "attrs"),
             ("order_by", "nope", "nope")]
    for number, (option, value, named) in enumerate(cases):
        path = tmp_path / f"t{number}"
        writer = df.write.format("mergetree").mode("append").option(option, value)
        if option == "partition_by":
            writer = writer.option("order_by", "id")
        with pytest.raises(Exception, match=rf"option '{option}'.*{named}") as caught:
            writer.save(str(path))
        assert "ArrowTypeError" not in str(caught.value)
        assert not path.exists(), option


def test_catalog_root_must_exist(spark, tmp_path: Path) -> None:
    root = tmp_path / "no-such-root"
    with pytest.raises(Exception, match=rf"{re.escape(str(root))}.*Catalog\("):
        spark.range(3).write.format("mergetree").option("catalog", str(root)).mode("append").save("db.t")
    with pytest.raises(Exception, match=rf"{re.escape(str(root))}.*Catalog\("):
        spark.read.format("mergetree").option("catalog", str(root)).load("db.t").count()
    assert not root.exists()


def test_snapshot_beyond_the_latest_commit_is_refused(spark, tmp_path: Path) -> None:
    from spark_mergetree.engine.table import MergeTreeTable

    path = tmp_path / "tt"
    spark.range(5).write.format("mergetree").option("order_by", "id").mode("append").save(str(path))
    table = MergeTreeTable.open(path)
    latest = table.coordinator.current_timestamp()
    spark.range(5, 8).write.format("mergetree").mode("append").save(str(path))
    as_of = spark.read.format("mergetree").option("snapshot", str(latest)).load(str(path))
    assert as_of.count() == 5
    now = table.coordinator.current_timestamp()
    with pytest.raises(Exception, match=rf"option 'snapshot'.*{now + 100}.*latest") as refused:
        spark.read.format("mergetree").option("snapshot", str(now + 100)).load(str(path)).count()
    # The latest commit it names is at least `now` (a background merge may have committed since).
    latest_named = int(re.search(r"coordinator, (\d+): a snapshot must", str(refused.value)).group(1))
    assert now <= latest_named < now + 100


def test_databricks_fuse_mounts_are_refused_before_anything_is_written(spark) -> None:
    from spark_mergetree.spark import transaction

    with pytest.raises(Exception, match=r"'/Volumes/main/default/v/events' is on /Volumes, a Databricks FUSE mount"):
        spark.range(3).write.format("mergetree").option("order_by", "id").mode("append").save(
            "/Volumes/main/default/v/events")
    with pytest.raises(Exception, match=r"'/dbfs/tmp/root' is on /dbfs, a Databricks FUSE mount"):
        spark.read.format("mergetree").option("catalog", "/dbfs/tmp/root").load("db.t").count()
    with pytest.raises(Exception, match=r"coordinator directory '/dbfs/coordinator' is on /dbfs"):
        with transaction(spark, coordinator="file:///dbfs/coordinator"):
            pass
    assert not Path("/Volumes").exists() and not Path("/dbfs").exists()

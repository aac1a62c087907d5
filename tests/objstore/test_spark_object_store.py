"""Spark reads and writes s3:// tables on a real S3-protocol server (moto), with the endpoint and
credentials given as options (the Spark workers' environment does not have them)."""

from __future__ import annotations

import pytest

from spark_mergetree import MergeTreeTable
from spark_mergetree.storage.object_store import bucket_for
from tests.s3_server import ACCESS_KEY, REGION, SECRET_KEY


def options(s3_server) -> dict[str, str]:  # type: ignore[no-untyped-def]
    return {"s3.endpoint": s3_server.endpoint, "s3.access_key_id": ACCESS_KEY, "s3.secret_access_key": SECRET_KEY,
            "s3.region": REGION}


def test_spark_write_read_pushdown_overwrite(spark, s3_server, s3_bucket: str) -> None:
    url = f"s3a://{s3_bucket}/warehouse/events"
    df = spark.range(0, 20_000).selectExpr("id", "id % 7 AS k", "cast(id * 2 AS double) AS v")
    (df.write.format("mergetree").options(**options(s3_server)).option("order_by", "id")
     .option("partition_by", "k").mode("append").save(url))
    read = spark.read.format("mergetree").options(**options(s3_server)).load(url)
    assert read.count() == 20_000
    # The oracle: the same rows computed by Spark from the source DataFrame.
    assert sorted(read.filter("id BETWEEN 100 AND 140").collect()) == sorted(
        df.filter("id BETWEEN 100 AND 140").collect())
    assert read.groupBy().sum("v").collect()[0][0] == df.groupBy().sum("v").collect()[0][0]
    # The engine reads what Spark wrote; every part is named by a committed log entry.
    table = MergeTreeTable.open(url)
    assert table.count() == 20_000
    assert {name.split("_")[0] for name in table.visible_parts()[1]} == {str(k) for k in range(7)}
    # ClickHouse opens the Spark-written table in place and returns the same rows.
    assert clickhouse_rows(table, s3_bucket) == sorted(tuple(r) for r in read.collect())
    # Overwrite: one atomic replacement, nothing of the old rows left.
    small = spark.range(5).selectExpr("id", "id % 7 AS k", "cast(id AS double) AS v")
    small.write.format("mergetree").options(**options(s3_server)).mode("overwrite").save(url)
    assert sorted(r.id for r in spark.read.format("mergetree").options(**options(s3_server)).load(url)
                  .collect()) == [0, 1, 2, 3, 4]
    # Exactly once: no task attempt's parts beyond those committed are visible.
    assert MergeTreeTable.open(url).count() == 5


def clickhouse_rows(table: MergeTreeTable, bucket: str) -> list[tuple[object, ...]]:
    from click.testing import CliRunner

    from spark_mergetree.cli import main
    from tests.format.chdb_util import session_at

    statement = table.clickhouse_ddl("default.spark_written", credentials=True)
    printed = CliRunner().invoke(main, ["clickhouse-ddl", table.path, "--name", "default.spark_written",
                                        "--with-credentials"])
    assert printed.exit_code == 0 and printed.output == statement, printed.output
    chdb = session_at(None)
    try:
        chdb.query(statement)
        text = str(chdb.query("SELECT id, k, v FROM default.spark_written", "TSV"))
    finally:
        chdb.close()
    return sorted((int(i), int(k), float(v)) for i, k, v in (line.split("\t") for line in text.splitlines()))


def test_spark_bad_locations_fail_on_the_driver_naming_url_and_cause(spark, s3_server, s3_bucket: str,
                                                                    s3_server_with_auth) -> None:
    df = spark.range(3)
    denied = {**options(s3_server), "s3.endpoint": s3_server_with_auth.endpoint}
    with pytest.raises(Exception, match=r"s3://guarded-bucket/t: access denied \(InvalidAccessKeyId"):
        df.write.format("mergetree").options(**denied).option("order_by", "id").mode("append").save(
            "s3://guarded-bucket/t")
    with pytest.raises(Exception, match=r"s3://no-such-bucket-y/t: bucket 'no-such-bucket-y' does not exist"):
        df.write.format("mergetree").options(**options(s3_server)).option("order_by", "id").mode("append").save(
            "s3://no-such-bucket-y/t")
    with pytest.raises(Exception, match=rf"no table at s3://{s3_bucket}/absent"):
        spark.read.format("mergetree").options(**options(s3_server)).load(f"s3://{s3_bucket}/absent").count()
    with pytest.raises(Exception, match="access_key_id and secret_access_key go together"):
        spark.read.format("mergetree").option("s3.access_key_id", "x").load(f"s3://{s3_bucket}/t").count()
    assert bucket_for(f"s3://{s3_bucket}").list_objects("", delimiter=None)[0] == {}


def test_spark_pushdown_prunes_granules_on_s3(spark, s3_server, s3_bucket: str) -> None:
    from spark_mergetree.spark.filters import FILTER_PUSHDOWN
    from tests.spark.test_pushdown import _collect_with_scan_rows, _engine_rows, _mode

    url = f"s3://{s3_bucket}/pushdown"
    data = spark.range(0, 100_000, numPartitions=2).selectExpr("id", "cast(id % 7 as string) as tag")
    (data.write.format("mergetree").options(**options(s3_server)).option("order_by", "id")
     .option("index_granularity", "1024").mode("append").save(url))
    df = spark.read.format("mergetree").options(**options(s3_server)).load(url)
    with _mode(spark, "true", "true"):
        rows, scanned = _collect_with_scan_rows(df.filter("id >= 1000 AND id < 1100"))
    assert sorted(r["id"] for r in rows) == list(range(1000, 1100))
    if FILTER_PUSHDOWN:
        assert scanned == _engine_rows(url, "id >= 1000 AND id < 1100") < 100_000
    else:  # PySpark 4.0 offers Python sources no filters
        assert scanned == 100_000


def _fail_first_attempt_midway(value: int) -> int:
    from pyspark import TaskContext

    context = TaskContext.get()
    if context.partitionId() == 0 and context.attemptNumber() == 0 and value == 150:
        raise RuntimeError("injected failure on the first attempt")
    return value


def test_spark_retried_task_writes_each_row_once_on_s3(spark, s3_server, s3_bucket: str) -> None:
    from pyspark.sql.functions import udf

    url = f"s3://{s3_bucket}/retry"
    flaky = udf(_fail_first_attempt_midway, "long")
    df = spark.range(0, 400, numPartitions=2).select(flaky("id").alias("id"), (flaky("id") * 2).alias("twice"))
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "20")
    try:
        # stage_rows=20: the failed first attempt has uploaded parts before it fails. No background
        # merges: one uploading after the commit would race the comparison of uploads below.
        (df.write.format("mergetree").options(**options(s3_server)).option("order_by", "id")
         .option("stage_rows", "20").option("setting.auto_merge", "false").mode("append").save(url))
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    ids = [r["id"] for r in spark.read.format("mergetree").options(**options(s3_server)).load(url).collect()]
    assert sorted(ids) == list(range(400))
    table = MergeTreeTable.open(url)
    visible = table.visible_parts()[1]
    uploaded = set(table.parts_store.part_names()) - {""}  # type: ignore[attr-defined]
    assert uploaded >= visible  # and the failed attempt's uploads, if it got to any: named by no entry
    assert sorted(table.cleanup(orphan_seconds=0)) == sorted(uploaded - visible)  # type: ignore[call-arg]
    assert set(table.parts_store.part_names()) - {""} == visible  # type: ignore[attr-defined]
    assert sorted(r["id"] for r in spark.read.format("mergetree").options(**options(s3_server)).load(url)
                  .collect()) == list(range(400))


def test_spark_jobs_inside_a_transaction_on_s3_tables(spark, s3_server, s3_bucket: str) -> None:
    """A job's commit stages a proposal for the owner's transaction in each table's log; the
    owner adopts them at commit (both tables at once) or, rolled back, deletes them and their parts."""
    from spark_mergetree.spark import transaction

    a, b = f"s3://{s3_bucket}/in_tx_a", f"s3://{s3_bucket}/in_tx_b"
    coordinator = f"s3://{s3_bucket}/coordinator"

    def write(url: str, start: int, end: int, mode: str = "append") -> None:
        spark.range(start, end).write.format("mergetree").options(**options(s3_server)).option("order_by", "id") \
            .option("coordinator", coordinator).mode(mode).save(url)

    def ids(url: str) -> list[int]:
        return sorted(r.id for r in spark.read.format("mergetree").options(**options(s3_server)).load(url).collect())

    write(a, 0, 3)
    write(b, 10, 12)
    with transaction(spark, coordinator):
        write(a, 100, 105)
        write(b, 200, 202, "overwrite")
        assert (MergeTreeTable.open(a).count(), MergeTreeTable.open(b).count()) == (3, 2)  # not yet outside
        assert ids(a) == [0, 1, 2, 100, 101, 102, 103, 104] and ids(b) == [200, 201]  # inside: its own writes
    assert (MergeTreeTable.open(a).count(), MergeTreeTable.open(b).count()) == (8, 2)
    assert ids(b) == [200, 201]
    bucket = bucket_for(f"s3://{s3_bucket}")
    assert not bucket.list_objects("in_tx_a/_mergetree/log/staged/", delimiter=None)[0]  # adopted, then dropped
    table = MergeTreeTable.open(a)
    before = set(table.parts_store.part_names()) - {""}  # type: ignore[attr-defined]
    with pytest.raises(RuntimeError, match="boom"), transaction(spark, coordinator):
        write(a, 300, 310)
        raise RuntimeError("boom")
    assert ids(a) == [0, 1, 2, 100, 101, 102, 103, 104]
    assert set(table.parts_store.part_names()) - {""} == before  # type: ignore[attr-defined]
    assert not bucket.list_objects("in_tx_a/_mergetree/log/staged/", delimiter=None)[0]


@pytest.mark.parametrize("scheme", ["gs", "abfss"])
def test_spark_round_trip_on_gcs_and_azure_with_options(spark, scheme: str, request, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """gs:// and abfss:// with the endpoint and credentials given only as options
    (`.option("gcs.endpoint", ...)`, `.option("azure.account_key", ...)`): neither the driver's nor
    the workers' environment names the emulator."""
    from tests.cloud_servers import AZURE_ACCOUNT

    for name in ("STORAGE_EMULATOR_HOST", "AZURE_STORAGE_CONNECTION_STRING", "AZURE_STORAGE_KEY"):
        monkeypatch.delenv(name, raising=False)
    if scheme == "gs":
        server = request.getfixturevalue("gcs_server")
        root, missing = f"gs://{server.bucket()}", "gs://no-such-bucket-s"
        cloud_options = {"gcs.endpoint": server.endpoint, "gcs.project": "test"}
        engine_options = {"endpoint": server.endpoint}
        cause = "bucket 'no-such-bucket-s' does not exist"
    else:
        server = request.getfixturevalue("azure_server")
        host = f"{AZURE_ACCOUNT}.dfs.core.windows.net"
        root, missing = f"abfss://{server.container()}@{host}", f"abfss://no-such-container@{host}"
        engine_options = server.options()
        cloud_options = {f"azure.{key}": value for key, value in engine_options.items()}
        cause = "container 'no-such-container' does not exist"
    url = f"{root}/warehouse/events"
    df = spark.range(0, 3000).selectExpr("id", "id % 5 AS k", "cast(id * 3 AS double) AS v")
    df.write.format("mergetree").options(**cloud_options).option("order_by", "id").option("partition_by", "k") \
        .mode("append").save(url)
    read = spark.read.format("mergetree").options(**cloud_options).load(url)
    # The oracle: Spark's own rows of the source DataFrame.
    assert sorted(read.filter("id BETWEEN 10 AND 40").collect()) == sorted(df.filter("id BETWEEN 10 AND 40").collect())
    assert read.count() == 3000
    small = spark.range(4).selectExpr("id", "id % 5 AS k", "cast(id AS double) AS v")
    small.write.format("mergetree").options(**cloud_options).mode("overwrite").save(url)
    assert sorted(r.id for r in spark.read.format("mergetree").options(**cloud_options).load(url).collect()) == [0, 1, 2, 3]
    table = MergeTreeTable.open(url, storage_options=engine_options)
    assert table.count() == 4
    # Another cloud's options, and a missing bucket or container, fail on the driver naming them.
    with pytest.raises(Exception, match=rf"options \['s3.region'\] are for S3, but the table {url} is in"):
        spark.read.format("mergetree").options(**cloud_options).option("s3.region", "x").load(url).count()
    with pytest.raises(Exception, match=rf"{missing}/t: {cause}"):
        df.write.format("mergetree").options(**cloud_options).option("order_by", "id").mode("append").save(f"{missing}/t")

"""Write jobs on tables in object storage (a Spark job's tasks upload parts long before its commit
names them): while the job's driver holds its lease (txn/job_lease.py, a transaction the
object-store coordinator keeps alive while its holder renews it), `cleanup()` keeps what the job
uploaded however long past the staged lifetime (`orphan_seconds`); once the driver is gone, or the
job ended, its uploads go at once, and a late task of it stages nothing that lasts."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from spark_mergetree.engine.object_table import ObjectStoreTable
from spark_mergetree.errors import TransactionError
from spark_mergetree.txn import job_lease
from spark_mergetree.txn.coordinator import TxnState
from spark_mergetree.txn.object_store import ObjectStoreCoordinator
from tests.objstore.test_object_table import create, rows, same

LIFETIME = 1.0  # the staged lifetime cleanup is given (the default is an hour)


def _setup(s3_bucket: str, name: str) -> tuple[ObjectStoreTable, str]:
    url = ObjectStoreCoordinator.url_for(f"s3://{s3_bucket}/coordinator", lease=2.0)
    return create(f"s3://{s3_bucket}/{name}", coordinator=url), url


def _uploaded(table: ObjectStoreTable) -> set[str]:
    names = table.parts_store.part_names()
    names.pop("")
    return set(names)


def _wait_for(condition, seconds: float = 60.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"not within {seconds} s"
        time.sleep(0.2)


def test_a_leased_jobs_uploads_outlive_the_staged_lifetime_until_it_commits(s3_bucket: str) -> None:
    table, coordinator_url = _setup(s3_bucket, "leased")
    tid = job_lease.start(table.path, coordinator_url, "job1", driver=os.getpid(), wait=True)
    assert tid is not None
    staged = table.stage(rows(0, 500), "job1")  # two partitions: two parts
    duplicate = table.stage(rows(0, 500), "job1")  # a speculative attempt's copy of the same task
    time.sleep(LIFETIME + 0.5)
    assert table.cleanup(orphan_seconds=LIFETIME) == []
    assert {p.name for p in staged + duplicate} <= _uploaded(table)
    table.commit_staged(staged)
    assert sorted(table.discard_staged("job1", keep=[p.name for p in staged])) == sorted(p.name for p in duplicate)
    assert _uploaded(table) == {p.name for p in staged}
    assert same(table.to_arrow(), rows(0, 500))
    # The job ended: its keeper ends the lease and exits; a late task of it stages nothing.
    checker = ObjectStoreCoordinator(coordinator_url)
    _wait_for(lambda: checker.status(tid)[0] is not TxnState.RUNNING)
    with pytest.raises(TransactionError, match="has ended"):
        table.stage(rows(900, 10), "job1")
    assert _uploaded(table) == {p.name for p in staged}


def test_a_dead_drivers_uploads_are_removed_at_once(s3_bucket: str) -> None:
    table, coordinator_url = _setup(s3_bucket, "dead")
    driver = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    try:
        tid = job_lease.start(table.path, coordinator_url, "job2", driver=driver.pid, wait=True)
        assert tid is not None
        staged = table.stage(rows(0, 300), "job2")
        assert table.cleanup(orphan_seconds=3600) == []  # alive: kept
    finally:
        driver.kill()
        driver.wait(timeout=30)
    checker = ObjectStoreCoordinator(coordinator_url)
    _wait_for(lambda: checker.status(tid)[0] is not TxnState.RUNNING)  # the keeper saw its driver go
    # Long before the uploads are an hour old: the job is dead, nothing will publish them.
    assert sorted(table.cleanup(orphan_seconds=3600)) == sorted(p.name for p in staged)
    assert _uploaded(table) == set()
    with pytest.raises(TransactionError, match="has ended"):
        table.stage(rows(0, 10), "job2")
    assert table.count() == 0


def test_a_job_without_a_lease_lives_for_the_staged_lifetime_after_its_last_staging(s3_bucket: str) -> None:
    table, _ = _setup(s3_bucket, "unleased")
    first = table.stage(rows(0, 200), "job3")
    assert table.cleanup(orphan_seconds=30) == []  # staged a moment ago
    time.sleep(LIFETIME + 0.5)
    second = table.stage(rows(200, 200), "job3")  # a task staging renews it
    assert table.cleanup(orphan_seconds=LIFETIME + 0.4) == []
    time.sleep(LIFETIME + 0.5)
    assert sorted(table.cleanup(orphan_seconds=LIFETIME)) == sorted(p.name for p in first + second)
    assert _uploaded(table) == set()
    # Uploads of no job (a crash between an insert's upload and its entry) still go by their age.
    table.insert(rows(0, 100))
    assert same(table.to_arrow(), rows(0, 100))



def test_a_spark_write_leaves_no_upload_nor_job_record_behind(spark, s3_server, s3_bucket: str) -> None:  # type: ignore[no-untyped-def]
    """A Spark job's tasks record their uploads under `_mergetree/jobs/`; its commit publishes them
    and its end removes every record, leaving only the job's `.ended` mark; a cleanup with a staged
    lifetime of zero then deletes nothing the table shows."""
    from spark_mergetree import MergeTreeTable
    from tests.objstore.test_spark_object_store import options

    url = f"s3://{s3_bucket}/warehouse/leased"
    df = spark.range(0, 5000).selectExpr("id", "id % 3 AS k")
    (df.write.format("mergetree").options(**options(s3_server)).option("order_by", "id")
     .option("partition_by", "k").option("setting.auto_merge", "false").mode("append").save(url))
    table = MergeTreeTable.open(url)
    assert isinstance(table, ObjectStoreTable)
    jobs = table.parts_store.bucket.list_objects("warehouse/leased/_mergetree/jobs/", delimiter=None)[0]
    assert jobs and all(key.endswith(".ended") for key in jobs), jobs
    assert table.cleanup(orphan_seconds=0) == []
    assert table.count() == 5000 and _uploaded(table) == table.visible_parts()[1]

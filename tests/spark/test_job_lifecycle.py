"""A Spark write job from its driver's lease to its end: what its commit leaves (nothing of what
killed, duplicate or late attempts staged), and which coordinator its commit works with when the
user names one after the SparkSession started."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark import TaskContext
from pyspark.sql import SparkSession

import spark_mergetree
from spark_mergetree.engine.table import MergeTreeTable
from spark_mergetree.errors import TransactionError
from spark_mergetree.spark import adapter
from spark_mergetree.spark.adapter import COORDINATOR_CONF, TableRef
from spark_mergetree.spark.session import configure
from spark_mergetree.spark.source import MergeTreeCommitMessage, MergeTreeWriter
from spark_mergetree.txn import COORDINATOR_ENV, TxnState, coordinator_from_url
from spark_mergetree.txn.local import LocalCoordinator
from spark_mergetree.txn.table_log import JOBS_DIRECTORY

COLUMNS = [("id", "UInt64")]


def _leftovers(path: Path) -> list[str]:
    return sorted(p.name for p in path.iterdir() if p.name.startswith(("staged_", "tmp_staged_")))


def _killed_attempt(path: Path, tag: str) -> str:
    """The directory a task killed while writing its part leaves: parts are written under
    `tmp_<staged name>` (`staged_<tag>_<8 hex>_<n>`) and renamed once whole."""
    directory = path / f"tmp_staged_{tag}_{uuid.uuid4().hex[:8]}_0"
    directory.mkdir()
    (directory / "data.bin").write_bytes(b"the first half of a part")
    return directory.name


def test_a_committed_job_leaves_nothing_staged_and_a_late_attempt_cannot_stage(tmp_path: Path) -> None:
    table = MergeTreeTable.create(tmp_path / "t", COLUMNS, order_by="id", settings={"auto_merge": False})
    ref = TableRef(str(table.path))
    tag = uuid.uuid4().hex
    writer = MergeTreeWriter(ref, table.metadata.arrow_schema, "append", tag, 1 << 16)
    rows = pa.table({"id": pa.array(range(10), pa.uint64())})
    first = adapter.stage(ref, rows, tag)  # task 0, attempt 0
    duplicate = adapter.stage(ref, rows, tag)  # task 0, a speculative copy that lost the race
    killed = _killed_attempt(table.path, tag)  # task 1, attempt 0: its executor was killed mid-write
    second = adapter.stage(ref, pa.table({"id": pa.array(range(10, 20), pa.uint64())}), tag)  # task 1, attempt 1
    assert killed in _leftovers(table.path) and {p.name for p in duplicate} <= set(_leftovers(table.path))

    writer.commit([MergeTreeCommitMessage(0, 0, first, None), MergeTreeCommitMessage(1, 1, second, None),
                   MergeTreeCommitMessage(0, 1, duplicate, None), None])
    assert _leftovers(table.path) == [], "the commit left what other attempts staged"
    assert table.log.job_ended(tag)
    # A speculative attempt that starts after the commit stages nothing...
    with pytest.raises(TransactionError, match="has ended"):
        adapter.stage(ref, rows, tag)
    assert _leftovers(table.path) == []
    # ... and nothing it could leave survives the next cleanup.
    late = _killed_attempt(table.path, tag)
    table.cleanup()
    assert late not in _leftovers(table.path)
    assert sorted(MergeTreeTable.open(table.path).to_arrow().column("id").to_pylist()) == list(range(20))


def _lease_seen_by_task(path: str) -> Iterator[pa.RecordBatch]:
    """In each write task: the lease its driver registered for the job (waited for, at most 60 s),
    whether the coordinator says it runs, and, in partition 0, the directory of an attempt killed
    mid-write."""
    from spark_mergetree.txn.table_log import TableLog

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        jobs = Path(path) / JOBS_DIRECTORY
        deadline = time.monotonic() + 60
        leases = sorted(jobs.glob("*.lease")) if jobs.is_dir() else []
        while not leases and time.monotonic() < deadline:
            time.sleep(0.1)
            leases = sorted(jobs.glob("*.lease")) if jobs.is_dir() else []
        text = leases[0].read_text() if leases else ""
        alive = bool(leases) and TableLog(path).job_alive(leases[0].stem)
        if leases and TaskContext.get().partitionId() == 0:
            _killed_attempt(Path(path), leases[0].stem)
        for batch in batches:
            yield pa.RecordBatch.from_pydict({"id": batch.column(0), "lease": [text] * batch.num_rows,
                                              "alive": [alive] * batch.num_rows})

    return run


def test_a_spark_job_is_leased_by_its_driver_while_it_runs_and_ended_by_its_commit(spark, tmp_path: Path) -> None:
    path = tmp_path / "t"
    MergeTreeTable.create(path, [("id", "Int64"), ("lease", "String"), ("alive", "Bool")], order_by="id",
                          settings={"auto_merge": False})
    df = spark.range(0, 20, numPartitions=2).mapInArrow(_lease_seen_by_task(str(path)),
                                                        "id long, lease string, alive boolean")
    df.write.format("mergetree").mode("append").save(str(path))

    rows = MergeTreeTable.open(path).to_arrow().to_pylist()
    assert sorted(row["id"] for row in rows) == list(range(20))
    assert {row["alive"] for row in rows} == {True}, "a task saw no live lease of its driver"
    (lease,) = {row["lease"] for row in rows}
    (held,) = json.loads(lease)["leases"]
    coordinator = coordinator_from_url(held["coordinator"])
    deadline = time.monotonic() + 60
    while coordinator.status(held["tid"])[0] is TxnState.RUNNING and time.monotonic() < deadline:
        time.sleep(0.2)
    assert coordinator.status(held["tid"])[0] is TxnState.ABORTED, "the lease outlived its committed job"
    tag = json.loads(lease)["tag"]
    assert MergeTreeTable.open(path).log.job_ended(tag)
    assert sorted(p.name for p in (path / JOBS_DIRECTORY).iterdir()) == [f"{tag}.ended"]
    assert _leftovers(path) == [], "the killed attempt's tmp_staged directory outlived the commit"


@pytest.fixture
def session_coordinator_conf(spark) -> Iterator[None]:
    """The test may change the session conf of the coordinator; it is put back after."""
    before = spark.conf.get(COORDINATOR_CONF, None)
    yield
    if before is None:
        spark.conf.unset(COORDINATOR_CONF)
    else:
        spark.conf.set(COORDINATOR_CONF, before)


def test_a_coordinator_named_after_the_session_started_reaches_the_commit(
        spark, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, session_coordinator_conf: None) -> None:
    late = LocalCoordinator.url_for(tmp_path / "named-late")
    monkeypatch.setenv(COORDINATOR_ENV, late)  # Spark's processes, started before, do not see this
    spark.conf.set(COORDINATOR_CONF, late)
    path = str(tmp_path / "t")
    spark.range(5).write.format("mergetree").option("order_by", "id").mode("append").save(path)
    assert MergeTreeTable.open(path).log.identity()["coordinator"] == late
    with spark_mergetree.transaction(spark):  # on `late`, this process's default now
        spark.range(5, 10).write.format("mergetree").mode("append").save(path)
    assert sorted(r.id for r in spark.read.format("mergetree").load(path).collect()) == list(range(10))


def test_a_table_bound_to_spark_s_default_coordinator_says_how_to_name_another(
        spark, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, session_coordinator_conf: None,
        private_coordinator: str) -> None:
    path = str(tmp_path / "t")
    spark.range(5).write.format("mergetree").option("order_by", "id").mode("append").save(path)
    assert MergeTreeTable.open(path).log.identity()["coordinator"] == private_coordinator  # Spark's default
    monkeypatch.setenv(COORDINATOR_ENV, LocalCoordinator.url_for(tmp_path / "named-late"))
    with pytest.raises(Exception) as caught:  # noqa: PT011 - classic and Connect wrap it differently
        with spark_mergetree.transaction(spark):
            spark.range(5, 10).write.format("mergetree").mode("append").save(path)
    message = str(caught.value)
    assert f"is coordinated by {private_coordinator}" in message
    assert "not from os.environ changed after the SparkSession started" in message
    assert f"spark.conf.set('{COORDINATOR_CONF}', url)" in message
    assert f"transaction(spark, coordinator='{private_coordinator}')" in message
    assert sorted(r.id for r in spark.read.format("mergetree").load(path).collect()) == list(range(5))


def test_configure_carries_the_coordinator_to_the_session_conf(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    named = LocalCoordinator.url_for(tmp_path / "named")
    builder = configure(SparkSession.Builder(), extension=False, unix_socket=False, coordinator=named)
    assert builder._options[COORDINATOR_CONF] == named
    from_env = LocalCoordinator.url_for(tmp_path / "from-env")
    monkeypatch.setenv(COORDINATOR_ENV, from_env)
    builder = configure(SparkSession.Builder(), extension=False, unix_socket=False)
    assert builder._options[COORDINATOR_CONF] == from_env

"""mergetree on a real Spark standalone cluster: a master and two one-core workers (127.0.0.1 and
127.0.0.2) started from the pip-installed pyspark (tests/spark_cluster.py), drivers in processes of
their own, executors in JVMs of their own on the workers, Python workers under them.

* writes, key-range reads and a two-table `transaction(spark)` (commit and rollback), with the
  coordinators a cluster needs — ZooKeeper over tables on a directory every node sees, and the
  object-store coordinator over tables on the S3 server — from a classic driver and from a client
  of a Spark Connect server attached to the cluster;
* speculation: one slow task gets a speculative copy on the other host; each row once;
* executor loss: kill -9 of an executor JVM while its task writes; Spark reschedules; each row once,
  and after cleanup no directory beyond the table's parts;
* a storage policy (raid5) whose disks every node mounts at the same paths, as docs/spark.md
  recommends: parts written by executors on both hosts, read back whole and degraded;
* a second application (the Connect server) reading while the classic one appends batches: it sees
  only whole commits, each one right after the writer's call returned.

Each driver is a separate process, so the test process holds no SparkContext; applications get
`spark.cores.max` so two of them can hold the cluster's two cores at once.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.spark_cluster import Application, ConnectServer, SparkCluster

pytestmark = pytest.mark.long  # a cluster's start and several applications: scheduled early (tests/conftest.py)

# Python batches of 100 rows: a task's rows reach the writer in several batches, so a task slowed or
# killed in the middle has already handed some rows (and, with stage_rows, staged parts) over.
APP_CONFS = {"spark.sql.execution.arrow.maxRecordsPerBatch": "100", "spark.task.maxFailures": "4"}
SPECULATION_CONFS = {"spark.speculation": "true", "spark.speculation.interval": "200ms",
                     "spark.speculation.quantile": "0.5", "spark.speculation.multiplier": "2",
                     "spark.speculation.minTaskRuntime": "1s", "spark.speculation.efficiency.enabled": "false"}
TABLE = {"order_by": "id", "index_granularity": "128", "setting.auto_merge": "false"}


@pytest.fixture(scope="module")
def cluster(spark_cluster: SparkCluster) -> SparkCluster:
    return spark_cluster


@pytest.fixture(scope="module")
def shared(cluster: SparkCluster) -> Path:
    """A directory every node of the cluster sees at the same path (here: the one machine's disk)."""
    directory = cluster.directory / "shared"
    directory.mkdir(exist_ok=True)
    return directory


@pytest.fixture(scope="module")
def zk_coordinator(zookeeper: Any) -> str:
    return f"zk://{zookeeper.hosts}/cluster-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def s3(s3_server: Any) -> dict[str, Any]:
    """A bucket on the S3 server: tables' prefix, the object-store coordinator, the options executors get
    their endpoint and credentials from, and the environment of a driver (the user's process)."""
    bucket = s3_server.bucket()
    env = s3_server.environment()
    options = {"s3.endpoint": env["AWS_ENDPOINT_URL"], "s3.access_key_id": env["AWS_ACCESS_KEY_ID"],
               "s3.secret_access_key": env["AWS_SECRET_ACCESS_KEY"], "s3.region": env["AWS_DEFAULT_REGION"]}
    return {"bucket": bucket, "coordinator": f"s3://{bucket}/coordinator", "options": options, "env": env}


@pytest.fixture(scope="module")
def classic(cluster: SparkCluster, s3: dict[str, Any]) -> Iterator[Application]:
    """A classic driver holding one core (one executor), beside the Connect server's."""
    with Application("classic", cluster.directory, master=cluster.master_url, env=s3["env"],
                     confs={**APP_CONFS, "spark.cores.max": "1"}) as app:
        yield app


@pytest.fixture(scope="module")
def connect(cluster: SparkCluster, s3: dict[str, Any]) -> Iterator[Application]:
    """A Spark Connect server attached to the cluster (one core) and a client process of it."""
    server = ConnectServer(cluster, cluster.directory, {**APP_CONFS, "spark.cores.max": "1",
                                                        "spark.driver.memory": "512m",
                                                        "spark.executor.memory": "512m",
                                                        "spark.driver.host": "127.0.0.1",
                                                        "spark.driver.bindAddress": "127.0.0.1",
                                                        "spark.ui.enabled": "false",
                                                        "spark.sql.shuffle.partitions": "2"})
    try:
        with Application("connect-client", cluster.directory, remote=server.url, env=s3["env"]) as app:
            yield app
    finally:
        server.close()


def _expected(start: int, end: int) -> dict[str, int]:
    n = end - start
    return {"rows": n, "distinct": n, "sum": (start + end - 1) * n // 2, "min": start, "max": end - 1, "intact": n}


def _leftovers(path: str) -> list[str]:
    """After cleanup: directories of the table its log does not name (staged leftovers)."""
    from spark_mergetree import MergeTreeTable
    from spark_mergetree.spark.adapter import TableRef, part_sets

    MergeTreeTable.open(path).cleanup()
    known = part_sets(TableRef(path)).known
    return sorted(p.name for p in Path(path).iterdir()
                  if p.is_dir() and p.name not in known and p.name not in ("detached", "_mergetree"))


def _exercise(app: Application, first: str, second: str, coordinator: str, options: dict[str, str]) -> None:
    """A write and a key-range read, then a two-table transaction committed and one rolled back."""
    app.call("write", path=first, start=0, end=3000, partitions=3, options={**TABLE, **options, "coordinator": coordinator})
    assert app.call("stats", path=first, options=options, where="id BETWEEN 1200 AND 1299") == _expected(1200, 1300)

    # The second table is created inside the transaction (by its first write); a read inside the
    # block sees the transaction's own writes.
    inside = app.call("two_tables", first=first, second=second, start=5000, end=5400, coordinator=coordinator,
                      options=options, create={**TABLE, "coordinator": coordinator}, read=second)
    assert inside == _expected(5000, 5400)
    assert app.call("stats", path=first, options=options, where="id >= 2990") == {
        **_expected(5000, 5400), "rows": 410, "distinct": 410, "sum": sum(range(2990, 3000)) + 2079800, "min": 2990,
        "intact": 410}

    inside = app.call("two_tables", first=first, second=second, start=6000, end=6300, coordinator=coordinator,
                      options=options, read=second, rollback=True)
    assert inside["rows"] == 700 and inside["max"] == 6299
    assert app.call("stats", path=first, options=options) == {
        **_expected(0, 3000), "rows": 3400, "distinct": 3400, "sum": 4498500 + 2079800, "max": 5399, "intact": 3400}
    assert app.call("stats", path=second, options=options) == _expected(5000, 5400)


# --- two executors on two hosts: speculation, executor loss, a storage policy --------------------------

class TestTwoExecutors:
    """One application holding both cores: an executor on 127.0.0.1 and one on 127.0.0.2."""

    @pytest.fixture(scope="class")
    def app(self, cluster: SparkCluster, zk_coordinator: str) -> Iterator[Application]:
        with Application("two-executors", cluster.directory, master=cluster.master_url,
                         confs={**APP_CONFS, **SPECULATION_CONFS, "spark.cores.max": "2"}) as app:
            executors = cluster.wait_for_executors(app.app_id, 2)
            assert sorted(host for _, _, host in executors) == ["127.0.0.1", "127.0.0.2"]
            # Start both executors' Python workers: speculation compares a task with the others of its
            # stage, and a first task that pays a worker start would make the slow one look ordinary.
            markers = cluster.directory / "warm-up-markers"
            markers.mkdir()
            app.call("write", path=str(cluster.directory / "warm-up"), start=0, end=400, partitions=4,
                     options={**TABLE, "coordinator": zk_coordinator}, pace={"markers": str(markers), "seconds": 0})
            assert {json.loads(m.read_text())["host"] for m in markers.iterdir()} == {"127.0.0.1", "127.0.0.2"}
            yield app

    def test_a_speculative_copy_on_the_other_host_writes_each_row_once(
            self, app: Application, shared: Path, zk_coordinator: str) -> None:
        path, markers = str(shared / "speculation"), shared / "speculation-markers"
        markers.mkdir()
        # Partition 5's first attempt stalls 30 s after its first rows reached the writer; the other
        # five take a second or two, so Spark copies it onto the other host's executor.
        pace = {"markers": str(markers), "seconds": 30, "after_rows": 100, "partitions": [5], "attempts": [0]}
        done = app.call("write", path=path, start=0, end=2400, partitions=6,
                        options={**TABLE, "coordinator": zk_coordinator, "stage_rows": "100"}, pace=pace)
        assert (markers / "5-1").exists(), f"no speculative copy of partition 5: {sorted(os.listdir(markers))}"
        first, copy = (json.loads((markers / f"5-{attempt}").read_text()) for attempt in (0, 1))
        assert first["slow"] and not copy["slow"] and copy.get("done")
        assert copy["host"] != first["host"]  # Spark's rule: a copy never runs where the attempt does
        assert done["seconds"] < 30  # the copy's result committed the job, not the stalled attempt
        assert app.call("stats", path=path) == _expected(0, 2400)
        assert _leftovers(path) == []  # nothing of the stalled attempt after cleanup

    def test_an_executor_killed_while_writing_loses_no_row_and_doubles_none(
            self, app: Application, cluster: SparkCluster, shared: Path, zk_coordinator: str) -> None:
        path, markers = str(shared / "executor_loss"), shared / "loss-markers"
        markers.mkdir()
        before = {pid for pid, _, _ in cluster.executors(app.app_id)}
        # Every partition's first attempt stalls 8 s after 200 of its rows reached the writer (two
        # parts staged by then: stage_rows=100); partition 0's executor is killed during the stall.
        pace = {"markers": str(markers), "seconds": 8, "after_rows": 200, "attempts": [0]}
        outcome: dict[str, Any] = {}

        def run() -> None:
            try:
                outcome["result"] = app.call("write", path=path, start=0, end=4000, partitions=4, timeout=240,
                                             options={**TABLE, "coordinator": zk_coordinator, "stage_rows": "100"},
                                             pace=pace)
            except BaseException as error:  # reported below, in the test's thread
                outcome["error"] = error

        writer = threading.Thread(target=run)
        writer.start()
        deadline = time.monotonic() + 120
        while not (markers / "0-0").exists():
            assert time.monotonic() < deadline and writer.is_alive(), f"partition 0 never ran: {outcome}"
            time.sleep(0.1)
        victim = json.loads((markers / "0-0").read_text())
        assert victim["executor"] in before
        os.kill(victim["executor"], signal.SIGKILL)
        writer.join(240)
        assert not writer.is_alive(), "the write did not end within 240 s after the executor's loss"
        if "error" in outcome:
            raise outcome["error"]
        retried = [json.loads(m.read_text()) for m in markers.glob("0-*") if m.name != "0-0"]
        assert retried and all(r["executor"] != victim["executor"] for r in retried)  # rescheduled elsewhere
        assert app.call("stats", path=path) == _expected(0, 4000)
        # What the killed attempt staged never became visible (the rows above), and after cleanup
        # nothing of it is left: its staged parts and its unfinished tmp_staged_* directory.
        assert _leftovers(path) == []
        # The standalone master replaces the lost executor: the application has two again.
        after = cluster.wait_for_executors(app.app_id, 2)
        assert victim["executor"] not in {pid for pid, _, _ in after}

    def test_a_storage_policy_on_disks_every_node_mounts(self, app: Application, shared: Path,
                                                         zk_coordinator: str) -> None:
        from spark_mergetree import MergeTreeTable

        disks = [shared / "mnt" / f"disk{i}" for i in range(3)]
        policy = {"name": "striped", "disks": {f"d{i}": {"path": str(d)} for i, d in enumerate(disks)},
                  "volumes": [{"name": "main", "disks": ["d0", "d1", "d2"], "layout": "raid5",
                               "stripe_unit_bytes": 4096}]}
        path = str(shared / "policy_table")
        options = {**TABLE, "coordinator": zk_coordinator, "setting.storage_policy": json.dumps(policy)}
        app.call("write", path=path, start=0, end=8000, partitions=4, options=options)
        assert app.call("stats", path=path, where="id BETWEEN 4000 AND 4199") == _expected(4000, 4200)
        table = MergeTreeTable.open(path)
        parts = table.parts()
        assert len(parts) >= 4 and all(table.store.part_location(p.name).layout == "raid5" for p in parts)
        assert not [p for p in Path(path).iterdir() if p.name.startswith("all_")]  # data lives on the disks
        assert all(any(f.is_file() for f in d.rglob("*")) for d in disks)  # stripe units on every disk
        assert table.scrub().ok
        shutil.rmtree(disks[1])  # a lost disk: every executor reads around it from parity
        assert app.call("stats", path=path) == _expected(0, 8000)


# --- a classic driver and a Spark Connect client, one core each ---------------------------------------

def test_classic_driver_on_zookeeper(classic: Application, shared: Path, zk_coordinator: str) -> None:
    _exercise(classic, str(shared / "zk_a"), str(shared / "zk_b"), zk_coordinator, {})


def test_spark_connect_on_the_object_store(connect: Application, s3: dict[str, Any]) -> None:
    prefix = f"s3://{s3['bucket']}/connect"
    _exercise(connect, f"{prefix}/a", f"{prefix}/b", s3["coordinator"], s3["options"])


def test_a_second_application_sees_whole_commits_as_soon_as_they_return(
        classic: Application, connect: Application, cluster: SparkCluster, shared: Path, zk_coordinator: str) -> None:
    assert classic.app_id != connect.app_id
    assert {classic.app_id, connect.app_id} <= set(cluster.running_applications())
    path, size, commits = str(shared / "two_apps"), 300, 4
    options = {**TABLE, "coordinator": zk_coordinator}
    seen: list[dict[str, int]] = []
    failures: list[BaseException] = []
    writing = threading.Event()
    writing.set()

    def read_meanwhile() -> None:
        try:
            for _ in range(12):  # bounded; each read is one query of the other application
                if not writing.is_set():
                    return
                seen.append(connect.call("batches", path=path))
        except BaseException as error:
            failures.append(error)

    classic.call("write", path=path, start=0, end=size, partitions=2, options=options, batch=0)
    reader = threading.Thread(target=read_meanwhile)
    reader.start()
    try:
        for batch in range(1, commits):
            classic.call("write", path=path, start=batch * size, end=(batch + 1) * size, partitions=3,
                         options=options, batch=batch)
            # Right after the writer's call returned, the other application sees the commit.
            assert connect.call("batches", path=path) == {str(b): size for b in range(batch + 1)}
    finally:
        writing.clear()
        reader.join(120)
    assert not failures, failures
    assert seen, "the reader never read while the writer appended"
    for batches in seen:  # only whole commits, and always a prefix of them
        assert batches == {str(b): size for b in range(len(batches))}, batches

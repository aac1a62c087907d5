"""writeStream.format("mergetree"): one atomic commit per micro-batch, exactly once across a replay.

The input is a directory of Parquet files read one file per micro-batch, so a batch id always
covers the same rows. A replay is made as a driver that died between our commit and Spark's own
commit log leaves it: the query's last entry in `<checkpoint>/commits/` is removed and the query
restarted from its checkpoint, so Spark runs that batch id again with the same rows.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from spark_mergetree import MergeTreeTable

pytestmark = pytest.mark.spark

WAIT_SECONDS = 300  # bound of every wait for a streaming query (a loaded 2-core machine is slow)


def _input(directory: Path, batches: int, rows: int) -> None:
    """`batches` Parquet files of `rows` rows each: file b holds ids b*rows .. (b+1)*rows-1."""
    for batch in range(batches):
        pq.write_table(pa.table({"id": pa.array(range(batch * rows, (batch + 1) * rows), pa.int64()),
                                 "batch": pa.array([batch] * rows, pa.int32())}),
                       directory / f"b{batch:03d}.parquet")


def _run_available_now(spark, source: Path, table: Path, checkpoint: Path) -> object:
    stream = spark.readStream.schema("id long, batch int").option("maxFilesPerTrigger", 1).parquet(str(source))
    query = (stream.writeStream.format("mergetree").option("checkpointLocation", str(checkpoint))
             .option("order_by", "id").trigger(availableNow=True).start(str(table)))
    finished = query.awaitTermination(WAIT_SECONDS)
    if not finished:
        query.stop()
    assert finished, f"the streaming query into {table} did not finish within {WAIT_SECONDS} s"
    assert query.exception() is None, query.exception()
    return query


def test_each_batch_commits_once_and_a_replayed_batch_commits_nothing(spark, tmp_path: Path) -> None:
    source, table, checkpoint = tmp_path / "in", tmp_path / "t", tmp_path / "ck"
    source.mkdir()
    _input(source, batches=2, rows=50)
    query = _run_available_now(spark, source, table, checkpoint)
    query_id = str(query.id)
    merge_tree = MergeTreeTable.open(table)
    assert merge_tree.app_version(query_id) == 1
    entries = [json.loads(p.read_text()) for p in (table / "_mergetree" / "log").glob("0*.json")]
    # One commit per micro-batch, each recording its batch id beside its parts.
    assert sorted(entry["apps"][query_id] for entry in entries if "apps" in entry) == [0, 1]
    # The driver "died" after our commit of batch 1 and before Spark's commit log: Spark replays it.
    (checkpoint / "commits" / "1").unlink()
    for crc in (checkpoint / "commits").glob(".1.crc"):
        crc.unlink()
    replay = _run_available_now(spark, source, table, checkpoint)
    assert str(replay.id) == query_id and (checkpoint / "commits" / "1").exists()
    rows = MergeTreeTable.open(table).to_arrow()
    assert sorted(rows.column("id").to_pylist()) == list(range(100))
    assert sorted(rows.column("batch").to_pylist()) == [0] * 50 + [1] * 50
    # Nothing of the replay was left staged.
    assert not [p.name for p in table.iterdir() if p.name.startswith(("staged_", "tmp_staged_"))]


def test_complete_mode_is_refused_by_name(spark, tmp_path: Path) -> None:
    source = tmp_path / "in"
    source.mkdir()
    _input(source, batches=1, rows=10)
    counts = spark.readStream.schema("id long, batch int").parquet(str(source)).groupBy("batch").count()
    query = (counts.writeStream.format("mergetree").outputMode("complete")
             .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True)
             .start(str(tmp_path / "t")))
    deadline = time.monotonic() + WAIT_SECONDS
    with pytest.raises(Exception, match=r"supports outputMode\('append'\) only: outputMode\('complete'\)"):
        query.awaitTermination(WAIT_SECONDS)
    assert time.monotonic() < deadline, "the refused query did not end"
    assert not (tmp_path / "t").exists()  # refused before a table was created


def test_foreach_batch_transaction_on_the_outer_session_holds_the_batch_writes(spark, tmp_path: Path) -> None:
    """`with transaction(spark)` in a foreachBatch function, `spark` being the session the query started
    from: both tables' writes of a batch commit together, or neither (the batch runs in a copy of
    the session, which the transaction joins too)."""
    from spark_mergetree import transaction

    source, checkpoint = tmp_path / "in", tmp_path / "ck"
    source.mkdir()
    _input(source, batches=2, rows=20)
    paths = [str(tmp_path / "a"), str(tmp_path / "b")]
    for path in paths:
        MergeTreeTable.create(path, [("id", "Int64"), ("batch", "Int32")], "id")

    def each(batch_df, batch_id):  # noqa: ANN001 - Spark's callback
        with transaction(spark):
            batch_df.write.format("mergetree").mode("append").save(paths[0])
            if batch_id == 1:
                raise RuntimeError("batch 1 fails between its two writes")
            batch_df.write.format("mergetree").mode("append").save(paths[1])

    stream = spark.readStream.schema("id long, batch int").option("maxFilesPerTrigger", 1).parquet(str(source))
    query = (stream.writeStream.foreachBatch(each).option("checkpointLocation", str(checkpoint))
             .trigger(availableNow=True).start())
    try:
        query.awaitTermination(WAIT_SECONDS)
    except Exception:  # noqa: BLE001 - batch 1 fails by design; query.exception() says why
        pass
    finally:
        if query.isActive:
            query.stop()
    assert "batch 1 fails between its two writes" in str(query.exception())
    # Batch 0 is in both tables; batch 1's first write was rolled back with the transaction.
    for path in paths:
        assert sorted(MergeTreeTable.open(path).to_arrow().column("batch").to_pylist()) == [0] * 20, path


REPO_ROOT = Path(__file__).resolve().parents[2]
DRIVER = Path(__file__).with_name("streaming_driver.py")  # a driver of its own, killed with SIGKILL
KILL_BATCHES, KILL_ROWS = 3, 25


def _foreach_driver(source: Path, tables: list[Path], checkpoint: Path) -> subprocess.Popen[bytes]:
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable,
               PYTHONPATH=os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")]))
    return subprocess.Popen([sys.executable, str(DRIVER), str(source), str(tables[0]), str(checkpoint),
                             str(tables[1])], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)


def _committed_entries(table: Path) -> int:
    count = 0
    for entry in (table / "_mergetree" / "log").glob("0*.json"):
        try:
            body = json.loads(entry.read_text())
        except (OSError, ValueError):
            continue
        count += bool(body.get("added")) and body.get("csn") is not None
    return count


def test_foreach_batch_with_transaction_spark_does_not_tear_batches_across_a_kill(tmp_path: Path) -> None:
    """foreachBatch writing two tables inside `with transaction(spark)` (the session the query
    started from): the driver is killed while batch 1 is between its two writes (table a's part is
    staged for the transaction, table b's write runs), then restarted from its checkpoint. Both
    tables hold the same rows, every input row among them: the batch is in both or in neither
    (before the transaction joined the batch's session, table a held batch 1 and b did not)."""
    source, checkpoint = tmp_path / "in", tmp_path / "ck"
    tables = [tmp_path / "a", tmp_path / "b"]
    source.mkdir()
    for batch in range(KILL_BATCHES):
        pq.write_table(pa.table({"id": pa.array(range(batch * KILL_ROWS, (batch + 1) * KILL_ROWS), pa.int64()),
                                 "batch": pa.array([batch] * KILL_ROWS, pa.int32())}), source / f"b{batch}.parquet")
    for table in tables:
        MergeTreeTable.create(table, [("id", "Int64"), ("batch", "Int32")], "id", settings={"auto_merge": False})
    driver = _foreach_driver(source, tables, checkpoint)
    log_a = tables[0] / "_mergetree" / "log"
    try:
        deadline = time.monotonic() + WAIT_SECONDS
        # Batch 0 committed in table a, then batch 1 reached a: staged for its transaction (or, were
        # the writes outside it, committed by themselves).
        while not (_committed_entries(tables[0]) >= 2
                   or (_committed_entries(tables[0]) >= 1 and list(log_a.glob("*.staged-*.json")))):
            assert driver.poll() is None, f"the streaming driver exited with {driver.returncode} before batch 1"
            assert time.monotonic() < deadline, f"batch 1 did not reach table a within {WAIT_SECONDS} s"
            time.sleep(0.002)
        os.killpg(driver.pid, signal.SIGKILL)
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
        driver.wait(timeout=30)
    after_kill = [sorted(MergeTreeTable.open(t).to_arrow().column("id").to_pylist()) for t in tables]
    assert after_kill[0] == after_kill[1], "the kill left one batch in one table only"
    restarted = _foreach_driver(source, tables, checkpoint)
    try:
        code = restarted.wait(timeout=WAIT_SECONDS)
    finally:
        if restarted.poll() is None:
            os.killpg(restarted.pid, signal.SIGKILL)
            restarted.wait(timeout=30)
    assert code == 0, f"the restarted driver exited with {code}"
    rows = [sorted(MergeTreeTable.open(t).to_arrow().column("id").to_pylist()) for t in tables]
    assert rows[0] == rows[1], "the tables disagree after the restart"
    # foreachBatch is at least once: a batch committed before Spark's commit log is written again.
    assert set(rows[0]) == set(range(KILL_BATCHES * KILL_ROWS))

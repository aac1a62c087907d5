"""The streaming sink across a real crash: the driver (its Python process, JVM and workers) is
killed with SIGKILL while a query streams into a table, right as a micro-batch's commit shows in
the table's log, then the query is restarted from its checkpoint: every input row is in the table
exactly once, whichever step of the batch the kill hit (the test says which: before Spark's commit
log had the batch, the restart replays it and the table's record makes the replay commit nothing)."""

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

REPO_ROOT = Path(__file__).resolve().parents[2]
DRIVER = Path(__file__).with_name("streaming_driver.py")
WAIT_SECONDS = 240
BATCHES, ROWS = 3, 25


def _driver(source: Path, table: Path, checkpoint: Path) -> subprocess.Popen[bytes]:
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable,
               PYTHONPATH=os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")]))
    return subprocess.Popen([sys.executable, str(DRIVER), str(source), str(table), str(checkpoint)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)


def _committed_batches(table: Path) -> set[int]:
    """Batches the table's log entries record (the query's only application)."""
    found: set[int] = set()
    for entry in (table / "_mergetree" / "log").glob("0*.json"):
        try:
            found.update(json.loads(entry.read_text()).get("apps", {}).values())
        except (OSError, ValueError):
            continue  # being replaced right now
    return found


def test_a_driver_killed_mid_stream_restarts_from_its_checkpoint_exactly_once(tmp_path: Path) -> None:
    source, table, checkpoint = tmp_path / "in", tmp_path / "t", tmp_path / "ck"
    source.mkdir()
    for batch in range(BATCHES):
        pq.write_table(pa.table({"id": pa.array(range(batch * ROWS, (batch + 1) * ROWS), pa.int64()),
                                 "batch": pa.array([batch] * ROWS, pa.int32())}), source / f"b{batch}.parquet")
    driver = _driver(source, table, checkpoint)
    try:
        # Kill at the moment batch 1's commit shows in the table's log (before Spark's commit log
        # of it, most of the time): bounded polling, 2 ms apart.
        deadline = time.monotonic() + WAIT_SECONDS
        while 1 not in _committed_batches(table):
            assert driver.poll() is None, f"the streaming driver exited with {driver.returncode} before batch 1"
            assert time.monotonic() < deadline, f"batch 1 was not committed within {WAIT_SECONDS} s"
            time.sleep(0.002)
        os.killpg(driver.pid, signal.SIGKILL)
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
        driver.wait(timeout=30)
    spark_committed = {int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit()}
    ours = _committed_batches(table)
    restarted = _driver(source, table, checkpoint)
    try:
        code = restarted.wait(timeout=WAIT_SECONDS)
    finally:
        if restarted.poll() is None:
            os.killpg(restarted.pid, signal.SIGKILL)
            restarted.wait(timeout=30)
    assert code == 0, f"the restarted driver exited with {code}"
    rows = MergeTreeTable.open(table).to_arrow()
    assert sorted(rows.column("id").to_pylist()) == list(range(BATCHES * ROWS)), (
        f"killed with batches {sorted(ours)} in our log and {sorted(spark_committed)} in Spark's commit log")
    assert MergeTreeTable.open(table).app_version(next(iter(_queries(table)))) == BATCHES - 1


def _queries(table: Path) -> set[str]:
    found: set[str] = set()
    for entry in (table / "_mergetree" / "log").glob("*.json"):
        if entry.name[0].isdigit():
            found.update(json.loads(entry.read_text()).get("apps", {}))
    checkpoint = table / "_mergetree" / "log" / "checkpoint.json"
    if checkpoint.exists():
        found.update(json.loads(checkpoint.read_text()).get("apps", {}))
    return found

"""A write job's staged parts live exactly as long as its driver's lease at the coordinator
(txn/job_lease.py), on every coordinator backend: never lost to age while the driver lives, garbage
once the driver is gone or the job ended."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from spark_mergetree.errors import TransactionError
from spark_mergetree.txn import Coordinator, TableLog, TxnState, job_lease
from spark_mergetree.txn.table_log import JOBS_DIRECTORY, STAGED_LIFETIME
from tests.txn.conftest import write_part

TWO_HOURS = 2 * 3600.0


def _driver() -> subprocess.Popen[bytes]:
    """A process standing for the Spark driver's JVM (it sleeps; the test kills it)."""
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])


def _stage_leftovers(table: Path, tag: str) -> list[str]:
    """A staged part of the job, and the directory of a task killed while writing its part (parts
    are written as tmp_<name>, then renamed), both last touched two hours ago."""
    names = [write_part(table, f"staged_{tag}_0a1b2c3d_0")]
    killed = table / f"tmp_staged_{tag}_4e5f6a7b_1"
    killed.mkdir()
    (killed / "data.bin").write_bytes(b"half a part")
    names.append(killed.name)
    past = time.time() - TWO_HOURS
    for name in names:
        os.utime(table / name, (past, past))
    return names


def _age_registration(table: Path, tag: str) -> None:
    """The job's registration as if its tasks last staged two hours ago (past the old lifetime)."""
    path = table / JOBS_DIRECTORY / f"{tag}.json"
    record = json.loads(path.read_bytes())
    record["active"] = time.time() - TWO_HOURS
    path.write_text(json.dumps(record))
    assert time.time() - record["active"] > STAGED_LIFETIME


def _wait_until_ended(coordinator: Coordinator, tid: int, seconds: float = 60.0) -> TxnState:
    deadline = time.monotonic() + seconds
    state = coordinator.status(tid)[0]
    while state is TxnState.RUNNING and time.monotonic() < deadline:
        time.sleep(0.2)
        state = coordinator.status(tid)[0]
    return state


def test_a_job_keeps_its_staged_parts_while_its_driver_lives_and_loses_them_when_it_dies(
        coordinator_url: str, coordinator: Coordinator, tmp_path: Path) -> None:
    table = tmp_path / "t"
    table.mkdir()
    log = TableLog(table)
    driver = _driver()
    try:
        tid = job_lease.start(table, coordinator_url, "job1", driver=driver.pid)
        assert coordinator.status(tid)[0] is TxnState.RUNNING
        names = _stage_leftovers(table, "job1")
        log.register_job("job1")  # a task staging for the job: its driver's lease stays
        _age_registration(table, "job1")
        lease = json.loads((table / JOBS_DIRECTORY / "job1.lease").read_bytes())
        assert lease["leases"] == [{"coordinator": coordinator_url, "tid": tid}]

        log.cleanup(coordinator)
        log.recover(coordinator)
        assert all((table / name).is_dir() for name in names), "a live job lost its staged parts to their age"
        assert log.job_alive("job1")

        driver.kill()
        driver.wait(timeout=30)
        assert _wait_until_ended(coordinator, tid) is TxnState.ABORTED, "the lease outlived its driver"
        log.cleanup(coordinator)
        assert [name for name in names if (table / name).exists()] == []
        assert not log.job_alive("job1") and log.job_ended("job1")
        with pytest.raises(TransactionError, match="has ended"):
            log.register_job("job1")  # a zombie task of the dead driver's job stages nothing
    finally:
        driver.kill()
        driver.wait(timeout=30)


def test_the_lease_ends_with_the_job_and_its_leftovers_go_at_once(
        coordinator_url: str, coordinator: Coordinator, tmp_path: Path) -> None:
    table = tmp_path / "t"
    table.mkdir()
    log = TableLog(table)
    driver = _driver()
    try:
        tid = job_lease.start(table, coordinator_url, "job2", driver=driver.pid)
        names = _stage_leftovers(table, "job2")
        log.end_job("job2")  # the job's commit (or abort) ends it
        assert _wait_until_ended(coordinator, tid) is TxnState.ABORTED, "the lease outlived its job"
        log.cleanup(coordinator)
        assert [name for name in names if (table / name).exists()] == []
        assert driver.poll() is None  # the driver lives on; only the job ended
    finally:
        driver.kill()
        driver.wait(timeout=30)


def test_a_lease_cannot_start_for_a_driver_that_is_gone(coordinator_url: str, tmp_path: Path) -> None:
    driver = _driver()
    driver.kill()
    driver.wait(timeout=30)
    with pytest.raises(TransactionError, match=rf"write job job3 of {tmp_path}.*driver process {driver.pid} "
                                               "is not running"):
        job_lease.start(tmp_path, coordinator_url, "job3", driver=driver.pid)
    assert not TableLog(tmp_path).job_alive("job3")


def test_a_keeper_started_after_its_job_ended_exits_quietly(coordinator_url: str, tmp_path: Path) -> None:
    """A short Spark write can commit before its keeper has started (the planner does not wait for
    it): the keeper then has nothing to hold, and says nothing on the driver's log."""
    TableLog(tmp_path).end_job("job4")
    driver = _driver()
    try:
        command = [sys.executable, "-m", "spark_mergetree.txn.job_lease", str(tmp_path), coordinator_url, "job4",
                   str(driver.pid)]
        done = subprocess.run(command, capture_output=True, timeout=120)
        assert (done.returncode, done.stdout, done.stderr) == (0, b"ended job4\n", b"")
        assert job_lease.start(tmp_path, coordinator_url, "job4", driver=driver.pid) is None
    finally:
        driver.kill()
        driver.wait(timeout=30)
    assert not TableLog(tmp_path).job_alive("job4")


def test_a_lease_starts_from_a_process_holding_many_files(coordinator_url: str, tmp_path: Path) -> None:
    """A long-lived Spark worker may hold more than a thousand descriptors: the planner's wait for
    the keeper must not depend on select()'s 1024 limit."""
    held: list[int] = []
    driver = _driver()
    try:
        while not held or held[-1] <= 1100:  # bounded: one descriptor more each time, until past 1100
            held.append(os.open(os.devnull, os.O_RDONLY))
        tid = job_lease.start(tmp_path, coordinator_url, "job5", driver=driver.pid)
        assert tid is not None and TableLog(tmp_path).job_leased("job5")
    finally:
        for descriptor in held:
            os.close(descriptor)
        driver.kill()
        driver.wait(timeout=30)

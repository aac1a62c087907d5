"""The torture harness (tests/torture.py), short runs: every process type at once on three tables,
random kill -9, and with ZooKeeper the coordinator stopped and started; then every invariant (a minute
each with pytest --exhaustive)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.budget import scaled
from tests.torture import TortureConfig, TortureReport, run_torture

pytestmark = pytest.mark.long  # a minute or more: scheduled early (tests/conftest.py)


def test_torture_with_the_local_coordinator(tmp_path: Path) -> None:
    report = run_torture(tmp_path / "run", TortureConfig(seconds=scaled(10, 60), writers=3, seed=11))
    assert report.operations["writer"] > 20 and report.operations["transfer"] > 5
    assert report.kills >= 5
    assert report.violations == [], "\n".join(report.violations)


def test_torture_with_zookeeper_outages(tmp_path: Path) -> None:
    report = run_torture(tmp_path / "run", TortureConfig(seconds=scaled(15, 60), writers=3, zookeeper=True, seed=12,
                                                         outage_interval=(3.0, 6.0), least_outages=2))
    assert report.operations["writer"] > 10 and report.outages >= 2
    assert report.violations == [], "\n".join(report.violations)


def _history_run(tmp_path: Path, seed: int, least: int = 100, seconds: float = 35,
                 kill_interval: tuple[float, float] = (1.0, 3.0), **faults: object) -> TortureReport:
    """History clients (real tables and the transaction layer alone) beside a writer and the merge
    and cleanup processes, kill -9 of any of them; stops at a few thousand transactions or when
    the time is up; the history is then checked for every anomaly snapshot isolation forbids.
    `least`: transactions the run must reach even on a loaded machine (an idle one does thousands): a
    run short of them goes on past its time, up to twice as long."""
    config = TortureConfig(seconds=scaled(seconds, 120), writers=1, transfers=0, readers=0, clients=1, log_clients=4,
                           max_transactions=scaled(3000, 20000), seed=seed, kill_interval=kill_interval,
                           maintenance_pause=(0.3, 1.0), least_transactions=least, **faults)  # type: ignore[arg-type]
    report = run_torture(tmp_path / "run", config)
    assert report.violations == [], "\n".join(report.violations[:20])
    assert report.anomalies == {}, report.history_check
    assert report.transactions >= least and report.outcomes.get("ok", 0) >= least * 0.8, report
    assert report.kills >= 5
    return report


def test_history_with_the_local_coordinator_has_no_anomalies(tmp_path: Path) -> None:
    _history_run(tmp_path, 31)


def test_history_with_zookeeper_restarts_has_no_anomalies(tmp_path: Path) -> None:
    report = _history_run(tmp_path, 32, zookeeper=True, outage_interval=(4.0, 8.0), least_outages=2)
    assert report.outages >= 2


def test_history_with_the_object_store_coordinator_and_latency_has_no_anomalies(tmp_path: Path) -> None:
    # Every begin and commit is a compare-and-swap of one object on a moto server: tens of
    # transactions a second at best, a few on a loaded machine; fewer kills, so that some finish.
    report = _history_run(tmp_path, 33, least=10, seconds=30, kill_interval=(2.0, 5.0), objstore=True, latency=0.005,
                          outage_interval=(4.0, 8.0), least_outages=2)
    assert report.outages >= 2  # latency spikes


def test_a_coordinator_without_first_committer_wins_is_caught(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The harness and the checker together find a real bug: with removals neither locked nor
    checked by the coordinator (patched before the workers fork), register writers overwrite the same
    version (lost updates) and registers end up with several lists at once."""
    import tests.torture
    from spark_mergetree.txn.local import LocalCoordinator

    commit = LocalCoordinator.commit
    monkeypatch.setattr(LocalCoordinator, "commit", lambda self, tid, removals=(), tables=(): commit(self, tid, (), tables))
    monkeypatch.setattr(LocalCoordinator, "lock_removal", lambda self, tid, table_id, part_name: None)
    monkeypatch.setattr(tests.torture, "REGISTERS", 2)  # more transactions meet on each register
    config = TortureConfig(seconds=scaled(15, 30), writers=0, transfers=0, readers=0, overwriters=0, clients=0,
                           log_clients=3, seed=41, kill_interval=(3.0, 6.0), maintenance_pause=(0.5, 1.0))
    report = run_torture(tmp_path / "run", config)
    assert report.anomalies.get("lost-update", 0) >= 1, report.history_check
    assert any(v.startswith("history: lost-update") for v in report.violations)

"""The torture harness (tests/torture.py), short runs: every process type at once on three tables,
random kill -9, and with ZooKeeper the coordinator stopped and started; then every invariant (a minute
each with pytest --exhaustive)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.budget import scaled
from tests.torture import TortureConfig, run_torture

pytestmark = pytest.mark.long  # a minute or more: scheduled early (tests/conftest.py)


def test_torture_with_the_local_coordinator(tmp_path: Path) -> None:
    report = run_torture(tmp_path / "run", TortureConfig(seconds=scaled(10, 60), writers=3, seed=11))
    assert report.operations["writer"] > 20 and report.operations["transfer"] > 5
    assert report.kills >= 5
    assert report.violations == [], "\n".join(report.violations)


def test_torture_with_zookeeper_outages(tmp_path: Path) -> None:
    report = run_torture(tmp_path / "run", TortureConfig(seconds=scaled(15, 60), writers=3, zookeeper=True, seed=12,
                                                         outage_interval=(3.0, 6.0)))
    assert report.operations["writer"] > 10 and report.outages >= 2
    assert report.violations == [], "\n".join(report.violations)

"""The examples run in the test suite, so they never rot."""

from __future__ import annotations

import importlib.util
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_demo_runs_and_reports_consistent_figures(spark, tmp_path):
    figures = _load("demo").run(spark, tmp_path, rows=30_000)
    assert figures["hits"] == 1000
    assert figures["granules_read"] <= 2 * 8  # at most 2 granules in each part
    assert figures["january"] == sum(1 for i in range(30_000) if i % 120 < 31)
    assert figures["after"] == 60_000  # the committed append counted once, the rolled-back one never
    assert figures["days"] == 120
    assert figures["check_ok"]

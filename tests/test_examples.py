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


def test_demo_runs_and_reports_consistent_figures(spark, tmp_path, capsys):
    figures = _load("demo").run(spark, tmp_path, rows=30_000)
    printed = capsys.readouterr().out
    # The cold first query is labelled as such, beside the repeated one, never shown as the speed.
    assert f"first query (cold: Python workers start) {figures['first_seconds']:.2f}s" in printed
    assert f"repeated (warm) {figures['repeated_seconds']:.2f}s" in printed
    assert figures["hits"] == 1000
    assert figures["granules_read"] <= 2 * 8  # at most 2 granules in each part
    assert figures["january"] == sum(1 for i in range(30_000) if i % 120 < 31)
    assert figures["after"] == 60_000  # the committed append counted once, the rolled-back one never
    assert figures["days"] == 120
    assert figures["check_ok"]


def _job_env(tmp_path: Path) -> dict[str, str]:
    import os
    import sys

    # Nothing of the tests' own Spark session (a Connect one sets variables of its own) leaks in.
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("SPARK_CONNECT", "SPARK_LOCAL_REMOTE", "SPARK_REMOTE", "PYSPARK_"))}
    return dict(env, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable,
                PYTHONPATH=str(EXAMPLES.parent), SPARK_MERGETREE_COORDINATOR=(tmp_path / "coord").as_uri())


def test_spark_submit_job_runs(tmp_path):
    """examples/spark_job.py as users run it: spark-submit, its own SparkSession."""
    import subprocess

    import pyspark

    submit = Path(pyspark.__file__).parent / "bin" / "spark-submit"
    result = subprocess.run(
        [str(submit), "--master", "local[2]", "--conf", "spark.ui.enabled=false",
         str(EXAMPLES / "spark_job.py"), str(tmp_path / "tables"), "--rows", "20000"],
        capture_output=True, text=True, env=_job_env(tmp_path), timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "classic session" in result.stdout
    assert "after the transaction: 40000 events, 90 daily totals" in result.stdout


def test_the_same_job_runs_against_a_spark_connect_server(tmp_path):
    """Unchanged, as a Spark Connect client (SPARK_REMOTE; `local[2]` starts a local server)."""
    import subprocess
    import sys

    env = dict(_job_env(tmp_path), SPARK_REMOTE="local[2]")
    result = subprocess.run([sys.executable, str(EXAMPLES / "spark_job.py"), str(tmp_path / "tables"),
                             "--rows", "20000"], capture_output=True, text=True, env=env, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Spark Connect session" in result.stdout
    assert "after the transaction: 40000 events, 90 daily totals" in result.stdout

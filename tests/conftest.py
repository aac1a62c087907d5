"""Shared fixtures: one local SparkSession for the whole test session, created on first use.

The session runs `local[2,3]`: two cores, and up to three attempts per task, so a test can make a
task fail on its first attempt and watch Spark retry it. Filter pushdown is on, as users who want
pruning would set it. Workers run this interpreter and import the package from the repository.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent


def _python_path_with_repo() -> str:
    parts = [str(REPO_ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return os.pathsep.join(dict.fromkeys(parts))


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    # Python workers inherit the environment of the JVM, which inherits ours.
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ["PYTHONPATH"] = _python_path_with_repo()
    # Transactions of the tests use their own coordinator directory, never the user's default.
    os.environ.setdefault(
        "SPARK_MERGETREE_COORDINATOR", (tmp_path_factory.mktemp("coordinator")).resolve().as_uri()
    )
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2,3]")
        .appName("spark-mergetree-tests")
        .config("spark.sql.python.filterPushdown.enabled", "true")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", "1g")
        .config("spark.executorEnv.PYTHONPATH", os.environ["PYTHONPATH"])
        .config("spark.python.worker.reuse", "true")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    try:
        yield session
    finally:
        session.stop()

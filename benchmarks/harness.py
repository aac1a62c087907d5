"""What the benchmarks share: a coordinator of their own, a local SparkSession set up with
spark_mergetree.configure (its Python workers import this checkout), and warm median timings."""

from __future__ import annotations

import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent


def private_coordinator(work: Path) -> str:
    """Make the benchmark's transactions commit to a coordinator under `work` (unless one is set), so
    no benchmark writes into the user's own (~/.spark_mergetree); set before a SparkSession starts,
    its Python workers inherit it."""
    if not os.environ.get("SPARK_MERGETREE_COORDINATOR", "").strip():
        # An empty value counts as unset: the package would fall back to the user's coordinator.
        os.environ["SPARK_MERGETREE_COORDINATOR"] = (Path(work).resolve() / "coordinator").as_uri()
    return os.environ["SPARK_MERGETREE_COORDINATOR"]


def local_session(app: str, settings: dict[str, str], extra_paths: tuple[str, ...] = ()) -> Any:
    """local[2] with `settings`, set up by spark_mergetree.configure; workers run this interpreter
    with this checkout (and `extra_paths`) first on their path."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(REPO_ROOT), *extra_paths] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
    from pyspark.sql import SparkSession

    import spark_mergetree

    builder = (SparkSession.builder.master("local[2]").appName(app)
               .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false"))
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = spark_mergetree.configure(builder).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def warm_median(runs: int, action: Callable[[], object]) -> tuple[float, object]:
    """Median seconds of `runs` timed runs after one untimed warm-up run, and the last result."""
    result = action()
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        result = action()
        times.append(time.perf_counter() - started)
    return statistics.median(times), result

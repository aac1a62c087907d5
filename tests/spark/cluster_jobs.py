"""What the drivers of tests/spark/test_standalone_cluster.py run: `serve()` is a driver process of the
standalone cluster (tests/spark_cluster.py `Application`), the other functions are the jobs it runs
by name, each `f(spark, **kwargs)` returning JSON.

The same functions run on a classic session and on a Spark Connect client (no SparkContext is used
but for the application id of a classic session). `paced` slows chosen tasks of a write down from
inside their own Python worker (mapInArrow), and leaves a marker file per task attempt saying which
executor JVM (pid, host) runs it: the test kills that executor, or watches a speculative copy run
on the other host.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

EXECUTOR_CLASS = "org.apache.spark.executor.CoarseGrainedExecutorBackend"
ROWS_SQL = ["id", "id % 5 AS g", "concat('row-', cast(id AS string)) AS s"]


def serve() -> None:
    """argv: the JSON config, the fd to answer on. Reads one JSON call per line from stdin until it
    ends, then stops the session."""
    config, answers = json.loads(sys.argv[1]), os.fdopen(int(sys.argv[2]), "w")

    def answer(payload: dict[str, Any]) -> None:
        answers.write(json.dumps(payload) + "\n")
        answers.flush()

    try:
        spark = _session(config)
        answer({"result": {"app_id": app_id(spark)}})
    except BaseException:
        answer({"error": traceback.format_exc()})
        raise
    try:
        for line in sys.stdin:
            request = json.loads(line)
            try:
                result = globals()[request["call"]](spark, **request["kwargs"])
                answer({"result": result})
            except Exception:
                answer({"error": traceback.format_exc()})
    finally:
        spark.stop()


def _session(config: dict[str, Any]) -> Any:
    from pyspark.sql import SparkSession

    import spark_mergetree

    if config["remote"]:
        builder = SparkSession.builder.remote(config["remote"])  # the server has mergetree's settings
    else:
        builder = spark_mergetree.configure(SparkSession.builder.master(config["master"]))
        for key, value in {"spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1",
                           "spark.driver.memory": "512m", "spark.executor.memory": "512m",
                           "spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "2",
                           "spark.python.worker.reuse": "true",
                           "spark.ui.showConsoleProgress": "false"}.items():
            builder = builder.config(key, value)
        builder = builder.appName(config["app_name"])
    for key, value in config["confs"].items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    if not config["remote"]:
        spark.sparkContext.setLogLevel("WARN")
    spark_mergetree.register(spark)
    return spark


def app_id(spark: Any) -> str:
    return str(spark.conf.get("spark.app.id"))


# --- jobs --------------------------------------------------------------------------------------------

def rows(spark: Any, start: int, end: int, partitions: int, batch: int | None = None) -> Any:
    df = spark.range(start, end, 1, partitions).selectExpr(*ROWS_SQL)
    return df if batch is None else df.selectExpr("*", f"{int(batch)} AS batch")


def write(spark: Any, path: str, start: int, end: int, partitions: int = 2, options: dict[str, str] | None = None,
          mode: str = "append", batch: int | None = None, pace: dict[str, Any] | None = None) -> dict[str, Any]:
    df = rows(spark, start, end, partitions, batch)
    if pace is not None:
        df = df.mapInArrow(_pacer(pace), df.schema)
    began = time.monotonic()
    df.write.format("mergetree").options(**(options or {})).mode(mode).save(path)
    return {"seconds": time.monotonic() - began}


def stats(spark: Any, path: str, options: dict[str, str] | None = None, where: str | None = None) -> dict[str, Any]:
    df = spark.read.format("mergetree").options(**(options or {})).load(path)
    if where:
        df = df.filter(where)
    row = df.selectExpr("count(*) AS n", "count(DISTINCT id) AS distinct_ids", "coalesce(sum(id), 0) AS total",
                        "min(id) AS low", "max(id) AS high",
                        "count_if(s = concat('row-', cast(id AS string)) AND g = id % 5) AS intact").first()
    return {"rows": row.n, "distinct": row.distinct_ids, "sum": int(row.total), "min": row.low, "max": row.high,
            "intact": row.intact}


def batches(spark: Any, path: str, options: dict[str, str] | None = None) -> dict[str, int]:
    df = spark.read.format("mergetree").options(**(options or {})).load(path)
    return {str(r.batch): r.n for r in df.groupBy("batch").agg({"*": "count"}).toDF("batch", "n").collect()}


def two_tables(spark: Any, first: str, second: str, start: int, end: int, coordinator: str, read: str,
               options: dict[str, str] | None = None, create: dict[str, str] | None = None,
               rollback: bool = False) -> dict[str, Any]:
    """Appends rows [start, end) to both tables in one transaction(spark) (`create`: the write options
    of a new table); `stats` of `read` inside it."""
    import spark_mergetree

    with spark_mergetree.transaction(spark, coordinator=coordinator) as tx:
        write(spark, first, start, end, 2, options)
        write(spark, second, start, end, 2, {**(options or {}), **(create or {})})
        inside = stats(spark, read, options)
        if rollback:
            tx.rollback()
    return inside


# --- pacing tasks (runs in the executors' Python workers) ----------------------------------------------

def executor_of(pid: int) -> tuple[int, str]:
    """(pid, --hostname) of the executor JVM above a process of its (a Python worker)."""
    while pid > 1:
        args = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
        if EXECUTOR_CLASS in args:
            return pid, args[args.index("--hostname") + 1]
        stat = Path(f"/proc/{pid}/stat").read_text()
        pid = int(stat.rsplit(")", 1)[1].split()[1])
    raise RuntimeError(f"process {os.getpid()} runs under no executor JVM")


def _pacer(pace: dict[str, Any]) -> Any:
    """A mapInArrow function that passes batches on and, in the task attempts `pace` names, sleeps
    `seconds` after the first `after_rows` rows: `partitions` (None: all), `attempts` (attempt numbers
    to slow, e.g. [0]). Every attempt writes `markers/<partition>-<attempt>` = {pid, host, executor}."""
    markers, seconds, after_rows = Path(pace["markers"]), float(pace["seconds"]), int(pace.get("after_rows", 0))
    partitions, attempts = pace.get("partitions"), pace.get("attempts", [0])

    def run(batches: Any) -> Any:
        from pyspark import TaskContext

        context = TaskContext.get()
        partition, attempt = context.partitionId(), context.attemptNumber()
        executor, host = executor_of(os.getpid())
        marker = markers / f"{partition}-{attempt}"
        slow = (partitions is None or partition in partitions) and attempt in attempts
        passed, slept = 0, not slow
        for batch in batches:
            yield batch
            passed += batch.num_rows
            if not slept and passed >= after_rows:
                slept = True
                _mark(marker, {"pid": os.getpid(), "executor": executor, "host": host, "slow": True})
                time.sleep(seconds)
        _mark(marker, {"pid": os.getpid(), "executor": executor, "host": host, "slow": slow, "done": True})

    return run


def _mark(marker: Path, content: dict[str, Any]) -> None:
    temporary = marker.with_name(f".{marker.name}.{os.getpid()}")
    temporary.write_text(json.dumps(content))
    os.replace(temporary, marker)

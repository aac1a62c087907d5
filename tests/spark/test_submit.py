"""The session extension in applications started by spark-submit, whose JVM runs before the Python
script does: `configure(SparkSession.builder)` in the job gives its session column pruning; a
session created before `configure` (as in a pyspark shell) cannot get it, and `configure` says so
with the exact spark-submit arguments, which `mergetree spark-submit-args` prints too; started
with those, the job's reads are pruned.

Each case is a real `spark-submit --master local[1]` of the pip-installed pyspark (a JVM of its
own: the tests' shared session is not used).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from spark_mergetree import jvm

pytestmark = pytest.mark.long  # a minute or more: scheduled early (tests/conftest.py)

REPO = Path(__file__).resolve().parent.parent.parent

JOB = """
import sys
from pyspark.sql import SparkSession
import spark_mergetree

path, mode = sys.argv[1], sys.argv[2]
if mode == "configure":
    spark = spark_mergetree.configure(SparkSession.builder).getOrCreate()
else:  # "late": the session exists before configure is called
    spark = SparkSession.builder.getOrCreate()
    spark_mergetree.configure(SparkSession.builder)
spark.range(1000).selectExpr("id", "id * 2 AS a", "id * 3 AS b").write.format("mergetree") \\
    .option("order_by", "id").mode("append").save(path)
df = spark.read.format("mergetree").load(path).filter("a >= 100").select("a")
df.explain()
print("ROWS", df.count(), flush=True)
spark.stop()
"""


def _spark_submit(tmp_path: Path, mode: str, args: list[str]) -> tuple[list[str], str]:
    """Runs the job; (the columns its mergetree scan reads, its output: spark-submit passes the
    driver's Python stderr on to its stdout; Python workers' stderr goes to its stderr)."""
    import pyspark

    job = tmp_path / "job.py"
    job.write_text(JOB)
    table = tmp_path / f"table_{mode}_{len(args)}"
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable,
               PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep))
    env.pop("SPARK_HOME", None)
    submit = Path(pyspark.__file__).parent / "bin" / "spark-submit"
    done = subprocess.run([str(submit), "--master", "local[1]", "--driver-memory", "768m",
                           "--conf", "spark.ui.enabled=false", "--conf", "spark.sql.shuffle.partitions=1",
                           *args, str(job), str(table), mode],
                          env=env, capture_output=True, text=True, timeout=400)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]
    assert "ROWS 950" in done.stdout
    scans = re.findall(r"BatchScan mergetree\[([^\]]*)\]", done.stdout)
    assert len(scans) == 1, done.stdout
    return sorted(re.sub(r"#\d+L?", "", column).strip() for column in scans[0].split(",")), done.stdout + done.stderr


def test_configure_in_a_spark_submit_job_prunes(tmp_path: Path) -> None:
    jvm.ensure_extension()
    columns, err = _spark_submit(tmp_path, "configure", [])
    assert "ClassNotFoundException" not in err
    assert columns == ["a"]
    assert "spark_mergetree.configure(" not in err  # the read's hint: not needed


def test_a_late_configure_prints_the_arguments_that_prune(tmp_path: Path) -> None:
    jvm.ensure_extension()
    columns, err = _spark_submit(tmp_path, "late", [])
    assert columns == ["a", "b", "id"]  # no extension: every column is read
    warning = re.findall(r"already running without the mergetree session extension.*"
                         r"start the application with `([^`]*)` \(`mergetree spark-submit-args` prints them\)", err)
    assert len(warning) == 1, err[-6000:]
    printed = subprocess.run([sys.executable, "-m", "spark_mergetree", "spark-submit-args"], cwd=REPO,
                             capture_output=True, text=True, timeout=120, check=True).stdout.strip()
    assert warning[0] == printed
    assert f"--jars {jvm.JAR_PATH}" in printed and f"spark.sql.extensions={jvm.EXTENSION_CLASS}" in printed
    # The read's hint (from the planning Python worker) names them too, after configure's warning.
    assert err.count(f"start the application with `{printed}`") >= 2 and "spark_mergetree.configure(" in err

    columns, err = _spark_submit(tmp_path, "late", shlex.split(printed))
    assert columns == ["a"]
    assert "already running without the mergetree session extension" not in err
    assert "spark_mergetree.configure(" not in err


def test_spark_submit_args_command(tmp_path: Path, monkeypatch) -> None:
    from click.testing import CliRunner

    from spark_mergetree.cli import main

    jar = jvm.ensure_extension()
    line = CliRunner().invoke(main, ["spark-submit-args"])
    assert line.exit_code == 0 and line.output.count("\n") == 1
    assert shlex.split(line.output)[:4] == ["--jars", str(jar), "--conf", f"spark.sql.extensions={jvm.EXTENSION_CLASS}"]
    defaults = CliRunner().invoke(main, ["spark-submit-args", "--spark-defaults"])
    assert defaults.exit_code == 0
    assert defaults.output.splitlines()[:3] == [f"spark.jars {jar}", f"spark.sql.extensions {jvm.EXTENSION_CLASS}",
                                                f"{jvm.PUSHDOWN_CONF} true"]
    monkeypatch.setattr(jvm, "JAR_PATH", tmp_path / "missing.jar")  # a package installed without the jar
    missing = CliRunner().invoke(main, ["spark-submit-args"])
    assert missing.exit_code != 0 and "is not built: run scripts/build-jvm" in missing.output

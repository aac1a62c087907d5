"""format("mergetree") is found by a fresh Spark however the package was installed.

Spark registers Python data sources by listing top-level `pyspark_*` modules with
pkgutil.iter_modules(), which sees only sys.path entries, not import hooks. An editable install
(`pip install -e .`, as scripts/test does) must therefore put the checkout itself on sys.path.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.spark

REPO_ROOT = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent("""
    import pkgutil, sys
    import spark_mergetree
    from pyspark.sql import SparkSession

    print("module", spark_mergetree.__file__)
    print("found", [m.name for m in pkgutil.iter_modules() if m.name == "pyspark_mergetree"])
    spark = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", "1").getOrCreate())
    path = sys.argv[1]
    spark.range(3).write.format("mergetree").option("order_by", "id").mode("append").save(path)
    print("rows", spark.read.format("mergetree").load(path).count())
    spark.stop()
""")


def test_editable_install_is_found_by_a_fresh_spark_without_register(tmp_path: Path) -> None:
    # A virtual environment of its own (the machine's packages visible), so the install under
    # test is exactly what `pip install -e .` makes of this checkout.
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", "--no-deps",
                    "--disable-pip-version-check", "--editable", str(REPO_ROOT)],
                   check=True, cwd=tmp_path, capture_output=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "PYSPARK_DRIVER_PYTHON")}
    env["PYSPARK_PYTHON"] = str(python)
    result = subprocess.run([str(python), "-c", SCRIPT, str(tmp_path / "table")], cwd=elsewhere, env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = dict(line.split(" ", 1) for line in result.stdout.splitlines() if " " in line)
    assert lines["module"].startswith(str(REPO_ROOT)), lines
    assert lines["found"] == "['pyspark_mergetree']"
    assert lines["rows"] == "3"


def test_spark_lookup_of_the_module_imports_nothing_heavy_and_builds_the_real_source() -> None:
    # Spark's lookup step imports every pyspark_* module in a new process whichever Python source
    # a session uses first: it must not pay for pyarrow or the engine.
    probe = textwrap.dedent("""
        import sys
        import pyspark.sql.datasource
        before = set(sys.modules)
        import pyspark_mergetree
        loaded = sorted(set(sys.modules) - before - {"pyspark_mergetree"})
        print("loaded", [m for m in loaded if m.startswith(("spark_mergetree", "pyarrow", "numpy"))])
        from spark_mergetree.spark.source import SOURCE_NAME, MergeTreeDataSource
        source = pyspark_mergetree.DefaultSource({"path": "/nowhere"})
        print("built", type(source) is MergeTreeDataSource, source.options["path"])
        print("named", pyspark_mergetree.DefaultSource.name() == SOURCE_NAME == MergeTreeDataSource.name())
    """)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")])}
    result = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = dict(line.split(" ", 1) for line in result.stdout.splitlines() if " " in line)
    assert lines == {"loaded": "[]", "built": "True /nowhere", "named": "True"}, result.stdout

"""A wheel carries the Spark session extension's jar, or its build fails saying what is missing; and
the jar builds (scripts/build-jvm) in a virtualenv that has pyspark and nothing else.

Every build runs on a copy of the checkout in a temporary directory (pip builds in the source
tree), with `pip wheel --no-deps`, pip's isolated build environment included, as the README says.
"""

from __future__ import annotations

import importlib.util
import io
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from spark_mergetree import jvm

pytestmark = pytest.mark.long  # a minute or more: scheduled early (tests/conftest.py)

REPO = Path(__file__).resolve().parent.parent
JAR = "spark_mergetree/jars/spark-mergetree-extensions.jar"
EXTENSION_CLASS_FILE = "spark_mergetree/spark/MergeTreeExtensions.class"


def _pyspark_dir() -> Path:
    spec = importlib.util.find_spec("pyspark")
    assert spec is not None and spec.origin
    return Path(spec.origin).parent


def _source_tree(tmp_path: Path, with_jar: bool) -> Path:
    """The files a wheel is built from, copied with their times (the jar stays newer than jvm/src)."""
    tree = tmp_path / "checkout"
    tree.mkdir()
    for name in ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md", "pyspark_mergetree.py"):
        shutil.copy2(REPO / name, tree / name)
    for name in ("jvm", "scripts"):
        shutil.copytree(REPO / name, tree / name)
    shutil.copytree(REPO / "spark_mergetree", tree / "spark_mergetree",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "jars"))
    if with_jar:
        built = jvm.ensure_extension()  # the checkout's jar, as scripts/build-jvm leaves it
        (tree / JAR).parent.mkdir(parents=True)
        shutil.copy2(built, tree / JAR)
    return tree


def _pip_wheel(tree: Path, out: Path, spark_home: Path | None) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if key != "SPARK_HOME"}
    if spark_home is not None:
        env["SPARK_HOME"] = str(spark_home)
    return subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), "."],
                          cwd=tree, env=env, capture_output=True, text=True, timeout=600)


def _wheel_jar(out: Path) -> zipfile.ZipFile:
    wheels = sorted(out.glob("spark_mergetree-*.whl"))
    assert len(wheels) == 1, wheels
    with zipfile.ZipFile(wheels[0]) as wheel:
        assert JAR in wheel.namelist(), wheel.namelist()
        return zipfile.ZipFile(io.BytesIO(wheel.read(JAR)))


def test_pip_wheel_includes_the_built_jar(tmp_path: Path) -> None:
    """A jar newer than its sources goes in as it is (pip's isolated environment has no pyspark to
    build one with, and no SPARK_HOME is set)."""
    tree = _source_tree(tmp_path, with_jar=True)
    done = _pip_wheel(tree, tmp_path / "wheels", spark_home=None)
    assert done.returncode == 0, done.stdout + done.stderr
    jar = _wheel_jar(tmp_path / "wheels")
    assert EXTENSION_CLASS_FILE in jar.namelist()
    with zipfile.ZipFile(tree / JAR) as built:
        assert {info.filename: info.CRC for info in jar.infolist()} == {info.filename: info.CRC
                                                                          for info in built.infolist()}


def test_pip_wheel_compiles_a_missing_jar(tmp_path: Path) -> None:
    """No jar in the tree: the build compiles it with javac against Spark's jars (SPARK_HOME here,
    the pyspark directory: the isolated build environment imports no pyspark)."""
    tree = _source_tree(tmp_path, with_jar=False)
    done = _pip_wheel(tree, tmp_path / "wheels", spark_home=_pyspark_dir())
    assert done.returncode == 0, done.stdout + done.stderr
    assert EXTENSION_CLASS_FILE in _wheel_jar(tmp_path / "wheels").namelist()


@pytest.mark.parametrize("jar_state", ["missing", "older than a source"])
def test_pip_wheel_without_spark_fails_naming_what_to_install(tmp_path: Path, jar_state: str) -> None:
    tree = _source_tree(tmp_path, with_jar=jar_state != "missing")
    if jar_state != "missing":
        source = next((tree / "jvm" / "src").rglob("*.java"))
        newer = (tree / JAR).stat().st_mtime + 60
        os.utime(source, (newer, newer))
    done = _pip_wheel(tree, tmp_path / "wheels", spark_home=None)
    assert done.returncode != 0
    assert not list((tmp_path / "wheels").glob("*.whl"))
    output = done.stdout + done.stderr
    for needed in ("session extension's jar", "no pyspark is importable", "SPARK_HOME", "javac",
                   "pip install 'pyspark>=4.0,<4.4'", "./scripts/build-jvm", "--no-build-isolation"):
        assert needed in output, (needed, output)


def test_build_jvm_runs_in_a_virtualenv_with_only_pyspark(tmp_path: Path) -> None:
    """scripts/build-jvm's Python (spark_mergetree.jvm) imports neither pyarrow nor numpy: it builds
    the jar with a `python3` that has pyspark (linked onto its path) and nothing else."""
    tree = _source_tree(tmp_path, with_jar=False)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    only_pyspark = tmp_path / "site"
    only_pyspark.mkdir()
    (only_pyspark / "pyspark").symlink_to(_pyspark_dir(), target_is_directory=True)
    env = {key: value for key, value in os.environ.items() if key not in ("SPARK_HOME", "PYTHONHOME")}
    env.update(PATH=f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}", PYTHONPATH=str(only_pyspark),
               VIRTUAL_ENV=str(venv))
    probe = subprocess.run(["python3", "-c", "import importlib.util as u, sys; print(sys.prefix); "
                            "print([m for m in ('pyspark', 'pyarrow', 'numpy') if u.find_spec(m)])"],
                           env=env, capture_output=True, text=True, timeout=60, check=True)
    assert probe.stdout.split("\n")[:2] == [str(venv), "['pyspark']"]  # the test would prove nothing else
    done = subprocess.run([str(tree / "scripts" / "build-jvm")], cwd=tree, env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    with zipfile.ZipFile(tree / JAR) as jar:
        assert EXTENSION_CLASS_FILE in jar.namelist()
    # Up to date: a second run leaves it alone.
    built = (tree / JAR).stat().st_mtime_ns
    subprocess.run([str(tree / "scripts" / "build-jvm")], cwd=tree, env=env, check=True, timeout=600)
    assert (tree / JAR).stat().st_mtime_ns == built

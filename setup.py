"""Wheel builds include the Spark session extension's jar, or fail saying why.

pyproject.toml holds the metadata; this only hooks `build_py`: before the package is copied, the
jar `spark_mergetree/jars/spark-mergetree-extensions.jar` must be newer than every Java source
under `jvm/src`; if it is not, it is compiled (`javac --release 17` against the jars of the pyspark
the building Python imports, or of $SPARK_HOME). Without a JDK or pyspark there the build stops and
names them. pip builds in an isolated environment that has no pyspark: run `./scripts/build-jvm`
first, or set SPARK_HOME (a Spark 4 or pyspark directory), or build with `pip wheel
--no-build-isolation --no-deps .` from a Python that has pyspark.
Editable installs (`pip install -e .`) are left alone: they use the checkout's jar directory.
"""

from __future__ import annotations

import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent


class BuildPyWithJar(build_py):
    def run(self) -> None:
        if not getattr(self, "editable_mode", False):
            sys.path.insert(0, str(ROOT))  # spark_mergetree.jvm needs only the standard library
            try:
                from spark_mergetree.jvm import ExtensionBuildError, ensure_extension
            finally:
                sys.path.remove(str(ROOT))
            try:
                ensure_extension(ROOT / "jvm" / "src", ROOT / "spark_mergetree" / "jars" / "spark-mergetree-extensions.jar")
            except ExtensionBuildError as exc:
                raise SystemExit(
                    "spark-mergetree: a wheel must contain the Spark session extension's jar, which is missing or "
                    f"older than jvm/src and cannot be built here: {exc}. Either run ./scripts/build-jvm first (then "
                    "`pip wheel --no-deps .` includes the jar), or set SPARK_HOME to a Spark 4 or pyspark directory, "
                    "or build with `pip wheel --no-build-isolation --no-deps .` from a Python that has pyspark, "
                    "setuptools>=68 and wheel") from exc
        super().run()


setup(cmdclass={"build_py": BuildPyWithJar})

"""The Spark session extension as files: its jar (compiled from the Java source in `jvm/src`), how
the jar is built, and the spark-submit arguments that load it.

Standard library only, and pyspark is never imported (only located): `scripts/build-jvm`, the wheel
build (`setup.py`) and `mergetree spark-submit-args` run this where pyarrow, numpy or pyspark may be
missing. `spark/session.py` puts the same settings on a SparkSession builder.
"""

from __future__ import annotations

import importlib.util
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from spark_mergetree.errors import MergeTreeError

EXTENSION_CLASS = "spark_mergetree.spark.MergeTreeExtensions"
JAR_NAME = "spark-mergetree-extensions.jar"
JAR_PATH = Path(__file__).resolve().parent / "jars" / JAR_NAME
# The Java source, in a source checkout (and in the sdist); an installed wheel has only the jar.
SOURCES = Path(__file__).resolve().parent.parent / "jvm" / "src"
PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"
UNIX_SOCKET_CONF = "spark.python.unix.domain.socket.enabled"
SUBMIT_ARGS_COMMAND = "mergetree spark-submit-args"

INSTALL_HINT = ("a JDK 17 or newer (javac; Debian/Ubuntu: apt-get install default-jdk-headless) and "
                "pyspark 4.x (pip install 'pyspark>=4.0,<4.4') in the building Python")


class ExtensionBuildError(MergeTreeError, RuntimeError):
    """The session extension's jar cannot be built here (says what is missing)."""


def extension_jar() -> Path | None:
    """The built extension jar shipped in the package, if it was built (scripts/build-jvm)."""
    return JAR_PATH if JAR_PATH.is_file() else None


def is_current(jar: Path = JAR_PATH, sources: Path = SOURCES) -> bool:
    """Whether `jar` exists and no Java source under `sources` (if there are any) is newer."""
    if not jar.is_file():
        return False
    built = jar.stat().st_mtime
    return all(path.stat().st_mtime <= built for path in sources.rglob("*.java")) if sources.is_dir() else True


def spark_jars() -> Path:
    """The directory of Spark's jars to compile against: the importable pyspark's, else $SPARK_HOME's."""
    spec = importlib.util.find_spec("pyspark")  # locates the package without importing it
    candidates = []
    if spec is not None and spec.origin:
        candidates.append(Path(spec.origin).parent / "jars")
    if os.environ.get("SPARK_HOME"):
        candidates.append(Path(os.environ["SPARK_HOME"]) / "jars")
    for candidate in candidates:
        if any(candidate.glob("spark-catalyst_*.jar")):
            return candidate
    raise ExtensionBuildError("building the mergetree session extension needs Spark's jars to compile against: "
                              f"no pyspark is importable here ({sys.executable}; pip's isolated build environments "
                              f"have none) and SPARK_HOME is not set; install {INSTALL_HINT}")


def build_extension(sources: Path = SOURCES, jar: Path = JAR_PATH, javac: str = "javac") -> Path:
    """Compile the Java sources under `sources` against Spark's jars (`spark_jars()`) into `jar`.

    Plain `javac --release 17`: the classes it needs (spark-catalyst, spark-sql, scala-library)
    ship in the pyspark wheel, and a jar compiled against one PySpark 4.x runs on the others.
    """
    java_files = sorted(str(path) for path in sources.rglob("*.java"))
    if not java_files:
        raise ExtensionBuildError(f"no Java sources of the mergetree session extension under {sources}")
    compiler = shutil.which(javac)
    if compiler is None:
        raise ExtensionBuildError(f"building the mergetree session extension needs {javac!r}, not found on PATH: "
                                  f"install {INSTALL_HINT}")
    classpath = f"{spark_jars()}/*"
    with tempfile.TemporaryDirectory(prefix="mergetree-jvm-") as classes:
        done = subprocess.run([compiler, "--release", "17", "-nowarn", "-cp", classpath, "-d", classes, *java_files],
                              capture_output=True, text=True, timeout=600)
        if done.returncode != 0:
            raise ExtensionBuildError(f"javac failed to compile the mergetree session extension against "
                                      f"{classpath} (a JDK 17 or newer is needed):\n{done.stdout}{done.stderr}")
        jar.parent.mkdir(parents=True, exist_ok=True)
        partial = jar.with_name(jar.name + ".tmp")
        with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as archive:
            archive.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\nCreated-By: spark-mergetree\n\n")
            for path in sorted(Path(classes).rglob("*.class")):
                archive.write(path, path.relative_to(classes).as_posix())
        os.replace(partial, jar)
    return jar


def ensure_extension(sources: Path = SOURCES, jar: Path = JAR_PATH) -> Path:
    """`jar`, built (again) first unless it is newer than every source."""
    return jar if is_current(jar, sources) else build_extension(sources, jar)


def has_unix_socket_workers() -> bool:
    """Whether the installed PySpark's Python workers can talk to the JVM over a Unix socket (4.1+)."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.origin:
        return False
    daemon = os.path.join(os.path.dirname(spec.origin), "daemon.py")
    # Through the loader: Python workers import pyspark from pyspark.zip.
    get_data = getattr(spec.loader, "get_data", None)
    try:
        source = get_data(daemon) if get_data is not None else Path(daemon).read_bytes()
    except OSError:
        return False
    return b"PYTHON_UNIX_DOMAIN_ENABLED" in source


def submit_confs(jar: Path, unix_socket: bool | None = None) -> dict[str, str]:
    """The settings `configure(builder)` adds, for a session whose JVM is started elsewhere
    (spark-submit, spark-defaults.conf, a cluster's Spark config)."""
    confs = {"spark.jars": str(jar), "spark.sql.extensions": EXTENSION_CLASS, PUSHDOWN_CONF: "true"}
    if has_unix_socket_workers() if unix_socket is None else unix_socket:
        confs[UNIX_SOCKET_CONF] = "true"
    return confs


def submit_args(jar: Path, unix_socket: bool | None = None) -> list[str]:
    """`submit_confs` as spark-submit arguments: `--jars <jar> --conf key=value ...`."""
    args = []
    for key, value in submit_confs(jar, unix_socket).items():
        args += ["--jars", value] if key == "spark.jars" else ["--conf", f"{key}={value}"]
    return args


def submit_line(jar: Path, unix_socket: bool | None = None) -> str:
    """`submit_args` as one shell-quoted line."""
    return shlex.join(submit_args(jar, unix_socket))

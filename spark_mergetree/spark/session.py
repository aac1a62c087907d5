"""One call that sets a SparkSession up for mergetree: `configure(builder)`.

It adds the session extension (a small JVM optimizer rule, Java source in `jvm/src/`, built into
`spark_mergetree/jars/` by `scripts/build-jvm`), which gives every scan of a mergetree table a data
source provider of its own with only the columns the query uses: column pruning for SQL and
DataFrames, and Spark's pushed filters pruning partitions and granules safely (docs/spark.md,
"Column pruning and pushed filters"). It also turns on what makes Python sources fast where this
PySpark has it: Python filter pushdown (4.1+) and the Unix-socket transport to Python workers (4.1+:
no ~40 ms TCP stall per task).

All of these are static settings: they take effect in a session started from the builder.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import tempfile
import warnings
import zipfile
from pathlib import Path
from typing import Any

from spark_mergetree.errors import UnsupportedError

EXTENSION_CLASS = "spark_mergetree.spark.MergeTreeExtensions"
JAR_NAME = "spark-mergetree-extensions.jar"
JAR_PATH = Path(__file__).resolve().parent.parent / "jars" / JAR_NAME
# Runtime switch of the rule (a session with the extension can turn it off and on per query).
ENABLED_CONF = "spark.mergetree.extension.enabled"
PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"
UNIX_SOCKET_CONF = "spark.python.unix.domain.socket.enabled"

ENABLE_HINT = (
    "format('mergetree') reads every column of the table and cannot prune by Spark's filters in this "
    "session: start it with spark_mergetree.configure(SparkSession.builder) (or spark.jars=<"
    f"{JAR_NAME}> and spark.sql.extensions={EXTENSION_CLASS}; docs/spark.md, 'Column pruning and "
    "pushed filters')")


def extension_jar() -> Path | None:
    """The built extension jar shipped in the package, if it was built (scripts/build-jvm)."""
    return JAR_PATH if JAR_PATH.is_file() else None


def configure(builder: Any, *, extension: bool = True, filter_pushdown: bool = True,
              unix_socket: bool = True) -> Any:
    """Add mergetree's settings to a `SparkSession.builder` (classic, or a local Spark Connect
    server started by `.remote("local[...]")`) and return it:

        spark = spark_mergetree.configure(SparkSession.builder.master("local[2]")).getOrCreate()

    `spark.jars` and `spark.sql.extensions` keep the values already set and get ours appended. A
    Spark Connect client of a server started elsewhere cannot set these (static) settings: the
    server must be started with them (docs/spark.md, "Spark Connect").
    """
    options = _builder_options(builder)
    if extension:
        jar = extension_jar()
        if jar is None:
            warnings.warn(f"{JAR_PATH} is not built (run scripts/build-jvm in the source checkout): the session "
                          "runs without column pruning and without pruning by Spark's filters", stacklevel=2)
        else:
            builder = builder.config("spark.jars", _append(options.get("spark.jars"), str(jar)))
            builder = builder.config("spark.sql.extensions", _append(options.get("spark.sql.extensions"),
                                                                     EXTENSION_CLASS))
            if filter_pushdown and PUSHDOWN_CONF not in options:
                # Safe with the extension only: each scan then plans its own read.
                builder = builder.config(PUSHDOWN_CONF, "true")
    if unix_socket and UNIX_SOCKET_CONF not in options and _has_unix_socket_workers():
        builder = builder.config(UNIX_SOCKET_CONF, "true")
    return builder


def _builder_options(builder: Any) -> dict[str, str]:
    options = getattr(builder, "_options", None)
    return dict(options) if isinstance(options, dict) else {}


def _append(current: str | None, value: str) -> str:
    items = [item.strip() for item in (current or "").split(",") if item.strip()]
    return ",".join(items if value in items else items + [value])


def _has_unix_socket_workers() -> bool:
    """Whether this PySpark's Python workers can talk to the JVM over a Unix socket (4.1+)."""
    spec = importlib.util.find_spec("pyspark.daemon")
    if spec is None or not spec.origin:
        return False
    try:
        return "PYTHON_UNIX_DOMAIN_ENABLED" in Path(spec.origin).read_text()
    except OSError:
        return False


# --------------------------------------------------------------------------------------- building


def build_extension(sources: Path, jar: Path = JAR_PATH, javac: str = "javac") -> Path:
    """Compile the Java sources under `sources` against the installed PySpark's jars into `jar`.

    Plain `javac --release 17`: the classes it needs (spark-catalyst, spark-sql, scala-library)
    ship in the pyspark wheel, and a jar compiled against one PySpark 4.x runs on the others.
    """
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.origin:
        raise UnsupportedError("building the mergetree extension needs pyspark installed")
    spark_jars = Path(spec.origin).parent / "jars"
    java_files = sorted(str(path) for path in sources.rglob("*.java"))
    if not java_files:
        raise UnsupportedError(f"no Java sources under {sources}")
    with tempfile.TemporaryDirectory(prefix="mergetree-jvm-") as classes:
        subprocess.run([javac, "--release", "17", "-nowarn", "-cp", f"{spark_jars}/*", "-d", classes, *java_files],
                       check=True)
        jar.parent.mkdir(parents=True, exist_ok=True)
        partial = jar.with_name(jar.name + ".tmp")
        with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as archive:
            archive.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\nCreated-By: spark-mergetree\n\n")
            for path in sorted(Path(classes).rglob("*.class")):
                archive.write(path, path.relative_to(classes).as_posix())
        os.replace(partial, jar)
    return jar

"""One call that sets a SparkSession up for mergetree: `configure(builder)`.

It adds the session extension (a small JVM optimizer rule, Java source in `jvm/src/`, built into
`spark_mergetree/jars/` by `scripts/build-jvm`), which gives every scan of a mergetree table a data
source provider of its own with only the columns the query uses: column pruning for SQL and
DataFrames, and Spark's pushed filters pruning partitions and granules safely (docs/spark.md,
"Column pruning and pushed filters"). It also turns on what makes Python sources fast where this
PySpark has it: Python filter pushdown (4.1+) and the Unix-socket transport to Python workers (4.1+:
no ~40 ms TCP stall per task).

All of these are static settings: they take effect in a session started from the builder. Where
the JVM already runs without a SparkContext (spark-submit starts it before the Python script; a
session of this process was stopped), `spark.jars` no longer reaches the driver's class path, so
`configure` also adds the jar to the running driver's class loader. Where a SparkContext already
runs without the extension, nothing can add it: `configure` warns, with the exact arguments.
The jar, its build and those arguments are in `spark_mergetree/jvm.py` (no pyspark there).
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Any

from spark_mergetree.errors import InvalidOptionError
from spark_mergetree.jvm import (
    EXTENSION_CLASS,
    JAR_NAME,
    JAR_PATH,
    PUSHDOWN_CONF,
    SUBMIT_ARGS_COMMAND,
    UNIX_SOCKET_CONF,
    build_extension,
    extension_jar,
    has_unix_socket_workers,
    submit_line,
)
from spark_mergetree.spark.adapter import COORDINATOR_CONF
from spark_mergetree.txn.connect import COORDINATOR_ENV

__all__ = ["CATALOG_CLASS", "DEFAULT_CATALOG_NAME", "ENABLED_CONF", "ENABLE_HINT", "EXTENSION_CLASS", "JAR_NAME", "JAR_PATH", "PUSHDOWN_CONF",
           "UNIX_SOCKET_CONF", "build_extension", "configure", "extension_jar"]

# The Spark SQL catalog plugin of the extension (jvm/src/.../MergeTreeCatalog.java, spark/sql_catalog.py).
CATALOG_CLASS = "spark_mergetree.spark.MergeTreeCatalog"
DEFAULT_CATALOG_NAME = "mergetree"

# Runtime switch of the rule (a session with the extension can turn it off and on per query).
ENABLED_CONF = "spark.mergetree.extension.enabled"


def _start_with() -> str:
    """How to start an application whose JVM is started elsewhere: the exact arguments, one line."""
    return f"start the application with `{submit_line(JAR_PATH)}` (`{SUBMIT_ARGS_COMMAND}` prints them)"


ENABLE_HINT = (
    "format('mergetree') reads every column of the table and cannot prune by Spark's filters in this "
    "session: create the session with spark_mergetree.configure(SparkSession.builder), or, for a session "
    f"that was running before that, {_start_with()} (docs/spark.md, 'Column pruning and pushed filters')")


def configure(builder: Any, *, extension: bool = True, filter_pushdown: bool = True,
              unix_socket: bool = True, coordinator: str | None = None,
              catalog: str | os.PathLike[str] | None = None, catalog_name: str = DEFAULT_CATALOG_NAME) -> Any:
    """Add mergetree's settings to a `SparkSession.builder` (classic, or a local Spark Connect
    server started by `.remote("local[...]")`) and return it:

        spark = spark_mergetree.configure(SparkSession.builder.master("local[2]")).getOrCreate()

    `spark.jars` and `spark.sql.extensions` keep the values already set and get ours appended. In a
    spark-submit job (the JVM runs, no SparkContext yet) the jar is also added to the driver's
    class loader, so the session the builder creates loads the extension. A SparkContext already
    running without the extension (a pyspark shell, a notebook) cannot take it: a warning says so,
    with the spark-submit arguments that start one with it. A Spark Connect client of a server
    started elsewhere cannot set these (static) settings either: the server must be started with
    them (docs/spark.md, "Spark Connect").

    `coordinator` (a coordinator URL; by default $SPARK_MERGETREE_COORDINATOR as this process has it
    now) becomes the session conf `spark.mergetree.coordinator`, the coordinator of every write that
    names none: Spark's own processes see only the environment the driver JVM started with. On a
    session that already runs, `configure(SparkSession.builder, coordinator=url).getOrCreate()`
    sets it (or `spark.conf.set("spark.mergetree.coordinator", url)`).

    `catalog` (an Atomic catalog root, spark_mergetree.Catalog) makes its tables Spark SQL tables
    named `<catalog_name>.<database>.<table>` (docs/sql.md): `spark.sql.catalog.<catalog_name>` is
    the extension's catalog plugin, `spark.sql.catalog.<catalog_name>.root` the root. It needs the
    extension's jar.
    """
    options = _builder_options(builder)
    if catalog is not None:
        if not extension or extension_jar() is None:
            raise InvalidOptionError(f"configure(catalog=...): the SQL catalog is part of the session extension, "
                                     f"{'turned off (extension=False)' if not extension else f'not built ({JAR_PATH}: run scripts/build-jvm)'}")
        if not catalog_name.isidentifier():
            raise InvalidOptionError(f"configure(catalog_name={catalog_name!r}): a catalog name is one identifier")
        from spark_mergetree.storage.location import local_path

        builder = builder.config(f"spark.sql.catalog.{catalog_name}", CATALOG_CLASS)
        builder = builder.config(f"spark.sql.catalog.{catalog_name}.root", str(local_path(os.fspath(catalog))))
    url = coordinator or os.environ.get(COORDINATOR_ENV)
    if url and (coordinator or COORDINATOR_CONF not in options):
        builder = builder.config(COORDINATOR_CONF, url)
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
            _add_to_running_jvm(jar)
    if unix_socket and UNIX_SOCKET_CONF not in options and has_unix_socket_workers():
        builder = builder.config(UNIX_SOCKET_CONF, "true")
    return builder


def _add_to_running_jvm(jar: Path) -> None:
    """Make a JVM that is already running load the extension in the session about to be created.

    Spark puts `spark.jars` on the driver's class path only when it starts the JVM. spark-submit
    starts it before the Python script runs (and leaves PYSPARK_GATEWAY_PORT for it); a session
    stopped in this process leaves its JVM behind. The SparkContext created later still ships the
    jar to executors, but the driver resolves `spark.sql.extensions` through its context class
    loader, a `MutableURLClassLoader` in a JVM started by spark-submit: the jar goes there.
    """
    try:
        from pyspark import SparkContext
    except ImportError:  # a Spark Connect-only client: no JVM here
        return
    if SparkContext._gateway is None and not os.environ.get("PYSPARK_GATEWAY_PORT"):
        return  # no JVM yet: the builder starts one with spark.jars on the driver's class path
    SparkContext._ensure_initialized()  # connects to the running JVM (starts none)
    jvm = SparkContext._jvm
    assert jvm is not None
    active = SparkContext._active_spark_context
    if active is not None:
        extensions = active.getConf().get("spark.sql.extensions") or ""
        if EXTENSION_CLASS not in [name.strip() for name in extensions.split(",")]:
            warnings.warn(
                "a SparkContext is already running without the mergetree session extension, and its static "
                "settings cannot change: stop it (spark.stop()) before creating the session from "
                f"configure(builder), or {_start_with()}", stacklevel=3)
        return
    try:
        loader = jvm.java.lang.Thread.currentThread().getContextClassLoader()
        loader.addURL(jvm.java.io.File(str(jar)).toURI().toURL())
    except Exception:  # py4j's: a loader without addURL (a JVM not started by spark-submit)
        warnings.warn("the running JVM's class loader does not take the mergetree session extension's jar: "
                      f"{_start_with()}", stacklevel=3)


def _builder_options(builder: Any) -> dict[str, str]:
    options = getattr(builder, "_options", None)
    return dict(options) if isinstance(options, dict) else {}


def _append(current: str | None, value: str) -> str:
    items = [item.strip() for item in (current or "").split(",") if item.strip()]
    return ",".join(items if value in items else items + [value])

"""Shared fixtures: one local SparkSession for the whole test session, created on first use.

The session runs `local[2,3]`: two cores, and up to three attempts per task, so a test can make a
task fail on its first attempt and watch Spark retry it. It is set up by spark_mergetree.configure
(the session extension: column pruning, a plan per scan, filter pushdown on), as users would;
tests turn the extension off per query with `spark.mergetree.extension.enabled=false`. Workers run
this interpreter and import the package from the repository.

`pytest --spark-connect` runs the tests that use the `spark` fixture (only those) against a local
Spark Connect server instead (`SparkSession.builder.remote("local[2,3]")`, what Databricks
serverless and standard-access clusters give their users): the client has no SparkContext. A
Connect client and a classic session cannot share one Python process (PySpark switches its whole
API to Connect once a remote session exists), so the two modes are two pytest runs
(`scripts/test` runs both).

No test touches the user's home: the session runs with HOME pointing at a temporary directory, every
test gets a coordinator of its own (Spark tests share the session's, which the Spark workers were
started with), and a test that creates `~/.spark_mergetree` in that home fails.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent


COORDINATOR_ENV = "SPARK_MERGETREE_COORDINATOR"
CONNECT_OPTION = "--spark-connect"
SPARK_ONLY_OPTION = "--spark-only"
EXHAUSTIVE_OPTION = "--exhaustive"
_SESSION_DIR: Path | None = None
_SAVED_ENV: dict[str, str | None] = {}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(CONNECT_OPTION, action="store_true", default=False,
                     help="run only the tests that use the `spark` fixture, against a local Spark Connect server")
    parser.addoption(SPARK_ONLY_OPTION, action="store_true", default=False,
                     help="run only the tests that use the `spark` fixture")
    parser.addoption(EXHAUSTIVE_OPTION, action="store_true", default=False,
                     help="run the whole of every corpus, seed list and example count, not the default run's "
                          "fixed sample (tests/budget.py)")


def _long_files_first(items: list[pytest.Item]) -> None:
    """Files of Spark tests and files marked `long` first, the rest after, each file's tests in their
    order: pytest-xdist (scripts/test) hands files to its processes in this order, so the long ones
    start early and the short ones fill in at the end instead of one long file running alone last."""
    long_files = {item.path for item in items
                  if "spark" in getattr(item, "fixturenames", ()) or item.get_closest_marker("long")}
    items.sort(key=lambda item: item.path not in long_files)  # (stable)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    _long_files_first(items)
    if not (config.getoption(CONNECT_OPTION) or config.getoption(SPARK_ONLY_OPTION)):
        return
    spark_layer = REPO_ROOT / "tests" / "spark"

    def runs_on_the_session(item: pytest.Item) -> bool:
        # The runs on Spark Connect and on the oldest PySpark re-run the Spark layer's own tests
        # (tests/spark/); the documentation's and the storage backends' tests that drive Spark run
        # once, on the newest PySpark. `own_session`: the test needs the shared session only to
        # exist; it runs a session of its own (not through Connect).
        return ("spark" in getattr(item, "fixturenames", ()) and item.path.is_relative_to(spark_layer)
                and not (config.getoption(CONNECT_OPTION) and item.get_closest_marker("own_session")))

    selected = [item for item in items if runs_on_the_session(item)]
    deselected = [item for item in items if not runs_on_the_session(item)]
    if deselected:
        config.hook.pytest_deselected(items=deselected)
    items[:] = selected


# A low descriptor number kept for py4j's callback server (foreachBatch on classic sessions), which
# watches its socket with select(): a descriptor numbered 1024 or more makes its thread die at once,
# and the JVM's micro-batch then fails, or waits for ever on a connection nobody serves. chdb leaks
# about ten descriptors per session opened and closed, so a test process that ran a few hundred
# chdb tests is past 1024 when its Spark session starts. Taken at start-up, freed just before the
# server's socket is made, so the socket gets this number.
_CALLBACK_FD: int | None = None


def pytest_configure(config: pytest.Config) -> None:
    """A temporary HOME and a session coordinator, before any test module is imported."""
    global _SESSION_DIR, _CALLBACK_FD
    _CALLBACK_FD = os.open(os.devnull, os.O_RDONLY)
    _SESSION_DIR = Path(tempfile.mkdtemp(prefix="mergetree-tests-")).resolve()
    (_SESSION_DIR / "home").mkdir()
    settings = [("HOME", str(_SESSION_DIR / "home")), (COORDINATOR_ENV, (_SESSION_DIR / "coordinator").as_uri())]
    if config.getoption(EXHAUSTIVE_OPTION):
        from tests.budget import ENV

        settings.append((ENV, "1"))  # in the environment: Spark's workers and test subprocesses see it too
    for name, value in settings:
        _SAVED_ENV[name] = os.environ.get(name)
        os.environ[name] = value


def pytest_unconfigure(config: pytest.Config) -> None:
    for name, value in _SAVED_ENV.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    if _SESSION_DIR is not None:
        shutil.rmtree(_SESSION_DIR, ignore_errors=True)


@pytest.fixture(autouse=True)
def private_coordinator(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The URL of this test's own coordinator (the session's for Spark tests), set as the default.

    Fails the test if it wrote into the (temporary) home's `.spark_mergetree`, where the default
    coordinator of a user lives.
    """
    if "spark" in request.fixturenames:
        url = os.environ[COORDINATOR_ENV]  # Spark workers were started with the session's
    else:
        url = (tmp_path / "coordinator").resolve().as_uri()
        monkeypatch.setenv(COORDINATOR_ENV, url)
    yield url
    assert _SESSION_DIR is not None
    home_state = _SESSION_DIR / "home" / ".spark_mergetree"
    if home_state.exists():
        shutil.rmtree(home_state, ignore_errors=True)
        pytest.fail(f"the test wrote into the home directory's {home_state}: use a private coordinator")


def _python_path_with_repo() -> str:
    parts = [str(REPO_ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return os.pathsep.join(dict.fromkeys(parts))


@pytest.fixture(scope="session")
def spark(request: pytest.FixtureRequest) -> Iterator[object]:
    # Python workers inherit the environment of the JVM, which inherits ours.
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ["PYTHONPATH"] = _python_path_with_repo()
    # Workers inherit HOME and the session's coordinator (set by pytest_configure), never the user's.
    from pyspark.sql import SparkSession

    from spark_mergetree.spark.session import configure

    # The session extension's jar, built from jvm/src when missing or older than its sources.
    subprocess.run([str(REPO_ROOT / "scripts" / "build-jvm")], check=True)
    connect = request.config.getoption(CONNECT_OPTION)
    # A local Spark Connect server (in this process's JVM) takes the same static settings.
    builder = SparkSession.builder.remote("local[2,3]") if connect else SparkSession.builder.master("local[2,3]")
    session = configure(
        builder
        .appName("spark-mergetree-tests")
        .config("spark.sql.python.filterPushdown.enabled", "true")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", "1g")
        .config("spark.executorEnv.PYTHONPATH", os.environ["PYTHONPATH"])
        .config("spark.python.worker.reuse", "true")
    ).getOrCreate()
    if connect:
        from pyspark import SparkContext

        SparkContext._active_spark_context.setLogLevel("ERROR")  # type: ignore[union-attr]
    else:
        session.sparkContext.setLogLevel("ERROR")
        _start_callback_server(session)
    try:
        yield session
    finally:
        session.stop()


def _start_callback_server(session: object) -> None:
    """py4j's callback server on the low descriptor kept for it (see _CALLBACK_FD)."""
    global _CALLBACK_FD
    from pyspark.java_gateway import ensure_callback_server_started

    gateway = session.sparkContext._gateway  # type: ignore[attr-defined]
    if _CALLBACK_FD is not None:
        os.close(_CALLBACK_FD)
        _CALLBACK_FD = None
    ensure_callback_server_started(gateway)


@pytest.fixture(scope="session")
def s3_server() -> Iterator[object]:
    """One moto S3 server on a free loopback port for the whole session (tests/s3_server.py)."""
    from tests.s3_server import S3Server

    server = S3Server().start()
    yield server
    server.close()


@pytest.fixture
def latency_proxy() -> Iterator[object]:
    """A factory `latency_proxy(upstream, delay=0.02)` of HTTP proxies on 127.0.0.1 that add `delay`
    seconds to every request (tests/latency_proxy.py); each stops with the test (or by itself)."""
    from tests.latency_proxy import LatencyProxy

    made: list[LatencyProxy] = []

    def make(upstream: str, delay: float = 0.02, lifetime: float = 300.0, max_requests: int = 200_000
             ) -> LatencyProxy:
        made.append(LatencyProxy(upstream, delay, lifetime=lifetime, max_requests=max_requests))
        return made[-1]

    yield make
    for proxy in made:
        proxy.close()


@pytest.fixture(scope="session")
def s3_server_with_auth() -> Iterator[object]:
    """A second moto S3 server that checks credentials (IAM), for access-denied paths."""
    from tests.s3_server import S3Server

    server = S3Server(auth=True).start()
    yield server
    server.close()


@pytest.fixture
def s3_bucket(s3_server: object, monkeypatch: pytest.MonkeyPatch) -> str:
    """A fresh bucket on the session's S3 server; its endpoint and credentials are set in the
    environment, where boto3 (and so every process this test starts) takes them from."""
    from tests.s3_server import S3Server

    assert isinstance(s3_server, S3Server)
    for name, value in s3_server.environment().items():
        monkeypatch.setenv(name, value)
    return s3_server.bucket()


@pytest.fixture(scope="session")
def gcs_server() -> Iterator[object]:
    """One fake-gcs-server on a free loopback port for the whole session (tests/cloud_servers.py)."""
    from tests.cloud_servers import GcsServer

    server = GcsServer().start()
    yield server
    server.close()


@pytest.fixture(scope="session")
def azure_server() -> Iterator[object]:
    """One Azurite Blob service on a free loopback port for the whole session (tests/cloud_servers.py)."""
    from tests.cloud_servers import AzureServer

    server = AzureServer().start()
    yield server
    server.close()


@pytest.fixture(params=["s3", "gs", "abfss"])
def object_store(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> object:
    """A fresh bucket (an Azure container) on the S3, GCS or Azure server of the session, reached
    through the environment the way each cloud's tools take it (so every process this test starts
    reaches it too): a `tests.cloud_servers.StoreUnderTest`."""
    from tests.cloud_servers import StoreUnderTest

    server = request.getfixturevalue({"s3": "s3_server", "gs": "gcs_server", "abfss": "azure_server"}[request.param])
    return StoreUnderTest.make(request.param, server, monkeypatch)


@pytest.fixture(scope="session")
def zookeeper() -> Iterator[object]:
    """One real ZooKeeper server for the session (tests/zookeeper_server.py)."""
    from tests.zookeeper_server import ZooKeeperServer

    server = ZooKeeperServer().start()
    yield server
    server.close()


@pytest.fixture(scope="module")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """A Spark standalone cluster for one test module (tests/spark_cluster.py): a master on 127.0.0.1
    and two one-core workers, on 127.0.0.1 and 127.0.0.2; every process it started (executors too)
    is stopped by its pid at the end of the module."""
    from tests.spark_cluster import SparkCluster

    cluster = SparkCluster(tmp_path_factory.mktemp("spark-cluster")).start()
    yield cluster
    cluster.stop()

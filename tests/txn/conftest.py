"""Fixtures for transaction tests: one real ZooKeeper server per session, coordinators of both
backends, and dummy part directories (a directory with a marker file holding a value)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from spark_mergetree.txn import Coordinator
from spark_mergetree.txn.local import LocalCoordinator
from spark_mergetree.txn.object_store import ObjectStoreCoordinator
from spark_mergetree.txn.zookeeper import ZooKeeperCoordinator
from tests.zookeeper_server import ZooKeeperServer

MARKER = "marker.txt"


@pytest.fixture(params=["local", "zookeeper", "s3"])
def coordinator_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh, empty coordinator of each backend (its URL)."""
    if request.param == "local":
        return LocalCoordinator.url_for(tmp_path / "coordinator")
    if request.param == "s3":
        bucket = request.getfixturevalue("s3_bucket")
        return ObjectStoreCoordinator.url_for(f"s3://{bucket}/coordinator", lease=2.0)
    server: ZooKeeperServer = request.getfixturevalue("zookeeper")
    return ZooKeeperCoordinator.url_for(server.hosts, f"/test_{uuid.uuid4().hex[:12]}")


@pytest.fixture
def make_coordinator(coordinator_url: str) -> Iterator[Callable[[], Coordinator]]:
    """Independent coordinator instances on the same backend state (as other processes would have)."""
    made: list[Coordinator] = []

    def make() -> Coordinator:
        if coordinator_url.startswith("file:"):
            instance: Coordinator = LocalCoordinator(coordinator_url[len("file://"):])
        elif coordinator_url.startswith("s3:"):
            instance = ObjectStoreCoordinator(coordinator_url)
        else:
            hosts, _, root = coordinator_url[len("zk://"):].partition("/")
            instance = ZooKeeperCoordinator(hosts, "/" + root)
        made.append(instance)
        return instance

    yield make
    for instance in made:
        instance.close()


@pytest.fixture
def coordinator(make_coordinator: Callable[[], Coordinator]) -> Coordinator:
    return make_coordinator()


def write_part(table_dir: str | os.PathLike, name: str, value: int = 0) -> str:
    """A dummy part directory, written the way parts are: tmp_ name, fsync, rename."""
    table = Path(table_dir)
    table.mkdir(parents=True, exist_ok=True)
    temporary = table / f"tmp_{name}"
    temporary.mkdir()
    with open(temporary / MARKER, "w") as handle:
        handle.write(str(value))
        handle.flush()
        os.fsync(handle.fileno())
    os.rename(temporary, table / name)
    return name


def publish(transaction: object, table_dir: str | os.PathLike, name: str, value: int = 0) -> str:
    """Add a dummy part the way the engine does: written under a staged name the transaction owns,
    then named in its pending entry and renamed into place under the table's commit lock."""
    from spark_mergetree.txn import TableLog

    table = Path(table_dir)
    staged = write_part(table, f"staged_t{transaction.tid}_{uuid.uuid4().hex[:8]}", value)  # type: ignore[attr-defined]
    with TableLog(table).commit_lock():
        transaction.add_parts(table, [name])  # type: ignore[attr-defined]
        os.rename(table / staged, table / name)
    return name


def part_value(table_dir: str | os.PathLike, name: str) -> int:
    return int((Path(table_dir) / name / MARKER).read_text())


def part_directories(table_dir: str | os.PathLike) -> set[str]:
    return {entry.name for entry in Path(table_dir).iterdir()
            if entry.is_dir() and entry.name != "_mergetree"}

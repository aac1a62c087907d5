"""Coordinators by URL: `file:///dir` (or a directory path) → LocalCoordinator, `zk://hosts/root` →
ZooKeeperCoordinator; one instance per URL per process; the process default.

Kept apart from coordinator.py (the contract every backend implements) so that the backends
import the contract and this module imports the backends, never the other way round.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path
from urllib.parse import unquote, urlparse

from spark_mergetree.errors import InvalidOptionError
from spark_mergetree.storage.object_store import OBJECT_SCHEMES, is_object_url
from spark_mergetree.txn.coordinator import Coordinator

COORDINATOR_ENV = "SPARK_MERGETREE_COORDINATOR"
DEFAULT_LOCAL_DIRECTORY = Path("~/.spark_mergetree/coordinator")

_instances: dict[tuple[int, str], Coordinator] = {}
_instances_lock = threading.Lock()


def coordinator_from_url(url: str) -> Coordinator:
    """`file:///abs/dir` or a plain directory path → LocalCoordinator, `zk://host:port[,host:port]/root`
    → ZooKeeperCoordinator, `s3://bucket/prefix[?lease=seconds]` → ObjectStoreCoordinator. A relative
    path is taken from the current directory.

    One instance per URL per process is shared (a ZooKeeper session is costly to open).
    """
    if not url or not url.strip():
        raise InvalidOptionError("coordinator url is empty; use file:///path, a directory path or zk://host:port/path")
    parsed = urlparse(url)
    factory: Callable[[], Coordinator]
    if parsed.scheme in ("", "file"):
        if parsed.scheme == "file" and parsed.netloc not in ("", "localhost"):
            raise InvalidOptionError(f"coordinator url {url!r}: file URLs must be file:///path")
        from spark_mergetree.txn.local import LocalCoordinator
        directory = unquote(parsed.path) if parsed.scheme == "file" else url
        key_url = LocalCoordinator.url_for(directory)
        factory = lambda: LocalCoordinator(directory)  # noqa: E731
    elif parsed.scheme in ("zk", "zookeeper"):
        if not parsed.netloc:
            raise InvalidOptionError(f"coordinator url {url!r}: zk URLs need hosts: zk://host:port/root")
        from spark_mergetree.txn.zookeeper import ZooKeeperCoordinator
        root = parsed.path or "/spark_mergetree"
        key_url = ZooKeeperCoordinator.url_for(parsed.netloc, root)
        factory = lambda: ZooKeeperCoordinator(parsed.netloc, root)  # noqa: E731
    elif parsed.scheme in OBJECT_SCHEMES:
        from spark_mergetree.txn.object_store import ObjectStoreCoordinator
        probe = ObjectStoreCoordinator(url)
        key_url = probe.url
        factory = lambda: probe  # noqa: E731
    else:
        raise InvalidOptionError(
            f"coordinator url {url!r}: unknown scheme {parsed.scheme!r}; use file:///path, a directory path, "
            "zk://host:port/path, s3://bucket/prefix, gs://bucket/prefix or "
            "abfss://container@account.dfs.core.windows.net/prefix")
    # Keyed by pid: a ZooKeeper client or an fcntl lock does not survive fork().
    key = (os.getpid(), key_url)
    with _instances_lock:
        instance = _instances.get(key)
        if instance is None or instance.closed:
            instance = factory()
            _instances[key] = instance
        return instance


def reachable_everywhere(coordinator_url: str) -> bool:
    """Whether every machine reaching a bucket can share this coordinator (in object storage or zk://)."""
    return is_object_url(coordinator_url) or coordinator_url.startswith(("zk://", "zookeeper://"))


def default_coordinator() -> Coordinator:
    """The process default: $SPARK_MERGETREE_COORDINATOR, else a LocalCoordinator in ~/.spark_mergetree."""
    url = os.environ.get(COORDINATOR_ENV)
    if url:
        return coordinator_from_url(url)
    return coordinator_from_url(DEFAULT_LOCAL_DIRECTORY.expanduser().resolve().as_uri())

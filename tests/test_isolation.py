"""Tests never touch the user's home: each has a coordinator of its own (see tests/conftest.py)."""

from __future__ import annotations

import os
import pwd
from pathlib import Path

import pyarrow as pa

from spark_mergetree import MergeTreeTable
from spark_mergetree.txn import default_coordinator


def test_a_write_commits_through_the_tests_own_coordinator(tmp_path: Path, private_coordinator: str) -> None:
    assert str(Path.home()) != pwd.getpwuid(os.getuid()).pw_dir
    assert default_coordinator().url == private_coordinator == (tmp_path / "coordinator").resolve().as_uri()
    table = MergeTreeTable.create(tmp_path / "t", [("id", "UInt64")], "id")
    table.insert(pa.table({"id": pa.array([1, 2], pa.uint64())}))
    assert table.coordinator.url == private_coordinator
    assert (tmp_path / "coordinator").is_dir()
    assert not (Path.home() / ".spark_mergetree").exists()

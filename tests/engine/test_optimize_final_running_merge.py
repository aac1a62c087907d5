"""OPTIMIZE FINAL while a merge of the same parts is running in another process (a merge worker, a
`mergetree merge-daemon`, another writer's background merge): it waits for that merge and merges
its result with the rest, so every partition is one part once it returns, on local disks, a RAID
policy and an object store (moto S3 on 127.0.0.1). The running merge is made deterministic: a forked
process (tests/running_merge.py) takes the merge's removal locks (or also names its result in its
pending entry) and holds them until the test lets it finish."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from spark_mergetree import MergeTreeTable
from spark_mergetree.engine import optimize as optimizing
from spark_mergetree.errors import SerializationError
from tests.running_merge import HeldMerge

SCHEMA = [("id", "UInt64"), ("name", "String")]
SETTINGS: dict[str, object] = {"auto_merge": False, "index_granularity": 256}  # the test's merges only


def rows(start: int, count: int) -> pa.Table:
    ids = np.arange(start, start + count, dtype=np.uint64)
    return pa.table({"id": pa.array(ids), "name": pc.cast(pa.array(ids), pa.string())})


def _raid_policy(root: Path) -> dict:
    return {"name": "raid5", "disks": {f"d{i}": {"path": str(root / f"disk{i}")} for i in range(4)},
            "volumes": [{"name": "main", "disks": [f"d{i}" for i in range(4)], "layout": "raid5",
                         "stripe_unit_bytes": 16384}]}


def _create(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    settings: dict[str, object]
    if backend == "local":
        url, settings = str(tmp_path / "t"), SETTINGS
    elif backend == "raid5":
        url, settings = str(tmp_path / "t"), {**SETTINGS, "storage_policy": _raid_policy(tmp_path)}
    else:
        url, settings = f"s3://{request.getfixturevalue('s3_bucket')}/t", SETTINGS
    table = MergeTreeTable.create(url, SCHEMA, order_by="id", settings=settings)
    for number in range(3):
        table.insert(rows(number * 1000, 1000))
    return url


@pytest.mark.parametrize("publish_first", [False, True], ids=["locked", "published"])
@pytest.mark.parametrize("backend", ["local", "raid5", "s3"])
def test_optimize_final_waits_for_a_merge_running_in_another_process(
        backend: str, publish_first: bool, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    url = _create(backend, tmp_path, request)
    table = MergeTreeTable.open(url)
    parts = sorted(table.visible_parts()[1])
    assert len(parts) == 3
    with HeldMerge(url, parts[:2], publish_first) as merge:
        result: dict[str, object] = {}

        def optimize() -> None:
            try:
                result["created"] = table.optimize(final=True)
            except BaseException as error:  # noqa: BLE001 - reported below
                result["error"] = error

        optimizer = threading.Thread(target=optimize)
        optimizer.start()
        # While the merge holds its parts, OPTIMIZE FINAL neither returns nor fails: it waits.
        optimizer.join(1.0)
        assert optimizer.is_alive(), result
        assert merge.finish() == "committed"
        optimizer.join(60)
        assert not optimizer.is_alive()
    assert "error" not in result, result
    fresh = MergeTreeTable.open(url)
    visible = sorted(fresh.visible_parts()[1])
    assert len(visible) == 1 and result["created"] == visible, (visible, result)
    assert fresh.to_arrow().sort_by("id").equals(rows(0, 3000).cast(fresh.to_arrow().schema))


def test_optimize_final_gives_up_on_a_merge_that_outlasts_its_timeout(tmp_path: Path,
                                                                      request: pytest.FixtureRequest) -> None:
    """The wait is bounded: a merge still holding the parts after `timeout` seconds fails OPTIMIZE
    FINAL with SerializationError naming the partition and the merge's transaction (as ClickHouse's
    OPTIMIZE FINAL times out), changing nothing."""
    url = _create("local", tmp_path, request)
    table = MergeTreeTable.open(url)
    parts = sorted(table.visible_parts()[1])
    tx, _, _ = optimizing.begin_merge_transaction(table)
    tx.remove_parts(table.log, parts[:2])  # a merge that has begun (in this process, for the test)
    try:
        with pytest.raises(SerializationError, match=rf"partition\(s\) 'all', still held by a merge running "
                                                     rf"elsewhere \(.*transaction {tx.tid} holds its removal lock"):
            table.optimize(final=True, timeout=0.3)
        assert sorted(MergeTreeTable.open(url).visible_parts()[1]) == parts
    finally:
        tx.rollback()
    assert len(table.optimize(final=True)) == 1
    assert len(MergeTreeTable.open(url).visible_parts()[1]) == 1

"""spark_mergetree.optimize(spark, path, final=True) keeps MergeTreeTable.optimize(final=True)'s
promise through Spark: every partition ends as one part holding all the rows, also while a merge in
another process holds parts (tests/running_merge.py) and on an object store whose requests are slow
enough that the inserts' background merges are still running (tests/latency_proxy.py)."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import spark_mergetree
from spark_mergetree import MergeTreeTable
from spark_mergetree.format.part_info import PartInfo
from tests.latency_proxy import LatencyProxy
from tests.running_merge import HeldMerge

pytestmark = pytest.mark.spark

SCHEMA = [("id", "UInt64"), ("d", "Date"), ("name", "String")]


def rows(start: int, count: int) -> pa.Table:
    ids = np.arange(start, start + count, dtype=np.uint64)
    days = pa.array((19000 + 40 * ((ids // 100) % 2)).astype(np.int32), pa.date32())  # two months
    return pa.table({"id": pa.array(ids), "d": days, "name": pc.cast(pa.array(ids), pa.string())})


def _parts_per_partition(table: MergeTreeTable) -> Counter[str]:
    return Counter(PartInfo.parse(p).partition_id for p in table.visible_parts()[1])


def _check_merged(url: str, count: int, storage_options: dict[str, str] | None = None) -> None:
    fresh = MergeTreeTable.open(url, storage_options=storage_options)
    per_partition = _parts_per_partition(fresh)
    assert len(per_partition) == 2 and set(per_partition.values()) == {1}, sorted(fresh.visible_parts()[1])
    read = fresh.to_arrow().sort_by("id")
    assert read.equals(rows(0, count).cast(read.schema))


def test_optimize_final_on_spark_waits_for_a_merge_running_in_another_process(spark, tmp_path: Path) -> None:
    url = str(tmp_path / "t")
    table = MergeTreeTable.create(url, SCHEMA, order_by="id", partition_by="toYYYYMM(d)",
                                  settings={"auto_merge": False, "index_granularity": 64})
    for number in range(3):
        table.insert(rows(number * 200, 200))
    held_partition = PartInfo.parse(min(table.visible_parts()[1])).partition_id
    parts = sorted((p for p in table.visible_parts()[1] if PartInfo.parse(p).partition_id == held_partition),
                   key=lambda p: PartInfo.parse(p).min_block)
    with HeldMerge(url, parts[:2]) as merge:
        # Bounded: the held partition fails the call, naming it and the merge; the other one merged.
        with pytest.raises(spark_mergetree.SerializationError,
                           match=rf"partition\(s\) '{held_partition}', still held by a merge running elsewhere "
                                 rf"\(.*transaction {merge.tid} holds its removal lock"):
            spark_mergetree.optimize(spark, url, final=True, timeout=0.5)
        assert sorted(_parts_per_partition(MergeTreeTable.open(url)).values()) == [1, 3]
        result: dict[str, object] = {}

        def optimize() -> None:
            try:
                result["created"] = spark_mergetree.optimize(spark, url, final=True)
            except BaseException as error:  # noqa: BLE001 - reported below
                result["error"] = error

        optimizer = threading.Thread(target=optimize)
        optimizer.start()
        optimizer.join(1.0)
        assert optimizer.is_alive(), result  # neither returned nor failed: it waits for the merge
        assert merge.finish() == "committed"
        optimizer.join(120)
        assert not optimizer.is_alive()
    assert "error" not in result, result
    assert [PartInfo.parse(p).partition_id for p in result["created"]] == [held_partition]  # type: ignore[attr-defined]
    _check_merged(url, 600)


def test_optimize_final_on_spark_with_slow_object_store_and_background_merges(
        spark, s3_server: object, latency_proxy: Callable[..., LatencyProxy]) -> None:
    from tests.s3_server import ACCESS_KEY, REGION, SECRET_KEY

    proxy = latency_proxy(s3_server.endpoint, 0.02, lifetime=300.0)  # type: ignore[attr-defined]
    url = f"s3://{s3_server.bucket()}/slow"  # type: ignore[attr-defined]
    storage = {"endpoint": proxy.endpoint, "access_key_id": ACCESS_KEY, "secret_access_key": SECRET_KEY,
               "region": REGION}
    table = MergeTreeTable.create(url, SCHEMA, order_by="id", partition_by="toYYYYMM(d)",
                                  storage_options=storage)  # auto_merge: on, as by default
    for number in range(3):
        table.insert(rows(number * 200, 200))
    created = spark_mergetree.optimize(spark, url, final=True,
                                       options={f"s3.{key}": value for key, value in storage.items()})
    assert created
    _check_merged(url, 600, storage)
    assert MergeTreeTable.wait_for_merges(120)  # no background merge of this table outlives the test
    assert proxy.requests > 0 and proxy.refused == 0

"""OPTIMIZE FINAL on object-store tables whose requests take time (issue 29): with 20 ms added to
every request by a proxy on 127.0.0.1 (tests/latency_proxy.py), the background merge an insert
starts (`auto_merge`, on by default) is still running, or has left its allocation fence's block
between two parts, when `optimize(final=True)` looks. It used to merge one run per partition and
return, leaving `['all_1_2_1', 'all_4_4_0']` in 5 of 5 trials; it must leave one part per
partition holding every row, in the snapshot a fresh `open()` sees."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from spark_mergetree import MergeTreeTable
from spark_mergetree.format.part_info import PartInfo
from tests.budget import scaled
from tests.latency_proxy import LatencyProxy

pytestmark = pytest.mark.long  # a minute or more: scheduled early (tests/conftest.py)

SCHEMA = [("id", "UInt64"), ("d", "Date"), ("name", "String")]
DELAY = 0.02  # seconds added to each request (real object stores answer slower than this)
TRIALS = {"s3": scaled(1, 5), "gs": 1, "abfss": 1}  # pytest --exhaustive: five trials on s3


def rows(start: int, count: int) -> pa.Table:
    ids = np.arange(start, start + count, dtype=np.uint64)
    days = pa.array((19000 + 40 * ((ids // 500) % 2)).astype(np.int32), pa.date32())  # two months
    return pa.table({"id": pa.array(ids), "d": days, "name": pc.cast(pa.array(ids), pa.string())})


def _table_url(scheme: str, server: object, proxy: LatencyProxy, name: str) -> tuple[str, dict[str, str]]:
    from tests.cloud_servers import AZURE_ACCOUNT, AZURE_KEY
    from tests.s3_server import ACCESS_KEY, REGION, SECRET_KEY

    if scheme == "s3":
        return (f"s3://{server.bucket()}/{name}",  # type: ignore[attr-defined]
                {"endpoint": proxy.endpoint, "access_key_id": ACCESS_KEY, "secret_access_key": SECRET_KEY,
                 "region": REGION})
    if scheme == "gs":
        return f"gs://{server.bucket()}/{name}", {"endpoint": proxy.endpoint}  # type: ignore[attr-defined]
    return (f"abfss://{server.container()}@{AZURE_ACCOUNT}.dfs.core.windows.net/{name}",  # type: ignore[attr-defined]
            {"endpoint": f"{proxy.endpoint}/{AZURE_ACCOUNT}", "account_key": AZURE_KEY})


@pytest.mark.parametrize("scheme", ["s3", "gs", "abfss"])
def test_optimize_final_leaves_one_part_per_partition_when_requests_are_slow(
        scheme: str, request: pytest.FixtureRequest, latency_proxy: Callable[..., LatencyProxy]) -> None:
    server = request.getfixturevalue({"s3": "s3_server", "gs": "gcs_server", "abfss": "azure_server"}[scheme])
    proxy = latency_proxy(server.endpoint, DELAY, lifetime=600.0)
    for trial in range(TRIALS[scheme]):
        url, options = _table_url(scheme, server, proxy, f"slow{trial}")
        table = MergeTreeTable.create(url, SCHEMA, order_by="id", partition_by="toYYYYMM(d)",
                                      storage_options=options)  # auto_merge: on, as by default
        for number in range(3):
            table.insert(rows(number * 1000, 1000))
        table.optimize(final=True)
        fresh = MergeTreeTable.open(url, storage_options=options)
        parts = sorted(fresh.visible_parts()[1])
        per_partition = Counter(PartInfo.parse(p).partition_id for p in parts)
        assert len(per_partition) == 2 and set(per_partition.values()) == {1}, (trial, parts)
        assert fresh.to_arrow().sort_by("id").equals(rows(0, 3000).cast(fresh.to_arrow().schema)), trial
        assert MergeTreeTable.wait_for_merges(120)  # the next trial starts with no merge of this one running
    assert proxy.requests > 0 and proxy.refused == 0

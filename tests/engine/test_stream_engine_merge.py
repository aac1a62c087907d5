"""The streaming merge of the engines that combine rows of equal sorting keys (Replacing, Summing,
Aggregating, Collapsing, VersionedCollapsing: engine/merge_stream.py's merge_engine_streaming) writes
the part the in-memory merge writes, byte for byte, with equal keys across parts and across window
boundaries (small blocks: many windows) and with an empty sorting key; its memory does not grow with the parts."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from spark_mergetree import MergeTreeTable
from spark_mergetree.engine import merge_stream
from tests.engine.test_stream_merge import _both, merge_memory

COLUMNS = [("id", "UInt64"), ("name", "LowCardinality(String)"), ("ver", "UInt32"), ("sign", "Int8"),
           ("gone", "UInt8"), ("amount", "Int64"), ("score", "Nullable(Float64)"),
           ("top", "SimpleAggregateFunction(max, UInt32)"), ("note", "Nullable(String)")]

ENGINES = {
    "replacing": "ReplacingMergeTree(ver, gone)",
    "replacing_plain": "ReplacingMergeTree",
    "summing": "SummingMergeTree",
    "aggregating": "AggregatingMergeTree",
    "collapsing": "CollapsingMergeTree(sign)",
    "versioned": "VersionedCollapsingMergeTree(sign, ver)",
}


def _batch(rng: np.random.Generator, n: int, salt: int, keys: int) -> pa.Table:
    seq = np.arange(n) + salt
    ids = rng.integers(0, keys, n).astype(np.uint64)  # few distinct keys: runs across parts and windows
    return pa.table({
        "id": ids,
        "name": pa.array([f"n{i % 7}" for i in ids.tolist()]),
        "ver": rng.integers(0, 4, n).astype(np.uint32),
        "sign": np.where(rng.random(n) < 0.6, 1, -1).astype(np.int8),
        "gone": (seq % 11 == 0).astype(np.uint8),
        "amount": rng.integers(-3, 4, n).astype(np.int64),
        "score": pa.array([None if s % 6 == 0 else s / 7 for s in seq.tolist()], pa.float64()),
        "top": (seq % 1000).astype(np.uint32),
        "note": pa.array([None if s % 4 == 0 else "x" * int(s % 13) for s in seq.tolist()]),
    })


@pytest.mark.parametrize("engine", sorted(ENGINES))
@pytest.mark.parametrize(("order_by", "keys"), [("id", 700), ("(name, id)", 700), ("id", 6), ("tuple()", 6)])
def test_streamed_engine_merge_writes_the_in_memory_merge_byte_for_byte(tmp_path: Path, monkeypatch, engine: str,
                                                                         order_by: str, keys: int) -> None:
    # keys=6: one key's rows span several blocks of a part (a window must read further)
    monkeypatch.setattr(merge_stream, "READ_BLOCK_ROWS", 300)  # many windows and blocks per part
    rng = np.random.default_rng(5)
    table = MergeTreeTable.create(tmp_path / "t", COLUMNS, order_by=order_by, engine=ENGINES[engine],
                                  settings={"auto_merge": False, "index_granularity": 64,
                                            "min_bytes_for_wide_part": 0})
    for number, n in enumerate((3000, 2200, 500, 1800)):
        table.insert(_batch(rng, n, number * 100_000, keys=keys))
    parts = [p.name for p in table.parts()]
    assert len(parts) == 4
    whole, streamed = _both(table, parts)
    assert sorted(streamed) == sorted(whole)
    for name in whole:
        assert streamed[name] == whole[name], name


def test_replacing_merge_memory_does_not_grow_with_the_parts(tmp_path: Path) -> None:
    # 3 parts, 7.5M rows, ~720 MB decoded; parts 0 and 2 hold the same (even) keys, so half the rows
    # are replaced (5M rows remain). Like the ordinary merge's test (test_stream_merge.py).
    space, parts = 5_000_000, 3
    table = MergeTreeTable.create(tmp_path / "t", [("id", "UInt64"), ("v", "UInt64"), ("b", "Float64"),
                                                   ("c", "Int64"), ("s", "String")],
                                  order_by="id", engine="ReplacingMergeTree(v)", settings={"auto_merge": False})
    for number in range(parts):
        ids = np.arange(number % 2, space, 2, dtype=np.uint64)
        text = pa.array(np.char.add("value-of-a-fairly-long-string-column-number-", (ids % 1000).astype("U12")))
        table.insert(pa.table({"id": ids, "v": np.full(len(ids), number, np.uint64), "b": (ids % 1024).astype(np.float64),
                               "c": -ids.astype(np.int64), "s": text}))
    decoded = sum(r.rows for r in (table.reader(p.name) for p in table.parts())) * (32 + 8 + 56)
    assert decoded > 600e6
    report = merge_memory(tmp_path / "t")
    assert report["rows"] == space
    grown_mb = (report["peak_kb"] - report["before_kb"]) / 1024
    print(report)
    assert grown_mb < 200, report


def test_unkeyed_summing_merge_memory_does_not_grow_with_the_parts(tmp_path: Path) -> None:
    # ORDER BY tuple(): every row a key of its own, those summed to zero dropped (a tenth, by the
    # inserts already); 3 parts, 6.75M rows, ~650 MB decoded. The whole-column merge held the key and summed columns and one
    # whole column (the strings: 420+ MB with their offsets).
    rows, parts = 7_500_000, 3
    table = MergeTreeTable.create(tmp_path / "t", [("id", "UInt64"), ("b", "Float64"), ("c", "Int64"), ("s", "String")],
                                  order_by="tuple()", engine="SummingMergeTree((b, c))", settings={"auto_merge": False})
    for number in range(parts):
        ids = np.arange(number, rows, parts, dtype=np.uint64)
        text = pa.array(np.char.add("value-of-a-fairly-long-string-column-number-", (ids % 1000).astype("U12")))
        zero = ids % 10 == 0
        table.insert(pa.table({"id": ids, "b": np.where(zero, 0, ids % 1024).astype(np.float64),
                               "c": np.where(zero, 0, -ids.astype(np.int64)), "s": text}))
    assert sum(p.rows for p in table.parts()) == rows - rows // 10
    report = merge_memory(tmp_path / "t")
    assert report["rows"] == rows - rows // 10
    grown_mb = (report["peak_kb"] - report["before_kb"]) / 1024
    print(report)
    assert grown_mb < 200, report

"""CHECK TABLE, ALTER ADD COLUMN, DELETE and UPDATE on tables in object storage."""

from __future__ import annotations

import threading

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from spark_mergetree import MergeTreeTable
from spark_mergetree.errors import SerializationError
from spark_mergetree.format.checksums import Checksums
from tests.objstore.test_object_table import create, rows, same


def test_check_rehashes_every_object_and_names_a_corrupted_one(object_store) -> None:  # type: ignore[no-untyped-def]
    url = object_store.url("checked")
    table = create(url)
    table.insert(rows(0, 3000))
    parts = sorted(table.visible_parts()[1])
    report = table.check()
    assert report.ok and report.parts_checked == len(parts) == 2
    # One byte of one data file of the second part flipped in the bucket (same size).
    part = parts[1]
    bucket = object_store.bucket()
    listed = Checksums.parse(bucket.get(f"checked/{part}/checksums.txt")).files
    name = max((n for n in listed if n.endswith(".bin")), key=lambda n: listed[n].file_size)
    key = f"checked/{part}/{name}"
    data = bytearray(bucket.get(key))
    data[len(data) // 2] ^= 0xFF
    bucket.put(key, bytes(data))
    for handle in (table, MergeTreeTable.open(url)):  # this process (cached listing) and a fresh handle
        report = handle.check()
        assert not report.ok and report.parts_checked == 2
        assert len(report.problems) == 1
        assert f"{url}/{part}/{name}" in report.problems[0], report.problems


def test_add_columns_old_parts_read_defaults(object_store) -> None:  # type: ignore[no-untyped-def]
    url = object_store.url("altered")
    table = create(url)
    before = rows(0, 500)
    table.insert(before)
    table.add_columns([("note", "Nullable(String)"), ("n", "UInt32")])
    reopened = MergeTreeTable.open(url)
    assert [c for c, _ in reopened.metadata.columns][-2:] == ["note", "n"]
    later = rows(1000, 50).append_column("note", pa.array([f"x{i}" for i in range(50)])) \
        .append_column("n", pa.array(range(50), pa.uint32()))
    reopened.insert(later)
    expected = pa.concat_tables([
        before.append_column("note", pa.nulls(500, pa.string())).append_column("n", pa.array([0] * 500, pa.uint32())),
        later])
    assert same(reopened.to_arrow(), expected)
    assert same(table.to_arrow(), expected)  # the handle that altered sees its new columns too


def test_concurrent_add_columns_one_wins(object_store) -> None:  # type: ignore[no-untyped-def]
    url = object_store.url("raced")
    create(url).insert(rows(0, 10))
    handles = [MergeTreeTable.open(url) for _ in range(4)]
    barrier = threading.Barrier(len(handles))
    outcome: dict[int, BaseException | None] = {}

    def alter(index: int) -> None:
        barrier.wait()
        try:
            handles[index].add_columns([(f"c{index}", "UInt8")])
            outcome[index] = None
        except BaseException as error:  # noqa: BLE001 - collected and checked below
            outcome[index] = error

    threads = [threading.Thread(target=alter, args=(i,)) for i in range(len(handles))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    winners = [i for i, error in outcome.items() if error is None]
    assert len(winners) == 1, outcome
    assert all(isinstance(e, SerializationError) for e in outcome.values() if e is not None), outcome
    columns = [c for c, _ in MergeTreeTable.open(url).metadata.columns]
    assert [c for c in columns if c.startswith("c")] == [f"c{winners[0]}"]
    # A handle that read the statement before the winning ALTER cannot overwrite it.
    loser = handles[(winners[0] + 1) % len(handles)]
    with pytest.raises(SerializationError, match="changed since this handle read it"):
        loser.add_columns([("late", "UInt8")])
    assert pc.sum(MergeTreeTable.open(url).to_arrow()[f"c{winners[0]}"]).as_py() == 0

"""Overwrites as a ClickHouse opening the same root sees them, before our cleanup runs."""

from __future__ import annotations

import pyarrow as pa

from spark_mergetree.catalog import Catalog
from spark_mergetree.format.part_info import PartInfo
from tests.catalog.chdb_runner import rows, run_chdb


def _batch(ids: range, month: int) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.uint64()), "m": pa.array([month] * len(ids), pa.uint8())})


def test_replaced_parts_are_covered_by_the_new_ones(tmp_path):
    root = tmp_path / "root"
    cat = Catalog(root)
    cat.create_database("db")
    table = cat.create_table("db.t", [("id", "UInt64"), ("m", "UInt8")], "id", partition_by="m",
                             settings={"auto_merge": False})
    table.insert(_batch(range(0, 10), 1))
    table.insert(_batch(range(10, 20), 1))
    table.insert(_batch(range(20, 30), 2))
    table.overwrite(_batch(range(100, 103), 1), partition_overwrite_mode="dynamic")   # replaces month 1 only
    names = {p.name: PartInfo.parse(p.name) for p in table.parts()}
    month1 = [info for info in names.values() if info.partition_id == "1"]
    assert len(month1) == 1 and month1[0].min_block == 1 and month1[0].level == 1
    # Old directories are still on disk (retention); ClickHouse must not show their rows.
    assert (table.path / "1_1_1_0").is_dir()
    (count,) = run_chdb(root, "SELECT count(), sum(id) FROM db.t")
    assert rows(count) == [["13", str(sum(range(100, 103)) + sum(range(20, 30)))]]

    table.overwrite(_batch(range(200, 205), 2))                           # replaces everything
    (count,) = run_chdb(root, "SELECT m, count() FROM db.t GROUP BY m ORDER BY m")
    # Partition 1 had no new rows: ClickHouse keeps seeing its last part until cleanup (documented).
    assert rows(count)[-1] == ["2", "5"]
    assert table.count() == 5

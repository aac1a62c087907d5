"""Tables on storage policies: every layout through the engine, faults, rebuild, export to ClickHouse."""

from __future__ import annotations

import filecmp
import shutil
import warnings
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from click.testing import CliRunner

from spark_mergetree import MergeTreeTable, StorageError
from spark_mergetree.cli import main as cli
from spark_mergetree.storage import DegradedReadWarning
from tests.format.chdb_util import close_session, make_chdb_table

LAYOUTS = {"jbod": 4, "raid0": 4, "raid1": 2, "raid5": 4, "raid6": 4}
#: Disks each layout survives losing.
TOLERATES = {"raid1": 1, "raid5": 1, "raid6": 2}
COLUMNS = [("id", "UInt64"), ("value", "Float64"), ("name", "String")]


def _policy(root: Path, layout: str, disks: int) -> dict:
    return {"name": layout, "disks": {f"d{i}": {"path": str(root / f"disk{i}")} for i in range(disks)},
            "volumes": [{"name": "main", "disks": [f"d{i}" for i in range(disks)], "layout": layout,
                         "stripe_unit_bytes": 16384}]}


SCHEMA = pa.schema([pa.field("id", pa.uint64(), False), pa.field("value", pa.float64(), False),
                    pa.field("name", pa.string(), False)])


def _data(start: int, n: int) -> pa.Table:
    ids = np.arange(start, start + n, dtype=np.uint64)
    return pa.table({"id": ids, "value": ids * 0.5, "name": pa.array([f"n{i % 31}" for i in ids])}, schema=SCHEMA)


def _snapshot_files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture(params=list(LAYOUTS))
def table(request, tmp_path) -> MergeTreeTable:
    layout = request.param
    t = MergeTreeTable.create(tmp_path / "table", COLUMNS, order_by="id",
                              settings={"storage_policy": _policy(tmp_path, layout, LAYOUTS[layout]),
                                        "index_granularity": 256, "auto_merge": False, "old_parts_lifetime": 0,
                                        "min_bytes_for_wide_part": 0})  # Wide: column files spread
    t.insert(_data(0, 6000))
    t.insert(_data(6000, 4000))
    return t


def test_round_trip_merge_and_cleanup(table):
    expected = pa.concat_tables([_data(0, 6000), _data(6000, 4000)]).combine_chunks()
    assert table.to_arrow().sort_by("id").combine_chunks().equals(expected)
    assert table.to_arrow(where="id BETWEEN 100 AND 120").num_rows == 21
    assert table.optimize(final=True) == ["all_1_2_1"]
    assert sorted(table.cleanup()) == ["all_1_1_0", "all_2_2_0"]
    assert table.count() == 10000
    assert table.check().ok
    disks = {p.parent.name for p in Path(table.path).parent.glob("disk*/store/*/*/all_1_1_0")}
    assert not disks, "cleanup removes old parts from every disk"


def test_lost_disk(table):
    """Lose as many disks as the layout tolerates (at least one): read, rebuild, scrub."""
    layout = table.storage_policy.volumes[0].layout
    expected = table.to_arrow().sort_by("id")
    lost = range(1, 1 + TOLERATES.get(layout, 1))
    before = {i: _snapshot_files(table.path.parent / f"disk{i}") for i in lost}
    fresh = MergeTreeTable.open(table.path)
    for i in lost:
        shutil.rmtree(table.path.parent / f"disk{i}")
    if layout in TOLERATES:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert fresh.to_arrow().sort_by("id").equals(expected)
        assert any(issubclass(w.category, DegradedReadWarning) and "d1" in str(w.message) for w in caught)
        for i in lost:
            (table.path.parent / f"disk{i}").mkdir()
        for i in lost:
            report = fresh.rebuild(f"d{i}", progress=False)
            assert sorted(report.parts_rebuilt) == ["all_1_1_0", "all_2_2_0"]
        for i in lost:
            assert _snapshot_files(table.path.parent / f"disk{i}") == before[i]
        assert fresh.scrub().ok
    else:
        with pytest.raises((StorageError, OSError)) as error:
            fresh.to_arrow()
        assert "all_" in str(error.value)


def test_flipped_byte_is_repaired_or_refused(table):
    layout = table.storage_policy.volumes[0].layout
    units = sorted((table.path.parent).glob("disk*/store/*/*/all_1_1_0/units.bin"))
    target = units[0] if units else sorted(table.path.parent.glob("disk*/store/*/*/all_1_1_0/value.bin"))[0]
    data = bytearray(target.read_bytes())
    data[len(data) // 2] ^= 0x5A
    target.write_bytes(bytes(data))
    fresh = MergeTreeTable.open(table.path)
    assert not fresh.scrub().ok or layout == "jbod"
    if layout in TOLERATES:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DegradedReadWarning)
            assert fresh.to_arrow().num_rows == 10000
    else:
        with pytest.raises((StorageError, OSError)):
            fresh.to_arrow()


def test_striped_part_exports_to_clickhouse(table, tmp_path):
    part = "all_1_1_0"
    runner = CliRunner()
    destination = tmp_path / "export" / part
    result = runner.invoke(cli, ["export-part", str(table.path), part, str(destination)])
    assert result.exit_code == 0, result.output
    sess, data_dir = make_chdb_table(tmp_path / "ch", "CREATE TABLE exp (id UInt64, value Float64, name String) "
                                                      "ENGINE = MergeTree ORDER BY id")
    shutil.copytree(destination, data_dir / "detached" / part)
    sess.query(f"ALTER TABLE exp ATTACH PART '{part}'")
    assert sess.query("CHECK TABLE exp", "TabSeparatedRaw").bytes().decode().split()[1] == "1"
    assert sess.query("SELECT count(), sum(id) FROM exp", "TabSeparatedRaw").bytes().decode().split() == \
        ["6000", str(sum(range(6000)))]
    close_session()
    assert filecmp.cmp(destination / "count.txt", destination / "count.txt")


def test_delete_and_update_on_every_layout(table):
    """A mutation rewrites the parts with matching rows and copies the others onto the same layout."""
    table.update({"value": -1.0}, "id < 10")
    table.delete("id % 2 = 0 AND id >= 6000")  # rows of the second part only: the first is copied
    data = pa.concat_tables([_data(0, 6000), _data(6000, 4000)]).to_pylist()
    expected = [{**row, "value": -1.0} if row["id"] < 10 else row for row in data
                if not (row["id"] % 2 == 0 and row["id"] >= 6000)]
    assert table.to_arrow().sort_by("id").to_pylist() == expected
    assert table.check().ok and not table.scrub().problems
    table.cleanup()
    assert table.optimize(final=True) and table.to_arrow().sort_by("id").to_pylist() == expected

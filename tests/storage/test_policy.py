"""Storage policies: configuration and validation, placement over volumes, moves, and ClickHouse interop."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from spark_mergetree.errors import InvalidOptionError
from spark_mergetree.storage import Disk, PartStore, StoragePolicy, Volume, compressed_block_starts
from tests.storage.conftest import disk_files, synthetic_part


def config(tmp_path: Path, **volume: object) -> dict:
    return {"name": "p", "move_factor": 0.2,
            "disks": {f"d{i}": {"path": str(tmp_path / f"d{i}")} for i in range(4)},
            "volumes": [{"name": "hot", "disks": ["d0", "d1", "d2"], "layout": "raid5", **volume}]}


def test_from_dict_and_json_round_trip(tmp_path: Path) -> None:
    policy = StoragePolicy.from_dict(config(tmp_path, stripe_unit_bytes=65536))
    volume = policy.volumes[0]
    assert (policy.name, policy.move_factor, volume.layout, volume.stripe_unit_bytes) == ("p", 0.2, "raid5", 65536)
    assert [d.name for d in volume.disks] == ["d0", "d1", "d2"]
    path = tmp_path / "policy.json"
    path.write_text(json.dumps(policy.to_dict()))
    again = StoragePolicy.from_json(path)
    assert again.to_dict() == policy.to_dict()
    # volumes may also be given as an ordered mapping of name -> spec
    as_mapping = config(tmp_path)
    as_mapping["volumes"] = {"hot": {"disks": ["d0", "d1"], "layout": "raid1"}, "cold": {"disks": ["d3"]}}
    policy = StoragePolicy.from_dict(as_mapping)
    assert [(v.name, v.layout) for v in policy.volumes] == [("hot", "raid1"), ("cold", "jbod")]


@pytest.mark.parametrize("change, message", [
    ({"bogus": 1}, r"unknown key 'bogus' in volumes\[0\]; valid keys: name, disks, layout"),
    ({"layout": "raid10"}, r"layout: 'raid10' is not one of single, jbod, raid0, raid1, raid5, raid6"),
    ({"disks": ["d0", "d1"]}, r"layout raid5 needs at least 3 disks, got 2"),
    ({"layout": "raid6"}, r"layout raid6 needs at least 4 disks, got 3"),
    ({"disks": ["d0", "d9"]}, r"unknown disk 'd9'; defined disks: d0, d1, d2, d3"),
    ({"stripe_unit_bytes": 10}, r"stripe_unit_bytes must be an integer >= 1024"),
    ({"layout": "raid1", "disks": ["d0"]}, r"layout raid1 needs at least 2 disks, got 1"),
    ({"layout": "single", "disks": ["d0", "d1"]}, r"layout single takes exactly 1 disk"),
    ({"jbod_placement": "random"}, r"jbod_placement 'random' is not one of round_robin, least_used"),
])
def test_volume_validation_names_the_problem(tmp_path: Path, change: dict, message: str) -> None:
    with pytest.raises(InvalidOptionError, match=message):
        StoragePolicy.from_dict(config(tmp_path, **change))


def test_policy_validation(tmp_path: Path) -> None:
    bad = config(tmp_path)
    bad["colour"] = "red"
    with pytest.raises(InvalidOptionError, match="unknown key 'colour' in storage policy; valid keys: name, move_factor"):
        StoragePolicy.from_dict(bad)
    bad = config(tmp_path)
    bad["move_factor"] = 1.5
    with pytest.raises(InvalidOptionError, match=r"move_factor must be a number in \[0, 1\]"):
        StoragePolicy.from_dict(bad)
    bad = config(tmp_path)
    bad["disks"]["d0"] = {"path": "/x", "speed": 3}
    with pytest.raises(InvalidOptionError, match="unknown key 'speed' in disks.d0; valid keys: path, capacity_bytes"):
        StoragePolicy.from_dict(bad)
    bad = config(tmp_path)
    bad["volumes"].append({"name": "cold", "disks": ["d2", "d3"], "layout": "jbod"})
    with pytest.raises(InvalidOptionError, match="a disk may belong to one volume only"):
        StoragePolicy.from_dict(bad)
    with pytest.raises(InvalidOptionError, match="missing key 'volumes'"):
        StoragePolicy.from_dict({"disks": {"a": "/a"}})
    (tmp_path / "broken.json").write_text("{nope")
    with pytest.raises(InvalidOptionError, match="broken.json: not valid JSON"):
        StoragePolicy.from_json(tmp_path / "broken.json")


def test_single_policy_is_the_table_directory(tmp_path: Path) -> None:
    store = PartStore(StoragePolicy.single(tmp_path / "table"))
    files, boundaries = synthetic_part(np.random.default_rng(0))
    store.write_part("all_1_1_0", files, boundaries)
    assert disk_files(tmp_path / "table" / "all_1_1_0") == files
    (tmp_path / "table" / "detached").mkdir()
    (tmp_path / "table" / "_mergetree").mkdir()
    assert store.list_parts() == ["all_1_1_0"]


def test_jbod_round_robin_and_least_used(tmp_path: Path) -> None:
    disks = [Disk(f"d{i}", str(tmp_path / f"d{i}")) for i in range(3)]
    store = PartStore(StoragePolicy("p", [Volume("v", disks, "jbod")]), "t")
    for i in range(6):
        store.write_part(f"all_{i}_{i}_0", {"a.bin": b"x" * 10, "count.txt": b"1"})
    placed = [store.part_location(f"all_{i}_{i}_0").disks for i in range(6)]
    assert placed == [("d0",), ("d1",), ("d2",), ("d0",), ("d1",), ("d2",)]
    capped = [Disk("small", str(tmp_path / "s"), capacity_bytes=10_000),
              Disk("big", str(tmp_path / "b"), capacity_bytes=1_000_000)]
    store = PartStore(StoragePolicy("q", [Volume("v", capped, "jbod", jbod_placement="least_used")]))
    for i in range(3):
        store.write_part(f"all_{i}_{i}_0", {"a.bin": b"y" * 3000})
    assert {store.part_location(f"all_{i}_{i}_0").disks for i in range(3)} == {("big",)}


def test_placement_by_size_and_move_factor(tmp_path: Path) -> None:
    hot = Volume("hot", [Disk(f"h{i}", str(tmp_path / f"h{i}"), capacity_bytes=300_000) for i in range(3)],
                 "raid5", stripe_unit_bytes=8192, max_data_part_size=300_000)
    cold = Volume("cold", [Disk("c0", str(tmp_path / "c0")), Disk("c1", str(tmp_path / "c1"))], "jbod")
    policy = StoragePolicy("tiered", [hot, cold], move_factor=0.5)
    store = PartStore(policy, "t")
    rng = np.random.default_rng(1)
    big = rng.integers(0, 256, 350_000, dtype=np.uint8).tobytes()
    store.write_part("all_1_1_0", {"a.bin": big}, {"a.bin": np.arange(0, 350_000, 7000)})
    assert store.part_location("all_1_1_0").volume == "cold", "bigger than hot's max_data_part_size"
    written = {}
    for i in range(2, 6):
        data = rng.integers(0, 256, 120_000, dtype=np.uint8).tobytes()
        written[f"all_{i}_{i}_0"] = data
        store.write_part(f"all_{i}_{i}_0", {"a.bin": data}, {"a.bin": np.arange(0, 120_000, 6000)})
    volumes = [store.part_location(p).volume for p in written]
    assert volumes[0] == "hot" and volumes[-1] == "cold", "once hot is below move_factor free, parts go cold"
    # background moves: fill hot past the factor by hand, then let the mover drain it
    store.move_part("all_5_5_0", "hot")
    assert store.part_location("all_5_5_0").volume == "hot"
    moves = store.move_parts_by_factor()
    assert moves and all(src == "hot" and dst == "cold" for _p, src, dst in moves)
    assert hot.free_fraction() >= policy.move_factor
    for part, data in written.items():
        assert store.read_file(part, "a.bin") == data
    assert store.read_file("all_1_1_0", "a.bin") == big
    with pytest.raises(InvalidOptionError, match="exceeds max_data_part_size_bytes 300000 of volume 'hot'"):
        store.move_part("all_1_1_0", "hot")
    with pytest.raises(InvalidOptionError, match="no volume 'warm'; volumes: hot, cold"):
        store.move_part("all_1_1_0", "warm")


def test_move_keeps_cut_points(tmp_path: Path) -> None:
    raid0 = Volume("fast", [Disk(f"f{i}", str(tmp_path / f"f{i}")) for i in range(2)], "raid0", stripe_unit_bytes=4096)
    raid5 = Volume("safe", [Disk(f"s{i}", str(tmp_path / f"s{i}")) for i in range(3)], "raid5", stripe_unit_bytes=4096)
    store = PartStore(StoragePolicy("p", [raid0, raid5]), "t")
    files, boundaries = synthetic_part(np.random.default_rng(2))
    store.write_part("all_1_1_0", files, boundaries)
    store.move_part("all_1_1_0", "safe")
    location = store.part_location("all_1_1_0")
    assert location.volume == "safe" and location.layout == "raid5"
    assert not any((Path(d.path) / "t" / "all_1_1_0").exists() for d in raid0.disks)
    for name, data in files.items():
        assert store.read_file("all_1_1_0", name) == data
    np.testing.assert_array_equal(store.boundaries("all_1_1_0", "c0.bin"), boundaries["c0.bin"])


@pytest.mark.parametrize("layout, n_disks", [("raid5", 3), ("raid6", 4)])
def test_clickhouse_part_through_parity_raid_and_back(tmp_path: Path, layout: str, n_disks: int) -> None:
    """A part ClickHouse wrote, striped over raid5 (raid6), read with one disk (two disks) lost,
    exported and attached back."""
    from tests.format.chdb_util import session_at

    s = session_at(tmp_path / "ch")
    s.query("CREATE TABLE t (id UInt64, name String) ENGINE = MergeTree ORDER BY id "
            "SETTINGS min_bytes_for_wide_part = 0")
    s.query("INSERT INTO t SELECT number, concat('n', toString(number)) FROM numbers(200000)")
    expected = s.query("SELECT count(), sum(id), sum(length(name)) FROM t", "CSV").bytes()
    table_dir = next((tmp_path / "ch" / "store").glob("*/*/all_1_1_0")).parent
    original = disk_files(table_dir / "all_1_1_0")

    # A plain directory without a stripe map (as ClickHouse writes it) is listed, read, and scrubbed
    # as unverified.
    plain = PartStore(StoragePolicy.single(table_dir))
    assert plain.list_parts() == ["all_1_1_0"]
    assert plain.read_file("all_1_1_0", "id.bin") == original["id.bin"]
    assert plain.scrub().unverified_parts == ["all_1_1_0"]

    disks = [Disk(f"d{i}", str(tmp_path / f"d{i}")) for i in range(n_disks)]
    store = PartStore(StoragePolicy("r", [Volume("v", disks, layout, stripe_unit_bytes=16384)]), "t")
    cuts = {name: compressed_block_starts(data) for name, data in original.items() if name.endswith(".bin")}
    assert all(c is not None and len(c) >= 2 for c in cuts.values()), "several blocks per column"
    assert store.import_plain(table_dir / "all_1_1_0") == "all_1_1_0"
    for name, starts in cuts.items():
        np.testing.assert_array_equal(store.boundaries("all_1_1_0", name), starts)
    assert store.part_location("all_1_1_0").disks == tuple(d.name for d in disks)
    lost = disks[1:1 + n_disks - 2]
    for disk in lost:
        shutil.rmtree(disk.path)

    s.query("ALTER TABLE t DETACH PART 'all_1_1_0'")
    shutil.rmtree(table_dir / "detached" / "all_1_1_0")  # attach our copy, not ClickHouse's own
    with pytest.warns(UserWarning, match="|".join(d.name for d in lost)):
        store.export_plain("all_1_1_0", table_dir / "detached" / "all_1_1_0")
    assert disk_files(table_dir / "detached" / "all_1_1_0") == original
    s.query("ALTER TABLE t ATTACH PART 'all_1_1_0'")
    check = s.query("CHECK TABLE t", "CSV").bytes().decode().strip().splitlines()
    assert check and all(line.split(",")[1] == "1" for line in check), check
    assert s.query("SELECT count(), sum(id), sum(length(name)) FROM t", "CSV").bytes() == expected
    s.close()


@pytest.mark.parametrize("layout, usable", [("jbod", 100_000), ("raid0", 40_000), ("raid1", 10_000),
                                            ("raid5", 30_000), ("raid6", 20_000)])
def test_usable_capacity_per_layout(tmp_path: Path, layout: str, usable: int) -> None:
    """Disks of 10, 20, 30 and 40 kB: jbod adds them up; the others are limited by the smallest
    disk times the disks holding data (raid1 one, raid0 all four, raid5 three, raid6 two)."""
    disks = [Disk(f"d{i}", str(tmp_path / f"d{i}"), capacity_bytes=(i + 1) * 10_000) for i in range(4)]
    volume = Volume("v", disks, layout)
    assert volume.total_bytes() == usable
    assert volume.free_bytes() == usable and volume.free_fraction() == 1.0

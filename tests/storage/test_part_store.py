"""Conformance, fault, rebuild and scrub tests that every layout runs through one PartStore API."""

from __future__ import annotations

import os
import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest

from spark_mergetree.errors import InvalidOptionError, StorageError
from spark_mergetree.storage import DegradedReadWarning, PartStore
from spark_mergetree.storage.stripe_map import IN_PLAIN_FILE, UNITS_FILE_NAME
from tests.storage.conftest import Setup, disk_files, stored_map, synthetic_part

PART = "202401_1_1_0"


def write_two_parts(setup: Setup, seed: int = 0) -> dict[str, dict[str, bytes]]:
    rng = np.random.default_rng(seed)
    written = {}
    for part in (PART, "202401_2_2_0"):
        files, boundaries = synthetic_part(rng)
        setup.store.write_part(part, files, boundaries)
        written[part] = files
    return written


def assert_reads_equal(setup: Setup, written: dict[str, dict[str, bytes]], rng: np.random.Generator) -> None:
    for part, files in written.items():
        for name, data in files.items():
            assert setup.store.read_file(part, name) == data, (part, name)
            for _ in range(5):
                a, b = sorted(rng.integers(0, len(data) + 1, 2).tolist())
                assert setup.store.read_range(part, name, a, b) == data[a:b], (part, name, a, b)


# ---------------------------------------------------------------- conformance


def test_round_trip(setup: Setup) -> None:
    written = write_two_parts(setup)
    store = setup.store
    assert store.list_parts() == sorted(written)
    for part, files in written.items():
        assert store.list_files(part) == sorted(files)
        assert store.exists(part) and store.exists(part, "count.txt") and not store.exists(part, "nope.bin")
        for name, data in files.items():
            assert store.file_size(part, name) == len(data)
        location = store.part_location(part)
        assert location.layout == setup.layout and location.volume == "main"
        expected_disks = 1 if setup.layout in ("single", "jbod") else len(setup.disks)
        assert len(location.disks) == expected_disks
    assert_reads_equal(setup, written, np.random.default_rng(1))
    assert not store.exists("202401_9_9_0")
    # nothing temporary is left behind
    for disk in setup.disks:
        assert not [p for p in Path(disk.path).rglob("tmp_*")]


def test_ranges_at_unit_edges(setup: Setup) -> None:
    written = write_two_parts(setup)
    smap = stored_map(setup, PART)
    data = written[PART]["c0.bin"]
    for u in smap.units_of("c0.bin"):
        a, n = int(smap.unit_offset[u]), int(smap.unit_length[u])
        for lo, hi in [(a, a + n), (a, a + 1), (max(0, a - 1), min(len(data), a + n + 1)), (a + n, a + n)]:
            assert setup.store.read_range(PART, "c0.bin", lo, hi) == data[lo:hi]


def test_units_follow_boundaries(setup: Setup) -> None:
    rng = np.random.default_rng(5)
    files, boundaries = synthetic_part(rng)
    setup.store.write_part(PART, files, boundaries)
    smap = stored_map(setup, PART)
    for name, cuts in boundaries.items():
        starts = smap.unit_offset[list(smap.units_of(name))]
        assert np.isin(starts, np.append(cuts, len(files[name]))).all()
        assert int(smap.unit_length[list(smap.units_of(name))].sum()) == len(files[name])
    if setup.layout in ("raid0", "raid5"):
        used = set(smap.unit_disk[list(smap.units_of("c0.bin"))].tolist())
        assert len(used) >= 2, "a column's units are spread over disks"
        for disk in setup.disks:
            part_dir = setup.store.table_dir(disk) / PART
            for small in ("count.txt", "columns.txt", "checksums.txt", "c0.mrk2", "stripe_map.json"):
                assert (part_dir / small).is_file(), "metadata and the map are on every disk"


def test_plain_copies_are_clickhouse_directories(setup: Setup) -> None:
    written = write_two_parts(setup)
    if setup.layout in ("raid0", "raid5"):
        # Striped disks hold units, the replicated small files and the map, never a column whole.
        for disk in setup.disks:
            names = set(disk_files(setup.store.table_dir(disk) / PART))
            assert "units.bin" in names and "stripe_map.json" in names and "c0.bin" not in names
        return
    for disk_name in setup.store.part_location(PART).disks:
        disk = next(d for d in setup.disks if d.name == disk_name)
        assert disk_files(setup.store.table_dir(disk) / PART) == written[PART]


def test_export_plain(setup: Setup, tmp_path: Path) -> None:
    written = write_two_parts(setup)
    destination = setup.store.export_plain(PART, tmp_path / "export" / "detached" / PART)
    assert disk_files(destination) == written[PART]
    with pytest.raises(StorageError, match="already exists"):
        setup.store.export_plain(PART, destination)


def test_rename_and_remove(setup: Setup) -> None:
    written = write_two_parts(setup)
    store = setup.store
    store.rename_part(PART, "202401_1_1_1")
    assert store.list_parts() == ["202401_1_1_1", "202401_2_2_0"]
    assert store.read_file("202401_1_1_1", "c1.bin") == written[PART]["c1.bin"]
    with pytest.raises(StorageError, match="already exists"):
        store.rename_part("202401_1_1_1", "202401_2_2_0")
    store.remove_part("202401_1_1_1")
    assert store.list_parts() == ["202401_2_2_0"]
    with pytest.raises(StorageError, match="202401_1_1_1"):
        store.read_file("202401_1_1_1", "c1.bin")
    for disk in setup.disks:
        leftovers = [p.name for p in store.table_dir(disk).iterdir()] if store.table_dir(disk).exists() else []
        assert all(name.startswith("202401_2_2_0") for name in leftovers), leftovers


def test_bad_input_is_rejected(setup: Setup) -> None:
    store = setup.store
    files = {"a.bin": b"x" * 100, "count.txt": b"1"}
    with pytest.raises(InvalidOptionError, match="a.bin"):
        store.write_part(PART, files, {"a.bin": np.array([0, 50, 200])})
    with pytest.raises(InvalidOptionError, match="sorted"):
        store.write_part(PART, files, {"a.bin": np.array([0, 60, 50])})
    with pytest.raises(InvalidOptionError, match="not among"):
        store.write_part(PART, files, {"b.bin": np.array([0])})
    with pytest.raises(InvalidOptionError, match="reserved"):
        store.write_part(PART, {"units.bin": b""})
    with pytest.raises(InvalidOptionError, match="part name"):
        store.write_part("tmp_x", files)
    store.write_part(PART, files, {"a.bin": np.array([0, 50])})
    with pytest.raises(StorageError, match="already exists"):
        store.write_part(PART, files)
    with pytest.raises(InvalidOptionError, match=r"range \[90, 101\)"):
        store.read_range(PART, "a.bin", 90, 101)
    with pytest.raises(StorageError, match="no file 'zz.bin'"):
        store.read_file(PART, "zz.bin")


# ---------------------------------------------------------------- faults


def _victim(setup: Setup, part: str) -> tuple[int, Path]:
    """The disk to damage: the holder for single/jbod, else the disk of c0.bin's first unit."""
    location = setup.store.part_location(part)
    smap = stored_map(setup, part)
    first = smap.units_of("c0.bin")[0]
    disk_index = 0 if smap.unit_disk[first] == IN_PLAIN_FILE else int(smap.unit_disk[first])
    disk = next(d for d in setup.disks if d.name == location.disks[disk_index])
    return setup.disks.index(disk), setup.store.table_dir(disk) / part


def _damage(setup: Setup, part: str, fault: str) -> str:
    index, part_dir = _victim(setup, part)
    disk = setup.disks[index]
    smap = stored_map(setup, part)
    first = smap.units_of("c0.bin")[0]
    striped = smap.unit_disk[first] != IN_PLAIN_FILE
    target = part_dir / (UNITS_FILE_NAME if striped else "c0.bin")
    offset = int(smap.unit_disk_offset[first])
    if fault == "disk_deleted":
        shutil.rmtree(disk.path)
    elif fault == "disk_emptied":
        shutil.rmtree(disk.path)
        os.makedirs(disk.path)
    elif fault == "bytes_flipped":
        with open(target, "r+b") as f:
            f.seek(offset + int(smap.unit_length[first]) // 2)
            byte = f.read(1)
            f.seek(-1, os.SEEK_CUR)
            f.write(bytes([byte[0] ^ 0x5A]))
    elif fault == "unit_truncated":
        os.truncate(target, offset + int(smap.unit_length[first]) - 1)
    return disk.name


FAULTS = ["disk_deleted", "disk_emptied", "bytes_flipped", "unit_truncated"]


@pytest.mark.parametrize("fault", FAULTS)
def test_fault_recovered_or_reported(setup: Setup, fault: str) -> None:
    written = write_two_parts(setup)
    disk_name = _damage(setup, PART, fault)
    # A fresh store: nothing cached from before the damage.
    store = PartStore(setup.policy, setup.store.table_path)
    if setup.redundant:
        with pytest.warns(DegradedReadWarning) as caught:
            assert store.read_file(PART, "c0.bin") == written[PART]["c0.bin"]
        message = str(caught[0].message)
        assert disk_name in message and PART in message
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DegradedReadWarning)
            assert_reads_equal(setup, written, np.random.default_rng(2))
    else:
        with pytest.raises(StorageError) as error:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DegradedReadWarning)
                store.read_file(PART, "c0.bin")
        assert PART in str(error.value)
        if not (setup.layout in ("single", "jbod") and fault == "disk_emptied"):
            assert disk_name in str(error.value)
        if setup.layout == "raid0" or fault in ("bytes_flipped", "unit_truncated"):
            assert "c0.bin" in str(error.value)
    store.close()


def test_raid5_two_disks_lost_is_an_error(tmp_path: Path) -> None:
    from tests.storage.conftest import make_store

    setup = make_store(tmp_path, "raid5", 4)
    files, boundaries = synthetic_part(np.random.default_rng(3), max_bytes=200_000)
    setup.store.write_part(PART, files, boundaries)
    shutil.rmtree(setup.disks[1].path)
    shutil.rmtree(setup.disks[2].path)
    store = PartStore(setup.policy, setup.store.table_path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DegradedReadWarning)
        assert store.read_file(PART, "count.txt") == files["count.txt"], "metadata is on every disk"
        with pytest.raises(StorageError) as error:
            store.read_file(PART, "c0.bin")
    message = str(error.value)
    assert PART in message and "c0.bin" in message and "disk1" in message and "disk2" in message


def test_replicated_metadata_survives_in_raid0(tmp_path: Path) -> None:
    from tests.storage.conftest import make_store

    setup = make_store(tmp_path, "raid0", 3)
    files, boundaries = synthetic_part(np.random.default_rng(4))
    setup.store.write_part(PART, files, boundaries)
    unit = stored_map(setup, PART).units_of("checksums.txt")[0]
    first_choice = setup.disks[unit % 3]  # copies of whole files are tried in rotation by unit
    (setup.store.table_dir(first_choice) / PART / "checksums.txt").write_bytes(b"garbage")
    with pytest.warns(DegradedReadWarning, match=first_choice.name):
        assert setup.store.read_file(PART, "checksums.txt") == files["checksums.txt"]


def test_damaged_map_copy_is_skipped(setup: Setup) -> None:
    written = write_two_parts(setup)
    store = setup.store
    holder = next(d for d in setup.disks if d.name == store.part_location(PART).disks[0])
    map_path = Path(store.layout(setup.policy.volumes[0]).map_path(holder, PART))
    map_path.write_bytes(map_path.read_bytes()[:-3] + b"xyz")
    fresh = PartStore(setup.policy, store.table_path)
    assert fresh.read_file(PART, "c2.bin") == written[PART]["c2.bin"]
    report = fresh.scrub()
    assert any(p.kind == "map" and p.disk == holder.name and p.part == PART for p in report.problems)
    if setup.layout in ("single", "jbod"):
        # The only map copy is gone: bytes still come back (unverified) and scrub says so.
        assert report.unverified_parts == [PART]


# ---------------------------------------------------------------- rebuild and scrub


def test_rebuild_restores_disk_byte_identically(setup: Setup) -> None:
    write_two_parts(setup)
    victim = setup.disks[-1]
    before = disk_files(Path(victim.path))
    shutil.rmtree(victim.path, ignore_errors=True)  # a jbod disk may never have received a part
    os.makedirs(victim.path)
    store = PartStore(setup.policy, setup.store.table_path)
    if not setup.redundant:
        with pytest.raises(StorageError, match=victim.name):
            store.rebuild(victim.name, progress=False)
        return
    report = store.rebuild(victim.name, progress=False)
    assert sorted(report.parts_rebuilt) == [PART, "202401_2_2_0"]
    assert disk_files(Path(victim.path)) == before
    assert store.scrub().ok


def test_rebuild_with_progress_bar(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tests.storage.conftest import make_store

    setup = make_store(tmp_path, "raid5", 3)
    files, boundaries = synthetic_part(np.random.default_rng(6))
    setup.store.write_part(PART, files, boundaries)
    before = disk_files(Path(setup.disks[0].path))
    shutil.rmtree(setup.disks[0].path)
    setup.store.rebuild("disk0", progress=True)
    assert "rebuild disk0" in capsys.readouterr().err
    assert disk_files(Path(setup.disks[0].path)) == before


def test_scrub_finds_every_fault(setup: Setup) -> None:
    write_two_parts(setup)
    assert setup.store.scrub().ok
    expected = set()
    for part, fault in ((PART, "bytes_flipped"), ("202401_2_2_0", "unit_truncated")):
        index, _ = _victim(setup, part)
        disk = _damage(setup, part, fault)
        expected.add((part, disk, "checksum" if fault == "bytes_flipped" else "truncated"))
    store = PartStore(setup.policy, setup.store.table_path)
    report = store.scrub()
    found = {(p.part, p.disk, p.kind) for p in report.problems}
    assert expected <= found, (expected, report)
    # Nothing healthy is reported (truncating units.bin also cuts the units stored after it).
    assert {(p.part, p.disk) for p in report.problems} == {(part, disk) for part, disk, _ in expected}
    assert report.parts_checked == 2 and report.units_checked > 0


def test_scrub_finds_bad_parity(tmp_path: Path) -> None:
    from tests.storage.conftest import make_store

    setup = make_store(tmp_path, "raid5", 3)
    files, boundaries = synthetic_part(np.random.default_rng(7))
    setup.store.write_part(PART, files, boundaries)
    smap = stored_map(setup, PART)
    disk = setup.disks[int(smap.parity_disk[0])]
    units = setup.store.table_dir(disk) / PART / UNITS_FILE_NAME
    raw = bytearray(units.read_bytes())
    raw[int(smap.parity_disk_offset[0])] ^= 1
    units.write_bytes(bytes(raw))
    report = PartStore(setup.policy, setup.store.table_path).scrub()
    assert [(p.disk, p.kind) for p in report.problems] == [(disk.name, "checksum")]
    assert "parity of stripe 0" in report.problems[0].detail
    assert report.parity_checked == smap.stripe_first_unit.size


# ---------------------------------------------------------------- atomicity and layout details


def test_failed_write_leaves_nothing(setup: Setup) -> None:
    files, boundaries = synthetic_part(np.random.default_rng(8))
    broken = setup.disks[-1]
    Path(broken.path).parent.mkdir(parents=True, exist_ok=True)
    Path(broken.path).write_bytes(b"not a directory")
    store = setup.store
    if setup.layout in ("single", "jbod"):
        # jbod round robin starts at the first disk; reach the broken one
        for i in range(len(setup.disks) - 1):
            store.write_part(f"all_{i + 5}_{i + 5}_0", files, boundaries)
    before = store.list_parts()
    with pytest.raises(StorageError, match=f"{PART}.*{broken.name}"):
        store.write_part(PART, files, boundaries)
    assert store.list_parts() == before
    for disk in setup.disks[:-1]:
        assert not list(Path(disk.path).rglob("tmp_*"))


def test_leftovers_are_not_parts_and_are_cleaned(setup: Setup) -> None:
    write_two_parts(setup)
    table_dir = setup.store.table_dir(setup.disks[0])
    (table_dir / "tmp_202401_3_3_0").mkdir(parents=True)
    (table_dir / "delete_tmp_202401_4_4_0").mkdir()
    (table_dir / "202401_5_5_0.stripe_map").write_bytes(b"stale")
    assert setup.store.list_parts() == [PART, "202401_2_2_0"]
    removed = {Path(p).name for p in setup.store.cleanup_tmp()}
    assert removed == {"tmp_202401_3_3_0", "delete_tmp_202401_4_4_0", "202401_5_5_0.stripe_map"}
    assert setup.store.list_parts() == [PART, "202401_2_2_0"]
    assert setup.store.scrub().ok


def test_raid5_parity_rotates(tmp_path: Path) -> None:
    from tests.storage.conftest import make_store

    setup = make_store(tmp_path, "raid5", 4, unit_bytes=2048)
    files, boundaries = synthetic_part(np.random.default_rng(9))
    setup.store.write_part(PART, files, boundaries)
    smap = stored_map(setup, PART)
    n_stripes = smap.stripe_first_unit.size
    assert n_stripes >= 8
    np.testing.assert_array_equal(smap.parity_disk, (3 - np.arange(n_stripes)) % 4)
    for s in range(n_stripes):
        members = range(int(smap.stripe_first_unit[s]), int(smap.stripe_first_unit[s] + smap.stripe_unit_count[s]))
        disks = {int(smap.unit_disk[u]) for u in members} | {int(smap.parity_disk[s])}
        assert len(disks) == len(members) + 1, "a stripe never puts two of its units on one disk"
        assert smap.parity_length[s] == max(smap.unit_length[u] for u in members)


def test_concurrent_degraded_reads(tmp_path: Path) -> None:
    """Many callers share the store's thread pool; degraded reads from all of them stay exact."""
    from concurrent.futures import ThreadPoolExecutor

    from tests.storage.conftest import make_store

    setup = make_store(tmp_path, "raid5", 3, unit_bytes=4096)
    rng = np.random.default_rng(10)
    written = {}
    for i in range(4):
        files, boundaries = synthetic_part(rng)
        setup.store.write_part(f"all_{i}_{i}_0", files, boundaries)
        written[f"all_{i}_{i}_0"] = files
    shutil.rmtree(setup.disks[2].path)
    store = PartStore(setup.policy, setup.store.table_path)

    def read_everything(part: str) -> bool:
        return all(store.read_file(part, name) == data for name, data in written[part].items())

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DegradedReadWarning)
        with ThreadPoolExecutor(8) as callers:
            assert all(callers.map(read_everything, sorted(written) * 6))


def _write_in_child(policy, table_path: str, files: dict[str, bytes], boundaries: dict) -> None:
    store = PartStore(policy, table_path)
    store.write_part("202401_3_3_0", files, boundaries)
    assert store.read_file("202401_3_3_0", "c0.bin") == files["c0.bin"]


def test_forked_child_writes_through_the_shared_pool(tmp_path: Path) -> None:
    """The parent's I/O threads do not exist in a forked child: its writes and reads must not wait
    for them (they hung when the child reused the parent's pool)."""
    import multiprocessing

    from tests.storage.conftest import make_store

    setup = make_store(tmp_path, "raid1", 3)
    files, boundaries = synthetic_part(np.random.default_rng(14))
    setup.store.write_part(PART, files, boundaries)  # the parent's pool now has threads
    child = multiprocessing.get_context("fork").Process(
        target=_write_in_child, args=(setup.policy, setup.store.table_path, files, boundaries))
    child.start()
    child.join(60)
    if child.is_alive():
        child.kill()
        child.join()
    assert child.exitcode == 0
    assert setup.store.read_file("202401_3_3_0", "c1.bin") == files["c1.bin"]

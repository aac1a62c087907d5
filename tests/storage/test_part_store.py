"""Conformance, fault, rebuild and scrub tests that every layout runs through one PartStore API."""

from __future__ import annotations

import itertools
import os
import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest

from spark_mergetree.errors import InvalidOptionError, StorageError
from spark_mergetree.storage import DegradedReadWarning, PartStore
from spark_mergetree.storage.parity import unit_checksum
from spark_mergetree.storage.stripe_map import IN_PLAIN_FILE, STRIPED_MAP_NAME, UNITS_FILE_NAME
from tests.storage.conftest import Setup, disk_files, make_store, reference_pq, stored_map, synthetic_part

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
    if setup.striped:
        used = set(smap.unit_disk[list(smap.units_of("c0.bin"))].tolist())
        assert len(used) >= 2, "a column's units are spread over disks"
        for disk in setup.disks:
            part_dir = setup.store.table_dir(disk) / PART
            for small in ("count.txt", "columns.txt", "checksums.txt", "c0.mrk2", "stripe_map.json"):
                assert (part_dir / small).is_file(), "metadata and the map are on every disk"


def test_plain_copies_are_clickhouse_directories(setup: Setup) -> None:
    written = write_two_parts(setup)
    if setup.striped:
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
    store = setup.fresh_store()
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


def _move_aside(disks: list, lost: tuple[int, ...]) -> list[tuple[Path, Path]]:
    moved = []
    for i in lost:
        path = Path(disks[i].path)
        if path.exists():
            moved.append((path, path.with_name(path.name + ".aside")))
            path.rename(moved[-1][1])
    return moved


def test_survives_losing_any_tolerated_disks(redundant_setup: Setup) -> None:
    """Every combination of as many lost disks as the layout tolerates (raid6: any two; raid1: all
    mirrors but one) reads back exactly, with a warning naming a lost disk."""
    setup = redundant_setup
    written = write_two_parts(setup)
    for lost in itertools.combinations(range(len(setup.disks)), setup.tolerance):
        moved = _move_aside(setup.disks, lost)
        store = setup.fresh_store()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert_reads_equal(setup, written, np.random.default_rng(len(lost)))
        degraded = [str(w.message) for w in caught if issubclass(w.category, DegradedReadWarning)]
        assert degraded and any(setup.disks[i].name in m for m in degraded for i in lost), lost
        store.close()
        for original, aside in moved:
            aside.rename(original)


def test_losing_more_disks_than_tolerated_is_an_error(parity_setup: Setup) -> None:
    setup = parity_setup
    files, boundaries = synthetic_part(np.random.default_rng(3), max_bytes=200_000)
    setup.store.write_part(PART, files, boundaries)
    lost = range(1, 2 + setup.parities)
    for i in lost:
        shutil.rmtree(setup.disks[i].path)
    store = setup.fresh_store()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DegradedReadWarning)
        assert store.read_file(PART, "count.txt") == files["count.txt"], "metadata is on every disk"
        with pytest.raises(StorageError) as error:
            store.read_file(PART, "c0.bin")
    message = str(error.value)
    assert PART in message and "c0.bin" in message
    assert all(setup.disks[i].name in message for i in lost), message


def _stripe_items(setup: Setup, part: str, stripe: int) -> list[tuple[str, int, int, int]]:
    """(kind, disk index, offset in units.bin, length) of a stripe's data units, P and Q."""
    smap = stored_map(setup, part)
    items = [("data", int(smap.unit_disk[u]), int(smap.unit_disk_offset[u]), int(smap.unit_length[u]))
             for u in smap.stripe_units(stripe)]
    items.append(("P", int(smap.parity_disk[stripe]), int(smap.parity_disk_offset[stripe]),
                  int(smap.parity_length[stripe])))
    if setup.parities == 2:
        items.append(("Q", int(smap.q_disk[stripe]), int(smap.q_disk_offset[stripe]),
                      int(smap.parity_length[stripe])))
    return items


def _flip(setup: Setup, part: str, disk: int, offset: int, length: int) -> None:
    path = setup.store.table_dir(setup.disks[disk]) / part / UNITS_FILE_NAME
    raw = bytearray(path.read_bytes())
    raw[offset + length // 2] ^= 0x5A
    path.write_bytes(bytes(raw))


def test_stripe_survives_any_tolerated_damaged_units(parity_setup: Setup) -> None:
    """Damage (flipped bytes) in any set of units of a stripe up to its parity count — data and P,
    data and Q, two data units, ... — is repaired on read; one more damaged unit is an error."""
    setup = parity_setup
    files, boundaries = synthetic_part(np.random.default_rng(11), max_bytes=200_000)
    setup.store.write_part(PART, files, boundaries)
    items = _stripe_items(setup, PART, 0)
    assert sum(kind == "data" for kind, *_ in items) == len(setup.disks) - setup.parities, "stripe 0 is full"
    pristine = {d.name: (setup.store.table_dir(d) / PART / UNITS_FILE_NAME).read_bytes() for d in setup.disks}
    for count in range(1, setup.parities + 2):
        for damaged in itertools.combinations(items, count):
            if count > setup.parities and all(kind != "data" for kind, *_ in damaged):
                continue  # losing only parity units loses no data
            for _kind, disk, offset, length in damaged:
                _flip(setup, PART, disk, offset, length)
            store = setup.fresh_store()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DegradedReadWarning)
                if count <= setup.parities:
                    assert store.read_file(PART, "c0.bin") == files["c0.bin"], damaged
                else:
                    with pytest.raises(StorageError, match="c0.bin"):
                        store.read_file(PART, "c0.bin")
            for disk in setup.disks:
                (setup.store.table_dir(disk) / PART / UNITS_FILE_NAME).write_bytes(pristine[disk.name])


def test_replicated_metadata_survives_in_raid0(tmp_path: Path) -> None:
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


def test_rebuild_restores_disks_byte_identically(setup: Setup) -> None:
    """A replaced disk (raid6: two replaced disks, one after the other) is rebuilt byte for byte."""
    write_two_parts(setup)
    victims = setup.disks[-min(max(setup.tolerance, 1), 2):]
    before = {d.name: disk_files(Path(d.path)) for d in victims}
    for victim in victims:
        shutil.rmtree(victim.path, ignore_errors=True)  # a jbod disk may never have received a part
        os.makedirs(victim.path)
    store = setup.fresh_store()
    if not setup.redundant:
        with pytest.raises(StorageError, match=victims[0].name):
            store.rebuild(victims[0].name, progress=False)
        return
    for victim in victims:
        report = store.rebuild(victim.name, progress=False)
        assert sorted(report.parts_rebuilt) == [PART, "202401_2_2_0"]
    for victim in victims:
        assert disk_files(Path(victim.path)) == before[victim.name], victim.name
    assert store.scrub().ok


def test_rebuild_with_progress_bar(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
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


def test_scrub_finds_bad_parity(parity_setup: Setup) -> None:
    """A flipped byte in P (and in Q) of a stripe fails that parity unit's checksum."""
    setup = parity_setup
    files, boundaries = synthetic_part(np.random.default_rng(7))
    setup.store.write_part(PART, files, boundaries)
    smap = stored_map(setup, PART)
    parities = [(kind, disk, offset, length) for kind, disk, offset, length in _stripe_items(setup, PART, 0)
                if kind != "data"]
    for _kind, disk, offset, length in parities:
        _flip(setup, PART, disk, offset, length)
    report = setup.fresh_store().scrub()
    assert sorted((p.disk, p.kind) for p in report.problems) == \
        sorted((setup.disks[disk].name, "checksum") for _k, disk, _o, _n in parities)
    details = sorted(p.detail.split(":")[0] for p in report.problems)
    assert details == ["Q parity of stripe 0", "parity of stripe 0"][2 - setup.parities:]
    assert report.parity_checked == smap.n_stripes * setup.parities


def test_scrub_finds_parity_that_disagrees_with_its_data(parity_setup: Setup) -> None:
    """A data unit rewritten together with its checksum reads back as written, but no longer
    matches P (nor Q): scrub reports the stripe's parity units."""
    setup = parity_setup
    files, boundaries = synthetic_part(np.random.default_rng(12))
    setup.store.write_part(PART, files, boundaries)
    smap = stored_map(setup, PART)
    unit = smap.stripe_units(1)[0]
    disk, offset, length = int(smap.unit_disk[unit]), int(smap.unit_disk_offset[unit]), int(smap.unit_length[unit])
    _flip(setup, PART, disk, offset, length)
    path = setup.store.table_dir(setup.disks[disk]) / PART / UNITS_FILE_NAME
    smap.unit_hash[unit] = unit_checksum(path.read_bytes()[offset:offset + length])
    for d in setup.disks:
        (setup.store.table_dir(d) / PART / STRIPED_MAP_NAME).write_bytes(smap.to_bytes())
    report = setup.fresh_store().scrub()
    expected = [(setup.disks[int(smap.parity_disk[1])].name, "parity")]
    if setup.parities == 2:
        expected.append((setup.disks[int(smap.q_disk[1])].name, "parity"))
    assert sorted((p.disk, p.kind) for p in report.problems) == sorted(expected), report
    assert all("stripe 1" in p.detail for p in report.problems)


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


def test_parity_rotates(parity_setup: Setup, tmp_path: Path) -> None:
    """P on disk (n-1-s) mod n, Q on the next disk, data units after them round the ring."""
    setup = make_store(tmp_path / "small", parity_setup.layout, len(parity_setup.disks), unit_bytes=2048)
    files, boundaries = synthetic_part(np.random.default_rng(9))
    setup.store.write_part(PART, files, boundaries)
    smap = stored_map(setup, PART)
    n, k = len(setup.disks), setup.parities
    n_stripes = smap.n_stripes
    assert n_stripes >= 2 * n
    np.testing.assert_array_equal(smap.parity_disk, (n - 1 - np.arange(n_stripes)) % n)
    if k == 2:
        np.testing.assert_array_equal(smap.q_disk, (smap.parity_disk + 1) % n)
    for s in range(n_stripes):
        members = smap.stripe_units(s)
        data_disks = [int(smap.unit_disk[u]) for u in members]
        assert data_disks == [(int(smap.parity_disk[s]) + k + i) % n for i in range(len(members))]
        assert smap.parity_length[s] == max(smap.unit_length[u] for u in members)
    setup.store.close()


def test_parity_units_hold_p_and_q(parity_setup: Setup) -> None:
    """Reading units.bin as format_spec/storage.md lays it out, every stripe's P is the XOR and Q
    the GF(2^8) syndrome of its data units, computed independently, byte for byte."""
    setup = parity_setup
    files, boundaries = synthetic_part(np.random.default_rng(13))
    setup.store.write_part(PART, files, boundaries)
    smap = stored_map(setup, PART)
    raw = [(setup.store.table_dir(d) / PART / UNITS_FILE_NAME).read_bytes() for d in setup.disks]
    for d in range(len(setup.disks)):
        assert len(raw[d]) == smap.disk_units_bytes(d)
    for s in range(smap.n_stripes):
        data = [raw[int(smap.unit_disk[u])][int(smap.unit_disk_offset[u]):][:int(smap.unit_length[u])]
                for u in smap.stripe_units(s)]
        for u, unit in zip(smap.stripe_units(s), data):
            name = smap.file_of(u)
            assert unit == files[name][int(smap.unit_offset[u]):][:len(unit)]
        length = int(smap.parity_length[s])
        p, q = reference_pq(data, length)
        assert raw[int(smap.parity_disk[s])][int(smap.parity_disk_offset[s]):][:length] == p, s
        if setup.parities == 2:
            assert raw[int(smap.q_disk[s])][int(smap.q_disk_offset[s]):][:length] == q, s


def test_concurrent_degraded_reads(tmp_path: Path) -> None:
    """Many callers share the store's thread pool; degraded reads from all of them stay exact."""
    from concurrent.futures import ThreadPoolExecutor

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

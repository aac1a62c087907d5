"""Property tests: random files, cut points, unit sizes and disk counts round-trip through every layout;
raid1/raid5 survive the loss of any one disk and raid6 of any two; P, Q and the recovery of lost units
agree with an independent computation."""

from __future__ import annotations

import shutil
import tempfile
import warnings
from pathlib import Path

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spark_mergetree.storage import DegradedReadWarning, PartStore, cut_points, xor_parity
from spark_mergetree.storage.parity import q_parity, recover
from spark_mergetree.storage.policy import MIN_DISKS
from tests.storage.conftest import PARITY, make_store, reference_pq


@st.composite
def parts(draw: st.DrawFn) -> tuple[dict[str, bytes], dict[str, np.ndarray]]:
    files: dict[str, bytes] = {}
    boundaries: dict[str, np.ndarray] = {}
    for c in range(draw(st.integers(1, 3))):
        size = draw(st.integers(0, 30_000))
        seed = draw(st.integers(0, 2**32 - 1))
        files[f"c{c}.bin"] = np.random.default_rng(seed).integers(0, 256, size, dtype=np.uint8).tobytes()
        if draw(st.booleans()) or size == 0:
            cuts = draw(st.lists(st.integers(0, size), max_size=40))
            boundaries[f"c{c}.bin"] = np.asarray(sorted(cuts), dtype=np.int64)
    files["count.txt"] = draw(st.binary(max_size=20))
    return files, boundaries


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(part=parts(), layout=st.sampled_from(sorted(MIN_DISKS)), extra_disks=st.integers(0, 3),
       unit_bytes=st.integers(1024, 12_000), ranges=st.lists(st.tuples(st.floats(0, 1), st.floats(0, 1)), max_size=4))
def test_round_trip_any_layout(part, layout, extra_disks, unit_bytes, ranges) -> None:
    files, boundaries = part
    n_disks = 1 if layout == "single" else MIN_DISKS[layout] + extra_disks
    with tempfile.TemporaryDirectory() as root:
        setup = make_store(Path(root), layout, n_disks, unit_bytes)
        try:
            setup.store.write_part("all_1_1_0", files, boundaries)
            assert setup.store.list_parts() == ["all_1_1_0"]
            for name, data in files.items():
                assert setup.store.read_file("all_1_1_0", name) == data
                for x, y in ranges:
                    a, b = sorted((int(x * len(data)), int(y * len(data))))
                    assert setup.store.read_range("all_1_1_0", name, a, b) == data[a:b]
            assert setup.store.scrub().ok
        finally:
            setup.store.close()


@settings(max_examples=30, deadline=None)
@given(part=parts(), layout=st.sampled_from(["raid1", "raid5", "raid6"]), n_disks=st.integers(4, 6),
       lost=st.lists(st.integers(0, 5), min_size=2, max_size=2, unique=True), unit_bytes=st.integers(1024, 8192))
def test_redundant_layouts_survive_any_tolerated_disks(part, layout, n_disks, lost, unit_bytes) -> None:
    """raid1 and raid5 lose any one disk, raid6 any two."""
    files, boundaries = part
    with tempfile.TemporaryDirectory() as root:
        setup = make_store(Path(root), layout, n_disks, unit_bytes)
        try:
            setup.store.write_part("all_1_1_0", files, boundaries)
            for disk in {i % n_disks for i in lost[: PARITY.get(layout, 1)]}:
                shutil.rmtree(setup.disks[disk].path)
            fresh = PartStore(setup.policy, setup.store.table_path)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DegradedReadWarning)
                for name, data in files.items():
                    assert fresh.read_file("all_1_1_0", name) == data
            fresh.close()
        finally:
            setup.store.close()


@given(size=st.integers(0, 50_000), cuts=st.lists(st.integers(0, 50_000), max_size=60),
       unit_bytes=st.integers(1, 20_000))
def test_cut_points_are_boundaries_and_bounded(size, cuts, unit_bytes) -> None:
    bounds = np.asarray(sorted(c for c in cuts if c <= size), dtype=np.int64)
    points = cut_points(size, bounds, unit_bytes, "x.bin")
    assert points[0] == 0 and points[-1] == size and np.all(np.diff(points) > 0)
    allowed = set(bounds.tolist()) | {0, size}
    assert set(points.tolist()) <= allowed
    # a unit outgrows unit_bytes only when no boundary lies inside it
    for a, b in zip(points[:-1], points[1:]):
        if b - a > unit_bytes:
            assert not any(a < c < b for c in allowed)


@given(units=st.lists(st.binary(max_size=300), min_size=1, max_size=6))
def test_parity_rebuilds_any_unit(units) -> None:
    length = max(len(u) for u in units)
    parity = xor_parity(units, length)
    for lost in range(len(units)):
        others = [u for i, u in enumerate(units) if i != lost]
        assert xor_parity([parity, *others], length)[: len(units[lost])].tobytes() == units[lost]


@given(units=st.lists(st.binary(max_size=300), min_size=1, max_size=8), extra=st.integers(0, 9))
def test_p_and_q_match_the_field_definition(units, extra) -> None:
    length = max(len(u) for u in units) + extra
    p, q = reference_pq(units, length)
    assert xor_parity(units, length).tobytes() == p
    assert q_parity(units, length).tobytes() == q


@given(units=st.lists(st.binary(min_size=1, max_size=200), min_size=2, max_size=8), data=st.data())
def test_any_two_lost_units_are_recovered(units, data) -> None:
    """From P, Q or both: one or two lost data units, with or without one lost parity unit."""
    length = max(len(u) for u in units)
    p, q = reference_pq(units, length)
    lost = data.draw(st.lists(st.integers(0, len(units) - 1), min_size=1, max_size=2, unique=True))
    parities = [(p, q)] if len(lost) == 2 else [(p, q), (p, None), (None, q)]
    for p_left, q_left in parities:
        rebuilt = recover([None if i in lost else u for i, u in enumerate(units)], p_left, q_left, length)
        assert [r[: len(units[i])].tobytes() for i, r in zip(sorted(lost), rebuilt)] == [units[i] for i in sorted(lost)]


def test_unit_checksum_keeps_no_reference_to_the_unit() -> None:
    """Verifying a unit must not pin its buffer (every verified read leaked its bytes)."""
    from spark_mergetree.storage import unit_checksum

    unit = bytearray(range(256)) * 40
    assert unit_checksum(memoryview(unit)) == unit_checksum(bytes(unit))
    unit.extend(b"x")  # BufferError if an export of `unit` is still held

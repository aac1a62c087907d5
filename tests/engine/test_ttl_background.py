"""Background merges choose parts for their TTL as ClickHouse's do (engine/ttl_selection.py): a
part whose TTL is due is merged (alone, if need be) before any regular merge, a partition's TTL
delete merges wait `merge_with_ttl_timeout` between them, wholly expired parts go regardless;
the rows and `ttl.txt` left are those chdb's own background TTL merge leaves."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

from spark_mergetree.engine import optimize as optimizing
from spark_mergetree.engine import ttl_selection
from spark_mergetree.engine.ttl_selection import TTLPart, select_ttl_merge
from spark_mergetree.expressions.ttl import TTL_FILE
from tests.engine.test_ttl_merges import CREATE, TTL, _open, _ours, _rows, _select
from tests.format.chdb_util import close_session, make_chdb_table, open_session


@pytest.fixture(autouse=True)
def _fresh_postponements():
    ttl_selection.forget_postponements()
    yield
    ttl_selection.forget_postponements()


def _table(tmp_path: Path, timeout: int = 100000):
    create = CREATE.format(name="t", ttl=TTL).replace("merge_with_ttl_timeout = 100000",
                                                       f"merge_with_ttl_timeout = {timeout}")
    sess, directory = make_chdb_table(tmp_path, create, ["SYSTEM STOP MERGES t"])
    statement = sess.query("SHOW CREATE TABLE t", "TabSeparatedRaw").bytes().decode()
    close_session()
    return _open(directory, statement), directory


def _clickhouse_background(tmp_path: Path, directory: Path, source: str) -> tuple[list[tuple], str]:
    """Rows and `ttl.txt` once chdb's background merges (merges started, no OPTIMIZE) merged a copy
    of `source` (waited for up to 120 s)."""
    _, copy = make_chdb_table(tmp_path / "copy", CREATE.format(name="c", ttl=TTL), ["SYSTEM STOP MERGES c"])
    shutil.copytree(directory / source, copy / "detached" / source)
    sess = open_session(tmp_path / "copy")
    try:
        sess.query(f"ALTER TABLE c ATTACH PART '{source}'")
        sess.query("SYSTEM START MERGES c")
        deadline = time.monotonic() + 120
        while True:
            active = sess.query("SELECT name, path FROM system.parts WHERE table = 'c' AND active",
                                "TabSeparatedRaw").bytes().decode().split()
            if active and active[0] != source:
                break
            assert time.monotonic() < deadline, "chdb did not merge the part in 120 s"
            time.sleep(0.2)
        return _select(sess, "c"), (Path(active[1]) / TTL_FILE).read_text()
    finally:
        close_session()


def test_a_background_merge_expires_a_lone_due_part_as_clickhouse_does(tmp_path: Path) -> None:
    table, directory = _table(tmp_path)
    table.insert(_rows(0, [0, 7, 14, 21, 28, 35, 42, 49, 2, 0.5]))
    expected, expected_ttl = _clickhouse_background(tmp_path, directory, "all_1_1_0")
    assert optimizing.merge_step(table) == "all_1_1_1"
    assert _ours(table) == expected
    assert (table.path / "all_1_1_1" / TTL_FILE).read_text() == expected_ttl
    assert optimizing.merge_step(table) is None  # nothing due: the regular selector has one part


def test_ttl_delete_merges_of_a_partition_wait_merge_with_ttl_timeout(tmp_path: Path) -> None:
    table, _ = _table(tmp_path)
    table.insert(_rows(0, [0, 14, 2]))  # values due (and row 1 is odd: DELETE WHERE id % 2 = 0 keeps it)
    assert optimizing.merge_step(table) == "all_1_1_1"
    table.insert(_rows(10, [0.1, 35, 0.2]))  # one row due: the partition is postponed
    assert optimizing.merge_step(table) is None
    assert sorted(i for i, *_ in _ours(table)) == [0, 1, 2, 10, 11, 12]
    table.insert(_rows(20, [40, 50]))  # wholly expired: a drop merge does not wait
    assert optimizing.merge_step(table) == "all_3_3_1"
    assert sorted(i for i, *_ in _ours(table)) == [0, 1, 2, 10, 11, 12]
    ttl_selection.forget_postponements()  # (as when the timeout passed: a restarted ClickHouse forgets too)
    merged = optimizing.merge_step(table)
    assert merged is not None and merged.startswith("all_2_")
    assert sorted(i for i, *_ in _ours(table)) == [0, 1, 2, 10, 12]


def test_a_timeout_of_zero_merges_each_due_part_at_once(tmp_path: Path) -> None:
    table, _ = _table(tmp_path, timeout=0)
    table.insert(_rows(0, [0, 14]))
    table.insert(_rows(10, [0.1, 35]))
    # The earliest due part is the centre; its due neighbour joins it in one run.
    assert optimizing.merge_step(table) == "all_1_2_1"
    assert sorted(i for i, *_ in _ours(table)) == [0, 1, 10]  # (1: an odd id, 14 days old, stays)
    assert optimizing.merge_step(table) is None


def _part(name: str, low: int, high: int, size: int = 10) -> TTLPart:
    return TTLPart(name, rows=size, bytes=size, min_ttl=low, max_ttl=high, recompress_ttl=0)


def test_the_selector_widens_the_earliest_due_part_over_due_neighbours_within_caps() -> None:
    far = 10**6  # (the parts' greatest times: none is wholly expired before it)
    parts = {p.name: p for p in [_part("all_1_1_0", 50, far), _part("all_2_2_0", 20, far),
                                 _part("all_3_3_0", 90, far), _part("all_4_4_0", 200, far),
                                 _part("all_5_5_0", 60, far)]}
    chosen = select_ttl_merge("k1", parts, {}, {}, max_parts=10, max_bytes=0, max_rows=0,
                              has_recompression=False, now=100)
    assert chosen is not None and chosen.parts == ("all_1_1_0", "all_2_2_0", "all_3_3_0")
    # The partition is postponed now (merge_with_ttl_timeout's default, 4 hours) ...
    assert select_ttl_merge("k1", parts, {}, {}, max_parts=10, max_bytes=0, max_rows=0,
                            has_recompression=False, now=100 + 14399) is None
    # ... but not for another table, and not after the timeout.
    assert select_ttl_merge("k2", parts, {}, {}, max_parts=10, max_bytes=0, max_rows=0,
                            has_recompression=False, now=100) is not None
    assert select_ttl_merge("k1", parts, {}, {}, max_parts=10, max_bytes=0, max_rows=0,
                            has_recompression=False, now=100 + 14400) is not None
    # Caps: bytes keep the run to the centre and one neighbour; a reserved block splits it.
    capped = select_ttl_merge("k3", parts, {}, {}, max_parts=10, max_bytes=20, max_rows=0,
                              has_recompression=False, now=100)
    assert capped is not None and capped.parts == ("all_1_1_0", "all_2_2_0")
    split = select_ttl_merge("k4", parts, {"all": [(3, 3)]}, {}, max_parts=10, max_bytes=0, max_rows=0,
                             has_recompression=False, now=100)
    assert split is not None and split.parts == ("all_1_1_0", "all_2_2_0")
    # ttl_only_drop_parts: only wholly expired parts (greatest time due) are merged.
    assert select_ttl_merge("k5", parts, {}, {"ttl_only_drop_parts": "1"}, max_parts=10, max_bytes=0,
                            max_rows=0, has_recompression=False, now=100) is None
    gone = select_ttl_merge("k5", parts, {}, {"ttl_only_drop_parts": "1"}, max_parts=2, max_bytes=0,
                            max_rows=0, has_recompression=False, now=far)
    assert gone is not None and gone.parts == ("all_1_1_0", "all_2_2_0")


def test_a_part_whose_due_rule_merges_here_cannot_apply_is_left_to_clickhouse(tmp_path: Path) -> None:
    ttl = "TTL d + INTERVAL 1 DAY GROUP BY id SET w = any(w)"
    sess, directory = make_chdb_table(tmp_path, CREATE.format(name="t", ttl=ttl), ["SYSTEM STOP MERGES t"])
    statement = sess.query("SHOW CREATE TABLE t", "TabSeparatedRaw").bytes().decode()
    close_session()
    table = _open(directory, statement)
    table.insert(_rows(0, [0, 5]))
    # The TTL selectors pass it over (no background merge fails on it again and again).
    assert optimizing.merge_step(table) is None
    assert table.visible_parts()[1] == {"all_1_1_0"}

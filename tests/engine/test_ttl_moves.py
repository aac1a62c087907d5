"""TTL moves (`TO VOLUME` / `TO DISK`, engine/ttl_moves.py): a part whose move rule is due for all
its rows moves, whole, to that volume of the table's storage policy, in the background and by a
merge writing there; ClickHouse reads the moved part as its own; a rule naming a disk or volume
the policy lacks is refused when the table is created, as ClickHouse refuses it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from spark_mergetree import MergeTreeTable
from spark_mergetree.engine import optimize as optimizing
from spark_mergetree.errors import InvalidOptionError
from spark_mergetree.expressions.ddl import parse_create
from tests.engine.test_ttl_merges import _ours, _rows, _select
from tests.format.chdb_util import close_session, make_chdb_table, open_session

COLUMNS = "(d DateTime('UTC'), id UInt64, v UInt32, w String, n Nullable(Int32))"
CREATE = ("CREATE TABLE {name} " + COLUMNS + " ENGINE = MergeTree ORDER BY id TTL {ttl} "
          "SETTINGS index_granularity = 4, min_bytes_for_wide_part = 0")


def _policy(root: Path) -> dict:
    return {"disks": {"hot": str(root / "hot"), "cold": str(root / "cold")}, "move_factor": 0.0,
            "volumes": [{"name": "fast", "disks": ["hot"], "layout": "single"},
                        {"name": "slow", "disks": ["cold"], "layout": "single"}]}


def _table(root: Path, ttl: str) -> MergeTreeTable:
    table = MergeTreeTable.new(root / "t", parse_create(CREATE.format(name="t", ttl=ttl)),
                               {"auto_merge": False, "storage_policy": _policy(root)})
    table.write_directory()
    return table


def _volumes(table: MergeTreeTable) -> dict[str, str]:
    return {p: table.store.open(p).volume.name for p in sorted(table.visible_parts()[1])}


@pytest.mark.parametrize("target", ["VOLUME 'slow'", "DISK 'cold'"])
def test_a_part_whose_move_is_due_moves_to_its_volume_in_the_background(tmp_path: Path, target: str) -> None:
    table = _table(tmp_path, f"d + INTERVAL 5 DAY TO {target}, d + INTERVAL 60 DAY")
    table.insert(_rows(0, [6, 7, 8]))  # every row past 5 days: due
    table.insert(_rows(10, [1, 7]))  # one row not yet: stays
    before = _ours(table)
    assert _volumes(table) == {"all_1_1_0": "fast", "all_2_2_0": "fast"}
    assert optimizing.merge_step(table) == "all_1_1_1"  # copied to the volume, published as the next level
    assert _volumes(table) == {"all_1_1_1": "slow", "all_2_2_0": "fast"}
    assert _ours(table) == before
    assert optimizing.merge_step(table) is None
    assert table.check().ok
    # ClickHouse reads the moved part (its directory on the cold disk) as its own.
    (moved,) = [p for p in (tmp_path / "cold").rglob("all_1_1_1") if p.is_dir()]
    sess, directory = make_chdb_table(tmp_path / "ch", CREATE.format(name="c", ttl="d + INTERVAL 60 DAY"),
                                      ["SYSTEM STOP MERGES c"])
    close_session()
    shutil.copytree(moved, directory / "detached" / "all_1_1_1")
    sess = open_session(tmp_path / "ch")
    try:
        sess.query("ALTER TABLE c ATTACH PART 'all_1_1_1'")
        assert _select(sess, "c") == [r for r in before if r[0] < 10]
        checked = sess.query("CHECK TABLE c", "TabSeparatedRaw").bytes().decode().split("\n")
        assert [line.split("\t")[1] for line in checked if line] == ["1"]
    finally:
        close_session()


def test_a_merge_whose_rows_are_all_due_for_a_move_writes_its_part_there(tmp_path: Path) -> None:
    table = _table(tmp_path, "d + INTERVAL 5 DAY TO VOLUME 'slow', d + INTERVAL 60 DAY")
    table.insert(_rows(0, [6, 7]))
    table.insert(_rows(10, [9, 8]))
    (merged,) = table.optimize(final=True)
    assert _volumes(table) == {merged: "slow"}
    table.insert(_rows(20, [1]))
    (merged,) = table.optimize(final=True)  # a row not due: the merged part goes where new parts go
    assert _volumes(table) == {merged: "fast"}
    assert [r[0] for r in _ours(table)] == [0, 1, 10, 11, 20]


@pytest.mark.parametrize("target", ["DISK 'nope'", "VOLUME 'nope'"])
def test_a_move_to_a_disk_or_volume_the_policy_lacks_is_refused_at_create_as_clickhouse_does(
        tmp_path: Path, target: str) -> None:
    statement = CREATE.format(name="x", ttl=f"d + INTERVAL 1 DAY TO {target}")
    sess = open_session(tmp_path / "ch")
    try:
        with pytest.raises(Exception, match="BAD_TTL_EXPRESSION"):
            sess.query(statement)
    finally:
        close_session()
    with pytest.raises(InvalidOptionError, match=r"has no (disk|volume) 'nope'"):
        MergeTreeTable.new(tmp_path / "x", parse_create(statement), {"auto_merge": False})
    with pytest.raises(InvalidOptionError, match=r"has no (disk|volume) 'nope'"):
        MergeTreeTable.new(tmp_path / "y", parse_create(statement), {"storage_policy": _policy(tmp_path)})
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()


def test_a_part_too_big_for_the_target_volume_stays(tmp_path: Path) -> None:
    policy = _policy(tmp_path)
    policy["volumes"][1]["max_data_part_size_bytes"] = 100  # smaller than any part
    table = MergeTreeTable.new(tmp_path / "t", parse_create(CREATE.format(name="t", ttl="d + INTERVAL 5 DAY TO VOLUME 'slow'")),
                               {"auto_merge": False, "storage_policy": policy})
    table.write_directory()
    table.insert(_rows(0, [6, 7]))
    assert optimizing.merge_step(table) is None  # no move (and no endless round of them)
    assert _volumes(table) == {"all_1_1_0": "fast"}

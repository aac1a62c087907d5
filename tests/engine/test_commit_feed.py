"""engine/commit_feed.py: which parts each commit inserted, on real tables and their real logs."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from spark_mergetree import MergeTreeTable
from spark_mergetree.engine.commit_feed import HistoryGoneError, commits_after, last_commit, part_rows


def _table(path: Path, **settings: object) -> MergeTreeTable:
    return MergeTreeTable.create(path, [("id", "Int64"), ("v", "Int32")], "id",
                                 settings={"auto_merge": False, **settings})


def _insert(table: MergeTreeTable, start: int, rows: int = 10) -> int:
    table.insert(pa.table({"id": pa.array(range(start, start + rows), pa.int64()),
                           "v": pa.array([1] * rows, pa.int32())}))
    return table.coordinator.current_timestamp()


def test_inserts_feed_their_parts_and_a_merge_feeds_none(tmp_path: Path) -> None:
    table = _table(tmp_path / "t")
    first, second = _insert(table, 0), _insert(table, 10)
    table.optimize(final=True)
    latest = table.coordinator.current_timestamp()
    commits = commits_after(table, -1, latest)
    merged_at = commits[-1].csn
    assert [c.csn for c in commits[:2]] == [first, second] and len(commits) == 3 and second < merged_at <= latest
    assert [len(c.inserted) for c in commits] == [1, 1, 0]
    merge = commits[-1]
    assert not merge.changes_rows and len(merge.merged) == 1 and len(merge.removed) == 2
    assert part_rows(table, commits[0].inserted + commits[1].inserted) == 20
    assert last_commit(table, latest) == merged_at and last_commit(table, first - 1) is None
    # A range is half open at the start: only what came after `after`.
    assert [c.csn for c in commits_after(table, first, merged_at)] == [second, merged_at]


@pytest.mark.parametrize("change", ["delete", "update", "overwrite"])
def test_changes_of_fed_rows_are_named(tmp_path: Path, change: str) -> None:
    table = _table(tmp_path / "t")
    _insert(table, 0)
    before = table.coordinator.current_timestamp()
    if change == "delete":
        table.delete("id < 3")
    elif change == "update":
        table.update({"v": 2}, "id < 3")
    else:
        table.overwrite(pa.table({"id": pa.array([100], pa.int64()), "v": pa.array([1], pa.int32())}))
    (commit,) = commits_after(table, before, table.coordinator.current_timestamp())
    assert commit.changes_rows
    expected = "which holds other rows (an overwrite)" if change == "overwrite" else "it rewrites part"
    assert expected in (commit.change or "")


def test_a_resume_point_below_what_cleanup_kept_is_refused(tmp_path: Path) -> None:
    table = _table(tmp_path / "t", old_parts_lifetime=0)
    start = table.coordinator.current_timestamp()
    _insert(table, 0)
    _insert(table, 10)
    table.optimize(final=True)
    assert table.cleanup()  # the two inserted parts are gone: only the merged part holds their rows
    with pytest.raises(HistoryGoneError, match=f"commits after csn {start} are no longer all in its log"):
        commits_after(table, start, table.coordinator.current_timestamp())
    # From the merge on, the log is whole again.
    latest = table.coordinator.current_timestamp()
    assert commits_after(table, latest, latest) == []

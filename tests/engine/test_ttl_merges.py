"""Our merges apply a table's TTL as ClickHouse's do: OPTIMIZE FINAL over the same parts leaves the
same rows (rows past `TTL expr`, and past `expr DELETE WHERE cond` where cond holds, dropped), the
same values (past a column TTL: reset to the type's default) and the same `ttl.txt` in the merged
part as chdb 26.9's OPTIMIZE FINAL; ClickHouse then reads and checks our merged part."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pyarrow as pa
import pytest

from spark_mergetree import MergeTreeTable
from spark_mergetree.errors import UnsupportedError
from spark_mergetree.expressions.ttl import TTL_FILE
from tests.format.chdb_util import close_session, make_chdb_table, open_session

TTL = "TTL d + INTERVAL 10 DAY DELETE WHERE id % 2 = 0, d + INTERVAL 30 DAY"
CREATE = ("CREATE TABLE {name} (d DateTime('UTC'), id UInt64, v UInt32 TTL d + INTERVAL 1 DAY, w String, "
          "n Nullable(Int32) TTL d + INTERVAL 20 DAY) ENGINE = MergeTree ORDER BY id {ttl} "
          "SETTINGS merge_with_ttl_timeout = 100000, min_bytes_for_wide_part = 0, index_granularity = 4")
DAY = 86400


def _rows(start: int, ages_in_days: list[float]) -> pa.Table:
    """Rows whose `d` lies the given number of days (and half an hour, away from any boundary) ago."""
    now = int(time.time())
    ids = list(range(start, start + len(ages_in_days)))
    return pa.table({
        "d": pa.array([now - int(age * DAY) - 1800 for age in ages_in_days], pa.timestamp("s", "UTC")),
        "id": pa.array(ids, pa.uint64()),
        "v": pa.array([100 + i for i in ids], pa.uint32()),
        "w": [f"w{i}" for i in ids],
        "n": pa.array([None if i % 5 == 0 else i for i in ids], pa.int32()),
    })


def _open(directory: Path, statement: str) -> MergeTreeTable:
    """Our handle on the chdb table, with our background merges off (the test merges)."""
    (directory / "_mergetree").mkdir(exist_ok=True)
    (directory / "_mergetree" / "settings.json").write_text(json.dumps({"auto_merge": False}))
    return MergeTreeTable.open(directory, create_statement=statement)


def _select(sess, table: str) -> list[tuple]:
    data = pa.ipc.open_file(pa.py_buffer(sess.query(f"SELECT id, v, w, n FROM {table} ORDER BY id", "Arrow").bytes()))
    return [tuple(v.decode() if isinstance(v, bytes) else v for v in row.values())
            for row in data.read_all().to_pylist()]


def _ours(table: MergeTreeTable) -> list[tuple]:
    return [tuple(row.values()) for row in table.to_arrow(["id", "v", "w", "n"]).sort_by("id").to_pylist()]


def test_optimize_final_expires_rows_and_values_as_clickhouse_does(tmp_path: Path) -> None:
    sess, directory = make_chdb_table(tmp_path, CREATE.format(name="t", ttl=TTL), ["SYSTEM STOP MERGES t"])
    statement = sess.query("SHOW CREATE TABLE t", "TabSeparatedRaw").bytes().decode()
    close_session()
    table = _open(directory, statement)
    table.insert(_rows(0, [0, 7, 14, 21, 28, 35, 42, 49, 2, 0.5]))
    table.insert(_rows(100, [3, 11, 17, 24, 31, 38, 0, 19]))
    sources = sorted(p.name for p in directory.iterdir() if p.name.startswith("all_"))
    assert len(sources) == 2
    expected, expected_ttl = _clickhouse_final(tmp_path, directory, sources)  # a copy of the same two parts
    assert len(expected) < 18  # ClickHouse did drop rows
    assert any(v == 0 for _, v, _, _ in expected)  # and reset values

    (merged,) = table.optimize(final=True)
    assert _ours(table) == expected
    assert (table.path / merged / TTL_FILE).read_text() == expected_ttl
    assert table.check().ok
    sess = open_session(tmp_path)  # ClickHouse reads our merged part as its own
    try:
        sess.query("DETACH TABLE t")
        sess.query("ATTACH TABLE t")
        assert _select(sess, "t") == expected
        checked = sess.query("CHECK TABLE t", "TabSeparatedRaw").bytes().decode().split("\n")
        assert [line.split("\t")[1] for line in checked if line] == ["1"]  # (part, passed, message)
    finally:
        close_session()


def test_a_due_group_by_rule_is_refused_before_writing(tmp_path: Path) -> None:
    ttl = "TTL d + INTERVAL 1 DAY GROUP BY id SET w = any(w)"
    sess, directory = make_chdb_table(tmp_path, CREATE.format(name="t", ttl=ttl), ["SYSTEM STOP MERGES t"])
    statement = sess.query("SHOW CREATE TABLE t", "TabSeparatedRaw").bytes().decode()
    close_session()
    table = _open(directory, statement)
    table.insert(_rows(0, [0, 5]))
    table.insert(_rows(10, [7]))
    before = sorted(p.name for p in directory.iterdir())
    with pytest.raises(UnsupportedError, match=r"GROUP BY.*rows are due"):
        table.optimize(final=True)
    assert sorted(p.name for p in directory.iterdir()) == before


def _clickhouse_final(tmp_path: Path, directory: Path, sources: list[str]) -> tuple[list[tuple], str]:
    """The rows and the merged part's `ttl.txt` after chdb's OPTIMIZE FINAL over copies of `sources`
    (a server of its own: one on this root would merge table t's parts itself)."""
    _, copy = make_chdb_table(tmp_path / "copy", CREATE.format(name="c", ttl=TTL), ["SYSTEM STOP MERGES c"])
    for name in sources:
        shutil.copytree(directory / name, copy / "detached" / name)
    sess = open_session(tmp_path / "copy")
    try:
        for name in sources:
            sess.query(f"ALTER TABLE c ATTACH PART '{name}'")
        sess.query("SYSTEM START MERGES c")
        sess.query("OPTIMIZE TABLE c FINAL")
        expected = _select(sess, "c")
        (merged_path,) = sess.query("SELECT path FROM system.parts WHERE table = 'c' AND active",
                                    "TabSeparatedRaw").bytes().decode().split()
        return expected, (Path(merged_path) / TTL_FILE).read_text()
    finally:
        close_session()


def test_optimize_final_merges_a_lone_part_whose_ttl_is_due_again(tmp_path: Path) -> None:
    sess, directory = make_chdb_table(tmp_path, CREATE.format(name="t", ttl=TTL), ["SYSTEM STOP MERGES t"])
    statement = sess.query("SHOW CREATE TABLE t", "TabSeparatedRaw").bytes().decode()
    close_session()
    table = _open(directory, statement)
    table.insert(_rows(0, [0, 7, 14, 21, 28, 35, 42, 49, 2, 0.5]))
    (source,) = table.visible_parts()[1]
    expected, expected_ttl = _clickhouse_final(tmp_path, directory, [source])
    assert len(expected) < 10

    (merged,) = table.optimize(final=True)
    assert merged == "all_1_1_1"  # the one part, merged again (ClickHouse's FINAL does the same)
    assert _ours(table) == expected
    assert (table.path / merged / TTL_FILE).read_text() == expected_ttl
    assert table.optimize(final=True) == []  # nothing is due any more: the part stays
    assert table.check().ok


def test_optimize_final_leaves_a_lone_part_with_nothing_due(tmp_path: Path) -> None:
    sess, directory = make_chdb_table(tmp_path, CREATE.format(name="t", ttl=TTL), ["SYSTEM STOP MERGES t"])
    statement = sess.query("SHOW CREATE TABLE t", "TabSeparatedRaw").bytes().decode()
    close_session()
    table = _open(directory, statement)
    table.insert(_rows(0, [0.01, 0.2, 0.5]))  # every time lies ahead
    assert table.optimize(final=True) == []
    assert table.visible_parts()[1] == {"all_1_1_0"}


def test_a_lone_part_whose_rows_all_expired_becomes_an_empty_part(tmp_path: Path) -> None:
    sess, directory = make_chdb_table(tmp_path, CREATE.format(name="t", ttl=TTL), ["SYSTEM STOP MERGES t"])
    statement = sess.query("SHOW CREATE TABLE t", "TabSeparatedRaw").bytes().decode()
    close_session()
    table = _open(directory, statement)
    table.insert(_rows(0, [40, 50, 60]))
    expected, _ = _clickhouse_final(tmp_path, directory, ["all_1_1_0"])
    assert expected == []
    assert table.optimize(final=True) == ["all_1_1_1"]
    assert _ours(table) == [] and table.reader("all_1_1_1").rows == 0
    assert table.check().ok


def test_a_distributed_final_plans_the_lone_part_whose_ttl_is_due(tmp_path: Path) -> None:
    """The groups a distributed OPTIMIZE FINAL (Spark's) merges include a partition's lone part
    whose TTL is due; staged and committed as its tasks do, it leaves what OPTIMIZE FINAL leaves."""
    from spark_mergetree.engine import optimize as optimizing

    sess, directory = make_chdb_table(tmp_path, CREATE.format(name="t", ttl=TTL), ["SYSTEM STOP MERGES t"])
    statement = sess.query("SHOW CREATE TABLE t", "TabSeparatedRaw").bytes().decode()
    close_session()
    table = _open(directory, statement)
    table.insert(_rows(0, [0, 7, 14, 21, 28, 35, 42, 49, 2, 0.5]))
    tx, groups = optimizing.plan_group_merges(table, None, final=True)
    assert [g.parts for g in groups] == [("all_1_1_0",)]
    names = optimizing.group_result_names(table, groups)
    staged = [optimizing.stage_group_merge(table, g, "job1", n) for g, n in zip(groups, names, strict=True)]
    assert optimizing.commit_group_merges(table, tx, groups, staged) == ["all_1_1_1"]
    assert [i for i, *_ in _ours(table)] == [0, 1, 3, 8, 9]
    tx, groups = optimizing.plan_group_merges(table, None, final=True)
    assert groups == []

"""Tables with TTL: every part we write records its rows' TTL times in `ttl.txt` exactly as
ClickHouse's insert and merge record them (compared file to file with chdb 26.9), so ClickHouse's
TTL merges expire rows of our parts too; rules a part cannot record are refused before writing."""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow as pa
import pytest

from spark_mergetree import MergeTreeTable
from spark_mergetree.errors import UnsupportedError
from spark_mergetree.expressions.ttl import TTL_FILE
from tests.format.chdb_util import close_session, make_chdb_table, open_session

# Times from 2040 on (ClickHouse's background TTL merges leave them alone) in three zones.
CASES = {
    "row": ("ts DateTime('UTC'), v String", "TTL ts + INTERVAL 1 DAY",
            "toDateTime('2040-01-31 12:00:00', 'UTC') + number * 7777"),
    "zone-months": ("ts DateTime('America/New_York'), v String", "TTL ts + INTERVAL 1 MONTH",
                    "toDateTime('2040-01-31 01:30:00', 'America/New_York') + number * 86400"),
    "date": ("ts Date, v String", "TTL ts + toIntervalQuarter(1) DELETE", "toDate('2040-11-30') + number"),
    "column-and-recompress": ("ts DateTime('Asia/Kolkata'), v String TTL ts + INTERVAL 2 WEEK",
                              "TTL ts + INTERVAL 1 YEAR, ts + toIntervalHour(36) RECOMPRESS CODEC(ZSTD(3))",
                              "toDateTime('2040-03-09 12:00:00', 'Asia/Kolkata') + number * 3600"),
    "date-hours": ("ts Date, v String", "TTL toDateTime(ts) + INTERVAL 30 HOUR", "toDate('2040-02-27') + number"),
    # A rule of some rows counts only their times (none: 0); one aggregating rows counts every row.
    "where-group-by": ("ts DateTime('UTC'), v String",
                       "TTL ts + INTERVAL 1 DAY, ts + INTERVAL 2 DAY DELETE WHERE id % 7 = 3, "
                       "ts + INTERVAL 3 DAY WHERE id = 1000, ts + INTERVAL 4 DAY GROUP BY id SET v = any(v)",
                       "toDateTime('2040-06-01 00:00:00', 'UTC') + number * 1000"),
}


def _create(name: str, case: str) -> str:
    columns, ttl, _ = CASES[case]
    return (f"CREATE TABLE {name} (id UInt64, {columns}) ENGINE = MergeTree ORDER BY id {ttl} "
            "SETTINGS merge_with_ttl_timeout = 100000, min_bytes_for_wide_part = 0")


def _insert(name: str, case: str, start: int, count: int) -> str:
    return f"INSERT INTO {name} SELECT number, {CASES[case][2]}, toString(number) FROM numbers({start}, {count})"


def _ttl_text(directory: Path) -> str:
    return (directory / TTL_FILE).read_text()


@pytest.mark.parametrize("case", list(CASES))
def test_inserted_and_merged_parts_record_ttl_as_clickhouse_does(tmp_path, case):
    sess, data_dir = make_chdb_table(tmp_path, _create("src", case), [_insert("src", case, 0, 40), _insert("src", case, 40, 25)])
    try:
        statement = sess.query("SHOW CREATE TABLE src", "TabSeparatedRaw").bytes().decode()
        parts = sess.query("SELECT name, path FROM system.parts WHERE table = 'src' AND active ORDER BY name",
                           "TabSeparatedRaw").bytes().decode().split()
        inserted = [_ttl_text(Path(path)) for path in parts[1::2]]
        sess.query("OPTIMIZE TABLE src FINAL")
        merged_path = sess.query("SELECT path FROM system.parts WHERE table = 'src' AND active", "TabSeparatedRaw")
        merged = _ttl_text(Path(merged_path.bytes().decode().strip()))
    finally:
        close_session()
    rows = MergeTreeTable.open(data_dir, create_statement=statement).to_arrow().sort_by("id")
    _, empty_dir = make_chdb_table(tmp_path, _create("dst", case))
    close_session()
    ours = MergeTreeTable.open(empty_dir, create_statement=statement.replace("default.src", "dst"))
    ours.insert(rows.slice(0, 40))
    ours.insert(rows.slice(40))
    assert [_ttl_text(ours.path / p.name) for p in ours.parts()] == inserted
    ours.optimize(final=True)
    (part,) = ours.parts()
    assert _ttl_text(ours.path / part.name) == merged
    assert ours.check().ok


def test_clickhouse_expires_the_rows_of_our_parts(tmp_path):
    """Rows whose TTL has passed are deleted by ClickHouse's TTL merge of our parts (it chooses parts
    by their ttl.txt); the others stay."""
    create = ("CREATE TABLE {} (id UInt64, ts DateTime('UTC'), v String) ENGINE = MergeTree ORDER BY id "
              "TTL ts + INTERVAL 1 DAY SETTINGS merge_with_ttl_timeout = 0")
    sess, data_dir = make_chdb_table(tmp_path, create.format("t"))
    statement = sess.query("SHOW CREATE TABLE t", "TabSeparatedRaw").bytes().decode()
    _, empty_dir = make_chdb_table(tmp_path, create.format("ours"))
    close_session()
    ours = MergeTreeTable.open(empty_dir, create_statement=statement.replace("default.t", "ours"))
    times = pa.array([0, 3_000_000_000, 100, 2_000_000_000], pa.timestamp("s", "UTC"))  # 1970, 2065, 1970, 2033
    ours.insert(pa.table({"id": pa.array(range(4), pa.uint64()), "ts": times, "v": list("abcd")}))
    sess = open_session(tmp_path)
    try:
        for part in ours.parts():
            shutil.copytree(ours.path / part.name, data_dir / "detached" / part.name)
            sess.query(f"ALTER TABLE t ATTACH PART '{part.name}'")
        # (not FINAL: ClickHouse's merge selector takes a part for its TTL only by what ttl.txt says)
        sess.query("OPTIMIZE TABLE t")
        left = sess.query("SELECT id FROM t ORDER BY id", "TabSeparatedRaw").bytes().decode().split()
    finally:
        close_session()
    assert left == ["1", "3"]


def test_rules_a_part_cannot_record_are_refused_before_writing(tmp_path):
    """A TTL whose times this version cannot compute (an interval that varies by row): inserts and
    merges are refused naming it, before anything is written (background merges leave the table
    alone); ClickHouse's parts are still read."""
    create = ("CREATE TABLE t (id UInt64, ts DateTime, v String) ENGINE = MergeTree ORDER BY id "
              "TTL ts + toIntervalDay(length(v)) SETTINGS merge_with_ttl_timeout = 100000")
    inserts = [f"INSERT INTO t SELECT number, toDateTime('2040-01-01 00:00:00'), 'abc' FROM numbers({n}, 5)" for n in (0, 5)]
    _, data_dir = make_chdb_table(tmp_path, create, inserts)
    close_session()
    table = MergeTreeTable.open(data_dir, create_statement=create)
    before = sorted(p.name for p in data_dir.iterdir())
    rows = pa.table({"id": pa.array([11], pa.uint64()), "ts": pa.array([0], pa.timestamp("s")), "v": ["x"]})
    refusal = r"table 't': TTL .*toIntervalDay\(length\(v\)\).*intervals are supported added to or taken from the whole time"
    with pytest.raises(UnsupportedError, match=refusal):
        table.insert(rows)
    with pytest.raises(UnsupportedError, match=refusal):
        table.optimize(final=True)
    assert table.merge() == []
    assert sorted(p.name for p in data_dir.iterdir()) == before
    assert table.to_arrow().num_rows == 10

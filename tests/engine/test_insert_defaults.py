"""Inserts that leave columns out get what ClickHouse's INSERT gives them: a DEFAULT or MATERIALIZED
expression computed from the row, NULL for a Nullable column; an expression that cannot be computed
here, or a plain column left out, is refused naming it before anything is written."""

from __future__ import annotations

import datetime as dt
import shutil

import pyarrow as pa
import pytest

from spark_mergetree import MergeTreeTable
from spark_mergetree.errors import SchemaMismatchError
from tests.format.chdb_util import close_session, make_chdb_table

STATEMENT = """CREATE TABLE events (
    id UInt64, d Date, s String,
    doubled UInt64 MATERIALIZED id * 2,
    month UInt32 DEFAULT toYYYYMM(d),
    bucket UInt8 DEFAULT intHash32(id) % 16,
    note Nullable(String),
    seen DateTime DEFAULT toDateTime('2026-01-01 00:00:00', 'UTC'),
    plus_one UInt64 ALIAS id + 1
) ENGINE = MergeTree ORDER BY id"""


def _rows(start: int, count: int) -> pa.Table:
    ids = list(range(start, start + count))
    return pa.table({"id": pa.array(ids, pa.uint64()),
                     "d": pa.array([19000 + i % 90 for i in ids], pa.int32()).cast(pa.date32()),
                     "s": [f"s{i}" for i in ids]})


def test_left_out_columns_get_clickhouses_defaults(tmp_path) -> None:
    session, source = make_chdb_table(tmp_path, STATEMENT, [
        "INSERT INTO events (id, d, s) SELECT number, toDate(19000 + number % 90), concat('s', toString(number)) "
        "FROM numbers(200)"])
    theirs = [tuple(int(v) if v.isdigit() else (None if v == "\\N" else v) for v in line.split("\t"))
              for line in session.query("SELECT id, doubled, month, bucket, note, toUnixTimestamp(seen) FROM events "
                                        "ORDER BY id", "TSV").bytes().decode().splitlines()]
    shutil.copytree(source, tmp_path / "ours")
    close_session()
    table = MergeTreeTable.open(tmp_path / "ours", create_statement=STATEMENT)
    table.overwrite(_rows(0, 200))
    got = table.to_arrow().sort_by("id").to_pylist()
    ours = [(r["id"], r["doubled"], r["month"], r["bucket"], r["note"], int(r["seen"].timestamp())) for r in got]
    assert ours == theirs


def test_now_is_the_insert_time_and_what_cannot_be_computed_is_refused(tmp_path) -> None:
    table = MergeTreeTable.create(tmp_path / "t", [("id", "UInt64"), ("at", "DateTime DEFAULT now()"),
                                                   ("s", "String")], order_by="id")
    before = dt.datetime.now(dt.timezone.utc).replace(microsecond=0)
    table.insert(pa.table({"id": pa.array([1, 2], pa.uint64()), "s": ["a", "b"]}))
    after = dt.datetime.now(dt.timezone.utc)
    stamps = table.to_arrow()["at"].to_pylist()
    assert len(set(stamps)) == 1 and before <= stamps[0] <= after

    refused = MergeTreeTable.create(tmp_path / "r", [("id", "UInt64"), ("s", "String"),
                                                     ("k", "String DEFAULT reverse(s)")], order_by="id")
    with pytest.raises(SchemaMismatchError, match=r"column 'k' is missing from the data and its DEFAULT expression "
                                                  r"reverse\(s\) cannot be computed here"):
        refused.insert(pa.table({"id": pa.array([1], pa.uint64()), "s": ["a"]}))
    with pytest.raises(SchemaMismatchError, match=r"missing column\(s\) s"):
        refused.insert(pa.table({"id": pa.array([1], pa.uint64()), "k": ["x"]}))
    assert refused.count() == 0 and refused.parts() == []

"""GROUP BY answered from aggregate projections (engine/projection_aggregates.py): the projection
parts' states of every part holding the projection, combined with states built from the rows of
the parts that lack it, give ClickHouse's answer (chdb over the same directory)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from spark_mergetree import MergeTreeTable
from spark_mergetree.engine.projection_aggregates import aggregate
from spark_mergetree.errors import UnsupportedError
from tests.format.chdb_util import close_session, make_chdb_table

CALLS = ["sum(v)", "count()", "min(n)", "max(v)", "avg(n)", "sum(n)", "avg(v)"]
PROJECTION = "PROJECTION agg (SELECT k, sum(v), count(), min(n), max(v), avg(n), sum(n), avg(v) GROUP BY k)"
CREATE = ("CREATE TABLE u (id UInt64, k UInt32, v Float64, n Int32, " + PROJECTION + ") ENGINE = MergeTree "
          "ORDER BY id SETTINGS index_granularity = 64, enable_block_number_column = 1, enable_block_offset_column = 1, "
          "lightweight_mutation_projection_mode = 'rebuild'")
INSERTS = ["INSERT INTO u SELECT number, number % 13, number / 7, toInt32(number % 101) - 50 FROM numbers(5000)",
           "INSERT INTO u SELECT number + 5000, number % 11, number / 3, toInt32(number % 77) - 30 FROM numbers(3000)"]


def _by_key(table: pa.Table) -> dict[object, tuple]:
    columns = [c.to_pylist() for c in table.columns]
    return {row[0]: tuple(row[1:]) for row in zip(*columns)}


def _same(ours: pa.Table, theirs: pa.Table) -> None:
    mine, clickhouse = _by_key(ours), _by_key(theirs)
    assert mine.keys() == clickhouse.keys()
    for key, values in mine.items():
        for a, b in zip(values, clickhouse[key], strict=True):
            assert (math.isclose(a, b, rel_tol=1e-12) if isinstance(a, float) else a == b), (key, values, clickhouse[key])


def _clickhouse(sess, calls: list[str], where: str = "", settings: str = "") -> pa.Table:
    query = f"SELECT k, {', '.join(calls)} FROM u {where} GROUP BY k {settings}"
    return pa.ipc.open_file(pa.py_buffer(sess.query(query, "Arrow").bytes())).read_all()


def _open(sess, directory: Path) -> MergeTreeTable:
    statement = sess.query("SHOW CREATE TABLE u", "TabSeparatedRaw").bytes().decode()
    return MergeTreeTable.open(directory, create_statement=statement)


def test_states_of_clickhouse_projection_parts_give_clickhouses_answer(tmp_path: Path) -> None:
    sess, directory = make_chdb_table(tmp_path, CREATE, INSERTS)
    try:
        table = _open(sess, directory)
        result = aggregate(table, ["k"], CALLS)
        assert result.projection == "agg" and len(result.parts_from_projection) == 2 and not result.parts_from_rows
        assert result.table.column_names == ["k", *CALLS]
        assert result.table.column("count()").type == pa.uint64() and result.table.column("min(n)").type == pa.int32()
        _same(result.table, _clickhouse(sess, CALLS, settings="SETTINGS force_optimize_projection = 1"))
        rows = aggregate(table, ["k"], CALLS, use_projections=False)
        assert rows.projection is None and len(rows.parts_from_rows) == 2
        _same(rows.table, result.table)
        subset = aggregate(table, ["k"], ["count()", "max(v)"])  # a part of what the projection holds
        assert subset.projection == "agg"
        _same(subset.table, _clickhouse(sess, ["count()", "max(v)"]))
        uncovered = aggregate(table, ["k"], ["count()", "max(n)"])  # max(n) is not in it: rows
        assert uncovered.projection is None
        _same(uncovered.table, _clickhouse(sess, ["count()", "max(n)"]))
        filtered = aggregate(table, ["k"], CALLS, where="id >= 4000")
        assert filtered.projection is None
        _same(filtered.table, _clickhouse(sess, CALLS, where="WHERE id >= 4000"))
    finally:
        close_session()


def test_parts_with_a_lightweight_delete_give_states_of_their_rows(tmp_path: Path) -> None:
    # ClickHouse's 'rebuild' mode leaves the deleted rows counted in the part's projection states.
    sess, directory = make_chdb_table(tmp_path, CREATE, [*INSERTS, "DELETE FROM u WHERE id % 3 = 0 AND id < 5000"])
    try:
        table = _open(sess, directory)
        result = aggregate(table, ["k"], CALLS)
        assert result.projection == "agg" and len(result.parts_from_projection) == 1 and len(result.parts_from_rows) == 1
        _same(result.table, _clickhouse(sess, CALLS, settings="SETTINGS optimize_use_projections = 0"))
    finally:
        close_session()


def test_parts_without_the_projection_give_states_of_their_rows(tmp_path: Path) -> None:
    table = MergeTreeTable.create(tmp_path / "t", [("id", "UInt64"), ("k", "UInt32"), ("v", "Float64"), ("n", "Int32")],
                                  "id", settings={"index_granularity": 64, "auto_merge": False})
    rng = np.random.default_rng(3)

    def rows(start: int, count: int) -> pa.Table:
        return pa.table({"id": np.arange(start, start + count, dtype=np.uint64),
                         "k": rng.integers(0, 9, count).astype(np.uint32), "v": rng.random(count),
                         "n": rng.integers(-100, 100, count).astype(np.int32)})

    table.insert(rows(0, 4000))
    table.add_projection(PROJECTION)
    table.insert(rows(4000, 3000))
    result = aggregate(table, ["k"], CALLS)
    assert result.projection == "agg" and len(result.parts_from_projection) == 1 and len(result.parts_from_rows) == 1
    everything = table.to_arrow()
    expected = everything.group_by("k").aggregate([("v", "sum"), ("k", "count"), ("n", "min"), ("v", "max"),
                                                   ("n", "mean"), ("n", "sum"), ("v", "mean")])
    expected = expected.select(["k", *[c for c in expected.column_names if c != "k"]])
    _same(result.table, expected)
    _same(aggregate(table, ["k"], CALLS, use_projections=False).table, expected)


def test_what_is_not_answered_is_refused_by_name(tmp_path: Path) -> None:
    table = MergeTreeTable.create(tmp_path / "t", [("id", "UInt64"), ("k", "UInt32"), ("d", "Decimal(10, 2)")], "id")
    table.insert(pa.table({"id": pa.array([1], pa.uint64()), "k": pa.array([1], pa.uint32()), "d": [1.5]}))
    with pytest.raises(UnsupportedError, match="uniq"):
        aggregate(table, ["k"], ["uniq(id)"])
    with pytest.raises(UnsupportedError, match="Decimal"):
        aggregate(table, ["k"], ["sum(d)"])
    assert aggregate(table, ["k"], ["count()", "max(id)"]).table.to_pylist() == [{"k": 1, "count()": 1, "max(id)": 1}]
    assert aggregate(table, ["k"], ["count()"], where="id > 5").table.num_rows == 0

"""Tables ClickHouse (chdb) mutated: we return exactly the rows ClickHouse returns, or refuse.

A lightweight DELETE leaves the rows in a new part named with the mutation's version
(`all_1_1_0_3` over `all_1_1_0`) that adds a `_row_exists` column (0 = deleted); ALTER UPDATE
rewrites columns in such a part; a lightweight UPDATE writes patch parts (`patch-...`), which
reads apply (tests/engine/test_patch_parts.py, where our writes on such tables are tested too). Every expected row set comes
from ClickHouse itself.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from spark_mergetree import MergeTreeTable
from spark_mergetree.errors import UnsupportedError
from spark_mergetree.format.part_reader import ROW_EXISTS_COLUMN, PartReader
from tests.catalog.chdb_runner import run_chdb
from tests.format.chdb_util import close_session, make_chdb_table

LAYOUTS = {
    "wide": "min_bytes_for_wide_part = 0, min_rows_for_wide_part = 0",
    "compact": "min_bytes_for_wide_part = 1000000000, min_rows_for_wide_part = 1000000000",
}
# Background merges of a few small parts would change the part set under the test's feet.
NO_BACKGROUND_MERGES = "min_parts_to_merge_at_once = 1000"


def _chdb_arrow(sess, sql: str) -> pa.Table:
    return pa.ipc.open_file(pa.py_buffer(sess.query(sql, "Arrow").bytes())).read_all()


def _clickhouse_rows(sess, table: str, columns: str, where: str = "1") -> list[tuple]:
    result = _chdb_arrow(sess, f"SELECT {columns} FROM {table} WHERE {where}")
    return sorted(zip(*(_plain(c) for c in result.columns)))


def _plain(column: pa.ChunkedArray) -> list:
    values = column.to_pylist()
    return [v.decode() if isinstance(v, bytes) else v for v in values]


def _our_rows(table: pa.Table) -> list[tuple]:
    return sorted(zip(*(_plain(c) for c in table.columns)))


def _active_parts(sess, table: str) -> set[str]:
    text = sess.query(f"SELECT name FROM system.parts WHERE table = '{table}' AND active", "TabSeparatedRaw")
    return set(text.bytes().decode().split())


def _statement(sess, table: str) -> str:
    return sess.query(f"SHOW CREATE TABLE {table}", "TabSeparatedRaw").bytes().decode()


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_lightweight_delete_rows_are_not_returned(tmp_path: Path, layout: str) -> None:
    create = (f"CREATE TABLE t (k UInt64, v String) ENGINE = MergeTree ORDER BY k "
              f"SETTINGS index_granularity = 1024, {NO_BACKGROUND_MERGES}, {LAYOUTS[layout]}")
    sess, data_dir = make_chdb_table(tmp_path, create, [
        "INSERT INTO t SELECT number, toString(number) FROM numbers(70000)",
        "DELETE FROM t WHERE k % 3 = 0",
    ])
    expected = _clickhouse_rows(sess, "t", "k, v")
    expected_range = _clickhouse_rows(sess, "t", "k, v", "k BETWEEN 30000 AND 33000")
    stored = int(sess.query("SELECT sum(rows) FROM system.parts WHERE table = 't' AND active", "CSV").bytes())
    active = _active_parts(sess, "t")
    statement = _statement(sess, "t")
    close_session()
    assert len(expected) == 46666 and stored == 70000

    table = MergeTreeTable.open(data_dir, create_statement=statement)
    # The mutated part (a mutation version in its name) is the one ClickHouse reads, not the original.
    assert table.visible_parts()[1] == active and all(name.count("_") == 4 for name in active)
    assert _our_rows(table.to_arrow()) == expected
    assert table.count() == len(expected)
    assert sum(p.rows for p in table.parts()) == len(expected)
    assert sum(p.deleted_rows for p in table.parts()) == stored - len(expected)
    assert sum(p.rows for p in table.explain().parts) == len(expected)
    assert _our_rows(table.to_arrow(where="k BETWEEN 30000 AND 33000")) == expected_range
    # The executor path Spark uses: tasks planned on the driver, read one by one (and prefetched).
    plan = table.plan_read(["k", "v"], target_rows=10000)
    assert len(plan.tasks) > 2
    assert _our_rows(pa.concat_tables(table.read_task(task, ["k", "v"]) for task in plan.tasks)) == expected
    batches = [b for task in plan.tasks for b in table.iter_task(task, ["k", "v"], chunk_rows=3000)]
    assert _our_rows(pa.Table.from_batches(batches)) == expected
    assert table.check().ok


def test_deletes_updates_and_merges_match_clickhouse_at_every_step(tmp_path: Path) -> None:
    """The general rule, checked after each ClickHouse statement: the same rows, the same active parts."""
    create = (f"CREATE TABLE t (k UInt64, p UInt8, v String, w Int32) ENGINE = MergeTree PARTITION BY p "
              f"ORDER BY k SETTINGS index_granularity = 256, {NO_BACKGROUND_MERGES}, {LAYOUTS['wide']}")
    steps = [
        "INSERT INTO t SELECT number, number % 2, toString(number), 0 FROM numbers(5000)",
        "DELETE FROM t WHERE k % 3 = 0",
        "DELETE FROM t WHERE k % 5 = 0",
        "DELETE FROM t IN PARTITION 1 WHERE k < 1000",
        "INSERT INTO t SELECT number + 10000, 0, 'late', 1 FROM numbers(300)",
        # Every row of the newest part, and nearly every row of the others (a mostly-zero mask).
        "DELETE FROM t WHERE k >= 10000 OR (k % 97 != 0 AND k > 2500)",
        "ALTER TABLE t UPDATE w = 7 WHERE k < 100 SETTINGS mutations_sync = 2",
        "OPTIMIZE TABLE t FINAL",
    ]
    sess, data_dir = make_chdb_table(tmp_path, create)
    statement = _statement(sess, "t")
    for step in steps:
        sess.query(step)
        expected = _clickhouse_rows(sess, "t", "k, p, v, w")
        table = MergeTreeTable.open(data_dir, create_statement=statement)
        assert table.visible_parts()[1] == _active_parts(sess, "t"), step
        assert _our_rows(table.to_arrow()) == expected, step
        assert table.count() == len(expected), step
        assert _our_rows(table.to_arrow(where="k < 1200")) == _clickhouse_rows(sess, "t", "k, p, v, w", "k < 1200")
    close_session()


def test_our_merge_of_a_clickhouse_table_drops_deleted_rows(tmp_path: Path) -> None:
    create = (f"CREATE TABLE t (k UInt64, v String) ENGINE = MergeTree ORDER BY k "
              f"SETTINGS {NO_BACKGROUND_MERGES}, {LAYOUTS['compact']}")
    sess, data_dir = make_chdb_table(tmp_path, create, [
        "INSERT INTO t SELECT number, toString(number) FROM numbers(1000)",
        "INSERT INTO t SELECT number + 1000, toString(number) FROM numbers(1000)",
        "DELETE FROM t WHERE k % 4 = 1",
    ])
    expected = _clickhouse_rows(sess, "t", "k, v")
    statement = _statement(sess, "t")
    close_session()
    table = MergeTreeTable.open(data_dir, create_statement=statement)
    table.insert(pa.table({"k": pa.array([5000], pa.uint64()), "v": ["new"]}))
    merged = table.optimize(final=True)
    assert len(merged) == 1
    reader = PartReader(table.store, merged[0], str(data_dir / merged[0]))
    assert ROW_EXISTS_COLUMN not in reader.types and reader.rows == len(expected) + 1
    assert _our_rows(table.to_arrow()) == sorted(expected + [(5000, "new")])


def test_pending_delete_is_not_applied_as_clickhouse_does_not(tmp_path: Path) -> None:
    """A mutation ClickHouse has not run yet (mutation_N.txt, no part of version N) changes no row
    ClickHouse returns; neither does it change ours."""
    create = "CREATE TABLE t (k UInt64) ENGINE = MergeTree ORDER BY k"
    sess, data_dir = make_chdb_table(tmp_path, create, [
        "INSERT INTO t SELECT number FROM numbers(100)",
        "SYSTEM STOP MERGES t",
        "DELETE FROM t WHERE k % 3 = 0 SETTINGS lightweight_deletes_sync = 0",
    ])
    expected = _clickhouse_rows(sess, "t", "k")
    assert int(sess.query("SELECT count() FROM system.mutations WHERE table = 't' AND NOT is_done", "CSV").bytes()) == 1
    statement = _statement(sess, "t")
    close_session()
    assert (data_dir / "mutation_2.txt").exists() and len(expected) == 100
    assert _our_rows(MergeTreeTable.open(data_dir, create_statement=statement).to_arrow()) == expected


def test_a_patch_part_is_read_only_as_a_patch_and_stays_through_our_insert(tmp_path: Path) -> None:
    statement = "DELETE FROM t WHERE k = 7 SETTINGS lightweight_delete_mode = 'lightweight_update_force'"
    create = ("CREATE TABLE t (k UInt64, v String) ENGINE = MergeTree ORDER BY k "
              "SETTINGS enable_block_number_column = 1, enable_block_offset_column = 1")
    sess, data_dir = make_chdb_table(tmp_path, create, [
        "INSERT INTO t SELECT number, toString(number) FROM numbers(100)",
        "SET enable_lightweight_update = 1",
        statement,
    ])
    patches = [name for name in _active_parts(sess, "t") if name.startswith("patch-")]
    create_statement = _statement(sess, "t")
    close_session()
    assert len(patches) == 1
    table = MergeTreeTable.open(data_dir, create_statement=create_statement)
    assert table.count() == sum(p.rows for p in table.parts()) == table.to_arrow().num_rows == 99
    # Reading the patch part as a part of the table's rows is refused, naming its file.
    with pytest.raises(UnsupportedError, match=r"source_parts\.dat: a patch part of a lightweight UPDATE"):
        PartReader(table.store, patches[0], str(data_dir / patches[0]))
    # A first write adopts the directory's data parts; the patch part stays the directory's, and
    # still applies (its DELETE of k = 7 does not reach the new row k = 7, of a later block).
    table.insert(pa.table({"k": pa.array([7], pa.uint64()), "v": ["x"]}))
    assert table.patch_part_names() == set(patches) and (data_dir / patches[0]).is_dir()
    assert table.count() == table.to_arrow().num_rows == 100
    assert table.to_arrow(where="k = 7").column("v").to_pylist() == ["x"]


def test_our_insert_into_a_mutated_clickhouse_table_survives_clickhouse_restart(tmp_path: Path) -> None:
    """New parts take block numbers above ClickHouse's parts and mutations: a lower one would reuse a
    part name, or make ClickHouse apply the older DELETE to the rows we add."""
    create = "CREATE TABLE t (k UInt64) ENGINE = MergeTree ORDER BY k"
    sess, data_dir = make_chdb_table(tmp_path, create, [
        "INSERT INTO t SELECT number FROM numbers(100)",
        "DELETE FROM t WHERE k % 4 = 1",
    ])
    expected = _clickhouse_rows(sess, "t", "k")
    close_session()
    table = MergeTreeTable.open(data_dir, create_statement=create)
    added = [5001, 5005, 5006]  # two of them match the DELETE's condition
    table.insert(pa.table({"k": pa.array(added, pa.uint64())}))
    assert _our_rows(table.to_arrow()) == sorted(expected + [(k,) for k in added])
    (restarted,) = run_chdb(tmp_path / "chdb", "SELECT k FROM t ORDER BY k")
    assert [int(k) for k in restarted.split()] == sorted([k for (k,) in expected] + added)

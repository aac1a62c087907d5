"""A lightweight UPDATE ClickHouse commits into a table our log keeps is seen by the snapshots taken
after we first saw its patch part, never by older ones: time travel to an earlier snapshot and a
transaction begun before the UPDATE read the rows as they were, before and after the UPDATE."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from spark_mergetree import MergeTreeTable, Transaction
from tests.engine.test_patch_parts import _clickhouse, _create, _insert, _more_rows, _statement
from tests.format.chdb_util import close_session, make_chdb_table, open_session


def _ours(table: MergeTreeTable, **read) -> list[tuple]:
    data = table.to_arrow(**read)
    return sorted(zip(*(c.to_pylist() for c in data.columns)), key=repr)


def _via_tasks(table: MergeTreeTable, **read) -> list[tuple]:
    """The rows Spark's path reads: a plan over the parts a snapshot knows, tasks read by name."""
    tasks = table.plan_read(**read).tasks
    batches = list(table.iter_tasks(tasks))
    return sorted(zip(*(c.to_pylist() for c in pa.Table.from_batches(batches).columns)), key=repr)


def _patches(directory: Path) -> set[str]:
    return {p.name for p in directory.iterdir() if p.name.startswith("patch-")}


def updated_after_a_snapshot(tmp_path: Path
                             ) -> tuple[MergeTreeTable, str, int, Transaction, list[tuple], list[tuple]]:
    """A table ClickHouse wrote and updated, which our log keeps, then a snapshot (csn) and a
    transaction begun, then a second ClickHouse UPDATE: (table, its statement, csn, transaction, the
    rows before the second UPDATE, the rows after it)."""
    sess, directory = make_chdb_table(tmp_path, _create(), [_insert(0, 40), "UPDATE u SET v = 999 WHERE id % 10 = 0"])
    statement = _statement(sess)
    close_session()
    table = MergeTreeTable.open(directory, create_statement=statement)
    table.insert(_more_rows(table, 1000))  # our first write: the log keeps the table from here on
    older = table.coordinator.current_timestamp()
    reader = Transaction(table.coordinator)  # begun before the UPDATE, reads nothing yet
    first = _patches(directory)
    sess = open_session(tmp_path)
    try:
        before = _clickhouse(sess, "*", None)  # the first UPDATE applied, to our rows too
        sess.query("UPDATE u SET v = 7, s = 'w' WHERE id % 3 = 0")
        after = _clickhouse(sess, "*", None)
    finally:
        close_session()
    assert before != after and _patches(directory) > first
    return MergeTreeTable.open(directory, create_statement=statement), statement, older, reader, before, after


def test_an_update_committed_later_is_invisible_to_older_snapshots(tmp_path: Path) -> None:
    table, _statement_text, older, reader, before, after = updated_after_a_snapshot(tmp_path)
    try:
        assert _ours(table, snapshot=older) == before  # the later UPDATE was applied to the old snapshot
        assert _ours(table, transaction=reader) == before
        assert _via_tasks(table, snapshot=older) == before
        assert _ours(table) == after  # the latest snapshot sees it
        newer = table.coordinator.current_timestamp()
        assert _ours(table, snapshot=newer) == after
        # Seen once, the UPDATE keeps its place in the history.
        assert _ours(table, snapshot=older) == before
        assert _ours(table, transaction=reader) == before
        assert table.count(snapshot=older) == len(before)
    finally:
        reader.rollback()
    with Transaction(table.coordinator) as later:
        assert _ours(table, transaction=later) == after

"""Spark's read path applies the lightweight UPDATEs of a task's view: a query planned now but run
inside a transaction begun before a ClickHouse UPDATE reads the rows as they were at its snapshot
(no Spark session needed: the adapter's planning and task halves are called as Spark calls them)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from spark_mergetree.spark import adapter
from tests.engine.test_patch_snapshots import updated_after_a_snapshot


def _rows(table, tasks) -> list[tuple]:
    batches = list(table.iter_tasks(tasks))
    return sorted(zip(*(c.to_pylist() for c in pa.Table.from_batches(batches).columns)), key=repr)


def test_a_transaction_task_applies_only_the_updates_before_its_snapshot(tmp_path: Path) -> None:
    table, statement, _older, reader, before, after = updated_after_a_snapshot(tmp_path)
    try:
        ref = adapter.TableRef(str(table.path), statement)
        parts = adapter.part_sets(ref)  # planned at the latest snapshot: it sees the UPDATE
        planned = adapter.plan(ref, [n for n, _ in table.metadata.columns], None, 1 << 20, parts).tasks
        assert _rows(table, adapter.tasks_in_view(ref, planned, parts, None)) == after
        txn = adapter.TxnContext(reader.coordinator.url, reader.tid, reader.snapshot)
        visible = adapter.visible_for_task(ref, parts, txn)
        tasks = adapter.tasks_in_view(ref, [t for t in planned if t.part in visible], parts, txn)
        assert _rows(table, tasks) == before
    finally:
        reader.rollback()

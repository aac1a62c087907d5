"""Running merges: OPTIMIZE TABLE and the background merges, each merge its own transaction.

merge.py chooses merges and writes a merged part; this module runs them against the commit
protocol. Reserved blocks and the snapshot are read together under the table's commit lock (where
block numbers are allocated), so no merge spans a block a running transaction holds. A merge
takes the removal locks of its sources first (of two concurrent merges of the same parts one
fails before writing anything), writes the result under a staged name, then names and renames it
under the commit lock (`TableLog.claim_name` rolls back a dead merge's leftover of the same name).
"""

from __future__ import annotations

import logging
import math
import time
import uuid
from typing import TYPE_CHECKING

from spark_mergetree.engine import insert as inserting
from spark_mergetree.engine import merge as merging
from spark_mergetree.txn import Transaction

if TYPE_CHECKING:
    from spark_mergetree.engine.table import MergeTreeTable

log = logging.getLogger(__name__)


def _begin_merge_transaction(table: MergeTreeTable) -> tuple[Transaction, dict[str, list[tuple[int, int]]], set[str]]:
    """(transaction, reserved blocks, visible parts), the first two taken together under the commit
    lock, where block numbers are allocated: every block below is committed, reserved, or lost."""
    with table.log.commit_lock():
        reserved = table.log.reserved_blocks(table.coordinator)
        tx = Transaction(table.coordinator)
        try:
            visible = tx.visible_parts(table.log)
        except BaseException:
            tx.rollback()
            raise
    return tx, reserved, visible


def part_stats(table: MergeTreeTable, parts: set[str]) -> dict[str, merging.PartStats]:
    """Rows, bytes and age of each part (age from its log entry's commit time; a part whose entry
    was folded into the checkpoint counts as old)."""
    now = time.time()
    committed = {name: entry.commit_time for entry in table.log.entries() if entry.commit_time is not None
                 for name in entry.added}
    return {name: merging.PartStats(table.reader(name).rows, table.part_bytes(name),
                                    now - committed[name] if name in committed else math.inf)
            for name in parts}


def merge_step(table: MergeTreeTable) -> str | None:
    """Run the best merge the automatic selector finds (one transaction); return the new part's
    name, or None when it finds nothing to merge. A lost race raises SerializationError and leaves
    nothing behind."""
    table.check_same_table()
    tx, reserved, visible = _begin_merge_transaction(table)
    try:
        candidates = merging.select_automatic(sorted(visible), part_stats(table, visible),
                                              merging.SelectorSettings.of(table.metadata), reserved)
    except BaseException:
        tx.rollback()
        raise
    if not candidates:
        tx.rollback()
        return None
    return merge_one(table, candidates[0], tx)


def run_merges(table: MergeTreeTable, final: bool) -> list[str]:
    """OPTIMIZE: one merge per partition with ≥ 2 parts (`final`: each partition down to one part,
    as far as no reserved block splits it); return the new parts' names."""
    table.check_same_table()
    created: list[str] = []
    done: set[str] = set()
    while True:
        tx, reserved, visible = _begin_merge_transaction(table)
        try:
            rows = {p: table.reader(p).rows for p in visible}
            candidates = [c for c in merging.select_merges(sorted(visible), rows, table.metadata, final=final,
                                                           reserved=reserved)
                          if c.partition_id not in done]
        except BaseException:
            tx.rollback()
            raise
        if not candidates:
            tx.rollback()
            return created
        created.append(merge_one(table, candidates[0], tx))
        done.add(candidates[0].partition_id)


def merge_one(table: MergeTreeTable, candidate: merging.MergeCandidate, tx: Transaction) -> str:
    """Merge one candidate in `tx` and commit it; return the result's name."""
    result = candidate.result_name
    staged_name = f"{inserting.STAGING_PREFIX}t{tx.tid}_merge_{uuid.uuid4().hex[:12]}"
    placed = False
    try:
        # Removal locks first: of two concurrent merges of the same parts, one fails here,
        # before writing anything.
        tx.remove_parts(table.log, candidate.parts)
        files = merging.merge_parts([table.reader(p) for p in candidate.parts], table.metadata)
        table.store.write_part(staged_name, files.files, files.boundaries)
        with table.log.commit_lock():
            table.log.claim_name(result, tx.coordinator, tx.tid)
            tx.add_parts(table.log, [result])
            table.store.rename_part(staged_name, result)
            placed = True
        tx.commit()
    except BaseException:
        if tx.state == "unknown":
            raise
        tx.rollback()  # deletes the result only if this transaction's entry still names it
        if not placed:
            table.store.remove_part(staged_name, missing_ok=True)
        raise
    return result

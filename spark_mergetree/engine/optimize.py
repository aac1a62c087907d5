"""Running merges: OPTIMIZE TABLE and the merges after a commit, each merge its own transaction.

merge.py chooses merges and writes a merged part; this module runs them against the commit
protocol. Reserved blocks and the snapshot are read together under the table's commit lock (where
block numbers are allocated), so no merge spans a block a running transaction holds. A merge
takes the removal locks of its sources first (of two concurrent merges of the same parts one
fails before writing anything), writes the result under a staged name, then names and renames it
under the commit lock (`TableLog.claim_name` rolls back a dead merge's leftover of the same name).
"""

from __future__ import annotations

import logging
import uuid
from typing import TYPE_CHECKING

from spark_mergetree.engine import insert as inserting
from spark_mergetree.engine import merge as merging
from spark_mergetree.errors import SerializationError
from spark_mergetree.txn import Transaction

if TYPE_CHECKING:
    from spark_mergetree.engine.table import MergeTreeTable

log = logging.getLogger(__name__)


def auto_merge(table: MergeTreeTable) -> None:
    """Merges after a commit: housekeeping that must never turn a done commit into an error."""
    try:
        run_merges(table, final=False, force=False)
    except SerializationError as exc:
        log.info("automatic merge of %s lost to a concurrent transaction: %s", table.path, exc)
    except Exception as exc:  # noqa: BLE001 - the commit already happened; report, do not raise
        log.warning("automatic merge of %s failed (the commit stands): %r", table.path, exc)


def run_merges(table: MergeTreeTable, final: bool, force: bool) -> list[str]:
    """Merge until the policy (or `final`/`force`: one merge per partition) finds nothing; return
    the new parts' names."""
    table.check_same_table()
    created: list[str] = []
    done: set[str] = set()
    while True:
        # Reserved blocks and the snapshot are read together under the commit lock, where
        # block numbers are allocated: every block below is committed, reserved, or lost.
        with table.log.commit_lock():
            reserved = table.log.reserved_blocks(table.coordinator)
            tx = Transaction(table.coordinator)
            try:
                visible = tx.visible_parts(table.log)
            except BaseException:
                tx.rollback()
                raise
        try:
            rows = {p: table.reader(p).rows for p in visible}
            candidates = [c for c in merging.select_merges(sorted(visible), rows, table.metadata, final=final,
                                                           force=force, reserved=reserved)
                          if c.partition_id not in done]
        except BaseException:
            tx.rollback()
            raise
        if not candidates:
            tx.rollback()
            return created
        created.append(merge_one(table, candidates[0], tx))
        if final or force:
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

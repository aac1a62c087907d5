"""Publishing staged parts: the engine's side of the commit protocol (format_spec/transactions.md).

Under the table's commit lock, in this order: the removal locks of the parts an overwrite
replaces, block numbers for the new parts, the transaction's pending entry naming them, then the
renames of the staged directories to those names (in a store that writes parts in place, object
storage, the parts already have their final names: the entry names them, nothing is renamed). Then the transaction commits at the
coordinator (the one commit point) when the write owns it. Like ClickHouse's REPLACE PARTITION,
the first new part of a replaced partition covers the parts it replaces when no part another
transaction may still commit lies in that range.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal, get_args

from spark_mergetree.engine import background
from spark_mergetree.engine import select as selecting
from spark_mergetree.engine.insert import StagedPart
from spark_mergetree.errors import AlreadyCommittedError, TransactionError
from spark_mergetree.format.part_info import PartInfo

if TYPE_CHECKING:
    from spark_mergetree.engine.table import MergeTreeTable

WriteMode = Literal["append", "overwrite"]
WRITE_MODES: tuple[str, ...] = get_args(WriteMode)
#: With mode "overwrite": "static" replaces the whole table, "dynamic" only the partitions written
#: (Spark's `partitionOverwriteMode`, ClickHouse's REPLACE PARTITION).
PartitionOverwriteMode = Literal["static", "dynamic"]
PARTITION_OVERWRITE_MODES: tuple[str, ...] = get_args(PartitionOverwriteMode)


def commit(table: MergeTreeTable, staged: Sequence[StagedPart], mode: WriteMode,
           partition_overwrite_mode: PartitionOverwriteMode, tx: Any, own: bool,
           app_version: tuple[str, int] | None = None) -> list[str]:
    """Publish `staged` in `tx` (and commit it if `own`); return the final part names.

    `app_version` (application id, version) is recorded with the changes (`Transaction.
    record_app_version`); if the table's log already holds that version or a later one of the
    application, nothing is published and AlreadyCommittedError is raised.

    On failure before the commit point the staged parts are deleted and the transaction (if
    owned) rolled back; an unknown outcome leaves everything for recovery. Once committed, it
    returns: merges run in the background (background.py) and never fail or delay the commit.
    """
    placed: set[str] = set()
    try:
        finals = publish(table, staged, mode, partition_overwrite_mode, tx, placed, app_version)
        if own:
            tx.commit()
    except BaseException:
        if getattr(tx, "state", None) == "unknown":
            raise  # the coordinator may have committed: nothing is deleted before it says
        if own and tx.state == "running":
            tx.rollback()  # deletes what its pending entry named (the placed parts)
        for part in staged:
            if part.name not in placed:
                table.store.remove_part(part.name, missing_ok=True)
        raise
    if own:
        background.after_commit(table)
    return finals


def publish(table: MergeTreeTable, staged: Sequence[StagedPart], mode: WriteMode,
            partition_overwrite_mode: PartitionOverwriteMode, tx: Any, placed: set[str],
            app_version: tuple[str, int] | None = None) -> list[str]:
    """Under the table's commit lock: the application version's check and record, removals, block
    numbers, the pending entry naming the new parts, then their renames into place (names of
    renamed staged parts go into `placed`)."""
    log = table.log
    table.adopt_directory_parts()
    table_id = log.bind(tx.coordinator.url)
    with log.commit_lock():
        if app_version is not None:
            # Under the lock: a second committer of the same version (a driver thought dead) waits
            # for the first one's entry and finds it here once that committed.
            app_id, version = app_version
            done = log.app_version(app_id, tx.coordinator)
            if done is not None and done >= version:
                raise AlreadyCommittedError(f"{table.path}: application {app_id!r} already committed version "
                                            f"{done} (asked to commit {version}); nothing was written again")
            tx.record_app_version(log, app_id, version)
        visible = tx.visible_parts(log)
        removed: list[str] = []
        if mode == "overwrite" and partition_overwrite_mode == "static":
            removed = sorted(visible)
        elif mode == "overwrite":
            touched = {s.partition_id for s in staged}
            removed = sorted(p for p in visible if PartInfo.parse(p).partition_id in touched)
        tx.remove_parts(log, removed)
        if not staged:
            return []
        if table.store.writes_in_place:
            # Named before their upload (block numbers from the coordinator, `stage`) and never
            # renamed: the pending entry names them where they are.
            finals = [part.name for part in staged]
            tx.add_parts(log, finals)
            placed.update(finals)
            return finals
        lost = [part.name for part in staged if not table.store.exists(part.name)]
        if lost:
            raise TransactionError(
                f"{table.path}: staged part(s) {', '.join(lost)} no longer exist (a cleanup removes the "
                "parts of write jobs idle for longer than the staged-part lifetime); write the data again")
        first = allocate_blocks(table, tx, table_id, len(staged))
        finals = new_part_names(table, staged, removed, first, tx)
        tx.add_parts(log, finals)
        for part, final in zip(staged, finals):
            table.store.rename_part(part.name, final)
            placed.add(part.name)
    return finals


def covering_ranges(removed: Sequence[str]) -> dict[str, tuple[int, int]]:
    """Per partition: (lowest block, level above every removed part) for a part covering them."""
    out: dict[str, tuple[int, int]] = {}
    for name in removed:
        info = PartInfo.parse(name)
        low, level = out.get(info.partition_id, (info.min_block, 0))
        out[info.partition_id] = (min(low, info.min_block), max(level, info.level + 1))
    return out


def new_part_names(table: MergeTreeTable, staged: Sequence[StagedPart], removed: Sequence[str], first: int,
                   tx: Any) -> list[str]:
    """`<partition>_<n>_<n>_0` per staged part (`_1` in tables of the merging engines). The first new part of a replaced partition
    covers the parts it replaces (as ClickHouse's REPLACE PARTITION does), so a ClickHouse
    opening the directory before our cleanup shows only the new rows, unless the range would
    also cover a part another transaction may still commit or committed after our snapshot."""
    covering = covering_ranges(removed)
    blocking: dict[str, list[tuple[int, int]]] = {}
    if covering:
        blocking = table.log.reserved_blocks(tx.coordinator, exclude_tid=tx.tid)
        latest = table.log.snapshot(tx.coordinator.current_timestamp(), tx.coordinator)
        for name in latest - set(removed):
            info = PartInfo.parse(name)
            blocking.setdefault(info.partition_id, []).append((info.min_block, info.max_block))
    finals = []
    # Inserts into Replacing/Summing/... tables were merged as they were written (engines.py), and
    # ClickHouse names such parts at level 1 (its optimize_on_insert), which its merges rely on.
    inserted = 1 if table.metadata.merging_engine is not None else 0
    for number, part in enumerate(staged):
        block = first + number
        low, level = covering.pop(part.partition_id, (block, inserted))
        if any(a <= block and low <= b for a, b in blocking.get(part.partition_id, ())):
            low, level = block, inserted
        finals.append(PartInfo(part.partition_id, low, block, level).name)
    return finals


def allocate_blocks(table: MergeTreeTable, tx: Any, table_id: str, count: int) -> int:
    """`count` block numbers for new parts, above every block and mutation version already in
    the directory (a table ClickHouse wrote, or writes beside us), skipping the numbers below."""
    first: int = tx.coordinator.allocate_blocks(table_id, count)
    floor = selecting.first_free_block(table.path, table.store.list_parts())
    if first < floor:
        if floor > first + count:
            tx.coordinator.allocate_blocks(table_id, floor - first - count)
        first = tx.coordinator.allocate_blocks(table_id, count)
    return first




"""Running merges: OPTIMIZE TABLE and the background merges, each merge its own transaction.

merge.py chooses merges and writes a merged part; this module runs them against the commit
protocol. Reserved blocks and the snapshot are read together under the table's commit lock (where
block numbers are allocated), so no merge spans a block a running transaction holds. A merge
takes the removal locks of its sources first (of two concurrent merges of the same parts one
fails before writing anything), writes the result under a staged name, then names and renames it
under the commit lock (`TableLog.claim_name` rolls back a dead merge's leftover of the same name).
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import time
import uuid
from collections.abc import Callable
from collections.abc import Set as AbstractSet
from typing import TYPE_CHECKING

from spark_mergetree.engine import insert as inserting
from spark_mergetree.engine import merge as merging
from spark_mergetree.engine import patch_merge, ttl_merge, ttl_moves, ttl_selection
from spark_mergetree.engine.progress import progress_bar
from spark_mergetree.errors import SerializationError, TransactionError
from spark_mergetree.format.part import PartFiles
from spark_mergetree.format.part_info import PartInfo
from spark_mergetree.txn import Transaction, TxnState

if TYPE_CHECKING:
    from spark_mergetree.engine.table import MergeTreeTable

log = logging.getLogger(__name__)


def begin_merge_transaction(table: MergeTreeTable) -> tuple[Transaction, dict[str, list[tuple[int, int]]], set[str]]:
    """(transaction, reserved blocks, visible parts), the first two taken together under the commit
    lock, where block numbers are allocated: every block below is committed, reserved, or lost."""
    tx, reserved, visible, _ = _begin(table)
    return tx, reserved, visible


def _begin(table: MergeTreeTable, settled_below: int = 0
           ) -> tuple[Transaction, dict[str, list[tuple[int, int]]], set[str], tuple[int, bool] | None]:
    """`begin_merge_transaction`, with the allocation fence (None under a commit lock) and the gaps
    below `settled_below` known not to hold a running transaction's block (see fence_reserved)."""
    table.adopt_directory_parts()  # a table ClickHouse wrote: its parts are what there is to merge
    with table.log.commit_lock():
        fence = table.log.allocation_fence(table.coordinator)
        reserved = table.log.reserved_blocks(table.coordinator)
        tx = Transaction(table.coordinator)
        try:
            visible = tx.visible_parts(table.log)
        except BaseException:
            tx.rollback()
            raise
    if fence is not None:
        reserved = merging.fence_reserved(reserved, visible, *fence, settled_below=settled_below)
    return tx, reserved, visible, fence


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
    if _refused_by_ttl(table):
        return None
    tx, reserved, visible = begin_merge_transaction(table)
    try:
        visible, reserved = _without_unmergeable(table, visible, reserved)
        stats = part_stats(table, visible)
        # ClickHouse tries its TTL merges first (engine/ttl_selection.py), its regular selector after;
        # parts a due TTL move sends to another volume move (engine/ttl_moves.py) before the latter.
        due = ttl_selection.ttl_merge_for(table, visible, reserved, stats)
        moves = ttl_moves.pending_moves(table, visible, int(time.time())) if due is None else []
        candidates = [due] if due is not None else [] if moves else merging.select_automatic(
            sorted(visible), stats, merging.SelectorSettings.of(table.metadata), reserved)
    except BaseException:
        tx.rollback()
        raise
    if moves:
        return move_one(table, moves[0][0], tx)
    if not candidates:
        tx.rollback()
        return None
    # Processes merging one table at once start from different partitions' best merges, so that
    # fewer of them lose the same race.
    return merge_one(table, candidates[os.getpid() % len(candidates)], tx)


_reported_unmergeable: set[tuple[str, str]] = set()


def _refused_by_ttl(table: MergeTreeTable) -> bool:
    """Whether no part of the table can be written here (its TTL holds a rule parts here cannot
    record): background merges leave it to ClickHouse (logged once)."""
    refusal = table.metadata.ttl_refusal
    if refusal is not None and (str(table.path), "") not in _reported_unmergeable:
        _reported_unmergeable.add((str(table.path), ""))
        log.info("%s: parts are not merged in the background: %s", table.path, refusal)
    return refusal is not None


def _without_unmergeable(table: MergeTreeTable, visible: set[str], reserved: dict[str, list[tuple[int, int]]]
                         ) -> tuple[set[str], dict[str, list[tuple[int, int]]]]:
    """The parts background merges may take: not those holding a projection this version cannot build
    (merging them would lose it; ClickHouse merges them), nor those patch parts change in a table
    whose merges do not apply them (patch_merge.py). Their blocks are reserved, so no merge spans
    them; each is logged once."""
    patched = patch_merge.unmergeable(table, visible)
    if not patched and not table.metadata.unbuildable_projections and not any(
            table.reader(p).projections for p in visible):
        return visible, reserved
    kept, reserved = set(), {k: list(v) for k, v in reserved.items()}
    for part in visible:
        lost = merging.unmergeable_projections(table.reader(part), table.metadata)
        reasons = [f"it holds projection(s) {', '.join(lost)} this version cannot build"] if lost else []
        if part in patched:
            reasons.append("patch parts of lightweight UPDATEs change it and the table has apply_patches_on_merge = 0")
        if not reasons:
            kept.add(part)
            continue
        info = PartInfo.parse(part)
        reserved.setdefault(info.partition_id, []).append((info.min_block, info.max_block))
        if (str(table.path), part) not in _reported_unmergeable:
            _reported_unmergeable.add((str(table.path), part))
            log.info("%s: part %s is not merged in the background: %s", table.path, part, "; ".join(reasons))
    return kept, reserved


# How long OPTIMIZE FINAL waits for the merges and writes that were running when it began to end
# (ClickHouse waits up to lock_acquire_timeout_for_background_operations, 120 s, for running merges),
# and the pauses between its looks (doubling from the first to the second).
FINAL_WAIT_SECONDS = 120.0
FINAL_POLL_SECONDS = (0.02, 0.5)


def run_merges(table: MergeTreeTable, final: bool, timeout: float | None = None,
               on_merge: Callable[[int], None] | None = None) -> list[str]:
    """OPTIMIZE: one merge per partition with ≥ 2 parts (`final`: each partition down to one part,
    see `run_final`); return the new parts' names. `on_merge(n)` is called after each merge of `n`
    parts (progress reporting)."""
    table.check_same_table()
    if final:
        return run_final(table, FINAL_WAIT_SECONDS if timeout is None else timeout, on_merge)
    created: list[str] = []
    done: set[str] = set()
    while True:
        tx, reserved, visible = begin_merge_transaction(table)
        try:
            rows = {p: table.reader(p).rows for p in visible}
            candidates = [c for c in merging.select_merges(sorted(visible), rows, table.metadata, reserved=reserved)
                          if c.partition_id not in done]
        except BaseException:
            tx.rollback()
            raise
        if not candidates:
            tx.rollback()
            return created
        created.append(merge_one(table, candidates[0], tx))
        done.add(candidates[0].partition_id)
        if on_merge is not None:
            on_merge(len(candidates[0].parts))


def run_merges_showing_progress(table: MergeTreeTable, final: bool, timeout: float | None,
                                progress: bool | None) -> list[str]:
    """`run_merges` with a progress bar on stderr (`progress`: True, or None for "when stderr is a
    terminal"; False: none): parts merged of the parts to merge with `final`, else merges run of
    the partitions with parts to merge."""
    if progress is False:
        return run_merges(table, final, timeout)
    sizes = [len(infos) for infos in merging.by_partition(sorted(table.visible_parts()[1])).values()
             if len(infos) >= 2]
    total, unit = (sum(sizes), "part") if final else (len(sizes), "merge")
    with progress_bar(total, unit, "optimize final" if final else "optimize", progress) as advance:
        return run_merges(table, final, timeout, on_merge=lambda parts: advance(parts if final else 1))


RoundRunner = Callable[[Transaction, list[merging.MergeCandidate]], list[str]]


def run_final(table: MergeTreeTable, timeout: float, on_merge: Callable[[int], None] | None = None, *,
              where: str | None = None, run_round: RoundRunner | None = None) -> list[str]:
    """OPTIMIZE FINAL: merge until every partition (where `where` may match) holds one part of the
    blocks allocated before the call (`limit`); return the new parts' names. Parts of writes that
    allocate their blocks later are merged in only where they sit beside those (no later write is
    waited for).

    It works in rounds: a round is one transaction that takes the removal locks of the merges it
    chose from a fresh snapshot and commits their results together; then the next round plans again
    from what that left. `run_round(tx, merges)` runs a round's merges (their locks taken, their
    data versions set) wherever it likes and commits them in `tx` (Spark: one task per merge), or
    raises with `tx` rolled back; it gets every merge ready at once. Without it, a round is one
    merge, run in this process.

    Merges running when it begins (in this process's background, merge workers, other processes,
    `mergetree merge-daemon`) hold their sources' removal locks, or name their result in a pending
    entry: a partition they touch waits (polling, up to `timeout` seconds, while the other
    partitions go on merging) until they commit or roll back, then merges their result with the
    rest; one still holding it after `timeout` fails the call with SerializationError naming the
    partition and the transaction holding it (what was merged by then stays merged). A block a
    running write holds splits a partition (no merge spans it): that, too, is waited for, and after
    `timeout` the partition is merged as far as its gaps allow (each run between them into one
    part). On an object store, where a merge's allocation fence leaves a block no part takes and
    where any running transaction makes every gap a possible block of its own (`fence_reserved`),
    gaps below `limit` count as settled once every transaction that was running when the call
    began has ended."""
    deadline = time.monotonic() + timeout
    pause = FINAL_POLL_SECONDS[0]
    created: list[str] = []
    limit: int | None = None  # blocks below were allocated before the call
    earlier: set[int] = set()  # object stores: transactions running when the call began
    wanted: set[str] | None = None  # the partitions `where` may match
    settled_below = 0
    degraded: set[str] = set()  # partitions merged as far as their gaps allow, once the wait ran out
    held: dict[str, str] = {}  # partition -> why its parts could not be locked (until the next pause)
    # Partitions whose single part this call merged again for its TTL: once is enough (a row whose
    # time comes during the call waits for the next merge, as in ClickHouse).
    ttl_merged: set[str] = set()
    runner = run_round if run_round is not None else (lambda tx, merges: [merge_locked(table, merges[0], tx)])
    while True:
        tx, reserved, visible, fence = _begin(table, settled_below)
        refused: tuple[str, str] | None = None
        try:
            if limit is None:
                limit = fence[0] if fence is not None else 1 + max(
                    [PartInfo.parse(p).max_block for p in visible]
                    + [b for ranges in reserved.values() for _, b in ranges], default=0)
                if fence is not None and fence[1]:
                    earlier = {info.tid for info in table.coordinator.running() if info.tid < tx.tid}
                if where is not None:
                    wanted = matching_partitions(table, where, tx)
            if wanted is not None:
                visible = {p for p in visible if PartInfo.parse(p).partition_id in wanted}
            rows = {p: table.reader(p).rows for p in visible}
            singles = _lone_parts(visible, limit, ttl_merged)
            due = ttl_merge.due_parts(table, singles) if singles else set()
            ready, blocked = _final_step(visible, rows, reserved, limit, degraded, set(held), due)
            batch = ready if run_round is not None else ready[:1]
            refused = _lock(table, tx, batch)
            if refused is None:
                batch = [patch_merge.with_data_version(table, merge) for merge in batch]
        except BaseException:
            tx.rollback()
            raise
        if refused is not None:  # a merge running elsewhere holds (or removed) that partition's parts
            held[refused[0]] = refused[1]
            continue
        if batch:
            try:
                created.extend(runner(tx, batch))
            except SerializationError as error:  # lost a race to a merge running elsewhere: wait for it
                tx.rollback()
                held.update((merge.partition_id, str(error)) for merge in batch)
                continue
            except BaseException:
                tx.rollback()
                raise
            pause = FINAL_POLL_SECONDS[0]
            ttl_merged.update(merge.partition_id for merge in batch if len(merge.parts) == 1)
            if on_merge is not None:
                for merge in batch:
                    on_merge(len(merge.parts))
            continue
        tx.rollback()
        if not blocked:
            return created
        if fence is not None and settled_below < limit and not any(
                table.coordinator.status(tid)[0] is TxnState.RUNNING for tid in earlier):
            settled_below = limit  # every block below is committed or lost: gaps there are holes
            continue
        if time.monotonic() >= deadline:
            if held:
                raise SerializationError(f"{table.path}: OPTIMIZE FINAL waited {timeout:g} s for partition(s) "
                                         + "; ".join(f"{p!r}, still held by a merge running elsewhere ({why})"
                                                     for p, why in sorted(held.items())))
            log.warning("%s: OPTIMIZE FINAL waited %.0f s for running merges and writes; partition(s) %s "
                        "are merged as far as the blocks those still hold allow", table.path, timeout,
                        ", ".join(repr(p) for p in sorted(blocked)))
            degraded.update(blocked)
            continue
        time.sleep(pause)
        pause = min(2 * pause, FINAL_POLL_SECONDS[1])
        held.clear()  # look at those partitions again


def matching_partitions(table: MergeTreeTable, where: str, tx: Transaction) -> set[str]:
    """The partitions (of the parts `tx` sees) where the predicate `where` may hold."""
    plan = table.plan_read(None, where, transaction=tx)
    return {p.partition_id for p in plan.parts if p.pruned_by != "partition"}


def _lock(table: MergeTreeTable, tx: Transaction, merges: list[merging.MergeCandidate]) -> tuple[str, str] | None:
    """Take the removal locks of `merges`' sources in `tx`; None, or (the partition, the reason)
    when another transaction holds or removed one of them (`tx` is rolled back then)."""
    for merge in merges:
        try:
            tx.remove_parts(table.log, merge.parts)
        except SerializationError as error:
            tx.rollback()
            return merge.partition_id, str(error)
    return None


def _lone_parts(visible: set[str], limit: int, skip: set[str]) -> set[str]:
    """The parts alone in their partition below `limit` (not in the partitions `skip`)."""
    out = set()
    for partition_id, infos in merging.by_partition(sorted(visible)).items():
        below = [i for i in infos if i.min_block < limit]
        if len(below) == 1 and partition_id not in skip:
            out.add(below[0].name)
    return out


def _final_step(visible: set[str], rows: dict[str, int], reserved: dict[str, list[tuple[int, int]]], limit: int,
                degraded: set[str], held: set[str], ttl_due: AbstractSet[str] = frozenset()
                ) -> tuple[list[merging.MergeCandidate], set[str]]:
    """The merges OPTIMIZE FINAL can run now, disjoint, and the partitions whose parts below
    `limit` are not yet one part but cannot merge into one now (a reserved block between or on
    them, or `held`: a merge running elsewhere holds their parts). A partition already one part
    merges that part again when it is in `ttl_due` (its TTL is due: ClickHouse's FINAL merges a
    single part again, which expires what its TTL says)."""
    ready: list[merging.MergeCandidate] = []
    blocked: set[str] = set()
    for partition_id, infos in sorted(merging.by_partition(sorted(visible)).items()):
        below = [i for i in infos if i.min_block < limit]
        if len(below) == 1 and below[0].name in ttl_due:
            if partition_id in held:
                blocked.add(partition_id)
            else:
                ready.append(merging.MergeCandidate(partition_id, (below[0].name,), rows[below[0].name]))
            continue
        if len(below) < 2:
            continue  # done: one part of the blocks the call is about (and maybe later ones beside it)
        if partition_id in held:
            blocked.add(partition_id)
            continue
        segments = [s for s in merging._segments(infos, reserved.get(partition_id, ()))
                    if any(i.min_block < limit for i in s)]
        whole = len(segments) == 1 and sum(1 for i in segments[0] if i.min_block < limit) == sum(
            1 for i in infos if i.min_block < limit)
        if not whole and partition_id not in degraded:
            blocked.add(partition_id)
            continue
        for segment in segments:
            if len(segment) >= 2:
                names = tuple(i.name for i in segment)
                ready.append(merging.MergeCandidate(partition_id, names, sum(rows[n] for n in names)))
    return ready, blocked


def merge_one(table: MergeTreeTable, candidate: merging.MergeCandidate, tx: Transaction) -> str:
    """Merge one candidate in `tx` and commit it; return the result's name."""
    try:
        # Removal locks first: of two concurrent merges of the same parts, one fails here,
        # before writing anything.
        tx.remove_parts(table.log, candidate.parts)
        candidate = patch_merge.with_data_version(table, candidate)
    except BaseException:
        tx.rollback()
        raise
    return merge_locked(table, candidate, tx)


def move_one(table: MergeTreeTable, part: str, tx: Transaction) -> str:
    """Move a part whose TTL move rule is due to that rule's volume, in `tx` (committed): its files,
    copied as they are, become the part of the next level there, and the source is removed."""
    try:
        tx.remove_parts(table.log, [part])
        info = PartInfo.parse(part)
        result = merging.MergeCandidate(info.partition_id, (part,), table.reader(part).rows).result_name
        publish_part(table, result, ttl_moves.copied(table, part), tx)
        tx.commit()
    except BaseException:
        if tx.state == "unknown":
            raise
        tx.rollback()
        raise
    return result


def merge_locked(table: MergeTreeTable, candidate: merging.MergeCandidate, tx: Transaction) -> str:
    """`merge_one` once `tx` holds the candidate's removal locks (its data version set)."""
    try:
        with patch_merge.merge_sources(table, candidate.parts) as readers, \
                merging.merged_part(readers, ttl_merge.merge_metadata(table, candidate.parts)) as files:
            result = table.publish_merged(candidate, files, tx)
        tx.commit()
    except BaseException:
        if tx.state == "unknown":
            raise
        tx.rollback()  # deletes the result only if this transaction's entry still names it
        raise
    return result


def publish_merged(table: MergeTreeTable, candidate: merging.MergeCandidate, files: PartFiles,
                   tx: Transaction) -> str:
    """A merged part, named in `tx` (which removes its sources); nothing unnamed is left behind if
    that fails. Where parts are renamed into place (disks): written under a staged name, then
    renamed to the candidate's result name under the commit lock. Where they are written in place
    (object storage): written under `merged_part_name`, then named; a failure before the entry
    names it deletes the upload."""
    if not table.store.writes_in_place:
        return publish_part(table, candidate.result_name, files, tx)
    name = merged_part_name(table, candidate)
    named = False
    try:
        table.store.write_part(name, files.files)
        tx.add_parts(table.log, [name])
        named = True
    finally:
        if not named:
            table.store.remove_part(name, missing_ok=True)
    return name


def merged_part_name(table: MergeTreeTable, candidate: merging.MergeCandidate) -> str:
    """The name a merge of `candidate` publishes its result under: the candidate's result name;
    where parts are written in place, its level raised past any name the log or the store already
    holds (a merge that failed after its upload), so a name is never reused and no cleanup of a
    failed merge can delete a later one's part."""
    if not table.store.writes_in_place:
        return candidate.result_name
    info = PartInfo.parse(candidate.result_name)
    taken = set(table.log.versions(None)[1]) | {name for entry in table.log.entries() for name in entry.added}
    while info.name in taken or table.store.exists(info.name):
        info = dataclasses.replace(info, level=info.level + 1)
    return info.name


def publish_part(table: MergeTreeTable, result: str, files: PartFiles, tx: Transaction) -> str:
    """Write a part that replaces others in `tx` (a merge's, a mutation's) under a staged name, then
    name it `result` in `tx` and rename it under the commit lock; nothing is left if that fails."""
    staged_name = f"{inserting.STAGING_PREFIX}t{tx.tid}_merge_{uuid.uuid4().hex[:12]}"
    ttl_moves.write_staged(table, staged_name, files, int(time.time()))  # (on a due TTL move's volume)
    placed = False
    try:
        with table.log.commit_lock():
            table.log.claim_name(result, tx.coordinator, tx.tid)
            tx.add_parts(table.log, [result])
            table.store.rename_part(staged_name, result)
            placed = True
    finally:
        if not placed:
            table.store.remove_part(staged_name, missing_ok=True)
    return result


# ------------------------------------------------------------------ merges spread over processes
#
# A distributed OPTIMIZE (Spark's `spark_mergetree.optimize`): the driver takes one transaction,
# chooses disjoint groups of parts and takes their removal locks (`plan_group_merges`, or a round
# of `run_final`) and names each group's result (`group_result_names`); each group's merged part is
# written by another process (`stage_group_merge`): on a local table under a write job's staged
# name, as Spark's write tasks stage theirs, in object storage under its result name (a duplicate
# attempt writes the same bytes there), recorded as the job's upload. The driver then names (and
# renames) one result per group and commits them all at once (`commit_group_merges`). A task
# attempt that failed or was duplicated leaves a staged part nobody publishes: `discard_staged`
# deletes it with the job's end.


def plan_group_merges(table: MergeTreeTable, where: str | None, final: bool
                      ) -> tuple[Transaction, list[merging.MergeCandidate]]:
    """The transaction and the groups a distributed OPTIMIZE merges, their removal locks taken.

    `final`: every partition (where `where` may match) merges all its parts into one (as far as no
    reserved block splits it; `run_final` waits and merges until one part is left); otherwise each
    partition with ≥ 2 parts merges in runs of up to `max_parts_to_merge` adjacent parts. With no
    group, the transaction is already rolled back."""
    table.check_same_table()
    tx, reserved, visible = begin_merge_transaction(table)
    try:
        if where is not None:
            wanted = matching_partitions(table, where, tx)
            visible = {p for p in visible if PartInfo.parse(p).partition_id in wanted}
        rows = {p: table.reader(p).rows for p in visible}
        due = ttl_merge.due_parts(table, _lone_parts(visible, merging._NO_BLOCK, set())) if final else set()
        groups = merging.select_groups(sorted(visible), rows, table.metadata, final=final, reserved=reserved,
                                       ttl_due=due)
        groups = [patch_merge.with_data_version(table, group) for group in groups]
        if not groups:
            tx.rollback()
            return tx, []
        tx.remove_parts(table.log, [p for group in groups for p in group.parts])
    except BaseException:
        tx.rollback()
        raise
    return tx, groups


def group_result_names(table: MergeTreeTable, groups: list[merging.MergeCandidate]) -> list[str]:
    """The name each group's merged part is published under (chosen by the driver, once)."""
    return [table.merged_part_name(group) for group in groups]


def stage_group_merge(table: MergeTreeTable, group: merging.MergeCandidate, tag: str,
                      result_name: str | None = None) -> inserting.StagedPart:
    """Merge one group's parts (any process): on a local table into a staged part of the write job
    `tag`; in object storage under `result_name` (from `group_result_names`), its final key."""
    if table.parts_written_in_place:
        if result_name is None:
            raise ValueError(f"{table.path}: a merged part in object storage is written under its result name")
        name = result_name
        # The job's upload, recorded first: cleanup keeps it while the job's lease runs.
        table.log.register_job(tag)
        table.log.record_staged(tag, name)
    else:
        table.log.register_job(tag)
        name = f"{inserting.STAGING_PREFIX}{tag}_{uuid.uuid4().hex[:12]}_0"
    with patch_merge.merge_sources(table, group.parts) as readers, \
            merging.merged_part(readers, ttl_merge.merge_metadata(table, group.parts)) as files:
        table.write_part(name, files)
        return inserting.StagedPart(name, group.partition_id, int(files.rows), files.size, tag)


def commit_group_merges(table: MergeTreeTable, tx: Transaction, groups: list[merging.MergeCandidate],
                        staged: list[inserting.StagedPart]) -> list[str]:
    """Publish one staged result per group (`staged[i]` merges `groups[i]`) and commit them in `tx`;
    return the new parts' names. On failure nothing is left: the transaction rolls back."""
    in_place = table.parts_written_in_place
    names = [part.name for part in staged] if in_place else [group.result_name for group in groups]
    placed: set[str] = set()
    try:
        missing = [part.name for part in staged if not table.store.exists(part.name)]
        if missing:
            raise TransactionError(f"{table.path}: staged merge result(s) {', '.join(missing)} no longer exist "
                                   "(a cleanup removes the parts of jobs idle past the staged-part lifetime)")
        if in_place:  # written under their names already: naming them in the log publishes them
            tx.add_parts(table.log, names)
            placed.update(names)
        else:
            with table.log.commit_lock():
                for name in names:
                    table.log.claim_name(name, tx.coordinator, tx.tid)
                tx.add_parts(table.log, names)
                for name, part in zip(names, staged, strict=True):
                    table.store.rename_part(part.name, name)
                    placed.add(part.name)
        tx.commit()
    except BaseException:
        if tx.state == "unknown":
            raise
        tx.rollback()
        for part in staged:
            if part.name not in placed:
                table.store.remove_part(part.name, missing_ok=True)
        raise
    return names

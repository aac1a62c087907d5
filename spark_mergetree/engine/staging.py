"""Staged parts: rows written as invisible parts before a commit names them, and their cleanup.
Where parts are renamed into place (disks) they are staged under temporary names (`stage`); where
nothing is renamed (object storage) they are named first and written once (`stage_in_place`).

A staged part (`staged_<owner>_<random>_<n>`, written as `tmp_staged_...` first) has an owner that
keeps cleanup away from it: a transaction (`t<tid>`: garbage once it ends), or a write job (a Spark
job's tag, registered in the table's log by its driver with a lease and by each task that stages;
its parts are garbage once it ends or its driver's lease does: txn/table_log.py `register_job`).
"""

from __future__ import annotations

import uuid
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

from spark_mergetree.engine import insert as inserting
from spark_mergetree.errors import TransactionError
from spark_mergetree.format.part_info import PartInfo
from spark_mergetree.storage.object_store import upload_pool

if TYPE_CHECKING:
    from spark_mergetree.engine.table import MergeTreeTable
    from spark_mergetree.txn import Transaction


def stage(table: MergeTreeTable, data: Any, tag: str | None = None, *,
          transaction: Transaction | None = None, progress: bool | None = False) -> list[inserting.StagedPart]:
    """Write rows as staged parts, one per partition, owned by `transaction` or else the job `tag`
    (`progress`: see `inserting.write_partition_parts`)."""
    table.check_same_table()
    rows = inserting.conform(inserting.to_arrow_table(data), table.metadata)
    if rows.num_rows == 0:
        return []
    if transaction is not None:
        owner = f"t{transaction.tid}"
    else:
        owner = tag or inserting.new_tag()
        table.log.register_job(owner)
    unique = f"{owner}_{uuid.uuid4().hex[:8]}"
    written: list[str] = []

    def write(name: str, files: Any) -> None:
        written.append(name)
        table.store.write_part(name, files.files, files.boundaries)

    try:
        parts = inserting.write_partition_parts(table.metadata, rows, write, unique, progress=progress)
        if transaction is None and table.log.job_ended(owner):
            # The job gave up while this task wrote (discard_staged marks it ended before it lists
            # what to delete): whichever came second removes these parts.
            raise TransactionError(f"write job {owner!r} ended while a task of it staged parts; they are removed")
        return parts
    except BaseException:
        for name in written:
            table.store.remove_part(name, missing_ok=True)
        raise


def stage_in_place(table: MergeTreeTable, data: Any, tag: str | None = None, *,
                   transaction: Transaction | None = None, progress: bool | None = False) -> list[inserting.StagedPart]:
    """`stage` where parts are written under their final names (`PartStorage.writes_in_place`: object
    storage, where nothing is renamed): each part is named first, its block numbers from the
    coordinator (so names never collide), and uploaded once, invisible until a committed entry
    names it. `progress`: as `stage`'s (a part counts once encoded; its upload may still run).

    Without `transaction` the parts belong to the write job `tag` (a new one if None): it is
    registered in the table's log and each part is recorded there before its upload, so cleanup
    keeps them while the job lives (its driver's lease runs: txn/job_lease.py), however long it
    takes, and deletes them once it is dead or ended."""
    table.check_same_table()
    rows = inserting.conform(inserting.to_arrow_table(data), table.metadata)
    if rows.num_rows == 0:
        return []
    table_id = table.log.bind(table.coordinator.url)
    owner = None if transaction is not None else (tag or inserting.new_tag())
    if owner is not None:
        table.log.register_job(owner)
    free: list[int] = []

    def name(partition_id: str) -> str:
        # Block numbers in batches (one coordinator round trip for up to 16 parts); numbers a
        # batch leaves unused are gaps, which ClickHouse's part names allow.
        if not free:
            count = 16 if table.metadata.partition_key.is_partitioned else 1
            first = (transaction.allocate_blocks(table.log, count) if transaction is not None
                     else table.coordinator.allocate_blocks(table_id, count))
            free.extend(range(first + count - 1, first - 1, -1))
        block = free.pop()
        return str(PartInfo(partition_id, block, block, 0))

    parts_pool = upload_pool("parts")
    uploads: list[Future[None]] = []

    uploaded: list[str] = []

    def upload(part: str, files: Any) -> None:
        if owner is not None:
            table.log.record_staged(owner, part)  # before the upload: cleanup never sees it unowned
        uploaded.append(part)
        # In the background: the next part is encoded while this one goes up.
        uploads.append(parts_pool.submit(table.store.write_part, part, files.files))

    try:
        try:
            staged = inserting.write_partition_parts(table.metadata, rows, upload, owner or tag or inserting.new_tag(),
                                                     name, progress=progress)
        finally:
            for future in uploads:
                future.exception()  # wait for every upload, also when encoding failed
        for future in uploads:
            future.result()
        if owner is not None and table.log.job_ended(owner):
            # The job ended (or was judged dead) while this task uploaded: whichever came
            # second removes these parts.
            raise TransactionError(f"write job {owner!r} ended while a task of it staged parts; they are removed")
    except BaseException:
        if owner is not None:
            for part in uploaded:
                table.store.remove_part(part, missing_ok=True)
        raise
    return staged

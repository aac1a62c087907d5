"""Staged parts: rows written as invisible parts before a commit names them, and their cleanup.

A staged part (`staged_<owner>_<random>_<n>`, written as `tmp_staged_...` first) has an owner that
keeps cleanup away from it: a transaction (`t<tid>`: garbage once it ends), or a write job (a Spark
job's tag, registered in the table's log by its driver with a lease and by each task that stages;
its parts are garbage once it ends or its driver's lease does: txn/table_log.py `register_job`).
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from spark_mergetree.engine import insert as inserting
from spark_mergetree.errors import TransactionError

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

"""What write and read tasks of the mergetree source share: staging a task's Arrow batches as
parts of a write job, and freezing the Python worker's heap once."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import pyarrow as pa

from spark_mergetree.spark import adapter
from spark_mergetree.spark.adapter import TableRef
from spark_mergetree.spark.types import to_table_arrow

_heap_frozen = False


def freeze_worker_heap(ref: TableRef) -> None:
    """Once per Python worker, at its first read or write: collect, then freeze (gc.freeze) the
    objects alive, this package's and its imports' (sqlglot) included, with the table opened.

    PySpark's daemon runs a full gc.collect() after every task of a reused worker; unfrozen, every
    one of them traversed the ~70k objects these imports leave (a fifth of a full scan's CPU in the
    workers). Frozen objects are skipped by later collections; they live as long as the worker
    anyway (modules, the per-process table cache), and nothing is frozen that was garbage."""
    global _heap_frozen
    if _heap_frozen:
        return
    _heap_frozen = True
    adapter.open_table(ref)  # the engine's modules, imported by the first open
    gc.collect()
    gc.freeze()


def stage_batches(ref: TableRef, table_arrow: pa.Schema, stage_rows: int, tag: str,
                  iterator: Iterator[pa.RecordBatch]) -> list[Any]:
    """A write task's rows (Spark's Arrow batches) cast to the table's columns and staged as parts
    of job `tag`, every `stage_rows` rows; returns the staged parts."""
    staged: list[Any] = []
    pending: list[pa.RecordBatch] = []
    pending_rows = 0
    # Parts are written in a background thread while the next rows arrive from the JVM; at
    # most one chunk waits, which bounds memory to about two chunks.
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="mergetree-stage") as pool:
        writing: Future[list[Any]] | None = None
        for batch in iterator:
            if not batch.num_rows:
                continue
            pending.append(to_table_arrow(batch, table_arrow))
            pending_rows += batch.num_rows
            if pending_rows >= stage_rows:
                if writing is not None:
                    staged += writing.result()
                writing = pool.submit(adapter.stage, ref, pa.Table.from_batches(pending, table_arrow), tag)
                pending, pending_rows = [], 0
        if pending:
            staged += adapter.stage(ref, pa.Table.from_batches(pending, table_arrow), tag)
        if writing is not None:
            staged += writing.result()
    return staged

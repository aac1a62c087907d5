"""A merge running in another process, held still for a test: `HeldMerge(url, parts)` forks a
process that begins a merge of `parts` (one partition's), takes their removal locks (with
`publish_first`, also writes the result and names it in its pending entry) and holds them until
`finish()`, then commits; the test sees the partition exactly as a merge worker, a
`mergetree merge-daemon` or another writer's background merge would leave it meanwhile."""

from __future__ import annotations

import multiprocessing
from collections.abc import Mapping
from typing import Any

FORK = multiprocessing.get_context("fork")


def _run(url: str, parts: list[str], publish_first: bool, storage_options: Mapping[str, str] | None,
         started: Any, finish: Any, outcome: Any) -> None:
    from spark_mergetree import MergeTreeTable
    from spark_mergetree.engine import merge as merging
    from spark_mergetree.engine import optimize as optimizing
    from spark_mergetree.format.part_info import PartInfo

    try:
        table = MergeTreeTable.open(url, storage_options=storage_options)
        tx, _, _ = optimizing.begin_merge_transaction(table)
        candidate = merging.MergeCandidate(PartInfo.parse(parts[0]).partition_id, tuple(parts),
                                           sum(table.reader(p).rows for p in parts))
        tx.remove_parts(table.log, candidate.parts)

        def write() -> None:
            with merging.merged_part([table.reader(p) for p in parts], table.metadata) as files:
                table.publish_merged(candidate, files, tx)

        if publish_first:
            write()
        outcome.put(tx.tid)
        started.set()
        if not finish.wait(120):
            raise TimeoutError("never told to finish")
        if not publish_first:
            write()
        tx.commit()
        outcome.put("committed")
    except BaseException as error:  # noqa: BLE001 - reported to the test
        outcome.put(repr(error))
        raise


class HeldMerge:
    """`with HeldMerge(url, parts) as merge:` the merge holds `parts` inside the block (its
    transaction is `merge.tid`); `merge.finish()` lets it commit and returns "committed" (or its
    error). Leaving the block lets it finish and waits for the process (bounded)."""

    def __init__(self, url: str, parts: list[str], publish_first: bool = False,
                 storage_options: Mapping[str, str] | None = None) -> None:
        self._started, self._finish, self._outcome = FORK.Event(), FORK.Event(), FORK.Queue()
        self._process = FORK.Process(target=_run, args=(url, parts, publish_first, storage_options, self._started,
                                                        self._finish, self._outcome))
        self.tid: int | None = None

    def __enter__(self) -> HeldMerge:
        self._process.start()
        try:
            first = self._outcome.get(timeout=60)
            assert isinstance(first, int), f"the merge did not start: {first}"
            assert self._started.wait(10)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        self.tid = first
        return self

    def finish(self) -> object:
        self._finish.set()
        return self._outcome.get(timeout=60)

    def __exit__(self, *exc: object) -> None:
        self._finish.set()
        self._process.join(60)
        if self._process.is_alive():
            self._process.terminate()
            self._process.join(10)

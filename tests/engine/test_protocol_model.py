"""The commit protocol of format_spec/transactions.md, explored with hypothesis's stateful testing
against the real engine: inserts that commit at once or stay open (a transaction holding block
numbers), commits and rollbacks of the open ones, merges (OPTIMIZE and OPTIMIZE FINAL), partition
overwrites, cleanup, and transactions whose owner dies (a child process killed mid-transaction).

After every step the table must agree with a model of snapshot isolation (which rows are visible),
no two visible parts of a partition may overlap, no visible part may be covered by a part on disk
that ClickHouse would take as active in its place, and after a cleanup with nothing open every
directory left is a visible part.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import tempfile
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from spark_mergetree import MergeTreeTable
from spark_mergetree.errors import SerializationError
from spark_mergetree.format.part_info import PartInfo
from spark_mergetree.txn import LocalCoordinator, Transaction
from tests.budget import exhaustive, scaled

pytestmark = pytest.mark.long  # a minute or more: scheduled early (tests/conftest.py)

FORK = multiprocessing.get_context("fork")
PARTITIONS = (0, 1)


def _rows(ids: list[int], partition: int) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.uint64()), "p": pa.array([partition] * len(ids), pa.uint8())})


def _die_inside_a_transaction(path: str, url: str, ids: list[int], partition: int, ready: object) -> None:
    table = MergeTreeTable.open(path, coordinator=LocalCoordinator(url[len("file://"):]))
    tx = Transaction(table.coordinator)
    table.insert(_rows(ids, partition), transaction=tx)  # published: named, renamed, not committed
    ready.set()  # type: ignore[attr-defined]
    signal.pause()


def clickhouse_active(names: set[str]) -> set[str]:
    """The parts ClickHouse loads as active from these directories: those no other one contains."""
    infos = [PartInfo.parse(n) for n in names]
    return {i.name for i in infos if not any(o != i and o.contains(i) for o in infos)}


class ProtocolMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.directory = Path(tempfile.mkdtemp(prefix="protocol-model-"))
        url = (self.directory / "coordinator").as_uri()
        self.table = MergeTreeTable.create(self.directory / "t", [("id", "UInt64"), ("p", "UInt8")], "id",
                                           partition_by="p", coordinator=url,
                                           settings={"auto_merge": False, "old_parts_lifetime": 0})
        self.coordinator = self.table.coordinator
        self.visible: dict[int, int] = {}          # id -> partition: the model's committed rows
        self.open: list[tuple[Transaction, list[int], int]] = []
        self.next_id = 0

    def teardown(self) -> None:
        for tx, _, _ in self.open:
            tx.rollback()
        import shutil

        shutil.rmtree(self.directory, ignore_errors=True)

    def _new_ids(self, count: int) -> list[int]:
        ids = list(range(self.next_id, self.next_id + count))
        self.next_id += count
        return ids

    @rule(partition=st.sampled_from(PARTITIONS), count=st.integers(1, 3))
    def insert(self, partition: int, count: int) -> None:
        ids = self._new_ids(count)
        self.table.insert(_rows(ids, partition))
        self.visible.update((i, partition) for i in ids)

    @precondition(lambda self: len(self.open) < 3)
    @rule(partition=st.sampled_from(PARTITIONS))
    def begin_slow_insert(self, partition: int) -> None:
        ids = self._new_ids(2)
        tx = Transaction(self.coordinator)
        self.table.insert(_rows(ids, partition), transaction=tx)
        self.open.append((tx, ids, partition))

    @precondition(lambda self: self.open)
    @rule(index=st.integers(0, 2), commit=st.booleans())
    def finish_slow_insert(self, index: int, commit: bool) -> None:
        tx, ids, partition = self.open.pop(index % len(self.open))
        if commit:
            tx.commit()
            self.visible.update((i, partition) for i in ids)
        else:
            tx.rollback()

    @rule(final=st.booleans())
    def optimize(self, final: bool) -> None:
        try:
            self.table.optimize(final=final)
        except SerializationError:
            pass  # lost to an open overwrite's removal locks: allowed, changes nothing

    @rule(partition=st.sampled_from(PARTITIONS))
    def overwrite_partition(self, partition: int) -> None:
        ids = self._new_ids(1)
        try:
            self.table.overwrite(_rows(ids, partition), partition_overwrite_mode="dynamic")
        except SerializationError:
            return
        self.visible = {i: p for i, p in self.visible.items() if p != partition}
        self.visible[ids[0]] = partition

    @rule()
    def cleanup(self) -> None:
        self.table.cleanup()
        if not self.open:
            on_disk = {e.name for e in os.scandir(self.table.path)
                       if e.is_dir() and e.name not in ("_mergetree", "detached")}
            assert on_disk == {p.name for p in self.table.parts()}

    @rule(partition=st.sampled_from(PARTITIONS))
    def owner_dies_mid_transaction(self, partition: int) -> None:
        ready = FORK.Event()
        child = FORK.Process(target=_die_inside_a_transaction,
                             args=(str(self.table.path), self.coordinator.url, self._new_ids(2), partition, ready))
        child.start()
        assert ready.wait(60)
        os.kill(child.pid, signal.SIGKILL)
        child.join()

    @invariant()
    def agrees_with_the_model(self) -> None:
        got = self.table.to_arrow(["id", "p"])
        assert dict(zip(got.column("id").to_pylist(), got.column("p").to_pylist())) == self.visible
        parts = {p.name for p in self.table.parts()}
        infos = [PartInfo.parse(n) for n in parts]
        for a in infos:
            for b in infos:
                assert a == b or a.partition_id != b.partition_id or not (
                    a.min_block <= b.max_block and b.min_block <= a.max_block), f"{a.name} overlaps {b.name}"
        on_disk = {e.name for e in os.scandir(self.table.path) if e.is_dir() and not e.name.startswith(
            ("staged_", "tmp_", "delete_tmp_", "_mergetree", "detached"))}
        # What ClickHouse would load from the directory never hides a row we return.
        assert parts <= clickhouse_active(on_disk) | {n for n in parts if n not in on_disk}


# The default run explores a fixed set of programs (derandomized: the same ones every run); an
# exhaustive run (pytest --exhaustive) random ones, three times as many.
ProtocolMachine.TestCase.settings = settings(max_examples=scaled(8, 25), stateful_step_count=25, deadline=None,
                                             derandomize=not exhaustive(), database=None,
                                             suppress_health_check=list(HealthCheck))
test_protocol_model = ProtocolMachine.TestCase

"""Application versions in the commit log: a streaming query's micro-batch recorded with its commit.

`commit_staged(app_version=(app, version))` records in the same transaction's log entry that the
application reached the version; a second commit of that version (a batch replayed after a crash)
publishes nothing and raises AlreadyCommittedError; the record survives checkpoints and cleanup,
and a transaction that rolled back records nothing.
"""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from spark_mergetree import MergeTreeTable
from spark_mergetree.errors import AlreadyCommittedError
from spark_mergetree.txn import Transaction

COLUMNS = [("id", "UInt64"), ("batch", "Int64")]


def rows(batch: int, count: int = 5) -> pa.Table:
    return pa.table({"id": pa.array(range(batch * 100, batch * 100 + count), pa.uint64()),
                     "batch": pa.array([batch] * count, pa.int64())})


def test_a_replayed_version_commits_nothing_twice(tmp_path):
    table = MergeTreeTable.create(tmp_path / "t", COLUMNS, order_by="id")
    assert table.app_version("q1") is None
    for batch in range(3):
        table.commit_staged(table.stage(rows(batch), tag=f"b{batch}"), app_version=("q1", batch))
    assert table.app_version("q1") == 2 and table.count() == 15
    # The same batch again (its driver died after our commit, before Spark's checkpoint), and an
    # older one: nothing is published, the staged parts are gone.
    for batch in (2, 1):
        staged = table.stage(rows(batch), tag=f"r{batch}")
        with pytest.raises(AlreadyCommittedError, match=r"application 'q1' already committed version 2"):
            table.commit_staged(staged, app_version=("q1", batch))
        assert not any((table.path / part.name).exists() for part in staged)
    assert table.count() == 15
    # Another application's versions are its own.
    table.commit_staged(table.stage(rows(7), tag="other"), app_version=("q2", 0))
    assert table.app_version("q2") == 0 and table.app_version("q1") == 2


def test_the_record_lives_in_the_entry_and_survives_checkpoints_and_cleanup(tmp_path):
    table = MergeTreeTable.create(tmp_path / "t", COLUMNS, order_by="id")
    table.commit_staged(table.stage(rows(0), tag="b0"), app_version=("q", 0))
    entries = [json.loads(p.read_text()) for p in (table.path / "_mergetree" / "log").glob("0*.json")]
    assert [entry.get("apps") for entry in entries if entry.get("apps")] == [{"q": 0}]
    table.commit_staged(table.stage(rows(1), tag="b1"), app_version=("q", 1))
    table.optimize(final=True)
    table.cleanup()
    assert json.loads((table.path / "_mergetree" / "log" / "checkpoint.json").read_text())["apps"] == {"q": 1}
    assert table.app_version("q") == 1
    with pytest.raises(AlreadyCommittedError):
        table.commit_staged(table.stage(rows(1), tag="again"), app_version=("q", 1))
    assert table.count() == 10


def test_a_rolled_back_transaction_records_no_version(tmp_path):
    table = MergeTreeTable.create(tmp_path / "t", COLUMNS, order_by="id")
    tx = Transaction(table.coordinator)
    table.commit_staged(table.stage(rows(0), transaction=tx), transaction=tx, app_version=("q", 0))
    assert table.app_version("q") is None  # pending: not committed yet
    tx.rollback()
    assert table.app_version("q") is None and table.count() == 0
    # The batch commits when it is written again.
    table.commit_staged(table.stage(rows(0), tag="b0"), app_version=("q", 0))
    assert table.app_version("q") == 0 and table.count() == 5


"""Tables in object storage (s3://, gs:// and abfss:// on real servers on 127.0.0.1: moto,
fake-gcs-server, Azurite): create, insert, select, overwrite, transactions across tables, crash
leftovers and cleanup, racing committers."""

from __future__ import annotations

import multiprocessing
import os
import signal
import time

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from spark_mergetree import MergeTreeTable, Transaction
from spark_mergetree.engine.object_table import ObjectStoreTable
from spark_mergetree.errors import (
    SerializationError,
    StorageError,
    TableExistsError,
    TableNotFoundError,
    UnsupportedError,
)
from spark_mergetree.format.part_info import PartInfo
from spark_mergetree.storage.object_store import REQUESTS
from spark_mergetree.txn import coordinator_from_url

FORK = multiprocessing.get_context("fork")
SCHEMA = [("id", "UInt64"), ("d", "Date"), ("value", "Float64"), ("name", "String")]


def rows(start: int, count: int) -> pa.Table:
    ids = np.arange(start, start + count, dtype=np.uint64)
    days = pa.array((19000 + (ids // 100) % 50).astype(np.int32), pa.date32())
    return pa.table({"id": pa.array(ids), "d": days, "value": pa.array(ids * 0.5),
                     "name": pc.cast(pa.array(ids), pa.string())})


def same(read: pa.Table, expected: pa.Table) -> bool:
    return read.sort_by("id").equals(expected.cast(read.schema))


def create(url: str, **kwargs: object) -> ObjectStoreTable:
    """A table that merges only when its test merges it: background merges started by its inserts
    would race the test's own merges and add their requests to the ones a test counts."""
    table = MergeTreeTable.create(url, SCHEMA, order_by="id", partition_by="toYYYYMM(d)",
                                  settings={"index_granularity": 256, "auto_merge": False},
                                  **kwargs)  # type: ignore[arg-type]
    assert isinstance(table, ObjectStoreTable)
    return table


def test_create_insert_select_overwrite(object_store) -> None:  # type: ignore[no-untyped-def]
    url = object_store.url("warehouse/events").replace("s3://", "s3a://").replace("abfss://", "abfs://")
    table = create(url)
    data = rows(0, 5000)
    names = table.insert(data)
    assert len(names) == 2  # two months
    reopened = MergeTreeTable.open(object_store.url("warehouse/events/"))
    assert isinstance(reopened, ObjectStoreTable)
    assert same(reopened.to_arrow(), data)
    key_range = reopened.to_arrow(where="id BETWEEN 1200 AND 1300")
    assert same(key_range, data.filter(pc.and_(pc.greater_equal(data["id"], 1200), pc.less_equal(data["id"], 1300))))
    assert reopened.count() == 5000
    before = reopened.visible_parts()[0]
    table.overwrite(rows(100_000, 10))
    assert same(reopened.to_arrow(), rows(100_000, 10))
    assert reopened.to_arrow(snapshot=before).num_rows == 5000  # the old parts are kept for old snapshots
    # Every object of a part is under its final key; nothing was renamed or staged elsewhere.
    keys = object_store.bucket().list_objects("warehouse/events/", delimiter=None)[0]
    assert not [k for k in keys if "tmp" in k or "staged" in k]
    with pytest.raises(TableExistsError):
        create(url)
    assert create(url, if_not_exists=True).uuid == table.uuid
    with pytest.raises(TableNotFoundError, match=object_store.url("nothing")):
        MergeTreeTable.open(object_store.url("nothing"))


def test_bad_locations_fail_before_anything_is_written(object_store, tmp_path) -> None:  # type: ignore[no-untyped-def]
    missing = object_store.missing
    with pytest.raises(StorageError, match=rf"{missing}/t: (bucket|container) 'no-such-[a-z-]+' does not exist"):
        create(f"{missing}/t")
    local = coordinator_from_url(str(tmp_path / "coordinator"))
    with pytest.raises(UnsupportedError, match="object-store coordinator"):
        create(object_store.url("t"), coordinator=local)
    table = create(object_store.url("t2"), coordinator=local.url)
    with pytest.raises(UnsupportedError, match=r"coordinator='s3://bucket/prefix'"):
        table.insert(rows(0, 1))
    assert object_store.bucket().list_objects("t2/", delimiter=None)[0].keys() == {
        "t2/_mergetree/table.sql", "t2/_mergetree/settings.json"}


def test_two_tables_commit_atomically_and_overwrites_conflict(object_store) -> None:  # type: ignore[no-untyped-def]
    """With the coordinator in the same object store as the tables (s3://, gs://, abfss://)."""
    two_tables_commit_atomically_and_overwrites_conflict(object_store.root,
                                                         coordinator_from_url(object_store.url("coordinator")))


def test_two_tables_with_zookeeper(s3_bucket: str, zookeeper) -> None:  # type: ignore[no-untyped-def]
    coordinator = coordinator_from_url(f"zk://{zookeeper.hosts}/objstore_{s3_bucket}")
    two_tables_commit_atomically_and_overwrites_conflict(f"s3://{s3_bucket}", coordinator)


def two_tables_commit_atomically_and_overwrites_conflict(root: str, coordinator) -> None:  # type: ignore[no-untyped-def]
    orders = create(f"{root}/orders", coordinator=coordinator)
    audit = create(f"{root}/audit", coordinator=coordinator)
    with Transaction(coordinator) as tx:
        orders.insert(rows(0, 100), transaction=tx)
        audit.insert(rows(0, 10), transaction=tx)
        assert orders.count() == 0 and orders.count(transaction=tx) == 100  # nothing visible before the commit
    snapshot = coordinator.current_timestamp()
    assert (orders.count(snapshot=snapshot), audit.count(snapshot=snapshot)) == (100, 10)
    # Two overwrites of one table from one snapshot: the first remover wins, the second commits nothing.
    first, second = Transaction(coordinator), Transaction(coordinator)
    orders.overwrite(rows(1000, 5), transaction=first)
    with pytest.raises(SerializationError, match="cannot remove part"):
        orders.overwrite(rows(2000, 5), transaction=second)
        audit.insert(rows(2000, 5), transaction=second)
    first.commit()
    assert same(orders.to_arrow(), rows(1000, 5)) and audit.count() == 10
    # A transaction that fails after writing to both tables leaves neither changed.
    with pytest.raises(RuntimeError, match="boom"), Transaction(coordinator) as tx:
        orders.insert(rows(3000, 5), transaction=tx)
        audit.insert(rows(3000, 5), transaction=tx)
        raise RuntimeError("boom")
    assert (orders.count(), audit.count()) == (5, 10)


def _upload_forever(url: str, ready: multiprocessing.synchronize.Event) -> None:
    table = MergeTreeTable.open(url)
    big = rows(0, 200_000)
    ready.set()
    while True:
        table.stage(big)  # uploads parts under final keys that no entry names yet


def test_kill_mid_upload_then_cleanup(object_store) -> None:  # type: ignore[no-untyped-def]
    url = object_store.url("t")
    table = create(url)
    table.insert(rows(0, 1000))
    ready = FORK.Event()
    child = FORK.Process(target=_upload_forever, args=(url, ready))
    child.start()
    assert ready.wait(60)
    deadline = time.monotonic() + 60
    while len(table.store.part_names()) <= 4 and time.monotonic() < deadline:  # type: ignore[attr-defined]
        time.sleep(0.05)
    os.kill(child.pid, signal.SIGKILL)
    child.join()
    visible = table.visible_parts()[1]
    leftovers = set(table.store.part_names()) - visible - {""}  # type: ignore[attr-defined]
    assert leftovers, "the kill left no unreferenced upload"
    assert table.cleanup() == []  # too young: an upload this recent may still be committed
    assert table.count() == 1000
    assert sorted(table.cleanup(orphan_seconds=0)) == sorted(leftovers)
    assert set(table.store.part_names()) - {""} == visible  # type: ignore[attr-defined]
    assert table.count() == 1000


def _commit_one(url: str, start: int, barrier: multiprocessing.synchronize.Barrier,
                results: multiprocessing.Queue) -> None:
    table = MergeTreeTable.open(url)
    with Transaction(table.coordinator) as tx:
        staged = table.stage(rows(start, 10), transaction=tx)
        barrier.wait(30)
        try:
            table.commit_staged(staged, mode="overwrite", transaction=tx)
            results.put(("ok", start))
        except SerializationError as error:
            results.put(("conflict", str(error)))
            raise


def test_concurrent_committers_race_on_conditional_writes(object_store) -> None:  # type: ignore[no-untyped-def]
    url = object_store.url("race")
    table = create(url)
    table.insert(rows(0, 10))
    barrier, results = FORK.Barrier(4), FORK.Queue()
    workers = [FORK.Process(target=_commit_one, args=(url, 1000 * (n + 1), barrier, results)) for n in range(4)]
    for worker in workers:
        worker.start()
    outcomes = [results.get(timeout=120) for _ in workers]
    for worker in workers:
        worker.join(60)
    winners = [start for kind, start in outcomes if kind == "ok"]
    assert len(winners) == 1, outcomes  # every overwrite removes the same parts: exactly one wins
    assert same(table.to_arrow(), rows(int(winners[0]), 10))
    # Appends never conflict: each racing append lands.
    log_entries = len(table.log.entries())
    assert log_entries >= 2


def test_key_range_read_costs_a_constant_number_of_requests(s3_bucket: str) -> None:
    table = create(f"s3://{s3_bucket}/ranged")
    for start in range(0, 40_000, 10_000):
        table.insert(rows(start, 10_000))
    assert MergeTreeTable.wait_for_merges(timeout=60)  # no background merge's requests in the count
    # Warm: part metadata (file sizes, marks, primary indexes) is cached per process by part identity.
    table.to_arrow(["id", "value"], where="id BETWEEN 20000 AND 20010")
    before = REQUESTS.snapshot()
    result = table.to_arrow(["id", "value"], where="id BETWEEN 20100 AND 20200")
    after = REQUESTS.snapshot()
    assert result.num_rows == 101
    spent = {kind: after.get(kind, 0) - before.get(kind, 0) for kind in after}
    # Snapshot: the clock (1 GET) and the next, absent log entry (1 GET); then one ranged GET per
    # column stream of the one part and granule range the key range touches (id, value: 2).
    assert spent.get("LIST", 0) == 0 and spent.get("PUT", 0) == 0 and spent.get("HEAD", 0) == 0
    assert spent["GET"] == 4, spent


def test_many_partitions_upload_while_encoding(s3_bucket: str) -> None:
    """20 parts in one insert: block numbers come in batches of 16, each part uploads while the next
    is encoded."""
    table = MergeTreeTable.create(f"s3://{s3_bucket}/many", SCHEMA, order_by="id", partition_by="intDiv(id, 200)")
    data = rows(0, 4000)
    names = table.insert(data)
    assert len(names) == 20
    assert len({PartInfo.parse(name).min_block for name in names}) == 20  # unique block numbers
    assert same(table.to_arrow(), data)
    assert set(table.parts_store.part_names()) - {""} == set(names)  # type: ignore[attr-defined]


def test_a_new_process_reads_a_long_log_whole_and_in_order(s3_bucket: str) -> None:
    from spark_mergetree.txn import object_log

    table = create(f"s3://{s3_bucket}/long")
    url = table.coordinator.url
    for tid in range(1000, 1037):
        table.log.write_pending(tid, url, [f"all_{tid}_{tid}_0"], [])
    with object_log._CACHE_LOCK:
        object_log._STATES.clear()  # as a process that never read this log
    assert [entry.tid for entry in table.log.entries()] == list(range(1000, 1037))
    table.log.write_pending(2000, url, ["all_2000_2000_0"], [])
    assert MergeTreeTable.wait_for_merges(timeout=60)  # an earlier test's merges would add requests
    before = REQUESTS.snapshot().get("GET", 0)
    assert [entry.tid for entry in table.log.entries()][-2:] == [1036, 2000]
    assert REQUESTS.snapshot().get("GET", 0) - before == 3  # 1 new entry, then 2 probed at once


def test_checkpoint_lets_a_new_process_skip_folded_entries(s3_bucket: str) -> None:
    from spark_mergetree.txn import object_log

    table = create(f"s3://{s3_bucket}/folded")
    snapshots = []
    for start in range(0, 60, 10):
        table.insert(rows(start, 10))
        snapshots.append(table.coordinator.current_timestamp())
    table.overwrite(rows(1000, 3))
    running = Transaction(table.coordinator)
    table.insert(rows(2000, 2), transaction=running)  # undecided: its entry stays out of the checkpoint
    table.insert(rows(3000, 4))
    # No background merge may change the parts or add its requests to the count below.
    assert MergeTreeTable.wait_for_merges(timeout=60)
    assert table.log.maybe_checkpoint(every=3)
    expected = {snapshot: table.visible_parts(snapshot=snapshot)[1] for snapshot in snapshots}
    now = table.visible_parts()[1]
    with object_log._CACHE_LOCK:
        object_log._STATES.clear()
        object_log._FATES.clear()  # as a process that never read this log
    before = REQUESTS.snapshot().get("GET", 0)
    reopened = MergeTreeTable.open(table.path)
    assert reopened.visible_parts()[1] == now
    cold = REQUESTS.snapshot().get("GET", 0) - before
    assert len(reopened.log.entries()) == 2  # the running transaction's and the last insert's
    # table.sql, settings.json, table.json, the clock, the hint, the checkpoint, 2 entries and 2
    # probed, 2 fates (record, then clock and lease for the running one): not the 9 folded entries.
    assert cold <= 13, cold
    for snapshot, parts in expected.items():  # history inside the checkpoint is exact
        assert reopened.visible_parts(snapshot=snapshot)[1] == parts
    running.commit()
    assert same(reopened.to_arrow(), pa.concat_tables([rows(1000, 3), rows(2000, 2), rows(3000, 4)]))
    assert reopened.log.cleanup(reopened.coordinator, retention_seconds=0)  # the overwritten parts
    assert set(reopened.parts_store.part_names()) - {""} == reopened.visible_parts()[1]


def test_command_line_on_an_object_store_table(object_store) -> None:  # type: ignore[no-untyped-def]
    from click.testing import CliRunner

    from spark_mergetree.cli import main

    url = object_store.url("cli")
    create(url).insert(rows(0, 250))
    listed = CliRunner().invoke(main, ["parts", url])
    assert listed.exit_code == 0 and "1 parts, 250 rows" in listed.output, listed.output
    head = CliRunner().invoke(main, ["head", url, "-n", "3", "--where", "id < 3"])
    assert head.exit_code == 0 and head.output.count("\n") >= 3, head.output
    assert CliRunner().invoke(main, ["cleanup", url]).exit_code == 0
    MergeTreeTable.open(url).insert(rows(250, 50))
    merged = CliRunner().invoke(main, ["optimize", url, "--final"])
    assert merged.exit_code == 0 and "merged into" in merged.output, merged.output
    checked = CliRunner().invoke(main, ["check", url])
    assert checked.exit_code == 0 and "1 parts checked: all files match" in checked.output, checked.output
    scrubbed = CliRunner().invoke(main, ["scrub", url])  # every part's objects re-hashed (merged-away ones too)
    assert scrubbed.exit_code == 0 and "scrub: 3 parts" in scrubbed.output and "0 problems" in scrubbed.output, \
        scrubbed.output
    refused = CliRunner().invoke(main, ["rebuild", url, "disk1"])  # a bucket has no disks to rebuild
    assert isinstance(refused.exception, UnsupportedError) and url in str(refused.exception)


# ---------------------------------------------------------------- merges


def block_ranges_overlap(parts: set[str]) -> bool:
    infos = sorted(PartInfo.parse(name) for name in parts)
    return any(a.partition_id == b.partition_id and b.min_block <= a.max_block for a, b in zip(infos, infos[1:]))


def test_optimize_final_leaves_one_part_per_partition_and_old_snapshots_read(s3_bucket: str) -> None:
    table = create(f"s3://{s3_bucket}/merged")
    for start in range(0, 5000, 1000):  # five inserts over two months: several parts per partition
        table.insert(rows(start, 1000))
    before_parts = table.visible_parts()[1]
    before = table.to_arrow()
    snapshot = table.coordinator.current_timestamp()
    partitions = {PartInfo.parse(name).partition_id for name in before_parts}
    assert len(before_parts) > len(partitions) == 2
    created = table.optimize(final=True)
    after_parts = table.visible_parts()[1]
    assert sorted(after_parts) == sorted(created) and len(created) == len(partitions)
    assert {PartInfo.parse(name).partition_id for name in after_parts} == partitions
    assert all(PartInfo.parse(name).level >= 1 for name in after_parts)
    reopened = MergeTreeTable.open(f"s3://{s3_bucket}/merged")
    assert same(reopened.to_arrow(), before)
    assert table.optimize(final=True) == []  # nothing left to merge
    table.cleanup(orphan_seconds=0)  # replaced parts stay for old snapshots (old_parts_lifetime)
    assert same(reopened.to_arrow(snapshot=snapshot), before)
    assert reopened.visible_parts(snapshot=snapshot)[1] == before_parts


def test_background_selector_merges_an_object_store_table(s3_bucket: str) -> None:
    table = MergeTreeTable.create(f"s3://{s3_bucket}/small", SCHEMA, order_by="id",
                                  settings={"merge_parts_threshold": 2, "auto_merge": False})
    expected = []
    for start in range(0, 400, 100):
        table.insert(rows(start, 100))
        expected.append(rows(start, 100))
    created = table.merge()
    assert created and len(table.visible_parts()[1]) < 4
    assert same(table.to_arrow(), pa.concat_tables(expected))


def test_inserts_into_an_object_store_table_merge_in_the_background(s3_bucket: str) -> None:
    # Beyond merge_parts_threshold parts, the insert's commit schedules a merge (as on local tables);
    # no merge()/optimize() is called. The merged part is uploaded by the streaming merge.
    table = MergeTreeTable.create(f"s3://{s3_bucket}/auto", SCHEMA, order_by="id",
                                  settings={"merge_parts_threshold": 3, "max_parts_to_merge": 5,
                                            "merge_selecting_sleep_ms": 50, "index_granularity": 256})
    expected = [rows(start, 500) for start in range(0, 3000, 500)]
    for batch in expected[:3]:
        table.insert(batch)
    assert MergeTreeTable.wait_for_merges(timeout=60)
    assert len(table.visible_parts()[1]) == 3  # at the threshold: nothing merged
    for batch in expected[3:]:
        table.insert(batch)
    assert MergeTreeTable.wait_for_merges(timeout=60)
    visible = table.visible_parts()[1]
    assert len(visible) < 6 and any(PartInfo.parse(p).level > 0 for p in visible)
    assert same(table.to_arrow(), pa.concat_tables(expected))
    assert same(MergeTreeTable.open(f"s3://{s3_bucket}/auto").to_arrow(), pa.concat_tables(expected))


def test_a_merge_losing_to_an_overwrite_leaves_the_overwrites_rows_only(s3_bucket: str) -> None:
    from spark_mergetree.engine import merge as merging
    from spark_mergetree.engine import optimize as optimizing

    table = create(f"s3://{s3_bucket}/raced")
    for start in range(0, 3000, 1000):
        table.insert(rows(start, 1000))
    # The merge takes its snapshot and chooses its parts; the overwrite commits first.
    tx, reserved, visible = optimizing.begin_merge_transaction(table)
    candidate = merging.select_merges(sorted(visible), {p: table.reader(p).rows for p in visible}, table.metadata,
                                      final=True, reserved=reserved)[0]
    table.overwrite(rows(10_000, 300))
    with pytest.raises(SerializationError):
        optimizing.merge_one(table, candidate, tx)
    assert same(table.to_arrow(), rows(10_000, 300))
    assert set(table.parts_store.part_names()) - {""} <= visible | table.visible_parts()[1]  # nothing uploaded

    # A merge that uploaded its part and then lost (its transaction rolled back) leaves nothing either.
    table.insert(rows(20_000, 300))
    tx, reserved, visible = optimizing.begin_merge_transaction(table)
    candidate = merging.select_merges(sorted(visible), {p: table.reader(p).rows for p in visible}, table.metadata,
                                      final=True, reserved=reserved)[0]
    tx.remove_parts(table.log, candidate.parts)
    files = merging.merge_parts([table.reader(p) for p in candidate.parts], table.metadata)
    uploaded = table.publish_merged(candidate, files, tx)
    assert table.parts_store.exists(uploaded)
    tx.rollback()
    assert same(table.to_arrow(), pa.concat_tables([rows(10_000, 300), rows(20_000, 300)]))
    table.cleanup(orphan_seconds=0)
    assert not table.parts_store.exists(uploaded)
    # The next merge of the same parts takes a name no entry ever held.
    created = table.optimize(final=True)
    assert created and uploaded not in created
    assert same(table.to_arrow(), pa.concat_tables([rows(10_000, 300), rows(20_000, 300)]))
    table.cleanup(orphan_seconds=0)
    assert same(MergeTreeTable.open(f"s3://{s3_bucket}/raced").to_arrow(),
                pa.concat_tables([rows(10_000, 300), rows(20_000, 300)]))


def test_a_merge_never_spans_the_block_of_an_insert_still_uploading(s3_bucket: str) -> None:
    table = create(f"s3://{s3_bucket}/inflight")
    table.insert(rows(0, 100))
    pending = Transaction(table.coordinator)
    staged = table.stage(rows(100, 100), transaction=pending)  # blocks allocated, uploaded, named by no entry
    table.insert(rows(200, 100))
    # OPTIMIZE FINAL waits (here 1 s) for the transactions running when it began, then merges up to
    # the blocks they still hold.
    table.optimize(final=True, timeout=1)
    table.commit_staged(staged, transaction=pending)
    pending.commit()
    visible = table.visible_parts()[1]
    assert not block_ranges_overlap(visible), sorted(visible)
    assert same(table.to_arrow(), rows(0, 300))
    assert len(table.optimize(final=True)) == 1  # with nothing running, the partition merges whole
    assert same(table.to_arrow(), rows(0, 300))


@pytest.mark.parametrize("scheme", ["s3", "gs", "abfss"])
def test_transient_errors_are_retried_with_backoff(scheme: str, request: pytest.FixtureRequest) -> None:
    """Every fifth request (3 in all: each retry waits a backoff) answered 503 by a proxy in front
    of the server (S3's SlowDown; a 503 is throttling on GCS and Azure too): creating, writing (the
    coordinator's conditional writes included) and reading a table still succeed."""
    from tests.cloud_servers import AZURE_ACCOUNT, AZURE_KEY
    from tests.s3_server import ACCESS_KEY, REGION, SECRET_KEY, FlakyProxy

    server = request.getfixturevalue({"s3": "s3_server", "gs": "gcs_server", "abfss": "azure_server"}[scheme])
    proxy = FlakyProxy(server.endpoint, every=5, limit=3)
    try:
        options: dict[str, str]
        if scheme == "s3":
            url = f"s3://{server.bucket()}/flaky"
            options = {"endpoint": proxy.endpoint, "access_key_id": ACCESS_KEY, "secret_access_key": SECRET_KEY,
                       "region": REGION}
        elif scheme == "gs":
            url, options = f"gs://{server.bucket()}/flaky", {"endpoint": proxy.endpoint}
        else:
            url = f"abfss://{server.container()}@{AZURE_ACCOUNT}.dfs.core.windows.net/flaky"
            options = {"endpoint": f"{proxy.endpoint}/{AZURE_ACCOUNT}", "account_key": AZURE_KEY}
        table = MergeTreeTable.create(url, SCHEMA, order_by="id", storage_options=options)
        table.insert(rows(0, 300))
        assert same(MergeTreeTable.open(url, storage_options=options).to_arrow(), rows(0, 300))
        assert proxy.injected == 3
    finally:
        proxy.close()


def test_staged_mutations_are_refused_clearly_and_change_nothing(s3_bucket: str) -> None:
    from spark_mergetree.engine import mutations

    url = f"s3://{s3_bucket}/mutated"
    table = create(url)
    table.insert(rows(0, 100))
    # The staged protocol (Spark's distributed DELETE/UPDATE go through it) renames parts into place.
    with pytest.raises(UnsupportedError, match="DELETE and UPDATE as Spark jobs"):
        mutations.run(table, mutations.delete_mutation(table, "id < 5"), None, mutations.run_once)
    assert same(table.to_arrow(), rows(0, 100))
    # Without a protocol named, `run` writes the new versions in place here (as table.delete does).
    mutations.run(table, mutations.delete_mutation(table, "id < 5"), None)
    assert same(table.to_arrow(), rows(5, 95))


def test_add_materialize_and_drop_index_on_an_object_store_table(s3_bucket: str) -> None:
    """ALTER ADD INDEX changes table.sql by a conditional put (a stale handle's ALTER loses);
    MATERIALIZE and DROP INDEX are mutations: every part's new version under its final name, one
    transaction, mutation_N.txt; the index then skips granules, and old snapshots still read."""
    url = f"s3://{s3_bucket}/indexed"
    table = create(url)
    table.insert(rows(0, 3000))
    stale = MergeTreeTable.open(url)
    where = "value BETWEEN 100 AND 110"
    before = table.explain(where).granules_read
    snapshot = table.visible_parts()[0]
    table.add_index("INDEX v_minmax value TYPE minmax GRANULARITY 1")
    assert "v_minmax" in MergeTreeTable.open(url).definition.indexes[0]
    with pytest.raises(SerializationError, match="changed since this handle read it"):
        stale.add_index("INDEX n_set name TYPE set(10) GRANULARITY 1")
    assert table.explain(where).granules_read == before  # not materialized: nothing to skip with

    new_parts = table.materialize_index("v_minmax")
    assert new_parts and all(PartInfo.parse(p).mutation > 0 for p in new_parts)
    assert all("skp_idx_v_minmax.idx2" in table.reader(p).files for p in new_parts)
    assert table.explain(where).granules_read < before
    assert same(table.to_arrow(where=where), rows(200, 21))
    assert same(table.to_arrow(snapshot=snapshot), rows(0, 3000))
    version = PartInfo.parse(new_parts[0]).mutation
    bucket = table.parts_store.bucket
    assert b"MATERIALIZE INDEX v_minmax" in bucket.get(table.location.child(f"mutation_{version}.txt").key)

    dropped = table.drop_index("v_minmax")
    assert not any("skp_idx_v_minmax" in f for p in dropped for f in table.reader(p).files)
    assert not MergeTreeTable.open(url).definition.indexes
    assert same(table.to_arrow(), rows(0, 3000))


def test_nearby_granule_ranges_of_a_stream_are_read_by_one_request(s3_bucket: str) -> None:
    """Two key ranges a few granules apart in one part: one ranged GET per column stream, not one
    per range and stream; the rows are exact."""
    table = MergeTreeTable.create(f"s3://{s3_bucket}/coalesced", SCHEMA, order_by="id",
                                  settings={"index_granularity": 256, "min_bytes_for_wide_part": 0})  # streams
    table.insert(rows(0, 20_000))
    assert MergeTreeTable.wait_for_merges(timeout=60)  # no background merge's requests in the count
    where = "id BETWEEN 2000 AND 2100 OR id BETWEEN 7000 AND 7100"
    table.to_arrow(["id", "value"], where=where)  # warm: part metadata cached
    plan = table.explain(where)
    assert [len(part.ranges) for part in plan.parts] == [2]  # one part, two ranges to read
    before = REQUESTS.snapshot()
    result = table.to_arrow(["id", "value"], where=where)
    spent = {kind: REQUESTS.snapshot().get(kind, 0) - before.get(kind, 0) for kind in before}
    assert sorted(result.column("id").to_pylist()) == list(range(2000, 2101)) + list(range(7000, 7101))
    # The clock and the next (absent) log entry, then one ranged GET per stream (id, value): 4, not 6.
    assert spent["GET"] == 4, spent


def test_cleanup_deletes_folded_log_entries_and_stale_processes_catch_up(s3_bucket: str, monkeypatch) -> None:
    """Entries a checkpoint folded are deleted once the checkpoint is old enough; a new process reads
    the table from the checkpoint, history stays exact, and a process whose knowledge predates the
    deletion neither misses later commits nor commits under a deleted entry's number."""
    from spark_mergetree.txn import object_log

    table = create(f"s3://{s3_bucket}/trimmed")
    snapshots = []
    for start in range(0, 50, 10):
        table.insert(rows(start, 10))
        snapshots.append(table.coordinator.current_timestamp())
        assert MergeTreeTable.wait_for_merges(timeout=60)
        if start == 10:
            table.to_arrow()
            with object_log._CACHE_LOCK:  # what a slow process knew, before the entries that follow
                stale = object_log._STATES[table.log._log_url]
    expected = {snapshot: table.visible_parts(snapshot=snapshot)[1] for snapshot in snapshots}
    entry_keys = lambda: sorted(k for k in table.log._bucket.list_objects(table.log._key(""), delimiter=None)[0]  # noqa: E731
                                if k.rsplit("/", 1)[-1].removesuffix(".json").isdigit())
    assert len(entry_keys()) >= 5
    assert table.log.maybe_checkpoint(every=1)
    table.insert(rows(100, 3))  # an entry after the checkpoint: it stays
    monkeypatch.setattr(object_log, "LOG_GRACE_SECONDS", 0.0)
    table.cleanup(orphan_seconds=3600)
    left = entry_keys()
    assert len(left) == 1, left  # only the entry the checkpoint did not fold

    with object_log._CACHE_LOCK:
        object_log._STATES.clear()
        object_log._FATES.clear()
        object_log._HINT_READ.clear()
    reopened = MergeTreeTable.open(table.path)
    data = pa.concat_tables([rows(start, 10) for start in range(0, 50, 10)] + [rows(100, 3)])
    assert same(reopened.to_arrow(), data)
    for snapshot, parts in expected.items():  # history inside the checkpoint is exact
        assert reopened.visible_parts(snapshot=snapshot)[1] == parts

    with object_log._CACHE_LOCK:  # a process that last looked before the checkpoint, long ago
        object_log._STATES[table.log._log_url] = stale
        object_log._HINT_READ[table.log._log_url] = time.monotonic() - 2 * object_log.HINT_RECHECK_SECONDS
    assert same(table.to_arrow(), data)  # it sees the commit after the checkpoint
    with object_log._CACHE_LOCK:
        object_log._STATES[table.log._log_url] = stale
        object_log._HINT_READ[table.log._log_url] = time.monotonic()  # (even one that looked just now)
    table.insert(rows(200, 2))  # a commit reads the hint: its entry follows the last one
    with object_log._CACHE_LOCK:
        object_log._STATES.clear()
        object_log._HINT_READ.clear()
    assert same(MergeTreeTable.open(table.path).to_arrow(), pa.concat_tables([data, rows(200, 2)]))

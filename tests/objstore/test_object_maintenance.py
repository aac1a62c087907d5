"""CHECK TABLE, ALTER ADD COLUMN, DELETE and UPDATE on tables in object storage."""

from __future__ import annotations

import threading

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from spark_mergetree import MergeTreeTable, Transaction
from spark_mergetree.errors import InvalidOptionError, SerializationError
from spark_mergetree.format.checksums import Checksums
from spark_mergetree.format.part_info import PartInfo
from tests.objstore.test_object_table import SCHEMA, create, rows, same


def test_check_rehashes_every_object_and_names_a_corrupted_one(object_store) -> None:  # type: ignore[no-untyped-def]
    url = object_store.url("checked")
    table = create(url)
    table.insert(rows(0, 3000))
    parts = sorted(table.visible_parts()[1])
    report = table.check()
    assert report.ok and report.parts_checked == len(parts) == 2
    # One byte of one data file of the second part flipped in the bucket (same size).
    part = parts[1]
    bucket = object_store.bucket()
    listed = Checksums.parse(bucket.get(f"checked/{part}/checksums.txt")).files
    name = max((n for n in listed if n.endswith(".bin")), key=lambda n: listed[n].file_size)
    key = f"checked/{part}/{name}"
    data = bytearray(bucket.get(key))
    data[len(data) // 2] ^= 0xFF
    bucket.put(key, bytes(data))
    for handle in (table, MergeTreeTable.open(url)):  # this process (cached listing) and a fresh handle
        report = handle.check()
        assert not report.ok and report.parts_checked == 2
        assert len(report.problems) == 1
        assert f"{url}/{part}/{name}" in report.problems[0], report.problems


def test_add_columns_old_parts_read_defaults(object_store) -> None:  # type: ignore[no-untyped-def]
    url = object_store.url("altered")
    table = create(url)
    before = rows(0, 500)
    table.insert(before)
    table.add_columns([("note", "Nullable(String)"), ("n", "UInt32")])
    reopened = MergeTreeTable.open(url)
    assert [c for c, _ in reopened.metadata.columns][-2:] == ["note", "n"]
    later = rows(1000, 50).append_column("note", pa.array([f"x{i}" for i in range(50)])) \
        .append_column("n", pa.array(range(50), pa.uint32()))
    reopened.insert(later)
    expected = pa.concat_tables([
        before.append_column("note", pa.nulls(500, pa.string())).append_column("n", pa.array([0] * 500, pa.uint32())),
        later])
    assert same(reopened.to_arrow(), expected)
    assert same(table.to_arrow(), expected)  # the handle that altered sees its new columns too


def test_concurrent_add_columns_one_wins(object_store) -> None:  # type: ignore[no-untyped-def]
    url = object_store.url("raced")
    create(url).insert(rows(0, 10))
    handles = [MergeTreeTable.open(url) for _ in range(4)]
    barrier = threading.Barrier(len(handles))
    outcome: dict[int, BaseException | None] = {}

    def alter(index: int) -> None:
        barrier.wait()
        try:
            handles[index].add_columns([(f"c{index}", "UInt8")])
            outcome[index] = None
        except BaseException as error:  # noqa: BLE001 - collected and checked below
            outcome[index] = error

    threads = [threading.Thread(target=alter, args=(i,)) for i in range(len(handles))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    winners = [i for i, error in outcome.items() if error is None]
    assert len(winners) == 1, outcome
    assert all(isinstance(e, SerializationError) for e in outcome.values() if e is not None), outcome
    columns = [c for c, _ in MergeTreeTable.open(url).metadata.columns]
    assert [c for c in columns if c.startswith("c")] == [f"c{winners[0]}"]
    # A handle that read the statement before the winning ALTER cannot overwrite it.
    loser = handles[(winners[0] + 1) % len(handles)]
    with pytest.raises(SerializationError, match="changed since this handle read it"):
        loser.add_columns([("late", "UInt8")])
    assert pc.sum(MergeTreeTable.open(url).to_arrow()[f"c{winners[0]}"]).as_py() == 0


def mutate(table: MergeTreeTable) -> list[list[str]]:
    return [table.delete("id % 7 = 3"),
            table.update({"value": "value * 2", "name": "'u'"}, "id BETWEEN 100 AND 900"),
            table.delete("id >= 5200"),
            table.delete("id = 999999")]  # matches nothing: no new versions


def test_delete_and_update_give_the_local_engines_rows(object_store, tmp_path) -> None:  # type: ignore[no-untyped-def]
    url = object_store.url("mutated")
    table = create(url)
    local = MergeTreeTable.create(tmp_path / "local", SCHEMA, order_by="id", partition_by="toYYYYMM(d)",
                                  settings={"index_granularity": 256})
    for target in (table, local):
        target.insert(rows(0, 3000))
        target.insert(rows(5000, 300))
    remote_names, local_names = mutate(table), mutate(local)
    # The same rows as the local engine, and as an independent computation.
    assert table.to_arrow().sort_by("id").equals(local.to_arrow().sort_by("id"))
    data = pa.concat_tables([rows(0, 3000), rows(5000, 300)])
    ids = data["id"].to_numpy()
    data = data.filter(pa.array((ids % 7 != 3) & (ids < 5200)))
    hit = pc.and_(pc.greater_equal(data["id"], 100), pc.less_equal(data["id"], 900))
    data = data.set_column(2, "value", pc.if_else(hit, pc.multiply(data["value"], 2), data["value"]))
    data = data.set_column(3, "name", pc.if_else(hit, pa.scalar("u"), data["name"]))
    assert same(MergeTreeTable.open(url).to_arrow(), data)
    # Every mutation gave every part a new version under its final name, as locally.
    assert [len(n) for n in remote_names] == [len(n) for n in local_names] == [3, 3, 3, 0]
    visible = table.visible_parts()[1]
    assert visible == set(remote_names[2])
    # mutation_N.txt, one per mutation that changed rows, N the parts' version, as ClickHouse keeps them.
    keys = object_store.bucket().list_objects("mutated/", delimiter="/")[0]
    versions = sorted(int(PartInfo.parse(names[0]).mutation) for names in remote_names[:3])
    assert sorted(k for k in keys if "mutation_" in k) == [f"mutated/mutation_{v}.txt" for v in versions]
    local_versions = sorted(int(PartInfo.parse(names[0]).mutation) for names in local_names[:3])

    def command(text: str) -> str:
        assert text.startswith("format version: 1\ncreate time: ")
        return text.splitlines()[2]

    assert [command(object_store.bucket().get(f"mutated/mutation_{v}.txt").decode()) for v in versions] == [
        command((tmp_path / "local" / f"mutation_{v}.txt").read_text()) for v in local_versions]
    assert table.check().ok


def test_a_mutation_in_a_rolled_back_transaction_leaves_nothing(s3_bucket: str) -> None:
    url = f"s3://{s3_bucket}/undone"
    table = create(url)
    table.insert(rows(0, 1000))
    bucket = table.parts_store.bucket

    def table_objects() -> set[str]:  # parts and mutation files, not the log
        return {k for k in bucket.list_objects("undone/", delimiter=None)[0] if "/_mergetree/" not in k}

    before = table_objects()
    with pytest.raises(RuntimeError, match="changed my mind"):
        with Transaction(table.coordinator) as tx:
            assert table.delete("id < 10", transaction=tx)
            assert table.update({"name": "'x'"}, "id < 20", transaction=tx)
            seen = table.to_arrow(transaction=tx)
            assert seen.num_rows == 990 and pc.sum(pc.equal(seen["name"], "x")).as_py() == 10
            assert same(table.to_arrow(), rows(0, 1000))  # invisible outside the transaction
            raise RuntimeError("changed my mind")
    assert same(table.to_arrow(), rows(0, 1000))
    assert same(MergeTreeTable.open(url).to_arrow(), rows(0, 1000))
    assert table_objects() == before  # the new versions were deleted; no mutation file was written


def test_clickhouse_reads_a_mutated_s3_table_in_place(s3_bucket: str) -> None:
    from tests.format.chdb_util import session_at

    url = f"s3://{s3_bucket}/seen"
    table = MergeTreeTable.create(url, SCHEMA, order_by="id", partition_by="toYYYYMM(d)",
                                  settings={"index_granularity": 256, "old_parts_lifetime": 0})
    table.insert(rows(0, 2000))
    table.delete("id % 5 = 1")
    table.update({"value": -1.0}, "id < 300")
    table.cleanup()  # the replaced versions: ClickHouse reads every part under the prefix
    ours = table.to_arrow(["id", "value", "name"]).sort_by("id")
    chdb = session_at(None)
    try:
        chdb.query(table.clickhouse_ddl("default.seen", credentials=True))
        text = str(chdb.query("SELECT id, value, name FROM default.seen ORDER BY id", "TSV"))
    finally:
        chdb.close()
    theirs = [(int(i), float(v), n) for i, v, n in (line.split("\t") for line in text.splitlines())]
    assert theirs == list(zip(ours["id"].to_pylist(), ours["value"].to_pylist(), ours["name"].to_pylist()))
    assert len(theirs) == 1600


def test_clickhouse_reads_an_azure_table_in_place(azure_server, monkeypatch) -> None:
    """abfss://: a plain `azure` object-storage disk over the container's prefix (Azurite here,
    reached through the connection string of the environment); the same rows after a DELETE."""
    from tests.cloud_servers import StoreUnderTest
    from tests.format.chdb_util import session_at

    store = StoreUnderTest.make("abfss", azure_server, monkeypatch)
    table = MergeTreeTable.create(store.url("seen"), SCHEMA, order_by="id", partition_by="toYYYYMM(d)",
                                  settings={"index_granularity": 256, "old_parts_lifetime": 0, "auto_merge": False})
    table.insert(rows(0, 1500))
    table.delete("id % 3 = 0")
    table.cleanup()
    ours = table.to_arrow(["id", "name"]).sort_by("id")
    statement = table.clickhouse_ddl("default.azure_seen", credentials=True)
    assert "object_storage_type = 'azure'" in statement and "account_key = " in statement
    assert "account_key" not in table.clickhouse_ddl("default.azure_seen")  # the server's own identity
    chdb = session_at(None)
    try:
        chdb.query(statement)
        text = str(chdb.query("SELECT id, name FROM default.azure_seen ORDER BY id", "TSV"))
    finally:
        chdb.close()
    theirs = [(int(i), n) for i, n in (line.split("\t") for line in text.splitlines())]
    assert theirs == list(zip(ours["id"].to_pylist(), ours["name"].to_pylist())) and len(theirs) == 1000


def test_clickhouse_ddl_of_a_gcs_table_goes_through_the_s3_api(gcs_server, monkeypatch) -> None:
    """gs://: ClickHouse reads GCS through its S3-compatible API with an HMAC key of its own (the
    emulator here has no such API, so only the statement is checked)."""
    from tests.cloud_servers import StoreUnderTest

    store = StoreUnderTest.make("gs", gcs_server, monkeypatch)
    table = MergeTreeTable.create(store.url("seen/t"), SCHEMA, order_by="id", settings={"auto_merge": False})
    table.insert(rows(0, 10))
    bucket = store.root.removeprefix("gs://")
    statement = table.clickhouse_ddl("default.g")
    assert f"disk = disk(type = s3_plain, endpoint = 'https://storage.googleapis.com/{bucket}/seen/t/', " \
           "use_environment_credentials = 1)" in statement
    assert f"UUID '{table.uuid}'" in statement
    with pytest.raises(InvalidOptionError, match="HMAC key"):
        table.clickhouse_ddl("default.g", credentials=True)


def test_proposals_for_a_running_transaction_survive_cleanup_and_are_adopted(s3_bucket: str) -> None:
    """What a Spark job's commit does inside a transaction another process owns, by hand: parts
    uploaded, a proposal staged for the transaction; the owner sees it, adopts it at commit."""
    url = f"s3://{s3_bucket}/proposed"
    table = create(url)
    table.insert(rows(0, 100))
    owner = Transaction(table.coordinator)
    staged = table.stage(rows(1000, 50))
    key = table.log.stage(owner.tid, table.coordinator.url, [part.name for part in staged])
    other = Transaction(table.coordinator)
    doomed = table.stage(rows(2000, 50))
    table.log.stage(other.tid, table.coordinator.url, [part.name for part in doomed])
    other.rollback()
    # Cleanup keeps what a running transaction's proposal names; an ended one's proposal and parts go.
    removed = table.cleanup(orphan_seconds=0)
    assert sorted(removed) == sorted(part.name for part in doomed)
    assert [k for k, _ in table.log.staged()] == [key]
    # The transaction's view as its Spark read tasks take it includes the proposal; others' does not.
    first = table.visible_parts()[1]
    assert table.log.snapshot(owner.snapshot, table.coordinator, own_tid=owner.tid) == first | {
        part.name for part in staged}
    assert same(table.to_arrow(), rows(0, 100))
    owner.adopt_staged(table.log)
    owner.commit()
    assert same(MergeTreeTable.open(url).to_arrow(), pa.concat_tables([rows(0, 100), rows(1000, 50)]))
    assert table.log.staged() == []

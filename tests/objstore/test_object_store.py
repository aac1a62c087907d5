"""The object-store layer against real servers on 127.0.0.1 — S3 (moto, tests/s3_server.py), GCS
(fake-gcs-server) and Azure Blob Storage (Azurite) (tests/cloud_servers.py): conditional writes,
ranged reads, listings, and errors that name the URL and the cause."""

from __future__ import annotations

import numpy as np
import pytest

from spark_mergetree.errors import InvalidOptionError, StorageError, UnsupportedError
from spark_mergetree.storage.object_store import (
    ObjectFileSystem,
    ObjectUrl,
    PreconditionFailed,
    bucket_for,
    check_storage_options,
    filesystem_for,
    is_object_url,
    parse_object_url,
)


def test_urls() -> None:
    assert parse_object_url("s3a://my-bucket/a/b/").url == "s3://my-bucket/a/b"
    assert parse_object_url("s3://my-bucket").key == ""
    assert is_object_url("s3://b/x") and is_object_url("S3A://b/x") and not is_object_url("/tmp/s3:/x")
    assert parse_object_url("gs://my_bucket.v2/a/b/") == ObjectUrl("my_bucket.v2", "a/b", "gs")
    azure = parse_object_url("abfs://events@acct01.dfs.core.windows.net/warehouse/t/")
    assert azure == ObjectUrl("events", "warehouse/t", "abfss", "acct01.dfs.core.windows.net")
    assert azure.url == "abfss://events@acct01.dfs.core.windows.net/warehouse/t" and azure.account == "acct01"
    assert azure.child("p", "f.bin").url == "abfss://events@acct01.dfs.core.windows.net/warehouse/t/p/f.bin"
    assert is_object_url("GS://b/x") and is_object_url("abfss://c@a.dfs.core.windows.net/x")
    assert not is_object_url("hdfs://nn/x") and not is_object_url("wasbs://c@a.blob.core.windows.net/x")
    bad = {
        "s3://UPPER/x": "not a valid bucket name", "s3://ab/x": "not a valid bucket name",
        "s3://bucket/a//b": "empty, '.' or '..'", "s3://bucket/../x": "empty, '.' or '..'",
        "s3:///x": "no bucket", "gs:///x": "no bucket", "gs://Bad Bucket/x": "not a valid bucket name",
        "abfss://acct.dfs.core.windows.net/x": "no container",
        "abfss://@acct.dfs.core.windows.net/x": "no container",
        "abfss://c@/x": "not a storage account's host", "abfss://events@acct/x": "not a storage account's host",
        "abfss://Events@acct.dfs.core.windows.net/x": "not a valid container name",
        "abfss://a--b@acct.dfs.core.windows.net/x": "not a valid container name",
        "hdfs://nn/x": "not an object-store URL",
    }
    for url, cause in bad.items():
        with pytest.raises(InvalidOptionError, match=cause) as caught:
            parse_object_url(url)
        assert repr(url) in str(caught.value)


def test_storage_options_per_cloud() -> None:
    assert check_storage_options({"endpoint": "http://h", "project": "p"}, "gs") == {"endpoint": "http://h",
                                                                                      "project": "p"}
    with pytest.raises(InvalidOptionError, match="unknown Google Cloud Storage storage option 'access_key_id'"):
        check_storage_options({"access_key_id": "x"}, "gs")
    with pytest.raises(InvalidOptionError, match="unknown Azure storage option 'region'"):
        check_storage_options({"region": "x"}, "abfss")
    with pytest.raises(InvalidOptionError, match="client_id and client_secret and tenant_id go together"):
        check_storage_options({"client_id": "x"}, "abfss")


def test_conditional_writes_and_ranges(object_store) -> None:  # type: ignore[no-untyped-def]
    bucket = object_store.bucket()
    etag = bucket.put("dir/one", b"0123456789", if_absent=True)
    with pytest.raises(PreconditionFailed, match="dir/one"):
        bucket.put("dir/one", b"other", if_absent=True)
    assert bucket.get("dir/one") == b"0123456789"
    assert bucket.get("dir/one", 2, 5) == b"234"
    assert bucket.get("dir/one", 8, 20) == b"89"
    new_etag = bucket.put("dir/one", b"swapped", if_match=etag)
    with pytest.raises(PreconditionFailed):
        bucket.put("dir/one", b"lost", if_match=etag)  # the ETag it was read at is gone
    assert bucket.get_versioned("dir/one") == (b"swapped", new_etag)
    with pytest.raises(FileNotFoundError):
        bucket.get("dir/absent")
    with pytest.raises(FileNotFoundError):
        bucket.head("dir/absent")
    assert bucket.get("dir/one", 7, 7) == b"" and bucket.get("dir/one", 20, 30) == b""
    assert bucket.head("dir/one") == len(b"swapped")
    bucket.put("dir/sub/two", [b"ab", memoryview(b"c")])
    assert bucket.list_objects("dir/") == ({"dir/one": 7}, ["dir/sub/"])
    assert bucket.list_objects("dir/", delimiter=None)[0] == {"dir/one": 7, "dir/sub/two": 3}
    times, now = bucket.list_with_times("dir/")
    assert times.keys() == {"dir/one", "dir/sub/two"} and all(-5 < now - t < 120 for t in times.values())
    assert -5 < bucket.age("dir/one") < 120
    assert sorted(bucket.delete_prefix("dir/")) == ["dir/one", "dir/sub/two"]
    bucket.delete(["dir/one", "never-was"])  # absent objects are no error
    assert bucket.list_objects("", delimiter=None) == ({}, [])


def test_filesystem_primitives(object_store) -> None:  # type: ignore[no-untyped-def]
    root = object_store.url("t")
    fs = filesystem_for(root)
    assert isinstance(fs, ObjectFileSystem)
    fs.write(f"{root}/p/a.bin", [b"ab", memoryview(b"cd")])
    fs.write(f"{root}/top.txt", [b"x"])
    assert fs.size(f"{root}/p/a.bin") == 4 and fs.read_range(f"{root}/p/a.bin", 1, 3) == b"bc"
    assert sorted((e.name, e.is_dir) for e in fs.ls(root)) == [("p", True), ("top.txt", False)]
    assert fs.isdir(f"{root}/p") and not fs.isdir(f"{root}/q") and fs.isfile(f"{root}/top.txt")
    assert fs.put_if_absent(f"{root}/once", b"1") and not fs.put_if_absent(f"{root}/once", b"2")
    with pytest.raises(UnsupportedError, match="no atomic rename"):
        fs.rename(f"{root}/top.txt", f"{root}/moved.txt")
    fs.remove(f"{root}/p")
    assert not fs.isdir(f"{root}/p")
    with pytest.raises(FileNotFoundError):
        fs.ls(f"{root}/p")


def test_missing_bucket_and_credentials_name_url_and_cause(s3_bucket: str, monkeypatch, tmp_path) -> None:
    with pytest.raises(StorageError, match=r"s3://no-such-bucket-here/x: bucket 'no-such-bucket-here' does not exist"):
        bucket_for("s3://no-such-bucket-here").check("x")
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    for name in ("AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(StorageError, match=rf"s3://{s3_bucket}/k: no usable credentials"):
        bucket_for(f"s3://{s3_bucket}", {"region": "us-east-1", "endpoint": "http://127.0.0.1:1"}).get("k")
    with pytest.raises(InvalidOptionError, match="go together"):
        bucket_for(f"s3://{s3_bucket}", {"access_key_id": "only-one"})


def test_a_lease_renewal_never_brings_back_an_ended_transaction(s3_bucket: str) -> None:
    """The renewal thread and commit race: a renewal written after the commit deleted the lease
    object would list the ended transaction as running (holding back cleanup) for a whole lease."""
    import random
    import time

    from spark_mergetree.txn.object_store import ObjectStoreCoordinator

    coordinator = ObjectStoreCoordinator(f"s3://{s3_bucket}/coordinator", lease=0.3)  # renews every 0.1 s
    rng = random.Random(7)
    try:
        for _ in range(25):
            info = coordinator.begin()
            time.sleep(rng.uniform(0.0, 0.12))
            coordinator.commit(info.tid)
        time.sleep(0.25)  # any renewal in flight has landed
        assert bucket_for(f"s3://{s3_bucket}").list_objects("coordinator/running/", delimiter=None)[0] == {}
    finally:
        coordinator.close()



def test_the_lease_thread_ends_with_the_last_transaction_and_comes_back_with_the_next(s3_bucket: str) -> None:
    """A process that touched many tables' coordinators (each object-store table has its own by
    default) keeps no idle renewal thread for each; a transaction begun later is renewed again."""
    import threading
    import time

    from spark_mergetree.txn.object_store import ObjectStoreCoordinator

    def lease_threads() -> int:
        return sum(t.name == "coordinator-lease" and t.is_alive() for t in threading.enumerate())

    coordinators = [ObjectStoreCoordinator(f"s3://{s3_bucket}/coordinator-{n}", lease=1.5) for n in range(5)]
    try:
        for coordinator in coordinators:
            coordinator.commit(coordinator.begin().tid)
        deadline = time.monotonic() + 10
        while lease_threads() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert lease_threads() == 0
        info = coordinators[0].begin()
        assert lease_threads() == 1
        time.sleep(2.5)  # past the lease: only a renewal keeps it running for others
        assert lease_threads() == 1
        other = ObjectStoreCoordinator(f"s3://{s3_bucket}/coordinator-0", lease=1.5)
        assert other.status(info.tid)[0].value == "running"
        coordinators[0].commit(info.tid)
    finally:
        for coordinator in coordinators:
            coordinator.close()

def test_access_denied_names_url_and_cause(s3_server_with_auth) -> None:  # type: ignore[no-untyped-def]
    from spark_mergetree import MergeTreeTable
    from tests.s3_server import ACCESS_KEY, REGION, SECRET_KEY

    options = {"endpoint": s3_server_with_auth.endpoint, "access_key_id": ACCESS_KEY,
               "secret_access_key": SECRET_KEY, "region": REGION}
    with pytest.raises(StorageError, match=r"s3://guarded-bucket/events: access denied \(InvalidAccessKeyId"):
        MergeTreeTable.create("s3://guarded-bucket/events", [("id", "UInt64")], order_by="id",
                              storage_options=options)
    with pytest.raises(StorageError, match=r"s3://guarded-bucket/events: access denied"):
        MergeTreeTable.open("s3://guarded-bucket/events", storage_options=options)


def test_gcs_missing_bucket_and_credentials_name_url_and_cause(gcs_server, monkeypatch, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from spark_mergetree import MergeTreeTable

    options = {"endpoint": gcs_server.endpoint}
    with pytest.raises(StorageError, match=r"gs://no-such-bucket-g/t: bucket 'no-such-bucket-g' does not exist"):
        MergeTreeTable.create("gs://no-such-bucket-g/t", [("id", "UInt64")], order_by="id", storage_options=options)
    # No endpoint, no credentials anywhere Application Default Credentials look (and no metadata server).
    for name in ("STORAGE_EMULATOR_HOST", "GOOGLE_APPLICATION_CREDENTIALS", "CLOUDSDK_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NO_GCE_CHECK", "True")
    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(StorageError, match=r"gs://some-bucket/t: no usable credentials .*GOOGLE_APPLICATION_CREDENTIALS"):
        MergeTreeTable.create("gs://some-bucket/t", [("id", "UInt64")], order_by="id")
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "missing.json"))
    with pytest.raises(StorageError, match=r"gs://some-bucket/t: no usable credentials .*missing.json"):
        MergeTreeTable.open("gs://some-bucket/t")


def test_azure_missing_container_and_credentials_name_url_and_cause(azure_server, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from spark_mergetree import MergeTreeTable
    from tests.cloud_servers import AZURE_ACCOUNT

    host = f"{AZURE_ACCOUNT}.dfs.core.windows.net"
    for name in ("AZURE_STORAGE_CONNECTION_STRING", "AZURE_STORAGE_KEY", "AZURE_STORAGE_SAS_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    url = f"abfss://no-such-container@{host}/t"
    with pytest.raises(StorageError, match=rf"{url}: container 'no-such-container' does not exist in account "
                                           f"'{AZURE_ACCOUNT}'"):
        MergeTreeTable.create(url, [("id", "UInt64")], order_by="id", storage_options=azure_server.options())
    container = azure_server.container()
    url = f"abfss://{container}@{host}/t"
    with pytest.raises(StorageError, match=rf"abfss://{container}@{host}: no credentials for the http endpoint"):
        MergeTreeTable.create(url, [("id", "UInt64")], order_by="id",
                              storage_options={"endpoint": azure_server.blob_endpoint})
    wrong = {**azure_server.options(), "account_key": "d3Jvbmcga2V5"}
    with pytest.raises(StorageError, match=rf"{url}: access denied"):
        MergeTreeTable.open(url, storage_options=wrong)
    other = azure_server.environment()["AZURE_STORAGE_CONNECTION_STRING"].replace(AZURE_ACCOUNT, "otheraccount")
    with pytest.raises(StorageError, match="connection string is for account 'otheraccount'"):
        MergeTreeTable.open(url, storage_options={"connection_string": other})
    assert list(azure_server.client().get_container_client(container).list_blobs()) == []


def test_a_memory_mapped_body_goes_up_in_parts_without_a_whole_copy(s3_bucket: str, monkeypatch, tmp_path) -> None:  # type: ignore[no-untyped-def]
    # A merge's spilled stream is a memory map: uploaded a part at a time (not joined into one copy),
    # its pages dropped once sent; the object is the file.
    import mmap

    from spark_mergetree.storage import s3_store

    monkeypatch.setattr(s3_store, "MULTIPART_THRESHOLD", 5 << 20)  # S3's smallest part
    data = np.random.default_rng(1).integers(0, 256, 13 << 20, dtype=np.uint8).tobytes()
    (tmp_path / "stream.bin").write_bytes(data)
    with open(tmp_path / "stream.bin", "rb") as f:
        view = memoryview(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ))
    bucket = bucket_for(f"s3://{s3_bucket}")
    calls = []
    original = bucket._multipart
    monkeypatch.setattr(bucket, "_multipart", lambda key, body, threads=8: calls.append((type(body), threads))
                        or original(key, body, threads))
    bucket.put("merged/stream.bin", view)
    assert calls == [(memoryview, s3_store.MAPPED_UPLOAD_THREADS)]
    assert bucket.get("merged/stream.bin") == data


@pytest.mark.parametrize("object_store", ["gs", "abfss"], indirect=True)
def test_a_big_body_goes_up_in_pieces_without_a_whole_copy(object_store, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A body of several buffers bigger than one upload block (GCS: resumable chunks; Azure: staged
    blocks, 4 at once) is read in place: Python holds a few blocks, never a copy of the whole body;
    the object is exact, and a put-if-absent over it fails."""
    import tracemalloc

    from spark_mergetree.storage import azure_store, gcs_store, object_base

    monkeypatch.setattr(azure_store, "UPLOAD_BLOCK_BYTES", 1 << 20)
    monkeypatch.setattr(gcs_store, "UPLOAD_CHUNK_BYTES", 1 << 20)
    monkeypatch.setattr(object_base, "_clients", {})  # clients made with the smaller blocks
    pieces = [np.random.default_rng(seed).integers(0, 256, 7 << 20, dtype=np.uint8) for seed in range(3)]
    bucket = object_store.bucket()
    tracemalloc.start()
    try:
        bucket.put("big/body.bin", [memoryview(p) for p in pieces])
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    body = b"".join(p.tobytes() for p in pieces)
    assert peak < len(body) // 3, peak  # joined first, the peak would pass the whole 21 MiB
    assert bucket.head("big/body.bin") == len(body)
    assert bucket.get("big/body.bin") == body
    assert bucket.get("big/body.bin", (8 << 20) - 3, (8 << 20) + 5) == body[(8 << 20) - 3:(8 << 20) + 5]
    with pytest.raises(PreconditionFailed):
        bucket.put("big/body.bin", b"small", if_absent=True)

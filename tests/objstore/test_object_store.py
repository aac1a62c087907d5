"""The object-store layer against a real S3-protocol server (moto, tests/s3_server.py): conditional
writes, ranged reads, listings, and errors that name the URL and the cause."""

from __future__ import annotations

import pytest

from spark_mergetree.errors import InvalidOptionError, StorageError, UnsupportedError
from spark_mergetree.storage.object_store import (
    Bucket,
    ObjectFileSystem,
    PreconditionFailed,
    filesystem_for,
    is_object_url,
    parse_object_url,
)


def test_urls() -> None:
    assert parse_object_url("s3a://my-bucket/a/b/").url == "s3://my-bucket/a/b"
    assert parse_object_url("s3://my-bucket").key == ""
    assert is_object_url("s3://b/x") and is_object_url("S3A://b/x") and not is_object_url("/tmp/s3:/x")
    for bad in ("s3://UPPER/x", "s3://ab/x", "s3://bucket/a//b", "s3://bucket/../x", "gs://bucket/x"):
        with pytest.raises(InvalidOptionError):
            parse_object_url(bad)


def test_conditional_writes_and_ranges(s3_bucket: str) -> None:
    bucket = Bucket(s3_bucket)
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


def test_filesystem_primitives(s3_bucket: str) -> None:
    fs = filesystem_for(f"s3://{s3_bucket}/t")
    assert isinstance(fs, ObjectFileSystem)
    root = f"s3://{s3_bucket}/t"
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
        Bucket("no-such-bucket-here").check("x")
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    for name in ("AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(StorageError, match=rf"s3://{s3_bucket}/k: no usable credentials"):
        Bucket(s3_bucket, {"region": "us-east-1", "endpoint": "http://127.0.0.1:1"}).get("k")
    with pytest.raises(InvalidOptionError, match="go together"):
        Bucket(s3_bucket, {"access_key_id": "only-one"})


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
        assert Bucket(s3_bucket).list_objects("coordinator/running/", delimiter=None)[0] == {}
    finally:
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

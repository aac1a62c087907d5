"""One table code path whatever the location: a table on local disks and one in object storage
(a real S3-protocol server on 127.0.0.1) hold their parts in a `PartStorage` and their history in
a `CommitLog` (storage/backend.py, txn/commit_log.py), and the same operations give the same
results on both."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from spark_mergetree import MergeTreeTable
from spark_mergetree.errors import SerializationError, TableNotFoundError
from spark_mergetree.storage.backend import PartStorage
from spark_mergetree.txn.commit_log import CommitLog

SCHEMA = [("id", "UInt64"), ("d", "Date"), ("value", "Float64"), ("name", "String")]


def rows(start: int, count: int) -> pa.Table:
    ids = np.arange(start, start + count, dtype=np.uint64)
    days = pa.array((19000 + (ids // 100) % 50).astype(np.int32), pa.date32())
    return pa.table({"id": pa.array(ids), "d": days, "value": pa.array(ids * 0.5),
                     "name": pc.cast(pa.array(ids), pa.string())})


def pair(tmp_path: Path, s3_bucket: str, name: str, extra_settings: dict[str, object] | None = None,
         **kwargs: object) -> tuple[MergeTreeTable, MergeTreeTable]:
    """The same table on local disk and in the bucket, merging only when the test merges it."""
    settings = {"index_granularity": 256, "auto_merge": False, **(extra_settings or {})}
    local = MergeTreeTable.create(tmp_path / name, SCHEMA, order_by="id", partition_by="toYYYYMM(d)",
                                  settings=settings, **kwargs)  # type: ignore[arg-type]
    remote = MergeTreeTable.create(f"s3://{s3_bucket}/warehouse/{name}", SCHEMA, order_by="id",
                                   partition_by="toYYYYMM(d)", settings=settings, **kwargs)  # type: ignore[arg-type]
    return local, remote


def test_every_location_has_a_part_storage_and_a_commit_log(tmp_path: Path, s3_bucket: str) -> None:
    for table in pair(tmp_path, s3_bucket, "protocols"):
        table.insert(rows(0, 1000))
        assert isinstance(table.store, PartStorage)
        assert isinstance(table.log, CommitLog)
        assert sorted(table.store.list_parts()) == sorted(table.visible_parts()[1])
        for part in table.visible_parts()[1]:
            assert table.store.part_bytes(part) == sum(table.store.file_size(part, f)
                                                       for f in table.store.list_files(part))
            assert table.store.part_url(part).endswith(part)


def read_both(tables: tuple[MergeTreeTable, MergeTreeTable], where: str | None = None) -> tuple[pa.Table, pa.Table]:
    local, remote = (table.to_arrow(where=where).sort_by("id") for table in tables)
    return local, remote


def test_projections_read_and_merge_the_same_in_object_storage(tmp_path: Path, s3_bucket: str) -> None:
    """A normal projection declared at CREATE: every part written carries it, a filter on its ORDER
    BY reads through it, merges keep it, on disk and in the bucket alike."""
    tables = pair(tmp_path, s3_bucket, "projected", projections=["PROJECTION by_value (SELECT * ORDER BY value)"])
    where = "value BETWEEN 1000 AND 1010"
    for table in tables:
        table.insert(rows(0, 3000))
        table.insert(rows(3000, 3000))
    plans = [table.explain(where) for table in tables]
    assert [plan.projection for plan in plans] == ["by_value", "by_value"]
    assert plans[0].granules_read == plans[1].granules_read
    local, remote = read_both(tables, where)
    assert local.num_rows == 21 and local.equals(remote)
    for table in tables:
        table.optimize(final=True)
        part = sorted(table.visible_parts()[1])[0]
        assert any(name.startswith("by_value.proj/") for name in table.store.list_files(part))
        assert table.check().ok
    assert [table.explain(where).projection for table in tables] == ["by_value", "by_value"]
    local, remote = read_both(tables, where)
    assert local.equals(remote)


def test_add_and_materialize_projection_in_object_storage(tmp_path: Path, s3_bucket: str) -> None:
    tables = pair(tmp_path, s3_bucket, "altered")
    where = "value BETWEEN 500 AND 505"
    for table in tables:
        table.insert(rows(0, 4000))
        table.add_projection("PROJECTION by_value (SELECT * ORDER BY value)")
        assert table.explain(where).projection is None  # old parts do not have it yet
        assert table.materialize_projection("by_value")
        assert table.explain(where).projection == "by_value"
        reopened = MergeTreeTable.open(str(table.path))
        assert "PROJECTION by_value" in " ".join(reopened.definition.indexes)
    local, remote = read_both(tables, where)
    assert local.num_rows == 11 and local.equals(remote)
    for table in tables:
        assert table.drop_projection("by_value")
        assert table.explain(where).projection is None
    local, remote = read_both(tables, where)
    assert local.equals(remote)


def test_export_part_from_object_storage_is_the_part_chdb_reads(tmp_path: Path, s3_bucket: str) -> None:
    """export_part downloads a part as a plain ClickHouse part directory: file for file what the local
    table exports for the same rows, and ClickHouse (chdb) attaches it, checks it and reads its rows."""
    from tests.format.chdb_util import attach_and_check, make_chdb_table

    tables = pair(tmp_path, s3_bucket, "exported")
    exported = []
    for number, table in enumerate(tables):
        table.insert(rows(0, 1000))
        part = sorted(table.visible_parts()[1])[0]  # January 2022's
        exported.append(table.export_part(part, tmp_path / f"export{number}" / part))
    local, remote = exported
    files = sorted(str(p.relative_to(local)) for p in local.rglob("*") if p.is_file())
    assert files == sorted(str(p.relative_to(remote)) for p in remote.rglob("*") if p.is_file())
    assert all((local / name).read_bytes() == (remote / name).read_bytes() for name in files)
    session, _ = make_chdb_table(
        tmp_path, "CREATE TABLE exported (id UInt64, d Date, value Float64, name String) ENGINE = MergeTree "
        "PARTITION BY toYYYYMM(d) ORDER BY id SETTINGS index_granularity = 256")
    attach_and_check(session, "exported", [remote])
    got = session.query("SELECT count(), sum(id), min(d), max(name) FROM exported", "TabSeparatedRaw").bytes().decode()
    data = rows(0, 1000)
    expected = data.filter(pc.less(data["d"], pa.scalar(dt.date(2022, 2, 1))))
    assert got.split("\t")[:2] == [str(expected.num_rows), str(pc.sum(expected["id"]).as_py())]


def test_check_and_scrub_find_the_same_damage_in_object_storage(tmp_path: Path, s3_bucket: str) -> None:
    """CHECK TABLE re-hashes every file: a damaged data file is reported on disk and in the bucket
    alike, and scrub reports it in the bucket; rebuild, which needs the disks of a redundant volume, is refused by the bucket's store."""
    import pytest

    from spark_mergetree.errors import UnsupportedError
    from spark_mergetree.storage.object_store import bucket_for

    tables = pair(tmp_path, s3_bucket, "damaged")
    for table in tables:
        table.insert(rows(0, 1000))
        assert table.check().ok and table.scrub().ok
    local, remote = tables
    part = sorted(local.visible_parts()[1])[0]
    remote_part = sorted(remote.visible_parts()[1])[0]
    data = "data.bin" if "data.bin" in local.store.list_files(part) else "id.bin"
    target = Path(local.part_location(part)) / data
    damaged = bytearray(target.read_bytes())
    damaged[-1] ^= 0xFF
    target.write_bytes(bytes(damaged))
    key = f"warehouse/damaged/{remote_part}/{data}"
    bucket = bucket_for(f"s3://{s3_bucket}/warehouse")
    original = bytearray(bucket.get(key))
    original[-1] ^= 0xFF
    bucket.put(key, bytes(original))
    remote_reopened = MergeTreeTable.open(f"s3://{s3_bucket}/warehouse/damaged")
    for table in (MergeTreeTable.open(local.path), remote_reopened):
        report = table.check()
        assert not report.ok and len(report.problems) == 1 and data in report.problems[0]
    # Scrub verifies what the store keeps: a plain single-disk directory has no stripe map to verify
    # (the part is listed unverified; check is what re-hashes it), a bucket's objects are re-hashed.
    assert MergeTreeTable.open(local.path).scrub().unverified_parts == [part]
    scrubbed = remote_reopened.scrub()
    assert [problem.part for problem in scrubbed.problems] == [remote_part] and data in str(scrubbed)
    with pytest.raises(UnsupportedError, match="no disks to rebuild"):
        remote_reopened.rebuild("disk1")


def test_writes_mutations_and_merges_give_the_same_rows_everywhere(tmp_path: Path, s3_bucket: str) -> None:
    """The same sequence through one table class on both stores: insert, staged parts committed as a
    Spark job commits them (here a dynamic partition overwrite), DELETE, UPDATE, OPTIMIZE FINAL;
    the rows, counts and part counts agree after every step. A streaming batch's application version
    is refused by the object-store log, naming why, before anything is published."""
    import pytest

    from spark_mergetree.errors import UnsupportedError

    tables = pair(tmp_path, s3_bucket, "written")
    steps = [
        lambda t: t.insert(rows(0, 3000)),
        lambda t: t.commit_staged(t.stage(rows(100_000, 50).set_column(
            1, "d", pa.array([dt.date(2022, 1, 10)] * 50, pa.date32())), tag="job1"),
            mode="overwrite", partition_overwrite_mode="dynamic"),
        lambda t: t.delete("id % 7 = 0"),
        lambda t: t.update({"value": "value * 2"}, "id < 1000"),
        lambda t: t.optimize(final=True),
    ]
    for step in steps:
        for table in tables:
            step(table)
        local, remote = read_both(tables)
        assert local.equals(remote)
        assert tables[0].count() == tables[1].count() == local.num_rows
        assert len(tables[0].visible_parts()[1]) == len(tables[1].visible_parts()[1])
    local, remote = tables
    assert local.to_arrow(where="id = 2999").column("value").to_pylist() == [1499.5]
    staged = remote.stage(rows(200_000, 10), tag="stream")
    before = remote.visible_parts()[1]
    with pytest.raises(UnsupportedError, match="application versions"):
        remote.commit_staged(staged, app_version=("query", 0))
    assert remote.visible_parts()[1] == before
    assert not any(remote.store.exists(part.name) for part in staged)


def test_write_jobs_end_and_cleanup_the_same_everywhere(tmp_path: Path, s3_bucket: str) -> None:
    """A write job that stages two parts and commits one: ending it deletes the other (the log's
    `discard_job`); an overwrite's replaced parts go at the next cleanup once no snapshot reads them
    (`old_parts_lifetime = 0`), on disk and in the bucket alike."""
    tables = pair(tmp_path, s3_bucket, "jobs", {"old_parts_lifetime": 0})
    for table in tables:
        first, second = table.stage(rows(0, 100), tag="job7"), table.stage(rows(100, 100), tag="job7")
        committed = table.commit_staged(first)
        removed = table.discard_staged("job7", keep=[part.name for part in first])
        assert removed == [part.name for part in second]
        assert not table.store.exists(second[0].name) and table.store.exists(committed[0])
        assert table.count() == 100
        before = table.visible_parts()[1]
        table.overwrite(rows(1000, 10))
        assert sorted(table.cleanup()) == sorted(before)
        assert not any(table.store.exists(name) for name in before)
    local, remote = read_both(tables)
    assert local.equals(remote) and local.num_rows == 10


def test_a_stale_handles_alter_loses_and_a_recreated_table_is_refused_everywhere(tmp_path: Path,
                                                                                  s3_bucket: str) -> None:
    """`replace_definition` writes table.sql only over the statement the handle read, on disk as in a
    bucket: after another handle's ADD COLUMN, a stale handle's ALTER gets SerializationError, while
    its writes go on (same UUID); once the table is dropped and re-created, writes are refused."""
    for table in pair(tmp_path, s3_bucket, "altered"):
        table.insert(rows(0, 100))
        stale = MergeTreeTable.open(str(table.path))
        table.add_columns([("extra", "UInt8")])
        stale.insert(rows(100, 100))  # another handle's ALTER is no reason to refuse a write
        with pytest.raises(SerializationError, match="changed since this handle read it"):
            stale.add_columns([("other", "UInt8")])
        reopened = MergeTreeTable.open(str(table.path))
        assert [c.name for c in reopened.definition.columns][-1] == "extra"
        assert reopened.count() == 200
        reopened.add_columns([("other", "UInt8")])
        reopened.drop_data()
        MergeTreeTable.create(str(table.path), SCHEMA, order_by="id")
        with pytest.raises(TableNotFoundError, match="re-created"):
            stale.insert(rows(0, 10))

"""Copies of tables in object storage (moto S3): a prefix copied object by object carries the
original's id and is refused writes before it writes anything; `clone` (server-side copies) makes a
new table with an id, a UUID and block numbers of its own."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
from click.testing import CliRunner

from spark_mergetree import MergeTreeTable
from spark_mergetree.cli import main
from spark_mergetree.engine.object_table import ObjectStoreTable
from spark_mergetree.errors import TableExistsError, TransactionError
from spark_mergetree.storage.object_store import bucket_for, parse_object_url

SCHEMA = [("id", "UInt64"), ("v", "Int64")]


def _rows(*ids: int) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.uint64()), "v": pa.array([i * 10 for i in ids], pa.int64())})


def _table(url: str) -> ObjectStoreTable:
    table = MergeTreeTable.create(url, SCHEMA, "id", settings={"auto_merge": False})
    assert isinstance(table, ObjectStoreTable)
    for i in range(3):
        table.insert(_rows(i))
    return table


def _values(table: MergeTreeTable) -> dict[int, int]:
    read = table.to_arrow(["id", "v"])
    return dict(zip(read.column("id").to_pylist(), read.column("v").to_pylist()))


def _keys(url: str) -> set[str]:
    location = parse_object_url(url)
    return set(bucket_for(location).list_objects(location.key + "/", delimiter=None)[0])


def _copy_prefix(source: str, target: str) -> None:
    """What `aws s3 cp --recursive` does."""
    bucket = bucket_for(parse_object_url(source))
    source_key, target_key = parse_object_url(source).key, parse_object_url(target).key
    for key in _keys(source):
        bucket.copy(key, target_key + key[len(source_key):])


def test_a_copied_prefix_is_refused_writes_and_the_original_keeps_working(s3_bucket: str) -> None:
    url, copy_url = f"s3://{s3_bucket}/events", f"s3://{s3_bucket}/events_copy"
    original = _table(url)
    _copy_prefix(url, copy_url)
    copy = MergeTreeTable.open(copy_url)
    assert _values(copy) == {0: 0, 1: 10, 2: 20}  # reading a copy is harmless
    before = _keys(copy_url)
    message = (f"table {copy_url} was copied from {url} .* cannot be written: delete it and make the copy "
               f"with `mergetree clone {url} {copy_url}`")
    with pytest.raises(TransactionError, match=message):
        copy.optimize(final=True)
    with pytest.raises(TransactionError, match=message):
        copy.insert(_rows(5))
    with pytest.raises(TransactionError, match=message):
        copy.delete("id = 1")
    with pytest.raises(TransactionError, match=message):
        copy.cleanup(orphan_seconds=0)
    assert _keys(copy_url) == before  # nothing was written, nothing deleted
    assert original.delete("id = 1")
    assert original.update({"v": "v + 1"}, "id = 2")
    assert len(original.optimize(final=True)) == 1
    assert _values(original) == {0: 0, 2: 21}


def test_clone_copies_the_visible_parts_on_the_server(s3_bucket: str) -> None:
    url, clone_url = f"s3://{s3_bucket}/events", f"s3://{s3_bucket}/backups/events"
    source = _table(url)
    source.optimize(final=True)  # the three inserted parts stay under the prefix until cleanup
    source.insert(_rows(3))
    clone = source.clone(clone_url)
    assert isinstance(clone, ObjectStoreTable)
    with pytest.raises(TableExistsError, match="objects already exist under it"):
        source.clone(clone_url)
    visible = source.visible_parts()[1]
    assert clone.visible_parts()[1] == visible
    copied_parts = {key.split("/")[2] for key in _keys(clone_url) if not key.split("/")[2].startswith("_")}
    assert copied_parts == visible  # no removed part was copied
    identity = json.loads(bucket_for(parse_object_url(clone_url)).get("backups/events/_mergetree/log/table.json"))
    assert identity["location"] == clone_url and identity["coordinator"] == f"{clone_url}/_mergetree/coordinator"
    assert clone.uuid != source.uuid
    assert _values(clone) == _values(source)
    # Independent tables: new parts of the clone take block numbers above the copied ones.
    clone.insert(_rows(8))
    clone.delete("id = 0")
    assert len(clone.optimize(final=True)) == 1
    source.update({"v": "v * 2"}, "id = 2")
    assert len(source.optimize(final=True)) == 1
    assert _values(source) == {0: 0, 1: 10, 2: 40, 3: 30}
    assert _values(clone) == {1: 10, 2: 20, 3: 30, 8: 80}
    source.drop_data()
    assert _values(MergeTreeTable.open(clone_url)) == {1: 10, 2: 20, 3: 30, 8: 80}


def test_mergetree_clone_command_in_object_storage(s3_bucket: str) -> None:
    url, clone_url = f"s3://{s3_bucket}/t", f"s3://{s3_bucket}/t2"
    _table(url)
    result = CliRunner().invoke(main, ["clone", url, clone_url], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert _values(MergeTreeTable.open(clone_url)) == {0: 0, 1: 10, 2: 20}

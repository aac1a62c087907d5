"""Table locations: local paths and file:// URLs are local directories; s3:// URLs are tables in
object storage (tests/objstore), never directories; every other URL is refused before anything is written (no local
directory named `s3:`)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from click.testing import CliRunner

from spark_mergetree.cli import main
from spark_mergetree.engine.table import MergeTreeTable
from spark_mergetree.errors import UnsupportedError
from spark_mergetree.storage.location import local_path

REMOTE = ["s3://bucket/t", "s3a://bucket/t", "gs://bucket/t", "abfss://c@account.dfs.core.windows.net/t",
          "hdfs://namenode:8020/t", "dbfs:/mnt/t", "HTTPS://host/t", "file://otherhost/t"]
OBJECT = [location for location in REMOTE if location.startswith(("s3:", "s3a:", "gs:", "abfss:"))]
NOT_TABLES = [location for location in REMOTE if location not in OBJECT]


def test_local_paths_and_file_urls(tmp_path: Path) -> None:
    target = tmp_path / "a table"
    assert local_path(target) == target
    assert local_path(str(target)) == target
    assert local_path(target.as_uri()) == target  # file:///...%20...
    assert local_path(f"file:{target}") == target  # Hadoop's spelling
    assert local_path(f"file://localhost{target}") == target
    assert local_path("relative/dir") == Path("relative/dir")
    assert local_path("data:2024") == Path("data:2024")  # a colon in a file name is no URL


@pytest.mark.parametrize("location", REMOTE)
def test_other_schemes_are_refused_naming_the_location(location: str) -> None:
    # Object storage holds tables only: a catalog root or coordinator directory there is refused too.
    cause = "is object storage, which holds tables" if location in OBJECT else "not supported"
    with pytest.raises(UnsupportedError, match=cause) as caught:
        local_path(location)
    assert repr(location) in str(caught.value)


@pytest.mark.parametrize("location", NOT_TABLES)
def test_engine_refuses_urls_before_writing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, location: str) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UnsupportedError, match="not supported"):
        MergeTreeTable.create(location, [("id", "UInt64")], order_by="id")
    with pytest.raises(UnsupportedError, match="not supported"):
        MergeTreeTable.open(location)
    if not location.startswith("file:"):  # Path() folds "//": file://host/t would become file:/host/t
        with pytest.raises(UnsupportedError, match="not supported"):
            MergeTreeTable.create(Path(location), [("id", "UInt64")], order_by="id")
    assert list(tmp_path.iterdir()) == []


def test_engine_accepts_file_urls(tmp_path: Path) -> None:
    target = tmp_path / "t 1"
    table = MergeTreeTable.create(target.as_uri(), [("id", "UInt64")], order_by="id")
    table.insert(pa.table({"id": pa.array([3, 1, 2], pa.uint64())}))
    assert table.path == target.resolve()
    assert MergeTreeTable.open(f"file:{target}").to_arrow().column("id").to_pylist() == [1, 2, 3]


def test_cli_refuses_urls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    for args in (["parts", "hdfs://nn/t"], ["catalog", "--root", "gs://bucket/root", "databases"]):
        result = CliRunner().invoke(main, args)
        assert isinstance(result.exception, UnsupportedError), result.output
        assert args[-1 if args[0] == "parts" else 2] in str(result.exception)
    assert list(tmp_path.iterdir()) == []
    table = MergeTreeTable.create(tmp_path / "t", [("id", "UInt64")], order_by="id")
    result = CliRunner().invoke(main, ["parts", table.path.as_uri()])
    assert result.exit_code == 0 and "0 parts" in result.output, result.output


def test_a_catalog_root_url_is_refused_before_anything_is_written(tmp_path, monkeypatch):
    from spark_mergetree.catalog import Catalog

    monkeypatch.chdir(tmp_path)
    with pytest.raises(UnsupportedError, match="s3://bucket/root"):
        Catalog("s3://bucket/root")
    assert list(tmp_path.iterdir()) == []
    assert (Catalog(f"file://{tmp_path}/cat").root / "metadata").is_dir()


FUSE = ["/dbfs/tmp/t", "/Volumes/main/default/volume/t", "file:///dbfs/t", "/Workspace/Users/a/t"]


@pytest.mark.parametrize("location", FUSE)
def test_databricks_fuse_mounts_are_refused_for_tables_catalogs_and_coordinators(location: str) -> None:
    from spark_mergetree.catalog.catalog import Catalog
    from spark_mergetree.txn import coordinator_from_url

    local = location.removeprefix("file://")
    for action in (lambda: MergeTreeTable.create(location, [("id", "UInt64")], order_by="id"),
                   lambda: MergeTreeTable.open(location), lambda: Catalog(location),
                   lambda: coordinator_from_url(Path(local).as_uri()), lambda: coordinator_from_url(local)):
        with pytest.raises(UnsupportedError, match="Databricks FUSE mount over object storage") as caught:
            action()
        assert repr(local) in str(caught.value)
    assert not Path(local).exists()

"""Catalog DDL in another process while tables are read: reads hold the UUID directory, not the name."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from spark_mergetree.catalog import Catalog
from spark_mergetree.spark import adapter

DDL = """
import sys
from spark_mergetree.catalog import Catalog
cat = Catalog(sys.argv[1])
for step in sys.argv[2:]:
    verb, *names = step.split(":")
    if verb == "rename":
        cat.rename_table(*names)
    elif verb == "exchange":
        cat.exchange_tables(*names)
    elif verb == "drop":
        cat.drop_table(names[0])
    elif verb == "drop-sync":
        print(cat.drop_table(names[0], sync=True).data_removed)
"""


def _ddl(root: Path, *steps: str) -> str:
    done = subprocess.run([sys.executable, "-c", DDL, str(root), *steps], check=True, capture_output=True,
                          text=True, env=dict(os.environ), timeout=120)
    return done.stdout.strip()


@pytest.fixture
def catalog(tmp_path: Path):
    root = tmp_path / "root"
    cat = Catalog(root)
    cat.create_database("db")
    events = cat.create_table("db.events", [("id", "UInt64"), ("v", "String")], "id",
                              settings={"index_granularity": 1024})
    events.insert(pa.table({"id": pa.array(range(600_000), pa.uint64()), "v": ["x"] * 600_000}))
    other = cat.create_table("db.other", [("id", "UInt64"), ("v", "String")], "id")
    other.insert(pa.table({"id": pa.array([1], pa.uint64()), "v": ["o"]}))
    return root, events


def test_names_move_and_spark_follows_them(spark, catalog) -> None:
    root, events = catalog
    read = spark.read.format("mergetree").option("catalog", str(root))
    assert read.load("db.events").count() == 600_000
    _ddl(root, "rename:db.events:db.renamed", "exchange:db.renamed:db.other", "drop:db.other")
    assert read.load("db.renamed").count() == 1  # the old db.other, by its new name
    with pytest.raises(Exception, match="events"):
        read.load("db.events").count()
    dropped = [d for d in Catalog(root).dropped_tables() if d.uuid == events.uuid]
    assert dropped and Path(dropped[0].data_path).is_dir()  # kept until the drop delay passes


def test_a_running_read_keeps_its_data_through_drop_sync(catalog) -> None:
    root, events = catalog
    ref = adapter.resolve("db.events", str(root), None, None)
    parts = adapter.part_sets(ref)
    (task,) = adapter.plan(ref, ["id"], None, 10_000_000, parts).tasks
    batches = adapter.read(ref, [task], ["id"], None)
    first = next(batches)  # the task is reading: it holds the table's reader lease
    _ddl(root, "rename:db.events:db.moved", "exchange:db.moved:db.other")
    assert _ddl(root, "drop-sync:db.other") == "False"  # data kept: a reader holds it
    rest = list(batches)
    assert sum(b.num_rows for b in [first, *rest]) == 600_000
    assert Path(ref.path).is_dir()
    Catalog(root).collect_dropped(now=float("inf"))  # nobody reads any more: due drops go
    assert not Path(ref.path).exists()

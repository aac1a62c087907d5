"""DDL semantics of the catalog: errors, name rules, DETACH/ATTACH, UNDROP, concurrent creators."""

from __future__ import annotations

import multiprocessing
import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spark_mergetree.catalog import Catalog
from spark_mergetree.errors import (
    ExpressionError,
    FormatError,
    InvalidOptionError,
    MergeTreeError,
    TableExistsError,
    TableNotFoundError,
)
from spark_mergetree.fileops import (
    escape_for_file_name,
    rename_exchange,
    rename_noreplace,
    unescape_for_file_name,
)

COLUMNS = [("id", "UInt64")]


@pytest.fixture
def catalog(tmp_path: Path) -> Catalog:
    cat = Catalog(tmp_path, drop_delay=3600)
    cat.create_database("db")
    return cat


@given(st.text(min_size=1, max_size=30).filter(lambda s: "\0" not in s))
def test_file_name_escaping_round_trips(name: str) -> None:
    escaped = escape_for_file_name(name)
    assert set(escaped) <= set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_%")
    assert unescape_for_file_name(escaped) == name


def test_escaping_matches_clickhouse() -> None:
    assert escape_for_file_name("ta.b-c") == "ta%2Eb%2Dc"
    assert escape_for_file_name("we-ird") == "we%2Dird"
    assert escape_for_file_name("таб") == "%D1%82%D0%B0%D0%B1"


def test_renameat2_primitives(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    a.write_text("A")
    b.write_text("B")
    with pytest.raises(TableExistsError, match="b"):
        rename_noreplace(a, b, "thing b")
    rename_exchange(a, b, "swap")
    assert a.read_text() == "B" and b.read_text() == "A"
    with pytest.raises(TableNotFoundError):
        rename_exchange(a, tmp_path / "missing", "swap")
    rename_noreplace(a, tmp_path / "c", "thing c")
    assert (tmp_path / "c").read_text() == "B" and not a.exists()


def test_create_errors_and_if_not_exists(catalog: Catalog) -> None:
    first = catalog.define_table("db.t", COLUMNS, "id")
    with pytest.raises(TableExistsError, match="db.t"):
        catalog.define_table("db.t", COLUMNS, "id")
    again = catalog.define_table("db.t", [("other", "String")], "other", if_not_exists=True)
    assert again.uuid == first.uuid
    with pytest.raises(TableNotFoundError, match="nodb"):
        catalog.define_table("nodb.t", COLUMNS, "id")
    with pytest.raises(InvalidOptionError, match="qualified"):
        catalog.define_table("t", COLUMNS, "id")
    with pytest.raises(InvalidOptionError, match="duplicate"):
        catalog.define_table("db.u", [("a", "UInt8"), ("a", "UInt8")], "a")
    with pytest.raises(InvalidOptionError, match="order_by"):
        catalog.define_table("db.u", COLUMNS, None)
    with pytest.raises(InvalidOptionError, match="schema entry"):
        catalog.define_table("db.u", [("a",)], "a")
    with pytest.raises(TableExistsError):
        catalog.create_database("db")
    assert catalog.create_database("db", if_not_exists=True) == catalog.database_uuid("db")
    # Failed creates leave nothing behind.
    assert catalog.unreferenced_store_dirs() == []
    assert catalog.tables("db") == ["t"]


def test_rename_and_exchange(catalog: Catalog) -> None:
    catalog.create_database("other")
    a = catalog.define_table("db.a", COLUMNS, "id")
    b = catalog.define_table("db.b", COLUMNS, "id")
    with pytest.raises(TableExistsError, match="db.b"):
        catalog.rename_table("db.a", "db.b")
    with pytest.raises(TableNotFoundError):
        catalog.rename_table("db.nope", "db.c")
    with pytest.raises(InvalidOptionError):
        catalog.rename_table("db.a", "db.a")
    moved = catalog.rename_table("db.a", "other.a2")
    assert moved.uuid == a.uuid and moved.data_path == a.data_path  # data never moves
    assert catalog.tables("db") == ["b"] and catalog.tables("other") == ["a2"]
    assert os.readlink(catalog.root / "data" / "other" / "a2").endswith(a.uuid)
    assert not (catalog.root / "data" / "db" / "a").exists()
    catalog.exchange_tables("db.b", "other.a2")
    assert catalog.table_uuid("db.b") == a.uuid and catalog.table_uuid("other.a2") == b.uuid
    assert os.readlink(catalog.root / "data" / "db" / "b").endswith(a.uuid)
    with pytest.raises(TableNotFoundError):
        catalog.exchange_tables("db.b", "db.missing")


def test_detach_attach(catalog: Catalog) -> None:
    info = catalog.define_table("db.t", COLUMNS, "id")
    catalog.detach_table("db.t")
    assert catalog.tables("db") == [] and catalog.detached_tables("db") == ["t"]
    with pytest.raises(TableNotFoundError, match="detached"):
        catalog.table_info("db.t")
    with pytest.raises(TableNotFoundError, match="is detached"):
        catalog.detach_table("db.t")
    # The name stays taken while detached.
    with pytest.raises(TableExistsError):
        catalog.define_table("db.t", COLUMNS, "id")
    catalog.define_table("db.u", COLUMNS, "id")
    with pytest.raises(TableExistsError):
        catalog.rename_table("db.u", "db.t")
    with pytest.raises(TableNotFoundError):
        catalog.rename_table("db.t", "db.v")
    with pytest.raises(TableNotFoundError):
        catalog.drop_table("db.t")
    assert catalog.attach_table("db.t").uuid == info.uuid
    with pytest.raises(TableExistsError, match="already attached"):
        catalog.attach_table("db.t")
    with pytest.raises(TableNotFoundError):
        catalog.attach_table("db.never")


def test_drop_undrop(catalog: Catalog) -> None:
    first = catalog.define_table("db.t", COLUMNS, "id")
    dropped = catalog.drop_table("db.t")
    assert dropped is not None and not dropped.data_removed
    assert dropped.metadata_path.name == f"db.t.{first.uuid}.sql"
    assert first.data_path.is_dir()  # data stays until the delay passes
    assert catalog.drop_table("db.t", if_exists=True) is None
    with pytest.raises(TableNotFoundError):
        catalog.drop_table("db.t")
    # A new table may take the name at once: it has its own UUID and directory.
    second = catalog.define_table("db.t", COLUMNS, "id")
    assert second.uuid != first.uuid
    with pytest.raises(TableExistsError):
        catalog.undrop_table("db.t")
    catalog.drop_table("db.t")
    assert [d.uuid for d in catalog.dropped_tables()] == [first.uuid, second.uuid]
    assert catalog.undrop_table("db.t", uuid=first.uuid).uuid == first.uuid
    assert [d.uuid for d in catalog.dropped_tables()] == [second.uuid]
    with pytest.raises(TableNotFoundError):
        catalog.undrop_table("db.nothing")


def test_drop_database_takes_detached_tables_too(catalog: Catalog) -> None:
    catalog.define_table("db.a", COLUMNS, "id")
    catalog.define_table("db.b", COLUMNS, "id")
    catalog.detach_table("db.b")
    dropped = catalog.drop_database("db")
    assert sorted(d.name for d in dropped) == ["a", "b"]
    assert catalog.databases() == []
    assert catalog.unreferenced_store_dirs() == []
    assert catalog.drop_database("db", if_exists=True) == []
    with pytest.raises(TableNotFoundError):
        catalog.tables("db")
    # Re-creating the database gives a fresh directory; an UNDROP needs the database to exist.
    catalog.create_database("db")
    assert catalog.undrop_table("db.a").name == "a"


def test_corrupt_metadata_is_reported(catalog: Catalog) -> None:
    info = catalog.define_table("db.t", COLUMNS, "id")
    info.metadata_path.write_text("CREATE TABLE garbage")
    with pytest.raises(FormatError, match="t.sql"):
        catalog.table_uuid("db.t")


def _create_racer(root: str, name: str, barrier: multiprocessing.synchronize.Barrier, queue: multiprocessing.Queue) -> None:
    catalog = Catalog(root, drop_delay=3600)
    barrier.wait()
    try:
        queue.put(("won", catalog.define_table(name, COLUMNS, "id").uuid))
    except MergeTreeError as exc:
        queue.put(("lost", type(exc).__name__))


def test_concurrent_creates_one_winner(catalog: Catalog) -> None:
    ctx = multiprocessing.get_context("fork")
    for attempt in range(5):
        name = f"db.race{attempt}"
        barrier = ctx.Barrier(4)
        queue = ctx.Queue()
        workers = [ctx.Process(target=_create_racer, args=(str(catalog.root), name, barrier, queue)) for _ in range(4)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(30)
        outcomes = [queue.get(timeout=5) for _ in workers]
        winners = [value for status, value in outcomes if status == "won"]
        assert len(winners) == 1, outcomes
        assert sorted(value for status, value in outcomes if status == "lost") == ["TableExistsError"] * 3
        assert catalog.table_uuid(name) == winners[0]
    assert catalog.unreferenced_store_dirs() == []


def test_table_definition_input_and_key_checks(catalog: Catalog) -> None:
    from spark_mergetree.expressions.ddl import parse_create

    definition = parse_create(
        "CREATE TABLE other.name UUID '00000000-0000-0000-0000-000000000001' "
        "(d Date, k UInt32, v Float64) ENGINE = MergeTree PARTITION BY toYYYYMM(d) ORDER BY (k, d)"
    )
    info = catalog.define_table("db.from_definition", definition)
    assert info.statement.startswith(f"ATTACH TABLE _ UUID '{info.uuid}'\n")
    assert info.uuid != "00000000-0000-0000-0000-000000000001"
    assert info.definition.order_by == ("k", "d") and info.definition.partition_by == "toYYYYMM(d)"
    assert catalog.table_info("db.from_definition").definition.schema == definition.schema
    with pytest.raises(InvalidOptionError, match="keys"):
        catalog.define_table("db.x", definition, "k")
    with pytest.raises(ExpressionError, match="nope"):
        catalog.define_table("db.bad_key", COLUMNS, "nope")
    assert catalog.tables("db") == ["from_definition"]
    assert catalog.unreferenced_store_dirs() == []

"""clickhouse_ddl() of a local table: ClickHouse (chdb) opens the table where it lies, read-only, and
returns the rows we return; it refuses writes; differences between what it would load and our
snapshot are warned about."""

from __future__ import annotations

import shutil
import warnings
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pytest
from click.testing import CliRunner

from spark_mergetree import MergeTreeTable
from spark_mergetree.cli import main
from spark_mergetree.errors import FormatError, UnsupportedError
from spark_mergetree.format.part_reader import PartReader
from tests.format.chdb_util import close_session, connect_at, make_chdb_table

SCHEMA = [("d", "Date"), ("id", "UInt64"), ("name", "LowCardinality(String)"),
          ("price", "Decimal(18, 4)"), ("note", "Nullable(String)")]


def _rows(start: int, count: int, day: str = "2024-03-01") -> pa.Table:
    ids = list(range(start, start + count))
    return pa.table({
        "d": pa.array([day] * count).cast(pa.string()).cast(pa.date32()),
        "id": pa.array(ids, pa.uint64()),
        "name": [f"n{i % 7}" for i in ids],
        "price": pa.array([Decimal(i) / 8 for i in ids], pa.decimal128(18, 4)),
        "note": [None if i % 3 == 0 else f"x{i}" for i in ids],
    })


def _clickhouse_rows(work: Path, statement: str) -> tuple[list[tuple], str]:
    """Rows of the attached table as ClickHouse returns them, and what an INSERT into it says."""
    connection = connect_at(work)
    cursor = connection.cursor()
    try:
        cursor.execute(statement)
        cursor.execute("SELECT toString(d), id, name, toString(price), note FROM default.events ORDER BY id")
        rows = [tuple(row) for row in cursor.fetchall()]
        try:
            cursor.execute("INSERT INTO default.events (d, id, name, price) VALUES ('2024-03-01', 999999, 'w', 1)")
            refusal = ""
        except Exception as error:  # chdb raises its own exception type
            refusal = str(error)
        return rows, refusal
    finally:
        cursor.close()
        connection.close()


def _our_rows(table: MergeTreeTable) -> list[tuple]:
    got = table.to_arrow().sort_by("id").to_pylist()
    return [(str(r["d"]), r["id"], r["name"], f"{r['price']:.4f}".rstrip("0").rstrip("."), r["note"]) for r in got]


def _clickhouse_copy(tmp_path: Path, statement: str, inserts: list[str], setup: list[str] | None = None) -> Path:
    """A copy (at tmp_path/copy) of the data directory of a table ClickHouse made and filled."""
    _session, source = make_chdb_table(tmp_path / "source", statement, inserts, setup or [])
    shutil.copytree(source, tmp_path / "copy")
    close_session()  # chdb runs one server per process: the tests' own connections come next
    return tmp_path / "copy"


def test_clickhouse_opens_a_local_table_in_place_read_only(tmp_path: Path) -> None:
    table = MergeTreeTable.create(tmp_path / "events", SCHEMA, order_by="id", partition_by="toYYYYMM(d)",
                                  settings={"index_granularity": 64, "auto_merge": False})
    table.insert(_rows(0, 500))
    table.insert(_rows(500, 300, "2024-04-02"))
    table.insert(_rows(800, 200))
    table.optimize(final=True)  # the merged parts cover their sources: ClickHouse loads only them
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        statement = table.clickhouse_ddl("default.events")
    assert "local_blob_storage" in statement and str(table.path) in statement
    printed = CliRunner().invoke(main, ["clickhouse-ddl", str(table.path), "--name", "default.events"])
    assert printed.exit_code == 0, printed.output
    assert printed.output == statement

    ours = _our_rows(table)
    theirs, refusal = _clickhouse_rows(tmp_path / "chdb", statement)
    assert len(ours) == 1000
    assert theirs == ours
    assert "readonly" in refusal.lower() or "read only" in refusal.lower(), refusal
    assert _our_rows(MergeTreeTable.open(table.path)) == ours  # nothing was written beside our log


def test_parts_clickhouse_would_read_but_the_log_does_not_show_are_named(tmp_path: Path) -> None:
    table = MergeTreeTable.create(tmp_path / "events", SCHEMA, order_by="id",
                                  settings={"auto_merge": False, "old_parts_lifetime": 0})
    (part,) = table.insert(_rows(0, 10))
    table.overwrite(_rows(100, 5))  # its part covers the replaced one: ClickHouse skips that too
    # What a writer that crashed after writing its part and before committing leaves behind.
    shutil.copytree(table.path / part, table.path / "all_9_9_0")
    with pytest.warns(UserWarning, match=r"also read part\(s\) all_9_9_0"):
        table.clickhouse_ddl()
    shutil.rmtree(table.path / "all_9_9_0")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        statement = table.clickhouse_ddl()
    assert _clickhouse_rows(tmp_path / "chdb", statement)[0] == _our_rows(table)


def test_a_table_spread_over_disks_is_refused(tmp_path: Path) -> None:
    policy = {"name": "two", "disks": {name: {"path": str(tmp_path / name)} for name in ("d1", "d2")},
              "volumes": [{"name": "v", "layout": "jbod", "disks": ["d1", "d2"]}]}
    table = MergeTreeTable.create(tmp_path / "events", SCHEMA, order_by="id", settings={"storage_policy": policy})
    with pytest.raises(UnsupportedError, match="storage policy"):
        table.clickhouse_ddl()


def test_a_clickhouse_directory_opened_with_a_statement_without_uuid_is_attached_in_place(tmp_path: Path) -> None:
    # A user's ClickHouse table: its CREATE names no UUID; our insert and merge go into a copy of its
    # directory, which ClickHouse then opens where it lies.
    statement = ("CREATE TABLE events (d Date, id UInt64, name LowCardinality(String), price Decimal(18, 4), "
                 "note Nullable(String)) ENGINE = MergeTree PARTITION BY toYYYYMM(d) ORDER BY id "
                 "SETTINGS index_granularity = 64")
    copy = _clickhouse_copy(tmp_path, statement, [
        "INSERT INTO events SELECT '2024-03-01', number, concat('n', toString(number % 7)), number / 8, "
        "if(number % 3 = 0, NULL, concat('x', toString(number))) FROM numbers(300)"])
    table = MergeTreeTable.open(copy, create_statement=statement)
    table.insert(_rows(300, 200, "2024-04-02"))
    table.optimize(final=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ddl = table.clickhouse_ddl("default.events")
    assert ddl == table.clickhouse_ddl("default.events")  # the same UUID every time
    assert _clickhouse_rows(tmp_path / "chdb", ddl)[0] == _our_rows(table)
    assert len(_our_rows(table)) == 500


@pytest.mark.parametrize("flatten", [1, 0])
def test_a_clickhouse_table_with_nested_columns_is_opened_by_its_create_statement(tmp_path: Path, flatten: int) -> None:
    # ClickHouse's CREATE flattens Nested columns by default (flatten_nested = 1): the parts store
    # `links.trace_id Array(String)` and `links.weight Array(UInt8)`, not one `links` column.
    statement = ("CREATE TABLE spans (id UInt64, links Nested(trace_id String, weight UInt8)) "
                 "ENGINE = MergeTree ORDER BY id")
    links = ("arrayMap(i -> hex(i), range(number % 3)), arrayMap(i -> toUInt8(i * 2), range(number % 3))"
             if flatten else "arrayMap(i -> (hex(i), toUInt8(i * 2)), range(number % 3))")
    copy = _clickhouse_copy(tmp_path, statement, [f"INSERT INTO spans SELECT number, {links} FROM numbers(50)"],
                            [f"SET flatten_nested = {flatten}"])
    table = MergeTreeTable.open(copy, create_statement=statement)
    names = ["id", "links.trace_id", "links.weight"] if flatten else ["id", "links"]
    assert table.schema.names == names
    rows = table.to_arrow().sort_by("id")
    table.insert(rows)
    ddl = table.clickhouse_ddl("default.spans")
    connection = connect_at(tmp_path / "chdb")
    cursor = connection.cursor()
    try:
        cursor.execute(ddl)
        cursor.execute("SELECT id, arrayStringConcat(links.trace_id, ','), arrayStringConcat(links.weight, ',') "
                       "FROM default.spans ORDER BY id")
        theirs = [tuple(row) for row in cursor.fetchall()]
        cursor.execute("CHECK TABLE default.spans")
        checked = [row[1] for row in cursor.fetchall()]
    finally:
        cursor.close()
        connection.close()
    assert checked == [1] * len(table.parts()) or checked == ["1"] * len(table.parts())
    expected = [(i, ",".join(format(j, "02X") for j in range(i % 3)), ",".join(str(2 * j) for j in range(i % 3)))
                for i in range(50)]
    assert theirs == sorted(expected + expected)


def test_a_table_with_non_adaptive_marks_is_read_and_written(tmp_path: Path) -> None:
    # index_granularity_bytes = 0 (and tables from before adaptive granularity): `.mrk` marks without
    # row counts, every granule index_granularity rows but the last.
    statement = ("CREATE TABLE fixed (id UInt64, s String, n Nullable(UInt32)) ENGINE = MergeTree "
                 "PARTITION BY id % 2 ORDER BY id SETTINGS index_granularity = 100, index_granularity_bytes = 0")
    copy = _clickhouse_copy(tmp_path, statement, [
        "INSERT INTO fixed SELECT number, toString(number), if(number % 4 = 0, NULL, number) FROM numbers(1234)"])
    table = MergeTreeTable.open(copy, create_statement=statement)
    part = next(p for p in copy.iterdir() if (p / "id.cmrk").exists())  # compressed non-adaptive marks
    with pytest.raises(FormatError, match="non-adaptive marks"):
        PartReader(table.store, part.name, str(part))  # the table's index_granularity is needed
    rows = table.to_arrow().sort_by("id")
    assert rows["id"].to_pylist() == list(range(1234))
    assert rows["n"].to_pylist() == [None if i % 4 == 0 else i for i in range(1234)]
    plan = table.explain("id BETWEEN 450 AND 460")
    assert plan.granules_read <= 4 < plan.granules_total  # two granules a part, through the fixed-size granules
    assert table.to_arrow(where="id BETWEEN 450 AND 460").sort_by("id")["s"].to_pylist() == [str(i) for i in range(450, 461)]
    table.insert(rows)
    table.optimize(final=True)
    connection = connect_at(tmp_path / "chdb")
    cursor = connection.cursor()
    try:
        cursor.execute(table.clickhouse_ddl("default.fixed"))
        cursor.execute("SELECT count(), sum(id), countIf(n IS NULL) FROM default.fixed")
        assert list(cursor.fetchall()) == [(2468, 2 * sum(range(1234)), 2 * 309)]
        cursor.execute("CHECK TABLE default.fixed")
        assert {str(row[1]) for row in cursor.fetchall()} == {"1"}
    finally:
        cursor.close()
        connection.close()

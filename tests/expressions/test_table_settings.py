"""A new table's names, settings and values are checked before anything is written, and every
statement we write is one ClickHouse loads: a ClickHouse started on the catalog root serves the
tables (chdb in a fresh process is that ClickHouse)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from spark_mergetree import MergeTreeTable
from spark_mergetree.catalog import Catalog
from spark_mergetree.errors import InvalidOptionError
from spark_mergetree.expressions.ddl import (
    CLICKHOUSE_ONLY_SETTINGS,
    SETTING_CHOICES,
    UNDERSTOOD_SETTINGS,
    build_definition,
    format_create,
)
from tests.catalog.chdb_runner import rows, run_chdb

ALL_SETTINGS = {**UNDERSTOOD_SETTINGS, **CLICKHOUSE_ONLY_SETTINGS}
ODD_NAMES = ["with space", "back`quote", "back\\slash", "quo'te", "é", "1leading_digit", "a.b", "`", "a\x01b", "ü\x7f"]


@pytest.fixture
def coordinator(tmp_path, monkeypatch):
    url = (tmp_path / "coordinator").resolve().as_uri()
    monkeypatch.setenv("SPARK_MERGETREE_COORDINATOR", url)
    return url


@pytest.mark.parametrize("settings, message", [
    ({"index_granularty": 8192}, r"unknown setting 'index_granularty' \(did you mean 'index_granularity'\?\).*"
                                 r"codec.*index_granularity_bytes.*merge_max_block_size"),
    ({"compress_marks": 0}, r"unknown setting 'compress_marks'"),
    ({"index_granularity": 0}, r"'index_granularity' must be at least 1, got 0"),
    ({"index_granularity": -5}, r"'index_granularity' must be at least 1, got -5"),
    ({"index_granularity": "abc"}, r"'index_granularity' must be an integer, got 'abc'"),
    ({"index_granularity": 1.5}, r"'index_granularity' must be an integer, got 1.5"),
    ({"index_granularity_bytes": 100}, r"must be 0 \(fixed granules\) or at least 1024, got 100"),
    ({"ttl_only_drop_parts": "maybe"}, r"'ttl_only_drop_parts' must be true or false"),
    ({"max_partitions_to_read": -2}, r"'max_partitions_to_read' must be at least -1"),
])
def test_bad_settings_are_refused_before_anything_is_written(tmp_path, coordinator, settings, message):
    with pytest.raises(InvalidOptionError, match=message):
        MergeTreeTable.create(tmp_path / "t", [("id", "UInt64")], "id", settings=settings)
    assert not (tmp_path / "t").exists()
    catalog = Catalog(tmp_path / "root")
    catalog.create_database("db")
    with pytest.raises(InvalidOptionError, match=message):
        catalog.create_table("db.t", [("id", "UInt64")], "id", settings=settings)
    assert catalog.tables("db") == []
    assert list((tmp_path / "root" / "metadata" / "db").iterdir()) == []


@pytest.mark.parametrize("name", ["new\nline", "tab\t", "nul\x00"])
def test_column_name_with_characters_clickhouse_escapes_is_refused(tmp_path, coordinator, name):
    with pytest.raises(InvalidOptionError, match="control character"):
        MergeTreeTable.create(tmp_path / "t", [("id", "UInt64"), (name, "String")], "id")
    assert not (tmp_path / "t").exists()


def test_column_without_a_name_is_refused(tmp_path, coordinator):
    with pytest.raises(InvalidOptionError, match="a column needs a non-empty name"):
        MergeTreeTable.create(tmp_path / "t", [("id", "UInt64"), ("", "String")], "id")
    assert not (tmp_path / "t").exists()
    with pytest.raises(InvalidOptionError, match="a column needs a non-empty name"):
        MergeTreeTable.create(tmp_path / "t", pa.schema([("id", pa.uint64()), ("", pa.string())]), "id")
    assert not (tmp_path / "t").exists()


def test_every_setting_we_accept_is_a_mergetree_setting_clickhouse_knows(tmp_path):
    listed = run_chdb(tmp_path, "SELECT name FROM system.merge_tree_settings")[0].split()
    assert sorted(set(ALL_SETTINGS) - set(listed)) == []


def _boundary_values(name: str) -> list[object]:
    kind, minimum = ALL_SETTINGS[name]
    if kind == "bool":
        return [True, "false", "1", 2, "maybe"]
    if kind == "codec":
        return ["LZ4", "LZ4HC(12)", "ZSTD(22)", "NONE", "Delta, LZ4", "ZSTD(23)", "GZIP"]
    if kind == "choice":
        return [*SETTING_CHOICES[name], "sometimes", 1]
    return [minimum - 1, minimum, minimum + 1, 1023, 1024, "abc", "1.5", 2**64]


def test_what_we_accept_clickhouse_accepts(tmp_path):
    """For every setting and values around its limits: whenever we accept a value, ClickHouse does too."""
    statements, accepted = [], []
    for number, name in enumerate(sorted(ALL_SETTINGS)):
        for value in _boundary_values(name):
            try:
                definition = build_definition([("id", "UInt64")], "id", settings={name: value})
            except InvalidOptionError:
                continue
            statements.append(format_create(definition).replace("CREATE TABLE _", f"CREATE TABLE t{len(statements)}"))
            accepted.append((name, value))
        assert any(accepted_name == name for accepted_name, _ in accepted), f"no value of {name} accepted ({number})"
    results = run_chdb(tmp_path, *statements, allow_errors=True)
    refused = [(case, result) for case, result in zip(accepted, results, strict=True) if result.startswith("ERROR")]
    assert refused == []


def test_clickhouse_started_on_the_root_loads_every_table_we_create(tmp_path: Path, coordinator):
    catalog = Catalog(tmp_path)
    catalog.create_database("db")
    columns = [("id", "UInt64")] + [(name, "String") for name in ODD_NAMES]
    catalog.create_table("db.names", columns, "id", partition_by="id % 2",
                         settings={"index_granularity": 16, "codec": "ZSTD(3)"})
    sample = {"bool": True, "codec": "LZ4HC(9)", "choice": "rebuild"}
    every_setting = {name: sample.get(kind, 1024 if name == "index_granularity_bytes" else max(minimum, 1))
                     for name, (kind, minimum) in ALL_SETTINGS.items()}
    catalog.create_table("db.settings", [("id", "UInt64")], "id", settings=every_setting)
    catalog.table("db.names").insert(pa.table({"id": pa.array([1, 2], pa.uint64()), **{name: [name, ""] for name in ODD_NAMES}}))
    created, selected, counted = run_chdb(
        tmp_path, "SELECT name FROM system.tables WHERE database = 'db' ORDER BY name",
        "SELECT * FROM db.names ORDER BY id", "SELECT count() FROM db.settings")
    assert created.split() == ["names", "settings"]
    assert rows(selected)[0][0] == "1" and len(rows(selected)) == 2
    assert counted.strip() == "0"


def test_key_over_a_nullable_column_needs_allow_nullable_key(tmp_path, coordinator):
    columns = [("id", "UInt64"), ("n", "Nullable(Int32)")]
    for order_by, partition_by in (("n", None), ("id", "n % 3"), ("(id, intDiv(n, 2))", None)):
        with pytest.raises(InvalidOptionError, match="allow_nullable_key = 1"):
            MergeTreeTable.create(tmp_path / "t", columns, order_by, partition_by)
        assert not (tmp_path / "t").exists()
    # From an Arrow schema every column a key reads is made non-Nullable, as the Spark writer does.
    arrow = pa.schema([("id", pa.uint64()), ("d", pa.date32()), ("s", pa.string())])
    table = MergeTreeTable.create(tmp_path / "arrow", arrow, "s", partition_by="toYYYYMM(d)")
    assert table.definition.schema == {"id": "Nullable(UInt64)", "d": "Date32", "s": "String"}
    # With the setting, ClickHouse serves the table we wrote, NULL keys sorted last.
    catalog = Catalog(tmp_path / "root")
    catalog.create_database("db")
    catalog.create_table("db.t", columns, "n", settings={"allow_nullable_key": True})
    catalog.table("db.t").insert(pa.table({"id": pa.array([1, 2, 3], pa.uint64()), "n": [5, None, -1]}))
    ordered = run_chdb(tmp_path / "root", "SELECT id FROM db.t ORDER BY n")[0].split()
    assert ordered == ["3", "1", "2"]

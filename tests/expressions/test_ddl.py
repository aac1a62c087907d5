"""CREATE/ATTACH statements: ClickHouse's own metadata files parse and format back byte for byte,
our text is read back by ClickHouse, and bad statements get clear errors."""

from __future__ import annotations

import dataclasses

import pytest

from spark_mergetree.errors import ExpressionError, UnsupportedError
from spark_mergetree.expressions.ddl import (
    ColumnDefinition,
    TableDefinition,
    format_attach,
    format_create,
    parse_create,
)

CLICKHOUSE_TABLES = {
    "basic": """CREATE TABLE db.basic (id UInt64, ts DateTime, d Date, name String DEFAULT 'x' CODEC(ZSTD(3)) COMMENT 'hello',
                n Nullable(Int32)) ENGINE = MergeTree PARTITION BY toYYYYMM(d) ORDER BY (id, ts)""",
    "types": """CREATE TABLE db.types (id UInt64, a LowCardinality(Nullable(String)), b DateTime64(3,'UTC'), c Decimal(10,2),
                m Map(String, UInt64), tt Tuple(a UInt8, b String), e Enum8('a'=1,'b'=-2), fs FixedString(16),
                an Array(Nullable(Int64)), bo Bool, dt DateTime('Europe/Moscow'), x Int32 MATERIALIZED id*2,
                y String ALIAS toString(id), z UInt8 CODEC(Delta, ZSTD(1)), d Date DEFAULT today(), e2 UInt8 EPHEMERAL,
                INDEX ix d TYPE minmax GRANULARITY 1)
                ENGINE = MergeTree() PARTITION BY (id % 4, toMonday(d)) PRIMARY KEY (id) ORDER BY (id, toStartOfMonth(d))
                TTL d + INTERVAL 1 MONTH SETTINGS index_granularity = 1024, storage_policy = 'default' COMMENT 'it''s mine'""",
    "unkeyed": "CREATE TABLE db.unkeyed (`my col` String) ENGINE = MergeTree ORDER BY tuple()",
    "quoted": "CREATE TABLE db.quoted (`my col` UInt8 COMMENT 'a\\\\b') ENGINE = MergeTree ORDER BY `my col`",
}


@pytest.fixture(scope="module")
def metadata_files(clickhouse) -> dict[str, str]:
    for statement in CLICKHOUSE_TABLES.values():
        clickhouse.query(statement)
    return {name: clickhouse.metadata_file("db", name).read_text() for name in CLICKHOUSE_TABLES}


@pytest.mark.parametrize("table", sorted(CLICKHOUSE_TABLES))
def test_clickhouse_metadata_round_trips_byte_for_byte(metadata_files, table):
    text = metadata_files[table]
    assert text.startswith("ATTACH TABLE _ UUID '")
    assert format_attach(parse_create(text)) == text


def test_parsed_fields_of_a_clickhouse_metadata_file(metadata_files, clickhouse):
    basic = parse_create(metadata_files["basic"])
    uuid = clickhouse.query("SELECT uuid FROM system.tables WHERE database = 'db' AND name = 'basic'").strip()
    assert basic.uuid == uuid and basic.name == "_" and basic.database is None
    assert [(c.name, c.type) for c in basic.columns] == [
        ("id", "UInt64"), ("ts", "DateTime"), ("d", "Date"), ("name", "String"), ("n", "Nullable(Int32)")]
    assert basic.column("name") == ColumnDefinition("name", "String", "DEFAULT", "'x'", "hello", "ZSTD(3)")
    assert basic.order_by == ("id", "ts") and basic.primary_key == ("id", "ts")
    assert basic.partition_by == "toYYYYMM(d)" and basic.settings == {"index_granularity": "8192"}

    types = parse_create(metadata_files["types"])
    assert types.schema["b"] == "DateTime64(3, 'UTC')"
    assert types.schema["e"] == "Enum8('b' = -2, 'a' = 1)"  # ClickHouse orders Enum values by number
    assert types.schema["tt"] == "Tuple(a UInt8, b String)"
    assert types.primary_key == ("id",) and types.order_by == ("id", "toStartOfMonth(d)")
    assert types.partition_by == "(id % 4, toMonday(d))"
    assert types.settings["storage_policy"] == "default" and types.index_granularity == 1024
    assert types.comment == "it's mine" and types.indexes == ("INDEX ix d TYPE minmax GRANULARITY 1",)
    assert {c.name for c in types.columns if not c.is_stored} == {"y", "e2"}
    assert types.column("x").default_kind == "MATERIALIZED" and types.column("x").default_expression == "id * 2"
    assert parse_create(metadata_files["unkeyed"]).order_by == ()
    assert parse_create(metadata_files["quoted"]).column("my col").comment == "a\\b"


def test_show_create_table_parses_to_the_same_definition(metadata_files, clickhouse):
    shown = clickhouse.query("SHOW CREATE TABLE db.types")
    from_show = parse_create(shown)
    from_file = parse_create(metadata_files["types"])
    assert from_show.database == "db" and from_show.name == "types"
    assert dataclasses.replace(from_show, database=None, name="_", uuid=from_file.uuid) == from_file
    # SHOW CREATE spreads Tuple types over lines; for flat types it prints exactly what we print.
    basic_shown = clickhouse.query("SHOW CREATE TABLE db.basic")
    assert format_create(parse_create(basic_shown)) == basic_shown.rstrip("\n")


def test_clickhouse_starts_on_a_metadata_file_we_wrote(clickhouse):
    ours = parse_create(
        """create table db.ours (id UInt64, d Date, s LowCardinality(String) default 'z' comment 'c',
           v Nullable(Float64) codec(ZSTD(1))) engine = MergeTree partition by toYYYYMM(d) order by (id, d)
           settings index_granularity = 16"""
    )
    clickhouse.query("CREATE TABLE db.ours (id UInt64) ENGINE = MergeTree ORDER BY id")
    uuid = clickhouse.query("SELECT uuid FROM system.tables WHERE database = 'db' AND name = 'ours'").strip()
    path = clickhouse.metadata_file("db", "ours")
    clickhouse.stop()
    text = format_attach(dataclasses.replace(ours, database=None, name="_", uuid=uuid))
    path.write_text(text)
    clickhouse.start()
    assert clickhouse.query("SHOW CREATE TABLE db.ours") == format_create(ours) + "\n"
    clickhouse.query("INSERT INTO db.ours (id, d, v) VALUES (1, '2024-01-05', 0.5), (2, '2024-02-01', NULL)")
    assert clickhouse.rows("SELECT _partition_id, id, s, v FROM db.ours ORDER BY id") == [
        ["202401", "1", "z", "0.5"], ["202402", "2", "z", "\\N"]]
    # ClickHouse rewrites the file on ALTER: what it writes still parses to what we wrote, plus the change.
    clickhouse.query("ALTER TABLE db.ours MODIFY SETTING index_granularity = 16")
    assert clickhouse.metadata_file("db", "ours").read_text() == text


def test_create_formats_what_clickhouse_accepts(clickhouse):
    definition = TableDefinition(
        database="db", name="made here", uuid=None,
        columns=(ColumnDefinition("k", "Int32"), ColumnDefinition("t", "DateTime('UTC')", comment="when")),
        order_by=("k",), partition_by="toDate(t)", settings={"min_bytes_for_wide_part": "0"},
    )
    clickhouse.query(format_create(definition))
    shown = parse_create(clickhouse.query("SHOW CREATE TABLE db.`made here`"))
    assert shown == dataclasses.replace(definition, settings={**definition.settings, "index_granularity": "8192"})


def test_primary_key_defaults_to_order_by_and_must_be_its_prefix():
    text = "CREATE TABLE t (a UInt8, b UInt8) ENGINE = MergeTree ORDER BY (a, b)"
    assert parse_create(text).primary_key == ("a", "b")
    with pytest.raises(ExpressionError, match="prefix"):
        parse_create("CREATE TABLE t (a UInt8, b UInt8) ENGINE = MergeTree PRIMARY KEY b ORDER BY (a, b)")


@pytest.mark.parametrize(
    ("statement", "error", "message"),
    [
        ("CREATE TABLE t (a UInt8) ENGINE = ReplicatedMergeTree ORDER BY a", UnsupportedError, "ReplicatedMergeTree"),
        ("CREATE TABLE t (a UInt8) ENGINE = Log", UnsupportedError, "engine Log"),
        ("CREATE TABLE t (a UInt8) ENGINE = MergeTree(d, a, 8192)", UnsupportedError, "engine arguments"),
        ("CREATE TABLE t (a UInt8) ENGINE = MergeTree ORDER BY b", ExpressionError, "unknown column 'b'"),
        ("CREATE TABLE t (a UInt8) ENGINE = MergeTree PARTITION BY toYYYYMM(x) ORDER BY a", ExpressionError, "'x'"),
        ("CREATE TABLE t (a UInt8) ORDER BY a", ExpressionError, "no ENGINE"),
        ("CREATE TABLE t (a UInt8) ENGINE = MergeTree", ExpressionError, "ORDER BY"),
        ("CREATE TABLE t (a UInt8, a String) ENGINE = MergeTree ORDER BY a", ExpressionError, "defined twice"),
        ("CREATE TABLE t (a DEFAULT 1) ENGINE = MergeTree ORDER BY a", UnsupportedError, "no type"),
        ("CREATE VIEW v AS SELECT 1", UnsupportedError, "VIEW"),
        ("CREATE TABLE t AS other", UnsupportedError, "column list"),
        ("SELECT 1", ExpressionError, "CREATE"),
        ("", ExpressionError, "empty"),
    ],
)
def test_bad_statements_are_refused_by_name(statement, error, message):
    with pytest.raises(error, match=message):
        parse_create(statement)


def test_user_statements_with_quirks(clickhouse):
    text = """create table if not exists db.quirks -- a comment
        ( `order` UInt8 NOT NULL, x Nullable(Int32) DEFAULT NULL, y Int32 NULL DEFAULT 1 COMMENT 'c',
          z String DEFAULT if(x IS NOT NULL, 'a', 'b'))
        ENGINE = MergeTree() ORDER BY (`order`, x) SETTINGS allow_nullable_key=1;"""
    parsed = parse_create(text)
    assert parsed.database == "db" and parsed.name == "quirks"
    assert [(c.name, c.type, c.default_expression) for c in parsed.columns] == [
        ("order", "UInt8", None), ("x", "Nullable(Int32)", "NULL"), ("y", "Nullable(Int32)", "1"),
        ("z", "String", "if(x IS NOT NULL, 'a', 'b')")]
    assert parsed.order_by == ("order", "x")
    attach = format_attach(parsed)
    assert format_attach(parse_create(attach)) == attach
    # ClickHouse reads the table exactly as we do.
    clickhouse.query(text)
    assert parse_create(clickhouse.query("SHOW CREATE TABLE db.quirks")) == dataclasses.replace(
        parsed, settings={**parsed.settings, "index_granularity": "8192"})

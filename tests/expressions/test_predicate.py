"""WHERE predicates: parsed trees, binding errors, and row selection identical to ClickHouse's."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest

from spark_mergetree.errors import ExpressionError, UnsupportedError
from spark_mergetree.expressions.predicate import (
    And,
    Column,
    Compare,
    Func,
    In,
    IsNotNull,
    IsNull,
    Like,
    Literal,
    Not,
    Or,
    StartsWith,
    between,
    bind,
    columns_of,
    evaluate,
    filter_table,
    parse_predicate,
)

SCHEMA = {
    "id": "UInt64", "i": "Nullable(Int32)", "s": "Nullable(String)", "d": "Date",
    "ts": "DateTime('UTC')", "f": "Float64", "b": "Bool", "u8": "UInt8",
}

ROWS = [
    # id, i, s, d, ts, f, b, u8
    (1, 1, "ab", "2024-01-01", "2024-01-01 00:00:00", 0.5, True, 0),
    (2, None, "abc", "2024-01-31", "2024-01-31 23:59:59", -1.0, False, 255),
    (3, 3, None, "2024-02-01", "2024-02-01 00:00:00", 2.5, True, 7),
    (4, -7, "x", "2023-12-31", "2023-12-31 12:30:00", 0.0, False, 8),
    (5, 10, "a_b", "2024-01-15", "2024-01-15 06:00:00", 1e10, True, 100),
    (6, 5, "", "2024-03-04", "2024-03-04 00:00:01", -0.25, False, 1),
    (7, None, None, "1970-01-02", "1970-01-01 00:00:00", 3.0, True, 2),
    (8, 2, "AB", "2024-01-29", "2024-01-28 23:00:00", 4.0, False, 3),
]


def _arrow_table() -> pa.Table:
    columns = list(zip(*ROWS, strict=True))
    return pa.table({
        "id": pa.array(columns[0], pa.uint64()),
        "i": pa.array(columns[1], pa.int32()),
        "s": pa.array(columns[2], pa.string()),
        "d": pa.array([dt.date.fromisoformat(v) for v in columns[3]], pa.date32()),
        "ts": pa.array([dt.datetime.fromisoformat(v).replace(tzinfo=dt.timezone.utc) for v in columns[4]],
                       pa.timestamp("s", "UTC")),
        "f": pa.array(columns[5], pa.float64()),
        "b": pa.array(columns[6], pa.bool_()),
        "u8": pa.array(columns[7], pa.uint8()),
    })


def _sql_value(value: object) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return "'" + value.replace("'", "\\'") + "'"
    return repr(value)


@pytest.fixture(scope="module")
def loaded(clickhouse):
    columns = ", ".join(f"`{name}` {type_text}" for name, type_text in SCHEMA.items())
    clickhouse.query(f"CREATE TABLE db.rows ({columns}) ENGINE = MergeTree ORDER BY id")
    values = ", ".join("(" + ", ".join(_sql_value(v) for v in row) + ")" for row in ROWS)
    clickhouse.query(f"INSERT INTO db.rows VALUES {values}")
    return clickhouse


PREDICATES = [
    "id BETWEEN 2 AND 5 AND s = 'x'",
    "d >= '2024-01-01'",
    "d < '2024-01-31'",
    "ts >= '2024-01-31 23:59:59'",
    "ts < '2024-01-01'",
    "id IN (1, 2, 3)",
    "i IN (1, 3, NULL)",
    "i NOT IN (NULL)",
    "i NOT IN (1, NULL)",
    "i NOT IN (1, 3)",
    "NOT (i < 3)",
    "s IS NULL",
    "s IS NOT NULL",
    "i = 1 OR s = 'x'",
    "i = 1 OR i > 4",
    "NOT (i = 1 OR s = 'abc')",
    "toYYYYMM(d) = 202401",
    "toYYYYMMDD(d) BETWEEN 20240115 AND 20240131",
    "toMonday(d) = '2024-01-29'",
    "toStartOfMonth(d) = '2024-01-01'",
    "toDate(ts) = '2024-01-28'",
    "intDiv(i, 2) = -3",
    "i % 4 = -3",
    "s LIKE 'ab%'",
    "s LIKE 'a\\_b'",
    "s ILIKE 'ab'",
    "s NOT LIKE '%b%'",
    "startsWith(s, 'ab')",
    "endsWith(s, 'c')",
    "f > 0.5",
    "f <= 0",
    "b",
    "NOT b",
    "b = true AND u8 > 5",
    "u8 < 300",
    "u8 = 255",
    "u8 != -1",
    "5 <= id",
    "i != 5",
    "id * 2 > 10",
    "i + 1 = 2",
    "i <=> NULL",
    "i = NULL",
    "s = ''",
]


@pytest.mark.parametrize("where", PREDICATES)
def test_rows_selected_like_clickhouse(loaded, where):
    expected = [int(row[0]) for row in loaded.rows(f"SELECT id FROM db.rows WHERE {where} ORDER BY id")]
    selected = filter_table(_arrow_table(), bind(parse_predicate(where), SCHEMA))
    assert selected.column("id").to_pylist() == expected


def test_evaluate_returns_booleans_without_nulls():
    result = evaluate(bind(parse_predicate("i > 2"), SCHEMA), _arrow_table())
    assert result.type == pa.bool_() and result.null_count == 0
    assert result.to_pylist() == [False, False, True, False, True, True, False, False]


def test_parsed_tree_shapes():
    assert parse_predicate("id BETWEEN 5 AND 10 AND name = 'x'") == And((
        Compare(">=", Column("id"), Literal(5)), Compare("<=", Column("id"), Literal(10)),
        Compare("=", Column("name"), Literal("x"))))
    assert parse_predicate("x IN (1,2,3)") == In(Column("x"), (Literal(1), Literal(2), Literal(3)))
    assert parse_predicate("NOT (a < 3)") == Not(Compare("<", Column("a"), Literal(3)))
    assert parse_predicate("s IS NULL") == IsNull(Column("s"))
    assert parse_predicate("s IS NOT NULL") == IsNotNull(Column("s"))
    assert parse_predicate("a = 1 OR b = 2") == Or((Compare("=", Column("a"), Literal(1)), Compare("=", Column("b"), Literal(2))))
    assert parse_predicate("toYYYYMM(d) = 202401") == Compare("=", Func("toYYYYMM", (Column("d"),)), Literal(202401))
    assert parse_predicate("s LIKE 'ab%'") == Like(Column("s"), "ab%")
    assert parse_predicate("startsWith(s, 'ab')") == StartsWith(Column("s"), "ab")
    assert parse_predicate("3 > x") == Compare("<", Column("x"), Literal(3))
    assert parse_predicate("x = -2.5") == Compare("=", Column("x"), Literal(-2.5))
    assert parse_predicate("toMonday(d) = '2024-01-01'").left == Func("toMonday", (Column("d"),))
    assert parse_predicate("x % 4 = 1").left == Func("modulo", (Column("x"), Literal(4)))
    assert columns_of(parse_predicate("a = 1 OR toDate(ts) > b")) == {"a", "ts", "b"}


def test_trees_built_by_hand_work_like_parsed_ones():
    hand = between(Column("id"), 2, 4) & ~In(Column("id"), (3,))
    assert hand == And((between(Column("id"), 2, 4), Not(In(Column("id"), (Literal(3),)))))
    selected = filter_table(_arrow_table(), bind(hand, SCHEMA))
    assert selected.column("id").to_pylist() == [2, 4]


def test_bind_coerces_literals_to_column_types():
    bound = bind(parse_predicate("d >= '2024-01-01' AND ts < '2024-01-02 03:04:05' AND id = '7' AND f = 1"), SCHEMA)
    assert [arg.right.value for arg in bound.args] == [
        dt.date(2024, 1, 1), dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc), 7, 1.0]
    assert bound.args[0].left == Column("d", "Date")
    tokyo = bind(parse_predicate("t = '2024-01-01 09:00:00'"), {"t": "DateTime('Asia/Tokyo')"})
    assert tokyo.right.value.astimezone(dt.timezone.utc) == dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)


def test_unknown_columns_and_bad_literals_are_named():
    with pytest.raises(ExpressionError, match=r"unknown column 'nope'.*known columns: id, i, s"):
        bind(parse_predicate("nope = 1"), SCHEMA)
    with pytest.raises(ExpressionError, match=r"column 'd' of type Date .*'yesterday'"):
        bind(parse_predicate("d = 'yesterday'"), SCHEMA)
    with pytest.raises(ExpressionError, match=r"column 'id' of type UInt64"):
        bind(parse_predicate("id = 'seven'"), SCHEMA)
    with pytest.raises(ExpressionError, match="cannot parse"):
        parse_predicate("id = 1 AND")
    with pytest.raises(ExpressionError, match="empty"):
        parse_predicate("  ")
    with pytest.raises(UnsupportedError, match="subquery"):
        parse_predicate("id IN (SELECT 1)")
    with pytest.raises(UnsupportedError, match="cityHash64"):
        evaluate(bind(parse_predicate("cityHash64(s) = 1"), SCHEMA), _arrow_table())

"""String literals, LIKE patterns, constants out of a column's range and NaN: each answer is
ClickHouse's own (chdb computes the expected rows), through a partitioned table of ours so that
partition, key and row filtering all take part."""

from __future__ import annotations

import pyarrow as pa
import pytest

from spark_mergetree import MergeTreeTable
from spark_mergetree.errors import ExpressionError, UnsupportedError
from spark_mergetree.expressions.literals import decode_string_literal
from spark_mergetree.expressions.predicate import parse_predicate

VALUES = ["ab\\", "ab\\\\", "ab", "a%b", "a_b", "a\\_b", "a\\xb", "axb", "ab\\c", "%", "_", "\\", "", "A\\B",
          "é\\", "a\nb", "ab'", "'"]
SCHEMA = [("id", "UInt64"), ("s", "String"), ("n", "Nullable(String)"), ("u8", "UInt8"), ("f", "Float64"),
          ("g", "Float32")]
FLOATS = [float("nan"), -0.0, 0.0, 1.5, float("inf"), -1e300]


def _rows() -> pa.Table:
    count = len(VALUES)
    return pa.table({
        "id": pa.array([2**64 - 1 - i if i % 3 == 0 else i for i in range(count)], pa.uint64()),
        "s": VALUES,
        "n": [None if i % 4 == 0 else value for i, value in enumerate(VALUES)],
        "u8": pa.array([(i * 37) % 256 for i in range(count)], pa.uint8()),
        "f": pa.array([FLOATS[i % len(FLOATS)] for i in range(count)], pa.float64()),
        "g": pa.array([FLOATS[(i + 1) % len(FLOATS)] for i in range(count)], pa.float32()),
    })


@pytest.fixture(scope="module")
def tables(tmp_path_factory, clickhouse):
    directory = tmp_path_factory.mktemp("literals")
    table = MergeTreeTable.create(directory / "t", SCHEMA, "(s, id)", "u8 % 3",
                                  settings={"index_granularity": 2, "auto_merge": False},
                                  coordinator=(directory / "coordinator").resolve().as_uri())
    rows = _rows()
    table.insert(rows.slice(0, 9))
    table.insert(rows.slice(9))
    columns = ", ".join(f"{name} {kind}" for name, kind in SCHEMA)
    clickhouse.query(f"CREATE TABLE db.literals ({columns}) ENGINE = MergeTree ORDER BY (s, id)")
    literal = {str: lambda v: "unhex('" + v.encode().hex() + "')", float: lambda v: f"toFloat64('{v}')"}
    values = ", ".join("(" + ", ".join("NULL" if v is None else literal.get(type(v), str)(v) for v in row.values()) + ")"
                       for row in rows.to_pylist())
    clickhouse.query(f"INSERT INTO db.literals VALUES {values}")
    return table, clickhouse


def _clickhouse_ids(clickhouse, where: str) -> list[int] | None:
    """The ids ClickHouse selects, or None when it refuses the predicate."""
    try:
        text = clickhouse.query(f"SELECT id FROM db.literals WHERE {where}")
    except Exception:  # noqa: BLE001 - a refusal is an answer we must give too
        return None
    return sorted(int(line) for line in text.split())


def _our_ids(table: MergeTreeTable, where: str, refuse: bool = False) -> list[int] | None:
    if refuse:
        with pytest.raises((ExpressionError, UnsupportedError)):
            table.to_arrow(["id"], where=where)
        return None
    return sorted(table.to_arrow(["id"], where=where).column("id").to_pylist())


def _assert_same_answer(tables, where: str) -> None:
    table, clickhouse = tables
    expected = _clickhouse_ids(clickhouse, where)
    assert _our_ids(table, where, refuse=expected is None) == expected


LIKE_PREDICATES = [
    # The pattern "ends with a backslash", spelled four ways in SQL text.
    r"s LIKE '%\\\\'", r"s NOT LIKE '%\\\\'", r"s LIKE '%\x5C\x5C'", r"s ILIKE '%\\\\'",
    r"s LIKE 'ab\\\\'", r"s LIKE 'ab\\\\%'", r"s LIKE 'a\\_b'", r"s LIKE 'a\_b'", r"s LIKE 'a\\\\_b'",
    r"s LIKE 'a\\%b'", r"s LIKE 'a\\xb'", r"s LIKE 'a\xb'", r"s LIKE 'a_b'", r"s LIKE '_'", r"s LIKE '\\%'",
    r"s LIKE '%'", r"s LIKE ''", r"s LIKE 'a%b'", r"s ILIKE 'A%'", r"s ILIKE 'É%'", r"s LIKE '_\\\\'",
    r"s LIKE 'a\\\\c%'", r"s LIKE '%\\'%'", r"s LIKE '%''%'", r"s NOT ILIKE '%B%'", r"n LIKE '%\\\\'",
    r"n NOT LIKE 'a%'", r"like(s, '%\\\\')", r"notLike(s, 'a%')", r"s LIKE 'a.b'", r"s LIKE 'a\nb'",
]


@pytest.mark.parametrize("where", LIKE_PREDICATES)
def test_like_selects_what_clickhouse_selects(tables, where):
    _assert_same_answer(tables, where)


def test_pattern_ending_with_one_backslash_is_refused_like_clickhouse(tables):
    table, clickhouse = tables
    with pytest.raises(Exception, match="CANNOT_PARSE_ESCAPE_SEQUENCE"):
        clickhouse.query(r"SELECT id FROM db.literals WHERE s LIKE '%\\'")
    with pytest.raises(ExpressionError, match="unpaired backslash"):
        table.to_arrow(where=r"s LIKE '%\\'")


@pytest.mark.parametrize("text", [
    r"'a\_b'", r"'a\%b'", r"'a\\b'", r"'a\qb'", r"'a\x41b'", r"'a\x5c'", r"'a\nb'", r"'a\0b'", r"'a\'b'",
    r"'a''b'", r"'a\Nb'", r"'a\ab'", r"'a\eb'", r"'\u0041'", r"'a\"b'", r"'a\/b'", r"'a\=b'", r"'a\`b'",
    r"'a\ b'", r"'é\é'", r"'\xc3\xa9'", r"'a\tb\rc\fd\ve\bf'",
])
def test_string_literals_read_as_clickhouse_reads_them(clickhouse, text):
    expected = bytes.fromhex(clickhouse.query(f"SELECT hex({text})").strip()).decode()
    assert decode_string_literal(text) == expected


def test_string_literals_clickhouse_reads_as_garbage_are_refused():
    with pytest.raises(ExpressionError, match="two hex digits"):
        parse_predicate(r"s = '\x4g'")
    with pytest.raises(UnsupportedError, match="UTF-8"):
        parse_predicate(r"s = '\xff'")


CONSTANT_PREDICATES = [
    "id < 18446744073709551616", "id >= 18446744073709551616", "id = 18446744073709551616",
    "id != 18446744073709551616", "id > -1", "id < -9223372036854775809", "id = 18446744073709551615",
    "id IN (18446744073709551615, 18446744073709551616, -1, 1.0, 2.5)", "id = 18446744073709551615.0",
    "u8 < 300", "u8 = 256", "u8 != -1", "u8 <= 255.5", "u8 > 254.5", "u8 >= 2.5", "u8 < -0.5", "u8 = '37'",
    "u8 IN ('37', 74.0, 256)", "NOT (u8 < 300)", "id <=> 18446744073709551616", "NOT (id <=> -1)",
    "u8 < inf", "u8 > -inf", "u8 = nan", "u8 != nan",
    "f = nan", "f != nan", "NOT (f < nan)", "f IN (nan)", "f IN (-0.0)", "f IN (0)", "f = -0.0",
    "f NOT BETWEEN 0 AND 2", "NOT f BETWEEN 0 AND 2", "NOT (f BETWEEN 0 AND 2)", "f < 1e308 * 10",
    "g = 1.5", "g < 1e308", "g IN (1.5, 1e308, inf)", "g > 18446744073709551616", "g = 0.1", "g < 0.1",
    "f > 9007199254740993", "f <= 9007199254740993",
]


@pytest.mark.parametrize("where", CONSTANT_PREDICATES)
def test_constants_outside_the_column_type_compare_as_in_clickhouse(tables, where):
    _assert_same_answer(tables, where)


def test_string_constant_clickhouse_would_read_differently_is_refused(tables):
    table, _ = tables
    with pytest.raises(ExpressionError, match=r"column 'u8' of type UInt8 .*'300'.*out of the range"):
        table.to_arrow(where="u8 = '300'")
    with pytest.raises(ExpressionError, match=r"column 'u8' .*'5.0'.*not an integer"):
        table.to_arrow(where="u8 = '5.0'")


def test_function_errors_name_the_expression_not_internals(tables):
    table, _ = tables
    with pytest.raises(ExpressionError) as error:
        table.to_arrow(where="intDiv(7, 2) = 3")
    assert "intDiv(7, 2)" in str(error.value) and "bind" not in str(error.value)
    with pytest.raises(ExpressionError, match=r"s LIKE 'a%': string matching needs a String column|"
                                              r"u8 LIKE 'a%': string matching needs a String column, column 'u8'"):
        table.to_arrow(where="u8 LIKE 'a%'")
    with pytest.raises(ExpressionError, match=r"^s cannot be a condition: it is string"):
        table.to_arrow(where="s")

"""String functions in expressions against ClickHouse 26.9: the same rows in a chdb table and in
Arrow give the same values for every function (NULLs, non-ASCII letters and empty strings among
them); an insert fills a column's DEFAULT of them as ClickHouse's INSERT does."""

from __future__ import annotations

import pyarrow as pa
import pytest

from spark_mergetree import MergeTreeTable
from spark_mergetree.errors import UnsupportedError
from spark_mergetree.expressions.predicate import bind, evaluate_value, parse_expression

TEXTS = ["Hello", "ÄbC xY", "", None, "MIXed_9", "ß ẞ İ", "tab\there"]
COLUMNS = {"s": "Nullable(String)", "f": "FixedString(3)", "n": "Int32", "u": "UInt64", "b": "Bool", "d": "Date",
           "d32": "Date32", "t": "DateTime('America/New_York')", "t64": "DateTime64(3, 'Asia/Kolkata')",
           "id": "UUID", "lc": "LowCardinality(Nullable(String))"}
EXPRESSIONS = ["lower(s)", "upper(s)", "LOWER(s)", "length(s)", "empty(s)", "notEmpty(s)", "concat(s, '-', toString(n))",
               "concat(lower(s), upper(s))", "toString(n)", "toString(u)", "toString(b)", "toString(d)", "toString(d32)",
               "toString(t)", "toString(t64)", "toString(id)", "toString(s)", "length(f)", "upper(f)",
               "concat(f, s)", "upper(lc)", "toString(lc)"]


@pytest.fixture(scope="module")
def rows(clickhouse) -> pa.Table:
    columns = ", ".join(f"{name} {type_text}" for name, type_text in COLUMNS.items())
    clickhouse.query(f"CREATE TABLE db.strings (i UInt32, {columns}) ENGINE = MergeTree ORDER BY i")
    values = []
    for i, text in enumerate(TEXTS):
        s = "NULL" if text is None else "'" + text.replace("\t", "\\t") + "'"
        values.append(f"({i}, {s}, '{['ab', 'é', '', 'xyz'][i % 4]}', {i * 7 - 20}, {2**64 - 1 - i}, {i % 2}, "
                      f"toDate('2024-01-31') + {i * 40}, toDate32('1905-03-01') + {i * 9000}, "
                      f"toDateTime({i * 400000000}, 'America/New_York'), toDateTime64({i * 300000000.125}, 3, 'Asia/Kolkata'), "
                      f"toUUID('00000000-0000-0000-0000-{i:012d}'), {s})")
    clickhouse.query(f"INSERT INTO db.strings VALUES {', '.join(values)}")
    return MergeTreeTable.open(clickhouse.table_dir("db", "strings"),
                               create_statement=clickhouse.query("SHOW CREATE TABLE db.strings")).to_arrow().sort_by("i")


@pytest.mark.parametrize("expression", EXPRESSIONS)
def test_string_functions_give_clickhouses_values(clickhouse, rows, expression) -> None:
    theirs = clickhouse.query(f"SELECT {expression} FROM db.strings ORDER BY i FORMAT JSONCompactColumns")
    expected = __import__("json").loads(theirs)[0]
    ours = evaluate_value(bind(parse_expression(expression), {"i": "UInt32", **COLUMNS}), rows).to_pylist()
    assert [str(v) if isinstance(v, int) and not isinstance(v, bool) else v for v in ours] == \
        [str(v) if isinstance(v, int) else v for v in expected]


def test_where_and_defaults_take_them(clickhouse, rows, tmp_path) -> None:
    assert evaluate_value(bind(parse_expression("lower(s) = 'hello'"), COLUMNS), rows).to_pylist()[0] is True
    table = MergeTreeTable.create(tmp_path / "t", [("id", "UInt64"), ("s", "String"), ("k", "String DEFAULT upper(s)"),
                                                   ("c", "String DEFAULT concat(s, ':', toString(id))")], order_by="id")
    table.insert(pa.table({"id": pa.array([1, 2], pa.uint64()), "s": ["ab", "Çd"]}))
    assert table.to_arrow().sort_by("id").select(["k", "c"]).to_pylist() == [
        {"k": "AB", "c": "ab:1"}, {"k": "ÇD", "c": "Çd:2"}]
    assert table.to_arrow(where="upper(s) = 'ÇD'").num_rows == 1


def test_other_argument_types_are_refused_by_name(rows) -> None:
    for expression in ("lower(n)", "toString(f)", "concat(s, n)"):
        with pytest.raises(UnsupportedError, match=r"\(\) of "):
            evaluate_value(bind(parse_expression(expression), COLUMNS), rows)

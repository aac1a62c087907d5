"""format_spec/partition_ids.md: every example row is checked against ClickHouse and our code."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import pytest

from spark_mergetree.expressions.literals import coerce_literal
from spark_mergetree.expressions.partition_key import PartitionKey
from spark_mergetree.expressions.predicate import Func, Literal, parse_expression
from spark_mergetree.format.siphash import siphash128_clickhouse

SPEC = Path(__file__).resolve().parents[2] / "format_spec" / "partition_ids.md"
_ROW = re.compile(r"^\| `(.+?)` \| `(.+?)` \| `(.+?)` \| `(.+?)` \| `(.+?)` \|$")


def _examples() -> list[tuple[str, str, str, str, str]]:
    text = SPEC.read_text()
    examples_section = text.split("## Examples", 1)[1]
    rows = [match.groups() for line in examples_section.splitlines() if (match := _ROW.match(line))]
    assert len(rows) >= 20
    return rows


def _schema(columns: str) -> dict[str, str]:
    # Column lists in the spec have no commas inside types except Enum's, which never shares a row.
    parts = [columns] if "Enum" in columns or "Decimal" in columns else columns.split(", ")
    return dict(part.split(" ", 1) for part in parts)


_NUMBERS = itertools.count()


@pytest.mark.parametrize("example", _examples(), ids=lambda row: f"{row[1]}:{row[3]}")
def test_spec_example(clickhouse, example):
    columns, partition_by, inserted, key_values, expected_id = example
    schema = _schema(columns)
    table = f"spec_{next(_NUMBERS)}"
    clickhouse.query(f"CREATE TABLE db.{table} ({columns}) ENGINE = MergeTree PARTITION BY {partition_by} "
                     "ORDER BY tuple() SETTINGS allow_nullable_key = 1")
    clickhouse.query(f"INSERT INTO db.{table} VALUES {inserted}")
    assert clickhouse.query(f"SELECT partition_id FROM system.parts WHERE database = 'db' AND table = '{table}'").strip() == expected_id

    key = PartitionKey.parse(partition_by, schema)
    parsed = parse_expression(key_values)
    literals = parsed.args if isinstance(parsed, Func) and parsed.name == "tuple" else (parsed,)
    assert all(isinstance(literal, Literal) for literal in literals)
    values = tuple(coerce_literal(literal.value, type_text) for literal, type_text in zip(literals, key.result_types, strict=True))
    assert key.partition_id(values) == expected_id


def test_worked_encodings():
    assert siphash128_clickhouse(bytes.fromhex("10 03 00 00 00 00 00 00 00 61 62 63")).hex() == "f815b3f19bae3563399d3c6214a8ed43"
    assert (siphash128_clickhouse(bytes.fromhex("02 fd ff ff ff ff ff ff ff 10 01 00 00 00 00 00 00 00 71")).hex()
            == "45393b4121d5a5e6fe20fea7032ad6ed")

"""Differential fuzz of WHERE predicates: our engine against ClickHouse (chdb) on the same rows.

Random rows go into a partitioned, multi-part table of ours with a small index granularity, so every
predicate runs through partition pruning, primary-key granule selection and the exact row filter
(`MergeTreeTable.to_arrow(where=...)`). ClickHouse evaluates the same predicate text over the same
rows (loaded from Parquet). The selected row ids must be identical; where ClickHouse refuses a
predicate we must refuse it too, and where we refuse one the error must be ours (ExpressionError or
UnsupportedError), never a wrong answer.
"""

from __future__ import annotations

import datetime as dt
import math
import random
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from spark_mergetree import MergeTreeTable
from spark_mergetree.errors import ExpressionError, UnsupportedError

SEED = 20240610
ROWS = 300
PREDICATES = 250

# name → (ClickHouse type, Arrow type)
COLUMNS = {
    "k": ("Int32", pa.int32()),
    "i": ("Nullable(Int64)", pa.int64()),
    "u": ("UInt64", pa.uint64()),
    "u8": ("UInt8", pa.uint8()),
    "f": ("Float64", pa.float64()),
    "g": ("Nullable(Float32)", pa.float32()),
    "s": ("String", pa.string()),
    "sn": ("Nullable(String)", pa.string()),
    "lc": ("LowCardinality(Nullable(String))", pa.string()),
    "d": ("Date", pa.date32()),
    "t": ("DateTime('UTC')", pa.timestamp("s", "UTC")),
    "b": ("Bool", pa.bool_()),
}
# (ORDER BY, PARTITION BY) of the tables the predicates run on: keys on strings, integers and floats.
LAYOUTS = [("(s, k)", "toYYYYMM(d)"), ("(f, u, b)", "intDiv(k, 10)")]
INTEGER_EDGES = {
    "k": [-2**31, 2**31 - 1], "i": [-2**63, 2**63 - 1], "u": [0, 2**63, 2**64 - 1], "u8": [0, 255],
}
STRING_ALPHABET = ["a", "b", "A", "%", "_", "\\", "'", "é", "x", " ", "\n"]
FLOAT_SPECIALS = [math.nan, math.inf, -math.inf, -0.0, 0.0, 0.5, 1e300, -1e-300]


def _random_string(rng: random.Random) -> str:
    return "".join(rng.choice(STRING_ALPHABET) for _ in range(rng.randint(0, 4)))


def _random_rows(rng: random.Random) -> pa.Table:
    def nullable(value: object) -> object:
        return None if rng.random() < 0.15 else value

    def integer(name: str, low: int, high: int) -> int:
        return rng.choice(INTEGER_EDGES[name]) if rng.random() < 0.05 else rng.randint(low, high)

    def floating() -> float:
        return rng.choice(FLOAT_SPECIALS) if rng.random() < 0.15 else round(rng.uniform(-10, 10), rng.choice([0, 1, 3]))

    start = dt.date(2023, 11, 1)
    data: dict[str, list[object]] = {name: [] for name in COLUMNS}
    for _ in range(ROWS):
        data["k"].append(integer("k", -20, 20))
        data["i"].append(nullable(integer("i", -20, 20)))
        data["u"].append(integer("u", 0, 40))
        data["u8"].append(integer("u8", 0, 20))
        data["f"].append(floating())
        value = floating()
        data["g"].append(nullable(value if not math.isfinite(value) or abs(value) < 1e30 else 1.5))
        data["s"].append(_random_string(rng))
        data["sn"].append(nullable(_random_string(rng)))
        data["lc"].append(nullable(rng.choice(["a", "b", "%", "a\\"])))
        data["d"].append(start + dt.timedelta(days=rng.randint(0, 120)))
        data["t"].append(dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(seconds=rng.randint(-86400 * 40, 86400 * 40)))
        data["b"].append(rng.random() < 0.5)
    arrays = {"rowid": pa.array(range(ROWS), pa.uint32())}
    arrays.update({name: pa.array(values, COLUMNS[name][1]) for name, values in data.items()})
    return pa.table(arrays)


# ---------------------------------------------------------------------------------------------
# Predicate text
# ---------------------------------------------------------------------------------------------


def string_literal(value: str, rng: random.Random) -> str:
    """`value` as a ClickHouse string literal, escaped in one of the ways ClickHouse accepts."""
    out = []
    for char in value:
        if char == "\\":
            out.append(rng.choice(["\\\\", "\\x5C", "\\x5c"]))
        elif char == "'":
            out.append(rng.choice(["\\'", "''", "\\x27"]))
        elif char == "\n":
            out.append(rng.choice(["\\n", "\\x0A", "\n"]))
        else:
            out.append(char)
    return "'" + "".join(out) + "'"


@dataclass
class Generator:
    rng: random.Random
    rows: pa.Table

    def sample(self, column: str) -> object:
        return self.rows.column(column)[self.rng.randrange(self.rows.num_rows)].as_py()

    def literal(self, column: str) -> str:
        rng = self.rng
        kind = COLUMNS[column][0]
        value = self.sample(column)
        if value is None or rng.random() < 0.03:
            return "NULL"
        if "Int" in kind:
            choice = rng.random()
            if choice < 0.1:
                return str(rng.choice([-1, 256, 2**31, 2**32, 2**63, 2**64 - 1, 2**64, -2**63 - 1, -2**64]))
            if choice < 0.2:
                return f"{value}.5" if value >= 0 else f"{value}.5"
            if choice < 0.25:
                return f"'{value}'"
            return str(value)
        if "Float" in kind:
            if isinstance(value, float) and not math.isfinite(value):
                return rng.choice(["nan", "inf", "-inf", "1/0", str(value)])
            if rng.random() < 0.1:
                return rng.choice(["0", "-0.0", "1e308", "2", "-3"])
            return repr(value)
        if kind == "Bool":
            return rng.choice(["true", "false", "1", "0"])
        if "String" in kind:
            if rng.random() < 0.2:
                value = _random_string(rng)
            return string_literal(value, rng)
        if kind == "Date":
            if rng.random() < 0.1:
                return rng.choice(["'2024-01-01'", "'1970-01-01'", "'2149-06-06'"])
            return f"'{value.isoformat()}'"
        if kind.startswith("DateTime"):
            text = value.strftime("%Y-%m-%d %H:%M:%S")
            return rng.choice([f"'{text}'", f"'{text[:10]}'", f"toDateTime('{text}', 'UTC')"])
        raise AssertionError(kind)

    def like_pattern(self) -> str:
        rng = self.rng
        pieces = []
        for _ in range(rng.randint(0, 4)):
            pieces.append(rng.choice(["%", "_", "\\%", "\\_", "\\\\", "\\a", "\\x", "\\", *STRING_ALPHABET]))
        return "".join(pieces)

    def number(self) -> str:
        """A column (or a function of one) with a numeric value, and a constant of about its size."""
        rng = self.rng
        choice = rng.random()
        if choice < 0.3:
            return "toYYYYMM(d)", str(rng.choice([202311, 202312, 202401, 202402, 202403, 0, 4294967296])) + rng.choice(["", "", ".5"])
        left, right = rng.sample(["k", "i", "u", "u8", "f", "g", "b", "3", "-2", "0.5"], 2)
        expression = f"{left} {rng.choice(['+', '-', '*', '/'])} {right}"
        return expression, str(rng.choice([0, 1, -1, 5, 2**63, 2**64 - 1, 2.5, -0.5]))

    def atom(self) -> str:
        rng = self.rng
        column = rng.choice(list(COLUMNS))
        kind = COLUMNS[column][0]
        choice = rng.random()
        if choice < 0.08:
            expression, constant = self.number()
            return f"{expression} {rng.choice(['=', '!=', '<', '<=', '>', '>='])} {constant}"
        if choice < 0.1:
            return rng.choice(["b", "NOT b", "u8", "k"])
        if "String" in kind and choice < 0.15:
            function = rng.choice(["startsWith", "endsWith"])
            return f"{function}({column}, {string_literal(_random_string(rng)[:2], rng)})"
        if "String" in kind and choice < 0.35:
            op = rng.choice(["LIKE", "NOT LIKE", "ILIKE", "NOT ILIKE"])
            return f"{column} {op} {string_literal(self.like_pattern(), rng)}"
        if choice < 0.45:
            return f"{column} {rng.choice(['=', '!=', '<>', '<', '<=', '>', '>=', '=='])} {self.literal(column)}"
        if choice < 0.55:
            low, high = sorted((self.literal(column), self.literal(column)), key=lambda _: rng.random())
            return f"{column} {rng.choice(['BETWEEN', 'NOT BETWEEN'])} {low} AND {high}"
        if choice < 0.7:
            values = ", ".join(self.literal(column) for _ in range(rng.randint(1, 4)))
            return f"{column} {rng.choice(['IN', 'NOT IN'])} ({values})"
        if choice < 0.8:
            return f"{column} IS {rng.choice(['', 'NOT '])}NULL"
        if choice < 0.9:
            # Two columns of one kind compared with each other.
            same = [name for name, (other, _) in COLUMNS.items() if _family(other) == _family(kind)]
            return f"{column} {rng.choice(['=', '!=', '<', '>='])} {rng.choice(same)}"
        return f"{self.literal(column)} {rng.choice(['=', '<', '>='])} {column}"

    def predicate(self, depth: int = 0) -> str:
        rng = self.rng
        choice = rng.random()
        if depth >= 3 or choice < 0.45:
            return self.atom()
        if choice < 0.6:
            return f"NOT ({self.predicate(depth + 1)})"
        joiner = rng.choice([" AND ", " OR "])
        return "(" + joiner.join(self.predicate(depth + 1) for _ in range(rng.randint(2, 3))) + ")"


def _family(kind: str) -> str:
    for family in ("Int", "Float", "String", "DateTime", "Date", "Bool"):
        if family in kind:
            return "number" if family in ("Int", "Float") else family
    return kind


# ---------------------------------------------------------------------------------------------
# The two engines
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def fuzz_setup(tmp_path_factory, clickhouse):
    rng = random.Random(SEED)
    rows = _random_rows(rng)
    directory = tmp_path_factory.mktemp("where_fuzz")
    coordinator = (directory / "coordinator").resolve().as_uri()
    schema = [("rowid", "UInt32")] + [(name, kind) for name, (kind, _) in COLUMNS.items()]
    tables = []
    for number, (order_by, partition_by) in enumerate(LAYOUTS):
        table = MergeTreeTable.create(directory / f"table{number}", schema, order_by, partition_by,
                                      settings={"index_granularity": 8, "auto_merge": False}, coordinator=coordinator)
        for begin in range(0, ROWS, ROWS // 2):  # several parts per partition
            table.insert(rows.slice(begin, ROWS // 2))
        tables.append(table)
    parquet = directory / "rows.parquet"
    pq.write_table(rows, parquet)
    structure = ", ".join(f"{name} {kind}" for name, kind in schema)
    clickhouse.query(f"CREATE TABLE db.fuzz ({structure}) ENGINE = Memory")
    clickhouse.query(f"INSERT INTO db.fuzz SELECT * FROM file('{parquet}', Parquet)")
    return rng, rows, tables, clickhouse


def clickhouse_rows(clickhouse, where: str) -> list[int] | str:
    try:
        text = clickhouse.query(f"SELECT rowid FROM db.fuzz WHERE {where} ORDER BY rowid")
    except Exception as error:  # noqa: BLE001 - ClickHouse's refusal is an outcome to compare
        return f"refused: {str(error).splitlines()[0][:200]}"
    return [int(line) for line in text.split()]


def our_rows(table: MergeTreeTable, where: str) -> list[int] | str:
    try:
        selected = table.to_arrow(["rowid"], where=where)
    except (ExpressionError, UnsupportedError) as error:
        return f"refused: {error}"
    return sorted(selected.column("rowid").to_pylist())


def discrepancies(setup, count: int) -> tuple[list[str], int]:
    """Predicates on which we and ClickHouse disagree (each run on the tables in turn), and how
    many predicates we refused."""
    rng, rows, tables, clickhouse = setup
    generator = Generator(rng, rows)
    found, refused = [], 0
    for number in range(count):
        where = generator.predicate()
        table = tables[number % len(tables)]
        expected, got = clickhouse_rows(clickhouse, where), our_rows(table, where)
        if isinstance(got, str):
            refused += 1
            if isinstance(expected, list):
                continue  # we refused with a clear error: allowed, counted below
        if isinstance(expected, str) and isinstance(got, str):
            continue
        if expected != got:
            found.append(f"WHERE {where}\n  (ORDER BY {LAYOUTS[number % len(tables)][0]})\n"
                         f"  ClickHouse: {_short(expected)}\n  ours:       {_short(got)}")
    return found, refused


def _short(result: list[int] | str) -> str:
    return result if isinstance(result, str) else f"{len(result)} rows {result[:12]}"


def test_where_agrees_with_clickhouse(fuzz_setup):
    found, refused = discrepancies(fuzz_setup, PREDICATES)
    assert not found, f"{len(found)} predicates disagree:\n" + "\n".join(found[:10])
    assert refused < PREDICATES // 10, f"{refused} of {PREDICATES} predicates refused"

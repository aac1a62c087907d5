"""Pushed filters prune only what Spark's own semantics drop: random Spark predicates over a table of
every common type with NaN, infinities, -0.0 and NULLs, with minmax, set, bloom_filter, tokenbf_v1 and
ngrambf_v1 skip indexes, a float sorting key and partitions, against the same rows in Parquet.

The reference is the Parquet copy read without Parquet's own filter pushdown, which drops NaN rows
(`x = double('NaN')` finds nothing through it: row-group statistics leave NaN out too).

Spark's semantics differ from ClickHouse's where pruning can go wrong: NaN equals itself and sorts
above every number (`x > 5` holds for NaN, `x = double('NaN')` finds it), minmax indexes leave NaN out
of a granule's [min, max], and `NOT (x <=> v)` holds for NULL. Every predicate runs on its own scan
(each has a plan of its own through the session extension) and as the two sides of a self-join of one
view. `pytest --exhaustive` runs ten times as many predicates.
"""

from __future__ import annotations

import datetime as dt
import decimal
import random

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from spark_mergetree import MergeTreeTable
from spark_mergetree.spark.filters import FILTER_PUSHDOWN
from spark_mergetree.spark.session import ENABLED_CONF
from tests.budget import scaled
from tests.spark.settings import spark_settings

pytestmark = pytest.mark.spark

PREDICATES = scaled(60, 600)
PER_QUERY = 30  # predicates per UNION ALL query (each branch is a scan with its own plan)
SEED = 20261128

STATEMENT = """CREATE TABLE t (
    id Int64, k Float64, x Nullable(Float64), f Float32, n Nullable(Int32), s Nullable(String),
    d Date, ts DateTime64(6, 'UTC'), m Decimal(12, 2), b Bool,
    INDEX i_x x TYPE minmax GRANULARITY 1,
    INDEX i_f f TYPE minmax GRANULARITY 1,
    INDEX i_n n TYPE set(4) GRANULARITY 1,
    INDEX i_s s TYPE set(4) GRANULARITY 1,
    INDEX i_sb s TYPE bloom_filter GRANULARITY 1,
    INDEX i_st s TYPE tokenbf_v1(256, 2, 0) GRANULARITY 1,
    INDEX i_sn s TYPE ngrambf_v1(2, 256, 2, 0) GRANULARITY 1,
    INDEX i_nb n TYPE bloom_filter GRANULARITY 1,
    INDEX i_m m TYPE minmax GRANULARITY 2,
    INDEX i_ts ts TYPE minmax GRANULARITY 1)
ENGINE = MergeTree PARTITION BY toYYYYMM(d) ORDER BY (k, id)
SETTINGS index_granularity = 4, index_granularity_bytes = 0"""

SPECIAL = [float("nan"), float("inf"), float("-inf"), 0.0, -0.0, 1.5, -2.0, 5.0, 1e300]
WORDS = ["", "a", "ab", "abc", "b", "ba", "z", "Ω", "a%b", "x_y"]


def _rows(first_id: int, count: int, rng: np.random.Generator) -> pa.Table:
    """Rows in runs, so that granules hold only NaN, only NULL, NaN beside numbers, one value, etc."""
    run = np.repeat(np.arange(count // 4 + 1), 4)[:count]

    def pick(values: list, nulls: float = 0.0) -> list:
        chosen = [values[i] for i in rng.integers(0, len(values), count)]
        by_run = [values[r % len(values)] for r in run]  # whole granules of one value, too
        mixed = [a if r % 3 else c for a, c, r in zip(chosen, by_run, run, strict=True)]
        null = rng.random(count) < nulls
        null |= (run % 11 == 0) & (nulls > 0)  # some granules entirely NULL
        return [None if z else v for v, z in zip(mixed, null, strict=True)]

    floats = SPECIAL + [float(v) for v in rng.integers(-10, 10, 12)]
    start = dt.datetime(2024, 1, 30, tzinfo=dt.timezone.utc)
    return pa.table({
        "id": pa.array(np.arange(first_id, first_id + count), pa.int64()),
        "k": pa.array(pick(floats), pa.float64()),
        "x": pa.array(pick(floats, 0.2), pa.float64()),
        "f": pa.array(pick(floats), pa.float32()),
        "n": pa.array(pick(list(range(-3, 9)), 0.2), pa.int32()),
        "s": pa.array(pick(WORDS, 0.2), pa.string()),
        "d": pa.array([dt.date(2024, 1, 29) + dt.timedelta(days=int(v)) for v in rng.integers(0, 6, count)],
                      pa.date32()),
        "ts": pa.array([start + dt.timedelta(seconds=int(v)) for v in rng.integers(-5, 5, count)],
                       pa.timestamp("us", tz="UTC")),
        "m": pa.array([decimal.Decimal(int(v)) / 4 for v in rng.integers(-20, 20, count)], pa.decimal128(12, 2)),
        "b": pa.array(rng.random(count) < 0.5, pa.bool_()),
    })


def _float_literal(value: float, spark_type: str) -> str:
    if np.isnan(value):
        return f"{spark_type}('NaN')"
    if np.isinf(value):
        return f"{spark_type}('{'-' if value < 0 else ''}Infinity')"
    return f"{spark_type}({value!r})"


def _atom(rng: random.Random) -> str:
    name = rng.choice(["k", "x", "x", "f", "n", "n", "s", "s", "d", "ts", "m", "b", "id"])
    column = "{t}" + name  # {t}: where a self-join puts its alias
    op = rng.choice(["=", "<=>", "<", "<=", ">", ">=", "!=", "in", "null", "not null"])
    if op == "null":
        return f"{column} IS NULL"
    if op == "not null":
        return f"{column} IS NOT NULL"
    if name in ("k", "x", "f"):
        spark_type = "float" if name == "f" else "double"
        values = [_float_literal(v, spark_type) for v in rng.sample(SPECIAL, 3)]
    elif name in ("n", "id"):
        values = [str(rng.randint(-4, 10)) for _ in range(3)]
    elif name == "s":
        values = ["'" + w.replace("'", "\\'") + "'" for w in rng.sample(WORDS, 3)]
        if rng.random() < 0.3:
            function = rng.choice(["startswith", "endswith", "contains"])
            return f"{function}({column}, {values[0]})"
        if rng.random() < 0.15:
            return f"{column} LIKE '{rng.choice(['a', 'b', 'x_'])}%'"
    elif name == "d":
        values = [f"date'2024-{rng.choice(['01-29', '01-31', '02-01', '02-03'])}'" for _ in range(3)]
    elif name == "ts":
        values = [f"timestamp'2024-01-30 00:00:{rng.randint(0, 9):02d}Z'" for _ in range(3)]
    elif name == "m":
        values = [f"{decimal.Decimal(rng.randint(-20, 20)) / 4}BD" for _ in range(3)]
    else:
        values = [rng.choice(["true", "false"]) for _ in range(3)]
    if op == "in":
        listed = values[:rng.randint(1, 3)] + (["NULL"] if rng.random() < 0.2 else [])
        return f"{column} IN ({', '.join(listed)})"
    if rng.random() < 0.05:
        return f"{column} {op} NULL"
    return f"{column} {op} {values[0]}"


def _predicate(rng: random.Random) -> str:
    terms = []
    for _ in range(rng.choice([1, 1, 2, 3])):
        atom = _atom(rng)
        terms.append(f"NOT ({atom})" if rng.random() < 0.35 else atom)
    if len(terms) > 1 and rng.random() < 0.2:
        return f"({terms[0]}) OR ({' AND '.join(terms[1:])})"  # an OR is never pushed; its parts are not either
    return " AND ".join(terms)


@pytest.fixture(scope="module")
def views(spark, tmp_path_factory) -> tuple[str, str]:
    from spark_mergetree.expressions.ddl import parse_create

    root = tmp_path_factory.mktemp("semantics")
    table = MergeTreeTable.new(root / "t", parse_create(STATEMENT), {"auto_merge": False})
    table.write_directory()
    rng = np.random.default_rng(SEED)
    for insert in range(3):  # several parts per partition
        table.insert(_rows(insert * 1000, 160, rng))
    assert len(table.parts()) >= 6
    data = table.to_arrow().sort_by("id")
    (root / "parquet").mkdir()
    pq.write_table(data, root / "parquet" / "rows.parquet", row_group_size=16)  # (pandas would make NaN NULL)
    spark.read.format("mergetree").load(str(root / "t")).createOrReplaceTempView("sem_mergetree")
    spark.read.parquet(str(root / "parquet")).createOrReplaceTempView("sem_parquet")
    return "sem_mergetree", "sem_parquet"


PARQUET_EXACT = {"spark.sql.parquet.filterPushdown": "false"}  # Spark's Parquet pushdown drops NaN rows itself


def _union(predicates: list[str], view: str) -> str:
    return " UNION ALL ".join(f"SELECT {i} AS q, id FROM {view} WHERE {p.replace('{t}', '')}"
                              for i, p in enumerate(predicates))


def _by_query(rows) -> dict[int, list[int]]:
    found: dict[int, list[int]] = {}
    for q, row_id in rows:
        found.setdefault(q, []).append(row_id)
    return {q: sorted(ids) for q, ids in found.items()}


@pytest.mark.skipif(not FILTER_PUSHDOWN, reason="PySpark 4.0 pushes no filters to Python data sources")
def test_issue_cases_keep_the_rows_spark_keeps(spark, views) -> None:
    """The cases that once pruned rows: NaN constants, NaN under a minmax index, NOT (v <=> c)."""
    mergetree, parquet = views
    cases = ["x = double('NaN')", "x <=> double('NaN')", "x IN (double('NaN'))", "x >= double('NaN')",
             "x < double('NaN')", "NOT (x >= double('NaN'))", "x > 5", "x >= double('Infinity')",
             "NOT (x <= 5)", "NOT (n <=> 3)", "NOT (s <=> 'a')", "k > 1e300", "k = double('NaN')",
             "NOT (k <= 5)", "f > float(5)", "NOT (f < float(0))"]
    with spark_settings(spark, {ENABLED_CONF: "true"}):
        ours = _by_query(spark.sql(_union(cases, mergetree)).collect())
    with spark_settings(spark, PARQUET_EXACT):
        expected = _by_query(spark.sql(_union(cases, parquet)).collect())
    for i, case in enumerate(cases):
        assert ours.get(i, []) == expected.get(i, []), case
    assert expected.get(cases.index("x = double('NaN')")), "the table holds NaN rows"


@pytest.mark.skipif(not FILTER_PUSHDOWN, reason="PySpark 4.0 pushes no filters to Python data sources")
def test_random_predicates_return_parquets_rows(spark, views) -> None:
    mergetree, parquet = views
    rng = random.Random(SEED)
    predicates = [_predicate(rng) for _ in range(PREDICATES)]
    nonempty = 0
    with spark_settings(spark, {ENABLED_CONF: "true"}):
        for start in range(0, len(predicates), PER_QUERY):
            batch = predicates[start:start + PER_QUERY]
            ours = _by_query(spark.sql(_union(batch, mergetree)).collect())
            with spark_settings(spark, PARQUET_EXACT):
                expected = _by_query(spark.sql(_union(batch, parquet)).collect())
            for i, predicate in enumerate(batch):
                assert ours.get(i, []) == expected.get(i, []), predicate.replace("{t}", "")
            nonempty += len(expected)
    assert nonempty > len(predicates) // 3  # the predicates select rows, not only nothing


@pytest.mark.skipif(not FILTER_PUSHDOWN, reason="PySpark 4.0 pushes no filters to Python data sources")
def test_random_predicates_on_both_sides_of_a_self_join(spark, views) -> None:
    mergetree, parquet = views
    rng = random.Random(SEED + 1)
    pairs = [(_predicate(rng), _predicate(rng)) for _ in range(max(6, PREDICATES // 10))]

    def query(view: str, left: str, right: str) -> str:
        return (f"SELECT a.id, b.id FROM {view} a JOIN {view} b ON a.n <=> b.n AND a.s <=> b.s "
                f"WHERE ({left.replace('{t}', 'a.')}) AND ({right.replace('{t}', 'b.')})")

    with spark_settings(spark, {ENABLED_CONF: "true"}):
        for left, right in pairs:
            ours = sorted(map(tuple, spark.sql(query(mergetree, left, right)).collect()))
            with spark_settings(spark, PARQUET_EXACT):
                expected = sorted(map(tuple, spark.sql(query(parquet, left, right)).collect()))
            assert ours == expected, (left, right)


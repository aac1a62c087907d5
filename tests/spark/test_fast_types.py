"""The session extension's fast path for decimals: a Decimal column of precision <= 18 that no filter
of the scan uses reaches Spark as its unscaled longs and is rebuilt by Catalyst's MakeDecimal.

Every query returns exactly what it returns with the fast path off
(`spark.mergetree.extension.fastTypes=false`) and with the extension off
(`spark.mergetree.extension.enabled=false`, today's path), for each decimal width, NULLs, negative
and extreme values, and for a column a filter uses (read as decimals)."""

from __future__ import annotations

from decimal import Decimal

import pyarrow as pa
import pytest

pytestmark = pytest.mark.spark

COLUMNS = [("id", "Int64"), ("d18", "Decimal(18, 4)"), ("d9", "Nullable(Decimal(9, 2))"),
           ("d0", "Decimal(18, 0)"), ("d38", "Decimal(38, 10)"), ("name", "String")]
QUERIES = [
    lambda df: df,
    lambda df: df.select("d18", "d9"),
    lambda df: df.filter("id BETWEEN 100 AND 250").select("id", "d18", "d0"),
    lambda df: df.filter("d9 > 10").select("id", "d9", "d18"),
    lambda df: df.groupBy((df.id % 7).alias("g")).agg({"d18": "sum", "d9": "max", "d0": "min"}),
    lambda df: df.selectExpr("d18 * 2 AS twice", "cast(d9 AS string) AS text", "d0 + 1 AS next"),
]


def _rows(n: int) -> pa.Table:
    ids = list(range(n))
    big = 10 ** 18 - 1
    d18 = [Decimal(i * 7919 - 500_000).scaleb(-4) for i in ids]
    d18[0], d18[1] = Decimal(big).scaleb(-4), Decimal(-big).scaleb(-4)
    d0 = [Decimal(big) if i % 97 == 0 else Decimal(-i * 1_000_003) for i in ids]
    d9 = [None if i % 5 == 0 else Decimal(i * 13 - 900).scaleb(-2) for i in ids]
    d38 = [Decimal(i).scaleb(-10) for i in ids]
    return pa.table({
        "id": pa.array(ids, pa.int64()), "d18": pa.array(d18, pa.decimal128(18, 4)),
        "d9": pa.array(d9, pa.decimal128(9, 2)), "d0": pa.array(d0, pa.decimal128(18, 0)),
        "d38": pa.array(d38, pa.decimal128(38, 10)), "name": pa.array([str(i) for i in ids])})


def _collect(spark, make, settings: dict[str, str]) -> tuple[list[tuple], str]:
    """The rows and optimized plan of a DataFrame made under `settings` (a DataFrame keeps the plan
    it was first optimized with, so each setting gets its own)."""
    for key, value in settings.items():
        spark.conf.set(key, value)
    try:
        frame = make()
        plan = ""
        jdf = getattr(frame, "_jdf", None)
        if jdf is not None:
            plan = jdf.queryExecution().optimizedPlan().toString()
        return sorted(tuple(row) for row in frame.collect()), plan
    finally:
        for key in settings:
            spark.conf.unset(key)


def test_decimals_read_as_unscaled_longs_return_the_same_rows(spark, tmp_path) -> None:
    from spark_mergetree import MergeTreeTable

    table = MergeTreeTable.create(tmp_path / "t", COLUMNS, "id", settings={"index_granularity": 64,
                                                                           "auto_merge": False})
    data = _rows(3000)
    table.insert(data.slice(0, 1500))
    table.insert(data.slice(1500))
    expected_all = sorted(zip(*(column.to_pylist() for column in data.columns)))
    for number, query in enumerate(QUERIES):
        def make(query=query):  # type: ignore[no-untyped-def]
            return query(spark.read.format("mergetree").load(str(table.path)))

        fast, fast_plan = _collect(spark, make, {})
        slow, slow_plan = _collect(spark, make, {"spark.mergetree.extension.fastTypes": "false"})
        bare, _ = _collect(spark, make, {"spark.mergetree.extension.enabled": "false"})
        assert fast == slow == bare, number
        assert fast, number
        if number == 0:
            assert fast == expected_all
        if fast_plan:  # a classic session shows its plan: the fast path was taken, and only there
            assert "MakeDecimal" in fast_plan, (number, fast_plan)
            assert "MakeDecimal" not in slow_plan, number
            if number == 3:  # d9 is filtered on: it stays a decimal in the scan
                assert "d9" not in fast_plan.split("MakeDecimal")[1].split(")")[0], fast_plan


def test_a_decimal_column_types_stay_what_the_table_holds(spark, tmp_path) -> None:
    """The DataFrame's schema is the table's: the fast path is invisible above the scan."""
    from spark_mergetree import MergeTreeTable

    table = MergeTreeTable.create(tmp_path / "t", COLUMNS, "id", settings={"auto_merge": False})
    table.insert(_rows(50))
    frame = spark.read.format("mergetree").load(str(table.path)).select("d18", "d9", "d0", "d38")
    assert [field.dataType.simpleString() for field in frame.schema.fields] == [
        "decimal(18,4)", "decimal(9,2)", "decimal(18,0)", "decimal(38,10)"]
    assert [row.d18 for row in frame.orderBy("d18").limit(1).collect()] == [Decimal(-(10 ** 18 - 1)).scaleb(-4)]

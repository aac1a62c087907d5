"""Spark ↔ ClickHouse (chdb): Spark reads ClickHouse-written parts, ClickHouse attaches Spark's."""

from __future__ import annotations

import datetime as dt
import decimal
import shutil
from pathlib import Path

import pytest

from spark_mergetree.engine.table import MergeTreeTable
from tests.format.chdb_util import close_session, make_chdb_table, part_dirs

pytestmark = pytest.mark.spark

COLUMNS = """(
    id UInt64, i8 Int8, u16 UInt16, f Float32, d Float64, s String, ls LowCardinality(String),
    ns Nullable(String), day Date, ts DateTime('UTC'), ts3 DateTime64(3, 'UTC'), dec Decimal(18, 4),
    arr Array(Int32), m Map(String, UInt64), t Tuple(a Int64, b String), e Enum8('x' = 1, 'y' = 2),
    u UUID
)"""


def _create(name: str) -> str:
    return (f"CREATE TABLE {name} {COLUMNS} ENGINE = MergeTree PARTITION BY toYYYYMM(day) ORDER BY id "
            "SETTINGS index_granularity = 64")


def _insert(name: str, start: int, count: int) -> str:
    return (
        f"INSERT INTO {name} SELECT number, toInt8(number % 100 - 50), number % 60000, number / 3, number * 1.5, "
        "concat('s', toString(number)), concat('k', toString(number % 5)), "
        "if(number % 3 = 0, NULL, toString(number)), toDate('2024-01-20') + number % 40, "
        "toDateTime('2024-01-01 00:00:00', 'UTC') + number, toDateTime64('2024-01-01 00:00:00', 3, 'UTC') + number / 1000, "
        "toDecimal64(number / 7, 4), range(number % 4), map('a', number, 'b', 1), tuple(number, 'z'), "
        "if(number % 2 = 0, 'x', 'y'), generateUUIDv4() "
        f"FROM numbers({start}, {count})"
    )


def _canonical(session, sql: str) -> list[str]:
    return sorted(session.query(sql, "TSV").bytes().decode().splitlines())


def test_spark_reads_clickhouse_written_table(spark, tmp_path: Path) -> None:
    session, data_dir = make_chdb_table(tmp_path, _create("src"), [_insert("src", 0, 500), _insert("src", 500, 300)])
    df = (spark.read.format("mergetree").option("create_statement", _create("src")).load(str(data_dir)))
    assert df.count() == 800
    got = {r["id"]: r for r in df.collect()}
    expected = _canonical(session, "SELECT id, s, ls, ns, toString(day), toString(dec), arr, e FROM src")
    mine = sorted(
        "\t".join([str(r["id"]), r["s"], r["ls"], "\\N" if r["ns"] is None else r["ns"], str(r["day"]),
                   format(r["dec"], "f").rstrip("0").rstrip(".") if r["dec"] % 1 else str(int(r["dec"])),
                   "[" + ",".join(map(str, r["arr"])) + "]", r["e"]])
        for r in got.values()
    )
    assert mine == expected
    assert float(session.query("SELECT sum(u16) FROM src", "CSV").bytes()) == sum(r["u16"] for r in got.values())
    # A key-range filter through Spark still returns the right rows from ClickHouse's parts.
    assert df.filter("id >= 100 AND id < 110").count() == 10


def test_clickhouse_attaches_spark_written_parts(spark, tmp_path: Path) -> None:
    create = ("CREATE TABLE dst (id Int64, name String, value Float64, day Date) ENGINE = MergeTree "
              "PARTITION BY toYYYYMM(day) ORDER BY id")
    spark_dir = tmp_path / "spark_written"
    MergeTreeTable.create(spark_dir, [("id", "Int64"), ("name", "String"), ("value", "Float64"), ("day", "Date")],
                          order_by="id", partition_by="toYYYYMM(day)")
    df = spark.range(0, 3000, numPartitions=2).selectExpr(
        "id", "concat('n', cast(id as string)) as name", "cast(id as double) / 4 as value",
        "date_add(date'2024-01-25', cast(id % 20 as int)) as day")
    df.write.format("mergetree").mode("append").save(str(spark_dir))

    session, data_dir = make_chdb_table(tmp_path, create)
    visible = {part.name for part in MergeTreeTable.open(spark_dir).parts()}
    assert visible
    for name in visible:
        shutil.copytree(spark_dir / name, data_dir / "detached" / name)
        session.query(f"ALTER TABLE dst ATTACH PART '{name}'")
    check = session.query("CHECK TABLE dst SETTINGS check_query_single_value_result = 1", "CSV")
    assert check.bytes().decode().strip() == "1"
    assert int(session.query("SELECT count() FROM dst", "CSV").bytes()) == 3000
    assert _canonical(session, "SELECT id, name, value, day FROM dst") == sorted(
        f"{r['id']}\t{r['name']}\t{r['value']:g}\t{r['day']}" for r in df.collect())
    assert len(part_dirs(data_dir)) == len(visible)
    close_session()


MODERN = [
    ("ip4", "IPv4", "toIPv4(number * 16909060)", "toUInt32(ip4)"),
    ("ip6", "IPv6", "toIPv6('2001:db8::' || toString(number))", "hex(ip6)"),
    ("bf", "BFloat16", "toBFloat16(number / 3 - 2)", "toFloat32(bf)"),
    ("t", "Time", "toTime(toInt32(number) * 40000 - 3000000)", "toInt32(t)"),
    ("t3", "Nullable(Time64(3))", "if(number % 3 = 0, NULL, toTime64(number * 1.125, 3))", "toDecimal64(t3, 3)"),
    ("p", "Point", "(number / 2, -1.0)", "p.1"),
    ("saf", "SimpleAggregateFunction(sum, UInt64)", "number * 7", "saf"),
    ("agg", "AggregateFunction(avg, Float64)", "arrayReduce('avgState', [number / 4])", "hex(toString(agg))"),
    ("uq", "AggregateFunction(uniqCombined, String)", "arrayReduce('uniqCombinedState', [toString(number), 'x'])",
     "hex(toString(uq))"),
]


def _modern_rows(rows) -> list[str]:
    """Spark rows as ClickHouse prints the `MODERN` check expressions (TSV)."""
    out = []
    for r in rows:
        t3 = "\\N" if r["t3"] is None else format((decimal.Decimal(r["t3"] // dt.timedelta(microseconds=1))
                                                   .scaleb(-6).normalize()), "f")
        out.append("\t".join([str(r["id"]), str(r["ip4"]), r["ip6"].hex().upper(), f"{r['bf']:.10g}",
                              str(int(r["t"].total_seconds())), t3, f"{r['p']['1']:.10g}", str(r["saf"]),
                              bytes(r["agg"]).hex().upper(), bytes(r["uq"]).hex().upper()]))
    return sorted(out)


def test_modern_types_through_spark_both_ways(spark, tmp_path: Path) -> None:
    columns = ", ".join(f"`{n}` {t}" for n, t, _, _ in MODERN)
    create = f"CREATE TABLE src (id UInt64, {columns}) ENGINE = MergeTree ORDER BY id SETTINGS index_granularity = 16"
    check = "SELECT id, " + ", ".join(e for _, _, _, e in MODERN) + " FROM {}"
    exprs = ", ".join(e for _, _, e, _ in MODERN)
    session, data_dir = make_chdb_table(tmp_path, create, [f"INSERT INTO src SELECT number, {exprs} FROM numbers(50)"])
    expected = _canonical(session, check.format("src"))
    close_session()
    df = spark.read.format("mergetree").option("create_statement", create).load(str(data_dir))
    rows = df.collect()
    assert _modern_rows(rows) == expected
    # Spark writes the rows it read into a table of the same types; ClickHouse attaches and checks them.
    ours = tmp_path / "ours"
    MergeTreeTable.create(ours, [("id", "UInt64")] + [(n, t) for n, t, _, _ in MODERN], order_by="id")
    df.write.format("mergetree").mode("append").save(str(ours))
    session, dst_dir = make_chdb_table(tmp_path, create.replace("src", "dst"))
    for part in MergeTreeTable.open(ours).parts():
        shutil.copytree(ours / part.name, dst_dir / "detached" / part.name)
        session.query(f"ALTER TABLE dst ATTACH PART '{part.name}'")
    assert session.query("CHECK TABLE dst SETTINGS check_query_single_value_result = 1", "CSV").bytes().decode().strip() == "1"
    assert _canonical(session, check.format("dst")) == expected
    close_session()

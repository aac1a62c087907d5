"""Dynamic and JSON columns in Spark: read as VARIANT holding the values ClickHouse returns, written
from VARIANT (or JSON text) as values ClickHouse reads back (spark/variant.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

from spark_mergetree.engine.table import MergeTreeTable
from spark_mergetree.format.dynamic import binary_values_text
from tests.format.chdb_util import close_session, make_chdb_table
from tests.format.test_part_interop import _attach_and_check

pytestmark = pytest.mark.spark

COLUMNS = "(id UInt64, d Dynamic, j JSON, nj Nullable(JSON), v Variant(Int64, String, Array(Int64)))"
LONG = "x" * 80  # longer than a short variant string (63 bytes)
# One row per case: (Dynamic, JSON, Nullable(JSON), Variant) as ClickHouse SQL.
ROWS = [
    ("42::Int64", """'{"a":1}'""", "NULL", "7::Int64"),
    ("'hello'", """'{"a":"x","b":{"c":[1,2,3],"d":null}}'""", """'{"k":1.5}'""", "'str'"),
    ("1.5::Float64", """'{"f":0.25,"neg":-3}'""", "NULL", "[1,2]::Array(Int64)"),
    ("[1,2,3]::Array(Int64)", "'{}'", """'{"x":{"y":{"z":"deep"}}}'""", "NULL"),
    ("""'{"o":{"p":[1,"two",null]}}'::JSON""", """'{"arr":[{"q":1},{"q":2}]}'""", "NULL", "-9::Int64"),
    ("NULL", """'{"s":"é"}'""", """'{}'""", "''"),
    (f"'{LONG}'", f"""'{{"long":"{LONG}"}}'""", "NULL", "NULL"),
    ("true", """'{"t":true}'""", "NULL", "5::Int64"),
    ("-1234567890123::Int64", """'{"big":1234567890123}'""", "NULL", "'s'"),
    ("(1, 'a')::Tuple(a Int64, b String)", """'{"n":0}'""", "NULL", "NULL"),
    ("toDate('2024-03-01')", """'{"d":"2024-03-01"}'""", "NULL", "NULL"),
    ("[]::Array(Int64)", """'{"e":[]}'""", "NULL", "NULL"),
    ("0.1::Float32", """'{"m":0.1}'""", "NULL", "NULL"),
]
JSON_OUT = "SETTINGS output_format_json_quote_64bit_integers = 0, output_format_json_quote_decimals = 0"


def _create(name: str) -> str:
    return f"CREATE TABLE {name} {COLUMNS} ENGINE = MergeTree ORDER BY id SETTINGS index_granularity = 4"


def _inserts(name: str) -> list[str]:
    """Three inserts, three parts (each its own Dynamic structure); INSERT ... SELECT keeps a NULL
    Dynamic NULL (a VALUES list of several rows stores it as 0)."""
    selects = [f"SELECT {i}, {d}, {j}, {nj}, {v}" for i, (d, j, nj, v) in enumerate(ROWS)]
    return [f"INSERT INTO {name} " + " UNION ALL ".join(selects[k::3]) for k in range(3)]


def _clickhouse_rows(sess, table: str) -> list[dict]:
    """Each row as ClickHouse's JSON output gives it (64-bit integers unquoted)."""
    text = sess.query(f"SELECT id, d, j, nj FROM {table} ORDER BY id {JSON_OUT}", "JSONEachRow").bytes().decode()
    return [json.loads(line) for line in text.splitlines()]


def _spark_rows(df) -> list[dict]:
    rows = df.selectExpr("id", "to_json(d) AS d", "to_json(j) AS j", "to_json(nj) AS nj").orderBy("id").collect()
    return [{"id": r["id"], **{c: None if r[c] is None else json.loads(r[c]) for c in ("d", "j", "nj")}} for r in rows]


def _read(spark, data_dir: Path, statement: str | None = None):
    reader = spark.read.format("mergetree")
    return (reader.option("create_statement", statement) if statement else reader).load(str(data_dir))


def test_spark_reads_dynamic_and_json_as_variant_with_clickhouse_values(spark, tmp_path: Path) -> None:
    from pyspark.sql.types import VariantType

    sess, data_dir = make_chdb_table(tmp_path, _create("src"), _inserts("src"))
    try:
        df = _read(spark, data_dir, _create("src"))
        assert df.schema["d"].dataType == VariantType()
        assert df.schema["j"].dataType == VariantType()
        assert df.schema["nj"].dataType == VariantType() and df.schema["nj"].nullable
        expected = _clickhouse_rows(sess, "src")
        got = _spark_rows(df)
        assert got == expected
        # Types the values came with: integers and floats are numbers, strings strings, paths reachable.
        picked = df.selectExpr(
            "id", "try_variant_get(d, '$', 'long') AS l", "try_variant_get(d, '$', 'string') AS s",
            "try_variant_get(d, '$.o.p[1]', 'string') AS p", "try_variant_get(j, '$.b.c[2]', 'int') AS c",
            "schema_of_variant(d) AS t", "d IS NULL AS null").orderBy("id").collect()
        assert picked[0]["l"] == 42 and picked[0]["t"] == "BIGINT"
        assert picked[1]["s"] == "hello" and picked[1]["t"] == "STRING" and picked[1]["c"] == 3
        assert picked[2]["t"] == "DOUBLE" and picked[4]["p"] == "two"
        assert [r["null"] for r in picked] == [i == 5 for i in range(len(ROWS))] and picked[6]["s"] == LONG
        assert picked[7]["t"] == "BOOLEAN" and picked[8]["l"] == -1234567890123
        # The Variant column stays a struct of one field per type.
        variants = [r["v"] for r in df.select("id", "v").orderBy("id").collect()]
        assert variants[0].asDict() == {"Array(Int64)": None, "Int64": 7, "String": None}
        assert variants[3] is None
    finally:
        close_session()


def test_python_api_gives_dynamic_binary_and_json_text(tmp_path: Path) -> None:
    """MergeTreeTable.to_arrow keeps the lossless forms: a Dynamic value as its type's binary
    encoding then the value (what its inserts take), a JSON object as its text; the Dynamic's JSON
    text (`binary_values_text`) is what ClickHouse's JSON output prints."""
    sess, data_dir = make_chdb_table(tmp_path, _create("src"), _inserts("src"))
    try:
        table = MergeTreeTable.open(data_dir, create_statement=_create("src")).to_arrow().sort_by("id")
        assert table.schema.field("d").type == pa.binary() and table.schema.field("j").type == pa.string()
        expected = _clickhouse_rows(sess, "src")
        texts = binary_values_text(table.column("d").combine_chunks(), "d", "d").to_pylist()
        assert [None if t is None else json.loads(t) for t in texts] == [row["d"] for row in expected]
        assert [json.loads(t) for t in table.column("j").to_pylist()] == [row["j"] for row in expected]
    finally:
        close_session()


def _written_back(sess, tmp_path: Path, spark_dir: Path, name: str) -> None:
    sess.query(_create(name))
    back_dir = Path(sess.query(f"SELECT data_paths[1] FROM system.tables WHERE name = '{name}'",
                               "TabSeparatedRaw").bytes().decode().strip())
    _attach_and_check(sess, name, back_dir, MergeTreeTable.open(spark_dir))


def test_variant_written_by_spark_reads_back_in_clickhouse(spark, tmp_path: Path) -> None:
    sess, data_dir = make_chdb_table(tmp_path, _create("src"), _inserts("src"))
    try:
        df = _read(spark, data_dir, _create("src"))
        spark_dir = tmp_path / "spark_written"
        MergeTreeTable.create(spark_dir, [("id", "UInt64"), ("d", "Dynamic"), ("j", "JSON"), ("nj", "Nullable(JSON)"),
                                          ("v", "Variant(Int64, String, Array(Int64))")],
                              order_by="id", settings={"index_granularity": 4})
        df.write.format("mergetree").mode("append").save(str(spark_dir))
        _written_back(sess, tmp_path, spark_dir, "back")
        assert _clickhouse_rows(sess, "back") == _clickhouse_rows(sess, "src")
        # Dynamic values get the types ClickHouse's insert of their JSON text gives them.
        types = sess.query("SELECT dynamicType(d) FROM back ORDER BY id", "TabSeparatedRaw").bytes().decode().split("\n")
        assert types[:3] == ["Int64", "String", "Float64"]
        assert _spark_rows(_read(spark, spark_dir)) == _clickhouse_rows(sess, "src")
    finally:
        close_session()


def test_spark_variants_and_json_text_write_new_and_existing_tables(spark, tmp_path: Path) -> None:
    """Variants made in Spark (parse_json) create a Dynamic column; JSON text (a string column)
    writes a Dynamic and a JSON column; ClickHouse reads the values back."""
    sess, _ = make_chdb_table(tmp_path, _create("src"))
    try:
        texts = ['{"a":1,"b":[true,null]}', '"text"', '3', '2.5', '[1,"x"]', None]
        source = spark.createDataFrame([(i, t) for i, t in enumerate(texts)], "id long, t string")
        made = tmp_path / "made"
        (source.selectExpr("id", "parse_json(t) AS d").write.format("mergetree").option("order_by", "id")
         .mode("append").save(str(made)))
        assert dict(MergeTreeTable.open(made).metadata.columns)["d"] == "Dynamic"
        back = _read(spark, made).orderBy("id").selectExpr("to_json(d) AS d").collect()
        assert [r["d"] for r in back] == ['{"a":1,"b":[true,null]}', '"text"', "3", "2.5", '[1,"x"]', None]

        spark_dir = tmp_path / "text_written"
        MergeTreeTable.create(spark_dir, [("id", "UInt64"), ("d", "Dynamic"), ("j", "JSON"), ("nj", "Nullable(JSON)"),
                                          ("v", "Variant(Int64, String, Array(Int64))")],
                              order_by="id", settings={"index_granularity": 4})
        (source.selectExpr("id", "t AS d", """coalesce(if(t LIKE '{%', t, NULL), '{"w":0}') AS j""", "CAST(NULL AS STRING) AS nj")
         .write.format("mergetree").mode("append").save(str(spark_dir)))
        _written_back(sess, tmp_path, spark_dir, "back_text")
        got = _clickhouse_rows(sess, "back_text")
        assert [row["d"] for row in got] == [None if t is None else json.loads(t) for t in texts]
        assert [row["j"] for row in got] == [{"a": 1, "b": [True, None]}] + [{"w": 0}] * 5
    finally:
        close_session()

"""Dynamic and JSON values inside Array, Map and Tuple in Spark: read as array<variant>,
map<string, variant>, struct<..., variant> holding the values ClickHouse returns, written back from
the same types (or JSON text) as values ClickHouse reads back (spark/types.py, spark/variant.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from spark_mergetree.engine.table import MergeTreeTable
from tests.format.chdb_util import close_session, make_chdb_table
from tests.format.test_part_interop import _attach_and_check

pytestmark = pytest.mark.spark

TYPES = [("id", "UInt64"), ("ad", "Array(Dynamic)"), ("mj", "Map(String, JSON)"),
         ("td", "Tuple(a Int32, d Dynamic)"), ("anj", "Array(Nullable(JSON))")]
NESTED = [name for name, _ in TYPES[1:]]
LONG = "y" * 70  # longer than a short variant string


def _d(*values: str) -> str:
    return "[" + ", ".join(f"CAST({v}, 'Dynamic')" for v in values) + "]"


# One row per case: (Array(Dynamic), Map(String, JSON), Tuple(a Int32, d Dynamic), Array(Nullable(JSON))).
ROWS = [
    (_d("1::Int64", "'x'", "1.5::Float64", "NULL", "[1,2]::Array(Int64)", """'{"a":{"b":1}}'::JSON"""),
     """map('k', '{"a":1}', 'e', '{}')""", "(1, CAST(42::Int64, 'Dynamic'))", """['{"a":[1,2]}', NULL]"""),
    ("[]::Array(Int64)", "map()", "(2, CAST(NULL, 'Dynamic'))", "[]"),
    (_d("'str'", "true", "-7::Int64", "0.25::Float64"), """map('n', '{"x":{"y":[1,"two",null]}}')""",
     "(3, CAST([1.5, 2.5]::Array(Float64), 'Dynamic'))", "[NULL]"),
    (_d("NULL", "[]::Array(Int64)", f"'{LONG}'"), """map('a', '{"s":"é"}', 'b', '{"f":0.1,"big":1234567890123}')""",
     """(-4, CAST('{"o":{"p":1}}'::JSON, 'Dynamic'))""", """['{}', '{"k":"v","n":null}']"""),
    (_d("-1234567890123::Int64", "'2024-03-01'"), "map('z', '{}')", "(5, CAST('', 'Dynamic'))",
     """['{"arr":[{"q":1},{"q":2}]}']"""),
]
JSON_OUT = "SETTINGS output_format_json_quote_64bit_integers = 0, output_format_json_quote_decimals = 0"


def _create(name: str) -> str:
    columns = ", ".join(f"{c} {t}" for c, t in TYPES)
    return f"CREATE TABLE {name} ({columns}) ENGINE = MergeTree ORDER BY id SETTINGS index_granularity = 2"


def _inserts(name: str) -> list[str]:
    """Two inserts, two parts (each with its own Dynamic structures)."""
    selects = ["SELECT " + ", ".join([str(i)] + [f"CAST({v}, '{t}')" for v, (_, t) in zip(row, TYPES[1:], strict=True)])
               for i, row in enumerate(ROWS)]
    return [f"INSERT INTO {name} " + " UNION ALL ".join(selects[k::2]) for k in range(2)]


def _clickhouse_rows(sess, table: str) -> list[dict]:
    text = sess.query(f"SELECT * FROM {table} ORDER BY id {JSON_OUT}", "JSONEachRow").bytes().decode()
    return [json.loads(line) for line in text.splitlines()]


def _spark_rows(df) -> list[dict]:
    keep_nulls = "map('ignoreNullFields', 'false')"
    rows = df.selectExpr("id", *(f"to_json({c}, {keep_nulls}) AS {c}" for c in NESTED)).orderBy("id").collect()
    return [{"id": r["id"], **{c: json.loads(r[c]) for c in NESTED}} for r in rows]


def _read(spark, data_dir: Path, statement: str | None = None):
    reader = spark.read.format("mergetree")
    return (reader.option("create_statement", statement) if statement else reader).load(str(data_dir))


def _back_in_clickhouse(sess, spark_dir: Path, name: str) -> list[dict]:
    """Our parts attached to a ClickHouse table of the same columns; CHECK TABLE passes; its rows."""
    sess.query(_create(name))
    back_dir = Path(sess.query(f"SELECT data_paths[1] FROM system.tables WHERE name = '{name}'",
                               "TabSeparatedRaw").bytes().decode().strip())
    _attach_and_check(sess, name, back_dir, MergeTreeTable.open(spark_dir))
    return _clickhouse_rows(sess, name)


def test_spark_reads_nested_dynamic_and_json_as_variants(spark, tmp_path: Path) -> None:
    from pyspark.sql.types import ArrayType, MapType, StringType, StructType, VariantType

    sess, data_dir = make_chdb_table(tmp_path, _create("src"), _inserts("src"))
    try:
        df = _read(spark, data_dir, _create("src"))
        assert df.schema["ad"].dataType == ArrayType(VariantType(), True)
        assert df.schema["mj"].dataType == MapType(StringType(), VariantType(), False)
        td = df.schema["td"].dataType
        assert isinstance(td, StructType) and td["d"].dataType == VariantType() and td["a"].dataType.simpleString() == "int"
        assert df.schema["anj"].dataType == ArrayType(VariantType(), True)
        expected = _clickhouse_rows(sess, "src")
        assert expected[0]["ad"] == [1, "x", 1.5, None, [1, 2], {"a": {"b": 1}}]  # (the rows hold what they should)
        assert _spark_rows(df) == expected
        # The values keep their types: paths and elements are reachable.
        picked = df.selectExpr("id", "schema_of_variant(try_element_at(ad, 1)) AS t0", "try_variant_get(try_element_at(ad, 1), '$', 'long') AS l",
                               "try_variant_get(mj['n'], '$.x.y[1]', 'string') AS y",
                               "try_variant_get(td.d, '$.o.p', 'int') AS p", "try_element_at(anj, 1) IS NULL AND size(anj) > 0 AS null0",
                               "size(ad) AS n").orderBy("id").collect()
        assert picked[0]["t0"] == "BIGINT" and picked[0]["l"] == 1 and picked[2]["t0"] == "STRING"
        assert picked[2]["y"] == "two" and picked[3]["p"] == 1
        assert [r["null0"] for r in picked] == [False, False, True, False, False] and picked[1]["n"] == 0
    finally:
        close_session()


def test_nested_variants_written_by_spark_read_back_in_clickhouse(spark, tmp_path: Path) -> None:
    sess, data_dir = make_chdb_table(tmp_path, _create("src"), _inserts("src"))
    try:
        df = _read(spark, data_dir, _create("src"))
        spark_dir = tmp_path / "spark_written"
        MergeTreeTable.create(spark_dir, TYPES, order_by="id", settings={"index_granularity": 2})
        df.write.format("mergetree").mode("append").save(str(spark_dir))
        expected = _clickhouse_rows(sess, "src")
        assert _back_in_clickhouse(sess, spark_dir, "back") == expected
        # Dynamic values are typed as ClickHouse's insert of their JSON text types them.
        types = sess.query("SELECT arrayMap(x -> dynamicType(x), ad), dynamicType(td.d) FROM back WHERE id = 0",
                           "TabSeparatedRaw").bytes().decode().strip()
        assert types == "['Int64','String','Float64','None','Array(Nullable(Int64))','JSON']\tInt64"
        assert _spark_rows(_read(spark, spark_dir)) == expected
    finally:
        close_session()


def test_new_table_from_nested_variants_and_json_text(spark, tmp_path: Path) -> None:
    """Variants made in Spark inside arrays, maps and structs create Array(Dynamic), Map(String,
    Dynamic), Tuple(..., Dynamic) columns; JSON text (strings) writes the nested Dynamic and JSON
    values of an existing table."""
    sess, _ = make_chdb_table(tmp_path, _create("src"))
    try:
        made = tmp_path / "made"
        source = spark.sql("""SELECT 1 AS id, array(parse_json('1'), parse_json('{"b":"x"}'), NULL) AS ad,
                                     map('k', parse_json('[1,2.5]')) AS mj, named_struct('a', 7, 'd', parse_json('"s"')) AS td""")
        source.write.format("mergetree").option("order_by", "id").mode("append").save(str(made))
        assert dict(MergeTreeTable.open(made).metadata.columns) == {
            "id": "Int32", "ad": "Array(Dynamic)", "mj": "Map(String, Dynamic)", "td": "Tuple(a Int32, d Dynamic)"}
        back = _read(spark, made).selectExpr("to_json(ad) AS ad", "to_json(mj) AS mj", "to_json(td) AS td").collect()
        assert back[0].asDict() == {"ad": '[1,{"b":"x"},null]', "mj": '{"k":[1,2.5]}', "td": '{"a":7,"d":"s"}'}

        spark_dir = tmp_path / "text_written"
        MergeTreeTable.create(spark_dir, TYPES, order_by="id", settings={"index_granularity": 2})
        texts = spark.sql("""SELECT 0 AS id, array('1', '"x"', '[1,{"a":2}]', NULL) AS ad,
                                    map('k', '{"a":[1,2]}', 'n', NULL) AS mj, named_struct('a', 1, 'd', '2.5') AS td,
                                    array('{"q":"r"}', NULL) AS anj""")
        texts.write.format("mergetree").mode("append").save(str(spark_dir))
        got = _back_in_clickhouse(sess, spark_dir, "back_text")
        assert got == [{"id": 0, "ad": [1, "x", [1, {"a": 2}], None], "mj": {"k": {"a": [1, 2]}, "n": {}},
                        "td": {"a": 1, "d": 2.5}, "anj": [{"q": "r"}, None]}]
    finally:
        close_session()


def test_conform_batch_converts_nested_values_of_sliced_batches() -> None:
    """Without a session: a sliced batch (its lists and maps offset into their children, a NULL map)
    becomes Spark's nested variants, and to_table_arrow turns them back into the table's form."""
    import pyarrow as pa
    from pyspark.sql.types import StructField, StructType

    from spark_mergetree.spark.types import (
        conform_batch,
        field_spark_type,
        mark_objects,
        spark_arrow_schema,
        to_table_arrow,
    )
    from spark_mergetree.spark.variant import texts_to_dynamic, variant_to_texts

    types = [("ad", "Array(Dynamic)"), ("mj", "Map(String, Nullable(JSON))")]
    table = mark_objects(pa.schema([pa.field("ad", pa.list_(pa.binary())),
                                    pa.field("mj", pa.map_(pa.string(), pa.string()), nullable=True)]), types)
    dynamic = texts_to_dynamic(pa.array(["0", '"a"', "1.5", None, '{"k":[1]}', "[true]"]), "ad")
    ad = pa.ListArray.from_arrays(pa.array([0, 1, 3, 3, 6], pa.int32()), dynamic)
    mj = pa.MapArray.from_arrays(pa.array([0, 1, 1, 2, 3], pa.int32()), pa.array(["a", "b", "c"]),
                                 pa.array(['{"x":1}', None, '{"y":"z"}']), mask=pa.array([False, True, False, False]))
    batch = pa.RecordBatch.from_arrays([ad, mj], schema=table).slice(1)
    spark = StructType([StructField(f.name, field_spark_type(f), f.nullable) for f in table])
    target = spark_arrow_schema(spark)
    got = conform_batch(batch, target, table)
    texts = [None if v is None else json.loads(v)
             for v in variant_to_texts(got.column("ad").flatten(), "ad").to_pylist()]
    assert got.column("ad").to_pylist()[1] == [] and texts == ['a', 1.5, None, {"k": [1]}, [True]]
    assert got.column("mj").null_count == 1 and [None if m is None else len(m) for m in got.column("mj").to_pylist()] == [None, 1, 1]
    maps = got.column("mj")
    first, last = maps.offsets[0].as_py(), maps.offsets[-1].as_py()
    assert variant_to_texts(maps.items.slice(first, last - first), "mj").to_pylist() == [None, '{"y":"z"}']
    back = to_table_arrow(got, table)
    assert back.column("ad").to_pylist() == batch.column("ad").to_pylist()
    assert back.column("mj").to_pylist() == [None, [("b", None)], [("c", '{"y":"z"}')]]

"""JSON paths ClickHouse types as `Array(JSON(...))` (arrays of objects) or `Array(Dynamic)` (arrays
mixing kinds), against chdb: parts ClickHouse wrote (Wide and Compact, dynamic paths, shared data,
types beyond max_dynamic_types) read as `toString(j)` prints them, later granules alone too; the
binary encodings of the JSON and Dynamic types and of their values as ClickHouse's RowBinary gives
them.

A path's Dynamic stores such values as a variant whose own Dynamic and JSON streams live under the
variant's stream base (`j.items.Array%28JSON%28...%29%29.id.Int64`): format_spec/types.md (*JSON*).
"""

from __future__ import annotations

import pyarrow as pa
import pytest

from spark_mergetree import MergeTreeTable
from spark_mergetree.format.dynamic import binary_values_text, dynamic_values, split_dynamic
from spark_mergetree.format.type_codes import decode_type, encode_type
from spark_mergetree.format.types import Dynamic, parse_type
from spark_mergetree.format.values import Cursor
from tests.format.chdb_util import close_session, make_chdb_table, open_session
from tests.format.test_variant_dynamic_json import PART_KINDS, _sql_text, _statement

ROWS = 200
# Documents whose paths ClickHouse types as Array(JSON(...)), Array(Array(JSON(...))), Array(Dynamic)
# and Array(Array(Dynamic)), besides plain ones; objects inside those arrays hold arrays again.
DOCS = [
    '{"items":[{"id":<i>},{"id":<j>,"n":"x<i>"}],"k":<i>}',
    '{"m":[<i>,"a<i>"],"items":[]}',
    '{"m":[[1,"a"],[<i>]],"o":{"p":[{"q":<f>}]}}',
    '{"items":[{"id":<i>,"n":"y","z":[1,"b",null]}],"m":[null,{"a":<i>},[true]]}',
    '{"m":[1,"2020-01-01",[2,"x"]],"nn":[[{"a":1}],[{"b":"<i>"}]]}',
    "{}",
    '{"items":[{"id":<f>,"deep":{"e":[<i>,<j>]}}],"m":[<f>,"s",true]}',
]


def _doc(i: int) -> str:
    text = DOCS[i % len(DOCS)]
    return text.replace("<i>", str(i)).replace("<j>", str(i * 7)).replace("<f>", repr(i / 8))


JSON_TYPES = {
    "plain": "JSON",
    "shared": "JSON(max_dynamic_paths=2, max_dynamic_types=2)",
    "narrow": "JSON(max_dynamic_paths=1, max_dynamic_types=1)",
}


def _source(tmp_path, kind: str, json_type: str):
    values = ", ".join(f"({i}, {_sql_text(_doc(i))})" for i in range(ROWS))
    return make_chdb_table(
        tmp_path, f"CREATE TABLE src (id UInt64, j {json_type}) ENGINE = MergeTree ORDER BY id "
                  f"SETTINGS index_granularity = 16, {PART_KINDS[kind]}",
        [f"INSERT INTO src VALUES {values}"])


def _select(sess, table: str) -> list[tuple[str, str, str]]:
    rows = sess.query(f"SELECT id, toString(j), toString(JSONAllPathsWithTypes(j)) FROM {table} ORDER BY id",
                      "TabSeparatedRaw").bytes().decode()
    return [tuple(line.split("\t")) for line in rows.splitlines()]  # type: ignore[misc]


@pytest.mark.parametrize("json_type", list(JSON_TYPES))
@pytest.mark.parametrize("kind", list(PART_KINDS))
def test_array_json_and_array_dynamic_clickhouse_wrote_read_as_its_text(tmp_path, kind, json_type):
    sess, data_dir = _source(tmp_path, kind, JSON_TYPES[json_type])
    try:
        expected = _select(sess, "src")
        types = " ".join(t for _, _, t in expected)
        assert "Array(JSON(" in types and "Array(Dynamic)" in types and "Array(Array(" in types
        if json_type != "plain":
            shared = sess.query("SELECT countIf(length(JSONSharedDataPaths(j)) > 0) FROM src", "TabSeparatedRaw")
            assert int(shared.bytes()) > 0
        table = MergeTreeTable.open(data_dir, create_statement=_statement(sess))
        ours = table.to_arrow().sort_by("id")
        assert [(str(i), t) for i, t in zip(ours.column("id").to_pylist(), ours.column("j").to_pylist(), strict=True)] \
            == [row[:2] for row in expected]
        reader = table.reader(table.parts()[0].name)
        later = reader.read(["id", "j"], ranges=[(3, reader.n_granules)])
        first = int(later.column("id")[0].as_py())
        assert later.column("j").to_pylist() == [text for _, text, _ in expected[first:]]
    finally:
        close_session()


def test_binary_encodings_of_json_and_dynamic_types_are_clickhouses(tmp_path):
    """The type encodings (in a Dynamic value) of JSON with every kind of argument and of Dynamic, and
    values of Array(JSON(...)) / Array(Dynamic) in RowBinary: decoded, re-encoded to the same bytes,
    and printed as ClickHouse prints them."""
    sess = open_session(tmp_path)
    try:
        for name in ("JSON", "JSON(max_dynamic_types=16, max_dynamic_paths=256)", "JSON(max_dynamic_paths=3)",
                     "JSON(max_dynamic_types=16, max_dynamic_paths=256, a UInt8, SKIP b, SKIP REGEXP '^c')",
                     "Dynamic(max_types=5)", "Array(Dynamic)"):
            value = "CAST('{}' AS " + name + ")" if name.startswith("JSON") else "CAST([1] AS Array(Dynamic))" \
                if name.startswith("Array") else "CAST(1 AS Dynamic(max_types=5))::Dynamic(max_types=6)"
            raw = sess.query(f"SELECT CAST({value} AS Dynamic)", "RowBinary").bytes()
            if name.startswith("Dynamic"):
                continue  # a Dynamic inside a Dynamic keeps its value's own type
            found = decode_type(Cursor("t", raw))
            assert found.to_clickhouse() == parse_type(name).to_clickhouse() == name
            assert raw.startswith(encode_type(found))
        assert encode_type(Dynamic(5)) == b"\x2b\x05" and encode_type(Dynamic()) == b"\x2b\x20"
        docs = [_doc(i) for i in range(len(DOCS))]
        paths = ["items", "m", "o.p", "nn"]
        for doc in docs:
            for path in paths:
                raw = sess.query(f"SELECT {_sql_text(doc)}::JSON.`{path}`", "RowBinary").bytes()
                text = sess.query(f"SELECT toJSONString({_sql_text(doc)}::JSON.`{path}`)", "TabSeparatedRaw")
                split = split_dynamic(Dynamic(), pa.array([raw], pa.binary()), "c")
                assert binary_values_text(pa.array([raw], pa.binary()), "c", "c").to_pylist() == \
                    [None if raw == b"\x00" else text.bytes().decode().strip()], (doc, path)
                if raw != b"\x00":  # the value written back from its Arrow form: the same bytes
                    assert dynamic_values(split.structure, split.struct).to_pylist() == [raw]
    finally:
        close_session()

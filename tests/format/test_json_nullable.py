"""`Nullable(JSON)` against chdb: a `.null` map (a UInt8 per row, 1 for NULL) beside the JSON's own
streams, a NULL row being an object without paths (`{}`, typed paths at their defaults) there; in a
Compact granule the JSON's structure prefixes come first, then `.null`, then the JSON's data.
ClickHouse's parts (inserted and merged) read as it prints them, NULL as NULL; JSON text with NULLs
written by us gives its bytes in every data file and mark; our merges keep NULLs and every value's
type. Also inside Array, Map and Tuple, and what stays refused (format_spec/types.md, *JSON*).
"""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from spark_mergetree import MergeTreeTable
from spark_mergetree.errors import UnsupportedError
from spark_mergetree.format.types import parse_type, to_arrow_field
from tests.format.chdb_util import close_session, make_chdb_table
from tests.format.test_json_arrays import CORPORA
from tests.format.test_part_interop import _attach_and_check
from tests.format.test_variant_dynamic_json import (
    PART_KINDS,
    _data_dir,
    _same_json_bytes,
    _sql_text,
    _statement,
)

# Dynamic paths, shared data (beyond 3 paths), a typed path of objects, a dynamic path named `null`
# (its streams `j.null.<type>` beside the NULL map `j.null`); every third row NULL.
JSON_TYPE = "Nullable(JSON(max_dynamic_paths=3, max_dynamic_types=2, k UInt32, items Array(JSON(max_dynamic_paths=1))))"
TEXTS = ['{"null":1,"a":{"null":"x"}}'] + [None if i % 3 == 1 else text for i, text in enumerate(CORPORA["arrays"][:119])]
SELECT = "SELECT id, toString(j), isNull(j), toString(JSONAllPathsWithTypes(j)) FROM {} ORDER BY id"


def _create(table: str, kind: str, columns: str = f"j {JSON_TYPE}") -> str:
    return (f"CREATE TABLE {table} (id UInt64, {columns}) ENGINE = MergeTree ORDER BY id "
            f"SETTINGS index_granularity = 16, {PART_KINDS[kind]}")


def _ours(tmp_path, name: str, kind: str, columns: list[tuple[str, str]]) -> MergeTreeTable:
    settings = dict(s.split(" = ") for s in PART_KINDS[kind].split(", "))
    return MergeTreeTable.create(tmp_path / name, [("id", "UInt64"), *columns], order_by="id",
                                 settings={"index_granularity": 16, "auto_merge": False, **settings})


def _texts(table: MergeTreeTable) -> list[tuple[int, str | None]]:
    return [(r["id"], r["j"]) for r in table.to_arrow().sort_by("id").to_pylist()]


@pytest.mark.parametrize("kind", list(PART_KINDS))
def test_nullable_json_both_ways_with_clickhouses_bytes(tmp_path, kind):
    """ClickHouse's part read as `toString(j)` prints it (NULL as NULL), later granules alone too;
    the same text with NULLs written by us in one insert gives ClickHouse's bytes; ClickHouse's rows
    in their stored form, inserted in two parts and merged by us, attach with CHECK TABLE passing
    and give the same objects, NULLs and path types, also once ClickHouse merges them with more
    rows; we read that merge (its `advanced` shared data) as ClickHouse prints it."""
    values = ", ".join(f"({i}, {'NULL' if t is None else _sql_text(t)})" for i, t in enumerate(TEXTS))
    sess, data_dir = make_chdb_table(tmp_path, _create("src", kind), [f"INSERT INTO src VALUES {values}"])
    try:
        expected = sess.query(SELECT.format("src"), "TabSeparatedRaw").bytes()
        rows = [line.split("\t") for line in expected.decode().splitlines()]
        assert {r[2] for r in rows} == {"0", "1"} and "'null':'Int64'" in rows[0][3]
        shared = sess.query("SELECT countIf(length(JSONSharedDataPaths(j)) > 0) FROM src", "TabSeparatedRaw")
        assert int(shared.bytes()) > 0
        theirs = MergeTreeTable.open(data_dir, create_statement=_statement(sess))
        assert theirs.metadata.arrow_schema.field("j") == pa.field("j", pa.string(), nullable=True)
        assert _texts(theirs) == [(int(r[0]), None if r[2] == "1" else r[1]) for r in rows]
        reader = theirs.reader(theirs.parts()[0].name)
        later = reader.read(["id", "j"], ranges=[(3, reader.n_granules)])
        assert list(zip(later.column("id").to_pylist(), later.column("j").to_pylist(), strict=True)) == \
            _texts(theirs)[48:]

        one = _ours(tmp_path, "one", kind, [("j", JSON_TYPE)])
        one.insert(pa.table({"id": pa.array(range(len(TEXTS)), pa.uint64()), "j": pa.array(TEXTS, pa.string())}))
        _same_json_bytes(theirs, one)

        stored = reader.read(stored_json=True).sort_by("id")
        assert stored.column("j").null_count == TEXTS.count(None)
        two = _ours(tmp_path, "two", kind, [("j", JSON_TYPE)])
        two.insert(stored.slice(0, 50))
        two.insert(stored.slice(50))
        assert two.optimize(final=True) and len(two.parts()) == 1
        assert _texts(two) == _texts(theirs)
        sess.query(_create("back", kind))
        _attach_and_check(sess, "back", _data_dir(sess, "back"), two)
        assert sess.query(SELECT.format("back"), "TabSeparatedRaw").bytes() == expected
        sess.query("INSERT INTO back SELECT id + 1000, j FROM src")
        sess.query("OPTIMIZE TABLE back FINAL")
        assert sess.query(SELECT.format("back") + " LIMIT 120", "TabSeparatedRaw").bytes() == expected
        merged = MergeTreeTable.open(_data_dir(sess, "back"), create_statement=_statement(sess, "back"))
        assert merged.parts()[0].level > 0
        part = merged.reader(merged.parts()[0].name)
        assert any(".object_shared_data.copy." in n for n in (part.compact_layout[1] if part.is_compact else part.files))
        again = sess.query("SELECT id, toString(j), isNull(j) FROM back ORDER BY id", "TabSeparatedRaw").bytes()
        assert _texts(merged) == [(int(r[0]), None if r[2] == "1" else r[1])
                                  for r in (line.split("\t") for line in again.decode().splitlines())]
    finally:
        close_session()


NESTED = [("a", "Array(Nullable(JSON(max_dynamic_paths=1)))",
           "arrayMap(x -> if(x % 2 = 1, NULL, concat('{\"x\":', toString(x), ',\"y\":\"s\"}')), range(number % 4))"),
          ("m", "Map(String, Nullable(JSON))", "map('k', if(number % 3 = 0, NULL, concat('{\"q\":', toString(number), '}')))"),
          ("t", "Tuple(x Nullable(JSON(u UInt8)), y UInt8)",
           "tuple(if(number % 5 = 0, NULL, concat('{\"v\":[', toString(number), ']}')), 1)")]
NESTED_SELECT = ("SELECT id, arrayMap(x -> toString(x), a), arrayMap(x -> isNull(x), a), "
                 "mapApply((k, v) -> (k, toString(v)), m), toString(t.x), isNull(t.x) FROM {} ORDER BY id")


@pytest.mark.parametrize("kind", list(PART_KINDS))
def test_nullable_json_inside_array_map_tuple_both_ways(tmp_path, kind):
    """Nullable(JSON) as an Array's elements, a Map's values and a Tuple's element: read as
    ClickHouse prints them, written with its bytes, merged by us and attached with CHECK TABLE."""
    columns = ", ".join(f"{n} {t}" for n, t, _ in NESTED)
    sess, data_dir = make_chdb_table(tmp_path, _create("src", kind, columns),
                                     [f"INSERT INTO src SELECT number, {', '.join(e for _, _, e in NESTED)} FROM numbers(100)"])
    try:
        expected = sess.query(NESTED_SELECT.format("src"), "JSONCompactEachRow").bytes()
        texts = sess.query("SELECT arrayMap(x -> toString(x), a), mapApply((k, v) -> (k, toString(v)), m), "
                           "toString(t.x) FROM src ORDER BY id", "JSONCompactEachRow").bytes().decode()
        theirs = MergeTreeTable.open(data_dir, create_statement=_statement(sess))
        rows = theirs.to_arrow().sort_by("id")
        assert [[r["a"], dict(r["m"]), r["t"]["x"]] for r in rows.to_pylist()] == \
            [json.loads(line) for line in texts.splitlines()]
        assert None in rows.column("a").combine_chunks().flatten().to_pylist()
        one = _ours(tmp_path, "one", kind, [(n, t) for n, t, _ in NESTED])
        one.insert(rows)
        _same_json_bytes(theirs, one)
        stored = theirs.reader(theirs.parts()[0].name).read(stored_json=True).sort_by("id")
        two = _ours(tmp_path, "two", kind, [(n, t) for n, t, _ in NESTED])
        two.insert(stored.slice(0, 40))
        two.insert(stored.slice(40))
        assert two.optimize(final=True)
        assert two.to_arrow().sort_by("id").to_pylist() == rows.to_pylist()
        sess.query(_create("back", kind, columns))
        _attach_and_check(sess, "back", _data_dir(sess, "back"), two)
        assert sess.query(NESTED_SELECT.format("back"), "JSONCompactEachRow").bytes() == expected
    finally:
        close_session()


ADDED = [("k", "Nullable(JSON)"), ("l", "Array(JSON)"), ("m", "Tuple(x JSON(u UInt8), y Nullable(JSON))")]


@pytest.mark.parametrize("kind", list(PART_KINDS))
def test_columns_with_json_added_after_a_part_merge_with_their_defaults(tmp_path, kind):
    """A column holding JSON added after a part was written: our merge writes that part's rows with
    the column's default (NULL for Nullable(JSON), `{}` for a JSON, typed paths at their defaults),
    and ClickHouse attaches the result with CHECK TABLE passing and selects what ClickHouse's own
    table, altered alike, selects."""
    columns = [("j", "Nullable(JSON(a UInt8))")]
    first = "INSERT INTO {} VALUES (1, '{{\"a\":1,\"b\":\"x\"}}'), (2, NULL)"
    later = "INSERT INTO {} VALUES (4, NULL, '{{\"z\":1}}', ['{{\"q\":1}}'], ('{{\"w\":2}}', NULL))"
    ours = _ours(tmp_path, "ours", kind, columns)
    ours.insert(pa.table({"id": pa.array([1, 2], pa.uint64()), "j": ['{"a":1,"b":"x"}', None]}))
    ours.add_columns(ADDED)
    ours.insert(pa.table({"id": pa.array([4], pa.uint64()), "j": pa.array([None], pa.string()), "k": ['{"z":1}'],
                          "l": [['{"q":1}']], "m": [{"x": '{"w":2}', "y": None}]}))
    assert ours.optimize(final=True) and len(ours.parts()) == 1
    sess, _ = make_chdb_table(tmp_path, _create("src", kind, "j Nullable(JSON(a UInt8))"), [first.format("src")])
    try:
        sess.query("ALTER TABLE src " + ", ".join(f"ADD COLUMN {n} {t}" for n, t in ADDED))
        sess.query(later.format("src"))
        sess.query("OPTIMIZE TABLE src FINAL")
        sess.query(_create("back", kind, ", ".join(f"{n} {t}" for n, t in columns + ADDED)))
        _attach_and_check(sess, "back", _data_dir(sess, "back"), ours)
        select = "SELECT * FROM {} ORDER BY id"
        assert sess.query(select.format("back"), "TabSeparatedRaw").bytes() == \
            sess.query(select.format("src"), "TabSeparatedRaw").bytes()
    finally:
        close_session()


def test_what_clickhouse_refuses_or_cannot_read_back_stays_refused(tmp_path):
    """LowCardinality(Nullable(JSON)), Nullable(JSON) inside Variant or as a Map key are refused by
    ClickHouse and by us, naming the column and the type; a typed path `null` inside Nullable(JSON)
    shares the NULL map's stream `j.null`: ClickHouse writes such a part and fails to read it, we
    refuse the type. A NULL in a JSON column that is not Nullable is refused too."""
    assert to_arrow_field("j", parse_type("Nullable(JSON)")) == pa.field("j", pa.string(), nullable=True)
    for text in ("LowCardinality(Nullable(JSON))", "Variant(Nullable(JSON), UInt8)", "Map(Nullable(JSON), UInt8)",
                 "Nullable(JSON(`null` UInt8))"):
        with pytest.raises((UnsupportedError, ValueError), match=r"column 'j'.*(JSON|Variant)"):
            MergeTreeTable.create(tmp_path / "t", [("id", "UInt64"), ("j", text)], order_by="id")
    sess, _ = make_chdb_table(tmp_path, _create("src", "Wide", "j Nullable(JSON(`null` UInt8))"),
                              ["""INSERT INTO src VALUES (1, '{"null":1}'), (2, NULL)"""])
    try:
        with pytest.raises(RuntimeError, match=r"j\.null"):
            sess.query("SELECT j FROM src", "TabSeparatedRaw")
        for text in ("LowCardinality(Nullable(JSON))", "Variant(Nullable(JSON), UInt8)", "Map(Nullable(JSON), UInt8)"):
            with pytest.raises(RuntimeError):
                sess.query(_create("other", "Wide", f"j {text}"))
    finally:
        close_session()
    plain = MergeTreeTable.create(tmp_path / "plain", [("id", "UInt64"), ("j", "JSON")], order_by="id")
    with pytest.raises(Exception, match=r"'j'.*NULL"):
        plain.insert(pa.table({"id": pa.array([1], pa.uint64()), "j": pa.array([None], pa.string())}))

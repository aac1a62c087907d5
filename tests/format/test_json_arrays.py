"""JSON paths ClickHouse types as `Array(JSON(...))` (arrays of objects) or `Array(Dynamic)` (arrays
mixing kinds), against chdb: parts ClickHouse wrote (Wide and Compact, dynamic paths, shared data,
types beyond max_dynamic_types) read as `toString(j)` prints them, later granules alone too; the
binary encodings of the JSON and Dynamic types and of their values as ClickHouse's RowBinary gives
them.

A path's Dynamic stores such values as a variant whose own Dynamic and JSON streams live under the
variant's stream base (`j.items.Array%28JSON%28...%29%29.id.Int64`): format_spec/types.md (*JSON*).
"""

from __future__ import annotations

import json
import random
import re

import pyarrow as pa
import pytest

from spark_mergetree import MergeTreeTable
from spark_mergetree.errors import UnsupportedError
from spark_mergetree.format.dynamic import binary_values_text, dynamic_values, split_dynamic
from spark_mergetree.format.type_codes import decode_type, encode_type
from spark_mergetree.format.types import Dynamic, parse_type
from spark_mergetree.format.values import Cursor
from tests.format.chdb_util import close_session, make_chdb_table, open_session
from tests.format.test_part_interop import _attach_and_check
from tests.format.test_variant_dynamic_json import (
    PART_KINDS,
    _data_dir,
    _json_source,
    _same_json_bytes,
    _sql_text,
    _statement,
)

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


# Documents whose later values meet types their path (or the Dynamic inside an Array(Dynamic), or a
# path of the objects in an Array(JSON(...))) holds already: a String takes later dates, a DateTime
# dates and (while no String is held) times with a fraction, Array(Nullable(Float64)) integers,
# Array(Dynamic) any array, Array(JSON(...)) `[]` and `[null]`; objects two arrays deep (their
# streams' names are too long for file names: a Wide part names those files by a hash).
ABSORBING = [
    '{"s":"x","d":"2020-01-01 10:00:00","d9":"2020-01-01 10:00:00.5","a":[2.5],"u":[18446744073709551615],'
    '"m":[1,"a","2020-01-01"],"o":[{"a":"x"},{"a":"2020-01-01"}]}',
    '{"s":"2020-01-01","d":"2020-01-02","d9":"2020-01-02","a":[1,null],"u":[1],"m":[2.5],"o":[],"e":[[1]]}',
    '{"s":"2020-01-01 10:00:00","d":"2020-01-01 10:00:00.25","d9":"2020-01-01 10:00:01","a":[],'
    '"m":["2020-01-03",[1,{"b":2}],{"c":[{"d":1}]}],"o":[null],"e":[null,[null]]}',
    '{"s":1,"d":"abc","a":[true],"m":[],"o":[{"a":2020,"b":[1,"x"]}],"e":[[]]}',
    '{"k":[{"a":1}],"l":[1,[2]]}', '{"k":[1,"a"],"l":[[1],["a"]]}', '{"k":[{"z":true}],"l":[[1,"a"],[2]]}',
    '{"t":"2020-01-01"}', '{"t":"2020-01-01 10:00:00"}', '{"t":"x"}', '{"t":"2020-01-02"}',
    '{"n":[[1,"a"]],"p":[{"q":[{"r":1}]}]}', '{"n":[[2]],"p":[{"q":[]}]}',
    '{"n":[null,[{"x":1}]],"p":[{"q":[{"r":"s"},{"r":2}]}]}',
]
# Arrays of objects and NULLs (Array(Nullable(JSON(...))), also inside arrays, in objects in such
# arrays and in an Array(Dynamic)), meeting held Array(JSON(...)) and Array(Nullable(JSON(...))).
NULLS = [
    '{"a":[{"x":1},null,{"x":2}],"d":[{"x":1}]}', '{"a":[null,{"b":"s"}],"d":[{"x":1},null],"e":[{"y":[null,{"z":1}]}]}',
    '{"a":5,"e":[{"y":[{"z":"s"}]}]}', '{"a":[{"x":[1,"a"]},null],"f":[[null],[{"y":1}]]}',
    '{"c":[1,[null,{"z":1}]],"f":[[{"x":1}],[null,{"y":1}]],"g":[null,{"a":{"b":[null,{"c":1}]}}]}',
    '{"a":[null],"d":[],"g":[{"a":{"b":[]}},null]}', '{"a":[{"x":2}],"h":[null,{"i":[1,"x"]},{"j":true}]}',
]
CORPORA = {"arrays": [_doc(i) for i in range(ROWS)], "absorbing": ABSORBING * 3, "nulls": NULLS * 5}


JSON_TYPES = {
    "plain": "JSON",
    "shared": "JSON(max_dynamic_paths=2, max_dynamic_types=2)",
    "narrow": "JSON(max_dynamic_paths=1, max_dynamic_types=1)",
    "typed": "JSON(max_dynamic_paths=3, items Array(JSON(max_dynamic_paths=1)))",
}


def _source(tmp_path, kind: str, json_type: str, texts: list[str] | None = None):
    return _json_source(tmp_path, json_type, kind, CORPORA["arrays"] if texts is None else texts, granularity=16)


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


@pytest.mark.parametrize("json_type", list(JSON_TYPES))
@pytest.mark.parametrize("kind", list(PART_KINDS))
def test_array_json_and_array_dynamic_kept_by_our_writes_and_merges(tmp_path, kind, json_type):
    """ClickHouse's rows read in their stored form (every value with its type) and written by us:
    one insert of all rows gives ClickHouse's bytes in every data file and mark; two inserts merged
    by us attach in ClickHouse, pass CHECK TABLE and give every object and path type again, also
    after ClickHouse merges them once more."""
    jt = JSON_TYPES[json_type]
    sess, data_dir = _source(tmp_path, kind, jt)
    try:
        expected = _select(sess, "src")
        theirs = MergeTreeTable.open(data_dir, create_statement=_statement(sess))
        stored = theirs.reader(theirs.parts()[0].name).read(stored_json=True).sort_by("id")
        one = _our_table(tmp_path / "one", [("id", "UInt64"), ("j", jt)], kind)
        one.insert(stored)
        _same_json_bytes(theirs, one)
        two = _our_table(tmp_path / "two", [("id", "UInt64"), ("j", jt)], kind)
        two.insert(stored.slice(0, 90))
        two.insert(stored.slice(90))
        assert two.optimize(final=True) and len(two.parts()) == 1
        assert {(two.path / p.name / "data.bin").exists() for p in two.parts()} == {kind == "Compact"}
        assert [(str(r["id"]), r["j"]) for r in two.to_arrow().sort_by("id").to_pylist()] == [r[:2] for r in expected]
        sess.query(f"CREATE TABLE back (id UInt64, j {jt}) ENGINE = MergeTree ORDER BY id "
                   f"SETTINGS index_granularity = 16, {PART_KINDS[kind]}")
        _attach_and_check(sess, "back", _data_dir(sess, "back"), two)
        assert _select(sess, "back") == expected
        sess.query("INSERT INTO back SELECT * FROM src WHERE id < 20")
        sess.query("OPTIMIZE TABLE back FINAL")
        again = _select(sess, "back")
        assert [r for r in again if int(r[0]) >= 20] == expected[20:]
    finally:
        close_session()


@pytest.mark.parametrize("corpus", list(CORPORA))
@pytest.mark.parametrize("json_type", list(JSON_TYPES))
@pytest.mark.parametrize("kind", list(PART_KINDS))
def test_text_with_array_json_and_array_dynamic_written_as_clickhouse_stores_it(tmp_path, kind, json_type, corpus):
    """The same JSON text inserted into ClickHouse and written by us: one insert gives ClickHouse's
    bytes in every data file and mark (the inferred types, which value went into which type, each
    nested Dynamic's and JSON's streams); two inserts attach, pass CHECK TABLE and give every object
    and path type again, also once merged by us and by ClickHouse; we read ClickHouse's part too."""
    jt = JSON_TYPES[json_type]
    texts = CORPORA[corpus]
    sess, data_dir = _source(tmp_path, kind, jt, texts)
    try:
        expected = _select(sess, "src")
        types = " ".join(t for _, _, t in expected)
        assert "Array(JSON(" in types and "Array(Dynamic)" in types
        theirs = MergeTreeTable.open(data_dir, create_statement=_statement(sess))
        assert [(str(r["id"]), r["j"]) for r in theirs.to_arrow().sort_by("id").to_pylist()] == [r[:2] for r in expected]
        rows = pa.table({"id": pa.array(range(len(texts)), pa.uint64()), "j": texts})
        settings = dict(s.split(" = ") for s in PART_KINDS[kind].split(", "))

        def ours(name: str) -> MergeTreeTable:
            return MergeTreeTable.create(tmp_path / name, [("id", "UInt64"), ("j", jt)], order_by="id",
                                         settings={"index_granularity": 16, "auto_merge": False, **settings})
        one = ours("one")
        one.insert(rows)
        _same_json_bytes(theirs, one)
        # Two inserts: each part's Dynamics are filled on their own (a value may get another type
        # than in one insert), as ClickHouse's two inserts of the same rows show.
        half = len(texts) // 2
        sess.query(f"CREATE TABLE src2 (id UInt64, j {jt}) ENGINE = MergeTree ORDER BY id "
                   f"SETTINGS index_granularity = 16, {PART_KINDS[kind]}")
        for begin, end in ((0, half), (half, len(texts))):
            sess.query("INSERT INTO src2 VALUES " + ", ".join(f"({i}, {_sql_text(texts[i])})" for i in range(begin, end)))
        expected2 = _select(sess, "src2")
        two = ours("two")
        two.insert(rows.slice(0, half))
        two.insert(rows.slice(half))
        sess.query(f"CREATE TABLE back (id UInt64, j {jt}) ENGINE = MergeTree ORDER BY id "
                   f"SETTINGS index_granularity = 16, {PART_KINDS[kind]}")
        _attach_and_check(sess, "back", _data_dir(sess, "back"), two)
        assert _select(sess, "back") == expected2
        sess.query("OPTIMIZE TABLE back FINAL")
        assert _select(sess, "back") == expected2
        assert two.optimize(final=True) and len(two.parts()) == 1
        assert [(str(r["id"]), r["j"]) for r in two.to_arrow().sort_by("id").to_pylist()] == [r[:2] for r in expected2]
        sess.query(f"CREATE TABLE merged (id UInt64, j {jt}) ENGINE = MergeTree ORDER BY id "
                   f"SETTINGS index_granularity = 16, {PART_KINDS[kind]}")
        _attach_and_check(sess, "merged", _data_dir(sess, "merged"), two)
        assert _select(sess, "merged") == expected2
    finally:
        close_session()


def test_streaming_merge_of_array_json_and_array_dynamic_is_the_in_memory_merge(tmp_path, monkeypatch):
    """The streaming merge (in blocks, to spill files) writes the in-memory merge's bytes for JSON
    columns whose paths hold Array(JSON(...)) and Array(Dynamic) values."""
    from spark_mergetree.engine import merge as merging
    from spark_mergetree.engine import merge_stream
    monkeypatch.setattr(merge_stream, "READ_BLOCK_ROWS", 20)  # many blocks per part
    texts = CORPORA["arrays"] + CORPORA["absorbing"]
    rows = pa.table({"id": pa.array(range(len(texts)), pa.uint64()), "j": texts})
    ours = MergeTreeTable.create(tmp_path / "ours", [("id", "UInt64"), ("j", JSON_TYPES["shared"])], order_by="id",
                                 settings={"index_granularity": 16, "auto_merge": False, "min_bytes_for_wide_part": 0})
    ours.insert(rows.filter(pa.array([i % 2 == 0 for i in range(len(texts))])))
    ours.insert(rows.filter(pa.array([i % 2 == 1 for i in range(len(texts))])))
    before = ours.to_arrow().sort_by("id").column("j").to_pylist()
    readers = [ours.reader(p.name) for p in ours.parts()]
    whole = merging.merge_parts(readers, ours.metadata)
    with merging.merged_part(readers, ours.metadata) as streamed:
        assert any(isinstance(data, memoryview) for data in streamed.files.values())  # the streaming path
        assert {n: bytes(d) for n, d in streamed.files.items()} == {n: bytes(d) for n, d in whole.files.items()}
    assert ours.optimize(final=True)
    assert ours.to_arrow().sort_by("id").column("j").to_pylist() == before
    # (the documents' own text, where no value's type shows in it: `o` is an object in some rows,
    # an array of objects in others)
    assert [json.loads(t) for t in before][:3] == [json.loads(t) for t in texts[:3]]


def test_arrays_of_objects_and_nulls_are_array_nullable_json_read_as_clickhouse_prints_them(tmp_path):
    """An array of objects and NULLs is ClickHouse's Array(Nullable(JSON(...))) (a NULL stays `null`,
    its object `{}` in the JSON's streams beside a `.null` map): read from ClickHouse's part as a
    dynamic path and in the shared data, the types as ClickHouse gives them."""
    texts = ['{"o":1}', '{"m":[{"a":1},null]}', '{"m":[null,{"b":"s"}],"n":[[null],[{"c":[{"d":1},null]}]]}']
    for json_type in ("JSON", "JSON(max_dynamic_paths=1)"):
        sess, data_dir = _source(tmp_path / json_type[:6], "Compact", json_type, texts)
        try:
            expected = _select(sess, "src")
            assert expected[1][1] == '{"m":[{"a":1},null]}'
            assert "Array(Nullable(JSON(max_dynamic_types=16, max_dynamic_paths=" in expected[1][2]
            assert "Array(Array(Nullable(JSON(" in expected[2][2]
            table = MergeTreeTable.open(data_dir, create_statement=_statement(sess))
            assert [(str(r["id"]), r["j"]) for r in table.to_arrow().sort_by("id").to_pylist()] == \
                [r[:2] for r in expected]
        finally:
            close_session()


@pytest.mark.parametrize("kind", list(PART_KINDS))
def test_a_path_holding_values_in_some_rows_and_objects_in_others_reads_as_clickhouse_prints_it(tmp_path, kind):
    texts = ['{"o":1}', '{"o":{"p":[{"q":1}]}}', '{"o":[{"p":2}]}', '{"o":{"p":"x","r":{"s":true}}}', "{}"]
    sess, data_dir = _source(tmp_path, kind, "JSON", texts)
    try:
        table = MergeTreeTable.open(data_dir, create_statement=_statement(sess))
        assert [(str(r["id"]), r["j"]) for r in table.to_arrow().sort_by("id").to_pylist()] == \
            [r[:2] for r in _select(sess, "src")]
    finally:
        close_session()


@pytest.mark.parametrize("kind", list(PART_KINDS))
def test_dynamic_columns_holding_array_json_and_array_dynamic_values_both_ways(tmp_path, kind):
    """A Dynamic and an Array(Dynamic) column whose values are of types Array(JSON(...)), Array(Dynamic),
    Array(Nullable(JSON(...))) and JSON: ClickHouse's part read (values in their binary form, also after our merge), written by
    us in one insert with ClickHouse's bytes, and in two inserts merged by us attached by ClickHouse
    with CHECK TABLE passing and SELECT returning the same rows."""
    doc = ("multiIf(number % 4 = 0, '{\"m\":[{\"x\":1},{\"y\":\"s\"}],\"n\":[1,\"a\"]}', number % 4 = 1, "
           "'{\"m\":[1,[2,\"b\"]],\"n\":{\"q\":1}}', number % 4 = 2, "
           "'{\"m\":[{\"x\":2},null],\"p\":[null,{\"y\":[1,\"a\"]}]}', '{\"m\":5}')::JSON")
    columns = [("id", "UInt64"), ("d", "Dynamic"), ("a", "Array(Dynamic)")]
    create = (f"CREATE TABLE {{}} (id UInt64, d Dynamic, a Array(Dynamic)) ENGINE = MergeTree ORDER BY id "
              f"SETTINGS index_granularity = 16, {PART_KINDS[kind]}")
    sess, data_dir = make_chdb_table(
        tmp_path, create.format("src"),
        [f"INSERT INTO src SELECT number, j.m, [j.m, j.n, j.p] FROM (SELECT number, {doc} AS j FROM numbers(100))"])
    try:
        select = "SELECT id, d, dynamicType(d), a, arrayMap(x -> dynamicType(x), a) FROM {} ORDER BY id"
        expected = sess.query(select.format("src"), "TabSeparatedRaw").bytes()
        assert b"Array(JSON(max_dynamic_types=16, max_dynamic_paths=256))" in expected and b"Array(Dynamic)" in expected
        assert b"Array(Nullable(JSON(max_dynamic_types=16, max_dynamic_paths=256)))" in expected
        theirs = MergeTreeTable.open(data_dir, create_statement=_statement(sess))
        rows = theirs.to_arrow().sort_by("id")
        raw = sess.query("SELECT d FROM src ORDER BY id", "RowBinary").bytes()
        assert b"".join(b"\x00" if v is None else v for v in rows.column("d").to_pylist()) == raw
        _written_and_merged_as_clickhouse(sess, tmp_path, theirs, rows, columns, kind, create, select, expected)
    finally:
        close_session()


def _our_table(path, columns, kind: str) -> MergeTreeTable:
    """A table of ours for ClickHouse's rows: granules of 16 rows, parts of `kind`, no background merges."""
    settings = dict(s.split(" = ") for s in PART_KINDS[kind].split(", "))
    return MergeTreeTable.create(path, columns, order_by="id",
                                 settings={"index_granularity": 16, "auto_merge": False, **settings})


def _written_and_merged_as_clickhouse(sess, tmp_path, theirs, rows, columns, kind, create, select, expected):
    """ClickHouse's rows written by us in one insert give its bytes; written in two and merged by us,
    chdb attaches the part (CHECK TABLE) and selects what it selected from its own."""
    one = _our_table(tmp_path / "one", columns, kind)
    one.insert(rows)
    _same_json_bytes(theirs, one)
    two = _our_table(tmp_path / "two", columns, kind)
    two.insert(rows.slice(0, 50))
    two.insert(rows.slice(50))
    assert two.optimize(final=True)
    assert two.to_arrow().sort_by("id").to_pylist() == rows.to_pylist()
    sess.query(create.format("back"))
    _attach_and_check(sess, "back", _data_dir(sess, "back"), two)
    assert sess.query(select.format("back"), "TabSeparatedRaw").bytes() == expected


def _random_documents(seed: int, count: int) -> list[str]:
    """Documents of random nesting: numbers (negative, beyond Int64), Bools, strings that read as
    dates and times or not, NULLs, arrays of all of these and of objects, objects in objects."""
    rng = random.Random(seed)
    keys = ["a", "b", "c", "d", "e"]
    scalars = [lambda: rng.randint(-5, 5), lambda: rng.randint(2**63, 2**63 + 5), lambda: rng.choice([1.5, -0.25, 2.0]),
               lambda: rng.choice([True, False]), lambda: None,
               lambda: rng.choice(["x", "yy", f"2020-01-0{rng.randint(1, 9)}", f"2021-02-03 04:05:0{rng.randint(0, 9)}",
                                   f"2021-02-03 04:05:06.{rng.randint(1, 9)}", "10:00:00", "123"])]

    def value(depth: int) -> object:
        r = rng.random()
        if depth > 2 or r < 0.5:
            return rng.choice(scalars)()
        if r < 0.8:
            return [value(depth + 1) for _ in range(rng.randint(0, 3))]
        return obj(depth + 1)

    def obj(depth: int) -> dict:
        return {k: value(depth) for k in rng.sample(keys, rng.randint(0, 3))}
    return [json.dumps(obj(0)) for _ in range(count)]


# (seeds 14, 99 and 105 gave other types than ClickHouse's before numbers beyond Int64 unified with
# Float64 and types a failed attempt leaves in nested Dynamics were kept; seeds 0..199 of the
# "plain", "shared" and "narrow" types were compared with ClickHouse outside this suite)
@pytest.mark.parametrize(("seed", "kind", "json_type"), [(22, "Wide", "plain"), (25, "Compact", "shared"),
                                                         (21, "Compact", "narrow"), (14, "Wide", "plain"),
                                                         (99, "Compact", "plain"), (105, "Wide", "shared")])
def test_random_documents_written_as_clickhouse_types_them(tmp_path, seed, kind, json_type):
    """Random documents: the ones this writer types (it refuses, naming the row, those whose types it
    does not derive) inserted by us and into ClickHouse give the same objects and path types; we
    read ClickHouse's part as it prints it."""
    jt = JSON_TYPES[json_type]
    texts = _random_documents(seed, 200)
    settings = dict(s.split(" = ") for s in PART_KINDS[kind].split(", "))
    attempt = 0
    while True:
        attempt += 1
        ours = MergeTreeTable.create(tmp_path / f"ours{attempt}", [("id", "UInt64"), ("j", jt)], order_by="id",
                                     settings={"index_granularity": 16, "auto_merge": False, **settings})
        try:
            ours.insert(pa.table({"id": pa.array(range(len(texts)), pa.uint64()), "j": texts}))
            break
        except UnsupportedError as exc:
            found = re.search(r"row (\d+)", str(exc))
            assert found is not None, exc
            texts.pop(int(found.group(1)))
            assert ours.parts() == []
    assert len(texts) > 150
    sess, data_dir = _source(tmp_path, kind, jt, texts)
    try:
        expected = _select(sess, "src")
        assert any("Array(Dynamic)" in t for _, _, t in expected) and any("Array(JSON(" in t for _, _, t in expected)
        sess.query(f"CREATE TABLE back (id UInt64, j {jt}) ENGINE = MergeTree ORDER BY id "
                   f"SETTINGS index_granularity = 16, {PART_KINDS[kind]}")
        _attach_and_check(sess, "back", _data_dir(sess, "back"), ours)
        assert _select(sess, "back") == expected
        theirs = MergeTreeTable.open(data_dir, create_statement=_statement(sess))
        assert [(str(r["id"]), r["j"]) for r in theirs.to_arrow().sort_by("id").to_pylist()] == [r[:2] for r in expected]
    finally:
        close_session()


def test_nulls_inside_arrays_unified_around_a_dynamic_are_empty_arrays(tmp_path):
    """A NULL where an array of an Array(Array(Dynamic)) value stands is stored as an empty array at
    every level above the Dynamic (ClickHouse prints `[]`), not refused and not lost."""
    texts = ['{"d":[null,null,[null,["2020-01-02",5]]]}', '{"d":[[1,"a"],null]}', '{"d":[null,[null]]}']
    ours = MergeTreeTable.create(tmp_path / "ours", [("id", "UInt64"), ("j", "JSON")], order_by="id",
                                 settings={"auto_merge": False})
    ours.insert(pa.table({"id": pa.array(range(len(texts)), pa.uint64()), "j": texts}))
    sess, _ = _source(tmp_path, "Wide", "JSON", texts)
    try:
        expected = _select(sess, "src")
        assert expected[0][1] == '{"d":[[],[],[[],["2020-01-02",5]]]}'
        sess.query(f"CREATE TABLE back (id UInt64, j JSON) ENGINE = MergeTree ORDER BY id SETTINGS {PART_KINDS['Compact']}")
        _attach_and_check(sess, "back", _data_dir(sess, "back"), ours)
        assert _select(sess, "back") == expected
    finally:
        close_session()


@pytest.mark.parametrize("kind", list(PART_KINDS))
def test_dynamic_values_of_json_types_with_typed_paths_both_ways(tmp_path, kind):
    """Dynamic values of JSON types with typed paths (`JSON(a UInt32, z Nullable(String))`, alone and
    in an Array, a typed path holding an Array): their binary form (typed paths first, each value in
    its type's binary format) read from ClickHouse's part and printed as ClickHouse prints it; one
    insert of the rows written with ClickHouse's bytes; two inserts merged by us attached with CHECK
    TABLE passing and the same rows and types."""
    expr = ("multiIf(number % 5 = 0, [concat('{\"b\":', toString(number), '}')::JSON(a UInt32, z Nullable(String))]"
            "::Dynamic, number % 5 = 1, '{\"z\":\"q\",\"a\":3,\"b\":[1,\"x\"]}'::JSON(z Nullable(String), a UInt32)::Dynamic,"
            " number % 5 = 2, '{\"k\":{\"m\":[1,2]},\"n\":1.5}'::JSON(`k.m` Array(UInt8), max_dynamic_paths=1)::Dynamic,"
            " number % 5 = 3, concat('{\"u\":', toString(number), ',\"v\":[{\"w\":1}]}')::JSON(u UInt8)::Dynamic,"
            " NULL::Dynamic)")
    columns = [("id", "UInt64"), ("d", "Dynamic"), ("a", "Array(Dynamic)")]
    create = (f"CREATE TABLE {{}} (id UInt64, d Dynamic, a Array(Dynamic)) ENGINE = MergeTree ORDER BY id "
              f"SETTINGS index_granularity = 16, {PART_KINDS[kind]}")
    sess, data_dir = make_chdb_table(tmp_path, create.format("src"),
                                     [f"INSERT INTO src SELECT number, {expr} AS x, [x, 1::Dynamic] FROM numbers(100)"])
    try:
        select = "SELECT id, d, dynamicType(d), a, arrayMap(x -> dynamicType(x), a) FROM {} ORDER BY id"
        expected = sess.query(select.format("src"), "TabSeparatedRaw").bytes()
        assert b"JSON(a UInt32, z Nullable(String))" in expected and b"JSON(u UInt8)" in expected
        theirs = MergeTreeTable.open(data_dir, create_statement=_statement(sess))
        rows = theirs.to_arrow().sort_by("id")
        texts = sess.query("SELECT toJSONString(d) FROM src ORDER BY id", "TabSeparatedRaw").bytes().decode().splitlines()
        ours = binary_values_text(rows.column("d").combine_chunks(), "d", "d").to_pylist()
        assert [t for t, o in zip(texts, ours, strict=True) if o is not None] == [o for o in ours if o is not None]
        # (with one typed path the value's bytes are ClickHouse's; with two, ClickHouse lists them
        # in an order of its own hash table, which differs between the part's structure and its export)
        raw = sess.query("SELECT d FROM src WHERE id % 5 IN (2, 3) ORDER BY id", "RowBinary").bytes()
        assert b"".join(v for i, v in enumerate(rows.column("d").to_pylist()) if i % 5 in (2, 3)) == raw
        _written_and_merged_as_clickhouse(sess, tmp_path, theirs, rows, columns, kind, create, select, expected)
    finally:
        close_session()


@pytest.mark.parametrize("kind", list(PART_KINDS))
def test_types_a_failed_attempt_leaves_in_nested_dynamics_are_clickhouses(tmp_path, kind):
    """A held Array(Array(Dynamic)) offered `[["yy"],2]` parses `["yy"]` into its inner Dynamic before
    `2` fails: ClickHouse keeps the String type there (not the value), which takes a later
    `"2021-02-03 04:05:06.4"` as a String. Types (and a JSON's paths) left so that never get a value
    (`h`: Array(Nullable(Int64)), and a JSON whose path `d` holds a Bool) are listed in the part all
    the same. Our writer fills them the same way: the same objects, path types and inner types
    (unifying numbers beyond Int64 with Float64 too), and ClickHouse's bytes in every file."""
    texts = ['{"e":[[1,[2]]]}', '{"e":[["yy"],2]}', '{"e":[["2021-02-03 04:05:06.4"]]}',
             '{"f":[[-3,9223372036854775808],[2.0]],"g":[[[-1,9223372036854775808]],[[2.5]]]}',
             '{"h":[[1,"a"]]}', '{"h":[[[3],{"d":true}],2]}', '{"h":[["b"]]}']
    settings = dict(s.split(" = ") for s in PART_KINDS[kind].split(", "))
    ours = MergeTreeTable.create(tmp_path / "ours", [("id", "UInt64"), ("j", "JSON")], order_by="id",
                                 settings={"index_granularity": 16, "auto_merge": False, **settings})
    ours.insert(pa.table({"id": pa.array(range(len(texts)), pa.uint64()), "j": texts}))
    sess, data_dir = _source(tmp_path, kind, "JSON", texts)
    try:
        expected = _select(sess, "src")
        assert expected[2][1] == '{"e":[["2021-02-03 04:05:06.4"]]}'
        assert expected[3][1] == '{"f":[[-3,9223372036854776000],[2]],"g":[[[-1,9223372036854776000]],[[2.5]]]}'
        _same_json_bytes(MergeTreeTable.open(data_dir, create_statement=_statement(sess)), ours)
        assert [(str(r["id"]), r["j"]) for r in ours.to_arrow().sort_by("id").to_pylist()] == [r[:2] for r in expected]
        sess.query(f"CREATE TABLE back (id UInt64, j JSON) ENGINE = MergeTree ORDER BY id SETTINGS {PART_KINDS[kind]}")
        _attach_and_check(sess, "back", _data_dir(sess, "back"), ours)
        assert _select(sess, "back") == expected
        inner = ("SELECT id, toString(arrayMap(x -> toString(arrayMap(y -> dynamicType(y), x)), "
                 "dynamicElement(j.e, 'Array(Array(Dynamic))'))) FROM {} ORDER BY id")
        assert sess.query(inner.format("back"), "TabSeparatedRaw").bytes() == \
            sess.query(inner.format("src"), "TabSeparatedRaw").bytes()
    finally:
        close_session()

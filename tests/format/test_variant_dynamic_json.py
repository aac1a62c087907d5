"""Variant columns against chdb: parts ClickHouse writes (Wide and Compact, partitioned or not, several
granules, NULLs, every variant populated, granules holding one variant only) read as SELECT returns
them; our parts of the same rows are attached by ClickHouse, pass CHECK TABLE and SELECT returns them.

A Variant reads as a struct with one nullable field per variant type (named by the type): the
expected struct is built from ClickHouse's own `variantType(v)` and `variantElement(v, 'T')`.
"""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from spark_mergetree import MergeTreeTable
from spark_mergetree.errors import FormatError, SchemaMismatchError, UnsupportedError
from spark_mergetree.format.compression import decompress_all
from spark_mergetree.format.dynamic import binary_values_text
from spark_mergetree.format.type_codes import decode_type
from spark_mergetree.format.types import Array, Map, Tuple, Variant, parse_type
from spark_mergetree.format.values import Cursor
from tests.format.chdb_util import close_session, make_chdb_table, open_session
from tests.format.test_part_interop import _attach_and_check
from tests.format.test_serialization import _chdb_arrow, _normalize

ROWS = 300
V = "Variant(Int32, String, Array(UInt16), Tuple(a Float64, b String))"
AV = "Array(Variant(UInt8, String))"
# Rows 0..63 (the first granule) hold Strings only, rows 256.. are NULL, the rest cycle through
# every variant and NULL.
V_EXPR = (f"multiIf(number < 64, ('s' || toString(number))::{V}, number >= 256, NULL::{V}, number % 5 = 0, "
          f"toInt32(-number)::{V}, number % 5 = 1, repeat('x', number % 7)::{V}, number % 5 = 2, "
          f"range(number % 4)::Array(UInt16)::{V}, number % 5 = 3, (number / 3, toString(number))::Tuple(a Float64, b String)::{V}, NULL::{V})")
AV_EXPR = "arrayMap(i -> if(i % 2 = 0, toUInt8(i)::Variant(UInt8, String), ('s' || toString(i))::Variant(UInt8, String)), range(number % 4))"
COLUMNS = [("v", V, V_EXPR), ("av", AV, AV_EXPR)]

PART_KINDS = {
    "Wide": "min_bytes_for_wide_part = 0, min_rows_for_wide_part = 0",
    "Compact": "min_bytes_for_wide_part = 1000000000, min_rows_for_wide_part = 1000000000",
}


def _statement(sess, table: str = "src") -> str:
    return sess.query(f"SHOW CREATE TABLE {table}", "TabSeparatedRaw").bytes().decode()


def _variant_select(name: str, dt: Variant) -> list[str]:
    return [f"toString(variantType({name})) AS `{name}.type`"] + [
        f"variantElement({name}, '{t}') AS `{name}.{t}`" for t in dt.names]


def _expected_variant(row: dict, name: str, dt: Variant) -> dict | None:
    kind = row[f"{name}.type"]
    kind = kind.decode() if isinstance(kind, bytes) else kind
    if kind == "None":
        return None
    return {t: row[f"{name}.{t}"] if t == kind else None for t in dt.names}


def _ours_variant(value: dict | None, dt: Variant) -> dict | None:
    if value is None:
        return None
    assert sum(v is not None for v in value.values()) == 1, value
    return {t: _normalize(vt, value[t]) for t, vt in zip(dt.names, dt.variants, strict=True)}


def _expected_rows(sess, table: str) -> list[dict]:
    """What ClickHouse SELECTs, as our struct form of each Variant."""
    v = parse_type(V)
    av = parse_type(AV)
    assert isinstance(v, Variant) and isinstance(av, Array) and isinstance(av.inner, Variant)
    inner = av.inner
    select = ", ".join(["id", *_variant_select("v", v),
                        "arrayMap(x -> toString(variantType(x)), av) AS `av.types`",
                        *(f"arrayMap(x -> variantElement(x, '{t}'), av) AS `av.{t}`" for t in inner.names)])
    rows = _chdb_arrow(sess, f"SELECT {select} FROM {table} ORDER BY id").to_pylist()
    out = []
    for row in rows:
        items = []
        for i, kind in enumerate(row["av.types"]):
            kind = kind.decode() if isinstance(kind, bytes) else kind
            items.append({t: row[f"av.{t}"][i] if t == kind else None for t in inner.names})
        out.append({"id": row["id"], "v": _expected_variant(row, "v", v), "av": items})
    return out


def _our_rows(table: pa.Table) -> list[dict]:
    v = parse_type(V)
    av = parse_type(AV)
    assert isinstance(v, Variant) and isinstance(av, Array) and isinstance(av.inner, Variant)
    return [{"id": r["id"], "v": _ours_variant(r["v"], v), "av": [_ours_variant(x, av.inner) for x in r["av"]]}
            for r in table.sort_by("id").to_pylist()]


def _written_back(sess, tmp_path, kind: str, partitioned: bool, columns: list[tuple[str, str]], rows: pa.Table):
    """Our parts of `rows` (two inserts; then merged by us too) attached by ClickHouse into a table of
    the same columns, CHECK TABLE passing: yields (our table, ClickHouse's table name) for each."""
    settings = dict(s.split(" = ") for s in PART_KINDS[kind].split(", "))
    partition = " PARTITION BY intDiv(id, 100)" if partitioned else ""
    cols = ", ".join(f"`{n}` {t}" for n, t in columns)
    for merge in (False, True):
        ours = MergeTreeTable.create(tmp_path / f"ours_{merge}", [("id", "UInt64"), *columns], order_by="id",
                                     partition_by="intDiv(id, 100)" if partitioned else None,
                                     settings={"index_granularity": 64, "auto_merge": False, **settings})
        ours.insert(rows.slice(0, 150))
        ours.insert(rows.slice(150))
        if merge:
            assert ours.optimize(final=True)
        assert {(ours.path / p.name / "data.bin").exists() for p in ours.parts()} == {kind == "Compact"}
        back = f"back_{int(merge)}"
        sess.query(f"CREATE TABLE {back} (id UInt64, {cols}) ENGINE = MergeTree{partition} ORDER BY id "
                   f"SETTINGS index_granularity = 64, {PART_KINDS[kind]}")
        back_dir = Path(sess.query(f"SELECT data_paths[1] FROM system.tables WHERE name = '{back}'",
                                   "TabSeparatedRaw").bytes().decode().strip())
        _attach_and_check(sess, back, back_dir, ours)
        yield ours, back



@pytest.mark.parametrize(("partitioned", "discriminators"), [(False, 1), (True, 1), (False, 0)],
                         ids=["flat", "partitioned", "basic-discriminators"])
@pytest.mark.parametrize("kind", list(PART_KINDS))
def test_variant_parts_clickhouse_wrote_read_as_select_returns(tmp_path, kind, partitioned, discriminators):
    cols = ", ".join(f"`{n}` {t}" for n, t, _ in COLUMNS)
    exprs = ", ".join(e for _, _, e in COLUMNS)
    partition = " PARTITION BY intDiv(id, 100)" if partitioned else ""
    sess, data_dir = make_chdb_table(
        tmp_path, f"CREATE TABLE src (id UInt64, {cols}) ENGINE = MergeTree{partition} ORDER BY id "
                  f"SETTINGS index_granularity = 64, {PART_KINDS[kind]}, "
                  f"use_compact_variant_discriminators_serialization = {discriminators}",
        [f"INSERT INTO src SELECT number, {exprs} FROM numbers({ROWS})"])
    try:
        kinds = sess.query("SELECT DISTINCT part_type FROM system.parts WHERE table = 'src' AND active",
                           "TabSeparatedRaw").bytes().decode().split()
        assert kinds == [kind]
        statement = _statement(sess)
        expected = _expected_rows(sess, "src")
        assert {r["v"] and next(k for k, x in r["v"].items() if x is not None) for r in expected} == \
            {None, *parse_type(V).names}  # type: ignore[attr-defined]
        table = MergeTreeTable.open(data_dir, create_statement=statement)
        assert _our_rows(table.to_arrow()) == expected
        # A read of later granules starts at their marks; the discriminators' prefix is read on its own.
        part = table.parts()[-1]
        reader = table.reader(part.name)
        first = int(reader.granule_starts[1])
        later = reader.read(["id", "v", "av"], ranges=[(1, reader.n_granules)])
        by_id = {r["id"]: r for r in expected}
        assert _our_rows(later) == [by_id[i] for i in later.column("id").to_pylist()]
        assert later.num_rows == reader.rows - first > 0

        # Both ways: the rows we read, written into parts of our own (two inserts; merged too),
        # are attached by ClickHouse, pass CHECK TABLE and SELECT returns them.
        for ours, back in _written_back(sess, tmp_path, kind, partitioned, [(n, t) for n, t, _ in COLUMNS],
                                        table.to_arrow()):
            assert _expected_rows(sess, back) == expected
            assert _our_rows(ours.to_arrow()) == expected
    finally:
        close_session()


def test_variant_cannot_be_nullable():
    with pytest.raises(Exception, match="Nullable cannot wrap"):
        parse_type("Nullable(Variant(UInt8, String))")
    with pytest.raises(Exception, match="Variant cannot hold"):
        parse_type("Variant(Nullable(UInt8), String)")


def test_variant_types_are_sorted_by_name():
    assert parse_type("Variant(UInt64, String, Array(UInt8))").to_clickhouse() == "Variant(Array(UInt8), String, UInt64)"


_ = (Path, UnsupportedError, _attach_and_check)


def test_writing_refuses_a_row_with_two_variants_or_an_unknown_type(tmp_path):
    table = MergeTreeTable.create(tmp_path / "t", [("id", "UInt64"), ("v", "Variant(UInt64, String)")], order_by="id")
    two = pa.array([{"String": "a", "UInt64": None}, {"String": "b", "UInt64": 2}],
                   pa.struct([("String", pa.string()), ("UInt64", pa.uint64())]))
    with pytest.raises(SchemaMismatchError, match=r"column 'v'.*row 1 sets 2 variants"):
        table.insert(pa.table({"id": [1, 2], "v": two}))
    unknown = pa.array([{"Int8": 1}], pa.struct([("Int8", pa.int8())]))
    with pytest.raises(SchemaMismatchError, match=r"column 'v'.*fields Int8; the variants are String, UInt64"):
        table.insert(pa.table({"id": [1], "v": unknown}))
    assert table.parts() == []
    # A struct naming only some variants, in another order, with a NULL row, is accepted as it is.
    some = pa.array([{"UInt64": 7}, None], pa.struct([("UInt64", pa.int64())]))
    table.insert(pa.table({"id": [1, 2], "v": some}))
    assert table.to_arrow().column("v").to_pylist() == [{"String": None, "UInt64": 7}, None]


# Dynamic: every row's value as ClickHouse's binary form (type encoding, then the value); the oracle
# is ClickHouse's RowBinary export of the column, which is those bytes row after row (0x00 for NULL).
D_EXPR = ("multiIf(number % 7 = 0, number::Dynamic, number % 7 = 1, ('s' || toString(number))::Dynamic, "
          "number % 7 = 2, (number / 2)::Float64::Dynamic, number % 7 = 3, range(number % 5)::Array(UInt64)::Dynamic, "
          "number % 7 = 4, (number, 'x')::Tuple(a UInt8, b String)::Dynamic, "
          "number % 7 = 5, toDateTime64(number, 3, 'Asia/Tokyo')::Dynamic, NULL)")


@pytest.mark.parametrize(("partitioned", "version", "max_types"),
                         [(False, "v3", ""), (True, "v3", "(max_types=2)"), (False, "v2", "(max_types=3)"),
                          (False, "v1", "")],
                         ids=["flat", "partitioned-shared-variant", "v2-shared-variant", "v1"])
@pytest.mark.parametrize("kind", list(PART_KINDS))
def test_dynamic_parts_clickhouse_wrote_read_as_select_returns(tmp_path, kind, partitioned, version, max_types):
    partition = " PARTITION BY intDiv(id, 100)" if partitioned else ""
    sess, data_dir = make_chdb_table(
        tmp_path, f"CREATE TABLE src (id UInt64, d Dynamic{max_types}) ENGINE = MergeTree{partition} ORDER BY id "
                  f"SETTINGS index_granularity = 64, {PART_KINDS[kind]}, dynamic_serialization_version = '{version}'",
        [f"INSERT INTO src SELECT number, {D_EXPR} FROM numbers({ROWS})"])
    try:
        statement = _statement(sess)
        expected = sess.query("SELECT d FROM src ORDER BY id", "RowBinary").bytes()
        nulls = _chdb_arrow(sess, "SELECT d IS NULL AS n FROM src ORDER BY id").column("n").to_pylist()
        if max_types:
            shared = _chdb_arrow(sess, "SELECT countIf(isDynamicElementInSharedData(d)) AS c FROM src")
            assert shared.column("c")[0].as_py() > 0  # some values are in the shared variant
        table = MergeTreeTable.open(data_dir, create_statement=statement)
        ours = table.to_arrow().sort_by("id")
        assert ours.schema.field("d").type == pa.binary()
        values = ours.column("d").to_pylist()
        assert [v is None for v in values] == [bool(n) for n in nulls]
        assert b"".join(b"\x00" if v is None else v for v in values) == expected
        # Later granules alone (their marks; the structure and discriminators prefixes read on their own).
        part = table.parts()[-1]
        reader = table.reader(part.name)
        later = reader.read(["id", "d"], ranges=[(1, reader.n_granules)])
        by_id = dict(zip(ours.column("id").to_pylist(), values, strict=True))
        assert later.column("d").to_pylist() == [by_id[i] for i in later.column("id").to_pylist()]
        _dynamic_written_back(sess, tmp_path, kind, f"Dynamic{max_types}", ours, expected, partitioned)
    finally:
        close_session()


def _dynamic_written_back(sess, tmp_path, kind: str, dynamic: str, rows: pa.Table, expected: bytes,
                          partitioned: bool) -> None:
    """Our parts of `rows` (two inserts, then the same rows merged by us): ClickHouse attaches them,
    CHECK TABLE passes, SELECT returns `expected` (its RowBinary of the column), and again after
    ClickHouse merges our parts."""
    for mine, back in _written_back(sess, tmp_path, kind, partitioned, [("d", dynamic)], rows):
        assert b"".join(b"\x00" if v is None else v for v in mine.to_arrow().sort_by("id").column("d").to_pylist()) \
            == expected
        assert sess.query(f"SELECT d FROM {back} ORDER BY id", "RowBinary").bytes() == expected
        sess.query(f"OPTIMIZE TABLE {back} FINAL")
        assert sess.query(f"SELECT d FROM {back} ORDER BY id", "RowBinary").bytes() == expected


@pytest.mark.parametrize("kind", list(PART_KINDS))
def test_dynamic_data_files_are_clickhouses_bytes(tmp_path, kind):
    """A Dynamic column whose types all get variants, written by us in one insert: every data file
    holds the bytes ClickHouse wrote (structure prefix and statistics, discriminators, variants)."""
    sess, data_dir = make_chdb_table(
        tmp_path, f"CREATE TABLE src (id UInt64, d Dynamic) ENGINE = MergeTree ORDER BY id "
                  f"SETTINGS index_granularity = 64, {PART_KINDS[kind]}",
        [f"INSERT INTO src SELECT number, {D_EXPR} FROM numbers({ROWS})"])
    try:
        theirs = MergeTreeTable.open(data_dir, create_statement=_statement(sess))
        settings = dict(s.split(" = ") for s in PART_KINDS[kind].split(", "))
        ours = MergeTreeTable.create(tmp_path / "ours", [("id", "UInt64"), ("d", "Dynamic")], order_by="id",
                                     settings={"index_granularity": 64, "auto_merge": False, **settings})
        ours.insert(theirs.to_arrow().sort_by("id"))
        a = data_dir / theirs.parts()[0].name
        b = ours.path / ours.parts()[0].name
        files = sorted(f.name for f in a.iterdir() if f.name.endswith(".bin"))
        assert files == sorted(f.name for f in b.iterdir() if f.name.endswith(".bin"))
        assert "d.dynamic_structure.bin" in files if kind == "Wide" else files == ["data.bin"]
        for name in files:
            assert (b / name).read_bytes() == (a / name).read_bytes(), name
    finally:
        close_session()


def test_dynamic_type_text():
    assert parse_type("Dynamic(max_types=3)").to_clickhouse() == "Dynamic(max_types=3)"
    assert parse_type("Dynamic").to_clickhouse() == "Dynamic"
    with pytest.raises(Exception, match="Nullable cannot wrap"):
        parse_type("Nullable(Dynamic)")


NESTED = [
    ("m", "Map(String, Variant(UInt8, String))",
     "mapFromArrays(arrayMap(i -> toString(i), range(number % 3)), arrayMap(i -> if(i % 2 = 0, "
     "toUInt8(i)::Variant(UInt8, String), ('s' || toString(i))::Variant(UInt8, String)), range(number % 3)))"),
    ("t", "Tuple(x Variant(Int8, Date), y UInt8)",
     "(multiIf(number % 3 = 0, toInt8(number % 100)::Variant(Int8, Date), number % 3 = 1, "
     "toDate(number)::Variant(Int8, Date), NULL::Variant(Int8, Date)), toUInt8(number % 200))"),
    ("lv", "Variant(LowCardinality(String), UInt64)",
     "if(number % 4 = 0, number::Variant(LowCardinality(String), UInt64), "
     "('k' || toString(number % 5))::LowCardinality(String)::Variant(LowCardinality(String), UInt64))"),
    ("aa", "Array(Array(Variant(Float64, String)))",
     "arrayMap(i -> arrayMap(k -> if(k % 2 = 0, (k / 4)::Variant(Float64, String), ('f' || toString(k))::Variant(Float64, String)), "
     "range(i)), range(number % 3))"),
]


def _collapse(dt, value):
    """Our value with each Variant struct replaced by its one set value (as ClickHouse's Arrow union gives it)."""
    if value is None:
        return None
    if isinstance(dt, Variant):
        kinds = [(t, v) for t, v in zip(dt.variants, dt.variants, strict=True) if value[t.to_clickhouse()] is not None]
        assert len(kinds) == 1, value
        return _collapse(kinds[0][0], value[kinds[0][0].to_clickhouse()])
    if isinstance(dt, Array):
        return [_collapse(dt.inner, v) for v in value]
    if isinstance(dt, Map):
        return [(_collapse(dt.key, k), _collapse(dt.value, v)) for k, v in value]
    if isinstance(dt, Tuple):
        return {n: _collapse(e, value[n]) for n, e in zip(dt.element_names, dt.elements, strict=True)}
    return _normalize(dt, value)


@pytest.mark.parametrize("kind", list(PART_KINDS))
def test_variant_inside_map_tuple_array_and_of_low_cardinality_both_ways(tmp_path, kind):
    cols = ", ".join(f"`{n}` {t}" for n, t, _ in NESTED)
    exprs = ", ".join(e for _, _, e in NESTED)
    sess, data_dir = make_chdb_table(
        tmp_path, f"CREATE TABLE src (id UInt64, {cols}) ENGINE = MergeTree ORDER BY id "
                  f"SETTINGS index_granularity = 64, {PART_KINDS[kind]}",
        [f"INSERT INTO src SELECT number, {exprs} FROM numbers(200)"])
    try:
        statement = _statement(sess)
        types = {"id": parse_type("UInt64"), **{n: parse_type(t) for n, t, _ in NESTED}}
        expected = _chdb_arrow(sess, "SELECT * FROM src ORDER BY id").to_pylist()
        table = MergeTreeTable.open(data_dir, create_statement=statement)
        ours = table.to_arrow().sort_by("id")

        def collapsed(rows):
            return [{k: _collapse(types[k], v) for k, v in row.items()} for row in rows]

        assert collapsed(ours.to_pylist()) == expected
        settings = dict(s.split(" = ") for s in PART_KINDS[kind].split(", "))
        mine = MergeTreeTable.create(tmp_path / "ours", [("id", "UInt64"), *((n, t) for n, t, _ in NESTED)],
                                     order_by="id", settings={"index_granularity": 64, "auto_merge": False, **settings})
        mine.insert(ours.slice(0, 100))
        mine.insert(ours.slice(100))
        assert {(mine.path / p.name / "data.bin").exists() for p in mine.parts()} == {kind == "Compact"}
        sess.query(f"CREATE TABLE back (id UInt64, {cols}) ENGINE = MergeTree ORDER BY id "
                   f"SETTINGS index_granularity = 64, {PART_KINDS[kind]}")
        back_dir = Path(sess.query("SELECT data_paths[1] FROM system.tables WHERE name = 'back'",
                                   "TabSeparatedRaw").bytes().decode().strip())
        _attach_and_check(sess, "back", back_dir, mine)
        assert _chdb_arrow(sess, "SELECT * FROM back ORDER BY id").to_pylist() == expected
    finally:
        close_session()


@pytest.mark.parametrize("kind", list(PART_KINDS))
def test_variant_data_files_are_clickhouses_bytes(tmp_path, kind):
    """The rows of one ClickHouse insert, written by us in one insert: every data file (`*.bin`)
    holds the bytes ClickHouse wrote (compact discriminators, per-granule formats, prefixes)."""
    columns = COLUMNS + NESTED
    cols = ", ".join(f"`{n}` {t}" for n, t, _ in columns)
    exprs = ", ".join(e for _, _, e in columns)
    sess, data_dir = make_chdb_table(
        tmp_path, f"CREATE TABLE src (id UInt64, {cols}) ENGINE = MergeTree ORDER BY id "
                  f"SETTINGS index_granularity = 64, {PART_KINDS[kind]}",
        [f"INSERT INTO src SELECT number, {exprs} FROM numbers({ROWS})"])
    try:
        statement = _statement(sess)
        theirs = MergeTreeTable.open(data_dir, create_statement=statement)
        settings = dict(s.split(" = ") for s in PART_KINDS[kind].split(", "))
        ours = MergeTreeTable.create(tmp_path / "ours", [("id", "UInt64"), *((n, t) for n, t, _ in columns)],
                                     order_by="id", settings={"index_granularity": 64, "auto_merge": False, **settings})
        ours.insert(theirs.to_arrow().sort_by("id"))
        a = data_dir / theirs.parts()[0].name
        b = ours.path / ours.parts()[0].name
        files = sorted(f.name for f in a.iterdir() if f.name.endswith(".bin"))
        assert files == sorted(f.name for f in b.iterdir() if f.name.endswith(".bin"))
        assert len(files) > 1 if kind == "Wide" else files == ["data.bin"]
        for name in files:
            assert (b / name).read_bytes() == (a / name).read_bytes(), name
    finally:
        close_session()


@pytest.mark.spark
def test_spark_reads_variant_and_dynamic_and_writes_variant_and_dynamic(spark, tmp_path):
    """Spark sees a Variant as a struct of one field per type, a Dynamic as binary and a JSON as its
    text (what MergeTreeTable reads, checked against ClickHouse above); a Spark write of the struct,
    the binary and the text is attached by ClickHouse and selected as the same values."""
    sess, data_dir = make_chdb_table(
        tmp_path, f"CREATE TABLE src (id UInt64, v {V}, d Dynamic, j JSON) ENGINE = MergeTree ORDER BY id "
                  "SETTINGS index_granularity = 64",
        [f"INSERT INTO src SELECT number, {V_EXPR}, {D_EXPR}, {J_EXPR} FROM numbers({ROWS})"])
    try:
        statement = _statement(sess)
        ours = MergeTreeTable.open(data_dir, create_statement=statement).to_arrow().sort_by("id")
        df = spark.read.format("mergetree").option("create_statement", statement).load(str(data_dir))
        assert [f.name for f in df.schema["v"].dataType.fields] == list(parse_type(V).names)  # type: ignore[attr-defined]
        rows = sorted(df.collect(), key=lambda r: r["id"])
        assert [None if r["v"] is None else r["v"].asDict(recursive=True) for r in rows] == \
            ours.column("v").to_pylist()
        # Dynamic and JSON read as Spark variants of the values (tests/spark/test_variant_columns.py).
        texts = {r["id"]: (r["d"], r["j"]) for r in df.selectExpr("id", "to_json(d) AS d", "to_json(j) AS j").collect()}
        d_texts = binary_values_text(ours.column("d").combine_chunks(), "d", "d").to_pylist()
        assert [None if texts[i][0] is None else json.loads(texts[i][0]) for i in ours.column("id").to_pylist()] == \
            [None if t is None else json.loads(t) for t in d_texts]
        assert [json.loads(texts[i][1]) for i in ours.column("id").to_pylist()] == \
            [json.loads(t) for t in ours.column("j").to_pylist()]

        target = tmp_path / "spark_written"
        MergeTreeTable.create(target, [("id", "UInt64"), ("v", V), ("d", "Dynamic"), ("j", "JSON")], order_by="id",
                              settings={"index_granularity": 64})
        df.select("id", "v", "d", "j").write.format("mergetree").mode("append").save(str(target))
        written = MergeTreeTable.open(target)
        sess.query(f"CREATE TABLE back (id UInt64, v {V}, d Dynamic, j JSON) ENGINE = MergeTree ORDER BY id "
                   "SETTINGS index_granularity = 64")
        back_dir = Path(sess.query("SELECT data_paths[1] FROM system.tables WHERE name = 'back'",
                                   "TabSeparatedRaw").bytes().decode().strip())
        _attach_and_check(sess, "back", back_dir, written)
        assert _expected_rows_v(sess, "back") == _expected_rows_v(sess, "src")
        # A variant carries the value, not its ClickHouse type: written back, each Dynamic value has
        # the type ClickHouse's insert of its JSON text gives (UInt64 → Int64, a Tuple → JSON, a
        # DateTime64 → the DateTime64(9) its text reads as), and prints as the same JSON.
        assert _dynamic_values(sess, "back") == _dynamic_values(sess, "src")
        # The JSON text Spark read, written back: the same objects (a whole Float64 prints as an
        # integer, so its text comes back Int64: text does not carry every type).
        assert _json_select(sess, "back", types=False) == _json_select(sess, "src", types=False)
    finally:
        close_session()


def _dynamic_values(sess, table: str) -> list:
    """Each row's Dynamic value as ClickHouse's JSON output gives it, a date-time text as its instant."""
    text = sess.query(f"SELECT d FROM {table} ORDER BY id SETTINGS output_format_json_quote_64bit_integers = 0",
                      "JSONEachRow").bytes().decode()
    values = [json.loads(line)["d"] for line in text.splitlines()]
    return [value[:19] if isinstance(value, str) and value[:2] == "19" else value for value in values]


def _expected_rows_v(sess, table: str) -> list[dict]:
    v = parse_type(V)
    assert isinstance(v, Variant)
    rows = _chdb_arrow(sess, f"SELECT id, {', '.join(_variant_select('v', v))} FROM {table} ORDER BY id").to_pylist()
    return [{"id": row["id"], "v": _expected_variant(row, "v", v)} for row in rows]


# JSON: read as the text ClickHouse prints for each row's object (`toString(j)`).
J_EXPR = ("multiIf(number % 5 = 0, '{\"a\":' || toString(number) || ',\"b\":{\"c\":\"s/\\\\\"' || toString(number) "
          "|| '\",\"d\":[1,2]}}', number % 5 = 1, '{\"b\":{\"e\":' || toString(number / 4) || '},\"t\":true}', "
          "number % 5 = 2, '{}', number % 5 = 3, '{\"z\":\"2020-01-0' || toString(number % 9 + 1) || '\","
          "\"n\":[[1],[2,' || toString(number) || ']],\"a\":-' || toString(number) || '}', "
          "'{\"u\":18446744073709551615,\"s\":\"tab\\\\tnew\\\\nline\"}')")


def _json_table(tmp_path, kind: str, partitioned: bool = False, version: str = "v3", json_type: str = "JSON"):
    partition = " PARTITION BY intDiv(id, 100)" if partitioned else ""
    return make_chdb_table(
        tmp_path, f"CREATE TABLE src (id UInt64, j {json_type}) ENGINE = MergeTree{partition} ORDER BY id "
                  f"SETTINGS index_granularity = 64, {PART_KINDS[kind]}, object_serialization_version = '{version}'",
        [f"INSERT INTO src SELECT number, {J_EXPR} FROM numbers({ROWS})"])


@pytest.mark.parametrize(("partitioned", "version"), [(False, "v3"), (True, "v3"), (False, "v2")],
                         ids=["flat", "partitioned", "v2"])
@pytest.mark.parametrize("kind", list(PART_KINDS))
def test_json_parts_clickhouse_wrote_read_as_its_text(tmp_path, kind, partitioned, version):
    sess, data_dir = _json_table(tmp_path, kind, partitioned, version)
    try:
        statement = _statement(sess)
        expected = _chdb_arrow(sess, "SELECT id, toString(j) AS j FROM src ORDER BY id").to_pylist()
        table = MergeTreeTable.open(data_dir, create_statement=statement)
        ours = table.to_arrow().sort_by("id")
        assert ours.schema.field("j").type == pa.string()
        assert [{"id": r["id"], "j": r["j"].encode()} for r in ours.to_pylist()] == \
            [{"id": r["id"], "j": r["j"] if isinstance(r["j"], bytes) else r["j"].encode()} for r in expected]
        part = table.parts()[-1]
        reader = table.reader(part.name)
        later = reader.read(["id", "j"], ranges=[(1, reader.n_granules)])
        by_id = {r["id"]: r["j"] for r in ours.to_pylist()}
        assert later.column("j").to_pylist() == [by_id[i] for i in later.column("id").to_pylist()]
        # The text we read, written back by us: ClickHouse reads the same objects with the same types.
        mine = MergeTreeTable.create(tmp_path / "ours", [("id", "UInt64"), ("j", "JSON")], order_by="id",
                                     settings={"index_granularity": 64, "auto_merge": False})
        mine.insert(ours)
        sess.query("CREATE TABLE back (id UInt64, j JSON) ENGINE = MergeTree ORDER BY id SETTINGS index_granularity = 64")
        _attach_and_check(sess, "back", _data_dir(sess, "back"), mine)
        assert _json_select(sess, "back") == _json_select(sess, "src")
    finally:
        close_session()


@pytest.mark.parametrize("version", ["v3", "v2"])
@pytest.mark.parametrize("kind", list(PART_KINDS))
def test_json_shared_data_clickhouse_wrote_read_as_its_text(tmp_path, kind, version):
    """Paths beyond max_dynamic_paths live in the shared data (buckets of maps in 'v3', one map in
    'v2'): read as ClickHouse prints them."""
    sess, data_dir = _json_table(tmp_path, kind, version=version, json_type="JSON(max_dynamic_paths=2)")
    try:
        shared = _chdb_arrow(sess, "SELECT countIf(length(JSONSharedDataPaths(j)) > 0) AS c FROM src")
        assert shared.column("c")[0].as_py() > 0
        table = MergeTreeTable.open(data_dir, create_statement=_statement(sess))
        assert _texts(table.to_arrow()) == _json_select(sess, "src", types=False)
    finally:
        close_session()


@pytest.mark.parametrize("kind", list(PART_KINDS))
def test_json_parts_merged_by_clickhouse_read_as_its_text(tmp_path, kind):
    """ClickHouse's merges write the shared data in the `advanced` layout: read through its copy
    streams (per row its paths' indexes into each chunk's path list, and the values)."""
    for json_type in ("JSON", "JSON(max_dynamic_paths=2)", "JSON(max_dynamic_paths=0, max_dynamic_types=1)"):
        sess, data_dir = _json_table(tmp_path / json_type[:24].replace("(", "_"), kind, json_type=json_type)
        try:
            sess.query(f"INSERT INTO src SELECT number, {J_EXPR} FROM numbers({ROWS}, 50)")
            sess.query(f"INSERT INTO src SELECT number, {J_EXPR} FROM numbers({ROWS + 50}, 30)")
            sess.query("OPTIMIZE TABLE src FINAL")
            table = MergeTreeTable.open(data_dir, create_statement=_statement(sess))
            assert len(table.parts()) == 1 and table.parts()[0].level > 0
            shared = _chdb_arrow(sess, "SELECT countIf(length(JSONSharedDataPaths(j)) > 0) AS c FROM src")
            assert (shared.column("c")[0].as_py() > 0) == (json_type != "JSON")
            merged = table.reader(table.parts()[0].name)
            names = merged.compact_layout[1] if merged.is_compact else merged.files
            assert any(".object_shared_data.copy." in n for n in names)  # the `advanced` layout
            assert _texts(table.to_arrow()) == _json_select(sess, "src", types=False)
            reader = table.reader(table.parts()[0].name)
            later = reader.read(["id", "j"], ranges=[(1, reader.n_granules)])
            by_id = dict(_texts(table.to_arrow()))
            assert [(str(i), t) for i, t in zip(later.column("id").to_pylist(), later.column("j").to_pylist(),
                                                strict=True)] == [(str(i), by_id[str(i)]) for i in
                                                                  later.column("id").to_pylist()]
            # Our merge of ClickHouse's merged part and a freshly inserted one (a copy of its table):
            # ClickHouse attaches the result and finds the same objects with the same path types.
            sess.query(f"INSERT INTO src SELECT number, {J_EXPR} FROM numbers({ROWS + 80}, 40)")
            expected = _json_select(sess, "src")
            copy = tmp_path / f"copy_{kind}_{json_type[:24].replace('(', '_')}"
            shutil.copytree(data_dir, copy, ignore=shutil.ignore_patterns("detached", "tmp_*"))
            ours = MergeTreeTable.open(copy, create_statement=_statement(sess))
            assert len(ours.parts()) == 2 and ours.optimize(final=True)
            sess.query(f"CREATE TABLE back (id UInt64, j {json_type}) ENGINE = MergeTree ORDER BY id "
                       f"SETTINGS index_granularity = 64, {PART_KINDS[kind]}")
            _attach_and_check(sess, "back", _data_dir(sess, "back"), ours)
            assert _json_select(sess, "back") == expected
        finally:
            close_session()


@pytest.mark.parametrize("kind", list(PART_KINDS))
def test_json_with_typed_and_skipped_paths_read_as_its_text(tmp_path, kind):
    json_type = ("JSON(`k.x` UInt32, c Nullable(String), `d.e` Array(Int8), max_dynamic_types=4, SKIP `b.c`, "
                 "SKIP REGEXP '^[nz]$')")
    sess, data_dir = _json_table(tmp_path, kind, json_type=json_type)
    try:
        sess.query("INSERT INTO src SELECT number, '{\"k\":{\"x\":' || toString(number) || '},\"c\":\"v\",\"d\":{\"e\":[1,-2]}}' "
                   f"FROM numbers({ROWS}, 70)")
        statement = _statement(sess)
        expected = _chdb_arrow(sess, "SELECT id, toString(j) AS j FROM src ORDER BY id").to_pylist()
        table = MergeTreeTable.open(data_dir, create_statement=statement)
        assert [{"id": r["id"], "j": r["j"].encode()} for r in table.to_arrow().sort_by("id").to_pylist()] == \
            [{"id": r["id"], "j": r["j"] if isinstance(r["j"], bytes) else r["j"].encode()} for r in expected]
    finally:
        close_session()


@pytest.mark.parametrize("kind", list(PART_KINDS))
def test_parts_with_raw_variant_stream_names_are_refused(tmp_path, kind):
    sess, data_dir = make_chdb_table(
        tmp_path, f"CREATE TABLE src (id UInt64, v {V}) ENGINE = MergeTree ORDER BY id "
                  f"SETTINGS {PART_KINDS[kind]}, escape_variant_subcolumn_filenames = 0",
        [f"INSERT INTO src SELECT number, {V_EXPR} FROM numbers({ROWS})"])
    try:
        statement = _statement(sess)
        with pytest.raises(UnsupportedError, match=r"escape_variant_subcolumn_filenames = 0"):
            MergeTreeTable.open(data_dir, create_statement=statement).to_arrow()
    finally:
        close_session()


def test_writing_dynamic_refuses_values_not_in_its_binary_form(tmp_path):
    """A Dynamic column is written from binary (type encoding, then the value): text, an unknown type
    code or a value cut short are refused naming the column before anything is written."""
    table = MergeTreeTable.create(tmp_path / "t", [("id", "UInt64"), ("d", "Dynamic")], order_by="id")
    with pytest.raises(SchemaMismatchError, match=r"column 'd'.*binary"):
        table.insert(pa.table({"id": pa.array([1], pa.uint64()), "d": pa.array(["1"])}))
    with pytest.raises(UnsupportedError, match=r"column 'd' row 1.*0x7F"):
        table.insert(pa.table({"id": pa.array([1, 2], pa.uint64()), "d": pa.array([b"\x15\x01a", b"\x7f"])}))
    with pytest.raises(SchemaMismatchError, match=r"column 'd'.*Int64"):
        table.insert(pa.table({"id": pa.array([1], pa.uint64()), "d": pa.array([b"\x0a\x01\x02"])}))
    with pytest.raises(SchemaMismatchError, match=r"column 'd': row 0: .*String"):  # a byte left over in row 0
        table.insert(pa.table({"id": pa.array([1, 2], pa.uint64()), "d": pa.array([b"\x15\x01a\x00", b"\x15"])}))
    assert table.parts() == []


def _data_dir(sess, table: str) -> Path:
    return Path(sess.query(f"SELECT data_paths[1] FROM system.tables WHERE name = '{table}'",
                           "TabSeparatedRaw").bytes().decode().strip())


def _json_select(sess, table: str, types: bool = True) -> list[tuple]:
    """Each row's id, its object's text and (with `types`) every path with its type, as ClickHouse
    gives them."""
    extra = ", toString(JSONAllPathsWithTypes(j)) AS t" if types else ""
    rows = sess.query(f"SELECT id, toString(j) AS txt{extra} FROM {table} ORDER BY id", "TabSeparatedRaw").bytes()
    return [tuple(line.split("\t")) for line in rows.decode().splitlines()]


def _texts(table: pa.Table) -> list[tuple]:
    return [(str(r["id"]), r["j"]) for r in table.sort_by("id").to_pylist()]


def _doc(i: int) -> str:
    """Documents exercising ClickHouse's inference: integers (Int64, UInt64, beyond 64 bits: String),
    floats (exponents, -0), Bool, strings with escapes, dates and date-times, arrays (nested, empty,
    with NULLs, mixing Int64 with Float64 or Bool), nested objects, NULL and empty members."""
    docs = [
        '{"a":<i>,"b":{"c":"s/\\"<i>","d":[1,2,null]},"t":true}',
        '{"a":<q>,"f":-0.0,"g":1e-7,"e":[[1],[2,<i>]],"big":18446744073709551615}',
        "{}",
        '{"z":"2020-01-0<d>","dt":"2021-03-04 05:06:<s>","ns":"2021-03-04T05:06:07.<ms>Z","n":null,'
        '"arr":["2020-01-01",null],"u":9223372036854775808,"h":123456789012345678901234567890,'
        '"dd":["2020-01-01","2020-01-01 10:00:<s>"],"d9":["2020-01-01","2020-01-01 10:00:00.<ms>"],'
        '"ds":["2020-01-01","x"]}',
        '{"s":"tab\\tnew\\nline\\u0001 \\u00e9","empty":[],"a":-<i>,"nested":{"x":{"y":{"z":<i>}}},'
        '"old":"1969-12-31"}',
        '{"a":false,"mix":[1,2.5],"bools":[true,1],"ee":{},"b":{"c":"v<i>"},"v":"10.0.0.<o>","w":1.0,'
        '"nf":[[1],[2.5]],"ua":[1,18446744073709551615],"tm":"10:00:<s>","ev":"2020-01-01 10:00:00 EST"}',
    ]
    values = {"<i>": str(i), "<q>": repr(i / 4), "<d>": str(i % 9 + 1), "<s>": f"{i % 60:02d}",
              "<ms>": f"{i % 1000:03d}", "<o>": str(i % 250)}
    text = docs[i % 6]
    for key, value in values.items():
        text = text.replace(key, value)
    return text


JSON_TYPES = {
    "plain": "JSON",
    "shared": "JSON(max_dynamic_paths=3, max_dynamic_types=2)",
    "typed": "JSON(max_dynamic_paths=4, u UInt64, `b.c` Nullable(String), SKIP t, SKIP REGEXP '^e')",
}


def _sql_text(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _json_source(tmp_path, json_type: str, kind: str, texts: list[str], granularity: int | None = 64):
    """ClickHouse's table `src` (id UInt64, j `json_type`; one `kind` part) of one insert of `texts`
    (row i's id is i): its session and data directory."""
    values = ", ".join(f"({i}, {_sql_text(t)})" for i, t in enumerate(texts))
    settings = (f"index_granularity = {granularity}, " if granularity else "") + PART_KINDS[kind]
    return make_chdb_table(tmp_path, f"CREATE TABLE src (id UInt64, j {json_type}) ENGINE = MergeTree ORDER BY id "
                                     f"SETTINGS {settings}", [f"INSERT INTO src VALUES {values}"])


@pytest.mark.parametrize("json_type", list(JSON_TYPES))
@pytest.mark.parametrize("kind", list(PART_KINDS))
def test_json_written_from_text_is_what_clickhouse_stores(tmp_path, kind, json_type):
    """JSON text written by us (two inserts) and the same text inserted into ClickHouse: our parts
    attach, pass CHECK TABLE, and give the same objects with the same path types; we read both back
    as ClickHouse prints them. One insert of all rows gives ClickHouse's bytes in every data file."""
    jt = JSON_TYPES[json_type]
    texts = [_doc(i) for i in range(ROWS)]
    sess, data_dir = _json_source(tmp_path, jt, kind, texts)
    try:
        expected = _json_select(sess, "src")
        if json_type == "shared":
            shared = _chdb_arrow(sess, "SELECT countIf(length(JSONSharedDataPaths(j)) > 0) AS c FROM src")
            assert shared.column("c")[0].as_py() > 0
        rows = pa.table({"id": pa.array(range(ROWS), pa.uint64()), "j": pa.array(texts, pa.large_string())})
        settings = dict(s.split(" = ") for s in PART_KINDS[kind].split(", "))
        mine = MergeTreeTable.create(tmp_path / "ours", [("id", "UInt64"), ("j", jt)], order_by="id",
                                     settings={"index_granularity": 64, "auto_merge": False, **settings})
        mine.insert(rows.slice(0, 150))
        mine.insert(rows.slice(150))
        assert {(mine.path / p.name / "data.bin").exists() for p in mine.parts()} == {kind == "Compact"}
        sess.query(f"CREATE TABLE back (id UInt64, j {jt}) ENGINE = MergeTree ORDER BY id "
                   f"SETTINGS index_granularity = 64, {PART_KINDS[kind]}")
        _attach_and_check(sess, "back", _data_dir(sess, "back"), mine)
        assert _json_select(sess, "back") == expected
        assert _texts(mine.to_arrow()) == [r[:2] for r in expected]
        sess.query("OPTIMIZE TABLE back FINAL")  # ClickHouse merges our parts: the same objects and types
        assert _json_select(sess, "back") == expected
        # Our merge of our parts: ClickHouse attaches it and reads the same objects and types.
        assert mine.optimize(final=True)
        sess.query(f"CREATE TABLE merged (id UInt64, j {jt}) ENGINE = MergeTree ORDER BY id "
                   f"SETTINGS index_granularity = 64, {PART_KINDS[kind]}")
        _attach_and_check(sess, "merged", _data_dir(sess, "merged"), mine)
        assert _json_select(sess, "merged") == expected
        assert _texts(mine.to_arrow()) == [r[:2] for r in expected]
        theirs = MergeTreeTable.open(data_dir, create_statement=_statement(sess))
        assert _texts(theirs.to_arrow()) == [r[:2] for r in expected]

        one = MergeTreeTable.create(tmp_path / "one", [("id", "UInt64"), ("j", jt)], order_by="id",
                                    settings={"index_granularity": 64, "auto_merge": False, **settings})
        one.insert(rows)
        _same_json_bytes(theirs, one)
    finally:
        close_session()


def _structure_statistics_sorted(raw: bytes) -> tuple:
    """An object structure stream (prefix + statistics) with the shared paths' statistics sorted:
    ClickHouse lists them in the order of a hash table, which differs even between its own parts."""
    cursor = Cursor("structure", raw)
    cursor.uint64()
    paths = cursor.varuint()
    for _ in range(paths):
        cursor.take(cursor.varuint())
    cursor.take(1)
    cursor.varuint()
    if cursor.pos == len(raw) or cursor.take(1)[0] == 0:
        return (raw,)
    for _ in range(paths):
        cursor.varuint()
    entries = []
    for _ in range(cursor.varuint()):
        name = bytes(cursor.take(cursor.varuint()))
        entries.append((name, cursor.varuint()))
    assert cursor.pos == len(raw)
    return raw[:cursor.pos - sum(len(n) + 2 for n, _ in entries)], sorted(entries)


def _dynamic_statistics_sorted(raw: bytes) -> tuple:
    """A Dynamic structure stream (prefix + statistics) with the statistics of the types in its
    SharedVariant sorted: ClickHouse lists them in the order of a hash table too."""
    cursor = Cursor("structure", raw)
    cursor.uint64()
    types = cursor.varuint()
    for _ in range(types):
        decode_type(cursor)
    if cursor.pos == len(raw) or cursor.take(1)[0] == 0:
        return (raw,)
    for _ in range(types + 1):  # (rows of each type and of SharedVariant)
        cursor.varuint()
    head = cursor.pos
    entries = []
    for _ in range(cursor.varuint()):
        name = bytes(cursor.take(cursor.varuint()))
        entries.append((name, cursor.varuint()))
    assert cursor.pos == len(raw)
    return raw[:head], sorted(entries)


def _statistics_sorted(name: str, raw: bytes) -> tuple:
    if name.endswith(".object_structure"):
        return _structure_statistics_sorted(raw)
    return _dynamic_statistics_sorted(raw) if name.endswith(".dynamic_structure") else (raw,)


def _same_json_bytes(theirs: MergeTreeTable, ours: MergeTreeTable) -> None:
    """Every substream of every granule of one part each holds the same bytes (the statistics of
    shared paths and of SharedVariant types compared as multisets, their order being ClickHouse's
    hash order)."""
    a, b = theirs.reader(theirs.parts()[0].name), ours.reader(ours.parts()[0].name)
    assert a.n_granules == b.n_granules
    if a.is_compact:
        names = a.compact_layout[1]
        assert names == b.compact_layout[1]
        for g in range(a.n_granules):
            mine, their = b._compact_streams(names, g, g + 1), a._compact_streams(names, g, g + 1)
            for name in names:
                assert _statistics_sorted(name, bytes(mine[name])) == _statistics_sorted(name, bytes(their[name])), (g, name)
        return
    da, db = theirs.path / a.part, ours.path / b.part
    files = sorted(f.name for f in da.iterdir() if f.name.endswith(".bin"))
    assert files == sorted(f.name for f in db.iterdir() if f.name.endswith(".bin"))
    for name in files:
        x, y = (db / name).read_bytes(), (da / name).read_bytes()
        if name.endswith("_structure.bin"):
            x, y = (_statistics_sorted(name[:-len(".bin")], bytes(decompress_all(v, name))) for v in (x, y))
        assert x == y, name
    for name in files:  # the marks of every stream (ClickHouse's compressed .cmrk2, our .mrk2)
        stream = name[:-len(".bin")]
        assert np.array_equal(b.wide_marks(stream), a.wide_marks(stream)), stream


def test_json_values_clickhouse_infers_otherwise_are_refused_naming_row_and_path(tmp_path):
    """Text whose type ClickHouse finds by best-effort date parsing (also inside an array of objects),
    objects beside NULLs in an array (Array(Nullable(JSON(...)))) and arrays whose common type this
    writer does not derive are refused (naming the column, row and path) before anything is written;
    so are texts that are not objects."""
    table = MergeTreeTable.create(tmp_path / "t", [("id", "UInt64"), ("j", "JSON")], order_by="id",
                                  settings={"auto_merge": False})

    def insert(*texts: str) -> None:
        table.insert(pa.table({"id": pa.array(range(len(texts)), pa.uint64()), "j": list(texts)}))

    for text, path in (('{"d":"2020/01/01"}', "d"), ('{"x":{"m":[[1],null,["a"]]}}', "x.m"), ('{"d":"Jan 1 2020"}', "d"),
                       ('{"o":[[[1]],[[true]],[]]}', "o"), ('{"d":"2020-02-30"}', "d"), ('{"o":[{"d":"2020/01/01"}]}', "o")):
        with pytest.raises(UnsupportedError, match=rf"column 'j'.*row 1, path '{path}'"):
            insert("{}", text)
    with pytest.raises(SchemaMismatchError, match=r"column 'j'.*row 0 is not a JSON object"):
        insert("[1]")
    with pytest.raises(SchemaMismatchError, match=r"column 'j'.*row 0: path 'a.b' appears twice"):
        insert('{"a":{"b":1},"a.b":2}')
    assert table.parts() == []


def test_our_merges_keep_every_json_value_and_its_type(tmp_path):
    """A merge reads JSON in its stored form (path → type encoding + value), not as text: a Float64
    1.0 (printed `1`) stays Float64, a typed path keeps its type, shared data stays."""
    table = MergeTreeTable.create(tmp_path / "t", [("id", "UInt64"), ("j", "JSON(max_dynamic_paths=1, u UInt8)")],
                                  order_by="id", settings={"auto_merge": False})
    for i, text in enumerate(['{"a":1.0,"u":7}', '{"a":1,"b":"x"}', '{"c":[1.5]}']):
        table.insert(pa.table({"id": pa.array([i], pa.uint64()), "j": [text]}))
    assert table.optimize(final=True)
    assert len(table.parts()) == 1
    assert table.to_arrow().column("j").to_pylist() == ['{"a":1,"u":7}', '{"a":1,"b":"x","u":0}', '{"c":[1.5],"u":0}']
    stored = table.reader(table.parts()[0].name).read(["j"], stored_json=True).column("j").to_pylist()
    assert stored == [[("a", b"\x0e" + struct.pack("<d", 1.0)), ("u", b"\x01\x07")],
                      [("a", b"\x0a" + struct.pack("<q", 1)), ("b", b"\x15\x01x"), ("u", b"\x01\x00")],
                      [("c", b"\x1e\x23\x0e\x01\x00" + struct.pack("<d", 1.5)), ("u", b"\x01\x00")]]


@pytest.mark.parametrize("kind", list(PART_KINDS))
def test_json_typed_paths_of_other_types_read_as_clickhouse_prints_them(tmp_path, kind):
    """Typed paths of DateTime, DateTime64, Decimal, Tuple, Map, UUID, IPv4, Enum, FixedString,
    Int128, Date32 and floats (NaN, infinities, exponents, -0) print as ClickHouse prints them."""
    jt = ("JSON(a DateTime, b Decimal(10, 2), c Tuple(x Int8, y String), d Float64, e DateTime64(3), f UUID, "
          "g IPv4, h Float32, i Map(String, UInt8), k Nullable(Decimal(5, 1)), l Date32, m DateTime('Asia/Tokyo'), "
          "n Array(Tuple(Int8, String)), o Int128, q FixedString(3), r Enum8('x' = 1, 'y' = 2), "
          "tu Time, tv Time64(3), w IPv6, x6 IPv6)")
    docs = ['{"tu":"-00:00:05","tv":"100:00:01.5","w":"2001:db8::ff00:42:8329","x6":"::ffff:1.2.3.4"}',
            '{"a":"2020-01-01 10:00:00","b":1.5,"c":{"x":1,"y":"z"},"d":"nan","e":"2020-01-01 10:00:00.5",'
            '"f":"00112233-4455-6677-8899-aabbccddeeff","g":"1.2.3.4","h":0.1,"i":{"k":1},"k":2.5,"l":"1900-01-01",'
            '"m":"2020-01-01 10:00:00","n":[[1,"a"]],"o":123,"q":"ab","r":"y"}',
            '{"d":"inf","h":-0.0,"b":-0.5}', '{"d":1e-7,"b":100}', '{"d":1e21}', '{"d":123456789.123}',
            '{"d":-1e-5}', '{"d":1e17,"x":1.5e300}', '{"d":2.5e10,"h":1e10,"x":2.5e10}',
            '{"d":9007199254740992.0,"x":-1.2345e19}', '{"d":4.5e3,"h":2.5e10,"x":1e15}']
    sess, data_dir = _json_source(tmp_path, jt, kind, docs, granularity=None)
    try:
        table = MergeTreeTable.open(data_dir, create_statement=_statement(sess))
        assert _texts(table.to_arrow()) == _json_select(sess, "src", types=False)
    finally:
        close_session()


@pytest.mark.parametrize("kind", list(PART_KINDS))
def test_json_typed_paths_written_from_text_as_clickhouse_stores_them(tmp_path, kind):
    """Typed paths of many types, written by us from JSON text and inserted into ClickHouse: the same
    objects; rows lacking a path get its default (NULL for Nullable)."""
    jt = ("JSON(a DateTime, b Decimal(10, 2), c Tuple(x Int8, y String), e DateTime64(3), f UUID, g IPv4, "
          "h Float32, k Nullable(Decimal(5, 1)), l Date32, m DateTime('Asia/Tokyo'), n Array(Tuple(Int8, String)), "
          "o Int128, q FixedString(3), r Enum8('x' = 1, 'y' = 2), s Bool, t Array(Nullable(Int32)), "
          "u LowCardinality(String), v Nullable(String), w UInt64, z Date)")
    docs = ['{"a":"2020-01-01 10:00:00","b":1.5,"c":{"x":1,"y":"z"},"e":"2020-01-01 10:00:00.5",'
            '"f":"00112233-4455-6677-8899-aabbccddeeff","g":"1.2.3.4","h":0.1,"k":2.5,"l":"1900-01-01",'
            '"m":"2020-01-01 10:00:00","n":[[1,"a"]],"o":123,"q":"ab","r":"y","s":true,"t":[1,null,3],'
            '"u":"lc","v":"text","w":18446744073709551615,"z":"2021-02-03","extra":{"p":1}}',
            '{"b":-0.5,"m":"2020-06-01T00:00:00Z","a":"1970-01-01 00:00:01","c":{"x":-3}}', "{}",
            '{"k":null,"v":null,"t":[],"e":"2262-04-11 23:47:16.854"}']
    sess, _ = _json_source(tmp_path, jt, kind, docs, granularity=None)
    try:
        settings = dict(s.split(" = ") for s in PART_KINDS[kind].split(", "))
        mine = MergeTreeTable.create(tmp_path / "ours", [("id", "UInt64"), ("j", jt)], order_by="id",
                                     settings={"auto_merge": False, **settings})
        mine.insert(pa.table({"id": pa.array(range(len(docs)), pa.uint64()), "j": docs}))
        sess.query(f"CREATE TABLE back (id UInt64, j {jt}) ENGINE = MergeTree ORDER BY id SETTINGS {PART_KINDS[kind]}")
        _attach_and_check(sess, "back", _data_dir(sess, "back"), mine)
        expected = _json_select(sess, "src")
        assert _json_select(sess, "back") == expected
        assert _texts(mine.to_arrow()) == [r[:2] for r in expected]
    finally:
        close_session()


def test_mutations_keep_json_values_and_types_and_refuse_updating_json(tmp_path):
    """DELETE and UPDATE of other columns rewrite a part's JSON column from its stored form (types
    kept); an UPDATE of the JSON column itself is refused before anything is written."""
    table = MergeTreeTable.create(tmp_path / "t", [("id", "UInt64"), ("n", "UInt8"), ("j", "JSON(max_dynamic_paths=1)")],
                                  order_by="id", settings={"auto_merge": False})
    table.insert(pa.table({"id": pa.array([0, 1, 2], pa.uint64()), "n": pa.array([0, 0, 0], pa.uint8()),
                           "j": ['{"a":1.0}', '{"a":1,"b":2.0}', '{"c":"x"}']}))
    table.update({"n": 5}, "id >= 1")
    table.delete("id = 2")
    with pytest.raises(UnsupportedError, match=r"update: column 'j'.*JSON"):
        table.update({"j": "'{}'"}, "id = 0")
    rows = table.to_arrow().sort_by("id")
    assert rows.column("n").to_pylist() == [0, 5]
    assert rows.column("j").to_pylist() == ['{"a":1}', '{"a":1,"b":2}']
    part = table.parts()[0].name
    stored = table.reader(part).read(["j"], stored_json=True).column("j").to_pylist()
    assert [[(p, v[0]) for p, v in row] for row in stored] == [[("a", 0x0E)], [("a", 0x0A), ("b", 0x0E)]]


INFERENCE_STRINGS = [
    "s", "", "abc1", "v1.2", "1a", "1-2", "12:30", "10:00:00", "12:30:45.5", "1.2.3", "10.0.0.1", "555-1234", "+1 555 1234",
    "1/2", "12/31", "1,2", "(555)", "2020", "12345", "1.5", "-1", "1e5", "inf", "nan", "0x10", "10 a.m.", "ID 2020-01-01",
    "x2020-01-01", "2020-01-01x", "2020-01-01 abc", "2020-01-01 10:00:00 EST", "2020-01-01 10:00:00 CET", "hello world",
    "2020-01-01", "1970-01-01", "2149-06-06", "2149-06-07", "1969-12-31", "1900-01-01", "2261-12-31", "2020-01-01 10:00:00",
    "2020-01-01T10:00:00", "2020-01-01 10:00:00Z", "1970-01-01 00:00:00", "2106-02-07 06:28:15", "2106-02-07 06:28:16",
    "1960-01-01 00:00:00", "2020-01-01 10:00:00.5", "2020-01-01T10:00:00.123Z", "2020-01-01 10:00:00.000",
    "2020-01-01 10:00:00.123456789", "Monday meeting", "May the fourth", "tab\there",
    # refused by the writer (ClickHouse's best-effort parser decides): must not be classified
    "2020/01/01", "Jan 1 2020", "12-31-2020", "2020-02-30", "2020-01-01 10:00:00 utc", "3 May 2020", "2020-01",
]


def test_json_string_inference_matches_clickhouse(tmp_path):
    """Every string the writer classifies (String, Date, DateTime, DateTime64(9)) gets that type in
    ClickHouse too; the ones it refuses are those whose type ClickHouse's best-effort parser decides."""
    from spark_mergetree.format.json_infer import _Ambiguous, _string_type

    sess = open_session(tmp_path)
    try:
        refused = []
        for text in INFERENCE_STRINGS:
            doc = json.dumps({"a": text})
            found = sess.query(f"SELECT JSONAllPathsWithTypes({_sql_text(doc)}::JSON)['a']", "TabSeparatedRaw").bytes()
            try:
                ours = _string_type(text)[0].to_clickhouse()
            except _Ambiguous:
                refused.append(text)
                continue
            assert ours == found.decode().strip(), text
        assert refused == ["2020/01/01", "Jan 1 2020", "12-31-2020", "2020-02-30", "2020-01-01 10:00:00 utc", "3 May 2020",
                           "2020-01"]
    finally:
        close_session()


INFERENCE_ARRAYS = ["[]", "[null]", "[1,2]", "[1,null]", "[1,2.5]", "[true,1]", "[true,1.5]", "[true]", "[1,18446744073709551615]",
                    "[[1],[2,3]]", "[[1],[]]", "[[],[\"a\"]]", "[[null],[1]]", "[1.5,null,2]", "[[true],[true]]",
                    "[\"2020-01-01\",null]", "[\"a\",\"b\"]", "[[[]]]", "[[1],[2.5]]", "[[[1]],[[true]]]",
                    "[[[1]],[]]", "[[1],[18446744073709551615]]", "[\"2020-01-01\",\"x\"]",
                    "[\"2020-01-01\",\"2020-01-01 10:00:00\"]", "[\"2020-01-01\",\"2020-01-01 10:00:00.5\"]",
                    "[\"2020-01-01 10:00:00\",\"2020-01-01 10:00:00.5\"]", "[\"2020-01-01\",\"1969-12-31\"]",
                    "[\"10:00:00\",\"2020-01-01\",null]",
                    # Array(Dynamic), Array(JSON(...)) and what holds them
                    "[1,\"x\"]", "[{\"b\":1}]", "[-1,18446744073709551615]", "[[1],2]", "[123456789012345678901234567890]",
                    "[true,\"a\"]", "[true,1,\"a\"]", "[[1],[\"a\"]]", "[[1,\"a\"],[2]]", "[[1,\"a\"],[{\"b\":1}]]",
                    "[[1,\"a\"],null]", "[[1],null]", "[{\"a\":1},[1]]", "[[{\"a\":1}],[1]]", "[[{\"a\":1}],[]]",
                    "[[[1,\"a\"]],[[2]]]", "[[[1]],[[\"a\"]]]", "[1,null,[2]]", "[{}]", "[{},1]",
                    "[[],[{\"a\":1}]]", "[18446744073709551615,\"a\"]", "[123456789012345678901234567890,1]",
                    "[true,null,\"x\"]", "[[true,\"a\"],[1]]", "[{\"a\":[1,\"b\"]}]",
                    # Array(Nullable(JSON(...))): objects and NULLs
                    "[{\"a\":1},null]", "[null,{\"a\":1},{}]", "[[{\"a\":1}],[null]]", "[[{\"a\":1},null],[{\"b\":2}]]",
                    "[null,{\"a\":[{\"b\":1},null]}]", "[{\"a\":1},null,[1]]",
                    # numbers beyond Int64 with Float64 or Bool
                    "[-3,9223372036854775808,2.0]", "[true,9223372036854775808,null]", "[true,-1,9223372036854775808]",
                    "[[-1],[9223372036854775808],[0.5]]", "[[true],[9223372036854775808]]",
                    "[[-3,9223372036854775808],[2.0]]", "[[[-1,9223372036854775808]],[[2.5]]]",
                    # refused: ClickHouse's type needs more than this writer derives
                    "[[[1]],[[true]],[]]", "[123456789012345678901234567890,\"a\"]"]


def test_json_array_inference_matches_clickhouse(tmp_path):
    """Every array the writer types gets that type in ClickHouse too."""
    from spark_mergetree.format.json_infer import _Ambiguous, _infer, _Object, nested_json
    from spark_mergetree.format.types import Json

    sess = open_session(tmp_path)
    try:
        refused = []
        for text in INFERENCE_ARRAYS:
            doc = '{"a":' + text + "}"
            found = sess.query(f"SELECT JSONAllPathsWithTypes({_sql_text(doc)}::JSON)['a']", "TabSeparatedRaw").bytes()
            try:
                ours = _infer(json.loads(text, object_pairs_hook=_Object), nested_json(Json()))[0].to_clickhouse()
            except _Ambiguous:
                refused.append(text)
                continue
            assert ours == found.decode().strip(), text
        assert refused == INFERENCE_ARRAYS[-2:]
    finally:
        close_session()


# Dynamic inside Array, Map and Tuple: ClickHouse stores each under its element's stream names (the
# Array's own base, `m%2Evalues`, `t%2Ex`) exactly as a Dynamic column (structure, discriminators,
# variants). The oracle is ClickHouse's RowBinary of the columns, rebuilt from our Arrow values.
ND_EXPR = D_EXPR.replace("number", "n")
NESTED_DYNAMIC = [
    ("a", "Array(Dynamic)", f"arrayMap(n -> {ND_EXPR}, range(number, number + number % 4))"),
    ("t", "Tuple(x Dynamic(max_types=2), y UInt8)", f"tuple({D_EXPR}, toUInt8(number % 200))"),
    ("m", "Map(String, Dynamic)",
     f"mapFromArrays(arrayMap(n -> toString(n), range(number % 3)), arrayMap(n -> {ND_EXPR}, range(number, number + number % 3)))"),
    ("aa", "Array(Tuple(p Array(Dynamic(max_types=3)), q String))",
     f"arrayMap(i -> tuple(arrayMap(n -> {ND_EXPR}, range(number + i, number + i + i % 3)), toString(i)), range(number % 3))"),
]


def _varuint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _row_binary(dt, value) -> bytes:
    """One value of a type built from Dynamic, String, UInt8, Array, Map and Tuple in RowBinary (the
    test's own encoder: a Dynamic value's Arrow form is already its RowBinary bytes)."""
    from spark_mergetree.format.types import Dynamic, Primitive
    if isinstance(dt, Dynamic):
        return b"\x00" if value is None else value
    if isinstance(dt, Array):
        return _varuint(len(value)) + b"".join(_row_binary(dt.inner, v) for v in value)
    if isinstance(dt, Map):
        return _varuint(len(value)) + b"".join(_row_binary(dt.key, k) + _row_binary(dt.value, v) for k, v in value)
    if isinstance(dt, Tuple):
        return b"".join(_row_binary(e, value[n]) for n, e in zip(dt.element_names, dt.elements, strict=True))
    assert isinstance(dt, Primitive)
    if dt.name == "String":
        raw = value.encode()
        return _varuint(len(raw)) + raw
    return struct.pack("<B", value)


def _nested_dynamic_row_binary(table: pa.Table) -> bytes:
    types = [parse_type(t) for _, t, _ in NESTED_DYNAMIC]
    rows = table.select([n for n, _, _ in NESTED_DYNAMIC]).to_pylist()
    return b"".join(_row_binary(dt, row[n]) for row in rows for (n, _, _), dt in zip(NESTED_DYNAMIC, types, strict=True))


@pytest.mark.parametrize("kind", list(PART_KINDS))
def test_dynamic_inside_array_map_tuple_clickhouse_wrote_read_as_select_returns(tmp_path, kind):
    cols = ", ".join(f"{n} {t}" for n, t, _ in NESTED_DYNAMIC)
    sess, data_dir = make_chdb_table(
        tmp_path, f"CREATE TABLE src (id UInt64, {cols}) ENGINE = MergeTree ORDER BY id "
                  f"SETTINGS index_granularity = 64, {PART_KINDS[kind]}",
        [f"INSERT INTO src SELECT number, {', '.join(e for _, _, e in NESTED_DYNAMIC)} FROM numbers({ROWS})"])
    try:
        names = ", ".join(n for n, _, _ in NESTED_DYNAMIC)
        expected = sess.query(f"SELECT {names} FROM src ORDER BY id", "RowBinary").bytes()
        shared = _chdb_arrow(sess, "SELECT countIf(isDynamicElementInSharedData(t.x)) AS c FROM src")
        assert shared.column("c")[0].as_py() > 0  # the Tuple's Dynamic has values in its shared variant
        table = MergeTreeTable.open(data_dir, create_statement=_statement(sess))
        ours = table.to_arrow().sort_by("id")
        assert ours.schema.field("a").type == pa.list_(pa.binary())
        assert _nested_dynamic_row_binary(ours) == expected
        # Later granules alone: the structures and discriminator prefixes are read on their own.
        reader = table.reader(table.parts()[-1].name)
        later = reader.read(["id", *(n for n, _, _ in NESTED_DYNAMIC)], ranges=[(2, reader.n_granules)])
        first = int(later.column("id")[0].as_py())
        assert later.to_pylist() == ours.slice(first).to_pylist()
    finally:
        close_session()


@pytest.mark.parametrize("kind", list(PART_KINDS))
def test_dynamic_inside_array_map_tuple_written_as_clickhouse_stores_it(tmp_path, kind):
    """Our parts of the same rows (two inserts; merged by us too): ClickHouse attaches them, CHECK
    TABLE passes and SELECT returns its own RowBinary; with no shared-variant values (one part of
    the rows ClickHouse wrote, types within max_types) every data file is ClickHouse's bytes."""
    cols = ", ".join(f"{n} {t}" for n, t, _ in NESTED_DYNAMIC)
    sess, data_dir = make_chdb_table(
        tmp_path, f"CREATE TABLE src (id UInt64, {cols}) ENGINE = MergeTree ORDER BY id "
                  f"SETTINGS index_granularity = 64, {PART_KINDS[kind]}",
        [f"INSERT INTO src SELECT number, {', '.join(e for _, _, e in NESTED_DYNAMIC)} FROM numbers({ROWS})"])
    try:
        names = ", ".join(n for n, _, _ in NESTED_DYNAMIC)
        expected = sess.query(f"SELECT {names} FROM src ORDER BY id", "RowBinary").bytes()
        theirs = MergeTreeTable.open(data_dir, create_statement=_statement(sess))
        rows = theirs.to_arrow().sort_by("id")
        columns = [(n, t) for n, t, _ in NESTED_DYNAMIC]
        for mine, back in _written_back(sess, tmp_path, kind, False, columns, rows):
            assert _nested_dynamic_row_binary(mine.to_arrow().sort_by("id")) == expected
            assert sess.query(f"SELECT {names} FROM {back} ORDER BY id", "RowBinary").bytes() == expected
            sess.query(f"OPTIMIZE TABLE {back} FINAL")
            assert sess.query(f"SELECT {names} FROM {back} ORDER BY id", "RowBinary").bytes() == expected
    finally:
        close_session()


@pytest.mark.parametrize("kind", list(PART_KINDS))
def test_dynamic_inside_array_map_tuple_data_files_are_clickhouses_bytes(tmp_path, kind):
    """Nested Dynamic values whose types all get variants, written by us in one insert: every data
    file (structures with their statistics, discriminators, variants, sizes) is ClickHouse's bytes,
    and a Compact part's substreams are in ClickHouse's order."""
    nested = [(n, t.replace("(max_types=2)", "").replace("(max_types=3)", ""), e) for n, t, e in NESTED_DYNAMIC]
    cols = ", ".join(f"{n} {t}" for n, t, _ in nested)
    sess, data_dir = make_chdb_table(
        tmp_path, f"CREATE TABLE src (id UInt64, {cols}) ENGINE = MergeTree ORDER BY id "
                  f"SETTINGS index_granularity = 64, {PART_KINDS[kind]}",
        [f"INSERT INTO src SELECT number, {', '.join(e for _, _, e in nested)} FROM numbers({ROWS})"])
    try:
        theirs = MergeTreeTable.open(data_dir, create_statement=_statement(sess))
        settings = dict(s.split(" = ") for s in PART_KINDS[kind].split(", "))
        ours = MergeTreeTable.create(tmp_path / "ours", [("id", "UInt64"), *((n, t) for n, t, _ in nested)],
                                     order_by="id", settings={"index_granularity": 64, "auto_merge": False, **settings})
        ours.insert(theirs.to_arrow().sort_by("id"))
        a = data_dir / theirs.parts()[0].name
        b = ours.path / ours.parts()[0].name
        # (a Compact part's columns_substreams.txt lists its substreams in order; Wide parts are
        # compared file by file)
        def compared(name: str) -> bool:
            return name.endswith(".bin") or (kind == "Compact" and name == "columns_substreams.txt")
        files = sorted(f.name for f in a.iterdir() if compared(f.name))
        assert files == sorted(f.name for f in b.iterdir() if compared(f.name))
        assert ("t%2Ex.dynamic_structure.bin" in files) == (kind == "Wide")
        for name in files:
            assert (b / name).read_bytes() == (a / name).read_bytes(), name
    finally:
        close_session()


# JSON inside Array, Map and Tuple: each stored as a JSON column under its element's stream base
# (`a.object_structure`, `a.<path>.dynamic_structure`, `t%2Ex.object_shared_data.<b>.size0`), the
# sizes of the streams inside an Array or Map one level deeper (`a.object_shared_data.0.size1`,
# `a.<path>.Array%28Nullable%28Int64%29%29.size1`). Read as the text of each object.
# (members in sorted order, as our reads give the text back: the same text inserted both ways)
NJ_DOC = ("concat('{', if(n % 3 = 0, concat('\"arr\":[', toString(n), ',2],'), ''), '\"i\":', toString(n), "
          "if(n % 5 = 0, ',\"o\":{\"f\":1.5}', ''), if(n % 2 = 0, concat(',\"s\":\"v', toString(n % 7), '\"'), ''), '}')")
NESTED_JSON = [
    ("a", "Array(JSON)", f"arrayMap(n -> {NJ_DOC}, range(number, number + number % 4))"),
    ("t", "Tuple(x JSON(max_dynamic_paths=1), y UInt8)", f"tuple({NJ_DOC.replace('(n', '(number').replace(' n ', ' number ')}, toUInt8(number % 200))"),
    ("m", "Map(String, JSON(i UInt32))",
     f"mapFromArrays(arrayMap(n -> toString(n), range(number % 3)), arrayMap(n -> {NJ_DOC}, range(number, number + number % 3)))"),
    ("aa", "Array(Tuple(p Array(JSON(max_dynamic_paths=2)), q String))",
     f"arrayMap(i -> tuple(arrayMap(n -> {NJ_DOC}, range(number + i, number + i + i % 3)), toString(i)), range(number % 3))"),
]
NJ_SELECT = ("arrayMap(x -> toString(x), a) AS a, (toString(t.x), t.y) AS t, "
             "mapApply((k, v) -> (k, toString(v)), m) AS m, "
             "arrayMap(e -> (arrayMap(x -> toString(x), e.p), e.q), aa) AS aa")


@pytest.mark.parametrize("kind", list(PART_KINDS))
def test_json_inside_array_map_tuple_clickhouse_wrote_read_as_its_text(tmp_path, kind):
    cols = ", ".join(f"{n} {t}" for n, t, _ in NESTED_JSON)
    sess, data_dir = make_chdb_table(
        tmp_path, f"CREATE TABLE src (id UInt64, {cols}) ENGINE = MergeTree ORDER BY id "
                  f"SETTINGS index_granularity = 64, {PART_KINDS[kind]}",
        [f"INSERT INTO src SELECT number, {', '.join(e for _, _, e in NESTED_JSON)} FROM numbers({ROWS})"])
    try:
        rows = sess.query(f"SELECT {NJ_SELECT} FROM src ORDER BY id", "JSONCompactEachRow").bytes().decode()
        expected = [json.loads(line) for line in rows.splitlines()]
        assert any("\"arr\"" in row[1][0] for row in expected)  # t.x's second path is in the shared data
        table = MergeTreeTable.open(data_dir, create_statement=_statement(sess))
        ours = table.to_arrow().sort_by("id")
        assert pa.types.is_string(ours.schema.field("a").type.value_type)

        def as_rows(t: pa.Table) -> list[list]:
            return [[row["a"], [row["t"]["x"], row["t"]["y"]], dict(row["m"]), [[e["p"], e["q"]] for e in row["aa"]]]
                    for row in t.to_pylist()]
        assert as_rows(ours) == expected
        # Later granules alone: each JSON's structures and prefixes are read on their own.
        reader = table.reader(table.parts()[-1].name)
        later = reader.read(["id", *(n for n, _, _ in NESTED_JSON)], ranges=[(2, reader.n_granules)])
        first = int(later.column("id")[0].as_py())
        assert as_rows(later) == expected[first:]
    finally:
        close_session()


@pytest.mark.parametrize("kind", list(PART_KINDS))
def test_json_inside_array_map_tuple_written_as_clickhouse_stores_it(tmp_path, kind):
    """Our parts of the objects' text (two inserts; merged by us too): ClickHouse attaches them,
    CHECK TABLE passes and gives every object's text back; one insert of ClickHouse's rows gives
    ClickHouse's data files byte for byte (the shared paths' statistics aside, whose order ClickHouse
    takes from a hash table: see `_same_json_bytes`)."""
    cols = ", ".join(f"{n} {t}" for n, t, _ in NESTED_JSON)
    sess, data_dir = make_chdb_table(
        tmp_path, f"CREATE TABLE src (id UInt64, {cols}) ENGINE = MergeTree ORDER BY id "
                  f"SETTINGS index_granularity = 64, {PART_KINDS[kind]}",
        [f"INSERT INTO src SELECT number, {', '.join(e for _, _, e in NESTED_JSON)} FROM numbers({ROWS})"])
    try:
        expected = sess.query(f"SELECT {NJ_SELECT} FROM src ORDER BY id", "JSONCompactEachRow").bytes()
        theirs = MergeTreeTable.open(data_dir, create_statement=_statement(sess))
        rows = theirs.to_arrow().sort_by("id")
        columns = [(n, t) for n, t, _ in NESTED_JSON]
        for mine, back in _written_back(sess, tmp_path, kind, False, columns, rows):
            assert mine.to_arrow().sort_by("id").to_pylist() == rows.to_pylist()
            assert sess.query(f"SELECT {NJ_SELECT} FROM {back} ORDER BY id", "JSONCompactEachRow").bytes() == expected
            sess.query(f"OPTIMIZE TABLE {back} FINAL")
            assert sess.query(f"SELECT {NJ_SELECT} FROM {back} ORDER BY id", "JSONCompactEachRow").bytes() == expected
        settings = dict(s.split(" = ") for s in PART_KINDS[kind].split(", "))
        ours = MergeTreeTable.create(tmp_path / "one", [("id", "UInt64"), *columns], order_by="id",
                                     settings={"index_granularity": 64, "auto_merge": False, **settings})
        ours.insert(rows)
        _same_json_bytes(theirs, ours)
    finally:
        close_session()


@pytest.mark.parametrize("kind", list(PART_KINDS))
def test_our_merges_keep_every_nested_json_value_and_its_type(tmp_path, kind):
    """A merge reads JSON inside Array, Map and Tuple in its stored form (each value's type and
    binary form), not as text: a Float64 2.0 (text `2`) stays Float64. ClickHouse's rows, read so,
    inserted in two parts and merged by us, give ClickHouse every path with its type again."""
    doc = ("concat('{\"f\":', toString(n), '.0', if(n % 2 = 0, ',\"d\":\"2020-01-01\"', ''), "
           "if(n % 3 = 0, ',\"u\":18446744073709551615', ''), '}')")
    columns = [("a", "Array(JSON)", f"arrayMap(n -> {doc}, range(number % 3))"),
               ("t", "Tuple(x JSON(max_dynamic_paths=1), y Dynamic)",
                f"tuple({doc.replace('n)', 'number)').replace('n %', 'number %')}, number::Dynamic)"),
               ("m", "Map(String, JSON)", f"map('k', {doc.replace('n)', 'number)').replace('n %', 'number %')})")]
    cols = ", ".join(f"{n} {t}" for n, t, _ in columns)
    settings_sql = f"SETTINGS index_granularity = 64, {PART_KINDS[kind]}"
    sess, data_dir = make_chdb_table(
        tmp_path, f"CREATE TABLE src (id UInt64, {cols}) ENGINE = MergeTree ORDER BY id {settings_sql}",
        [f"INSERT INTO src SELECT number, {', '.join(e for _, _, e in columns)} FROM numbers({ROWS})"])
    try:
        types = ("arrayMap(x -> toString(JSONAllPathsWithTypes(x)), a), toString(JSONAllPathsWithTypes(t.x)), "
                 "toString(t.y), mapApply((k, v) -> (k, toString(JSONAllPathsWithTypes(v))), m), "
                 "arrayMap(x -> toString(x), a), toString(t.x)")
        expected = sess.query(f"SELECT {types} FROM src ORDER BY id", "JSONCompactEachRow").bytes()
        assert b"Float64" in expected and b"Date" in expected and b"UInt64" in expected
        theirs = MergeTreeTable.open(data_dir, create_statement=_statement(sess))
        stored = theirs.reader(theirs.parts()[0].name).read(stored_json=True).sort_by("id")
        settings = dict(s.split(" = ") for s in PART_KINDS[kind].split(", "))
        ours = MergeTreeTable.create(tmp_path / "ours", [("id", "UInt64"), *((n, t) for n, t, _ in columns)],
                                     order_by="id", settings={"index_granularity": 64, "auto_merge": False, **settings})
        ours.insert(stored.slice(0, 150))
        ours.insert(stored.slice(150))
        assert ours.optimize(final=True) and len(ours.parts()) == 1
        assert ours.to_arrow().sort_by("id").to_pylist() == theirs.to_arrow().sort_by("id").to_pylist()
        sess.query(f"CREATE TABLE back (id UInt64, {cols}) ENGINE = MergeTree ORDER BY id {settings_sql}")
        _attach_and_check(sess, "back", _data_dir(sess, "back"), ours)
        assert sess.query(f"SELECT {types} FROM back ORDER BY id", "JSONCompactEachRow").bytes() == expected
    finally:
        close_session()


@pytest.mark.parametrize("kind", list(PART_KINDS))
def test_nested_dynamic_and_json_parts_merged_by_clickhouse_read_as_select_returns(tmp_path, kind):
    """Parts ClickHouse merged (its merges choose the types and paths by frequency and may write
    JSON shared data in the `advanced` layout) read as its SELECT returns them."""
    d_cols = [(n, t, e) for n, t, e in NESTED_DYNAMIC]
    j_cols = [(f"j{n}", t, e) for n, t, e in NESTED_JSON]
    cols = ", ".join(f"{n} {t}" for n, t, _ in d_cols + j_cols)
    values = ", ".join(e for _, _, e in d_cols + j_cols)
    sess, data_dir = make_chdb_table(
        tmp_path, f"CREATE TABLE src (id UInt64, {cols}) ENGINE = MergeTree ORDER BY id "
                  f"SETTINGS index_granularity = 64, {PART_KINDS[kind]}",
        [f"INSERT INTO src SELECT number, {values} FROM numbers(150)",
         f"INSERT INTO src SELECT number + 150, {values.replace('number', '(number + 150)')} FROM numbers(150)",
         "OPTIMIZE TABLE src FINAL"])
    try:
        names = ", ".join(n for n, _, _ in d_cols)
        expected = sess.query(f"SELECT {names} FROM src ORDER BY id", "RowBinary").bytes()
        select = NJ_SELECT.replace("(x -> toString(x), a)", "(x -> toString(x), ja)").replace("t.x", "jt.x") \
            .replace("t.y", "jt.y").replace("), m)", "), jm)").replace("), aa)", "), jaa)")
        texts = sess.query(f"SELECT {select} FROM src ORDER BY id", "JSONCompactEachRow").bytes().decode()
        table = MergeTreeTable.open(data_dir, create_statement=_statement(sess))
        assert len(table.parts()) == 1
        ours = table.to_arrow().sort_by("id")
        assert _nested_dynamic_row_binary(ours) == expected
        got = [[row["ja"], [row["jt"]["x"], row["jt"]["y"]], dict(row["jm"]), [[e["p"], e["q"]] for e in row["jaa"]]]
               for row in ours.to_pylist()]
        assert got == [json.loads(line) for line in texts.splitlines()]
        reader = table.reader(table.parts()[0].name)
        later = reader.read(None, ranges=[(3, reader.n_granules)])
        first = int(later.column("id")[0].as_py())
        assert later.to_pylist() == ours.slice(first).to_pylist()
    finally:
        close_session()


def test_streaming_merge_of_nested_dynamic_and_json_is_the_in_memory_merge(tmp_path, monkeypatch):
    """The streaming merge (column by column, in blocks, to spill files) writes the same bytes as the
    in-memory one for Dynamic and JSON inside Array, Map and Tuple: each such column is written
    whole once all of its blocks are in."""
    from spark_mergetree.engine import merge as merging
    from spark_mergetree.engine import merge_stream
    monkeypatch.setattr(merge_stream, "READ_BLOCK_ROWS", 70)  # many blocks per part
    d_cols = [(n, t, e) for n, t, e in NESTED_DYNAMIC]
    j_cols = [(f"j{n}", t, e) for n, t, e in NESTED_JSON]
    cols = ", ".join(f"{n} {t}" for n, t, _ in d_cols + j_cols)
    sess, data_dir = make_chdb_table(
        tmp_path, f"CREATE TABLE src (id UInt64, {cols}) ENGINE = MergeTree ORDER BY id "
                  f"SETTINGS index_granularity = 64, {PART_KINDS['Wide']}",
        [f"INSERT INTO src SELECT number, {', '.join(e for _, _, e in d_cols + j_cols)} FROM numbers({ROWS})"])
    try:
        stored = MergeTreeTable.open(data_dir, create_statement=_statement(sess))
        rows = stored.reader(stored.parts()[0].name).read(stored_json=True)
    finally:
        close_session()
    ours = MergeTreeTable.create(tmp_path / "ours", [("id", "UInt64"), *((n, t) for n, t, _ in d_cols + j_cols)],
                                 order_by="id", settings={"index_granularity": 64, "auto_merge": False,
                                                          "min_bytes_for_wide_part": 0})  # Wide: a streamed merge
    ours.insert(rows.filter(pa.array(np.arange(ROWS) % 2 == 0)))
    ours.insert(rows.filter(pa.array(np.arange(ROWS) % 2 == 1)))
    readers = [ours.reader(p.name) for p in ours.parts()]
    whole = merging.merge_parts(readers, ours.metadata)
    with merging.merged_part(readers, ours.metadata) as streamed:
        assert any(isinstance(data, memoryview) for data in streamed.files.values())  # the streaming path
        assert {n: bytes(d) for n, d in streamed.files.items()} == {n: bytes(d) for n, d in whole.files.items()}


@pytest.mark.parametrize("kind", list(PART_KINDS))
def test_nested_table_of_dynamic_and_json_both_ways(tmp_path, kind):
    """`Nested(a Dynamic, b JSON)` (flattened: `n.a Array(Dynamic)`, `n.b Array(JSON)` sharing `n.size0`):
    ClickHouse's part read, ours (two inserts merged by us) attached, CHECK TABLE passing and SELECT
    returning the same rows."""
    sess, data_dir = make_chdb_table(
        tmp_path, f"CREATE TABLE src (k UInt32, n Nested(a Dynamic, b JSON)) ENGINE = MergeTree ORDER BY k "
                  f"SETTINGS index_granularity = 2, {PART_KINDS[kind]}",
        ["""INSERT INTO src VALUES (1, [1, 'x'], ['{"a":1}', '{"b":2}']), (2, [], []), (3, [2.5], ['{"c":"s"}'])"""])
    try:
        statement = _statement(sess)
        theirs = MergeTreeTable.open(data_dir, create_statement=statement)
        rows = theirs.to_arrow().sort_by("k")
        assert rows.column("n.b").to_pylist() == [['{"a":1}', '{"b":2}'], [], ['{"c":"s"}']]
        assert rows.column("n.a").to_pylist()[0] == [b"\x0a" + struct.pack("<q", 1), b"\x15\x01x"]
        settings = dict(s.split(" = ") for s in PART_KINDS[kind].split(", "))
        ours = MergeTreeTable.create(tmp_path / "ours", [("k", "UInt32"), ("n.a", "Array(Dynamic)"), ("n.b", "Array(JSON)")],
                                     order_by="k", settings={"index_granularity": 2, "auto_merge": False, **settings})
        ours.insert(rows.slice(0, 2))
        ours.insert(rows.slice(2))
        assert ours.optimize(final=True)
        sess.query(statement.replace("src", "back", 1))
        _attach_and_check(sess, "back", _data_dir(sess, "back"), ours)
        assert sess.query("SELECT * FROM back ORDER BY k", "TabSeparated").bytes() == \
            sess.query("SELECT * FROM src ORDER BY k", "TabSeparated").bytes()
    finally:
        close_session()


def test_dynamic_and_json_nesting_that_is_refused():
    for text in ("Array(Dynamic)", "Map(String, Dynamic(max_types=3))", "Tuple(a Array(Dynamic), j JSON)",
                 "Array(Array(JSON(a UInt8)))", "Map(String, Tuple(x JSON))"):
        assert parse_type(text).to_clickhouse() == text
    for text, place in (("Map(Nullable(JSON), UInt8)", "JSON inside Nullable as a Map key"),
                        ("Tuple(a LowCardinality(Dynamic))", "LowCardinality cannot wrap Dynamic")):
        with pytest.raises((UnsupportedError, FormatError), match=place):
            parse_type(text)


def test_nested_json_beside_low_cardinality_in_a_compact_table_is_written_wide(tmp_path):
    """A Compact part's LowCardinality pieces are serialized granule by granule, a JSON inside the
    same column from all of its objects: such a column goes into a Wide part, which ClickHouse attaches."""
    kind = "Compact"
    settings = dict(s.split(" = ") for s in PART_KINDS[kind].split(", "))
    ours = MergeTreeTable.create(tmp_path / "ours", [("id", "UInt64"), ("t", "Tuple(s LowCardinality(String), j JSON)")],
                                 order_by="id", settings={"index_granularity": 64, "auto_merge": False, **settings})
    rows = pa.table({"id": pa.array(np.arange(100, dtype=np.uint64)),
                     "t": pa.array([{"s": f"k{i % 3}", "j": f'{{"a":{i}}}'} for i in range(100)])})
    ours.insert(rows)
    assert not (ours.path / ours.parts()[0].name / "data.bin").exists()
    assert ours.to_arrow().sort_by("id").to_pylist() == rows.to_pylist()
    sess = open_session(tmp_path)
    try:
        sess.query(f"CREATE TABLE back (id UInt64, t Tuple(s LowCardinality(String), j JSON)) ENGINE = MergeTree "
                   f"ORDER BY id SETTINGS index_granularity = 64, {PART_KINDS[kind]}")
        _attach_and_check(sess, "back", _data_dir(sess, "back"), ours)
        got = sess.query("SELECT toString(t.j) FROM back ORDER BY id", "TabSeparatedRaw").bytes().decode().split()
        assert got == [f'{{"a":{i}}}' for i in range(100)]
    finally:
        close_session()


@pytest.mark.parametrize("zone", ["Europe/Berlin", "America/New_York"])
def test_typed_date_times_of_wall_times_clocks_skip_or_repeat_are_clickhouses(tmp_path, zone):
    """Text of a typed DateTime/DateTime64 path in a zone with summer time: a wall time the clocks
    passed twice is the first instant, one they skipped is read with the offset after the jump, as
    ClickHouse reads them (Arrow alone refuses both)."""
    jt = f"JSON(m DateTime('{zone}'), e DateTime64(3, '{zone}'))"
    docs = ['{"m":"2021-03-28 02:30:00","e":"2021-03-28 02:30:00.5"}', '{"m":"2021-10-31 02:30:00","e":"2021-11-07 01:30:00.25"}',
            '{"m":"2021-03-14 02:15:00","e":"2021-03-28 01:59:59.999"}', '{"m":"2021-11-07 01:30:00","e":"2021-06-01 12:00:00"}',
            # After 2037 the system's zone files list no transitions: summer time still applies.
            '{"m":"2040-07-01 12:00:00","e":"2040-03-25 02:30:00.5"}', '{"m":"2040-03-11 02:30:00","e":"2040-11-04 01:30:00"}',
            '{"m":"2040-10-28 02:30:00","e":"2040-01-15 23:59:59"}', '{"m":"2040-11-04 01:30:00","e":"2040-08-01 00:00:00"}']
    sess, source = _json_source(tmp_path, jt, "Wide", docs, granularity=None)
    try:
        theirs = sess.query("SELECT toUnixTimestamp(j.m), toUnixTimestamp64Milli(j.e) FROM src ORDER BY id",
                            "TabSeparatedRaw").bytes().decode().split()
        their_text = sess.query("SELECT toString(j) FROM src ORDER BY id", "TabSeparatedRaw").bytes().decode().splitlines()
        statement = _statement(sess)
    finally:
        close_session()
    # Read back as text, the wall times are printed in the zone with its summer time, as ClickHouse prints them.
    assert MergeTreeTable.open(source, create_statement=statement).to_arrow().sort_by("id")["j"].to_pylist() == their_text
    mine = MergeTreeTable.create(tmp_path / "ours", [("id", "UInt64"), ("j", jt)], order_by="id")
    mine.insert(pa.table({"id": pa.array(range(len(docs)), pa.uint64()), "j": docs}))
    sess = open_session(tmp_path / "check")
    try:
        sess.query(mine.clickhouse_ddl("default.ours"))
        ours = sess.query("SELECT toUnixTimestamp(j.m), toUnixTimestamp64Milli(j.e) FROM default.ours ORDER BY id",
                          "TabSeparatedRaw").bytes().decode().split()
    finally:
        close_session()
    assert ours == theirs


def _round_trip_with_clickhouse(tmp_path, kind: str, column_type: str, insert: str, select: str) -> tuple[pa.Table, list]:
    """ClickHouse's part of `insert` into `src (id UInt64, c column_type)`: we read what its `select`
    (a query of `{}`, JSONCompactEachRow) returns, write the rows into a part of the same bytes, and
    ClickHouse reads ours back the same and checks it, and a merge of two such parts of ours too."""
    sess, data_dir = make_chdb_table(tmp_path, f"CREATE TABLE src (id UInt64, c {column_type}) ENGINE = MergeTree "
                                               f"ORDER BY id SETTINGS {PART_KINDS[kind]}", [insert])

    def rows(table: str) -> list:
        return [json.loads(line) for line in sess.query(select.format(table), "JSONCompactEachRow").bytes().decode()
                .splitlines()]

    try:
        expected = rows("src")
        statement = _statement(sess)
    finally:
        close_session()
    theirs = MergeTreeTable.open(data_dir, create_statement=statement)
    read = theirs.to_arrow().sort_by("id")
    settings = dict(s.split(" = ") for s in PART_KINDS[kind].split(", "))
    ours = MergeTreeTable.create(tmp_path / "ours", [("id", "UInt64"), ("c", column_type)], order_by="id",
                                 settings=settings)
    ours.insert(read)
    _same_json_bytes(theirs, ours)
    # Merged: two parts of the same rows, merged by us.
    merged = MergeTreeTable.create(tmp_path / "merged", [("id", "UInt64"), ("c", column_type)], order_by="id",
                                   settings={**settings, "auto_merge": False})
    merged.insert(read)
    merged.insert(read)
    merged.optimize(final=True)
    sess = open_session(tmp_path / "check")
    try:
        sess.query(ours.clickhouse_ddl("default.ours"))
        assert rows("default.ours") == expected
        assert sess.query("CHECK TABLE default.ours", "TabSeparatedRaw").bytes().decode().split() == ["all_1_1_0", "1"]
        sess.query(merged.clickhouse_ddl("default.merged"))
        assert rows("default.merged") == [row for row in expected for _ in range(2)]
        assert sess.query("CHECK TABLE default.merged", "TabSeparatedRaw").bytes().decode().split() == ["all_1_2_1", "1"]
    finally:
        close_session()
    return read, expected


@pytest.mark.parametrize("kind", list(PART_KINDS))
@pytest.mark.parametrize("map_type", ["Map(JSON, String)", "Map(JSON(a UInt8), Array(JSON))"])
def test_json_map_keys_read_and_written_as_clickhouse_does(tmp_path, kind, map_type):
    """A Map whose keys are JSON objects (ClickHouse takes it), both ways."""
    keys = [['{"a":1}', '{"b":"s","c":[1,2]}'], [], ["{}"], ['{"a":7,"d":{"e":1.5}}']]
    value = "['{\"k\":[1,2]}']" if "Array" in map_type else "'v'"
    inserts = ", ".join(f"({i}, map({', '.join(f'{_sql_text(k)}, {value}' for k in row)}))" for i, row in enumerate(keys))
    values = "arrayMap(v -> arrayMap(x -> toString(x), v), mapValues(c))" if "Array" in map_type else "mapValues(c)"
    read, expected = _round_trip_with_clickhouse(
        tmp_path, kind, map_type, f"INSERT INTO src VALUES {inserts}",
        f"SELECT arrayMap(k -> toString(k), mapKeys(c)), {values} FROM {{}} ORDER BY id")
    assert [[[k for k, _ in m], [v for _, v in m]] for m in read["c"].to_pylist()] == expected


@pytest.mark.parametrize("kind", list(PART_KINDS))
@pytest.mark.parametrize("map_type", ["Map(Dynamic, UInt8)", "Map(Dynamic(max_types=2), Array(Dynamic))"])
def test_dynamic_map_keys_read_and_written_as_clickhouse_does(tmp_path, kind, map_type):
    """A Map whose keys are Dynamic values (ClickHouse takes it), both ways: each key's type and text."""
    value = "[number::Dynamic, 'x'::Dynamic]" if "Array" in map_type else "5"
    insert = (f"INSERT INTO src SELECT number, if(number % 2 = 0, map(number::Dynamic, {value}, 'q'::Dynamic, {value}), "
              f"map(toDate(number)::Dynamic, {value}, (number * 1.5)::Dynamic, {value})) FROM numbers(20)")
    values = "arrayMap(v -> arrayMap(x -> toString(x), v), mapValues(c))" if "Array" in map_type else "mapValues(c)"
    read, expected = _round_trip_with_clickhouse(
        tmp_path, kind, map_type, insert,
        f"SELECT arrayMap(k -> [toString(dynamicType(k)), toString(k)], mapKeys(c)), {values} FROM {{}} ORDER BY id")
    assert [len(m) for m in read["c"].to_pylist()] == [len(row[0]) for row in expected]
    assert {t for row in expected for t, _ in row[0]} == {"UInt64", "String", "Date", "Float64"}


_VARIANT = "Variant(JSON(a UInt8), UInt64, Array(JSON))"


@pytest.mark.parametrize("kind", list(PART_KINDS))
@pytest.mark.parametrize("column_type", ["Variant(JSON, String)", _VARIANT, f"Array({_VARIANT})"])
def test_json_inside_variant_read_and_written_as_clickhouse_does(tmp_path, kind, column_type):
    """A Variant holding JSON (ClickHouse takes it), alone and inside an Array, both ways: we read each
    row's variant and its text as ClickHouse's variantType and toString give them."""
    if column_type == "Variant(JSON, String)":
        insert = ("INSERT INTO src VALUES (0, '{\"a\":1,\"b\":\"x\"}'::JSON), (1, 'plain'), (2, NULL), "
                  "(3, '{\"z\":[1,2],\"a\":{\"q\":null}}'::JSON)")
    else:
        def value(text: str) -> str:
            return f"CAST({text}, '{_VARIANT}')"
        items = [value("CAST('{\"a\":1,\"b\":\"x\"}', 'JSON(a UInt8)')"), value("5::UInt64"), "NULL",
                 value("[CAST('{\"k\":1}', 'JSON'), CAST('{\"k\":[true]}', 'JSON')]"),
                 value("CAST('{\"a\":3,\"k\":{\"z\":1.5}}', 'JSON(a UInt8)')")]
        if column_type.startswith("Array"):
            items = [f"[{items[0]}, {items[1]}]", f"arrayFilter(x -> 0, [{items[1]}])", f"[{items[2]}, {items[3]}, {items[4]}]"]
        insert = "INSERT INTO src " + " UNION ALL ".join(f"SELECT {i}, {v}" for i, v in enumerate(items))
    texts = ("arrayMap(v -> [toString(variantType(v)), toString(v)], c)" if column_type.startswith("Array")
             else "[toString(variantType(c)), toString(c)]")
    read, expected = _round_trip_with_clickhouse(tmp_path, kind, column_type, insert, f"SELECT {texts} FROM {{}} ORDER BY id")

    def variant(value: dict | None) -> list:  # [the variant's name, its text where a JSON, else its value]
        if value is None:
            return ["None", ""]
        name, held = next((k, v) for k, v in value.items() if v is not None)
        return [name, held if name.startswith("JSON") else str(held)]

    values = read["c"].to_pylist()
    got = [[variant(v) for v in row] for row in values] if column_type.startswith("Array") else [[variant(v)] for v in values]
    wanted = [row[0] if column_type.startswith("Array") else [row[0]] for row in expected]
    assert [[v[0] for v in row] for row in got] == [[v[0] for v in row] for row in wanted]
    assert [[v[1] for v in row if v[0].startswith("JSON")] for row in got] == \
        [[v[1] for v in row if v[0].startswith("JSON")] for row in wanted]



"""Data skipping never drops a matching row, and is tight for point and range lookups."""

from __future__ import annotations

import datetime as dt
import uuid as uuid_module

import numpy as np
import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spark_mergetree.expressions.key_condition import (
    granule_ranges,
    key_columns_for,
    may_match_minmax,
    may_match_partition,
)
from spark_mergetree.expressions.partition_key import PartitionKey
from spark_mergetree.expressions.predicate import (
    And,
    Column,
    Compare,
    Expr,
    Func,
    In,
    IsNull,
    Like,
    Literal,
    Not,
    Or,
    StartsWith,
    bind,
    evaluate,
    filter_table,
    parse_predicate,
)
from spark_mergetree.expressions.sort_key import key_element_arrays, sort_indices

PROPERTY_SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SCHEMA = {"a": "Int32", "b": "UInt16", "c": "String", "d": "Date", "n": "Nullable(Int32)"}
EPOCH = dt.date(1970, 1, 1)


def _atoms() -> st.SearchStrategy[Expr]:
    ops = st.sampled_from(["=", "!=", "<", "<=", ">", ">="])
    on_a = st.builds(lambda op, v: Compare(op, Column("a"), Literal(v)), ops, st.integers(-3, 23))
    on_b = st.builds(lambda op, v: Compare(op, Column("b"), Literal(v)), ops, st.integers(0, 60))
    in_a = st.builds(lambda vs: In(Column("a"), tuple(Literal(v) for v in vs)), st.lists(st.integers(-2, 22), min_size=1, max_size=4))
    in_b = st.builds(lambda vs: In(Column("b"), tuple(Literal(v) for v in vs)), st.lists(st.integers(0, 60), min_size=1, max_size=4))
    on_c = st.builds(lambda op, v: Compare(op, Column("c"), Literal(v)), ops, st.sampled_from(["", "a", "ab", "b", "ba", "c", "zz"]))
    prefix = st.builds(lambda p: StartsWith(Column("c"), p), st.sampled_from(["a", "b", "ab", "z", ""]))
    like = st.builds(lambda p: Like(Column("c"), p), st.sampled_from(["a%", "b_", "%a", "ab%", "a\\%%"]))
    day = st.integers(19700, 19800).map(lambda n: EPOCH + dt.timedelta(days=n))
    on_d = st.builds(lambda op, v: Compare(op, Column("d"), Literal(v)), ops, day)
    month = st.builds(lambda op, v: Compare(op, Func("toYYYYMM", (Column("d"),)), Literal(v)), ops,
                      st.sampled_from([202312, 202401, 202402, 202403, 202404]))
    monday = st.builds(lambda op, v: Compare(op, Func("toMonday", (Column("d"),)), Literal(v)), ops, day)
    div = st.builds(lambda op, v: Compare(op, Func("intDiv", (Column("b"), Literal(7))), Literal(v)), ops, st.integers(0, 9))
    modulo = st.builds(lambda v: Compare("=", Func("modulo", (Column("a"), Literal(4))), Literal(v)), st.integers(-3, 3))
    null = st.sampled_from([IsNull(Column("a")), IsNull(Column("n"))])
    on_n = st.builds(lambda op, v: Compare(op, Column("n"), Literal(v)), st.sampled_from(["=", "!=", "<", ">=", "<=>"]),
                     st.one_of(st.none(), st.integers(-2, 12)))
    in_n = st.builds(lambda vs: In(Column("n"), tuple(Literal(v) for v in vs)),
                     st.lists(st.one_of(st.none(), st.integers(0, 10)), min_size=1, max_size=3))
    constant = st.sampled_from([Literal(True), Literal(False), Literal(None)])
    return st.one_of(on_a, on_b, in_a, in_b, on_c, prefix, like, on_d, month, monday, div, modulo, null, constant, on_n, in_n)


def _predicates() -> st.SearchStrategy[Expr]:
    return st.recursive(
        _atoms(),
        lambda inner: st.one_of(
            st.builds(lambda xs: And(tuple(xs)), st.lists(inner, min_size=2, max_size=3)),
            st.builds(lambda xs: Or(tuple(xs)), st.lists(inner, min_size=2, max_size=3)),
            st.builds(Not, inner),
        ),
        max_leaves=6,
    )


@st.composite
def _sorted_tables(draw: st.DrawFn) -> tuple[pa.Table, int]:
    rows = draw(st.integers(1, 200))
    a = draw(st.lists(st.integers(0, 20), min_size=rows, max_size=rows))
    b = draw(st.lists(st.integers(0, 60), min_size=rows, max_size=rows))
    c = draw(st.lists(st.sampled_from(["", "a", "aa", "ab", "abc", "b", "ba", "c", "zz"]), min_size=rows, max_size=rows))
    d = draw(st.lists(st.integers(19700, 19800), min_size=rows, max_size=rows))
    n = draw(st.lists(st.one_of(st.none(), st.integers(0, 10)), min_size=rows, max_size=rows))
    order = draw(st.sampled_from([("a", "b"), ("c", "a"), ("d", "b"), ("b", "c", "a"), ("n", "a"), ("a", "n", "b"),
                                  ("toStartOfMonth(d)", "b"), ("intDiv(b, 7)", "a"), ("toYYYYMM(d)", "toMonday(d)", "c")]))
    table = pa.table({
        "a": pa.array(a, pa.int32()), "b": pa.array(b, pa.uint16()), "c": pa.array(c),
        "d": pa.array(np.array(d, dtype=np.int32), pa.int32()).cast(pa.date32()),
        "n": pa.array(n, pa.int32()),
    })
    table = table.take(sort_indices(order, table, SCHEMA))
    granule = draw(st.integers(1, 17))
    return table.replace_schema_metadata({"key": ";".join(order)}), granule


def _index(table: pa.Table, key: list[str], granule: int, schema: dict[str, str] = SCHEMA) -> list[pa.Array]:
    starts = pa.array(list(range(0, table.num_rows, granule)) + [table.num_rows - 1])
    return [values.take(starts) for values in key_element_arrays(key, table, schema)]


def _covered(ranges: list[tuple[int, int]], granules: np.ndarray) -> np.ndarray:
    inside = np.zeros(len(granules), dtype=bool)
    for begin, end in ranges:
        inside |= (granules >= begin) & (granules < end)
    return inside


@PROPERTY_SETTINGS
@given(_sorted_tables(), _predicates())
def test_no_matching_row_is_ever_skipped(table_and_granule, predicate):
    table, granule = table_and_granule
    key = table.schema.metadata[b"key"].decode().split(";")
    bound = bind(predicate, SCHEMA)
    ranges = granule_ranges(bound, key_columns_for(key, SCHEMA), _index(table, key, granule))
    n_granules = -(-table.num_rows // granule)
    assert all(0 <= begin < end <= n_granules for begin, end in ranges)
    assert all(ranges[i][1] < ranges[i + 1][0] for i in range(len(ranges) - 1))
    matching = np.flatnonzero(np.asarray(evaluate(bound, table)))
    assert _covered(ranges, matching // granule).all()


@PROPERTY_SETTINGS
@given(_sorted_tables(), _predicates())
def test_minmax_and_partition_pruning_keep_parts_with_matches(table_and_granule, predicate):
    table, _ = table_and_granule
    bound = bind(predicate, SCHEMA)
    minmax = {}
    for name in SCHEMA:
        present = [v for v in table.column(name).to_pylist() if v is not None]  # minmax indexes skip NULLs
        minmax[name] = (min(present), max(present)) if present else (None, None)
    has_match = bool(np.asarray(evaluate(bound, table)).any())
    if has_match:
        assert may_match_minmax(bound, minmax, SCHEMA)
    # Per month partition: each month's rows against its exact partition value and minmax.
    key = PartitionKey.parse("toYYYYMM(d)", SCHEMA)
    for group in key.group_rows(table):
        part = table.take(group.row_indices)
        part_minmax = {"d": (min(part.column("d").to_pylist()), max(part.column("d").to_pylist()))}
        if np.asarray(evaluate(bound, part)).any():
            assert may_match_partition(bound, key, group.values, part_minmax)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 400), st.integers(1, 33), st.data())
def test_point_and_range_lookups_on_unique_keys_are_tight(rows, granule, data):
    keys = np.unique(np.array(data.draw(st.lists(st.integers(-10_000, 10_000), min_size=rows, max_size=rows)), dtype=np.int64))
    table = pa.table({"id": pa.array(keys)})
    index = _index(table, ["id"], granule, {"id": "Int64"})
    key_columns = [("id", "Int64")]
    wanted = int(data.draw(st.sampled_from(list(keys))))
    ranges = granule_ranges(bind(parse_predicate(f"id = {wanted}"), {"id": "Int64"}), key_columns, index)
    chosen = [g for begin, end in ranges for g in range(begin, end)]
    position = int(np.searchsorted(keys, wanted))
    assert position // granule in chosen and len(chosen) <= 2
    low, high = sorted(data.draw(st.lists(st.integers(-10_001, 10_001), min_size=2, max_size=2)))
    ranges = granule_ranges(bind(parse_predicate(f"id BETWEEN {low} AND {high}"), {"id": "Int64"}), key_columns, index)
    chosen = {g for begin, end in ranges for g in range(begin, end)}
    needed = {int(i) // granule for i in np.flatnonzero((keys >= low) & (keys <= high))}
    assert needed <= chosen and len(chosen - needed) <= 2


def test_granule_ranges_examples():
    index = [pa.array(list(range(0, 100, 10)) + [99], pa.uint64())]  # 10 granules of 10 keys
    key = [("id", "UInt64")]

    def ranges(where: str) -> list[tuple[int, int]]:
        return granule_ranges(bind(parse_predicate(where), {"id": "UInt64", "s": "String"}), key, index)

    assert ranges("id = 15") == [(1, 2)]
    assert ranges("id = 20") == [(1, 3)]  # key 20 starts granule 2, and may end granule 1
    assert ranges("id BETWEEN 15 AND 35") == [(1, 4)]
    assert ranges("id IN (3, 55, 99)") == [(0, 1), (5, 6), (9, 10)]
    assert ranges("id < 10 OR id >= 95") == [(0, 1), (9, 10)]
    assert ranges("NOT (id < 50)") == [(4, 10)]
    assert ranges("s = 'x'") == [(0, 10)]
    assert ranges("id = 1000") == []
    assert granule_ranges(None, key, index) == [(0, 10)]
    # Without the final entry the last granule is open-ended.
    assert granule_ranges(bind(parse_predicate("id > 500"), {"id": "UInt64"}), key, [index[0].slice(0, 10)], 10) == [(9, 10)]


def test_second_key_column_prunes_inside_equal_first_column():
    a = pa.array([1, 1, 1, 2, 2, 3, 3], pa.int32())
    b = pa.array(["a", "m", "z", "c", "x", "a", "b"])
    key = [("a", "Int32"), ("b", "String")]
    assert granule_ranges(parse_predicate("a = 1 AND b >= 'n'"), key, [a, b]) == [(1, 3)]
    assert granule_ranges(parse_predicate("b LIKE 'x%'"), key, [a, b]) == [(1, 5)]
    assert granule_ranges(parse_predicate("a = 2 AND startsWith(b, 'x')"), key, [a, b]) == [(2, 5)]


def test_partition_pruning_through_values_and_minmax():
    key = PartitionKey.parse("toYYYYMM(d)", {"d": "Date"})
    january = {"d": (dt.date(2024, 1, 1), dt.date(2024, 1, 31))}
    where = lambda text: bind(parse_predicate(text), {"d": "Date", "x": "UInt8"})  # noqa: E731
    assert not may_match_partition(where("d >= '2024-02-01'"), key, (202401,), january)
    assert may_match_partition(where("d >= '2024-01-31'"), key, (202401,), january)
    assert not may_match_partition(where("toYYYYMM(d) = 202402"), key, (202401,))
    assert may_match_partition(where("toYYYYMM(d) IN (202312, 202401)"), key, (202401,))
    assert may_match_partition(where("x = 5"), key, (202401,), january)
    assert not may_match_minmax(where("d < '2024-01-01'"), january, {"d": "Date"})
    assert may_match_minmax(where("d IS NULL"), january, {"d": "Date"})
    assert may_match_minmax(where("x = 1"), {"x": (None, None)}, {"x": "UInt8"})


def test_uuid_and_enum_keys_follow_clickhouse_order(clickhouse):
    """ClickHouse orders UUIDs by their second half first and Enums by number: pruning and filtering agree."""
    import random

    generator = random.Random(7)
    uuids = [str(uuid_module.UUID(int=generator.getrandbits(128))) for _ in range(60)]
    names = ["z", "a", "m"]
    enum_type = "Enum8('z' = 1, 'a' = 2, 'm' = -1)"
    schema = {"u": "UUID", "e": enum_type}
    clickhouse.query(f"CREATE TABLE db.by_uuid (u UUID, e {enum_type}) ENGINE = MergeTree ORDER BY u")
    values = ", ".join(f"('{u}', '{names[i % 3]}')" for i, u in enumerate(uuids))
    clickhouse.query(f"INSERT INTO db.by_uuid VALUES {values}")
    probes = sorted(uuids)[::12]
    predicates = [f"u < '{probes[1]}'", f"u >= '{probes[2]}'", f"u BETWEEN '{probes[0]}' AND '{probes[3]}'",
                  f"u = '{probes[4]}'", f"u > '{probes[1]}' AND u <= '{probes[4]}'", "e < 'a'", "e >= 'z'", "e = 'm'",
                  "e > 1"]
    for order in ("u", "e, u"):
        rows = clickhouse.rows(f"SELECT u, e FROM db.by_uuid ORDER BY {order}")
        table = pa.table({"u": pa.array([r[0] for r in rows]), "e": pa.array([r[1] for r in rows])})
        key = [name.strip() for name in order.split(",")]
        for where in predicates:
            matching = {r[0] for r in clickhouse.rows(f"SELECT u FROM db.by_uuid WHERE {where}")}
            bound = bind(parse_predicate(where), schema)
            assert set(filter_table(table, bound).column("u").to_pylist()) == matching, where
            for granule in (1, 4, 9):
                ranges = granule_ranges(bound, key_columns_for(key, schema), _index(table, key, granule, schema))
                positions = np.flatnonzero(np.isin(np.array(table.column("u").to_pylist()), list(matching)))
                assert _covered(ranges, positions // granule).all(), (order, where, granule)
            if order == "u" and where.startswith("u = "):
                assert sum(end - begin for begin, end in ranges) <= 2


def test_null_safe_equality_never_prunes_parts_that_may_hold_nulls():
    schema = {"x": "Nullable(Int32)"}
    only_fives = {"x": (5, 5)}  # minmax ignores NULLs: the part may hold NULLs as well
    assert may_match_minmax(bind(Not(Compare("<=>", Column("x"), Literal(5))), schema), only_fives, schema)
    assert not may_match_minmax(bind(Not(Compare("=", Column("x"), Literal(5))), schema), only_fives, schema)
    assert may_match_minmax(bind(parse_predicate("x IS NULL"), schema), only_fives, schema)


@settings(max_examples=200, deadline=None)
@given(counts=st.lists(st.integers(min_value=0, max_value=12), min_size=1, max_size=8), data=st.data())
def test_runs_of_many_parts_are_each_parts_own_runs(counts, data) -> None:
    """Planning finds the granule runs of all parts in one pass; a plain walk over each part's
    slice of the mask is the oracle (a run never crosses into the next part)."""
    from spark_mergetree.expressions.key_condition import _runs_of_parts

    mask = np.array(data.draw(st.lists(st.booleans(), min_size=sum(counts), max_size=sum(counts))), dtype=bool)
    expected, start = [], 0
    for count in counts:
        runs, begin = [], None
        for i, bit in enumerate(mask[start:start + count].tolist() + [False]):
            if bit and begin is None:
                begin = i
            elif not bit and begin is not None:
                runs.append((begin, i))
                begin = None
        expected.append(runs)
        start += count
    assert _runs_of_parts(mask, counts) == expected

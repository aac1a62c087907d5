"""The binary search of the first key element narrows a key-range plan without changing it: the
granules it leaves out are ones the per-granule evaluation drops anyway."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from spark_mergetree.errors import ExpressionError
from spark_mergetree.expressions import key_condition
from spark_mergetree.expressions.key_condition import granule_ranges_of_parts, key_columns_for
from spark_mergetree.expressions.key_search import first_key_constraints
from spark_mergetree.expressions.predicate import And, Column, Compare, Expr, In, Literal, Not, Or, bind

SCHEMA = {"k": "Int64", "u": "UInt8", "d": "Date", "x": "Int32"}
OPS = ["=", "!=", "<", "<=", ">", ">="]


def _atom(column: str, values: st.SearchStrategy[object]) -> st.SearchStrategy[Expr]:
    compare = st.builds(lambda op, v, flip: Compare(op, Literal(v), Column(column)) if flip
                        else Compare(op, Column(column), Literal(v)), st.sampled_from(OPS), values, st.booleans())
    among = st.builds(lambda vs: In(Column(column), tuple(Literal(v) for v in vs)), st.lists(values, min_size=1, max_size=3))
    return st.one_of(compare, among)


def _predicates(first: str) -> st.SearchStrategy[Expr]:
    numbers = st.one_of(st.integers(-5, 60), st.integers(-(2**70), 2**70), st.floats(-5, 60), st.just(float("nan")),
                        st.sampled_from(["7", "x", None]))
    days = st.integers(-3, 60).map(lambda n: dt.date(2024, 1, 1) + dt.timedelta(days=n))
    atoms = st.one_of(_atom(first, days if first == "d" else numbers), _atom("x", st.integers(-5, 60)))
    return st.recursive(atoms, lambda inner: st.one_of(
        st.builds(lambda xs: And(tuple(xs)), st.lists(inner, min_size=2, max_size=3)),
        st.builds(lambda xs: Or(tuple(xs)), st.lists(inner, min_size=2, max_size=2)),
        st.builds(Not, inner)), max_leaves=5)


def _index(first: str, rng: np.random.Generator, marks: int) -> list[pa.Array]:
    keys = np.sort(rng.integers(0, 55, marks))
    if first == "d":
        column = pa.array(keys.astype(np.int32) + 19723, pa.int32()).cast(pa.date32())
    else:
        column = pa.array(keys, pa.int64() if first == "k" else pa.uint8())
    return [column, pa.array(rng.integers(0, 55, marks), pa.int32())]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(first=st.sampled_from(["k", "u", "d"]), data=st.data(), seed=st.integers(0, 2**32 - 1))
def test_narrowing_never_changes_the_plan(first, data, seed, monkeypatch_module) -> None:
    try:
        predicate = bind(data.draw(_predicates(first)), SCHEMA)
    except ExpressionError:
        assume(False)  # a constant the column's type refuses never reaches planning
    rng = np.random.default_rng(seed)
    counts = data.draw(st.lists(st.integers(1, 9), min_size=1, max_size=5))  # planned parts have granules
    finals = data.draw(st.lists(st.booleans(), min_size=len(counts), max_size=len(counts)))
    indexes = [_index(first, rng, count + 1 if final else count) for count, final in zip(counts, finals, strict=True)]
    declared = [count if data.draw(st.booleans()) else (None if final else count)
                for count, final in zip(counts, finals, strict=True)]
    key = key_columns_for([first, "x"], SCHEMA)
    narrowed = granule_ranges_of_parts(predicate, key, indexes, declared)
    with monkeypatch_module.context() as patch:  # the oracle: every granule evaluated, nothing searched
        patch.setattr(key_condition, "first_key_constraints", lambda predicate, key: [])
        whole = granule_ranges_of_parts(predicate, key, indexes, declared)
    assert narrowed == whole


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as patch:
        yield patch


def test_constraints_come_only_from_conjuncts_on_the_plain_first_column() -> None:
    k = Column("k")
    assert first_key_constraints(And((Compare(">=", k, Literal(3)), Compare(">", Literal(9), k))), "k") == [
        (">=", 3), ("<", 9)]
    assert first_key_constraints(In(k, (Literal(4), Literal(1), Literal(7))), "k") == [(">=", 1), ("<=", 7)]
    assert first_key_constraints(Or((Compare("=", k, Literal(1)), Compare("=", k, Literal(2)))), "k") == []
    assert first_key_constraints(Not(Compare("<", k, Literal(1))), "k") == []
    assert first_key_constraints(Compare("=", Column("x"), Literal(1)), "k") == []

"""Binary search of the first primary-key column: the granules a key-range predicate can touch.

A part's rows are sorted by its key, so the sparse index of the key's first element is non-decreasing.
For the conjuncts of a predicate that bound that element by constants (`k < v`, `k >= v`, `k = v`,
`k IN (...)`, so `BETWEEN` too) the granules that may hold a match form one run per part, found by
two binary searches instead of comparing every granule. This only narrows: the exact per-granule
evaluation (key_condition) still runs on the run it leaves, and a granule outside the run is one the
evaluation would drop anyway (the same comparisons of lo/hi against the same constants). Anything
this module cannot decide exactly (floats with NaN, nullable or dictionary keys, types numpy does not
order as ClickHouse does, constants of another type) leaves a part's granules whole.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from spark_mergetree.errors import ExpressionError, UnsupportedError
from spark_mergetree.expressions.functions import needs_ordering_map
from spark_mergetree.expressions.literals import coerce_literal
from spark_mergetree.expressions.predicate import And, Column, Compare, Expr, In, Literal, scalar_like
from spark_mergetree.format.numpy_views import as_numpy

_FLIP = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "=": "="}
_BOUNDING_OPS = frozenset(_FLIP)
_CONVERSION_ERRORS = (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError, ExpressionError,
                      UnsupportedError, OverflowError, ValueError, TypeError)


def _conjuncts(predicate: Expr) -> list[Expr]:
    if isinstance(predicate, And):
        return [leaf for arg in predicate.args for leaf in _conjuncts(arg)]
    return [predicate]


def first_key_constraints(predicate: Expr | None, key: str | Expr) -> list[tuple[str, object]]:
    """(op, constant) pairs, op in < <= > >= =, that every row matching `predicate` satisfies for
    the key element `key` (only when it is a plain column); IN gives its least and greatest constant."""
    if predicate is None or not isinstance(key, str):
        return []
    found: list[tuple[str, object]] = []
    for leaf in _conjuncts(predicate):
        if isinstance(leaf, Compare) and leaf.op in _BOUNDING_OPS:
            left, right, op = leaf.left, leaf.right, leaf.op
            if isinstance(left, Literal) and isinstance(right, Column):
                left, right, op = right, left, _FLIP[op]
            if isinstance(left, Column) and left.name == key and isinstance(right, Literal) and right.value is not None:
                found.append((op, right.value))
        elif isinstance(leaf, In) and isinstance(leaf.expr, Column) and leaf.expr.name == key:
            values = [literal.value for literal in leaf.values]
            if values and all(isinstance(v, int) and not isinstance(v, bool) for v in values):
                found += [(">=", min(values)), ("<=", max(values))]  # type: ignore[type-var]
    return found


def _searchable(array: pa.Array, type_text: str) -> np.ndarray | None:
    """The index column as a numpy array numpy orders as ClickHouse does, or None."""
    if array.null_count or needs_ordering_map(type_text):
        return None
    if not (pa.types.is_integer(array.type) or pa.types.is_date(array.type) or pa.types.is_timestamp(array.type)):
        return None
    return as_numpy(array)


def bound_constants(
    constraints: Sequence[tuple[str, object]], like: pa.Array, type_text: str,
) -> list[tuple[str, np.generic]]:
    """The constraints whose constant coerces (as the exact evaluation coerces it) to the type of the
    index column `like`, as numpy scalars of that type; the others cannot be searched and are dropped."""
    searchable = []
    for op, value in constraints:
        try:
            scalar = scalar_like(coerce_literal(value, type_text), like)
        except _CONVERSION_ERRORS:
            continue
        if scalar.type == like.type and scalar.is_valid:
            searchable.append((op, as_numpy(pa.array([scalar], type=like.type))[0]))
    return searchable


def narrow_by_first_key(
    constraints: Sequence[tuple[str, np.generic]], type_text: str, first: pa.Array, granules: int,
) -> tuple[int, int]:
    """[begin, end) of the granules of one part that may satisfy every constraint (as `bound_constants`
    gives them for `first`'s type); `first` is the part's index of the first key element (granules + 1
    entries with a final mark, else granules)."""
    if not constraints or granules <= 0 or len(first) not in (granules, granules + 1):
        return 0, max(granules, 0)
    keys = _searchable(first, type_text)
    if keys is None:
        return 0, granules
    lows, highs = keys[:granules], keys[1:]  # granule g spans [lows[g], highs[g]]; the last may be open
    open_end = len(keys) == granules  # an open last granule is unbounded both ways: it always stays
    begin, end = 0, granules
    for op, constant in constraints:
        if op in ("<", "<=", "=") and not open_end:  # needs lo <= v (lo < v for <): a prefix of the granules
            end = min(end, int(np.searchsorted(lows, constant, side="left")) if op == "<"
                      else int(np.searchsorted(lows, constant, side="right")))
        if op in (">", ">=", "="):  # needs hi >= v (hi > v for >): a suffix; an open last granule stays
            begin = max(begin, int(np.searchsorted(highs, constant, side="right")) if op == ">"
                        else int(np.searchsorted(highs, constant, side="left")))
    return begin, max(begin, end)

"""Data-skipping indexes: their declarations (`INDEX name expr TYPE ... GRANULARITY g` in a CREATE
statement) and which index granules a predicate may need, given an index's decoded granules.

Every decision is "may a row of this granule satisfy the predicate": AND/OR/NOT combine per-atom
masks as `key_condition` does, an atom on columns the index does not cover is unknown (may be true
and may be false), so an index never drops a granule that holds a matching row.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from spark_mergetree.errors import ExpressionError, UnsupportedError
from spark_mergetree.expressions.functions import needs_ordering_map, orderable
from spark_mergetree.expressions.key_condition import _ARROW_ERRORS, KeyBounds, _Evaluator, _valid
from spark_mergetree.expressions.like import Wildcard, like_parts
from spark_mergetree.expressions.literals import coerce_literal
from spark_mergetree.expressions.predicate import (
    And,
    Column,
    Compare,
    Expr,
    Fixed,
    HasToken,
    In,
    Like,
    Not,
    Or,
    columns_of,
    evaluate,
)

SKIP_INDEX_TYPES = ("minmax", "set", "bloom_filter", "ngrambf_v1", "tokenbf_v1")

_DECLARATION = re.compile(
    r"^\s*INDEX\s+(`[^`]+`|\w+)\s+(.+?)\s+TYPE\s+(\w+)\s*(?:\((.*?)\))?\s*(?:GRANULARITY\s+(\d+))?\s*$",
    re.IGNORECASE | re.DOTALL)
_IDENTIFIER = re.compile(r"^`([^`]+)`$|^([A-Za-z_][A-Za-z0-9_]*)$")


@dataclass(frozen=True)
class SkipIndex:
    """One declared data-skipping index."""

    name: str
    expression: str
    type: str  # one of SKIP_INDEX_TYPES (lower case, as ClickHouse spells them)
    arguments: tuple[float, ...]
    granularity: int
    columns: tuple[str, ...]  # the index's columns, when its expression is columns (else ())

    @property
    def usable(self) -> bool:
        """Whether reads can use it: a type we decode, over plain columns."""
        return self.type in SKIP_INDEX_TYPES and bool(self.columns)


def parse_skip_index(text: str) -> SkipIndex | None:
    """The index an `INDEX ...` element of a CREATE statement declares (None for PROJECTION and
    CONSTRAINT elements). Raises ExpressionError for an INDEX element that does not parse."""
    if not re.match(r"^\s*INDEX\b", text, re.IGNORECASE):
        return None
    match = _DECLARATION.match(text)
    if match is None:
        raise ExpressionError(f"index declaration {text!r}: expected INDEX name expr TYPE type[(args)] GRANULARITY n")
    name, expression, kind, args_text, granularity = match.groups()
    name = name.strip("`")
    kind_lower = kind.lower()
    arguments: tuple[float, ...] = ()
    if args_text and args_text.strip():
        try:
            arguments = tuple(float(a) for a in args_text.split(","))
        except ValueError:
            arguments = ()
    if kind_lower == "set" and len(arguments) != 1:
        raise ExpressionError(f"index {name!r}: set needs one argument, the most distinct values per granule")
    if kind_lower == "ngrambf_v1" and len(arguments) != 4:
        raise ExpressionError(f"index {name!r}: ngrambf_v1 needs (n, size_of_bloom_filter_in_bytes, "
                              "number_of_hash_functions, random_seed)")
    if kind_lower == "tokenbf_v1" and len(arguments) != 3:
        raise ExpressionError(f"index {name!r}: tokenbf_v1 needs (size_of_bloom_filter_in_bytes, "
                              "number_of_hash_functions, random_seed)")
    if kind_lower == "bloom_filter" and arguments and not 0 < arguments[0] < 1:
        raise ExpressionError(f"index {name!r}: bloom_filter's false positive rate must be in (0, 1)")
    inner = expression.strip()
    if inner.startswith("(") and inner.endswith(")"):
        inner = inner[1:-1]
    columns: list[str] = []
    for piece in inner.split(","):
        found = _IDENTIFIER.match(piece.strip())
        if found is None:
            columns = []
            break
        columns.append(found.group(1) or found.group(2))
    return SkipIndex(name, expression.strip(), kind_lower, arguments, int(granularity or 1), tuple(columns))


def skip_indexes_of(elements: Sequence[str], column_types: Mapping[str, str]) -> list[SkipIndex]:
    """The declared indexes of a statement's INDEX elements; an index naming an unknown column raises."""
    out = []
    for element in elements:
        index = parse_skip_index(element)
        if index is None:
            continue
        missing = [c for c in index.columns if c not in column_types]
        if missing:
            raise ExpressionError(f"index {index.name!r} uses unknown column {missing[0]!r}; "
                                  f"columns: {', '.join(column_types)}")
        out.append(index)
    return out


def relevant(index: SkipIndex, predicate: Expr | None) -> bool:
    return predicate is not None and index.usable and bool(set(index.columns) & columns_of(predicate))


# ---------------------------------------------------------------------------------------------
# Evaluation: (may be true, may be false) per index granule.
# ---------------------------------------------------------------------------------------------

Atom = Callable[[Expr], "tuple[np.ndarray, np.ndarray] | None"]


def _combine(expr: Expr, atom: Atom, size: int) -> tuple[np.ndarray, np.ndarray]:
    if isinstance(expr, And):
        may_true, may_false = np.ones(size, bool), np.zeros(size, bool)
        for arg in expr.args:
            arg_true, arg_false = _combine(arg, atom, size)
            may_true &= arg_true
            may_false |= arg_false
        return may_true, may_false
    if isinstance(expr, Or):
        may_true, may_false = np.zeros(size, bool), np.ones(size, bool)
        for arg in expr.args:
            arg_true, arg_false = _combine(arg, atom, size)
            may_true |= arg_true
            may_false &= arg_false
        return may_true, may_false
    if isinstance(expr, Not):
        arg_true, arg_false = _combine(expr.arg, atom, size)
        return arg_false, arg_true
    if isinstance(expr, Fixed):
        return np.full(size, expr.value), np.full(size, not expr.value)
    try:
        found = atom(expr)
    except _ARROW_ERRORS:
        found = None
    if found is None:
        return np.ones(size, bool), np.ones(size, bool)
    return found


def minmax_may_match(index: SkipIndex, types: Sequence[str], bounds: Sequence[tuple[pa.Array, pa.Array]],
                     predicate: Expr, count: int) -> np.ndarray:
    """Index granules whose [min, max] of each column may hold a matching row (key_condition's
    evaluator over the granules' bounds, as for the primary key)."""
    keyed: dict[Expr, KeyBounds] = {}
    for column, type_text, (lo, hi) in zip(index.columns, types, bounds, strict=True):
        if needs_ordering_map(type_text):
            lo, hi = orderable(lo, type_text), orderable(hi, type_text)
        else:
            hi = _top_for_nulls(lo, hi)
        keyed[Column(column)] = KeyBounds(lo, hi, _valid(lo) & _valid(hi), type_text, pa.types.is_floating(lo.type))
    may_true, _ = _Evaluator(keyed, count).evaluate(predicate)
    return np.asarray(may_true, dtype=bool)


def _top_for_nulls(lo: pa.Array, hi: pa.Array) -> pa.Array:
    """A Nullable column's granule holding a NULL has max NULL (ClickHouse: +infinity) and min its
    least other value: for numbers, the type's largest value stands in for the max (a NULL row
    matches no comparison, so the granule's other rows are all that can match)."""
    if not hi.null_count or not (pa.types.is_integer(hi.type) or pa.types.is_floating(hi.type)):
        return hi
    top = float("inf") if pa.types.is_floating(hi.type) else int(np.iinfo(hi.type.to_pandas_dtype()).max)
    return pc.if_else(pc.and_(pc.is_null(hi), pc.is_valid(lo)), pa.scalar(top, hi.type), hi)


def set_may_match(index: SkipIndex, granules: Sequence[Sequence[pa.Array] | None], predicate: Expr) -> np.ndarray:
    """Index granules of a set(N) index where some stored value satisfies each atom on the index's
    columns (atoms evaluated exactly over the values; granules that overflowed N: unknown)."""
    count = len(granules)
    known = np.array([g is not None for g in granules], dtype=bool)
    lengths = np.array([len(g[0]) if g is not None else 0 for g in granules], dtype=np.int64)
    if not known.any():
        return np.ones(count, bool)
    values = pa.table({column: pa.concat_arrays([g[position] for g in granules if g is not None])
                       for position, column in enumerate(index.columns)})
    owner = np.repeat(np.arange(count), lengths)
    wanted = set(index.columns)

    def atom(expr: Expr) -> tuple[np.ndarray, np.ndarray] | None:
        if not columns_of(expr) or not columns_of(expr) <= wanted:
            return None
        truth = evaluate(expr, values).to_numpy(zero_copy_only=False)
        falsity = evaluate(Not(expr), values).to_numpy(zero_copy_only=False)
        may_true = np.bincount(owner[truth], minlength=count) > 0
        may_false = np.bincount(owner[falsity], minlength=count) > 0
        return may_true | ~known, may_false | ~known

    return _combine(predicate, atom, count)[0]


def _equality_values(expr: Expr, column: str, type_text: str) -> list[object] | None:
    """Values `expr` (`column = v` or `column IN (...)`) is true for, coerced to the column's type."""
    if isinstance(expr, Compare) and expr.op == "=":
        left, right = expr.left, expr.right
        if isinstance(right, Column):
            left, right = right, left
        if isinstance(left, Column) and left.name == column and not isinstance(right, Column):
            values = [getattr(right, "value", None)]
        else:
            return None
    elif isinstance(expr, In) and isinstance(expr.expr, Column) and expr.expr.name == column:
        values = [v.value for v in expr.values]
    else:
        return None
    if any(isinstance(v, (Expr, float)) for v in values):
        return None
    return [coerce_literal(v, type_text) for v in values if v is not None]


def bloom_may_match(index: SkipIndex, types: Sequence[str], contains: Callable[[int, object], np.ndarray | None],
                    predicate: Expr, count: int) -> np.ndarray:
    """Index granules of a bloom_filter index whose filter of a column may hold a value `=`/`IN` asks
    for. `contains(column_position, value)` tests every granule's filter (None: cannot tell)."""

    def atom(expr: Expr) -> tuple[np.ndarray, np.ndarray] | None:
        for position, (column, type_text) in enumerate(zip(index.columns, types, strict=True)):
            values = _equality_values(expr, column, type_text)
            if values is None:
                continue
            may_true = np.zeros(count, bool)
            for value in values:
                found = contains(position, value)
                if found is None:
                    return None
                may_true |= found
            return may_true, np.ones(count, bool)
        return None

    return _combine(predicate, atom, count)[0]


def _token_chars(text: bytes) -> np.ndarray:
    data = np.frombuffer(text, np.uint8)
    return ((data >= 0x80) | ((data >= ord("0")) & (data <= ord("9"))) | ((data >= ord("a")) & (data <= ord("z")))
            | ((data >= ord("A")) & (data <= ord("Z"))))


def _tokens(text: bytes, bounded_left: bool, bounded_right: bool) -> list[bytes]:
    """Maximal runs of token characters (ASCII letters and digits, bytes >= 0x80) of `text`; a run
    touching an end of `text` counts only when that end is bounded (not next to a wildcard)."""
    chars = _token_chars(text)
    padded = np.concatenate(([False], chars, [False]))
    starts = np.flatnonzero(~padded[:-1] & padded[1:])
    ends = np.flatnonzero(padded[:-1] & ~padded[1:])
    return [text[s:e] for s, e in zip(starts.tolist(), ends.tolist())
            if (s > 0 or bounded_left) and (e < len(text) or bounded_right)]


def _ngrams(text: bytes, n: int) -> list[bytes] | None:
    """The n-grams of `text`: every run of n UTF-8 characters (ClickHouse counts characters, not
    bytes; None for text that is not UTF-8)."""
    try:
        chars = text.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return [chars[i:i + n].encode() for i in range(len(chars) - n + 1)]


def text_terms(index: SkipIndex, expr: Expr, column: str) -> list[bytes] | None:
    """The terms (n-grams or tokens) every row matching `expr` has in `column`, or None if `expr`
    says nothing this index can check."""
    ngram = index.type == "ngrambf_v1"
    n = int(index.arguments[0]) if ngram else 0
    literal: str | None = None
    if isinstance(expr, HasToken) and not ngram and isinstance(expr.expr, Column) and expr.expr.name == column:
        return [expr.token.encode()]
    if isinstance(expr, Compare) and expr.op == "=":
        left, right = expr.left, expr.right
        if isinstance(right, Column):
            left, right = right, left
        if isinstance(left, Column) and left.name == column and isinstance(getattr(right, "value", None), str):
            literal = right.value  # type: ignore[attr-defined]
        else:
            return None
        raw = literal.encode()
        return _ngrams(raw, n) if ngram else _tokens(raw, True, True)
    if isinstance(expr, Like) and not expr.case_insensitive and isinstance(expr.expr, Column) \
            and expr.expr.name == column:
        try:
            parts = like_parts(expr.pattern)
        except ExpressionError:
            return None
        terms: list[bytes] = []
        for position, part in enumerate(parts):
            if isinstance(part, Wildcard):
                continue
            raw = part.encode()
            if ngram:
                grams = _ngrams(raw, n)
                if grams is None:
                    return None
                terms += grams
            else:
                terms += _tokens(raw, position == 0, position == len(parts) - 1)
        return terms
    return None


def text_may_match(index: SkipIndex, contains: Callable[[int, bytes], np.ndarray], predicate: Expr,
                   count: int) -> np.ndarray:
    """Index granules of an ngrambf_v1/tokenbf_v1 index whose filters hold every term `=`/`LIKE` needs."""

    def atom(expr: Expr) -> tuple[np.ndarray, np.ndarray] | None:
        for position, column in enumerate(index.columns):
            terms = text_terms(index, expr, column)
            if terms is None:
                continue
            may_true = np.ones(count, bool)
            for term in terms:
                may_true &= contains(position, term)
            return may_true, np.ones(count, bool)
        return None

    return _combine(predicate, atom, count)[0]


def check_supported(index: SkipIndex) -> None:
    if index.type not in SKIP_INDEX_TYPES:
        raise UnsupportedError(f"index {index.name!r}: type {index.type} is not supported "
                               f"(supported: {', '.join(SKIP_INDEX_TYPES)})")

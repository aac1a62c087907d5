"""Data skipping: which granules and which partitions a predicate may need.

Each key expression gets per-granule bounds [lo, hi] (from the sparse primary index, from minmax
indexes, or from a partition's exact key values). A predicate is then evaluated over all granules at
once, every node yielding two masks: "may be true somewhere in the granule" and "may be false
somewhere". NOT swaps them, AND/OR combine them, NULL comparisons are neither (SQL semantics), and
anything the bounds cannot decide is both. A granule is read iff "may be true" holds, so pruning never
drops a matching row.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from spark_mergetree.errors import ExpressionError, UnsupportedError
from spark_mergetree.expressions.functions import (
    apply_function,
    is_monotonic,
    needs_ordering_map,
    orderable,
    orderable_value,
)
from spark_mergetree.expressions.key_search import bound_constants, first_key_constraints, narrow_by_first_key
from spark_mergetree.expressions.like import like_prefix
from spark_mergetree.expressions.literals import coerce_literal
from spark_mergetree.expressions.partition_key import PartitionKey
from spark_mergetree.expressions.predicate import (
    And,
    Column,
    Compare,
    Expr,
    Fixed,
    Func,
    In,
    IsNaN,
    Like,
    Literal,
    Not,
    Or,
    StartsWith,
    parse_expression,
    scalar_like,
)
from spark_mergetree.expressions.sort_key import key_element_types
from spark_mergetree.format.numpy_views import as_numpy

_ARROW_ERRORS = (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError, ExpressionError, UnsupportedError,
                 OverflowError, ValueError, TypeError)


_NEGATED = {"=": "!=", "!=": "=", "<": ">=", "<=": ">", ">": "<=", ">=": "<"}


@dataclass(frozen=True)
class KeyBounds:
    """Bounds of one key expression in each of n granules (or parts): lo <= value <= hi where known."""

    lo: pa.Array
    hi: pa.Array
    known: np.ndarray  # bool per granule; False means unbounded there
    type: str | None  # ClickHouse type string of the expression's values, when known
    # The bounds are a min/max that leaves NaN out (ClickHouse's minmax indexes do, unless every value
    # is NaN): a granule may also hold NaNs, which compare false with everything but `!=`. Bounds from
    # the sorted primary index never do: NaN sorts last, so it lies between two marks only if one is NaN.
    nan_hidden: bool = False


def _strip_types(expr: Expr) -> Expr:
    """The expression without bind()'s type annotations, so bound and unbound trees compare equal."""
    if isinstance(expr, Column):
        return Column(expr.name)
    if isinstance(expr, Func):
        return Func(expr.name, tuple(_strip_types(arg) for arg in expr.args))
    if isinstance(expr, Literal):
        return Literal(expr.value)
    return expr


def _valid(array: pa.Array) -> np.ndarray:
    if array.null_count == 0 and not pa.types.is_floating(array.type):
        return np.ones(len(array), dtype=bool)
    valid = as_numpy(array.is_valid())
    if pa.types.is_floating(array.type):
        # NaN sorts after every number in ClickHouse keys; treat it as "unknown" rather than compare it.
        valid = valid & ~as_numpy(pc.is_nan(array).fill_null(True))
    return valid


def _mask(result: pa.Array | pa.ChunkedArray) -> np.ndarray:
    return np.asarray(as_numpy(result.fill_null(False)), dtype=bool)


class _Evaluator:
    """Evaluates predicates against bounds of key expressions over n granules."""

    def __init__(self, bounds: Mapping[Expr, KeyBounds], size: int) -> None:
        self.bounds = {_strip_types(key): value for key, value in bounds.items()}
        self.size = size

    def all(self, value: bool) -> np.ndarray:
        return np.full(self.size, value, dtype=bool)

    def unknown(self) -> tuple[np.ndarray, np.ndarray]:
        return self.all(True), self.all(True)

    def bounds_of(self, target: Expr) -> KeyBounds | None:
        found = self.bounds.get(_strip_types(target))
        if found is not None:
            return found
        # A monotonic function of a key expression has bounds f(lo) .. f(hi).
        if isinstance(target, Func) and target.args:
            inner = self.bounds_of(target.args[0])
            if inner is None or not is_monotonic(target.name, inner.type):
                return None
            constant = None
            if len(target.args) > 1:
                second = target.args[1]
                if len(target.args) > 2 or not isinstance(second, Literal) or not isinstance(second.value, int):
                    return None
                constant = second.value
            try:
                lo = apply_function(target.name, inner.lo, inner.type, constant)  # type: ignore[arg-type]
                hi = apply_function(target.name, inner.hi, inner.type, constant)  # type: ignore[arg-type]
            except _ARROW_ERRORS:
                return None
            if target.name == "intDiv" and constant is not None and constant < 0:
                lo, hi = hi, lo  # dividing by a negative number reverses the order
            return KeyBounds(lo, hi, inner.known & _valid(lo) & _valid(hi), _result_type_text(lo), inner.nan_hidden)
        return None

    def scalar(self, value: object, key: KeyBounds) -> pa.Scalar | None:
        if key.type is not None:
            value = orderable_value(coerce_literal(value, key.type), key.type)
        # Of the bounds' type only when that holds the value exactly; else Arrow compares in a wider type.
        return scalar_like(value, key.lo)

    def evaluate(self, expr: Expr) -> tuple[np.ndarray, np.ndarray]:
        """(may be true, may be false) per granule."""
        try:
            return self._evaluate(expr)
        except _ARROW_ERRORS:
            return self.unknown()

    def _evaluate(self, expr: Expr) -> tuple[np.ndarray, np.ndarray]:
        if isinstance(expr, And):
            may_true, may_false = self.all(True), self.all(False)
            for arg in expr.args:
                arg_true, arg_false = self.evaluate(arg)
                may_true &= arg_true
                may_false |= arg_false
            return may_true, may_false
        if isinstance(expr, Or):
            may_true, may_false = self.all(False), self.all(True)
            for arg in expr.args:
                arg_true, arg_false = self.evaluate(arg)
                may_true |= arg_true
                may_false &= arg_false
            return may_true, may_false
        if isinstance(expr, Not):
            inner = expr.arg
            # Push NOT inwards where SQL's three-valued logic allows it exactly, so that the
            # comparisons underneath can still use key functions (which only bound "may be true").
            if isinstance(inner, Compare) and inner.op in _NEGATED and not self._hides_nan(inner):
                return self.evaluate(Compare(_NEGATED[inner.op], inner.left, inner.right))
            if isinstance(inner, Not):
                return self.evaluate(inner.arg)
            if isinstance(inner, And):
                return self.evaluate(Or(tuple(Not(arg) for arg in inner.args)))
            if isinstance(inner, Or):
                return self.evaluate(And(tuple(Not(arg) for arg in inner.args)))
            arg_true, arg_false = self.evaluate(inner)
            return arg_false, arg_true
        if isinstance(expr, Fixed):
            return self.all(expr.value), self.all(not expr.value)
        if isinstance(expr, Literal):
            if expr.value is None:
                return self.all(False), self.all(False)
            return self.all(bool(expr.value)), self.all(not bool(expr.value))
        if isinstance(expr, Compare):
            return self._compare(expr)
        if isinstance(expr, In):
            return self._in(expr)
        if isinstance(expr, IsNaN):
            return self._is_nan(expr)
        if isinstance(expr, (StartsWith, Like)):
            return self._prefix(expr)
        return self.unknown()

    def _hides_nan(self, expr: Compare) -> bool:
        """Whether either side's bounds may leave out NaNs: NOT (x <= v) holds for a NaN, x > v does
        not, so NOT cannot be pushed into such a comparison."""
        for side in (expr.left, expr.right):
            key = None if isinstance(side, Literal) else self.bounds_of(side)
            if key is not None and key.nan_hidden:
                return True
        return False

    def _through_key_function(self, column: Column, values: list[object]) -> tuple[Func, list[object]] | None:
        """A key element f(column) with f non-decreasing, and f of each value (for conditions on the column)."""
        if column.type is None:
            return None
        for key in self.bounds:
            if not (isinstance(key, Func) and is_monotonic(key.name, column.type) and key.args
                    and _strip_types(key.args[0]) == Column(column.name)):
                continue
            constant = None
            if len(key.args) > 1:
                second = key.args[1]
                if len(key.args) > 2 or not isinstance(second, Literal) or not isinstance(second.value, int):
                    continue
                constant = second.value
                if constant <= 0:
                    continue  # only non-decreasing functions keep the direction of a comparison
            try:
                coerced = [coerce_literal(value, column.type) for value in values]
                mapped = apply_function(key.name, pa.array(coerced), column.type, constant).to_pylist()
            except _ARROW_ERRORS:
                continue
            return key, mapped
        return None

    def _compare(self, expr: Compare) -> tuple[np.ndarray, np.ndarray]:
        target, other, op = expr.left, expr.right, expr.op
        if isinstance(target, Literal) and not isinstance(other, Literal):
            target, other = other, target
            op = {"<": ">", "<=": ">=", ">": "<", ">=": "<="}.get(op, op)
        if not isinstance(other, Literal):
            return self.unknown()
        key = self.bounds_of(target)
        if key is None and isinstance(target, Column) and other.value is not None and op in ("=", "<", "<=", ">", ">="):
            # c op v implies f(c) op' f(v) for a non-decreasing key element f(c) (strictness is lost).
            found = self._through_key_function(target, [other.value])
            if found is not None:
                loose = {"=": "=", "<": "<=", "<=": "<=", ">": ">=", ">=": ">="}[op]
                may_true, _ = self._compare(Compare(loose, found[0], Literal(found[1][0])))
                return may_true, self.all(True)
        if key is None:
            return self.unknown()
        if other.value is None:
            if op == "<=>":
                return self.unknown()
            return self.all(False), self.all(False)
        value = self.scalar(other.value, key)
        lo, hi, known = key.lo, key.hi, key.known
        if op in ("=", "<=>", "!="):
            inside = _mask(pc.and_(pc.less_equal(lo, value), pc.greater_equal(hi, value)))
            single = _mask(pc.and_(pc.equal(lo, value), pc.equal(hi, value)))
            may_true, may_false = inside, ~single
            if op == "!=":
                may_true, may_false = may_false, may_true
            elif op == "<=>":
                # NULL <=> v is false rather than NULL, and bounds say nothing about NULLs.
                may_false = self.all(True)
        elif op == "<":
            may_true, may_false = _mask(pc.less(lo, value)), _mask(pc.greater_equal(hi, value))
        elif op == "<=":
            may_true, may_false = _mask(pc.less_equal(lo, value)), _mask(pc.greater(hi, value))
        elif op == ">":
            may_true, may_false = _mask(pc.greater(hi, value)), _mask(pc.less_equal(lo, value))
        elif op == ">=":
            may_true, may_false = _mask(pc.greater_equal(hi, value)), _mask(pc.less(lo, value))
        else:
            return self.unknown()
        if key.nan_hidden:
            # A NaN the bounds leave out makes `x op v` false, and `x != v` true.
            if op == "!=":
                may_true = self.all(True)
            else:
                may_false = self.all(True)
        return may_true | ~known, may_false | ~known

    def _is_nan(self, expr: IsNaN) -> tuple[np.ndarray, np.ndarray]:
        key = self.bounds_of(expr.expr)
        if key is None or key.nan_hidden or not pa.types.is_floating(key.lo.type):
            return self.unknown()
        # Known bounds of a float key are numbers (NaN bounds are unknown): no NaN lies between them.
        return ~key.known, self.all(True)

    def _in(self, expr: In) -> tuple[np.ndarray, np.ndarray]:
        key = self.bounds_of(expr.expr)
        present = [v.value for v in expr.values if v.value is not None]
        if key is None and isinstance(expr.expr, Column) and present:
            found = self._through_key_function(expr.expr, present)
            if found is not None:
                may_true, _ = self._in(In(found[0], tuple(Literal(v) for v in found[1])))
                return may_true, self.all(True)
        if key is None:
            return self.unknown()
        if not present:
            # ClickHouse drops NULLs from IN lists: x IN (NULL) is false for every non-NULL x.
            return self.all(False), self.all(True)
        scalars = [scalar for v in present if (scalar := self.scalar(v, key)) is not None]
        if len(scalars) < len(present):
            return self.unknown()
        values = pa.array([s.as_py() for s in scalars], scalars[0].type)
        if values.type != key.lo.type:
            values = values.cast(key.lo.type)
        ordered = np.sort(as_numpy(values))
        known = key.known
        fill = values[0]
        lo = as_numpy(key.lo.fill_null(fill))
        hi = as_numpy(key.hi.fill_null(fill))
        # A granule may hold a listed value iff some value lies in [lo, hi]: two binary searches.
        first_at_or_above_lo = np.searchsorted(ordered, lo, side="left")
        first_above_hi = np.searchsorted(ordered, hi, side="right")
        may_true = first_above_hi > first_at_or_above_lo
        single = _mask(pc.and_(pc.equal(key.lo, key.hi), pc.is_in(key.lo, value_set=values)))
        if key.nan_hidden:
            single = self.all(False)  # a hidden NaN is in no list
        return may_true | ~known, ~single | ~known

    def _prefix(self, expr: StartsWith | Like) -> tuple[np.ndarray, np.ndarray]:
        if isinstance(expr, Like):
            if expr.case_insensitive:
                return self.unknown()
            prefix = like_prefix(expr.pattern)
            if not prefix:
                return self.unknown()
        else:
            prefix = expr.prefix
        key = self.bounds_of(expr.expr)
        if key is None or (key.type is not None and needs_ordering_map(key.type)) or not (pa.types.is_string(key.lo.type) or pa.types.is_binary(key.lo.type)
                               or pa.types.is_large_string(key.lo.type) or pa.types.is_large_binary(key.lo.type)):
            return self.unknown()
        raw = prefix.encode()
        upper = _next_prefix(raw)
        as_text = pa.types.is_string(key.lo.type) or pa.types.is_large_string(key.lo.type)
        low_value = pa.scalar(prefix if as_text else raw, key.lo.type)
        may_true = _mask(pc.greater_equal(key.hi, low_value))
        if upper is not None:
            try:
                high_value = pa.scalar(upper.decode() if as_text else upper, key.lo.type)
            except UnicodeDecodeError:
                high_value = None
            if high_value is not None:
                may_true &= _mask(pc.less(key.lo, high_value))
        return may_true | ~key.known, self.all(True)


def _result_type_text(array: pa.Array) -> str | None:
    """ClickHouse type of values a key function produced (enough for further functions and literals)."""
    if pa.types.is_date32(array.type):
        return "Date"
    if pa.types.is_integer(array.type):
        width = array.type.bit_width
        return f"{'Int' if pa.types.is_signed_integer(array.type) else 'UInt'}{width}"
    return None


def _next_prefix(prefix: bytes) -> bytes | None:
    """The smallest byte string greater than every string starting with `prefix` (None if none exists)."""
    trimmed = prefix.rstrip(b"\xff")
    if not trimmed:
        return None
    return trimmed[:-1] + bytes([trimmed[-1] + 1])


def _key_expr(key: str | Expr) -> Expr:
    return parse_expression(key) if isinstance(key, str) else key


def primary_key_bounds(
    key_columns: Sequence[tuple[str | Expr, str]], index: Sequence[pa.Array], n_granules: int | None = None
) -> tuple[dict[Expr, KeyBounds], int]:
    """Per-granule bounds of each key element from the sparse primary index, and the number of granules.

    `index[k]` holds key element k at the first row of every granule, plus (as primary.idx has it) the
    last row's key as a final entry. Granule g's keys lie in [index[g], index[g+1]] lexicographically, so
    element k is bounded there only when elements 0..k-1 are equal at both ends.
    """
    bounds, (granules,) = _many_primary_key_bounds(key_columns, [index], [n_granules])
    return bounds, granules


def _many_primary_key_bounds(
    key_columns: Sequence[tuple[str | Expr, str]], indexes: Sequence[Sequence[pa.Array]],
    n_granules: Sequence[int | None],
) -> tuple[dict[Expr, KeyBounds], list[int]]:
    """primary_key_bounds of several parts' indexes, one after another: the bounds of every granule of
    every part in one array per key element, and each part's number of granules."""
    los: list[list[pa.Array]] = [[] for _ in key_columns]
    his: list[list[pa.Array]] = [[] for _ in key_columns]
    counts = []
    for index, declared in zip(indexes, n_granules, strict=True):
        if len(index) != len(key_columns):
            raise ExpressionError(f"primary index has {len(index)} columns, the key has {len(key_columns)}")
        arrays = [column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column for column in index]
        arrays = [a.dictionary_decode() if pa.types.is_dictionary(a.type) else a for a in arrays]
        marks = len(arrays[0]) if arrays else 0
        if any(len(a) != marks for a in arrays):
            raise ExpressionError("primary index columns differ in length")
        granules = (marks - 1 if declared is None else declared) if arrays else (declared or 0)
        if arrays and (granules not in (marks - 1, marks) or granules < 0):
            raise ExpressionError(f"primary index has {marks} entries, which does not fit {granules} granules")
        counts.append(granules)
        has_final = granules == marks - 1
        for k, array in enumerate(arrays):
            los[k].append(array.slice(0, granules))
            his[k].append(array.slice(1, granules) if has_final else
                          pa.concat_arrays([array.slice(1), pa.nulls(1, array.type)]))
    if not key_columns:
        return {}, counts
    total = sum(counts)
    bounds: dict[Expr, KeyBounds] = {}
    prefix_equal = np.ones(total, dtype=bool)
    for k, (key, type_text) in enumerate(key_columns):
        lo, hi = _joined(los[k]), _joined(his[k])
        if needs_ordering_map(type_text):
            lo, hi = orderable(lo, type_text), orderable(hi, type_text)
        valid = _valid(lo) & _valid(hi)
        bounds[_key_expr(key)] = KeyBounds(lo, hi, prefix_equal & valid, type_text)
        prefix_equal = prefix_equal & valid & _mask(pc.equal(lo, hi))
    return bounds, counts


def _joined(arrays: list[pa.Array]) -> pa.Array:
    return arrays[0] if len(arrays) == 1 else pa.concat_arrays(arrays)


def granule_ranges_of_parts(
    predicate: Expr | None,
    key_columns: Sequence[tuple[str | Expr, str]],
    indexes: Sequence[Sequence[pa.Array]],
    n_granules: Sequence[int | None],
) -> list[list[tuple[int, int]]]:
    """`granule_ranges` of several parts with the same key, evaluated once over all their granules
    (only those a binary search of the first key element leaves, when the predicate bounds it)."""
    constraints = first_key_constraints(predicate, key_columns[0][0]) if key_columns else []
    offsets = [0] * len(indexes)
    if constraints:
        indexes, n_granules, offsets = _narrowed(constraints, key_columns[0][1], indexes, n_granules)
    bounds, counts = _many_primary_key_bounds(key_columns, indexes, n_granules)
    if predicate is None or not bounds:
        runs = [[(0, granules)] if granules else [] for granules in counts]
    else:
        may_true, _ = _Evaluator(bounds, sum(counts)).evaluate(predicate)
        runs = _runs_of_parts(np.asarray(may_true, dtype=bool), counts)
    return [[(begin + offset, end + offset) for begin, end in part_runs] if offset else part_runs
            for part_runs, offset in zip(runs, offsets, strict=True)]


def _narrowed(
    constraints: Sequence[tuple[str, object]], first_type: str, indexes: Sequence[Sequence[pa.Array]],
    n_granules: Sequence[int | None],
) -> tuple[list[Sequence[pa.Array]], list[int | None], list[int]]:
    """Each part's index cut to the granules `narrow_by_first_key` leaves, their count, and the
    offset of the first one; a part whose index is not consistent is left whole (its check raises)."""
    cut_indexes: list[Sequence[pa.Array]] = []
    cut_granules: list[int | None] = []
    offsets: list[int] = []
    constants: dict[pa.DataType, list[tuple[str, np.generic]]] = {}  # per index type: parts mostly share one
    for index, declared in zip(indexes, n_granules, strict=True):
        marks = {len(column) for column in index}
        granules = declared if declared is not None else (min(marks) - 1 if marks else 0)
        if len(marks) != 1 or granules <= 0:
            cut_indexes.append(index)
            cut_granules.append(declared)
            offsets.append(0)
            continue
        if index[0].type not in constants:
            constants[index[0].type] = bound_constants(constraints, index[0], first_type)
        begin, end = narrow_by_first_key(constants[index[0].type], first_type, index[0], granules)
        stop = min(end + 1, marks.pop())  # the entry after the last granule bounds it from above
        cut_indexes.append([column.slice(begin, stop - begin) for column in index])
        cut_granules.append(end - begin)
        offsets.append(begin)
    return cut_indexes, cut_granules, offsets


def _runs_of_parts(mask: np.ndarray, counts: Sequence[int]) -> list[list[tuple[int, int]]]:
    """`_runs` of each part's slice of `mask` (parts laid one after another), found in one pass:
    a run never crosses from one part into the next."""
    starts = np.concatenate(([0], np.cumsum(counts, dtype=np.int64)))
    breaks = np.zeros(len(mask) + 1, dtype=bool)
    breaks[starts] = True  # part boundaries end and start runs
    padded = np.concatenate(([False], mask, [False]))
    before, at = padded[:-1], padded[1:]  # at position i (0..n): mask[i - 1], mask[i]
    run_starts = np.flatnonzero(at & (~before | breaks))
    run_ends = np.flatnonzero(before & (~at | breaks))
    part_of_run = np.searchsorted(starts, run_starts, side="right") - 1
    runs: list[list[tuple[int, int]]] = [[] for _ in counts]
    offsets = starts[part_of_run]
    for part, begin, end in zip(part_of_run.tolist(), (run_starts - offsets).tolist(), (run_ends - offsets).tolist()):
        runs[part].append((begin, end))
    return runs


def granule_ranges(
    predicate: Expr | None,
    key_columns: Sequence[tuple[str | Expr, str]],
    index: Sequence[pa.Array],
    n_granules: int | None = None,
) -> list[tuple[int, int]]:
    """Granule ranges [(begin, end), ...] (end exclusive) that may hold rows matching `predicate`.

    `key_columns` lists the primary key elements as (expression text or tree, ClickHouse type);
    `index` holds one array per element (see `primary_key_bounds`).
    """
    return granule_ranges_of_parts(predicate, key_columns, [index], [n_granules])[0]


def _single_bounds(values: Mapping[Expr, Sequence[tuple[object, object]]],
                   types: Mapping[Expr, str | None]) -> dict[Expr, KeyBounds]:
    """Bounds of key expressions in n parts, from each part's (low, high) pair per expression."""
    bounds = {}
    for key, pairs in values.items():
        type_text = types.get(key)
        lows = [low for low, _ in pairs]
        highs = [high for _, high in pairs]
        try:
            if type_text is not None:
                lows = [coerce_literal(low, type_text) for low in lows]
                highs = [coerce_literal(high, type_text) for high in highs]
            both = pa.array(lows + highs)
        except _ARROW_ERRORS:
            continue
        lo, hi = both.slice(0, len(pairs)), both.slice(len(pairs))
        if type_text is not None and needs_ordering_map(type_text):
            lo, hi = orderable(lo, type_text), orderable(hi, type_text)
        bounds[key] = KeyBounds(lo, hi, _valid(lo) & _valid(hi), type_text, pa.types.is_floating(lo.type))
    return bounds


def may_match_minmax(
    predicate: Expr | None,
    minmax: Mapping[str, tuple[object, object]],
    column_types: Mapping[str, str] | None = None,
) -> bool:
    """Whether a part whose columns lie within `minmax` (column → (min, max)) may hold matching rows."""
    if predicate is None:
        return True
    types = column_types or {}
    keyed: dict[Expr, list[tuple[object, object]]] = {Column(name): [pair] for name, pair in minmax.items()}
    bounds = _single_bounds(keyed, {Column(name): types.get(name) for name in minmax})
    may_true, _ = _Evaluator(bounds, 1).evaluate(predicate)
    return bool(may_true[0])


def may_match_partition(
    predicate: Expr | None,
    partition_key: PartitionKey,
    partition_values: Sequence[object],
    minmax: Mapping[str, tuple[object, object]] | None = None,
) -> bool:
    """Whether a part of partition `partition_values` (with column ranges `minmax`) may hold matching rows.

    Conditions on the partition expression itself (`toYYYYMM(d) = 202402`) are decided by the exact
    partition values; conditions on columns by the minmax ranges, also through monotonic functions.
    """
    return bool(may_match_partitions(predicate, partition_key, [partition_values], [minmax or {}])[0])


def may_match_partitions(
    predicate: Expr | None,
    partition_key: PartitionKey,
    partition_values: Sequence[Sequence[object]],
    minmax: Sequence[Mapping[str, tuple[object, object]]],
) -> np.ndarray:
    """`may_match_partition` of n parts (their partition values and minmax ranges), evaluated once."""
    count = len(partition_values)
    if predicate is None or count == 0:
        return np.ones(count, dtype=bool)
    for values in partition_values:
        if len(values) != len(partition_key.elements):
            raise ExpressionError(
                f"partition key {partition_key.expression!r} has {len(partition_key.elements)} values, got {len(values)}"
            )
    keyed: dict[Expr, list[tuple[object, object]]] = {}
    types: dict[Expr, str | None] = {}
    column_types = dict(zip(partition_key.columns, partition_key.column_types, strict=True))
    names = set(minmax[0]) if minmax else set()
    if all(set(ranges) == names for ranges in minmax):
        for name in names:
            keyed[Column(name)] = [ranges[name] for ranges in minmax]
            types[Column(name)] = column_types.get(name)
    for position, (element, type_text) in enumerate(zip(partition_key.elements, partition_key.result_types,
                                                        strict=True)):
        stripped = _strip_types(element)
        keyed[stripped] = [(values[position], values[position]) for values in partition_values]
        types[stripped] = type_text
    bounds = _single_bounds(keyed, types)
    may_true, _ = _Evaluator(bounds, count).evaluate(predicate)
    return may_true


def key_columns_for(elements: Sequence[str], schema: Mapping[str, str]) -> list[tuple[str, str]]:
    """(expression text, ClickHouse type) of each ORDER BY / PRIMARY KEY element, for `granule_ranges`.

    Elements that are functions this package cannot type (e.g. `cityHash64(s)`) still prune nothing
    wrongly: they get the type 'Unknown' and only conditions on exactly that expression use them.
    """
    return [(text, type_text or "Unknown") for text, type_text in zip(elements, key_element_types(elements, schema), strict=True)]

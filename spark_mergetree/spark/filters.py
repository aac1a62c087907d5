"""Spark's pushed filters → the predicate tree of spark_mergetree.expressions, for pruning only.

Reads do not use it while PySpark shares one planned read among every scan of a loaded DataFrame
(source.py, docs/spark.md "Limits"); it is the translation a reader with a plan of its own per
scan would prune with. The tree only has to select a *superset* of the matching rows (Spark keeps
every filter and applies it), so a filter we cannot translate is dropped (the conjunction just
gets weaker), and a NOT over something untranslatable is dropped as a whole rather than
half-translated.
"""

from __future__ import annotations

import datetime as dt
import decimal
import math
from collections.abc import Iterable

import pyarrow as pa

from spark_mergetree.expressions import predicate as p

try:
    from pyspark.sql.datasource import (
        EqualNullSafe,
        EqualTo,
        Filter,
        GreaterThan,
        GreaterThanOrEqual,
        In,
        IsNotNull,
        IsNull,
        LessThan,
        LessThanOrEqual,
        Not,
        StringContains,
        StringEndsWith,
        StringStartsWith,
    )
except ImportError:  # PySpark 4.0: Python data sources are offered no filters, nothing to translate
    FILTER_PUSHDOWN = False
    _COMPARISONS: dict[type, str] = {}
else:
    FILTER_PUSHDOWN = True  # PySpark 4.1+ (with spark.sql.python.filterPushdown.enabled)
    _COMPARISONS = {
        EqualTo: "=", GreaterThan: ">", GreaterThanOrEqual: ">=", LessThan: "<", LessThanOrEqual: "<=",
    }
_NEGATED = {"=": "!=", "<": ">=", "<=": ">", ">": "<=", ">=": "<"}


def _literal_ok(value: object, column_type: pa.DataType) -> bool:
    """Whether a pushed constant means the same thing to the engine as to Spark.

    A timestamp without a time zone is ambiguous between Spark's session zone and the column's zone;
    pruning on a wrong reading would drop matching rows, so such filters are not used for pruning.
    Floats compared against integer columns are left to Spark as well (rounding).
    """
    if value is None:
        return False
    if isinstance(value, dt.datetime):
        return value.tzinfo is not None
    if isinstance(value, float) and (pa.types.is_integer(column_type) or pa.types.is_decimal(column_type)):
        return False
    if isinstance(value, decimal.Decimal) and pa.types.is_integer(column_type):
        return value == value.to_integral_value()
    return isinstance(value, (bool, int, float, str, decimal.Decimal, dt.date))


def _is_nan(value: object) -> bool:
    return isinstance(value, float) and math.isnan(value)


def _spark_compare(op: str, column: p.Column, value: object, floating: bool) -> p.Expr | None:
    """Spark's `column op value` for a non-NULL constant, in the engine's (ClickHouse's) terms.

    Spark orders a float NaN above every number and equal to itself; ClickHouse's comparisons are
    false for NaN (but `!=`, true). So on a float column `x > v` is `x > v OR isNaN(x)`, `x = NaN` is
    `isNaN(x)`, and comparisons a NaN constant makes (nearly) always true are not used (None).
    """
    if floating and _is_nan(value):
        if op in ("=", ">="):
            return p.IsNaN(column)  # only NaN equals NaN, and nothing is above it
        if op == "!=":
            return p.Not(p.IsNaN(column))
        return None  # x < NaN, x <= NaN: every number; x > NaN: nothing (not worth pruning on)
    compared = p.Compare(op, column, p.Literal(_plain(value)))
    if floating and op in (">", ">="):
        return p.Or((compared, p.IsNaN(column)))
    return compared


def _convert(f: Filter, schema: pa.Schema, negated: bool = False) -> p.Expr | None:
    """The filter (or, `negated`, its NOT) in the engine's terms, with Spark's semantics: NaN is
    equal to itself and above every number, NOT (x <=> v) holds for NULL, NULL in a comparison
    makes it NULL. NOT is pushed down to the leaves, so that every leaf keeps Spark's meaning."""
    if isinstance(f, Not):
        return _convert(f.child, schema, not negated)
    attribute: tuple[str, ...] = getattr(f, "attribute", ())
    if len(attribute) != 1 or schema.get_field_index(attribute[0]) < 0:
        return None  # nested struct fields and unknown names are left to Spark
    name = attribute[0]
    column_type = schema.field(name).type
    floating = pa.types.is_floating(column_type)
    column = p.Column(name)
    if isinstance(f, IsNull):
        return p.IsNotNull(column) if negated else p.IsNull(column)
    if isinstance(f, IsNotNull):
        return p.IsNull(column) if negated else p.IsNotNull(column)
    if type(f) in _COMPARISONS:
        value = getattr(f, "value", None)
        if not _literal_ok(value, column_type):
            return None
        op = _COMPARISONS[type(f)]
        # Spark's order is total over non-NULL values (NaN last): NOT (x < v) is x >= v, NOT (x = v) is x != v.
        return _spark_compare(_NEGATED[op] if negated else op, column, value, floating)
    if isinstance(f, EqualNullSafe):
        if f.value is None:
            return p.IsNotNull(column) if negated else p.IsNull(column)
        if not _literal_ok(f.value, column_type):
            return None
        if not negated:
            return _spark_compare("=", column, f.value, floating)
        differs = _spark_compare("!=", column, f.value, floating)
        return None if differs is None else p.Or((differs, p.IsNull(column)))  # NULL <=> v is false
    if isinstance(f, In):
        values = list(f.value)
        non_null = [v for v in values if v is not None]
        if not non_null or not all(_literal_ok(v, column_type) for v in non_null):
            return None
        numbers = [v for v in non_null if not (floating and _is_nan(v))]
        has_nan = len(numbers) < len(non_null)
        listed = p.In(column, tuple(p.Literal(_plain(v)) for v in numbers)) if numbers else None
        if negated:
            if len(non_null) < len(values):
                return None  # x NOT IN (..., NULL) is never true: nothing to keep, left to Spark
            terms: list[p.Expr] = [t for t in (None if listed is None else p.Not(listed),
                                 p.Not(p.IsNaN(column)) if has_nan else None) if t is not None]
            return terms[0] if len(terms) == 1 else p.And(tuple(terms))
        terms = [t for t in (listed, p.IsNaN(column) if has_nan else None) if t is not None]
        return terms[0] if len(terms) == 1 else p.Or(tuple(terms))
    if pa.types.is_string(column_type) and isinstance(getattr(f, "value", None), str):
        matched: p.Expr | None = None
        if isinstance(f, StringStartsWith):
            matched = p.StartsWith(column, f.value)
        elif isinstance(f, StringEndsWith):
            matched = p.EndsWith(column, f.value)
        elif isinstance(f, StringContains):
            matched = p.Contains(column, f.value)
        if matched is not None:
            return p.Not(matched) if negated else matched  # NULL stays NULL either way
    return None


def _plain(value: object) -> object:
    if isinstance(value, decimal.Decimal) and value == value.to_integral_value():
        return int(value)
    return value


def to_predicate(filters: Iterable[Filter], schema: pa.Schema) -> p.Expr | None:
    """AND of every translatable filter, or None when nothing can be used for pruning."""
    if not FILTER_PUSHDOWN:
        return None
    terms = [term for term in (_convert(f, schema) for f in filters) if term is not None]
    if not terms:
        return None
    return terms[0] if len(terms) == 1 else p.And(tuple(terms))

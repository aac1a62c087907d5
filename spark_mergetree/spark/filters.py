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


def _convert(f: Filter, schema: pa.Schema) -> p.Expr | None:
    if isinstance(f, Not):
        inner = _convert(f.child, schema)
        return None if inner is None else p.Not(inner)
    attribute: tuple[str, ...] = getattr(f, "attribute", ())
    if len(attribute) != 1 or schema.get_field_index(attribute[0]) < 0:
        return None  # nested struct fields and unknown names are left to Spark
    name = attribute[0]
    column_type = schema.field(name).type
    column = p.Column(name)
    if isinstance(f, IsNull):
        return p.IsNull(column)
    if isinstance(f, IsNotNull):
        return p.IsNotNull(column)
    if type(f) in _COMPARISONS:
        value = getattr(f, "value", None)
        if not _literal_ok(value, column_type):
            return None
        return p.Compare(_COMPARISONS[type(f)], column, p.Literal(_plain(value)))
    if isinstance(f, EqualNullSafe):
        if f.value is None:
            return p.IsNull(column)
        if not _literal_ok(f.value, column_type):
            return None
        return p.Compare("=", column, p.Literal(_plain(f.value)))
    if isinstance(f, In):
        values = list(f.value)
        non_null = [v for v in values if v is not None]
        if not non_null or not all(_literal_ok(v, column_type) for v in non_null):
            return None
        return p.In(column, tuple(p.Literal(_plain(v)) for v in non_null))
    if pa.types.is_string(column_type) and isinstance(getattr(f, "value", None), str):
        if isinstance(f, StringStartsWith):
            return p.StartsWith(column, f.value)
        if isinstance(f, StringEndsWith):
            return p.EndsWith(column, f.value)
        if isinstance(f, StringContains):
            return p.Contains(column, f.value)
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

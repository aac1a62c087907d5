"""The elements of an aggregate projection: each one's ClickHouse column name, type and values.

ClickHouse names a projection part's columns by each expression's column name: functions in prefix
form under ClickHouse's names (`a * 2` is `multiply(a, 2)`, `1.0 < a` is `less(1., a)`, a chain of
ANDs one `and(...)`), literals as SQL spells them (integral floats with a trailing dot), and an
aggregate function's parameters as a list of their own (`quantile(0.9)(x)`). A GROUP BY element is
a column or a function this package evaluates (the functions of keys); an aggregate's arguments are
those, arithmetic (+, -, *, /) of numbers with ClickHouse's result types, or conditions (comparisons joined by AND/OR/NOT, UInt8, Nullable when a column they compare
is), and its state type is AggregateFunction(name(parameters), argument types) as ClickHouse
writes it. Whatever cannot be named, typed or computed exactly is refused by name.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from spark_mergetree.errors import ExpressionError, UnsupportedError
from spark_mergetree.expressions.ddl import split_call
from spark_mergetree.expressions.functions import literal_type
from spark_mergetree.expressions.predicate import (
    And,
    Column,
    Compare,
    Expr,
    Func,
    IsNotNull,
    IsNull,
    Literal,
    Not,
    Or,
    bind,
    evaluate,
    evaluate_value,
    parse_expression,
)
from spark_mergetree.format.aggregate_states import created_version
from spark_mergetree.format.types import AggregateFunction, parse_type

_COMPARE_NAMES = {"=": "equals", "!=": "notEquals", "<": "less", "<=": "lessOrEquals", ">": "greater",
                  ">=": "greaterOrEquals", "<=>": "isNotDistinctFrom"}
_FLIPPED = {"=": "=", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<=", "<=>": "<=>"}
_CONDITIONS = (Compare, And, Or, Not, IsNull, IsNotNull)
_ARITHMETIC = ("plus", "minus", "multiply", "divide")
_WIDER = {1: 2, 2: 4, 4: 8, 8: 8}  # ClickHouse's next size up for +, - and * of integers
_ARROW_NUMBERS = {f"{sign}Int{bits}": getattr(pa, f"{sign.lower()}int{bits}")() for sign in ("U", "")
                  for bits in (8, 16, 32, 64)} | {"Float32": pa.float32(), "Float64": pa.float64()}


@dataclass(frozen=True)
class Element:
    """A GROUP BY element or an aggregate's argument: its column name, ClickHouse type and bound tree."""

    name: str
    type: str
    expr: Expr


@dataclass(frozen=True)
class Aggregate:
    """An aggregate of the select list: its column name, state type and arguments."""

    name: str
    state: AggregateFunction
    arguments: tuple[Element, ...]


def _literal_name(value: object, text: str) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float) and math.isfinite(value):
        if value == int(value) and abs(value) < 1e15:
            return f"{int(value)}."
        shortest = repr(value)
        if "e" not in shortest:
            return shortest
    if isinstance(value, str):
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    raise UnsupportedError(f"{text}: the constant {value!r} cannot be named as ClickHouse names it")


def column_name(expr: Expr, text: str) -> str:
    """ClickHouse's column name of `expr` (parsed from `text`, which messages name)."""
    if isinstance(expr, Column):
        return expr.name
    if isinstance(expr, Literal):
        return _literal_name(expr.value, text)
    if isinstance(expr, Compare):
        left, right, op = expr.left, expr.right, expr.op
        if expr.written_reversed:
            left, right, op = right, left, _FLIPPED[op]
        return f"{_COMPARE_NAMES[op]}({column_name(left, text)}, {column_name(right, text)})"
    if isinstance(expr, (And, Or)):
        return f"{'and' if isinstance(expr, And) else 'or'}({', '.join(column_name(a, text) for a in expr.args)})"
    if isinstance(expr, Not):
        return f"not({column_name(expr.arg, text)})"
    if isinstance(expr, (IsNull, IsNotNull)):
        return f"{'isNull' if isinstance(expr, IsNull) else 'isNotNull'}({column_name(expr.expr, text)})"
    if isinstance(expr, Func):
        return f"{expr.name}({', '.join(column_name(a, text) for a in expr.args)})"
    raise UnsupportedError(f"{text}: this expression cannot be named as ClickHouse names it")


def _columns_nullable(expr: Expr, schema: dict[str, str]) -> bool:
    if isinstance(expr, Column):
        return schema.get(expr.name, "").removeprefix("LowCardinality(").startswith("Nullable(")
    if isinstance(expr, (IsNull, IsNotNull, Literal)):
        return False
    children = [getattr(expr, name) for name in ("left", "right", "arg", "expr") if hasattr(expr, name)]
    children += list(getattr(expr, "args", ()))
    return any(_columns_nullable(c, schema) for c in children if isinstance(c, Expr))


def _low_cardinality(expr: Expr, schema: dict[str, str]) -> bool:
    """Whether ClickHouse's type of `expr` is LowCardinality: a LowCardinality column, or a function
    or comparison whose one argument that is not a constant is (ClickHouse then computes it once per
    dictionary value); not AND, OR or a NULL test."""
    if isinstance(expr, Column):
        return schema.get(expr.name, "").startswith("LowCardinality(")
    if isinstance(expr, Compare):
        operands = [expr.left, expr.right]
    elif isinstance(expr, Not):
        operands = [expr.arg]
    elif isinstance(expr, Func):
        operands = list(expr.args)
    else:
        return False
    varying = [o for o in operands if not isinstance(o, Literal)]
    return len(varying) == 1 and _low_cardinality(varying[0], schema)


def _typed(type_text: str, parsed: Expr, schema: dict[str, str]) -> str:
    """`type_text` as LowCardinality where ClickHouse's type of `parsed` is."""
    if type_text.startswith("LowCardinality(") or not _low_cardinality(parsed, schema):
        return type_text
    return f"LowCardinality({type_text})"


def _number_type(expr: Expr) -> str | None:
    """The type of a numeric operand: a column's or function's (not Nullable), an integer literal's
    narrowest, Float64 for a float literal."""
    if isinstance(expr, Literal):
        if isinstance(expr.value, bool):
            return "UInt8"
        if isinstance(expr.value, int):
            return literal_type(expr.value)
        return "Float64" if isinstance(expr.value, float) else None
    if isinstance(expr, Func) and expr.name in _ARITHMETIC:
        return arithmetic_type(expr)
    found = expr.type if isinstance(expr, (Column, Func)) else None
    if found is not None and found.startswith("Nullable("):
        found = found[len("Nullable("):-1]
    return found if found in _ARROW_NUMBERS else None


def arithmetic_type(expr: Func) -> str | None:
    """ClickHouse's result type of +, -, * or / of two numbers of 8 to 64 bits (None otherwise): a
    float when either is (Float64: ClickHouse widens Float32 too), else an integer one size up from
    the wider operand (at most 64 bits), signed when either operand is or for -; / gives Float64."""
    if expr.name not in _ARITHMETIC or len(expr.args) != 2:
        return None
    types = [_number_type(arg) for arg in expr.args]
    if any(t is None or t not in _ARROW_NUMBERS for t in types):
        return None
    if expr.name == "divide" or any(t.startswith("Float") for t in types if t):
        return "Float64"
    widest = max(_ARROW_NUMBERS[t].bit_width // 8 for t in types if t)
    signed = expr.name == "minus" or any(t.startswith("Int") for t in types if t)
    return f"{'Int' if signed else 'UInt'}{_WIDER[widest] * 8}"


def element(text: str, schema: dict[str, str], condition: bool = False) -> Element:
    """A GROUP BY element or an aggregate's argument (`condition`: -If's last one, a condition; a
    condition elsewhere, e.g. retention's, must be of columns that are not Nullable)."""
    try:
        parsed = parse_expression(text)
        expr = bind(parsed, schema)
    except (ExpressionError, UnsupportedError) as error:
        raise UnsupportedError(f"{text}: {error}") from None
    # (named from the tree as written: binding rewrites comparisons with constants)
    if isinstance(parsed, _CONDITIONS) and (condition or not _columns_nullable(parsed, schema)):
        # (NULL conditions count as false, as ClickHouse's -If takes them; the type keeps Nullable)
        nullable = _columns_nullable(parsed, schema)
        return Element(column_name(parsed, text), _typed("Nullable(UInt8)" if nullable else "UInt8", parsed, schema),
                       expr)
    if isinstance(expr, (Column, Func)) and expr.type is not None:
        return Element(column_name(parsed, text), _typed(expr.type, parsed, schema), expr)
    arithmetic = arithmetic_type(expr) if isinstance(expr, Func) else None
    if arithmetic is not None:
        nullable = _columns_nullable(parsed, schema)
        return Element(column_name(parsed, text), f"Nullable({arithmetic})" if nullable else arithmetic, expr)
    raise UnsupportedError(f"{text}: only columns, the functions of keys this version evaluates"
                           + (" and conditions" if condition else "") + " are supported here")


_ALIASED = re.compile(r"^(.*\S)\s+AS\s+(`?)([A-Za-z_][A-Za-z0-9_]*)\2\s*$", re.IGNORECASE | re.DOTALL | re.ASCII)


_DISTINCT = re.compile(r"^DISTINCT\s+(.+)$", re.IGNORECASE | re.DOTALL)


def split_alias(text: str) -> tuple[str, str | None]:
    """A select element without its alias (`sum(v) AS total` is ('sum(v)', 'total')): a projection's
    columns are named by their expressions, not by aliases."""
    match = _ALIASED.match(text.strip())
    return (match.group(1), match.group(3)) if match else (text, None)


def aggregate(text: str, schema: dict[str, str]) -> Aggregate:
    """An aggregate function call of an aggregate projection's select list."""
    call = split_call(text)
    if call is None or len(call[1]) > 2:
        raise UnsupportedError(f"{text}: not an aggregate function call")
    function, lists = call
    parameters = lists[0] if len(lists) == 2 else ()
    arguments = lists[-1]
    if function == "count" and arguments == ("*",):
        arguments = ()
    distinct = _DISTINCT.match(arguments[0]) if function.lower() == "count" and len(arguments) == 1 else None
    if function == "countDistinct" or distinct:
        # ClickHouse computes a distinct count as its count_distinct_implementation, uniqExact by
        # default, and names and types the column so: `count(DISTINCT s)` is `uniqExact(s)`.
        function, arguments = "uniqExact", ((distinct.group(1),) if distinct else arguments)
    elements = tuple(element(a, schema, condition=function.endswith("If") and i == len(arguments) - 1)
                     for i, a in enumerate(arguments))
    parameter_names = []
    for parameter in parameters:
        value = parse_expression(parameter)
        if not isinstance(value, Literal):
            raise UnsupportedError(f"{text}: parameter {parameter} is not a constant")
        parameter_names.append(_literal_name(value.value, text))
    # (with the state version ClickHouse's CREATE gives: `AggregateFunction(1, sumMap, ...)`)
    state = created_version(parse_type("AggregateFunction(" + ", ".join(
        [function + (f"({', '.join(parameter_names)})" if parameter_names else ""), *(e.type for e in elements)]) + ")"))
    assert isinstance(state, AggregateFunction)
    name = function + (f"({', '.join(parameter_names)})" if parameters else "") + \
        f"({', '.join(e.name for e in elements)})"
    return Aggregate(name, state, elements)


def values(element: Element, table: pa.Table) -> pa.Array:
    """The element's value for every row of `table` (a condition's as UInt8, NULL as 0)."""
    if element.type.removeprefix("LowCardinality(").startswith(("UInt8", "Nullable(UInt8)")) \
            and not isinstance(element.expr, (Column, Func)):
        return pa.array(np.asarray(evaluate(element.expr, table)).astype(np.uint8))
    result = evaluate_value(element.expr, table)
    if isinstance(element.expr, Func) and element.expr.name in _ARITHMETIC:
        # (computed in 64 bits, wrapping as ClickHouse's; the narrower result types hold every value)
        return result.cast(_ARROW_NUMBERS[element.type.removeprefix("Nullable(").removesuffix(")")], safe=False)
    return result

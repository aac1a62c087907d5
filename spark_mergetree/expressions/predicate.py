"""WHERE predicates: an immutable expression tree, parsing from SQL text, binding to a schema, evaluation.

The tree is the one currency for filters: it is parsed from ClickHouse/SQL text here, built from
Spark filters by the Spark layer, pruned against indexes by `key_condition`, and finally evaluated
over Arrow tables to filter rows exactly. Evaluation follows SQL three-valued logic: a row whose
condition is NULL is not selected.
"""

from __future__ import annotations

import datetime as dt
import decimal
import uuid
import zoneinfo
from collections.abc import Mapping
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc
import sqlglot
from sqlglot import exp

from spark_mergetree.errors import ExpressionError, UnsupportedError
from spark_mergetree.expressions.functions import (
    SUPPORTED_FUNCTIONS,
    apply_function,
    needs_ordering_map,
    orderable,
    orderable_value,
    result_type,
    type_info,
)

COMPARE_OPS = ("=", "!=", "<", "<=", ">", ">=", "<=>")
_FLIPPED = {"=": "=", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<=", "<=>": "<=>"}


class Expr:
    """Base of every predicate node; nodes are frozen dataclasses, compared and hashed by value."""

    def __and__(self, other: Expr) -> Expr:
        return And((self, other))

    def __or__(self, other: Expr) -> Expr:
        return Or((self, other))

    def __invert__(self) -> Expr:
        return Not(self)


@dataclass(frozen=True)
class Column(Expr):
    name: str
    type: str | None = None  # ClickHouse type string, filled in by bind()


@dataclass(frozen=True)
class Literal(Expr):
    value: object
    type: str | None = None  # the type the value was coerced to by bind()


@dataclass(frozen=True)
class Compare(Expr):
    op: str
    left: Expr
    right: Expr

    def __post_init__(self) -> None:
        if self.op not in COMPARE_OPS:
            raise ExpressionError(f"unknown comparison {self.op!r}; known: {', '.join(COMPARE_OPS)}")


@dataclass(frozen=True)
class In(Expr):
    expr: Expr
    values: tuple[Literal, ...]

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "values", tuple(v if isinstance(v, Literal) else Literal(v) for v in self.values)
        )


@dataclass(frozen=True)
class And(Expr):
    args: tuple[Expr, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "args", tuple(self.args))


@dataclass(frozen=True)
class Or(Expr):
    args: tuple[Expr, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "args", tuple(self.args))


@dataclass(frozen=True)
class Not(Expr):
    arg: Expr


@dataclass(frozen=True)
class IsNull(Expr):
    expr: Expr


@dataclass(frozen=True)
class IsNotNull(Expr):
    expr: Expr


@dataclass(frozen=True)
class Func(Expr):
    """A function call by its ClickHouse name, e.g. Func('toYYYYMM', (Column('d'),))."""

    name: str
    args: tuple[Expr, ...] = field(default=())
    type: str | None = None  # result type, filled in by bind() for functions this package knows

    def __post_init__(self) -> None:
        object.__setattr__(self, "args", tuple(self.args))


@dataclass(frozen=True)
class Like(Expr):
    """SQL LIKE: '%' any run, '_' one character, backslash escapes."""

    expr: Expr
    pattern: str
    case_insensitive: bool = False


@dataclass(frozen=True)
class StartsWith(Expr):
    expr: Expr
    prefix: str


@dataclass(frozen=True)
class EndsWith(Expr):
    expr: Expr
    suffix: str


@dataclass(frozen=True)
class Contains(Expr):
    expr: Expr
    substring: str


def between(expr: Expr, low: object, high: object) -> Expr:
    """`expr BETWEEN low AND high`, which is `expr >= low AND expr <= high`."""
    low_lit = low if isinstance(low, Expr) else Literal(low)
    high_lit = high if isinstance(high, Expr) else Literal(high)
    return And((Compare(">=", expr, low_lit), Compare("<=", expr, high_lit)))


def columns_of(expr: Expr) -> set[str]:
    """Names of every column the expression reads."""
    if isinstance(expr, Column):
        return {expr.name}
    found: set[str] = set()
    for child in _children(expr):
        found |= columns_of(child)
    return found


def _children(expr: Expr) -> tuple[Expr, ...]:
    if isinstance(expr, Compare):
        return (expr.left, expr.right)
    if isinstance(expr, In):
        return (expr.expr, *expr.values)
    if isinstance(expr, (And, Or)):
        return expr.args
    if isinstance(expr, Not):
        return (expr.arg,)
    if isinstance(expr, Func):
        return expr.args
    if isinstance(expr, (IsNull, IsNotNull, Like, StartsWith, EndsWith, Contains)):
        return (expr.expr,)
    return ()


# ---------------------------------------------------------------------------------------------
# Parsing
# ---------------------------------------------------------------------------------------------

_SQLGLOT_COMPARE = {
    exp.EQ: "=", exp.NEQ: "!=", exp.LT: "<", exp.LTE: "<=", exp.GT: ">", exp.GTE: ">=", exp.NullSafeEQ: "<=>",
}
_SQLGLOT_ARITHMETIC = {exp.Add: "plus", exp.Sub: "minus", exp.Mul: "multiply", exp.Div: "divide", exp.Mod: "modulo"}
_TRUNC_UNITS = {"MONTH": "toStartOfMonth", "WEEK": "toMonday"}


def parse_expression(text: str) -> Expr:
    """Parse one ClickHouse/SQL scalar expression (a WHERE condition or a key element)."""
    if not text or not text.strip():
        raise ExpressionError("empty expression")
    try:
        tree = sqlglot.parse_one(text, read="clickhouse")
    except sqlglot.errors.SqlglotError as error:
        raise ExpressionError(f"cannot parse expression {text!r}: {error}") from None
    return _convert(tree, text)


def parse_predicate(text: str) -> Expr:
    """Parse a WHERE condition such as "id BETWEEN 5 AND 10 AND name = 'x'"."""
    return parse_expression(text)


def _literal_value(node: exp.Literal, source: str) -> object:
    if node.is_string:
        return node.this
    raw = node.this
    try:
        return int(raw, 0) if raw.lower().startswith(("0x", "0b")) else int(raw)
    except ValueError:
        try:
            return float(raw)
        except ValueError:
            raise ExpressionError(f"cannot read number {raw!r} in {source!r}") from None


def _convert(node: exp.Expression, source: str) -> Expr:
    if isinstance(node, (exp.Like, exp.ILike, exp.In, exp.Between, exp.Is)) and node.args.get("negate"):
        # Some sqlglot versions mark `x NOT LIKE y` with a flag instead of wrapping it in NOT.
        positive = node.copy()
        positive.set("negate", None)
        converted = _convert(positive, source)
        return IsNotNull(converted.expr) if isinstance(converted, IsNull) else Not(converted)
    if isinstance(node, exp.Paren):
        return _convert(node.this, source)
    if isinstance(node, (exp.And, exp.Or)):
        cls = And if isinstance(node, exp.And) else Or
        parts: list[Expr] = []
        for side in (node.this, node.expression):
            converted = _convert(side, source)
            parts.extend(converted.args if isinstance(converted, cls) else (converted,))
        return cls(tuple(parts))
    if isinstance(node, exp.Not):
        inner = node.this.unnest() if isinstance(node.this, exp.Paren) else node.this
        if isinstance(inner, exp.Is) and isinstance(inner.expression, exp.Null):
            return IsNotNull(_convert(inner.this, source))
        return Not(_convert(inner, source))
    for cls, op in _SQLGLOT_COMPARE.items():
        if isinstance(node, cls):
            left, right = _convert(node.this, source), _convert(node.expression, source)
            if isinstance(left, Literal) and not isinstance(right, Literal):
                return Compare(_FLIPPED[op], right, left)
            return Compare(op, left, right)
    if isinstance(node, exp.Between):
        return between(_convert(node.this, source), _convert(node.args["low"], source), _convert(node.args["high"], source))
    if isinstance(node, exp.In):
        if node.args.get("query") is not None or node.args.get("unnest") is not None:
            raise UnsupportedError(f"IN with a subquery is not supported in {source!r}")
        values = []
        for item in node.expressions:
            converted = _convert(item, source)
            if not isinstance(converted, Literal):
                raise ExpressionError(f"IN list must hold constants, got {item.sql('clickhouse')!r} in {source!r}")
            values.append(converted)
        return In(_convert(node.this, source), tuple(values))
    if isinstance(node, exp.Is):
        if isinstance(node.expression, exp.Null):
            return IsNull(_convert(node.this, source))
        raise ExpressionError(f"unsupported IS expression {node.sql('clickhouse')!r} in {source!r}")
    if isinstance(node, (exp.Like, exp.ILike)):
        pattern = _convert(node.expression, source)
        if not isinstance(pattern, Literal) or not isinstance(pattern.value, str):
            raise ExpressionError(f"LIKE needs a string pattern in {source!r}")
        return Like(_convert(node.this, source), pattern.value, isinstance(node, exp.ILike))
    if isinstance(node, exp.StartsWith):
        prefix = _convert(node.expression, source)
        if not isinstance(prefix, Literal) or not isinstance(prefix.value, str):
            raise ExpressionError(f"startsWith needs a string constant in {source!r}")
        return StartsWith(_convert(node.this, source), prefix.value)
    if isinstance(node, exp.Column):
        parts = [part.name for part in node.parts]
        return Column(".".join(parts))
    if isinstance(node, exp.Identifier):
        return Column(node.name)
    if isinstance(node, exp.Literal):
        return Literal(_literal_value(node, source))
    if isinstance(node, exp.Boolean):
        return Literal(bool(node.this))
    if isinstance(node, exp.Null):
        return Literal(None)
    if isinstance(node, exp.Neg):
        inner = _convert(node.this, source)
        if isinstance(inner, Literal) and isinstance(inner.value, (int, float)) and not isinstance(inner.value, bool):
            return Literal(-inner.value)
        return Func("negate", (inner,))
    for cls, name in _SQLGLOT_ARITHMETIC.items():
        if isinstance(node, cls):
            return Func(name, (_convert(node.this, source), _convert(node.expression, source)))
    if isinstance(node, exp.TimestampTrunc) and node.unit and node.unit.name.upper() in _TRUNC_UNITS:
        return Func(_TRUNC_UNITS[node.unit.name.upper()], (_convert(node.this, source),))
    if isinstance(node, exp.Anonymous):
        return _function(node.name, tuple(_convert(arg, source) for arg in node.expressions))
    if isinstance(node, exp.Tuple):
        return Func("tuple", tuple(_convert(arg, source) for arg in node.expressions))
    if isinstance(node, exp.Func):
        # A function sqlglot knows by another name: keep ClickHouse's spelling of it.
        rendered = node.sql("clickhouse")
        name = rendered.split("(", 1)[0].strip()
        args = [arg for arg in node.args.values() if isinstance(arg, exp.Expression)]
        args += [arg for value in node.args.values() if isinstance(value, list) for arg in value]
        return _function(name, tuple(_convert(arg, source) for arg in args))
    raise ExpressionError(f"unsupported syntax {node.sql('clickhouse')!r} in {source!r}")


def _function(name: str, args: tuple[Expr, ...]) -> Expr:
    """A function call, as the dedicated node when there is one (string matching, NULL tests)."""
    constant = args[1].value if len(args) == 2 and isinstance(args[1], Literal) else None
    if isinstance(constant, str):
        if name == "startsWith":
            return StartsWith(args[0], constant)
        if name == "endsWith":
            return EndsWith(args[0], constant)
        if name in ("like", "ilike"):
            return Like(args[0], constant, name == "ilike")
        if name == "notLike":
            return Not(Like(args[0], constant))
    if name == "isNull" and len(args) == 1:
        return IsNull(args[0])
    if name == "isNotNull" and len(args) == 1:
        return IsNotNull(args[0])
    return Func(name, args)


# ---------------------------------------------------------------------------------------------
# Binding: column names and literal types
# ---------------------------------------------------------------------------------------------


def _zone(type_text: str) -> dt.tzinfo:
    name = type_info(type_text).timezone
    return zoneinfo.ZoneInfo(name) if name else dt.timezone.utc


def coerce_literal(value: object, type_text: str, what: str = "value") -> object:
    """Convert a constant to the Python value a column of `type_text` holds (`what` names it in errors)."""
    if value is None:
        return None
    info = type_info(type_text)
    base = info.base

    def fail(reason: str = "") -> ExpressionError:
        return ExpressionError(f"cannot compare {what} of type {type_text} with {value!r}{reason}")

    if info.is_integer:
        if isinstance(value, bool):
            return int(value)
        if isinstance(value, int):
            return value
        if isinstance(value, float):
            return int(value) if value.is_integer() else value
        if isinstance(value, decimal.Decimal):
            return int(value) if value == value.to_integral_value() else value
        if isinstance(value, str):
            try:
                return int(value.strip())
            except ValueError:
                raise fail(": not an integer") from None
        raise fail()
    if base in ("Float32", "Float64", "BFloat16"):
        if isinstance(value, (int, float, decimal.Decimal)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):
            try:
                return float(value)
            except ValueError:
                raise fail(": not a number") from None
        raise fail()
    if base == "Decimal" or base.startswith("Decimal"):
        try:
            return decimal.Decimal(str(value))
        except decimal.InvalidOperation:
            raise fail(": not a decimal number") from None
    if base == "Bool":
        if isinstance(value, bool):
            return value
        if isinstance(value, int) and value in (0, 1):
            return bool(value)
        if isinstance(value, str) and value.lower() in ("true", "false", "1", "0"):
            return value.lower() in ("true", "1")
        raise fail()
    if base in ("Date", "Date32"):
        if isinstance(value, dt.datetime):
            return value.date()
        if isinstance(value, dt.date):
            return value
        if isinstance(value, int) and not isinstance(value, bool):
            return dt.date(1970, 1, 1) + dt.timedelta(days=value)
        if isinstance(value, str):
            try:
                return dt.date.fromisoformat(value.strip()[:10])
            except ValueError:
                raise fail(": expected 'YYYY-MM-DD'") from None
        raise fail()
    if base in ("DateTime", "DateTime64"):
        zone = _zone(type_text)
        if isinstance(value, dt.datetime):
            return value if value.tzinfo else value.replace(tzinfo=zone)
        if isinstance(value, dt.date):
            return dt.datetime(value.year, value.month, value.day, tzinfo=zone)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return dt.datetime.fromtimestamp(value, dt.timezone.utc)
        if isinstance(value, str):
            try:
                parsed = dt.datetime.fromisoformat(value.strip())
            except ValueError:
                raise fail(": expected 'YYYY-MM-DD hh:mm:ss'") from None
            return parsed if parsed.tzinfo else parsed.replace(tzinfo=zone)
        raise fail()
    if base in ("String", "FixedString"):
        if isinstance(value, (str, bytes)):
            return value
        raise fail(": strings compare only with strings")
    if base == "UUID":
        try:
            return str(value if isinstance(value, uuid.UUID) else uuid.UUID(str(value)))
        except ValueError:
            raise fail(": not a UUID") from None
    if base in ("Enum8", "Enum16"):
        if isinstance(value, str):
            if value not in info.enum_values():
                raise fail(f": not one of {sorted(info.enum_values())}")
            return value
        if isinstance(value, int):
            names = {number: name for name, number in info.enum_values().items()}
            if value not in names:
                raise fail(": no such Enum value")
            return names[value]
        raise fail()
    return value


def bind(expr: Expr, schema: Mapping[str, str]) -> Expr:
    """Check column names against `schema` (name → ClickHouse type) and coerce constants to column types."""
    if isinstance(expr, Column):
        if expr.name not in schema:
            known = ", ".join(schema) or "(none)"
            raise ExpressionError(f"unknown column {expr.name!r} in predicate; known columns: {known}")
        return Column(expr.name, schema[expr.name])
    if isinstance(expr, Literal):
        return expr
    if isinstance(expr, Compare):
        left, right = bind(expr.left, schema), bind(expr.right, schema)
        if isinstance(left, Literal) and not isinstance(right, Literal):
            left, right = right, left
            op = _FLIPPED[expr.op]
        else:
            op = expr.op
        target = _type_of(left)
        if target and isinstance(right, Literal):
            right = Literal(coerce_literal(right.value, target, _describe(left)), target)
        return Compare(op, left, right)
    if isinstance(expr, In):
        inner = bind(expr.expr, schema)
        target = _type_of(inner)
        if target:
            values = tuple(Literal(coerce_literal(v.value, target, _describe(inner)), target) for v in expr.values)
        else:
            values = expr.values
        return In(inner, values)
    if isinstance(expr, (And, Or)):
        return type(expr)(tuple(bind(arg, schema) for arg in expr.args))
    if isinstance(expr, Not):
        return Not(bind(expr.arg, schema))
    if isinstance(expr, (IsNull, IsNotNull)):
        return type(expr)(bind(expr.expr, schema))
    if isinstance(expr, Like):
        return Like(bind(expr.expr, schema), expr.pattern, expr.case_insensitive)
    if isinstance(expr, StartsWith):
        return StartsWith(bind(expr.expr, schema), expr.prefix)
    if isinstance(expr, EndsWith):
        return EndsWith(bind(expr.expr, schema), expr.suffix)
    if isinstance(expr, Contains):
        return Contains(bind(expr.expr, schema), expr.substring)
    if isinstance(expr, Func):
        args = tuple(bind(arg, schema) for arg in expr.args)
        return Func(expr.name, args, _function_type(expr.name, args))
    raise ExpressionError(f"cannot bind {expr!r}")


def _describe(expr: Expr) -> str:
    return f"column {expr.name!r}" if isinstance(expr, Column) else f"{expr!r}"


def _type_of(expr: Expr) -> str | None:
    if isinstance(expr, (Column, Func)):
        return expr.type
    return None


def _function_type(name: str, args: tuple[Expr, ...]) -> str | None:
    if name not in SUPPORTED_FUNCTIONS or not args or not _type_of(args[0]):
        return None
    constant = None
    if len(args) > 1:
        if not isinstance(args[1], Literal) or not isinstance(args[1].value, int):
            return None
        constant = args[1].value
    try:
        return result_type(name, _type_of(args[0]), constant)  # type: ignore[arg-type]
    except (ExpressionError, UnsupportedError):
        return None


# ---------------------------------------------------------------------------------------------
# Evaluation over Arrow tables
# ---------------------------------------------------------------------------------------------

_PC_COMPARE = {"=": pc.equal, "!=": pc.not_equal, "<": pc.less, "<=": pc.less_equal, ">": pc.greater, ">=": pc.greater_equal}
_PC_ARITHMETIC = {"plus": pc.add, "minus": pc.subtract, "multiply": pc.multiply, "divide": pc.divide}


def evaluate(expr: Expr, table: pa.Table) -> pa.BooleanArray:
    """Which rows of `table` satisfy `expr` (NULL counts as not satisfied), as a BooleanArray without nulls."""
    result = _truth(_eval(expr, table), table.num_rows)
    return result.fill_null(False)


def evaluate_value(expr: Expr, table: pa.Table) -> pa.Array:
    """The value of a (bound) scalar expression for every row, e.g. a key element `toStartOfMonth(d)`."""
    return _as_array(_eval(expr, table), table.num_rows)


def filter_table(table: pa.Table, expr: Expr | None) -> pa.Table:
    """The rows of `table` that satisfy `expr` (all rows when `expr` is None)."""
    return table if expr is None else table.filter(evaluate(expr, table))


def _as_array(value: pa.Array | pa.Scalar, length: int) -> pa.Array:
    if isinstance(value, pa.Scalar):
        return pa.array([value.as_py()] * length, value.type) if length else pa.array([], value.type)
    return value


def _truth(value: pa.Array | pa.Scalar, length: int) -> pa.Array:
    array = _as_array(value, length)
    if pa.types.is_boolean(array.type):
        return array
    if pa.types.is_null(array.type):
        return pa.nulls(length, pa.bool_())
    if pa.types.is_integer(array.type) or pa.types.is_floating(array.type):
        return pc.not_equal(array, 0)
    raise ExpressionError(f"a condition must be boolean or numeric, got {array.type}")


def _column(table: pa.Table, name: str) -> pa.Array:
    if name not in table.column_names:
        raise ExpressionError(f"unknown column {name!r}; table has: {', '.join(table.column_names)}")
    array = table.column(name).combine_chunks()
    if pa.types.is_dictionary(array.type):
        array = array.dictionary_decode()
    return array


def _scalar_like(value: object, like: pa.Array | pa.Scalar | None) -> pa.Scalar:
    """A constant as an Arrow scalar, of the other operand's type when it converts without loss."""
    if isinstance(value, decimal.Decimal) and like is not None and pa.types.is_floating(like.type):
        value = float(value)
    scalar = pa.scalar(value)
    if like is not None and scalar.type != like.type and value is not None:
        try:
            return scalar.cast(like.type, safe=True)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
            pass
    return scalar


def _eval(expr: Expr, table: pa.Table) -> pa.Array | pa.Scalar:
    if isinstance(expr, Column):
        return _column(table, expr.name)
    if isinstance(expr, Literal):
        return pa.scalar(expr.value)
    if isinstance(expr, Compare):
        left = _eval(expr.left, table)
        right_value = expr.right.value if isinstance(expr.right, Literal) else None
        ordering_type = _type_of(expr.left)
        if ordering_type and needs_ordering_map(ordering_type) and expr.op not in ("=", "!=", "<=>"):
            # Enums and UUIDs order differently in ClickHouse than their Arrow text does.
            left = orderable(_as_array(left, table.num_rows), ordering_type)
            if isinstance(expr.right, Literal):
                right_value = orderable_value(right_value, ordering_type)
            elif _type_of(expr.right) == ordering_type:
                return _PC_COMPARE[expr.op](left, orderable(_as_array(_eval(expr.right, table), table.num_rows), ordering_type))
        if isinstance(expr.right, Literal):
            right = _scalar_like(right_value, left if not isinstance(left, pa.Scalar) else None)
        else:
            right = _eval(expr.right, table)
        if isinstance(left, pa.Scalar) and not isinstance(right, pa.Scalar):
            left = _scalar_like(left.as_py(), right)
        if expr.op == "<=>":
            both_null = pc.and_(pc.is_null(_as_array(left, table.num_rows)), pc.is_null(_as_array(right, table.num_rows)))
            if (isinstance(right, pa.Scalar) and not right.is_valid) or (isinstance(left, pa.Scalar) and not left.is_valid):
                return both_null
            equal = pc.equal(left, right).fill_null(False)
            return pc.or_(both_null, equal)
        if (isinstance(right, pa.Scalar) and not right.is_valid) or (isinstance(left, pa.Scalar) and not left.is_valid):
            return pa.nulls(table.num_rows, pa.bool_())
        try:
            return _PC_COMPARE[expr.op](left, right)
        except (pa.ArrowNotImplementedError, pa.ArrowInvalid, pa.ArrowTypeError) as error:
            raise ExpressionError(f"cannot evaluate {expr!r}: {error}") from None
    if isinstance(expr, In):
        inner = _as_array(_eval(expr.expr, table), table.num_rows)
        present = [v.value for v in expr.values if v.value is not None]
        if not present:
            return pc.if_else(pc.is_valid(inner), False, None)
        values = pa.array([_scalar_like(v, inner).as_py() for v in present])
        try:
            values = values.cast(inner.type)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
            inner = inner.cast(values.type) if pa.types.is_integer(inner.type) else inner
        found = pc.is_in(inner, value_set=values, skip_nulls=True)
        return pc.if_else(pc.is_valid(inner), found, pa.scalar(None, pa.bool_()))
    if isinstance(expr, (And, Or)):
        combine = pc.and_kleene if isinstance(expr, And) else pc.or_kleene
        result = _truth(_eval(expr.args[0], table), table.num_rows)
        for arg in expr.args[1:]:
            result = combine(result, _truth(_eval(arg, table), table.num_rows))
        return result
    if isinstance(expr, Not):
        return pc.invert(_truth(_eval(expr.arg, table), table.num_rows))
    if isinstance(expr, IsNull):
        return pc.is_null(_as_array(_eval(expr.expr, table), table.num_rows))
    if isinstance(expr, IsNotNull):
        return pc.is_valid(_as_array(_eval(expr.expr, table), table.num_rows))
    if isinstance(expr, Like):
        return pc.match_like(_strings(expr.expr, table), expr.pattern, ignore_case=expr.case_insensitive)
    if isinstance(expr, StartsWith):
        return pc.starts_with(_strings(expr.expr, table), expr.prefix)
    if isinstance(expr, EndsWith):
        return pc.ends_with(_strings(expr.expr, table), expr.suffix)
    if isinstance(expr, Contains):
        return pc.match_substring(_strings(expr.expr, table), expr.substring)
    if isinstance(expr, Func):
        return _eval_function(expr, table)
    raise ExpressionError(f"cannot evaluate {expr!r}")


def _strings(expr: Expr, table: pa.Table) -> pa.Array:
    array = _as_array(_eval(expr, table), table.num_rows)
    if not (pa.types.is_string(array.type) or pa.types.is_large_string(array.type) or pa.types.is_binary(array.type)
            or pa.types.is_large_binary(array.type)):
        raise ExpressionError(f"string matching needs a string column, {expr!r} is {array.type}")
    return array


def _eval_function(expr: Func, table: pa.Table) -> pa.Array | pa.Scalar:
    if expr.name in _PC_ARITHMETIC and len(expr.args) == 2:
        return _PC_ARITHMETIC[expr.name](_eval(expr.args[0], table), _eval(expr.args[1], table))
    if expr.name == "negate" and len(expr.args) == 1:
        return pc.negate(_eval(expr.args[0], table))
    if expr.name in SUPPORTED_FUNCTIONS:
        first = expr.args[0] if expr.args else None
        arg_type = _type_of(first) if first is not None else None
        if arg_type is None:
            raise ExpressionError(f"{expr.name}() needs a typed argument: bind the predicate to the table schema first")
        constant = None
        if len(expr.args) > 1:
            if not isinstance(expr.args[1], Literal) or not isinstance(expr.args[1].value, int):
                raise ExpressionError(f"{expr.name}() needs an integer constant as its second argument")
            constant = expr.args[1].value
        array = _as_array(_eval(first, table), table.num_rows)  # type: ignore[arg-type]
        return apply_function(expr.name, array, arg_type, constant)
    raise UnsupportedError(f"function {expr.name}() cannot be evaluated here (supported: "
                           f"{', '.join(sorted(SUPPORTED_FUNCTIONS | set(_PC_ARITHMETIC)))})")

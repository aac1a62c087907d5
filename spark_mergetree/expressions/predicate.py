"""WHERE predicates: an immutable expression tree, parsing from SQL text, binding to a schema, evaluation.

The tree is the one currency for filters: it is parsed from ClickHouse/SQL text here, built from
Spark filters by the Spark layer, pruned against indexes by `key_condition`, and finally evaluated
over Arrow tables to filter rows exactly. Evaluation follows SQL three-valued logic: a row whose
condition is NULL is not selected.

Semantics follow ClickHouse: string literals and LIKE patterns unescape as it does (`literals`,
`like`); comparisons of numbers are exact across types (an Int64 against a Float64, a UInt64 against
an Int64), constants are read as the column's type (`literals.compare_constant`), IN-list values
match exactly as ClickHouse's sets do (a Float column's NaN matches NaN, -0.0 does not match 0.0),
and `x NOT BETWEEN a AND b` is `x < a OR x > b`. What cannot be given ClickHouse's meaning is refused
with an ExpressionError or UnsupportedError naming the expression.
"""

from __future__ import annotations

import calendar
import datetime as dt
import decimal
import functools
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp
from sqlglot.dialects.clickhouse import ClickHouse
from sqlglot.errors import SqlglotError
from sqlglot.tokens import TokenType

from spark_mergetree.errors import ExpressionError, UnsupportedError
from spark_mergetree.expressions.functions import (
    SUPPORTED_FUNCTIONS,
    apply_function,
    literal_type,
    needs_ordering_map,
    orderable,
    orderable_value,
    result_type,
    type_info,
)
from spark_mergetree.expressions.like import like_parts, like_regex
from spark_mergetree.expressions.literals import (
    ALWAYS,
    FALSE,
    NAMED_FLOATS,
    NEVER,
    compare_constant,
    decode_string_literal,
    in_constants,
    number_literal,
    sql_constant,
)
from spark_mergetree.expressions.string_functions import (
    STRING_FUNCTIONS,
    apply_string_function,
    string_result_type,
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
    # Written with the constant first (`1 < a`, kept as `a > 1`): ClickHouse names it as written.
    written_reversed: bool = field(default=False, compare=False)

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
class IsNaN(Expr):
    """ClickHouse's isNaN(x): true for a float NaN, false for every other value, NULL for NULL."""

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


@dataclass(frozen=True)
class HasToken(Expr):
    """ClickHouse's hasToken(haystack, token): whether `token` is one of the haystack's tokens, the
    maximal runs of bytes other than ASCII characters that are not letters or digits."""

    expr: Expr
    token: str


@dataclass(frozen=True)
class Fixed(Expr):
    """A comparison whose answer does not depend on the value: `value` wherever `expr` is not NULL,
    NULL where it is. Binding makes it from comparisons such as `u8 < 300` (true for every UInt8)."""

    expr: Expr
    value: bool


def between(expr: Expr, low: object, high: object) -> Expr:
    """`expr BETWEEN low AND high`, which is `expr >= low AND expr <= high`."""
    low_lit = low if isinstance(low, Expr) else Literal(low)
    high_lit = high if isinstance(high, Expr) else Literal(high)
    return And((Compare(">=", expr, low_lit), Compare("<=", expr, high_lit)))


def not_between(expr: Expr, low: object, high: object) -> Expr:
    """`expr NOT BETWEEN low AND high`, which ClickHouse reads as `expr < low OR expr > high`
    (so a NaN is neither between nor not between)."""
    low_lit = low if isinstance(low, Expr) else Literal(low)
    high_lit = high if isinstance(high, Expr) else Literal(high)
    return Or((Compare("<", expr, low_lit), Compare(">", expr, high_lit)))


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
    if isinstance(expr, (IsNull, IsNotNull, IsNaN, Like, StartsWith, EndsWith, Contains, HasToken, Fixed)):
        return (expr.expr,)
    return ()


# ---------------------------------------------------------------------------------------------
# Parsing
# ---------------------------------------------------------------------------------------------

_SQLGLOT_COMPARE = {
    exp.EQ: "=", exp.NEQ: "!=", exp.LT: "<", exp.LTE: "<=", exp.GT: ">", exp.GTE: ">=", exp.NullSafeEQ: "<=>",
}
_SQLGLOT_ARITHMETIC = {exp.Add: "plus", exp.Sub: "minus", exp.Mul: "multiply", exp.Div: "divide", exp.Mod: "modulo"}
_TRUNC_UNITS = {"YEAR": "toStartOfYear", "QUARTER": "toStartOfQuarter", "MONTH": "toStartOfMonth", "WEEK": "toMonday",
                "DAY": "toStartOfDay", "HOUR": "toStartOfHour", "MINUTE": "toStartOfMinute"}
# toStartOfInterval(x, INTERVAL n unit) of these intervals is another function of x, result type
# included (compared over every zone and type in ClickHouse 26.9).
_INTERVAL_FUNCTIONS = {("MINUTE", 1): "toStartOfMinute", ("MINUTE", 5): "toStartOfFiveMinutes",
                       ("MINUTE", 10): "toStartOfTenMinutes", ("MINUTE", 15): "toStartOfFifteenMinutes",
                       ("HOUR", 1): "toStartOfHour", ("DAY", 1): "toStartOfDay", ("WEEK", 1): "toMonday",
                       ("MONTH", 1): "toStartOfMonth", ("QUARTER", 1): "toStartOfQuarter", ("YEAR", 1): "toStartOfYear"}
_NOT_BETWEEN = "__not_between__"
# sqlglot token types of quoted text other than plain '...' strings (x'..', $$..$$, ...), where present.
_OTHER_STRINGS = {getattr(TokenType, name) for name in (
    "NATIONAL_STRING", "RAW_STRING", "BIT_STRING", "HEX_STRING", "BYTE_STRING", "HEREDOC_STRING", "UNICODE_STRING")
    if hasattr(TokenType, name)}


class _Dialect(ClickHouse):
    """ClickHouse as sqlglot reads it, telling `x NOT BETWEEN a AND b` apart from `NOT x BETWEEN a AND b`
    (ClickHouse gives them different answers for NaN)."""

    class Parser(ClickHouse.Parser):  # type: ignore[misc,valid-type]
        def _negate_range(self, this: exp.Expression | None = None) -> exp.Expression | None:
            if isinstance(this, exp.Between):
                return exp.Anonymous(this=_NOT_BETWEEN, expressions=[this.this, this.args["low"], this.args["high"]])
            result: exp.Expression | None = super()._negate_range(this)
            return result


_DIALECT = _Dialect()


# now(), today() and yesterday() become constants when the text is read: such texts are read anew
# each time (a cached tree would keep the time of its first reading in a long-lived process).
_CLOCK_FUNCTIONS = re.compile(r"\b(now|today|yesterday)\s*\(", re.IGNORECASE)


def parse_expression(text: str) -> Expr:
    """Parse one ClickHouse/SQL scalar expression (a WHERE condition or a key element).

    Trees are immutable, so the same text (a key element parsed for every part) is parsed once,
    unless it reads the clock."""
    if _CLOCK_FUNCTIONS.search(text):
        return _parse(text)
    return _parse_once(text)


def _parse(text: str) -> Expr:
    if not text or not text.strip():
        raise ExpressionError("empty expression")
    try:
        tokens = _DIALECT.tokenize(text)
        for token in tokens:
            if token.token_type == TokenType.STRING:
                # ClickHouse's escapes, not sqlglot's (which differ for \xHH and unknown escapes).
                token.text = decode_string_literal(text[token.start : token.end + 1])
            elif token.token_type in _OTHER_STRINGS:
                raise UnsupportedError(f"string literal {text[token.start : token.end + 1]!r} in {text!r}: only "
                                       "'...' strings are supported")
        trees = _DIALECT.parser().parse(tokens, text)
    except SqlglotError as error:
        raise ExpressionError(syntax_error_message(text, error)) from None
    if len(trees) != 1 or trees[0] is None:
        raise ExpressionError(f"expected one expression, got {text!r}")
    tree = trees[0]
    negated_ranges = sum(1 for a, b in zip(tokens, tokens[1:]) if a.token_type == TokenType.NOT
                         and b.token_type == TokenType.BETWEEN)
    marked = sum(1 for node in tree.find_all(exp.Anonymous) if node.name == _NOT_BETWEEN)
    if negated_ranges != marked:  # an sqlglot without the hook this relies on
        raise UnsupportedError(f"NOT BETWEEN in {text!r}: write (x < a OR x > b) instead")
    return _convert(tree, text)


_parse_once = functools.lru_cache(maxsize=1024)(_parse)


def syntax_error_message(text: str, error: Exception) -> str:
    """One sentence saying what is wrong in `text` and where (1-based character position), in our
    words: sqlglot's own messages name its classes and carry terminal colour codes."""
    unclosed = _unclosed_quote(text)
    if unclosed is not None:
        return f"cannot parse {text!r}: the quote {text[unclosed]} at position {unclosed + 1} is never closed"
    found = getattr(error, "errors", None) or []
    if not found:
        return f"cannot parse {text!r}: it is not a ClickHouse/SQL expression"
    first = found[0]
    description = str(first.get("description") or "")
    highlight = str(first.get("highlight") or "")
    line, column = int(first.get("line") or 1), int(first.get("col") or 0)
    line_start = sum(len(piece) + 1 for piece in text.split("\n")[: line - 1])
    position = max(1, line_start + column - len(highlight) + 1)
    at_end = not str(first.get("end_context") or "").strip()
    where = f"{highlight!r} at position {position}"
    if description.startswith("Expecting "):
        wanted = description[len("Expecting "):].strip()
        if at_end:
            return f"cannot parse {text!r}: a {wanted!r} is missing at its end, after {where}"
        return f"cannot parse {text!r}: a {wanted!r} is expected near {where}"
    if description.startswith("Required keyword"):
        if at_end:
            return f"cannot parse {text!r}: it ends too early, after {where}, where an operand is missing"
        return f"cannot parse {text!r}: an operand is missing near {where}"
    return f"cannot parse {text!r}: unexpected {where}"


def _unclosed_quote(text: str) -> int | None:
    """The index of a quote ('...', "...", `...`) that `text` opens and never closes, or None."""
    quote: str | None = None
    opened = 0
    index = 0
    while index < len(text):
        char = text[index]
        if quote is None:
            if char in "'\"`":
                quote, opened = char, index
        elif char == "\\":
            index += 1
        elif char == quote:
            if text[index + 1 : index + 2] == quote:
                index += 1  # a doubled quote stands for itself
            else:
                quote = None
        index += 1
    return opened if quote is not None else None


def check_syntax(text: str, what: str) -> None:
    """ExpressionError naming `what` (an option: "order_by") when `text` is not one expression."""
    try:
        trees = _DIALECT.parser().parse(_DIALECT.tokenize(text), text)
    except SqlglotError as error:
        raise ExpressionError(f"{what}: {syntax_error_message(text, error)}") from None
    if len(trees) != 1 or trees[0] is None:
        raise ExpressionError(f"{what}: expected one expression, got {text!r}")


def parse_predicate(text: str) -> Expr:
    """Parse a WHERE condition such as "id BETWEEN 5 AND 10 AND name = 'x'"."""
    return parse_expression(text)


def _literal_value(node: exp.Literal) -> object:
    return node.this if node.is_string else number_literal(node.this)


def _negated(value: int | float) -> int | float:
    """-value as ClickHouse types it: an integer below Int64's range is a Float64."""
    value = -value
    return float(value) if isinstance(value, int) and value < -(1 << 63) else value


_INTERVAL_SECONDS = {"SECOND": 1, "MINUTE": 60, "HOUR": 3600, "DAY": 86400, "WEEK": 7 * 86400}
_INTERVAL_MONTHS = {"MONTH": 1, "QUARTER": 3, "YEAR": 12}


def _add_months(value: dt.date, months: int) -> dt.date:
    """`value` moved by whole months, the day kept or, past the new month's end, its last day (as
    ClickHouse's addMonths: 2024-01-31 + 1 month is 2024-02-29)."""
    index = value.year * 12 + value.month - 1 + months
    year, month = divmod(index, 12)
    last = calendar.monthrange(year, month + 1)[1]
    return value.replace(year=year, month=month + 1, day=min(value.day, last))


def _shifted_constant(node: exp.Add | exp.Sub, source: str) -> Literal | None:
    """A date or time constant plus or minus a constant (`now() - INTERVAL 1 HOUR`, `today() - 7`),
    as ClickHouse computes it: a number added to a DateTime is seconds, to a Date days; intervals of
    seconds to weeks. None when `node` is not such a sum."""
    left = _convert(node.this, source)
    if not isinstance(left, Literal) or not isinstance(left.value, (dt.date, dt.datetime)):
        return None
    right = node.expression
    if isinstance(right, exp.Interval) and isinstance(right.this, exp.Literal) and right.unit is not None:
        unit = right.unit.name.upper().rstrip("S")
        if (unit not in _INTERVAL_SECONDS and unit not in _INTERVAL_MONTHS) or not right.this.this.lstrip("-").isdigit():
            raise UnsupportedError(f"{node.sql('clickhouse')!r} in {source!r}: intervals of seconds to years are "
                                   "supported in constants")
        count = int(right.this.this) * (1 if isinstance(node, exp.Add) else -1)
        if unit in _INTERVAL_MONTHS:
            return Literal(_add_months(left.value, count * _INTERVAL_MONTHS[unit]))
        seconds = abs(count) * _INTERVAL_SECONDS[unit]
    else:
        number = _convert(right, source)
        if not isinstance(number, Literal) or not isinstance(number.value, int) or isinstance(number.value, bool):
            return None
        is_time = isinstance(left.value, dt.datetime)
        seconds = number.value * (1 if is_time else 86400)
    step = dt.timedelta(seconds=seconds if isinstance(node, exp.Add) else -seconds)
    if not isinstance(left.value, dt.datetime) and step % dt.timedelta(days=1):
        raise UnsupportedError(f"{node.sql('clickhouse')!r} in {source!r}: a Date moves by whole days")
    return Literal(left.value + step)


def _interval_function(node: exp.Anonymous, source: str) -> str:
    """The function `toStartOfInterval(x, INTERVAL n unit)` equals (`toIntervalUnit(n)` alike)."""
    interval = node.expressions[1] if len(node.expressions) == 2 else None
    count: object = None
    unit = ""
    if isinstance(interval, exp.Interval) and isinstance(interval.this, exp.Literal) and interval.unit is not None:
        count, unit = interval.this.this, interval.unit.name.upper()
    elif (isinstance(interval, exp.Anonymous) and interval.name.lower().startswith("tointerval")
          and len(interval.expressions) == 1 and isinstance(interval.expressions[0], exp.Literal)):
        count, unit = interval.expressions[0].this, interval.name[len("toInterval"):].upper()
    try:
        key = (unit.rstrip("S"), int(str(count)))
    except ValueError:
        key = ("", 0)
    if key not in _INTERVAL_FUNCTIONS:
        raise UnsupportedError(f"{node.sql('clickhouse')!r} in {source!r}: toStartOfInterval is supported for intervals of "
                               "1 minute, 5, 10 or 15 minutes, and 1 hour, day, week, month, quarter or year")
    return _INTERVAL_FUNCTIONS[key]


def _convert(node: Any, source: str) -> Expr:
    """Our tree of an sqlglot tree (`node` is typed Any: sqlglot's base class differs between versions)."""
    if isinstance(node, (exp.Like, exp.ILike, exp.In, exp.Between, exp.Is)) and node.args.get("negate"):
        # Some sqlglot versions mark `x NOT LIKE y` with a flag instead of wrapping it in NOT.
        positive = node.copy()
        positive.set("negate", None)
        converted = _convert(positive, source)
        return IsNotNull(converted.expr) if isinstance(converted, IsNull) else Not(converted)
    if isinstance(node, exp.Paren):
        return _convert(node.this, source)
    if isinstance(node, (exp.And, exp.Or)):
        junction = And if isinstance(node, exp.And) else Or
        operands: list[Expr] = []
        for side in (node.this, node.expression):
            converted = _convert(side, source)
            operands.extend(converted.args if isinstance(converted, junction) else (converted,))
        return junction(tuple(operands))
    if isinstance(node, exp.Not):
        negated = node.this.unnest() if isinstance(node.this, exp.Paren) else node.this
        if isinstance(negated, exp.Is) and isinstance(negated.expression, exp.Null):
            return IsNotNull(_convert(negated.this, source))
        return Not(_convert(negated, source))
    for compare_class, op in _SQLGLOT_COMPARE.items():
        if isinstance(node, compare_class):
            left, right = _convert(node.this, source), _convert(node.expression, source)
            if isinstance(left, Literal) and not isinstance(right, Literal):
                return Compare(_FLIPPED[op], right, left, written_reversed=True)
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
                raise UnsupportedError(f"IN list must hold constants, got {item.sql('clickhouse')!r} in {source!r}")
            values.append(converted)
        return In(_convert(node.this, source), tuple(values))
    if isinstance(node, exp.Is):
        if isinstance(node.expression, exp.Null):
            return IsNull(_convert(node.this, source))
        raise UnsupportedError(f"unsupported IS expression {node.sql('clickhouse')!r} in {source!r}")
    if isinstance(node, (exp.Like, exp.ILike)):
        if node.args.get("escape") is not None:
            raise UnsupportedError(f"LIKE ... ESCAPE is not supported in {source!r}")
        pattern = _convert(node.expression, source)
        if not isinstance(pattern, Literal) or not isinstance(pattern.value, str):
            raise UnsupportedError(f"LIKE needs a constant string pattern in {source!r}")
        like_parts(pattern.value)  # refuses what ClickHouse refuses, before anything is read
        return Like(_convert(node.this, source), pattern.value, isinstance(node, exp.ILike))
    if isinstance(node, exp.RegexpLike) or (isinstance(node, exp.Anonymous) and node.name == "match"):
        raise UnsupportedError(f"RLIKE (REGEXP, match()) in {source!r} is not supported: regular expressions are "
                               "not evaluated here; use LIKE, startsWith() or endsWith(), or filter in Spark")
    if isinstance(node, exp.StartsWith):
        prefix = _convert(node.expression, source)
        if not isinstance(prefix, Literal) or not isinstance(prefix.value, str):
            raise UnsupportedError(f"startsWith needs a string constant in {source!r}")
        return StartsWith(_convert(node.this, source), prefix.value)
    if isinstance(node, exp.Column):
        names = [part.name for part in node.parts]
        if len(names) == 1 and not node.this.quoted and names[0].lower() in NAMED_FLOATS:
            return Literal(NAMED_FLOATS[names[0].lower()])  # inf, nan: number literals in ClickHouse
        return Column(".".join(names))
    if isinstance(node, exp.Identifier):
        return Column(node.name)
    if isinstance(node, exp.Literal):
        return Literal(_literal_value(node))
    if isinstance(node, exp.Boolean):
        return Literal(bool(node.this))
    if isinstance(node, exp.Null):
        return Literal(None)
    if isinstance(node, exp.Neg):
        inner = _convert(node.this, source)
        if isinstance(inner, Literal) and isinstance(inner.value, (int, float)) and not isinstance(inner.value, bool):
            return Literal(_negated(inner.value))
        return Func("negate", (inner,))
    if isinstance(node, (exp.Add, exp.Sub)):
        shifted = _shifted_constant(node, source)
        if shifted is not None:
            return shifted
    for arithmetic_class, name in _SQLGLOT_ARITHMETIC.items():
        if isinstance(node, arithmetic_class):
            return Func(name, (_convert(node.this, source), _convert(node.expression, source)))
    if isinstance(node, exp.TimestampTrunc) and node.unit and node.unit.name.upper() in _TRUNC_UNITS:
        return Func(_TRUNC_UNITS[node.unit.name.upper()], (_convert(node.this, source),))
    if isinstance(node, exp.Anonymous) and node.name == "toStartOfInterval":
        return Func(_interval_function(node, source), (_convert(node.expressions[0], source),))
    if isinstance(node, exp.Anonymous):
        converted_args = tuple(_convert(arg, source) for arg in node.expressions)
        if node.name == _NOT_BETWEEN:
            return not_between(*converted_args)
        return _function(node.name, converted_args, source)
    if isinstance(node, exp.Tuple):
        return Func("tuple", tuple(_convert(arg, source) for arg in node.expressions))
    if isinstance(node, exp.Func):
        # A function sqlglot knows by another name: keep ClickHouse's spelling of it.
        rendered = node.sql("clickhouse")
        name = rendered.split("(", 1)[0].strip()
        operand_nodes = [arg for arg in node.args.values() if isinstance(arg, exp.Expression)]
        operand_nodes += [arg for value in node.args.values() if isinstance(value, list) for arg in value]
        return _function(name, tuple(_convert(arg, source) for arg in operand_nodes), source)
    raise UnsupportedError(f"unsupported syntax {node.sql('clickhouse')!r} in {source!r}")


_ANY_CASE = {"length": "length", "concat": "concat", "lower": "lower", "upper": "upper", "lcase": "lower",
             "ucase": "upper"}


def _function(name: str, args: tuple[Expr, ...], source: str) -> Expr:
    """A function call, as the dedicated node when there is one (string matching, NULL tests), or as
    a constant when it converts constants (toDate('2024-01-01'), toDateTime('...', 'UTC'))."""
    # (ClickHouse takes these in any case; sqlglot spells some of them in capitals)
    name = _ANY_CASE.get(name.lower(), name)
    constant = args[1].value if len(args) == 2 and isinstance(args[1], Literal) else None
    if isinstance(constant, str):
        if name == "startsWith":
            return StartsWith(args[0], constant)
        if name == "endsWith":
            return EndsWith(args[0], constant)
        if name == "hasToken":
            return HasToken(args[0], check_token(constant, source))
        if name in ("like", "ilike", "notLike", "notILike"):
            like_parts(constant)
            like = Like(args[0], constant, name.lower().endswith("ilike"))
            return Not(like) if name.startswith("not") else like
    if name == "isNull" and len(args) == 1:
        return IsNull(args[0])
    if name == "isNotNull" and len(args) == 1:
        return IsNotNull(args[0])
    if name == "isNaN" and len(args) == 1:
        return IsNaN(args[0])
    if name in ("today", "yesterday") and not args:
        day = dt.datetime.now(dt.timezone.utc).date() - dt.timedelta(days=name == "yesterday")
        return Literal(day)
    if name == "now" and not args:
        # Evaluated once, when the expression is read (ClickHouse: once per query), as an instant.
        current = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
        return _constant_conversion("toDateTime", [current, "UTC"], source)
    if name in ("toDate", "toDate32", "toDateTime") and args and all(
            isinstance(arg, Literal) and isinstance(arg.value, str) for arg in args):
        return _constant_conversion(name, [arg.value for arg in args
                                           if isinstance(arg, Literal) and isinstance(arg.value, str)], source)
    return Func(name, args)


def _constant_conversion(name: str, args: list[str], source: str) -> Literal:
    if name == "toDateTime":
        if len(args) != 2:
            raise UnsupportedError(f"toDateTime({', '.join(map(repr, args))}) in {source!r}: give the time zone, "
                                   "e.g. toDateTime('2024-01-01 00:00:00', 'UTC')")
        type_text = f"DateTime('{args[1]}')"
    elif len(args) != 1:
        raise UnsupportedError(f"{name}() with {len(args)} arguments in {source!r}")
    else:
        type_text = "Date" if name == "toDate" else "Date32"
    return Literal(sql_constant(args[0], type_text, f"{name}()"))


# ---------------------------------------------------------------------------------------------
# Binding: column names and literal types
# ---------------------------------------------------------------------------------------------


def bind(expr: Expr, schema: Mapping[str, str]) -> Expr:
    """Check column names against `schema` (name → ClickHouse type) and read constants as the types
    of what they are compared with (see `literals.compare_constant`)."""
    if isinstance(expr, Column):
        if expr.name not in schema:
            known = ", ".join(schema) or "(none)"
            raise ExpressionError(f"unknown column {expr.name!r} in predicate; known columns: {known}")
        return Column(expr.name, schema[expr.name])
    if isinstance(expr, Literal):
        return expr
    if isinstance(expr, Compare):
        left, right = bind(expr.left, schema), bind(expr.right, schema)
        op = expr.op
        if isinstance(left, Literal) and not isinstance(right, Literal):
            left, right, op = right, left, _FLIPPED[op]
        target = _type_of(left)
        if target and isinstance(right, Literal):
            result, constant = compare_constant(op, right.value, target, _describe(left))
            if result in (ALWAYS, NEVER):
                return Fixed(left, result == ALWAYS)
            if result == FALSE:
                return Literal(False)
            return Compare(result, left, Literal(constant, target))
        return Compare(op, left, right)
    if isinstance(expr, In):
        inner = bind(expr.expr, schema)
        target = _type_of(inner)
        if not target:
            return In(inner, expr.values)
        kept = in_constants([value.value for value in expr.values], target, _describe(inner))
        return In(inner, tuple(Literal(value, target) for value in kept))
    if isinstance(expr, (And, Or)):
        return type(expr)(tuple(bind(arg, schema) for arg in expr.args))
    if isinstance(expr, Not):
        return Not(bind(expr.arg, schema))
    if isinstance(expr, (IsNull, IsNotNull, IsNaN)):
        return type(expr)(bind(expr.expr, schema))
    if isinstance(expr, Fixed):
        return Fixed(bind(expr.expr, schema), expr.value)
    if isinstance(expr, (Like, StartsWith, EndsWith, Contains, HasToken)):
        inner = bind(expr.expr, schema)
        target = _type_of(inner)
        if target and type_info(target).base not in ("String", "FixedString"):
            raise ExpressionError(f"{to_sql(expr)}: string matching needs a String column, {_describe(inner)} is {target}")
        if isinstance(expr, Like):
            like_parts(expr.pattern)
            return Like(inner, expr.pattern, expr.case_insensitive)
        if isinstance(expr, StartsWith):
            return StartsWith(inner, expr.prefix)
        if isinstance(expr, EndsWith):
            return EndsWith(inner, expr.suffix)
        if isinstance(expr, HasToken):
            return HasToken(inner, expr.token)
        return Contains(inner, expr.substring)
    if isinstance(expr, Func):
        args = tuple(bind(arg, schema) for arg in expr.args)
        return Func(expr.name, args, _function_type(expr.name, args))
    raise ExpressionError(f"cannot bind {to_sql(expr)}")


def evaluable_functions() -> frozenset[str]:
    """The functions a condition may call (the others are refused before anything is read)."""
    return frozenset(SUPPORTED_FUNCTIONS | STRING_FUNCTIONS | set(_PC_ARITHMETIC) | {"negate"})


def check_evaluable(expr: Expr) -> None:
    """UnsupportedError naming the first function of `expr` that evaluation does not know, so that a
    condition fails when it is planned rather than when its rows are read."""
    known = evaluable_functions()
    stack = [expr]
    while stack:
        node = stack.pop()
        if isinstance(node, Func) and node.name not in known:
            raise UnsupportedError(f"function {node.name}() in {to_sql(node)} cannot be evaluated in a condition "
                                   f"(supported: {', '.join(sorted(known))})")
        stack.extend(_children(node))


def _describe(expr: Expr) -> str:
    return f"column {expr.name!r}" if isinstance(expr, Column) else f"expression {to_sql(expr)}"


def _type_of(expr: Expr) -> str | None:
    if isinstance(expr, (Column, Func)):
        return expr.type
    return None


def _argument_types(args: tuple[Expr, ...]) -> list[str | None]:
    """Each argument's type: a column's or function's, String for a string constant."""
    return [_type_of(a) or ("String" if isinstance(a, Literal) and isinstance(a.value, str) else None) for a in args]


def _function_type(name: str, args: tuple[Expr, ...]) -> str | None:
    if name in STRING_FUNCTIONS:
        return string_result_type(name, _argument_types(args))
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
# SQL text of a tree (for messages)
# ---------------------------------------------------------------------------------------------

_PLAIN_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_OPERATORS = {"plus": "+", "minus": "-", "multiply": "*", "divide": "/", "modulo": "%"}


def to_sql(expr: Expr) -> str:
    """The expression as ClickHouse SQL text, as messages show it."""
    if isinstance(expr, Column):
        return expr.name if _PLAIN_NAME.match(expr.name) else "`" + expr.name.replace("`", "\\`") + "`"
    if isinstance(expr, Literal):
        return _literal_sql(expr.value)
    if isinstance(expr, Compare):
        return f"{to_sql(expr.left)} {expr.op} {to_sql(expr.right)}"
    if isinstance(expr, In):
        return f"{to_sql(expr.expr)} IN ({', '.join(to_sql(value) for value in expr.values)})"
    if isinstance(expr, (And, Or)):
        joiner = " AND " if isinstance(expr, And) else " OR "
        return "(" + joiner.join(to_sql(arg) for arg in expr.args) + ")"
    if isinstance(expr, Not):
        return f"NOT ({to_sql(expr.arg)})"
    if isinstance(expr, IsNull):
        return f"{to_sql(expr.expr)} IS NULL"
    if isinstance(expr, IsNotNull):
        return f"{to_sql(expr.expr)} IS NOT NULL"
    if isinstance(expr, IsNaN):
        return f"isNaN({to_sql(expr.expr)})"
    if isinstance(expr, Fixed):
        return f"({to_sql(expr.expr)} IS NOT NULL) = {_literal_sql(expr.value)}"
    if isinstance(expr, Like):
        return f"{to_sql(expr.expr)} {'ILIKE' if expr.case_insensitive else 'LIKE'} {_literal_sql(expr.pattern)}"
    if isinstance(expr, HasToken):
        return f"hasToken({to_sql(expr.expr)}, {_literal_sql(expr.token)})"
    if isinstance(expr, (StartsWith, EndsWith, Contains)):
        name = {StartsWith: "startsWith", EndsWith: "endsWith", Contains: "position"}[type(expr)]
        text = expr.prefix if isinstance(expr, StartsWith) else expr.suffix if isinstance(expr, EndsWith) else expr.substring
        return f"{name}({to_sql(expr.expr)}, {_literal_sql(text)})"
    if isinstance(expr, Func):
        if expr.name in _OPERATORS and len(expr.args) == 2:
            return f"({to_sql(expr.args[0])} {_OPERATORS[expr.name]} {to_sql(expr.args[1])})"
        if expr.name == "negate" and len(expr.args) == 1:
            return f"-{to_sql(expr.args[0])}"
        return f"{expr.name}({', '.join(to_sql(arg) for arg in expr.args)})"
    return repr(expr)


def _literal_sql(value: object) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    if isinstance(value, dt.datetime):
        return f"'{value.strftime('%Y-%m-%d %H:%M:%S')}'"
    if isinstance(value, dt.date):
        return f"'{value.isoformat()}'"
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else "inf" if value > 0 else "-inf"
    return str(value)


# ---------------------------------------------------------------------------------------------
# Evaluation over Arrow tables
# ---------------------------------------------------------------------------------------------

_PC_COMPARE = {"=": pc.equal, "!=": pc.not_equal, "<": pc.less, "<=": pc.less_equal, ">": pc.greater, ">=": pc.greater_equal}
_PC_ARITHMETIC = {"plus": pc.add, "minus": pc.subtract, "multiply": pc.multiply, "divide": pc.divide}
_ARROW_ERRORS = (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError, OverflowError)


def evaluate(expr: Expr, table: pa.Table) -> pa.BooleanArray:
    """Which rows of `table` satisfy `expr` (NULL counts as not satisfied), as a BooleanArray without nulls."""
    result = _truth(expr, table)
    return result.fill_null(False)


def evaluate_value(expr: Expr, table: pa.Table) -> pa.Array:
    """The value of a (bound) scalar expression for every row, e.g. a key element `toStartOfMonth(d)`."""
    return _as_array(_eval(expr, table), table.num_rows)


def filter_table(table: pa.Table, expr: Expr | None) -> pa.Table:
    """The rows of `table` that satisfy `expr` (all rows when `expr` is None)."""
    return table if expr is None else table.filter(evaluate(expr, table))


def _as_array(value: pa.Array | pa.Scalar, length: int) -> pa.Array:
    if isinstance(value, pa.Scalar):
        return pa.repeat(value, length)  # (no Python object per row)
    return value


def _truth(expr: Expr, table: pa.Table) -> pa.Array:
    """A condition's value per row: booleans, or numbers (non-zero is true), as ClickHouse filters."""
    array = _as_array(_eval(expr, table), table.num_rows)
    if pa.types.is_boolean(array.type):
        return array
    if pa.types.is_null(array.type):
        return pa.nulls(table.num_rows, pa.bool_())
    if pa.types.is_integer(array.type) or pa.types.is_floating(array.type):
        return pc.not_equal(array, 0)
    raise ExpressionError(f"{to_sql(expr)} cannot be a condition: it is {array.type}, not a boolean or a number")


def _column(table: pa.Table, name: str) -> pa.Array:
    if name not in table.column_names:
        raise ExpressionError(f"unknown column {name!r}; table has: {', '.join(table.column_names)}")
    array = table.column(name).combine_chunks()
    if pa.types.is_dictionary(array.type):
        array = array.dictionary_decode()
    return array


# The types pa.scalar infers for plain Python constants, given explicitly: pyarrow's inference
# imports pandas (some 0.3 s in a fresh Spark worker planning a filtered read).
_PLAIN_TYPES = {bool: pa.bool_(), float: pa.float64(), str: pa.string(), bytes: pa.binary()}


def _plain_scalar(value: object) -> pa.Scalar:
    if isinstance(value, int) and not isinstance(value, bool):
        return pa.scalar(value, pa.uint64() if value >= 1 << 63 else pa.int64())
    known = _PLAIN_TYPES.get(type(value))
    return pa.scalar(value) if known is None else pa.scalar(value, known)


def scalar_like(value: object, like: pa.Array | pa.Scalar | None) -> pa.Scalar:
    """A constant as an Arrow scalar, of the other operand's type when it converts without loss."""
    if value is None:
        return pa.scalar(None, like.type if like is not None else pa.null())
    if isinstance(value, decimal.Decimal) and like is not None and pa.types.is_floating(like.type):
        value = float(value)
    scalar = _plain_scalar(value)
    if like is None or scalar.type == like.type:
        return scalar
    try:
        cast = scalar.cast(like.type, safe=True)
    except _ARROW_ERRORS:
        return scalar
    if isinstance(value, (int, float)) and not isinstance(value, bool) and cast.as_py() != value:
        return scalar  # the cast would change the number (or it is NaN): compare exactly instead
    return cast


def _eval(expr: Expr, table: pa.Table) -> pa.Array | pa.Scalar:
    if isinstance(expr, Column):
        return _column(table, expr.name)
    if isinstance(expr, Literal):
        return _plain_scalar(expr.value)
    if isinstance(expr, Compare):
        return _eval_compare(expr, table)
    if isinstance(expr, In):
        return _eval_in(expr, table)
    if isinstance(expr, (And, Or)):
        combine = pc.and_kleene if isinstance(expr, And) else pc.or_kleene
        result = _truth(expr.args[0], table)
        for arg in expr.args[1:]:
            result = combine(result, _truth(arg, table))
        return result
    if isinstance(expr, Not):
        return pc.invert(_truth(expr.arg, table))
    if isinstance(expr, IsNull):
        return pc.is_null(_as_array(_eval(expr.expr, table), table.num_rows))
    if isinstance(expr, IsNotNull):
        return pc.is_valid(_as_array(_eval(expr.expr, table), table.num_rows))
    if isinstance(expr, IsNaN):
        value = _as_array(_eval(expr.expr, table), table.num_rows)
        if pa.types.is_floating(value.type):
            return pc.is_nan(value)
        return pc.if_else(pc.is_valid(value), pa.scalar(False), pa.scalar(None, pa.bool_()))
    if isinstance(expr, Fixed):
        valid = pc.is_valid(_as_array(_eval(expr.expr, table), table.num_rows))
        return pc.if_else(valid, pa.scalar(expr.value), pa.scalar(None, pa.bool_()))
    if isinstance(expr, Like):
        return pc.match_substring_regex(_strings(expr, table), like_regex(expr.pattern), ignore_case=expr.case_insensitive)
    if isinstance(expr, StartsWith):
        return pc.starts_with(_strings(expr, table), expr.prefix)
    if isinstance(expr, EndsWith):
        return pc.ends_with(_strings(expr, table), expr.suffix)
    if isinstance(expr, Contains):
        return pc.match_substring(_strings(expr, table), expr.substring)
    if isinstance(expr, HasToken):
        return pc.match_substring_regex(_strings(expr, table), _token_regex(expr.token))
    if isinstance(expr, Func):
        return _eval_function(expr, table)
    raise ExpressionError(f"cannot evaluate {to_sql(expr)}")


def _eval_compare(expr: Compare, table: pa.Table) -> pa.Array | pa.Scalar:
    rows = table.num_rows
    left = _eval(expr.left, table)
    ordering_type = _type_of(expr.left)
    ordered = ordering_type is not None and needs_ordering_map(ordering_type) and expr.op not in ("=", "!=", "<=>")
    if ordered:
        # Enums and UUIDs order differently in ClickHouse than their Arrow text does.
        left = orderable(_as_array(left, rows), ordering_type)  # type: ignore[arg-type]
    if isinstance(expr.right, Literal):
        value = orderable_value(expr.right.value, ordering_type) if ordered else expr.right.value  # type: ignore[arg-type]
        right = scalar_like(value, left if not isinstance(left, pa.Scalar) else None)
    else:
        right = _eval(expr.right, table)
        if ordered and _type_of(expr.right) == ordering_type:
            right = orderable(_as_array(right, rows), ordering_type)  # type: ignore[arg-type]
    if isinstance(left, pa.Scalar) and not isinstance(right, pa.Scalar):
        left = scalar_like(left.as_py(), right)
    null_constant = any(isinstance(side, pa.Scalar) and not side.is_valid for side in (left, right))
    if expr.op == "<=>":
        both_null = pc.and_(pc.is_null(_as_array(left, rows)), pc.is_null(_as_array(right, rows)))
        if null_constant:
            return both_null
        equal = _compare("=", left, right, rows, expr).fill_null(False)
        if _nullable(expr.left) or _nullable(expr.right):
            # With a Nullable side ClickHouse compares as it sorts: NaN <=> NaN holds.
            equal = pc.or_(equal, pc.and_(_is_nan(left, rows), _is_nan(right, rows)))
        return pc.or_(both_null, equal)
    if null_constant:
        return pa.nulls(rows, pa.bool_())
    return _compare(expr.op, left, right, rows, expr)


def _nullable(expr: Expr) -> bool:
    type_text = _type_of(expr)
    return type_text is not None and type_info(type_text).nullable


def _is_nan(value: pa.Array | pa.Scalar, rows: int) -> pa.Array:
    array = _as_array(value, rows)
    return pc.is_nan(array).fill_null(False) if pa.types.is_floating(array.type) else pa.array(np.zeros(rows, dtype=bool))


def _is_number_type(data_type: pa.DataType) -> bool:
    return pa.types.is_integer(data_type) or pa.types.is_floating(data_type) or pa.types.is_boolean(data_type)


def _compare(op: str, left: pa.Array | pa.Scalar, right: pa.Array | pa.Scalar, rows: int, expr: Expr) -> pa.Array:
    if left.type != right.type and _is_number_type(left.type) and _is_number_type(right.type):
        return _compare_numbers(op, left, right, rows)
    try:
        return _as_array(_PC_COMPARE[op](left, right), rows)
    except _ARROW_ERRORS:
        raise ExpressionError(f"cannot compare {_operand(expr, 'left')} ({left.type}) with {_operand(expr, 'right')} "
                              f"({right.type}) in {to_sql(expr)}") from None


def _operand(expr: Expr, side: str) -> str:
    return to_sql(getattr(expr, side)) if isinstance(expr, Compare) else "a value"


def _numbers(value: pa.Array | pa.Scalar, rows: int) -> tuple[np.ndarray, np.ndarray]:
    """Values (NULLs as 0) and the NULL mask of a numeric array or scalar, as numpy arrays."""
    if isinstance(value, pa.Scalar):
        dtype = np.uint8 if pa.types.is_boolean(value.type) else value.type.to_pandas_dtype()
        return np.full(rows, value.as_py(), dtype=dtype), np.zeros(rows, dtype=bool)
    if pa.types.is_boolean(value.type):
        value = value.cast(pa.uint8())
    mask = np.asarray(value.is_null()) if value.null_count else np.zeros(len(value), dtype=bool)
    return np.asarray(value.fill_null(0).to_numpy(zero_copy_only=False)), mask


def _compare_numbers(op: str, left: pa.Array | pa.Scalar, right: pa.Array | pa.Scalar, rows: int) -> pa.Array:
    """`left op right` for numbers of different types, exactly (as ClickHouse's accurate comparison)."""
    a, a_null = _numbers(left, rows)
    b, b_null = _numbers(right, rows)
    sign, unordered = _order(a, b)
    result = {"=": sign == 0, "!=": sign != 0, "<": sign < 0, "<=": sign <= 0, ">": sign > 0, ">=": sign >= 0}[op]
    result = (result | unordered) if op == "!=" else (result & ~unordered)
    return pa.array(result, pa.bool_(), mask=a_null | b_null)


def _sign(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a > b).astype(np.int8) - (a < b).astype(np.int8)


def _order(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(-1/0/1 per row, rows where either side is NaN) for numeric arrays of any two dtypes."""
    a_float, b_float = a.dtype.kind == "f", b.dtype.kind == "f"
    if a_float or b_float:
        x, y = a.astype(np.float64), b.astype(np.float64)
        sign, unordered = _sign(x, y), np.isnan(x) | np.isnan(y)
        if a_float != b_float:
            integers, floats, direction = (b, x, -1) if a_float else (a, y, 1)
            if integers.dtype.itemsize == 8:
                # An Int64/UInt64 rounded to a float may tie with a float it differs from: decide ties exactly.
                ties = np.flatnonzero((sign == 0) & ~unordered)
                if len(ties):
                    whole, tied = integers[ties], floats[ties]
                    beyond = tied >= (2.0**63 if integers.dtype == np.int64 else 2.0**64)
                    exact = np.where(beyond, 0, tied).astype(integers.dtype)
                    sign[ties] = np.where(beyond, -1, _sign(whole, exact)) * direction
        return sign, unordered
    none = np.zeros(len(a), dtype=bool)
    if a.dtype == np.uint64 and b.dtype.kind == "i":
        return np.where(b < 0, 1, _sign(a, np.where(b < 0, 0, b).astype(np.uint64))).astype(np.int8), none
    if b.dtype == np.uint64 and a.dtype.kind == "i":
        return np.where(a < 0, -1, _sign(np.where(a < 0, 0, a).astype(np.uint64), b)).astype(np.int8), none
    common = np.promote_types(a.dtype, b.dtype)
    return _sign(a.astype(common), b.astype(common)), none


def _eval_in(expr: In, table: pa.Table) -> pa.Array:
    inner = _as_array(_eval(expr.expr, table), table.num_rows)
    present = [v.value for v in expr.values if v.value is not None]
    if not present:
        return pc.if_else(pc.is_valid(inner), False, None)
    if pa.types.is_floating(inner.type):
        # ClickHouse's sets compare floats bit for bit: NaN matches NaN, -0.0 does not match 0.0.
        bits = {16: pa.int16(), 32: pa.int32(), 64: pa.int64()}[inner.type.bit_width]
        try:
            values = pa.array([float(v) for v in present], pa.float64()).cast(inner.type)  # type: ignore[arg-type]
        except (TypeError, ValueError, *_ARROW_ERRORS):
            raise ExpressionError(f"{to_sql(expr)}: IN list values must be numbers for {to_sql(expr.expr)}") from None
        found = pc.is_in(inner.view(bits), value_set=values.view(bits), skip_nulls=True)
    else:
        try:
            values = pa.array(present, inner.type)
        except _ARROW_ERRORS:
            values = pa.array([scalar_like(v, inner).as_py() for v in present])
            if values.type != inner.type and pa.types.is_integer(inner.type) and pa.types.is_integer(values.type):
                inner = inner.cast(values.type)
        try:
            found = pc.is_in(inner, value_set=values, skip_nulls=True)
        except _ARROW_ERRORS:
            raise ExpressionError(f"cannot evaluate {to_sql(expr)}: {to_sql(expr.expr)} is {inner.type}") from None
    return pc.if_else(pc.is_valid(inner), found, pa.scalar(None, pa.bool_()))


# ASCII characters other than letters and digits: what separates tokens (bytes >= 0x80 never do).
_TOKEN_SEPARATOR = r"[\x00-\x2f\x3a-\x40\x5b-\x60\x7b-\x7f]"


def check_token(token: str, source: str) -> str:
    """hasToken's needle: one token (ClickHouse refuses a needle holding a separator)."""
    if not token:
        raise UnsupportedError(f"hasToken with an empty token in {source!r}")
    if re.search(_TOKEN_SEPARATOR, token):
        raise ExpressionError(f"hasToken({token!r}) in {source!r}: the token must not contain whitespace or "
                              "separator characters (ASCII other than letters and digits)")
    return token


def _token_regex(token: str) -> str:
    return f"(?:^|{_TOKEN_SEPARATOR}){re.escape(token)}(?:{_TOKEN_SEPARATOR}|$)"


def _strings(expr: Like | StartsWith | EndsWith | Contains | HasToken, table: pa.Table) -> pa.Array:
    array = _as_array(_eval(expr.expr, table), table.num_rows)
    if not (pa.types.is_string(array.type) or pa.types.is_large_string(array.type) or pa.types.is_binary(array.type)
            or pa.types.is_large_binary(array.type)):
        raise ExpressionError(f"{to_sql(expr)}: string matching needs a String column, {to_sql(expr.expr)} is {array.type}")
    return array


def _signed_operand(expr: Expr, value: pa.Array | pa.Scalar) -> bool:
    """Whether an integer operand is of a signed type; a literal has the narrowest type that holds it."""
    if isinstance(expr, Literal) and isinstance(expr.value, int):
        return literal_type(expr.value).startswith("Int")
    return pa.types.is_signed_integer(value.type)


def _wrapping(value: pa.Array | pa.Scalar, signed: bool) -> pa.Array | pa.Scalar:
    """An integer operand as UInt64 bits, so that +, - and * wrap modulo 2^64 as in ClickHouse."""
    return value.cast(pa.int64() if signed else pa.uint64()).cast(pa.uint64(), safe=False)


def _arithmetic(expr: Func, table: pa.Table) -> pa.Array | pa.Scalar:
    """+, -, * and / with ClickHouse's result types: integers give a 64-bit integer (wrapping), signed
    when an operand is signed or for -; anything with a float, and every /, gives a Float64."""
    values = [_eval(arg, table) for arg in expr.args]
    for value in values:
        if not _is_number_type(value.type):
            raise ExpressionError(f"{to_sql(expr)}: arithmetic needs numbers, {to_sql(expr.args[values.index(value)])} "
                                  f"is {value.type}")
    operation = _PC_ARITHMETIC[expr.name]
    try:
        if expr.name == "divide" or not all(pa.types.is_integer(v.type) or pa.types.is_boolean(v.type) for v in values):
            return operation(*(value.cast(pa.float64(), safe=False) for value in values))
        signs = [_signed_operand(arg, value) for arg, value in zip(expr.args, values, strict=True)]
        result = operation(*(_wrapping(value, signed) for value, signed in zip(values, signs, strict=True)))
        return result.cast(pa.int64(), safe=False) if any(signs) or expr.name == "minus" else result
    except _ARROW_ERRORS as error:
        raise ExpressionError(f"cannot evaluate {to_sql(expr)}: {error}") from None


def _eval_function(expr: Func, table: pa.Table) -> pa.Array | pa.Scalar:
    if expr.name in _PC_ARITHMETIC and len(expr.args) == 2:
        return _arithmetic(expr, table)
    if expr.name == "negate" and len(expr.args) == 1:
        value = _eval(expr.args[0], table)
        if pa.types.is_floating(value.type):
            return pc.negate(value.cast(pa.float64()))
        if pa.types.is_integer(value.type) or pa.types.is_boolean(value.type):
            # ClickHouse's negate gives a signed integer, wrapping at 64 bits (as 0 - x does).
            zero = pa.scalar(0, pa.uint64())
            return pc.subtract(zero, _wrapping(value, pa.types.is_signed_integer(value.type))).cast(pa.int64(), safe=False)
        raise ExpressionError(f"{to_sql(expr)}: negating needs a number, {to_sql(expr.args[0])} is {value.type}")
    if expr.name in STRING_FUNCTIONS:
        types = _argument_types(expr.args)
        if any(t is None for t in types):
            raise ExpressionError(f"cannot evaluate {to_sql(expr)}: its arguments must be columns of the table, "
                                  "functions of them or string constants")
        values = [_as_array(_eval(arg, table), table.num_rows) for arg in expr.args]
        return apply_string_function(expr.name, values, [t for t in types if t is not None])
    if expr.name in SUPPORTED_FUNCTIONS:
        first = expr.args[0] if expr.args else None
        arg_type = _type_of(first) if first is not None else None
        if arg_type is None:
            raise ExpressionError(f"cannot evaluate {to_sql(expr)}: its first argument must be a column of the "
                                  "table (or a function of one) so that its type is known")
        constant = None
        if len(expr.args) > 1:
            if not isinstance(expr.args[1], Literal) or not isinstance(expr.args[1].value, int):
                raise ExpressionError(f"{to_sql(expr)}: {expr.name}() needs an integer constant as its second argument")
            constant = expr.args[1].value
        array = _as_array(_eval(first, table), table.num_rows)  # type: ignore[arg-type]
        return apply_function(expr.name, array, arg_type, constant)
    raise UnsupportedError(f"function {expr.name}() in {to_sql(expr)} cannot be evaluated here (supported: "
                           f"{', '.join(sorted(SUPPORTED_FUNCTIONS | STRING_FUNCTIONS | set(_PC_ARITHMETIC)))})")

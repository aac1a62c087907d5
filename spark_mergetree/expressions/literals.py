"""Constants in predicates as ClickHouse reads them: string and number literals of SQL text, and
what a constant means next to a column of a given type.

String literals follow ClickHouse's escapes (`\\n`, `\\xHH`, `''`, ...; a backslash before most other
characters is kept, so `'a\\_b'` is the four characters `a\\_b`). Number literals get ClickHouse's
types: integers from -2^63 to 2^64-1 stay exact, anything beyond is Float64.

Comparing a column with a constant follows ClickHouse's accurate comparison: `u8 < 300` holds for
every UInt8, `k = 2.5` for no integer, `id < 18446744073709551616` (a Float64) for every UInt64.
`compare_constant` turns such comparisons into an equivalent one with a constant of the column's own
type, or into a fixed answer; `in_constants` keeps the IN-list values the column's type can hold
exactly, as ClickHouse's sets do. Strings compared with numbers, dates and times are read the way
ClickHouse converts them; text it would read differently from us is refused.
"""

from __future__ import annotations

import datetime as dt
import decimal
import math
import re
import sys
import uuid
import zoneinfo
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from spark_mergetree.errors import ExpressionError, UnsupportedError
from spark_mergetree.expressions.functions import INTEGER_BITS, type_info

# ---------------------------------------------------------------------------------------------
# SQL text
# ---------------------------------------------------------------------------------------------

NAMED_FLOATS = {"inf": math.inf, "infinity": math.inf, "nan": math.nan}
_CONTROL_ESCAPES = {"a": 0x07, "b": 0x08, "e": 0x1B, "f": 0x0C, "n": 0x0A, "r": 0x0D, "t": 0x09, "v": 0x0B, "0": 0x00}
# After a backslash these stand for themselves; any other character keeps its backslash.
_SELF_ESCAPES = frozenset("\\'\"/=`")
_HEX_DIGITS = frozenset("0123456789abcdefABCDEF")


def decode_string_literal(raw: str) -> str:
    """The value of a single-quoted ClickHouse string literal, given with its quotes."""
    if len(raw) < 2 or raw[0] != "'" or raw[-1] != "'":
        raise ExpressionError(f"not a quoted string literal: {raw!r}")
    body = raw[1:-1]
    out = bytearray()
    index = 0
    while index < len(body):
        char = body[index]
        if char == "'":  # '' inside the literal
            out += b"'"
            index += 2
            continue
        if char != "\\":
            out += char.encode()
            index += 1
            continue
        following = body[index + 1] if index + 1 < len(body) else ""
        if following == "x":
            digits = body[index + 2 : index + 4]
            if len(digits) != 2 or not set(digits) <= _HEX_DIGITS:
                raise ExpressionError(f"string literal {raw!r}: \\x must be followed by two hex digits")
            out.append(int(digits, 16))
            index += 4
            continue
        if following == "N":
            index += 2  # ClickHouse reads \N inside a literal as nothing
            continue
        if following in _CONTROL_ESCAPES:
            out.append(_CONTROL_ESCAPES[following])
        elif following in _SELF_ESCAPES or (following and ord(following) < 0x20) or following == "\x7f":
            out += following.encode()
        else:
            out += ("\\" + following).encode()
        index += 2
    try:
        return out.decode()
    except UnicodeDecodeError:
        raise UnsupportedError(f"string literal {raw!r} is not valid UTF-8 text; byte strings are not "
                               "supported in predicates") from None


def number_literal(text: str) -> int | float:
    """The value of a number literal with ClickHouse's typing (see the module docstring)."""
    raw = text.replace("_", "")
    lowered = raw.lower()
    if lowered in NAMED_FLOATS:
        return NAMED_FLOATS[lowered]
    try:
        if lowered.startswith(("0x", "0b")) and "p" not in lowered:
            value: int | float = int(raw, 0)
        else:
            value = int(raw)
    except ValueError:
        try:
            return float(raw)
        except ValueError:
            raise ExpressionError(f"cannot read number {text!r}") from None
    return value if -(1 << 63) <= value < (1 << 64) else float(value)


# ---------------------------------------------------------------------------------------------
# Constants next to a column type
# ---------------------------------------------------------------------------------------------

# What `compare_constant` may answer instead of a comparison.
ALWAYS = "always"  # true for every row where the column is not NULL (NULL where it is)
NEVER = "never"  # false for every row where the column is not NULL (NULL where it is)
FALSE = "false"  # false for every row, NULL or not (x <=> c with c out of the type's range)

_DATE_RANGE = (dt.date(1970, 1, 1), dt.date(2149, 6, 6))
_DATE32_RANGE = (dt.date(1900, 1, 1), dt.date(2299, 12, 31))
_DATETIME_SECONDS = (0, (1 << 32) - 1)
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
_INTEGER_TEXT = re.compile(r"[+-]?\d+", re.ASCII)
_FLOAT_TEXT = re.compile(r"[+-]?((\d+\.?\d*|\.\d+)([eE][+-]?\d+)?|inf|infinity|nan)", re.I | re.ASCII)
_DATE_TEXT = re.compile(r"(\d{4})-(\d{1,2})-(\d{1,2})|(\d{4})(\d{2})(\d{2})", re.ASCII)
_DATETIME_TEXT = re.compile(
    r"(\d{4})-(\d{1,2})-(\d{1,2})(?:[ T](\d{1,2}):(\d{1,2})(?::(\d{1,2})(\.\d+)?)?)?(Z|[+-]\d{2}:?\d{2})?")


@dataclass(frozen=True)
class NumericDomain:
    """How a column type orders against numbers: its exact value range, or a float width."""

    low: int | None = None  # integer types: the range
    high: int | None = None
    float_bits: int | None = None  # 32 or 64 for Float32/Float64


def numeric_domain(type_text: str) -> NumericDomain | None:
    """The numeric view of a type for comparisons with numbers (None: numbers do not compare with it).

    Bool compares as UInt8 0/1, DateTime as its UInt32 seconds, as in ClickHouse."""
    base = type_info(type_text).base
    if base in INTEGER_BITS:
        bits = INTEGER_BITS[base]
        return NumericDomain(-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if base.startswith("Int") else NumericDomain(0, (1 << bits) - 1)
    if base == "Bool":
        return NumericDomain(0, 1)
    if base == "DateTime":
        return NumericDomain(*_DATETIME_SECONDS)
    if base in ("Float32", "Float64"):
        return NumericDomain(float_bits=32 if base == "Float32" else 64)
    return None


def _exact(value: object) -> Fraction | float:
    """A number as an exact Fraction (NaN and infinities stay floats)."""
    if isinstance(value, bool):
        return Fraction(int(value))
    if isinstance(value, float) and not math.isfinite(value):
        return value
    if isinstance(value, (int, float)):
        return Fraction(value)
    if isinstance(value, decimal.Decimal):
        if not value.is_finite():
            return float(value)
        return Fraction(value)
    raise TypeError(value)


def _is_number(value: object) -> bool:
    return isinstance(value, (bool, int, float, decimal.Decimal))


def compare_constant(op: str, value: object, type_text: str, what: str) -> tuple[str, object]:
    """`column op value` as ClickHouse evaluates it: (op, constant of the column's type) or
    (ALWAYS / NEVER / FALSE, None) when the answer does not depend on the row.

    `what` names the column (or expression) in errors."""
    if value is None:
        return op, None
    domain = numeric_domain(type_text)
    if domain is not None and isinstance(value, str):
        value = sql_constant(value, type_text, what)  # a number, or a DateTime's time
    if domain is None or not _is_number(value):
        return op, sql_constant(value, type_text, what)
    number = _exact(value)
    if domain.float_bits is not None:
        return _compare_float(op, number)
    result_op, threshold = _compare_integer(op, number, domain.low, domain.high)  # type: ignore[arg-type]
    if threshold is None:
        return result_op, None
    return result_op, _from_integer(threshold, type_text)


def _compare_integer(op: str, number: Fraction | float, low: int, high: int) -> tuple[str, int | None]:
    if isinstance(number, float):  # NaN or an infinity
        if math.isnan(number):
            return {"!=": ALWAYS, "<=>": FALSE}.get(op, NEVER), None
        above = number > 0  # +inf lies above every value, -inf below
        if op in ("=", "<=>"):
            return (NEVER if op == "=" else FALSE), None
        if op == "!=":
            return ALWAYS, None
        holds = (op in ("<", "<=")) == above
        return (ALWAYS if holds else NEVER), None
    integral = number.denominator == 1
    if op in ("=", "<=>", "!="):
        if integral and low <= number <= high:
            return op, int(number)
        return {"=": NEVER, "<=>": FALSE, "!=": ALWAYS}[op], None
    # x < c  ⇔  x < ceil(c);  x <= c ⇔ x <= floor(c);  x > c ⇔ x > floor(c);  x >= c ⇔ x >= ceil(c)
    threshold = math.ceil(number) if op in ("<", ">=") else math.floor(number)
    if op == "<":
        return (ALWAYS, None) if threshold > high else (NEVER, None) if threshold <= low else (op, threshold)
    if op == "<=":
        return (ALWAYS, None) if threshold >= high else (NEVER, None) if threshold < low else (op, threshold)
    if op == ">":
        return (NEVER, None) if threshold >= high else (ALWAYS, None) if threshold < low else (op, threshold)
    return (NEVER, None) if threshold > high else (ALWAYS, None) if threshold <= low else (op, threshold)


def _compare_float(op: str, number: Fraction | float) -> tuple[str, object]:
    """Float columns compare with the constant as a Float64 when that is exact, else around it."""
    if isinstance(number, float):
        if math.isnan(number) and op != "<=>":  # nothing compares with NaN, except as "not equal"
            return (ALWAYS if op == "!=" else NEVER), None
        return op, number
    if _as_float(number, 64) is not None:
        return op, float(number)
    # Between two adjacent floats (or beyond the largest): no float equals it, and < / > become
    # <= / >= of a neighbour.
    if op in ("=", "<=>", "!="):
        return {"=": NEVER, "<=>": FALSE, "!=": ALWAYS}[op], None
    if abs(number) > Fraction(sys.float_info.max):
        below, above = (sys.float_info.max, math.inf) if number > 0 else (-math.inf, -sys.float_info.max)
    else:
        nearest = float(number)
        if Fraction(nearest) > number:
            below, above = math.nextafter(nearest, -math.inf), nearest
        else:
            below, above = nearest, math.nextafter(nearest, math.inf)
    return ("<=", below) if op in ("<", "<=") else (">=", above)


def _as_float(number: Fraction, bits: int) -> float | None:
    """`number` as a float of `bits` bits when that holds it exactly, else None."""
    if abs(number) > Fraction(sys.float_info.max):
        return None
    value = float(number)
    if bits == 32:
        with np.errstate(over="ignore"):
            value = float(np.float32(value))
    return value if math.isfinite(value) and Fraction(value) == number else None


def _from_integer(value: int, type_text: str) -> object:
    base = type_info(type_text).base
    if base == "Bool":
        return bool(value)
    if base == "DateTime":
        return _EPOCH + dt.timedelta(seconds=value)
    return value


def in_constants(values: list[object], type_text: str, what: str) -> list[object]:
    """The IN-list values a column of `type_text` can hold exactly (as ClickHouse builds its set);
    NULLs and values the type cannot represent are dropped."""
    domain = numeric_domain(type_text)
    kept: list[object] = []
    for value in values:
        if value is None:
            continue
        if domain is not None and isinstance(value, str):
            value = sql_constant(value, type_text, what)
        if domain is None or not _is_number(value):
            kept.append(sql_constant(value, type_text, what))
            continue
        if domain.float_bits is not None:
            exact = _float_member(value, domain.float_bits)
            if exact is not None:
                kept.append(exact)
            continue
        number = _exact(value)  # NaN and infinities are no integer: dropped
        if isinstance(number, Fraction) and number.denominator == 1 and domain.low <= number <= domain.high:  # type: ignore[operator]
            kept.append(_from_integer(int(number), type_text))
    return kept


def _float_member(value: object, bits: int) -> float | None:
    """An IN-list value as a float of `bits` bits when that holds it exactly (sign of zero and NaN kept)."""
    if isinstance(value, float):
        if not math.isfinite(value) or bits == 64:
            return value
        with np.errstate(over="ignore"):
            return value if float(np.float32(value)) == value else None
    return _as_float(_exact(value), bits)  # type: ignore[arg-type]


def _parse_float(text: str, type_text: str, what: str) -> float:
    if not _FLOAT_TEXT.fullmatch(text):
        raise ExpressionError(f"cannot compare {what} of type {type_text} with {text!r}: not a number")
    return float(text)


def sql_constant(value: object, type_text: str, what: str) -> object:
    """A constant converted to the Python value of a `type_text` column, the way ClickHouse converts
    constants in comparisons; strings are read strictly and anything ambiguous is refused."""
    info = type_info(type_text)
    base = info.base

    def fail(reason: str) -> ExpressionError:
        return ExpressionError(f"cannot compare {what} of type {type_text} with {value!r}: {reason}")

    if value is None:
        return None
    if isinstance(value, str):
        if base in INTEGER_BITS or base == "Bool":
            if base == "Bool" and value in ("true", "false"):
                return value == "true"
            if not _INTEGER_TEXT.fullmatch(value):
                raise fail("not an integer")
            domain = numeric_domain(type_text)
            number = int(value)
            if not domain.low <= number <= domain.high:  # type: ignore[union-attr,operator]
                raise fail(f"out of the range of {base}")
            return bool(number) if base == "Bool" else number
        if base in ("Float32", "Float64"):
            return _parse_float(value, type_text, what)
        if base in ("Date", "Date32"):
            return _parse_date(value, base, fail)
        if base == "DateTime":
            return _parse_datetime(value, info.timezone, fail)
    elif base in ("Date", "Date32") and _is_number(value):
        raise fail("a Date compares with dates, such as 'YYYY-MM-DD'")
    elif base == "DateTime" and isinstance(value, dt.datetime):
        seconds = (value if value.tzinfo else value.replace(tzinfo=_zone(info.timezone))) - _EPOCH
        if not _DATETIME_SECONDS[0] <= seconds.total_seconds() <= _DATETIME_SECONDS[1]:
            raise fail("out of the range of DateTime (1970-01-01 to 2106-02-07 UTC)")
    return coerce_literal(value, type_text, what)


def _zone(name: str | None) -> dt.tzinfo:
    if not name:
        return dt.timezone.utc
    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise ExpressionError(f"unknown time zone {name!r}") from None


def _parse_date(text: str, base: str, fail: Callable[[str], ExpressionError]) -> dt.date:
    match = _DATE_TEXT.fullmatch(text)
    if not match:
        raise fail("expected a date as 'YYYY-MM-DD' or 'YYYYMMDD'")
    year, month, day = (int(group) for group in match.groups() if group is not None)
    try:
        value = dt.date(year, month, day)
    except ValueError:
        raise fail("not a valid date") from None
    low, high = _DATE_RANGE if base == "Date" else _DATE32_RANGE
    if base == "Date":
        return min(max(value, low), high)  # ClickHouse saturates dates outside Date's range
    if not low <= value <= high:
        raise fail(f"outside the range of Date32 ({low} to {high})")
    return value


def _parse_datetime(text: str, zone_name: str | None, fail: Callable[[str], ExpressionError]) -> dt.datetime:
    match = _DATETIME_TEXT.fullmatch(text)
    if not match:
        raise fail("expected 'YYYY-MM-DD hh:mm:ss' or 'YYYY-MM-DD'")
    year, month, day, hour, minute, second, _fraction, offset = match.groups()
    try:
        naive = dt.datetime(int(year), int(month), int(day), int(hour or 0), int(minute or 0), int(second or 0))
    except ValueError:
        raise fail("not a valid date and time") from None
    if offset:
        sign = -1 if offset[0] == "-" else 1
        digits = offset.replace(":", "")[1:] if offset != "Z" else "0000"
        zone: dt.tzinfo = dt.timezone(sign * dt.timedelta(hours=int(digits[:2]), minutes=int(digits[2:] or 0)))
    else:
        zone = _zone(zone_name)
    seconds = math.floor((naive.replace(tzinfo=zone) - _EPOCH).total_seconds())
    # ClickHouse saturates times outside DateTime's range to its ends.
    seconds = min(max(seconds, _DATETIME_SECONDS[0]), _DATETIME_SECONDS[1])
    return _EPOCH + dt.timedelta(seconds=seconds)


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
        zone = _zone(info.timezone)
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

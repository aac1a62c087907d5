"""String functions of expressions (`where`, DEFAULT and MATERIALIZED expressions), over whole
arrays, as ClickHouse computes them: `lower` and `upper` (ASCII letters only, as ClickHouse's;
bytes of other characters kept), `length` (bytes), `empty` and `notEmpty`, `concat` of strings, and
`toString` of integers, Bool, Date, DateTime (its zone's wall clock), String and UUID.

Arguments are String (or FixedString) columns, functions of them, or string constants; NULL in
gives NULL out (`concat` of a NULL is NULL, as ClickHouse's is). Anything else is refused by name.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc

from spark_mergetree.errors import ExpressionError, UnsupportedError
from spark_mergetree.format.json_text import scalar_text
from spark_mergetree.format.types import LowCardinality, Nullable, parse_type

__all__ = ["STRING_FUNCTIONS", "string_result_type", "apply_string_function"]

STRING_FUNCTIONS = frozenset({"lower", "upper", "length", "empty", "notEmpty", "concat", "toString"})
_TEXT = ("String", "FixedString")


def _base(type_text: str) -> tuple[str, bool]:
    """(type without LowCardinality and Nullable, whether Nullable); a read gives LowCardinality's
    values decoded."""
    dt = parse_type(type_text)
    dt = dt.inner if isinstance(dt, LowCardinality) else dt
    return (dt.inner.to_clickhouse(), True) if isinstance(dt, Nullable) else (dt.to_clickhouse(), False)


def string_result_type(name: str, arg_types: Sequence[str | None]) -> str | None:
    """The result type of `name` over arguments of these types (None: a type not known here)."""
    if any(t is None for t in arg_types) or not arg_types:
        return None
    bases = [_base(t) for t in arg_types if t is not None]
    nullable = any(n for _, n in bases)
    if name == "toString" and len(bases) == 1:
        result = "String"
    elif name == "concat" and len(bases) >= 2 and all(b.startswith(_TEXT) for b, _ in bases):
        result = "String"
    elif name in ("lower", "upper") and len(bases) == 1 and bases[0][0].startswith(_TEXT):
        result = "String"
    elif name == "length" and len(bases) == 1 and bases[0][0].startswith(_TEXT):
        result = "UInt64"
    elif name in ("empty", "notEmpty") and len(bases) == 1 and bases[0][0].startswith(_TEXT):
        result = "UInt8"
    else:
        return None
    return f"Nullable({result})" if nullable else result


def apply_string_function(name: str, values: Sequence[pa.Array], arg_types: Sequence[str]) -> pa.Array:
    """`name` of each row's arguments (`values`: one array per argument, all of one length)."""
    if string_result_type(name, arg_types) is None:
        raise UnsupportedError(f"{name}() of {', '.join(arg_types)} is not computed here (strings only; toString "
                               "of integers, Bool, Date, DateTime, String and UUID)")
    if name == "toString":
        base = parse_type(_base(arg_types[0])[0])
        return scalar_text(base, values[0], f"toString({arg_types[0]})")
    texts = [_as_binary(v) for v in values]
    if name == "concat":
        return pc.binary_join_element_wise(*texts, b"").cast(pa.string())
    text = texts[0]
    if name == "length":
        return pc.binary_length(text).cast(pa.uint64())
    if name in ("empty", "notEmpty"):
        lengths = pc.binary_length(text)
        return (pc.equal(lengths, 0) if name == "empty" else pc.not_equal(lengths, 0)).cast(pa.uint8())
    # (Arrow's ascii_lower/ascii_upper change ASCII letters only, as ClickHouse's lower/upper do)
    return (pc.ascii_upper if name == "upper" else pc.ascii_lower)(text.cast(pa.string()))


def _as_binary(values: pa.Array) -> pa.Array:
    if pa.types.is_fixed_size_binary(values.type):
        return values.cast(pa.binary())
    if pa.types.is_string(values.type) or pa.types.is_large_string(values.type):
        return values.cast(pa.binary() if pa.types.is_string(values.type) else pa.large_binary())
    if pa.types.is_binary(values.type) or pa.types.is_large_binary(values.type):
        return values
    raise ExpressionError(f"a string function got {values.type} values")

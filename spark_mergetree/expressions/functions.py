"""ClickHouse functions usable in keys and predicates: result types and vectorized evaluation.

Covers what partition and sort keys are built from in practice (date bucketing, integer division,
modulo) plus the view of a column type the rest of the package needs (`type_info`, over the format
layer's `parse_type`). Values are evaluated over
whole Arrow arrays with numpy/pyarrow; dates follow ClickHouse: Date is a day number, DateTime
and DateTime64 are instants rendered in the column's time zone (UTC when the type names none).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from spark_mergetree.errors import ExpressionError, FormatError, UnsupportedError
from spark_mergetree.expressions.time_functions import (
    TIME_FUNCTIONS,
    apply_time_function,
    is_monotonic_time_function,
    time_result_type,
)
from spark_mergetree.format.skip_index_writer import int_hash64, value_hashes
from spark_mergetree.format.types import (
    DataType,
    DateTime,
    DateTime64,
    Enum,
    LowCardinality,
    Nullable,
    parse_type,
)
from spark_mergetree.format.zones import utc_offsets

INTEGER_BITS = {
    "UInt8": 8, "UInt16": 16, "UInt32": 32, "UInt64": 64, "UInt128": 128, "UInt256": 256,
    "Int8": 8, "Int16": 16, "Int32": 32, "Int64": 64, "Int128": 128, "Int256": 256,
}
DATE_LIKE = ("Date", "Date32", "DateTime", "DateTime64")
_SECONDS_PER_DAY = 86400
_MAX_DATE = 65535  # Date is a UInt16 day number; ClickHouse saturates date functions at its ends


@dataclass(frozen=True)
class TypeInfo:
    """A column type as expressions look at it: the format layer's `DataType` without its
    Nullable/LowCardinality wrappers, and which of them it had."""

    text: str
    data_type: DataType  # innermost type, without Nullable/LowCardinality
    nullable: bool
    low_cardinality: bool

    @property
    def base(self) -> str:
        """The type's name without parameters, e.g. 'DateTime64', 'Decimal', 'Enum8'."""
        return self.data_type.family

    @property
    def is_integer(self) -> bool:
        return self.base in INTEGER_BITS

    @property
    def is_signed_integer(self) -> bool:
        return self.base.startswith("Int") and self.base in INTEGER_BITS

    @property
    def timezone(self) -> str | None:
        """Time zone named by DateTime('tz') / DateTime64(p, 'tz'), else None (meaning UTC)."""
        return self.data_type.timezone if isinstance(self.data_type, (DateTime, DateTime64)) else None

    @property
    def datetime64_precision(self) -> int:
        return self.data_type.precision if isinstance(self.data_type, DateTime64) else 0

    def enum_values(self) -> dict[str, int]:
        """Name → number of an Enum8/Enum16 type."""
        if not isinstance(self.data_type, Enum):
            raise ExpressionError(f"type {self.text} is not an Enum")
        return dict(self.data_type.values)


@functools.lru_cache(maxsize=1024)
def type_info(type_text: str) -> TypeInfo:
    """`type_text` parsed by the format layer (`parse_type`); a type it cannot parse is an ExpressionError."""
    try:
        data_type = parse_type(type_text)
    except UnsupportedError:
        raise
    except FormatError as error:
        raise ExpressionError(f"cannot read type {type_text!r}: {error}") from None
    nullable = low_cardinality = False
    while isinstance(data_type, (Nullable, LowCardinality)):
        if isinstance(data_type, Nullable):
            nullable = True
        else:
            low_cardinality = True
        data_type = data_type.inner
    return TypeInfo(type_text.strip(), data_type, nullable, low_cardinality)


def literal_type(value: int) -> str:
    """The type ClickHouse gives an integer literal: the narrowest that holds it."""
    if value >= 0:
        for bits in (8, 16, 32, 64, 128, 256):
            if value < 1 << bits:
                return f"UInt{bits}"
    else:
        for bits in (8, 16, 32, 64, 128, 256):
            if value >= -(1 << (bits - 1)):
                return f"Int{bits}"
    raise ExpressionError(f"integer literal {value} does not fit any ClickHouse integer type")


def _wrap_nullable(result: str, arg: TypeInfo) -> str:
    return f"Nullable({result})" if arg.nullable else result


# Date functions of one Date/DateTime argument, and what they return.
_DATE_FUNCTIONS = {
    "toYYYYMM": "UInt32", "toYYYYMMDD": "UInt32", "toYear": "UInt16", "toQuarter": "UInt8", "toMonth": "UInt8",
    "toDate": "Date", "toStartOfYear": "Date", "toStartOfQuarter": "Date", "toStartOfMonth": "Date",
    "toMonday": "Date", "toStartOfWeek": "Date",
}
# Functions that keep the order of their (first) argument: a range [lo, hi] maps to [f(lo), f(hi)].
# (toQuarter and toMonth repeat every year: not monotonic.)
# (Of the DateTime-valued functions those that wrap modulo 2^32 are not: `is_monotonic`.)
MONOTONIC_FUNCTIONS = frozenset(set(_DATE_FUNCTIONS) - {"toQuarter", "toMonth"} | {"intDiv"} | TIME_FUNCTIONS)
SUPPORTED_FUNCTIONS = MONOTONIC_FUNCTIONS | {"toQuarter", "toMonth", "modulo", "moduloLegacy", "intHash32", "intHash64",
                                           "cityHash64"}
# What cityHash64 of one argument hashes: a string's bytes (CityHash64), a number's (intHash64).
_CITY_HASHED = ("String", "FixedString", "UInt8", "UInt16", "UInt32", "UInt64", "Int8", "Int16", "Int32", "Int64",
                "Date", "DateTime")


def is_monotonic(name: str, arg_type: str | None) -> bool:
    """Whether `name` of values of `arg_type` keeps their order, so a range maps to a range."""
    if name not in MONOTONIC_FUNCTIONS or arg_type is None:
        return False
    if name in TIME_FUNCTIONS:
        return is_monotonic_time_function(name, type_info(arg_type).base)
    return True


def result_type(name: str, arg_type: str, constant: int | None = None, *, in_partition_key: bool = False) -> str:
    """ClickHouse's result type of `name(arg, [constant])` for an argument of type `arg_type`.

    In a PARTITION BY key ClickHouse evaluates `modulo` (and `%`) as `moduloLegacy`, whose result has
    the width of the divisor's literal type; `in_partition_key` selects that behaviour.
    """
    arg = type_info(arg_type)
    if name in TIME_FUNCTIONS:
        if constant is not None:
            raise UnsupportedError(f"{name}() with a second argument (a time zone) is not supported in keys")
        return _wrap_nullable(time_result_type(name, arg.base, arg.timezone), arg)
    if name in _DATE_FUNCTIONS:
        if arg.base not in DATE_LIKE:
            raise UnsupportedError(f"{name}() of a {arg_type} value is not supported (needs Date, Date32, DateTime or DateTime64)")
        if constant is not None:
            raise UnsupportedError(f"{name}() with a second argument (a mode or time zone) is not supported in keys")
        return _wrap_nullable(_DATE_FUNCTIONS[name], arg)
    if name == "cityHash64":
        if arg.base not in _CITY_HASHED or arg.nullable:
            raise UnsupportedError(f"cityHash64() of a {arg_type} value is not supported in keys (supported: "
                                   f"{', '.join(_CITY_HASHED)}, of one argument)")
        if constant is not None:
            raise UnsupportedError("cityHash64() of several arguments is not supported in keys")
        return "UInt64"
    if name in ("intHash32", "intHash64"):
        if not arg.is_integer or INTEGER_BITS[arg.base] > 64:
            raise UnsupportedError(f"intHash32() of a {arg_type} value is not supported (needs an integer of at most 64 bits)")
        return _wrap_nullable("UInt32" if name == "intHash32" else "UInt64", arg)
    if name in ("intDiv", "modulo", "moduloLegacy"):
        if not arg.is_integer:
            raise UnsupportedError(f"{name}() of a {arg_type} value is not supported (needs an integer type)")
        if constant is None or constant == 0:
            raise ExpressionError(f"{name}() needs a non-zero integer constant as its second argument")
        divisor = literal_type(constant)
        signed = arg.is_signed_integer or divisor.startswith("Int")
        if name == "intDiv":
            bits = INTEGER_BITS[arg.base]
        elif name == "moduloLegacy" or in_partition_key:
            bits = INTEGER_BITS[divisor]
        else:
            bits = INTEGER_BITS[divisor] * (2 if arg.is_signed_integer and not divisor.startswith("Int") else 1)
            bits = min(bits, 256)
        return _wrap_nullable(f"{'Int' if signed else 'UInt'}{bits}", arg)
    raise UnsupportedError(f"function {name}() is not supported in keys (supported: {', '.join(sorted(SUPPORTED_FUNCTIONS))})")


def _values_and_mask(array: pa.Array) -> tuple[pa.Array, np.ndarray | None]:
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    if pa.types.is_dictionary(array.type):
        array = array.dictionary_decode()
    mask = np.asarray(array.is_null()) if array.null_count else None
    return array, mask


def day_numbers(array: pa.Array, type_text: str, toward_zero: bool = False) -> tuple[np.ndarray, np.ndarray | None]:
    """Days since 1970-01-01 of each value, in the type's time zone; plus the null mask.
    `toward_zero`: a DateTime64's seconds are its whole seconds toward zero, as `toDate` takes them
    (-0.5 s is 1970-01-01 there; `toYYYYMMDD` and the others round down: 1969-12-31)."""
    array, mask = _values_and_mask(array)
    info = type_info(type_text)
    if pa.types.is_date32(array.type) or pa.types.is_date64(array.type):
        days = np.asarray(array.cast(pa.date32()).cast(pa.int32()).fill_null(0), dtype=np.int64)
    elif pa.types.is_timestamp(array.type):
        ticks = np.asarray(array.cast(pa.timestamp(array.type.unit)).cast(pa.int64()).fill_null(0), np.int64)
        per_second = {"s": 1, "ms": 10**3, "us": 10**6, "ns": 10**9}[array.type.unit]
        seconds = np.floor_divide(ticks, per_second)
        if toward_zero:
            seconds = np.where(ticks < 0, -np.floor_divide(-ticks, per_second), seconds)
        days = np.floor_divide(seconds + utc_offsets(seconds, info.timezone or "UTC"), _SECONDS_PER_DAY)
    elif pa.types.is_integer(array.type) and info.base in ("Date", "Date32"):
        days = np.asarray(array.cast(pa.int64()).fill_null(0))
    else:
        raise ExpressionError(f"cannot take dates of a {array.type} array for a column of type {type_text}")
    return days, mask


def _date_array(days: np.ndarray, mask: np.ndarray | None) -> pa.Array:
    return pa.array(days.astype(np.int32), pa.int32(), mask=mask).cast(pa.date32())


def _uint32_array(values: np.ndarray, mask: np.ndarray | None) -> pa.Array:
    return pa.array(values.astype(np.uint32), pa.uint32(), mask=mask)


def _calendar(days: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    as_days = days.astype("datetime64[D]")
    months = as_days.astype("datetime64[M]")
    month_index = months.astype(np.int64)
    year = month_index // 12 + 1970
    month = month_index % 12 + 1
    day = (as_days - months.astype("datetime64[D]")).astype(np.int64) + 1
    return year, month, day


def _integer_numpy(array: pa.Array) -> tuple[np.ndarray, np.ndarray | None]:
    array, mask = _values_and_mask(array)
    if not pa.types.is_integer(array.type):
        raise ExpressionError(f"expected an integer array, got {array.type}")
    return np.asarray(array.fill_null(0)), mask


def _arrow_integer(type_text: str) -> pa.DataType:
    info = type_info(type_text)
    bits = INTEGER_BITS[info.base]
    if bits > 64:
        raise UnsupportedError(f"{type_text} results are not supported in keys")
    return getattr(pa, f"{'int' if info.is_signed_integer else 'uint'}{bits}")()


def apply_function(
    name: str, array: pa.Array, arg_type: str, constant: int | None = None, *, in_partition_key: bool = False
) -> pa.Array:
    """Evaluate `name(array[, constant])` over a whole array; NULL in gives NULL out."""
    out_type = result_type(name, arg_type, constant, in_partition_key=in_partition_key)
    if name in TIME_FUNCTIONS:
        values, mask = _values_and_mask(array)
        info = type_info(arg_type)
        return apply_time_function(name, values, info.base, info.timezone, mask)
    if name in _DATE_FUNCTIONS:
        days, mask = day_numbers(array, arg_type, toward_zero=name == "toDate")
        if name == "toDate" and type_info(arg_type).base == "DateTime":
            days = np.maximum(days, 0)  # a DateTime before local 1970-01-01 (west of UTC) saturates
        return _date_function(name, days, mask)
    info = type_info(arg_type)
    if name == "cityHash64" and info.base in ("String", "FixedString"):
        values, _ = _values_and_mask(array)
        return pa.array(value_hashes(info.data_type, values), pa.uint64())
    if name == "cityHash64" and info.base in ("Date", "DateTime"):
        array = array.cast(pa.int32() if info.base == "Date" else pa.int64()).cast(
            pa.uint16() if info.base == "Date" else pa.uint32())
    values, mask = _integer_numpy(array)
    if name == "intHash32":
        return pa.array(_int_hash32(values), pa.uint32(), mask=mask)
    if name in ("intHash64", "cityHash64"):
        # cityHash64 of a number is the SQL intHash64 of its bits (zero-extended to 64), which mixes
        # in a salt before the murmur finalizer a bloom_filter index uses unsalted.
        # (intHash64 itself takes a signed argument sign-extended: intHash64(toInt8(-1)) hashes 2^64 - 1.)
        if name == "cityHash64" or values.dtype == np.uint64:
            unsigned = values.view(f"u{values.dtype.itemsize}").astype(np.uint64)
        else:
            unsigned = values.astype(np.int64).view(np.uint64)
        return pa.array(int_hash64(unsigned ^ _INT_HASH64_SALT), pa.uint64(), mask=mask)
    assert constant is not None
    wide = values.astype(np.int64) if values.dtype != np.uint64 else values
    if values.dtype == np.uint64 and constant < 0:
        raise UnsupportedError(f"{name}() of a UInt64 value by a negative constant is not supported")
    divisor = np.array(constant, dtype=wide.dtype)
    if name == "intDiv":
        # ClickHouse rounds integer division toward zero, as C does.
        quotient = np.abs(wide) // np.abs(divisor) if wide.dtype != np.uint64 else wide // divisor
        if wide.dtype != np.uint64:
            quotient = quotient * (np.sign(wide) * np.sign(divisor))
        result = quotient
    else:
        # The remainder takes the sign of the dividend (C semantics), hence fmod rather than %.
        result = np.fmod(wide, divisor)
    arrow_type = _arrow_integer(out_type)
    return pa.array(result.astype(arrow_type.to_pandas_dtype()), arrow_type, mask=mask)


def _date_function(name: str, days: np.ndarray, mask: np.ndarray | None) -> pa.Array:
    """A date function of day numbers (days since 1970-01-01 in the argument's time zone).

    Functions returning Date saturate at its ends (1970-01-01 and 2149-06-06), as ClickHouse does."""
    if name == "toDate":
        # ClickHouse's toDate keeps the low 16 bits of the day number (dates before 1970 wrap around).
        return _date_array(days.astype(np.uint16).astype(np.int64), mask)
    if name == "toMonday":
        # 1970-01-01 was a Thursday, so (days + 3) % 7 counts days since the last Monday.
        return _date_array(np.clip(days - (days + 3) % 7, 0, _MAX_DATE), mask)
    if name == "toStartOfWeek":
        # Mode 0, the default: weeks start on Sunday, (days + 4) % 7 days ago.
        return _date_array(np.clip(days - (days + 4) % 7, 0, _MAX_DATE), mask)
    year, month, day = _calendar(days)
    if name == "toYear":
        return pa.array(year.astype(np.uint16), pa.uint16(), mask=mask)
    if name in ("toQuarter", "toMonth"):
        value = (month - 1) // 3 + 1 if name == "toQuarter" else month
        return pa.array(value.astype(np.uint8), pa.uint8(), mask=mask)
    if name in ("toStartOfYear", "toStartOfQuarter", "toStartOfMonth"):
        first_month = {"toStartOfYear": np.ones_like(month), "toStartOfQuarter": (month - 1) // 3 * 3 + 1,
                       "toStartOfMonth": month}[name]
        starts = (((year - 1970) * 12 + first_month - 1).astype("datetime64[M]").astype("datetime64[D]")
                  .astype(np.int64))
        return _date_array(np.clip(starts, 0, _MAX_DATE), mask)
    if name == "toYYYYMM":
        return _uint32_array(year * 100 + month, mask)
    return _uint32_array(year * 10000 + month * 100 + day, mask)


# The salt ClickHouse's SQL function intHash64 mixes into every value.
_INT_HASH64_SALT = np.uint64(0x4CF2D2BAAE6DA887)
# The salt ClickHouse's SQL function intHash32 mixes into every value.
_INT_HASH32_SALT = np.uint64(0x75D9543DE018BF45)


def _int_hash32(values: np.ndarray) -> np.ndarray:
    """ClickHouse's intHash32 of integers (taken as UInt64: negative values two's complement): the
    value xor a fixed salt, through a 64-bit integer mix (Thomas Wang's); the low 32 bits."""
    key = values.astype(np.int64).astype(np.uint64) if values.dtype != np.uint64 else values.copy()
    key ^= _INT_HASH32_SALT
    with np.errstate(over="ignore"):
        key = ~key + (key << np.uint64(18))
        key ^= (key >> np.uint64(31)) | (key << np.uint64(33))
        key *= np.uint64(21)
        key ^= (key >> np.uint64(11)) | (key << np.uint64(53))
        key += key << np.uint64(6)
        key ^= (key >> np.uint64(22)) | (key << np.uint64(42))
    return key.astype(np.uint32)


def needs_ordering_map(type_text: str) -> bool:
    """Whether Arrow's order of this type's values differs from ClickHouse's (so comparisons need `orderable`)."""
    return type_info(type_text).base in ("UUID", "Enum8", "Enum16")


def orderable(array: pa.Array, type_text: str) -> pa.Array:
    """Values mapped so that Arrow's comparisons order them as ClickHouse does.

    Enums compare by number, not name. A UUID compares as ClickHouse holds it: the second half of
    its text (bytes 8..15) first, then the first half — not in text order.
    """
    array, _ = _values_and_mask(array)
    info = type_info(type_text)
    if info.base in ("Enum8", "Enum16"):
        mapping = info.enum_values()
        if pa.types.is_integer(array.type):
            return array
        positions = pc.index_in(array.cast(pa.string()), value_set=pa.array(list(mapping), pa.string()))
        return pa.array(list(mapping.values()), pa.int16()).take(positions)
    if info.base == "UUID":
        text = pc.utf8_lower(array.cast(pa.string()))
        return pc.binary_join_element_wise(pc.utf8_slice_codeunits(text, 19, 36), pc.utf8_slice_codeunits(text, 0, 18), "")
    return array


def orderable_value(value: object, type_text: str) -> object:
    """A single value mapped like `orderable` (None stays None)."""
    if value is None or not needs_ordering_map(type_text):
        return value
    return orderable(pa.array([value]), type_text)[0].as_py()

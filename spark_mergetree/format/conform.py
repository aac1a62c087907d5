"""Arrow data as users hand it → the Arrow representation of a ClickHouse type (format/types.py).

`conform_column(values, data_type, column)` accepts every lossless representation of a column's
values — among them what ClickHouse itself exports as Arrow (DateTime as `uint32` epoch seconds,
UUID as the `arrow.uuid` extension type, Int128/Int256 as little-endian `fixed_size_binary`, Enum as
its integer values) — and returns them in the one Arrow type `to_arrow(data_type)` names, which the
rest of the package (sorting, partitioning, serialization) works on. A representation that would
change a value is refused with a `SchemaMismatchError` naming the column, the Arrow type and the
ClickHouse type. Everything is vectorised (pyarrow compute and numpy); format_spec/types.md lists
what each type accepts.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from spark_mergetree.errors import SchemaMismatchError
from spark_mergetree.format.types import (
    AggregateFunction,
    Array,
    DataType,
    DateTime,
    DateTime64,
    Decimal,
    Dynamic,
    Enum,
    FixedString,
    Json,
    LowCardinality,
    Map,
    Nullable,
    Primitive,
    Time,
    Time64,
    Tuple,
    Variant,
    contains_type,
    is_nullable,
    time_ticks,
    to_arrow,
    to_arrow_holding,
)

__all__ = ["conform_column", "conform_array", "uuid_text", "fixed_bytes", "with_validity"]

_ARROW_ERRORS = (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError)
_UNIT_DIGITS = {"s": 0, "ms": 3, "us": 6, "ns": 9}
_INTEGER_RANGES = {
    "UInt8": (0, 2**8 - 1), "UInt16": (0, 2**16 - 1), "UInt32": (0, 2**32 - 1), "UInt64": (0, 2**64 - 1),
    "Int8": (-2**7, 2**7 - 1), "Int16": (-2**15, 2**15 - 1), "Int32": (-2**31, 2**31 - 1),
    "Int64": (-2**63, 2**63 - 1), "UInt128": (0, 2**128 - 1), "Int128": (-2**127, 2**127 - 1),
    "UInt256": (0, 2**256 - 1), "Int256": (-2**255, 2**255 - 1),
}
_WIDE_INTEGERS = ("Int128", "UInt128", "Int256", "UInt256")
# Days since 1970-01-01 ClickHouse holds: Date 1970-01-01..2149-06-06, Date32 0000-01-01..9999-12-31.
_DATE_DAYS = {"Date": (0, 65535), "Date32": (-719528, 2932896)}
_DATETIME_SECONDS = (0, 2**32 - 1)


class _Refusal(Exception):
    """A value that does not fit: raised deep inside, reported with the column and both types."""


def _is_string_like(t: pa.DataType) -> bool:
    return (pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t)
            or pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_binary_view(t))


def _is_list_like(t: pa.DataType) -> bool:
    return (pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)
            or pa.types.is_list_view(t) or pa.types.is_large_list_view(t))


def _is_uuid_extension(t: pa.DataType) -> bool:
    return isinstance(t, pa.BaseExtensionType) and t.extension_name == "arrow.uuid"


def conform_column(values: pa.ChunkedArray | pa.Array, data_type: DataType, column: str) -> pa.ChunkedArray:
    """`values` as a chunked array of `to_arrow(data_type)`, chunk by chunk, or an error naming `column`."""
    if isinstance(values, pa.Array):
        values = pa.chunked_array([values])
    target = to_arrow(data_type)
    if values.type == target and _arrow_type_is_exact(data_type):
        return values
    chunks = [conform_array(chunk, data_type, column) for chunk in values.chunks]
    if contains_type(data_type, Json) and chunks:
        # JSON comes as text or in a merge's stored form (path → binary value): the chunks keep theirs.
        if len({chunk.type for chunk in chunks}) > 1:
            raise SchemaMismatchError(f"column {column!r}: {data_type.to_clickhouse()} given in several forms "
                                      f"({', '.join(sorted({str(chunk.type) for chunk in chunks}))})")
        return pa.chunked_array(chunks)
    return pa.chunked_array(chunks, type=target)


def conform_array(arr: pa.Array, data_type: DataType, column: str) -> pa.Array:
    """One array of `to_arrow(data_type)` holding exactly the values of `arr` (see the module doc)."""
    target = to_arrow(data_type)
    if arr.type == target and _arrow_type_is_exact(data_type):
        return arr
    source = arr.type
    if isinstance(source, pa.BaseExtensionType) and not _is_uuid_extension(source):
        arr = arr.storage
    if pa.types.is_dictionary(arr.type):
        arr = arr.dictionary_decode()
    if pa.types.is_null(arr.type):
        return pa.nulls(len(arr), target)
    inner = data_type.inner if isinstance(data_type, (Nullable, LowCardinality)) else data_type
    inner = inner.inner if isinstance(inner, Nullable) else inner
    try:
        converted = _convert(arr, inner, column)
    except _Refusal as refusal:
        raise SchemaMismatchError(f"column {column!r}: cannot store Arrow {source} as "
                                  f"{data_type.to_clickhouse()}: {refusal}") from None
    except _ARROW_ERRORS as exc:
        raise SchemaMismatchError(f"column {column!r}: cannot store Arrow {source} as "
                                  f"{data_type.to_clickhouse()} ({exc})") from exc
    # (a JSON's stored form stays so: see _holding)
    assert converted.type == target or contains_type(data_type, Json), (converted.type, target)
    return converted


def _arrow_type_is_exact(dt: DataType) -> bool:
    """Whether every value of `to_arrow(dt)` is a value of `dt` (else values of that type are checked too)."""
    if isinstance(dt, (Nullable, LowCardinality, Array)):
        return _arrow_type_is_exact(dt.inner)
    if isinstance(dt, Map):
        return _arrow_type_is_exact(dt.key) and _arrow_type_is_exact(dt.value)
    if isinstance(dt, Tuple):
        return all(_arrow_type_is_exact(e) for e in dt.elements)
    if isinstance(dt, Variant):
        return False  # a row may set several fields
    if isinstance(dt, (Enum, DateTime, Time, Time64)):
        return False  # names and seconds outside the enum / 1970..2106 / ±999:59:59
    if isinstance(dt, DateTime64):
        return dt.precision in _UNIT_DIGITS.values()
    if isinstance(dt, Primitive):
        return dt.name not in ("Date", "Date32", "BFloat16", *_WIDE_INTEGERS)
    return True


def _convert(arr: pa.Array, dt: DataType, column: str) -> pa.Array:
    t = arr.type
    if _is_uuid_extension(t):
        if not (isinstance(dt, Primitive) and dt.name == "UUID"):
            raise _Refusal("a UUID column goes into a UUID column only")
        return with_validity(uuid_text(fixed_bytes(arr.storage, 16)), arr.storage)
    handler = _HANDLERS.get(type(dt))
    if isinstance(dt, Dynamic) and (pa.types.is_binary(t) or pa.types.is_large_binary(t)):
        return arr.cast(pa.binary())
    if isinstance(dt, Dynamic):
        raise _Refusal("a Dynamic column is written from binary (each row a type's binary encoding, then the value)")
    if isinstance(dt, Json) and (pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t)):
        return arr.cast(pa.string())  # JSON text: parsed when the part is written (format/json_write.py)
    if isinstance(dt, Json) and t == _STORED_JSON:
        return arr  # the stored form a merge reads (path → the value's binary form): written as it is
    if isinstance(dt, Json):
        raise _Refusal("a JSON column is written from JSON text (string), one object per row")
    if handler is None:
        raise _Refusal("no conversion for this type")
    return handler(arr, dt, column)


def _refuse_type(kinds: str) -> _Refusal:
    return _Refusal(f"accepted Arrow types are {kinds}")


# ------------------------------------------------------------------------------------------ numbers

def _first_bad(mask: pa.Array | np.ndarray, arr: pa.Array) -> str:
    """`value V at row R` for the first true entry of `mask`."""
    flags = np.asarray(mask.fill_null(False) if isinstance(mask, pa.Array) else mask, dtype=bool)
    row = int(np.argmax(flags))
    value = arr[row].as_py()
    shown = repr(value) if isinstance(value, (str, bytes)) else str(value)
    return f"value {shown} at row {row}"


def _refuse_where(mask: pa.Array, arr: pa.Array, what: str) -> None:
    """Refuse when any entry of `mask` is true, quoting the first such value of `arr`."""
    if pc.any(mask).as_py():
        raise _Refusal(f"{_first_bad(mask, arr)} {what}")


def _check_range(arr: pa.Array, low: int, high: int, what: str) -> None:
    """Refuse integers outside low..high (any Arrow integer type)."""
    values = np.asarray(arr.fill_null(0) if arr.null_count else arr)
    limits = np.iinfo(values.dtype)
    bad = np.zeros(len(values), bool)
    if low > limits.min:
        bad |= values < low
    if high < limits.max:
        bad |= values > high
    if bad.any():
        raise _Refusal(f"{_first_bad(bad, arr)} is outside {what}'s range {low}..{high}")


def _primitive(arr: pa.Array, dt: Primitive, column: str) -> pa.Array:
    name, t = dt.name, arr.type
    target = to_arrow(dt)
    if name in _INTEGER_RANGES and name not in _WIDE_INTEGERS:
        if pa.types.is_integer(t):
            _check_range(arr, *_INTEGER_RANGES[name], name)
            return arr.cast(target)
        if pa.types.is_boolean(t):
            return arr.cast(target)
        if pa.types.is_floating(t) or pa.types.is_decimal(t):
            return arr.cast(target)  # Arrow's safe cast refuses fractions, NaN and values out of range
        raise _refuse_type("integers, bool, floats and decimals with whole values")
    if name in _WIDE_INTEGERS:
        return _wide_integer(arr, dt)
    if name in ("Float32", "Float64"):
        if pa.types.is_floating(t):
            out = arr.cast(target)
            overflow = pc.and_(pc.is_inf(out), pc.invert(pc.is_inf(arr)))
            _refuse_where(overflow, arr, f"is outside {name}'s range")
            return out  # rounded to the nearest Float32, as ClickHouse does
        if pa.types.is_integer(t) or pa.types.is_decimal(t):
            return arr.cast(target)  # integers only when exactly representable (Arrow's safe cast)
        raise _refuse_type("floats, integers and decimals")
    if name == "BFloat16":
        if pa.types.is_binary(t) or pa.types.is_fixed_size_binary(t):
            # ClickHouse's own Arrow export: the 2 bytes of the value, little-endian.
            _refuse_where(pc.not_equal(pc.binary_length(arr), 2), arr, "is not 2 bytes")
            raw = fixed_bytes(arr.cast(pa.binary(2)), 2).copy().view("<u2").reshape(-1)
            return with_validity(pa.array((raw.astype("<u4") << np.uint32(16)).view(np.float32), pa.float32()), arr)
        if not (pa.types.is_floating(t) or pa.types.is_integer(t) or pa.types.is_decimal(t)):
            raise _refuse_type("floats, integers, decimals and 2-byte binary (ClickHouse's Arrow)")
        out = arr.cast(pa.float32(), safe=False)
        overflow = pc.and_(pc.is_inf(out), pc.invert(pc.is_inf(arr.cast(pa.float64(), safe=False))))
        _refuse_where(overflow, arr, f"is outside {name}'s range")
        # ClickHouse converts to Float32 (to nearest), then keeps its upper 16 bits (toward zero).
        bits = np.asarray(out.fill_null(0) if out.null_count else out).view("<u4") & np.uint32(0xFFFF0000)
        return with_validity(pa.array(bits.view(np.float32), pa.float32()), out)
    if name == "Bool":
        if pa.types.is_boolean(t):
            return arr
        if pa.types.is_integer(t):
            _check_range(arr, 0, 1, name)
            return arr.cast(target)
        raise _refuse_type("bool and integers 0/1")
    if name == "String":
        return _string(arr)
    if name == "UUID":
        if pa.types.is_fixed_size_binary(t) and t.byte_width == 16:
            return with_validity(uuid_text(fixed_bytes(arr, 16)), arr)
        if _is_string_like(t):
            return _string(arr)  # 36-character text, checked when the part is written
        raise _refuse_type("arrow.uuid, fixed_size_binary(16) (RFC 4122 byte order) and UUID text")
    if name == "IPv4":
        if pa.types.is_integer(t):
            _check_range(arr, 0, 2**32 - 1, name)
            return arr.cast(target)
        if _is_string_like(t):
            return _ipv4_from_text(_string(arr))
        raise _refuse_type("integers 0..4294967295 and dotted-quad text")
    if name == "IPv6":
        if pa.types.is_fixed_size_binary(t) and t.byte_width == 16:
            return arr
        if pa.types.is_binary(t) or pa.types.is_large_binary(t):
            _refuse_where(pc.not_equal(pc.binary_length(arr), 16), arr, "is not 16 bytes")
            return arr.cast(target)
        raise _refuse_type("fixed_size_binary(16) and 16-byte binary (the address in network byte order)")
    if name in ("Date", "Date32"):
        if pa.types.is_date32(t) or pa.types.is_date64(t):
            days = arr.cast(pa.date32())  # safe: date64 values must be whole days
            _check_range(days.view(pa.int32()), *_DATE_DAYS[name], name)
            return days
        if pa.types.is_integer(t):
            _check_range(arr, *_DATE_DAYS[name], name)
            return arr.cast(pa.int32()).view(pa.date32())
        raise _refuse_type("date32, date64 and integer days since 1970-01-01")
    raise _Refusal("no conversion for this type")


_IPV4_TEXT = r"^(?P<a>[0-9]{1,3})\.(?P<b>[0-9]{1,3})\.(?P<c>[0-9]{1,3})\.(?P<d>[0-9]{1,3})$"


def _ipv4_from_text(arr: pa.Array) -> pa.Array:
    """Dotted-quad text ('192.168.0.1') → the address as a uint32, as ClickHouse parses an IPv4."""
    octets = pc.extract_regex(arr, _IPV4_TEXT)
    _refuse_where(pc.and_(pc.is_null(octets), pc.is_valid(arr)), arr, "is not an IPv4 address a.b.c.d")
    value = np.zeros(len(arr), np.int64)
    for field in ("a", "b", "c", "d"):
        part = np.asarray(pc.struct_field(octets, field).fill_null("0").cast(pa.int64()))
        _refuse_where(pa.array(part > 255), arr, "has an octet above 255")
        value = value * 256 + part
    return with_validity(pa.array(value.astype(np.uint32), pa.uint32()), arr)


def _string(arr: pa.Array) -> pa.Array:
    """Text or bytes as `string`; bytes are taken as they are (String holds any bytes, as ClickHouse)."""
    t = arr.type
    if pa.types.is_string(t):
        return arr
    if pa.types.is_binary(t):
        return arr.view(pa.string())
    if pa.types.is_large_binary(t):
        arr = arr.view(pa.large_string())
    elif pa.types.is_binary_view(t):
        arr = arr.view(pa.string_view())
    elif pa.types.is_fixed_size_binary(t):
        arr = arr.cast(pa.binary()).view(pa.string())
    elif not _is_string_like(t):
        raise _refuse_type("string, large_string, string_view and the binary types")
    return arr.cast(pa.string())


def fixed_bytes(arr: pa.Array, width: int) -> np.ndarray:
    """The (n, width) uint8 values of a fixed_size_binary array (zeros under NULL)."""
    n = len(arr)
    if n == 0:
        return np.zeros((0, width), np.uint8)
    raw = np.frombuffer(arr.buffers()[1], np.uint8)[arr.offset * width:(arr.offset + n) * width].reshape(n, width)
    if arr.null_count:
        raw = raw.copy()
        raw[~np.asarray(arr.is_valid())] = 0
    return raw


def with_validity(values: pa.Array, like: pa.Array) -> pa.Array:
    if like.null_count == 0:
        return values
    return pc.if_else(pc.is_valid(like), values, pa.nulls(len(like), values.type))


_HEX_DIGITS = np.frombuffer(b"0123456789abcdef", np.uint8)
# Each byte value → its two hex characters, as one little-endian uint16 (first character first).
_HEX_PAIRS = np.ascontiguousarray(np.stack([_HEX_DIGITS[np.arange(256) >> 4], _HEX_DIGITS[np.arange(256) & 15]],
                                           axis=1)).view("<u2").reshape(256)
# (text columns, hex columns) of the five groups of 8-4-4-4-12 characters.
_UUID_GROUPS = ((0, 8, 0), (9, 13, 8), (14, 18, 12), (19, 23, 16), (24, 36, 20))


def uuid_text(rfc_bytes: np.ndarray) -> pa.Array:
    """(n, 16) uint8 UUIDs in RFC 4122 byte order → 36-character lower-case text."""
    n = len(rfc_bytes)
    hexed = _HEX_PAIRS[rfc_bytes].view(np.uint8).reshape(n, 32)
    text = np.full((n, 36), ord("-"), np.uint8)
    for start, stop, source in _UUID_GROUPS:
        text[:, start:stop] = hexed[:, source:source + stop - start]
    offsets = np.arange(n + 1, dtype=np.int32) * 36
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(text)])


_DECIMAL76 = pa.decimal256(76, 0)
_DECIMAL76_LIMIT = 10**76 - 1


def _wide_integer(arr: pa.Array, dt: Primitive) -> pa.Array:
    """Int128/UInt128/Int256/UInt256 as `decimal256(39 or 76, 0)` (which holds fewer than 77 digits)."""
    name, t = dt.name, arr.type
    target = to_arrow(dt)
    low, high = _INTEGER_RANGES[name]
    width = 16 if "128" in name else 32
    if pa.types.is_integer(t):
        _check_range(arr, max(low, -2**63), high, name)
        return arr.cast(target)
    if pa.types.is_fixed_size_binary(t) and t.byte_width == width:
        # ClickHouse's own Arrow: the value's two's complement, least significant byte first.
        words = fixed_bytes(arr, width).view("<u8")
        if width == 16:
            negative = (words[:, 1] >> np.uint64(63)).astype(bool) & name.startswith("Int")
            upper = np.where(negative, np.uint64(0xFFFFFFFFFFFFFFFF), np.uint64(0))[:, None]
            words = np.concatenate([words, upper, upper], axis=1)
        values = with_validity(pa.Array.from_buffers(_DECIMAL76, len(arr), [None, pa.py_buffer(words.tobytes())]), arr)
        if name == "UInt256":  # a set top bit reads as a negative decimal: 2^255 or more
            low = 0
    elif pa.types.is_decimal(t):
        values = arr.cast(_DECIMAL76)  # refuses fractions
    else:
        raise _refuse_type(f"integers, decimals with whole values and fixed_size_binary({width})")
    outside = pc.or_(pc.less(values, pa.scalar(max(low, -_DECIMAL76_LIMIT), _DECIMAL76)),
                     pc.greater(values, pa.scalar(min(high, _DECIMAL76_LIMIT), _DECIMAL76)))
    if pc.any(outside).as_py():
        row = int(np.argmax(np.asarray(outside.fill_null(False))))
        value = arr[row].as_py()
        if isinstance(value, bytes):
            value = int.from_bytes(value, "little", signed=name.startswith("Int"))
        limit = f", or has more than the 76 digits of the decimal256 {name} is read as" if width == 32 else ""
        raise _Refusal(f"value {value} at row {row} is outside {name}'s range{limit}")
    return values.cast(target)


def _decimal(arr: pa.Array, dt: Decimal, column: str) -> pa.Array:
    t = arr.type
    target = to_arrow(dt)
    # Through decimal256(76, S): Arrow then checks each value (rescaling and precision), not the types.
    wide = pa.decimal256(76, dt.scale)
    if pa.types.is_decimal(t) or pa.types.is_integer(t):
        return arr.cast(wide).cast(target)
    if pa.types.is_floating(t):
        _refuse_where(pc.invert(pc.is_finite(arr)), arr, "is not a number")
        values = pc.round(arr, dt.scale).cast(wide)
        # A float is taken when it is the nearest float of a decimal with S digits (0.1 → 0.1).
        inexact = pc.not_equal(values.cast(t), arr)
        _refuse_where(inexact, arr, f"has more than {dt.scale} decimal digits")
        return values.cast(target)
    raise _refuse_type("decimals, integers and floats with at most S decimal digits")


def _fixed_string(arr: pa.Array, dt: FixedString, column: str) -> pa.Array:
    t = arr.type
    if pa.types.is_fixed_size_binary(t) and t.byte_width <= dt.length:
        arr = arr.cast(pa.binary())
    elif _is_string_like(t):
        arr = _string(arr).view(pa.binary())
    else:
        raise _refuse_type(f"fixed_size_binary(N ≤ {dt.length}) and text or bytes of at most {dt.length} bytes")
    lengths = pc.binary_length(arr)
    longer = pc.greater(lengths, dt.length)
    _refuse_where(longer, arr, f"is longer than {dt.length} bytes")
    # Shorter values are padded with zero bytes, as ClickHouse stores them.
    padding = pc.binary_repeat(pa.scalar(b"\0"), pc.subtract(dt.length, lengths.fill_null(dt.length)))
    return pc.binary_join_element_wise(arr, padding, b"").cast(pa.binary(dt.length))


def _enum(arr: pa.Array, dt: Enum, column: str) -> pa.Array:
    names = pa.array([name for name, _ in dt.values], pa.string())
    t = arr.type
    if pa.types.is_integer(t):
        positions = pc.index_in(arr.cast(pa.int64()), value_set=pa.array([value for _, value in dt.values], pa.int64()))
        unknown = pc.and_(pc.is_null(positions), pc.is_valid(arr))
        _refuse_where(unknown, arr, "is not a value of the enum")
        return names.take(positions)
    if _is_string_like(t):
        text = _string(arr)
        unknown = pc.and_(pc.invert(pc.is_in(text, value_set=names)), pc.is_valid(text))
        _refuse_where(unknown, text, "is not a name of the enum")
        return text
    raise _refuse_type("the names as text and the integer values")


# -------------------------------------------------------------------------------------------- time

def _ticks(arr: pa.Array) -> tuple[pa.Array, int]:
    """A timestamp array as int64 ticks and the ticks' digits (0 s, 3 ms, 6 us, 9 ns)."""
    return arr.view(pa.int64()), _UNIT_DIGITS[arr.type.unit]


def _check_whole(ticks: pa.Array, step: int, arr: pa.Array, what: str) -> None:
    """Refuse ticks that are not whole multiples of `step`."""
    _refuse_where(pc.not_equal(pc.subtract(ticks, pc.multiply(pc.divide(ticks, step), step)), 0), arr, what)


def _datetime(arr: pa.Array, dt: DateTime, column: str) -> pa.Array:
    t = arr.type
    target = to_arrow(dt)
    if pa.types.is_integer(t):  # ClickHouse's own Arrow for DateTime: uint32 seconds since the epoch
        _check_range(arr, *_DATETIME_SECONDS, "DateTime")
        return arr.cast(pa.int64()).view(target)
    if pa.types.is_timestamp(t):
        ticks, digits = _ticks(arr)
        if digits:
            _check_whole(ticks, 10**digits, arr, "has a fraction of a second (DateTime keeps whole seconds)")
            ticks = pc.divide(ticks, 10**digits)
        low, high = _DATETIME_SECONDS
        outside = pc.or_(pc.less(ticks, low), pc.greater(ticks, high))
        _refuse_where(outside, arr, "is outside DateTime's range 1970-01-01 00:00:00..2106-02-07 06:28:15")
        return ticks.cast(target)
    raise _refuse_type("timestamps of any unit and zone, and integer seconds since the epoch")


def _datetime64(arr: pa.Array, dt: DateTime64, column: str) -> pa.Array:
    t = arr.type
    target = to_arrow(dt)
    if not pa.types.is_timestamp(t):
        raise _refuse_type("timestamps of any unit and zone")
    ticks, digits = _ticks(arr)
    if digits > dt.precision:
        _check_whole(ticks, 10 ** (digits - dt.precision), arr, f"is finer than {dt.precision} decimal digits of a second")
    # Arrow's safe cast between units refuses overflow; the tick check above makes it exact.
    return arr.cast(pa.timestamp(t.unit, tz=target.tz)).cast(target)


def _aggregate_states(arr: pa.Array, dt: AggregateFunction, column: str) -> pa.Array:
    """States as bytes, one per row (each checked against the function's layout when written)."""
    t = arr.type
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        return arr.cast(pa.binary())
    raise _refuse_type("binary, large_binary and fixed_size_binary (one state per row)")


_TIME_DIGITS = {"s": 0, "ms": 3, "us": 6, "ns": 9}


def _time(arr: pa.Array, dt: Time | Time64, column: str) -> pa.Array:
    """Time/Time64 from durations of any unit, ClickHouse's own Arrow (time32/time64, a time of day),
    or integer seconds (as ClickHouse's CAST of a number reads them)."""
    t = arr.type
    target = to_arrow(dt)
    precision = dt.precision if isinstance(dt, Time64) else 0
    per_second, limit = time_ticks(dt)
    if pa.types.is_integer(t):
        seconds = arr.cast(pa.int64())
        _refuse_where(pc.greater(pc.abs(seconds), limit // per_second), arr, f"is outside {dt.to_clickhouse()}'s range "
                      "-999:59:59..999:59:59")
        return pc.multiply(seconds, _arrow_ticks_per_second(target)).cast(pa.int64()).view(target)
    if pa.types.is_duration(t) or pa.types.is_time(t):
        ticks = arr.view(pa.int32() if t.bit_width == 32 else pa.int64()).cast(pa.int64())
        digits = _TIME_DIGITS[t.unit]
        if digits > precision:
            _check_whole(ticks, 10 ** (digits - precision), arr, f"is finer than {precision} decimal digits of a second")
            ticks = pc.divide(ticks, 10 ** (digits - precision))
        elif digits < precision:
            ticks = pc.multiply_checked(ticks, 10 ** (precision - digits))
        _refuse_where(pc.greater(pc.abs(ticks), limit), arr, f"is outside {dt.to_clickhouse()}'s range -999:59:59..999:59:59")
        return pc.multiply(ticks, _arrow_ticks_per_second(target) // per_second).view(target)
    raise _refuse_type("durations of any unit, time32/time64 (ClickHouse's Arrow) and integer seconds")


def _arrow_ticks_per_second(target: pa.DataType) -> int:
    """Arrow ticks of a duration type per second."""
    return 10 ** _TIME_DIGITS[target.unit]


# ------------------------------------------------------------------------------------------- nested

def _element_label(column: str, suffix: str) -> str:
    return f"{column}{suffix}"


def _conform_child(values: pa.Array, dt: DataType, label: str) -> pa.Array:
    """Elements of a nested type: conformed, and NULL only where the element type allows it."""
    out = conform_array(values, dt, label)
    if out.null_count and not is_nullable(dt) and not isinstance(dt, (Array, Map)):
        raise SchemaMismatchError(f"column {label!r}: cannot store Arrow {values.type} as {dt.to_clickhouse()}: "
                                  f"{out.null_count} NULL value(s); make the element type Nullable(...)")
    return out


def _list_parts(arr: pa.Array) -> tuple[pa.Array, pa.Array, pa.Array | None]:
    """(int32 offsets from 0, values, null mask or None) of any list-like array; NULL lists are empty."""
    lengths = pc.list_value_length(arr)
    if arr.null_count:
        lengths = lengths.fill_null(0)
    offsets = np.zeros(len(arr) + 1, np.int64)
    np.cumsum(np.asarray(lengths), out=offsets[1:])
    if offsets[-1] > 2**31 - 1:
        raise _Refusal("more than 2^31 elements in one batch; insert smaller batches")
    return pa.array(offsets.astype(np.int32)), arr.flatten(), (arr.is_null() if arr.null_count else None)


# A merge's stored form of JSON (format/json_text.py STORED_JSON_TYPE): a JSON inside an Array, Map,
# Tuple or Variant comes so too, and the container then takes its children's types, not `to_arrow`'s text.
_STORED_JSON = pa.map_(pa.string(), pa.binary())


def _holding(dt: DataType, children: list[pa.Array]) -> pa.DataType:
    """`to_arrow(dt)` of an Array, Map, Tuple or Variant, with its children's types where a JSON
    inside is in the stored form."""
    if not contains_type(dt, Json):
        return to_arrow(dt)
    return to_arrow_holding(dt, [child.type for child in children])


def _array(arr: pa.Array, dt: Array, column: str) -> pa.Array:
    if not _is_list_like(arr.type):
        raise _refuse_type("list, large_list, fixed_size_list, list_view and large_list_view")
    offsets, values, mask = _list_parts(arr)
    values = _conform_child(values, dt.inner, _element_label(column, "[]"))
    return pa.ListArray.from_arrays(offsets, values, type=_holding(dt, [values]), mask=mask)


def _map(arr: pa.Array, dt: Map, column: str) -> pa.Array:
    t = arr.type
    if not pa.types.is_map(t):
        raise _refuse_type("map")
    entries = pa.struct([t.key_field, t.item_field])
    offsets, values, mask = _list_parts(arr.cast(pa.list_(pa.field("entries", entries, nullable=False))))
    keys, items = values.flatten()
    keys = _conform_child(keys, dt.key, _element_label(column, ".keys"))
    items = _conform_child(items, dt.value, _element_label(column, ".values"))
    return pa.MapArray.from_arrays(offsets, keys, items, type=_holding(dt, [keys, items]), mask=mask)


def _tuple(arr: pa.Array, dt: Tuple, column: str) -> pa.Array:
    t = arr.type
    if not pa.types.is_struct(t):
        raise _refuse_type("struct")
    have = [t.field(i).name for i in range(t.num_fields)]
    want = list(dt.element_names)
    if dt.names is None and len(have) == len(want):
        have = want  # an unnamed tuple takes the struct's fields in order, whatever their names
    if sorted(have) != sorted(want):
        raise _Refusal(f"the struct has fields {', '.join(have)}; the tuple's elements are {', '.join(want)}")
    if arr.null_count:
        raise _Refusal(f"{arr.null_count} NULL tuple(s); a Tuple cannot be NULL")
    children = dict(zip(have, arr.flatten(), strict=True))
    converted = [_conform_child(children[name], element, _element_label(column, f".{name}"))
                 for name, element in zip(want, dt.elements, strict=True)]
    return pa.StructArray.from_arrays(converted, fields=list(_holding(dt, converted)))


def _variant(arr: pa.Array, dt: Variant, column: str) -> pa.Array:
    """A struct with fields named by some of the variants' types, at most one set per row (none for
    NULL): the struct `to_arrow(dt)` reads give, which is also what is written back."""
    t = arr.type
    if not pa.types.is_struct(t):
        raise _refuse_type("struct (one field per variant type, named by the type)")
    have = [t.field(i).name for i in range(t.num_fields)]
    unknown = [name for name in have if name not in dt.names]
    if unknown or len(set(have)) != len(have):
        raise _Refusal(f"the struct has fields {', '.join(have)}; the variants are {', '.join(dt.names)}")
    children = dict(zip(have, arr.flatten(), strict=True))
    set_count = np.zeros(len(arr), np.int64)
    for child in children.values():
        set_count += np.asarray(child.is_valid(), dtype=np.int64)
    if (set_count > 1).any():
        row = int(np.argmax(set_count > 1))
        raise _Refusal(f"row {row} sets {int(set_count[row])} variants; a Variant value has one type")
    fields = []
    for name, variant in zip(dt.names, dt.variants, strict=True):
        child = children.get(name)
        mine = np.zeros(len(arr), bool) if child is None else np.asarray(child.is_valid(), dtype=bool)
        values = pa.array([], type=to_arrow(variant)) if child is None else child.filter(pa.array(mine))
        converted = _conform_child(values, variant, _element_label(column, f".{name}"))
        # Row r takes the k-th value when it is the k-th row setting this variant; NULL elsewhere
        # (writing reads only the rows that set it).
        fields.append(converted.take(pa.array(np.cumsum(mine, dtype=np.int64) - 1, mask=~mine)))
    return pa.StructArray.from_arrays(fields, fields=list(_holding(dt, fields)), mask=pa.array(set_count == 0))


_HANDLERS: dict[type[DataType], Callable[[pa.Array, Any, str], pa.Array]] = {
    Primitive: _primitive, Decimal: _decimal, FixedString: _fixed_string, Enum: _enum,
    AggregateFunction: _aggregate_states, DateTime: _datetime, DateTime64: _datetime64, Time: _time, Time64: _time, Array: _array, Map: _map, Tuple: _tuple,
    Variant: _variant,
}

"""ClickHouse's binary encoding of data types (how a Dynamic value, a JSON path's shared data and a
`.dynamic_structure` prefix name the type of what follows): `decode_type` and `encode_type`.
format_spec/types.md (*Dynamic*, *JSON*) lists the codes.
"""

from __future__ import annotations

import numpy as np

from spark_mergetree.errors import UnsupportedError
from spark_mergetree.format.types import (
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
    Tuple,
)
from spark_mergetree.format.values import Cursor, encode_varuints, varuint_bytes

__all__ = ["decode_type", "encode_type", "json_limits", "json_type", "read_text", "text_bytes", "DEFAULT_MAX_TYPES", "DEFAULT_MAX_DYNAMIC_PATHS", "DEFAULT_MAX_DYNAMIC_TYPES"]

DEFAULT_MAX_TYPES = 32  # Dynamic without (max_types=N)
DEFAULT_MAX_DYNAMIC_PATHS = 1024  # JSON without max_dynamic_paths
DEFAULT_MAX_DYNAMIC_TYPES = 32  # JSON without max_dynamic_types

# ClickHouse's binary encoding of types (DataTypesBinaryEncoding): the codes we decode.
_NUMBERS = {0x01: "UInt8", 0x02: "UInt16", 0x03: "UInt32", 0x04: "UInt64", 0x05: "UInt128", 0x06: "UInt256",
            0x07: "Int8", 0x08: "Int16", 0x09: "Int32", 0x0A: "Int64", 0x0B: "Int128", 0x0C: "Int256",
            0x0D: "Float32", 0x0E: "Float64", 0x0F: "Date", 0x10: "Date32", 0x15: "String", 0x1D: "UUID",
            0x28: "IPv4", 0x29: "IPv6", 0x2D: "Bool"}
_DATETIME, _DATETIME_TZ, _DATETIME64, _DATETIME64_TZ = 0x11, 0x12, 0x13, 0x14
_FIXED_STRING, _ENUM8, _ENUM16 = 0x16, 0x17, 0x18
_DECIMALS = {0x19: 9, 0x1A: 18, 0x1B: 38, 0x1C: 76}
_ARRAY, _TUPLE, _NAMED_TUPLE, _NULLABLE, _LOW_CARDINALITY, _MAP = 0x1E, 0x1F, 0x20, 0x23, 0x26, 0x27
# Dynamic: the code, then max_types as one byte. JSON: the code, an encoding version (0), max_dynamic_paths
# (VarUInt), max_dynamic_types (one byte), then the typed paths (VarUInt count; each path's name and
# type), the SKIP paths and the SKIP REGEXP patterns (each a VarUInt count, then the names).
_DYNAMIC, _JSON = 0x2B, 0x30
_JSON_ENCODING_VERSION = 0


def read_text(cursor: Cursor) -> str:
    return bytes(cursor.take(cursor.varuint())).decode("utf-8", "surrogateescape")


def decode_type(cursor: Cursor) -> DataType:
    """One type in ClickHouse's binary type encoding; UnsupportedError for codes not listed above."""
    at = cursor.pos
    code = int(cursor.take(1)[0])
    if code in _NUMBERS:
        return Primitive(_NUMBERS[code])
    if code in (_DATETIME, _DATETIME_TZ):
        return DateTime(read_text(cursor) if code == _DATETIME_TZ else None)
    if code in (_DATETIME64, _DATETIME64_TZ):
        precision = int(cursor.take(1)[0])
        return DateTime64(precision, read_text(cursor) if code == _DATETIME64_TZ else None)
    if code == _FIXED_STRING:
        return FixedString(cursor.varuint())
    if code in (_ENUM8, _ENUM16):
        width = 1 if code == _ENUM8 else 2
        values = []
        for _ in range(cursor.varuint()):
            name = read_text(cursor)
            values.append((name, int(cursor.take(width).view("<i1" if width == 1 else "<i2")[0])))
        return Enum(8 * width, tuple(values))
    if code in _DECIMALS:
        precision, scale = (int(b) for b in cursor.take(2))
        return Decimal(precision, scale)
    if code in (_ARRAY, _NULLABLE, _LOW_CARDINALITY):
        inner = decode_type(cursor)
        return Array(inner) if code == _ARRAY else Nullable(inner) if code == _NULLABLE else LowCardinality(inner)
    if code == _MAP:
        key = decode_type(cursor)
        return Map(key, decode_type(cursor))
    if code in (_TUPLE, _NAMED_TUPLE):
        names, elements = [], []
        for _ in range(cursor.varuint()):
            if code == _NAMED_TUPLE:
                names.append(read_text(cursor))
            elements.append(decode_type(cursor))
        return Tuple(tuple(elements), tuple(names) if names else None)
    if code == _DYNAMIC:
        max_types = int(cursor.take(1)[0])
        return Dynamic(None if max_types == DEFAULT_MAX_TYPES else max_types)
    if code == _JSON:
        return _decode_json(cursor, at)
    raise UnsupportedError(f"stream {cursor.name!r}: a Dynamic value's type has binary type code 0x{code:02X} "
                           f"at offset {at}, which is not supported")


def text_bytes(text: str) -> bytes:
    raw = text.encode("utf-8", "surrogateescape")
    return varuint_bytes(len(raw)) + raw


def _decode_json(cursor: Cursor, at: int) -> Json:
    version = int(cursor.take(1)[0])
    if version != _JSON_ENCODING_VERSION:
        raise UnsupportedError(f"stream {cursor.name!r}: a JSON type's binary encoding version {version} at offset "
                               f"{at} is not supported")
    max_paths = cursor.varuint()
    max_types = int(cursor.take(1)[0])
    params = list(json_type(max_paths, max_types).params)
    for _ in range(cursor.varuint()):
        path = read_text(cursor)
        params.append((path, decode_type(cursor)))
    skips = tuple(read_text(cursor) for _ in range(cursor.varuint()))
    regexps = tuple(read_text(cursor) for _ in range(cursor.varuint()))
    return Json(tuple(params), skips, regexps)


def json_type(max_paths: int, max_types: int) -> Json:
    """JSON with these limits, named as ClickHouse names it: max_dynamic_types, then
    max_dynamic_paths, each only when not the default."""
    params: list[tuple[str, int | DataType]] = []
    if max_types != DEFAULT_MAX_DYNAMIC_TYPES:
        params.append(("max_dynamic_types", max_types))
    if max_paths != DEFAULT_MAX_DYNAMIC_PATHS:
        params.append(("max_dynamic_paths", max_paths))
    return Json(tuple(params))


def json_limits(dt: Json) -> tuple[int, int]:
    """A JSON type's (max_dynamic_paths, max_dynamic_types), the defaults where it names none."""
    settings = {k: v for k, v in dt.params if isinstance(v, int)}
    return (int(settings.get("max_dynamic_paths", DEFAULT_MAX_DYNAMIC_PATHS)),
            int(settings.get("max_dynamic_types", DEFAULT_MAX_DYNAMIC_TYPES)))


_NUMBER_CODES = {name: code for code, name in _NUMBERS.items()}


def encode_type(dt: DataType) -> bytes:
    """`dt` in ClickHouse's binary type encoding (the inverse of `decode_type`)."""
    if dt.custom_name is not None:
        raise UnsupportedError(f"no binary type encoding for {dt.to_clickhouse()} here")
    if isinstance(dt, Primitive) and dt.name in _NUMBER_CODES:
        return bytes([_NUMBER_CODES[dt.name]])
    if isinstance(dt, DateTime):
        return bytes([_DATETIME]) if dt.timezone is None else bytes([_DATETIME_TZ]) + text_bytes(dt.timezone)
    if isinstance(dt, DateTime64):
        head = bytes([_DATETIME64 if dt.timezone is None else _DATETIME64_TZ, dt.precision])
        return head if dt.timezone is None else head + text_bytes(dt.timezone)
    if isinstance(dt, FixedString):
        return bytes([_FIXED_STRING]) + encode_varuints(np.array([dt.length], np.uint64))[0].tobytes()
    if isinstance(dt, Enum):
        out = bytes([_ENUM8 if dt.bits == 8 else _ENUM16]) + encode_varuints(np.array([len(dt.values)], np.uint64))[0].tobytes()
        for name, value in dt.values:
            out += text_bytes(name) + value.to_bytes(dt.bits // 8, "little", signed=True)
        return out
    if isinstance(dt, Decimal):
        code = next(c for c, p in _DECIMALS.items() if dt.precision <= p)
        return bytes([code, dt.precision, dt.scale])
    if isinstance(dt, (Array, Nullable, LowCardinality)):
        code = _ARRAY if isinstance(dt, Array) else _NULLABLE if isinstance(dt, Nullable) else _LOW_CARDINALITY
        return bytes([code]) + encode_type(dt.inner)
    if isinstance(dt, Map):
        return bytes([_MAP]) + encode_type(dt.key) + encode_type(dt.value)
    if isinstance(dt, Tuple):
        out = bytes([_TUPLE if dt.names is None else _NAMED_TUPLE])
        out += encode_varuints(np.array([len(dt.elements)], np.uint64))[0].tobytes()
        for name, element in zip(dt.element_names, dt.elements, strict=True):
            out += (b"" if dt.names is None else text_bytes(name)) + encode_type(element)
        return out
    if isinstance(dt, Dynamic):
        return bytes([_DYNAMIC, DEFAULT_MAX_TYPES if dt.max_types is None else dt.max_types])
    if isinstance(dt, Json):
        max_paths, max_types = json_limits(dt)
        out = bytes([_JSON, _JSON_ENCODING_VERSION]) + varuint_bytes(max_paths) + bytes([max_types])
        out += varuint_bytes(len(dt.typed_paths)) + b"".join(text_bytes(p) + encode_type(t) for p, t in dt.typed_paths)
        out += varuint_bytes(len(dt.skips)) + b"".join(text_bytes(p) for p in dt.skips)
        return out + varuint_bytes(len(dt.skip_regexps)) + b"".join(text_bytes(p) for p in dt.skip_regexps)
    raise UnsupportedError(f"no binary type encoding for {dt.to_clickhouse()} here")



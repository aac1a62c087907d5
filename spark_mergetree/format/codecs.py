"""Payloads of ClickHouse's column codecs: Delta, DoubleDelta, Gorilla, T64, FPC and GCD.

Each codec turns the bytes of one compressed block into a payload (`*_encode`) and back
(`*_decode`); the block around it (checksum, method byte, sizes) and codec chains belong to
`compression.py`. Widths are value sizes in bytes; every decoder checks that the payload holds
exactly the values the block announces and raises CorruptPartError naming `where` otherwise.
Delta, T64 and GCD are vectorised with numpy; DoubleDelta, Gorilla and FPC are sequential by
nature and run as compiled loops (codecs_compiled.py, numba imported on first use).
Byte formats: format_spec/blocks.md.
"""

from __future__ import annotations

import math
import struct

import numpy as np

from spark_mergetree.errors import CorruptPartError, InvalidOptionError

__all__ = [
    "T64_TYPE_CODES", "FPC_MAX_LEVEL",
    "delta_encode", "delta_decode", "double_delta_encode", "double_delta_decode",
    "gorilla_encode", "gorilla_decode", "t64_encode", "t64_decode",
    "fpc_encode", "fpc_decode", "gcd_encode", "gcd_decode",
]

_UNSIGNED = {1: np.dtype("<u1"), 2: np.dtype("<u2"), 4: np.dtype("<u4"), 8: np.dtype("<u8")}
_SIGNED = {1: np.dtype("<i1"), 2: np.dtype("<i2"), 4: np.dtype("<i4"), 8: np.dtype("<i8")}
_U32 = struct.Struct("<I")
FPC_MAX_LEVEL = 28
# T64 stores the column's type in its first byte (bit 7: the 'bit' variant): code → (width, signed).
T64_TYPE_CODES = {
    "UInt8": 1, "UInt16": 2, "UInt32": 3, "UInt64": 4, "Int8": 6, "Int16": 7, "Int32": 8, "Int64": 9,
    "Date": 13, "DateTime": 14, "DateTime64": 15, "Enum8": 17, "Enum16": 18, "Decimal32": 19, "Decimal64": 20,
    "IPv4": 21, "Date32": 22, "Time": 23, "Time64": 24,
}
_T64_BASE = {1: (1, False), 2: (2, False), 3: (4, False), 4: (8, False), 6: (1, True), 7: (2, True), 8: (4, True),
             9: (8, True), 13: (2, False), 14: (4, False), 15: (8, True), 17: (1, False), 18: (2, False),
             19: (4, True), 20: (8, True), 21: (4, False), 22: (4, True), 23: (4, True), 24: (8, True)}


def _compiled():
    from spark_mergetree.format import codecs_compiled  # numba: imported when first needed

    return codecs_compiled


def _as_bytes(data: bytes | bytearray | memoryview | np.ndarray) -> np.ndarray:
    return np.frombuffer(data, dtype=np.uint8) if not isinstance(data, np.ndarray) else data.view(np.uint8).reshape(-1)


def _width_header(payload: memoryview, size: int, where: str, widths: tuple[int, ...]) -> tuple[int, int, np.ndarray]:
    """(value width, prefix bytes copied as they are, the rest) of Delta/DoubleDelta/Gorilla/GCD payloads:
    width byte, a byte ClickHouse no longer reads, then `size % width` bytes stored as they are."""
    raw = _as_bytes(payload)
    if len(raw) < 2:
        raise CorruptPartError(f"{where}: payload of {len(raw)} bytes has no codec header")
    width = int(raw[0])
    if width not in widths:
        raise CorruptPartError(f"{where}: value width {width} in the codec header is not one of {widths}")
    skip = size % width
    if 2 + skip > len(raw):
        raise CorruptPartError(f"{where}: payload ends inside its {skip} unaligned leading bytes")
    return width, skip, raw[2:]


def _with_prefix(skip: int, prefix: np.ndarray, values: np.ndarray) -> np.ndarray:
    out = np.empty(skip + values.nbytes, np.uint8)
    out[:skip] = prefix[:skip]
    out[skip:] = np.ascontiguousarray(values).view(np.uint8).reshape(-1)
    return out


def _prefixed(data: np.ndarray, width: int) -> tuple[bytes, np.ndarray]:
    """(codec header with the unaligned leading bytes, the aligned values) for encoding."""
    skip = len(data) % width
    return bytes((width, skip)) + data[:skip].tobytes(), data[skip:].view(_UNSIGNED.get(width, np.uint8))


def _check_width(width: int, widths: tuple[int, ...], codec: str) -> None:
    if width not in widths:
        raise InvalidOptionError(f"{codec} value width must be one of {widths}, got {width}")


# ------------------------------------------------------------------ Delta


def delta_encode(data: bytes | bytearray | memoryview | np.ndarray, width: int) -> bytes:
    """Each value minus the previous one (the first minus 0), wrapping at the width."""
    _check_width(width, (1, 2, 4, 8), "Delta")
    header, values = _prefixed(_as_bytes(data), width)
    deltas = values.copy()
    np.subtract(values[1:], values[:-1], out=deltas[1:])
    return header + deltas.tobytes()


def delta_decode(payload: memoryview, size: int, where: str) -> np.ndarray:
    width, skip, body = _width_header(payload, size, where, (1, 2, 4, 8))
    if len(body) != size:
        raise CorruptPartError(f"{where}: Delta payload holds {len(body) - skip} value bytes, the block {size - skip}")
    values = body[skip:].view(_UNSIGNED[width])
    return _with_prefix(skip, body, np.cumsum(values, dtype=values.dtype))


# ------------------------------------------------------------------ DoubleDelta


def double_delta_encode(data: bytes | bytearray | memoryview | np.ndarray, width: int) -> bytes:
    """Item count, first value, first delta, then each delta of deltas in a prefix code (blocks.md)."""
    _check_width(width, (1, 2, 4, 8), "DoubleDelta")
    header, values = _prefixed(_as_bytes(data), width)
    n = len(values)
    head = _U32.pack(n) + values[:1].tobytes()
    if n >= 2:
        head += (values[1:2] - values[:1]).tobytes()
    wide = values.astype(np.uint64)
    bits = 8 * width
    stream = np.zeros(((max(n - 2, 0)) * (5 + 64) + 7) // 8 + 8, np.uint8)
    used = _compiled().double_delta_encode(wide, np.uint64((1 << bits) - 1), np.uint64(1 << (bits - 1)), stream)
    return header + head + stream[: (used + 7) // 8].tobytes()


def _counted(payload: memoryview, size: int, where: str, codec: str, head: int
             ) -> tuple[int, int, np.ndarray, int, np.ndarray, np.ndarray]:
    """DoubleDelta and Gorilla payloads after the width header: UInt32 item count, `head` values of
    the width, a bit stream. Returns (width, leading bytes, header body, count, the head values as
    uint64 padded with zeros, the bit stream)."""
    width, skip, body = _width_header(payload, size, where, (1, 2, 4, 8))
    count = (size - skip) // width
    if len(body) < skip + 4:
        raise CorruptPartError(f"{where}: {codec} payload ends before its item count")
    stored = _U32.unpack_from(body, skip)[0]
    if stored != count:
        raise CorruptPartError(f"{where}: {codec} payload holds {stored} values, the block {count}")
    start = skip + 4
    end = start + min(count, head) * width
    if len(body) < end:
        raise CorruptPartError(f"{where}: {codec} payload ends inside its first values")
    first = np.zeros(head, np.uint64)
    first[: min(count, head)] = body[start:end].view(_UNSIGNED[width])
    return width, skip, body, count, first, np.ascontiguousarray(body[end:])


def double_delta_decode(payload: memoryview, size: int, where: str) -> np.ndarray:
    width, skip, body, count, first, stream = _counted(payload, size, where, "DoubleDelta", 2)
    out = np.empty(count, np.uint64)
    written = _compiled().double_delta_decode(stream, count, first[0], first[1], np.uint64((1 << (8 * width)) - 1), out)
    if written != count:
        raise CorruptPartError(f"{where}: DoubleDelta bit stream ends after {written} of {count} values")
    return _with_prefix(skip, body, out.astype(_UNSIGNED[width]))


# ------------------------------------------------------------------ Gorilla

# Bits of the leading-zero count and of the meaningful-bit count of an XOR, per value width.
_GORILLA_FIELDS = {1: (3, 4), 2: (4, 5), 4: (5, 6), 8: (6, 7)}


def gorilla_encode(data: bytes | bytearray | memoryview | np.ndarray, width: int) -> bytes:
    """Item count, first value, then each value's XOR with the previous one in a window code (blocks.md)."""
    _check_width(width, (1, 2, 4, 8), "Gorilla")
    header, values = _prefixed(_as_bytes(data), width)
    n = len(values)
    leading_bits, length_bits = _GORILLA_FIELDS[width]
    stream = np.zeros((max(n - 1, 0) * (2 + leading_bits + length_bits + 8 * width) + 7) // 8 + 8, np.uint8)
    used = _compiled().gorilla_encode(values.astype(np.uint64), 8 * width, leading_bits, length_bits, stream)
    return header + _U32.pack(n) + values[:1].tobytes() + stream[: (used + 7) // 8].tobytes()


def gorilla_decode(payload: memoryview, size: int, where: str) -> np.ndarray:
    width, skip, body, count, first, stream = _counted(payload, size, where, "Gorilla", 1)
    leading_bits, length_bits = _GORILLA_FIELDS[width]
    out = np.empty(count, np.uint64)
    written = _compiled().gorilla_decode(stream, count, first[0], 8 * width, leading_bits, length_bits, out)
    if written != count:
        detail = "an impossible window" if written < 0 else f"its end after {written} of {count} values"
        raise CorruptPartError(f"{where}: Gorilla bit stream has {detail}")
    return _with_prefix(skip, body, out.astype(_UNSIGNED[width]))


# ------------------------------------------------------------------ T64


def _valuable_bits(low: int, high: int, signed: bool) -> int:
    """Low bits that differ between values in [low, high] (ClickHouse's getValuableBitsNumber)."""
    if signed and low < 0 <= high:
        return (high if low + high >= 0 else ~low).bit_length() + 1
    return ((low ^ high) & 0xFFFFFFFFFFFFFFFF).bit_length()


def _t64_layout(nbits: int, bit_variant: bool) -> tuple[int, int]:
    """(whole byte rows, bit planes) of a 64-value group."""
    rows = 0 if bit_variant else nbits // 8
    return rows, nbits - 8 * rows


def t64_encode(data: bytes | bytearray | memoryview | np.ndarray, type_code: int, bit_variant: bool = False) -> bytes:
    """Type byte, unaligned leading bytes as they are, min and max, then groups of 64 values keeping
    only the bits that vary (blocks.md)."""
    if type_code not in _T64_BASE:
        raise InvalidOptionError(f"T64 type code {type_code} is not one of {sorted(_T64_BASE)}")
    width, signed = _T64_BASE[type_code]
    raw = _as_bytes(data)
    skip = len(raw) % width
    values = raw[skip:].view((_SIGNED if signed else _UNSIGNED)[width])
    low, high = (int(values.min()), int(values.max())) if len(values) else (0, 0)
    fmt = "<qq" if signed else "<QQ"
    header = bytes((type_code | (0x80 if bit_variant else 0),)) + raw[:skip].tobytes() + struct.pack(fmt, low, high)
    nbits = _valuable_bits(low, high, signed)
    if not nbits:
        return header
    groups = -(-len(values) // 64)
    padded = np.zeros(groups * 64, values.dtype)
    padded[: len(values)] = values
    as_bytes = padded.view(np.uint8).reshape(groups, 64, width)
    rows, planes = _t64_layout(nbits, bit_variant)
    out = np.empty((groups, 8 * nbits), np.uint8)
    out[:, : 64 * rows] = as_bytes[:, :, :rows].transpose(0, 2, 1).reshape(groups, 64 * rows)
    if planes:
        bits = np.unpackbits(as_bytes[:, :, rows:], axis=2, bitorder="little")[:, :, :planes]
        out[:, 64 * rows :] = np.packbits(bits.transpose(0, 2, 1), axis=2, bitorder="little").reshape(groups, -1)
    return header + out.tobytes()


def t64_decode(payload: memoryview, size: int, where: str) -> np.ndarray:
    raw = _as_bytes(payload)
    code = int(raw[0]) & 0x7F if len(raw) else 0
    if code not in _T64_BASE:
        raise CorruptPartError(f"{where}: T64 type code {code} is not one ClickHouse writes")
    width, signed = _T64_BASE[code]
    bit_variant = bool(raw[0] & 0x80)
    skip = size % width
    header = 1 + skip + 16
    if len(raw) < header:
        raise CorruptPartError(f"{where}: T64 payload of {len(raw)} bytes is shorter than its {header}-byte header")
    low, high = struct.unpack_from("<qq" if signed else "<QQ", raw, 1 + skip)
    count = size // width
    dtype = (_SIGNED if signed else _UNSIGNED)[width]
    nbits = _valuable_bits(low, high, signed)
    if not nbits:
        if len(raw) != header:
            raise CorruptPartError(f"{where}: T64 payload of equal values has {len(raw) - header} bytes after its header")
        values = np.full(count, low, dtype=np.int64 if signed else np.uint64).astype(dtype)
        return _with_prefix(skip, raw[1:], values)
    groups = -(-count // 64)
    body = raw[header:]
    if nbits > 8 * width or len(body) != groups * 8 * nbits:
        raise CorruptPartError(f"{where}: T64 payload holds {len(body)} bytes for {count} values of {nbits} bits")
    body = body.reshape(groups, 8 * nbits)
    rows, planes = _t64_layout(nbits, bit_variant)
    value_bytes = np.zeros((groups, 64, width), np.uint8)
    value_bytes[:, :, :rows] = body[:, : 64 * rows].reshape(groups, rows, 64).transpose(0, 2, 1)
    if planes:
        bits = np.unpackbits(body[:, 64 * rows :].reshape(groups, planes, 8), axis=2, bitorder="little")
        packed = np.packbits(bits.transpose(0, 2, 1), axis=2, bitorder="little")
        value_bytes[:, :, rows : rows + packed.shape[2]] = packed
    unsigned = value_bytes.reshape(-1).view(_UNSIGNED[width])[:count]
    mask = (1 << (8 * width)) - 1
    upper_min = ((low & 0xFFFFFFFFFFFFFFFF) >> nbits << nbits) & mask if nbits < 64 else 0
    if signed and low < 0 <= high and nbits < 64:
        upper_max = ((high & 0xFFFFFFFFFFFFFFFF) >> nbits << nbits) & mask
        sign = (unsigned & _UNSIGNED[width].type(1 << (nbits - 1))) != 0
        unsigned = unsigned | np.where(sign, _UNSIGNED[width].type(upper_min), _UNSIGNED[width].type(upper_max))
    elif upper_min:
        unsigned = unsigned | _UNSIGNED[width].type(upper_min)
    return _with_prefix(skip, raw[1:], unsigned)


# ------------------------------------------------------------------ FPC


def _fpc_values(size: int, width: int) -> int:
    """Floats FPC codes for a block of `size` bytes: whole values rounded up to an even count."""
    count = -(-size // width)
    return count + (count % 2)


def fpc_encode(data: bytes | bytearray | memoryview | np.ndarray, width: int, level: int) -> bytes:
    """Float width, level, then pairs of floats predicted by FCM/DFCM hash tables (blocks.md)."""
    _check_width(width, (4, 8), "FPC float")
    if not 1 <= level <= FPC_MAX_LEVEL:
        raise InvalidOptionError(f"FPC level must be between 1 and {FPC_MAX_LEVEL}, got {level}")
    raw = _as_bytes(data)
    count = _fpc_values(len(raw), width)
    padded = np.zeros(count * width, np.uint8)
    padded[: len(raw)] = raw
    dst = np.empty(count * (width + 1), np.uint8)
    written = _compiled().fpc_encode(padded.view(_UNSIGNED[width]).astype(np.uint64), level, width, dst)
    return bytes((width, level)) + dst[:written].tobytes()


def fpc_decode(payload: memoryview, size: int, where: str) -> np.ndarray:
    raw = _as_bytes(payload)
    if len(raw) < 2:
        raise CorruptPartError(f"{where}: FPC payload of {len(raw)} bytes has no header")
    width, level = int(raw[0]), int(raw[1])
    if width not in (4, 8) or not 1 <= level <= FPC_MAX_LEVEL:
        raise CorruptPartError(f"{where}: FPC header says float width {width} and level {level}")
    count = _fpc_values(size, width)
    out = np.empty(count, np.uint64)
    used = _compiled().fpc_decode(np.ascontiguousarray(raw[2:]), count, level, width, out)
    if used != len(raw) - 2:
        detail = "ends inside a pair" if used < 0 else f"has {len(raw) - 2 - used} bytes after its {count} values"
        raise CorruptPartError(f"{where}: FPC payload {detail}")
    return out.astype(_UNSIGNED[width]).view(np.uint8)[:size]


# ------------------------------------------------------------------ GCD

_GCD_WIDTHS = (1, 2, 4, 8, 16, 32)


def _limbs(raw: np.ndarray, width: int) -> np.ndarray:
    """Values wider than 8 bytes as (n, width/4) uint64 arrays of 32-bit limbs, least significant first."""
    return raw.view("<u4").reshape(-1, width // 4).astype(np.uint64)


def _multiply_limbs(values: np.ndarray, factor: np.ndarray) -> np.ndarray:
    """(values × factor) mod 2^(32·limbs), both in 32-bit limbs; returns uint32 limbs."""
    count, size = values.shape
    out = np.zeros((count, size), np.uint64)
    low = np.uint64(0xFFFFFFFF)
    for i in range(size):
        carry = np.zeros(count, np.uint64)
        for j in range(size - i):
            total = out[:, i + j] + values[:, i] * factor[j] + carry
            out[:, i + j] = total & low
            carry = total >> np.uint64(32)
    return out.astype("<u4")


def _int_limbs(value: int, width: int) -> np.ndarray:
    return np.frombuffer(value.to_bytes(width, "little"), "<u4").astype(np.uint64)


def _wide_gcd(values: np.ndarray, width: int, signed: bool) -> int:
    """The GCD of integers wider than 64 bits (of their absolute values when signed), stopping once
    it reaches 1 as ClickHouse does. Python integers: such columns are rare."""
    gcd = 0
    rows = values.view(np.uint8).reshape(-1, width)
    for start in range(0, len(rows), 4096):
        chunk = rows[start : start + 4096].tobytes()
        gcd = math.gcd(gcd, *(int.from_bytes(chunk[i : i + width], "little", signed=signed)
                              for i in range(0, len(chunk), width)))
        if gcd == 1:
            break
    return gcd


def _shift_limbs(limbs: np.ndarray, shift: int, signed: bool) -> np.ndarray:
    """32-bit limbs shifted right by `shift` bits, arithmetically when signed."""
    count, size = limbs.shape
    negative = signed & ((limbs[:, -1] >> np.uint64(31)) == 1)
    fill = np.where(negative, np.uint64(0xFFFFFFFF), np.uint64(0))
    extended = np.concatenate([limbs, np.repeat(fill[:, None], size + 1, axis=1)], axis=1)
    whole, part = divmod(shift, 32)
    out = extended[:, whole : whole + size] >> np.uint64(part)
    if part:
        out |= (extended[:, whole + 1 : whole + size + 1] << np.uint64(32 - part)) & np.uint64(0xFFFFFFFF)
    return out


def gcd_encode(data: bytes | bytearray | memoryview | np.ndarray, width: int, signed: bool = False) -> bytes:
    """Width header, the values' greatest common divisor, then each value divided by it (unchanged
    when the divisor is 0 or 1). Signed columns (Int*, Decimal*, Date32, DateTime64) divide their
    signed values by the GCD of the absolute values, as ClickHouse does."""
    _check_width(width, _GCD_WIDTHS, "GCD")
    header, values = _prefixed(_as_bytes(data), width)
    if width <= 8:
        magnitudes = values
        if signed:
            values = values.view(_SIGNED[width])
            magnitudes = np.where(values < 0, 0 - values.view(_UNSIGNED[width]), values.view(_UNSIGNED[width]))
        gcd = int(np.gcd.reduce(magnitudes)) if len(values) else 0
        stored = _UNSIGNED[width].type(gcd).tobytes()
        if gcd in (0, 1):
            return header + stored + values.tobytes()
        return header + stored + (values // values.dtype.type(gcd)).tobytes()
    gcd = _wide_gcd(values, width, signed)
    if gcd in (0, 1):
        return header + gcd.to_bytes(width, "little") + values.tobytes()
    # Division is exact: divide by the power of two with a shift, by the odd rest with its inverse.
    shift = (gcd & -gcd).bit_length() - 1
    limbs = _shift_limbs(_limbs(values, width), shift, signed) if shift else _limbs(values, width)
    inverse = pow(gcd >> shift, -1, 1 << (8 * width))
    quotients = _multiply_limbs(limbs, _int_limbs(inverse, width))
    return header + gcd.to_bytes(width, "little") + quotients.tobytes()


def gcd_decode(payload: memoryview, size: int, where: str) -> np.ndarray:
    if size == 0:
        return np.zeros(0, np.uint8)
    width, skip, body = _width_header(payload, size, where, _GCD_WIDTHS)
    if len(body) != skip + width + size - skip:
        raise CorruptPartError(f"{where}: GCD payload holds {len(body) - skip - width} value bytes, the block "
                               f"{size - skip}")
    gcd_bytes = body[skip : skip + width]
    values = body[skip + width :]
    if width <= 8:
        gcd = gcd_bytes.view(_UNSIGNED[width])[0]
        unsigned = values.view(_UNSIGNED[width])
        decoded = unsigned if gcd in (0, 1) else unsigned * gcd
    else:
        gcd_value = int.from_bytes(gcd_bytes.tobytes(), "little")
        decoded = values if gcd_value in (0, 1) else _multiply_limbs(_limbs(values, width), _int_limbs(gcd_value, width))
    return _with_prefix(skip, body, np.ascontiguousarray(decoded))

"""Compressed blocks of MergeTree files: codecs, the block header and checksum, writing and reading.

A block is ``checksum(16) | method(1) | compressed_size(UInt32 LE) | decompressed_size(UInt32 LE) |
payload``. ``compressed_size`` counts the 9 header bytes after the checksum plus the payload; the
checksum is CityHash128 of those 9 bytes and the payload. See format_spec/blocks.md.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import re
import struct
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace

import lz4.block
import numpy as np
import zstandard

from spark_mergetree.errors import CorruptPartError, InvalidOptionError, UnsupportedError
from spark_mergetree.format import codecs
from spark_mergetree.format.cityhash import FileHasher, cityhash128
from spark_mergetree.format.streams import stream_value_types
from spark_mergetree.format.types import (
    Array,
    DataType,
    DateTime,
    DateTime64,
    Decimal,
    Enum,
    Nullable,
    Primitive,
    Time,
    Time64,
    Tuple,
)
from spark_mergetree.format.values import value_width

__all__ = [
    "METHOD_NONE",
    "METHOD_LZ4",
    "METHOD_ZSTD",
    "UNSUPPORTED_METHODS",
    "CHECKSUM_SIZE",
    "HEADER_SIZE",
    "BLOCK_OVERHEAD",
    "DEFAULT_MIN_COMPRESS_BLOCK_SIZE",
    "DEFAULT_MAX_COMPRESS_BLOCK_SIZE",
    "Codec",
    "CodecChain",
    "UNSUPPORTED_CODECS",
    "parse_column_codec",
    "split_codec_clause",
    "NONE",
    "LZ4",
    "LZ4HC",
    "ZSTD",
    "parse_codec",
    "compress_block",
    "BlockInfo",
    "iter_blocks",
    "read_blocks",
    "decompress_block",
    "decompress_all",
    "decompress_range",
    "CompressedStreamWriter",
]

METHOD_NONE = 0x02
METHOD_LZ4 = 0x82
METHOD_ZSTD = 0x90

CHECKSUM_SIZE = 16
HEADER_SIZE = 9  # method byte + compressed size + decompressed size
BLOCK_OVERHEAD = CHECKSUM_SIZE + HEADER_SIZE
DEFAULT_MIN_COMPRESS_BLOCK_SIZE = 65536
DEFAULT_MAX_COMPRESS_BLOCK_SIZE = 1048576
DEFAULT_ZSTD_LEVEL = 1
# ClickHouse rejects blocks claiming more than 1 GiB; a corrupted size field must not make us allocate more.
MAX_BLOCK_SIZE = 1 << 30

_header = struct.Struct("<BII")
METHOD_MULTIPLE = 0x91
METHOD_DELTA = 0x92
METHOD_T64 = 0x93
METHOD_DOUBLE_DELTA = 0x94
METHOD_GORILLA = 0x95
METHOD_FPC = 0x98
METHOD_GCD = 0x9A
# Method bytes this version decodes (LZ4HC blocks carry the LZ4 byte).
_METHOD_NAMES = {
    METHOD_NONE: "NONE", METHOD_LZ4: "LZ4", METHOD_ZSTD: "ZSTD", METHOD_MULTIPLE: "Multiple", METHOD_DELTA: "Delta",
    METHOD_T64: "T64", METHOD_DOUBLE_DELTA: "DoubleDelta", METHOD_GORILLA: "Gorilla", METHOD_FPC: "FPC",
    METHOD_GCD: "GCD",
}
# Method bytes of ClickHouse codecs this version does not decode: encryption (its key lives in the
# server's configuration) and hardware or experimental codecs. A block that passes its checksum
# with one of these is valid data we cannot read, not damage.
UNSUPPORTED_METHODS = {
    0x96: "AES_128_GCM_SIV", 0x97: "AES_256_GCM_SIV", 0x99: "DeflateQpl", 0x9B: "ZSTD_QPL", 0x9C: "SZ3",
}
_TRANSFORM_DECODERS = {
    METHOD_DELTA: codecs.delta_decode, METHOD_T64: codecs.t64_decode, METHOD_DOUBLE_DELTA: codecs.double_delta_decode,
    METHOD_GORILLA: codecs.gorilla_decode, METHOD_FPC: codecs.fpc_decode, METHOD_GCD: codecs.gcd_decode,
}
DEFAULT_LZ4HC_LEVEL = 9  # what LZ4HC and LZ4HC(0) mean, in ClickHouse as in liblz4
MAX_LZ4HC_LEVEL = 12
MIN_ZSTD_LEVEL = -(1 << 17)  # zstd's fastest "negative" level
MAX_ZSTD_LEVEL = 22
DEFAULT_FPC_LEVEL = 12
VALID_CODECS = ("NONE, LZ4, LZ4HC, LZ4HC(level) with level 0..12 (0: the default, 9), ZSTD, ZSTD(level) with "
                f"level {MIN_ZSTD_LEVEL}..{MAX_ZSTD_LEVEL}, optionally wrapped as CODEC(...)")
VALID_COLUMN_CODECS = (f"a chain of {VALID_CODECS.rsplit(', optionally', 1)[0]}, ZSTD(level, window_log), Delta, "
                       "Delta(1|2|4|8), DoubleDelta, Gorilla, Gorilla(1|2|4|8), T64, T64('bit'), FPC, FPC(level 1..28), "
                       "GCD, Default")
# Codecs ClickHouse has and this version refuses to write or read, with the reason.
UNSUPPORTED_CODECS = {
    "AES_128_GCM_SIV": "an encryption codec (its key lives in the ClickHouse server's configuration)",
    "AES_256_GCM_SIV": "an encryption codec (its key lives in the ClickHouse server's configuration)",
    "DEFLATE_QPL": "a hardware codec (Intel QPL)", "ZSTD_QPL": "a hardware codec (Intel QPL)",
    "ZSTD_QAT": "a hardware codec (Intel QAT)", "SZ3": "an experimental lossy codec",
}
# Generic codecs compress any bytes; the others transform values of the column's type first.
_GENERIC = frozenset({"NONE", "LZ4", "LZ4HC", "ZSTD", "Default"})
# Codecs that compress by themselves (ClickHouse's isCompression): a chain needs one of them.
_COMPRESSING = frozenset({"LZ4", "LZ4HC", "ZSTD", "Default", "DoubleDelta", "Gorilla", "T64", "FPC"})
_FLOAT_SERIES = frozenset({"Gorilla", "FPC"})
_DELTAS = frozenset({"Delta", "DoubleDelta"})
_SIGNED_GCD_TYPES = ("Int", "Decimal", "Date32", "DateTime64")


@dataclass(frozen=True)
class Codec:
    """One compression codec with its parameters, as a column's CODEC(...) names it.

    ``level``: ZSTD, LZ4HC and FPC. ``width``: bytes per value of Delta, Gorilla, DoubleDelta and GCD,
    float bytes of FPC (None until bound to a stream's type, see `bind`). ``variant``: T64('bit').
    ``window_log``: ZSTD(level, window_log), long-distance matching. ``type_code`` (T64) and
    ``signed`` (GCD) come from the stream's type. LZ4HC spends more time to find longer matches;
    its blocks are ordinary LZ4 blocks and carry LZ4's method byte, so every LZ4 reader reads them."""

    name: str
    method: int
    level: int | None = None
    width: int | None = None
    variant: str | None = None
    window_log: int | None = None
    type_code: int | None = None
    signed: bool = False

    @property
    def setting(self) -> str:
        """The codec as ClickHouse spells it inside CODEC(...) (e.g. ``ZSTD(3)``, ``Delta(8)``)."""
        if self.name == "ZSTD" and self.window_log is not None:
            return f"ZSTD({self.level}, {self.window_log})"
        if self.name in ("ZSTD", "LZ4HC", "FPC"):
            return self.name if self.level is None else f"{self.name}({self.level})"
        if self.name in ("Delta", "Gorilla") and self.width is not None:
            return f"{self.name}({self.width})"
        if self.name == "T64" and self.variant == "bit":
            return "T64('bit')"
        return self.name

    @property
    def text(self) -> str:
        """ClickHouse's spelling, as in default_compression_codec.txt (e.g. ``CODEC(ZSTD(3))``)."""
        return f"CODEC({self.setting})"

    @property
    def generic(self) -> bool:
        """Whether the codec compresses any bytes (ClickHouse applies only these to null maps,
        array sizes and LowCardinality indexes)."""
        return self.name in _GENERIC

    def bind(self, dt: DataType, where: str = "") -> Codec:
        """This codec for values of type `dt` (the width, T64's type code, GCD's signedness), or
        InvalidOptionError naming the codec and the type if it does not apply, as ClickHouse says."""
        if self.generic:
            return self
        name = _value_type_name(dt)
        width = value_width(dt)
        refuse = f"{where}codec {self.setting} does not apply to {dt.to_clickhouse()}"
        if self.name in ("Delta", "Gorilla", "DoubleDelta"):
            if self.name != "DoubleDelta" and self.width is not None:
                return self
            if width not in (1, 2, 4, 8):
                raise InvalidOptionError(f"{refuse}: it needs values of 1, 2, 4 or 8 bytes")
            return replace(self, width=width)
        if self.name == "T64":
            if name not in codecs.T64_TYPE_CODES:
                raise InvalidOptionError(f"{refuse}: T64 takes integers up to 64 bits, dates, times, enums, "
                                         "Decimal32/64 and IPv4")
            return replace(self, type_code=codecs.T64_TYPE_CODES[name])
        if self.name == "FPC":
            if name not in ("Float32", "Float64"):
                raise InvalidOptionError(f"{refuse}: FPC takes Float32 and Float64")
            return replace(self, width=width)
        if self.name == "GCD":
            if not name.startswith(("Int", "UInt", "Decimal", "Date")) or width not in (1, 2, 4, 8, 16, 32):
                raise InvalidOptionError(f"{refuse}: GCD takes integers, decimals, dates and times")
            return replace(self, width=width, signed=name.startswith(_SIGNED_GCD_TYPES))
        raise InvalidOptionError(f"{refuse}")

    def compress(self, data: bytes | bytearray | memoryview) -> bytes:
        """The block payload for ``data`` (no header)."""
        if self.name == "LZ4HC":
            return _lz4hc_compress(data, self.level or DEFAULT_LZ4HC_LEVEL)
        if self.method == METHOD_LZ4:
            return _lz4_compress(data)
        if self.method == METHOD_ZSTD:
            if self.window_log is not None:
                return _zstd_long_compressor(self.level, self.window_log).compress(data)
            return _zstd_compressor(DEFAULT_ZSTD_LEVEL if self.level is None else self.level).compress(data)
        if self.method == METHOD_NONE:
            return bytes(data)
        if self.name == "T64" and self.type_code is not None:
            return codecs.t64_encode(data, self.type_code, self.variant == "bit")
        if self.width is None:
            raise InvalidOptionError(f"codec {self.setting} needs the column's type to compress (bind it first)")
        if self.name == "Delta":
            return codecs.delta_encode(data, self.width)
        if self.name == "DoubleDelta":
            return codecs.double_delta_encode(data, self.width)
        if self.name == "Gorilla":
            return codecs.gorilla_encode(data, self.width)
        if self.name == "FPC":
            return codecs.fpc_encode(data, self.width, self.level or DEFAULT_FPC_LEVEL)
        if self.name == "GCD":
            return codecs.gcd_encode(data, self.width, self.signed)
        raise InvalidOptionError(f"codec {self.setting} needs the column's type to compress (bind it first)")


def _value_type_name(dt: DataType) -> str:
    """The name the column codecs know a value type by (Int64, DateTime64, Decimal32, Enum8, ...)."""
    if isinstance(dt, Primitive):
        return dt.name
    if isinstance(dt, Decimal):
        return f"Decimal{8 * dt.width}"
    if isinstance(dt, Enum):
        return f"Enum{dt.bits}"
    if isinstance(dt, (DateTime, DateTime64, Time, Time64)):
        return type(dt).__name__
    return dt.to_clickhouse()


@dataclass(frozen=True)
class CodecChain:
    """A column's CODEC(...): codecs applied in order, each to the previous one's whole block
    (method byte 0x91 on disk, blocks.md); a chain of one codec writes that codec's blocks."""

    codecs: tuple[Codec, ...]

    @property
    def method(self) -> int:
        return self.codecs[0].method if len(self.codecs) == 1 else METHOD_MULTIPLE

    @property
    def setting(self) -> str:
        return ", ".join(codec.setting for codec in self.codecs)

    @property
    def text(self) -> str:
        return f"CODEC({self.setting})"

    def compress(self, data: bytes | bytearray | memoryview) -> bytes:
        if len(self.codecs) == 1:
            return self.codecs[0].compress(data)
        block: bytes | bytearray | memoryview = data
        for codec in self.codecs:
            payload = codec.compress(block)
            block = _header.pack(codec.method, HEADER_SIZE + len(payload), len(block)) + payload
        return bytes([len(self.codecs), *(codec.method for codec in self.codecs)]) + bytes(block)

    def for_stream(self, dt: DataType | None, default: Codec) -> Codec | CodecChain:
        """The codec of one stream: `dt` is its values' type, None for streams ClickHouse compresses
        with the generic codecs only (null maps, array sizes, LowCardinality indexes); `Default`
        stands for the table's codec; nothing left means NONE."""
        chosen = [default if codec.name == "Default" else codec.bind(dt) if dt is not None else codec
                  for codec in self.codecs if dt is not None or codec.generic]
        if not chosen:
            return NONE
        return chosen[0] if len(chosen) == 1 else CodecChain(tuple(chosen))


def _load_system_lz4() -> ctypes.CDLL | None:
    # The lz4 package's compressor emits different (equally valid) LZ4 sequences than the liblz4
    # build ClickHouse links; the system liblz4 reproduces ClickHouse's blocks byte for byte, which
    # keeps compressed sizes and therefore mark offsets identical to ClickHouse's. Its functions
    # take addresses: blocks are compressed from the caller's buffer into one of ours, no copies.
    name = ctypes.util.find_library("lz4")
    if name is None:
        return None
    try:
        library = ctypes.CDLL(name)
        library.LZ4_compress_default.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_int]
        library.LZ4_compress_default.restype = ctypes.c_int
        library.LZ4_compressBound.argtypes = [ctypes.c_int]
        library.LZ4_compressBound.restype = ctypes.c_int
        library.LZ4_compress_HC.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_int]
        library.LZ4_compress_HC.restype = ctypes.c_int
    except (OSError, AttributeError):
        return None
    return library


_system_lz4 = _load_system_lz4()


def _lz4_compress(data: bytes | bytearray | memoryview) -> bytes:
    if _system_lz4 is None:
        return lz4.block.compress(data, mode="default", store_size=False)
    return bytes(_system_lz4_into("LZ4", data, 0, _system_lz4.LZ4_compress_default)[0])


def _lz4hc_compress(data: bytes | bytearray | memoryview, level: int) -> bytes:
    if _system_lz4 is None:
        return lz4.block.compress(data, mode="high_compression", compression=level, store_size=False)
    return bytes(_system_lz4_into("LZ4HC", data, 0, lambda *args: _system_lz4.LZ4_compress_HC(*args, level))[0])


def _system_lz4_into(name: str, data: bytes | bytearray | memoryview, offset: int,
                     compress: Callable[..., int]) -> tuple[memoryview, bytearray]:
    """Compress `data` into a new buffer at `offset` (room left for a block's checksum and header);
    returns the payload's view and the buffer, cut to end with the payload."""
    source = np.frombuffer(data, np.uint8)
    capacity = _system_lz4.LZ4_compressBound(len(source))  # type: ignore[union-attr]
    buffer = bytearray(offset + capacity)
    target = np.frombuffer(buffer, np.uint8)
    written = compress(source.ctypes.data if len(source) else None, target.ctypes.data + offset, len(source), capacity)
    del target  # a bytearray with an exported buffer cannot shrink
    if written <= 0:
        raise InvalidOptionError(f"{name} cannot compress a block of {len(source)} bytes")
    del buffer[offset + written:]
    return memoryview(buffer)[offset:], buffer


NONE = Codec("NONE", METHOD_NONE)
LZ4 = Codec("LZ4", METHOD_LZ4)


def LZ4HC(level: int | None = None) -> Codec:  # noqa: N802 - mirrors ClickHouse's codec name
    """The LZ4HC codec at ``level`` (None or 0: the default level, 9)."""
    if level is not None and not 0 <= level <= MAX_LZ4HC_LEVEL:
        raise InvalidOptionError(f"LZ4HC level must be between 0 and {MAX_LZ4HC_LEVEL}, got {level}; valid codecs: "
                                 f"{VALID_CODECS}")
    return Codec("LZ4HC", METHOD_LZ4, level)


def ZSTD(level: int = DEFAULT_ZSTD_LEVEL, window_log: int | None = None) -> Codec:  # noqa: N802 - ClickHouse's name
    """The ZSTD codec at ``level`` (ClickHouse's default level is 1; 0 is zstd's default, 3; negative
    levels are zstd's fast ones); with ``window_log`` long-distance matching is on (0: zstd's window)."""
    if not MIN_ZSTD_LEVEL <= level <= MAX_ZSTD_LEVEL:
        raise InvalidOptionError(f"ZSTD level must be between {MIN_ZSTD_LEVEL} and {MAX_ZSTD_LEVEL}, got {level}; "
                                 f"valid codecs: {VALID_CODECS}")
    if window_log is not None and window_log != 0 and not 10 <= window_log <= 31:
        raise InvalidOptionError(f"ZSTD window_log must be 0 or between 10 and 31, got {window_log}")
    return Codec("ZSTD", METHOD_ZSTD, level, window_log=window_log)


# zstandard's (de)compressor objects must not be used by two threads at once: one set per thread.
_zstd_local = threading.local()


def _zstd_compressor(level: int) -> zstandard.ZstdCompressor:
    compressors: dict[int, zstandard.ZstdCompressor] | None = getattr(_zstd_local, "compressors", None)
    if compressors is None:
        compressors = _zstd_local.compressors = {}
    compressor = compressors.get(level)
    if compressor is None:
        compressor = compressors[level] = zstandard.ZstdCompressor(level=level)
    return compressor


def _zstd_long_compressor(level: int | None, window_log: int) -> zstandard.ZstdCompressor:
    parameters = zstandard.ZstdCompressionParameters.from_level(
        DEFAULT_ZSTD_LEVEL if level is None else level, enable_ldm=True, **({"window_log": window_log} if window_log else {}))
    return zstandard.ZstdCompressor(compression_params=parameters)


def _zstd_decompressor() -> zstandard.ZstdDecompressor:
    decompressor: zstandard.ZstdDecompressor | None = getattr(_zstd_local, "decompressor", None)
    if decompressor is None:
        decompressor = _zstd_local.decompressor = zstandard.ZstdDecompressor()
    return decompressor


_CODEC_TEXT = re.compile(r"^\s*(?:CODEC\s*\(\s*(?P<inner>.*)\)|(?P<bare>.*?))\s*$", re.IGNORECASE | re.DOTALL)
_CODEC_CALL = re.compile(r"^(?P<name>[A-Za-z0-9_]+)\s*(?:\(\s*(?P<args>[^()]*?)\s*\))?$")
_FAMILIES = {name.upper(): name for name in ("NONE", "LZ4", "LZ4HC", "ZSTD", "Delta", "DoubleDelta", "Gorilla", "T64",
                                                 "FPC", "GCD", "Default")}
_INTEGER = re.compile(r"-?[0-9]+")


def _split_codecs(inner: str) -> list[str]:
    """`Delta(8), ZSTD(3)` → ['Delta(8)', 'ZSTD(3)'] (commas inside parentheses stay)."""
    parts, depth, start = [], 0, 0
    for at, char in enumerate(inner):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            parts.append(inner[start:at].strip())
            start = at + 1
    parts.append(inner[start:].strip())
    return parts


def _one_codec(call_text: str, text: str, valid: str) -> Codec:
    """One codec call (`ZSTD(3)`, `Delta`, `T64('bit')`); InvalidOptionError naming `text` otherwise."""
    call = _CODEC_CALL.match(call_text)
    if call is None:
        raise InvalidOptionError(f"unknown compression codec {text!r}; valid codecs: {valid}")
    family = call.group("name").upper()
    if family in UNSUPPORTED_CODECS:
        raise UnsupportedError(f"codec {call.group('name')} in {text!r} is {UNSUPPORTED_CODECS[family]}: this version "
                               f"neither writes nor reads it; valid codecs: {valid}")
    name = _FAMILIES.get(family)
    args_text = call.group("args")
    args = [a.strip() for a in args_text.split(",")] if args_text else []
    bad = InvalidOptionError(f"bad arguments to {name or call.group('name')} in codec {text!r}; valid codecs: {valid}")
    if name is None:
        raise InvalidOptionError(f"unknown compression codec {call.group('name')!r} in {text!r}; valid codecs: {valid}")
    if name in ("T64",):
        if args not in ([], ["'bit'"], ["'byte'"]):
            raise bad
        return Codec("T64", METHOD_T64, variant="bit" if args == ["'bit'"] else None)
    if not all(_INTEGER.fullmatch(a) for a in args):
        raise bad
    # ClickHouse's SHOW CREATE spells a negative level as its UInt64 bits (ZSTD(-3): 18446744073709551613).
    numbers = [int(a) - (1 << 64) if int(a) >= 1 << 63 else int(a) for a in args]
    if name == "LZ4HC" and numbers and numbers[0] < 0:
        numbers = [0]  # liblz4 compresses at its default level below 1, as for 0
    if name == "ZSTD" and len(numbers) <= 2:
        return ZSTD(*numbers) if numbers else ZSTD()
    if name == "LZ4HC" and len(numbers) <= 1:
        return LZ4HC(*numbers)
    if name in ("Delta", "Gorilla") and (numbers in ([], [1], [2], [4], [8])):
        return Codec(name, METHOD_DELTA if name == "Delta" else METHOD_GORILLA, width=numbers[0] if numbers else None)
    if name == "FPC" and len(numbers) <= 2 and all(1 <= n <= codecs.FPC_MAX_LEVEL for n in numbers[:1]):
        # FPC(level, float width): the width is the column's float size whenever the type is known.
        return Codec("FPC", METHOD_FPC, level=numbers[0] if numbers else None)
    if name == "DoubleDelta" and numbers in ([1], [2], [4], [8]):
        numbers = []  # ClickHouse accepts a width and compresses with the column's (its SHOW CREATE drops it)
    if not numbers and name in ("NONE", "LZ4", "DoubleDelta", "GCD", "Default"):
        return {"NONE": NONE, "LZ4": LZ4, "Default": Codec("Default", METHOD_NONE),
                "DoubleDelta": Codec("DoubleDelta", METHOD_DOUBLE_DELTA), "GCD": Codec("GCD", METHOD_GCD)}[name]
    raise bad


def _codec_calls(text: str, valid: str) -> list[str]:
    if not isinstance(text, str):
        raise InvalidOptionError(f"compression codec must be a string, got {text!r}; valid codecs: {valid}")
    outer = _CODEC_TEXT.match(text)
    inner = (outer.group("inner") if outer.group("inner") is not None else outer.group("bare")) if outer else ""
    calls = _split_codecs(inner)
    if not all(calls):
        raise InvalidOptionError(f"unknown compression codec {text!r}; valid codecs: {valid}")
    return calls


def parse_codec(text: str) -> Codec:
    """Parse ``NONE``, ``LZ4``, ``LZ4HC``, ``LZ4HC(12)``, ``ZSTD``, ``ZSTD(3)`` or any of them wrapped
    in ``CODEC(...)``: the one check of a table's codec, for table settings and Spark's `codec`
    option alike (a generic codec: it compresses every stream). Columns take chains: parse_column_codec."""
    calls = _codec_calls(text, VALID_CODECS)
    codec = _one_codec(calls[0], text, VALID_CODECS) if len(calls) == 1 else None
    if codec is None or not codec.generic or codec.name == "Default" or codec.window_log is not None:
        raise InvalidOptionError(f"unknown compression codec {text!r}; valid codecs: {VALID_CODECS}")
    return codec


_CODEC_KEYWORD = re.compile(r"\bCODEC\s*\(", re.IGNORECASE)


def split_codec_clause(column_text: str) -> tuple[str, str | None]:
    """`Int64 CODEC(Delta, ZSTD)` → ('Int64', 'Delta, ZSTD'): a column's type and what its CODEC(...)
    clause holds (None without one). The clause is found outside quotes and parentheses and must end
    the text; InvalidOptionError otherwise."""
    depth, quote = 0, ""
    for at, char in enumerate(column_text):
        if quote:
            quote = "" if char == quote and column_text[at - 1] != "\\" else quote
        elif char in "'`\"":
            quote = char
        elif char in "()":
            depth += 1 if char == "(" else -1
        elif depth == 0 and (keyword := _CODEC_KEYWORD.match(column_text, at)) and (at == 0 or column_text[at - 1].isspace()):
            inner = column_text[keyword.end():].rstrip()
            if not inner.endswith(")") or len(_split_codecs(inner[:-1])) == 0 or inner[:-1].count("(") != inner[:-1].count(")"):
                raise InvalidOptionError(f"column {column_text!r}: a CODEC(...) clause must end the column's type")
            return column_text[:at].strip(), inner[:-1].strip()
    return column_text.strip(), None


def parse_column_codec(text: str, column_type: DataType, check: bool = True) -> CodecChain:
    """A column's CODEC(...) clause (`Delta, ZSTD(3)`, with or without `CODEC(...)`), checked against
    the column's type as ClickHouse checks it: every codec must apply to the values of each stream
    that takes type-specific codecs (serialization.stream_value_types). `check` adds ClickHouse's
    CREATE-time refusals of meaningless chains (what its setting allow_suspicious_codecs turns off;
    ATTACH of an existing table skips them). Errors: InvalidOptionError naming the codec and the
    type, UnsupportedError for encryption and hardware codecs."""
    calls = _codec_calls(text, VALID_COLUMN_CODECS)
    chain = CodecChain(tuple(_one_codec(call, text, VALID_COLUMN_CODECS) for call in calls))
    types = [t for t in stream_value_types(column_type, "c").values() if t is not None]
    for codec in chain.codecs:
        for dt in types:
            codec.bind(dt, f"{text!r}: ")
    if check:
        _check_meaningful(chain, column_type, text)
    return chain


def _check_meaningful(chain: CodecChain, column_type: DataType, text: str) -> None:
    """ClickHouse's CREATE-time refusals of chains that make no sense."""
    names = [codec.name for codec in chain.codecs]
    note = " (ClickHouse refuses it too unless allow_suspicious_codecs is set)"
    if len(names) > 1 and "NONE" in names:
        raise InvalidOptionError(f"codec {text!r}: NONE along with other codecs makes no sense{note}")
    if "NONE" not in names and not _COMPRESSING & set(names):
        raise InvalidOptionError(f"codec {text!r} does not compress anything: add a generic codec after the "
                                 f"transformations, e.g. CODEC({chain.setting}, LZ4){note}")
    floats = [i for i, name in enumerate(names) if name in _FLOAT_SERIES]
    if floats and not _has_float(column_type):
        raise InvalidOptionError(f"codec {text!r}: floating-point time series codecs (Gorilla, FPC) on "
                                 f"{column_type.to_clickhouse()} make no sense{note}")
    deltas = [i for i, name in enumerate(names) if name in _DELTAS]
    if floats and deltas and deltas[0] < floats[-1]:
        raise InvalidOptionError(f"codec {text!r}: Gorilla and FPC do delta compression themselves; a delta "
                                 f"before them makes no sense{note}")
    generic = [i for i, codec in enumerate(chain.codecs) if codec.generic]
    if generic and generic[0] != len(names) - 1:
        raise InvalidOptionError(f"codec {text!r}: a generic codec (LZ4, LZ4HC, ZSTD) can only come last{note}")


def _has_float(dt: DataType) -> bool:
    if isinstance(dt, Primitive):
        return dt.name in ("Float32", "Float64")
    if isinstance(dt, (Nullable, Array)):
        return _has_float(dt.inner)
    if isinstance(dt, Tuple):
        return any(_has_float(element) for element in dt.elements)
    return False


def _lz4_block(data: bytes | bytearray | memoryview) -> bytearray:
    """compress_block(LZ4, data), built in one buffer."""
    payload, block = _system_lz4_into("LZ4", data, BLOCK_OVERHEAD, _system_lz4.LZ4_compress_default)  # type: ignore[union-attr]
    written = len(payload)
    del payload
    _header.pack_into(block, CHECKSUM_SIZE, METHOD_LZ4, HEADER_SIZE + written, len(data))
    block[:CHECKSUM_SIZE] = cityhash128(memoryview(block)[CHECKSUM_SIZE:])
    return block


def compress_block(codec: Codec | CodecChain, data: bytes | bytearray | memoryview) -> bytes | bytearray:
    """One complete block (checksum, header, payload) holding ``data``."""
    if len(data) > MAX_BLOCK_SIZE:
        raise InvalidOptionError(f"a compressed block holds at most {MAX_BLOCK_SIZE} bytes, got {len(data)}")
    if codec == LZ4 and _system_lz4 is not None:
        return _lz4_block(data)
    payload = codec.compress(data)
    body = _header.pack(codec.method, HEADER_SIZE + len(payload), len(data)) + payload
    return cityhash128(body) + body


@dataclass(frozen=True)
class BlockInfo:
    """A verified block inside a file: where it is and what it holds."""

    offset: int  # of the checksum, in the compressed file
    method: int
    compressed_size: int  # header (9 bytes) + payload, as stored
    decompressed_size: int
    payload: memoryview

    @property
    def end(self) -> int:
        """Offset of the next block."""
        return self.offset + CHECKSUM_SIZE + self.compressed_size


def _read_block_at(view: memoryview, offset: int, path: str) -> BlockInfo:
    total = len(view)
    if offset + BLOCK_OVERHEAD > total:
        raise CorruptPartError(
            f"{path}: truncated compressed block at byte offset {offset}: "
            f"{total - offset} bytes left, a block header needs {BLOCK_OVERHEAD}"
        )
    method, compressed_size, decompressed_size = _header.unpack_from(view, offset + CHECKSUM_SIZE)
    if compressed_size < HEADER_SIZE or compressed_size > MAX_BLOCK_SIZE + HEADER_SIZE + (MAX_BLOCK_SIZE >> 4):
        raise CorruptPartError(
            f"{path}: compressed block at byte offset {offset} has impossible compressed size {compressed_size}"
        )
    end = offset + CHECKSUM_SIZE + compressed_size
    if end > total:
        raise CorruptPartError(
            f"{path}: truncated compressed block at byte offset {offset}: "
            f"it claims {compressed_size} bytes after the checksum but the file ends at {total}"
        )
    body = view[offset + CHECKSUM_SIZE : end]
    if cityhash128(body) != view[offset : offset + CHECKSUM_SIZE]:
        raise CorruptPartError(f"{path}: checksum mismatch in compressed block at byte offset {offset}")
    if not _decodable(method, body[HEADER_SIZE:]):
        raise UnsupportedError(f"{path}: block at byte offset {offset} is compressed with "
                               f"{_codec_description(method, body[HEADER_SIZE:])}, which this version cannot "
                               f"decompress (supported: {', '.join(_METHOD_NAMES.values())})")
    if decompressed_size > MAX_BLOCK_SIZE:
        raise CorruptPartError(
            f"{path}: block at byte offset {offset} claims {decompressed_size} decompressed bytes (too many)"
        )
    if method == METHOD_NONE and decompressed_size != compressed_size - HEADER_SIZE:
        raise CorruptPartError(
            f"{path}: uncompressed block at byte offset {offset} stores {compressed_size - HEADER_SIZE} bytes "
            f"but claims {decompressed_size}"
        )
    return BlockInfo(offset, method, compressed_size, decompressed_size, body[HEADER_SIZE:])


def _chain_methods(payload: memoryview) -> bytes | None:
    """The method bytes a Multiple payload lists (None if it is too short to list them)."""
    if len(payload) >= 1 and len(payload) > payload[0]:
        return bytes(payload[1 : 1 + payload[0]])
    return None


def _decodable(method: int, payload: memoryview) -> bool:
    if method == METHOD_MULTIPLE:
        chain = _chain_methods(payload)
        return chain is None or all(m in _METHOD_NAMES and m != METHOD_MULTIPLE for m in chain)
    return method in _METHOD_NAMES


def _codec_description(method: int, payload: memoryview) -> str:
    """How ClickHouse would spell the codec of an intact block we cannot decode, with its method byte.

    A chain (``CODEC(Delta, ZSTD)``) is method Multiple: its payload starts with the number of codecs
    and their method bytes, in the order they were applied."""
    chain = _chain_methods(payload) if method == METHOD_MULTIPLE else None
    if chain is not None:
        names = [_METHOD_NAMES.get(b) or UNSUPPORTED_METHODS.get(b) or f"0x{b:02x}" for b in chain]
        return f"codec chain CODEC({', '.join(names)}) (method byte 0x{method:02x})"
    name = UNSUPPORTED_METHODS.get(method)
    if name is None:
        return f"unknown compression method 0x{method:02x} (a codec newer than this version knows)"
    return f"codec {name} (method byte 0x{method:02x})"


def iter_blocks(buf: bytes | bytearray | memoryview, path: str, start: int = 0, stop: int | None = None) -> Iterator[BlockInfo]:
    """Verified blocks of a compressed file from byte ``start`` up to ``stop`` (default: end of file)."""
    view = memoryview(buf).cast("B")
    end = len(view) if stop is None else stop
    offset = start
    while offset < end:
        block = _read_block_at(view, offset, str(path))
        yield block
        offset = block.end


def read_blocks(buf: bytes | bytearray | memoryview, path: str) -> list[BlockInfo]:
    """Every block of a compressed file, verified."""
    return list(iter_blocks(buf, path))


def _decode_payload(method: int, payload: memoryview, size: int, where: str) -> bytes | memoryview | np.ndarray:
    """`size` bytes from the payload of a block (or of one stage of a codec chain) with `method`."""
    try:
        if method == METHOD_LZ4:
            data = lz4.block.decompress(payload, uncompressed_size=size)
        elif method == METHOD_ZSTD:
            data = _zstd_decompressor().decompress(payload, max_output_size=size)
        elif method == METHOD_NONE:
            data = payload
        elif method == METHOD_MULTIPLE:
            data = _decode_chain(payload, size, where)
        else:
            data = _TRANSFORM_DECODERS[method](payload, size, where)
    except (lz4.block.LZ4BlockError, zstandard.ZstdError) as exc:
        raise CorruptPartError(f"{where}: cannot decompress: {exc}") from exc
    if len(data) != size:
        raise CorruptPartError(f"{where}: decompressed to {len(data)} bytes, header says {size}")
    return data


def _decode_chain(payload: memoryview, size: int, where: str) -> bytes | memoryview | np.ndarray:
    """A codec chain's payload: the codec count, their method bytes in the order they were applied,
    then the last codec's output as a block without checksum (method, sizes, payload) whose bytes
    are the previous codec's block, and so on down to the data."""
    chain = _chain_methods(payload)
    if chain is None or not chain:
        raise CorruptPartError(f"{where}: codec chain lists no codecs")
    data: bytes | memoryview | np.ndarray = payload[1 + len(chain) :]
    for stage in reversed(range(len(chain))):
        name = _METHOD_NAMES.get(chain[stage], f"0x{chain[stage]:02x}")
        view = memoryview(data).cast("B") if not isinstance(data, memoryview) else data
        if len(view) < HEADER_SIZE:
            raise CorruptPartError(f"{where}: stage {stage + 1} of the codec chain ({name}) has no header")
        method, compressed_size, decompressed_size = _header.unpack_from(view, 0)
        if method != chain[stage] or compressed_size != len(view):
            raise CorruptPartError(f"{where}: stage {stage + 1} of the codec chain should be {name} of {len(view)} "
                                   f"bytes, its header says method 0x{method:02x} of {compressed_size} bytes")
        data = _decode_payload(method, view[HEADER_SIZE:], decompressed_size, f"{where} (chain stage {stage + 1}: {name})")
    return data


def decompress_block(block: BlockInfo, path: str) -> bytes | memoryview | np.ndarray:
    """The decompressed bytes of a verified block (a view of the file for NONE blocks)."""
    return _decode_payload(block.method, block.payload, block.decompressed_size,
                           f"{path}: {_METHOD_NAMES[block.method]} block at byte offset {block.offset}")


def _load_system_decompressors() -> tuple[ctypes.CDLL | None, ctypes.CDLL | None]:
    # Calling liblz4/libzstd through ctypes lets blocks decompress straight into one output buffer
    # (no per-block objects, no final join) and releases the GIL, so blocks can go to threads.
    lz4_library = _system_lz4
    if lz4_library is not None:
        try:
            lz4_library.LZ4_decompress_safe.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_int]
            lz4_library.LZ4_decompress_safe.restype = ctypes.c_int
        except AttributeError:
            lz4_library = None
    zstd_library = None
    name = ctypes.util.find_library("zstd")
    if name is not None:
        try:
            zstd_library = ctypes.CDLL(name)
            zstd_library.ZSTD_decompress.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_size_t]
            zstd_library.ZSTD_decompress.restype = ctypes.c_size_t
            zstd_library.ZSTD_isError.argtypes = [ctypes.c_size_t]
            zstd_library.ZSTD_isError.restype = ctypes.c_uint
        except (OSError, AttributeError):
            zstd_library = None
    return lz4_library, zstd_library


_lz4_decoder, _zstd_decoder = _load_system_decompressors()
# Below this many decompressed bytes a thread hand-off costs more than it saves.
_PARALLEL_THRESHOLD = 8 << 20
_decompress_pool: ThreadPoolExecutor | None = None


def _pool() -> ThreadPoolExecutor:
    global _decompress_pool
    if _decompress_pool is None:
        _decompress_pool = ThreadPoolExecutor(max_workers=min(4, os.cpu_count() or 1), thread_name_prefix="decompress")
    return _decompress_pool


def _decompress_blocks_into(view: memoryview, blocks: list[BlockInfo], path: str) -> bytearray:
    """Decompress verified blocks back to back into one new buffer."""
    targets = np.zeros(len(blocks) + 1, dtype=np.int64)
    np.cumsum([block.decompressed_size for block in blocks], out=targets[1:])
    out = bytearray(int(targets[-1]))
    if not blocks:
        return out
    source = np.frombuffer(view, dtype=np.uint8)
    target = np.frombuffer(out, dtype=np.uint8)
    source_address = source.ctypes.data
    target_address = target.ctypes.data

    def decode(indexes: range) -> None:
        for index in indexes:
            block = blocks[index]
            position = int(targets[index])
            size = block.decompressed_size
            payload_address = source_address + block.offset + BLOCK_OVERHEAD
            payload_size = block.compressed_size - HEADER_SIZE
            if block.method == METHOD_LZ4 and _lz4_decoder is not None:
                written = _lz4_decoder.LZ4_decompress_safe(payload_address, target_address + position, payload_size, size)
            elif block.method == METHOD_ZSTD and _zstd_decoder is not None:
                written = _zstd_decoder.ZSTD_decompress(target_address + position, size, payload_address, payload_size)
                if _zstd_decoder.ZSTD_isError(written):
                    written = -1
            else:
                data = decompress_block(block, path)
                target[position : position + size] = np.frombuffer(data, dtype=np.uint8)
                continue
            if written != size:
                raise CorruptPartError(
                    f"{path}: cannot decompress {_METHOD_NAMES[block.method]} block at byte offset {block.offset} "
                    f"into the {size} bytes its header announces"
                )

    count = len(blocks)
    workers = min(4, os.cpu_count() or 1)
    if targets[-1] >= _PARALLEL_THRESHOLD and workers > 1 and count > 1:
        step = -(-count // workers)
        list(_pool().map(decode, [range(start, min(start + step, count)) for start in range(0, count, step)]))
    else:
        decode(range(count))
    # Drop the numpy views so the returned bytearray has no buffer exports left.
    source = target = None
    return out


def decompress_all(buf: bytes | bytearray | memoryview, path: str) -> bytearray:
    """The whole decompressed stream of a compressed file (a new bytearray), every block verified."""
    view = memoryview(buf).cast("B")
    return _decompress_blocks_into(view, list(iter_blocks(view, path)), str(path))


def decompress_range(
    buf: bytes | bytearray | memoryview,
    path: str,
    start_mark: tuple[int, int] = (0, 0),
    end_mark: tuple[int, int] | None = None,
) -> bytearray:
    """Decompressed bytes from ``start_mark`` up to (not including) ``end_mark``; ``None`` means to the end.

    A mark is (offset of a block in the file, offset inside that block's decompressed bytes).
    """
    view = memoryview(buf).cast("B")
    start_block, start_inner = (int(start_mark[0]), int(start_mark[1]))
    if end_mark is None:
        end_block, end_inner = len(view), 0
    else:
        end_block, end_inner = (int(end_mark[0]), int(end_mark[1]))
    if (end_block, end_inner) < (start_block, start_inner):
        raise CorruptPartError(f"{path}: mark range ends at {end_mark} before it starts at {start_mark}")
    if end_block > len(view) or (end_block == len(view) and end_inner):
        raise CorruptPartError(f"{path}: mark {end_mark} points past the end of the file ({len(view)} bytes)")
    blocks: list[BlockInfo] = []
    offset = start_block
    # Blocks wholly before the end block, then the end block itself if bytes of it are wanted.
    while offset < end_block or (offset == end_block and end_inner):
        block = _read_block_at(view, offset, str(path))
        if block.end > end_block and offset != end_block:
            raise CorruptPartError(f"{path}: mark {end_mark} does not point at a block boundary (block at {offset})")
        blocks.append(block)
        if offset == end_block:
            break
        offset = block.end
    if not blocks:
        return bytearray()
    first, last = blocks[0], blocks[-1]
    keep_tail = end_inner if last.offset == end_block else last.decompressed_size
    for mark_offset, block in ((start_inner, first), (keep_tail, last)):
        if mark_offset > block.decompressed_size:
            raise CorruptPartError(
                f"{path}: mark offset {mark_offset} is beyond the {block.decompressed_size} bytes "
                f"of the block at byte offset {block.offset}"
            )
    out = _decompress_blocks_into(view, blocks, str(path))
    # Trimming a bytearray at either end does not copy the bytes kept.
    del out[len(out) - (last.decompressed_size - keep_tail) :]
    del out[:start_inner]
    return out


class CompressedStreamWriter:
    """Builds one compressed file from granule byte chunks, recording a mark per granule.

    Cutting rule (as ClickHouse's Wide writer): before a granule starts, the buffered bytes are
    flushed as a block if there are at least ``min_compress_block_size`` of them. The buffer holds at
    most ``max_compress_block_size`` bytes: a granule that does not fit fills the buffer, which becomes
    a block of exactly that size, and continues in the next block.
    """

    def __init__(
        self,
        codec: Codec | CodecChain = LZ4,
        min_compress_block_size: int = DEFAULT_MIN_COMPRESS_BLOCK_SIZE,
        max_compress_block_size: int = DEFAULT_MAX_COMPRESS_BLOCK_SIZE,
    ) -> None:
        if not 0 < max_compress_block_size <= MAX_BLOCK_SIZE:
            raise InvalidOptionError(
                f"max_compress_block_size must be between 1 and {MAX_BLOCK_SIZE}, got {max_compress_block_size}"
            )
        if min_compress_block_size < 0:
            raise InvalidOptionError(f"min_compress_block_size must be >= 0, got {min_compress_block_size}")
        self.codec = codec
        self.min_compress_block_size = min_compress_block_size
        self.max_compress_block_size = max_compress_block_size
        self._blocks: list[bytes] = []
        self._compressed_size = 0
        self._buffer = bytearray()
        self._marks: list[tuple[int, int]] = []
        self._marks_array: np.ndarray | None = None  # set by write_granules
        self._final_mark: tuple[int, int] | None = None
        self._hasher = FileHasher()
        self._value: bytes | None = None

    def _flush(self) -> None:
        if self._buffer:
            block = compress_block(self.codec, self._buffer)
            self._blocks.append(block)
            self._compressed_size += len(block)
            self._buffer = bytearray()

    def _current_mark(self) -> tuple[int, int]:
        if len(self._buffer) >= self.min_compress_block_size:
            self._flush()
        return (self._compressed_size, len(self._buffer))

    @property
    def position(self) -> tuple[int, int]:
        """The mark of the next byte written, without flushing (for substreams sharing a block)."""
        return (self._compressed_size, len(self._buffer))

    def flush(self) -> None:
        """End the current block now (Compact parts start a block for every column of every granule)."""
        if self._final_mark is not None:
            raise InvalidOptionError("flush() after finish()")
        self._flush()

    def write_granule(self, chunk: bytes | bytearray | memoryview) -> tuple[int, int]:
        """Start a granule (records and returns its mark) and append its bytes."""
        if self._final_mark is not None or self._marks_array is not None:
            raise InvalidOptionError("write_granule() after finish() or write_granules()")
        mark = self._current_mark()
        self._marks.append(mark)
        self.write(chunk)
        return mark

    def write_granules(self, data: bytes | bytearray | memoryview, offsets: np.ndarray) -> None:
        """A whole stream at once: `data[:offsets[0]]` (a stream prefix), then granule g as
        `data[offsets[g]:offsets[g + 1]]`. The same blocks and marks as write() and write_granule()
        per granule, found one block at a time (a block ends at the first granule start at least
        min_compress_block_size bytes in if it comes within max_compress_block_size, else after
        max_compress_block_size bytes when more follow), so the cost does not grow with granules."""
        if self._final_mark is not None or self._buffer or self._blocks or self._marks:
            raise InvalidOptionError("write_granules() writes a whole stream into a new writer")
        view = memoryview(data).cast("B")
        end = len(view)
        starts = np.asarray(offsets[:-1], dtype=np.int64)
        if len(offsets) and int(offsets[-1]) != end:
            raise InvalidOptionError(f"granule offsets end at {int(offsets[-1])}, the stream has {end} bytes")
        low, high = self.min_compress_block_size, self.max_compress_block_size
        if high < low:  # a granule may start at a full buffer that is not flushed: granule by granule
            bounds = np.asarray(offsets, np.int64).tolist()
            self.write(view[: bounds[0]] if bounds else view)
            for begin, stop in zip(bounds[:-1], bounds[1:]):
                self.write_granule(view[begin:stop])
            return
        block_starts = [0]
        position = 0
        while position < end:
            i = int(np.searchsorted(starts, position + max(low, 1)))
            if i < len(starts) and int(starts[i]) <= position + high:
                position = int(starts[i])  # flushed when that granule starts
            elif position + high < end:
                position += high  # a full buffer, flushed when more bytes come
            else:
                break  # the last block, flushed by finish()
            block_starts.append(position)
        self._hasher.update(view)
        bounds = block_starts + [end] if block_starts[-1] < end else block_starts
        compressed_offsets = []
        for begin, stop in zip(bounds[:-1], bounds[1:], strict=True):
            compressed_offsets.append(self._compressed_size)
            block = compress_block(self.codec, view[begin:stop])
            self._blocks.append(block)
            self._compressed_size += len(block)
        if block_starts[-1] == end:  # a block was cut where the data ends: the next one starts empty
            compressed_offsets.append(self._compressed_size)
        else:  # the last block stays in the buffer's place until finish() (see _current_mark)
            last = self._blocks.pop()
            self._compressed_size -= len(last)
            self._buffer = bytearray(view[block_starts[-1]:end])
        block_index = np.searchsorted(np.asarray(block_starts, np.int64), starts, side="right") - 1
        self._marks_array = np.stack([np.asarray(compressed_offsets, np.uint64)[block_index],
                                      (starts - np.asarray(block_starts, np.int64)[block_index]).astype(np.uint64)],
                                     axis=1) if len(starts) else np.zeros((0, 2), np.uint64)

    def write(self, chunk: bytes | bytearray | memoryview) -> None:
        """Append bytes to the current granule."""
        data = memoryview(chunk).cast("B")
        self._hasher.update(data)
        position = 0
        while position < len(data):
            # Flush only when more bytes must go in: a full buffer waits, like ClickHouse's WriteBuffer.
            if len(self._buffer) == self.max_compress_block_size:
                self._flush()
            take = min(self.max_compress_block_size - len(self._buffer), len(data) - position)
            self._buffer += data[position : position + take]
            position += take

    def finish(self) -> tuple[int, int]:
        """Flush everything; returns the final mark (where a next granule would start, before the flush)."""
        if self._final_mark is None:
            self._final_mark = self._current_mark()
            self._flush()
        return self._final_mark

    @property
    def final_mark(self) -> tuple[int, int]:
        if self._final_mark is None:
            raise InvalidOptionError("final_mark is known only after finish()")
        return self._final_mark

    def getvalue(self) -> bytes:
        """The compressed file (call after finish())."""
        if self._final_mark is None:
            raise InvalidOptionError("getvalue() before finish()")
        if self._value is None:
            self._value = b"".join(self._blocks)
            self._blocks = [self._value]
        return self._value

    @property
    def marks(self) -> np.ndarray:
        """(n_granules, 2) uint64: block offset in the file, offset inside the decompressed block."""
        if self._marks_array is not None:
            return self._marks_array
        return np.array(self._marks, dtype=np.uint64).reshape(-1, 2)

    @property
    def uncompressed_size(self) -> int:
        return self._hasher.size

    @property
    def uncompressed_hash(self) -> bytes:
        """checksums.txt hash of the uncompressed stream."""
        return self._hasher.digest()

    @property
    def compressed_size(self) -> int:
        """Bytes of blocks flushed so far (the whole file after finish())."""
        return self._compressed_size

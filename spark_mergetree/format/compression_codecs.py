"""Compression codecs of MergeTree columns: what each is (its method byte, its parameters, the column
types it takes), how a `CODEC(...)` clause or the `codec` setting names it, and how it compresses a
block's payload. Blocks themselves (header, checksum, reading, the stream writer) are
compression.py's; the payload kernels of the transform codecs are codecs.py's. See
format_spec/blocks.md and format_spec/codecs.md.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import re
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace

import lz4.block
import numpy as np
import zstandard

from spark_mergetree.errors import InvalidOptionError, UnsupportedError
from spark_mergetree.format import codecs
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

METHOD_NONE = 0x02
METHOD_LZ4 = 0x82
METHOD_ZSTD = 0x90
# What follows a block's checksum, and frames each stage of a codec chain: method, sizes.
HEADER_SIZE = 9  # method byte + compressed size + decompressed size
BLOCK_HEADER = struct.Struct("<BII")

DEFAULT_ZSTD_LEVEL = 1

METHOD_MULTIPLE = 0x91
METHOD_DELTA = 0x92
METHOD_T64 = 0x93
METHOD_DOUBLE_DELTA = 0x94
METHOD_GORILLA = 0x95
METHOD_FPC = 0x98
METHOD_GCD = 0x9A
# Method bytes this version decodes (LZ4HC blocks carry the LZ4 byte).
METHOD_NAMES = {
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
TRANSFORM_DECODERS = {
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
            block = BLOCK_HEADER.pack(codec.method, HEADER_SIZE + len(payload), len(block)) + payload
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


SYSTEM_LZ4 = _load_system_lz4()


def _lz4_compress(data: bytes | bytearray | memoryview) -> bytes:
    if SYSTEM_LZ4 is None:
        return lz4.block.compress(data, mode="default", store_size=False)
    return bytes(lz4_compress_into("LZ4", data, 0, SYSTEM_LZ4.LZ4_compress_default)[0])


def _lz4hc_compress(data: bytes | bytearray | memoryview, level: int) -> bytes:
    if SYSTEM_LZ4 is None:
        return lz4.block.compress(data, mode="high_compression", compression=level, store_size=False)
    return bytes(lz4_compress_into("LZ4HC", data, 0, lambda *args: SYSTEM_LZ4.LZ4_compress_HC(*args, level))[0])


def lz4_compress_into(name: str, data: bytes | bytearray | memoryview, offset: int,
                     compress: Callable[..., int]) -> tuple[memoryview, bytearray]:
    """Compress `data` into a new buffer at `offset` (room left for a block's checksum and header);
    returns the payload's view and the buffer, cut to end with the payload."""
    source = np.frombuffer(data, np.uint8)
    capacity = SYSTEM_LZ4.LZ4_compressBound(len(source))  # type: ignore[union-attr]
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


def zstd_decompressor() -> zstandard.ZstdDecompressor:
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
        return dt.name in ("Float32", "Float64", "BFloat16")
    if isinstance(dt, (Nullable, Array)):
        return _has_float(dt.inner)
    if isinstance(dt, Tuple):
        return any(_has_float(element) for element in dt.elements)
    return False

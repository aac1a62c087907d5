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
from dataclasses import dataclass

import lz4.block
import numpy as np
import zstandard

from spark_mergetree.errors import CorruptPartError, InvalidOptionError, UnsupportedError
from spark_mergetree.format import codecs
from spark_mergetree.format.cityhash import FileHasher, cityhash128

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
VALID_CODECS = ("NONE, LZ4, LZ4HC, LZ4HC(level) with level 0..12 (0: the default, 9), ZSTD, ZSTD(level) with "
                "level 1..22, optionally wrapped as CODEC(...)")


@dataclass(frozen=True)
class Codec:
    """One compression codec with its parameters; ``level`` is only meaningful for ZSTD and LZ4HC.

    LZ4HC spends more time to find longer matches; its blocks are ordinary LZ4 blocks and carry
    LZ4's method byte, so every LZ4 reader (ClickHouse's and ours) reads them."""

    name: str
    method: int
    level: int | None = None

    @property
    def setting(self) -> str:
        """The codec as the `codec` setting spells it (e.g. ``ZSTD(3)``)."""
        return self.name if self.level is None else f"{self.name}({self.level})"

    @property
    def text(self) -> str:
        """ClickHouse's spelling, as in default_compression_codec.txt (e.g. ``CODEC(ZSTD(3))``)."""
        return f"CODEC({self.setting})"

    def compress(self, data: bytes | bytearray | memoryview) -> bytes:
        """The block payload for ``data`` (no header)."""
        if self.name == "LZ4HC":
            return _lz4hc_compress(data, self.level or DEFAULT_LZ4HC_LEVEL)
        if self.method == METHOD_LZ4:
            return _lz4_compress(data)
        if self.method == METHOD_ZSTD:
            return _zstd_compressor(self.level or DEFAULT_ZSTD_LEVEL).compress(data)
        return bytes(data)


def _load_system_lz4() -> ctypes.CDLL | None:
    # The lz4 package's compressor emits different (equally valid) LZ4 sequences than the liblz4
    # build ClickHouse links; the system liblz4 reproduces ClickHouse's blocks byte for byte, which
    # keeps compressed sizes and therefore mark offsets identical to ClickHouse's.
    name = ctypes.util.find_library("lz4")
    if name is None:
        return None
    try:
        library = ctypes.CDLL(name)
        library.LZ4_compress_default.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int, ctypes.c_int]
        library.LZ4_compress_default.restype = ctypes.c_int
        library.LZ4_compressBound.argtypes = [ctypes.c_int]
        library.LZ4_compressBound.restype = ctypes.c_int
        library.LZ4_compress_HC.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int, ctypes.c_int, ctypes.c_int]
        library.LZ4_compress_HC.restype = ctypes.c_int
    except (OSError, AttributeError):
        return None
    return library


_system_lz4 = _load_system_lz4()


def _lz4_compress(data: bytes | bytearray | memoryview) -> bytes:
    if _system_lz4 is None:
        return lz4.block.compress(data, mode="default", store_size=False)
    return _system_lz4_call("LZ4", data, _system_lz4.LZ4_compress_default)


def _lz4hc_compress(data: bytes | bytearray | memoryview, level: int) -> bytes:
    if _system_lz4 is None:
        return lz4.block.compress(data, mode="high_compression", compression=level, store_size=False)
    return _system_lz4_call("LZ4HC", data, lambda *args: _system_lz4.LZ4_compress_HC(*args, level))


def _system_lz4_call(name: str, data: bytes | bytearray | memoryview, compress: Callable[..., int]) -> bytes:
    source = data if isinstance(data, bytes) else bytes(data)
    capacity = _system_lz4.LZ4_compressBound(len(source))  # type: ignore[union-attr]
    target = ctypes.create_string_buffer(capacity)
    written = compress(source, target, len(source), capacity)
    if written <= 0:
        raise InvalidOptionError(f"{name} cannot compress a block of {len(source)} bytes")
    return ctypes.string_at(target, written)


NONE = Codec("NONE", METHOD_NONE)
LZ4 = Codec("LZ4", METHOD_LZ4)


def LZ4HC(level: int | None = None) -> Codec:  # noqa: N802 - mirrors ClickHouse's codec name
    """The LZ4HC codec at ``level`` (None or 0: the default level, 9)."""
    if level is not None and not 0 <= level <= MAX_LZ4HC_LEVEL:
        raise InvalidOptionError(f"LZ4HC level must be between 0 and {MAX_LZ4HC_LEVEL}, got {level}; valid codecs: "
                                 f"{VALID_CODECS}")
    return Codec("LZ4HC", METHOD_LZ4, level)


def ZSTD(level: int = DEFAULT_ZSTD_LEVEL) -> Codec:  # noqa: N802 - mirrors ClickHouse's codec name
    """The ZSTD codec at ``level`` (ClickHouse's default level is 1)."""
    if not 1 <= level <= 22:
        raise InvalidOptionError(f"ZSTD level must be between 1 and 22, got {level}; valid codecs: {VALID_CODECS}")
    return Codec("ZSTD", METHOD_ZSTD, level)


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


def _zstd_decompressor() -> zstandard.ZstdDecompressor:
    decompressor: zstandard.ZstdDecompressor | None = getattr(_zstd_local, "decompressor", None)
    if decompressor is None:
        decompressor = _zstd_local.decompressor = zstandard.ZstdDecompressor()
    return decompressor


_CODEC_TEXT = re.compile(r"^\s*(?:CODEC\s*\(\s*(?P<inner>.*?)\s*\)|(?P<bare>.*?))\s*$", re.IGNORECASE | re.DOTALL)
_CODEC_CALL = re.compile(r"^(?P<name>[A-Za-z0-9]+)\s*(?:\(\s*(?P<arg>[^()]*?)\s*\))?$")


def parse_codec(text: str) -> Codec:
    """Parse ``NONE``, ``LZ4``, ``LZ4HC``, ``LZ4HC(12)``, ``ZSTD``, ``ZSTD(3)`` or any of them wrapped
    in ``CODEC(...)``: the one check of a codec, for table settings and Spark's `codec` option alike."""
    if not isinstance(text, str):
        raise InvalidOptionError(f"compression codec must be a string, got {text!r}; valid codecs: {VALID_CODECS}")
    outer = _CODEC_TEXT.match(text)
    inner = (outer.group("inner") if outer.group("inner") is not None else outer.group("bare")) if outer else ""
    call = _CODEC_CALL.match(inner)
    if call is None:
        raise InvalidOptionError(f"unknown compression codec {text!r}; valid codecs: {VALID_CODECS}")
    name, argument = call.group("name").upper(), call.group("arg")
    if name in ("ZSTD", "LZ4HC"):
        if argument is None or argument == "":
            return ZSTD() if name == "ZSTD" else LZ4HC()
        if not re.fullmatch(r"[0-9]+", argument):
            raise InvalidOptionError(f"bad {name} level in codec {text!r}; valid codecs: {VALID_CODECS}")
        return ZSTD(int(argument)) if name == "ZSTD" else LZ4HC(int(argument))
    if name in ("LZ4", "NONE") and argument is None:
        return LZ4 if name == "LZ4" else NONE
    raise InvalidOptionError(f"unknown compression codec {text!r}; valid codecs: {VALID_CODECS}")


def compress_block(codec: Codec, data: bytes | bytearray | memoryview) -> bytes:
    """One complete block (checksum, header, payload) holding ``data``."""
    if len(data) > MAX_BLOCK_SIZE:
        raise InvalidOptionError(f"a compressed block holds at most {MAX_BLOCK_SIZE} bytes, got {len(data)}")
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
        codec: Codec = LZ4,
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
        if self._final_mark is not None:
            raise InvalidOptionError("write_granule() after finish()")
        mark = self._current_mark()
        self._marks.append(mark)
        self.write(chunk)
        return mark

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

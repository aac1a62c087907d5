"""Compressed blocks of MergeTree files: the block header and checksum, writing and reading.

A block is ``checksum(16) | method(1) | compressed_size(UInt32 LE) | decompressed_size(UInt32 LE) |
payload``. ``compressed_size`` counts the 9 header bytes after the checksum plus the payload; the
checksum is CityHash128 of those 9 bytes and the payload. The codecs that make payloads are
compression_codecs.py's. See format_spec/blocks.md.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import BinaryIO

import lz4.block
import numpy as np
import zstandard

from spark_mergetree.errors import CorruptPartError, InvalidOptionError, UnsupportedError
from spark_mergetree.fileops import scratch
from spark_mergetree.format.cityhash import FileHasher, cityhash128
from spark_mergetree.format.compression_codecs import (
    BLOCK_HEADER,
    HEADER_SIZE,
    LZ4,
    METHOD_LZ4,
    METHOD_MULTIPLE,
    METHOD_NAMES,
    METHOD_NONE,
    METHOD_ZSTD,
    SYSTEM_LZ4,
    TRANSFORM_DECODERS,
    UNSUPPORTED_METHODS,
    Codec,
    CodecChain,
    lz4_compress_into,
    zstd_decompressor,
)

CHECKSUM_SIZE = 16
# Compressed blocks written to a sink are given to the file hash in batches of at least this many bytes.
HASH_BATCH_BYTES = 1 << 20
BLOCK_OVERHEAD = CHECKSUM_SIZE + HEADER_SIZE
DEFAULT_MIN_COMPRESS_BLOCK_SIZE = 65536
DEFAULT_MAX_COMPRESS_BLOCK_SIZE = 1048576

MAX_BLOCK_SIZE = 1 << 30


def _lz4_block(data: bytes | bytearray | memoryview) -> bytearray:
    """compress_block(LZ4, data), built in one buffer."""
    payload, block = lz4_compress_into("LZ4", data, BLOCK_OVERHEAD, SYSTEM_LZ4.LZ4_compress_default)  # type: ignore[union-attr]
    written = len(payload)
    del payload
    BLOCK_HEADER.pack_into(block, CHECKSUM_SIZE, METHOD_LZ4, HEADER_SIZE + written, len(data))
    block[:CHECKSUM_SIZE] = cityhash128(memoryview(block)[CHECKSUM_SIZE:])
    return block


def _lz4_blocks(view: memoryview, block_starts: list[int], reserve: int) -> tuple[np.ndarray, int, list[int]]:
    """compress_block(LZ4, ...) of view[block_starts[i]:block_starts[i + 1]] for each i, back to back
    in one new buffer with `reserve` bytes of room left after them; returns the buffer, how many
    bytes the blocks take, and where each block starts. One buffer for a whole stream: a buffer per
    block and joining them would copy every compressed byte once more, holding the GIL. numpy's
    buffer is neither zero-filled nor faulted in page by page (it asks for huge pages)."""
    sizes = np.diff(np.asarray(block_starts, np.int64)).tolist()
    bound = SYSTEM_LZ4.LZ4_compressBound
    out = np.empty(sum(BLOCK_OVERHEAD + bound(size) for size in sizes) + reserve, np.uint8)
    source = np.frombuffer(view, np.uint8)
    source_address, target_address = source.ctypes.data, out.ctypes.data
    starts = []
    position = 0
    for begin, size in zip(block_starts, sizes):
        capacity = bound(size)
        written = SYSTEM_LZ4.LZ4_compress_default(source_address + begin, target_address + position + BLOCK_OVERHEAD,
                                                  size, capacity)
        if written <= 0:
            raise InvalidOptionError(f"LZ4 cannot compress a block of {size} bytes")
        BLOCK_HEADER.pack_into(out, position + CHECKSUM_SIZE, METHOD_LZ4, HEADER_SIZE + written, size)
        end = position + BLOCK_OVERHEAD + written
        out[position:position + CHECKSUM_SIZE] = np.frombuffer(cityhash128(out[position + CHECKSUM_SIZE:end]), np.uint8)
        starts.append(position)
        position = end
    return out, position, starts


def compress_block(codec: Codec | CodecChain, data: bytes | bytearray | memoryview) -> bytes | bytearray:
    """One complete block (checksum, header, payload) holding ``data``."""
    if len(data) > MAX_BLOCK_SIZE:
        raise InvalidOptionError(f"a compressed block holds at most {MAX_BLOCK_SIZE} bytes, got {len(data)}")
    if codec == LZ4 and SYSTEM_LZ4 is not None:
        return _lz4_block(data)
    payload = codec.compress(data)
    body = BLOCK_HEADER.pack(codec.method, HEADER_SIZE + len(payload), len(data)) + payload
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
    method, compressed_size, decompressed_size = BLOCK_HEADER.unpack_from(view, offset + CHECKSUM_SIZE)
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
                               f"decompress (supported: {', '.join(METHOD_NAMES.values())})")
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
        return chain is None or all(m in METHOD_NAMES and m != METHOD_MULTIPLE for m in chain)
    return method in METHOD_NAMES


def _codec_description(method: int, payload: memoryview) -> str:
    """How ClickHouse would spell the codec of an intact block we cannot decode, with its method byte.

    A chain (``CODEC(Delta, ZSTD)``) is method Multiple: its payload starts with the number of codecs
    and their method bytes, in the order they were applied."""
    chain = _chain_methods(payload) if method == METHOD_MULTIPLE else None
    if chain is not None:
        names = [METHOD_NAMES.get(b) or UNSUPPORTED_METHODS.get(b) or f"0x{b:02x}" for b in chain]
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
            data = zstd_decompressor().decompress(payload, max_output_size=size)
        elif method == METHOD_NONE:
            data = payload
        elif method == METHOD_MULTIPLE:
            data = _decode_chain(payload, size, where)
        else:
            data = TRANSFORM_DECODERS[method](payload, size, where)
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
        name = METHOD_NAMES.get(chain[stage], f"0x{chain[stage]:02x}")
        view = memoryview(data).cast("B") if not isinstance(data, memoryview) else data
        if len(view) < HEADER_SIZE:
            raise CorruptPartError(f"{where}: stage {stage + 1} of the codec chain ({name}) has no header")
        method, compressed_size, decompressed_size = BLOCK_HEADER.unpack_from(view, 0)
        if method != chain[stage] or compressed_size != len(view):
            raise CorruptPartError(f"{where}: stage {stage + 1} of the codec chain should be {name} of {len(view)} "
                                   f"bytes, its header says method 0x{method:02x} of {compressed_size} bytes")
        data = _decode_payload(method, view[HEADER_SIZE:], decompressed_size, f"{where} (chain stage {stage + 1}: {name})")
    return data


def decompress_block(block: BlockInfo, path: str) -> bytes | memoryview | np.ndarray:
    """The decompressed bytes of a verified block (a view of the file for NONE blocks)."""
    return _decode_payload(block.method, block.payload, block.decompressed_size,
                           f"{path}: {METHOD_NAMES[block.method]} block at byte offset {block.offset}")


def _load_system_decompressors() -> tuple[ctypes.CDLL | None, ctypes.CDLL | None]:
    # Calling liblz4/libzstd through ctypes lets blocks decompress straight into one output buffer
    # (no per-block objects, no final join) and releases the GIL, so blocks can go to threads.
    lz4_library = SYSTEM_LZ4
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
# Up to this many decompressed bytes a lone block is decoded by one call (decompress_block).
_SMALL_BLOCK = 1 << 16


def _pool() -> ThreadPoolExecutor:
    global _decompress_pool
    if _decompress_pool is None:
        _decompress_pool = ThreadPoolExecutor(max_workers=min(4, os.cpu_count() or 1), thread_name_prefix="decompress")
    return _decompress_pool


def _decompress_blocks_into(view: memoryview, blocks: list[BlockInfo], path: str) -> np.ndarray:
    """Decompress verified blocks back to back into one new uint8 array (a `scratch` buffer: every
    byte is written by a block)."""
    if len(blocks) == 1 and blocks[0].decompressed_size <= _SMALL_BLOCK:
        # One small block (a part's metadata files, its compact marks): the buffer set-up below
        # would cost more than decompressing it.
        return np.frombuffer(decompress_block(blocks[0], path), np.uint8)
    targets = np.zeros(len(blocks) + 1, dtype=np.int64)
    np.cumsum([block.decompressed_size for block in blocks], out=targets[1:])
    target = np.frombuffer(scratch(int(targets[-1])), np.uint8)
    if not blocks:
        return target
    source = np.frombuffer(view, dtype=np.uint8)
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
                    f"{path}: cannot decompress {METHOD_NAMES[block.method]} block at byte offset {block.offset} "
                    f"into the {size} bytes its header announces"
                )

    count = len(blocks)
    workers = min(4, os.cpu_count() or 1)
    if targets[-1] >= _PARALLEL_THRESHOLD and workers > 1 and count > 1:
        step = -(-count // workers)
        list(_pool().map(decode, [range(start, min(start + step, count)) for start in range(0, count, step)]))
    else:
        decode(range(count))
    return target


def decompress_all(buf: bytes | bytearray | memoryview, path: str) -> memoryview:
    """The whole decompressed stream of a compressed file (a view of new bytes), every block verified."""
    view = memoryview(buf).cast("B")
    return memoryview(_decompress_blocks_into(view, list(iter_blocks(view, path)), str(path)))


def decompress_range(
    buf: bytes | bytearray | memoryview,
    path: str,
    start_mark: tuple[int, int] = (0, 0),
    end_mark: tuple[int, int] | None = None,
) -> memoryview:
    """Decompressed bytes from ``start_mark`` up to (not including) ``end_mark``; ``None`` means to the end.

    A mark is (offset of a block in the file, offset inside that block's decompressed bytes).
    """
    view = memoryview(buf).cast("B")
    blocks, head, tail = _range_blocks(view, str(path), start_mark, end_mark)
    if not blocks:
        return memoryview(b"")
    out = _decompress_blocks_into(view, blocks, str(path))
    # The bytes wanted, as a view: nothing is copied or moved.
    return memoryview(out[head:len(out) - tail])


def decompress_ranges(
    buf: bytes | bytearray | memoryview,
    path: str,
    ranges: Sequence[tuple[tuple[int, int], tuple[int, int] | None]],
) -> memoryview:
    """The decompressed bytes of several mark ranges (as `decompress_range` takes them), one after
    the other: a Compact part's column is a range per granule, each usually whole blocks. All their
    blocks are decompressed by one call into one buffer, which is returned as it is when every range
    is whole blocks; otherwise the wanted bytes of each range are joined (one copy)."""
    view = memoryview(buf).cast("B")
    found = [_range_blocks(view, str(path), start, end) for start, end in ranges]
    blocks = [block for range_blocks, _, _ in found for block in range_blocks]
    if not blocks:
        return memoryview(b"")
    out = _decompress_blocks_into(view, blocks, str(path))
    if all(head == 0 and tail == 0 for _, head, tail in found):
        return memoryview(out)
    pieces = []
    at = 0
    for range_blocks, head, tail in found:
        size = sum(block.decompressed_size for block in range_blocks)
        if range_blocks:
            pieces.append(out[at + head:at + size - tail])
        at += size
    return memoryview(np.concatenate(pieces) if pieces else b"")


def _range_blocks(view: memoryview, path: str, start_mark: tuple[int, int],
                  end_mark: tuple[int, int] | None) -> tuple[list[BlockInfo], int, int]:
    """The verified blocks a mark range covers, the bytes of the first block before the range, and
    the bytes of the last block after it."""
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
        block = _read_block_at(view, offset, path)
        if block.end > end_block and offset != end_block:
            raise CorruptPartError(f"{path}: mark {end_mark} does not point at a block boundary (block at {offset})")
        blocks.append(block)
        if offset == end_block:
            break
        offset = block.end
    if not blocks:
        return blocks, 0, 0
    first, last = blocks[0], blocks[-1]
    keep_tail = end_inner if last.offset == end_block else last.decompressed_size
    for mark_offset, block in ((start_inner, first), (keep_tail, last)):
        if mark_offset > block.decompressed_size:
            raise CorruptPartError(
                f"{path}: mark offset {mark_offset} is beyond the {block.decompressed_size} bytes "
                f"of the block at byte offset {block.offset}"
            )
    return blocks, start_inner, last.decompressed_size - keep_tail


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
        sink: BinaryIO | None = None,
    ) -> None:
        """`sink`: a file the compressed blocks are written to as they are made (getvalue() is then
        unavailable); without one they are kept in memory."""
        if not 0 < max_compress_block_size <= MAX_BLOCK_SIZE:
            raise InvalidOptionError(
                f"max_compress_block_size must be between 1 and {MAX_BLOCK_SIZE}, got {max_compress_block_size}"
            )
        if min_compress_block_size < 0:
            raise InvalidOptionError(f"min_compress_block_size must be >= 0, got {min_compress_block_size}")
        self.codec = codec
        self.min_compress_block_size = min_compress_block_size
        self.max_compress_block_size = max_compress_block_size
        self._blocks: list[bytes | bytearray | memoryview] = []
        self._compressed_size = 0
        self._buffer = bytearray()
        self._marks: list[tuple[int, int]] = []
        self._mark_arrays: list[np.ndarray] = []  # appended by append_granules
        self._final_mark: tuple[int, int] | None = None
        self._hasher = FileHasher()
        self._file_hasher = FileHasher()
        self._unhashed: list[bytes | bytearray] = []  # blocks written to the sink, not hashed yet
        self._unhashed_size = 0
        self._sink = sink
        self._value: bytes | memoryview | None = None
        # The file's last bytes may sit in a numpy buffer with room left (`_lz4_blocks`): the first
        # `_room_used` bytes of `_room`, after everything in `_blocks`.
        self._room: np.ndarray | None = None
        self._room_used = 0

    def _emit(self, block: bytes) -> None:
        if self._sink is None:
            self._keep(block)
        else:
            self._sink.write(block)
            # Blocks are hashed a batch at a time: a block is often under 64 KiB, and the file hash
            # runs faster, and without the GIL, over longer runs (cityhash.COMPILED_CHAIN_BYTES).
            # Without a sink the whole file is hashed once it is joined (getvalue).
            self._unhashed.append(block)
            self._unhashed_size += len(block)
            if self._unhashed_size >= HASH_BATCH_BYTES:
                self._hash_blocks()
        self._compressed_size += len(block)

    def _keep(self, blocks: bytes | bytearray) -> None:
        if self._room is not None:
            if len(self._room) - self._room_used >= len(blocks):
                self._room[self._room_used:self._room_used + len(blocks)] = np.frombuffer(blocks, np.uint8)
                self._room_used += len(blocks)
                return
            self._close_room()
        if self._blocks and isinstance(self._blocks[-1], bytearray):
            self._blocks[-1] += blocks  # grows in place mostly: no join of the whole file later
        else:
            self._blocks.append(blocks)

    def _close_room(self) -> None:
        if self._room is not None:
            self._blocks.append(self._room[:self._room_used].data)
            self._room = None

    def _hash_blocks(self) -> None:
        if self._sink is None:
            if self._file_hasher.size < self._compressed_size:
                self._file_hasher.update(self.getvalue())
        elif self._unhashed:
            self._file_hasher.update(self._unhashed[0] if len(self._unhashed) == 1 else b"".join(self._unhashed))
            self._unhashed = []
            self._unhashed_size = 0

    def _flush(self) -> None:
        if self._buffer:
            self._emit(compress_block(self.codec, self._buffer))
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
        if self._final_mark is not None or self._mark_arrays:
            raise InvalidOptionError("write_granule() after finish() or append_granules()")
        mark = self._current_mark()
        self._marks.append(mark)
        self.write(chunk)
        return mark

    def write_granules(self, data: bytes | bytearray | memoryview, offsets: np.ndarray) -> None:
        """A whole stream at once: `data[:offsets[0]]` (a stream prefix), then granule g as
        `data[offsets[g]:offsets[g + 1]]` (see `append_granules`)."""
        if self._final_mark is not None or self._buffer or self._blocks or self._marks or self._compressed_size:
            raise InvalidOptionError("write_granules() writes a whole stream into a new writer")
        self.append_granules(data, offsets)

    def append_granules(self, data: bytes | bytearray | memoryview, offsets: np.ndarray) -> None:
        """More of the stream: `data[:offsets[0]]` continues the current granule (or is the stream's
        prefix), then granule g is `data[offsets[g]:offsets[g + 1]]`. The same blocks and marks as
        write() and write_granule() per granule, found one block at a time (a block ends at the first
        granule start at least min_compress_block_size bytes in if it comes within
        max_compress_block_size, else after max_compress_block_size bytes when more follow), so the
        cost does not grow with granules; a stream may come in any number of calls."""
        if self._final_mark is not None or self._marks:
            raise InvalidOptionError("append_granules() after finish() or write_granule()")
        new = memoryview(data).cast("B")
        if len(offsets) and int(offsets[-1]) != len(new):
            raise InvalidOptionError(f"granule offsets end at {int(offsets[-1])}, the stream has {len(new)} bytes")
        low, high = self.min_compress_block_size, self.max_compress_block_size
        if high < low:  # a granule may start at a full buffer that is not flushed: granule by granule
            bounds = np.asarray(offsets, np.int64).tolist()
            self.write(new[: bounds[0]] if bounds else new)
            for begin, stop in zip(bounds[:-1], bounds[1:]):
                self.write_granule(new[begin:stop])
            self._mark_arrays.append(np.array(self._marks, dtype=np.uint64).reshape(-1, 2))
            self._marks = []
            return
        self._hasher.update(new)
        # The buffer starts a block: cut blocks over buffer + new bytes.
        held = len(self._buffer)
        if held:
            self._buffer += new  # one copy of the new bytes, after those held
            view = memoryview(self._buffer)
        else:
            view = new
        end = len(view)
        starts = np.asarray(offsets[:-1], dtype=np.int64) + held
        block_starts = [0]
        position = 0
        while position < end:
            i = int(np.searchsorted(starts, position + max(low, 1)))
            if i < len(starts) and int(starts[i]) <= position + high:
                position = int(starts[i])  # flushed when that granule starts
            elif position + high < end:
                position += high  # a full buffer, flushed when more bytes come
            else:
                break  # the last block, flushed by a later call or finish()
            block_starts.append(position)
        compressed_offsets = []
        if self._sink is None and self.codec == LZ4 and SYSTEM_LZ4 is not None and len(block_starts) > 1:
            # Room for the last block too, which stays buffered until a later call or finish().
            tail = end - block_starts[-1]
            room, used, block_offsets = _lz4_blocks(view, block_starts,
                                                    BLOCK_OVERHEAD + SYSTEM_LZ4.LZ4_compressBound(tail))
            compressed_offsets = [self._compressed_size + offset for offset in block_offsets]
            self._close_room()
            self._room, self._room_used = room, used
            self._compressed_size += used
        else:
            for begin, stop in zip(block_starts[:-1], block_starts[1:], strict=True):
                compressed_offsets.append(self._compressed_size)
                self._emit(compress_block(self.codec, view[begin:stop]))
        # The block from the last cut stays in the buffer until a cut (see _current_mark).
        compressed_offsets.append(self._compressed_size)
        self._buffer = bytearray(view[block_starts[-1]:end])  # a new buffer: `view` may be of the old one
        block_index = np.searchsorted(np.asarray(block_starts, np.int64), starts, side="right") - 1
        self._mark_arrays.append(
            np.stack([np.asarray(compressed_offsets, np.uint64)[block_index],
                      (starts - np.asarray(block_starts, np.int64)[block_index]).astype(np.uint64)], axis=1)
            if len(starts) else np.zeros((0, 2), np.uint64))

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

    def getvalue(self) -> bytes | memoryview:
        """The compressed file (call after finish())."""
        if self._final_mark is None:
            raise InvalidOptionError("getvalue() before finish()")
        if self._sink is not None:
            raise InvalidOptionError("getvalue() of a writer with a sink")
        if self._value is None:
            self._close_room()
            # One buffer already (a whole stream compressed at once) is not copied again.
            value = self._blocks[0] if len(self._blocks) == 1 else b"".join(self._blocks)
            self._value = memoryview(value) if isinstance(value, bytearray) else value
            self._blocks = [self._value]
        return self._value

    @property
    def marks(self) -> np.ndarray:
        """(n_granules, 2) uint64: block offset in the file, offset inside the decompressed block."""
        if self._mark_arrays:
            return np.concatenate(self._mark_arrays) if len(self._mark_arrays) > 1 else self._mark_arrays[0]
        return np.array(self._marks, dtype=np.uint64).reshape(-1, 2)

    @property
    def uncompressed_size(self) -> int:
        return self._hasher.size

    @property
    def uncompressed_hash(self) -> bytes:
        """checksums.txt hash of the uncompressed stream."""
        return self._hasher.digest()

    @property
    def file_hash(self) -> bytes:
        """checksums.txt hash of the compressed file (after finish())."""
        self._hash_blocks()
        return self._file_hasher.digest()

    @property
    def compressed_size(self) -> int:
        """Bytes of blocks flushed so far (the whole file after finish())."""
        return self._compressed_size


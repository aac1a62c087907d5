"""CityHash128 v1.0.2 as ClickHouse uses it: block checksums, the seeded variant and file hashes.

ClickHouse stores a 128-bit CityHash as two little-endian UInt64, the low half first. The
``clickhouse-cityhash`` package computes the unseeded hash correctly but its Python wrapper ignores
the seed of the seeded variant. File hashes (a chain of seeded block hashes) call the extension's
C++ ``CityHash128WithSeed`` through ctypes; ``cityhash128_with_seed`` and the fallback derive the
seeded hash from the unseeded one instead: in CityHash v1.0.2, for any input of at least 16 bytes,
``CityHash128(s)`` equals ``CityHash128WithSeed(s[16:], (Fetch64(s) ^ k3, Fetch64(s + 8)))``, so
prefixing the data with the seed (first half xor k3) yields the seeded hash of the data. The tests
check that the two ways agree.

The package's Python function keeps a reference to every buffer other than `bytes` it is given
(it never releases the buffer it requests), so hashing a memoryview or a numpy array would pin
that memory for the life of the process. Its C++ `CityHash128(const char*, size_t)` is called
through ctypes instead (no copy, and the GIL is released while it runs); `bytes` are copied for
the Python function only where that symbol cannot be found.
"""

from __future__ import annotations

import ctypes
import struct
import sys
from collections.abc import Callable

import numpy as np
from clickhouse_cityhash import cityhash as _extension
from clickhouse_cityhash.cityhash import CityHash128 as _package_hash

from spark_mergetree.errors import InvalidOptionError

__all__ = [
    "HASHING_BLOCK_SIZE",
    "ZERO_HASH",
    "cityhash128",
    "cityhash128_int",
    "cityhash128_with_seed",
    "FileHasher",
    "file_hash",
]

# ClickHouse's HashingWriteBuffer hashes files in blocks of this size (DBMS_DEFAULT_HASHING_BLOCK_SIZE).
HASHING_BLOCK_SIZE = 2048
ZERO_HASH = bytes(16)
# From this many bytes of whole blocks in one update on, the compiled chain hashes them (importing
# numba, about half a second once per process); fewer by a ctypes call per block. Once the chain is
# loaded, from LOADED_CHAIN_BYTES on: a merge's updates are often half a MiB, and a ctypes call per
# 2 KiB block holds the GIL that the threads writing the other columns wait for.
COMPILED_CHAIN_BYTES = 512 * HASHING_BLOCK_SIZE
LOADED_CHAIN_BYTES = 32 * HASHING_BLOCK_SIZE
_COMPILED_MODULE = "spark_mergetree.format.cityhash_compiled"

_K3 = 0xC949D7C7509E6557
_MASK64 = (1 << 64) - 1
_pack_halves = struct.Struct("<QQ").pack
_unpack_halves = struct.Struct("<QQ").unpack


class _Halves(ctypes.Structure):
    """CityHash's uint128: std::pair<uint64, uint64> (first, second), returned in registers."""

    _fields_ = [("first", ctypes.c_uint64), ("second", ctypes.c_uint64)]


def _c_functions() -> tuple[Callable[..., _Halves] | None, Callable[..., _Halves] | None]:
    """The extension's C++ CityHash128(const char*, size_t) and CityHash128WithSeed(const char*,
    size_t, uint128) (its seeded C++ function is right; only its Python wrapper drops the seed)."""
    try:
        library = ctypes.CDLL(_extension.__file__)
        plain = library._Z11CityHash128PKcm
        seeded = library._Z19CityHash128WithSeedPKcmSt4pairImmE
    except (OSError, AttributeError):
        return None, None
    plain.restype = seeded.restype = _Halves
    plain.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    seeded.argtypes = [ctypes.c_void_p, ctypes.c_size_t, _Halves]
    return plain, seeded


_C_HASH, _C_SEEDED = _c_functions()


def cityhash128_int(data: bytes | bytearray | memoryview | np.ndarray) -> int:
    """CityHash128 v1.0.2 of ``data`` as the integer ``first << 64 | second``; holds no reference to it."""
    if _C_HASH is None:
        return int(_package_hash(data if isinstance(data, bytes) else bytes(data)))
    if isinstance(data, bytes):
        halves = _C_HASH(data, len(data))
    else:
        array = np.frombuffer(data, dtype=np.uint8)  # released when the array goes, unlike the package's
        halves = _C_HASH(array.ctypes.data if array.size else None, array.size)
    return int(halves.first) << 64 | int(halves.second)


_city_hash_128_int = cityhash128_int


def _int_to_bytes(value: int) -> bytes:
    # The package returns first << 64 | second; first is the low half ClickHouse writes first.
    return _pack_halves(value >> 64, value & _MASK64)


def cityhash128(data: bytes | bytearray | memoryview) -> bytes:
    """CityHash128 v1.0.2 of ``data`` as the 16 bytes ClickHouse stores (low UInt64 LE, high UInt64 LE)."""
    return _int_to_bytes(_city_hash_128_int(data))


def _seed_prefix(seed: bytes | bytearray | memoryview) -> bytes:
    if len(seed) != 16:
        raise InvalidOptionError(f"seed must be 16 bytes (low UInt64 LE, high UInt64 LE), got {len(seed)} bytes")
    low, high = _unpack_halves(seed)
    return _pack_halves(low ^ _K3, high)


def cityhash128_with_seed(data: bytes | bytearray | memoryview, seed: bytes | bytearray | memoryview) -> bytes:
    """CityHash128WithSeed v1.0.2 of ``data``; ``seed`` and the result are 16 bytes in ClickHouse's layout."""
    return _int_to_bytes(_city_hash_128_int(_seed_prefix(seed) + bytes(data)))


class FileHasher:
    """Incremental hash of a file as checksums.txt records it (ClickHouse's HashingWriteBuffer).

    The stream is cut into 2048-byte blocks; each full block is hashed with the previous block's
    hash as seed, starting from seed zero. A trailing partial block is hashed the same way when the
    digest is taken, without becoming the new state; an empty stream hashes to 16 zero bytes.
    """

    __slots__ = ("_state", "_block", "_pending", "size")

    def __init__(self) -> None:
        self._state: bytes = ZERO_HASH
        # One reusable buffer: seed prefix in bytes 0..16, block data after it.
        self._block = bytearray(16 + HASHING_BLOCK_SIZE)
        self._pending = 0  # bytes of an incomplete block held in self._block[16:]
        self.size = 0

    def _hash_block_at(self, view: memoryview) -> None:
        # view = 16 free bytes for the seed followed by exactly one block.
        view[:16] = _seed_prefix(self._state)
        self._state = _int_to_bytes(_city_hash_128_int(view))

    def update(self, chunk: bytes | bytearray | memoryview) -> None:
        data = memoryview(chunk).cast("B")
        length = len(data)
        if not length:
            return
        self.size += length
        block = self._block
        position = 0
        if self._pending:
            take = min(HASHING_BLOCK_SIZE - self._pending, length)
            block[16 + self._pending : 16 + self._pending + take] = data[:take]
            self._pending += take
            position = take
            if self._pending < HASHING_BLOCK_SIZE:
                return
            self._hash_block_at(memoryview(block))
            self._pending = 0
        full_end = position + (length - position) // HASHING_BLOCK_SIZE * HASHING_BLOCK_SIZE
        whole = full_end - position
        if whole >= COMPILED_CHAIN_BYTES or (whole >= LOADED_CHAIN_BYTES and _COMPILED_MODULE in sys.modules):
            # One compiled call for the whole chain, without the GIL: a ctypes call per 2 KiB block
            # costs more than the hashing and makes the threads writing a part's columns queue.
            from spark_mergetree.format.cityhash_compiled import chain_blocks

            first, second = chain_blocks(np.frombuffer(data, np.uint8)[position:full_end], HASHING_BLOCK_SIZE,
                                         *_unpack_halves(self._state))
            self._state = _pack_halves(first, second)
        elif full_end > position and _C_SEEDED is not None:
            # One C call per block, straight from the input (~3 GB/s): no copy, no compiler to load.
            array = np.frombuffer(data, np.uint8)
            base = array.ctypes.data
            seed = _Halves(*_unpack_halves(self._state))
            for start in range(position, full_end, HASHING_BLOCK_SIZE):
                seed = _C_SEEDED(base + start, HASHING_BLOCK_SIZE, seed)
            self._state = _pack_halves(seed.first, seed.second)
            del array
        elif full_end > position:
            state = self._state
            # Hash whole blocks from the input: only the 16-byte seed prefix is copied per block.
            buffer = memoryview(block)
            for start in range(position, full_end, HASHING_BLOCK_SIZE):
                low, high = _unpack_halves(state)
                buffer[:16] = _pack_halves(low ^ _K3, high)
                buffer[16:] = data[start : start + HASHING_BLOCK_SIZE]
                value = _city_hash_128_int(buffer)
                state = _pack_halves(value >> 64, value & _MASK64)
            self._state = state
        rest = length - full_end
        if rest:
            block[16 : 16 + rest] = data[full_end:]
            self._pending = rest

    def digest(self) -> bytes:
        """The 16-byte hash of everything written so far (the hasher stays usable)."""
        if not self._pending:
            return self._state
        return _int_to_bytes(
            _city_hash_128_int(_seed_prefix(self._state) + bytes(self._block[16 : 16 + self._pending]))
        )


def file_hash(data: bytes | bytearray | memoryview) -> bytes:
    """The checksums.txt hash of a whole byte string."""
    hasher = FileHasher()
    hasher.update(data)
    return hasher.digest()

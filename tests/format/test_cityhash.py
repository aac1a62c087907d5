"""CityHash128, its seeded variant and the chained file hash, checked against chdb-written parts."""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_mergetree.errors import InvalidOptionError
from spark_mergetree.format.checksums import Checksums
from spark_mergetree.format.cityhash import (
    HASHING_BLOCK_SIZE,
    ZERO_HASH,
    FileHasher,
    cityhash128,
    cityhash128_with_seed,
    file_hash,
)
from tests.format.chdb_util import make_chdb_table, part_dirs, spec_hex


@pytest.fixture(scope="module")
def wide_part(tmp_path_factory):
    # 20000 UInt64 rows: id.bin is ~80 KB, dozens of 2048-byte hashing blocks.
    _, table_dir = make_chdb_table(
        tmp_path_factory.mktemp("cityhash"),
        "CREATE TABLE t (id UInt64, s String) ENGINE = MergeTree ORDER BY id "
        "SETTINGS min_bytes_for_wide_part = 0, compress_marks = 0, compress_primary_key = 0",
        ["INSERT INTO t SELECT number, toString(number * 7) FROM numbers(20000)"],
    )
    return part_dirs(table_dir)[0]


def test_block_checksum_is_unseeded_cityhash128():
    block = spec_hex("blocks.md", "x.bin")
    assert cityhash128(block[16:]) == block[:16]
    assert cityhash128(memoryview(block)[16:]) == block[:16]


def test_file_hashes_equal_checksums_txt(wide_part):
    checksums = Checksums.parse((wide_part / "checksums.txt").read_bytes())
    assert any(entry.file_size > 10 * HASHING_BLOCK_SIZE for entry in checksums.files.values())
    for name, entry in checksums.files.items():
        data = (wide_part / name).read_bytes()
        assert file_hash(data) == entry.file_hash, name
        assert len(data) == entry.file_size


def test_short_file_hash_is_seeded_hash_with_zero_seed(wide_part):
    data = (wide_part / "count.txt").read_bytes()
    assert cityhash128_with_seed(data, ZERO_HASH) == file_hash(data)


def test_seeded_hash_uses_the_seed():
    data = b"granule" * 100
    assert cityhash128_with_seed(data, bytes(16)) != cityhash128_with_seed(data, bytes([1]) + bytes(15))


def test_empty_stream_hashes_to_zero():
    assert FileHasher().digest() == ZERO_HASH
    assert file_hash(b"") == ZERO_HASH


def test_exact_block_is_chained_and_partial_block_is_not_state():
    block = os.urandom(HASHING_BLOCK_SIZE)
    after_one_block = cityhash128_with_seed(block, ZERO_HASH)
    assert file_hash(block) == after_one_block
    assert file_hash(block + b"x") == cityhash128_with_seed(b"x", after_one_block)
    hasher = FileHasher()
    hasher.update(block[:100])
    first = hasher.digest()
    hasher.update(block[100:])
    assert first == cityhash128_with_seed(block[:100], ZERO_HASH)
    assert hasher.digest() == after_one_block
    assert hasher.size == HASHING_BLOCK_SIZE


@settings(max_examples=60, deadline=None)
@given(data=st.binary(max_size=7000), cuts=st.lists(st.integers(min_value=0, max_value=7000), max_size=6))
def test_chunking_does_not_change_the_hash(data, cuts):
    hasher = FileHasher()
    previous = 0
    for cut in sorted(min(cut, len(data)) for cut in cuts):
        hasher.update(data[previous:cut])
        previous = cut
    hasher.update(data[previous:])
    assert hasher.digest() == file_hash(data)
    assert hasher.size == len(data)


def test_bad_seed_length():
    with pytest.raises(InvalidOptionError, match="16 bytes"):
        cityhash128_with_seed(b"abc", b"short")


def test_the_c_seeded_hash_matches_the_derivation_from_the_unseeded_one():
    """File hashes chain the extension's C++ CityHash128WithSeed; cityhash128_with_seed derives the
    seeded hash from the unseeded one. Two independent ways must agree on every length."""
    import struct

    from spark_mergetree.format.cityhash import _C_SEEDED, _Halves

    assert _C_SEEDED is not None
    rng = np.random.default_rng(7)
    for length in list(range(0, 260)) + [1000, 2048, 4096, 5000]:
        data = rng.integers(0, 256, length, dtype=np.uint8)
        seed = bytes(rng.integers(0, 256, 16, dtype=np.uint8))
        got = _C_SEEDED(data.ctypes.data if length else None, length, _Halves(*struct.unpack("<QQ", seed)))
        assert struct.pack("<QQ", got.first, got.second) == cityhash128_with_seed(data.tobytes(), seed), length


def test_long_files_hash_the_same_in_one_update_and_in_short_ones():
    data = np.random.default_rng(3).integers(0, 256, 300_001, dtype=np.uint8).tobytes()
    one_go = file_hash(data)
    hasher = FileHasher()
    for start in range(0, len(data), 1000):  # short updates take the per-block path
        hasher.update(data[start:start + 1000])
    assert hasher.digest() == one_go


def test_compiled_chain_equals_the_per_block_c_calls():
    """Long files are hashed by the compiled chain in one call; the per-block C calls are the
    reference. Also from an unaligned start, and the compiled 128-bit hash alone at every length
    that is a multiple of 8 from 128 on (the long path's tail pieces included)."""
    import struct

    from spark_mergetree.format.cityhash import _C_SEEDED, COMPILED_CHAIN_BYTES, HASHING_BLOCK_SIZE, _Halves
    from spark_mergetree.format.cityhash_compiled import _cityhash128_words

    rng = np.random.default_rng(11)
    for length in range(128, 1200, 8):
        data = rng.integers(0, 256, length, dtype=np.uint8)
        low, high = (int(x) for x in rng.integers(0, 2**63, 2))
        want = _C_SEEDED(data.ctypes.data, length, _Halves(low, high))
        got = _cityhash128_words(data.view("<u8"), 0, length // 8, np.uint64(low), np.uint64(high))
        assert (int(got[0]), int(got[1])) == (want.first, want.second), length
    raw = rng.integers(0, 256, COMPILED_CHAIN_BYTES + 3 * HASHING_BLOCK_SIZE + 1001, dtype=np.uint8).tobytes()
    for data in (raw[:-1], memoryview(raw)[1:]):  # the second starts one byte past the buffer's start
        state = (0, 0)
        whole = len(data) // HASHING_BLOCK_SIZE * HASHING_BLOCK_SIZE
        array = np.frombuffer(data, np.uint8)
        for start in range(0, whole, HASHING_BLOCK_SIZE):
            halves = _C_SEEDED(array.ctypes.data + start, HASHING_BLOCK_SIZE, _Halves(*state))
            state = (halves.first, halves.second)
        tail = struct.pack("<QQ", state[0] ^ 0xC949D7C7509E6557, state[1]) + bytes(data[whole:])
        hasher = FileHasher()
        hasher.update(data)
        assert hasher.digest() == cityhash128(tail)


def test_hashing_keeps_no_reference_to_the_buffer() -> None:
    """The package's own function never releases a buffer it hashes: every memoryview, bytearray or
    numpy array hashed stayed pinned for the life of the process (each read leaked the bytes it
    verified). After hashing, a bytearray can be resized and a numpy array's count is unchanged."""
    import sys

    from spark_mergetree.format.cityhash import FileHasher, cityhash128, cityhash128_int

    data = bytearray(b"block of column bytes" * 200)
    cityhash128(memoryview(data))
    cityhash128_int(data)
    hasher = FileHasher()
    hasher.update(memoryview(data))
    hasher.digest()
    data.extend(b"more")  # BufferError if any export of `data` is still held
    array = np.arange(5000, dtype=np.uint8)
    before = sys.getrefcount(array)
    cityhash128_int(array)
    cityhash128(array.data)
    assert sys.getrefcount(array) == before


def test_compiled_cityhash64_matches_the_package_at_every_length():
    """The compiled CityHash64 v1.0.2 (skip index hashing) against clickhouse-cityhash, plain and
    seeded, over every length path (0-16, 17-32, 33-64, longer, not multiples of 64)."""
    import random

    import numpy as np
    from clickhouse_cityhash.cityhash import CityHash64, CityHash64WithSeed

    from spark_mergetree.format.cityhash_compiled import _cityhash64_seeded
    from spark_mergetree.format.skip_index_compiled import string_hashes

    rng = random.Random(64)
    strings = [bytes(rng.randrange(256) for _ in range(n)) for n in [*range(0, 200), 255, 256, 1000, 4097]]
    data = np.frombuffer(b"".join(strings), np.uint8)
    offsets = np.concatenate(([0], np.cumsum([len(s) for s in strings]))).astype(np.int64)
    assert string_hashes(data, offsets).tolist() == [CityHash64(s) for s in strings]
    seed = np.uint64(0x9AE16A3B2F90404F)
    seeded = [int(_cityhash64_seeded(data, int(offsets[i]), len(s), seed)) for i, s in enumerate(strings)]
    assert seeded == [CityHash64WithSeed(s, int(seed)) for s in strings]

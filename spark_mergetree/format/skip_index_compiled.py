"""Compiled kernels that build data-skipping indexes: CityHash64 (the 64-bit hash ClickHouse's bloom
filters use, with and without a seed; cityhash_compiled.py computes it) over many strings at once,
and the filters of ngrambf_v1/tokenbf_v1 index granules (the terms of every row hashed into its
granule's filter). `skip_index_writer.py` imports this module only when an index needs it, so numba is
not imported otherwise.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from spark_mergetree.format.cityhash_compiled import _cityhash64, _cityhash64_seeded

__all__ = ["string_hashes", "text_filters"]

# The second bloom-filter seed is derived from the first as ClickHouse does.
_SEED_GEN_A = np.uint64(845897321)
_SEED_GEN_B = np.uint64(217728422)


@njit(cache=True)
def _string_hashes(data, offsets, out):
    for i in range(len(offsets) - 1):
        out[i] = _cityhash64(data, offsets[i], offsets[i + 1] - offsets[i])


@njit(cache=True)
def _add_term(filters, granule, column, data, start, length, hashes, seed1, seed2, bits):
    hash1 = _cityhash64_seeded(data, start, length, seed1)
    hash2 = _cityhash64_seeded(data, start, length, seed2)
    for i in range(hashes):
        k = np.uint64(i)
        position = (hash1 + k * hash2 + k * k) % bits
        filters[granule, column, position >> np.uint64(3)] |= np.uint8(1) << np.uint8(position & np.uint64(7))


@njit(cache=True)
def _utf8_length(first):
    if first < 0x80 or first >= 0xF8:
        return 1
    length = 0
    bit = 0x80
    while first & bit:
        length += 1
        bit >>= 1
    return max(length, 1)


@njit(cache=True)
def _token_byte(b):
    return b >= 0x80 or (0x30 <= b <= 0x39) or (0x41 <= b <= 0x5A) or (0x61 <= b <= 0x7A)


@njit(cache=True)
def _text_filters(data, offsets, granule_of_row, filters, column, ngram, hashes, seed):
    seed1 = np.uint64(seed)
    seed2 = _SEED_GEN_A * seed1 + _SEED_GEN_B
    bits = np.uint64(filters.shape[2] * 8)
    for row in range(len(offsets) - 1):
        begin = offsets[row]
        end = offsets[row + 1]
        granule = granule_of_row[row]
        if ngram == 0:  # tokens: maximal runs of ASCII letters and digits and non-ASCII bytes
            start = begin
            for p in range(begin, end + 1):
                if p == end or not _token_byte(data[p]):
                    if p > start:
                        _add_term(filters, granule, column, data, start, p - start, hashes, seed1, seed2, bits)
                    start = p + 1
        else:  # n-grams of `ngram` UTF-8 code points, one starting at every code point
            p = begin
            while p < end:
                length = 0
                points = 0
                while points < ngram and p + length < end:
                    length += _utf8_length(data[p + length])
                    points += 1
                if points < ngram:
                    break
                _add_term(filters, granule, column, data, p, min(length, end - p), hashes, seed1, seed2, bits)
                p += _utf8_length(data[p])


def string_hashes(data: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """CityHash64 of each string `data[offsets[i]:offsets[i + 1]]`."""
    out = np.empty(max(len(offsets) - 1, 0), np.uint64)
    if len(out):
        _string_hashes(np.ascontiguousarray(data, np.uint8), np.asarray(offsets, np.int64), out)
    return out


def text_filters(filters: np.ndarray, column: int, data: np.ndarray, offsets: np.ndarray, granule_of_row: np.ndarray,
                 ngram: int, hashes: int, seed: int) -> None:
    """Add the terms of every string (n-grams of `ngram` code points, or tokens when `ngram` is 0)
    to `filters[granule_of_row[row], column]` (filters: uint8 of shape (granules, columns, size))."""
    if len(offsets) > 1:
        _text_filters(np.ascontiguousarray(data, np.uint8), np.asarray(offsets, np.int64),
                      np.asarray(granule_of_row, np.int64), filters, column, ngram, hashes,
                      np.uint64(seed & 0xFFFFFFFFFFFFFFFF))

"""Compiled kernels that build data-skipping indexes: CityHash64 v1.0.2 (the 64-bit hash ClickHouse's
bloom filters use, with and without a seed) over many strings at once, and the filters of
ngrambf_v1/tokenbf_v1 index granules (the terms of every row hashed into its granule's filter).

All arithmetic is on uint64 and wraps, as in C++; every constant is a np.uint64 so that numba never
widens to float. `skip_index_writer.py` imports this module only when an index needs it, so numba is
not imported otherwise.
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["string_hashes", "text_filters"]

_K0 = np.uint64(0xC3A5C85C97CB3127)
_K1 = np.uint64(0xB492B66FBE98F273)
_K2 = np.uint64(0x9AE16A3B2F90404F)
_K3 = np.uint64(0xC949D7C7509E6557)
_KMUL = np.uint64(0x9DDFEA08EB382D69)
_SEED_GEN_A = np.uint64(845897321)
_SEED_GEN_B = np.uint64(217728422)


@njit(cache=True)
def _fetch(data, p, width):
    """`width` bytes at `p` as a little-endian unsigned number."""
    value = np.uint64(0)
    for i in range(width):
        value |= np.uint64(data[p + i]) << np.uint64(8 * i)
    return value


@njit(cache=True)
def _fetch64(data, p):
    return _fetch(data, p, 8)


@njit(cache=True)
def _fetch32(data, p):
    return _fetch(data, p, 4)


@njit(cache=True)
def _rotate(value, shift):
    if shift == 0:
        return value
    return (value >> np.uint64(shift)) | (value << np.uint64(64 - shift))


@njit(cache=True)
def _shift_mix(value):
    return value ^ (value >> np.uint64(47))


@njit(cache=True)
def _hash16(low, high):
    a = (low ^ high) * _KMUL
    a ^= a >> np.uint64(47)
    b = (high ^ a) * _KMUL
    b ^= b >> np.uint64(47)
    return b * _KMUL


@njit(cache=True)
def _len0to16(data, s, n):
    length = np.uint64(n)
    if n > 8:
        a = _fetch64(data, s)
        b = _fetch64(data, s + n - 8)
        return _hash16(a, _rotate(b + length, n)) ^ b
    if n >= 4:
        a = _fetch32(data, s)
        return _hash16(length + (a << np.uint64(3)), _fetch32(data, s + n - 4))
    if n > 0:
        a = np.uint64(data[s])
        b = np.uint64(data[s + (n >> 1)])
        c = np.uint64(data[s + n - 1])
        mask32 = np.uint64(0xFFFFFFFF)
        y = (a + (b << np.uint64(8))) & mask32
        z = (length + (c << np.uint64(2))) & mask32
        return _shift_mix(y * _K2 ^ z * _K3) * _K2
    return _K2


@njit(cache=True)
def _len17to32(data, s, n):
    a = _fetch64(data, s) * _K1
    b = _fetch64(data, s + 8)
    c = _fetch64(data, s + n - 8) * _K2
    d = _fetch64(data, s + n - 16) * _K0
    return _hash16(_rotate(a - b, 43) + _rotate(c, 30) + d, a + _rotate(b ^ _K3, 20) - c + np.uint64(n))


@njit(cache=True)
def _len33to64(data, s, n):
    z = _fetch64(data, s + 24)
    a = _fetch64(data, s) + (np.uint64(n) + _fetch64(data, s + n - 16)) * _K0
    b = _rotate(a + z, 52)
    c = _rotate(a, 37)
    a += _fetch64(data, s + 8)
    c += _rotate(a, 7)
    a += _fetch64(data, s + 16)
    vf = a + z
    vs = b + _rotate(a, 31) + c
    a = _fetch64(data, s + 16) + _fetch64(data, s + n - 32)
    z = _fetch64(data, s + n - 8)
    b = _rotate(a + z, 52)
    c = _rotate(a, 37)
    a += _fetch64(data, s + n - 24)
    c += _rotate(a, 7)
    a += _fetch64(data, s + n - 16)
    wf = a + z
    ws = b + _rotate(a, 31) + c
    r = _shift_mix((vf + ws) * _K2 + (wf + vs) * _K0)
    return _shift_mix(r * _K0 + vs) * _K2


@njit(cache=True)
def _weak32(data, p, a, b):
    w = _fetch64(data, p)
    x = _fetch64(data, p + 8)
    y = _fetch64(data, p + 16)
    z = _fetch64(data, p + 24)
    a += w
    b = _rotate(b + a + z, 21)
    c = a
    a += x
    a += y
    b += _rotate(a, 44)
    return a + z, b + c


@njit(cache=True)
def _cityhash64(data, s, n):
    if n <= 32:
        if n <= 16:
            return _len0to16(data, s, n)
        return _len17to32(data, s, n)
    if n <= 64:
        return _len33to64(data, s, n)
    length = np.uint64(n)
    x = _fetch64(data, s)
    y = _fetch64(data, s + n - 16) ^ _K1
    z = _fetch64(data, s + n - 56) ^ _K0
    v0, v1 = _weak32(data, s + n - 64, length, y)
    w0, w1 = _weak32(data, s + n - 32, length * _K1, _K0)
    z += _shift_mix(v1) * _K1
    x = _rotate(z + x, 39) * _K1
    y = _rotate(y, 33) * _K1
    remaining = (n - 1) & ~63
    p = s
    while True:
        x = _rotate(x + y + v0 + _fetch64(data, p + 16), 37) * _K1
        y = _rotate(y + v1 + _fetch64(data, p + 48), 42) * _K1
        x ^= w1
        y ^= v0
        z = _rotate(z ^ w0, 33)
        v0, v1 = _weak32(data, p, v1 * _K1, x + w0)
        w0, w1 = _weak32(data, p + 32, z + w1, y)
        z, x = x, z
        p += 64
        remaining -= 64
        if remaining == 0:
            break
    return _hash16(_hash16(v0, w0) + _shift_mix(y) * _K1 + z, _hash16(v1, w1) + x)


@njit(cache=True)
def _cityhash64_seeded(data, s, n, seed):
    return _hash16(_cityhash64(data, s, n) - _K2, seed)


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

# mypy: allow-untyped-defs
# (numba kernels: numba types their arguments when it compiles them)
"""CityHash128WithSeed v1.0.2 compiled with numba, for the 2048-byte hash chains of checksums.txt.

Hashing a 300 MB column file block by block through the C extension costs one Python call per
2048 bytes; this kernel runs the whole chain in one call. It follows CityHash v1.0.2's definition
(the version ClickHouse ships) and is checked against the C extension by the tests.
"""

from __future__ import annotations

import numpy as np
from numba import njit, uint64

K0 = uint64(0xC3A5C85C97CB3127)
K1 = uint64(0xB492B66FBE98F273)
K2 = uint64(0x9AE16A3B2F90404F)
K3 = uint64(0xC949D7C7509E6557)
KMUL = uint64(0x9DDFEA08EB382D69)


@njit(cache=True, inline="always")
def _fetch64(s, i):
    v = uint64(0)
    for k in range(8):
        v |= uint64(s[i + k]) << uint64(8 * k)
    return v


@njit(cache=True, inline="always")
def _fetch32(s, i):
    v = uint64(0)
    for k in range(4):
        v |= uint64(s[i + k]) << uint64(8 * k)
    return v


@njit(cache=True, inline="always")
def _rotate(val, shift):
    if shift == 0:
        return val
    return (val >> uint64(shift)) | (val << uint64(64 - shift))


@njit(cache=True, inline="always")
def _shift_mix(val):
    return val ^ (val >> uint64(47))


@njit(cache=True, inline="always")
def _hash16(u, v):
    a = (u ^ v) * KMUL
    a ^= a >> uint64(47)
    b = (v ^ a) * KMUL
    b ^= b >> uint64(47)
    return b * KMUL


@njit(cache=True)
def _hash_len_0_to_16(s, start, length):
    if length > 8:
        a = _fetch64(s, start)
        b = _fetch64(s, start + length - 8)
        n = uint64(length)
        return _hash16(a, (_rotate(b + n, length))) ^ b
    if length >= 4:
        a = _fetch32(s, start)
        return _hash16(uint64(length) + (a << uint64(3)), _fetch32(s, start + length - 4))
    if length > 0:
        a = uint64(s[start])
        b = uint64(s[start + (length >> 1)])
        c = uint64(s[start + length - 1])
        y = a + (b << uint64(8))
        z = uint64(length) + (c << uint64(2))
        return _shift_mix(y * K2 ^ z * K3) * K2
    return K2


@njit(cache=True, inline="always")
def _weak32(s, i, a, b):
    w = _fetch64(s, i)
    x = _fetch64(s, i + 8)
    y = _fetch64(s, i + 16)
    z = _fetch64(s, i + 24)
    a += w
    b = _rotate(b + a + z, 21)
    c = a
    a += x
    a += y
    b += _rotate(a, 44)
    return a + z, b + c


@njit(cache=True)
def _city_murmur(s, start, length, seed_lo, seed_hi):
    a = seed_lo
    b = seed_hi
    c = uint64(0)
    d = uint64(0)
    remaining = length - 16
    if remaining <= 0:
        a = _shift_mix(a * K1) * K1
        c = b * K1 + _hash_len_0_to_16(s, start, length)
        d = _shift_mix(a + (_fetch64(s, start) if length >= 8 else c))
    else:
        c = _hash16(_fetch64(s, start + length - 8) + K1, a)
        d = _hash16(b + uint64(length), c + _fetch64(s, start + length - 16))
        a += d
        i = start
        while True:
            a ^= _shift_mix(_fetch64(s, i) * K1) * K1
            a *= K1
            b ^= a
            c ^= _shift_mix(_fetch64(s, i + 8) * K1) * K1
            c *= K1
            d ^= c
            i += 16
            remaining -= 16
            if remaining <= 0:
                break
    a = _hash16(a, c)
    b = _hash16(d, b)
    return a ^ b, _hash16(b, a)


@njit(cache=True)
def city_hash128_with_seed(s, start, length, seed_lo, seed_hi):
    """(low, high) of CityHash128WithSeed v1.0.2 over s[start:start + length]."""
    if length < 128:
        return _city_murmur(s, start, length, seed_lo, seed_hi)
    x = seed_lo
    y = seed_hi
    z = uint64(length) * K1
    v0 = _rotate(y ^ K1, 49) * K1 + _fetch64(s, start)
    v1 = _rotate(v0, 42) * K1 + _fetch64(s, start + 8)
    w0 = _rotate(y + z, 35) * K1 + x
    w1 = _rotate(x + _fetch64(s, start + 88), 53) * K1
    i = start
    remaining = length
    while True:
        for _ in range(2):
            x = _rotate(x + y + v0 + _fetch64(s, i + 16), 37) * K1
            y = _rotate(y + v1 + _fetch64(s, i + 48), 42) * K1
            x ^= w1
            y ^= v0
            z = _rotate(z ^ w0, 33)
            v0, v1 = _weak32(s, i, v1 * K1, x + w0)
            w0, w1 = _weak32(s, i + 32, z + w1, y)
            z, x = x, z
            i += 64
        remaining -= 128
        if remaining < 128:
            break
    y += _rotate(w0, 37) * K0 + z
    x += _rotate(v0 + z, 49) * K0
    tail_done = 0
    while tail_done < remaining:
        tail_done += 32
        y = _rotate(y - x, 42) * K0 + v1
        w0 += _fetch64(s, i + remaining - tail_done + 16)
        x = _rotate(x, 49) * K0 + w0
        w0 += v0
        v0, v1 = _weak32(s, i + remaining - tail_done, v0, v1)
    x = _hash16(x, v0)
    y = _hash16(y, w0)
    return _hash16(x + v1, w1) + y, _hash16(x + w1, y + v1)


@njit(cache=True, nogil=True)
def hash_chain(s, start, end, block, seed_lo, seed_hi):
    """Hash s[start:end] (a whole number of `block`-byte blocks), each block seeded with the
    previous block's hash; returns the last (low, high)."""
    lo = seed_lo
    hi = seed_hi
    for i in range(start, end, block):
        lo, hi = city_hash128_with_seed(s, i, block, lo, hi)
    return lo, hi


def chain(data: np.ndarray, start: int, end: int, block: int, state: tuple[int, int]) -> tuple[int, int]:
    lo, hi = hash_chain(data, start, end, block, np.uint64(state[0]), np.uint64(state[1]))
    return int(lo), int(hi)

"""CityHash v1.0.2 compiled: CityHash64 (with and without a seed) and the seeded CityHash128 chain
ClickHouse's checksums.txt file hashes are made of.

A file hash cuts the file into 2048-byte blocks and hashes each with the previous block's hash as
seed; called from Python through ctypes that is one call, and one GIL round trip, per 2 KiB, which
cost more than the hashing. `chain_blocks` runs the whole chain in one call without the GIL, so the
threads that write a part's columns hash them in parallel.

All arithmetic is on uint64 and wraps, as in C++; every constant is a np.uint64 so that numba never
widens to float. Importing this module imports numba: `cityhash.py` does so only for long files.
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["chain_blocks"]

_K0 = np.uint64(0xC3A5C85C97CB3127)
_K1 = np.uint64(0xB492B66FBE98F273)
_K2 = np.uint64(0x9AE16A3B2F90404F)
_K3 = np.uint64(0xC949D7C7509E6557)
_KMUL = np.uint64(0x9DDFEA08EB382D69)


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
    return _weak32_of(_fetch64(data, p), _fetch64(data, p + 8), _fetch64(data, p + 16), _fetch64(data, p + 24), a, b)


@njit(cache=True)
def _weak32_of(w, x, y, z, a, b):
    """WeakHashLen32WithSeeds of the four words w, x, y, z."""
    a += w
    b = _rotate(b + a + z, 21)
    c = a
    a += x
    a += y
    b += _rotate(a, 44)
    return a + z, b + c


@njit(cache=True)
def _round(x, y, z, v0, v1, w0, w1, a0, a1, a2, a3, a4, a5, a6, a7):
    """One 64-byte round of the long CityHash64/CityHash128 loops, over the chunk's eight words."""
    x = _rotate(x + y + v0 + a2, 37) * _K1
    y = _rotate(y + v1 + a6, 42) * _K1
    x ^= w1
    y ^= v0
    z = _rotate(z ^ w0, 33)
    v0, v1 = _weak32_of(a0, a1, a2, a3, v1 * _K1, x + w0)
    w0, w1 = _weak32_of(a4, a5, a6, a7, z + w1, y)
    return z, y, x, v0, v1, w0, w1  # x and z change places after every round


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
        x, y, z, v0, v1, w0, w1 = _round(x, y, z, v0, v1, w0, w1, _fetch64(data, p), _fetch64(data, p + 8),
                                         _fetch64(data, p + 16), _fetch64(data, p + 24), _fetch64(data, p + 32),
                                         _fetch64(data, p + 40), _fetch64(data, p + 48), _fetch64(data, p + 56))
        p += 64
        remaining -= 64
        if remaining == 0:
            break
    return _hash16(_hash16(v0, w0) + _shift_mix(y) * _K1 + z, _hash16(v1, w1) + x)


@njit(cache=True)
def _cityhash64_seeded(data, s, n, seed):
    return _hash16(_cityhash64(data, s, n) - _K2, seed)


@njit(cache=True)
def _cityhash128_words(words, w, n, low, high):
    """CityHash128WithSeed of the `n` words (8n >= 128 bytes) at word `w`, seed (low, high); returns
    (first, second). Bytes are read as little-endian words: every offset the long path reads is a
    multiple of 8 when the length is, and one word load costs less than eight byte loads."""
    x = low
    y = high
    z = np.uint64(8 * n) * _K1
    v0 = _rotate(y ^ _K1, 49) * _K1 + words[w]
    v1 = _rotate(v0, 42) * _K1 + words[w + 1]
    w0 = _rotate(y + z, 35) * _K1 + x
    w1 = _rotate(x + words[w + 11], 53) * _K1
    remaining = n
    while True:  # two rounds of 64 bytes per turn, as the reference unrolls them
        for _ in range(2):
            x, y, z, v0, v1, w0, w1 = _round(x, y, z, v0, v1, w0, w1, words[w], words[w + 1], words[w + 2],
                                             words[w + 3], words[w + 4], words[w + 5], words[w + 6], words[w + 7])
            w += 8
        remaining -= 16
        if remaining < 16:
            break
    y += _rotate(w0, 37) * _K0 + z
    x += _rotate(v0 + z, 49) * _K0
    done = 0
    while done < remaining:  # pieces of up to four words counted back from the end
        done += 4
        y = _rotate(y - x, 42) * _K0 + v1
        w0 += words[w + remaining - done + 2]
        x = _rotate(x, 49) * _K0 + w0
        w0 += v0
        t = w + remaining - done
        v0, v1 = _weak32_of(words[t], words[t + 1], words[t + 2], words[t + 3], v0, v1)
    x = _hash16(x, v0)
    y = _hash16(y, w0)
    return _hash16(x + v1, w1) + y, _hash16(x + w1, y + v1)


@njit(cache=True, nogil=True)
def _chain(words, block, low, high):
    for w in range(0, len(words), block):
        low, high = _cityhash128_words(words, w, block, low, high)
    return low, high


def chain_blocks(data: np.ndarray, block: int, low: int, high: int) -> tuple[int, int]:
    """Hash the uint8 array `data` (a whole number of `block`-byte blocks; block a multiple of 8,
    at least 128) block by block, each with the previous hash as seed, starting from (low, high);
    returns the last hash's halves."""
    words = data.view("<u8")
    first, second = _chain(words, block // 8, np.uint64(low), np.uint64(high))
    return int(first), int(second)

"""Parity of a stripe and the unit checksum: P (XOR, raid5 and raid6), Q (Reed–Solomon, raid6),
and the recovery of up to two lost data units.

Q is the syndrome of Linux md's RAID 6: over GF(2^8) with the polynomial x^8+x^4+x^3+x^2+1 (0x11d)
and generator g = 2, `Q = Σ g^i · D_i` for the stripe's data units D_0, D_1, ... A stripe's units
may differ in length; each is treated as zero-padded to the longest, so the parity units are as
long as the longest data unit and a recovered unit is cut to its recorded length by the caller.

Computation runs on 64-bit lanes (eight bytes at a time): multiplying by g is a shift and a
conditional XOR of 0x1d per byte, done with masks; the loops are numba kernels compiled on first
use. Multiplying by any other constant is a sum of doublings.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from spark_mergetree.errors import StorageError
from spark_mergetree.format.cityhash import cityhash128_int
from spark_mergetree.format.compiled import lazy_njit
from spark_mergetree.storage.filesystem import Buffer

#: The field's reduction polynomial (without the x^8 term: 0x1d) and generator, as in Linux md.
POLYNOMIAL = 0x11D
GENERATOR = 2


def _tables() -> tuple[list[int], list[int]]:
    exp, log = [0] * 510, [0] * 256
    x = 1
    for i in range(255):
        exp[i] = exp[i + 255] = x
        log[x] = i
        x <<= 1
        if x & 0x100:
            x ^= POLYNOMIAL
    return exp, log


_EXP, _LOG = _tables()


def gf_mul(a: int, b: int) -> int:
    """a·b in GF(2^8)."""
    return 0 if a == 0 or b == 0 else _EXP[_LOG[a] + _LOG[b]]


def gf_pow(exponent: int) -> int:
    """g^exponent (any integer exponent)."""
    return _EXP[exponent % 255]


def gf_inverse(a: int) -> int:
    if a == 0:
        raise ZeroDivisionError("0 has no inverse in GF(2^8)")
    return _EXP[255 - _LOG[a]]


def unit_checksum(data: Buffer) -> str:
    """CityHash128 of a unit as 32 hex digits (the form recorded in the stripe map)."""
    return f"{cityhash128_int(data):032x}"


def _as_bytes(data: Buffer) -> np.ndarray:
    return data.view(np.uint8).reshape(-1) if isinstance(data, np.ndarray) else np.frombuffer(data, dtype=np.uint8)


def _lanes(length: int) -> np.ndarray:
    """Zeroed uint64 words covering `length` bytes."""
    return np.zeros((length + 7) // 8, dtype=np.uint64)


def _aligned(length: int) -> np.ndarray:
    """Zeroed bytes backed by uint64 words, so whole-word views are always legal."""
    return _lanes(length).view(np.uint8)[:length]


def xor_into(accumulator: np.ndarray, data: Buffer) -> None:
    """accumulator[:len(data)] ^= data, eight bytes at a time where possible."""
    source = _as_bytes(data)
    n = source.size
    if n > accumulator.size:
        raise ValueError(f"unit of {n} bytes is longer than the parity buffer of {accumulator.size}")
    words = n // 8
    if words:
        # uint64 lanes run several times faster than uint8 in numpy's XOR loop.
        head = accumulator[: words * 8].view(np.uint64)
        np.bitwise_xor(head, source[: words * 8].view(np.uint64), out=head)
    if n % 8:
        tail = accumulator[words * 8: n]
        np.bitwise_xor(tail, source[words * 8: n], out=tail)


def xor_parity(units: Iterable[Buffer], length: int) -> np.ndarray:
    """The XOR of `units`, each zero-padded to `length` bytes, as a uint8 array of `length`."""
    parity = _aligned(length)
    for unit in units:
        xor_into(parity, unit)
    return parity


@lazy_njit
def _double_and_add(q: np.ndarray, data: np.ndarray) -> None:  # pragma: no cover - compiled
    """q = g·q ⊕ data on 64-bit lanes (len(data) words of q)."""
    for i in range(data.size):
        x = q[i]
        high = x & np.uint64(0x8080808080808080)
        q[i] = ((x << np.uint64(1)) & np.uint64(0xFEFEFEFEFEFEFEFE)) ^ ((high >> np.uint64(7)) * np.uint64(0x1D)) \
            ^ data[i]


@lazy_njit
def _double(q: np.ndarray) -> None:  # pragma: no cover - compiled
    """q = g·q on 64-bit lanes."""
    for i in range(q.size):
        x = q[i]
        high = x & np.uint64(0x8080808080808080)
        q[i] = ((x << np.uint64(1)) & np.uint64(0xFEFEFEFEFEFEFEFE)) ^ ((high >> np.uint64(7)) * np.uint64(0x1D))


@lazy_njit
def _multiply(source: np.ndarray, factor: int, out: np.ndarray) -> None:  # pragma: no cover - compiled
    """out ^= factor·source on 64-bit lanes (factor a byte: a sum of doublings of source)."""
    for i in range(source.size):
        x = source[i]
        product = np.uint64(0)
        for bit in range(8):
            if (factor >> bit) & 1:
                product ^= x
            high = x & np.uint64(0x8080808080808080)
            x = ((x << np.uint64(1)) & np.uint64(0xFEFEFEFEFEFEFEFE)) ^ ((high >> np.uint64(7)) * np.uint64(0x1D))
        out[i] ^= product


def _words(data: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The whole 8-byte words of `data` and its last partial word zero-padded (possibly empty)."""
    n = data.size // 8
    tail = np.zeros(1 if data.size % 8 else 0, dtype=np.uint64)
    if tail.size:
        tail.view(np.uint8)[: data.size - 8 * n] = data[8 * n:]
    return data[: 8 * n].view(np.uint64), tail


def q_parity(units: Sequence[Buffer | None], length: int) -> np.ndarray:
    """Q = Σ g^i · units[i], each unit zero-padded to `length`; a None unit counts as zeros."""
    lanes = _lanes(length)
    for unit in reversed(units):  # Horner: Q = (((D_k-1)·g + D_k-2)·g + ...)·g + D_0
        if unit is None:
            _double(lanes)
            continue
        data = _as_bytes(unit)
        if data.size > length:
            raise ValueError(f"unit of {data.size} bytes is longer than the parity of {length}")
        head, tail = _words(data)
        if head.size:
            _double_and_add(lanes[: head.size], head)
        rest = lanes[head.size:]
        if rest.size:
            _double(rest)
            if tail.size:
                rest[0] ^= tail[0]
    return lanes.view(np.uint8)[:length]


def multiply(data: Buffer, factor: int) -> np.ndarray:
    """factor·data byte by byte in GF(2^8), as a new uint8 array."""
    source = _as_bytes(data)
    lanes = _lanes(source.size)
    head, tail = _words(source)
    if head.size:
        _multiply(head, factor, lanes[: head.size])
    if tail.size:
        _multiply(tail, factor, lanes[head.size:])
    return lanes.view(np.uint8)[: source.size]


def recover(units: Sequence[Buffer | None], p: Buffer | None, q: Buffer | None, length: int) -> list[np.ndarray]:
    """The lost data units (the None entries of `units`, in order), each `length` bytes long.

    Uses P for one loss, Q when P is lost too, and both for two losses (H. P. Anvin, "The
    mathematics of RAID-6"). StorageError when more units are lost than the parities left cover.
    """
    lost = [i for i, unit in enumerate(units) if unit is None]
    if not lost:
        return []
    if len(lost) == 1 and p is not None:
        return [xor_parity([p, *(u for u in units if u is not None)], length)]
    if len(lost) == 1 and q is not None:
        # Q ⊕ Q_x = g^x · D_x, where Q_x is the syndrome with D_x taken as zeros.
        delta = xor_parity([q, q_parity(units, length)], length)
        return [multiply(delta, gf_pow(-lost[0]))]
    if len(lost) == 2 and p is not None and q is not None:
        x, y = lost
        p_delta = xor_parity([p, *(u for u in units if u is not None)], length)  # D_x ⊕ D_y
        q_delta = xor_parity([q, q_parity(units, length)], length)  # g^x·D_x ⊕ g^y·D_y
        denominator = gf_inverse(gf_pow(y - x) ^ 1)
        d_x = multiply(p_delta, gf_mul(gf_pow(y - x), denominator))
        xor_into(d_x, multiply(q_delta, gf_mul(gf_pow(-x), denominator)))
        return [d_x, xor_parity([p_delta, d_x], length)]
    raise StorageError(f"{len(lost)} data units lost with {'P' if p is not None else 'no P'} and "
                       f"{'Q' if q is not None else 'no Q'} left: cannot be recovered")

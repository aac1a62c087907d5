"""XOR parity of RAID5 stripes and the unit checksum, over whole units with numpy.

A stripe's units may differ in length; each is treated as zero-padded to the longest, so the
parity unit is as long as the longest data unit and a lost unit is the XOR of the others cut to
its recorded length.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
from clickhouse_cityhash.cityhash import CityHash128

Buffer = bytes | bytearray | memoryview | np.ndarray


def unit_checksum(data: Buffer) -> str:
    """CityHash128 of a unit as 32 hex digits (the form recorded in the stripe map)."""
    return f"{CityHash128(data):032x}"


def xor_into(accumulator: np.ndarray, data: Buffer) -> None:
    """accumulator[:len(data)] ^= data, eight bytes at a time where possible."""
    source = np.frombuffer(data, dtype=np.uint8) if not isinstance(data, np.ndarray) else data.view(np.uint8)
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
    # Allocated 8-byte aligned so the uint64 view in xor_into is always legal.
    parity = np.zeros((length + 7) // 8, dtype=np.uint64).view(np.uint8)[:length]
    for unit in units:
        xor_into(parity, unit)
    return parity

"""SipHash-2-4 with ClickHouse's 128-bit output (the `sipHash128` function, not the reference variant).

ClickHouse hashes partition values with SipHash-2-4 keyed with zeros and, for 128 bits, finalises
once (v2 ^= 0xff, four rounds) and emits v0^v1 then v2^v3, each as 8 little-endian bytes. The
reference SipHash-128 differs (it tweaks v1 and finalises twice), so off-the-shelf packages do not
give ClickHouse's partition ids. Inputs are a few bytes per partition, so plain Python is enough.
"""

from __future__ import annotations

import struct

_MASK = 0xFFFFFFFFFFFFFFFF


def _rotl(x: int, b: int) -> int:
    return ((x << b) | (x >> (64 - b))) & _MASK


def _sip_round(v0: int, v1: int, v2: int, v3: int) -> tuple[int, int, int, int]:
    v0 = (v0 + v1) & _MASK
    v1 = _rotl(v1, 13) ^ v0
    v0 = _rotl(v0, 32)
    v2 = (v2 + v3) & _MASK
    v3 = _rotl(v3, 16) ^ v2
    v0 = (v0 + v3) & _MASK
    v3 = _rotl(v3, 21) ^ v0
    v2 = (v2 + v1) & _MASK
    v1 = _rotl(v1, 17) ^ v2
    v2 = _rotl(v2, 32)
    return v0, v1, v2, v3


def siphash128_clickhouse(data: bytes, key0: int = 0, key1: int = 0) -> bytes:
    """The 16 bytes ClickHouse's `sipHash128(data)` returns (keys default to zero, as in ClickHouse)."""
    v0 = 0x736F6D6570736575 ^ key0
    v1 = 0x646F72616E646F6D ^ key1
    v2 = 0x6C7967656E657261 ^ key0
    v3 = 0x7465646279746573 ^ key1
    full_words = len(data) // 8
    words = struct.unpack_from(f"<{full_words}Q", data) if full_words else ()
    tail = data[full_words * 8 :]
    # The last word carries the total length (mod 256) in its top byte, as in standard SipHash.
    last = int.from_bytes(tail + b"\0" * (7 - len(tail)) + bytes([len(data) & 0xFF]), "little")
    for m in (*words, last):
        v3 ^= m
        v0, v1, v2, v3 = _sip_round(v0, v1, v2, v3)
        v0, v1, v2, v3 = _sip_round(v0, v1, v2, v3)
        v0 ^= m
    v2 ^= 0xFF
    for _ in range(4):
        v0, v1, v2, v3 = _sip_round(v0, v1, v2, v3)
    return struct.pack("<QQ", v0 ^ v1, v2 ^ v3)

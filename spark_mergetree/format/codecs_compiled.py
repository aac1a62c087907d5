"""Sequential kernels of the bit-packed column codecs (DoubleDelta, Gorilla) and FPC, compiled with numba.

Each value of these codecs depends on the previous ones (a running delta, a running XOR window,
FPC's hash-table predictors), so they are one loop each, compiled. `codecs.py` imports this module
only when such a block is met, so numba is never imported otherwise. Byte formats: format_spec/blocks.md.

Values travel as uint64 whatever their width (1, 2, 4 or 8 bytes); `mask` keeps the width's bits.
Bit streams are most significant bit first; bits past the end of a stream read as zeros.
"""

from __future__ import annotations

import numpy as np
from numba import njit, uint64

ONE = uint64(1)
ZERO = uint64(0)


@njit(cache=True, inline="always")
def _low_bits(count):
    return (ONE << uint64(count)) - ONE if count < 64 else ~ZERO


@njit(cache=True)
def _peek(src, pos, count):
    """`count` (1..32) bits at bit position `pos`."""
    byte = pos >> 3
    acc = ZERO
    for i in range(5):
        acc <<= uint64(8)
        if byte + i < src.shape[0]:
            acc |= uint64(src[byte + i])
    return (acc >> uint64(40 - (pos & 7) - count)) & _low_bits(count)


@njit(cache=True)
def _read(src, pos, count):
    """`count` (0..64) bits at bit position `pos`."""
    if count == 0:
        return ZERO
    if count <= 32:
        return _peek(src, pos, count)
    return (_peek(src, pos, count - 32) << uint64(32)) | _peek(src, pos + count - 32, 32)


@njit(cache=True)
def _put(dst, pos, count, value):
    """OR the low `count` (1..32) bits of value into dst at bit position `pos` (dst zeroed, 5 bytes slack)."""
    placed = (value & _low_bits(count)) << uint64(40 - (pos & 7) - count)
    byte = pos >> 3
    for i in range(5):
        dst[byte + i] |= np.uint8((placed >> uint64(32 - 8 * i)) & uint64(0xFF))


@njit(cache=True)
def _write(dst, pos, count, value):
    """Write the low `count` (0..64) bits of value at bit position `pos`; returns the new position."""
    if count == 0:
        return pos
    if count <= 32:
        _put(dst, pos, count, value)
    else:
        _put(dst, pos, count - 32, value >> uint64(32))
        _put(dst, pos + count - 32, 32, value)
    return pos + count


@njit(cache=True)
def _bit_length(value):
    """Bits up to the highest set bit (0 for 0), by halving."""
    n = 0
    for shift in (32, 16, 8, 4, 2, 1):
        if value >> uint64(shift):
            value >>= uint64(shift)
            n += shift
    return n + (1 if value else 0)


@njit(cache=True)
def _trailing_zeros(value):
    """Zero bits below the lowest set bit (64 for 0)."""
    if value == 0:
        return 64
    return _bit_length(value & (ZERO - value)) - 1


# ------------------------------------------------------------------ DoubleDelta


@njit(cache=True)
def double_delta_decode(src, count, first, delta, mask, out):
    """Values 2..count-1 from the bit stream `src`, after `first` and the first delta; returns how
    many values (all `count` on intact data) were written to `out`."""
    total = src.shape[0] * 8
    pos = 0
    previous = first
    previous_delta = delta
    written = 0
    if count >= 1:
        out[0] = first
        written = 1
    if count >= 2:
        previous = (first + delta) & mask
        out[1] = previous
        written = 2
    while written < count and pos < total:
        peek = np.int64(_peek(src, pos, 5))
        if peek < 16:
            prefix, data = 1, 0
        elif peek < 24:
            prefix, data = 2, 7
        elif peek < 28:
            prefix, data = 3, 9
        elif peek < 30:
            prefix, data = 4, 12
        elif peek == 30:
            prefix, data = 5, 32
        else:
            prefix, data = 5, 64
        pos += prefix
        double_delta = ZERO
        if data:
            sign = _read(src, pos, 1)
            pos += 1
            double_delta = _read(src, pos, data - 1) + ONE
            pos += data - 1
            if sign:
                double_delta = ZERO - double_delta
        current_delta = (double_delta + previous_delta) & mask
        current = (previous + current_delta) & mask
        out[written] = current
        written += 1
        previous_delta = current_delta
        previous = current
    return written


@njit(cache=True)
def double_delta_encode(values, mask, sign_bit, dst):
    """The bit stream of values[2:] (values as uint64 of one width); returns its length in bits."""
    pos = 0
    n = values.shape[0]
    if n < 3:
        return 0
    previous = values[1]
    previous_delta = (values[1] - values[0]) & mask
    for i in range(2, n):
        current = values[i]
        current_delta = (current - previous) & mask
        double_delta = (current_delta - previous_delta) & mask
        previous_delta = current_delta
        previous = current
        if double_delta == 0:
            pos = _write(dst, pos, 1, ZERO)
            continue
        negative = (double_delta & sign_bit) != 0
        # |dd| as the width's signed value; the most negative value keeps its own bits (as C++ does).
        magnitude = ((ZERO - double_delta) & mask) if negative else double_delta
        # ClickHouse's signed bounds: -63 < dd < 64, -255 < dd < 256, -2047 < dd < 2048, Int32 min < dd < max.
        slack = ONE if negative else ZERO
        if magnitude < uint64(64) - slack:
            prefix, prefix_bits, data = uint64(0b10), 2, 7
        elif magnitude < uint64(256) - slack:
            prefix, prefix_bits, data = uint64(0b110), 3, 9
        elif magnitude < uint64(2048) - slack:
            prefix, prefix_bits, data = uint64(0b1110), 4, 12
        elif magnitude < uint64(2147483647) + slack:
            prefix, prefix_bits, data = uint64(0b11110), 5, 32
        else:
            prefix, prefix_bits, data = uint64(0b11111), 5, 64
        pos = _write(dst, pos, prefix_bits, prefix)
        pos = _write(dst, pos, 1, ONE if negative else ZERO)
        pos = _write(dst, pos, data - 1, magnitude - ONE)
    return pos


# ------------------------------------------------------------------ Gorilla


@njit(cache=True)
def gorilla_decode(src, count, first, width_bits, leading_bits, length_bits, out):
    """Values 1..count-1 from the bit stream; returns how many were written (-1: malformed)."""
    total = src.shape[0] * 8
    pos = 0
    previous = first
    leading = 0
    length = 0
    trailing = 0
    written = 0
    if count >= 1:
        out[0] = first
        written = 1
    while written < count and pos < total:
        if _read(src, pos, 1):
            pos += 1
            if _read(src, pos, 1):
                pos += 1
                leading = np.int64(_read(src, pos, leading_bits))
                pos += leading_bits
                length = np.int64(_read(src, pos, length_bits))
                pos += length_bits
                trailing = width_bits - leading - length
                if trailing < 0:
                    return -1
            else:
                pos += 1
            # A window always holds a bit: the XOR of two different values is not zero.
            if length == 0:
                return -1
            previous ^= _read(src, pos, length) << uint64(trailing)
            pos += length
        else:
            pos += 1
        out[written] = previous
        written += 1
    return written


@njit(cache=True)
def gorilla_encode(values, width_bits, leading_bits, length_bits, dst):
    """The bit stream of values[1:]; returns its length in bits."""
    pos = 0
    n = values.shape[0]
    previous_leading = 0
    previous_length = 0
    previous_trailing = 0
    for i in range(1, n):
        xored = values[i] ^ values[i - 1]
        if xored == 0:
            pos = _write(dst, pos, 1, ZERO)
            continue
        leading = width_bits - _bit_length(xored)
        trailing = _trailing_zeros(xored)
        if previous_length != 0 and previous_leading <= leading and previous_trailing <= trailing:
            pos = _write(dst, pos, 2, uint64(0b10))
            pos = _write(dst, pos, previous_length, xored >> uint64(previous_trailing))
        else:
            length = width_bits - leading - trailing
            pos = _write(dst, pos, 2, uint64(0b11))
            pos = _write(dst, pos, leading_bits, uint64(leading))
            pos = _write(dst, pos, length_bits, uint64(length))
            pos = _write(dst, pos, length, xored >> uint64(trailing))
            previous_leading, previous_length, previous_trailing = leading, length, trailing
    return pos


# ------------------------------------------------------------------ FPC


@njit(cache=True)
def _fpc_tables(level, values):
    """FPC's two predictor tables (FCM row 0, DFCM row 1) of 2^level entries (up to 2^28), zeroed.
    Fewer than `values` entries are ever touched, so large tables become open-addressing maps from
    entry number to slot: returns (tables, keys (-1 when free), slot mask; 0: direct tables)."""
    size = 1 << level
    if size <= max(4 * values, 1 << 16):
        return np.zeros((2, size), np.uint64), np.full((2, 1), -1, np.int64), 0
    slots = 1
    while slots < 2 * values + 2:
        slots <<= 1
    return np.zeros((2, slots), np.uint64), np.full((2, slots), -1, np.int64), slots - 1


@njit(cache=True)
def _fpc_slot(keys, slot_mask, entry):
    if slot_mask == 0:
        return entry
    slot = (entry * 0x9E3779B1) & slot_mask
    while keys[slot] != -1 and keys[slot] != entry:
        slot = (slot + 1) & slot_mask
    keys[slot] = entry
    return slot


@njit(cache=True)
def _fpc_predict(tables, keys, slot_mask, hashes, previous, mask):
    """(FCM prediction, DFCM prediction, FCM slot, DFCM slot) for the next value."""
    fcm_slot = _fpc_slot(keys[0], slot_mask, hashes[0])
    dfcm_slot = _fpc_slot(keys[1], slot_mask, hashes[1])
    return tables[0, fcm_slot], (tables[1, dfcm_slot] + previous[0]) & mask, fcm_slot, dfcm_slot


@njit(cache=True)
def _fpc_learn(tables, hashes, previous, fcm_slot, dfcm_slot, value, mask, table_mask, width):
    """Both predictors learn `value`: FCM stores it, DFCM its difference with the previous value;
    each moves to its next entry."""
    if width == 8:
        fcm_shift, fcm_value_shift, dfcm_shift, dfcm_value_shift = 6, 48, 2, 40
    else:
        fcm_shift, fcm_value_shift, dfcm_shift, dfcm_value_shift = 1, 22, 4, 23
    tables[0, fcm_slot] = value
    hashes[0] = ((hashes[0] << fcm_shift) ^ np.int64(value >> uint64(fcm_value_shift))) & table_mask
    difference = (value - previous[0]) & mask
    tables[1, dfcm_slot] = difference
    hashes[1] = ((hashes[1] << dfcm_shift) ^ np.int64(difference >> uint64(dfcm_value_shift))) & table_mask
    previous[0] = value


@njit(cache=True)
def fpc_decode(src, values, level, width, out):
    """`values` (even) floats as uint64 bit patterns from FPC pairs; returns bytes of src consumed
    (-1: the stream ends inside a pair)."""
    table_mask = (1 << level) - 1
    tables, keys, slot_mask = _fpc_tables(level, values)
    hashes = np.zeros(2, np.int64)
    previous = np.zeros(1, np.uint64)
    mask = _low_bits(8 * width)
    pos = 0
    n = src.shape[0]
    for i in range(0, values, 2):
        if pos >= n:
            return -1
        header = np.int64(src[pos])
        pos += 1
        for half in range(2):
            nibble = (header >> 4) if half == 0 else header
            zero_bytes = nibble & 7
            if width == 8 and zero_bytes > 3:
                zero_bytes += 1
            tail = width - zero_bytes
            if pos + tail > n:
                return -1
            residual = ZERO
            for b in range(tail):
                residual |= uint64(src[pos + b]) << uint64(8 * b)
            pos += tail
            from_fcm, from_dfcm, fcm_slot, dfcm_slot = _fpc_predict(tables, keys, slot_mask, hashes, previous, mask)
            value = ((from_dfcm if nibble & 8 else from_fcm) ^ residual) & mask
            out[i + half] = value
            _fpc_learn(tables, hashes, previous, fcm_slot, dfcm_slot, value, mask, table_mask, width)
    return pos


@njit(cache=True)
def fpc_encode(values, level, width, dst):
    """FPC pairs of `values` (even count, uint64 bit patterns); returns bytes written to dst."""
    table_mask = (1 << level) - 1
    tables, keys, slot_mask = _fpc_tables(level, values.shape[0])
    hashes = np.zeros(2, np.int64)
    previous = np.zeros(1, np.uint64)
    mask = _low_bits(8 * width)
    bits = 8 * width
    pos = 0
    for i in range(0, values.shape[0], 2):
        header_at = pos
        pos += 1
        header = 0
        for half in range(2):
            value = values[i + half]
            from_fcm, from_dfcm, fcm_slot, dfcm_slot = _fpc_predict(tables, keys, slot_mask, hashes, previous, mask)
            from_fcm ^= value
            from_dfcm ^= value
            _fpc_learn(tables, hashes, previous, fcm_slot, dfcm_slot, value, mask, table_mask, width)
            zeros_dfcm = bits - _bit_length(from_dfcm)
            zeros_fcm = bits - _bit_length(from_fcm)
            if zeros_dfcm > zeros_fcm:
                residual, zero_bytes, predictor = from_dfcm, zeros_dfcm // 8, 8
            else:
                residual, zero_bytes, predictor = from_fcm, zeros_fcm // 8, 0
            if width == 8 and zero_bytes >= 4:
                zero_bytes -= 1
            code = min(zero_bytes, 7)
            stored_zero_bytes = code + 1 if (width == 8 and code > 3) else code
            header |= (predictor | code) << (4 if half == 0 else 0)
            for b in range(width - stored_zero_bytes):
                dst[pos + b] = np.uint8((residual >> uint64(8 * b)) & uint64(0xFF))
            pos += width - stored_zero_bytes
        dst[header_at] = np.uint8(header)
    return pos

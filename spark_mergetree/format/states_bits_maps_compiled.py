"""The sequential kernels of format/states_bits_maps.py: deltaSum and boundingRatio, whose states
depend on the order of rows and of states, the -Map functions' reading of states, and the roaring
bitmaps of groupBitmap.

Every kernel walks groups given by `starts` (strictly increasing; the last group runs up to `n`),
their rows or states in order.
"""

from __future__ import annotations

import numpy as np

from spark_mergetree.format.compiled import lazy_njit
from spark_mergetree.format.states_simple_compiled import added

# ---------------------------------------------------------------------------------------------
# deltaSum: (sum, first, last, seen), in the argument's own type.


@lazy_njit
def delta_sums(values: np.ndarray, starts: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # pragma: no cover - compiled
    """Per group, deltaSum's (sum, first, last) of numbers in their own type: every rise from the
    previous row's value is added (a fall, an equal value or a NaN adds nothing)."""
    groups = len(starts)
    sums = np.zeros(groups, values.dtype)
    firsts = np.zeros(groups, values.dtype)
    lasts = np.zeros(groups, values.dtype)
    for g in range(groups):
        end = starts[g + 1] if g + 1 < groups else n
        first = values[starts[g]]
        last = first
        total = sums[g]
        for i in range(starts[g] + 1, end):
            value = values[i]
            if last < value:
                total += value - last
            last = value
        sums[g] = total
        firsts[g] = first
        lasts[g] = last
    return sums, firsts, lasts


@lazy_njit
def delta_merges(sums: np.ndarray, firsts: np.ndarray, lasts: np.ndarray, seen: np.ndarray, starts: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:  # pragma: no cover - compiled
    """Per group, deltaSum's states merged left to right: a state that starts above the kept one's
    last value adds its sum and the gap; one that starts below it (a counter reset) adds its sum
    alone; one that starts at the same value (or where a NaN compares) changes nothing; a first
    state with rows is taken whole. The first value is never replaced once seen."""
    n = len(sums)
    groups = len(starts)
    out_sums = np.zeros(groups, sums.dtype)
    out_firsts = np.zeros(groups, sums.dtype)
    out_lasts = np.zeros(groups, sums.dtype)
    out_seen = np.zeros(groups, np.uint8)
    for g in range(groups):
        end = starts[g + 1] if g + 1 < groups else n
        total = sums[starts[g]]
        first = firsts[starts[g]]
        last = lasts[starts[g]]
        held = seen[starts[g]] != 0
        for i in range(starts[g] + 1, end):
            other = seen[i] != 0
            if held and other and last < firsts[i]:
                total += sums[i] + (firsts[i] - last)
                last = lasts[i]
            elif held and other and firsts[i] < last:
                total += sums[i]
                last = lasts[i]
            elif other and not held:
                total = sums[i]
                first = firsts[i]
                last = lasts[i]
                held = True
        out_sums[g] = total
        out_firsts[g] = first
        out_lasts[g] = last
        out_seen[g] = 1 if held else 0
    return out_sums, out_firsts, out_lasts, out_seen


@lazy_njit
def _less128(a_low: np.uint64, a_high: np.uint64, b_low: np.uint64, b_high: np.uint64, signed: bool
             ) -> bool:  # pragma: no cover - compiled
    if a_high != b_high:
        if signed:
            return bool(np.int64(a_high) < np.int64(b_high))
        return bool(a_high < b_high)
    return bool(a_low < b_low)


@lazy_njit
def _add128(a_low: np.uint64, a_high: np.uint64, b_low: np.uint64, b_high: np.uint64
            ) -> tuple[np.uint64, np.uint64]:  # pragma: no cover - compiled
    low = a_low + b_low
    carry = np.uint64(1) if low < a_low else np.uint64(0)
    return low, a_high + b_high + carry


@lazy_njit
def _sub128(a_low: np.uint64, a_high: np.uint64, b_low: np.uint64, b_high: np.uint64
            ) -> tuple[np.uint64, np.uint64]:  # pragma: no cover - compiled
    borrow = np.uint64(1) if a_low < b_low else np.uint64(0)
    return a_low - b_low, a_high - b_high - borrow


@lazy_njit
def delta_sums_wide(words: np.ndarray, starts: np.ndarray, n: int, signed: bool) -> np.ndarray:  # pragma: no cover - compiled
    """delta_sums of 128-bit integers ((n, 2) little-endian uint64 words), modulo 2^128: (groups, 6)
    words of sum, first and last."""
    groups = len(starts)
    out = np.zeros((groups, 6), np.uint64)
    for g in range(groups):
        end = starts[g + 1] if g + 1 < groups else n
        first_low, first_high = words[starts[g], 0], words[starts[g], 1]
        last_low, last_high = first_low, first_high
        sum_low, sum_high = np.uint64(0), np.uint64(0)
        for i in range(starts[g] + 1, end):
            low, high = words[i, 0], words[i, 1]
            if _less128(last_low, last_high, low, high, signed):
                rise_low, rise_high = _sub128(low, high, last_low, last_high)
                sum_low, sum_high = _add128(sum_low, sum_high, rise_low, rise_high)
            last_low, last_high = low, high
        out[g, 0], out[g, 1] = sum_low, sum_high
        out[g, 2], out[g, 3] = first_low, first_high
        out[g, 4], out[g, 5] = last_low, last_high
    return out


@lazy_njit
def delta_merges_wide(states: np.ndarray, seen: np.ndarray, starts: np.ndarray, signed: bool
                      ) -> tuple[np.ndarray, np.ndarray]:  # pragma: no cover - compiled
    """delta_merges of 128-bit states ((n, 6) words: sum, first, last)."""
    n = len(states)
    groups = len(starts)
    out = np.zeros((groups, 6), np.uint64)
    out_seen = np.zeros(groups, np.uint8)
    for g in range(groups):
        end = starts[g + 1] if g + 1 < groups else n
        kept = states[starts[g]].copy()
        held = seen[starts[g]] != 0
        for i in range(starts[g] + 1, end):
            other = seen[i] != 0
            if held and other and _less128(kept[4], kept[5], states[i, 2], states[i, 3], signed):
                gap_low, gap_high = _sub128(states[i, 2], states[i, 3], kept[4], kept[5])
                low, high = _add128(kept[0], kept[1], states[i, 0], states[i, 1])
                kept[0], kept[1] = _add128(low, high, gap_low, gap_high)
                kept[4], kept[5] = states[i, 4], states[i, 5]
            elif held and other and _less128(states[i, 2], states[i, 3], kept[4], kept[5], signed):
                kept[0], kept[1] = _add128(kept[0], kept[1], states[i, 0], states[i, 1])
                kept[4], kept[5] = states[i, 4], states[i, 5]
            elif other and not held:
                kept[:] = states[i]
                held = True
        out[g] = kept
        out_seen[g] = 1 if held else 0
    return out, out_seen


# ---------------------------------------------------------------------------------------------
# boundingRatio: the leftmost and rightmost points.


@lazy_njit
def bounding_points(x: np.ndarray, y: np.ndarray, empty: np.ndarray, right_x: np.ndarray, right_y: np.ndarray,
                    starts: np.ndarray, merging: bool) -> tuple[np.ndarray, np.ndarray]:  # pragma: no cover - compiled
    """Per group, (empty flag, (groups, 4) left x, left y, right x, right y). Rows (not `merging`):
    point i is (x[i], y[i]); the first sets both ends, a later one replaces the left end when its x
    is smaller, else the right end when larger (a NaN never replaces). States (`merging`): point i is
    the left end (x, y) and the right end (right_x, right_y) of state i, states `empty` left out;
    the first state with points is taken whole."""
    n = len(x)
    groups = len(starts)
    out = np.zeros((groups, 4), np.float64)
    out_empty = np.ones(groups, np.uint8)
    for g in range(groups):
        end = starts[g + 1] if g + 1 < groups else n
        held = False
        lx = ly = rx = ry = 0.0
        for i in range(starts[g], end):
            if merging and empty[i] != 0:
                continue
            if not held:
                lx, ly = x[i], y[i]
                rx, ry = (right_x[i], right_y[i]) if merging else (x[i], y[i])
                held = True
            elif merging:
                if x[i] < lx:
                    lx, ly = x[i], y[i]
                if right_x[i] > rx:
                    rx, ry = right_x[i], right_y[i]
            elif x[i] < lx:
                lx, ly = x[i], y[i]
            elif x[i] > rx:
                rx, ry = x[i], y[i]
        if held:
            out_empty[g] = 0
            out[g, 0], out[g, 1], out[g, 2], out[g, 3] = lx, ly, rx, ry
    return out_empty, out


# ---------------------------------------------------------------------------------------------
# sumMap / minMap / maxMap: a varuint count of entries, each a key then its 64-bit values.


@lazy_njit
def map_entries(data: np.ndarray, begins: np.ndarray, key_width: int, value_bytes: int
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # pragma: no cover - compiled
    """The entries of -Map states starting at data[begins[s]]: (state of each entry, where its key
    starts, the key's length). A key is `key_width` bytes, or (0) a varuint length then its bytes;
    its `value_bytes` of values follow it."""
    total = 0
    counts = np.zeros(len(begins), np.int64)
    for s in range(len(begins)):
        at = begins[s]
        count = 0
        shift = 0
        while True:
            byte = data[at]
            at += 1
            count |= (np.int64(byte) & 0x7F) << shift
            shift += 7
            if byte < 0x80:
                break
        counts[s] = count
        total += count
    states = np.empty(total, np.int64)
    key_starts = np.empty(total, np.int64)
    key_lengths = np.empty(total, np.int64)
    e = 0
    for s in range(len(begins)):
        at = begins[s]
        while data[at] >= 0x80:
            at += 1
        at += 1
        for _ in range(counts[s]):
            length = key_width
            if key_width == 0:
                length = 0
                shift = 0
                while True:
                    byte = data[at]
                    at += 1
                    length |= (np.int64(byte) & 0x7F) << shift
                    shift += 7
                    if byte < 0x80:
                        break
            states[e] = s
            key_starts[e] = at
            key_lengths[e] = length
            at += length + value_bytes
            e += 1
    return states, key_starts, key_lengths


@lazy_njit
def first_then_sums(values: np.ndarray, starts: np.ndarray, n: int) -> np.ndarray:  # pragma: no cover - compiled
    """Per segment, its first value (as it is: -0 stays) plus each later one in turn, the added
    value's NaN winning (sumMap's Field sums: an entry's first value is kept, not added to 0)."""
    out = np.zeros(len(starts), values.dtype)
    for g in range(len(starts)):
        end = starts[g + 1] if g + 1 < len(starts) else n
        total = values[starts[g]]
        for i in range(starts[g] + 1, end):
            total = added(total, values[i])
        out[g] = total
    return out

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


# ---------------------------------------------------------------------------------------------
# groupBitmap: a small set of up to 32 values (kind 0), else (kind 1) a roaring bitmap in CRoaring's
# portable serialization. Values are ClickHouse's `Value` (the argument cast to UInt32, or to UInt64
# for 64-bit types) as uint64. A container (the values sharing their upper bits, `full key`: bits 16
# and up) is an array, a bitset or runs; which one ClickHouse writes depends on the container's
# history, followed here: adds keep an array up to 4096 values (then a bitset) and runs as runs;
# unions follow CRoaring's container_or / container_ior; writing converts each container to its
# smallest form (runOptimize, sizes as CRoaring counts them: an array 2 bytes a value, a bitset
# 8192, runs 2 + 4 a run): an array or a bitset becomes runs only when they are strictly smaller,
# runs stay unless an array or a bitset is strictly smaller. So a container of 2r + 1 values in r
# runs is written as an array when it was made by adds, as runs when runs were or-ed into it.

SMALL_SET = 32
ARRAY, BITSET, RUNS = 1, 2, 3
_NO_RUNS_COOKIE, _RUNS_COOKIE = 12346, 12347
_ARRAY_LIMIT = 4096


@lazy_njit
def _varuint(data: np.ndarray, at: int) -> tuple[int, int]:  # pragma: no cover - compiled
    value = 0
    shift = 0
    while True:
        byte = data[at]
        at += 1
        value |= (np.int64(byte) & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, at


@lazy_njit
def _u16(data: np.ndarray, at: int) -> int:  # pragma: no cover - compiled
    return np.int64(data[at]) | (np.int64(data[at + 1]) << 8)


@lazy_njit
def _u32(data: np.ndarray, at: int) -> int:  # pragma: no cover - compiled
    return _u16(data, at) | (_u16(data, at + 2) << 16)


@lazy_njit
def bitmap_state_parts(data: np.ndarray, begins: np.ndarray, width: int, signed: bool
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:  # pragma: no cover - compiled
    """Per groupBitmap state: (large?, where its small values or portable bytes start, how many
    small values), and the small values of all states back to back as `Value`s with their offsets."""
    n = len(begins)
    large = np.zeros(n, np.bool_)
    starts = np.zeros(n, np.int64)
    counts = np.zeros(n, np.int64)
    for s in range(n):
        large[s] = data[begins[s]] == 1
        count, at = _varuint(data, begins[s] + 1)
        starts[s] = at
        counts[s] = 0 if large[s] else count
    offsets = np.zeros(n + 1, np.int64)
    for s in range(n):
        offsets[s + 1] = offsets[s] + counts[s]
    values = np.zeros(offsets[n], np.uint64)
    for s in range(n):
        for k in range(counts[s]):
            at = starts[s] + k * width
            raw = np.uint64(0)
            for b in range(width):
                raw |= np.uint64(data[at + b]) << np.uint64(8 * b)
            values[offsets[s] + k] = _as_value(raw, width, signed)
    return large, starts, counts, values, offsets


@lazy_njit
def _as_value(raw: np.uint64, width: int, signed: bool) -> np.uint64:  # pragma: no cover - compiled
    """A value of `width` bytes as ClickHouse's static_cast to UInt32 (UInt64 for 8 bytes) gives it."""
    if width >= 8:
        return raw
    if signed and (raw >> np.uint64(8 * width - 1)) & np.uint64(1):
        raw |= ~((np.uint64(1) << np.uint64(8 * width)) - np.uint64(1))
    return raw & np.uint64(0xFFFFFFFF)


@lazy_njit
def bitmap_merge_plan(starts: np.ndarray, large: np.ndarray, small_values: np.ndarray, small_offsets: np.ndarray
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:  # pragma: no cover - compiled
    """States merged per group as ClickHouse's RoaringBitmapWithSmallSet::merge does. Returns (the
    group's result large?, the small sets' values and offsets per group, then the operations on the
    large bitmaps in order: group, sequence number, the state whose bitmap is or-ed in (-1: adds),
    and the added values with offsets per operation)."""
    n = len(large)
    groups = len(starts)
    group_large = np.zeros(groups, np.bool_)
    kept = np.zeros(groups * SMALL_SET, np.uint64)
    kept_counts = np.zeros(groups, np.int64)
    capacity = 2 * n + groups
    op_groups = np.zeros(capacity, np.int64)
    op_states = np.full(capacity, -1, np.int64)
    op_offsets = np.zeros(capacity + 1, np.int64)
    added = np.zeros(len(small_values) + groups * (SMALL_SET + 1), np.uint64)
    ops = 0
    used = 0
    for g in range(groups):
        end = starts[g + 1] if g + 1 < groups else n
        count = 0
        is_large = False
        for s in range(starts[g], end):
            if large[s]:
                if not is_large:
                    # toLarge: the small set's values are added, then the bitmap or-ed in.
                    for k in range(count):
                        added[used] = kept[g * SMALL_SET + k]
                        used += 1
                    op_groups[ops] = g
                    ops += 1
                    op_offsets[ops] = used
                    is_large = True
                op_groups[ops] = g
                op_states[ops] = s
                ops += 1
                op_offsets[ops] = used
                continue
            if is_large:
                for k in range(small_offsets[s], small_offsets[s + 1]):
                    added[used] = small_values[k]
                    used += 1
                op_groups[ops] = g
                ops += 1
                op_offsets[ops] = used
                continue
            for k in range(small_offsets[s], small_offsets[s + 1]):
                value = small_values[k]
                if is_large:
                    added[used] = value
                    used += 1
                    continue
                present = False
                for j in range(count):
                    if kept[g * SMALL_SET + j] == value:
                        present = True
                        break
                if present:
                    continue
                if count < SMALL_SET:
                    kept[g * SMALL_SET + count] = value
                    count += 1
                    continue
                for j in range(count):
                    added[used] = kept[g * SMALL_SET + j]
                    used += 1
                added[used] = value
                used += 1
                is_large = True
            if is_large:
                op_groups[ops] = g
                ops += 1
                op_offsets[ops] = used
        group_large[g] = is_large
        kept_counts[g] = 0 if is_large else count
    kept_offsets = np.zeros(groups + 1, np.int64)
    for g in range(groups):
        kept_offsets[g + 1] = kept_offsets[g] + kept_counts[g]
    kept_values = np.zeros(kept_offsets[groups], np.uint64)
    for g in range(groups):
        for k in range(kept_counts[g]):
            kept_values[kept_offsets[g] + k] = kept[g * SMALL_SET + k]
    return (group_large, kept_values, kept_offsets, op_groups[:ops], op_states[:ops], op_offsets[:ops + 1].copy(),
            added[:used].copy(), np.arange(ops))


@lazy_njit
def bitmap_containers(data: np.ndarray, begins: np.ndarray, wide: bool
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:  # pragma: no cover - compiled
    """The containers of portable roaring bitmaps (`wide`: Roaring64Map's, a UInt64 count of 32-bit
    bitmaps each after its UInt32 upper half) starting at data[begins[b]]: per container, its bitmap,
    full key, kind, and its values (the lower 16 bits) with offsets."""
    total_containers = 0
    total_values = 0
    for phase in range(2):
        if phase == 1:
            owners = np.zeros(total_containers, np.int64)
            keys = np.zeros(total_containers, np.int64)
            kinds = np.zeros(total_containers, np.int64)
            offsets = np.zeros(total_containers + 1, np.int64)
            values = np.zeros(total_values, np.uint16)
        c = 0
        v = 0
        for b in range(len(begins)):
            at = begins[b]
            maps = 1
            if wide:
                maps = _u32(data, at) | (_u32(data, at + 4) << 32)
                at += 8
            for _ in range(maps):
                high = 0
                if wide:
                    high = _u32(data, at)
                    at += 4
                cookie = _u32(data, at)
                has_runs = (cookie & 0xFFFF) == _RUNS_COOKIE
                if has_runs:
                    size = (cookie >> 16) + 1
                    run_flags = at + 4
                    descriptions = run_flags + (size + 7) // 8
                    at = descriptions + 4 * size + (4 * size if size >= 4 else 0)
                else:
                    size = _u32(data, at + 4)
                    run_flags = -1
                    descriptions = at + 8
                    at = descriptions + 8 * size
                for i in range(size):
                    key = _u16(data, descriptions + 4 * i)
                    card = _u16(data, descriptions + 4 * i + 2) + 1
                    runs = has_runs and (data[run_flags + i // 8] >> (i % 8)) & 1 == 1
                    kind = RUNS if runs else BITSET if card > _ARRAY_LIMIT else ARRAY
                    if phase == 1:
                        owners[c] = b
                        keys[c] = (high << 16) | key
                        kinds[c] = kind
                    if kind == ARRAY:
                        if phase == 1:
                            for k in range(card):
                                values[v + k] = _u16(data, at + 2 * k)
                        at += 2 * card
                    elif kind == BITSET:
                        if phase == 1:
                            k = 0
                            for word in range(1024):
                                for bit in range(64):
                                    if (data[at + 8 * word + bit // 8] >> (bit % 8)) & 1:
                                        values[v + k] = word * 64 + bit
                                        k += 1
                        at += 8192
                    else:
                        count = _u16(data, at)
                        if phase == 1:
                            k = 0
                            for r in range(count):
                                first = _u16(data, at + 2 + 4 * r)
                                for j in range(_u16(data, at + 4 + 4 * r) + 1):
                                    values[v + k] = first + j
                                    k += 1
                        at += 2 + 4 * count
                    v += card
                    c += 1
                    if phase == 1:
                        offsets[c] = v
        total_containers = c
        total_values = v
    return owners, keys, kinds, values, offsets


@lazy_njit
def _efficient(card: int, runs: int) -> int:  # pragma: no cover - compiled
    """CRoaring's convert_run_to_efficient_container: runs unless an array or bitset is smaller."""
    as_runs = 2 + 4 * runs
    smallest = min(8192, 2 * card)
    if as_runs <= smallest:
        return RUNS
    return ARRAY if card <= _ARRAY_LIMIT else BITSET


@lazy_njit
def bitmap_fold(groups: np.ndarray, keys: np.ndarray, sequence: np.ndarray, kinds: np.ndarray, lows: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:  # pragma: no cover - compiled
    """Containers built from items sorted by (group, full key, sequence): each item a value's lower
    16 bits added (kind 0) or or-ed in from a container of `kind` (one operation: one sequence
    number). Returns per resulting container (group, full key, kind as written, cardinality, number
    of runs) and its values sorted, with offsets."""
    n = len(groups)
    words = np.zeros(1024, np.uint64)
    touched = np.zeros(1024, np.int64)  # the words holding values, so that sparse containers cost little
    out_groups = np.zeros(n, np.int64)
    out_keys = np.zeros(n, np.int64)
    out_kinds = np.zeros(n, np.int64)
    out_cards = np.zeros(n, np.int64)
    out_runs = np.zeros(n, np.int64)
    out_offsets = np.zeros(n + 1, np.int64)
    values = np.zeros(n, np.uint16)
    containers = 0
    used = 0
    i = 0
    while i < n:
        end = i
        while end < n and groups[end] == groups[i] and keys[end] == keys[i]:
            end += 1
        kind = 0
        card = 0
        count = 0
        j = i
        while j < end:
            op_end = j
            while op_end < end and sequence[op_end] == sequence[j]:
                op_end += 1
            before = card
            for k in range(j, op_end):
                word = lows[k] >> 6
                bit = np.uint64(1) << np.uint64(lows[k] & 63)
                if not words[word]:
                    touched[count] = word
                    count += 1
                if not words[word] & bit:
                    words[word] |= bit
                    card += 1
            other = kinds[j]
            if other == 0:
                if kind == 0:
                    kind = ARRAY
                if kind == ARRAY and card > _ARRAY_LIMIT:
                    kind = BITSET
            elif kind == 0:
                kind = other
            elif before == 65536:
                pass  # a full container is left as it is
            elif kind == ARRAY and other == ARRAY:
                kind = ARRAY if card <= _ARRAY_LIMIT else BITSET
            elif kind == BITSET and other == RUNS:
                kind = RUNS if op_end - j == 65536 else BITSET
            elif kind == BITSET or other == BITSET:
                kind = BITSET
            else:
                kind = _efficient(card, _runs_of(words, touched[:count]))
            j = op_end
        runs = _runs_of(words, touched[:count])
        if kind == ARRAY:
            kind = RUNS if 2 + 4 * runs < 2 * card else ARRAY
        elif kind == BITSET:
            kind = RUNS if 2 + 4 * runs < 8192 else BITSET
        else:
            kind = _efficient(card, runs)
        for word in np.sort(touched[:count]):
            bits = words[word]
            words[word] = 0
            bit = 0
            while bits:
                if bits & np.uint64(1):
                    values[used] = word * 64 + bit
                    used += 1
                bits >>= np.uint64(1)
                bit += 1
        out_groups[containers] = groups[i]
        out_keys[containers] = keys[i]
        out_kinds[containers] = kind
        out_cards[containers] = card
        out_runs[containers] = runs
        containers += 1
        out_offsets[containers] = used
        i = end
    return (out_groups[:containers], out_keys[:containers], out_kinds[:containers], out_cards[:containers],
            out_runs[:containers], values[:used], out_offsets[:containers + 1])


@lazy_njit
def _runs_of(words: np.ndarray, touched: np.ndarray) -> int:  # pragma: no cover - compiled
    """The number of runs of consecutive set bits in a container (its words holding values listed
    in `touched`)."""
    runs = 0
    for word in touched:
        bits = words[word]
        previous_high = words[word - 1] >> np.uint64(63) if word > 0 else np.uint64(0)
        starts = bits & ~((bits << np.uint64(1)) | previous_high)
        while starts:
            starts &= starts - np.uint64(1)
            runs += 1
    return runs


@lazy_njit
def _portable_size(count: int, has_runs: bool) -> int:  # pragma: no cover - compiled
    """Bytes of a portable bitmap's header for `count` containers."""
    if has_runs:
        return 4 + (count + 7) // 8 + 4 * count + (4 * count if count >= 4 else 0)
    return 8 + 8 * count


@lazy_njit
def _container_size(kind: int, card: int, runs: int) -> int:  # pragma: no cover - compiled
    return 2 * card if kind == ARRAY else 8192 if kind == BITSET else 2 + 4 * runs


@lazy_njit
def _bitmap_bytes(first: int, last: int, keys: np.ndarray, kinds: np.ndarray, cards: np.ndarray, runs: np.ndarray,
                  values: np.ndarray, offsets: np.ndarray, out: np.ndarray, at: int, write: bool) -> int:  # pragma: no cover - compiled
    """One portable 32-bit bitmap of containers first..last-1 written at out[at] (when `write`);
    returns where it ends."""
    count = last - first
    has_runs = False
    for c in range(first, last):
        has_runs = has_runs or kinds[c] == RUNS
    header = _portable_size(count, has_runs)
    if not write:
        end = at + header
        for c in range(first, last):
            end += _container_size(kinds[c], cards[c], runs[c])
        return end
    if has_runs:
        _put(out, at, _RUNS_COOKIE | ((count - 1) << 16), 4)
        flags = at + 4
        for c in range(first, last):
            if kinds[c] == RUNS:
                out[flags + (c - first) // 8] |= np.uint8(1 << ((c - first) % 8))
        descriptions = flags + (count + 7) // 8
    else:
        _put(out, at, _NO_RUNS_COOKIE, 4)
        _put(out, at + 4, count, 4)
        descriptions = at + 8
    place = at + header
    with_offsets = not has_runs or count >= 4
    for c in range(first, last):
        i = c - first
        _put(out, descriptions + 4 * i, keys[c] & 0xFFFF, 2)
        _put(out, descriptions + 4 * i + 2, cards[c] - 1, 2)
        if with_offsets:
            _put(out, descriptions + 4 * count + 4 * i, place - at, 4)
        place += _container_size(kinds[c], cards[c], runs[c])
    place = at + header
    for c in range(first, last):
        begin, end = offsets[c], offsets[c + 1]
        if kinds[c] == ARRAY:
            for k in range(begin, end):
                _put(out, place + 2 * (k - begin), np.int64(values[k]), 2)
        elif kinds[c] == BITSET:
            for k in range(begin, end):
                value = np.int64(values[k])
                out[place + value // 8] |= np.uint8(1 << (value % 8))
        else:
            _put(out, place, runs[c], 2)
            r = 0
            k = begin
            while k < end:
                stop = k + 1
                while stop < end and np.int64(values[stop]) == np.int64(values[stop - 1]) + 1:
                    stop += 1
                _put(out, place + 2 + 4 * r, np.int64(values[k]), 2)
                _put(out, place + 4 + 4 * r, stop - k - 1, 2)
                r += 1
                k = stop
        place += _container_size(kinds[c], cards[c], runs[c])
    return place


@lazy_njit
def _put(out: np.ndarray, at: int, value: int, width: int) -> None:  # pragma: no cover - compiled
    for b in range(width):
        out[at + b] = np.uint8((value >> (8 * b)) & 0xFF)


@lazy_njit
def _varuint_size(value: int) -> int:  # pragma: no cover - compiled
    size = 1
    while value >= 0x80:
        value >>= 7
        size += 1
    return size


@lazy_njit
def bitmap_states(large: np.ndarray, small_values: np.ndarray, small_offsets: np.ndarray, width: int,
                  container_groups: np.ndarray, keys: np.ndarray, kinds: np.ndarray, cards: np.ndarray,
                  runs: np.ndarray, values: np.ndarray, offsets: np.ndarray, wide: bool
                  ) -> tuple[np.ndarray, np.ndarray]:  # pragma: no cover - compiled
    """groupBitmap states per group: kind 0, a varuint count and the small set's values (`width`
    bytes each), or kind 1, a varuint size and the portable bitmap of the group's containers
    (sorted by full key; `wide`: as Roaring64Map writes them). Returns (bytes, offsets)."""
    groups = len(large)
    first_container = np.zeros(groups + 1, np.int64)
    for c in range(len(container_groups)):
        first_container[container_groups[c] + 1] += 1
    for g in range(groups):
        first_container[g + 1] += first_container[g]
    state_offsets = np.zeros(groups + 1, np.int64)
    out = np.zeros(0, np.uint8)
    for phase in range(2):
        write = phase == 1
        if write:
            out = np.zeros(state_offsets[groups], np.uint8)
        for g in range(groups):
            at = state_offsets[g] if write else 0
            if not large[g]:
                count = small_offsets[g + 1] - small_offsets[g]
                size = 1 + _varuint_size(count) + width * count
                if write:
                    out[at] = 0
                    place = at + 1
                    value = count
                    while value >= 0x80:
                        out[place] = np.uint8((value & 0x7F) | 0x80)
                        value >>= 7
                        place += 1
                    out[place] = np.uint8(value)
                    place += 1
                    for k in range(small_offsets[g], small_offsets[g + 1]):
                        raw = small_values[k]
                        for b in range(width):
                            out[place + b] = np.uint8((raw >> np.uint64(8 * b)) & np.uint64(0xFF))
                        place += width
                else:
                    state_offsets[g + 1] = state_offsets[g] + size
                continue
            first, last = first_container[g], first_container[g + 1]
            body = 0
            maps = 0
            if wide:
                c = first
                body = 8
                while c < last:
                    stop = c
                    while stop < last and keys[stop] >> 16 == keys[c] >> 16:
                        stop += 1
                    body = _bitmap_bytes(c, stop, keys, kinds, cards, runs, values, offsets, out, body + 4, False)
                    maps += 1
                    c = stop
            else:
                body = _bitmap_bytes(first, last, keys, kinds, cards, runs, values, offsets, out, 0, False)
            head = 1 + _varuint_size(body)
            if not write:
                state_offsets[g + 1] = state_offsets[g] + head + body
                continue
            out[at] = 1
            place = at + 1
            value = body
            while value >= 0x80:
                out[place] = np.uint8((value & 0x7F) | 0x80)
                value >>= 7
                place += 1
            out[place] = np.uint8(value)
            place += 1
            if wide:
                _put(out, place, maps, 8)
                place += 8
                c = first
                while c < last:
                    stop = c
                    while stop < last and keys[stop] >> 16 == keys[c] >> 16:
                        stop += 1
                    _put(out, place, keys[c] >> 16, 4)
                    place = _bitmap_bytes(c, stop, keys, kinds, cards, runs, values, offsets, out, place + 4, True)
                    c = stop
            else:
                _bitmap_bytes(first, last, keys, kinds, cards, runs, values, offsets, out, place, True)
    return out, state_offsets


# ---------------------------------------------------------------------------------------------
# sumMap, minMap, maxMap of a Map (the -Map combinator): ClickHouse keeps a state's keys in a
# std::unordered_map of libc++ (the C++ library ClickHouse is built with) and writes them in its
# iteration order. That table is a singly linked list of nodes behind a "before begin" node, and an
# array of buckets, each pointing at the node *before* the bucket's first node (or nothing):
# - a key's hash is std::hash: an integer's value sign-extended to 64 bits; a string's CityHash-like
#   hash (`libcxx_string_hashes`); its bucket is hash & (count - 1) for a power of two, else
#   hash % count;
# - a new key goes first in the list when its bucket is empty (the bucket then points at the
#   "before begin" node, and the bucket of the node that was first at the new node), else right
#   after the node its bucket points at (first among its bucket's nodes);
# - before adding the key that would make size > bucket count (the first key too), the buckets
#   grow to max(2 * count + 1, size + 1) rounded up to a prime (to 2 from nothing): 2, 5, 11, 23,
#   47, 97, 197, ...; the list is then walked once, each node kept where it is when its bucket is
#   the previous node's or still empty (which then points at the previous node), else moved to
#   the front of its bucket's nodes.
# A table below: `following` (node -> next node, -1 none; index `head` is the "before begin" node),
# `hashes` per node, `buckets` (-1 empty) and `meta` = [size, bucket count].

_K0 = np.uint64(0xC3A5C85C97CB3127)
_K1 = np.uint64(0xB492B66FBE98F273)
_K2 = np.uint64(0x9AE16A3B2F90404F)
_K3 = np.uint64(0xC949D7C7509E6557)
_MIX = np.uint64(0x9DDFEA08EB382D69)


@lazy_njit
def _word(data: np.ndarray, at: int, width: int) -> np.uint64:  # pragma: no cover - compiled
    value = np.uint64(0)
    for i in range(width):
        value |= np.uint64(data[at + i]) << np.uint64(8 * i)
    return value


@lazy_njit
def _rotated(value: np.uint64, shift: int) -> np.uint64:  # pragma: no cover - compiled
    if shift == 0:
        return value
    return (value >> np.uint64(shift)) | (value << np.uint64(64 - shift))


@lazy_njit
def _mixed(value: np.uint64) -> np.uint64:  # pragma: no cover - compiled
    return value ^ (value >> np.uint64(47))


@lazy_njit
def _pair_hash(u: np.uint64, v: np.uint64) -> np.uint64:  # pragma: no cover - compiled
    a = (u ^ v) * _MIX
    a ^= a >> np.uint64(47)
    b = (v ^ a) * _MIX
    b ^= b >> np.uint64(47)
    return b * _MIX


@lazy_njit
def _weak_pair(data: np.ndarray, at: int, a: np.uint64, b: np.uint64) -> tuple[np.uint64, np.uint64]:  # pragma: no cover - compiled
    """A 16-byte hash of data[at:at + 32] with seeds a and b."""
    w = _word(data, at, 8)
    a += w
    b = _rotated(b + a + _word(data, at + 24, 8), 21)
    c = a
    a += _word(data, at + 8, 8)
    a += _word(data, at + 16, 8)
    b += _rotated(a, 44)
    return a + _word(data, at + 24, 8), b + c


@lazy_njit
def _string_hash(data: np.ndarray, s: int, n: int) -> np.uint64:  # pragma: no cover - compiled
    """libc++'s std::hash of the n bytes at data[s] (CityHash64 of 2011, with the fix that keeps
    all 32 bits of the first word of a 4 to 8 byte string: measured in ClickHouse 26.9)."""
    length = np.uint64(n)
    if n == 0:
        return _K2
    if n <= 3:
        y = np.uint64(np.uint32(data[s]) + (np.uint32(data[s + (n >> 1)]) << np.uint32(8)))
        z = np.uint64(np.uint32(n) + (np.uint32(data[s + n - 1]) << np.uint32(2)))
        return _mixed((y * _K2) ^ (z * _K3)) * _K2
    if n <= 8:
        return _pair_hash(length + (_word(data, s, 4) << np.uint64(3)), _word(data, s + n - 4, 4))
    if n <= 16:
        a = _word(data, s, 8)
        b = _word(data, s + n - 8, 8)
        return _pair_hash(a, _rotated(b + length, n & 63)) ^ b
    if n <= 32:
        a = _word(data, s, 8) * _K1
        b = _word(data, s + 8, 8)
        c = _word(data, s + n - 8, 8) * _K2
        d = _word(data, s + n - 16, 8) * _K0
        return _pair_hash(_rotated(a - b, 43) + _rotated(c, 30) + d, a + _rotated(b ^ _K3, 20) - c + length)
    if n <= 64:
        z = _word(data, s + 24, 8)
        a = _word(data, s, 8) + (length + _word(data, s + n - 16, 8)) * _K0
        b = _rotated(a + z, 52)
        c = _rotated(a, 37)
        a += _word(data, s + 8, 8)
        c += _rotated(a, 7)
        a += _word(data, s + 16, 8)
        first_f = a + z
        first_s = b + _rotated(a, 31) + c
        a = _word(data, s + 16, 8) + _word(data, s + n - 32, 8)
        z += _word(data, s + n - 8, 8)
        b = _rotated(a + z, 52)
        c = _rotated(a, 37)
        a += _word(data, s + n - 24, 8)
        c += _rotated(a, 7)
        a += _word(data, s + n - 16, 8)
        second_f = a + z
        second_s = b + _rotated(a, 31) + c
        r = _mixed((first_f + second_s) * _K2 + (second_f + first_s) * _K0)
        return _mixed(r * _K0 + first_s) * _K2
    x = _word(data, s + n - 40, 8)
    y = _word(data, s + n - 16, 8) + _word(data, s + n - 56, 8)
    z = _pair_hash(_word(data, s + n - 48, 8) + length, _word(data, s + n - 24, 8))
    v0, v1 = _weak_pair(data, s + n - 64, length, z)
    w0, w1 = _weak_pair(data, s + n - 32, y + _K1, x)
    x = x * _K1 + _word(data, s, 8)
    left = (n - 1) & ~63
    at = s
    while True:
        x = _rotated(x + y + v0 + _word(data, at + 8, 8), 37) * _K1
        y = _rotated(y + v1 + _word(data, at + 48, 8), 42) * _K1
        x ^= w1
        y += v0 + _word(data, at + 40, 8)
        z = _rotated(z + w0, 33) * _K1
        v0, v1 = _weak_pair(data, at, v1 * _K1, x + w0)
        w0, w1 = _weak_pair(data, at + 32, z + w1, y + _word(data, at + 16, 8))
        x, z = z, x
        at += 64
        left -= 64
        if left == 0:
            break
    return _pair_hash(_pair_hash(v0, w0) + _mixed(y) * _K1 + z, _pair_hash(v1, w1) + x)


@lazy_njit
def libcxx_string_hashes(data: np.ndarray, offsets: np.ndarray) -> np.ndarray:  # pragma: no cover - compiled
    """libc++'s std::hash of each string data[offsets[i]:offsets[i + 1]]."""
    out = np.empty(len(offsets) - 1, np.uint64)
    for i in range(len(out)):
        out[i] = _string_hash(data, offsets[i], offsets[i + 1] - offsets[i])
    return out


@lazy_njit
def _bucket_of(h: np.uint64, count: int) -> int:  # pragma: no cover - compiled
    if count & (count - 1) == 0:
        return np.int64(h & np.uint64(count - 1))
    return np.int64(h % np.uint64(count))


@lazy_njit
def _prime_from(n: int) -> int:  # pragma: no cover - compiled
    """The smallest prime >= n (n >= 2)."""
    while True:
        d = 2
        prime = True
        while d * d <= n:
            if n % d == 0:
                prime = False
                break
            d += 1
        if prime:
            return n
        n += 1


@lazy_njit
def _relink(following: np.ndarray, hashes: np.ndarray, buckets: np.ndarray, meta: np.ndarray, head: int,
            count: int) -> None:  # pragma: no cover - compiled
    """The table's buckets remade for `count` buckets, nodes moved as libc++'s rehash moves them."""
    buckets[:count] = -1
    meta[1] = count
    previous = head
    node = following[head]
    if node == -1:
        return
    bucket = _bucket_of(hashes[node], count)
    buckets[bucket] = head
    last_bucket = bucket
    previous = node
    node = following[node]
    while node != -1:
        bucket = _bucket_of(hashes[node], count)
        if bucket == last_bucket:
            previous = node
        elif buckets[bucket] == -1:
            buckets[bucket] = previous
            previous = node
            last_bucket = bucket
        else:
            following[previous] = following[node]
            following[node] = following[buckets[bucket]]
            following[buckets[bucket]] = node
        node = following[previous]


@lazy_njit
def _link(following: np.ndarray, hashes: np.ndarray, buckets: np.ndarray, meta: np.ndarray, head: int,
          node: int) -> None:  # pragma: no cover - compiled
    """Adds node `node` (a key not in the table; its hash set) as libc++'s emplace does."""
    size = meta[0]
    count = meta[1]
    if size + 1 > count:
        wanted = max(2 * count + (0 if count > 2 and count & (count - 1) == 0 else 1), size + 1)
        if wanted == 1:
            wanted = 2
        elif wanted & (wanted - 1):
            wanted = _prime_from(wanted)
        if wanted > count:
            _relink(following, hashes, buckets, meta, head, wanted)
        count = meta[1]
    bucket = _bucket_of(hashes[node], count)
    before = buckets[bucket]
    if before == -1:
        following[node] = following[head]
        following[head] = node
        buckets[bucket] = head
        if following[node] != -1:
            buckets[_bucket_of(hashes[following[node]], count)] = node
    else:
        following[node] = following[before]
        following[before] = node
    meta[0] = size + 1


@lazy_njit
def _new_table(capacity: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:  # pragma: no cover - compiled
    """(following, hashes, buckets, meta, keys) of a table of up to `capacity` keys."""
    return (np.full(capacity + 1, -1, np.int64), np.zeros(capacity, np.uint64), np.full(4 * capacity + 16, -1, np.int64),
            np.zeros(2, np.int64), np.zeros(capacity, np.int64))


@lazy_njit
def _ranks(following: np.ndarray, head: int, node_rank: np.ndarray, base: int) -> int:  # pragma: no cover - compiled
    """Numbers the table's nodes in iteration order from `base`; returns the next number."""
    node = following[head]
    while node != -1:
        node_rank[node] = base
        base += 1
        node = following[node]
    return base


@lazy_njit
def node_map_ranks(ids: np.ndarray, id_hashes: np.ndarray, starts: np.ndarray, n: int, distinct: int
                   ) -> np.ndarray:  # pragma: no cover - compiled
    """Keys (ids 0..distinct-1, hash of each id) added in order to one table per group of entries:
    each entry's key's place in its table's iteration order, numbered across groups."""
    largest = 0
    for g in range(len(starts)):
        largest = max(largest, (starts[g + 1] if g + 1 < len(starts) else n) - starts[g])
    following, hashes, buckets, meta, keys = _new_table(largest)
    head = largest
    node_of = np.full(distinct, -1, np.int64)
    node_rank = np.zeros(max(largest, 1), np.int64)
    out = np.empty(n, np.int64)
    base = 0
    for g in range(len(starts)):
        end = starts[g + 1] if g + 1 < len(starts) else n
        meta[:] = 0
        following[head] = -1
        for e in range(starts[g], end):
            key = ids[e]
            if node_of[key] < 0:
                node = meta[0]
                node_of[key] = node
                keys[node] = key
                hashes[node] = id_hashes[key]
                _link(following, hashes, buckets, meta, head, node)
        base = _ranks(following, head, node_rank, base)
        for e in range(starts[g], end):
            out[e] = node_rank[node_of[ids[e]]]
        for e in range(starts[g], end):
            node_of[ids[e]] = -1
    return out


@lazy_njit
def node_map_merge_ranks(ids: np.ndarray, id_hashes: np.ndarray, state_ends: np.ndarray, group_starts: np.ndarray,
                         distinct: int) -> np.ndarray:  # pragma: no cover - compiled
    """ClickHouse's merge of -Map states group by group: each state is read (its keys added in
    written order to a new table), then its table's keys, in iteration order, are added to the
    group's table, which starts empty. Keys of state s are entries state_ends[s - 1]:state_ends[s].
    Returns each entry's key's place in its group's final iteration order, numbered across groups."""
    states = len(state_ends)
    n = state_ends[states - 1] if states else 0
    largest_state = 0
    largest_group = 0
    for g in range(len(group_starts)):
        last = group_starts[g + 1] if g + 1 < len(group_starts) else states
        first_entry = state_ends[group_starts[g] - 1] if group_starts[g] > 0 else 0
        largest_group = max(largest_group, state_ends[last - 1] - first_entry)
    for s in range(states):
        largest_state = max(largest_state, state_ends[s] - (state_ends[s - 1] if s > 0 else 0))
    following, hashes, buckets, meta, keys = _new_table(largest_group)
    head = largest_group
    read_following, read_hashes, read_buckets, read_meta, read_keys = _new_table(largest_state)
    read_head = largest_state
    node_of = np.full(distinct, -1, np.int64)
    read_of = np.full(distinct, -1, np.int64)
    node_rank = np.zeros(max(largest_group, 1), np.int64)
    out = np.empty(n, np.int64)
    base = 0
    for g in range(len(group_starts)):
        last = group_starts[g + 1] if g + 1 < len(group_starts) else states
        first_entry = state_ends[group_starts[g] - 1] if group_starts[g] > 0 else 0
        meta[:] = 0
        following[head] = -1
        for s in range(group_starts[g], last):
            lo = state_ends[s - 1] if s > 0 else 0
            read_meta[:] = 0
            read_following[read_head] = -1
            for e in range(lo, state_ends[s]):
                key = ids[e]
                if read_of[key] < 0:
                    node = read_meta[0]
                    read_of[key] = node
                    read_keys[node] = key
                    read_hashes[node] = id_hashes[key]
                    _link(read_following, read_hashes, read_buckets, read_meta, read_head, node)
            at = read_following[read_head]
            while at != -1:
                key = read_keys[at]
                if node_of[key] < 0:
                    node = meta[0]
                    node_of[key] = node
                    keys[node] = key
                    hashes[node] = id_hashes[key]
                    _link(following, hashes, buckets, meta, head, node)
                at = read_following[at]
            for e in range(lo, state_ends[s]):
                read_of[ids[e]] = -1
        base = _ranks(following, head, node_rank, base)
        for e in range(first_entry, state_ends[last - 1]):
            out[e] = node_rank[node_of[ids[e]]]
        for e in range(first_entry, state_ends[last - 1]):
            node_of[ids[e]] = -1
    return out

"""Compiled kernels of format/states_events.py: ClickHouse 26.9's SpaceSaving (topK) replayed
counter by counter, and the parser of its states.

SpaceSaving keeps its counters (key, count, error) in order of first appearance, counting them in
place. Writing a state partially sorts a copy, most counted first (a greater count, or an equal
one with a smaller error): miniselect's Floyd-Rivest selection of the first `capacity`, then
libc++'s std::sort of them (its introsort: sorting networks up to 5 elements, insertion sort below
24, median of three or Tukey's ninther past 128, partitions with equals on the right or, next to an
equal pivot, on the left). Both algorithms are replayed step by step, so ties come out in
ClickHouse's order. Keys are given as ids (equal keys, equal ids).
"""

from __future__ import annotations

import numpy as np

from spark_mergetree.format.compiled import lazy_njit

_INSERTION_SORT_LIMIT = 24  # libc++'s std::sort sorts fewer elements by insertion


@lazy_njit
def _beats(counts, errors, a, b):
    """Counter a before counter b: more counted, or as counted with a smaller error."""
    return counts[a] > counts[b] or (counts[a] == counts[b] and errors[a] < errors[b])


@lazy_njit
def _swap(ids, counts, errors, a, b):
    ids[a], ids[b] = ids[b], ids[a]
    counts[a], counts[b] = counts[b], counts[a]
    errors[a], errors[b] = errors[b], errors[a]


@lazy_njit
def _select(ids, counts, errors, left, right, k):
    """miniselect's Floyd-Rivest selection loop (ranges of at most 600 elements: no sampling step),
    its pivot held by reference to a position, as the C++ does."""
    while right > left:
        i = left
        j = right
        _swap(ids, counts, errors, left, k)
        to_swap = _beats(counts, errors, left, right)
        if to_swap:
            _swap(ids, counts, errors, left, right)
        pivot = left if to_swap else right
        while i < j:
            _swap(ids, counts, errors, i, j)
            i += 1
            j -= 1
            while _beats(counts, errors, i, pivot):
                i += 1
            while _beats(counts, errors, pivot, j):
                j -= 1
        if to_swap:
            _swap(ids, counts, errors, left, j)
        else:
            j += 1
            _swap(ids, counts, errors, right, j)
        if j <= k:
            left = j + 1
        if k <= j:
            right = j - 1


@lazy_njit
def _sort3(ids, counts, errors, x, y, z):
    if not _beats(counts, errors, y, x):
        if not _beats(counts, errors, z, y):
            return
        _swap(ids, counts, errors, y, z)
        if _beats(counts, errors, y, x):
            _swap(ids, counts, errors, x, y)
        return
    if _beats(counts, errors, z, y):
        _swap(ids, counts, errors, x, z)
        return
    _swap(ids, counts, errors, x, y)
    if _beats(counts, errors, z, y):
        _swap(ids, counts, errors, y, z)


@lazy_njit
def _sink(ids, counts, errors, first, last):
    """Insertion sort of [first, last) by adjacent swaps (stable: a counter moves past those it beats)."""
    for i in range(first + 1, last):
        p = i
        while p > first and _beats(counts, errors, p, p - 1):
            _swap(ids, counts, errors, p - 1, p)
            p -= 1


@lazy_njit
def _small_sort(ids, counts, errors, first, last):
    """libc++'s sorting networks of 2 to 5 elements (__sort2 to __sort5: __sort3, then each next one
    sunk into place)."""
    length = last - first
    if length == 2:
        if _beats(counts, errors, first + 1, first):
            _swap(ids, counts, errors, first, first + 1)
        return
    _sort3(ids, counts, errors, first, first + 1, first + 2)
    for i in range(first + 3, last):
        p = i
        while p > first and _beats(counts, errors, p, p - 1):
            _swap(ids, counts, errors, p - 1, p)
            p -= 1


@lazy_njit
def _insertion_incomplete(ids, counts, errors, first, last):
    """libc++'s __insertion_sort_incomplete: gives up (False) after moving 8 elements."""
    length = last - first
    if length < 2:
        return True
    if length <= 5:
        _small_sort(ids, counts, errors, first, last)
        return True
    _sort3(ids, counts, errors, first, first + 1, first + 2)
    moved = 0
    for i in range(first + 3, last):
        if _beats(counts, errors, i, i - 1):
            p = i
            while p > first and _beats(counts, errors, p, p - 1):
                _swap(ids, counts, errors, p - 1, p)
                p -= 1
            moved += 1
            if moved == 8:
                return i + 1 == last
    return True


@lazy_njit
def _move(ids, counts, errors, to, frm):
    ids[to] = ids[frm]
    counts[to] = counts[frm]
    errors[to] = errors[frm]


@lazy_njit
def _partition_right(ids, counts, errors, first, last, pid, pc, pe):
    """libc++'s __partition_with_equals_on_right of [first, last) around the pivot (pid, pc, pe)
    taken out of `first`. Returns (the pivot's position, whether the range was already partitioned)."""
    begin = first
    first += 1
    while counts[first] > pc or (counts[first] == pc and errors[first] < pe):
        first += 1
    if begin == first - 1:
        while first < last:
            last -= 1
            if counts[last] > pc or (counts[last] == pc and errors[last] < pe):
                break
    else:
        last -= 1
        while not (counts[last] > pc or (counts[last] == pc and errors[last] < pe)):
            last -= 1
    already = first >= last
    while first < last:
        _swap(ids, counts, errors, first, last)
        first += 1
        while counts[first] > pc or (counts[first] == pc and errors[first] < pe):
            first += 1
        last -= 1
        while not (counts[last] > pc or (counts[last] == pc and errors[last] < pe)):
            last -= 1
    pivot = first - 1
    if begin != pivot:
        _move(ids, counts, errors, begin, pivot)
    ids[pivot], counts[pivot], errors[pivot] = pid, pc, pe
    return pivot, already


@lazy_njit
def _partition_left(ids, counts, errors, first, last, pid, pc, pe):
    """libc++'s __partition_with_equals_on_left. Returns where the greater part starts."""
    begin = first
    if pc > counts[last - 1] or (pc == counts[last - 1] and pe < errors[last - 1]):
        first += 1
        while not (pc > counts[first] or (pc == counts[first] and pe < errors[first])):
            first += 1
    else:
        first += 1
        while first < last and not (pc > counts[first] or (pc == counts[first] and pe < errors[first])):
            first += 1
    if first < last:
        last -= 1
        while pc > counts[last] or (pc == counts[last] and pe < errors[last]):
            last -= 1
    while first < last:
        _swap(ids, counts, errors, first, last)
        first += 1
        while not (pc > counts[first] or (pc == counts[first] and pe < errors[first])):
            first += 1
        last -= 1
        while pc > counts[last] or (pc == counts[last] and pe < errors[last]):
            last -= 1
    pivot = first - 1
    if begin != pivot:
        _move(ids, counts, errors, begin, pivot)
    ids[pivot], counts[pivot], errors[pivot] = pid, pc, pe
    return first


@lazy_njit
def _introsort(ids, counts, errors, first, last, depth):
    """libc++'s std::sort (its __introsort, LLVM 17 and later): most counted first. Its recursion on
    the left part (the right part continued in the same frame) is a stack here, the left part
    first. Returns False when it would fall back to heap sort (not reproduced)."""
    stack = np.empty((2 * depth + 2, 4), np.int64)
    top = 0
    stack[0, 0], stack[0, 1], stack[0, 2], stack[0, 3] = first, last, depth, 1
    top = 1
    while top > 0:
        top -= 1
        first, last, depth, leftmost = stack[top, 0], stack[top, 1], stack[top, 2], stack[top, 3] == 1
        while True:
            length = last - first
            if length < 2:
                break
            if length <= 5:
                _small_sort(ids, counts, errors, first, last)
                break
            if length < _INSERTION_SORT_LIMIT:
                _sink(ids, counts, errors, first, last)
                break
            if depth == 0:
                return False
            depth -= 1
            half = length // 2
            if length > 128:
                _sort3(ids, counts, errors, first, first + half, last - 1)
                _sort3(ids, counts, errors, first + 1, first + half - 1, last - 2)
                _sort3(ids, counts, errors, first + 2, first + half + 1, last - 3)
                _sort3(ids, counts, errors, first + half - 1, first + half, first + half + 1)
                _swap(ids, counts, errors, first, first + half)
            else:
                _sort3(ids, counts, errors, first + half, first, last - 1)
            pid, pc, pe = ids[first], counts[first], errors[first]
            if not leftmost and not _beats(counts, errors, first - 1, first):
                first = _partition_left(ids, counts, errors, first, last, pid, pc, pe)
                continue
            pivot, already = _partition_right(ids, counts, errors, first, last, pid, pc, pe)
            if already:
                left_done = _insertion_incomplete(ids, counts, errors, first, pivot)
                if _insertion_incomplete(ids, counts, errors, pivot + 1, last):
                    if left_done:
                        break
                    last = pivot
                    continue
                if left_done:
                    first = pivot + 1
                    continue
            # the left part now (as the recursive call), the right part after it
            if top + 2 > len(stack):
                return False
            stack[top, 0], stack[top, 1], stack[top, 2], stack[top, 3] = pivot + 1, last, depth, 0
            top += 1
            last = pivot
    return True


@lazy_njit
def _sort_front(ids, counts, errors, first, length):
    """libc++'s std::sort of `length` counters from `first`, most counted first. False when not
    reproduced (its heap sort fallback)."""
    depth = 0
    n = length
    while n > 1:
        n >>= 1
        depth += 1
    return _introsort(ids, counts, errors, first, first + length, 2 * depth)


@lazy_njit
def _written(ids, counts, errors, first, size, capacity):
    """SpaceSaving::write: the counters partially sorted (miniselect's Floyd-Rivest partial sort:
    selection of the first `capacity`, then std::sort of them). Returns how many are written, or
    -1 when the order is not reproduced (libc++'s heap sort fallback)."""
    keep = min(size, capacity)
    if keep == 0:
        return 0
    _select(ids[first:first + size], counts[first:first + size], errors[first:first + size], 0, size - 1, keep - 1)
    if not _sort_front(ids, counts, errors, first, keep):
        return -1
    return keep


@lazy_njit
def topk_build(ids, starts, n, keys, capacity, target):
    """Each group's SpaceSaving (counters appended in order of first appearance, counted in place)
    as written. Groups reaching `target` distinct keys (ClickHouse truncates them, evicting into
    its alpha map) or whose written order is not reproduced are refused. Returns (ids, counts,
    errors, ends per group, the first refused group or -1)."""
    groups = len(starts)
    slot_of = np.full(keys, -1, np.int64)
    out_ids = np.empty(n, np.int64)
    out_counts = np.zeros(n, np.uint64)
    out_errors = np.zeros(n, np.uint64)
    ends = np.zeros(groups, np.int64)
    at = 0
    for g in range(groups):
        stop = starts[g + 1] if g + 1 < groups else n
        size = 0
        for r in range(starts[g], stop):
            key = ids[r]
            slot = slot_of[key]
            if slot < 0:
                if size + 1 >= target:
                    return out_ids[:at], out_counts[:at], out_errors[:at], ends, g
                slot_of[key] = size
                out_ids[at + size] = key
                out_counts[at + size] = 1
                size += 1
            else:
                out_counts[at + slot] += 1
        for i in range(at, at + size):
            slot_of[out_ids[i]] = -1
        kept = _written(out_ids, out_counts, out_errors, at, size, capacity)
        if kept < 0:
            return out_ids[:at], out_counts[:at], out_errors[:at], ends, g
        at += kept
        ends[g] = at
    return out_ids[:at].copy(), out_counts[:at].copy(), out_errors[:at].copy(), ends, -1


@lazy_njit
def topk_merge(ids, counts, errors, state_ends, group_starts, keys, capacity, target):
    """Each group's states merged left to right into a fresh SpaceSaving and written: the first
    state copied, then each other's counters added to the same keys' or appended, in serialized
    order. States with evictions (a non-zero alpha map: refused by the caller) and merges
    reaching `target` counters are not reproduced. Returns (ids, counts, errors, ends per group,
    the first refused group or -1)."""
    groups = len(group_starts)
    states = len(state_ends)
    slot_of = np.full(keys, -1, np.int64)
    room = len(ids) + 1
    out_ids = np.empty(room, np.int64)
    out_counts = np.zeros(room, np.uint64)
    out_errors = np.zeros(room, np.uint64)
    ends = np.zeros(groups, np.int64)
    at = 0
    for g in range(groups):
        stop = group_starts[g + 1] if g + 1 < groups else states
        size = 0
        for s in range(group_starts[g], stop):
            lo = state_ends[s - 1] if s > 0 else 0
            for j in range(lo, state_ends[s]):
                slot = slot_of[ids[j]]
                if slot >= 0:
                    out_counts[at + slot] += counts[j]
                    out_errors[at + slot] += errors[j]
                else:
                    if size + 1 >= target:
                        return out_ids[:at], out_counts[:at], out_errors[:at], ends, g
                    slot_of[ids[j]] = size
                    out_ids[at + size] = ids[j]
                    out_counts[at + size] = counts[j]
                    out_errors[at + size] = errors[j]
                    size += 1
        for i in range(at, at + size):
            slot_of[out_ids[i]] = -1
        kept = _written(out_ids, out_counts, out_errors, at, size, capacity)
        if kept < 0:
            return out_ids[:at], out_counts[:at], out_errors[:at], ends, g
        at += kept
        ends[g] = at
    return out_ids[:at].copy(), out_counts[:at].copy(), out_errors[:at].copy(), ends, -1


@lazy_njit
def _varuint(data, p, end):
    """(value, next position) of the varuint at data[p]; position -1 when it runs past `end`."""
    value = np.uint64(0)
    shift = 0
    while p < end:
        b = data[p]
        p += 1
        value |= np.uint64(b & 0x7F) << np.uint64(shift)
        if b < 0x80:
            return value, p
        shift += 7
        if shift > 63:
            return value, -1
    return value, -1


@lazy_njit
def parse_topk(data, begins, ends, width):
    """topK states data[begins[i]:ends[i]]: a varuint count of counters, each a key (`width` bytes,
    or a varuint length and bytes when width is 0), a varuint count and error; then a varuint count
    of alpha varuints. Returns (counters per state, each key's start and length, counts, errors,
    alpha sizes, the first bad state or -1, whether each state's alpha map holds evictions)."""
    n = len(begins)
    bound = len(data) // 3 + 1
    sizes = np.zeros(n, np.int64)
    key_starts = np.zeros(bound, np.int64)
    key_lengths = np.zeros(bound, np.int64)
    counts = np.zeros(bound, np.uint64)
    errors = np.zeros(bound, np.uint64)
    alphas = np.zeros(n, np.int64)
    evicted = np.zeros(n, np.bool_)
    k = 0
    for i in range(n):
        end = ends[i]
        size, p = _varuint(data, begins[i], end)
        if p < 0 or np.int64(size) > (end - p) // 3 + 1:
            return sizes, key_starts[:k], key_lengths[:k], counts[:k], errors[:k], alphas, i, evicted
        for _ in range(np.int64(size)):
            if width:
                length = width
            else:
                length_u, p = _varuint(data, p, end)
                length = np.int64(length_u)
                if p < 0:
                    return sizes, key_starts[:k], key_lengths[:k], counts[:k], errors[:k], alphas, i, evicted
            if p + length > end or k >= bound:
                return sizes, key_starts[:k], key_lengths[:k], counts[:k], errors[:k], alphas, i, evicted
            key_starts[k] = p
            key_lengths[k] = length
            p += length
            counts[k], p = _varuint(data, p, end)
            if p < 0:
                return sizes, key_starts[:k], key_lengths[:k], counts[:k], errors[:k], alphas, i, evicted
            errors[k], p = _varuint(data, p, end)
            if p < 0:
                return sizes, key_starts[:k], key_lengths[:k], counts[:k], errors[:k], alphas, i, evicted
            k += 1
        sizes[i] = size
        alpha, p = _varuint(data, p, end)
        if p < 0:
            return sizes, key_starts[:k], key_lengths[:k], counts[:k], errors[:k], alphas, i, evicted
        for _ in range(np.int64(alpha)):
            value, p = _varuint(data, p, end)
            if p < 0:
                return sizes, key_starts[:k], key_lengths[:k], counts[:k], errors[:k], alphas, i, evicted
            if value != 0:
                evicted[i] = True
        if p != end:
            return sizes, key_starts[:k], key_lengths[:k], counts[:k], errors[:k], alphas, i, evicted
        alphas[i] = alpha
    return sizes, key_starts[:k].copy(), key_lengths[:k].copy(), counts[:k].copy(), errors[:k].copy(), alphas, -1, evicted


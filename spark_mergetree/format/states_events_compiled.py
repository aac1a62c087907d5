"""Compiled kernels of format/states_events.py: ClickHouse 26.9's SpaceSaving (topK) replayed
counter by counter, and the parser of its states.

SpaceSaving keeps its counters (key, count, error) in order of first appearance, counting them in
place, truncating them into its alpha map of evicted counts when they reach a target. Writing a
state partially sorts a copy (a greater count less error first, then a greater count):
miniselect's Floyd-Rivest selection of the first `capacity`, then
libc++'s std::sort of them (its introsort: sorting networks up to 5 elements, insertion sort below
24, median of three or Tukey's ninther past 128, partitions with equals on the right or, next to an
equal pivot, on the left). Both algorithms are replayed step by step, so ties come out in
ClickHouse's order. Keys are given as ids (equal keys, equal ids).
"""

from __future__ import annotations

import numpy as np

from spark_mergetree.format.compiled import lazy_njit

_MAX_ALPHA = np.uint64(0xFFFFFFFF)  # SpaceSaving caps its alpha counts at UInt32's maximum
_INSERTION_SORT_LIMIT = 24  # libc++'s std::sort sorts fewer elements by insertion


@lazy_njit
def _above(count_a, error_a, count_b, error_b):
    """ClickHouse's Counter::operator>: a greater guaranteed count (count less error), or the same
    one with a greater count."""
    sure_a = count_a - error_a
    sure_b = count_b - error_b
    return sure_a > sure_b or (sure_a == sure_b and count_a > count_b)


@lazy_njit
def _beats(counts, errors, a, b):
    """Counter a before counter b (`_above`)."""
    return _above(counts[a], errors[a], counts[b], errors[b])


@lazy_njit
def _swap(ids, counts, errors, a, b):
    ids[a], ids[b] = ids[b], ids[a]
    counts[a], counts[b] = counts[b], counts[a]
    errors[a], errors[b] = errors[b], errors[a]


@lazy_njit
def _select_step(ids, counts, errors, left, right, k):
    """One partition of miniselect's Floyd-Rivest selection loop, its pivot held by reference to a
    position, as the C++ does. Returns the new (left, right)."""
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
    return left, right


@lazy_njit
def _select(ids, counts, errors, left, right, k):
    """miniselect's Floyd-Rivest selection loop: ranges of more than 601 elements first select in
    a sample range around k (its recursion, a stack here), then partition."""
    frames = np.empty((64, 3), np.int64)  # (left, right, whether its sample range was selected)
    frames[0, 0], frames[0, 1], frames[0, 2] = left, right, 0
    top = 1
    while top > 0:
        left, right, sampled = frames[top - 1, 0], frames[top - 1, 1], frames[top - 1, 2]
        if right <= left:
            top -= 1
            continue
        if right - left > 600 and sampled == 0:
            frames[top - 1, 2] = 1
            n = right - left + 1
            i = k - left + 1
            z = np.log(np.float64(n))
            s = 0.5 * np.exp(2 * z / 3)
            sd = 0.5 * np.sqrt(z * s * (n - s) / n)
            if i < n // 2:
                sd *= -1.0
            new_left = max(left, np.int64(k - i * s / n + sd))
            new_right = min(right, np.int64(k + (n - i) * s / n + sd))
            frames[top, 0], frames[top, 1], frames[top, 2] = new_left, new_right, 0
            top += 1
            continue
        left, right = _select_step(ids, counts, errors, left, right, k)
        frames[top - 1, 0], frames[top - 1, 1], frames[top - 1, 2] = left, right, 0
    return


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
    while _above(counts[first], errors[first], pc, pe):
        first += 1
    if begin == first - 1:
        while first < last:
            last -= 1
            if _above(counts[last], errors[last], pc, pe):
                break
    else:
        last -= 1
        while not (_above(counts[last], errors[last], pc, pe)):
            last -= 1
    already = first >= last
    while first < last:
        _swap(ids, counts, errors, first, last)
        first += 1
        while _above(counts[first], errors[first], pc, pe):
            first += 1
        last -= 1
        while not (_above(counts[last], errors[last], pc, pe)):
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
    if _above(pc, pe, counts[last - 1], errors[last - 1]):
        first += 1
        while not (_above(pc, pe, counts[first], errors[first])):
            first += 1
    else:
        first += 1
        while first < last and not (_above(pc, pe, counts[first], errors[first])):
            first += 1
    if first < last:
        last -= 1
        while _above(pc, pe, counts[last], errors[last]):
            last -= 1
    while first < last:
        _swap(ids, counts, errors, first, last)
        first += 1
        while not (_above(pc, pe, counts[first], errors[first])):
            first += 1
        last -= 1
        while _above(pc, pe, counts[last], errors[last]):
            last -= 1
    pivot = first - 1
    if begin != pivot:
        _move(ids, counts, errors, begin, pivot)
    ids[pivot], counts[pivot], errors[pivot] = pid, pc, pe
    return first


@lazy_njit
def _sift_down(ids, counts, errors, first, length, start):
    """libc++'s __sift_down of the heap [first, first + length) from `start` (a position)."""
    child = start - first
    if length < 2 or (length - 2) // 2 < child:
        return
    child = 2 * child + 1
    ci = first + child
    if child + 1 < length and _beats(counts, errors, ci, ci + 1):
        ci += 1
        child += 1
    if _beats(counts, errors, ci, start):
        return
    tid, tc, te = ids[start], counts[start], errors[start]
    while True:
        _move(ids, counts, errors, start, ci)
        start = ci
        if (length - 2) // 2 < child:
            break
        child = 2 * child + 1
        ci = first + child
        if child + 1 < length and _beats(counts, errors, ci, ci + 1):
            ci += 1
            child += 1
        if _above(counts[ci], errors[ci], tc, te):
            break
    ids[start], counts[start], errors[start] = tid, tc, te


@lazy_njit
def _heap_sort(ids, counts, errors, first, last):
    """libc++'s heap sort (introsort's fallback): __make_heap, then __sort_heap popping by Floyd's
    sift down and sifting the moved last element up."""
    n = last - first
    for start in range((n - 2) // 2, -1, -1):
        _sift_down(ids, counts, errors, first, n, first + start)
    while n > 1:
        tid, tc, te = ids[first], counts[first], errors[first]
        hole = first
        child = 0
        ci = first
        while True:
            ci += child + 1
            child = 2 * child + 1
            if child + 1 < n and _beats(counts, errors, ci, ci + 1):
                ci += 1
                child += 1
            _move(ids, counts, errors, hole, ci)
            hole = ci
            if child > (n - 2) // 2:
                break
        end = first + n - 1
        if hole == end:
            ids[hole], counts[hole], errors[hole] = tid, tc, te
        else:
            _move(ids, counts, errors, hole, end)
            hole += 1
            ids[end], counts[end], errors[end] = tid, tc, te
            size = hole - first
            if size > 1:
                size = (size - 2) // 2
                ptr = first + size
                last_pos = hole - 1
                if _beats(counts, errors, ptr, last_pos):
                    uid, uc, ue = ids[last_pos], counts[last_pos], errors[last_pos]
                    while True:
                        _move(ids, counts, errors, last_pos, ptr)
                        last_pos = ptr
                        if size == 0:
                            break
                        size = (size - 1) // 2
                        ptr = first + size
                        if not _above(counts[ptr], errors[ptr], uc, ue):
                            break
                    ids[last_pos], counts[last_pos], errors[last_pos] = uid, uc, ue
        n -= 1


@lazy_njit
def _introsort(ids, counts, errors, first, last, depth):
    """libc++'s std::sort (its __introsort, LLVM 17 and later) in ClickHouse's counter order, heap
    sort past its depth limit. Its recursion on the left part (the right part continued in the same
    frame) is a stack here, the left part first."""
    stack = np.empty((depth + 2, 4), np.int64)  # a push per level of depth at most
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
                _heap_sort(ids, counts, errors, first, last)
                break
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
            stack[top, 0], stack[top, 1], stack[top, 2], stack[top, 3] = pivot + 1, last, depth, 0
            top += 1
            last = pivot


@lazy_njit
def _sort_front(ids, counts, errors, first, length):
    """libc++'s std::sort of `length` counters from `first` in ClickHouse's counter order."""
    depth = 0
    n = length
    while n > 1:
        n >>= 1
        depth += 1
    _introsort(ids, counts, errors, first, first + length, 2 * depth)


@lazy_njit
def _written(ids, counts, errors, first, size, capacity):
    """SpaceSaving::write: the counters partially sorted (miniselect's Floyd-Rivest partial sort:
    selection of the first `capacity`, then std::sort of them). Returns how many are written."""
    keep = min(size, capacity)
    if keep == 0:
        return 0
    _select(ids[first:first + size], counts[first:first + size], errors[first:first + size], 0, size - 1, keep - 1)
    _sort_front(ids, counts, errors, first, keep)
    return keep


@lazy_njit
def _truncate(ids, counts, errors, key_hash, first, size, capacity, alpha):
    """SpaceSaving's truncation once its list reaches the target: the first `capacity` counters
    selected in place (miniselect's Floyd-Rivest nth_element), each other one's count less its
    error added to the alpha map at its hash. Returns the new size."""
    _select(ids[first:first + size], counts[first:first + size], errors[first:first + size], 0, size - 1, capacity)
    mask = np.uint64(len(alpha) - 1)
    for i in range(first + capacity, first + size):
        cell = np.int64(key_hash[ids[i]] & mask)
        alpha[cell] = min(alpha[cell] + counts[i] - errors[i], _MAX_ALPHA)
    return capacity


@lazy_njit
def topk_build(ids, key_hash, starts, n, keys, capacity, target, alpha_size, bound):
    """Each group's SpaceSaving as written: counters appended in order of first appearance and
    counted in place; past `capacity` counters a new key starts from the alpha map's count at its
    hash (count alpha + 1, error alpha); at `target` counters the list is truncated (`_truncate`).
    Returns (ids, counts, errors, ends per group, the alpha maps of the groups that evicted (one
    row each), which groups those are)."""
    groups = len(starts)
    slot_of = np.full(keys, -1, np.int64)
    out_ids = np.empty(n, np.int64)
    out_counts = np.zeros(n, np.uint64)
    out_errors = np.zeros(n, np.uint64)
    ends = np.zeros(groups, np.int64)
    alpha = np.zeros(alpha_size, np.uint64)
    alphas = np.zeros((bound, alpha_size), np.uint64)  # (`bound`: the groups that may evict)
    alpha_groups = np.zeros(bound, np.int64)
    evictions = 0
    at = 0
    for g in range(groups):
        stop = starts[g + 1] if g + 1 < groups else n
        size = 0
        evicted = False
        for r in range(starts[g], stop):
            key = ids[r]
            slot = slot_of[key]
            if slot >= 0:
                out_counts[at + slot] += 1
                continue
            prior = np.uint64(0)
            if size >= capacity:
                prior = alpha[np.int64(key_hash[key] & np.uint64(alpha_size - 1))]
            slot_of[key] = size
            out_ids[at + size] = key
            out_counts[at + size] = prior + np.uint64(1)
            out_errors[at + size] = prior
            size += 1
            if size >= target:
                for i in range(at, at + size):
                    slot_of[out_ids[i]] = -1
                size = _truncate(out_ids, out_counts, out_errors, key_hash, at, size, capacity, alpha)
                for i in range(size):
                    slot_of[out_ids[at + i]] = i
                evicted = True
        for i in range(at, at + size):
            slot_of[out_ids[i]] = -1
        at += _written(out_ids, out_counts, out_errors, at, size, capacity)
        ends[g] = at
        if evicted:
            alphas[evictions] = alpha
            alpha_groups[evictions] = g
            evictions += 1
            alpha[:] = 0
    return (out_ids[:at].copy(), out_counts[:at].copy(), out_errors[:at].copy(), ends, alphas[:evictions].copy(),
            alpha_groups[:evictions].copy())


@lazy_njit
def topk_merge(ids, counts, errors, key_hash, state_ends, group_starts, keys, capacity, target, state_alpha, alphas,
               bound):
    """Each group's states merged left to right into a fresh SpaceSaving, then written. States
    without counters are skipped; the first one is copied (its counters in serialized order, its
    alpha map); into each other one, when full, the merged counters are raised by the largest alpha
    m2 of the other (its counters lowered by it), counters of new keys start from the merged one's
    largest alpha m1 (when full), the alpha maps are added (capped), and the list is truncated at
    `target` counters. State s's alpha map is alphas[state_alpha[s]] (-1: all 0). Returns (ids,
    counts, errors, ends per group, the alpha maps of the groups holding evictions (a row each),
    which groups those are)."""
    groups = len(group_starts)
    states = len(state_ends)
    alpha_size = alphas.shape[1]
    slot_of = np.full(keys, -1, np.int64)
    room = len(ids) + 1
    out_ids = np.empty(room, np.int64)
    out_counts = np.zeros(room, np.uint64)
    out_errors = np.zeros(room, np.uint64)
    ends = np.zeros(groups, np.int64)
    alpha = np.zeros(alpha_size, np.uint64)
    kept_alphas = np.zeros((bound, alpha_size), np.uint64)  # (`bound`: the groups that may hold evictions)
    alpha_groups = np.zeros(bound, np.int64)
    evictions = 0
    at = 0
    for g in range(groups):
        stop = group_starts[g + 1] if g + 1 < groups else states
        size = 0
        alpha[:] = 0
        for s in range(group_starts[g], stop):
            lo = state_ends[s - 1] if s > 0 else 0
            hi = state_ends[s]
            if hi == lo:
                continue
            if size == 0:
                for j in range(lo, hi):
                    out_ids[at + size] = ids[j]
                    out_counts[at + size] = counts[j]
                    out_errors[at + size] = errors[j]
                    slot_of[ids[j]] = size
                    size += 1
                if state_alpha[s] >= 0:
                    alpha[:] = alphas[state_alpha[s]]
                continue
            m1 = np.uint64(0)
            if size >= capacity:
                m1 = alpha.max()
            m2 = np.uint64(0)
            if hi - lo >= capacity and state_alpha[s] >= 0:
                m2 = alphas[state_alpha[s]].max()
            if m2 > 0:
                for i in range(at, at + size):
                    out_counts[i] += m2
                    out_errors[i] += m2
            for j in range(lo, hi):
                slot = slot_of[ids[j]]
                if slot >= 0:
                    out_counts[at + slot] += counts[j] - m2
                    out_errors[at + slot] += errors[j] - m2
                else:
                    slot_of[ids[j]] = size
                    out_ids[at + size] = ids[j]
                    out_counts[at + size] = counts[j] + m1
                    out_errors[at + size] = errors[j] + m1
                    size += 1
            if state_alpha[s] >= 0:
                for i in range(alpha_size):
                    alpha[i] = min(alpha[i] + alphas[state_alpha[s], i], _MAX_ALPHA)
            if size >= target:
                for i in range(at, at + size):
                    slot_of[out_ids[i]] = -1
                size = _truncate(out_ids, out_counts, out_errors, key_hash, at, size, capacity, alpha)
                for i in range(size):
                    slot_of[out_ids[at + i]] = i
        for i in range(at, at + size):
            slot_of[out_ids[i]] = -1
        at += _written(out_ids, out_counts, out_errors, at, size, capacity)
        ends[g] = at
        if alpha.max() > 0:
            kept_alphas[evictions] = alpha
            alpha_groups[evictions] = g
            evictions += 1
    return (out_ids[:at].copy(), out_counts[:at].copy(), out_errors[:at].copy(), ends, kept_alphas[:evictions].copy(),
            alpha_groups[:evictions].copy())


@lazy_njit
def read_alphas(data, begins, sizes):
    """The alpha maps (`sizes[i]` varuints from data[begins[i]]) of some states, a row each (all
    of one size)."""
    width = sizes[0] if len(sizes) else 0
    out = np.zeros((len(begins), width), np.uint64)
    for i in range(len(begins)):
        p = begins[i]
        for j in range(width):
            out[i, j], p = _varuint(data, p, len(data))
    return out


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
    alpha sizes, the first bad state or -1, whether each state's alpha map holds evictions, where
    each alpha map's varuints start)."""
    n = len(begins)
    bound = len(data) // 3 + 1
    sizes = np.zeros(n, np.int64)
    key_starts = np.zeros(bound, np.int64)
    key_lengths = np.zeros(bound, np.int64)
    counts = np.zeros(bound, np.uint64)
    errors = np.zeros(bound, np.uint64)
    alphas = np.zeros(n, np.int64)
    evicted = np.zeros(n, np.bool_)
    alpha_begins = np.zeros(n, np.int64)
    k = 0
    for i in range(n):
        end = ends[i]
        size, p = _varuint(data, begins[i], end)
        if p < 0 or np.int64(size) > (end - p) // 3 + 1:
            return sizes, key_starts[:k], key_lengths[:k], counts[:k], errors[:k], alphas, i, evicted, alpha_begins
        for _ in range(np.int64(size)):
            if width:
                length = width
            else:
                length_u, p = _varuint(data, p, end)
                length = np.int64(length_u)
                if p < 0:
                    return sizes, key_starts[:k], key_lengths[:k], counts[:k], errors[:k], alphas, i, evicted, alpha_begins
            if p + length > end or k >= bound:
                return sizes, key_starts[:k], key_lengths[:k], counts[:k], errors[:k], alphas, i, evicted, alpha_begins
            key_starts[k] = p
            key_lengths[k] = length
            p += length
            counts[k], p = _varuint(data, p, end)
            if p < 0:
                return sizes, key_starts[:k], key_lengths[:k], counts[:k], errors[:k], alphas, i, evicted, alpha_begins
            errors[k], p = _varuint(data, p, end)
            if p < 0:
                return sizes, key_starts[:k], key_lengths[:k], counts[:k], errors[:k], alphas, i, evicted, alpha_begins
            k += 1
        sizes[i] = size
        alpha, p = _varuint(data, p, end)
        alpha_begins[i] = p
        if p < 0:
            return sizes, key_starts[:k], key_lengths[:k], counts[:k], errors[:k], alphas, i, evicted, alpha_begins
        for _ in range(np.int64(alpha)):
            value, p = _varuint(data, p, end)
            if p < 0:
                return sizes, key_starts[:k], key_lengths[:k], counts[:k], errors[:k], alphas, i, evicted, alpha_begins
            if value != 0:
                evicted[i] = True
        if p != end:
            return sizes, key_starts[:k], key_lengths[:k], counts[:k], errors[:k], alphas, i, evicted, alpha_begins
        alphas[i] = alpha
    return sizes, key_starts[:k].copy(), key_lengths[:k].copy(), counts[:k].copy(), errors[:k].copy(), alphas, -1, evicted, alpha_begins


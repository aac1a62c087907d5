"""Compiled kernels of format/states_events.py: ClickHouse's SpaceSaving (topK) replayed counter by
counter, and the parser of its states.

SpaceSaving keeps a list of counters (key, count, error), most counted first: a key counted again
moves ahead past every counter it now beats (count greater, or equal with a smaller error); a new
key is appended. A merge into a state adds the other's counters from its last to its first, then
sorts the list (pdqsort, which below 24 counters is an insertion sort, so stable) and keeps the
capacity's first. Keys are given as ids (equal keys, equal ids).
"""

from __future__ import annotations

import numpy as np

from spark_mergetree.format.compiled import lazy_njit
from spark_mergetree.format.states_sets_compiled import _ht_clear, _ht_emit, _ht_insert

_INSERTION_SORT_LIMIT = 23  # pdqsort sorts fewer than 24 elements by insertion


@lazy_njit
def topk_build(ids, starts, n, keys, capacity):
    """Each group's counters in ClickHouse's order when no group holds more than `capacity`
    distinct keys. Returns (ids, counts, ends per group, the first group past capacity or -1)."""
    groups = len(starts)
    slot_of = np.full(keys, -1, np.int64)
    out_ids = np.empty(n, np.int64)
    out_counts = np.empty(n, np.uint64)
    ends = np.zeros(groups, np.int64)
    at = 0
    for g in range(groups):
        stop = starts[g + 1] if g + 1 < groups else n
        base = at
        size = 0
        for r in range(starts[g], stop):
            key = ids[r]
            slot = slot_of[key]
            if slot < 0:
                if size == capacity:
                    return out_ids[:at], out_counts[:at], ends, g
                slot_of[key] = size
                out_ids[base + size] = key
                out_counts[base + size] = 1
                size += 1
                continue
            out_counts[base + slot] += 1
            while slot > 0 and out_counts[base + slot] > out_counts[base + slot - 1]:
                other = out_ids[base + slot - 1]
                out_ids[base + slot - 1], out_ids[base + slot] = key, other
                c = out_counts[base + slot - 1]
                out_counts[base + slot - 1] = out_counts[base + slot]
                out_counts[base + slot] = c
                slot_of[other] = slot
                slot -= 1
                slot_of[key] = slot
        for i in range(base, base + size):
            slot_of[out_ids[i]] = -1
        at = base + size
        ends[g] = at
    return out_ids[:at].copy(), out_counts[:at].copy(), ends, -1


@lazy_njit
def _beats(count_a, error_a, count_b, error_b):
    return count_a > count_b or (count_a == count_b and error_a < error_b)


@lazy_njit
def topk_merge(ids, counts, errors, state_ends, group_starts, keys, capacity):
    """Each group's states merged left to right into a fresh SpaceSaving of `capacity`. Returns
    (ids, counts, errors, ends per group, the first group whose order is not reproduced or -1)."""
    groups = len(group_starts)
    states = len(state_ends)
    slot_of = np.full(keys, -1, np.int64)
    largest = 0
    for s in range(states):
        largest = max(largest, state_ends[s] - (state_ends[s - 1] if s > 0 else 0))
    room = capacity + largest + 1
    l_ids = np.empty(room, np.int64)
    l_counts = np.empty(room, np.uint64)
    l_errors = np.empty(room, np.uint64)
    out_ids = np.empty(len(ids), np.int64)
    out_counts = np.empty(len(ids), np.uint64)
    out_errors = np.empty(len(ids), np.uint64)
    ends = np.zeros(groups, np.int64)
    at = 0
    for g in range(groups):
        stop = group_starts[g + 1] if g + 1 < groups else states
        size = 0
        for s in range(group_starts[g], stop):
            lo = state_ends[s - 1] if s > 0 else 0
            hi = state_ends[s]
            if hi == lo:
                continue
            m1 = l_counts[size - 1] if size == capacity else np.uint64(0)
            m2 = counts[hi - 1] if hi - lo == capacity else np.uint64(0)
            if m2 > 0:
                for i in range(size):
                    l_counts[i] += m2
                    l_errors[i] += m2
            for j in range(hi - 1, lo - 1, -1):
                slot = slot_of[ids[j]]
                if slot >= 0:
                    l_counts[slot] += counts[j] - m2
                    l_errors[slot] += errors[j] - m2
                else:
                    l_ids[size] = ids[j]
                    l_counts[size] = counts[j] + m1
                    l_errors[size] = errors[j] + m1
                    slot_of[ids[j]] = size
                    size += 1
            # Stable insertion sort, most counted first (pdqsort's order below 24 counters; above, the
            # same only when no two counters tie).
            for i in range(1, size):
                key, c, e = l_ids[i], l_counts[i], l_errors[i]
                p = i
                while p > 0 and _beats(c, e, l_counts[p - 1], l_errors[p - 1]):
                    l_ids[p], l_counts[p], l_errors[p] = l_ids[p - 1], l_counts[p - 1], l_errors[p - 1]
                    p -= 1
                l_ids[p], l_counts[p], l_errors[p] = key, c, e
            if size > _INSERTION_SORT_LIMIT:
                for i in range(1, size):
                    if l_counts[i] == l_counts[i - 1] and l_errors[i] == l_errors[i - 1]:
                        return out_ids[:at], out_counts[:at], out_errors[:at], ends, g
            for i in range(size):
                slot_of[l_ids[i]] = -1
            size = min(size, capacity)
            for i in range(size):
                slot_of[l_ids[i]] = i
        for i in range(size):
            slot_of[l_ids[i]] = -1
            out_ids[at + i] = l_ids[i]
            out_counts[at + i] = l_counts[i]
            out_errors[at + i] = l_errors[i]
        at += size
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
    alpha sizes, the first bad state or -1)."""
    n = len(begins)
    bound = len(data) // 3 + 1
    sizes = np.zeros(n, np.int64)
    key_starts = np.zeros(bound, np.int64)
    key_lengths = np.zeros(bound, np.int64)
    counts = np.zeros(bound, np.uint64)
    errors = np.zeros(bound, np.uint64)
    alphas = np.zeros(n, np.int64)
    k = 0
    for i in range(n):
        end = ends[i]
        size, p = _varuint(data, begins[i], end)
        if p < 0 or size > (end - p) // 3 + 1:
            return sizes, key_starts[:k], key_lengths[:k], counts[:k], errors[:k], alphas, i
        for _ in range(int(size)):
            if width:
                length = width
            else:
                length_u, p = _varuint(data, p, end)
                length = int(length_u)
                if p < 0:
                    return sizes, key_starts[:k], key_lengths[:k], counts[:k], errors[:k], alphas, i
            if p + length > end or k >= bound:
                return sizes, key_starts[:k], key_lengths[:k], counts[:k], errors[:k], alphas, i
            key_starts[k] = p
            key_lengths[k] = length
            p += length
            counts[k], p = _varuint(data, p, end)
            if p < 0:
                return sizes, key_starts[:k], key_lengths[:k], counts[:k], errors[:k], alphas, i
            errors[k], p = _varuint(data, p, end)
            if p < 0:
                return sizes, key_starts[:k], key_lengths[:k], counts[:k], errors[:k], alphas, i
            k += 1
        sizes[i] = size
        alpha, p = _varuint(data, p, end)
        if p < 0:
            return sizes, key_starts[:k], key_lengths[:k], counts[:k], errors[:k], alphas, i
        for _ in range(int(alpha)):
            _, p = _varuint(data, p, end)
            if p < 0:
                return sizes, key_starts[:k], key_lengths[:k], counts[:k], errors[:k], alphas, i
        if p != end:
            return sizes, key_starts[:k], key_lengths[:k], counts[:k], errors[:k], alphas, i
        alphas[i] = alpha
    return sizes, key_starts[:k].copy(), key_lengths[:k].copy(), counts[:k].copy(), errors[:k].copy(), alphas, -1


@lazy_njit
def set_merge_in_order(ids, hashes, zeros, state_ends, group_starts, initial, big_until):
    """HashSet states merged group by group into a fresh table, every state's keys inserted in
    their serialized order (as ClickHouse 26.9's merge of -Distinct sets and counting maps sees
    them). Returns (ids in serialized order, ends of each group's)."""
    groups = len(group_starts)
    states = len(state_ends)
    total = len(ids)
    size = max(_table_cells(total), 1 << (initial + 1))
    cells = np.empty(size, np.int64)
    chash = np.empty(size, np.uint64)
    meta = np.zeros(4, np.int64)
    out = np.empty(total, np.int64)
    ends = np.zeros(groups, np.int64)
    at = 0
    for g in range(groups):
        stop = group_starts[g + 1] if g + 1 < groups else states
        _ht_clear(cells, meta, initial)
        lo = state_ends[group_starts[g] - 1] if group_starts[g] > 0 else 0
        hi = state_ends[stop - 1] if stop > group_starts[g] else lo
        for i in range(lo, hi):
            _ht_insert(cells, chash, meta, ids[i], hashes[i], zeros[i], big_until)
        at = _ht_emit(cells, meta, out, at)
        ends[g] = at
    return out[:at].copy(), ends


@lazy_njit
def _table_cells(count):
    """Cells enough for a table of `count` keys through its last growth."""
    degree = 4
    while (1 << (degree - 1)) < count:
        degree += 1
    return 1 << (degree + 3)

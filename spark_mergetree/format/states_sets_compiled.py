"""Compiled kernels of format/states_sets.py: ClickHouse's hash functions over whole columns and
simulations of the hash tables the distinct-count functions keep.

The serialized order of a ClickHouse hash table is its cell order, which depends on the hash
function, the table's size and the history of insertions and resizes; these kernels replay that
history operation by operation, as ClickHouse's code does it:

- `UniquesHashSet` (uniq): 32-bit hashes placed by their high bits, thinned by a skip degree when
  more than 65536 remain (src/AggregateFunctions/UniquesHashSet.h);
- `HashTable` / `HashSet` (uniqExact, groupUniqArray, uniqCombined's middle form): open addressing
  with linear probing, the zero key kept apart and iterated first, the buffer doubled (or
  quadrupled) past half full (src/Common/HashTable/HashTable.h). A key is given here as an id
  (equal ids for equal keys), its hash and whether it is ClickHouse's zero key, so one kernel
  serves numbers, 128-bit hashes and strings;
- the HyperLogLog registers of uniqCombined and uniqHLL12 (src/Common/HyperLogLogCounter.h).

All arithmetic on hashes is on uint64 and wraps, as in C++. Importing this module imports numba:
format/states_sets.py imports it only when a state is built.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from spark_mergetree.format.cityhash_compiled import _cityhash64, _hash16
from spark_mergetree.format.cityhash_compiled import _fetch as _load_le

_M32 = np.uint64(0xFFFFFFFF)
_M64 = np.uint64(0xFFFFFFFFFFFFFFFF)


def _crc32c_table() -> np.ndarray:
    table = np.zeros(256, np.uint64)
    for i in range(256):
        crc = i
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
        table[i] = crc
    return table


_CRC_TABLE = _crc32c_table()


# ------------------------------------------------------------------------------------------ hashes

@njit(cache=True)
def crc32c_u64(crc, value):
    """SSE 4.2's _mm_crc32_u64(crc, value): CRC-32C of the 8 little-endian bytes of `value` from
    the low 32 bits of `crc`, no final inversion."""
    c = crc & _M32
    for i in range(8):
        c = _CRC_TABLE[(c ^ (value >> np.uint64(8 * i))) & np.uint64(0xFF)] ^ (c >> np.uint64(8))
    return c


@njit(cache=True)
def int_hash64(x):
    """intHash64: MurmurHash3's 64-bit finalizer."""
    x ^= x >> np.uint64(33)
    x *= np.uint64(0xFF51AFD7ED558CCD)
    x ^= x >> np.uint64(33)
    x *= np.uint64(0xC4CEB9FE1A85EC53)
    x ^= x >> np.uint64(33)
    return x


@njit(cache=True)
def _rotr(x, s):
    return (x >> np.uint64(s)) | (x << np.uint64(64 - s))


@njit(cache=True)
def int_hash32(key):
    """intHash32<0>: Thomas Wang's 64 → 32 bit hash with ClickHouse's rotations."""
    key = (~key) + (key << np.uint64(18))
    key = key ^ _rotr(key, 31)
    key = key * np.uint64(21)
    key = key ^ _rotr(key, 11)
    key = key + (key << np.uint64(6))
    key = key ^ _rotr(key, 22)
    return key & _M32


@njit(cache=True)
def int_hash64_array(values):
    out = np.empty(len(values), np.uint64)
    for i in range(len(values)):
        out[i] = int_hash64(values[i])
    return out


@njit(cache=True)
def int_hash32_array(values):
    out = np.empty(len(values), np.uint64)
    for i in range(len(values)):
        out[i] = int_hash32(values[i])
    return out


@njit(cache=True)
def crc_words_array(words):
    """HashCRC32 of keys given as (n, w) uint64 words: the CRC-32C chain over the words from -1."""
    n, w = words.shape
    out = np.empty(n, np.uint64)
    for i in range(n):
        c = _M64
        for j in range(w):
            c = crc32c_u64(c, words[i, j])
        out[i] = c
    return out


@njit(cache=True)
def string_crc_hash(data, offsets):
    """StringViewHash (CRC32Hash) of each string data[offsets[i]:offsets[i + 1]]: CityHash's short
    hash below 8 bytes, else CRC-32C over the 8-byte words, the last word ending at the end."""
    n = len(offsets) - 1
    out = np.empty(n, np.uint64)
    k2 = np.uint64(0x9AE16A3B2F90404F)
    k3 = np.uint64(0xC949D7C7509E6557)
    for i in range(n):
        s = offsets[i]
        size = offsets[i + 1] - s
        if size == 0:
            out[i] = 0
        elif size < 8:
            if size >= 4:
                a = _load_le(data, s, 4)
                h = _hash16(np.uint64(size) + (a << np.uint64(3)), _load_le(data, s + size - 4, 4))
            else:
                a = np.uint64(data[s])
                b = np.uint64(data[s + (size >> 1)])
                c = np.uint64(data[s + size - 1])
                y = (a + (b << np.uint64(8))) & _M32
                z = (np.uint64(size) + (c << np.uint64(2))) & _M32
                v = y * k2 ^ z * k3
                h = (v ^ (v >> np.uint64(47))) * k2
            out[i] = h & _M32
        else:
            res = _M32
            p = s
            end = s + size
            while True:
                res = crc32c_u64(res, _load_le(data, p, 8))
                p += 8
                if not p + 8 < end:
                    break
            res = crc32c_u64(res, _load_le(data, end - 8, 8))
            out[i] = (res << np.uint64(32)) | res
    return out


@njit(cache=True)
def cityhash64_rows(data, offsets):
    """CityHash64 v1.0.2 of each string data[offsets[i]:offsets[i + 1]]."""
    n = len(offsets) - 1
    out = np.empty(n, np.uint64)
    for i in range(n):
        out[i] = _cityhash64(data, offsets[i], offsets[i + 1] - offsets[i])
    return out


@njit(cache=True)
def hash128_to_64(first, second):
    """CityHash's Hash128to64(uint128(first, second)) of two columns."""
    out = np.empty(len(first), np.uint64)
    for i in range(len(first)):
        out[i] = _hash16(first[i], second[i])
    return out


@njit(cache=True)
def _rotl(x, b):
    return (x << np.uint64(b)) | (x >> np.uint64(64 - b))


@njit(cache=True)
def _sip_rounds(v0, v1, v2, v3, rounds):
    """`rounds` SipRounds of the state (v0, v1, v2, v3)."""
    for _ in range(rounds):
        v0 += v1
        v1 = _rotl(v1, 13) ^ v0
        v0 = _rotl(v0, 32)
        v2 += v3
        v3 = _rotl(v3, 16) ^ v2
        v0 += v3
        v3 = _rotl(v3, 21) ^ v0
        v2 += v1
        v1 = _rotl(v1, 17) ^ v2
        v2 = _rotl(v2, 32)
    return v0, v1, v2, v3


@njit(cache=True)
def siphash128_rows(data, offsets):
    """ClickHouse's SipHash-2-4 with 128-bit output (zero keys, one finalisation) of each string:
    (v0 ^ v1, v2 ^ v3) per row, the key's low and high UInt64."""
    n = len(offsets) - 1
    low = np.empty(n, np.uint64)
    high = np.empty(n, np.uint64)
    for i in range(n):
        s = offsets[i]
        size = offsets[i + 1] - s
        v0 = np.uint64(0x736F6D6570736575)
        v1 = np.uint64(0x646F72616E646F6D)
        v2 = np.uint64(0x6C7967656E657261)
        v3 = np.uint64(0x7465646279746573)
        words = size // 8
        for w in range(words + 1):
            if w < words:
                m = _load_le(data, s + 8 * w, 8)
            else:
                tail = size - 8 * words
                m = _load_le(data, s + 8 * words, tail) | (np.uint64(size & 0xFF) << np.uint64(56))
            v3 ^= m
            v0, v1, v2, v3 = _sip_rounds(v0, v1, v2, v3, 2)
            v0 ^= m
        v2 ^= np.uint64(0xFF)
        v0, v1, v2, v3 = _sip_rounds(v0, v1, v2, v3, 4)
        low[i] = v0 ^ v1
        high[i] = v2 ^ v3
    return low, high


# ---------------------------------------------------------------------------- UniquesHashSet (uniq)

_UHS_MAX_DEGREE = 17
_UHS_MAX_SIZE = 1 << 16
_UHS_SKIP_BITS = 32 - 17
_UHS_INITIAL_DEGREE = 4
# meta: [m_size, size_degree, skip_degree, has_zero]


@njit(cache=True)
def _uhs_place(x, degree):
    return (x >> _UHS_SKIP_BITS) & ((1 << degree) - 1)


@njit(cache=True)
def _uhs_good(x, skip):
    return (x >> skip) << skip == x


@njit(cache=True)
def _uhs_reinsert(buf, meta, x):
    mask = (1 << meta[1]) - 1
    p = _uhs_place(x, meta[1])
    while buf[p] != 0:
        p = (p + 1) & mask
    buf[p] = x


@njit(cache=True)
def _uhs_insert_impl(buf, meta, x):
    if x == 0:
        if meta[3] == 0:
            meta[0] += 1
        meta[3] = 1
        return
    mask = (1 << meta[1]) - 1
    p = _uhs_place(x, meta[1])
    while buf[p] != 0 and buf[p] != x:
        p = (p + 1) & mask
    if buf[p] == x:
        return
    buf[p] = x
    meta[0] += 1


@njit(cache=True)
def _uhs_rehash(buf, meta):
    size = 1 << meta[1]
    for i in range(size):
        x = buf[i]
        if x != 0:
            if not _uhs_good(x, meta[2]):
                buf[i] = 0
                meta[0] -= 1
            elif i != _uhs_place(x, meta[1]):
                buf[i] = 0
                _uhs_reinsert(buf, meta, x)
    i = 0
    while i < size and buf[i] != 0:
        x = buf[i]
        if i != _uhs_place(x, meta[1]):
            buf[i] = 0
            _uhs_reinsert(buf, meta, x)
        i += 1


@njit(cache=True)
def _uhs_resize(buf, meta):
    old_size = 1 << meta[1]
    meta[1] += 1
    mask = (1 << meta[1]) - 1
    i = 0
    while i < old_size or buf[i] != 0:
        x = buf[i]
        if x != 0:
            p = _uhs_place(x, meta[1])
            if p != i:
                while buf[p] != 0 and buf[p] != x:
                    p = (p + 1) & mask
                if buf[p] != x:
                    buf[p] = x
                    buf[i] = 0
        i += 1


@njit(cache=True)
def _uhs_shrink_if_need(buf, meta):
    if meta[0] > (1 << (meta[1] - 1)):
        if meta[0] > _UHS_MAX_SIZE:
            while meta[0] > _UHS_MAX_SIZE:
                meta[2] += 1
                _uhs_rehash(buf, meta)
        else:
            _uhs_resize(buf, meta)


@njit(cache=True)
def _uhs_clear(buf, meta):
    """An empty set; the buffer past the largest size used so far is kept zero (resizing relies on it)."""
    buf[:1 << meta[1]] = 0
    meta[0] = 0
    meta[1] = _UHS_INITIAL_DEGREE
    meta[2] = 0
    meta[3] = 0


@njit(cache=True)
def _uhs_emit(buf, meta, out, at):
    """The set's values in serialized order (zero first) from out[at]; returns the end."""
    if meta[3]:
        out[at] = 0
        at += 1
    for i in range(1 << meta[1]):
        if buf[i] != 0:
            out[at] = buf[i]
            at += 1
    return at


@njit(cache=True)
def uniq_build(hashes, starts, n):
    """UniquesHashSet per group of rows: the 32-bit hashes of group g are hashes[starts[g]:next]
    in insertion order. Returns (skip degrees, values in serialized order, ends of each group's
    values)."""
    groups = len(starts)
    buf = np.zeros(1 << (_UHS_MAX_DEGREE + 1), np.uint64)
    meta = np.zeros(4, np.int64)
    meta[1] = _UHS_INITIAL_DEGREE
    skips = np.zeros(groups, np.int64)
    out = np.empty(n, np.uint64)
    ends = np.zeros(groups, np.int64)
    at = 0
    for g in range(groups):
        stop = starts[g + 1] if g + 1 < groups else n
        _uhs_clear(buf, meta)
        for r in range(starts[g], stop):
            x = hashes[r]
            if _uhs_good(x, meta[2]):
                _uhs_insert_impl(buf, meta, x)
                _uhs_shrink_if_need(buf, meta)
        skips[g] = meta[2]
        at = _uhs_emit(buf, meta, out, at)
        ends[g] = at
    return skips, out[:at].copy(), ends


@njit(cache=True)
def _uhs_read(buf, meta, skip, values, lo, hi):
    """UniquesHashSet::read of a state whose values are values[lo:hi]."""
    m = hi - lo
    buf[:1 << meta[1]] = 0
    meta[0] = m
    meta[2] = skip
    meta[3] = 0
    degree = _UHS_INITIAL_DEGREE
    if m > 1:
        bits = 0
        v = m - 1
        while v > 1:
            v >>= 1
            bits += 1
        degree = max(_UHS_INITIAL_DEGREE, bits + 2)
    meta[1] = degree
    for i in range(lo, hi):
        if values[i] == 0:
            meta[3] = 1
        else:
            _uhs_reinsert(buf, meta, values[i])


@njit(cache=True)
def uniq_merge(skips, values, state_ends, group_starts):
    """Merge of UniquesHashSet states group by group as ClickHouse merges them: each state is read
    (re-placed into a table sized for its count), then merged into a fresh set. State s holds
    values[state_ends[s - 1]:state_ends[s]] with skip degree skips[s]; group g is states
    group_starts[g] up to the next group's start."""
    groups = len(group_starts)
    states = len(skips)
    buf = np.zeros(1 << (_UHS_MAX_DEGREE + 1), np.uint64)
    meta = np.zeros(4, np.int64)
    meta[1] = _UHS_INITIAL_DEGREE
    rbuf = np.zeros(1 << (_UHS_MAX_DEGREE + 1), np.uint64)
    rmeta = np.zeros(4, np.int64)
    rmeta[1] = _UHS_INITIAL_DEGREE
    out_skips = np.zeros(groups, np.int64)
    out = np.empty(max(len(values), 1), np.uint64)
    ends = np.zeros(groups, np.int64)
    at = 0
    for g in range(groups):
        stop = group_starts[g + 1] if g + 1 < groups else states
        _uhs_clear(buf, meta)
        for s in range(group_starts[g], stop):
            lo = state_ends[s - 1] if s > 0 else 0
            _uhs_read(rbuf, rmeta, skips[s], values, lo, state_ends[s])
            if rmeta[2] > meta[2]:
                meta[2] = rmeta[2]
                _uhs_rehash(buf, meta)
            if meta[3] == 0 and rmeta[3] == 1:
                meta[3] = 1
                meta[0] += 1
                _uhs_shrink_if_need(buf, meta)
            for i in range(1 << rmeta[1]):
                x = rbuf[i]
                if x != 0 and _uhs_good(x, meta[2]):
                    _uhs_insert_impl(buf, meta, x)
                    _uhs_shrink_if_need(buf, meta)
        out_skips[g] = meta[2]
        if at + meta[0] > len(out):
            grown = np.empty(2 * (at + meta[0]), np.uint64)
            grown[:at] = out[:at]
            out = grown
        at = _uhs_emit(buf, meta, out, at)
        ends[g] = at
    return out_skips, out[:at].copy(), ends


# ------------------------------------------------------------------------------ HashTable (HashSet)
# A table: cells[i] the id in cell i (-1 empty), chash[i] its hash; meta [m_size, size_degree,
# has_zero, zero_id]. Growth: ClickHouse's HashTableGrower quadruples below degree `big_until` and
# doubles from there (23 for HashTableGrower, 15 for the two-level table's sub-tables); uniqCombined's
# grower always doubles (big_until = 0).


@njit(cache=True)
def _ht_clear(cells, meta, degree):
    cells[:1 << degree] = -1
    meta[0] = 0
    meta[1] = degree
    meta[2] = 0
    meta[3] = -1


@njit(cache=True)
def _ht_reinsert(cells, chash, meta, i):
    mask = (1 << meta[1]) - 1
    h = chash[i]
    p = np.int64(h & np.uint64(mask))
    if p == i:
        return
    key = cells[i]
    while cells[p] != -1 and cells[p] != key:
        p = (p + 1) & mask
    if cells[p] != -1:
        return
    cells[p] = key
    chash[p] = h
    cells[i] = -1


@njit(cache=True)
def _ht_resize_to(cells, chash, meta, degree):
    old_size = 1 << meta[1]
    cells[old_size:1 << degree] = -1
    meta[1] = degree
    i = 0
    while i < old_size:
        if cells[i] != -1:
            _ht_reinsert(cells, chash, meta, i)
        i += 1
    while cells[i] != -1:
        _ht_reinsert(cells, chash, meta, i)
        i += 1


@njit(cache=True)
def _ht_grow(cells, chash, meta, big_until):
    degree = meta[1]
    _ht_resize_to(cells, chash, meta, degree + (1 if degree >= big_until else 2))


@njit(cache=True)
def _degree_for(count, initial):
    """HashTableGrower::set: the size degree a table read with `count` elements starts at."""
    if count <= 1:
        return initial
    bits = 0
    v = count - 1
    while v > 1:
        v >>= 1
        bits += 1
    return max(initial, bits + 2)


@njit(cache=True)
def _ht_insert(cells, chash, meta, key, h, zero, big_until):
    """HashTable::insert; True when the key was new."""
    if zero:
        if meta[2] == 0:
            meta[2] = 1
            meta[3] = key
            meta[0] += 1
            return True
        return False
    mask = (1 << meta[1]) - 1
    p = np.int64(h & np.uint64(mask))
    while cells[p] != -1 and cells[p] != key:
        p = (p + 1) & mask
    if cells[p] != -1:
        return False
    cells[p] = key
    chash[p] = h
    meta[0] += 1
    if meta[0] > (1 << (meta[1] - 1)):
        _ht_grow(cells, chash, meta, big_until)
    return True


@njit(cache=True)
def _ht_emit(cells, meta, out, at):
    if meta[2]:
        out[at] = meta[3]
        at += 1
    for i in range(1 << meta[1]):
        if cells[i] != -1:
            out[at] = cells[i]
            at += 1
    return at


@njit(cache=True)
def _ht_capacity(count):
    degree = 4
    while (1 << (degree - 1)) < count:
        degree += 1
    return 1 << (degree + 3)


@njit(cache=True)
def set_build(ids, hashes, zeros, starts, n, initial, big_until, limit):
    """HashSet per group of rows, keys inserted in row order (at most `limit` of them when limit > 0,
    as groupUniqArray(N) stops adding). Returns (ids in serialized order, ends of each group's)."""
    groups = len(starts)
    largest = 0
    for g in range(groups):
        stop = starts[g + 1] if g + 1 < groups else n
        largest = max(largest, stop - starts[g])
    size = max(_ht_capacity(largest), 1 << (initial + 1))
    cells = np.empty(size, np.int64)
    chash = np.empty(size, np.uint64)
    meta = np.zeros(4, np.int64)
    out = np.empty(n, np.int64)
    ends = np.zeros(groups, np.int64)
    at = 0
    for g in range(groups):
        stop = starts[g + 1] if g + 1 < groups else n
        _ht_clear(cells, meta, initial)
        for r in range(starts[g], stop):
            if limit > 0 and meta[0] >= limit:
                break
            _ht_insert(cells, chash, meta, ids[r], hashes[r], zeros[r], big_until)
        at = _ht_emit(cells, meta, out, at)
        ends[g] = at
    return out[:at].copy(), ends


@njit(cache=True)
def _ht_reserve(cells, chash, meta, count, initial):
    """HashTable::reserve: grow to the degree a table of `count` elements is read at, if larger."""
    degree = _degree_for(count, initial)
    if degree > meta[1]:
        _ht_resize_to(cells, chash, meta, degree)


@njit(cache=True)
def set_merge(ids, hashes, zeros, state_ends, group_starts, initial, big_until, limit, read_reserves, table_merge):
    """Merge of HashSet states group by group as ClickHouse merges them. Each state is read: its keys
    inserted in serialized order into a table that, when `read_reserves`, is first sized for their
    count. Then it is merged into the group's set, which starts empty:
    - `table_merge` (HashSetTable::merge): into an empty set the read table is copied as it is;
      otherwise the set is first grown for both sizes, then the zero key and the cells in order are
      inserted;
    - else (groupUniqArray(N), groupUniqArray of other types), its keys in iteration order (the zero
      key first) are inserted one by one, stopping at `limit` keys when limit > 0.
    Keys of state s are ids[state_ends[s - 1]:state_ends[s]]."""
    groups = len(group_starts)
    states = len(state_ends)
    total = len(ids)
    size = max(_ht_capacity(total), 1 << (initial + 1))
    cells = np.empty(size, np.int64)
    chash = np.empty(size, np.uint64)
    meta = np.zeros(4, np.int64)
    largest = 0
    for s in range(states):
        largest = max(largest, state_ends[s] - (state_ends[s - 1] if s > 0 else 0))
    rsize = max(_ht_capacity(largest), 1 << (initial + 1))
    rcells = np.empty(rsize, np.int64)
    rhash = np.empty(rsize, np.uint64)
    rmeta = np.zeros(4, np.int64)
    out = np.empty(total, np.int64)
    ends = np.zeros(groups, np.int64)
    at = 0
    for g in range(groups):
        stop = group_starts[g + 1] if g + 1 < groups else states
        _ht_clear(cells, meta, initial)
        for s in range(group_starts[g], stop):
            lo = state_ends[s - 1] if s > 0 else 0
            hi = state_ends[s]
            _ht_clear(rcells, rmeta, _degree_for(hi - lo, initial) if read_reserves else initial)
            for i in range(lo, hi):
                _ht_insert(rcells, rhash, rmeta, ids[i], hashes[i], zeros[i], big_until)
            if table_merge:
                if meta[0] == 0:
                    width = 1 << rmeta[1]
                    cells[:width] = rcells[:width]
                    chash[:width] = rhash[:width]
                    meta[:] = rmeta[:]
                    continue
                if table_merge == 1:
                    _ht_reserve(cells, chash, meta, meta[0] + rmeta[0], initial)
                if rmeta[2] and meta[2] == 0:
                    meta[2] = 1
                    meta[3] = rmeta[3]
                    meta[0] += 1
                for i in range(1 << rmeta[1]):
                    if rcells[i] != -1:
                        _ht_insert(cells, chash, meta, rcells[i], rhash[i], False, big_until)
                continue
            if rmeta[2]:
                if limit > 0 and meta[0] >= limit:
                    continue
                _ht_insert(cells, chash, meta, rmeta[3], np.uint64(0), True, big_until)
            for i in range(1 << rmeta[1]):
                if rcells[i] != -1:
                    if limit > 0 and meta[0] >= limit:
                        break
                    _ht_insert(cells, chash, meta, rcells[i], rhash[i], False, big_until)
        at = _ht_emit(cells, meta, out, at)
        ends[g] = at
    return out[:at].copy(), ends


# ------------------------------------------------------- uniqCombined and uniqHLL12 (small, medium, large)
# A set is SMALL (up to 16 keys in insertion order), MEDIUM (uniqCombined only: a HashSet of the keys,
# TrivialHash, starting at 256 cells and doubling) or LARGE (HyperLogLog registers). The small and medium
# forms keep `keys`; the registers take `hll`, the hash the counter sees (uniqCombined: the key itself).
_SMALL, _MEDIUM, _LARGE = 1, 2, 3
_MEDIUM_DEGREE = 8


@njit(cache=True)
def _hll_update(regs, h, precision, hash_bits):
    bucket = np.int64(h & np.uint64((1 << precision) - 1))
    tail = h >> np.uint64(precision)
    if hash_bits == 32:
        tail &= np.uint64((1 << (32 - precision)) - 1)
    max_rank = hash_bits - precision + 1
    if tail == 0:
        rank = max_rank
    else:
        rank = 1
        while (tail & np.uint64(1)) == 0:
            tail >>= np.uint64(1)
            rank += 1
        rank = min(rank, max_rank)
    if rank > regs[bucket]:
        regs[bucket] = rank


@njit(cache=True)
def hll_image(regs, precision, hash_bits, out):
    """HyperLogLogCounter's memory image: the registers packed little-endian at 5 (32-bit hashes) or 6
    bits, the count of registers of each rank as UInt32 (the denominator), then the count of zero
    registers (UInt16 below 65536 buckets, else UInt32)."""
    width = 5 if hash_bits == 32 else 6
    buckets = 1 << precision
    packed = (buckets * width + 7) // 8
    out[:] = 0
    max_rank = hash_bits - precision + 1
    counts = np.zeros(max_rank + 1, np.int64)
    for b in range(buckets):
        r = regs[b]
        counts[r] += 1
        bit = b * width
        value = np.int64(r) << (bit % 8)
        at = bit // 8
        out[at] |= value & 0xFF
        if at + 1 < packed:
            out[at + 1] |= (value >> 8) & 0xFF
    at = packed
    for r in range(max_rank + 1):
        c = counts[r]
        for i in range(4):
            out[at + i] = (c >> (8 * i)) & 0xFF
        at += 4
    zero_bytes = 2 if buckets < 65536 else 4
    for i in range(zero_bytes):
        out[at + i] = (counts[0] >> (8 * i)) & 0xFF


@njit(cache=True)
def hll_registers(image, precision, hash_bits, regs):
    """The registers of a HyperLogLogCounter memory image."""
    width = 5 if hash_bits == 32 else 6
    mask = (1 << width) - 1
    packed = (((1 << precision) * width) + 7) // 8
    for b in range(1 << precision):
        bit = b * width
        at = bit // 8
        value = np.int64(image[at])
        if at + 1 < packed:
            value |= np.int64(image[at + 1]) << 8
        regs[b] = (value >> (bit % 8)) & mask


@njit(cache=True)
def _small_find(small, count, key):
    for i in range(count):
        if small[i] == key:
            return True
    return False


@njit(cache=True)
def _to_medium(small, small_count, cells, chash, meta):
    _ht_clear(cells, meta, _MEDIUM_DEGREE)
    for i in range(small_count):
        _ht_insert(cells, chash, meta, np.int64(small[i]), small[i], small[i] == 0, 0)


@njit(cache=True)
def _combined_insert(state, small, small_hll, cells, chash, meta, regs, key, h, medium_max, precision, hash_bits):
    """CombinedCardinalityEstimator::insert (medium_max 0: HyperLogLogWithSmallSetOptimization's):
    `key` kept by the small and medium forms, `h` the hash the registers take (a medium set's keys
    are their own hashes: uniqCombined). state[0] is the form, state[1] the small set's count."""
    kind = state[0]
    if kind == _SMALL:
        if _small_find(small, state[1], key):
            return
        if state[1] < 16:
            small[state[1]] = key
            small_hll[state[1]] = h
            state[1] += 1
            return
        if medium_max > 0:
            _to_medium(small, state[1], cells, chash, meta)
            state[0] = _MEDIUM
            kind = _MEDIUM
        else:
            regs[:1 << precision] = 0
            for i in range(state[1]):
                _hll_update(regs, small_hll[i], precision, hash_bits)
            state[0] = _LARGE
            _hll_update(regs, h, precision, hash_bits)
            return
    if kind == _MEDIUM:
        if meta[0] < medium_max:
            _ht_insert(cells, chash, meta, np.int64(key), key, key == 0, 0)
            return
        regs[:1 << precision] = 0
        if meta[2]:
            _hll_update(regs, np.uint64(meta[3]), precision, hash_bits)
        for i in range(1 << meta[1]):
            if cells[i] != -1:
                _hll_update(regs, np.uint64(cells[i]), precision, hash_bits)
        state[0] = _LARGE
        _hll_update(regs, h, precision, hash_bits)
        return
    _hll_update(regs, h, precision, hash_bits)


@njit(cache=True)
def _combined_emit(state, small, cells, meta, regs, precision, hash_bits, image_len, kinds, g, out_keys, at,
                   images, n_images):
    kinds[g] = state[0]
    if state[0] == _SMALL:
        for i in range(state[1]):
            out_keys[at] = small[i]
            at += 1
    elif state[0] == _MEDIUM:
        if meta[2]:
            out_keys[at] = np.uint64(meta[3])
            at += 1
        for i in range(1 << meta[1]):
            if cells[i] != -1:
                out_keys[at] = np.uint64(cells[i])
                at += 1
    else:
        hll_image(regs, precision, hash_bits, images[n_images])
        n_images += 1
    return at, n_images


@njit(cache=True)
def combined_build(keys, hlls, starts, n, medium_max, precision, hash_bits, image_len, large_groups_max):
    """uniqCombined (medium_max > 0) or uniqHLL12 (medium_max 0) per group of rows, keys inserted in
    row order. Returns (kinds, keys of the small and medium forms in serialized order, their ends per
    group, HLL images of the large groups in group order)."""
    groups = len(starts)
    kinds = np.zeros(groups, np.int8)
    out_keys = np.empty(n, np.uint64)
    ends = np.zeros(groups, np.int64)
    images = np.zeros((large_groups_max, image_len), np.uint8)
    state = np.zeros(2, np.int64)
    small = np.zeros(16, np.uint64)
    small_hll = np.zeros(16, np.uint64)
    capacity = 1 << max(_MEDIUM_DEGREE + 1, 1 + int(np.ceil(np.log2(max(medium_max, 1)))) + 1)
    cells = np.empty(capacity, np.int64)
    chash = np.empty(capacity, np.uint64)
    meta = np.zeros(4, np.int64)
    regs = np.zeros(1 << precision, np.uint8)
    at = 0
    n_images = 0
    for g in range(groups):
        stop = starts[g + 1] if g + 1 < groups else n
        state[0] = _SMALL
        state[1] = 0
        for r in range(starts[g], stop):
            _combined_insert(state, small, small_hll, cells, chash, meta, regs, keys[r], hlls[r], medium_max,
                             precision, hash_bits)
        at, n_images = _combined_emit(state, small, cells, meta, regs, precision, hash_bits, image_len, kinds, g,
                                      out_keys, at, images, n_images)
        ends[g] = at
    return kinds, out_keys[:at].copy(), ends, images[:n_images].copy()


@njit(cache=True)
def combined_merge(kinds, keys, hlls, key_ends, registers, group_starts, medium_max, precision, hash_bits, image_len,
                   large_groups_max):
    """Merge of uniqCombined / uniqHLL12 states group by group as ClickHouse merges them into a fresh
    set: a small state's keys inserted in order; a medium one (read into a table sized for its count)
    turns the set medium, then its keys are inserted in the table's order (zero first); a large one
    turns the set large and its registers are taken by maximum. State s has kind kinds[s]; its keys
    are keys[key_ends[s - 1]:key_ends[s]] (hlls: their HLL hashes), its registers (large) the next row
    of `registers`."""
    groups = len(group_starts)
    states = len(kinds)
    out_kinds = np.zeros(groups, np.int8)
    out_keys = np.empty(max(len(keys), 1), np.uint64)
    ends = np.zeros(groups, np.int64)
    images = np.zeros((large_groups_max, image_len), np.uint8)
    state = np.zeros(2, np.int64)
    small = np.zeros(16, np.uint64)
    small_hll = np.zeros(16, np.uint64)
    capacity = 1 << max(_MEDIUM_DEGREE + 1, 1 + int(np.ceil(np.log2(max(medium_max, 1)))) + 1)
    cells = np.empty(capacity, np.int64)
    chash = np.empty(capacity, np.uint64)
    meta = np.zeros(4, np.int64)
    rcells = np.empty(capacity, np.int64)
    rhash = np.empty(capacity, np.uint64)
    rmeta = np.zeros(4, np.int64)
    regs = np.zeros(1 << precision, np.uint8)
    at = 0
    n_images = 0
    large_at = 0
    for g in range(groups):
        stop = group_starts[g + 1] if g + 1 < groups else states
        state[0] = _SMALL
        state[1] = 0
        for s in range(group_starts[g], stop):
            lo = key_ends[s - 1] if s > 0 else 0
            hi = key_ends[s]
            if kinds[s] == _SMALL:
                for i in range(lo, hi):
                    _combined_insert(state, small, small_hll, cells, chash, meta, regs, keys[i], hlls[i], medium_max,
                                     precision, hash_bits)
            elif kinds[s] == _MEDIUM:
                _ht_clear(rcells, rmeta, _degree_for(hi - lo, _MEDIUM_DEGREE))
                for i in range(lo, hi):
                    _ht_insert(rcells, rhash, rmeta, np.int64(keys[i]), keys[i], keys[i] == 0, 0)
                if state[0] == _SMALL:
                    _to_medium(small, state[1], cells, chash, meta)
                    state[0] = _MEDIUM
                if rmeta[2]:
                    _combined_insert(state, small, small_hll, cells, chash, meta, regs, np.uint64(rmeta[3]),
                                     np.uint64(rmeta[3]), medium_max, precision, hash_bits)
                for i in range(1 << rmeta[1]):
                    if rcells[i] != -1:
                        k = np.uint64(rcells[i])
                        _combined_insert(state, small, small_hll, cells, chash, meta, regs, k, k, medium_max,
                                         precision, hash_bits)
            else:
                if state[0] == _SMALL:
                    regs[:1 << precision] = 0
                    for i in range(state[1]):
                        _hll_update(regs, small_hll[i], precision, hash_bits)
                    state[0] = _LARGE
                elif state[0] == _MEDIUM:
                    regs[:1 << precision] = 0
                    if meta[2]:
                        _hll_update(regs, np.uint64(meta[3]), precision, hash_bits)
                    for i in range(1 << meta[1]):
                        if cells[i] != -1:
                            _hll_update(regs, np.uint64(cells[i]), precision, hash_bits)
                    state[0] = _LARGE
                for b in range(1 << precision):
                    if registers[large_at, b] > regs[b]:
                        regs[b] = registers[large_at, b]
                large_at += 1
        if at + 16 + medium_max + 1 > len(out_keys):
            grown = np.empty(2 * (at + 16 + medium_max + 1), np.uint64)
            grown[:at] = out_keys[:at]
            out_keys = grown
        at, n_images = _combined_emit(state, small, cells, meta, regs, precision, hash_bits, image_len, out_kinds, g,
                                      out_keys, at, images, n_images)
        ends[g] = at
    return out_kinds, out_keys[:at].copy(), ends, images[:n_images].copy()


# ------------------------------------------------------------------------------------ reading states

@njit(cache=True)
def _varuint(data, p, end):
    value = 0
    shift = 0
    while True:
        if p >= end or shift > 63:
            return -1, p
        b = np.int64(data[p])
        p += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if b < 0x80:
            return value, p


@njit(cache=True)
def parse_counted(data, begins, ends, skip, width):
    """States data[begins[i]:ends[i]] that are `skip` bytes, a varuint count n, then n values of
    `width` bytes. Returns (counts, where each state's values start, the first bad state or -1)."""
    n = len(begins)
    counts = np.zeros(n, np.int64)
    starts = np.zeros(n, np.int64)
    for i in range(n):
        end = ends[i]
        count, p = _varuint(data, begins[i] + skip, end)
        if count < 0 or p + count * width != end:
            return counts, starts, i
        counts[i] = count
        starts[i] = p
    return counts, starts, -1


@njit(cache=True)
def parse_strings(data, begins, ends):
    """States data[begins[i]:ends[i]] that are a varuint count, then that many strings (varuint
    length, bytes). Returns (counts, each string's start and length, the first bad state or -1)."""
    n = len(begins)
    counts = np.zeros(n, np.int64)
    total = 0
    for i in range(n):
        end = ends[i]
        count, p = _varuint(data, begins[i], end)
        if count < 0:
            return counts, np.zeros(0, np.int64), np.zeros(0, np.int64), i
        for _ in range(count):
            length, p = _varuint(data, p, end)
            if length < 0 or p + length > end:
                return counts, np.zeros(0, np.int64), np.zeros(0, np.int64), i
            p += length
        if p != end:
            return counts, np.zeros(0, np.int64), np.zeros(0, np.int64), i
        counts[i] = count
        total += count
    starts = np.empty(total, np.int64)
    lengths = np.empty(total, np.int64)
    at = 0
    for i in range(n):
        count, p = _varuint(data, begins[i], ends[i])
        for _ in range(count):
            length, p = _varuint(data, p, ends[i])
            starts[at] = p
            lengths[at] = length
            p += length
            at += 1
    return counts, starts, lengths, -1


@njit(cache=True)
def siphash64_words(words):
    """ClickHouse's sipHash64 of each row's (n, w) uint64 words (8w bytes): v0 ^ v1 ^ v2 ^ v3."""
    n, w = words.shape
    out = np.empty(n, np.uint64)
    for i in range(n):
        v0 = np.uint64(0x736F6D6570736575)
        v1 = np.uint64(0x646F72616E646F6D)
        v2 = np.uint64(0x6C7967656E657261)
        v3 = np.uint64(0x7465646279746573)
        for j in range(w + 1):
            m = words[i, j] if j < w else (np.uint64((8 * w) & 0xFF) << np.uint64(56))
            v3 ^= m
            v0, v1, v2, v3 = _sip_rounds(v0, v1, v2, v3, 2)
            v0 ^= m
        v2 ^= np.uint64(0xFF)
        v0, v1, v2, v3 = _sip_rounds(v0, v1, v2, v3, 4)
        out[i] = v0 ^ v1 ^ v2 ^ v3
    return out

"""Compiled kernels of format/states_quantiles.py: the sequential parts of the quantile states.

Each kernel runs ClickHouse's own algorithm for one group after another (a group's rows, or a
group's states merged left to right into a fresh state), over every group of a column in one call.
Values are never interpreted where ClickHouse does not interpret them: the reservoir samplers move
byte offsets of values (into the rows' or the states' bytes), and the caller copies the bytes.

  reservoir (quantile)       capacity 8192; past it, a pcg32 generator (ClickHouse's `pcg32_fast`,
                             seeded 123456) picks which sample a value replaces
  deterministic reservoir    (value, 32-bit hash of the determinator) pairs; past 8192 a skip
                             degree thins the sample to the hashes with that many low zero bits
  t-digest                   Float32 centroids, compressed when more than 2048 were added since
                             the last compression and before a state is written
  timing                     tiny (up to 31 UInt16 values), medium (up to 5672), large (a
                             histogram of 1024 exact and 1811 coarse counters)
"""

from __future__ import annotations

import numpy as np

from spark_mergetree.format.compiled import lazy_njit

RESERVOIR_CAPACITY = 8192
# pcg32_fast: a multiplicative generator (no increment). Its state after seed(123456) is 123456 | 3.
PCG_MULTIPLIER = 6364136223846793005
PCG_INITIAL_STATE = 123459
# Outcomes of the kernels that read states.
READ_OK, READ_CUT, READ_BAD = 0, 1, 2

TDIGEST_MAX_CENTROIDS = 2048
TDIGEST_MAX_UNMERGED = 2048
TIMING_TINY_MAX = 31
TIMING_MEDIUM_MAX = 5672  # a medium state of this many values turns into the histogram on the next value
TIMING_SMALL = 1024
TIMING_BIG = 1811  # (30000 - 1024) / 16
TIMING_CAP = 30000
TIMING_COUNTERS = TIMING_SMALL + TIMING_BIG


# ---------------------------------------------------------------------------------------------
# The reservoir sampler (quantile, quantiles, median)

@lazy_njit
def _pcg_step(state: np.uint64) -> tuple[np.uint64, np.uint64]:  # pragma: no cover - compiled
    """(next state, 32-bit output of the current state): pcg's xsh-rs output of the old state."""
    old = np.uint64(state)
    rotation = (old >> np.uint64(61)) & np.uint64(7)
    mixed = old ^ (old >> np.uint64(22))
    output = (mixed >> (np.uint64(22) + rotation)) & np.uint64(0xFFFFFFFF)
    return old * np.uint64(PCG_MULTIPLIER), output


@lazy_njit
def _random_below(rng: np.ndarray, limit: np.uint64) -> np.uint64:  # pragma: no cover - compiled
    """A random number below `limit` from the generator state rng[0] (advanced)."""
    state, first = _pcg_step(rng[0])
    if limit <= np.uint64(0xFFFFFFFF):
        rng[0] = state
        return first % limit
    state, second = _pcg_step(state)
    rng[0] = state
    return (first * np.uint64(1 << 32) + second) % limit


@lazy_njit
def _reservoir_insert(samples: np.ndarray, filled: int, total: np.ndarray, rng: np.ndarray,
                      value: np.int64) -> int:  # pragma: no cover - compiled
    """Adds one value (its byte offset) to a sampler of `filled` samples; the new fill."""
    if total[0] != np.uint64(0xFFFFFFFFFFFFFFFF):
        total[0] += np.uint64(1)
    if filled < RESERVOIR_CAPACITY:
        samples[filled] = value
        return filled + 1
    slot = _random_below(rng, total[0])
    if slot < np.uint64(RESERVOIR_CAPACITY):
        samples[np.int64(slot)] = value
    return filled


@lazy_njit
def reservoir_sample(offsets: np.ndarray, bounds: np.ndarray, out_starts: np.ndarray, out_samples: np.ndarray,
                     totals: np.ndarray, rngs: np.ndarray) -> None:  # pragma: no cover - compiled
    """Each group's values (byte offsets offsets[bounds[g]:bounds[g + 1]]) added in order to a fresh
    sampler: its samples into out_samples[out_starts[g]:], its count of values and generator state."""
    samples = np.empty(RESERVOIR_CAPACITY, np.int64)
    total = np.zeros(1, np.uint64)
    rng = np.zeros(1, np.uint64)
    for g in range(bounds.shape[0] - 1):
        total[0] = 0
        rng[0] = PCG_INITIAL_STATE
        filled = 0
        for i in range(bounds[g], bounds[g + 1]):
            filled = _reservoir_insert(samples, filled, total, rng, offsets[i])
        out_samples[out_starts[g]:out_starts[g] + filled] = samples[:filled]
        totals[g] = total[0]
        rngs[g] = rng[0]


@lazy_njit
def _read_u64(data: np.ndarray, at: int) -> np.uint64:  # pragma: no cover - compiled
    value = np.uint64(0)
    for k in range(8):
        value |= np.uint64(data[at + k]) << np.uint64(8 * k)
    return value


@lazy_njit
def _read_varuint(data: np.ndarray, at: int, end: int) -> tuple[np.uint64, int]:  # pragma: no cover - compiled
    """(value, position after it); position -1 when the bytes end inside it."""
    value = np.uint64(0)
    shift = 0
    while at < end and shift < 64:
        byte = data[at]
        at += 1
        value |= np.uint64(byte & 0x7F) << np.uint64(shift)
        if byte < 0x80:
            return value, at
        shift += 7
    return value, -1


@lazy_njit
def reservoir_merge(data: np.ndarray, state_offsets: np.ndarray, group_states: np.ndarray, width: int,
                    out_starts: np.ndarray, out_samples: np.ndarray, out_filled: np.ndarray, totals: np.ndarray,
                    rngs: np.ndarray) -> tuple[int, int]:  # pragma: no cover - compiled
    """Each group's states (state_offsets[group_states[g]:group_states[g + 1] + 1] bound them in
    data) merged left to right into a fresh sampler as ClickHouse's ReservoirSampler::merge does.
    Samples are byte offsets into data. Returns (READ_*, the state that could not be read)."""
    samples = np.empty(RESERVOIR_CAPACITY, np.int64)
    moved = np.empty(RESERVOIR_CAPACITY, np.int64)
    total = np.zeros(1, np.uint64)
    rng = np.zeros(1, np.uint64)
    for g in range(group_states.shape[0] - 1):
        total[0] = 0
        rng[0] = PCG_INITIAL_STATE
        filled = 0
        for s in range(group_states[g], group_states[g + 1]):
            begin, end = state_offsets[s], state_offsets[s + 1]
            if end - begin < 17:
                return READ_CUT, s
            capacity = _read_u64(data, begin)
            other_total = _read_u64(data, begin + 8)
            if capacity != np.uint64(RESERVOIR_CAPACITY):
                return READ_BAD, s
            text_length, at = _read_varuint(data, begin + 16, end)
            if at < 0:
                return READ_CUT, s
            first = at + np.int64(text_length)  # the generator of the other sampler is not used
            count = np.int64(min(other_total, capacity))
            if first + count * width != end:
                return READ_CUT if first + count * width > end else READ_BAD, s
            if other_total <= np.uint64(RESERVOIR_CAPACITY):
                for i in range(count):
                    filled = _reservoir_insert(samples, filled, total, rng, first + i * width)
            elif total[0] <= np.uint64(RESERVOIR_CAPACITY):
                kept = filled
                moved[:kept] = samples[:kept]
                for i in range(RESERVOIR_CAPACITY):
                    samples[i] = first + i * width
                filled = RESERVOIR_CAPACITY
                total[0] = other_total
                for i in range(kept):
                    filled = _reservoir_insert(samples, filled, total, rng, moved[i])
            else:
                combined = total[0] + other_total
                total[0] = combined if combined >= total[0] else np.uint64(0xFFFFFFFFFFFFFFFF)
                # Every frequency'th sample is taken from the other one (ClickHouse's shortcut for
                # replacing each with the probability other_total / total).
                frequency = np.float64(total[0]) / np.float64(other_total)
                if frequency * 2 >= RESERVOIR_CAPACITY:
                    slot = _random_below(rng, np.uint64(frequency))
                    if slot < np.uint64(RESERVOIR_CAPACITY):
                        samples[np.int64(slot)] = first + np.int64(slot) * width
                else:
                    position = 0.0
                    while position < RESERVOIR_CAPACITY:
                        index = np.int64(position)
                        samples[index] = first + index * width
                        position += frequency
        out_samples[out_starts[g]:out_starts[g] + filled] = samples[:filled]
        out_filled[g] = filled
        totals[g] = total[0]
        rngs[g] = rng[0]
    return READ_OK, -1


@lazy_njit
def _decimal_digits(value: np.uint64) -> int:  # pragma: no cover - compiled
    digits = 1
    while value >= np.uint64(10):
        value //= np.uint64(10)
        digits += 1
    return digits


@lazy_njit
def write_reservoirs(source: np.ndarray, sample_offsets: np.ndarray, sample_bounds: np.ndarray, width: int,
                     totals: np.ndarray, rngs: np.ndarray, prefix: np.ndarray) -> tuple[np.ndarray, np.ndarray]:  # pragma: no cover
    """The states' bytes (offsets, data): capacity and count of values (UInt64 each), the generator
    as text with a varuint length (`prefix`, "<multiplier> <increment> ", then the state), then
    the samples' bytes."""
    groups = totals.shape[0]
    offsets = np.zeros(groups + 1, np.int64)
    for g in range(groups):
        text = prefix.shape[0] + _decimal_digits(rngs[g])
        offsets[g + 1] = offsets[g] + 17 + text + (sample_bounds[g + 1] - sample_bounds[g]) * width
    out = np.empty(offsets[groups], np.uint8)
    for g in range(groups):
        at = offsets[g]
        for k in range(8):
            out[at + k] = (RESERVOIR_CAPACITY >> (8 * k)) & 0xFF
            out[at + 8 + k] = (totals[g] >> np.uint64(8 * k)) & np.uint64(0xFF)
        digits = _decimal_digits(rngs[g])
        out[at + 16] = prefix.shape[0] + digits
        at += 17
        out[at:at + prefix.shape[0]] = prefix
        at += prefix.shape[0]
        value = rngs[g]
        for k in range(digits - 1, -1, -1):
            out[at + k] = np.uint8(np.uint64(48) + value % np.uint64(10))
            value //= np.uint64(10)
        at += digits
        for i in range(sample_bounds[g], sample_bounds[g + 1]):
            out[at:at + width] = source[sample_offsets[i]:sample_offsets[i] + width]
            at += width
    return offsets, out


# ---------------------------------------------------------------------------------------------
# The deterministic reservoir (quantileDeterministic)

@lazy_njit
def _keep(hash_value: np.uint32, degree: int) -> bool:  # pragma: no cover - compiled
    mask = np.uint32(0xFFFFFFFF) if degree >= 32 else np.uint32((1 << degree) - 1)
    return (hash_value & mask) == 0


@lazy_njit
def _thin_out(values: np.ndarray, hashes: np.ndarray, filled: int, degree: int) -> int:  # pragma: no cover
    kept = 0
    for i in range(filled):
        if _keep(hashes[i], degree):
            values[kept] = values[i]
            hashes[kept] = hashes[i]
            kept += 1
    return kept


@lazy_njit
def _deterministic_insert(values: np.ndarray, hashes: np.ndarray, filled: int, degree: np.ndarray,
                          value: np.int64, hash_value: np.uint32) -> int:  # pragma: no cover - compiled
    """ReservoirSamplerDeterministic::insertImpl: the new fill (degree[0] may rise)."""
    if not _keep(hash_value, degree[0]):
        return filled
    while filled >= RESERVOIR_CAPACITY:
        if degree[0] >= 32:
            return -1  # ClickHouse refuses a skip degree past 32
        degree[0] += 1
        filled = _thin_out(values, hashes, filled, degree[0])
        if not _keep(hash_value, degree[0]):
            return filled
    values[filled] = value
    hashes[filled] = hash_value
    return filled + 1


@lazy_njit
def deterministic_sample(offsets: np.ndarray, row_hashes: np.ndarray, bounds: np.ndarray, out_starts: np.ndarray,
                         out_values: np.ndarray, out_hashes: np.ndarray, out_filled: np.ndarray,
                         degrees: np.ndarray) -> None:  # pragma: no cover - compiled
    """Each group's (value offset, hash) pairs added in order to a fresh deterministic sampler."""
    values = np.empty(RESERVOIR_CAPACITY, np.int64)
    hashes = np.empty(RESERVOIR_CAPACITY, np.uint32)
    degree = np.zeros(1, np.int64)
    for g in range(bounds.shape[0] - 1):
        degree[0] = 0
        filled = 0
        for i in range(bounds[g], bounds[g + 1]):
            filled = _deterministic_insert(values, hashes, filled, degree, offsets[i], row_hashes[i])
        out_values[out_starts[g]:out_starts[g] + filled] = values[:filled]
        out_hashes[out_starts[g]:out_starts[g] + filled] = hashes[:filled]
        out_filled[g] = filled
        degrees[g] = degree[0]


@lazy_njit
def deterministic_merge(data: np.ndarray, state_offsets: np.ndarray, group_states: np.ndarray, pair_width: int,
                        out_starts: np.ndarray, out_values: np.ndarray, out_hashes: np.ndarray,
                        out_filled: np.ndarray, degrees: np.ndarray, totals: np.ndarray) -> tuple[int, int]:  # pragma: no cover
    """Each group's states (version 1: sample size and count of values as UInt64, the pairs, the skip
    degree byte) merged left to right into a fresh sampler. Values are byte offsets into data."""
    values = np.empty(RESERVOIR_CAPACITY, np.int64)
    hashes = np.empty(RESERVOIR_CAPACITY, np.uint32)
    degree = np.zeros(1, np.int64)
    hash_at = pair_width // 2
    for g in range(group_states.shape[0] - 1):
        degree[0] = 0
        filled = 0
        total = np.uint64(0)
        for s in range(group_states[g], group_states[g + 1]):
            begin, end = state_offsets[s], state_offsets[s + 1]
            if end - begin < 17:
                return READ_CUT, s
            size = np.int64(min(_read_u64(data, begin), _read_u64(data, begin + 8)))
            if begin + 16 + size * pair_width + 1 != end:
                return READ_CUT if begin + 16 + size * pair_width + 1 > end else READ_BAD, s
            other_degree = np.int64(data[end - 1])
            if other_degree > 32:
                return READ_BAD, s
            if degree[0] < other_degree:
                degree[0] = other_degree
                filled = _thin_out(values, hashes, filled, other_degree)
            for i in range(size):
                at = begin + 16 + i * pair_width
                hash_value = np.uint32(0)
                for k in range(4):
                    hash_value |= np.uint32(data[at + hash_at + k]) << np.uint32(8 * k)
                filled = _deterministic_insert(values, hashes, filled, degree, at, hash_value)
                if filled < 0:
                    return READ_BAD, s
            total += _read_u64(data, begin + 8)
        out_values[out_starts[g]:out_starts[g] + filled] = values[:filled]
        out_hashes[out_starts[g]:out_starts[g] + filled] = hashes[:filled]
        out_filled[g] = filled
        degrees[g] = degree[0]
        totals[g] = total
    return READ_OK, -1


@lazy_njit
def write_pairs(source: np.ndarray, value_offsets: np.ndarray, hashes: np.ndarray, width: int,
                pair_width: int) -> np.ndarray:  # pragma: no cover - compiled
    """(value, UInt32 hash) pairs as ClickHouse's std::pair lays them out: the value, zero padding,
    the hash at half the pair's width, zero padding."""
    out = np.zeros(value_offsets.shape[0] * pair_width, np.uint8)
    hash_at = pair_width // 2
    for i in range(value_offsets.shape[0]):
        at = i * pair_width
        out[at:at + width] = source[value_offsets[i]:value_offsets[i] + width]
        for k in range(4):
            out[at + hash_at + k] = (hashes[i] >> np.uint32(8 * k)) & np.uint32(0xFF)
    return out


# ---------------------------------------------------------------------------------------------
# The t-digest (quantileTDigest)

@lazy_njit
def _sort_centroids(means: np.ndarray, counts: np.ndarray, size: int) -> None:  # pragma: no cover - compiled
    """Stable sort by mean in the order of ClickHouse's radix sort of floats (-0 before +0)."""
    bits = means[:size].view(np.uint32)
    keys = np.empty(size, np.uint32)
    for i in range(size):
        keys[i] = ~bits[i] if bits[i] >> np.uint32(31) else bits[i] | np.uint32(0x80000000)
    order = np.argsort(keys, kind="mergesort")
    sorted_means = means[:size][order]
    sorted_counts = counts[:size][order]
    means[:size] = sorted_means
    counts[:size] = sorted_counts


@lazy_njit
def _compress_brute(means: np.ndarray, counts: np.ndarray, size: int, total: float) -> tuple[int, float]:  # pragma: no cover
    """QuantileTDigest::compressBrute: batches of neighbours merged until at most 2048 are left."""
    if size <= TDIGEST_MAX_CENTROIDS:
        return size, total
    batch = (size + TDIGEST_MAX_CENTROIDS - 1) // TDIGEST_MAX_CENTROIDS
    left = 0
    summed = 0.0
    left_mean = np.float64(means[0])
    left_count = np.float64(counts[0])
    position = 0
    for right in range(1, size):
        if position < batch - 1:
            left_count += np.float64(counts[right])
            if np.float64(means[right]) != left_mean:
                left_mean += np.float64(counts[right]) * (np.float64(means[right]) - left_mean) / left_count
            means[left] = np.float32(left_mean)
            counts[left] = np.float32(left_count)
            position += 1
        else:
            if not np.isnan(means[left]):
                summed += np.float64(counts[left])
                left += 1
            means[left] = means[right]
            counts[left] = counts[right]
            left_mean = np.float64(means[left])
            left_count = np.float64(counts[left])
            position = 0
    if not np.isnan(means[left]):
        return left + 1, summed + left_count
    return left, summed


@lazy_njit
def _compress(means: np.ndarray, counts: np.ndarray, size: int, total: float,
              unmerged: int) -> tuple[int, float]:  # pragma: no cover - compiled
    """QuantileTDigest::compress: neighbours (sorted by mean) merged while their weight stays under
    4·ε·q(1-q)·N (ε = Float32 0.01), in Float64 as ClickHouse computes it. (size, total weight)."""
    if unmerged > 0 or size > TDIGEST_MAX_CENTROIDS:
        _sort_centroids(means, counts, size)
        limit_factor = total * np.float64(np.float32(0.01)) * 4.0
        summed = 0.0
        left = 0
        left_mean = np.float64(means[0])
        left_count = np.float64(counts[0])
        for right in range(1, size):
            right_count = np.float64(counts[right])
            right_mean = np.float64(means[right])
            q_left = (summed + left_count * 0.5) / total
            error = q_left * (1.0 - q_left)
            q_right = (summed + left_count + right_count * 0.5) / total
            error_right = q_right * (1.0 - q_right)
            if error > error_right:
                error = error_right
            mergeable = left_mean == right_mean or (not np.isinf(left_mean) and not np.isinf(right_mean))
            if left_count + right_count <= limit_factor * error and mergeable:
                left_count += right_count
                if right_mean != left_mean:
                    left_mean += right_count * (right_mean - left_mean) / left_count
                means[left] = np.float32(left_mean)
                counts[left] = np.float32(left_count)
            else:
                summed += np.float64(counts[left])
                left += 1
                if left != right:
                    means[left] = means[right]
                    counts[left] = counts[right]
                left_mean = np.float64(means[left])
                left_count = np.float64(counts[left])
        total = summed + left_count
        size = left + 1
    return _compress_brute(means, counts, size, total)


@lazy_njit
def _add_centroid(means: np.ndarray, counts: np.ndarray, state: np.ndarray, total: np.ndarray, mean: np.float32,
                  count: np.float32) -> None:  # pragma: no cover - compiled
    """QuantileTDigest::addCentroid on a digest whose (size, unmerged) are state[0:2] and whose total
    weight is total[0]."""
    size = state[0]
    means[size] = mean
    counts[size] = count
    total[0] += np.float64(count)
    state[0] = size + 1
    state[1] += 1
    if state[1] > TDIGEST_MAX_UNMERGED:
        state[0], total[0] = _compress(means, counts, state[0], total[0], state[1])
        state[1] = 0


@lazy_njit
def _finish_digest(means: np.ndarray, counts: np.ndarray, state: np.ndarray, total: np.ndarray) -> int:  # pragma: no cover
    """The compression a digest gets before it is written; its size."""
    state[0], total[0] = _compress(means, counts, state[0], total[0], state[1])
    state[1] = 0
    return state[0]


_DIGEST_ROOM = TDIGEST_MAX_CENTROIDS + TDIGEST_MAX_UNMERGED + 1


@lazy_njit
def tdigest_build(values: np.ndarray, bounds: np.ndarray, out_starts: np.ndarray, out_means: np.ndarray,
                  out_counts: np.ndarray, out_sizes: np.ndarray) -> None:  # pragma: no cover - compiled
    """Each group's Float32 values (NaN skipped) added one by one to a fresh digest, compressed as
    it is written."""
    means = np.empty(_DIGEST_ROOM, np.float32)
    counts = np.empty(_DIGEST_ROOM, np.float32)
    state = np.zeros(2, np.int64)
    total = np.zeros(1, np.float64)
    for g in range(bounds.shape[0] - 1):
        state[:] = 0
        total[0] = 0.0
        for i in range(bounds[g], bounds[g + 1]):
            if not np.isnan(values[i]):
                _add_centroid(means, counts, state, total, values[i], np.float32(1.0))
        size = _finish_digest(means, counts, state, total)
        out_means[out_starts[g]:out_starts[g] + size] = means[:size]
        out_counts[out_starts[g]:out_starts[g] + size] = counts[:size]
        out_sizes[g] = size


@lazy_njit
def tdigest_merge(data: np.ndarray, state_offsets: np.ndarray, group_states: np.ndarray, out_starts: np.ndarray,
                  out_means: np.ndarray, out_counts: np.ndarray, out_sizes: np.ndarray) -> tuple[int, int]:  # pragma: no cover
    """Each group's states read as ClickHouse reads them (centroids of NaN mean dropped, more than
    2048 compressed) and merged left to right into a fresh digest (each centroid added in turn)."""
    means = np.empty(_DIGEST_ROOM, np.float32)
    counts = np.empty(_DIGEST_ROOM, np.float32)
    state = np.zeros(2, np.int64)
    total = np.zeros(1, np.float64)
    for g in range(group_states.shape[0] - 1):
        state[:] = 0
        total[0] = 0.0
        for s in range(group_states[g], group_states[g + 1]):
            begin, end = state_offsets[s], state_offsets[s + 1]
            size, at = _read_varuint(data, begin, end)
            if at < 0:
                return READ_CUT, s
            if at + np.int64(size) * 8 != end or size > np.uint64(65536):
                return READ_CUT if at + np.int64(size) * 8 > end else READ_BAD, s
            raw = data[at:end].copy()
            other_means = raw.view(np.float32)[0::2].copy()
            other_counts = raw.view(np.float32)[1::2].copy()
            other_total = 0.0
            kept = 0
            for i in range(other_means.shape[0]):
                if not other_counts[i] > 0:  # ClickHouse refuses counts <= 0 and NaN
                    return READ_BAD, s
                if not np.isnan(other_means[i]):
                    other_total += np.float64(other_counts[i])
                    other_means[kept] = other_means[i]
                    other_counts[kept] = other_counts[i]
                    kept += 1
            kept, other_total = _compress(other_means, other_counts, kept, other_total, 0)
            for i in range(kept):
                _add_centroid(means, counts, state, total, other_means[i], other_counts[i])
        size = _finish_digest(means, counts, state, total)
        out_means[out_starts[g]:out_starts[g] + size] = means[:size]
        out_counts[out_starts[g]:out_starts[g] + size] = counts[:size]
        out_sizes[g] = size
    return READ_OK, -1


# ---------------------------------------------------------------------------------------------
# quantileTiming: tiny, medium and large (histogram) representations

TINY, MEDIUM, LARGE = 1, 2, 3


@lazy_njit
def _grown(out: np.ndarray, used: int, need: int) -> np.ndarray:  # pragma: no cover - compiled
    if used + need <= out.shape[0]:
        return out
    bigger = np.empty(max(2 * out.shape[0], used + need), np.uint8)
    bigger[:used] = out[:used]
    return bigger


@lazy_njit
def _histogram_add(counters: np.ndarray, value: np.int64, weight: np.uint64) -> None:  # pragma: no cover
    """A value (at most 30000) into the histogram: counters[0] counts all, then 1024 exact and 1811
    counters of 16 values each; 30000 itself is only counted."""
    counters[0] += weight
    if value < TIMING_SMALL:
        counters[1 + value] += weight
    elif value < TIMING_CAP:
        counters[1 + TIMING_SMALL + (value - TIMING_SMALL) // 16] += weight


@lazy_njit
def _to_histogram(elems: np.ndarray, filled: int, counters: np.ndarray) -> None:  # pragma: no cover
    counters[:] = 0
    for i in range(filled):
        _histogram_add(counters, np.int64(elems[i]), np.uint64(1))


@lazy_njit
def _write_timing(out: np.ndarray, used: int, kind: int, elems: np.ndarray, filled: int,
                  counters: np.ndarray) -> tuple[np.ndarray, int]:  # pragma: no cover - compiled
    """A state's bytes appended: the kind byte, then tiny: UInt16 count and values; medium: UInt64
    count and values; large: UInt64 count, then the 2835 counters when twice the count exceeds
    their number, else (UInt16 index, UInt64 counter) pairs of the non-zero ones and index 30000."""
    if kind != LARGE:
        header = 2 if kind == TINY else 8
        out = _grown(out, used, 1 + header + 2 * filled)
        out[used] = kind
        for k in range(header):
            out[used + 1 + k] = (filled >> (8 * k)) & 0xFF
        used += 1 + header
        out[used:used + 2 * filled] = elems[:filled].view(np.uint8)
        return out, used + 2 * filled
    count = counters[0]
    out = _grown(out, used, 9 + 8 * TIMING_COUNTERS + 2)
    out[used] = LARGE
    for k in range(8):
        out[used + 1 + k] = (count >> np.uint64(8 * k)) & np.uint64(0xFF)
    used += 9
    if count * np.uint64(2) > np.uint64(TIMING_COUNTERS):
        out[used:used + 8 * TIMING_COUNTERS] = counters[1:].view(np.uint8)
        return out, used + 8 * TIMING_COUNTERS
    nonzero = 0
    for i in range(TIMING_COUNTERS):
        if counters[1 + i] != 0:
            nonzero += 1
    out = _grown(out, used, 10 * nonzero + 2)
    for i in range(TIMING_COUNTERS):
        if counters[1 + i] != 0:
            out[used] = i & 0xFF
            out[used + 1] = i >> 8
            for k in range(8):
                out[used + 2 + k] = (counters[1 + i] >> np.uint64(8 * k)) & np.uint64(0xFF)
            used += 10
    out[used] = TIMING_CAP & 0xFF
    out[used + 1] = TIMING_CAP >> 8
    return out, used + 2


@lazy_njit
def timing_build(values: np.ndarray, weights: np.ndarray, weighted: bool, bounds: np.ndarray,
                 size_hint: int) -> tuple[np.ndarray, np.ndarray]:  # pragma: no cover - compiled
    """Each group's values (UInt16, already capped at 30000; the rows ClickHouse skips removed) added
    in order to a fresh QuantileTiming (with their weights for the weighted form): (offsets, bytes)."""
    groups = bounds.shape[0] - 1
    elems = np.empty(TIMING_MEDIUM_MAX + 1, np.uint16)
    counters = np.zeros(1 + TIMING_COUNTERS, np.uint64)
    offsets = np.zeros(groups + 1, np.int64)
    out = np.empty(max(size_hint, 16), np.uint8)
    used = 0
    for g in range(groups):
        kind = TINY
        filled = 0
        for i in range(bounds[g], bounds[g + 1]):
            value = values[i]
            if weighted:
                weight = weights[i]
                if kind == TINY and weight < np.uint64(TIMING_TINY_MAX) and \
                        filled + np.int64(weight) <= TIMING_TINY_MAX:
                    for _ in range(np.int64(weight)):
                        elems[filled] = value
                        filled += 1
                    continue
                if kind == TINY:
                    _to_histogram(elems, filled, counters)
                    kind = LARGE
                _histogram_add(counters, np.int64(value), weight)
                continue
            if kind == TINY and filled < TIMING_TINY_MAX:
                elems[filled] = value
                filled += 1
                continue
            if kind == TINY:
                kind = MEDIUM
            if kind == MEDIUM:
                if filled >= TIMING_MEDIUM_MAX:
                    _to_histogram(elems, filled, counters)
                    kind = LARGE
                else:
                    elems[filled] = value
                    filled += 1
                    continue
            _histogram_add(counters, np.int64(value), np.uint64(1))
        out, used = _write_timing(out, used, kind, elems, filled, counters)
        offsets[g + 1] = used
    return offsets, out[:used]


@lazy_njit
def timing_merge(data: np.ndarray, state_offsets: np.ndarray, group_states: np.ndarray,
                 size_hint: int) -> tuple[np.ndarray, np.ndarray, int, int]:  # pragma: no cover - compiled
    """Each group's states merged left to right into a fresh QuantileTiming as its merge does (the
    smaller representation brought to the larger; a medium of 5672 values or more after a merge
    becomes a histogram): (offsets, bytes, READ_*, the state that could not be read)."""
    groups = group_states.shape[0] - 1
    # Room for every value the tiny and medium states of a group hold.
    room = TIMING_MEDIUM_MAX + 1
    for g in range(groups):
        held = 0
        for s in range(group_states[g], group_states[g + 1]):
            begin, end = state_offsets[s], state_offsets[s + 1]
            if end - begin >= 3 and data[begin] == TINY:
                held += np.int64(data[begin + 1]) | (np.int64(data[begin + 2]) << 8)
            elif end - begin >= 9 and data[begin] == MEDIUM:
                held += (end - begin - 9) // 2
        room = max(room, held + TIMING_TINY_MAX + 1)
    elems = np.empty(room, np.uint16)
    other = np.empty(room, np.uint16)
    counters = np.zeros(1 + TIMING_COUNTERS, np.uint64)
    other_counters = np.zeros(1 + TIMING_COUNTERS, np.uint64)
    offsets = np.zeros(groups + 1, np.int64)
    out = np.empty(max(size_hint, 16), np.uint8)
    used = 0
    for g in range(groups):
        kind = TINY
        filled = 0
        for s in range(group_states[g], group_states[g + 1]):
            begin, end = state_offsets[s], state_offsets[s + 1]
            if end <= begin:
                return offsets, out[:used], READ_CUT, s
            other_kind = np.int64(data[begin])
            other_filled = 0
            if other_kind == TINY or other_kind == MEDIUM:
                header = 2 if other_kind == TINY else 8
                if end - begin < 1 + header:
                    return offsets, out[:used], READ_CUT, s
                count = np.int64(_read_u64(data, begin + 1)) if other_kind == MEDIUM else \
                    np.int64(data[begin + 1]) | (np.int64(data[begin + 2]) << 8)
                if begin + 1 + header + 2 * count != end or (other_kind == TINY and count > TIMING_TINY_MAX):
                    return offsets, out[:used], READ_BAD, s
                for i in range(count):
                    at = begin + 1 + header + 2 * i
                    other[i] = np.uint16(data[at]) | (np.uint16(data[at + 1]) << np.uint16(8))
                other_filled = count
            elif other_kind == LARGE:
                if end - begin < 9:
                    return offsets, out[:used], READ_CUT, s
                other_counters[:] = 0
                other_counters[0] = _read_u64(data, begin + 1)
                at = begin + 9
                if other_counters[0] * np.uint64(2) > np.uint64(TIMING_COUNTERS):
                    if at + 8 * TIMING_COUNTERS != end:
                        return offsets, out[:used], READ_BAD, s
                    for i in range(TIMING_COUNTERS):
                        other_counters[1 + i] = _read_u64(data, at + 8 * i)
                else:
                    while True:
                        if at + 2 > end:
                            return offsets, out[:used], READ_CUT, s
                        index = np.int64(data[at]) | (np.int64(data[at + 1]) << 8)
                        at += 2
                        if index == TIMING_CAP:
                            break
                        if index >= TIMING_COUNTERS or at + 8 > end:
                            return offsets, out[:used], READ_BAD, s
                        other_counters[1 + index] = _read_u64(data, at)
                        at += 8
                    if at != end:
                        return offsets, out[:used], READ_BAD, s
            else:
                return offsets, out[:used], READ_BAD, s
            # ClickHouse's QuantileTiming::merge. A tiny state's count field reads 32 in a medium
            # state and 33 in a large one, so only two tiny states fit together.
            mine = filled if kind == TINY else (TIMING_TINY_MAX + 1 if kind == MEDIUM else TIMING_TINY_MAX + 2)
            theirs = other_filled if other_kind == TINY else \
                (TIMING_TINY_MAX + 1 if other_kind == MEDIUM else TIMING_TINY_MAX + 2)
            if mine + theirs <= TIMING_TINY_MAX:
                elems[filled:filled + other_filled] = other[:other_filled]
                filled += other_filled
                continue
            if kind == TINY and other_kind == LARGE or kind == MEDIUM and other_kind == LARGE:
                _to_histogram(elems, filled, counters)
                kind = LARGE
            elif kind == TINY:
                kind = MEDIUM
            if kind == MEDIUM:
                elems[filled:filled + other_filled] = other[:other_filled]
                filled += other_filled
                if filled >= TIMING_MEDIUM_MAX:
                    _to_histogram(elems, filled, counters)
                    kind = LARGE
            elif other_kind == LARGE:
                counters += other_counters
            else:
                for i in range(other_filled):
                    _histogram_add(counters, np.int64(other[i]), np.uint64(1))
        out, used = _write_timing(out, used, kind, elems, filled, counters)
        offsets[g + 1] = used
    return offsets, out[:used], READ_OK, -1


@lazy_njit
def varuint_heads(data: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray, int, int]:  # pragma: no cover
    """The varuint each state starts with and where the rest of the state begins; READ_CUT and the
    state when one ends inside its varuint."""
    n = offsets.shape[0] - 1
    values = np.zeros(n, np.uint64)
    rest = np.zeros(n, np.int64)
    for i in range(n):
        value, at = _read_varuint(data, offsets[i], offsets[i + 1])
        if at < 0:
            return values, rest, READ_CUT, i
        values[i] = value
        rest[i] = at
    return values, rest, READ_OK, -1

"""The sequential kernels of format/states_simple.py: what ClickHouse computes row after row (or
state after state) in an order that changes the result's bits or its choice of row, so no
vectorised reduction may reorder it.

Every kernel walks groups of rows given by `starts` (strictly increasing; the last group runs up to
`n`), the rows of a group in order.
"""

from __future__ import annotations

import numpy as np

from spark_mergetree.format.compiled import lazy_njit

# How `pick_rows` chooses a group's row.
FIRST, LAST, SMALLEST, LARGEST = 0, 1, 2, 3


@lazy_njit
def pick_rows(keys: np.ndarray, present: np.ndarray, starts: np.ndarray, n: int, mode: int
              ) -> np.ndarray:  # pragma: no cover - compiled
    """Per group, the row whose value a single-value state keeps (-1 when no row is present): the
    first or last present row, or the first of the smallest / largest keys (a later row replaces
    the kept one only when strictly smaller / larger, as ClickHouse's setIfSmaller/setIfGreater).
    A NaN key never replaces a number, and any number replaces a kept NaN (measured: min and max
    both skip NaN unless every value is NaN)."""
    out = np.full(len(starts), -1, np.int64)
    for g in range(len(starts)):
        end = starts[g + 1] if g + 1 < len(starts) else n
        best = -1
        for i in range(starts[g], end):
            if not present[i]:
                continue
            if best < 0 or mode == LAST:
                best = i
            elif mode == FIRST:
                break
            else:
                value = keys[i]
                kept = keys[best]
                if value != value:
                    continue
                if kept != kept or (value < kept if mode == SMALLEST else value > kept):
                    best = i
        out[g] = best
    return out


@lazy_njit
def added(total: float, value: float) -> float:  # pragma: no cover - compiled
    """`total + value` as ClickHouse's compiled `sum += value` gives it on x86, NaN bits included:
    the added value's NaN wins over the total's (both as they are: a NaN the addition itself makes,
    inf + -inf, is the processor's default NaN, whose sign bit is set)."""
    if value != value:
        return value
    return total + value


@lazy_njit
def sequential_sums(values: np.ndarray, starts: np.ndarray, n: int, added_nan_wins: bool
                    ) -> np.ndarray:  # pragma: no cover - compiled
    """Per group, each column of `values` (2-D, float32 or float64) summed row after row in the
    values' own type, from zero: ClickHouse's `sum += x` for a floating-point accumulator. When both
    are NaN, the added value's wins (`added_nan_wins`: sum's and its merge's compiled code) or the
    total's (the moments')."""
    out = np.zeros((len(starts), values.shape[1]), values.dtype)
    for g in range(len(starts)):
        end = starts[g + 1] if g + 1 < len(starts) else n
        for j in range(values.shape[1]):
            total = out[g, j]
            for i in range(starts[g], end):
                total = added(total, values[i, j]) if added_nan_wins else total + values[i, j]
            out[g, j] = total
    return out


@lazy_njit
def kahan_sums(values: np.ndarray, starts: np.ndarray, n: int) -> np.ndarray:  # pragma: no cover - compiled
    """Per group, (sum, compensation) of Kahan's summation of float64 values row after row, as
    sumKahan adds one row."""
    out = np.zeros((len(starts), 2), np.float64)
    for g in range(len(starts)):
        end = starts[g + 1] if g + 1 < len(starts) else n
        total = 0.0
        compensation = 0.0
        for i in range(starts[g], end):
            compensated = values[i] - compensation
            new_total = total + compensated
            compensation = (new_total - total) - compensated
            total = new_total
        out[g, 0] = total
        out[g, 1] = compensation
    return out


@lazy_njit
def kahan_merges(sums: np.ndarray, compensations: np.ndarray, starts: np.ndarray, n: int
                 ) -> np.ndarray:  # pragma: no cover - compiled
    """Per group, sumKahan's states merged left to right (ClickHouse's two-sum of the sums with
    both compensations folded in; its grouping of the additions is kept as it is)."""
    out = np.zeros((len(starts), 2), np.float64)
    for g in range(len(starts)):
        end = starts[g + 1] if g + 1 < len(starts) else n
        total = 0.0
        compensation = 0.0
        for i in range(starts[g], end):
            # Each addition as `added`: a NaN on its right wins (measured on NaN-holding states).
            raw = added(total, sums[i])
            rhs_part = raw - total
            folded = added(added(added(sums[i] - rhs_part, total - (raw - rhs_part)), compensation), compensations[i])
            total = added(raw, folded)
            compensation = folded - (total - raw)
        out[g, 0] = total
        out[g, 1] = compensation
    return out


@lazy_njit
def welford(left: np.ndarray, right: np.ndarray, starts: np.ndarray, n: int, paired: bool,
            marginal: bool) -> tuple[np.ndarray, np.ndarray]:  # pragma: no cover - compiled
    """The *Stable functions' running moments per group, row after row: counts, and columns mean,
    m2 (one argument) or left mean, right mean, co-moment, then left m2, right m2 (`marginal`,
    corrStable)."""
    width = 2 if not paired else (5 if marginal else 3)
    counts = np.zeros(len(starts), np.uint64)
    out = np.zeros((len(starts), width), np.float64)
    for g in range(len(starts)):
        end = starts[g + 1] if g + 1 < len(starts) else n
        count = 0
        left_mean = 0.0
        right_mean = 0.0
        co_moment = 0.0
        left_m2 = 0.0
        right_m2 = 0.0
        for i in range(starts[g], end):
            x = left[i]
            left_delta = x - left_mean
            count += 1
            if not paired:
                left_mean += left_delta / count
                co_moment = added(co_moment, left_delta * (x - left_mean))
                continue
            y = right[i]
            right_delta = y - right_mean
            old_right_mean = right_mean
            left_mean += left_delta / count
            right_mean += right_delta / count
            co_moment = added(co_moment, (x - left_mean) * (y - old_right_mean))
            if marginal:
                left_m2 = added(left_m2, left_delta * (x - left_mean))
                right_m2 = added(right_m2, right_delta * (y - right_mean))
        counts[g] = count
        out[g, 0] = left_mean
        if not paired:
            out[g, 1] = co_moment
        else:
            out[g, 1] = right_mean
            out[g, 2] = co_moment
            if marginal:
                out[g, 3] = left_m2
                out[g, 4] = right_m2
    return counts, out


@lazy_njit
def _comparable(a: np.uint64, b: np.uint64) -> bool:  # pragma: no cover - compiled
    """Both counts large (over 10000) and within 0.1% of each other: the merge then averages the
    means weighted by count instead of moving one mean toward the other."""
    if a == 0 or b == 0:
        return False
    low = min(a, b)
    high = max(a, b)
    return bool((1.0 - np.float64(low) / np.float64(high)) < 0.001 and low > 10000)


@lazy_njit
def welford_merges(counts: np.ndarray, moments: np.ndarray, starts: np.ndarray, n: int, paired: bool,
                   marginal: bool) -> tuple[np.ndarray, np.ndarray]:  # pragma: no cover - compiled
    """The *Stable states (`counts`, `moments` as `welford` gives them) merged left to right per
    group, with ClickHouse's parallel formula (Chan et al.) and its arithmetic order."""
    width = moments.shape[1]
    out_counts = np.zeros(len(starts), np.uint64)
    out = np.zeros((len(starts), width), np.float64)
    for g in range(len(starts)):
        end = starts[g + 1] if g + 1 < len(starts) else n
        count = np.uint64(0)
        state = np.zeros(width, np.float64)
        for i in range(starts[g], end):
            other = counts[i]
            total = count + other
            if total == 0:
                continue
            factor = np.float64(count * other) / np.float64(total)
            comparable = _comparable(count, other)
            share = np.float64(count) / np.float64(total)
            if not paired:
                delta = state[0] - moments[i, 0]
                if comparable:
                    state[0] = (np.float64(other) * moments[i, 0] + np.float64(count) * state[0]) / np.float64(total)
                else:
                    state[0] = moments[i, 0] + delta * share
                state[1] = added(state[1], added(moments[i, 1], delta * delta * factor))
            else:
                left_delta = state[0] - moments[i, 0]
                right_delta = state[1] - moments[i, 1]
                if comparable:
                    state[0] = (np.float64(other) * moments[i, 0] + np.float64(count) * state[0]) / np.float64(total)
                    state[1] = (np.float64(other) * moments[i, 1] + np.float64(count) * state[1]) / np.float64(total)
                else:
                    state[0] = moments[i, 0] + left_delta * share
                    state[1] = moments[i, 1] + right_delta * share
                state[2] = added(state[2], added(moments[i, 2], left_delta * right_delta * factor))
                if marginal:
                    left_incr = left_delta * left_delta * factor
                    right_incr = right_delta * right_delta * factor
                    state[3] = added(added(state[3], moments[i, 3]), left_incr)
                    state[4] = added(added(state[4], moments[i, 4]), right_incr)
            count = total
        out_counts[g] = count
        out[g] = state
    return out_counts, out


@lazy_njit
def list_items(data: np.ndarray, at: np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # pragma: no cover - compiled
    """The items of list states (a varuint count, then each item: `width` bytes, or when `width` is
    0 a varuint length and that many bytes) starting at data[at]: each state's number of items, and
    where each item starts and how many bytes it takes (its length prefix included)."""
    counts = np.zeros(len(at), np.int64)
    total = 0
    ends = np.zeros(len(at), np.int64)
    for s in range(len(at)):
        position = at[s]
        count, position = _varuint(data, position)
        counts[s] = count
        total += count
        ends[s] = position
    item_starts = np.zeros(total, np.int64)
    item_lengths = np.zeros(total, np.int64)
    k = 0
    for s in range(len(at)):
        position = ends[s]
        for _ in range(counts[s]):
            begin = position
            if width:
                position += width
            else:
                length, position = _varuint(data, position)
                position += length
            item_starts[k] = begin
            item_lengths[k] = position - begin
            k += 1
    return counts, item_starts, item_lengths


@lazy_njit
def _varuint(data: np.ndarray, position: int) -> tuple[int, int]:  # pragma: no cover - compiled
    value = 0
    shift = 0
    while True:
        byte = data[position]
        position += 1
        value |= (int(byte) & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, position


@lazy_njit
def heavy_hitters(keys: np.ndarray, present: np.ndarray, counters: np.ndarray, starts: np.ndarray, n: int,
                  merging: bool) -> tuple[np.ndarray, np.ndarray]:  # pragma: no cover - compiled
    """anyHeavy's majority vote per group: the row whose value is held (-1: none) and its counter.
    A row equal to the held value adds one, else takes the place of a held value whose counter is 0,
    else takes one off. `merging`: rows are states (value and counter; those not `present` hold
    none and are skipped): an equal one adds its counter, one with a larger counter (or the first)
    replaces the held value with the difference of counters, any other subtracts its counter."""
    held_rows = np.full(len(starts), -1, np.int64)
    out_counters = np.zeros(len(starts), np.uint64)
    for g in range(len(starts)):
        end = starts[g + 1] if g + 1 < len(starts) else n
        held = -1
        counter = np.uint64(0)
        for i in range(starts[g], end):
            if not present[i]:
                continue
            equal = held >= 0 and keys[held] == keys[i]
            if not merging:
                if equal:
                    counter += np.uint64(1)
                elif counter == 0:
                    held = i
                    counter += np.uint64(1)
                else:
                    counter -= np.uint64(1)
            elif equal:
                counter += counters[i]
            elif held < 0 or counter < counters[i]:
                held = i
                counter = counters[i] - counter
            else:
                counter -= counters[i]
        held_rows[g] = held
        out_counters[g] = counter
    return held_rows, out_counters

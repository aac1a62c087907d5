"""Time zones over whole arrays: a zone's UTC offset at instants, instants of wall-clock times, and
wall-clock times of instants, as ClickHouse computes them.

Arrow's zone lookups stop at the last transition the system's zone files list (2037): after it
they keep that offset forever, so New York would have no summer time after 2037, where ClickHouse
follows the zone's yearly rules. Offsets from 2037 on therefore come from Python's `zoneinfo`,
which follows the rules, turned once per zone into a table of transitions (2037..2300).

Every layer that turns instants into local dates or times, or local text into instants (key
functions, typed JSON paths, JSON text), takes its offsets here.
"""

from __future__ import annotations

import datetime as dt
import functools
import zoneinfo

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from spark_mergetree.errors import FormatError

__all__ = ["UTC_ZONES", "utc_offsets", "local_instants", "wall_clock"]

UTC_ZONES = frozenset({"UTC", "Etc/UTC", "GMT", "Etc/GMT", "Zulu"})
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
_RULES_FROM, _RULES_UNTIL = 2114380800, 10413792000  # 2037-01-01 .. 2300-01-01 UTC
_DAY = 86400


def utc_offsets(seconds: np.ndarray, zone: str) -> np.ndarray:
    """The zone's UTC offset in seconds at each instant (int64 seconds since the epoch)."""
    seconds = np.asarray(seconds, np.int64)
    if zone in UTC_ZONES:
        return np.zeros_like(seconds)
    offsets = np.empty_like(seconds)
    early = seconds < _RULES_FROM
    if early.any():
        try:
            instants = pa.array(seconds[early], pa.int64()).cast(pa.timestamp("s", zone))
            local = pc.local_timestamp(instants)
        except (pa.ArrowInvalid, pa.ArrowKeyError):
            raise FormatError(f"unknown time zone {zone!r}") from None
        offsets[early] = np.asarray(local.cast(pa.int64()), np.int64) - seconds[early]
    if not early.all():
        starts, later = _rule_offsets(zone)
        offsets[~early] = later[np.searchsorted(starts, seconds[~early], side="right") - 1]
    return offsets


def local_instants(local: np.ndarray, zone: str) -> np.ndarray:
    """The instants (int64 seconds) of wall-clock times of `zone` (int64 seconds of the wall clock,
    as if it were UTC), as ClickHouse reads text into a zoned DateTime: a time the clocks passed
    twice is its first instant, a time they skipped is read with the offset in force after the
    jump (02:30 on the night Berlin's clocks go from 02:00 to 03:00 is 02:30 at +02:00)."""
    local = np.asarray(local, np.int64)
    if zone in UTC_ZONES:
        return local.copy()
    # Changes of offset are months apart: within a day of any wall time there is at most one, so
    # the offsets a day before and a day after are the only candidates.
    before = utc_offsets(local - _DAY, zone)
    after = utc_offsets(local + _DAY, zone)
    first, second = local - before, local - after
    first_fits = first + utc_offsets(first, zone) == local
    second_fits = second + utc_offsets(second, zone) == local
    # Both fit: the wall time was passed twice, take the earlier instant. Neither fits: the clocks
    # skipped it, read it with the offset after the jump.
    return np.where(first_fits & second_fits, np.minimum(first, second),
                    np.where(first_fits, first, second))


def wall_clock(seconds: np.ndarray, zone: str) -> np.ndarray:
    """The zone's wall-clock time at each instant, as int64 seconds (for printing as text)."""
    seconds = np.asarray(seconds, np.int64)
    return seconds + utc_offsets(seconds, zone)


@functools.lru_cache(maxsize=64)
def _rule_offsets(zone: str) -> tuple[np.ndarray, np.ndarray]:
    """(instants from which the zone's offset changes, the offset from each on), 2037..2300."""
    try:
        info = zoneinfo.ZoneInfo(zone)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise FormatError(f"unknown time zone {zone!r}") from None

    def offset(t: int) -> int:
        utc = _EPOCH + dt.timedelta(seconds=t)
        return int(utc.astimezone(info).utcoffset().total_seconds())  # type: ignore[union-attr]

    # A zone's yearly rules change its offset at most twice a year, months apart: a weekly scan
    # finds every change, bisection its second.
    samples = np.arange(_RULES_FROM, _RULES_UNTIL, 7 * _DAY, dtype=np.int64)
    sampled = np.array([offset(int(t)) for t in samples], np.int64)
    starts, offsets = [-(2**62)], [int(sampled[0])]
    for i in np.nonzero(sampled[1:] != sampled[:-1])[0]:
        lo, hi = int(samples[i]), int(samples[i + 1])  # offset(lo) is the old one, offset(hi) the new
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if offset(mid) == sampled[i] else (lo, mid)
        starts.append(hi)
        offsets.append(int(sampled[i + 1]))
    return np.array(starts, np.int64), np.array(offsets, np.int64)

"""ClickHouse's DateTime-valued key functions, over whole arrays: `toDateTime`, `toUnixTimestamp`,
`toStartOfDay`, `toStartOfHour` and the minute intervals (`toStartOfMinute`, `toStartOfFiveMinutes`,
`toStartOfTenMinutes`, `toStartOfFifteenMinutes`).

They are what time-series sort keys are made of (`ORDER BY (service, toDateTime(ts))`,
`toStartOfHour(ts)`). A key's values go into the sparse index ClickHouse prunes with, so they must
be ClickHouse's to the second, including at the ends of the DateTime range (checked against
ClickHouse 26.9):

* A DateTime is a UInt32 count of seconds. `toDateTime` of a DateTime64 keeps the whole seconds
  (rounded down) modulo 2^32, of a Date the day's midnight in UTC, modulo 2^32 too.
  `toUnixTimestamp` of a DateTime64 rounds toward zero and refuses what falls outside the UInt32
  range (as ClickHouse's insert does); of a Date it wraps like `toDateTime`.
* The `toStartOf...` functions of a DateTime64 saturate at 0 and 2^32 - 1 instead of wrapping.
* Minute intervals are rounded down on the UTC seconds, whatever the column's zone (ClickHouse
  does so even where the zone's offset is not a multiple of the interval, as in Asia/Kathmandu).
* `toStartOfHour` rounds down to whole hours since the local day began.
* `toStartOfDay` is the instant of local midnight. For a DateTime the local date is at least
  1970-01-01, and a midnight before the epoch (1970-01-01 east of UTC) gives the next day's.

Wrapping functions are not monotonic, so key conditions pass only through the others
(`is_monotonic`).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from spark_mergetree.errors import ExpressionError, UnsupportedError
from spark_mergetree.format.zones import UTC_ZONES, utc_offsets

__all__ = ["TIME_FUNCTIONS", "time_result_type", "apply_time_function", "is_monotonic_time_function"]

_MINUTE_INTERVALS = {"toStartOfMinute": 1, "toStartOfFiveMinutes": 5, "toStartOfFiveMinute": 5,
                     "toStartOfTenMinutes": 10, "toStartOfFifteenMinutes": 15}
TIME_FUNCTIONS = frozenset({"toDateTime", "toUnixTimestamp", "toStartOfDay", "toStartOfHour", *_MINUTE_INTERVALS})
_UINT32_MAX = 2**32 - 1
_DAY = 86400
_TICKS_PER_SECOND = {"s": 1, "ms": 10**3, "us": 10**6, "ns": 10**9}


def time_result_type(name: str, base: str, timezone: str | None) -> str:
    """The result type of `name` over a value of type family `base` (Date, DateTime, DateTime64)."""
    if base not in ("Date", "DateTime", "DateTime64"):
        raise UnsupportedError(f"{name}() of a {base} value is not supported in keys (needs Date, DateTime or DateTime64)")
    if base == "Date" and name not in ("toDateTime", "toUnixTimestamp", "toStartOfDay"):
        raise UnsupportedError(f"{name}() of a Date value: ClickHouse refuses it")
    if name == "toUnixTimestamp":
        return "UInt32"
    if base == "Date" or timezone is None:
        return "DateTime"
    return f"DateTime('{timezone}')"


def is_monotonic_time_function(name: str, base: str) -> bool:
    """Whether `name` keeps the order of its argument's values (those that wrap modulo 2^32 do not)."""
    if name == "toDateTime":
        return base == "DateTime"
    if name == "toUnixTimestamp":
        return base != "Date"
    return True


def apply_time_function(name: str, array: pa.Array, base: str, timezone: str | None,
                        mask: np.ndarray | None) -> pa.Array:
    """`name` of every value of `array` (a timestamp array for DateTime/DateTime64, date32 for Date)."""
    zone = timezone or "UTC"
    if base == "Date":
        midnight = np.asarray(array.cast(pa.int32()).fill_null(0), np.int64) * _DAY
        seconds = np.clip(midnight, 0, _UINT32_MAX) if name == "toStartOfDay" else midnight % 2**32
        return _result(name, seconds, None, mask)
    if pa.types.is_timestamp(array.type):
        unit = array.type.unit
        ticks = np.asarray(array.cast(pa.timestamp(unit)).cast(pa.int64()).fill_null(0), np.int64)
    elif pa.types.is_integer(array.type) and base == "DateTime":
        unit, ticks = "s", np.asarray(array.cast(pa.int64()).fill_null(0), np.int64)
    else:
        raise ExpressionError(f"{name}(): cannot take instants of a {array.type} array of a {base} column")
    per_second = _TICKS_PER_SECOND[unit]
    seconds = np.floor_divide(ticks, per_second)
    extended = base == "DateTime64"
    if name == "toDateTime":
        return _result(name, seconds % 2**32, timezone, mask)
    if name == "toUnixTimestamp":
        toward_zero = np.where(ticks < 0, -np.floor_divide(-ticks, per_second), seconds)
        outside = (toward_zero < 0) | (toward_zero > _UINT32_MAX)
        if mask is not None:
            outside &= ~mask
        if outside.any():
            row = int(np.argmax(outside))
            raise ExpressionError(f"toUnixTimestamp(): value {array[row]} at row {row} is outside the UInt32 "
                                  "range of seconds (ClickHouse refuses it too)")
        return _result(name, toward_zero, None, mask)
    if name in _MINUTE_INTERVALS:
        width = 60 * _MINUTE_INTERVALS[name]
        return _result(name, _saturated(seconds - seconds % width, extended), timezone, mask)
    days = np.floor_divide(seconds + utc_offsets(seconds, zone), _DAY)
    if name == "toStartOfHour":
        # Whole hours counted from the local day's start, which differs from the local clock's
        # hours on a day whose offset changes by half an hour (Australia/Lord_Howe).
        since_midnight = seconds - _local_midnights(days, zone)
        return _result(name, _saturated(seconds - since_midnight % 3600, extended), timezone, mask)
    if not extended:
        days = np.maximum(days, 0)
    starts = _local_midnights(days, zone)
    if not extended:
        starts = np.where(starts < 0, _local_midnights(days + 1, zone), starts)
    return _result(name, np.clip(starts, 0, _UINT32_MAX), timezone, mask)


def _saturated(seconds: np.ndarray, extended: bool) -> np.ndarray:
    # A DateTime64 beyond DateTime's range saturates; a DateTime is in range, but its local rounding
    # may fall before the epoch (toStartOfHour at 1970-01-01 00:00 UTC in a +05:30 zone): 0 too.
    return np.clip(seconds, 0, _UINT32_MAX) if extended else np.maximum(seconds, 0)


def _local_midnights(days: np.ndarray, zone: str) -> np.ndarray:
    """The instant each local date begins (the first existing instant where a change skips midnight)."""
    local = days * _DAY
    if zone in UTC_ZONES:
        return local
    # The instant whose local time is midnight: local - offset, with the offset in force then.
    guess = local - utc_offsets(local, zone)
    instant = local - utc_offsets(guess, zone)
    # Where the clocks jumped over midnight no instant has local time 00:00; the day begins at the jump.
    skipped = instant + utc_offsets(instant, zone) != local
    if skipped.any():
        # The jump lies within the day: the first instant whose local date is the day's.
        day_start = local[skipped] - utc_offsets(instant[skipped], zone)
        candidates = day_start[:, None] + np.arange(0, _DAY, 900)[None, :]  # changes fall on quarter hours
        local_days = np.floor_divide(candidates + utc_offsets(candidates.ravel(), zone).reshape(candidates.shape), _DAY)
        first = np.argmax(local_days == days[skipped][:, None], axis=1)
        instant[skipped] = candidates[np.arange(len(first)), first]
    return instant


def _result(name: str, seconds: np.ndarray, timezone: str | None, mask: np.ndarray | None) -> pa.Array:
    if name == "toUnixTimestamp":
        return pa.array(seconds.astype(np.uint32), pa.uint32(), mask=mask)
    return pa.array(seconds.astype(np.int64), pa.int64(), mask=mask).cast(pa.timestamp("s", timezone or "UTC"))

"""A JSON column's typed paths (`JSON(a UInt32, t DateTime)`) from the leaves json_columns sets apart.

json_write's `_typed_column` converts a typed path's values from a list of them per row, as
ClickHouse's insert does: `pa.array` of the values (into the path's Arrow type for a plain integer
type; inferred otherwise), dates and times read from text (`_parse_times`), then `conform_array`
and the type's default where a row lacks the path. `plain_arrays` gives, column-wise, the very
array that first step gives (after `_parse_times` for dates and times), for the common types:
integers, Float32/Float64, Bool, String, LowCardinality(String), Date, Date32, DateTime,
DateTime64, and Nullable of these; the rest of the conversion is the same code.

It covers the values those types take as they are: integers of 64 bits or fewer for integer types
(in the type's range when the path's Arrow type is the integer's: `pa.array` would refuse the rest);
numbers for floats (int64 integers alone stay int64, beside floats they must be exact as a double,
which `pa.array` checks); `true`/`false` for Bool; strings for the string types; and for dates and
times text `YYYY-MM-DD[( |T)hh:mm:ss[.fffffffff]][Z]` of valid dates and times in ASCII digits within
±292 years of 1970 (json_infer's patterns run by pyarrow: what RE2 matches there Python matches
alike). Anything else — a value of another kind (`"1"` or `1.0` for an integer), an integer out of
range, other text, a type not listed — gives None: the column goes to the per-row reader, which
converts it or refuses it with its usual error.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from spark_mergetree.format.json_columns import _DATE_FIELDS, _DATETIME_FIELDS, _TEN_POWERS, _days, _fields
from spark_mergetree.format.json_tokens import FALSE, FLOAT, INT, INT64, STRING, TRUE, UINT64, Tokens
from spark_mergetree.format.types import (
    DataType,
    DateTime,
    DateTime64,
    LowCardinality,
    Nullable,
    Primitive,
    to_arrow,
)
from spark_mergetree.format.zones import local_instants

__all__ = ["covers", "plain_arrays", "zoned_times"]

_INTEGERS = {"UInt8", "UInt16", "UInt32", "UInt64", "Int8", "Int16", "Int32", "Int64"}
_DAY_TYPES = {"Date", "Date32"}
_EXACT_IN_DOUBLE = 2**53
# Seconds whose nanoseconds (with any fraction) surely fit an int64 (`_parse_times` refuses beyond it).
_SECONDS_RANGE = (-(2**63) // 10**9 + 1, (2**63 - 1) // 10**9 - 1)


def _base(dt: DataType) -> DataType:
    """The type a typed path's values are converted to, without Nullable and LowCardinality."""
    if isinstance(dt, LowCardinality):
        dt = dt.inner
    return dt.inner if isinstance(dt, Nullable) else dt


def covers(dt: DataType) -> bool:
    """Whether a typed path of type `dt` is converted here."""
    base = _base(dt)
    if isinstance(dt, LowCardinality):
        return base == Primitive("String")
    if isinstance(base, (DateTime, DateTime64)):
        return True
    return isinstance(base, Primitive) and base.name in (*_INTEGERS, *_DAY_TYPES, "Float32", "Float64", "Bool",
                                                         "String")


def plain_arrays(leaves: Tokens | None, types: Mapping[str, DataType], rows: int) -> dict[str, pa.Array] | None:
    """Each typed path's values over `rows` rows (NULL where a row lacks it) as `_typed_column` has
    them before conforming; None where a value is not converted here (see the module's docstring)."""
    codes = {} if leaves is None else {path: code for code, path in enumerate(leaves.paths)}
    if leaves is not None:
        order = np.argsort(leaves.path_codes, kind="stable")  # (row order within a path)
        bounds = np.searchsorted(leaves.path_codes[order], np.arange(len(leaves.paths) + 1))
    out = {}
    for path, dt in types.items():
        code = codes.get(path)
        if leaves is None or code is None:
            out[path] = pa.array(np.zeros(rows, to_arrow(dt).to_pandas_dtype()), mask=np.ones(rows, bool)) \
                if _typed_integers(dt) else pa.nulls(rows)  # (what `pa.array` of NULLs alone gives)
            continue
        found = _plain(dt, leaves, order[bounds[code]:bounds[code + 1]], rows)
        if found is None:
            return None
        out[path] = found
    return out


def _typed_integers(dt: DataType) -> bool:
    """Whether `_typed_column` builds the path's values in its own Arrow type (else `pa.array` infers it)."""
    return isinstance(dt, Primitive) and dt.name in _INTEGERS


def _spread(values: np.ndarray, at: np.ndarray, rows: int) -> pa.Array:
    """Values at rows `at` → one per row, NULL elsewhere (zero beneath, as `pa.array` leaves it)."""
    full = np.zeros(rows, values.dtype)
    full[at] = values
    missing = np.ones(rows, bool)
    missing[at] = False
    return pa.array(full, mask=missing)


def _plain(dt: DataType, leaves: Tokens, mine: np.ndarray, rows: int) -> pa.Array | None:
    base = _base(dt)
    kinds = leaves.kinds[mine]
    at = leaves.rows[mine]
    if isinstance(base, (DateTime, DateTime64)) or isinstance(base, Primitive) and base.name in _DAY_TYPES:
        if not (kinds == STRING).all():
            return None
        found = _times(leaves.texts.take(pa.array(mine)))
        if found is None:
            return None
        nanos, utc = found
        try:
            return zoned_times(_spread(nanos, at, rows), _spread(utc, at, rows).fill_null(True), base)
        except pa.ArrowInvalid:  # (a local time its zone skips or repeats: what the per-row reader does)
            return None
    if base == Primitive("String"):
        if not (kinds == STRING).all():
            return None
        index = np.full(rows, -1, np.int64)
        index[at] = mine
        return leaves.texts.take(pa.array(np.maximum(index, 0), mask=index < 0)).cast(pa.string())
    if base == Primitive("Bool"):
        return _spread(kinds == TRUE, at, rows) if ((kinds == TRUE) | (kinds == FALSE)).all() \
            else None
    ints = kinds == INT
    classes = leaves.flags[mine]
    if _typed_integers(dt):
        target = np.dtype(to_arrow(dt).to_pandas_dtype())
        if not ints.all() or not np.isin(classes, (INT64, UINT64)).all():
            return None
        values = leaves.ints[mine]
        signed = classes == INT64
        limits = np.iinfo(target)
        in_range = np.where(signed, (values >= max(limits.min, -(2**63))) & (values <= min(limits.max, 2**63 - 1)),
                            target == np.uint64)
        return _spread(values.astype(target), at, rows) if in_range.all() else None
    if not (ints | (kinds == FLOAT)).all() or (leaves.flags[mine][ints] != INT64).any():
        return None  # (`pa.array` infers no type for a UInt64 beside int64 values)
    if ints.all():
        return _spread(leaves.ints[mine], at, rows) if base.to_clickhouse() in (*_INTEGERS, "Float32", "Float64") \
            else None
    if not (isinstance(base, Primitive) and base.name in ("Float32", "Float64")):
        return None
    values = np.array(leaves.texts.take(pa.array(mine)).cast(pa.float64()), np.float64)  # (written to)
    exact = np.abs(leaves.ints[mine][ints]) <= _EXACT_IN_DOUBLE
    if not exact.all() or not np.isfinite(values).all():
        return None
    values[ints] = leaves.ints[mine][ints]
    return _spread(values, at, rows)


def _times(texts: pa.Array) -> tuple[np.ndarray, np.ndarray] | None:
    """Each text's nanoseconds since the epoch and whether it is UTC (`Z`), as `_parse_times` reads
    it (`YYYY-MM-DD hh:mm:ss[.f][Z]` first, then `YYYY-MM-DD`), or None where one is not read so."""
    seconds = np.zeros(len(texts), np.int64)
    nanos = np.zeros(len(texts), np.int64)
    done = np.zeros(len(texts), bool)
    for pattern, count in ((_DATETIME_FIELDS, 6), (_DATE_FIELDS, 3)):
        fields = pc.extract_regex(texts, pattern)
        at = np.flatnonzero(np.asarray(fields.is_valid()) & ~done)
        if not len(at):
            continue
        fields = fields.take(pa.array(at))
        parts = _fields(fields, count)
        days, valid = _days(*parts[:3])
        hour, minute, second = parts[3:] if count == 6 else (np.zeros(len(at), np.int64),) * 3
        if not (valid & (hour <= 23) & (minute <= 59) & (second <= 59)).all():
            return None
        seconds[at] = days * 86400 + hour * 3600 + minute * 60 + second
        if count == 6:
            fraction = fields.field(6)
            digits = np.asarray(pc.binary_length(fraction), np.int64)
            nanos[at] = np.asarray(pc.cast(pc.if_else(pc.greater(digits, 0), fraction, "0"), pa.int64()),
                                   np.int64) * _TEN_POWERS[9 - digits]
        done[at] = True
    if not done.all() or ((seconds < _SECONDS_RANGE[0]) | (seconds > _SECONDS_RANGE[1])).any():
        return None
    return seconds * 10**9 + nanos, np.asarray(pc.ends_with(texts, "Z"), bool)


def zoned_times(nanos: pa.Array, utc: pa.Array, dt: DataType) -> pa.Array:
    """Dates and date-times read from text as instants: `nanos` (int64 nanoseconds of the wall
    clock) are local time in the type's time zone (as ClickHouse reads text into it), UTC where
    `utc`; a type without a time zone is taken to be UTC (the server time zone assumed throughout).
    A Date or Date32 as date32."""
    naive = nanos.cast(pa.timestamp("ns"))
    zone = dt.timezone if isinstance(dt, (DateTime, DateTime64)) else None
    stamps = naive.cast(pa.timestamp("ns", "UTC"))
    if zone not in (None, "UTC"):
        wall = np.asarray(nanos.cast(pa.int64()).fill_null(0), np.int64)
        seconds = np.floor_divide(wall, 10**9)
        local = (local_instants(seconds, zone) * 10**9 + (wall - seconds * 10**9)).astype(np.int64)
        zoned = pa.array(local, pa.int64(), mask=np.asarray(nanos.is_null(), bool)).cast(pa.timestamp("ns", "UTC"))
        stamps = pc.if_else(utc, stamps, zoned)
    if isinstance(dt, Primitive):  # Date, Date32
        return stamps.cast(pa.date32())
    return stamps

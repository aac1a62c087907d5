"""A JSON column's leaf values typed column-wise, as ClickHouse 26.9's insert types them.

json_infer.py types a value at a time: `_scalar`/`_string_type` give a value its own type, and a
dynamic path's Dynamic (`_Slot`) first offers each value to the types it holds. This module gives
the same types to whole columns of values (the leaves `json_tokens.tokenize` finds):

- `true`/`false` are Bool; integers Int64, UInt64 or, beyond 64 bits, a String of their digits
  (classed by the tokenizer, which reads them exactly); floats Float64 (pyarrow's string → float64
  cast, correctly rounded as Python's `float`; a non-finite one, which ClickHouse refuses, leaves the
  column to the per-row reader).
- Strings of printable ASCII are classed with json_infer's own regular expressions run by pyarrow
  (`_DATE_RE`, `_DATETIME_RE`, `_TIME_ONLY_RE`, `_DATE_LIKE_RE`, its words): no newline can end
  them, so RE2's `$` and Python's agree there, and `\\d` is ASCII in both. Other strings (non-ASCII
  or control characters) of at most 50 characters are classed by `_string_type` itself, once per
  distinct text.
- A path whose values all keep their own type in its Dynamic is typed here. For a shared path that
  is always so (each value is typed on its own). For a dynamic path it is so when its values hold at
  most one of String, Date, DateTime, DateTime64(9) — a held String takes later dates, a held date
  type may read a later String, a held DateTime takes a later Date — or only String with integers
  beyond 64 bits (stored as String); when they hold at most `max_dynamic_types` types (beyond it a
  value may go to a held type that takes it converted, or to the shared variant); and when integers
  beyond 64 bits are not among as many types as that (a Dynamic holding all it may widens numbers,
  and refuses those). Where a Dynamic holds all it may, every value's type is held, and the held
  type that takes it first is its own (Int64 before UInt64 before Float64 for numbers).
- Every other path — one holding arrays, text whose type ClickHouse finds by best-effort parsing,
  or mixed types outside the cases above — is left to `_Slot` value by value (`per_value`): the
  existing rules, in row order, for that path's values only.
- The leaves of typed paths are set apart untyped (json_typed.py converts them to the paths' types).
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from spark_mergetree.format.compiled import lazy_njit
from spark_mergetree.format.json_infer import (
    _BOOL,
    _DATE,
    _DATE_LIKE_RE,
    _DATE_RE,
    _DATE_WORDS,
    _DATETIME,
    _DATETIME64,
    _DATETIME_MAX,
    _DATETIME_RE,
    _DT64_YEARS,
    _FLOAT64,
    _INT64,
    _MONTHS_DAYS,
    _STRING,
    _TIME_ONLY_RE,
    _UINT64,
    _WORD_RE,
    _Ambiguous,
    _name,
    _Object,
    _refuse_constant,
    _string_type,
)
from spark_mergetree.format.json_tokens import (
    BEYOND_64,
    DIGIT,
    FALSE,
    FLOAT,
    INT,
    INT64,
    PRINTABLE,
    STRING,
    TRUE,
    UINT64,
    Tokens,
    path_hash,
    tokenize,
)
from spark_mergetree.format.types import DataType

__all__ = ["COMPILED_JSON_BYTES", "ColumnarPaths", "Group", "type_columnwise"]

#: JSON text columns of fewer bytes are typed per row: the tokenizer's first call loads numba.
COMPILED_JSON_BYTES = 1 << 20

# A leaf's type here: its own type (Int64 beyond 64 bits is BIG, a String), or AMBIGUOUS / an ARRAY
# left to `_Slot`.
_T_BOOL, _T_INT64, _T_UINT64, _T_BIG, _T_FLOAT64, _T_STRING, _T_DATE, _T_DATETIME, _T_DT64, _T_AMBIGUOUS, _T_ARRAY = \
    range(11)
_TYPE_COUNT = _T_ARRAY + 1
_KINDS: dict[int, DataType] = {_T_BOOL: _BOOL, _T_INT64: _INT64, _T_UINT64: _UINT64, _T_BIG: _STRING,
                               _T_FLOAT64: _FLOAT64, _T_STRING: _STRING, _T_DATE: _DATE, _T_DATETIME: _DATETIME,
                               _T_DT64: _DATETIME64}
_STRINGS = (_T_STRING, _T_BIG)
_DATES = (_T_DATE, _T_DATETIME, _T_DT64)
_INT_TYPES = {INT64: _T_INT64, UINT64: _T_UINT64, BEYOND_64: _T_BIG}

# A value's type, the rows (ascending) holding it and its values there (numpy or Arrow; a list
# where they come from `_Slot`).
Group = tuple[DataType, np.ndarray, Any]


@dataclass
class ColumnarPaths:
    paths: list[str]  # in order of first appearance
    groups: dict[str, list[Group]]  # the paths typed here
    per_value: dict[str, list[tuple[int, Any]]]  # the others: (row, value as json.loads gives it)
    typed: Tokens | None  # the leaves of typed paths (json_typed converts them), None without any


def type_columnwise(texts: pa.Array, max_paths: int, max_types: int,
                    skipped: Callable[[str], bool] | None = None, typed: Collection[str] = ()) -> ColumnarPaths | None:
    """Every path of a column of JSON objects and its values typed, or None where the column is left
    to the per-row reader (see json_tokens). `skipped`: whether a leaf's path, all of whose `.`s are
    nesting, is left out (SKIP, SKIP REGEXP). The leaves of `typed` paths are set apart, untyped; a
    member of a typed path holding an object (which the path keeps whole) leaves the column to the
    per-row reader."""
    tokens = tokenize(texts)
    if tokens is None:
        return None
    if skipped is not None:
        if tokens.dotted_keys:
            return None  # (a key holding a `.`: which prefixes of its path are objects is not known here)
        dropped = np.array([skipped(path) for path in tokens.paths], bool)
        if dropped.any():
            tokens = tokens.without_paths(dropped)
    typed_leaves = None
    if typed:
        if np.isin([path_hash(p) for p in typed], tokens.objects).any():
            return None  # (or a hash collision: then the per-row reader too)
        is_typed = np.array([p in typed for p in tokens.paths], bool)
        typed_leaves, tokens = tokens.without_paths(~is_typed), tokens.without_paths(is_typed)
    n = len(tokens.rows)
    types = np.full(n, _T_ARRAY, np.int8)  # (arrays: every leaf not typed below)
    stored = np.zeros(n, np.int64)  # dates' days, seconds or nanoseconds
    floats = np.zeros(n, np.float64)
    kinds = tokens.kinds
    types[(kinds == TRUE) | (kinds == FALSE)] = _T_BOOL
    for cls, t in _INT_TYPES.items():
        types[(kinds == INT) & (tokens.flags == cls)] = t
    is_float = np.flatnonzero(kinds == FLOAT)
    if len(is_float):
        values = np.asarray(tokens.texts.take(pa.array(is_float)).cast(pa.float64()), np.float64)
        if not np.isfinite(values).all():
            return None  # 1e400: refused, with the first row's error, by the per-row reader
        floats[is_float] = values
        types[is_float] = _T_FLOAT64
    is_string = np.flatnonzero(kinds == STRING)
    types[is_string], stored[is_string] = _string_types(tokens.texts.take(pa.array(is_string)), tokens.flags[is_string])

    paths = len(tokens.paths)
    by_path, bounds = _grouped(tokens.path_codes * _TYPE_COUNT + types, paths * _TYPE_COUNT)
    present = (np.diff(bounds) > 0).reshape(paths, _TYPE_COUNT)

    def leaves_of(code: int, t: int) -> np.ndarray:  # (in row order)
        return by_path[bounds[code * _TYPE_COUNT + t]:bounds[code * _TYPE_COUNT + t + 1]]

    out = ColumnarPaths(tokens.paths, {}, {}, typed_leaves)
    for code, path in enumerate(tokens.paths):
        held = set(np.flatnonzero(present[code]).tolist())
        if not _own_types(held, code < max_paths, max_types):
            # The Dynamic's rules, value by value in row order (the caller's `_Slot`), not repeated
            # column-wise: what a held type takes depends on the order values come in.
            mine = np.sort(np.concatenate([leaves_of(code, t) for t in held]))
            out.per_value[path] = [(int(tokens.rows[i]), _loaded(tokens, int(i))) for i in mine]
            continue
        out.groups[path] = [(_KINDS[t], tokens.rows[leaves_of(code, t)],
                             _values(t, leaves_of(code, t), tokens, floats, stored)) for t in sorted(held)]
    return out


def _own_types(held: set[int], dynamic: bool, max_types: int) -> bool:
    """Whether every value of a path with values of `held` types keeps its own type (see the
    module's docstring)."""
    if _T_ARRAY in held or _T_AMBIGUOUS in held:
        return False
    if not dynamic or max_types == 0:
        return True  # each value typed on its own (a Dynamic of no types holds none to offer to)
    families = held & {*_STRINGS, *_DATES}
    if families & set(_DATES) and len(families) > 1:
        return False
    distinct = len(held - {_T_BIG}) + (_T_BIG in held and _T_STRING not in held)
    return distinct < max_types or (distinct == max_types and _T_BIG not in held)


def _values(t: int, leaves: np.ndarray, tokens: Tokens, floats: np.ndarray, stored: np.ndarray) -> Any:
    if t == _T_BOOL:
        return tokens.kinds[leaves] == TRUE
    if t == _T_INT64:
        return tokens.ints[leaves]
    if t == _T_UINT64:
        return tokens.ints[leaves].view(np.uint64)
    if t == _T_FLOAT64:
        return floats[leaves]
    if t in _STRINGS:
        return tokens.texts.take(pa.array(leaves))
    return stored[leaves].astype(np.int32) if t == _T_DATE else stored[leaves]


def _loaded(tokens: Tokens, leaf: int) -> Any:
    """A leaf's value as the per-row reader's `json.loads` gives it."""
    start, end = int(tokens.raw[0][leaf]), int(tokens.raw[1][leaf])
    return json.loads(tokens.source[start:end].tobytes().decode("utf-8"), parse_constant=_refuse_constant,
                      object_pairs_hook=_Object)


# ------------------------------------------------------------------------------ strings


def _named_groups(pattern: re.Pattern[str]) -> str:
    """json_infer's pattern with its capturing groups named (pyarrow's `extract_regex` needs names)."""
    counter = itertools.count()
    return re.sub(r"\((?!\?)", lambda _: f"(?P<g{next(counter)}>", pattern.pattern)


_DATE_FIELDS, _DATETIME_FIELDS = _named_groups(_DATE_RE), _named_groups(_DATETIME_RE)
# `_string_type`'s word test as one pattern: every maximal run of letters (`_WORD_RE`) is a word the
# date parser knows — one of `_DATE_WORDS`, or starting with one of `_MONTHS_DAYS` (any case).
_KNOWN_WORD = f"(?i:{'|'.join(sorted(_DATE_WORDS))}|(?:{'|'.join(_MONTHS_DAYS)})[A-Za-z]*)"
_ALL_WORDS_KNOWN = f"^[^A-Za-z]*(?:{_KNOWN_WORD}[^A-Za-z]+)*(?:{_KNOWN_WORD})?$"
_TEN_POWERS = np.array([10**k for k in range(10)], np.int64)


def _string_types(texts: pa.Array, flags: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each string's type (String, Date, DateTime, DateTime64(9) or AMBIGUOUS) and stored value for
    the date types, as `_string_type` gives them."""
    types = np.full(len(texts), _T_STRING, np.int8)
    stored = np.zeros(len(texts), np.int64)
    printable = (flags & PRINTABLE) != 0
    other = np.flatnonzero(~printable)
    if len(other):
        _classify_per_text(texts.take(pa.array(other)), other, types, stored)
    # `_string_type`: longer than 50 characters, without a digit or all digits: a String.
    candidate = printable & ((flags & DIGIT) != 0) & (np.asarray(pc.binary_length(texts)) <= 50)
    candidate[candidate] = ~np.asarray(pc.match_substring_regex(texts.filter(pa.array(candidate)), r"^[0-9]+$"))
    where = np.flatnonzero(candidate)
    if not len(where):
        return types, stored
    text = texts.take(pa.array(where))
    length = np.asarray(pc.binary_length(text))
    t, value = np.full(len(where), _T_STRING, np.int8), np.zeros(len(where), np.int64)
    rest = np.ones(len(where), bool)
    # (`YYYY-MM-DD` has 10 characters, `YYYY-MM-DD hh:mm:ss[.f][Z]` 19 to 30)
    for pattern, fits, typed in ((_DATE_FIELDS, length == 10, _dates),
                                 (_DATETIME_FIELDS, (length >= 19) & (length <= 30), _date_times)):
        at = np.flatnonzero(fits)
        if not len(at):
            continue
        fields = pc.extract_regex(text.take(pa.array(at)), pattern)
        matched = np.asarray(fields.is_valid())
        if matched.any():
            at = at[matched]
            t[at], value[at] = typed(fields.filter(pa.array(matched)))
            rest[at] = False
    if rest.any():
        t[rest] = _undated(text.filter(pa.array(rest)))
    types[where], stored[where] = t, value
    return types, stored


def _classify_per_text(texts: pa.Array, where: np.ndarray, types: np.ndarray, stored: np.ndarray) -> None:
    """Strings outside printable ASCII (a Unicode digit reads as a digit there): `_string_type` once
    per distinct text of at most 50 characters."""
    short = np.asarray(pc.utf8_length(texts)) <= 50
    if not short.any():
        return
    chosen = texts.filter(pa.array(short))
    distinct = pc.unique(chosen)
    found = np.empty(len(distinct), np.int8)
    values = np.zeros(len(distinct), np.int64)
    codes = {"String": _T_STRING, "Date": _T_DATE, "DateTime": _T_DATETIME, "DateTime64(9)": _T_DT64}
    for i, text in enumerate(distinct.to_pylist()):
        try:
            kind, value = _string_type(text)
        except _Ambiguous:
            found[i] = _T_AMBIGUOUS
            continue
        found[i] = codes[_name(kind)]
        values[i] = 0 if found[i] == _T_STRING else value
    index = np.asarray(pc.index_in(chosen, distinct))
    at = where[short]
    types[at], stored[at] = found[index], values[index]


def _fields(fields: pa.StructArray, count: int) -> list[np.ndarray]:
    return [np.asarray(pc.cast(fields.field(k), pa.int64()), np.int64) for k in range(count)]


def _days(year: np.ndarray, month: np.ndarray, day: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Days since 1970-01-01 of proleptic Gregorian dates, and whether each is a date (Python's
    `datetime.date` takes it: years 1..9999)."""
    leap = (year % 4 == 0) & ((year % 100 != 0) | (year % 400 == 0))
    month_days = np.array([31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31], np.int64)[np.clip(month, 1, 12) - 1]
    month_days = month_days + ((month == 2) & leap)
    valid = (year >= 1) & (month >= 1) & (month <= 12) & (day >= 1) & (day <= month_days)
    y = year - (month <= 2)
    era = y // 400
    of_era = y - era * 400
    of_year = (153 * np.where(month > 2, month - 3, month + 9) + 2) // 5 + day - 1
    of_cycle = of_era * 365 + of_era // 4 - of_era // 100 + of_year
    return era * 146097 + of_cycle - 719468, valid


def _dates(fields: pa.StructArray) -> tuple[np.ndarray, np.ndarray]:
    """`YYYY-MM-DD`: a Date when in its range, else DateTime64(9) in the years ClickHouse infers it."""
    year, month, day = _fields(fields, 3)
    days, valid = _days(year, month, day)
    t = np.full(len(year), _T_AMBIGUOUS, np.int8)
    value = np.zeros(len(year), np.int64)
    dt64 = valid & (_DT64_YEARS[0] <= year) & (year <= _DT64_YEARS[1])
    t[dt64], value[dt64] = _T_DT64, days[dt64] * 86400 * 10**9
    date = valid & (days >= 0) & (days <= 65535)
    t[date], value[date] = _T_DATE, days[date]
    return t, value


def _date_times(fields: pa.StructArray) -> tuple[np.ndarray, np.ndarray]:
    """`YYYY-MM-DD hh:mm:ss[.f]`: a DateTime without a fraction in its range, else DateTime64(9) in
    its years; hours, minutes or seconds beyond their range are not taken."""
    year, month, day, hour, minute, second = _fields(fields, 6)
    fraction = fields.field(6)
    digits = np.asarray(pc.binary_length(fraction), np.int64)
    nanos = np.asarray(pc.cast(pc.if_else(pc.greater(digits, 0), fraction, "0"), pa.int64()), np.int64) \
        * _TEN_POWERS[9 - digits]
    days, valid = _days(year, month, day)
    valid &= (hour <= 23) & (minute <= 59) & (second <= 59)
    seconds = days * 86400 + hour * 3600 + minute * 60 + second
    t = np.full(len(year), _T_AMBIGUOUS, np.int8)
    value = np.zeros(len(year), np.int64)
    dt64 = valid & (_DT64_YEARS[0] <= year) & (year <= _DT64_YEARS[1])
    t[dt64], value[dt64] = _T_DT64, seconds[dt64] * 10**9 + nanos[dt64]
    plain = valid & (digits == 0) & (seconds >= 0) & (seconds <= _DATETIME_MAX)
    t[plain], value[plain] = _T_DATETIME, seconds[plain]
    return t, value


def _undated(text: pa.Array) -> np.ndarray:
    """Strings with a digit that are neither `YYYY-MM-DD` nor `YYYY-MM-DD hh:mm:ss[.f]`: a String when
    a word is one the date parser does not know or the text is a time of day alone; else text that
    looks like a date (or holds date words) is AMBIGUOUS."""
    out = np.full(len(text), _T_STRING, np.int8)
    known = np.flatnonzero(np.asarray(pc.match_substring_regex(text, _ALL_WORDS_KNOWN)))
    if not len(known):
        return out
    text = text.take(pa.array(known))
    time_only = np.asarray(pc.match_substring_regex(text, _TIME_ONLY_RE.pattern))
    date_like = np.asarray(pc.match_substring_regex(text, _DATE_LIKE_RE.pattern))
    has_words = np.asarray(pc.match_substring_regex(text, _WORD_RE.pattern))
    out[known[~time_only & (date_like | has_words)]] = _T_AMBIGUOUS
    return out


@lazy_njit
def _grouped(keys: np.ndarray, count: int) -> tuple[np.ndarray, np.ndarray]:  # pragma: no cover - compiled
    """A stable order of `keys` (each in 0..count-1) by key, and where each key's run starts in it
    (count + 1 bounds): a counting sort."""
    bounds = np.zeros(count + 1, np.int64)
    for key in keys:
        bounds[key + 1] += 1
    for k in range(count):
        bounds[k + 1] += bounds[k]
    fill = bounds[:-1].copy()
    order = np.empty(len(keys), np.int64)
    for i in range(len(keys)):
        order[fill[keys[i]]] = i
        fill[keys[i]] += 1
    return order, bounds

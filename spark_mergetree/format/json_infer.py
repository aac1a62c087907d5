"""JSON text → the type ClickHouse 26.9 infers for each value, and the value it stores.

An insert of JSON text types every value on its own: numbers as Int64, UInt64 or Float64, `true` and
`false` as Bool, strings as String or, when they read as one, Date, DateTime or DateTime64(9),
arrays as Array(Nullable(T)) of their unified items, arrays of objects as Array(JSON(...)) (the
column's limits divided: max_dynamic_paths by 4, max_dynamic_types by 2), arrays of items that do
not unify as Array(Dynamic) (`_infer`). Text whose type ClickHouse decides by best-effort parsing
we cannot repeat is refused (`_Ambiguous`).

Every Dynamic column the insert fills — a dynamic path, the Dynamic inside an Array(Dynamic), a
path of a JSON inside Array(JSON(...)) — first offers a value to the types it already holds, most
nested and most specific first, without converting it (a String takes any later string, DateTime
a later date, Array(Dynamic) any later array, Array(Nullable(Float64)) later integers); only a value
none of them takes gets a type of its own (`_Slot`). Values of types holding a Dynamic or a JSON are
given in their binary form (`_Slot.value_bytes`), each nested Dynamic and JSON filled the same way
(`_Objects`), so the writer stores them as ClickHouse's insert does.
"""

from __future__ import annotations

import datetime
import functools
import re
import struct
from typing import Any, cast

import numpy as np

from spark_mergetree.format.type_codes import (
    DEFAULT_MAX_DYNAMIC_PATHS,
    DEFAULT_MAX_DYNAMIC_TYPES,
    DEFAULT_MAX_TYPES,
    encode_type,
    json_type,
    text_bytes,
)
from spark_mergetree.format.types import (
    Array,
    DataType,
    DateTime,
    DateTime64,
    Dynamic,
    Json,
    Nullable,
    Primitive,
)
from spark_mergetree.format.values import varuint_bytes

__all__ = ["_Ambiguous", "_Object", "_Slot", "_infer", "_name", "_refuse_constant", "_string_type", "_days",
           "nested_json", "holds_nested", "_DATE_RE", "_DATETIME_RE", "_INT64_MIN", "_INT64_MAX", "_DATE", "_DATETIME",
           "_DATETIME64", "_STRING"]

_INT64_MIN, _INT64_MAX, _UINT64_MAX = -(2**63), 2**63 - 1, 2**64 - 1
_BOOL, _INT64, _UINT64, _FLOAT64, _STRING = (Primitive("Bool"), Primitive("Int64"), Primitive("UInt64"),
                                            Primitive("Float64"), Primitive("String"))
_DATE, _DATETIME, _DATETIME64 = Primitive("Date"), DateTime(), DateTime64(9)
_DYNAMIC = Dynamic()


@functools.lru_cache(maxsize=4096)
def _name(kind: DataType) -> str:
    return kind.to_clickhouse()


class _Object(list):
    """An object's members in document order (a list, so duplicates stay visible)."""


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


# ------------------------------------------------------------------------------ type inference

_DATE_RE = re.compile(r"^(\d{4})-(\d{2})-(\d{2})$", re.ASCII)
_DATETIME_RE = re.compile(r"^(\d{4})-(\d{2})-(\d{2})[ T](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?Z?$", re.ASCII)
# Text ClickHouse's best-effort date-time parser may read as a date or time (checked by experiment:
# '2020/01/01', '12-31-2020', '2020-01-01 10', 'Jan 1 2020', '2020-01-01 10:00:00+03:00' are dates or
# date-times there; '31.12.2020', '2020.01.01', '10.0.0.1', '1-2', '12:30' are Strings). Outside the
# forms above we cannot tell which, so such text is refused.
_DATE_LIKE_RE = re.compile(r"\d{4}[-/:]\d{1,2}|\d{1,2}[-/]\d{1,2}[-/]\d{2,4}|\d{1,2}:\d{2}:\d{2}", re.ASCII)
_MONTHS_DAYS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
                "mon", "tue", "wed", "thu", "fri", "sat", "sun")
_WORD_RE = re.compile(r"[A-Za-z]+")
# Words (any case) ClickHouse's date parser takes besides month and weekday names; with any other
# word ('EST', 'CET', 'Zulu', 'UT', 'ID', 'x') the text stays a String, as experiments showed.
_DATE_WORDS = frozenset({"t", "z", "utc", "gmt", "msk", "msd", "am", "pm"})
_TIME_ONLY_RE = re.compile(r"^\d{1,2}:\d{2}(?::\d{2}(?:\.\d+)?)?$", re.ASCII)
_EPOCH_ORDINAL = datetime.date(1970, 1, 1).toordinal()
_DIGIT_RE = re.compile(r"\d", re.ASCII)
_DATE_MIN, _DATE_MAX = 0, 65535  # Date: days 1970-01-01..2149-06-06
_DATETIME_MAX = 2**32 - 1
# DateTime64(9) holds Int64 nanoseconds: 1677-09-21..2262-04-11. ClickHouse infers it for years
# 1899..2262 (1899-12-31 is, 2263-01-01 is a String); we take 1900..2261 and refuse the edges.
_DT64_YEARS = (1900, 2261)


class _Ambiguous(Exception):
    pass


def _string_type(text: str) -> tuple[DataType, Any]:
    """The type ClickHouse infers for a JSON string (Date, DateTime, DateTime64(9) or String) and the
    value to store; _Ambiguous for text we cannot classify as ClickHouse would."""
    if len(text) > 50 or _DIGIT_RE.search(text) is None or text.isdigit():
        return _STRING, text  # ClickHouse does not try dates here
    m = _DATE_RE.match(text)
    if m:
        year, month, day = (int(g) for g in m.groups())
        days = _days(year, month, day)
        if _DATE_MIN <= days <= _DATE_MAX:
            return _DATE, days
        if _DT64_YEARS[0] <= year <= _DT64_YEARS[1]:
            return _DATETIME64, days * 86400 * 10**9
        raise _Ambiguous
    m = _DATETIME_RE.match(text)
    if m:
        year, month, day, hour, minute, second = (int(g) for g in m.groups()[:6])
        if hour > 23 or minute > 59 or second > 59:
            raise _Ambiguous  # ClickHouse carries the overflow into the next unit
        seconds = _days(year, month, day) * 86400 + hour * 3600 + minute * 60 + second
        fraction = m.group(7)
        if fraction is None and 0 <= seconds <= _DATETIME_MAX:
            return _DATETIME, seconds
        if _DT64_YEARS[0] <= year <= _DT64_YEARS[1]:
            nanos = int((fraction or "").ljust(9, "0"))
            return _DATETIME64, seconds * 10**9 + nanos
        raise _Ambiguous
    words = [w.lower() for w in _WORD_RE.findall(text)]
    if any(w not in _DATE_WORDS and w[:3] not in _MONTHS_DAYS for w in words):
        return _STRING, text  # a word the date parser does not know ('ID 2020-01-01', '... EST', 'x1')
    if _TIME_ONLY_RE.match(text):
        return _STRING, text  # a time of day alone ('10:00:00') is not a date-time there
    if _DATE_LIKE_RE.search(text) or words:
        raise _Ambiguous
    return _STRING, text


def _date_readable(text: str) -> bool:
    """Whether a held date type may read a string inferred as String (`10:00:00` as today's date):
    ASCII text (the parser stops at any other byte) with a digit and no word it does not know
    (`a106` is not)."""
    return text.isascii() and _DIGIT_RE.search(text) is not None and all(
        w.lower() in _DATE_WORDS or w.lower()[:3] in _MONTHS_DAYS for w in _WORD_RE.findall(text))


def _days(year: int, month: int, day: int) -> int:
    try:
        return datetime.date(year, month, day).toordinal() - _EPOCH_ORDINAL
    except ValueError:
        raise _Ambiguous from None  # ClickHouse normalises 2020-02-30 to 2020-03-01: not taken


def _scalar(value: Any) -> tuple[DataType, Any]:
    if value is True or value is False:
        return _BOOL, value
    if type(value) is int:  # JSON integers parse exactly: their range decides Int64, UInt64 or String
        if _INT64_MIN <= value <= _INT64_MAX:
            return _INT64, value
        if 0 <= value <= _UINT64_MAX:
            return _UINT64, value
        return _STRING, str(value)  # beyond 64 bits: ClickHouse keeps the digits as a String
    if isinstance(value, float):
        if not np.isfinite(value):
            raise _Ambiguous  # ClickHouse refuses 1e400
        return _FLOAT64, value
    if isinstance(value, str):
        return _string_type(value)
    raise _Ambiguous


_SCALAR_ORDER = {"Bool": 0, "Int64": 1, "Float64": 2}


def _array(items: list[Any], objects: Json) -> tuple[DataType, Any]:
    """The type ClickHouse infers for an array and the items it stores: Array(Nullable(T)) when the
    items unify — numbers to Int64 (Bool counts as Int64), UInt64 or Float64; strings to one of
    String, Date, DateTime, DateTime64(9) (Bool and strings to String); an empty array or only NULLs
    to Nullable(String) — arrays of arrays unify all their inner items (`[[1],[2.5]]` is
    Array(Array(Nullable(Float64)))), objects give Array(`objects`), objects and NULLs Array(Nullable(`objects`)); items that do not unify give
    Array(Dynamic), whose items stay as they are (each is typed where the Dynamic stores it)."""
    if any(isinstance(item, _Object) for item in items):
        if all(isinstance(item, _Object) for item in items):
            return Array(objects), list(items)
        if all(item is None or isinstance(item, _Object) for item in items):
            return Array(Nullable(objects)), list(items)  # objects and NULLs: a NULL stays NULL
        return Array(_DYNAMIC), list(items)
    lists = [item for item in items if item is not None]
    if lists and all(isinstance(item, list) for item in lists):
        # (a NULL among arrays is an empty array there)
        given = [item is not None for item in items]
        items = [[] if item is None else item for item in items]
        own = [_array(item, objects)[0] for item in items]
        if len({_name(k) for k in own}) > 1 and any(
                any(isinstance(x, list) and not isinstance(x, _Object) and _all_null(x) for x in item) for item in items):
            # An empty array inside one of inner arrays of differing types: ClickHouse unifies them
            # otherwise ([[[],[2.0]],[]] and [[0],[[1.5],[]]] are Array(Array(Dynamic)) there,
            # [[[]],[[2.0]],[]] Array(Dynamic)): not repeated here.
            raise _Ambiguous
        present = [item for item, g in zip(items, given, strict=True) if g]
        empty = [_null_shape(item) for item in present if _all_null(item)]
        if not all(given) and (len({_name(k) for k, g in zip(own, given, strict=True) if g}) > 1
                               or (empty and len(empty) < len(present)) or len(set(empty)) > 1):
            # ClickHouse unifies arrays beside a NULL position by position, as tuples
            # ([[1],null,["a"]], [null,[],[1]] and [null,[],[null]] are Array(Dynamic) there; but
            # [null,[null]] is Array(Array(Nullable(String)))): not repeated here.
            raise _Ambiguous
        complete = [k for k, item in zip(own, items, strict=True) if not _all_null(item)]
        if any(holds_nested(k) and _leaf(k) == _DYNAMIC for k in complete) and not _unifies_flat(items, objects):
            # An inner Array(Dynamic) at some depth: the inner types unify position by position, a
            # Dynamic taking whatever meets it ([[1,"a"],[[1]]] is Array(Array(Dynamic))); items
            # stay as they are below it.
            unified = _unify_around_dynamic(complete)
            if unified is None and _holds_null(items):
                # ... with a NULL inside ClickHouse unifies them otherwise ([[2],[["x",-0.25,null],["y"]]]
                # is Array(Array(Dynamic)) there, [[2],[["x",-0.25],["y"]]] Array(Dynamic)): refused
                raise _Ambiguous
            return (Array(_DYNAMIC), items) if unified is None else (Array(unified), _nulls_emptied(items, unified))
        if len({_name(k) for k in own if not _only_nulls(k)}) > 1 and any(_only_nulls(k) for k in own):
            # ClickHouse unifies differing inner types, and empty inner arrays, but not both at
            # once ([[[1]],[[true]],[]] is Array(Dynamic) there): refused.
            raise _Ambiguous
        flat = [x for item in items for x in item]
        if None in flat and len({_name(_scalar(x)[0]) for x in flat
                                 if x is not None and not isinstance(x, list)}) > 1:
            # Inner arrays holding NULLs are unified as tuples there, position by position, and
            # convert less ([[null,false],["a",null]] keeps the Bool): not repeated here.
            raise _Ambiguous
        ints = [x for x in flat if type(x) is int]
        if any(x < 0 for x in ints) and any(x > _INT64_MAX for x in ints) and not any(type(x) is float for x in flat):
            # A negative integer and one beyond Int64 in inner arrays: ClickHouse may unify them as
            # UInt64 and refuse the insert ([[-1,4],[9223372036854775810]]): refused
            raise _Ambiguous
        kind, flat_values = _array(flat, objects)
        if kind == Array(_DYNAMIC) and not any(k == Array(_DYNAMIC) for k in own):
            # Inner arrays of types that do not unify ([[1],["a"]]): each is a Dynamic value of its
            # own type; an inner Array(Dynamic) takes the others' items instead ([[1,"a"],[2]]).
            if any(x is None for x in flat):
                # With NULLs among them ClickHouse unifies them position by position, as tuples
                # ([["a",null],[null,1]] is Array(Array(Dynamic)) there): not repeated here.
                raise _Ambiguous
            return Array(_DYNAMIC), items
        values: list[Any] = []
        at = 0
        for item in items:
            values.append(flat_values[at:at + len(item)])
            at += len(item)
        return Array(kind), values
    if lists and any(isinstance(item, list) for item in lists):
        return Array(_DYNAMIC), items  # arrays among other items
    big = [type(item) is int and not _INT64_MIN <= item <= _UINT64_MAX for item in items]
    if any(big):
        if len(items) == 1:
            return Array(Nullable(_STRING)), [str(items[0])]  # alone, its digits are a String
        if any(isinstance(item, str) for item in items) or all(item is None or b for item, b in zip(items, big, strict=True)):
            raise _Ambiguous  # an integer beyond 64 bits among strings, or with NULLs
        return Array(_DYNAMIC), items
    elements: list[tuple[DataType, Any] | None] = [None if item is None else _scalar(item) for item in items]
    kinds = {e[0] for e in elements if e is not None}
    if not kinds:
        return Array(Nullable(_STRING)), [None] * len(items)
    if len(kinds) == 1:
        kind = next(iter(kinds))
        return Array(Nullable(kind)), [None if e is None else e[1] for e in elements]
    names = {_name(k) for k in kinds}
    if names <= {"String", "Date", "DateTime", "DateTime64(9)", "Bool"}:
        if "Bool" in names:  # Bool and strings: all Strings, `true` and `false` as text
            return Array(Nullable(_STRING)), [None if item is None else "true" if item is True else "false"
                                              if item is False else item for item in items]
        return _string_array(names, items, elements)
    if "UInt64" in names and names <= {"Bool", "Int64", "UInt64"} and all(e is None or e[1] >= 0 for e in elements):
        # (Bool as 0 and 1: `[true,9223372036854775808]` is Array(Nullable(UInt64)) there)
        return Array(Nullable(_UINT64)), [None if e is None else int(e[1]) for e in elements]
    if "Float64" in names and names <= {"Bool", "Int64", "UInt64", "Float64"}:
        # Float64 takes every number, one beyond Int64 too (`[-3,9223372036854775808,2.0]`)
        return Array(Nullable(_FLOAT64)), [None if e is None else float(e[1]) for e in elements]
    if names <= set(_SCALAR_ORDER):
        target = max(names, key=_SCALAR_ORDER.__getitem__)
        values = [None if e is None else (float(e[1]) if target == "Float64" else int(e[1])) for e in elements]
        return Array(Nullable(Primitive(target))), values
    if names & {"String", "Date", "DateTime", "DateTime64(9)"} and names & {"Int64", "UInt64", "Float64"}:
        return Array(_DYNAMIC), items  # numbers and strings
    if names <= {"Bool", "Int64", "UInt64"}:
        return Array(_DYNAMIC), items  # a negative number and one beyond Int64
    raise _Ambiguous  # mixed kinds whose common type this writer does not derive


def _string_array(names: set[str], items: list[Any], elements: list[tuple[DataType, Any] | None]
                  ) -> tuple[DataType, Any]:
    """Strings of several inferred kinds in one array, unified as ClickHouse does: any String makes
    every item a String (its text); else DateTime64(9) if any, else DateTime (Date at midnight)."""
    if "String" in names:
        return Array(Nullable(_STRING)), list(items)
    if "DateTime64(9)" in names:
        scale = {"Date": 86400 * 10**9, "DateTime": 10**9, "DateTime64(9)": 1}
        return Array(Nullable(_DATETIME64)), [None if e is None else e[1] * scale[_name(e[0])] for e in elements]
    seconds = [None if e is None else e[1] * (86400 if e[0] == _DATE else 1) for e in elements]
    if any(v is not None and v > _DATETIME_MAX for v in seconds):
        raise _Ambiguous  # a Date beyond DateTime's range
    return Array(Nullable(_DATETIME)), seconds


def _unifies_flat(items: list[list[Any]], objects: Json) -> bool:
    """Whether the items of inner arrays unify all together without a Dynamic: ClickHouse unifies
    them so before any inner array's own type counts (`[[-3,9223372036854775808],[2.0]]` is
    Array(Array(Nullable(Float64))), though `[-3,9223372036854775808]` alone is Array(Dynamic))."""
    try:
        kind = _array([x for item in items for x in item], objects)[0]
    except _Ambiguous:
        return False
    return not (holds_nested(kind) and _leaf(kind) == _DYNAMIC)


def _holds_null(items: list[Any]) -> bool:
    """Whether a NULL is among the items of arrays at any depth (not inside objects)."""
    return any(x is None or (isinstance(x, list) and not isinstance(x, _Object) and _holds_null(x)) for x in items)


def _all_null(item: Any) -> bool:
    """Whether an array holds no value but NULLs and empty arrays (its type fits any other)."""
    return all(x is None or (isinstance(x, list) and not isinstance(x, _Object) and _all_null(x)) for x in item)


def _nulls_emptied(items: list[Any], inner: DataType) -> list[Any]:
    """Items of an Array(`inner`): a NULL where `inner` is an array is an empty one, at every level
    above the Dynamic or JSON the type ends in."""
    if not isinstance(inner, Array):
        return items
    return [[] if item is None else _nulls_emptied(item, inner.inner) for item in items]


def _null_shape(item: Any) -> Any:
    """The nesting of an array of NULLs and empty arrays (`[]` and `[null]` differ)."""
    return tuple(None if x is None else _null_shape(x) for x in item)


def _leaf(kind: DataType) -> DataType:
    while isinstance(kind, (Array, Nullable)):
        kind = kind.inner
    return kind


def _unify_around_dynamic(kinds: list[DataType]) -> DataType | None:
    """The common type of inner arrays' types where a Dynamic is among them: position by position a
    Dynamic takes anything, arrays unify their elements, equal types stay; None where they do not
    unify (arrays beside other types, objects beside other types). Differing plain types elsewhere
    are refused: how ClickHouse unifies them there is not repeated here."""
    if any(k == _DYNAMIC for k in kinds):
        return _DYNAMIC
    if all(k == kinds[0] for k in kinds):
        return kinds[0]
    if all(isinstance(k, Array) for k in kinds):
        inner = _unify_around_dynamic([cast(Array, k).inner for k in kinds])
        return None if inner is None else Array(inner)
    if any(holds_nested(k) and _leaf(k) == _DYNAMIC for k in kinds):
        # A Dynamic deeper in one of them beside other types here: the arrays do not unify
        # ([[2],[[1,"a"]]] and [[[1,"a"]],[{}]] are Array(Dynamic) as ClickHouse 26.9 infers them alone)
        return None
    if any(isinstance(k, (Array, Json)) for k in kinds):
        return None
    raise _Ambiguous


def _only_nulls(dt: DataType) -> bool:
    """The type of `[]` or `[null]`, possibly nested: it fits any other array type."""
    while isinstance(dt, Array):
        dt = dt.inner
    return dt == Nullable(_STRING)


_PLAIN_JSON = Json()


def _infer(value: Any, objects: Json = _PLAIN_JSON) -> tuple[DataType, Any]:
    """A value's type and what it stores; `objects` is the type of an object (in an array, or a
    Dynamic's value)."""
    if isinstance(value, _Object):
        return objects, value
    if isinstance(value, list):
        kind, items = _array(value, objects)
        return kind, items
    return _scalar(value)




# ------------------------------------------------------------------------------ filling a Dynamic


def nested_json(dt: Json) -> Json:
    """The type of the objects in an array a JSON of type `dt` holds: its limits divided (paths by
    4, types by 2)."""
    settings = {k: v for k, v in dt.params if isinstance(v, int)}
    return json_type(int(settings.get("max_dynamic_paths", DEFAULT_MAX_DYNAMIC_PATHS)) // 4,
                     int(settings.get("max_dynamic_types", DEFAULT_MAX_DYNAMIC_TYPES)) // 2)


@functools.lru_cache(maxsize=1024)
def holds_nested(kind: DataType) -> bool:
    """Whether a value's type holds a Dynamic or a JSON (Array(Dynamic), Array(JSON(...)), JSON)."""
    while isinstance(kind, (Array, Nullable)):
        kind = kind.inner
    return isinstance(kind, (Dynamic, Json))


# Text-parsing priority of types (ClickHouse tries a Dynamic's types in this order): more nested
# first, then by these weights (an Array adds its own to its element's), then more Nullable first.
_WEIGHTS = {"Bool": 28, "Int64": 21, "UInt64": 20, "Float64": 10, "Date": 9, "DateTime": 7, "DateTime64(9)": 6,
            "String": 4}
_ARRAY_WEIGHT = 36


def _priority(kind: DataType, depth: int = 0, nullable: int = 0) -> tuple[int, int, int]:
    if isinstance(kind, Nullable):
        return _priority(kind.inner, depth, nullable + 1)
    if isinstance(kind, Array):
        d, w, n = _priority(kind.inner, depth + 1, nullable)
        return d, w + _ARRAY_WEIGHT, n
    return depth, _WEIGHTS.get(_name(kind), 0), nullable


_MISS = object()


def _string_as(kind: DataType, text: str, held: frozenset[str], inner: bool = False) -> Any:
    """A string offered to a date or time type a Dynamic holds (`held`: the names of all it holds):
    taken when it reads as a date or time (converted), else _MISS. A time with a fraction goes into
    a DateTime (the fraction dropped) only while the Dynamic holds no String (which takes it then:
    so ClickHouse 26.9 does, as experiments showed; inside arrays and in the Dynamic of an
    Array(Dynamic) (`inner`) it was seen to differ, and is refused)."""
    found, value = _string_type(text)
    name, given = _name(kind), _name(found)
    if given == "String":
        if ("String" not in held or inner) and text.isascii() and _DIGIT_RE.search(text):
            # A held date type reads more text than inference does (`10:00:00` as today's date,
            # as experiments showed): which text it takes is not repeated here. Text with other
            # bytes than ASCII it never reads.
            raise _Ambiguous
        return _MISS
    if name == "Date":
        return value if given == "Date" else _MISS
    if name == "DateTime" and given == "DateTime64(9)":
        if inner:
            raise _Ambiguous
        if "String" in held:
            return _MISS
    scale = {"Date": 86400 * 10**9, "DateTime": 10**9, "DateTime64(9)": 1}[given]
    nanos = value * scale
    if name == "DateTime64(9)":
        return nanos
    seconds = nanos // 10**9
    if not 0 <= seconds <= _DATETIME_MAX:
        raise _Ambiguous  # beyond DateTime's range: how ClickHouse clamps it is not repeated here
    return seconds


def _item_as(kind: DataType, item: Any, held: frozenset[str]) -> Any:
    """An array item offered to an existing array type's element type: numbers widen to Float64 (and
    non-negative integers to UInt64) there, strings to String or the date types."""
    if item is None:  # (an array's default is empty; a Dynamic's NULL and a JSON's `{}` are None here)
        return [] if isinstance(kind, Array) else None if isinstance(kind, (Nullable, Dynamic, Json)) else _MISS
    if isinstance(kind, Nullable):
        kind = kind.inner
    if isinstance(kind, Array):
        return _absorbed(kind, item, held)
    if isinstance(kind, Json):
        return item if isinstance(item, _Object) else _MISS
    name = _name(kind)
    if item is True or item is False:
        return item if name == "Bool" else _MISS
    if type(item) is int:
        if not _INT64_MIN <= item <= _UINT64_MAX:
            raise _Ambiguous  # an integer beyond 64 bits
        if name == "Int64":
            return item if item <= _INT64_MAX else _MISS
        if name == "UInt64":
            return item if item >= 0 else _MISS
        return float(item) if name == "Float64" else _MISS
    if isinstance(item, float):
        return item if name == "Float64" and np.isfinite(item) else _MISS
    if isinstance(item, str):
        return item if name == "String" else _string_as(kind, item, held, inner=True) \
            if name in ("Date", "DateTime", "DateTime64(9)") else _MISS
    return _MISS


def _absorbed(kind: DataType, value: Any, held: frozenset[str], widen: bool = False, inner: bool = False) -> Any:
    """`value` as a Dynamic's existing type `kind` takes it without converting it (what it stores),
    or _MISS: a String takes any string, a DateTime or DateTime64(9) the other dates and times, an
    Array(Dynamic) any array, an Array(JSON(...)) arrays of objects and NULLs, another array type
    arrays whose items its element type takes; other types only values of their own type."""
    if isinstance(value, list) and not isinstance(value, _Object):
        if not isinstance(kind, Array):
            return _MISS
        if kind.inner == _DYNAMIC:
            return value
        out = []
        for item in value:
            got = _item_as(kind.inner, item, held)
            if got is _MISS:
                return _MISS
            out.append(got)
        return out
    if isinstance(value, _Object) or isinstance(kind, Array):
        return _MISS
    name = _name(kind)
    if isinstance(value, str):
        if name == "String":
            return value
        return _string_as(kind, value, held, inner) if name in ("Date", "DateTime", "DateTime64(9)") else _MISS
    if widen and not isinstance(value, bool):  # numbers widen as an array's items do
        return _item_as(kind, value, held)
    found, stored = _scalar(value)
    return stored if found == kind else _MISS




_DATE_NAMES = frozenset({"Date", "DateTime", "DateTime64(9)"})
_PACKED = {"Int64": "<q", "UInt64": "<Q", "Float64": "<d", "Bool": "<?", "Date": "<H", "DateTime": "<I",
           "DateTime64(9)": "<q"}


class _Slot:
    """One Dynamic column an insert fills, value after value: the types it holds (in the order they
    came, at most `max_types`; values of later types go to its shared variant as they are) and,
    per type holding a Dynamic or a JSON, the nested column being filled for it. `objects` is the
    type arrays of objects get here."""

    def __init__(self, max_types: int, objects: Json, absorb: bool = True, widen: bool = False) -> None:
        self.max_types = max_types
        self.objects = objects
        self.absorb = absorb
        # The Dynamic of an Array(Dynamic) lets a held Float64 take integers and a held UInt64
        # non-negative ones (as an array's element type does); a path's Dynamic does so only once
        # it holds `max_types` types.
        self.widen = widen
        self.uncertain = False  # (see `place`)
        self.kinds: list[DataType] = []
        self.order: list[DataType] = []
        self.held: frozenset[str] = frozenset()
        self.nested: dict[str, _Slot | _Objects] = {}

    def place(self, value: Any, strict: bool = False) -> tuple[DataType, Any, bool, bool]:
        """(type, stored value, whether the type is one of the column's own, whether what the value
        holds is stored without conversions) of a non-NULL value. A value a held type takes is stored
        without conversions, and so is everything inside a value stored so (`strict`)."""
        # (a Dynamic holding all the types it may widens numbers too, as experiments showed)
        widen = self.widen or len(self.kinds) >= self.max_types
        if self.absorb and self.kinds and not isinstance(value, list):
            # A scalar's own type, when held, is the first to take it (a number's unless numbers
            # widen; a string's when it is String, Date or DateTime): no need to offer it to each.
            try:
                own, stored = _scalar(value)
            except _Ambiguous:
                own = None
            if own is not None and _name(own) in self.held and (
                    _name(own) in ("String", "Date", "DateTime") if isinstance(value, str) else not widen) and not (
                    # (a held date type is offered a String with a digit first: it may read it)
                    _name(own) == "String" and self.held & _DATE_NAMES and _date_readable(value)):
                return own, stored, True, True
        for kind in self.order if self.absorb else ():
            got = _absorbed(kind, value, self.held, widen, self.widen)
            if got is not _MISS:
                return kind, got, True, True
            if isinstance(value, list) and not isinstance(value, _Object) and isinstance(kind, Array) \
                    and kind.inner != _DYNAMIC and holds_nested(kind):
                self._left_behind(kind, value)
        if strict and _needs_conversion(value):
            # Stored without conversions, an array whose type needs one (`[5,true]` as Int64) fails
            # in ClickHouse, which then takes another way for the enclosing value: not repeated here.
            raise _Ambiguous
        kind, stored = _infer(value, self.objects)
        if kind in self.kinds:
            return kind, stored, True, strict
        if self.uncertain and self.kinds and any(
                _absorbed(k, value, self.held, widen, self.widen) is not _MISS for k in self.order):
            # A path of objects inside a value of the shared data (or a shared variant): a type it
            # holds already may take the value or not; ClickHouse did either (a String took a later
            # date, an Array(Nullable(Float64)) did not take integers beyond Int64), while the
            # Dynamic of an Array(Dynamic) there took none: not repeated here.
            raise _Ambiguous
        if len(self.kinds) < self.max_types:
            self.kinds.append(kind)
            # (ties keep the order of the types' names, as the Variant lists them)
            self.order = sorted(sorted(self.kinds, key=_name), key=_priority, reverse=True)
            self.held = frozenset(_name(k) for k in self.kinds)
            return kind, stored, True, strict
        return kind, stored, False, strict

    def _left_behind(self, kind: Array, value: list[Any]) -> None:
        """A held type holding a Dynamic or a JSON that fails to take an array: ClickHouse parsed its
        items into the type's nested columns one by one until one failed, then dropped the values
        but not the types (and paths) they added there; those take later values as held ones do.
        The items before the failing one go into the nested holder the same way (bytes dropped)."""
        leaf = _leaf(kind)
        holder = self.nested.get(_name(kind))
        if holder is None:
            holder = self.nested[_name(kind)] = _holder(leaf, self.absorb)
        _fill_until_failure(kind, value, holder)

    def dynamic_bytes(self, value: Any, strict: bool = False) -> bytes:
        """A value in the binary form of a Dynamic value (its type's encoding, then the value)."""
        if value is None:
            return b"\x00"
        kind, stored, own, inner_strict = self.place(value, strict)
        return encode_type(kind) + self.value_bytes(kind, stored, own, inner_strict)

    def value_bytes(self, kind: DataType, stored: Any, own: bool = True, strict: bool = False) -> bytes:
        """A stored value of `kind` in ClickHouse's binary value format; the Dynamic or JSON inside
        it filled as the column's nested one (`own`) or as a fresh one (in the shared variant), without
        conversions when `strict`."""
        holder = None
        if holds_nested(kind):
            leaf = kind
            while isinstance(leaf, (Array, Nullable)):
                leaf = leaf.inner
            if own:
                holder = self.nested.get(_name(kind))
                if holder is None:
                    holder = self.nested[_name(kind)] = _holder(leaf, self.absorb)
            else:
                holder = _holder(leaf, self.absorb)
        return _value_bytes(kind, stored, holder, strict)


def _fill_until_failure(kind: Array, value: list[Any], holder: _Slot | _Objects) -> bool:
    """Parse `value`'s items into `kind`'s nested Dynamic or JSON (`holder`) as an attempt does, item
    after item, until one does not fit: whether all fit."""
    inner = kind.inner.inner if isinstance(kind.inner, Nullable) else kind.inner
    for item in value:
        if item is None:
            continue  # (NULL, or an empty array: nothing goes into the holder)
        if isinstance(inner, Dynamic):
            assert isinstance(holder, _Slot)
            holder.dynamic_bytes(item, True)
            continue
        if isinstance(inner, Json):
            if not isinstance(item, _Object):
                return False
            assert isinstance(holder, _Objects)
            holder.object_bytes(item, True)
            continue
        if not isinstance(item, list) or isinstance(item, _Object) or not isinstance(inner, Array):
            return False
        if not _fill_until_failure(inner, item, holder):
            return False
    return True


def _needs_conversion(value: Any) -> bool:
    """Whether an array in `value` mixes Bool with numbers or strings (its inferred type stores the
    Bool converted)."""
    if isinstance(value, _Object):
        return any(_needs_conversion(v) for _, v in value)
    if not isinstance(value, list):
        return False
    bools = any(v is True or v is False for v in value)
    others = any(isinstance(v, (int, float, str)) and not isinstance(v, bool) for v in value)
    return (bools and others) or any(_needs_conversion(v) for v in value)


class _Objects:
    """A JSON column an insert fills (the objects of an Array(JSON(...)) or JSON value): its paths in
    the order they came, the first `max_paths` as dynamic paths (each a `_Slot`), later ones in the
    shared data (each value typed on its own)."""

    def __init__(self, dt: Json, absorb: bool = True) -> None:
        self.absorb = absorb
        settings = {k: v for k, v in dt.params if isinstance(v, int)}
        self.max_paths = int(settings.get("max_dynamic_paths", DEFAULT_MAX_DYNAMIC_PATHS))
        self.max_types = int(settings.get("max_dynamic_types", DEFAULT_MAX_DYNAMIC_TYPES))
        self.objects = nested_json(dt)
        self.paths: dict[str, _Slot] = {}
        self.seen: set[str] = set()

    def object_bytes(self, obj: _Object | None, strict: bool = False) -> bytes:
        """An object in ClickHouse's binary form of a JSON value: the number of paths, then each
        path's name and its value as a Dynamic value (paths in document order; NULL members left
        out, nested objects flattened with `.`; a NULL object is `{}`)."""
        leaves = _flatten(obj, "") if obj is not None else []
        names = [path for path, _ in leaves]
        if len(set(names)) != len(names):
            raise _Ambiguous  # a path twice in one object: ClickHouse refuses it
        out = [varuint_bytes(len(leaves))]
        for path, value in leaves:
            slot = self.paths.get(path)
            if slot is None:
                if path not in self.seen and len(self.seen) < self.max_paths:
                    slot = self.paths[path] = _Slot(self.max_types, self.objects, self.absorb)
                    slot.uncertain = not self.absorb
                else:
                    # Shared data: each value typed on its own, and the Dynamics inside it offer
                    # nothing to types they hold (ClickHouse fills those columns so).
                    slot = _Slot(self.max_types, self.objects, absorb=False)
                self.seen.add(path)
            out.append(text_bytes(path) + slot.dynamic_bytes(value, strict))
        return b"".join(out)


def _holder(leaf: DataType, absorb: bool) -> _Slot | _Objects:
    if isinstance(leaf, Dynamic):
        return _Slot(DEFAULT_MAX_TYPES if leaf.max_types is None else leaf.max_types, _PLAIN_JSON, absorb, widen=True)
    assert isinstance(leaf, Json)
    return _Objects(leaf, absorb)


def _flatten(obj: _Object, prefix: str) -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for key, value in obj:
        if isinstance(value, _Object):
            out += _flatten(value, prefix + key + ".")
        elif value is not None:
            out.append((prefix + key, value))
    return out


def _value_bytes(kind: DataType, stored: Any, holder: _Slot | _Objects | None, strict: bool) -> bytes:
    if isinstance(kind, Array):
        return varuint_bytes(len(stored)) + b"".join(_value_bytes(kind.inner, item, holder, strict) for item in stored)
    if isinstance(kind, Dynamic):
        assert isinstance(holder, _Slot)
        return holder.dynamic_bytes(stored, strict)
    if isinstance(kind, Json):
        assert isinstance(holder, _Objects)
        return holder.object_bytes(stored, strict)
    if isinstance(kind, Nullable):
        return b"\x01" if stored is None else b"\x00" + _value_bytes(kind.inner, stored, holder, strict)
    name = _name(kind)
    if name == "String":
        return text_bytes(stored)
    return struct.pack(_PACKED[name], stored)

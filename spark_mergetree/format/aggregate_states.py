"""AggregateFunction columns: states of aggregate functions, kept as opaque bytes (one per row).

ClickHouse writes the states of a column back to back with no length in between: where one ends
depends on the function, its parameters and its argument types. This module owns those layouts:
`state_layout` gives, for the functions whose state layout we know (each checked byte for byte
against ClickHouse 26.9), the program the compiled scanner (format/state_scanner.py) runs to find
where each state ends, and the state of no rows (the column's default). A function or argument
type not known here is refused when its states are read or written, or a table of it created (a
guessed layout would split states wrongly); the table's other columns can still be read.
format_spec/types.md lists the layouts in words.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass

import numpy as np

from spark_mergetree.errors import CorruptPartError, MergeTreeError, UnsupportedError
from spark_mergetree.format.state_scanner import (
    COUNTED,
    FLAG,
    KIND,
    LOOP,
    PENDING,
    RESERVOIR,
    SCAN_CUT,
    SCAN_OK,
    SIZED_I32,
    SKIP,
    STRING,
    TIMING_LARGE,
    U16_COUNTED,
    U64_COUNTED,
    VARUINT,
    WHEN,
    scan_states,
)
from spark_mergetree.format.types import (
    AggregateFunction,
    Array,
    DataType,
    DateTime,
    DateTime64,
    Decimal,
    FixedString,
    LowCardinality,
    Map,
    Nullable,
    Primitive,
    contains_type,
)

__all__ = ["StateLayout", "nullable_flag", "value_type", "state_layout", "state_lengths", "empty_state", "require_known_states", "created_version"]

Step = tuple[int, int, int]


@dataclass(frozen=True)
class StateLayout:
    steps: tuple[Step, ...]
    empty: bytes  # the state of no rows

    def __post_init__(self) -> None:
        # The scanner keeps one loop at a time: a loop's body holds none.
        for i, (op, length, _) in enumerate(self.steps):
            if op == LOOP and any(step[0] == LOOP for step in self.steps[i + 1:i + 1 + length]):
                raise ValueError(f"nested loops in the state layout {self.steps}")

    @functools.cached_property
    def program(self) -> np.ndarray:
        return np.array(self.steps, np.int64).reshape(-1, 3)


_INTEGERS = ("UInt8", "UInt16", "UInt32", "UInt64", "Int8", "Int16", "Int32", "Int64")
_NUMBERS = (*_INTEGERS, "Float32", "Float64", "Bool")  # Bool: a UInt8 in states
# Functions that share another's state: the quantiles forms keep one state for all their levels.
_SAME_STATE = {"quantilesDeterministic": "quantileDeterministic", "quantiles": "quantile", "quantilesExact": "quantileExact", "quantilesTDigest": "quantileTDigest",
               "quantilesTiming": "quantileTiming", "quantilesTimingWeighted": "quantileTimingWeighted"}
# Functions whose states of Nullable arguments are a flag and then their own state (measured; the
# others keep NULLs otherwise, and are refused): whether the flag is set even for no rows (so for
# the quantiles forms, whose result is an array, not for the quantile ones, whose result may be NULL).
_NULLABLE_FLAG = {**dict.fromkeys(("uniq", "uniqHLL12", "uniqExact", "quantiles", "quantilesExact", "quantilesTDigest",
                                   "quantilesTiming", "quantilesTimingWeighted"), True),
                  "deltaSum": True,
                  **dict.fromkeys(("min", "max", "any", "anyLast", "argMin", "argMax", "sum", "avg", "avgWeighted",
                                   "uniqCombined", "uniqCombined64", "quantile", "quantileExact", "quantileTDigest",
                                   "quantileTiming", "quantileTimingWeighted", "sumKahan", "sumWithOverflow",
                                   "groupBitAnd", "groupBitOr", "groupBitXor", "groupBitmap", "anyHeavy", "groupConcat",
                                   "entropy", "quantileBFloat16", "simpleLinearRegression", "boundingRatio",
                                   *(f"{m}{kind}" for m in ("var", "stddev") for kind in ("Pop", "Samp", "PopStable",
                                                                                         "SampStable")),
                                   "skewPop", "skewSamp", "kurtPop", "kurtSamp", "covarPop", "covarSamp", "corr",
                                   "covarPopStable", "covarSampStable", "corrStable"), False)}
# Functions that skip the rows whose argument is NULL and write no flag: their state of Nullable
# arguments is the one of the values (measured).
_NULLS_SKIPPED = frozenset(("groupArray", "groupUniqArray", "groupArrayLast", "topK", "sumCount"))
# The reservoir sampler's state of no rows: capacity 8192, no values, and its random generator's
# initial state written as text.
_EMPTY_RESERVOIR = (8192).to_bytes(8, "little") + bytes(8) + b"\x1c" + b"6364136223846793005 0 123459"
# Bytes of uniqCombined's HyperLogLog form (the counter's memory image) by precision K, for 32-bit
# and 64-bit hashes; uniqHLL12's is the 32-bit one of K = 12. Measured from ClickHouse's states.
_HLL_BYTES = {4: {12: 2650, 13: 5206, 14: 10322, 15: 20558, 16: 41036, 17: 81992, 18: 163908, 19: 327744, 20: 655420},
              8: {12: 3290, 13: 6358, 14: 12498, 15: 24782, 16: 49356, 17: 98504, 18: 196804, 19: 393408, 20: 786620}}
# quantileTiming's large histogram: 1024 exact and 1811 coarse UInt64 counters, dense when the
# count is more than half their number.
_TIMING_COUNTERS = 1024 + 1811


def _plain(dt: DataType) -> bool:
    """Not a named custom type (geo types, SimpleAggregateFunction)."""
    return dt.custom_name is None


def _number(dt: DataType, names: tuple[str, ...] = _NUMBERS) -> bool:
    return isinstance(dt, Primitive) and dt.name in names and _plain(dt)


def _is_string(dt: DataType) -> bool:
    return isinstance(dt, Primitive) and dt.name == "String" and _plain(dt)


def _fixed_width(dt: DataType) -> int | None:
    """Bytes of a fixed-width value: numbers (128/256-bit integers and Bool too), Date, Date32, DateTime,
    DateTime64, Decimal, UUID."""
    if not _plain(dt):
        return None
    if isinstance(dt, Primitive) and dt.name not in ("String", "IPv4", "IPv6", "BFloat16"):
        return dt.width
    if isinstance(dt, Decimal):
        return dt.width
    return 4 if isinstance(dt, DateTime) else 8 if isinstance(dt, DateTime64) else None


def _temporal_or_number(dt: DataType) -> int | None:
    """Width of a number (integers up to 64 bits, floats) or date/time value, else None."""
    if isinstance(dt, Primitive) and (_number(dt) or (dt.name in ("Date", "Date32") and _plain(dt))):
        return dt.width
    return 4 if isinstance(dt, DateTime) and _plain(dt) else 8 if isinstance(dt, DateTime64) and _plain(dt) else None


def _kept_as_number(dt: DataType) -> int | None:
    """Width of the values groupArray, groupUniqArray and topK keep as numbers: integers, floats, Date
    and DateTime. They keep any other value as its bytes with a varuint length."""
    if _number(dt, ("Int128", "UInt128", "Int256", "UInt256")):
        return dt.width  # type: ignore[attr-defined]
    return _temporal_or_number(dt) if not (isinstance(dt, DateTime64) or _number(dt, ("Date32",))) else None


def _single_value(dt: DataType) -> tuple[tuple[Step, ...], bytes] | None:
    """min/max/any/anyLast's holder of one value: a String as an Int32 size counting its closing zero
    byte (-1 when empty), other values as a flag byte then the value's fixed bytes."""
    if _is_string(dt):
        return ((SIZED_I32, 0, 0),), b"\xff\xff\xff\xff"
    width = _fixed_width(dt) or (dt.length if isinstance(dt, FixedString) and _plain(dt) else None)
    if width is None:
        return None
    return ((FLAG, 1, 0), (SKIP, width, 0)), b"\0"


def _hashable(args: tuple[DataType, ...]) -> bool:
    """Arguments the uniq family hashes as we know: one number, date/time, Decimal, UUID, String or
    FixedString value, or several of them."""
    return bool(args) and all(_fixed_width(a) not in (None, 32) or _is_string(a)
                              or (isinstance(a, FixedString) and _plain(a)) for a in args)


def _text_like(args: tuple[DataType, ...]) -> bool:
    return len(args) == 1 and (_is_string(args[0]) or (isinstance(args[0], FixedString) and _plain(args[0])))


def _numeric_parameters(params: tuple[str, ...]) -> list[float] | None:
    try:
        return [float(p) for p in params]
    except ValueError:
        return None


def _count_parameter(params: tuple[str, ...]) -> bool:
    """No parameter, or one positive integer (groupArray(N), topK(N), uniqCombined(K))."""
    return not params or (len(params) == 1 and params[0].isdigit() and int(params[0]) > 0)


def _item(arg: DataType) -> tuple[Step, ...] | None:
    """One value of a list: a number's bytes, or a value's bytes with a varuint length."""
    if (width := _kept_as_number(arg)) is not None:
        return ((SKIP, width, 0),)
    fixed = _fixed_width(arg) is not None or (isinstance(arg, FixedString) and _plain(arg))
    return ((STRING, 0, 0),) if _is_string(arg) or fixed else None


def _list_of(arg: DataType) -> tuple[tuple[Step, ...], bytes] | None:
    """A varuint count then the values (see `_item`)."""
    item = _item(arg)
    if item is None:
        return None
    return (((COUNTED, item[0][1], 0),) if item[0][0] == SKIP else ((LOOP, 1, 0), *item)), b"\0"


# Functions whose states ClickHouse 26.x writes in a numbered version (the Map form of the *Map
# functions has none): a CREATE that names no version gets this one.
_CREATED_VERSION = {"sumMap": 1, "minMap": 1, "maxMap": 1, "sumMapWithOverflow": 1, "quantileDeterministic": 1,
                    "quantilesDeterministic": 1}


def created_version(dt: DataType) -> DataType:
    """`dt` as ClickHouse's CREATE makes it: `AggregateFunction(sumMap, Array(K), Array(V))` is stored
    as `AggregateFunction(1, sumMap, ...)`. (A columns.txt or an ATTACH statement without a version
    means version 0: ClickHouse spells every later one.)"""
    if not isinstance(dt, AggregateFunction) or dt.version is not None or dt.function not in _CREATED_VERSION:
        return dt
    if dt.function.endswith("Map") or dt.function == "sumMapWithOverflow":
        if not dt.arguments or not all(isinstance(a, Array) for a in dt.arguments):
            return dt
    return dataclasses.replace(dt, version=_CREATED_VERSION[dt.function])


_UNKNOWN_FLAG = "unknown"


def nullable_flag(dt: AggregateFunction) -> bool | None | str:
    """How states of `dt` with Nullable arguments begin (measured in ClickHouse 26.9): True, a flag
    byte always 1 and then the function's state of the rows whose arguments are not NULL; False, a
    flag byte 1 when there was such a row, then that state, else the flag 0 alone; None, no flag
    (count of a Nullable value counts the values, groupArray and a few others keep only the values;
    when only -If's condition is Nullable, the
    functions whose flag is not always set take a NULL condition as false and write no flag);
    "unknown" for functions whose handling of NULLs is not known here."""
    args = tuple(value_type(a) for a in dt.arguments)
    conditional = dt.function.endswith("If") and len(args) >= 1
    base = dt.function.removesuffix("If") if conditional else dt.function
    valued = args[:-1] if conditional else args
    if (base == "count" and not conditional) or base in _NULLS_SKIPPED:
        return None
    always = True if base == "count" else _NULLABLE_FLAG.get(base)
    if always is None:
        return _UNKNOWN_FLAG
    if not any(isinstance(a, Nullable) for a in valued) and not always:
        return None  # only the condition is Nullable
    return always


@functools.lru_cache(maxsize=1024)  # a column's type asks once per granule range read
def state_layout(dt: AggregateFunction) -> StateLayout | None:
    """The layout of `dt`'s states, None when it is not known."""
    found = _layout(dt.function, dt.arguments, dt.parameters, dt.version)
    return None if found is None else StateLayout(*found)


def value_type(argument: DataType) -> DataType:
    """The type a state keeps of an argument: LowCardinality's inner type (a function of a
    LowCardinality column has the state of the same function of the values, measured)."""
    return argument.inner if isinstance(argument, LowCardinality) else argument


def _layout(name: str, args: tuple[DataType, ...], params: tuple[str, ...],
            version: int | None) -> tuple[tuple[Step, ...], bytes] | None:
    args = tuple(value_type(a) for a in args)
    # Versioned states: sumMap's array form, and the deterministic reservoir (26.x writes version 1).
    if version is not None and not (version == 1 and (name in ("sumMap", "minMap", "maxMap") and len(args) >= 2
                                                      or _SAME_STATE.get(name, name) == "quantileDeterministic")):
        return None
    if any(isinstance(a, Nullable) and _plain(a) for a in args):
        flag = nullable_flag(AggregateFunction(name, args, params, version))
        inner = _layout(name, tuple(a.inner if isinstance(a, Nullable) else a for a in args), params, version)
        if inner is None or flag == _UNKNOWN_FLAG:
            return None
        steps, empty = inner
        if flag is None:
            return steps, empty
        return ((FLAG, len(steps), 0), *steps), (b"\x01" + empty if flag else b"\0")
    if name.endswith("If") and args and _number(args[-1], ("UInt8",)):
        # -If keeps the function's own state; only the argument list gains the condition.
        return _layout(name[:-2], args[:-1], params, version)
    if name.endswith("Distinct") and len(args) == 1 and not params and name[:-8] in ("sum", "count", "avg", "uniqExact"):
        # -Distinct keeps the set of distinct values, not the function's state.
        return _list_of(args[0]) if _is_string(args[0]) or _number(args[0]) else None
    name = _SAME_STATE.get(name, name)
    one = args[0] if len(args) == 1 else None
    if name in ("quantile", "quantileExact", "quantileTDigest", "quantileTiming", "quantileTimingWeighted"):
        levels = _numeric_parameters(params)
        if levels is None or not all(0 <= q <= 1 for q in levels):
            return None
        if name == "quantileTimingWeighted":  # the weights only add to the histogram's counts
            weighted = len(args) == 2 and _number(args[1], _INTEGERS)
            return _quantile("quantileTiming", args[0]) if weighted else None
        return _quantile(name, one) if one is not None else None
    if name == "quantileDeterministic":
        levels = _numeric_parameters(params)
        width = _temporal_or_number(args[0]) if len(args) == 2 and _number(args[1], _INTEGERS[:4]) else None
        if levels is None or not all(0 <= q <= 1 for q in levels) or width not in (1, 2, 4, 8) or version != 1:
            return None
        # The sample's size and the values seen (as quantile's reservoir), the sample as (value,
        # UInt32 hash of the determinator) pairs padded to 8 or 16 bytes, then a sort flag byte.
        return ((RESERVOIR, 0, 0), (PENDING, 16 if width == 8 else 8, 0), (SKIP, 1, 0)), bytes(17)
    if name in _EVENT_FUNCTIONS:
        return _events(name, args, params)
    if name in ("quantileBFloat16", "quantilesBFloat16") and one is not None and (
            _temporal_or_number(one) is not None and not isinstance(one, (DateTime, DateTime64))):
        levels = _numeric_parameters(params)
        if levels is None or not all(0 <= q <= 1 for q in levels):
            return None
        return ((COUNTED, 10, 0),), b"\0"  # (BFloat16 value, UInt64 count) pairs
    if name == "groupConcat" and one is not None and len(params) <= 1:
        return ((STRING, 0, 0),), b"\0"  # the values' text joined (with the delimiter parameter), as a string
    if params and name not in ("groupArray", "groupUniqArray", "topK", "uniqCombined", "uniqCombined64"):
        return None
    if (found := _statistics(name, args)) is not None:
        return found
    if name == "count" and len(args) <= 1:
        return ((VARUINT, 0, 0),), b"\0"
    # Sums of numbers are 64-bit, of Decimals up to 38 digits a Decimal128.
    total = 8 if one is not None and _number(one) else 16 if isinstance(one, Decimal) and one.precision <= 38 else 0
    if name == "sum" and total:
        return ((SKIP, total, 0),), bytes(total)
    if name == "avg" and total:
        return ((SKIP, total, 0), (VARUINT, 0, 0)), bytes(total + 1)
    if name == "avgWeighted" and len(args) == 2 and all(_number(a) for a in args):
        # A sum of products and a sum of weights; the latter a varuint when weights are unsigned.
        if _number(args[1], (*_INTEGERS[:4], "Bool")):
            return ((SKIP, 8, 0), (VARUINT, 0, 0)), bytes(9)
        return ((SKIP, 16, 0),), bytes(16)
    if name in ("min", "max", "any", "anyLast") and one is not None:
        return _single_value(one)
    if name in ("argMin", "argMax") and len(args) == 2:
        result, value = _single_value(args[0]), _single_value(args[1])
        if result is None or value is None:
            return None
        return result[0] + value[0], result[1] + value[1]
    if name == "uniq" and _hashable(args):
        # A skip degree byte, then the kept 32-bit hashes.
        return ((SKIP, 1, 0), (COUNTED, 4, 0)), b"\0\0"
    if name == "uniqHLL12" and _hashable(args):
        # The small set keeps numbers and dates as they are, anything else as 64-bit hashes.
        width = 8 if one is None or _text_like(args) or isinstance(one, (Decimal,)) or _fixed_width(one) == 16 \
            else _temporal_or_number(one)
        if width is None or (one is not None and _fixed_width(one) == 16 and not _number(one, ("UUID",))):
            return None
        return ((KIND, 0, 1), (WHEN, 0, 1), (COUNTED, width, 0), (WHEN, 1, 1), (SKIP, _HLL_BYTES[4][12], 0)), b"\0\0"
    if name in ("uniqCombined", "uniqCombined64") and _hashable(args) and _count_parameter(params):
        precision = int(params[0]) if params else 17
        hashed = 8 if name == "uniqCombined64" or _text_like(args) else 4
        if precision not in _HLL_BYTES[hashed]:
            return None
        # Representation byte: 1 a small set, 2 a hash set (both a count then hashes), 3 HyperLogLog.
        return ((KIND, 1, 3), (WHEN, 1, 1), (COUNTED, hashed, 0), (WHEN, 2, 1), (COUNTED, hashed, 0),
                (WHEN, 3, 1), (SKIP, _HLL_BYTES[hashed][precision], 0)), b"\x01\0"
    if name == "uniqExact" and args:
        # Numbers are kept as they are, anything else as 128-bit hashes.
        width = _temporal_or_number(one) if one is not None and not isinstance(one, DateTime64) else None
        if width is None and not _hashable(args):
            return None
        return ((COUNTED, width or 16, 0),), b"\0"
    if name in ("groupArray", "groupUniqArray") and one is not None and _count_parameter(params):
        return _list_of(one)
    if name == "topK" and one is not None and _count_parameter(params):
        item = _item(one)
        if item is None:
            return None
        # Counters (value, count, error), then the varuints of the filter that tracks evicted values.
        return ((LOOP, 3, 0), *item, (VARUINT, 0, 0), (VARUINT, 0, 0), (LOOP, 1, 0), (VARUINT, 0, 0)), b"\0\0"
    if name == "groupBitmap" and one is not None and _number(one, _INTEGERS):
        # 0: a small set (up to 32 values as they are), 1: a roaring bitmap's portable bytes.
        return ((KIND, 0, 1), (WHEN, 0, 1), (COUNTED, int(_fixed_width(one) or 0), 0), (WHEN, 1, 1),
                (STRING, 0, 0)), b"\0\0"
    if name == "sumCount" and total:
        return ((SKIP, total, 0), (VARUINT, 0, 0)), bytes(total + 1)
    if name == "anyHeavy" and one is not None and (_fixed_width(one) is not None or _is_string(one)):
        # The value held (as min/max hold one), then its UInt64 counter.
        held = _single_value(one)
        return (held[0] + ((SKIP, 8, 0),), held[1] + bytes(8)) if held is not None else None
    if name in ("sumMap", "minMap", "maxMap"):
        return _sum_map(name, args, version)
    return None


# Functions whose states are fixed moments (Float64 each; Float32 when every argument is Float32):
# the number of them, over numbers (Bool and 128-bit integers too) or, where ClickHouse takes them,
# Decimals.
_MOMENTS = {**dict.fromkeys(("varPop", "varSamp", "stddevPop", "stddevSamp"), 3),
            **dict.fromkeys(("skewPop", "skewSamp"), 4), **dict.fromkeys(("kurtPop", "kurtSamp"), 5)}
_CO_MOMENTS = {"covarPop": 4, "covarSamp": 4, "corr": 6}
# The *Stable forms: a varuint count, then this many Float64 (mean and second moment...), whatever
# the arguments' types.
_STABLE = {**dict.fromkeys(("varPopStable", "varSampStable", "stddevPopStable", "stddevSampStable"), 2),
           "covarPopStable": 3, "covarSampStable": 3, "corrStable": 5}
_EVENT_FUNCTIONS = ("windowFunnel", "sequenceMatch", "sequenceCount")


def _statistics(name: str, args: tuple[DataType, ...]) -> tuple[tuple[Step, ...], bytes] | None:
    """Statistical functions of fixed-size states (measured over every argument type listed)."""
    wide = ("Int128", "UInt128")
    if name in _MOMENTS and len(args) == 1 and (_number(args[0], (*_NUMBERS, *wide)) or
                                                 (isinstance(args[0], Decimal) and _plain(args[0]))):
        width = 4 if _number(args[0], ("Float32",)) else 8
        return ((SKIP, width * _MOMENTS[name], 0),), bytes(width * _MOMENTS[name])
    if name in _CO_MOMENTS and len(args) == 2 and all(_number(a) for a in args):
        floats32 = [_number(a, ("Float32",)) for a in args]
        if any(floats32) and not all(floats32):
            return None  # (not measured)
        width = 4 if all(floats32) else 8
        return ((SKIP, width * _CO_MOMENTS[name], 0),), bytes(width * _CO_MOMENTS[name])
    if name in _STABLE and len(args) == (1 if _STABLE[name] == 2 else 2) and all(
            _temporal_or_number(a) is not None or _number(a, wide) or isinstance(a, Decimal) for a in args):
        return ((VARUINT, 0, 0), (SKIP, 8 * _STABLE[name], 0)), bytes(1 + 8 * _STABLE[name])
    if name == "simpleLinearRegression" and len(args) == 2 and all(
            _number(a, (*_NUMBERS, *wide)) or isinstance(a, Decimal) for a in args):
        return ((SKIP, 40, 0),), bytes(40)  # a UInt64 count and four Float64 sums
    if name == "boundingRatio" and len(args) == 2 and all(_number(a, (*_NUMBERS, *wide)) for a in args):
        # An `empty` byte; when it is 0, the leftmost and rightmost points (four Float64).
        return ((KIND, 0, 1), (WHEN, 0, 1), (SKIP, 32, 0)), b"\x01"
    one = args[0] if len(args) == 1 else None
    if name in ("groupBitAnd", "groupBitOr", "groupBitXor") and one is not None and _number(one, (*_INTEGERS, *wide, "Bool")):
        width = int(_fixed_width(one) or 0)
        return ((SKIP, width, 0),), (b"\xff" if name == "groupBitAnd" else b"\0") * width
    if name == "sumWithOverflow" and one is not None and (_number(one, (*_NUMBERS, *wide)) or isinstance(one, Decimal)):
        width = int(_fixed_width(one) or 0)  # the sum in the argument's own type
        return ((SKIP, width, 0),), bytes(width)
    if name == "sumKahan" and one is not None and (_number(one, (*_NUMBERS, *wide)) or
                                                   (isinstance(one, Decimal) and one.precision <= 18)):
        return ((SKIP, 16, 0),), bytes(16)  # a Float64 sum and its compensation
    if name == "deltaSum" and one is not None and _number(one, (*_NUMBERS, *wide)) and not _number(one, ("Bool",)):
        width = int(_fixed_width(one) or 0)  # the sum, the first and the last value, and a `seen` byte
        return ((SKIP, 3 * width + 1, 0),), bytes(3 * width + 1)
    if name == "retention" and 2 <= len(args) <= 32 and all(_number(a, ("UInt8",)) for a in args):
        return ((SKIP, 4, 0),), bytes(4)  # a bit per condition met
    if name == "entropy" and one is not None:
        # A hash table of (value, UInt64 count): numbers and Date as they are, others as 128-bit hashes.
        kept = _temporal_or_number(one) if not (isinstance(one, (DateTime, DateTime64)) or _number(one, ("Date32",))) \
            else None
        if kept is None and not (_is_string(one) or isinstance(one, Decimal) or _number(one, wide)):
            return None
        return ((COUNTED, (kept or 16) + 8, 0),), b"\0"
    return None


def _events(name: str, args: tuple[DataType, ...], params: tuple[str, ...]) -> tuple[tuple[Step, ...], bytes] | None:
    """windowFunnel / sequenceMatch / sequenceCount: a `sorted` byte, a UInt64 count of events, each
    a timestamp then (windowFunnel) the UInt8 number of its condition or (sequence*) a 64-bit mask
    of the conditions it met."""
    if not params or len(args) < 2 or not all(_number(a, ("UInt8",)) for a in args[1:]):
        return None
    if name == "windowFunnel" and any("strict_once" in p for p in params[1:]):
        return None  # (its events carry a UInt64 row number too: a layout not known here)
    stamp = args[0]
    width: int | None = 4 if isinstance(stamp, DateTime) and _plain(stamp) else 2 if _number(stamp, ("Date",)) else \
        _fixed_width(stamp) if _number(stamp, ("UInt8", "UInt16", "UInt32", "UInt64")) else None
    if width is None:
        return None
    return ((SKIP, 1, 0), (U64_COUNTED, width + (1 if name == "windowFunnel" else 8), 0)), b"\x01" + bytes(8)


def _quantile(name: str, arg: DataType) -> tuple[tuple[Step, ...], bytes] | None:
    width = _fixed_width(arg) if not _number(arg, ("UUID",)) else None
    if width in (None, 32) or (name in ("quantileTDigest", "quantileTiming") and _temporal_or_number(arg) is None):
        return None
    if name == "quantile":
        # Reservoir: capacity, values seen, the random generator as text, then the sample.
        return ((RESERVOIR, 0, 0), (STRING, 0, 0), (PENDING, width, 0)), _EMPTY_RESERVOIR
    if name == "quantileExact":
        return ((COUNTED, width, 0),), b"\0"
    if name == "quantileTDigest":
        return ((COUNTED, 8, 0),), b"\0"  # centroids: Float32 mean and Float32 weight
    # quantileTiming: 1 up to 31 UInt16 values, 2 a UInt64 count of them, 3 a histogram.
    return ((KIND, 1, 3), (WHEN, 1, 1), (U16_COUNTED, 2, 0), (WHEN, 2, 1), (U64_COUNTED, 2, 0),
            (WHEN, 3, 1), (TIMING_LARGE, _TIMING_COUNTERS, _TIMING_COUNTERS * 8)), b"\x01\0\0"


# The Map form is ClickHouse's -Map combinator over sum, min or max (measured in 26.9): its keys are
# integers up to 64 bits, Bool, Date, DateTime or strings (it refuses floats, Date32, DateTime64);
# each key's nested state follows it: sum's (Int64/UInt64/Float64, a 128/256-bit integer's sum in
# its own width), or min's/max's, a flag byte (always 1: a key is there because a value came) then
# the value in its own type.
_MAP_COMBINATOR_KEYS = ("Int8", "Int16", "Int32", "Int64", "UInt8", "UInt16", "UInt32", "UInt64", "Bool", "Date")


def _sum_map(name: str, args: tuple[DataType, ...], version: int | None) -> tuple[tuple[Step, ...], bytes] | None:
    """sumMap, minMap, maxMap of a Map (the -Map combinator) or (versioned) of a key array and value
    arrays: a count of entries, each a key then its values (the array form: every value widened to 8
    bytes)."""
    if len(args) == 1 and isinstance(args[0], Map) and version is None:
        keys, value = args[0].key, args[0].value
        key_ok = _is_string(keys) or _number(keys, _MAP_COMBINATOR_KEYS) or (isinstance(keys, DateTime) and _plain(keys))
        if not key_ok or not _number(value):
            return None
        width = int(value.width or 0)  # type: ignore[attr-defined]
        nested = max(8, width) if name == "sumMap" else 1 + width
        key = ((STRING, 0, 0),) if _is_string(keys) else ((SKIP, int(_temporal_or_number(keys) or 0), 0),)
        return ((LOOP, 2, 0), *key, (SKIP, nested, 0)), b"\0"
    if version == 1 and all(isinstance(a, Array) for a in args):
        key_type, values = args[0].inner, [a.inner for a in args[1:]]  # type: ignore[attr-defined]
    else:
        return None
    items = ((STRING, 0, 0),) if _is_string(key_type) else ((SKIP, w, 0),) if (w := _temporal_or_number(key_type)) else None
    if items is None or not values or not all(_number(v) for v in values):
        return None
    return ((LOOP, 2, 0), *items, (SKIP, 8 * len(values), 0)), b"\0"


def _unknown(dt: DataType) -> bool:
    return isinstance(dt, AggregateFunction) and state_layout(dt) is None


def _refusal(dt: AggregateFunction) -> str:
    return (f"states of {dt.to_clickhouse()} are not supported: the layout of {dt.function}'s state is not known "
            "for these parameters and argument types (format_spec/types.md lists those known)")


def require_known_states(column: str, dt: DataType) -> None:
    """UnsupportedError naming `column` when `dt` is or holds AggregateFunction states of an unknown
    layout: a table of it can be read (its other columns) but not created or written."""
    if contains_type(dt, _unknown):
        refused = dt if isinstance(dt, AggregateFunction) else None
        raise UnsupportedError(f"column {column!r}: " + (_refusal(refused) if refused is not None else
                               f"{dt.to_clickhouse()} holds AggregateFunction states of an unknown layout"))


def _layout_of(dt: AggregateFunction, where: str) -> StateLayout:
    layout = state_layout(dt)
    if layout is None:
        raise UnsupportedError(f"{where}: {_refusal(dt)}")
    return layout


def empty_state(dt: AggregateFunction, where: str = "a default value") -> bytes:
    """The state of no rows: what a column added later holds in older parts."""
    return _layout_of(dt, where).empty


def state_lengths(dt: AggregateFunction, buf: np.ndarray, start: int, n: int, where: str,
                  error: type[MergeTreeError] = CorruptPartError) -> np.ndarray:
    """Byte length of each of the `n` states from buf[start] (uint8); `error` (naming `where`, the
    row and the byte offset) when the bytes end inside a state or hold an unknown representation,
    UnsupportedError (naming `where`) when the function's layout is not known."""
    lengths, outcome, row, offset = scan_states(buf, start, n, _layout_of(dt, where).program)
    if outcome == SCAN_OK:
        return lengths
    if outcome == SCAN_CUT:
        raise error(f"{where}: state {row} of {n} ({dt.to_clickhouse()}) starting at byte offset {offset} "
                    "runs past the end")
    raise error(f"{where}: state {row} of {n} ({dt.to_clickhouse()}) has an unknown representation byte "
                f"{int(buf[offset])} at byte offset {offset}")

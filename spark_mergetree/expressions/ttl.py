"""TTL: a table's TTL rules, the time each row's rule gives, and the `ttl.txt` a part records them in.

ClickHouse does not expire rows when they are read: its merges do, and they choose which parts to
merge (or drop, with `ttl_only_drop_parts`) by each part's `ttl.txt`, the least and greatest time
every rule gives over the part's rows. A part without it is never chosen, so its rows would outlive
the table's TTL. Every part this package writes into a table with TTL therefore records it:

    ttl format version: 1
    {"columns":[{"name":"v","min":M,"max":X,"finished":0}],"table":{"min":M,"max":X,"finished":0},
     "moves":[{"expression":"ts + toIntervalDay(7)","min":M,"max":X,"finished":0}],"recompression":[...],
     "group_by":[...],"rows_where":[...]}

(one line; sections absent when empty; columns sorted by name; `min` is the least non-zero time;
times are UInt32 seconds, a Date's midnight in UTC). The rules understood are a row TTL (`TTL expr`
or `expr DELETE`), moves (`expr TO DISK 'd'` / `TO VOLUME 'v'`), recompression (`expr RECOMPRESS
CODEC(...)`), rules deleting the rows a condition holds for (`expr [DELETE] WHERE cond`, in
`rows_where`: the times of those rows only) or aggregating them (`expr GROUP BY ... SET ...`, in
`group_by`: every row's) and column TTLs (`c T TTL expr`), over expressions of Date or DateTime
columns (and the key functions of them) plus or minus intervals. A rule not understood is refused:
a part that did not record it would keep its rows past it.

Intervals move a time as ClickHouse moves it: seconds, minutes and hours by the clock, days, weeks,
months, quarters and years on the calendar of the column's time zone (a month from January 31st is
the end of February), a Date by whole days (a Date plus hours becomes a DateTime); a DateTime wraps
at 2^32 seconds.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from spark_mergetree.errors import ExpressionError, UnsupportedError
from spark_mergetree.expressions.predicate import bind, evaluate, evaluate_value, parse_expression
from spark_mergetree.format.zones import local_instants, wall_clock

__all__ = ["TTLRule", "ttl_rules", "ttl_times", "ttl_file", "TTL_FILE", "merged_ttl_file", "expiring", "ttl_infos"]

TTL_FILE = "ttl.txt"
_HEADER = "ttl format version: 1\n"
_SECONDS = {"SECOND": 1, "MINUTE": 60, "HOUR": 3600}
_DAYS = {"DAY": 1, "WEEK": 7}
_MONTHS = {"MONTH": 1, "QUARTER": 3, "YEAR": 12}
_DAY = 86400
# A rule's action: the words after its expression.
_ACTION = re.compile(r"\s+(DELETE|TO\s+DISK|TO\s+VOLUME|RECOMPRESS|WHERE|GROUP\s+BY|SET)\b", re.I | re.ASCII)
_INTERVAL = re.compile(r"\bINTERVAL\s+'?(\d+)'?\s+(SECOND|MINUTE|HOUR|DAY|WEEK|MONTH|QUARTER|YEAR)S?\b", re.I | re.ASCII)


@dataclass(frozen=True)
class TTLRule:
    section: str  # "table", "moves", "recompression", "group_by", "rows_where" or "columns"
    expression: str  # as ClickHouse names it (intervals as toIntervalUnit(n))
    column: str | None = None  # a column TTL's column
    condition: str | None = None  # a `DELETE WHERE` rule's condition: only the rows it holds for count
    target: str | None = None  # a move's `DISK 'd'` / `VOLUME 'v'`, a recompression's `CODEC(...)`


def ttl_rules(table_ttl: str | None, column_ttls: Mapping[str, str]) -> list[TTLRule]:
    """The rules of a table's TTL clause and its columns' TTLs (UnsupportedError naming a rule that
    cannot be recorded)."""
    rules = [TTLRule("columns", _normalized(text), column) for column, text in sorted(column_ttls.items())]
    for element in _split_top_level(table_ttl or ""):
        found = _ACTION.search(element)
        expression = _normalized(element[:found.start()] if found else element)
        rest = element[found.start():] if found else ""
        where = re.search(r"\bWHERE\b", rest, re.I | re.ASCII)
        if re.search(r"\bGROUP\s+BY\b", rest, re.I | re.ASCII):
            rule = TTLRule("group_by", expression)  # (its times count every row)
        elif re.match(r"\s*(TO\s+DISK|TO\s+VOLUME)\b", rest, re.I | re.ASCII) and not where:
            rule = TTLRule("moves", expression, target=re.sub(r"^\s*TO\s+", "", rest, flags=re.I).strip())
        elif re.match(r"\s*RECOMPRESS\b", rest, re.I | re.ASCII) and not where:
            rule = TTLRule("recompression", expression, target=re.sub(r"^\s*RECOMPRESS\s+", "", rest, flags=re.I).strip())
        elif re.fullmatch(r"\s*(DELETE\s*)?", rest[:where.start()] if where else rest, re.I | re.ASCII):
            rule = TTLRule("rows_where", expression, condition=rest[where.end():].strip()) if where else \
                TTLRule("table", expression)
        else:
            raise UnsupportedError(f"TTL {element.strip()}: this rule is not understood here (parts written here "
                                   "could not record it, and their rows would outlive it)")
        if rule.section == "table" and any(r.section == "table" for r in rules):
            raise UnsupportedError(f"TTL {table_ttl}: more than one row TTL")
        rules.append(rule)
    return rules


def ttl_times(expression: str, rows: pa.Table, column_types: Mapping[str, str]) -> np.ndarray:
    """The time (UInt32 seconds, as int64) `expression` gives for each row of `rows`."""
    base, shifts = _split_shifts(_normalized(expression))
    seconds, is_date = _base_times(base, rows, column_types, expression)
    zone = _zone_of(base, column_types)
    for count, unit in shifts:
        seconds, is_date = _moved(seconds, is_date, count, unit, zone)
    return np.mod(seconds * _DAY if is_date else seconds, 2**32)


_SHIFT = re.compile(r"\s*([+-])\s*toInterval(Second|Minute|Hour|Day|Week|Month|Quarter|Year)\(\s*(\d+)\s*\)\s*$",
                    re.I | re.ASCII)


def _split_shifts(text: str) -> tuple[str, list[tuple[int, str]]]:
    """`base + toIntervalDay(1) - toIntervalHour(2)` → (base, [(1, DAY), (-2, HOUR)])."""
    shifts: list[tuple[int, str]] = []
    while (found := _SHIFT.search(text)) is not None:
        shifts.insert(0, (int(found.group(3)) * (1 if found.group(1) == "+" else -1), found.group(2).upper()))
        text = text[:found.start()]
    while text.startswith("(") and text.endswith(")") and _balanced(text[1:-1]):
        text = text[1:-1].strip()
    if re.search(r"\btoInterval\w*\(", text, re.I):
        raise UnsupportedError(f"TTL {text}: intervals are supported added to or taken from the whole time")
    return text, shifts


def _balanced(text: str) -> bool:
    depth = 0
    for ch in text:
        depth += (ch == "(") - (ch == ")")
        if depth < 0:
            return False
    return depth == 0


def _base_times(text: str, rows: pa.Table, column_types: Mapping[str, str], source: str) -> tuple[np.ndarray, bool]:
    """(values, is_date): days of a Date, or seconds of a DateTime, for each row."""
    value = evaluate_value(bind(parse_expression(text), dict(column_types)), rows)
    array = value if isinstance(value, (pa.Array, pa.ChunkedArray)) else pa.array([value.as_py()] * rows.num_rows, value.type)
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    if array.null_count:
        raise UnsupportedError(f"TTL {source}: NULL times (a Nullable column) are not supported")
    if pa.types.is_date32(array.type):
        return np.asarray(array.cast(pa.int32()), np.int64), True
    if pa.types.is_timestamp(array.type):
        ticks = np.asarray(array.cast(pa.int64()), np.int64)
        per_second = {"s": 1, "ms": 10**3, "us": 10**6, "ns": 10**9}[array.type.unit]
        return np.floor_divide(ticks, per_second), False
    raise UnsupportedError(f"TTL {source}: the expression must give a Date or DateTime, not {array.type}")


def _zone_of(text: str, column_types: Mapping[str, str]) -> str:
    """The time zone a DateTime expression's calendar is taken in: its column's, else UTC."""
    for name in re.findall(r"`([^`]+)`|\b([A-Za-z_][A-Za-z0-9_.]*)\b", text):
        found = re.search(r"DateTime(?:64)?\((?:\d+,\s*)?'([^']+)'\)", column_types.get(name[0] or name[1], ""))
        if found:
            return found.group(1)
    return "UTC"


def _moved(values: np.ndarray, is_date: bool, count: int, unit: str, zone: str) -> tuple[np.ndarray, bool]:
    if is_date and unit in _SECONDS:  # a Date plus hours is a DateTime from its midnight (UTC)
        return values * _DAY + count * _SECONDS[unit], False
    if unit in _SECONDS:
        return values + count * _SECONDS[unit], False
    if is_date:
        return _calendar_moved(values, unit, count), True
    # Days and longer move the wall clock of the column's zone, then back to an instant.
    wall = wall_clock(values, zone)
    days, clock = np.divmod(wall, _DAY)
    return local_instants(_calendar_moved(days, unit, count) * _DAY + clock, zone), False


def _calendar_moved(days: np.ndarray, unit: str, count: int) -> np.ndarray:
    """Day numbers moved by `count` units; months clamp the day to the new month's last."""
    if unit in _DAYS:
        return days + count * _DAYS[unit]
    as_days = days.astype("datetime64[D]")
    months = as_days.astype("datetime64[M]")
    day = (as_days - months.astype("datetime64[D]")).astype(np.int64)
    moved = months + np.timedelta64(count * _MONTHS[unit], "M")
    length = ((moved + np.timedelta64(1, "M")).astype("datetime64[D]") - moved.astype("datetime64[D]")).astype(np.int64)
    return (moved.astype("datetime64[D]").astype(np.int64) + np.minimum(day, length - 1)).astype(np.int64)


def ttl_file(rules: Sequence[TTLRule], rows: Callable[[list[str]], pa.Table],
             column_types: Mapping[str, str], expired_at: int | None = None) -> bytes | None:
    """The `ttl.txt` of a part whose rows `rows(names)` gives (those columns), None without rules.
    `expired_at` (a merge that applied the TTL at that time): a column rule counts only the rows
    whose values it kept, as ClickHouse's merge counts them (the reset ones hold defaults now)."""
    if not rules:
        return None
    needed = sorted({name for r in rules for text in (r.expression, r.condition or "")
                     for pair in re.findall(r"`([^`]+)`|\b([A-Za-z_][A-Za-z0-9_.]*)\b", text)
                     if (name := pair[0] or pair[1]) in column_types})
    table = rows(needed)
    infos: dict[tuple[str, str], tuple[int, int]] = {}
    for rule in rules:
        times = ttl_times(rule.expression, table, column_types)
        if rule.condition is not None:  # only the rows the condition holds for (NULL: it does not)
            holds = evaluate(bind(parse_expression(rule.condition), dict(column_types)), table)
            times = times[np.asarray(holds.fill_null(False), bool)]
        if expired_at is not None and rule.section == "columns":
            times = times[(times == 0) | (times > expired_at)]
        nonzero = times[times != 0]
        infos[(rule.section, rule.column or rule.expression)] = (
            int(nonzero.min()) if len(nonzero) else 0, int(times.max()) if len(times) else 0)
    return _format(infos)


def expiring(data: bytes | None, now: int, sections: Sequence[str] = ("table", "rows_where", "columns")) -> bool:
    """Whether a part's `ttl.txt` says some of its rows expired by `now` under a rule of `sections`
    (its least time is due: ClickHouse's merge then applies that rule to the part's rows)."""
    return any(section in sections and 0 < low <= now for (section, _), (low, _high) in _parse(data).items())


def merged_ttl_file(sources: Sequence[bytes | None]) -> bytes | None:
    """A merge's `ttl.txt`: each rule's least and greatest time over its sources' (a rule finished
    only where every source finished it), as ClickHouse's merge combines them."""
    combined: dict[tuple[str, str], tuple[int, int]] = {}
    for data in sources:
        for key, (low, high) in _parse(data).items():
            if key in combined:
                old_low, old_high = combined[key]
                low = min(v for v in (low, old_low) if v) if low or old_low else 0
                high = max(high, old_high)
            combined[key] = (low, high)
    return _format(combined) if combined else None


def ttl_infos(data: bytes | None) -> dict[tuple[str, str], tuple[int, int]]:
    """A part's `ttl.txt` read: (section, column or expression) -> (least non-zero time, greatest)."""
    return _parse(data)


def _parse(data: bytes | None) -> dict[tuple[str, str], tuple[int, int]]:
    if not data:
        return {}
    text = data.decode()
    if not text.startswith(_HEADER):
        raise ExpressionError(f"{TTL_FILE}: unknown format {text[:40]!r}")
    body = json.loads(text[len(_HEADER):])
    out: dict[tuple[str, str], tuple[int, int]] = {}
    for entry in body.get("columns", []):
        out[("columns", entry["name"])] = (int(entry["min"]), int(entry["max"]))
    if "table" in body:
        out[("table", "")] = (int(body["table"]["min"]), int(body["table"]["max"]))
    for section in ("moves", "recompression", "group_by", "rows_where"):
        for entry in body.get(section, []):
            out[(section, entry["expression"])] = (int(entry["min"]), int(entry["max"]))
    return out


def _format(infos: Mapping[tuple[str, str], tuple[int, int]]) -> bytes:
    pieces = []
    columns = sorted((name, v) for (section, name), v in infos.items() if section == "columns")
    if columns:
        pieces.append('"columns":[' + ",".join(
            f'{{"name":{json.dumps(name)},"min":{low},"max":{high},"finished":0}}' for name, (low, high) in columns) + "]")
    table = [v for (section, _), v in infos.items() if section == "table"]
    if table and table[0][0]:
        pieces.append(f'"table":{{"min":{table[0][0]},"max":{table[0][1]},"finished":0}}')
    for section in ("moves", "recompression", "group_by", "rows_where"):
        entries = sorted((name, v) for (s, name), v in infos.items() if s == section)
        if entries:
            pieces.append(f'"{section}":[' + ",".join(
                f'{{"expression":{json.dumps(name)},"min":{low},"max":{high},"finished":0}}'
                for name, (low, high) in entries) + "]")
    return (_HEADER + "{" + ",".join(pieces) + "}").encode()


def _normalized(text: str) -> str:
    """A TTL expression as ClickHouse names it: `INTERVAL n UNIT` as `toIntervalUnit(n)`, spaces single."""
    text = _INTERVAL.sub(lambda m: f"toInterval{m.group(2).capitalize()}({m.group(1)})", text)
    return re.sub(r"\s+", " ", text).strip()


def _split_top_level(text: str) -> list[str]:
    """The comma-separated elements of a TTL clause (commas inside parentheses or quotes kept)."""
    out, depth, quote, start = [], 0, None, 0
    for i, ch in enumerate(text):
        if quote:
            if ch == quote and text[i - 1] != "\\":
                quote = None
        elif ch in "'\"`":
            quote = ch
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "," and depth == 0:
            out.append(text[start:i])
            start = i + 1
    if text[start:].strip():
        out.append(text[start:])
    return [element for element in out if element.strip()]

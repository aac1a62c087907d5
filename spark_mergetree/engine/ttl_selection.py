"""Background merges chosen for TTL: which parts a merge takes because their TTL is due.

ClickHouse's background merge selection (26.x, MergeSelectorApplier) first tries TTL merges, in
this order, and only when none qualifies runs its regular selector:

1. *drop*: parts whose greatest row TTL time (`part_max_ttl`: the greatest time any row or column
   rule gives, over the table, `DELETE WHERE`, `GROUP BY` and column entries of `ttl.txt`) is due.
   Every row of them expires. No bytes/rows cap, at most `max_parts_to_merge` parts, no cooldown.
2. *delete* (not with `ttl_only_drop_parts`): parts whose least row TTL time (`part_min_ttl`) is
   due, in partitions not postponed. After choosing one, its partition is postponed for
   `merge_with_ttl_timeout` seconds (default 14400: 4 hours).
3. *recompress* (tables with a `RECOMPRESS` rule): parts whose recompression rule is due and
   whose codec it would change; postponed per partition for `merge_with_recompression_ttl_timeout`
   (default 14400).

Each selector takes the due part with the earliest time as a centre and widens the run to the
left and right over adjacent parts that are due too (and fit the caps: bytes
`max_bytes_to_merge_at_max_space_in_pool`, rows `max_merged_rows`), never over a reserved block. A run may be a single part: that part is
merged again (its expired rows and values go). The merge itself applies the TTL
(engine/ttl_merge.py).

ClickHouse keeps the postponement times in the server's memory (lost at restart); so do we, in
the process that merges (a merge worker, a `mergetree merge-daemon`, a writer's background
merges): two such processes each postpone a partition on their own.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from spark_mergetree.engine import merge as merging
from spark_mergetree.engine import ttl_merge
from spark_mergetree.expressions.ttl import ttl_infos

if TYPE_CHECKING:
    from spark_mergetree.engine.table import MergeTreeTable

# ClickHouse's defaults (system.merge_tree_settings).
MERGE_WITH_TTL_TIMEOUT = 14400
MERGE_WITH_RECOMPRESSION_TTL_TIMEOUT = 14400
_ROW_SECTIONS = ("table", "rows_where", "columns", "group_by")

log = logging.getLogger(__name__)
_lock = threading.Lock()
_reported: set[tuple[str, str]] = set()
# (table path, kind, partition id) -> the time before which that partition's TTL merges of that
# kind wait ("delete" or "recompress").
_postponed: dict[tuple[str, str, str], float] = {}


@dataclass(frozen=True)
class TTLPart:
    """What the TTL selectors know of a part."""

    name: str
    rows: int
    bytes: int
    min_ttl: int  # least non-zero row/column TTL time (0: none)
    max_ttl: int  # greatest row/column TTL time (0: none)
    recompress_ttl: int  # when its recompression would change its codec (0: never)
    avoid: bool = False  # not merged for TTL here (a due rule merges here cannot apply: left to ClickHouse)


def part_ttl(name: str, rows: int, size: int, data: bytes | None, recompress_ttl: int = 0,
             avoid: bool = False) -> TTLPart:
    """A part's `TTLPart` from its `ttl.txt` (`data`)."""
    infos = {key: value for key, value in ttl_infos(data).items() if key[0] in _ROW_SECTIONS}
    lows = [low for low, _ in infos.values() if low]
    highs = [high for _, high in infos.values() if high]
    return TTLPart(name, rows, size, min(lows, default=0), max(highs, default=0), recompress_ttl, avoid)


def select_run(partition_id: str, segments: Sequence[Sequence[TTLPart]], ttl_of: Callable[[TTLPart], int],
               now: float, *, max_parts: int = 0, max_bytes: int = 0, max_rows: int = 0
               ) -> merging.MergeCandidate | None:
    """The run of one partition one TTL selector merges (None if no part of it is due): centred on
    the due part with the earliest time, widened over adjacent due parts within the caps (0: none).
    `segments`: the partition's parts in block order, split where a reserved block lies."""
    centres = sorted(((ttl_of(p), s, i) for s, segment in enumerate(segments) for i, p in enumerate(segment)
                      if not p.avoid and 0 < ttl_of(p) <= now), key=lambda c: (c[0], c[1], c[2]))
    for _, s, i in centres:
        segment = segments[s]
        centre = segment[i]
        # What the run may still take: bytes, rows, parts (0 in a setting: no cap).
        room = [max_bytes - centre.bytes if max_bytes else math.inf,
                max_rows - centre.rows if max_rows else math.inf,
                max_parts - 1 if max_parts else math.inf]
        if room[0] < 0 or room[1] < 0:
            continue
        low = high = i
        for step in (-1, 1):
            j = i + step
            while 0 <= j < len(segment) and room[2] > 0:
                part = segment[j]
                if part.avoid or not 0 < ttl_of(part) <= now or part.bytes > room[0] or part.rows > room[1]:
                    break
                room = [room[0] - part.bytes, room[1] - part.rows, room[2] - 1]
                low, high = min(low, j), max(high, j)
                j += step
        run = segment[low:high + 1]
        return merging.MergeCandidate(partition_id, tuple(p.name for p in run), sum(p.rows for p in run))
    return None


def select_ttl_merge(key: str, parts: Mapping[str, TTLPart], reserved: Mapping[str, Sequence[tuple[int, int]]],
                     settings: Mapping[str, str], *, max_parts: int, max_bytes: int, max_rows: int,
                     has_recompression: bool, now: float | None = None) -> merging.MergeCandidate | None:
    """The TTL merge to run among `parts` (of the table `key`), or None: drop, then delete, then
    recompress, as the module docstring says; choosing a delete or recompress merge postpones its
    partition."""
    moment = time.time() if now is None else now
    partitions = merging.by_partition(sorted(parts))
    segments = {pid: [[parts[i.name] for i in segment] for segment in merging._segments(infos, reserved.get(pid, ()))]
                for pid, infos in partitions.items()}
    kinds: list[tuple[str, Callable[[TTLPart], int], dict[str, int]]] = [
        ("drop", lambda p: p.max_ttl, {"max_parts": max_parts})]
    if not _flag(settings.get("ttl_only_drop_parts", "0")):
        kinds.append(("delete", lambda p: p.min_ttl, {"max_bytes": max_bytes, "max_rows": max_rows}))
    if has_recompression:
        kinds.append(("recompress", lambda p: p.recompress_ttl, {"max_bytes": max_bytes, "max_rows": max_rows}))
    for kind, ttl_of, caps in kinds:
        best: tuple[int, merging.MergeCandidate] | None = None
        for pid in sorted(segments):
            if kind != "drop" and _is_postponed(key, kind, pid, moment):
                continue
            found = select_run(pid, segments[pid], ttl_of, moment, **caps)
            if found is not None:
                earliest = min(ttl_of(parts[n]) for n in found.parts)
                if best is None or earliest < best[0]:
                    best = (earliest, found)
        if best is not None:
            if kind != "drop":
                timeout = int(settings.get("merge_with_ttl_timeout" if kind == "delete" else
                                           "merge_with_recompression_ttl_timeout",
                                           MERGE_WITH_TTL_TIMEOUT if kind == "delete" else
                                           MERGE_WITH_RECOMPRESSION_TTL_TIMEOUT))
                with _lock:
                    _postponed[(key, kind, best[1].partition_id)] = moment + timeout
            return best[1]
    return None


def _flag(text: str) -> bool:
    return str(text).strip().lower() not in ("0", "false", "")


def _is_postponed(key: str, kind: str, partition_id: str, now: float) -> bool:
    with _lock:
        return _postponed.get((key, kind, partition_id), 0.0) > now


def forget_postponements() -> None:
    """Forget every postponement (as a restarted ClickHouse server does)."""
    with _lock:
        _postponed.clear()


def ttl_merge_for(table: MergeTreeTable, visible: set[str], reserved: Mapping[str, Sequence[tuple[int, int]]],
                  stats: Mapping[str, merging.PartStats]) -> merging.MergeCandidate | None:
    """The TTL merge a background merge of `table` runs now, or None (the table has no TTL, or
    nothing is due)."""
    meta = table.metadata
    if not ttl_merge.has_ttl(meta) or not visible:
        return None
    now = int(time.time())
    recompressing = any(rule.section == "recompression" for rule in meta.ttl_rules)
    parts = {}
    for name in visible:
        reader = table.reader(name)
        data = _ttl_file(table, name)
        recompress = ttl_merge.recompression_due_time(reader, meta, data, now) if recompressing else 0
        refusal = ttl_merge.merge_refusal(meta, data, now)
        if refusal is not None and (str(table.path), name) not in _reported:
            _reported.add((str(table.path), name))
            log.info("%s: part %s is left to ClickHouse's TTL merges: %s", table.path, name, refusal)
        parts[name] = part_ttl(name, stats[name].rows, stats[name].bytes, data, recompress, avoid=refusal is not None)
    selector = merging.SelectorSettings.of(meta)
    return select_ttl_merge(str(table.path), parts, reserved, meta.definition.settings, max_parts=selector.max_parts,
                            max_bytes=selector.max_bytes, max_rows=selector.max_rows,
                            has_recompression=recompressing, now=now)


_TTL_FILES: dict[tuple[str, str], bytes | None] = {}  # (table, part) -> its ttl.txt: parts never change
_TTL_FILES_KEPT = 100_000


def _ttl_file(table: MergeTreeTable, part: str) -> bytes | None:
    """A part's `ttl.txt`, read once per process (a GET per part and merge round would add up on
    object storage)."""
    key = (str(table.path), part)
    with _lock:
        if key in _TTL_FILES:
            return _TTL_FILES[key]
    data = ttl_merge.ttl_data(table.reader(part), table.metadata)
    with _lock:
        if len(_TTL_FILES) >= _TTL_FILES_KEPT:
            _TTL_FILES.clear()
        _TTL_FILES[key] = data
    return data

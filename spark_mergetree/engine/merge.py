"""Merges: choosing parts to merge (the selector) and merging them into one part (the merger).

As in ClickHouse, only parts of one partition whose block ranges are adjacent among the active
parts are merged; the result is named `<partition>_<min block>_<max block>_<max level + 1>` and
holds the rows of its sources in ORDER BY order. A merge is a transaction: it removes its sources
and adds the result atomically, and loses (SerializationError) if another transaction removed a
source first.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pyarrow as pa

from spark_mergetree.engine.metadata import TableMetadata
from spark_mergetree.format.part import PartFiles
from spark_mergetree.format.part_info import PartInfo
from spark_mergetree.format.part_reader import PartReader
from spark_mergetree.format.part_writer import (
    MERGE_BLOCK_ROWS,
    PartitionValue,
    plan_granules,
    write_wide_part,
)
from spark_mergetree.format.types import parse_type, to_arrow


@dataclass(frozen=True)
class MergeCandidate:
    partition_id: str
    parts: tuple[str, ...]
    rows: int

    @property
    def result_name(self) -> str:
        return PartInfo.merged([PartInfo.parse(p) for p in self.parts]).name


def by_partition(parts: Sequence[str]) -> dict[str, list[PartInfo]]:
    groups: dict[str, list[PartInfo]] = {}
    for name in parts:
        info = PartInfo.parse(name)
        groups.setdefault(info.partition_id, []).append(info)
    for infos in groups.values():
        infos.sort(key=lambda i: (i.min_block, i.max_block))
    return groups


def _segments(infos: list[PartInfo], reserved: Sequence[tuple[int, int]]) -> list[list[PartInfo]]:
    """Split a partition's sorted parts where a reserved block range (a part a running transaction
    may still commit) lies between or on them: a merge must never cover such a block."""
    segments: list[list[PartInfo]] = [[]]
    for info in infos:
        current = segments[-1]
        low = current[0].min_block if current else info.min_block
        if any(a <= info.max_block and low <= b for a, b in reserved):
            touches = any(a <= info.max_block and info.min_block <= b for a, b in reserved)
            segments.append([] if touches else [info])
            continue
        current.append(info)
    return [segment for segment in segments if segment]


def select_merges(parts: Sequence[str], rows: Mapping[str, int], meta: TableMetadata, *,
                  final: bool = False, force: bool = False,
                  reserved: Mapping[str, Sequence[tuple[int, int]]] | None = None) -> list[MergeCandidate]:
    """Which runs of adjacent parts to merge, at most one per partition.

    `reserved`: per partition, block ranges that running transactions hold; no run spans them.

    Automatic (default): partitions with more than `merge_parts_threshold` parts merge the run of
    up to `max_parts_to_merge` parts with the fewest rows (small parts first, like ClickHouse's
    selector, keeping write amplification low). `force`: any partition with ≥ 2 parts merges such a
    run. `final`: every partition merges all its parts into one.
    """
    threshold = int(meta.setting("merge_parts_threshold"))
    width = int(meta.setting("max_parts_to_merge"))
    max_rows = int(meta.setting("max_merged_rows"))
    out = []
    for partition_id, all_infos in sorted(by_partition(parts).items()):
        segments = _segments(all_infos, (reserved or {}).get(partition_id, ()))
        candidates = [_select_run(partition_id, infos, rows, final=final, force=force, threshold=threshold,
                                  width=width, max_rows=max_rows) for infos in segments]
        found = [c for c in candidates if c is not None]
        if found:
            out.append(min(found, key=lambda c: c.rows) if not final else max(found, key=lambda c: len(c.parts)))
    return out


def _select_run(partition_id: str, infos: list[PartInfo], rows: Mapping[str, int], *, final: bool, force: bool,
                threshold: int, width: int, max_rows: int) -> MergeCandidate | None:
    """The run of adjacent parts to merge among `infos` (one partition, no reserved block inside)."""
    if len(infos) < 2:
        return None
    if final:
        names = tuple(i.name for i in infos)
        return MergeCandidate(partition_id, names, sum(rows[n] for n in names))
    if not force and len(infos) <= threshold:
        return None
    k = min(width, len(infos))
    best: tuple[int, int] | None = None
    for start in range(len(infos) - k + 1):
        total = sum(rows[i.name] for i in infos[start:start + k])
        if (total <= max_rows or force) and (best is None or total < best[0]):
            best = (total, start)
    if best is None:
        return None
    names = tuple(i.name for i in infos[best[1]:best[1] + k])
    return MergeCandidate(partition_id, names, best[0])


def merge_parts(readers: Sequence[PartReader], meta: TableMetadata) -> PartFiles:
    """The files of the part that merges `readers` (all of one partition)."""
    tables = [r.read([n for n, _ in meta.columns], None, meta.column_types) for r in readers]
    table = pa.concat_tables(tables) if len(tables) > 1 else tables[0]
    table = meta.sort(table.combine_chunks())
    key = meta.partition_key
    partition = None
    if key.is_partitioned:
        values = readers[0].partition_values(key.result_types)
        partition = PartitionValue([pa.array([v], type=to_arrow(parse_type(t))) for v, t in zip(values, key.result_types)],
                                   key.result_types, key.columns)
    types = [parse_type(t) for _, t in meta.columns]
    granules = plan_granules(table, types, meta.writer_settings, block_rows=MERGE_BLOCK_ROWS)
    return write_wide_part(table, meta.columns, meta.primary_key_values(table), partition, meta.writer_settings,
                           granules)

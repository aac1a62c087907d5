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


def select_merges(parts: Sequence[str], rows: Mapping[str, int], meta: TableMetadata, *,
                  final: bool = False, force: bool = False) -> list[MergeCandidate]:
    """Which runs of adjacent parts to merge, at most one per partition.

    Automatic (default): partitions with more than `merge_parts_threshold` parts merge the run of
    up to `max_parts_to_merge` parts with the fewest rows (small parts first, like ClickHouse's
    selector, keeping write amplification low). `force`: any partition with ≥ 2 parts merges such a
    run. `final`: every partition merges all its parts into one.
    """
    threshold = int(meta.setting("merge_parts_threshold"))
    width = int(meta.setting("max_parts_to_merge"))
    max_rows = int(meta.setting("max_merged_rows"))
    out = []
    for partition_id, infos in sorted(by_partition(parts).items()):
        if len(infos) < 2:
            continue
        if final:
            names = tuple(i.name for i in infos)
            out.append(MergeCandidate(partition_id, names, sum(rows[n] for n in names)))
            continue
        if not force and len(infos) <= threshold:
            continue
        k = min(width, len(infos))
        best: tuple[int, int] | None = None
        for start in range(len(infos) - k + 1):
            total = sum(rows[i.name] for i in infos[start:start + k])
            if (total <= max_rows or force) and (best is None or total < best[0]):
                best = (total, start)
        if best is None:
            continue
        names = tuple(i.name for i in infos[best[1]:best[1] + k])
        out.append(MergeCandidate(partition_id, names, best[0]))
    return out


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

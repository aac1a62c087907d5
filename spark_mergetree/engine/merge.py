"""Merges: choosing parts to merge (the selector) and merging them into one part (the merger).

As in ClickHouse, only parts of one partition whose block ranges are adjacent among the active
parts are merged; the result is named `<partition>_<min block>_<max block>_<max level + 1>` and
holds the rows of its sources in ORDER BY order. A merge is a transaction: it removes its sources
and adds the result atomically, and loses (SerializationError) if another transaction removed a
source first.
"""

from __future__ import annotations

import math
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from contextlib import contextmanager
from dataclasses import dataclass, replace

import numpy as np
import pyarrow as pa

from spark_mergetree.engine import engines, merge_stream, projection_merge, projections
from spark_mergetree.engine.metadata import TableMetadata
from spark_mergetree.errors import UnsupportedError
from spark_mergetree.expressions.ddl import Projection, key_column_names
from spark_mergetree.expressions.sort_key import sort_indices
from spark_mergetree.expressions.ttl import TTL_FILE
from spark_mergetree.format.checksums import PROJECTION_SUFFIX
from spark_mergetree.format.compact_writer import (
    is_compact_part,
    plan_compact_granules,
    write_part_by_column,
)
from spark_mergetree.format.json_text import stored_json_arrow
from spark_mergetree.format.part import COMPACT_DATA_FILE, PartFiles
from spark_mergetree.format.part_info import PartInfo
from spark_mergetree.format.part_reader import PartReader
from spark_mergetree.format.part_writer import (
    MERGE_BLOCK_ROWS,
    PartitionValue,
    in_memory_width,
    in_memory_width_of_type,
    plan_granules_of,
)
from spark_mergetree.format.types import Json, contains_type, parse_type, to_arrow


@dataclass(frozen=True)
class MergeCandidate:
    partition_id: str
    parts: tuple[str, ...]
    rows: int
    # The data version the merged rows get when above their sources' (patch_merge.py: the patches
    # of ClickHouse's lightweight UPDATEs it materialises).
    data_version: int = 0

    @property
    def result_name(self) -> str:
        info = PartInfo.merged([PartInfo.parse(p) for p in self.parts])
        return (replace(info, mutation=self.data_version) if self.data_version > info.mutation else info).name


_NO_BLOCK = (1 << 63) - 1  # above every block number (Int64 in part names)


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


def fence_reserved(reserved: Mapping[str, Sequence[tuple[int, int]]], visible: Iterable[str], watermark: int,
                   busy: bool, settled_below: int = 0) -> dict[str, list[tuple[int, int]]]:
    """`reserved` plus what a table without a commit lock cannot rule out (`TableLog.allocation_fence`):
    in every partition, blocks from `watermark` on and, when other transactions were running
    (`busy`), every gap between the visible parts (a block there may be one of theirs), except
    blocks below `settled_below`: the caller knows every block below it is committed or lost (every
    transaction that was running when a fence at `settled_below` was taken has ended)."""
    out = {partition: list(ranges) for partition, ranges in reserved.items()}
    for partition_id, infos in by_partition(list(visible)).items():
        ranges = out.setdefault(partition_id, [])
        ranges.append((watermark, _NO_BLOCK))
        if busy:
            ranges.extend((max(a.max_block + 1, settled_below), b.min_block - 1)
                          for a, b in zip(infos, infos[1:], strict=False)
                          if b.min_block > max(a.max_block + 1, settled_below))
    return out


@dataclass(frozen=True)
class PartStats:
    """What the selector knows of a part: rows, bytes on disk, seconds since it was committed."""

    rows: int
    bytes: int
    age: float


@dataclass(frozen=True)
class SelectorSettings:
    """The automatic selector's knobs (ClickHouse's simple merge selector, with its defaults).

    A run of adjacent parts may merge when (sum + n·fixed_cost) / (max + fixed_cost) ≥ base, the
    base being lowered towards 2 as the partition holds more parts (min/max_parts_to_lower_base)
    and as the run's youngest part ages (min/max_age_to_lower_base, longer for bigger runs). Among
    the runs allowed, the one with the lowest (sum + n·fixed_cost) / (n − 1.9) merges: many small
    parts at once, rarely rewriting a big one.
    """

    threshold: int = 8  # `merge_parts_threshold`: more parts than this in a partition merge regardless
    max_parts: int = 10  # `max_parts_to_merge`
    max_rows: int = 50_000_000  # `max_merged_rows`
    max_bytes: int = 150 << 30  # ClickHouse's `max_bytes_to_merge_at_max_space_in_pool`
    min_age_to_force: float = 0.0  # ClickHouse's `min_age_to_force_merge_seconds` (0: never)
    base: float = 5.0
    fixed_cost: float = 5.0 * (1 << 20)
    min_parts_to_lower_base: int = 10
    max_parts_to_lower_base: int = 50
    min_size_to_lower_base: float = 1 << 20
    max_size_to_lower_base: float = 100 * float(1 << 30)
    min_age_to_lower_base: float = 10.0
    max_age_to_lower_base_small: float = 3600.0
    max_age_to_lower_base_big: float = 30 * 86400.0

    @classmethod
    def of(cls, meta: TableMetadata) -> SelectorSettings:
        ch = meta.definition.settings
        return cls(threshold=int(meta.setting("merge_parts_threshold")), max_parts=int(meta.setting("max_parts_to_merge")),
                   max_rows=int(meta.setting("max_merged_rows")),
                   max_bytes=int(ch.get("max_bytes_to_merge_at_max_space_in_pool", cls.max_bytes)) or cls.max_bytes,
                   min_age_to_force=float(ch.get("min_age_to_force_merge_seconds", 0)))


def _unit(value: float, low: float, high: float) -> float:
    """`value` mapped linearly from [low, high] onto [0, 1], clamped."""
    if high <= low:
        return 1.0 if value >= high else 0.0
    return min(1.0, max(0.0, (value - low) / (high - low)))


def _allowed(total: float, largest: float, youngest: float, count: int, partition_parts: int,
             s: SelectorSettings) -> bool:
    if s.min_age_to_force and youngest >= s.min_age_to_force:
        return True
    size = _unit(math.log1p(total), math.log1p(s.min_size_to_lower_base), math.log1p(s.max_size_to_lower_base))
    max_age = s.max_age_to_lower_base_small + size * (s.max_age_to_lower_base_big - s.max_age_to_lower_base_small)
    lowering = min(1.0, _unit(youngest, s.min_age_to_lower_base, max_age)
                   + _unit(partition_parts, min(s.min_parts_to_lower_base, s.threshold), s.max_parts_to_lower_base))
    # A run as wide as a merge may be, of equal parts, always qualifies once it is old or its
    # partition crowded (ClickHouse's base of 5 assumes up to 100 parts per merge).
    top = max(2.0, min(s.base, s.max_parts - 0.5))
    base = top + lowering * (2.0 - top)
    return (total + count * s.fixed_cost) / (largest + s.fixed_cost) >= base


def _select_simple(partition_id: str, segment: list[PartInfo], stats: Mapping[str, PartStats], partition_parts: int,
                   s: SelectorSettings, *, crowded: bool) -> tuple[float, MergeCandidate] | None:
    """(score, run) of the best run of adjacent parts in `segment` within the caps that the simple
    selector allows, or (`crowded`) of the best run within the caps at all."""
    sizes = [stats[i.name] for i in segment]
    best: tuple[float, int, int] | None = None
    for start in range(len(segment) - 1):
        total = rows = 0
        largest = 0
        youngest = math.inf
        for end in range(start, min(len(segment), start + s.max_parts)):
            part = sizes[end]
            total, rows = total + part.bytes, rows + part.rows
            largest, youngest = max(largest, part.bytes), min(youngest, part.age)
            if total > s.max_bytes or rows > s.max_rows:
                break
            count = end - start + 1
            if count < 2 or not (crowded or _allowed(total, largest, youngest, count, partition_parts, s)):
                continue
            score = (total + count * s.fixed_cost) / (count - 1.9)
            if best is None or score < best[0]:
                best = (score, start, end + 1)
    if best is None:
        return None
    names = tuple(i.name for i in segment[best[1]:best[2]])
    return best[0], MergeCandidate(partition_id, names, sum(stats[n].rows for n in names))


def select_automatic(parts: Sequence[str], stats: Mapping[str, PartStats], settings: SelectorSettings,
                     reserved: Mapping[str, Sequence[tuple[int, int]]] | None = None) -> list[MergeCandidate]:
    """The background merges to run, best (lowest score) first, at most one per partition.

    Within a partition, only runs of adjacent parts with no reserved block (a part a running
    transaction may still commit) inside and within the caps on parts, rows and bytes per merge
    qualify; of those, the simple selector's rule (`SelectorSettings`) chooses. A partition with
    more than `settings.threshold` parts merges its best-scoring run even if the rule allows none
    yet: the threshold bounds the parts a partition keeps once merges caught up.
    """
    scored = []
    for partition_id, infos in sorted(by_partition(parts).items()):
        segments = _segments(infos, (reserved or {}).get(partition_id, ()))
        for crowded in (False, True):
            if crowded and len(infos) <= settings.threshold:
                break
            found = [c for segment in segments
                     if (c := _select_simple(partition_id, segment, stats, len(infos), settings,
                                             crowded=crowded)) is not None]
            if found:
                scored.append(min(found, key=lambda c: c[0]))
                break
    return [candidate for _, candidate in sorted(scored, key=lambda c: c[0])]


def select_merges(parts: Sequence[str], rows: Mapping[str, int], meta: TableMetadata, *,
                  final: bool = False, reserved: Mapping[str, Sequence[tuple[int, int]]] | None = None
                  ) -> list[MergeCandidate]:
    """OPTIMIZE's merges, at most one per partition (the background ones: `select_automatic`).

    `reserved`: per partition, block ranges that running transactions hold; no run spans them.
    Without `final`, any partition with ≥ 2 parts merges the run of up to `max_parts_to_merge`
    adjacent parts with the fewest rows; with `final`, every partition merges all its parts into one.
    """
    width = int(meta.setting("max_parts_to_merge"))
    out = []
    for partition_id, all_infos in sorted(by_partition(parts).items()):
        segments = _segments(all_infos, (reserved or {}).get(partition_id, ()))
        candidates = [_select_run(partition_id, infos, rows, final=final, width=width) for infos in segments]
        found = [c for c in candidates if c is not None]
        if found:
            out.append(min(found, key=lambda c: c.rows) if not final else max(found, key=lambda c: len(c.parts)))
    return out


def select_groups(parts: Sequence[str], rows: Mapping[str, int], meta: TableMetadata, *, final: bool,
                  reserved: Mapping[str, Sequence[tuple[int, int]]] | None = None,
                  ttl_due: AbstractSet[str] = frozenset()) -> list[MergeCandidate]:
    """Disjoint merges to run side by side (a distributed OPTIMIZE): with `final`, each segment of a
    partition (between reserved blocks) whole, and a partition's lone part when it is in `ttl_due`
    (its TTL is due: ClickHouse's FINAL merges it again); otherwise runs of up to
    `max_parts_to_merge` adjacent parts covering every segment of ≥ 2 parts."""
    width = len(parts) if final else int(meta.setting("max_parts_to_merge"))
    out = []
    for partition_id, infos in sorted(by_partition(parts).items()):
        for segment in _segments(infos, (reserved or {}).get(partition_id, ())):
            count = len(segment)
            runs = max(1, -(-count // width))  # as few runs as the width allows, of even sizes
            for number in range(runs):
                run = segment[number * count // runs:(number + 1) * count // runs]
                if len(run) >= 2 or (final and len(infos) == 1 and run[0].name in ttl_due):
                    names = tuple(i.name for i in run)
                    out.append(MergeCandidate(partition_id, names, sum(rows[n] for n in names)))
    return out


def _select_run(partition_id: str, infos: list[PartInfo], rows: Mapping[str, int], *, final: bool,
                width: int) -> MergeCandidate | None:
    """The run of adjacent parts to merge among `infos` (one partition, no reserved block inside)."""
    if len(infos) < 2:
        return None
    if final:
        names = tuple(i.name for i in infos)
        return MergeCandidate(partition_id, names, sum(rows[n] for n in names))
    k = min(width, len(infos))
    best: tuple[int, int] | None = None
    for start in range(len(infos) - k + 1):
        total = sum(rows[i.name] for i in infos[start:start + k])
        if best is None or total < best[0]:
            best = (total, start)
    assert best is not None
    names = tuple(i.name for i in infos[best[1]:best[1] + k])
    return MergeCandidate(partition_id, names, best[0])


@contextmanager
def merged_part(readers: Sequence[PartReader], meta: TableMetadata) -> Iterator[PartFiles]:
    """The files of the part that merges `readers` (`merge_parts`), valid inside the `with` block: a
    big merge's column files are memory maps of streams it wrote to a temporary directory as it
    merged, removed when the block ends."""
    remove_abandoned_spills()
    with tempfile.TemporaryDirectory(prefix=f"{SPILL_PREFIX}{os.getpid()}_") as spill_dir:
        yield merge_parts(readers, meta, spill_dir)


SPILL_PREFIX = "mergetree_merge_"


def remove_abandoned_spills(directory: str | None = None) -> list[str]:
    """Delete the spill directories (`mergetree_merge_<pid>_*` in the temporary directory) of merges
    whose process is gone (killed mid-merge); return their paths."""
    root = directory or tempfile.gettempdir()
    removed: list[str] = []
    try:
        names = os.listdir(root)
    except OSError:
        return removed
    for name in names:
        pid = name[len(SPILL_PREFIX):].split("_", 1)[0]
        if not name.startswith(SPILL_PREFIX) or not pid.isdigit():
            continue
        try:
            os.kill(int(pid), 0)
            continue  # its process runs (or the pid is another's now: left for later)
        except ProcessLookupError:
            pass
        except PermissionError:
            continue
        shutil.rmtree(os.path.join(root, name), ignore_errors=True)
        removed.append(os.path.join(root, name))
    return removed


def merge_parts(readers: Sequence[PartReader], meta: TableMetadata, spill_dir: str | None = None) -> PartFiles:
    """The files of the part that merges `readers` (all of one partition), as ClickHouse's vertical
    merge writes it: the key columns (those ORDER BY, PRIMARY KEY and PARTITION BY read) first,
    giving the rows' merged order; then every column in turn, read from all parts, put in that order,
    serialized and compressed.

    With `spill_dir`, a merge into a Wide part streams (merge_stream.py; for the engines that
    combine rows, window by window of whole keys): memory holds blocks, not parts, and the output
    goes to files there as it is written. Otherwise, and for Compact results (small: is_compact_part),
    the keys are sorted whole and each column is read whole: memory holds the keys, one column and
    the compressed output, not the whole decoded table.

    The table's projections are built again from the sources' projection parts and rows: with
    `spill_dir`, streaming (`_merged_projections`) where every source holds it or its input is big,
    else in memory (engine/projections.py; a projection of offsets always, from the sources'
    projection parts with their offsets translated by the merge's order: `_offset_rows`, which holds
    the projection's columns and 8 bytes per merged row); parts holding a projection this version cannot build
    (`unmergeable_projections`) are not merged: the merged part would lack it.

    A table whose engine combines rows does with its projections what its setting
    deduplicate_merge_projection_mode says, as ClickHouse's merges do: 'drop' (and 'throw', for
    parts holding projections from before ClickHouse refused them) writes the merged part without
    projections; 'rebuild' builds every projection from the merged part's rows, in its order, as an
    insert of those rows would (a projection of offsets gets their offsets 0, 1, 2, ...); 'ignore'
    merges the sources' projection parts as for a plain MergeTree, but for a projection of offsets,
    which is rebuilt (the sources' offsets may point at rows the merge combined away)."""
    for reader in readers:
        lost = unmergeable_projections(reader, meta)
        if lost:
            raise UnsupportedError(
                f"{reader.location}: holds projection(s) {', '.join(lost)} this version cannot build "
                "(the projections of the table's statement this version builds are merged); merging the part would lose them: "
                "merge it in ClickHouse")
    mode = meta.merge_projection_mode
    if mode in ("drop", "throw"):
        files = _merge_rows(readers, meta, spill_dir)
    elif mode is not None:
        files = _merge_rows(readers, meta, spill_dir)
        merged = _merged_part_reader(files)
        offsets = np.arange(files.rows, dtype=np.uint64)
        files = _with_projections(files, [merged] if mode == "rebuild" else readers, [merged], offsets, meta, spill_dir)
    else:
        collected: list[np.ndarray] | None = [] if any(p.stores_offsets for p in meta.projections) else None
        files = _merge_rows(readers, meta, spill_dir, collected)
        files = _with_projections(files, readers, readers, collected[0] if collected else None, meta, spill_dir)
    return meta.with_merged_ttl(files, [_ttl_of(reader, meta) for reader in readers])


def _with_projections(files: PartFiles, sources: Sequence[PartReader], offset_sources: Sequence[PartReader],
                      merged_offsets: np.ndarray | None, meta: TableMetadata, spill_dir: str | None) -> PartFiles:
    """The merged part's files with the table's projections added: built from `sources`' projection
    parts and rows, a projection of offsets from `offset_sources`' (their rows' offsets in the merged
    part: `merged_offsets`, per row of those sources in order)."""
    merged = _merged_projections(sources, meta, spill_dir) if spill_dir is not None else {}

    def source_rows(projection: Projection, names: list[str]) -> pa.Table:
        # Sources in order, each one's rows as its projection part holds them: sorted stably by a
        # normal projection's key (ties keep that order), an aggregate projection's states combined
        # group by group, as ClickHouse's merge of the sources' projection parts does. A source
        # without the projection (or with deleted rows) gives its rows, in the part's order.
        if projection.stores_offsets:
            assert merged_offsets is not None
            held_offsets = [_held_projection(reader, projection) for reader in offset_sources]
            return _offset_rows(offset_sources, held_offsets, names, merged_offsets, meta)
        held = [_held_projection(reader, projection) for reader in sources]
        if projection.is_aggregate:
            wanted = projections.state_columns(projection, meta.column_types)
            if all(h is not None and set(wanted) <= {n for n, _ in h.columns} for h in held):
                return pa.concat_tables([h.read(wanted) for h in held if h is not None])
            return pa.concat_tables([r.read(names, None, meta.column_types) for r in sources])
        return pa.concat_tables([(h if h is not None and set(names) <= {n for n, _ in h.columns} else r)
                                 .read(names, None, meta.column_types) for h, r in zip(held, sources)])

    return meta.add_projections(files, source_rows, merged)


def _held_projection(reader: PartReader, projection: Projection) -> PartReader | None:
    """A source's part of `projection`, when it holds it whole (no row of the source deleted)."""
    if projection.name in reader.projections and reader.existing_rows == reader.rows:
        return reader.projection_reader(projection.name)
    return None


class _PartFilesSource:
    """A part's files not yet stored (PartFiles), as a source a PartReader reads."""

    def __init__(self, files: PartFiles) -> None:
        self.files = files.files

    def list_files(self, part: str) -> list[str]:
        return list(self.files)

    def read_file(self, part: str, name: str) -> bytes:
        return bytes(self.files[name])

    def read_range(self, part: str, name: str, start: int, end: int, verify: bool = True) -> bytes | memoryview:
        return memoryview(self.files[name])[start:end]

    def file_size(self, part: str, name: str) -> int:
        return len(self.files[name])


def _merged_part_reader(files: PartFiles) -> PartReader:
    """A reader of the merge's result, before it is stored: projections rebuilt from the merged
    rows read them from it (the merge's row-combining paths, in memory or streaming, need not
    hand them over). The name is a stand-in: nothing read here depends on it."""
    return PartReader(_PartFilesSource(files), "merged_0_0_0", "the merged part")


def _ttl_of(reader: PartReader, meta: TableMetadata) -> bytes | None:
    """A source's `ttl.txt`, or, for a part that has none (written before it was kept), the one its
    rows give."""
    if TTL_FILE in reader.files:
        return bytes(reader.source.read_file(reader.part, TTL_FILE))
    return meta.ttl_of(lambda names: reader.read(names, None, meta.column_types, apply_mask=False))


def _offset_rows(readers: Sequence[PartReader], held: Sequence[PartReader | None], names: list[str],
                 merged_offsets: np.ndarray, meta: TableMetadata) -> pa.Table:
    """A projection of offsets' rows for the merged part: the sources' in order, each one's as its
    projection part holds them (else its rows in order), the offsets they store into it translated
    to the merged part's (`merged_offsets`: per row of the sources, its merged offset), as
    ClickHouse's merge translates them; sorted stably by the key afterwards, ties keep this order."""
    stored = [n for n in names if n != projections.PARENT_OFFSET]
    tables = []
    base = 0
    for reader, part in zip(readers, held, strict=True):
        if part is not None and set(names) <= {n for n, _ in part.columns}:
            rows = part.read(names, None, meta.column_types)
            local = rows.column(projections.PARENT_OFFSET).to_numpy().astype(np.int64)
            rows = rows.drop_columns([projections.PARENT_OFFSET])
        else:
            rows = reader.read(stored, None, meta.column_types)
            local = np.arange(rows.num_rows, dtype=np.int64)
        tables.append(projections.with_offsets(rows, merged_offsets[base + local]))
        base += reader.existing_rows
    return pa.concat_tables(tables)


def _merged_projections(readers: Sequence[PartReader], meta: TableMetadata, spill_dir: str) -> dict[str, PartFiles]:
    """The projections merged in bounded memory (engine/projection_merge.py), streaming into
    `<spill_dir>/<name>.proj`: a normal one every source holds whole is merged as ClickHouse merges
    it, its projection parts like parts of a table ordered by its key; otherwise, for inputs above
    projection_merge.RUN_BYTES, a normal projection from runs merged the same way, an aggregate one
    from runs whose states are combined key by key. The others are built in memory from the
    sources' rows (add_projections)."""
    merged: dict[str, PartFiles] = {}
    for projection in meta.projections:
        if projection.stores_offsets:  # built in memory from the sources' rows, offsets translated
            continue
        directory = os.path.join(spill_dir, projection.name + PROJECTION_SUFFIX)
        os.makedirs(directory, exist_ok=True)
        if projection.is_aggregate:
            built = projection_merge.merged_aggregate(projection, readers, meta, directory + ".runs")
        else:
            sub = meta.of_projection(projection)

            def merge(group: Sequence[PartReader], spill: str, sub: TableMetadata = sub) -> PartFiles:
                return _merge_rows(group, sub, spill)

            runs = projection_merge.normal_runs(projection, readers, meta, directory + ".runs", merge)
            built = _merge_rows(runs, sub, directory) if runs is not None else None
        if built is not None:
            merged[projection.name] = built
    return merged


def unmergeable_projections(reader: PartReader, meta: TableMetadata) -> list[str]:
    """The projections a part holds that a merge could not build again (a merge would lose them;
    none when the table's merges drop every projection, as ClickHouse's do)."""
    if meta.merge_projection_mode in ("drop", "throw"):
        return []
    buildable = {p.name for p in meta.projections}
    return [name for name in reader.projections if name not in buildable]


def _merge_rows(readers: Sequence[PartReader], meta: TableMetadata, spill_dir: str | None,
                offsets: list[np.ndarray] | None = None) -> PartFiles:
    """`merge_parts` without the projections. With `offsets` (a list; not for the engines that
    combine rows), the merged offset of every row of the sources is appended to it (sources in
    order, each one's rows not deleted, in its order)."""
    names = [n for n, _ in meta.columns]
    definition = meta.definition
    keys = key_column_names(names, definition.order_by, definition.partition_by, definition.primary_key)
    engine = meta.merging_engine
    keys |= set(engine.control_columns if engine else ()) | set(meta.sorting_key) & set(names)
    if engine and not keys:  # ORDER BY tuple(): the engine still needs the rows counted
        keys = {names[0]}
    assert offsets is None or engine is None
    partition = _merged_partition(readers, meta)
    compact = merges_into_compact(readers, meta)
    # A Wide result streams; a Compact one is written whole below (it interleaves every column granule
    # by granule), as is a merge that keeps no row.
    if not compact and spill_dir is not None and engine is None:
        rows = sum(r.existing_rows for r in readers)
        granules, _ = merge_stream.plan_merged_granules(readers, meta, rows)
        if rows:
            files = merge_stream.merge_streaming(readers, meta, keys, rows, granules, partition, spill_dir)
            if offsets is not None:
                offsets.append(merge_stream.merged_offsets(readers, spill_dir))
            return files
    elif not compact and spill_dir is not None:
        numbers = engines.part_sources([PartInfo.parse(r.part).level for r in readers], [1] * len(readers))
        stream = merge_stream.merge_engine_streaming if meta.sorting_key else merge_stream.merge_engine_unkeyed
        streamed = stream(readers, meta, keys, numbers, partition, spill_dir)
        if streamed is not None:
            return streamed

    def read_column(name: str) -> pa.ChunkedArray:
        # JSON columns in their stored form: every value keeps its type through the merge.
        chunks = [chunk for r in readers
                  for chunk in r.read([name], None, meta.column_types, stored_json=True).column(0).chunks]
        return pa.chunked_array(chunks, type=merge_arrow_type(meta, name))

    key_table = pa.table({name: read_column(name).combine_chunks() for name in names if name in keys})
    rows = sum(r.existing_rows for r in readers) if not key_table.num_columns else key_table.num_rows
    order = None
    if meta.sorting_key and rows > 1:
        order = sort_indices(meta.sorting_key, key_table, meta.column_types)
        key_table = key_table.take(order)
    if offsets is not None:
        offsets.append(np.arange(rows, dtype=np.uint64) if order is None
                       else merge_stream.offsets_of_positions(order.to_numpy()))
    sources = engines.part_sources([PartInfo.parse(r.part).level for r in readers], [r.existing_rows for r in readers])
    plan = engines.plan_rows(engine, key_table, meta.sorting_key, meta.column_types, final=False,
                             sources=sources[order.to_numpy()] if order is not None else sources) if engine else None
    if plan is not None:  # the engine's merge (engines.py): rows of equal keys replaced, summed or collapsed
        key_table, rows = plan.apply(key_table), plan.count

    def column_of(name: str) -> pa.Array | pa.ChunkedArray:
        if name in key_table.column_names:
            return key_table.column(name)
        values = read_column(name)
        values = values.take(order) if order is not None else values
        return plan.column(name, values) if plan is not None else values

    types = [parse_type(t) for _, t in meta.columns]
    total = 0
    for (name, _), dt in zip(meta.columns, types, strict=True):
        width = in_memory_width_of_type(dt, meta.arrow_schema.field(name).type, rows)
        if width is None:  # variable-width values: measured (the column is read again when written)
            width = in_memory_width(dt, key_table.column(name) if name in keys else read_column(name))
        total += width
    primary_key = meta.primary_key_values(key_table)
    if compact:
        blocks = [(min(MERGE_BLOCK_ROWS, rows - start), total * min(MERGE_BLOCK_ROWS, rows - start) // max(rows, 1))
                  for start in range(0, rows, MERGE_BLOCK_ROWS)]
        granules = plan_compact_granules(blocks, meta.writer_settings)
    else:
        granules = plan_granules_of(rows, total, meta.writer_settings, block_rows=MERGE_BLOCK_ROWS)
    return write_part_by_column(compact, rows, meta.columns, column_of, primary_key, partition,
                                meta.writer_settings, granules)


def merges_into_compact(readers: Sequence[PartReader], meta: TableMetadata) -> bool:
    """Whether ClickHouse merges `readers` into a Compact part: never when one of them is Wide;
    otherwise when their rows (lightweight-deleted ones included) and the uncompressed bytes of their
    `data.bin` (checksums.txt: system.parts' `data_uncompressed_bytes`), summed, are under the
    table's limits (`is_compact_part`), as `FutureMergedMutatedPart::assign` sums them. It is decided
    before any row is read or combined, so a merge that keeps few rows (deleted rows, a
    ReplacingMergeTree's duplicates) may give a small Wide part, as in ClickHouse."""
    if any(not reader.is_compact for reader in readers):
        return False
    level = max(PartInfo.parse(reader.part).level for reader in readers) + 1
    stored = [_data_bytes(reader) for reader in readers]
    if any(size is None for size in stored):  # no checksums.txt: the rows' size in memory stands in
        rows = sum(r.existing_rows for r in readers)
        _, total = merge_stream.plan_merged_granules(readers, meta, rows, exact=True)
        return is_compact_part(meta.definition.settings, rows, total, level)
    return is_compact_part(meta.definition.settings, sum(r.rows for r in readers), sum(s or 0 for s in stored), level)


def _data_bytes(reader: PartReader) -> int | None:
    """The uncompressed bytes of a Compact part's `data.bin` (None without checksums.txt)."""
    checksums = reader.checksums
    entry = None if checksums is None else checksums.files.get(COMPACT_DATA_FILE)
    return None if entry is None else entry.uncompressed_size


def merge_arrow_type(meta: TableMetadata, name: str) -> pa.DataType:
    """The Arrow type a merge reads column `name` as: the table's, but the stored form for JSON."""
    dt = parse_type(meta.column_types[name])
    if contains_type(dt, Json):  # (a JSON column, or one inside Array, Map or Tuple)
        return stored_json_arrow(dt)
    return meta.arrow_schema.field(name).type


def _merged_partition(readers: Sequence[PartReader], meta: TableMetadata) -> PartitionValue | None:
    """The partition of a merge's result: its sources'."""
    key = meta.partition_key
    if not key.is_partitioned:
        return None
    values = readers[0].partition_values(key.result_types)
    return PartitionValue([pa.array([v], type=to_arrow(parse_type(t))) for v, t in zip(values, key.result_types)],
                          key.result_types, key.columns)

"""Reading a table: partition pruning → primary-key granule selection → granule-range reads.

This mirrors ClickHouse's select executor: for every visible part, the partition value and minmax
indexes decide whether the part can match at all; the sparse primary index then narrows the part
to granule ranges; the ranges are split into `ReadTask`s of about `target_rows` rows (so one big
part still spreads over every core); each task reads its ranges and filters rows exactly. When a
normal projection reads fewer granules for the filter, the parts holding it are read through it
instead (engine/projection_reads.py, ClickHouse's optimize_use_projections).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import pyarrow as pa

from spark_mergetree.engine import projection_reads
from spark_mergetree.engine.patches import PatchSet
from spark_mergetree.errors import MergeTreeError
from spark_mergetree.expressions.ddl import Projection
from spark_mergetree.expressions.key_condition import granule_ranges_of_parts, may_match_partitions
from spark_mergetree.expressions.partition_key import PartitionKey
from spark_mergetree.expressions.predicate import (
    Expr,
    bind,
    check_evaluable,
    columns_of,
    filter_table,
    parse_predicate,
)
from spark_mergetree.expressions.skip_index import (
    SkipIndex,
    bloom_may_match,
    minmax_may_match,
    relevant,
    set_may_match,
    text_may_match,
)
from spark_mergetree.format.part_info import PartInfo, uncovered_parts
from spark_mergetree.format.part_reader import PATCH_PART_PREFIX, GranuleRange, PartReader, merge_ranges
from spark_mergetree.format.skip_index import (
    bits_set,
    bloom_filter_parameters,
    bloom_granules,
    bloom_positions,
    bloom_value_hash,
    minmax_granules,
    set_granules,
    text_bloom_contains,
    text_bloom_granules,
)

DEFAULT_TARGET_ROWS = 1 << 20


@dataclass(frozen=True)
class ReadTask:
    """Granule ranges of one part to read: small and picklable (an executor's unit of work)."""

    part: str
    ranges: tuple[GranuleRange, ...]
    rows: int
    patches: tuple[str, ...] = ()  # patch parts of lightweight UPDATEs that change the part's rows
    # A normal projection of the part whose granules `ranges` are (engine/projection_reads.py); its
    # rows are the part's. `fallback`: the part's own granules this task stands for, read instead
    # where patches apply after all (a transaction's view seeing UPDATEs the plan did not).
    projection: str | None = None
    fallback: tuple[GranuleRange, ...] = ()


@dataclass
class PartPlan:
    """What a read does with one part: skipped, or which granule ranges it reads."""

    part: str
    partition_id: str
    rows: int  # rows a read of the whole part returns (lightweight-deleted rows excluded)
    granules: int
    ranges: list[GranuleRange]
    pruned_by: str | None = None  # 'partition', 'primary key', 'index <name>', 'projection <name>': skipped whole
    skipped_by_index: dict[str, int] = field(default_factory=dict)  # skip index → granules it dropped
    projection: str | None = None  # read through this normal projection: `ranges` are its granules
    projection_granules: int = 0  # granules of that projection part
    own_ranges: list[GranuleRange] | None = None  # what the part's own indexes left, when a projection is read

    @property
    def granules_read(self) -> int:
        return sum(end - begin for begin, end in self.ranges)


@dataclass
class ReadPlan:
    """The parts and granule ranges a read touches (what `MergeTreeTable.explain` returns)."""

    snapshot: int | None
    where: str | None
    parts: list[PartPlan] = field(default_factory=list)
    tasks: list[ReadTask] = field(default_factory=list)
    projection: str | None = None  # the normal projection the read goes through (None: the parts' own rows)

    @property
    def granules_total(self) -> int:
        return sum(p.granules for p in self.parts)

    @property
    def granules_read(self) -> int:
        return sum(p.granules_read for p in self.parts)

    @property
    def skipped_by_index(self) -> dict[str, int]:
        """Granules each skip index dropped (after partition and primary key pruning), over all parts."""
        total: dict[str, int] = {}
        for part in self.parts:
            for name, count in part.skipped_by_index.items():
                total[name] = total.get(name, 0) + count
        return total

    @property
    def parts_read(self) -> int:
        return sum(1 for p in self.parts if p.ranges)

    def __str__(self) -> str:
        lines = [f"snapshot {self.snapshot}: {self.parts_read} of {len(self.parts)} parts, "
                 f"{self.granules_read} of {self.granules_total} granules"
                 + (f" for WHERE {self.where}" if self.where else "")]
        if self.projection is not None:
            held = [p for p in self.parts if p.projection is not None]
            lines.append(f"  projection {self.projection}: {sum(p.granules_read for p in held)} of "
                         f"{sum(p.projection_granules for p in held)} granules of its parts in {len(held)} parts "
                         f"(their own indexes left {sum(_count(p.own_ranges or []) for p in held)}); "
                         f"{len(self.parts) - len(held)} parts read without it")
        for p in self.parts:
            detail = f"skipped by {p.pruned_by}" if p.pruned_by else ", ".join(f"[{b}, {e})" for b, e in p.ranges)
            by_index = "".join(f"; index {name} skipped {count}" for name, count in p.skipped_by_index.items())
            via = "" if p.projection is None else \
                f" of projection {p.projection} ({p.projection_granules} granules; own index: {_count(p.own_ranges or [])})"
            lines.append(f"  {p.part}: {p.granules_read}/{p.granules} granules{via}  {detail}{by_index}")
        return "\n".join(lines)


def _count(ranges: Sequence[GranuleRange]) -> int:
    return sum(end - begin for begin, end in ranges)


def active_parts(names: Iterable[str]) -> set[str]:
    """The data parts ClickHouse loads as active from a table directory holding `names`: every part
    that no other part covers (PartInfo.contains: a merge's or a mutation's result covers its
    sources). Names that are not parts are ignored, and so are patch parts (`patch_parts`)."""
    return {name for name in uncovered_parts(names) if not name.startswith(PATCH_PART_PREFIX)}


def patch_parts(names: Iterable[str]) -> set[str]:
    """The active patch parts of lightweight UPDATEs (`patch-...`) among `names` (engine/patches.py)."""
    # Only patch parts can cover patch parts (their partition ids start with the prefix): filtering
    # first keeps this linear in a directory that holds many removed data parts (a stream's, until cleanup).
    return uncovered_parts(name for name in names if name.startswith(PATCH_PART_PREFIX))


_MUTATION_FILE = re.compile(r"mutation_([0-9]+)\.txt")


def first_free_block(table_dir: str | os.PathLike[str], names: Iterable[str]) -> int:
    """The lowest block number a new part may take in a table directory ClickHouse may have written:
    above every part's blocks and every mutation's version (`mutation_N.txt`). A lower number would
    reuse a part's name, or make ClickHouse apply an older mutation (a DELETE) to the new part."""
    highest = 0
    for name in names:
        try:
            info = PartInfo.parse(name)
        except MergeTreeError:
            continue
        highest = max(highest, info.max_block, info.mutation)
    try:
        entries = [entry.name for entry in os.scandir(table_dir)]
    except FileNotFoundError:
        entries = []
    versions = [int(match.group(1)) for match in map(_MUTATION_FILE.fullmatch, entries) if match]
    return max([highest, *versions]) + 1


def bind_where(where: str | Expr | None, column_types: dict[str, str]) -> Expr | None:
    """Parse (if text) and bind a predicate against the table's columns."""
    if where is None or (isinstance(where, str) and not where.strip()):
        return None
    expr = parse_predicate(where) if isinstance(where, str) else where
    bound = bind(expr, column_types)
    check_evaluable(bound)  # an unknown function fails here, before any part is read
    return bound


def plan_part(reader: PartReader, info: PartInfo, predicate: Expr | None, partition_key: PartitionKey,
              primary_key: Sequence[tuple[str, str]], skip_indexes: Sequence[SkipIndex] = (),
              column_types: Mapping[str, str] | None = None) -> PartPlan:
    """Prune one part by partition/minmax, then by the sparse primary index, then by skip indexes."""
    return plan_parts([reader], [info], predicate, partition_key, primary_key, skip_indexes, column_types)[0]


def plan_parts(readers: Sequence[PartReader], infos: Sequence[PartInfo], predicate: Expr | None, partition_key: PartitionKey,
               primary_key: Sequence[tuple[str, str]], skip_indexes: Sequence[SkipIndex] = (),
               column_types: Mapping[str, str] | None = None, *, columns: Sequence[str] | None = None,
               projections: Sequence[Projection] = ()) -> list[PartPlan]:
    """Prune parts by partition/minmax, then by their sparse primary indexes: each step evaluates
    the predicate once over all parts (or all their granules), not once per part. Then each skip
    index the predicate can use drops the granules of the remaining ranges it rules out. Then, with
    `projections` (normal ones the read may use) and `columns` (those it returns), the parts holding
    the projection that reads the fewest granules, if fewer than that, are planned through it
    (projection_reads.py; `plan_projection` names it)."""
    return plan_projection(readers, infos, predicate, partition_key, primary_key, skip_indexes, column_types,
                           columns=columns, projections=projections)[0]


def plan_projection(readers: Sequence[PartReader], infos: Sequence[PartInfo], predicate: Expr | None,
                    partition_key: PartitionKey, primary_key: Sequence[tuple[str, str]],
                    skip_indexes: Sequence[SkipIndex] = (), column_types: Mapping[str, str] | None = None, *,
                    columns: Sequence[str] | None = None, projections: Sequence[Projection] = ()
                    ) -> tuple[list[PartPlan], str | None]:
    """`plan_parts`, and the projection the plan reads through (None: the parts' own rows)."""
    plans = [PartPlan(reader.part, info.partition_id, reader.existing_rows, reader.n_granules, [])
             for reader, info in zip(readers, infos, strict=True)]
    candidates = [i for i, reader in enumerate(readers) if reader.n_granules]
    if predicate is not None and partition_key.is_partitioned and candidates:
        wanted = columns_of(predicate)
        values = [readers[i].partition_values(partition_key.result_types) for i in candidates]
        minmax = [{c: readers[i].minmax(c) for c in partition_key.columns if c in wanted} for i in candidates]
        may = may_match_partitions(predicate, partition_key, values, minmax)
        for i in (i for i, keep in zip(candidates, may.tolist(), strict=True) if not keep):
            plans[i].pruned_by = "partition"
        candidates = [i for i, keep in zip(candidates, may.tolist(), strict=True) if keep]
    if predicate is not None and primary_key and candidates:
        key_types = [type_text for _, type_text in primary_key]
        ranges = granule_ranges_of_parts(predicate, list(primary_key),
                                         [readers[i].primary_index(key_types) for i in candidates],
                                         [readers[i].n_granules for i in candidates])
        for i, part_ranges in zip(candidates, ranges, strict=True):
            plans[i].ranges = merge_ranges(part_ranges)
            if not plans[i].ranges:
                plans[i].pruned_by = "primary key"
    else:
        for i in candidates:
            plans[i].ranges = [(0, readers[i].n_granules)]
    usable = [index for index in skip_indexes if relevant(index, predicate)]
    if predicate is not None and usable and column_types is not None:
        for i in candidates:
            for index in usable:
                if not plans[i].ranges:
                    break
                mask = _index_granules(index, readers[i], predicate, column_types)
                if mask is None:
                    continue
                before = plans[i].granules_read
                plans[i].ranges = _ranges_within(plans[i].ranges, mask)
                if before - plans[i].granules_read:
                    plans[i].skipped_by_index[index.name] = before - plans[i].granules_read
                if not plans[i].ranges:
                    plans[i].pruned_by = f"index {index.name}"
    chosen = None
    if predicate is not None and projections and column_types is not None and candidates:
        names = list(columns) if columns is not None else list(column_types)
        needed = set(names) | columns_of(predicate)
        chosen = projection_reads.use_projections(plans, readers, predicate, needed, projections, dict(column_types))
    return plans, chosen


def _ranges_within(ranges: Sequence[GranuleRange], mask: np.ndarray) -> list[GranuleRange]:
    """The granules of `ranges` that `mask` (one bool per granule of the part) keeps, as ranges."""
    keep = np.zeros(len(mask), dtype=bool)
    for begin, end in ranges:
        keep[begin:end] = True
    keep &= mask
    padded = np.concatenate(([False], keep, [False]))
    starts = np.flatnonzero(~padded[:-1] & padded[1:])
    ends = np.flatnonzero(padded[:-1] & ~padded[1:])
    return [(int(b), int(e)) for b, e in zip(starts.tolist(), ends.tolist())]


def _index_granules(index: SkipIndex, reader: PartReader, predicate: Expr,
                    column_types: Mapping[str, str]) -> np.ndarray | None:
    """Per data granule of the part: whether skip index `index` says it may hold a matching row
    (None: the part has no such index, or its type/columns are not ones we check)."""
    data = reader.skip_index(index.name)
    if data is None:
        return None
    granules = reader.n_granules
    count = -(-granules // index.granularity)
    types = [column_types[c] for c in index.columns]
    where = f"{reader.location}/skp_idx_{index.name}"
    if index.type == "minmax":
        bounds = minmax_granules(data, types, count, where)
        may = minmax_may_match(index, types, bounds, predicate, count)
    elif index.type == "set":
        if any(not _plain_set_type(t) for t in types):
            return None
        may = set_may_match(index, set_granules(data, types, count, where), predicate)
    elif index.type == "bloom_filter":
        bits, hashes = bloom_filter_parameters(index.arguments[0] if index.arguments else 0.025)
        buf, starts, sizes = bloom_granules(data, len(types), count, bits, where)

        def contains(position: int, value: object) -> np.ndarray | None:
            value_hash = bloom_value_hash(value, types[position])
            if value_hash is None:
                return None
            # A filter of 0 bytes (a granule of empty arrays) cannot be probed: the granule may match.
            positions = bloom_positions(value_hash, hashes, sizes[:, position] * 8)
            found = bits_set(buf, starts[:, position], positions).all(axis=0)
            return found | (sizes[:, position] == 0)

        may = bloom_may_match(index, types, contains, predicate, count)
    else:
        if any(not _is_string_type(t) for t in types):
            return None
        size, hashes, seed = (int(a) for a in index.arguments[-3:])
        filters = text_bloom_granules(data, len(types), count, size, where)

        def text_contains(position: int, term: bytes) -> np.ndarray:
            return text_bloom_contains(filters[:, position, :], term, hashes, seed)

        may = text_may_match(index, text_contains, predicate, count)
    return np.repeat(may, index.granularity)[:granules]


def _plain_set_type(type_text: str) -> bool:
    for wrapper in ("LowCardinality(", "Nullable("):
        if type_text.startswith(wrapper) and type_text.endswith(")"):
            type_text = type_text[len(wrapper):-1]
    return not type_text.startswith(("Nullable", "LowCardinality", "Array", "Map", "Tuple", "Variant",
                                     "Dynamic", "JSON", "Object", "Nested"))


def _is_string_type(type_text: str) -> bool:
    return type_text in ("String", "LowCardinality(String)") or type_text.startswith("FixedString(")


def split_tasks(reader: PartReader, ranges: Sequence[GranuleRange], target_rows: int,
                projection: str | None = None, fallback: Sequence[GranuleRange] = ()) -> list[ReadTask]:
    """Cut a part's ranges into tasks of about `target_rows` rows, at granule boundaries (a task
    ends at the first granule that reaches a multiple of `target_rows` rows; one granule bigger than
    that is a task of its own). Vectorised: a part may have millions of granules.

    With `projection`, `ranges` are granules of that projection of the part; the first task carries
    `fallback` (the part's own granules the tasks stand for, see ReadTask)."""
    if projection is not None:
        held = split_tasks(projection_reads.projection_reader(reader, projection), ranges, target_rows)
        return [replace(task, projection=projection, fallback=tuple(fallback) if i == 0 else ())
                for i, task in enumerate(held)]
    if not ranges:
        return []
    starts = reader.granule_starts
    total = sum(int(starts[end] - starts[begin]) for begin, end in ranges)
    if total <= target_rows:  # the usual case of a key range: the whole of it is one task
        return [ReadTask(reader.part, tuple((int(begin), int(end)) for begin, end in ranges), total)] if total else []
    if len(ranges) == 1:
        begin, end = ranges[0]
        granules = np.arange(begin, end, dtype=np.int64)
    else:
        granules = np.concatenate([np.arange(begin, end, dtype=np.int64) for begin, end in ranges])
    if len(granules) == 0:
        return []
    rows = reader.granule_rows[granules]
    ends = np.cumsum(rows)
    # The task of a granule: how many whole targets the rows before it fill.
    task_of = (ends - rows) // max(1, target_rows)
    # A new range where granules stop being consecutive or a new task starts.
    breaks = np.flatnonzero((np.diff(granules) != 1) | (np.diff(task_of) != 0)) + 1
    run_starts = np.concatenate(([0], breaks))
    run_ends = np.concatenate((breaks, [len(granules)]))
    tasks: list[ReadTask] = []
    current: list[GranuleRange] = []
    current_rows = 0
    current_task = task_of[0]
    for first, last in zip(run_starts.tolist(), run_ends.tolist()):
        if task_of[first] != current_task:
            tasks.append(ReadTask(reader.part, tuple(current), current_rows))
            current, current_rows, current_task = [], 0, task_of[first]
        current.append((int(granules[first]), int(granules[last - 1]) + 1))
        current_rows += int(ends[last - 1] - ends[first] + rows[first])
    tasks.append(ReadTask(reader.part, tuple(current), current_rows))
    return tasks


def read_task(reader: PartReader, task: ReadTask, columns: Sequence[str], predicate: Expr | None,
              schema: pa.Schema, column_types: Mapping[str, str] | None = None,
              patches: PatchSet | None = None) -> pa.Table:
    """Read one task's rows, filtered exactly by `predicate`, as `schema` (selected columns).

    `column_types` (the table's columns) lets parts written before a column was added serve it.
    `patches` (the table's patch parts) apply the task's lightweight UPDATEs before the filter, as
    ClickHouse applies them before WHERE."""
    needed = list(columns)
    if predicate is not None:
        needed += [c for c in sorted(columns_of(predicate)) if c not in needed]
    projection = task.projection
    if projection is not None:
        if task.patches:
            # A patch names rows by their place in the part: read the part's own granules instead.
            if not task.fallback:
                return schema.empty_table()
            task = ReadTask(task.part, task.fallback, 0, task.patches)
        else:
            reader = projection_reads.projection_reader(reader, projection)
    if patches is not None and task.patches and patches.changes(task.patches, needed):
        table = patches.read(reader, task.ranges, needed, column_types, task.patches)
    else:
        table = reader.read(needed, task.ranges, column_types)
    if predicate is not None:
        table = filter_table(table, predicate)
    table = table.select(list(columns))
    return table.cast(schema) if table.schema != schema else table


def iter_batches(table: pa.Table, max_rows: int = 1 << 16) -> Iterator[pa.RecordBatch]:
    yield from table.to_batches(max_chunksize=max_rows)

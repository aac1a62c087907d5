"""A merge in bounded memory: a k-way merge over sorted parts that streams granule blocks column by
column and writes the new part as it goes (ClickHouse's vertical merge).

1. The key columns (those ORDER BY, PRIMARY KEY and PARTITION BY read) of every source part are read
   a block of granules at a time. The current blocks of all sources form a window; its rows are
   sorted and the window's rows up to the smallest "last row of a source's block" (among sources
   with more blocks to come) are final: no later row of any source sorts before them (with one
   integer-like key, each source's final rows are found by binary search and only they are
   sorted, so rows left for later windows are not sorted again). They are
   written to the new part (key columns and primary index), and which source each came from is
   appended to a file of one byte (two past 255 sources) per row. A source whose block is used up
   reads its next one; the other rows stay for the next window. Ties keep the sources' order, as
   the whole-part sort (stable) does.
2. Every other column, one at a time, is read from all sources a block at a time and put in merged
   order by that file of sources: within a source, rows keep their order.

The engines that combine rows of equal sorting keys stream as `merge_engine_streaming` describes
(`merge_engine_unkeyed` with an empty sorting key).

Memory holds a block per source and per column, not the parts: the output streams go to files as
they are compressed (PartStreamWriter's spill directory). Rows a lightweight DELETE removed are not
read. Granules are planned up front, as the whole-part merge plans them (MERGE_BLOCK_ROWS blocks of
the merged rows' average width), so the part's bytes are the same.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack

import numpy as np
import pyarrow as pa

from spark_mergetree.engine import engines
from spark_mergetree.engine.metadata import TableMetadata
from spark_mergetree.expressions.sort_key import integer_key_values, key_element_arrays, sort_indices
from spark_mergetree.format.compiled import lazy_njit
from spark_mergetree.format.json_text import stored_json_arrow
from spark_mergetree.format.part import PartFiles
from spark_mergetree.format.part_reader import PartReader
from spark_mergetree.format.part_writer import (
    MERGE_BLOCK_ROWS,
    PartitionValue,
    PartStreamWriter,
    in_memory_width,
    in_memory_width_of_type,
    plan_granules_of,
)
from spark_mergetree.format.skip_index_writer import columns_built_together
from spark_mergetree.format.streams import file_stem, stream_names
from spark_mergetree.format.types import Json, contains_type, parse_type

# Rows of a source read at a time (whole granules, at least this many unless the part ends).
READ_BLOCK_ROWS = 65_536
# Most blocks a LowCardinality column of a part is read in (see _blocks).
LOW_CARDINALITY_BLOCKS = 16
# The file of sources (one byte, two past 255 sources, per merged row) a merge leaves in its spill directory.
SOURCES_FILE = "merge_sources"
# Columns streamed side by side in the second phase.
COLUMN_THREADS = max(1, min(4, os.cpu_count() or 1))


def granule_blocks(reader: PartReader, rows: int | None = None) -> list[tuple[int, int]]:
    """A part's granules cut into ranges of at least `rows` (READ_BLOCK_ROWS) rows (the last may be
    shorter)."""
    rows = READ_BLOCK_ROWS if rows is None else rows
    starts = reader.granule_starts
    out = []
    begin = 0
    while begin < reader.n_granules:
        end = int(np.searchsorted(starts, starts[begin] + rows, side="left"))
        end = min(max(end, begin + 1), reader.n_granules)
        out.append((begin, end))
        begin = end
    return out


def _blocks(reader: PartReader, columns: Sequence[str], meta: TableMetadata) -> Iterator[pa.Table]:
    """A part's rows (those not deleted) of `columns`, a block of granules at a time. A block of a
    LowCardinality column is read with its `.dict` stream from the block's mark to the stream's end
    (a granule's dictionary may be written after it): such columns are read in at most
    LOW_CARDINALITY_BLOCKS blocks, so a big dictionary is not decompressed again for every block."""
    rows = None
    if any("LowCardinality" in meta.column_types.get(name, "") for name in columns):
        rows = max(READ_BLOCK_ROWS, -(-reader.rows // LOW_CARDINALITY_BLOCKS))
    for begin, end in granule_blocks(reader, rows):
        block = reader.read(list(columns), [(begin, end)], meta.column_types, stored_json=True)
        if block.num_rows:
            yield block


def stored_bytes(reader: PartReader, name: str) -> int | None:
    """Uncompressed bytes of a column's streams in a Wide part (None when unknown)."""
    checksums = reader.checksums
    if checksums is None or reader.is_compact or name not in reader.types:
        return None
    total = 0
    for stream in stream_names(reader.types[name], name, reader.serialization.string_sizes,
                               reader.serialization.sparse_spec(name)):
        entry = checksums.files.get(file_stem(stream) + ".bin")
        if entry is None:
            return None
        total += entry.uncompressed_size
    return total


def plan_merged_granules(readers: Sequence[PartReader], meta: TableMetadata, rows: int,
                         exact: bool = False) -> tuple[np.ndarray, int]:
    """(granule rows, in-memory bytes) of the merged part, as the whole-part merge plans them.

    Fixed-width columns are counted from their type. Variable-width ones need their values measured
    only when it could matter (or `exact` bytes are wanted): if a generous bound from the sources'
    stored sizes (checksums.txt) already leaves every granule at `index_granularity` rows, the plan
    is that of fixed widths (and the bytes returned are that bound)."""
    settings = meta.writer_settings
    fixed = 0
    variable = []
    for name, type_text in meta.columns:
        width = in_memory_width_of_type(parse_type(type_text), meta.arrow_schema.field(name).type, rows)
        if width is None:
            variable.append(name)
        else:
            fixed += width
    if not variable:
        return plan_granules_of(rows, fixed, settings, block_rows=MERGE_BLOCK_ROWS), fixed
    bound = fixed
    for name in variable:
        stored = [stored_bytes(r, name) for r in readers]
        if any(s is None for s in stored):
            bound = -1
            break
        bound += 2 * sum(s or 0 for s in stored) + 17 * sum(r.rows for r in readers) + 1024
    low = plan_granules_of(rows, fixed, settings, block_rows=MERGE_BLOCK_ROWS)
    if bound >= 0 and not exact:
        high = plan_granules_of(rows, bound, settings, block_rows=MERGE_BLOCK_ROWS)
        if np.array_equal(low, high):
            return low, bound
    total = fixed
    for name in variable:
        dt = parse_type(dict(meta.columns)[name])
        for reader in readers:
            for block in _blocks(reader, [name], meta):
                total += in_memory_width(dt, block.column(0))
    return plan_granules_of(rows, total, settings, block_rows=MERGE_BLOCK_ROWS), total


class _Source:
    """One source part's key blocks: the rows of its current block not yet merged, and whether
    another block follows (its next block is read ahead)."""

    def __init__(self, blocks: Iterator[pa.Table]) -> None:
        self._blocks = blocks
        self._following = next(blocks, None)
        self.current: pa.Table | None = None
        self.more = True
        self.advance()

    def extend(self) -> None:
        """Add the next block to the current one's rows not yet merged."""
        assert self.current is not None and self._following is not None
        self.current = pa.concat_tables([self.current, self._following])
        self._following = next(self._blocks, None)
        self.more = self._following is not None

    def advance(self) -> None:
        """Move to the next block (`current` None once the part is used up)."""
        self.current, self._following = self._following, None
        if self.current is not None:
            self._following = next(self._blocks, None)
        self.more = self._following is not None


def merge_streaming(readers: Sequence[PartReader], meta: TableMetadata, keys: set[str], rows: int,
                    granules: np.ndarray, partition: PartitionValue | None, spill_dir: str) -> PartFiles:
    """The merged part of `readers` (an ordinary MergeTree's merge: no rows combined), written
    block by block into `spill_dir` (see the module's description). `keys`: the key columns;
    `rows`: the rows the sources hold (not deleted); `granules`: the part's granule plan."""
    names = [n for n, _ in meta.columns]
    keys = _with_index_partners(meta, keys)
    key_names = [n for n in names if n in keys] if meta.sorting_key else []
    writer = PartStreamWriter(meta.columns, granules, [t for _, t in meta.primary_key_types], partition,
                              meta.writer_settings, spill_dir=spill_dir)
    source_dtype = _source_dtype(readers)
    order_path = os.path.join(spill_dir, SOURCES_FILE)
    with open(order_path, "wb") as order_file:
        if key_names:
            def emit(merged: pa.Table, owner: np.ndarray) -> None:
                for name in key_names:
                    writer.write(name, merged.column(name))
                writer.primary_key([values for _, values in meta.primary_key_values(merged)])
                owner.astype(source_dtype).tofile(order_file)

            merge_sorted_blocks([_blocks(r, key_names, meta) for r in readers], meta.sorting_key, meta.column_types, emit,
                                whole_keys=False)
        else:  # ORDER BY tuple(): the parts one after another
            for number, reader in enumerate(readers):
                np.full(reader.existing_rows, number, source_dtype).tofile(order_file)
    _gather_rest(readers, meta, [n for n in names if n not in key_names], order_path, None, source_dtype, writer)
    return writer.finish()


def merge_engine_streaming(readers: Sequence[PartReader], meta: TableMetadata, keys: set[str],
                           part_numbers: np.ndarray, partition: PartitionValue | None,
                           spill_dir: str) -> PartFiles | None:
    """The merged part of `readers` of a table whose engine combines rows of equal sorting keys
    (engines.py), a Wide part written block by block into `spill_dir`; None when no row is kept
    (the caller merges in memory). `keys`: the key and the engine's control columns;
    `part_numbers`: per source, its number if its level is above 0, else -1 (engines.part_sources).

    A window emits only the rows whose sorting key is below the smallest last key of the sources with
    blocks to come, so every run of equal keys is whole in one window, and the engine's plan
    (engines.plan_rows) is applied window by window. The key and control columns of the kept rows
    (summed and aggregated values included) go to a spill file, which source every consumed row came
    from to one file and whether it is kept to another; the granules are planned once the kept rows
    are counted (as the whole-part merge plans them), then the key columns are written from the spill
    and every other column is gathered by the sources' file, keeping the kept rows (for Summing and
    Aggregating tables the first row of each key)."""
    engine = meta.merging_engine
    assert engine is not None and meta.sorting_key
    names = [n for n, _ in meta.columns]
    key_names = [n for n in names if n in _with_index_partners(meta, keys)]
    source_dtype = _source_dtype(readers)
    order_path = os.path.join(spill_dir, SOURCES_FILE)
    keep_path = os.path.join(spill_dir, "merge_kept")
    keys_path = os.path.join(spill_dir, "merge_keys.arrow")
    types = {name: parse_type(text) for name, text in meta.columns}
    widths = {name: 0 for name in key_names  # variable-width key columns, measured over the kept rows
              if in_memory_width_of_type(types[name], meta.arrow_schema.field(name).type, 0) is None}
    kept_rows = 0
    schema = pa.schema([meta.arrow_schema.field(n).with_nullable(True) for n in key_names])
    with open(order_path, "wb") as order_file, open(keep_path, "wb") as keep_file, \
            pa.OSFile(keys_path, "wb") as sink, pa.ipc.new_file(sink, schema) as key_file:
        def emit(merged: pa.Table, owner: np.ndarray) -> None:
            nonlocal kept_rows
            plan = engines.plan_rows(engine, merged, meta.sorting_key, meta.column_types, final=False,
                                     sources=part_numbers[owner])
            out = plan.apply(merged.select(key_names))
            kept = np.zeros(merged.num_rows, np.uint8)
            kept[plan.rows] = 1
            owner.astype(source_dtype).tofile(order_file)
            kept.tofile(keep_file)
            if out.num_rows:
                key_file.write_table(out.cast(schema))
                kept_rows += out.num_rows
                for name in widths:
                    widths[name] += in_memory_width(types[name], out.column(name))

        merge_sorted_blocks([_blocks(r, key_names, meta) for r in readers], meta.sorting_key, meta.column_types, emit,
                            whole_keys=True)
    if not kept_rows:
        return None
    total = 0
    for name in names:
        width = in_memory_width_of_type(types[name], meta.arrow_schema.field(name).type, kept_rows)
        if width is None:  # measured: a key column over the kept rows, another over the sources' rows
            width = widths[name] if name in widths else sum(
                in_memory_width(types[name], block.column(0)) for r in readers for block in _blocks(r, [name], meta))
        total += width
    granules = plan_granules_of(kept_rows, total, meta.writer_settings, block_rows=MERGE_BLOCK_ROWS)
    writer = PartStreamWriter(meta.columns, granules, [t for _, t in meta.primary_key_types], partition,
                              meta.writer_settings, spill_dir=spill_dir)
    with pa.OSFile(keys_path, "rb") as source:  # read, not mapped: its pages would stay resident
        reader = pa.ipc.open_file(source)
        for index in range(reader.num_record_batches):
            batch = pa.Table.from_batches([reader.get_batch(index)])
            for name in key_names:
                writer.write(name, batch.column(name))
            writer.primary_key([values for _, values in meta.primary_key_values(batch)])
    os.remove(keys_path)
    _gather_rest(readers, meta, [n for n in names if n not in key_names], order_path, keep_path, source_dtype, writer)
    return writer.finish()


def merge_engine_unkeyed(readers: Sequence[PartReader], meta: TableMetadata, keys: set[str],
                         part_numbers: np.ndarray, partition: PartitionValue | None,
                         spill_dir: str) -> PartFiles | None:
    """`merge_engine_streaming` for a table with an empty sorting key (ORDER BY tuple()): the rows
    the in-memory merge keeps (engines.plan_rows over the parts' rows one after another), a Wide part
    written block by block into `spill_dir`; None when no row is kept.

    The key and control columns (`keys`) are read a block at a time, part after part. Summing and
    Aggregating tables keep or drop each row by itself (every row is a key of its own). For Replacing
    and Collapsing tables all rows are one key, save that each row of the first part, if its level is
    above 0 (`part_numbers`), starts a run of its own (plan_rows's `sources`): those runs of one row
    are kept, and the one run left (from that part's last row on) is followed by engines.OneKey,
    which names the rows it keeps at the end. Whether each row is kept goes to a file (that run's
    rows patched at the end) beside the file of sources; the granules are planned once the kept rows
    are counted, and every column is gathered by those files."""
    engine = meta.merging_engine
    assert engine is not None and not meta.sorting_key
    names = [n for n, _ in meta.columns]
    key_names = [n for n in names if n in keys]
    source_dtype = _source_dtype(readers)
    order_path = os.path.join(spill_dir, SOURCES_FILE)
    keep_path = os.path.join(spill_dir, "merge_kept")
    one_key = engines.OneKey(engine) if engine.name in ("ReplacingMergeTree", "CollapsingMergeTree") else None
    first = next((number for number, reader in enumerate(readers) if reader.existing_rows), None)
    if first is None:
        return None
    leading = one_key is not None and part_numbers[first] >= 0
    position = start = kept_rows = 0  # rows read; where the run left starts; rows kept so far
    with open(order_path, "wb") as order_file, open(keep_path, "wb") as keep_file:
        for number, reader in enumerate(readers):
            np.full(reader.existing_rows, number, source_dtype).tofile(order_file)
            for block in _blocks(reader, key_names, meta):
                n = block.num_rows
                kept = np.zeros(n, np.uint8)
                if one_key is None:
                    kept[engines.plan_rows(engine, block, [], meta.column_types, final=False).rows] = 1
                elif leading and number == first:  # runs of one row, but the last, which starts the run left
                    kept[:] = 1
                    one_key = engines.OneKey(engine)
                    one_key.add(block.slice(n - 1))
                    start = position + n - 1
                else:
                    one_key.add(block)
                kept.tofile(keep_file)
                kept_rows += int(kept.sum())
                position += n
    if one_key is not None:
        with open(keep_path, "r+b") as keep_file:
            if leading:
                keep_file.seek(start)
                keep_file.write(b"\0")
                kept_rows -= 1
            for row in one_key.kept().tolist():
                keep_file.seek(start + row)
                keep_file.write(b"\1")
                kept_rows += 1
    if not kept_rows:
        return None
    total = 0
    for name in names:
        dt = parse_type(meta.column_types[name])
        width = in_memory_width_of_type(dt, meta.arrow_schema.field(name).type, kept_rows)
        if width is None:  # measured: a key column over the kept rows, another over the sources' rows
            width = _kept_width(readers, meta, name, keep_path if name in key_names else None)
        total += width
    granules = plan_granules_of(kept_rows, total, meta.writer_settings, block_rows=MERGE_BLOCK_ROWS)
    writer = PartStreamWriter(meta.columns, granules, [t for _, t in meta.primary_key_types], partition,
                              meta.writer_settings, spill_dir=spill_dir)
    _gather_rest(readers, meta, names, order_path, keep_path, source_dtype, writer)
    return writer.finish()


def _kept_width(readers: Sequence[PartReader], meta: TableMetadata, name: str, keep_path: str | None) -> int:
    """In-memory bytes of column `name` over the sources' rows (with `keep_path`, the kept ones)."""
    dt = parse_type(meta.column_types[name])
    total = 0
    with ExitStack() as stack:
        keep_file = stack.enter_context(open(keep_path, "rb")) if keep_path else None
        for reader in readers:
            for block in _blocks(reader, [name], meta):
                values = block.column(0)
                if keep_file is not None:
                    values = values.filter(pa.array(np.fromfile(keep_file, np.uint8, block.num_rows).astype(bool)))
                total += in_memory_width(dt, values)
    return total


def _with_index_partners(meta: TableMetadata, keys: set[str]) -> set[str]:
    """`keys` and the other columns of every index that needs its columns side by side and holds a
    key column: the key columns are written first, window by window, so those go with them."""
    keys = set(keys)
    grown = True
    while grown:  # an added column may share another such index with a column not added yet
        grown = False
        for spec in meta.writer_settings.skip_indexes:
            if spec.built_from_rows and keys & set(spec.columns) and not set(spec.columns) <= keys:
                keys |= set(spec.columns)
                grown = True
    return keys


def _source_dtype(readers: Sequence[PartReader]) -> type[np.unsignedinteger]:
    return np.uint8 if len(readers) <= 256 else np.uint16


def _gather_rest(readers: Sequence[PartReader], meta: TableMetadata, rest: list[str], order_path: str,
                 keep_path: str | None, source_dtype: type[np.unsignedinteger], writer: PartStreamWriter) -> None:
    """Write the columns `rest` one at a time (several on threads); columns an index needs side by
    side (skip_index_writer.columns_built_together) are gathered together, block by block."""
    together = columns_built_together(meta.writer_settings.skip_indexes) & set(rest)
    groups = [[name] for name in rest if name not in together]
    if together:
        groups.append([name for name in rest if name in together])
    if groups:
        with ThreadPoolExecutor(max_workers=min(COLUMN_THREADS, len(groups))) as pool:
            list(pool.map(lambda names: _gather_columns(readers, meta, names, order_path, keep_path, source_dtype,
                                                        writer), groups))


def merge_sorted_blocks(blocks: Sequence[Iterator[pa.Table]], sort_key: Sequence[str], column_types: Mapping[str, str],
                        emit: Callable[[pa.Table, np.ndarray], None], *, whole_keys: bool) -> None:
    """Hand `emit` the rows of sources (each its blocks, sorted by `sort_key`) in merged order, a
    window at a time, with the source of each row; ties keep the sources' order. With `whole_keys`,
    a window ends before the first row of the key its bound holds, so all rows of one sorting key
    come in one window."""
    sort_key, column_types = list(sort_key), dict(column_types)
    sources = [_Source(source) for source in blocks]
    while True:
        active = [i for i, s in enumerate(sources) if s.current is not None]
        if not active:
            return
        tables: list[pa.Table] = [sources[i].current for i in active]
        bounded = [j for j, i in enumerate(active) if sources[i].more]
        prefixes = _emitted_prefixes(tables, bounded, sort_key, column_types, whole_keys=whole_keys) if bounded else None
        if prefixes is not None:
            tables = [t.slice(0, n) for t, n in zip(tables, prefixes, strict=True)]
        lengths = np.array([t.num_rows for t in tables], np.int64)
        window = pa.concat_tables(tables) if len(tables) > 1 else tables[0]
        order = sort_indices(sort_key, window, column_types).to_numpy().astype(np.intp)  # (uint64 indexes cast at each use)
        ends = np.cumsum(lengths)
        merged = window.take(pa.array(order))
        if bounded and prefixes is None:
            rank = np.empty(len(order), np.int64)
            rank[order] = np.arange(len(order))
            last_ranks = np.array([rank[ends[j] - 1] for j in bounded])
            cut = int(last_ranks.min()) + 1
            if whole_keys:
                starts = np.flatnonzero(engines.group_starts(key_element_arrays(sort_key, merged, column_types),
                                                             len(order)))
                # the first row of the bound's key; a window holding nothing below it reads further
                cut = int(starts[np.searchsorted(starts, cut - 1, side="right") - 1])
                if not cut:
                    second = int(np.searchsorted(starts, 0, side="right"))
                    group_end = int(starts[second]) if second < len(starts) else len(order)
                    for j, last in zip(bounded, last_ranks.tolist(), strict=True):
                        if last < group_end:
                            sources[active[j]].extend()
                    continue
        else:
            cut = len(order)
        owner = np.repeat(np.arange(len(active), dtype=np.int32), lengths)[order[:cut]]
        emit(merged.slice(0, cut) if cut < len(order) else merged, np.asarray(active, np.int64)[owner])
        used = np.bincount(owner, minlength=len(active))
        for j, i in enumerate(active):
            source = sources[i]
            assert source.current is not None
            if used[j] == source.current.num_rows:
                source.advance()
            elif used[j]:
                source.current = source.current.slice(int(used[j]))


def _emitted_prefixes(tables: list[pa.Table], bounded: list[int], sort_key: list[str], column_types: dict[str, str],
                      *, whole_keys: bool) -> list[int] | None:
    """How many leading rows of each source's current block (`tables`) the window emits, when the
    sorting key is one integer-like element (sort_key.integer_key_values), found by binary search:
    the window then sorts only those rows, not the rows left for later windows again and again.
    The bound is the smallest last key of the sources with blocks to come (`bounded`, indexes into
    `tables`), its row the last of the first such source holding it; ties sort by source, so rows
    equal to it are emitted from the sources up to that one. With `whole_keys`, no row equal to it.
    None where the key is another, or nothing would be emitted (the window reads further)."""
    values = [integer_key_values(sort_key, t, column_types) if t.num_rows else None for t in tables]
    if any(v is None for v in values):
        return None
    lasts = [values[j][-1] for j in bounded]  # type: ignore[index]
    bound = min(lasts)
    first = bounded[lasts.index(bound)]
    counts = []
    for j, v in enumerate(values):
        assert v is not None
        if whole_keys or j > first:
            counts.append(int(np.searchsorted(v, bound, side="left")))
        else:
            counts.append(len(v) if j == first else int(np.searchsorted(v, bound, side="right")))
    return counts if sum(counts) else None


class _ColumnSource:
    """One source part's values of one column, handed out in order a few rows at a time."""

    def __init__(self, reader: PartReader, name: str, meta: TableMetadata) -> None:
        self._blocks = _blocks(reader, [name], meta)
        self._held: list[pa.Array] = []
        self._count = 0

    def take(self, n: int) -> list[pa.Array]:
        while self._count < n:
            block = next(self._blocks)
            self._held.extend(block.column(0).chunks)
            self._count += block.num_rows
        out: list[pa.Array] = []
        need = n
        while need:
            head = self._held[0]
            if len(head) <= need:
                out.append(self._held.pop(0))
                need -= len(head)
            else:
                out.append(head.slice(0, need))
                self._held[0] = head.slice(need)
                need = 0
        self._count -= n
        return out


def _gather_columns(readers: Sequence[PartReader], meta: TableMetadata, names: list[str], order_path: str,
                    keep_path: str | None, source_dtype: type[np.unsignedinteger], writer: PartStreamWriter) -> None:
    """Write columns `names` of the merged part: the sources' values in the order the file of
    sources gives, a block at a time (with `keep_path`, only the rows that file marks kept)."""
    sources = {name: [_ColumnSource(r, name, meta) for r in readers] for name in names}
    arrow_types = {name: stored_json_arrow(parse_type(meta.column_types[name]))
                   if contains_type(parse_type(meta.column_types[name]), Json)
                   else meta.arrow_schema.field(name).type for name in names}
    with open(order_path, "rb") as order_file, ExitStack() as stack:
        keep_file = stack.enter_context(open(keep_path, "rb")) if keep_path else None
        while True:
            owner = np.fromfile(order_file, dtype=source_dtype, count=READ_BLOCK_ROWS)
            kept = np.fromfile(keep_file, dtype=np.uint8, count=len(owner)).astype(bool) if keep_file else None
            if not len(owner):
                return
            counts = np.bincount(owner, minlength=len(readers))
            position = _grouped_positions(owner, counts)
            if kept is not None:
                position = position[kept]
            for name in names:
                chunks = [chunk for number, count in enumerate(counts.tolist()) if count
                          for chunk in sources[name][number].take(count)]
                grouped = pa.chunked_array(chunks, arrow_types[name]).combine_chunks()
                writer.write(name, grouped.take(pa.array(position)))


def merged_offsets(readers: Sequence[PartReader], spill_dir: str) -> np.ndarray:
    """After `merge_streaming` into `spill_dir`: for each row the sources hold (sources in order,
    each one's rows not deleted, in its order), its offset in the merged part (the mapping
    ClickHouse's merge keeps to translate the offsets projections store)."""
    owner = np.fromfile(os.path.join(spill_dir, SOURCES_FILE), dtype=_source_dtype(readers))
    return offsets_of_positions(_grouped_positions(owner, np.bincount(owner, minlength=len(readers))))


def offsets_of_positions(positions: np.ndarray) -> np.ndarray:
    """The inverse of a merge's order: `positions[j]` is the (concatenated sources') row that
    becomes merged row j; the result gives each such row its merged offset j."""
    offsets = np.empty(len(positions), np.uint64)
    offsets[positions] = np.arange(len(positions), dtype=np.uint64)
    return offsets


@lazy_njit(nogil=True)
def _grouped_positions(owner: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """For each merged row, where it is among the rows grouped by source (sources in order, each
    source's rows in their order): the sources' values concatenated, taken at these positions, are
    in merged order. One pass, without the GIL (the columns are gathered on threads)."""
    next_of = np.empty(len(counts), np.int64)
    total = 0
    for source in range(len(counts)):
        next_of[source] = total
        total += counts[source]
    position = np.empty(len(owner), np.int64)
    for row in range(len(owner)):
        source = owner[row]
        position[row] = next_of[source]
        next_of[source] += 1
    return position

"""A merged part's projections in memory independent of the parts' size (engine/merge.py asks).

ClickHouse merges a projection every source part holds like the parts of a table of its own; one a
source lacks it builds from rows a block at a time into temporary projection parts, which it then
merges. So do we, by runs: a run is a projection part on disk, sorted by the projection's key. A
source gives its projection part as one run when it holds the projection whole (no row deleted),
else its rows cut into runs of about RUN_BYTES, each built as the projection part of those rows
(`projections.projection_files`: a normal projection's rows sorted stably by its key; an aggregate
projection's states, one row per group) and written into the merge's spill directory. Runs keep
the sources' order, so merging them with ties in run order gives what building the projection from
all sources' rows at once gives (the in-memory way, `merge.py merge_parts`, which stays for inputs
under RUN_BYTES: the bytes ClickHouse writes for small parts).

* A normal projection's runs are merged by its key like parts (`normal_runs`; merge.py merges them
  with the streaming merge). When every source holds it whole they are those projection parts,
  whatever their size.
* An aggregate projection's runs are merged by its GROUP BY key a window of whole keys at a time
  (`merged_aggregate`; merge_stream.merge_sorted_blocks), each key's states combined in run order
  as ClickHouse merges states (`projections.combined_states`). The combined rows go to an Arrow
  spill file; once counted, their granules are planned and they are written as a Wide part.

A projection of offsets (`_parent_part_offset`) is not merged here: its offsets must be translated
into the merged part's, which merge.py does in memory (`_offset_rows`).

Memory holds one run being built (its rows, sorted, and its encoded part) or a block per run, not
the projection.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
from collections.abc import Callable, Iterator, Sequence

import pyarrow as pa

from spark_mergetree.engine import merge_stream, projections
from spark_mergetree.engine.metadata import TableMetadata
from spark_mergetree.expressions.ddl import Projection
from spark_mergetree.expressions.key_condition import key_columns_for
from spark_mergetree.expressions.sort_key import key_element_arrays
from spark_mergetree.format.part import COMPACT_DATA_FILE, PartFiles
from spark_mergetree.format.part_reader import PartReader
from spark_mergetree.format.part_writer import (
    MERGE_BLOCK_ROWS,
    PartStreamWriter,
    in_memory_width,
    plan_granules_of,
)
from spark_mergetree.format.types import parse_type
from spark_mergetree.storage.policy import StoragePolicy
from spark_mergetree.storage.table_parts import TableParts

# A projection's input (the uncompressed bytes of what the sources give it) above which it is built
# by runs; also about the decoded rows one run is built from.
RUN_BYTES = 16 << 20
# Most runs merged at once.
FAN_IN = 8


Merge = Callable[[Sequence[PartReader], str], PartFiles]


def normal_runs(projection: Projection, readers: Sequence[PartReader], meta: TableMetadata, directory: str,
                merge: Merge) -> list[PartReader] | None:
    """The runs to merge into a normal projection's part, in order: every source's projection part
    when all hold it whole; else, for an input above RUN_BYTES, those and runs built from the other
    sources' rows in `directory`, more than FAN_IN of them merged (`merge(runs, spill directory)`)
    group by group first. None: build it in memory from the sources' rows."""
    wanted = projection.columns([n for n, _ in meta.columns])
    held = [_held(reader, projection, wanted) for reader in readers]
    if all(h is not None for h in held):
        return [h for h in held if h is not None]
    runs = _runs(projection, readers, held, meta, wanted, directory)
    return None if runs is None else _fewer(runs, merge, directory)


def merged_aggregate(projection: Projection, readers: Sequence[PartReader], meta: TableMetadata,
                     directory: str) -> PartFiles | None:
    """An aggregate projection's part of the merge of `readers`, written into `directory` from runs
    (see the module's description); None for an input up to RUN_BYTES (built in memory)."""
    wanted = projections.state_columns(projection, meta.column_types)
    held = [_held(reader, projection, wanted) for reader in readers]
    runs = _runs(projection, readers, held, meta, projections.projection_columns(projection, [n for n, _ in
                                                                                           meta.columns]), directory)
    if runs is None:
        return None

    def combine(group: Sequence[PartReader], spill_dir: str) -> PartFiles:
        return _combined(projection, group, meta, spill_dir)

    return combine(_fewer(runs, combine, directory), directory)


def _fewer(runs: list[PartReader], merge: Merge, directory: str) -> list[PartReader]:
    """At most FAN_IN runs, in order: while there are more, each FAN_IN consecutive ones are merged
    into one run (ClickHouse merges its temporary projection parts level by level too), so a merge
    reads a block of at most FAN_IN runs at once; the runs merged are removed (the disk holds about
    twice the projection at most)."""
    store = TableParts(StoragePolicy.single(directory))
    level = 0
    while len(runs) > FAN_IN:
        level += 1
        fewer = []
        for start in range(0, len(runs), FAN_IN):
            group = runs[start:start + FAN_IN]
            if len(group) == 1:
                fewer.extend(group)
                continue
            spill_dir = os.path.join(directory, f"merging_{level}_{start}")
            os.makedirs(spill_dir)
            name = f"all_{start + 1}_{start + len(group)}_{level}"
            store.write_part(name, merge(group, spill_dir).files)
            shutil.rmtree(spill_dir)  # (its files were copied into the run: mapped, they stay readable)
            for run in group:  # runs built here are done with (a source's projection part stays)
                if run.location == os.path.join(directory, run.part):
                    store.remove_part(run.part)
            fewer.append(PartReader(store, name, os.path.join(directory, name)))
        runs = fewer
    return runs


def _combined(projection: Projection, runs: Sequence[PartReader], meta: TableMetadata, directory: str) -> PartFiles:
    """The aggregate projection part of `runs` (each one's states sorted by the GROUP BY key, one row
    per group), each key's states combined in run order, written into `directory`."""
    wanted = projections.state_columns(projection, meta.column_types)
    columns = projections.aggregate_columns(projection, meta.column_types)
    types = {**meta.column_types, **dict(columns)}  # (the states' arguments: the table's columns)
    keys = projections.aggregate_key(projection, meta.column_types)
    spill_path = os.path.join(directory, "combined.arrow")
    rows = width = 0
    with pa.OSFile(spill_path, "wb") as sink:
        spill: list[pa.ipc.RecordBatchFileWriter] = []

        def emit(window: pa.Table, _sources: object) -> None:
            nonlocal rows, width
            combined = projections.combined_states(projection, window, types)
            if not spill:
                spill.append(pa.ipc.new_file(sink, combined.schema))
            spill[0].write_table(combined)
            rows += combined.num_rows
            width += sum(in_memory_width(parse_type(types[name]), combined.column(name)) for name, _ in columns)

        merge_stream.merge_sorted_blocks([_run_blocks(run, wanted, merge_stream.READ_BLOCK_ROWS // FAN_IN)
                                          for run in runs], keys, types, emit, whole_keys=True)
        for writer in spill:
            writer.close()
    settings = dataclasses.replace(meta.writer_settings, skip_indexes=())
    granules = plan_granules_of(rows, width, settings, block_rows=MERGE_BLOCK_ROWS)
    part = PartStreamWriter(columns, granules, [t for _, t in key_columns_for(keys, types)], None, settings,
                            spill_dir=directory)
    if rows:
        with pa.OSFile(spill_path, "rb") as source:  # read, not mapped: its pages would stay resident
            combined = pa.ipc.open_file(source)
            for index in range(combined.num_record_batches):
                batch = pa.Table.from_batches([combined.get_batch(index)])
                for name, _ in columns:
                    part.write(name, batch.column(name))
                part.primary_key(key_element_arrays(keys, batch, types))
    os.remove(spill_path)
    return part.finish()


def _held(reader: PartReader, projection: Projection, wanted: Sequence[str]) -> PartReader | None:
    """The source's projection part, if it holds the projection whole (no row deleted) with `wanted`."""
    if projection.name not in reader.projections or reader.existing_rows != reader.rows:
        return None
    held = reader.projection_reader(projection.name)
    return held if set(wanted) <= {name for name, _ in held.columns} else None


def _runs(projection: Projection, readers: Sequence[PartReader], held: Sequence[PartReader | None],
          meta: TableMetadata, names: list[str], directory: str) -> list[PartReader] | None:
    """The sources' runs in order (a held projection part, or runs built from the source's columns
    `names` into `directory`); None when the input is at most RUN_BYTES."""
    if sum(_input_bytes(h, None) if h is not None else _input_bytes(r, names)
           for r, h in zip(readers, held, strict=True)) <= RUN_BYTES:
        return None
    os.makedirs(directory, exist_ok=True)
    store = TableParts(StoragePolicy.single(directory))
    runs: list[PartReader] = []
    pending: list[pa.Table] = []

    def flush() -> None:
        if pending:
            files = projections.projection_files(projection, pa.concat_tables(pending), meta.columns,
                                                 meta.writer_settings, dict(meta.definition.settings))
            name = f"all_{len(runs) + 1}_{len(runs) + 1}_0"  # a part's name: merges read its level
            store.write_part(name, files.files)
            runs.append(PartReader(store, name, os.path.join(directory, name)))
            pending.clear()

    for reader, source in zip(readers, held, strict=True):
        if source is not None:
            flush()
            runs.append(source)
            continue
        for begin, end in merge_stream.granule_blocks(reader):
            pending.append(reader.read(names, [(begin, end)], meta.column_types))
            if sum(block.nbytes for block in pending) >= RUN_BYTES:
                flush()
    flush()
    return runs


def _run_blocks(run: PartReader, names: Sequence[str], rows: int) -> Iterator[pa.Table]:
    for begin, end in merge_stream.granule_blocks(run, rows):
        block = run.read(list(names), [(begin, end)])
        if block.num_rows:
            yield block


def _input_bytes(reader: PartReader, names: Sequence[str] | None) -> int:
    """Uncompressed bytes of a part's columns `names` (all with None): of their streams in a Wide
    part, of the whole part in a Compact one (small by definition)."""
    checksums = reader.checksums
    if checksums is None:
        return reader.rows * 1024  # unknown: taken as wide rows
    if reader.is_compact:
        entry = checksums.files.get(COMPACT_DATA_FILE)
        return entry.uncompressed_size if entry is not None else reader.rows * 1024
    columns = [n for n, _ in reader.columns] if names is None else names
    return sum(merge_stream.stored_bytes(reader, name) or 0 for name in columns)

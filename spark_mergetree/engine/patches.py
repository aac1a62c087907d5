"""Lightweight UPDATEs on read: which patch parts change a part's rows, and the values they give.

ClickHouse's `UPDATE t SET c = … WHERE …` writes patch parts (format/patch_part.py) and leaves the
updated parts alone; every read applies the patches. A patch part updates a data part when one of
its source parts, at a version above the data part's data version (its mutation number, else its
first block), is the data part or a part the data part was merged or mutated from. Its rows then
meet the part's rows by row identity (`_block_number`, `_block_offset`, which a merge keeps), and
for each updated column a row takes the value of the matching patch row of the highest version
among those above the part's data version (ClickHouse keeps a version per row and column and
applies a patch row only over a lower one). Merges and mutations materialise the patches up to
their version into the new part, whose higher data version then makes reads skip them; ours do
too, from `PatchSet.stored` (every stored row, the mask as patched) and `applied_version`
(engine/mutations.py, engine/patch_merge.py). Patch parts are ClickHouse's: the table takes them
from its directory, never from our commit log.

A patch row meets a row when their identities are equal and, as ClickHouse's key-ordered patches
compare them too, the sorting-key values the patch stores equal the row's. Keys cannot be updated, so
they disagree only where ClickHouse wrote a patch row that names no row: an UPDATE whose WHERE it read
through a projection stores the projection part's offsets beside the real row's key, and ClickHouse
then changes no row; neither do we. A DELETE in
`lightweight_update_force` mode patches the row mask `_row_exists` the same way. What this module
cannot apply exactly (a column whose type changed since the UPDATE, a part that stores only one of
the two identity columns) raises UnsupportedError naming the patch or the part.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from spark_mergetree.errors import UnsupportedError
from spark_mergetree.format.part_info import PartInfo
from spark_mergetree.format.part_reader import ROW_EXISTS_COLUMN, GranuleRange, PartReader, merge_ranges
from spark_mergetree.format.patch_part import PATCH_SYSTEM_COLUMNS, original_partition_id
from spark_mergetree.format.types import Json, contains_type, parse_type

BLOCK_NUMBER = "_block_number"
BLOCK_OFFSET = "_block_offset"
DATA_VERSION = "_part_data_version"
IDENTITY = (BLOCK_NUMBER, BLOCK_OFFSET)


def data_version(info: PartInfo) -> int:
    """The version of a part's rows: the mutation that rewrote it, else its first block."""
    return info.mutation or info.min_block


@dataclass
class _Patch:
    name: str
    reader: PartReader
    partition_id: str  # of the parts it updates
    columns: tuple[str, ...]  # updated columns
    keys: tuple[str, ...]  # sorting-key columns stored beside them (a row must match them too)
    sources: dict[PartInfo, int]  # source part → highest version of its patch rows
    stale: dict[str, str]  # updated column → why its values cannot be applied (its type is not the table's)
    rows: pa.Table | None = None  # identities, versions and updated values, once a read needs them

    def updates(self, info: PartInfo) -> bool:
        version = data_version(info)
        return info.partition_id == self.partition_id and any(
            high > version and info.contains(source) for source, high in self.sources.items())


class PatchSet:
    """Patch parts of a table (opened once; their rows loaded when a read first needs them).

    `opened` is the table's cache of opened patch parts by name, shared by its PatchSets (a read
    task names only the patch parts of its own part)."""

    def __init__(self, names: Iterable[str], open_patch: Callable[[str], PartReader],
                 column_types: Mapping[str, str], sorting_columns: set[str],
                 opened: dict[str, _Patch] | None = None) -> None:
        self._types = column_types
        self._lock = threading.Lock()
        opened = {} if opened is None else opened
        for name in names:
            if name not in opened:
                opened[name] = self._open(open_patch(name), sorting_columns)
        self._patches = {name: opened[name] for name in sorted(names)}

    def _open(self, reader: PartReader, sorting_columns: set[str]) -> _Patch:
        where = reader.location
        missing = [c for c in (*IDENTITY, DATA_VERSION) if c not in reader.types]
        if missing:
            raise UnsupportedError(f"{where}: patch part without column(s) {', '.join(missing)}; this version "
                                   "cannot match its rows to the rows they update")
        # A key-ordered patch stores the rows' sorting key beside the updated values; keys cannot be updated.
        updated = tuple(c for c, _ in reader.columns if c not in PATCH_SYSTEM_COLUMNS and c not in sorting_columns)
        keys = tuple(c for c, _ in reader.columns if c in sorting_columns and c not in PATCH_SYSTEM_COLUMNS)
        # A patch written before an ALTER changed a column's type usually applies to no part any more
        # (the ALTER's mutation gave every part a higher data version): refused only where it applies.
        stale = {}
        for column in updated:
            # A DELETE in lightweight_update_force mode patches the row mask (0 = deleted).
            declared = "UInt8" if column == ROW_EXISTS_COLUMN else self._types.get(column)
            stored = reader.types[column].to_clickhouse()
            if declared is None or parse_type(declared).to_clickhouse() != stored:
                stale[column] = (f"{where}: patch part updates column {column!r} as {stored}, but the table's "
                                 f"statement {'has it as ' + declared if declared else 'has no such column'}; "
                                 "ClickHouse converts such patches on read, which this version does not")
        info = PartInfo.parse(reader.part)
        sources = {PartInfo.parse(name): high for name, (_, high) in reader.source_parts.versions.items()}
        return _Patch(reader.part, reader, original_partition_id(info.partition_id), updated, keys, sources, stale)

    def __bool__(self) -> bool:
        return bool(self._patches)

    @property
    def columns(self) -> set[str]:
        """Every column some patch part updates."""
        return {column for patch in self._patches.values() for column in patch.columns}

    def for_part(self, part: str) -> tuple[str, ...]:
        """The patch parts that update rows of `part`."""
        info = PartInfo.parse(part)
        return tuple(name for name, patch in self._patches.items() if patch.updates(info))

    def _patch_rows(self, patch: _Patch) -> pa.Table:
        with self._lock:
            cached = patch.rows
        if cached is None:
            # apply_mask=False: a patch's `_row_exists` is the mask it gives other parts' rows, not its own.
            cached = patch.reader.read([*IDENTITY, DATA_VERSION, *patch.keys, *patch.columns], None,
                                       {c: self._types[c] for c in (*patch.keys, *patch.columns)
                                        if c != ROW_EXISTS_COLUMN and c not in patch.stale},
                                       apply_mask=False)
            with self._lock:
                patch.rows = cached
        return cached

    def changes(self, patches: Sequence[str], columns: Iterable[str]) -> bool:
        """Whether the patch parts `patches` (`for_part`'s) change a read of `columns`: they update
        one of them, or delete rows."""
        wanted = {*columns, ROW_EXISTS_COLUMN}
        return any(wanted & set(self._patches[name].columns) for name in patches)

    def changing(self, part: str, columns: Iterable[str]) -> tuple[str, ...]:
        """The patch parts that change a read of `columns` of `part` (`for_part`, where `changes`)."""
        patches = self.for_part(part) if self._patches else ()
        return patches if patches and self.changes(patches, columns) else ()

    def existing_rows(self, reader: PartReader, patches: Sequence[str]) -> int:
        """Rows a read of the whole part returns, rows that patch parts `patches` delete excluded."""
        if not self.changes(patches, ()):
            return reader.existing_rows
        return self.read(reader, [(0, reader.n_granules)], [], None, patches).num_rows

    def read(self, reader: PartReader, ranges: Sequence[GranuleRange], columns: Sequence[str],
             column_types: Mapping[str, str] | None, patches: Sequence[str]) -> pa.Table:
        """`columns` of a part's granule `ranges` (as PartReader.read returns them) with the updates of
        the patch parts `patches` (`for_part`'s) applied, then without the rows deleted (by the part's
        `_row_exists` as patched)."""
        rows, mask = self.stored(reader, ranges, columns, column_types, patches)
        return rows.filter(pa.array(mask)) if mask is not None and not mask.all() else rows

    def stored(self, reader: PartReader, ranges: Sequence[GranuleRange], columns: Sequence[str],
               column_types: Mapping[str, str] | None, patches: Sequence[str], *, stored_json: bool = False
               ) -> tuple[pa.Table, np.ndarray | None]:
        """(`columns` of every stored row of the granule `ranges`, deleted ones included, with the
        updates of `patches` applied; the row mask as patched, None when the part has none and no
        patch deletes). `stored_json`: JSON columns in the stored form merges and mutations write."""
        info = PartInfo.parse(reader.part)
        stored = [c for c in IDENTITY if c in reader.types]
        ranges = merge_ranges(ranges)
        chosen = [self._patches[name] for name in patches]
        keys = sorted({k for p in chosen for k in p.keys})
        wanted = [*columns, *(c for c in (*stored, *keys) if c not in columns)]
        rows = reader.read(wanted, ranges, column_types, apply_mask=False, stored_json=stored_json)
        if rows.num_columns == 0:  # a count (no column): a placeholder gives the table its rows
            starts = reader.granule_starts
            rows = pa.table({"": pa.nulls(sum(int(starts[e] - starts[b]) for b, e in ranges))})
        if len(stored) < len(IDENTITY):
            # A part that does not store its rows' identities (one insert's, or merged before the table
            # had the settings): ClickHouse reads them as its min block and each row's position in it.
            if stored:
                raise UnsupportedError(
                    f"{reader.location}: lightweight UPDATE patch part(s) {', '.join(patches)} change rows of this "
                    f"part, which stores {stored[0]} but not the rest of {', '.join(IDENTITY)}: this version "
                    "cannot tell which rows they update")
            rows = rows.append_column(BLOCK_NUMBER, pa.array(np.full(rows.num_rows, info.min_block, np.uint64)))
            rows = rows.append_column(BLOCK_OFFSET, pa.array(self.offsets(reader, ranges)))
        version = data_version(info)
        mask = reader.row_mask(ranges)
        deletes = any(ROW_EXISTS_COLUMN in p.columns for p in chosen)
        if deletes:
            exists = np.ones(rows.num_rows, np.uint8) if mask is None else mask.astype(np.uint8)
            rows = rows.append_column(ROW_EXISTS_COLUMN, pa.array(exists))
        for column in [c for c in [*columns, ROW_EXISTS_COLUMN] if any(c in p.columns for p in chosen)]:
            stale = [p.stale[column] for p in chosen if column in p.stale]
            if stale:
                raise UnsupportedError(f"{stale[0]} (it updates rows of {reader.location})")
            if stored_json and column != ROW_EXISTS_COLUMN and contains_type(parse_type(self._types[column]), Json):
                raise UnsupportedError(f"{reader.location}: patch part(s) {', '.join(patches)} update JSON column "
                                       f"{column!r}; this version does not write such updates into a part")
            updating = [p for p in chosen if column in p.columns]
            rows = rows.set_column(rows.column_names.index(column), column, self._updated(
                rows, column, [self._patch_rows(p) for p in updating], [p.keys for p in updating], version,
                (info.min_block, info.max_block)))
        if deletes:
            mask = rows.column(ROW_EXISTS_COLUMN).to_numpy() != 0
        return rows.select(list(columns)), mask

    @staticmethod
    def offsets(reader: PartReader, ranges: Sequence[GranuleRange]) -> np.ndarray:
        """Each row's position in its part, over granule `ranges` (`_part_offset`)."""
        starts = reader.granule_starts
        return np.concatenate([np.arange(starts[b], starts[e], dtype=np.uint64) for b, e in ranges]
                              or [np.zeros(0, np.uint64)])

    def applied_version(self, part: str, patches: Sequence[str]) -> int:
        """The highest version of the patches `patches` (`for_part`'s) apply to `part`'s rows: the data
        version a merge or mutation that materialises them gives the part it writes (0: none)."""
        info = PartInfo.parse(part)
        return max((high for name in patches for source, high in self._patches[name].sources.items()
                    if high > data_version(info) and info.contains(source)), default=0)

    @staticmethod
    def _updated(rows: pa.Table, column: str, patch_rows: list[pa.Table], patch_keys: list[tuple[str, ...]],
                 version: int, blocks: tuple[int, int]) -> pa.Array:
        """`rows[column]` with each row's newest patch value above `version` (vectorised: the candidate
        patch rows — above `version`, of the part's block range `blocks` — meet the part's rows in
        one hash join on identity, those whose stored key (`patch_keys`, per patch) differs from the
        row's dropped; where several meet one row, the highest version wins; one take)."""
        numbers = np.concatenate([t.column(BLOCK_NUMBER).to_numpy() for t in patch_rows])
        offsets = np.concatenate([t.column(BLOCK_OFFSET).to_numpy() for t in patch_rows])
        versions = np.concatenate([t.column(DATA_VERSION).to_numpy() for t in patch_rows])
        current = rows.column(column).combine_chunks()
        picked = np.flatnonzero((versions > version) & (numbers >= blocks[0]) & (numbers <= blocks[1]))
        if len(picked) == 0:
            return current
        row_numbers = rows.column(BLOCK_NUMBER).to_numpy()
        row_offsets = rows.column(BLOCK_OFFSET).to_numpy()
        base = {"r": pa.array(np.arange(rows.num_rows, dtype=np.int64))}
        found = {"p": pa.array(picked, pa.int64())}
        if max(int(numbers[picked].max()), int(offsets[picked].max())) < 1 << 32:
            # One 64-bit key joins faster than two (any row whose identity does not fit cannot match).
            base["k"] = pa.array((row_numbers << np.uint64(32)) | (row_offsets & np.uint64(0xFFFFFFFF)))
            found["k"] = pa.array((numbers[picked] << np.uint64(32)) | offsets[picked])
            keys: list[str] = ["k"]
        else:
            base |= {"n": pa.array(row_numbers), "o": pa.array(row_offsets)}
            found |= {"n": pa.array(numbers[picked]), "o": pa.array(offsets[picked])}
            keys = ["n", "o"]
        matched = pa.table(base).join(pa.table(found), keys, join_type="inner")
        if matched.num_rows == 0:
            return current
        targets = matched.column("r").to_numpy()
        sources = matched.column("p").to_numpy()
        same = _same_keys(rows, patch_rows, patch_keys, targets, sources)
        if same is not None:
            targets, sources = targets[same], sources[same]
            if len(targets) == 0:
                return current
        if np.bincount(targets).max() > 1:  # a row updated by several patch parts: the newest wins
            order = np.lexsort((versions[sources], targets))
            last = np.append(targets[order][1:] != targets[order][:-1], True)
            targets, sources = targets[order][last], sources[order][last]
        values = pa.concat_arrays([t.column(column).combine_chunks() for t in patch_rows])
        values = values.take(pa.array(sources)).cast(current.type)
        index = np.arange(rows.num_rows, dtype=np.int64)
        index[targets] = rows.num_rows + np.arange(len(targets), dtype=np.int64)
        return pa.concat_arrays([current, values]).take(pa.array(index))


def _same_keys(rows: pa.Table, patch_rows: list[pa.Table], patch_keys: list[tuple[str, ...]],
               targets: np.ndarray, sources: np.ndarray) -> np.ndarray | None:
    """Which matched pairs (row `targets[i]`, concatenated patch row `sources[i]`) agree on every
    sorting-key column the patch row's part stores (None: no patch stores one, every pair stands).
    NULL keys (allow_nullable_key) agree with NULL."""
    if not any(patch_keys):
        return None
    same = np.ones(len(targets), bool)
    starts = np.cumsum([0, *(t.num_rows for t in patch_rows)])
    owner = np.searchsorted(starts, sources, side="right") - 1  # which patch part each source row is in
    for number, (table, keys) in enumerate(zip(patch_rows, patch_keys)):
        pairs = np.flatnonzero(owner == number)
        if len(pairs) == 0:
            continue
        for key in keys:
            ours = _decoded(rows.column(key).take(pa.array(targets[pairs])))
            theirs = _decoded(table.column(key).take(pa.array(sources[pairs] - starts[number]))).cast(ours.type)
            equal = pc.or_kleene(pc.equal(ours, theirs), pc.and_(pc.is_null(ours), pc.is_null(theirs)))
            same[pairs] &= pc.fill_null(equal, False).to_numpy(zero_copy_only=False)
    return same


def _decoded(values: pa.ChunkedArray | pa.Array) -> pa.Array:
    """One array of plain values (LowCardinality keys compare by value, not by dictionary index)."""
    array = values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values
    return array.dictionary_decode() if pa.types.is_dictionary(array.type) else array

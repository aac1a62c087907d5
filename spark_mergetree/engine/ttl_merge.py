"""TTL in merges: the rows and values a table's TTL expired, dropped and reset as ClickHouse's merge does.

ClickHouse never expires rows on read: its merges do, at the merge's start time. A merge of a table
with TTL removes the rows whose row TTL (`TTL expr` / `expr DELETE`) is due, and those a
`expr DELETE WHERE cond` rule is due for where `cond` holds; it sets every value whose column TTL
(`c T TTL expr`) is due to the type's default; and it writes the merged part's `ttl.txt` over what
it kept (a column rule counting the values it did not reset). Measured with chdb 26.9: `OPTIMIZE
TABLE t FINAL` on parts whose `ttl.txt` times are due does all of that, and FINAL merges a
partition's single part again: our OPTIMIZE FINAL does so when that part's TTL is due
(`due_parts`; engine/optimize.py). A time of 0 never expires.

We do the same before the merge proper: each source whose `ttl.txt` says a row or column rule is
due (its least time ≤ the merge's time) is written again, its rows in order, with the expired rows
left out and the expired values reset, into a temporary part that the merge reads in its place
(as engine/patch_merge.py does for lightweight UPDATEs), so every merge path (streaming, Compact,
row-combining engines) merges the rows ClickHouse would keep. Sources with nothing due are read as
they are. The rewrite is column-wise (numpy masks over the rule's times, Arrow filters).

Refused with a clear error, nothing written: a due `GROUP BY` rule (its aggregation is not done
here) and a due column TTL of a column with a DEFAULT expression (ClickHouse resets to it). Move
rules (`TO DISK`/`TO VOLUME`) and recompression change no row: they are recorded in `ttl.txt`;
engine/ttl_moves.py puts a part on a due move's volume, and a merge past a recompression rule
writes its part with that rule's codec (`merge_metadata`, as ClickHouse's merge chooses it).
Which merges run for TTL in the background is engine/ttl_selection.py's.
"""

from __future__ import annotations

import os
import re
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from spark_mergetree.engine.merge import SPILL_PREFIX
from spark_mergetree.engine.part_rewrite import rewrite_in_granules
from spark_mergetree.errors import InvalidOptionError, UnsupportedError
from spark_mergetree.expressions.predicate import bind, evaluate, parse_expression
from spark_mergetree.expressions.ttl import (
    TTL_FILE,
    TTLRule,
    expiring,
    merged_ttl_file,
    ttl_file,
    ttl_infos,
    ttl_times,
)
from spark_mergetree.format.compression_codecs import parse_codec
from spark_mergetree.format.part import CODEC_FILE, PartFiles
from spark_mergetree.format.part_reader import HIDDEN_COLUMNS, ROW_EXISTS_COLUMN, PartReader
from spark_mergetree.format.serialization import default_column
from spark_mergetree.format.types import parse_type
from spark_mergetree.storage.part_store import PartStore
from spark_mergetree.storage.policy import StoragePolicy

if TYPE_CHECKING:
    from spark_mergetree.engine.metadata import TableMetadata
    from spark_mergetree.engine.table import MergeTreeTable

_ROW_SECTIONS = ("table", "rows_where", "columns", "group_by")


def ttl_data(reader: PartReader, meta: TableMetadata) -> bytes | None:
    """A part's `ttl.txt` (computed from its rows when it has none: a part written before its table
    had TTL)."""
    if TTL_FILE in reader.files:
        return bytes(reader.source.read_file(reader.part, TTL_FILE))
    return meta.ttl_of(lambda names: reader.read(names, None, meta.column_types, apply_mask=False))


def due(reader: PartReader, meta: TableMetadata, now: int) -> bool:
    """Whether a merge at `now` expires rows or values of this source."""
    return expiring(ttl_data(reader, meta), now, _ROW_SECTIONS)


def merge_refusal(meta: TableMetadata, data: bytes | None, now: int) -> str | None:
    """Why a merge at `now` of a part with `ttl.txt` `data` would be refused (see `expired`): a due
    `GROUP BY` rule, or a due column TTL of a column with a DEFAULT expression; else None."""
    infos = ttl_infos(data)
    for (section, name), (low, _) in sorted(infos.items()):
        if not 0 < low <= now:
            continue
        if section == "group_by":
            return f"its TTL {name} GROUP BY … is due (merges here do not aggregate)"
        column = next((c for c in meta.definition.columns if c.name == name), None) if section == "columns" else None
        if column is not None and column.default_expression:
            return f"its column {name!r} TTL is due and resets to a DEFAULT expression (not computed here)"
    return None


def has_ttl(meta: TableMetadata) -> bool:
    """Whether the table has a TTL rule of any kind (table or column)."""
    return bool(meta.definition.ttl) or any(c.ttl for c in meta.definition.columns)


def due_parts(table: MergeTreeTable, parts: Iterable[str], now: int | None = None) -> set[str]:
    """The parts among `parts` that a merge at `now` (default: the present) would change for their
    TTL: rows or values expired (ClickHouse's `part_min_ttl` is due). OPTIMIZE FINAL merges such a
    part again even when it is its partition's only one, as ClickHouse's FINAL does."""
    meta = table.metadata
    if not has_ttl(meta):
        return set()
    moment = int(time.time()) if now is None else now
    return {part for part in parts if due(table.reader(part), meta, moment)
            or recompressing(table.reader(part), meta, moment)}


_ORDER = {"table": 0, "rows_where": 1, "group_by": 2, "columns": 3, "moves": 4, "recompression": 4}


def expired(meta: TableMetadata, rows: pa.Table, exists: np.ndarray | None, now: int
            ) -> tuple[np.ndarray, dict[str, np.ndarray], list[tuple[TTLRule, np.ndarray]]]:
    """(rows to drop, per column the rows whose value to reset, per rule the rows its `ttl.txt`
    entry counts) of `rows` at `now`. Rules run in ClickHouse's merge order, each over the rows the
    earlier ones kept: the row TTL, the `DELETE WHERE` rules, `GROUP BY`, the column TTLs, then
    moves and recompression (measured: the row TTL's entry counts rows a `DELETE WHERE` drops)."""
    types = meta.column_types
    alive = np.ones(rows.num_rows, dtype=bool) if exists is None else exists.copy()
    resets: dict[str, np.ndarray] = {}
    counted: list[tuple[TTLRule, np.ndarray]] = []
    for rule in sorted(meta.ttl_rules, key=lambda r: _ORDER[r.section]):
        if rule.section in ("moves", "recompression"):
            counted.append((rule, alive.copy()))
            continue
        times = ttl_times(rule.expression, rows, types)
        hit = (times != 0) & (times <= now) & alive
        if rule.section == "group_by" and hit.any():
            raise UnsupportedError(f"TTL {rule.expression} GROUP BY …: rows are due, and merges here do not "
                                   "aggregate them as ClickHouse's do; merge this table in ClickHouse")
        if rule.section == "columns":
            if hit.any():
                _refuse_default_expression(meta, rule)
                assert rule.column is not None
                resets[rule.column] = resets.get(rule.column, np.zeros(rows.num_rows, dtype=bool)) | hit
            counted.append((rule, alive.copy()))
            continue
        if rule.condition is not None:
            holds = evaluate(bind(parse_expression(rule.condition), dict(types)), rows)
            hit &= np.asarray(holds.fill_null(False).to_numpy(zero_copy_only=False), dtype=bool)
        alive &= ~hit
        counted.append((rule, alive.copy()))
    return ~alive if exists is None else exists & ~alive, resets, counted


def _refuse_default_expression(meta: TableMetadata, rule: TTLRule) -> None:
    column = next((c for c in meta.definition.columns if c.name == rule.column), None)
    if column is not None and column.default_expression:
        raise UnsupportedError(f"column {rule.column!r} TTL {rule.expression}: its values are due and ClickHouse "
                               f"resets them to its DEFAULT {column.default_expression}, which merges here do not "
                               "compute; merge this table in ClickHouse")


def rewritten(reader: PartReader, meta: TableMetadata, now: int) -> PartFiles:
    """The source again, in the same granules, with what a merge at `now` expires taken out: its
    expired rows masked (`_row_exists`, which merges drop, as they drop a lightweight DELETE's), its
    expired values reset; its `ttl.txt` over the rows and values it keeps."""
    names = [name for name, _ in meta.columns]
    ranges = [(0, reader.n_granules)]
    plain = reader.read(names, ranges, meta.column_types, apply_mask=False)
    exists = reader.row_mask(ranges)
    drop, resets, counted = expired(meta, plain, exists, now)
    keep = ~drop if exists is None else exists & ~drop
    stored = reader.read(names, ranges, meta.column_types, apply_mask=False, stored_json=True)
    hidden = [(n, t.to_clickhouse()) for n, t in reader.types.items() if n in HIDDEN_COLUMNS and n != ROW_EXISTS_COLUMN]

    def column_of(name: str) -> pa.Array:
        if name == ROW_EXISTS_COLUMN:
            return pa.array(keep.astype(np.uint8))
        if name not in meta.column_types:
            return reader.read_column(name, ranges)
        values = stored.column(name).combine_chunks()
        if name in resets:
            dt = parse_type(meta.column_types[name])
            values = pc.if_else(pa.array(resets[name]), default_column(dt, len(values), stored_json=True), values)
        return values

    columns = list(meta.columns) + hidden + [(ROW_EXISTS_COLUMN, "UInt8")]
    files = rewrite_in_granules(reader, meta, reader.rows, columns, column_of)
    for name, reset in resets.items():
        dt = parse_type(meta.column_types[name])
        plain = plain.set_column(plain.schema.get_field_index(name), name,
                                 pc.if_else(pa.array(reset), default_column(dt, plain.num_rows),
                                            plain.column(name).combine_chunks()))
    entries = [ttl_file([rule], _rows_of(plain, rows), meta.column_types, now) for rule, rows in counted]
    data = merged_ttl_file(entries)
    return files if data is None else files.with_file(TTL_FILE, data)


def _rows_of(table: pa.Table, mask: np.ndarray) -> Callable[[list[str]], pa.Table]:
    """The columns `ttl_file` asks for, of the rows `mask` keeps."""
    return lambda wanted: table.select(wanted).filter(pa.array(mask))


@contextmanager
def expire_sources(table: MergeTreeTable, readers: Sequence[PartReader], now: int | None = None
                   ) -> Iterator[list[PartReader]]:
    """The merge's sources with what a merge at `now` (default: the time it starts) expires left
    out (valid inside the `with` block); the readers themselves when nothing is due."""
    meta = table.metadata
    moment = int(time.time()) if now is None else now
    if not has_ttl(meta):
        yield list(readers)
        return
    stale = [reader for reader in readers if due(reader, meta, moment)]
    if not stale:
        yield list(readers)
        return
    granularity = meta.writer_settings.index_granularity
    with tempfile.TemporaryDirectory(prefix=f"{SPILL_PREFIX}{os.getpid()}_ttl_") as directory:
        store = PartStore(StoragePolicy.single(Path(directory)), "")
        out = []
        for reader in readers:
            if reader not in stale:
                out.append(reader)
                continue
            files = rewritten(reader, meta, moment)
            store.write_part(reader.part, files.files, files.boundaries)
            out.append(PartReader(store, reader.part, f"{reader.location} (expired TTL left out)", granularity))
        yield out


def recompression_codec(meta: TableMetadata, data: bytes | None, now: int) -> str | None:
    """The codec (`CODEC(...)`) of the recompression rule due for every row of a part whose
    `ttl.txt` is `data` (the rule with the latest such time wins, as ClickHouse chooses), or None."""
    infos = ttl_infos(data)
    best: tuple[int, str] | None = None
    for rule in meta.ttl_rules:
        if rule.section != "recompression" or rule.target is None:
            continue
        high = infos.get(("recompression", rule.expression), (0, 0))[1]
        if 0 < high <= now and (best is None or high >= best[0]):
            best = (high, rule.target)
    return None if best is None else best[1]


def _same_codec(a: str, b: str) -> bool:
    return re.sub(r"\s+", "", a).upper() == re.sub(r"\s+", "", b).upper()


def recompression_due_time(reader: PartReader, meta: TableMetadata, data: bytes | None, now: int) -> int:
    """When a TTL merge would recompress this part: 0 unless a recompression rule is due for all
    its rows with a codec other than the part's (`default_compression_codec.txt`); then the least
    of its recompression rules' greatest times (ClickHouse's recompression selector's time)."""
    codec = recompression_codec(meta, data, now)
    if codec is None:
        return 0
    current = bytes(reader.source.read_file(reader.part, CODEC_FILE)).decode() if CODEC_FILE in reader.files else ""
    if _same_codec(codec, current):
        return 0
    highs = [high for (section, _), (_, high) in ttl_infos(data).items() if section == "recompression" and high]
    return min(highs, default=0)


def recompressing(reader: PartReader, meta: TableMetadata, now: int) -> bool:
    """Whether a merge at `now` would write this part with another codec (OPTIMIZE FINAL then
    merges a lone part again, as ClickHouse's FINAL does)."""
    return any(r.section == "recompression" for r in meta.ttl_rules) and bool(
        recompression_due_time(reader, meta, ttl_data(reader, meta), now))


def merge_metadata(table: MergeTreeTable, parts: Sequence[str], now: int | None = None) -> TableMetadata:
    """The metadata a merge of `parts` writes its part with: the table's, with the codec of the
    recompression rule due for every row of the sources (their `ttl.txt` combined, before the merge
    expires any) as its default codec, as ClickHouse's merge picks it (columns with a CODEC clause
    keep theirs)."""
    meta = table.metadata
    if not any(r.section == "recompression" for r in meta.ttl_rules):
        return meta
    moment = int(time.time()) if now is None else now
    codec = recompression_codec(meta, merged_ttl_file([ttl_data(table.reader(p), meta) for p in parts]), moment)
    if codec is None:
        return meta
    try:
        setting = parse_codec(codec).setting
    except InvalidOptionError as error:
        raise UnsupportedError(f"TTL … RECOMPRESS {codec}: merges here write parts with one generic codec "
                               f"(LZ4, LZ4HC, ZSTD, NONE), not this one ({error}); merge this table in ClickHouse") from None
    return replace(meta, engine_settings={**meta.engine_settings, "codec": setting})

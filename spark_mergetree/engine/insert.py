"""Turning incoming rows into staged parts (ClickHouse's data writer).

Rows are conformed to the table schema (by column name; clear errors for missing, extra or
uncastable columns), split by partition, sorted by the ORDER BY key and written as one Wide part
per partition under a staging name. Staged parts are invisible: committing gives them block
numbers, final names and a log entry (see table.py).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np
import pyarrow as pa

from spark_mergetree.engine import engines
from spark_mergetree.engine.metadata import TableMetadata
from spark_mergetree.engine.progress import progress_bar
from spark_mergetree.engine.projections import PARENT_OFFSET, with_offsets
from spark_mergetree.errors import ExpressionError, SchemaMismatchError, UnsupportedError
from spark_mergetree.expressions.ddl import ColumnDefinition, Projection
from spark_mergetree.expressions.partition_key import PartitionGroup
from spark_mergetree.expressions.predicate import bind, evaluate_value, parse_expression
from spark_mergetree.format.compact_writer import encode_part
from spark_mergetree.format.conform import conform_column
from spark_mergetree.format.part import PartFiles
from spark_mergetree.format.part_writer import PartitionValue
from spark_mergetree.format.serialization import default_column
from spark_mergetree.format.types import Array, Map, Tuple, is_nullable, parse_type, to_arrow

STAGING_PREFIX = "staged_"
# An insert of more rows than this (or of several parts) draws progress when asked to.
PROGRESS_MIN_ROWS = 1_000_000


@dataclass(frozen=True)
class StagedPart:
    """A written, not yet visible part (picklable: Spark tasks return these to the driver)."""

    name: str  # directory name while staged
    partition_id: str
    rows: int
    bytes: int
    tag: str


def new_tag() -> str:
    return uuid.uuid4().hex[:16]


def to_arrow_table(data: Any) -> pa.Table:
    """Accept a pyarrow Table, RecordBatch, RecordBatchReader, iterable of batches, or pandas DataFrame."""
    if isinstance(data, pa.Table):
        return data
    if isinstance(data, pa.RecordBatch):
        return pa.Table.from_batches([data])
    if isinstance(data, pa.RecordBatchReader):
        return data.read_all()
    if hasattr(data, "to_arrow") and callable(data.to_arrow):  # polars and others
        return data.to_arrow()
    if type(data).__name__ == "DataFrame" and hasattr(data, "columns"):
        return pa.Table.from_pandas(data, preserve_index=False)
    if isinstance(data, Iterable):
        batches = list(data)
        if not batches:
            raise SchemaMismatchError("no data to insert: the iterable of record batches is empty")
        return pa.Table.from_batches(batches)
    raise SchemaMismatchError(f"cannot insert a {type(data).__name__}: pass a pyarrow Table or RecordBatches")


def defaulted_columns(meta: TableMetadata) -> dict[str, ColumnDefinition]:
    """The stored columns an insert may leave out: those with a DEFAULT or MATERIALIZED expression,
    and Nullable ones (NULL). A column of another type is never filled with zeros unasked."""
    types = dict(meta.columns)
    return {c.name: c for c in meta.definition.columns if c.is_stored and c.name in types and (
        (c.default_kind in ("DEFAULT", "MATERIALIZED") and c.default_expression)
        or types[c.name].startswith("Nullable("))}


def with_defaults(table: pa.Table, meta: TableMetadata) -> pa.Table:
    """`table` plus the columns it leaves out that have a DEFAULT or MATERIALIZED expression, computed
    from the row's other columns as ClickHouse's INSERT computes them, and the Nullable ones it
    leaves out, NULL. An expression that cannot be computed here (`reverse(s)`) is refused,
    naming it."""
    given = set(table.column_names)
    types = dict(meta.columns)
    for name, column in defaulted_columns(meta).items():
        if name in given:
            continue
        if not column.default_expression:
            table = table.append_column(name, default_column(parse_type(types[name]), table.num_rows))
            continue
        try:
            expression = bind(parse_expression(str(column.default_expression)),
                              {n: t for n, t in meta.columns if n in given})
            value = conform_column(evaluate_value(expression, table), parse_type(types[name]), name)
        except (ExpressionError, UnsupportedError, SchemaMismatchError, pa.ArrowException) as exc:
            raise SchemaMismatchError(
                f"column {name!r} is missing from the data and its {column.default_kind} expression "
                f"{column.default_expression} cannot be computed here ({exc}); give the column") from None
        table = table.append_column(name, value)
    return table


def conform(table: pa.Table, meta: TableMetadata) -> pa.Table:
    """The table's columns in table order and Arrow types, or an error naming what does not fit.

    Every lossless Arrow representation of a column's values is accepted (format/conform.py)."""
    wanted = [name for name, _ in meta.columns]
    table = with_defaults(table, meta)
    missing = [n for n in wanted if n not in table.column_names]
    extra = [n for n in table.column_names if n not in wanted]
    if missing or extra:
        detail = []
        if missing:
            detail.append(f"missing column(s) {', '.join(missing)}")
        if extra:
            detail.append(f"unknown column(s) {', '.join(extra)}")
        raise SchemaMismatchError(f"data does not match the table schema: {'; '.join(detail)} "
                                  f"(table columns: {', '.join(wanted)})")
    arrays = []
    for name, type_text in meta.columns:
        data_type = parse_type(type_text)
        column = conform_column(table.column(name), data_type, name)
        if column.null_count and not (is_nullable(data_type) or isinstance(data_type, (Array, Map, Tuple))):
            raise SchemaMismatchError(
                f"column {name!r} of type {type_text} holds {column.null_count} NULL value(s); "
                "declare it Nullable(...) or fill the NULLs")
        arrays.append(column)
    return pa.Table.from_arrays(arrays, names=wanted)


def _selected(rows: pa.Table, order: np.ndarray | None, _projection: Projection, names: list[str]) -> pa.Table:
    """Columns `names` of the rows as they arrived; `_parent_part_offset` is each one's offset in the
    part, which holds them in `order` (positions of the arrived rows; None: as they came)."""
    if PARENT_OFFSET not in names:
        return rows.select(names)
    offsets = np.arange(rows.num_rows, dtype=np.uint64)
    if order is not None:
        offsets[order] = offsets.copy()  # the row at order[j] is the part's row j
    return with_offsets(rows.select([n for n in names if n != PARENT_OFFSET]), offsets)


def write_partition_parts(meta: TableMetadata, table: pa.Table, write_part: Callable[[str, PartFiles], None],
                          tag: str, part_name: Callable[[str], str] | None = None, *,
                          progress: bool | None = False) -> list[StagedPart]:
    """Split `table` (conformed) by partition and write each group as one sorted part.

    `write_part(name, PartFiles)` places a part's files (storage's job); it is called as soon as a
    part is encoded, so it may upload in the background while the next part is encoded.
    `part_name(partition_id)` names a part (default: a staged name from `tag`). `progress` (True;
    None: on a terminal) draws rows written of the total on stderr after each part, when the rows
    make more than one part or more than PROGRESS_MIN_ROWS.
    """
    groups = meta.partition_key.group_rows(table)
    worth_showing = len(groups) > 1 or table.num_rows > PROGRESS_MIN_ROWS
    with progress_bar(table.num_rows, "row", "insert", progress if worth_showing else False) as advance:
        return _write_groups(meta, table, groups, write_part, tag, part_name, advance)


def _write_groups(meta: TableMetadata, table: pa.Table, groups: list[PartitionGroup],
                  write_part: Callable[[str, PartFiles], None], tag: str, part_name: Callable[[str], str] | None,
                  advance: Callable[[int], None]) -> list[StagedPart]:
    staged = []
    key = meta.partition_key
    for number, group in enumerate(groups):
        if len(key.elements):
            order = meta.sort_order(table, group.row_indices)
            positions = np.asarray(group.row_indices)
            rows = table.take(pa.array(positions if order is None else positions[order]))
            # Projections are built from the rows in the order they came, as ClickHouse does (a
            # projection of offsets gets each one's place in the sorted part: `_selected`).
            arrived = table.take(pa.array(positions)) if meta.projections else rows
        else:
            order = meta.sort_order(table)
            arrived = table
            rows = table if order is None else table.take(pa.array(order))
        if meta.merging_engine is not None:  # ClickHouse's optimize_on_insert: the block merged as a part would be
            rows = engines.collapse(meta.merging_engine, rows, meta.sorting_key, meta.column_types, final=False)
            if not rows.num_rows:
                advance(len(group.row_indices))
                continue
            # ClickHouse builds the projections from the merged block, in the part's order.
            arrived, order = rows, None
        partition = None
        if key.is_partitioned:
            values = [pa.array([v], type=to_arrow(parse_type(t))) for v, t in zip(group.values, key.result_types)]
            partition = PartitionValue(values, key.result_types, key.columns)
        files = encode_part(rows, meta.columns, meta.primary_key_values(rows), partition, meta.writer_settings,
                            meta.definition.settings)
        files = meta.add_projections(files, partial(_selected, arrived, order))
        files = meta.with_ttl(files, rows.select)
        name = part_name(group.partition_id) if part_name is not None else f"{STAGING_PREFIX}{tag}_{number}"
        write_part(name, files)
        staged.append(StagedPart(name, group.partition_id, rows.num_rows, files.size, tag))
        advance(len(group.row_indices))
    return staged

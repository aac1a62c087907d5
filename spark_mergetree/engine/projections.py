"""Projections: the `<name>.proj/` subparts a table's PROJECTION declarations give every part.

A normal projection (`PROJECTION p (SELECT a, b ORDER BY b)`, `SELECT *` for every stored column)
is a part of its own inside the parent part's directory: the selected columns of the parent's rows
and those its ORDER BY reads (table order), sorted (stably) by the projection's ORDER BY, with
primary.idx over that key, written by the same
writer as any part (Wide or Compact by the table's settings, the table's codecs) but with no
partition.dat, minmax or skip index files. The parent's checksums.txt lists `<name>.proj` with the
total size and the hash of the projection's own checksums.txt entries (Checksums.total_hash), as
ClickHouse's MergeTreeDataWriter::writeProjectionPart and MergeTreeData::addProjectionPart record it.

A projection of offsets (`SELECT _part_offset ORDER BY k`, or the shorthand `INDEX k TYPE basic`,
ClickHouse's ProjectionIndexBasic) is a normal projection whose last column, `_parent_part_offset`
UInt64, holds each row's offset in the parent part: an insert's rows, sorted stably in the order they
arrived, carry their place in the sorted part; a mutation's, in the part's order, 0, 1, 2, ...; a
merge translates the offsets its sources' projection parts hold into the merged part's (merge.py).

An aggregate projection (GROUP BY with count/sum/avg/min/max/any/anyLast over numeric columns) is a
part of one row per group, sorted by the GROUP BY key, holding the keys and each aggregate's state
(ClickHouse's AggregateFunction serialization); the states of several parts are combined as
ClickHouse merges them (`combined_states`).

Inserts and mutations write every buildable projection from the rows of the part they write; a
merge from its sources' projection parts and rows (engine/merge.py; big inputs from runs,
engine/projection_merge.py; a projection of offsets in memory). Projections this version cannot build
(other aggregate functions, key expressions it cannot evaluate, INDEX types but 'basic') are
refused in our tables' statements, and parts ClickHouse made with them are not merged (the selector
leaves them alone) rather than losing them.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Collection, Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from spark_mergetree.errors import ExpressionError, SchemaMismatchError, UnsupportedError
from spark_mergetree.expressions.ddl import PART_OFFSET, Projection, parse_projection
from spark_mergetree.expressions.key_condition import key_columns_for
from spark_mergetree.expressions.sort_key import key_element_arrays, key_element_types, sort_indices
from spark_mergetree.format.checksums import PROJECTION_SUFFIX, Checksums, FileChecksum
from spark_mergetree.format.compact_writer import encode_part
from spark_mergetree.format.compiled import lazy_njit
from spark_mergetree.format.part import CHECKSUMS_FILE, PartFiles
from spark_mergetree.format.part_reader import PartReader
from spark_mergetree.format.part_writer import WriterSettings
from spark_mergetree.format.values import encode_varuints, string_buffers

_PLAIN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# The column of a projection selecting _part_offset: each row's offset in the parent part.
PARENT_OFFSET = "_parent_part_offset"


def declared_projections(indexes: Sequence[str]) -> list[Projection]:
    """The PROJECTION elements of a statement, parsed."""
    return [p for text in indexes if (p := parse_projection(text)) is not None]


def why_unbuildable(projection: Projection, column_types: dict[str, str], merging_engine: bool) -> str | None:
    """Why parts of this version cannot carry `projection` (None when they can)."""
    if merging_engine:
        return "projections on engines that combine rows in merges are not supported"
    if projection.is_aggregate:
        return _why_not_aggregate(projection, column_types)
    if not projection.order_by:
        return "a normal projection needs an ORDER BY (ClickHouse refuses an empty one too)"
    if projection.index_type and projection.index_type.lower() != "basic":
        return f"INDEX ... TYPE {projection.index_type}: this version builds the 'basic' type only"
    clashing = [c for c in (PART_OFFSET, PARENT_OFFSET, "_part_index") if c in column_types]
    if projection.stores_offsets and clashing:
        return (f"it selects _part_offset, but the table has a column {clashing[0]} (ClickHouse then stores no "
                "offsets into the parent part)")
    missing = [c for c in projection.selected if c not in ("*", PART_OFFSET) and c not in column_types]
    if missing:
        return f"selects {', '.join(missing)}, which are not stored columns of the table"
    try:
        types = key_element_types(projection.order_by, column_types)
    except ExpressionError as error:
        return f"ORDER BY {', '.join(projection.order_by)}: {error}"
    if any(t is None for t in types):
        return f"ORDER BY {', '.join(projection.order_by)}: only columns and the functions of partition keys are supported"
    return None


def check_declared(projections: Sequence[Projection], column_types: dict[str, str], merging_engine: bool) -> None:
    """A new table's projections must all be buildable (UnsupportedError naming the one that is not)."""
    seen: set[str] = set()
    for projection in projections:
        if projection.name in seen:
            raise SchemaMismatchError(f"projection {projection.name!r} is declared twice")
        seen.add(projection.name)
        reason = why_unbuildable(projection, column_types, merging_engine)
        if reason is not None:
            raise UnsupportedError(f"projection {projection.name!r}: {reason}")


_AGGREGATE = re.compile(r"^(\w+)\((`?)(\w*)\2\)$")
_INTEGERS = ("UInt8", "UInt16", "UInt32", "UInt64", "Int8", "Int16", "Int32", "Int64")
_NUMBERS = (*_INTEGERS, "Float32", "Float64")
# The functions whose states are built here, over non-Nullable numeric columns.
AGGREGATES = ("count", "sum", "avg", "min", "max", "any", "anyLast")


def _aggregates(projection: Projection) -> list[tuple[str, str, str]]:
    """(column name, function, argument column or '') of each aggregate of the select list."""
    out = []
    for element in projection.select:
        if element.strip("`") in projection.group_by:
            continue
        match = _AGGREGATE.match(element.replace(" ", ""))
        out.append((element, match.group(1), match.group(3)) if match else (element, "", ""))
    return out


def _why_not_aggregate(projection: Projection, column_types: dict[str, str]) -> str | None:
    keys = [k.strip("`") for k in projection.group_by]
    bad_keys = [k for k in keys if column_types.get(k) is None or column_types[k].startswith(("Nullable", "LowCardinality"))]
    if not keys or bad_keys or projection.order_by:
        return (f"aggregate projection: GROUP BY {', '.join(projection.group_by) or '(nothing)'}: this version builds "
                "aggregate projections grouped by non-Nullable columns, without ORDER BY")
    plain = [e.strip("`") for e in projection.select if _PLAIN.match(e.strip("`"))]
    if any(name not in keys for name in plain):
        return f"aggregate projection selects {', '.join(n for n in plain if n not in keys)} outside GROUP BY"
    for element, function, argument in _aggregates(projection):
        if function not in AGGREGATES or (function != "count" and column_types.get(argument) not in _NUMBERS) \
                or (function == "count" and argument and argument not in column_types):
            return (f"aggregate {element}: this version builds the states of {', '.join(AGGREGATES)} over "
                    f"non-Nullable numeric columns ({', '.join(_NUMBERS)}) only")
    return None


def _state_type(function: str, argument: str, column_types: dict[str, str]) -> str:
    if function == "count":
        return "AggregateFunction(count)" if not argument else f"AggregateFunction(count, {column_types[argument]})"
    return f"AggregateFunction({function}, {column_types[argument]})"


@lazy_njit
def _group_sums(values: np.ndarray, starts: np.ndarray, n: int) -> np.ndarray:  # pragma: no cover - compiled
    """Each group's float sum, added row after row as ClickHouse's sum state adds."""
    out = np.zeros(len(starts), np.float64)
    for g in range(len(starts)):
        end = starts[g + 1] if g + 1 < len(starts) else n
        total = 0.0
        for i in range(starts[g], end):
            total += values[i]
        out[g] = total
    return out


def _fixed(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Fixed-width little-endian values as (bytes, offsets n+1)."""
    width = values.dtype.itemsize
    data = np.ascontiguousarray(values.astype(values.dtype.newbyteorder("<"))).view(np.uint8)
    return data, np.arange(len(values) + 1, dtype=np.int64) * width


def _concat_rows(pieces: Sequence[tuple[np.ndarray, np.ndarray]]) -> pa.BinaryArray:
    """Per row, the bytes of every piece back to back: one state per row."""
    lengths: np.ndarray = np.sum([np.diff(offsets) for _, offsets in pieces], axis=0)
    offsets = np.zeros(len(lengths) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    out = np.empty(int(offsets[-1]), np.uint8)
    at = offsets[:-1].copy()
    for data, piece_offsets in pieces:
        sizes = np.diff(piece_offsets)
        dest = np.arange(len(data), dtype=np.int64) + np.repeat(at - piece_offsets[:-1], sizes)
        out[dest] = data
        at += sizes
    return pa.Array.from_buffers(pa.large_binary(), len(lengths), [None, pa.py_buffer(offsets), pa.py_buffer(out)]) \
        .cast(pa.binary())


_NUMPY = {"UInt8": np.uint8, "UInt16": np.uint16, "UInt32": np.uint32, "UInt64": np.uint64, "Int8": np.int8,
          "Int16": np.int16, "Int32": np.int32, "Int64": np.int64, "Float32": np.float32, "Float64": np.float64}


def _sum_dtype(argument_type: str) -> type[np.generic]:
    """The type a sum (and avg's numerator) of `argument_type` accumulates in: 8 bytes."""
    return np.float64 if argument_type.startswith("Float") else np.int64 if argument_type.startswith("Int") \
        else np.uint64


def _decode_varuints(data: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """The varuint filling data[starts[i]:ends[i]] of each row (every one at least a byte)."""
    lengths = ends - starts
    firsts = np.zeros(len(lengths), np.int64)
    np.cumsum(lengths[:-1], out=firsts[1:])
    within = np.arange(int(lengths.sum()), dtype=np.int64) - np.repeat(firsts, lengths)
    digits = (data[np.repeat(starts, lengths) + within].astype(np.uint64) & np.uint64(0x7F)) << (
        np.uint64(7) * within.astype(np.uint64))
    return np.add.reduceat(digits, firsts) if len(firsts) else np.zeros(0, np.uint64)


def _partials_of_states(function: str, argument_type: str, states: pa.Array | pa.ChunkedArray
                        ) -> tuple[np.ndarray | None, np.ndarray]:
    """A state column read back as (values, counts) per row: what `_states` combines."""
    offsets, data = string_buffers(states.combine_chunks() if isinstance(states, pa.ChunkedArray) else states)
    n = len(offsets) - 1
    if function == "count":
        return None, _decode_varuints(data, offsets[:-1], offsets[1:])
    if function in ("sum", "avg"):
        rows = data[(offsets[:-1, None] + np.arange(8)).ravel()] if n else np.zeros(0, np.uint8)
        values = rows.view(np.dtype(_sum_dtype(argument_type)).newbyteorder("<"))
        counts = _decode_varuints(data, offsets[:-1] + 8, offsets[1:]) if function == "avg" else np.ones(n, np.uint64)
        return values, counts
    dtype = np.dtype(_NUMPY[argument_type]).newbyteorder("<")
    picked = data[(offsets[:-1, None] + 1 + np.arange(dtype.itemsize)).ravel()] if n else np.zeros(0, np.uint8)
    return picked.view(dtype), np.ones(n, np.uint64)  # min/max/any/anyLast: a flag byte, then the value


def _states(function: str, values: np.ndarray | None, counts: np.ndarray, starts: np.ndarray, n: int
            ) -> pa.BinaryArray:
    """The state of `function` over each group of rows (groups start at `starts`), from each row's
    value and count: a row of the table (count 1), or a state of a projection part being merged
    (its partial sum, minimum, ... and count), combined in order as ClickHouse merges states."""
    group_counts = np.add.reduceat(counts.astype(np.uint64), starts) if len(starts) else np.zeros(0, np.uint64)
    if function == "count":
        return _concat_rows([encode_varuints(group_counts)])
    assert values is not None
    flag = (np.ones(len(starts), np.uint8), np.arange(len(starts) + 1, dtype=np.int64))
    if function in ("min", "max", "any", "anyLast"):
        if function == "any":
            picked = values[starts]
        elif function == "anyLast":
            picked = values[np.append(starts[1:], n) - 1]
        else:
            picked = (np.minimum if function == "min" else np.maximum).reduceat(values, starts)
        return _concat_rows([flag, _fixed(picked)])
    if values.dtype.kind == "f":
        sums = _group_sums(values.astype(np.float64), starts, n)
    else:
        sums = np.add.reduceat(values.astype(np.int64 if values.dtype.kind == "i" else np.uint64), starts)
    if function == "sum":
        return _concat_rows([_fixed(sums)])
    return _concat_rows([_fixed(sums), encode_varuints(group_counts)])  # avg: numerator, then the count


def _aggregate_table(projection: Projection, rows: pa.Table, column_types: dict[str, str]
                     ) -> tuple[pa.Table, list[tuple[str, str]], list[str]]:
    """An aggregate projection's rows (one per group, by the GROUP BY key), columns and key. `rows`
    are the table's rows, or (a merge) the rows of the sources' projection parts in order: their
    states are then combined, as ClickHouse's merge of aggregate projection parts does."""
    keys = [k.strip("`") for k in projection.group_by]
    n = rows.num_rows
    order = sort_indices(keys, rows, column_types) if n > 1 else pa.array(range(n), pa.uint64())
    grouped = rows.take(order)
    changes = np.zeros(n, bool)
    if n:
        changes[0] = True
        for key in keys:
            column = grouped.column(key)
            changes[1:] |= ~np.asarray(pc.equal(column.slice(1), column.slice(0, n - 1)).combine_chunks()
                                       if isinstance(column, pa.ChunkedArray) else
                                       pc.equal(column.slice(1), column.slice(0, n - 1)))
    starts = np.flatnonzero(changes)
    arrays: dict[str, pa.Array] = {key: grouped.column(key).take(pa.array(starts)) for key in keys}
    columns: list[tuple[str, str]] = []
    aggregates = {element: (function, argument) for element, function, argument in _aggregates(projection)}
    for element in projection.select:
        name = element.strip("`")
        if name in keys:
            columns.append((name, column_types[name]))
            continue
        function, argument = aggregates[element]
        values: np.ndarray | None
        if element in grouped.column_names:  # states of the sources' projection parts
            values, counts = _partials_of_states(function, column_types.get(argument, ""), grouped.column(element))
        else:
            values = grouped.column(argument).to_numpy() if argument and function != "count" else None
            counts = np.ones(n, np.uint64)
        arrays[element] = _states(function, values, counts, starts, n)
        columns.append((element, _state_type(function, argument, column_types)))
    return pa.table({name: arrays[name] for name, _ in columns}), columns, keys


def projection_files(projection: Projection, rows: pa.Table, columns: Sequence[tuple[str, str]],
                     settings: WriterSettings, table_settings: dict[str, str]) -> PartFiles:
    """The files of one projection over `rows` (the parent part's rows, in the order they came)."""
    column_types = dict(columns)
    if projection.is_aggregate:
        table, selected, key = _aggregate_table(projection, rows, column_types)
        column_types = {**column_types, **dict(selected)}
    else:
        selected = normal_columns(projection, columns)
        names = [name for name, _ in selected]
        column_types[PARENT_OFFSET] = "UInt64"
        table, key = rows.select(names), list(projection.order_by)
        if key and table.num_rows > 1:
            table = table.take(sort_indices(key, table, column_types))
    key_types = key_columns_for(key, column_types)
    key_values = key_element_arrays(key, table, column_types)
    primary_key = [(type_text, values) for (_, type_text), values in zip(key_types, key_values, strict=True)]
    return encode_part(table, selected, primary_key, None, dataclasses.replace(settings, skip_indexes=()),
                       table_settings)


def normal_columns(projection: Projection, columns: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
    """(name, type) of a normal projection's columns: the stored ones it holds in table order, then
    `_parent_part_offset` UInt64 when it selects _part_offset (ClickHouse renames the virtual column
    and puts it last)."""
    types = dict(columns)
    out = [(name, types[name]) for name in projection.columns([n for n, _ in columns])]
    return [*out, (PARENT_OFFSET, "UInt64")] if projection.stores_offsets else out


def with_offsets(rows: pa.Table, offsets: np.ndarray | pa.Array) -> pa.Table:
    """`rows` with the column `_parent_part_offset`: each row's offset in the part being written."""
    return rows.append_column(PARENT_OFFSET, pa.array(offsets, pa.uint64()))


def rows_in_place(column_of: Callable[[str], pa.Array | pa.ChunkedArray], rows: int
                  ) -> Callable[[Projection, list[str]], pa.Table]:
    """The `rows` of add_projections for a part written from its columns in the part's order (a
    mutation's rewrite): `column_of(name)` over its `rows` rows, which are at offsets 0, 1, 2, ..."""
    def selected(_projection: Projection, names: list[str]) -> pa.Table:
        return pa.table({name: pa.array(np.arange(rows, dtype=np.uint64)) if name == PARENT_OFFSET
                         else column_of(name) for name in names})
    return selected


def kept_projection_parts(reader: PartReader, projections: Sequence[Projection], columns: Sequence[str],
                          changed: Collection[str]) -> dict[str, PartFiles]:
    """The projection parts a mutation changing columns `changed` (rows kept in place) keeps as they
    are, by name: those `reader` holds whose columns it does not change, as ClickHouse's mutation
    links them unchanged (a projection of offsets keeps the order its insert gave equal keys)."""
    kept = {}
    for projection in projections:
        if projection.name in reader.projections and not set(projection_columns(projection, columns)) & set(changed):
            held = reader.projection_reader(projection.name)
            kept[projection.name] = PartFiles({name: held.source.read_file(held.part, name)
                                               for name in held.source.list_files(held.part)})
    return kept


def combined_states(projection: Projection, rows: pa.Table, column_types: dict[str, str]) -> pa.Table:
    """An aggregate projection's rows (one per group) of `rows`: the table's rows, or rows of states
    (its projection parts', in order), combined as ClickHouse merges states."""
    return _aggregate_table(projection, rows, column_types)[0]


def aggregate_columns(projection: Projection, column_types: dict[str, str]) -> list[tuple[str, str]]:
    """(name, type) of an aggregate projection's columns: its GROUP BY keys and its states."""
    keys = {k.strip("`") for k in projection.group_by}
    aggregates = {element: (function, argument) for element, function, argument in _aggregates(projection)}
    return [(element.strip("`"), column_types[element.strip("`")]) if element.strip("`") in keys
            else (element, _state_type(*aggregates[element], column_types)) for element in projection.select]


def state_columns(projection: Projection) -> list[str]:
    """The columns of an aggregate projection's part: its GROUP BY keys and its states."""
    return [e.strip("`") if e.strip("`") in projection.group_by else e for e in projection.select]


def projection_columns(projection: Projection, stored: Sequence[str]) -> list[str]:
    """The columns a projection is computed from: stored ones, and `_parent_part_offset` (last) for
    a projection of offsets: the `rows` add_projections is given must hold it (`with_offsets`)."""
    if not projection.is_aggregate:
        return projection.columns(stored) + ([PARENT_OFFSET] if projection.stores_offsets else [])
    wanted = {a for _, _, a in _aggregates(projection) if a} | {k.strip("`") for k in projection.group_by}
    return [name for name in stored if name in wanted]


def add_projections(files: PartFiles, projections: Sequence[Projection],
                    rows: Callable[[Projection, list[str]], pa.Table], columns: Sequence[tuple[str, str]],
                    settings: WriterSettings, table_settings: dict[str, str],
                    built_parts: Mapping[str, PartFiles] | None = None) -> PartFiles:
    """`files` (a finished part) with every projection's files under `<name>.proj/` and their
    entries in its checksums.txt: `built_parts[name]` where given (a merge's merged projection
    parts), else built from `rows(projection, names)`: those columns of the part's rows, in the order
    a normal projection keeps between equal keys."""
    if not projections:
        return files
    stored = [n for n, _ in columns]
    checksums = Checksums.parse(bytes(files.files[CHECKSUMS_FILE]), CHECKSUMS_FILE)
    entries = dict(checksums.files)
    for projection in projections:
        built = (built_parts or {}).get(projection.name)
        if built is None:
            table = rows(projection, projection_columns(projection, stored))
            built = projection_files(projection, table, columns, settings, table_settings)
        directory = projection.name + PROJECTION_SUFFIX
        for name, data in built.files.items():
            files.files[f"{directory}/{name}"] = data
        for name, cuts in built.boundaries.items():
            files.boundaries[f"{directory}/{name}"] = cuts
        inner = Checksums.parse(bytes(built.files[CHECKSUMS_FILE]), f"{directory}/{CHECKSUMS_FILE}")
        entries[directory] = FileChecksum(inner.total_size, inner.total_hash())
    files.files[CHECKSUMS_FILE] = Checksums(dict(sorted(entries.items()))).to_bytes()
    return files

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

An aggregate projection (`SELECT toStartOfHour(ts), count(), uniq(u), quantile(0.9)(v), sumIf(x,
x > 0) GROUP BY toStartOfHour(ts)`) is a part of one row per group, sorted by the GROUP BY elements,
holding them and each aggregate's state (ClickHouse's AggregateFunction serialization), under
ClickHouse's column names (expressions/aggregates.py); the states are built by
format/state_builders.py, and those of several parts combined as ClickHouse merges them
(`combined_states`).

Inserts and mutations write every buildable projection from the rows of the part they write; a
merge from its sources' projection parts and rows (engine/merge.py; big inputs from runs,
engine/projection_merge.py; a projection of offsets in memory). Projections this version cannot build
(INDEX types but 'basic', keys or arguments it cannot evaluate or name, aggregate functions whose
states it does not build) are refused in our tables' statements, and parts ClickHouse made with them are not merged (the selector
leaves them alone) rather than losing them.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Collection, Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from spark_mergetree.errors import ExpressionError, SchemaMismatchError, UnsupportedError
from spark_mergetree.expressions import aggregates
from spark_mergetree.expressions.ddl import (
    PART_OFFSET,
    Projection,
    parse_projection,
    quote_identifier,
    split_call,
)
from spark_mergetree.expressions.functions import needs_ordering_map
from spark_mergetree.expressions.key_condition import key_columns_for
from spark_mergetree.expressions.predicate import columns_of, parse_expression
from spark_mergetree.expressions.sort_key import key_element_arrays, key_element_types, sort_indices
from spark_mergetree.format import state_builders
from spark_mergetree.format.checksums import PROJECTION_SUFFIX, Checksums, FileChecksum
from spark_mergetree.format.compact_writer import encode_part
from spark_mergetree.format.part import CHECKSUMS_FILE, PartFiles
from spark_mergetree.format.part_reader import PartReader
from spark_mergetree.format.part_writer import WriterSettings
from spark_mergetree.format.types import FixedString
from spark_mergetree.format.values import value_width

# The column of a projection selecting _part_offset: each row's offset in the parent part.
PARENT_OFFSET = "_parent_part_offset"


def declared_projections(indexes: Sequence[str]) -> list[Projection]:
    """The PROJECTION elements of a statement, parsed."""
    return [p for text in indexes if (p := parse_projection(text)) is not None]


# The values of the table setting deduplicate_merge_projection_mode under which ClickHouse lets a
# table whose engine combines rows in merges have projections (engine/merge.py: what each does).
MERGE_PROJECTION_MODES = ("drop", "rebuild", "ignore")


def why_unbuildable(projection: Projection, column_types: dict[str, str], merging_engine: bool,
                    merge_projection_mode: str | None = None) -> str | None:
    """Why parts of this version cannot carry `projection` (None when they can). `merging_engine`:
    the table's engine combines rows in merges; `merge_projection_mode`: then its setting
    deduplicate_merge_projection_mode (None: ClickHouse's default, 'throw')."""
    if merging_engine and merge_projection_mode not in MERGE_PROJECTION_MODES:
        return ("ClickHouse refuses projections on engines that combine rows in merges unless the table setting "
                "deduplicate_merge_projection_mode is 'drop', 'rebuild' or 'ignore' (the default 'throw' refuses them)")
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


def check_declared(projections: Sequence[Projection], column_types: dict[str, str], merging_engine: bool,
                   merge_projection_mode: str | None = None) -> None:
    """A new table's projections must all be buildable (UnsupportedError naming the one that is not)."""
    seen: set[str] = set()
    for projection in projections:
        if projection.name in seen:
            raise SchemaMismatchError(f"projection {projection.name!r} is declared twice")
        seen.add(projection.name)
        reason = why_unbuildable(projection, column_types, merging_engine, merge_projection_mode)
        if reason is not None:
            raise UnsupportedError(f"projection {projection.name!r}: {reason}")


def _selected_key(text: str, schema: dict[str, str], key_names: set[str]) -> str | None:
    """The column name of a select element that is one of the GROUP BY elements (None otherwise)."""
    try:
        name = aggregates.element(text, schema).name
    except UnsupportedError:
        return None
    return name if name in key_names else None


@dataclasses.dataclass(frozen=True)
class _Aggregation:
    """An aggregate projection understood: its GROUP BY elements, its aggregates, and its part's
    columns (name, type) in the order of the select list."""

    keys: tuple[aggregates.Element, ...]
    calls: tuple[aggregates.Aggregate, ...]
    columns: tuple[tuple[str, str], ...]


def _aggregation(projection: Projection, column_types: Mapping[str, str]) -> _Aggregation:
    """UnsupportedError naming the element this version cannot build."""
    return _understood(projection, tuple(column_types.items()))


@functools.lru_cache(maxsize=256)  # (asked for every part written, and by every merge of the table)
def _understood(projection: Projection, typed_columns: tuple[tuple[str, str], ...]) -> _Aggregation:
    # ClickHouse's projection part holds the GROUP BY elements first, in their order (selected or
    # not), then the aggregates in select order; aliases name nothing (GROUP BY may use them).
    schema = dict(typed_columns)
    if projection.order_by:
        raise UnsupportedError("an aggregate projection with ORDER BY is not supported (ClickHouse refuses it too)")
    selected = [aggregates.split_alias(text) for text in projection.select]
    aliases = {alias: text for text, alias in selected if alias}
    keys = [aggregates.element(aliases.get(text.strip("`"), text), schema) for text in projection.group_by]
    types = {key.name: key.type for key in keys}
    calls: list[aggregates.Aggregate] = []
    for text, _ in selected:
        if _selected_key(text, schema, set(types)) is not None:
            continue
        if split_call(text) is None:
            raise UnsupportedError(f"{text} is selected outside GROUP BY")
        call = aggregates.aggregate(text, schema)
        reason = state_builders.why_not_buildable(call.state)
        if reason is not None:
            raise UnsupportedError(f"aggregate {text}: {reason}")
        calls.append(call)
    columns = [(key.name, key.type) for key in keys] + [(call.name, call.state.to_clickhouse()) for call in calls]
    return _Aggregation(tuple(keys), tuple(calls), tuple(columns))


def _why_not_aggregate(projection: Projection, column_types: dict[str, str]) -> str | None:
    try:
        _aggregation(projection, column_types)
    except (UnsupportedError, ExpressionError) as error:
        return f"aggregate projection: {error}"
    return None


def _group_starts(keys: Sequence[pa.Array], n: int) -> np.ndarray:
    """Where each group of sorted rows starts: a key differs from the row before (NULL equals NULL)."""
    changes = np.zeros(n, bool)
    if n:
        changes[0] = True
    for key in keys:
        if n < 2:
            break
        after, before = key.slice(1), key.slice(0, n - 1)
        same = pc.fill_null(pc.equal(after, before), False)
        if key.null_count:
            same = pc.or_(same, pc.and_(after.is_null(), before.is_null()))
        changes[1:] |= ~np.asarray(same)
    return np.flatnonzero(changes).astype(np.int64)


def _ranks(array: pa.Array, type_text: str) -> tuple[np.ndarray, int] | None:
    """Each row's rank among the key's distinct values in ClickHouse's order (NULL last) and the
    number of ranks; None for the types whose equality or order Arrow's dictionaries do not give as
    ClickHouse's (floats: -0.0 and 0.0, NaNs; Enum and UUID order)."""
    if pa.types.is_dictionary(array.type):
        array = array.dictionary_decode()
    if pa.types.is_floating(array.type) or needs_ordering_map(type_text) or pa.types.is_nested(array.type):
        return None
    encoded = array.dictionary_encode()
    distinct = len(encoded.dictionary)
    rank_of = np.empty(distinct + 1, np.int64)
    rank_of[np.asarray(pc.array_sort_indices(encoded.dictionary))] = np.arange(distinct)
    rank_of[distinct] = distinct
    return rank_of[np.asarray(encoded.indices.fill_null(distinct))], distinct + 1


def _ranked_order(keys: Sequence[pa.Array], types: Sequence[str]) -> tuple[np.ndarray, np.ndarray] | None:
    """The rows in the order of their GROUP BY keys (stable) and where each group starts, from one
    integer per row combining the keys' ranks (a hash of each key instead of comparisons of rows:
    several times faster than sorting the rows by the keys); None where `_ranks` declines or the
    ranks do not fit 62 bits."""
    codes = np.zeros(len(keys[0]), np.int64)
    span = 1
    for array, type_text in zip(keys, types, strict=True):
        ranked = _ranks(array, type_text)
        if ranked is None or span * ranked[1] >= 1 << 62:
            return None
        codes = codes * ranked[1] + ranked[0]
        span *= ranked[1]
    order = np.argsort(codes, kind="stable")
    in_order = codes[order]
    starts = np.flatnonzero(np.append(True, in_order[1:] != in_order[:-1])).astype(np.int64)
    return order, starts


def _aggregate_table(projection: Projection, rows: pa.Table, column_types: Mapping[str, str]
                     ) -> tuple[pa.Table, list[tuple[str, str]], list[str]]:
    """An aggregate projection's rows (one per group, sorted by the GROUP BY elements), its columns
    and its key. `rows` are the table's rows, or (a merge) rows of the sources' projection parts in
    order, holding the keys and states: the states are then combined, as ClickHouse's merge of
    aggregate projection parts does."""
    aggregation = _aggregation(projection, column_types)
    of_states = all(call.name in rows.column_names for call in aggregation.calls) and \
        all(key.name in rows.column_names for key in aggregation.keys)
    n = rows.num_rows
    key = aggregate_key(projection, column_types)
    if of_states and not key:
        # Without GROUP BY, ClickHouse's merge keeps every source's row as it is (nothing to group by).
        return rows.select([name for name, _ in aggregation.columns]), list(aggregation.columns), key
    keyed = pa.table({k.name: _combined(rows.column(k.name)) if of_states else aggregates.values(k, rows)
                      for k in aggregation.keys}) if aggregation.keys else pa.table({"_": pa.nulls(n)})
    types = {k.name: k.type for k in aggregation.keys}
    ranked = _ranked_order([_combined(keyed.column(k.name)) for k in aggregation.keys], list(types.values())) \
        if key and n > 1 else None
    if ranked is not None:
        order = pa.array(ranked[0])
        starts = ranked[1]
        sorted_keys = [_combined(keyed.column(k.name)).take(order) for k in aggregation.keys]
    else:
        order = sort_indices(key, keyed, types) if key and n > 1 else pa.array(np.arange(n, dtype=np.uint64))
        sorted_keys = [_combined(keyed.column(k.name)).take(order) for k in aggregation.keys]
        starts = _group_starts(sorted_keys, n)
    arrays: dict[str, pa.Array] = {k.name: column.take(pa.array(starts)) for k, column in
                                   zip(aggregation.keys, sorted_keys, strict=True)}
    for call in aggregation.calls:
        if of_states:
            arrays[call.name] = state_builders.combined_states(call.state, _combined(rows.column(call.name)).take(order),
                                                               starts)
        elif _interleaved(call, aggregation.keys):
            arrays[call.name] = _interleaved_states(call, rows, order, starts)
        else:
            arguments = [aggregates.values(argument, rows).take(order) for argument in call.arguments]
            arrays[call.name] = state_builders.states_of_rows(call.state, arguments, starts, n)
    table = pa.table({name: arrays[name] for name, _ in aggregation.columns})
    return table, list(aggregation.columns), key


# Functions whose in-memory state is at most 16 bytes (of arguments of at most 8 bytes, none
# Nullable, no combinator): ClickHouse's aggregation by one 1-byte key adds a block's rows to them
# through lookup tables (IAggregateFunctionDataHelper::addBatchLookupTable8), which changes the
# order rows reach a state (see `_interleaved_states`).
_INTERLEAVED = frozenset(("count", "sum", "sumKahan", "sumWithOverflow", "avg", "sumCount", "avgWeighted",
                          "min", "max", "any", "anyLast"))
_ONE_BYTE_KEYS = ("UInt8", "Int8", "Bool")  # and Enum8


def _interleaved(call: aggregates.Aggregate, keys: Sequence[aggregates.Element]) -> bool:
    state = call.state
    key_type = keys[0].type if len(keys) == 1 else ""
    return ((key_type in _ONE_BYTE_KEYS or key_type.startswith("Enum8(")) and state.function in _INTERLEAVED
            and all(not isinstance(a, FixedString) and (value_width(a) or 99) <= 8 for a in state.arguments))


def _interleaved_states(call: aggregates.Aggregate, rows: pa.Table, order: pa.Array, starts: np.ndarray
                        ) -> pa.BinaryArray:
    """The states of `call` per group of a 1-byte key as ClickHouse builds them: row i of the block
    (of n) goes to the key's accumulator i % 4 while i < n - n % 4; the key's state is then the
    merge of its accumulators in order 0..3, to which the last n % 4 rows are added one by one,
    which is the merge of one more state per such row."""
    n = rows.num_rows
    positions = np.asarray(order, np.int64)
    unrolled = n - n % 4
    accumulator = np.where(positions < unrolled, positions % 4, 4 + positions - unrolled)
    group = np.repeat(np.arange(len(starts)), np.diff(np.append(starts, n)))
    within = np.lexsort((accumulator, group))  # stable: rows of one accumulator keep their order
    regrouped = positions[within]
    changed = np.ones(n, bool)
    changed[1:] = (group[within][1:] != group[within][:-1]) | (accumulator[within][1:] != accumulator[within][:-1])
    sub_starts = np.flatnonzero(changed).astype(np.int64)
    arguments = [aggregates.values(argument, rows).take(pa.array(regrouped)) for argument in call.arguments]
    partial = state_builders.states_of_rows(call.state, arguments, sub_starts, n)
    first_of_group = np.flatnonzero(np.append(True, group[within][sub_starts[1:]] != group[within][sub_starts[:-1]]))
    return state_builders.combined_states(call.state, partial, first_of_group.astype(np.int64))


def _combined(column: pa.Array | pa.ChunkedArray) -> pa.Array:
    return column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column


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


def combined_states(projection: Projection, rows: pa.Table, column_types: Mapping[str, str]) -> pa.Table:
    """An aggregate projection's rows (one per group) of `rows`: the table's rows, or rows of states
    (its projection parts', in order), combined as ClickHouse merges states."""
    return _aggregate_table(projection, rows, column_types)[0]


def aggregate_columns(projection: Projection, column_types: Mapping[str, str]) -> list[tuple[str, str]]:
    """(name, type) of an aggregate projection's columns: its GROUP BY elements and its states, in
    the order of the select list."""
    return list(_aggregation(projection, column_types).columns)


def aggregate_key(projection: Projection, column_types: Mapping[str, str]) -> list[str]:
    """The key of an aggregate projection's part: its GROUP BY elements' columns (quoted names)."""
    return [quote_identifier(key.name) for key in _aggregation(projection, column_types).keys]


def state_columns(projection: Projection, column_types: Mapping[str, str]) -> list[str]:
    """The columns of an aggregate projection's part: its GROUP BY elements and its states."""
    return [name for name, _ in aggregate_columns(projection, column_types)]


def projection_columns(projection: Projection, stored: Sequence[str]) -> list[str]:
    """The columns a projection is computed from: stored ones, and `_parent_part_offset` (last) for
    a projection of offsets: the `rows` add_projections is given must hold it (`with_offsets`)."""
    if not projection.is_aggregate:
        return projection.columns(stored) + ([PARENT_OFFSET] if projection.stores_offsets else [])
    texts = list(projection.group_by)
    for written in projection.select:
        text, alias = aggregates.split_alias(written)
        if alias in texts:
            texts.remove(alias)  # (a GROUP BY of an alias reads what the aliased expression reads)
        call = split_call(text)
        texts += [t for t in (call[1][-1] if call is not None else (text,)) if t != "*"]
    wanted = {name for text in texts for name in columns_of(parse_expression(text))}
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

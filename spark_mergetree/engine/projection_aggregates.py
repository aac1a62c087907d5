"""GROUP BY answered from aggregate projections: the projection parts' states, combined.

`aggregate(table, ["k"], ["sum(v)", "count()", "min(v)", "max(v)", "avg(v)"])` is `SELECT k,
sum(v), count(), min(v), max(v), avg(v) FROM t GROUP BY k`. When an aggregate projection of the
table covers it (its GROUP BY elements are the query's, and it holds a state of every aggregate
asked for, under ClickHouse's column names: expressions/aggregates.py), the answer is built as
ClickHouse's optimize_use_projections builds it: every part holding the projection gives its
projection part's rows (one per group: keys and states); every other part (written before the
projection was added, or with a lightweight DELETE's mask: its projection part would count the
deleted rows) gives states built from its rows (format/state_builders.py); all of them are
combined group by group as ClickHouse merges states (engine/projections.py `combined_states`) and
the states turned into values. Otherwise (no covering projection, a `where`, patch parts of
lightweight UPDATEs in the snapshot, `use_projections=False`) the states are built from every
part's rows the same way: the answer is the same, only the reading differs.

Answered: count(), sum, min, max and avg of numeric columns or arithmetic on them (the values of
their states; a Decimal or other argument is refused by name before anything is read). Group keys
are columns or the key functions aggregate projections take (`toStartOfHour(ts)`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from spark_mergetree.engine import projections as projecting
from spark_mergetree.errors import ExpressionError, InvalidOptionError, UnsupportedError
from spark_mergetree.expressions import aggregates
from spark_mergetree.expressions.ddl import Projection, parse_projection
from spark_mergetree.format.state_rows import decode_varuints
from spark_mergetree.format.types import Primitive

if TYPE_CHECKING:
    from spark_mergetree.engine.table import MergeTreeTable
    from spark_mergetree.txn.transaction import Transaction

ANSWERED = ("count", "sum", "min", "max", "avg")
_NUMPY = {"UInt8": "<u1", "UInt16": "<u2", "UInt32": "<u4", "UInt64": "<u8", "Int8": "<i1", "Int16": "<i2",
          "Int32": "<i4", "Int64": "<i8", "Float32": "<f4", "Float64": "<f8", "Bool": "<u1"}


@dataclass
class AggregateResult:
    """The answer (keys, then one column per aggregate, named as asked) and how it was read."""

    table: pa.Table
    projection: str | None  # the aggregate projection whose states answered (None: rows only)
    parts_from_projection: list[str] = field(default_factory=list)
    parts_from_rows: list[str] = field(default_factory=list)


def _query(group_by: Sequence[str], calls: Sequence[str], column_types: dict[str, str]) -> Projection:
    """The query as an aggregate projection of its own (its elements named and typed as ClickHouse
    names them); errors name what is not answered."""
    if not calls:
        raise InvalidOptionError("aggregate: name at least one aggregate function, e.g. count()")
    for text in calls:
        call = aggregates.aggregate(text, column_types)
        state = call.state
        if state.function not in ANSWERED or state.parameters or (state.function != "count" and len(state.arguments) != 1):
            raise UnsupportedError(f"aggregate {text!r}: only {', '.join(f + '()' for f in ANSWERED)} "
                                   "of one numeric argument (count of none) are answered here")
        if state.arguments and not (isinstance(state.arguments[0], Primitive)
                                    and state.arguments[0].to_clickhouse() in _NUMPY):
            raise UnsupportedError(f"aggregate {text!r}: its argument is {state.arguments[0].to_clickhouse()}; "
                                   "only numbers are answered here")
    select = ", ".join([*group_by, *calls])
    grouped = f" GROUP BY {', '.join(group_by)}" if group_by else ""
    parsed = parse_projection(f"PROJECTION _query (SELECT {select}{grouped})")
    if parsed is None or not parsed.is_aggregate:
        raise InvalidOptionError(f"aggregate: SELECT {select}{grouped} is not an aggregation")
    return parsed


def _covering(query: Projection, candidates: Sequence[Projection], column_types: dict[str, str]) -> Projection | None:
    """The first aggregate projection with the query's GROUP BY elements and a state of each of its
    aggregates (same ClickHouse column names, same state types)."""
    wanted = dict(projecting.aggregate_columns(query, column_types))
    keys = projecting.aggregate_key(query, column_types)
    for projection in candidates:
        if not projection.is_aggregate:
            continue
        try:
            held = dict(projecting.aggregate_columns(projection, column_types))
            held_keys = projecting.aggregate_key(projection, column_types)
        except (UnsupportedError, ExpressionError):
            continue
        if sorted(held_keys) == sorted(keys) and all(held.get(name) == type_text for name, type_text in wanted.items()):
            return projection
    return None


def aggregate(table: MergeTreeTable, group_by: Sequence[str], calls: Sequence[str], where: str | None = None, *,
              snapshot: int | None = None, transaction: Transaction | None = None,
              use_projections: bool = True) -> AggregateResult:
    """`SELECT <group_by>, <calls> FROM table [WHERE where] GROUP BY <group_by>`, one row per group
    in the order of the keys (see the module doc)."""
    meta = table.metadata
    column_types = dict(meta.column_types)
    if not group_by:
        raise InvalidOptionError("aggregate: name the GROUP BY elements (at least one)")
    query = _query(list(group_by), list(calls), column_types)
    names = [name for name, _ in projecting.aggregate_columns(query, column_types)]
    csn, visible = table.visible_parts(snapshot=snapshot, transaction=transaction)
    patches = table.patches_at(csn)
    projection = None
    if use_projections and where is None and not patches:
        projection = _covering(query, meta.projections, column_types)
    from_projection: list[str] = []
    from_rows: list[str] = []
    for part in sorted(visible):
        reader = table.reader(part)
        usable = projection is not None and projection.name in reader.projections and not reader.has_row_mask
        (from_projection if usable else from_rows).append(part)
    pieces = []
    if projection is not None:
        held = dict(projecting.aggregate_columns(projection, column_types))
        for part in from_projection:
            sub = table.reader(part).projection_reader(projection.name)
            pieces.append(sub.read(names, None, {name: held[name] for name in names}))
    if from_rows:
        read = [c for c, _ in meta.columns if c in projecting.projection_columns(query, list(column_types))]
        rows = table.to_arrow(read or [meta.columns[0][0]], where=where, snapshot=csn, transaction=transaction) \
            if len(from_rows) == len(visible) else _rows_of(table, from_rows, read, csn)
        if rows.num_rows:
            pieces.append(projecting.combined_states(query, rows, column_types))
    if not pieces:  # no rows at all: the states of an empty read, typed as any other answer's
        read = [c for c, _ in meta.columns if c in projecting.projection_columns(query, list(column_types))]
        pieces.append(projecting.combined_states(query, table.schema.empty_table().select(read), column_types))
    states = projecting.combined_states(query, pa.concat_tables(pieces), column_types)
    table_out = _final(query, states, column_types, list(calls), list(group_by))
    return AggregateResult(table_out, projection.name if projection is not None else None, from_projection, from_rows)


def _rows_of(table: MergeTreeTable, parts: Sequence[str], columns: list[str], csn: int | None) -> pa.Table:
    """The rows of `parts` (as a read of them returns them: masks and patches applied)."""
    plan = table.plan_read(columns, None, parts=set(parts), snapshot=csn, use_projections=False)
    read = [table.read_task(task, columns) for task in plan.tasks]
    return pa.concat_tables(read) if read else pa.schema([table.schema.field(c) for c in columns]).empty_table()


def _final(query: Projection, states: pa.Table, column_types: dict[str, str], calls: list[str],
           group_by: list[str]) -> pa.Table:
    """Keys and each aggregate's value (its state finalized), named as the caller wrote them."""
    columns = projecting.aggregate_columns(query, column_types)
    keys = [name for name, type_text in columns if not type_text.startswith("AggregateFunction(")]
    out: dict[str, pa.Array] = {}
    for text, name in zip(group_by, keys, strict=True):
        out[text] = states.column(name).combine_chunks()
    for text in calls:
        call = aggregates.aggregate(text, column_types)
        out[text] = _values(call, states.column(call.name).combine_chunks())
    return pa.table(out)


def _values(call: aggregates.Aggregate, states: pa.Array) -> pa.Array:
    """The results of states of count/sum/min/max/avg of a number (ClickHouse's result types). Each
    state's layout is format/aggregate_states.py's: count a varuint; sum a 64-bit total (Int64,
    UInt64 or Float64 by the argument); avg that total then a varuint count; min/max a flag byte
    then the value's bytes."""
    n = len(states)
    binary = states.cast(pa.binary()) if not pa.types.is_binary(states.type) else states
    buffers = binary.buffers()
    offsets = np.frombuffer(buffers[1], np.int32, n + 1, binary.offset * 4).astype(np.int64) if n else np.zeros(1, np.int64)
    data = np.frombuffer(buffers[2], np.uint8) if n and buffers[2] is not None else np.zeros(0, np.uint8)
    starts, ends = offsets[:-1], offsets[1:]
    function = call.state.function
    if function == "count":
        return pa.array(decode_varuints(data, starts, ends).astype(np.uint64))
    argument = call.state.arguments[0].to_clickhouse()
    if function in ("sum", "avg"):
        total_type = "<f8" if argument.startswith("Float") else "<u8" if argument.startswith(("UInt", "Bool")) else "<i8"
        totals = _fixed(data, starts, 8).view(total_type).reshape(n)
        if function == "sum":
            return pa.array(totals)
        counts = decode_varuints(data, starts + 8, ends).astype(np.float64)
        with np.errstate(divide="ignore", invalid="ignore"):
            return pa.array(totals.astype(np.float64) / counts)
    width = np.dtype(_NUMPY[argument]).itemsize
    present = data[starts] != 0
    values = _fixed(data, starts + 1, width, present).view(_NUMPY[argument]).reshape(n)
    return pa.array(values, mask=~present)


def _fixed(data: np.ndarray, at: np.ndarray, width: int, present: np.ndarray | None = None) -> np.ndarray:
    """`width` bytes at each offset `at` (zeros where not `present`), as an (n, width) uint8 array."""
    positions = at[:, None] + np.arange(width)[None, :]
    if present is not None:
        positions = np.where(present[:, None], positions, 0)
    picked = data[np.minimum(positions, max(0, len(data) - 1))] if len(data) else np.zeros(positions.shape, np.uint8)
    if present is not None:
        picked = np.where(present[:, None], picked, 0).astype(np.uint8)
    return np.ascontiguousarray(picked)

"""The MergeTree engine family: what a merge and `SELECT ... FINAL` do to the rows of one sorting key.

`ReplacingMergeTree([version[, is_deleted]])`, `SummingMergeTree([columns])`, `AggregatingMergeTree`,
`CollapsingMergeTree(sign)` and `VersionedCollapsingMergeTree(sign, version)` keep parts like MergeTree
and differ only in what a merge (or a FINAL read) makes of rows with equal sorting keys. The input is
always rows sorted by the sorting key, rows of equal keys in insertion order (part by part in block
order, then row order in a part), as ClickHouse's merging algorithms see them:

* Replacing: the last row of each key, or with `version` the last row with the greatest version; with
  `is_deleted`, a FINAL read drops keys whose surviving row has is_deleted = 1 (merges keep it).
* Summing: one row per key; the summed columns (the listed ones, or every numeric column outside the
  sorting and partition keys; Nullable ones skip NULLs) hold the sums (wrapping in the column's type),
  other columns the key's first row; a row whose summed columns all hold their default (0, or NULL
  for a Nullable column: a Nullable sum of 0 keeps its row) is dropped. SimpleAggregateFunction
  columns are combined with their function.
* Aggregating: one row per key, SimpleAggregateFunction columns combined with their function, other
  columns from the key's first row. AggregateFunction states cannot be combined here: refused.
ClickHouse (26.x) never compares the keys of two rows of one part of level > 0 (it takes them for
different keys, ClickHouse issue #120649), and names the parts of inserts it
merged (optimize_on_insert) at level 1. For Collapsing tables, whose parts keep up to two rows per
key, that changes which rows survive; we do the same (`plan_rows(sources=...)`, and inserts into
tables of these engines are named at level 1), so ClickHouse and we keep the same rows. For the other
engines every part of level > 0 holds each key once, so it changes nothing (VersionedCollapsing
compares keys always). Within a run of rows compared as one key:

* Collapsing: per key, with P rows of sign 1 and N of sign -1: nothing if P = N and the last row is
  negative; otherwise the first negative row if P ≤ N and the last positive row if P ≥ N (a FINAL
  read keeps only the positive one).
* VersionedCollapsing: per (key, version) — the version ends the sorting key — each row of one sign
  cancels the latest still unmatched row of the other sign; the unmatched rows stay. ClickHouse's
  queue of unmatched rows holds at most 8191 rows: a row arriving while it is full first writes out
  the oldest waiting row, which no later row can cancel then; so do we (`_versioned_bounded`).

With an empty sorting key (ORDER BY tuple()) ClickHouse's Replacing and Collapsing merges take all
rows for one key, while its Summing and Aggregating merges find no key to compare and take every row
for a key of its own: nothing is combined, and Summing drops the rows whose summed columns are all
zero (as chdb's merges, FINAL reads and inserts show); so do we.

Everything is vectorised (numpy/pyarrow over group boundaries); nothing loops over rows.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from spark_mergetree.errors import FormatError, SchemaMismatchError, UnsupportedError
from spark_mergetree.expressions.ddl import TableDefinition
from spark_mergetree.expressions.predicate import columns_of, parse_expression
from spark_mergetree.expressions.sort_key import key_element_arrays
from spark_mergetree.format.compiled import lazy_njit
from spark_mergetree.format.types import AggregateFunction, parse_type

_SUMMABLE = re.compile(r"(U?Int\d+|Float(32|64)|Decimal(32|64|128|256)?\(.*\)|Bool)", re.ASCII)
_VERSION_TYPE = re.compile(r"(U?Int\d+|Date|Date32|DateTime(\(.*\))?|DateTime64\(.*\))", re.ASCII)
# SimpleAggregateFunction functions and the pyarrow hash aggregation that combines their values.
_SIMPLE_AGGREGATES = {"sum": "sum", "min": "min", "max": "max", "any": "first", "anyLast": "last"}
_ARGUMENTS = {"MergeTree": (0, 0), "ReplacingMergeTree": (0, 2), "SummingMergeTree": (0, 1),
              "AggregatingMergeTree": (0, 0), "CollapsingMergeTree": (1, 1), "VersionedCollapsingMergeTree": (2, 2)}


@dataclass(frozen=True)
class MergingEngine:
    """What a table's engine does at merges and FINAL reads (None of these for plain MergeTree)."""

    name: str
    version: str | None = None
    is_deleted: str | None = None
    sign: str | None = None
    summed: tuple[str, ...] = ()  # SummingMergeTree's summed columns
    aggregates: tuple[tuple[str, str], ...] = ()  # (column, pyarrow aggregation) of SimpleAggregateFunction columns

    @property
    def control_columns(self) -> tuple[str, ...]:
        """Columns that decide which rows survive (read with the key columns by merges)."""
        named = (self.version, self.is_deleted, self.sign)
        return tuple(c for c in named if c) + self.summed + tuple(c for c, _ in self.aggregates)

    @property
    def sort_suffix(self) -> tuple[str, ...]:
        """Columns ClickHouse appends to the sorting key (VersionedCollapsing's version)."""
        return (self.version,) if self.name == "VersionedCollapsingMergeTree" and self.version else ()


def _column(text: str) -> str:
    return text[1:-1].replace("\\`", "`") if text.startswith("`") and text.endswith("`") else text


def engine_of(definition: TableDefinition) -> MergingEngine | None:
    """The table's merging engine, its parameters checked against its columns (None: MergeTree)."""
    name, args = definition.engine, [_column(a) for a in definition.engine_args]
    if name == "MergeTree" and not args:
        return None
    table = definition.name
    low, high = _ARGUMENTS[name]
    if not low <= len(args) <= high:
        raise SchemaMismatchError(f"table {table!r}: {name} takes {low} to {high} parameter(s), got {len(args)}")
    types = definition.stored_schema
    for arg in args if name != "SummingMergeTree" else []:
        if arg not in types:
            raise SchemaMismatchError(f"table {table!r}: {name} parameter {arg!r} is not a column; columns: "
                                      f"{', '.join(types)}")
    keys = set(_key_columns(definition))
    aggregates = []
    for column, type_text in types.items():
        if isinstance(parse_type(type_text), AggregateFunction):
            raise UnsupportedError(
                f"table {table!r}: column {column!r} is {type_text}: combining AggregateFunction states at merges "
                "and FINAL reads is not supported (SimpleAggregateFunction columns are)")
        function = _simple_function(type_text)
        if function is not None and column not in keys and name in ("SummingMergeTree", "AggregatingMergeTree"):
            if function not in _SIMPLE_AGGREGATES:
                raise UnsupportedError(
                    f"table {table!r}: column {column!r} is {type_text}: SimpleAggregateFunction({function}) is not "
                    f"supported at merges (supported: {', '.join(_SIMPLE_AGGREGATES)})")
            aggregates.append((column, _SIMPLE_AGGREGATES[function]))
    simple = {c for c, _ in aggregates}

    def check_type(arg: str, pattern: re.Pattern[str], what: str) -> None:
        if not pattern.fullmatch(types[arg]):  # never Nullable, as ClickHouse requires
            raise SchemaMismatchError(f"table {table!r}: {name}'s {what} column {arg!r} cannot be {types[arg]}")

    if name == "ReplacingMergeTree":
        if args:
            check_type(args[0], _VERSION_TYPE, "version")
        if len(args) == 2 and types[args[1]] not in ("UInt8", "Bool"):
            raise SchemaMismatchError(f"table {table!r}: is_deleted column {args[1]!r} must be UInt8, not {types[args[1]]}")
        return MergingEngine(name, version=args[0] if args else None, is_deleted=args[1] if len(args) == 2 else None)
    if name in ("CollapsingMergeTree", "VersionedCollapsingMergeTree"):
        if types[args[0]] != "Int8":
            raise SchemaMismatchError(f"table {table!r}: {name}'s sign column {args[0]!r} must be Int8, not {types[args[0]]}")
        if len(args) == 2:
            check_type(args[1], _VERSION_TYPE, "version")
        return MergingEngine(name, sign=args[0], version=args[1] if len(args) == 2 else None)
    if name == "SummingMergeTree":
        listed = [_column(c.strip()) for a in args for c in a.strip("()").split(",") if c.strip()]
        if listed:
            for column in listed:
                if column not in types or column in keys or not (column in simple or _SUMMABLE.fullmatch(
                        _unwrapped(types[column]))):
                    raise SchemaMismatchError(f"table {table!r}: SummingMergeTree column {column!r} must be a numeric "
                                              "column outside the sorting key")
            summed = tuple(c for c in listed if c not in simple)
            aggregates = [(c, f) for c, f in aggregates if c in listed]  # the others: the key's first row
        else:
            summed = tuple(c for c, t in types.items()
                           if c not in keys and c not in simple and _SUMMABLE.fullmatch(_unwrapped(t)))
        return MergingEngine(name, summed=summed, aggregates=tuple(aggregates))
    return MergingEngine(name, aggregates=tuple(aggregates))


def _key_columns(definition: TableDefinition) -> list[str]:
    """Columns the sorting and partition keys read (never summed)."""
    elements = [*definition.order_by, *([definition.partition_by] if definition.partition_by else [])]
    return sorted({c for element in elements for c in columns_of(parse_expression(element))})


def _unwrapped(type_text: str) -> str:
    match = re.fullmatch(r"(?:Nullable|LowCardinality)\((.*)\)", type_text)
    return _unwrapped(match.group(1)) if match else type_text


def _simple_function(type_text: str) -> str | None:
    custom = getattr(parse_type(type_text), "custom_name", None) or ""
    match = re.match(r"SimpleAggregateFunction\(\s*(\w+)", custom)
    return match.group(1) if match else None


# ------------------------------------------------------------------------------------------ rows


@dataclass(frozen=True)
class RowPlan:
    """Which rows of the sorted input a merge keeps (`rows`), and for aggregating engines the group
    each kept row stands for (`groups`, group number per input row), so columns are produced one at
    a time (a vertical merge)."""

    engine: MergingEngine
    rows: np.ndarray  # positions of the output rows in the sorted input
    group_ids: np.ndarray | None = None  # group of every input row (aggregating engines)
    kept_groups: np.ndarray | None = None  # the group of every output row

    @property
    def count(self) -> int:
        return len(self.rows)

    def column(self, name: str, values: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
        """Column `name` of the output, from its values over the sorted input."""
        aggregation = self._aggregation(name)
        if aggregation is None or self.group_ids is None or self.kept_groups is None:
            return values.take(pa.array(self.rows, pa.int64()))
        return _aggregate(values, self.group_ids, aggregation).take(pa.array(self.kept_groups, pa.int64()))

    def apply(self, table: pa.Table) -> pa.Table:
        """Every column of `table` (the sorted input) as the output has it."""
        return pa.Table.from_arrays([self.column(name, table.column(name)) for name in table.column_names],
                                    schema=table.schema)

    def _aggregation(self, name: str) -> str | None:
        if name in self.engine.summed:
            return "sum"
        return dict(self.engine.aggregates).get(name)


def _aggregate(values: pa.Array | pa.ChunkedArray, group_ids: np.ndarray, aggregation: str) -> pa.Array:
    """Per group (ids 0..n-1, ascending), the aggregation of `values`, in the values' own type (sums
    wrap around as ClickHouse's do)."""
    grouped = pa.table({"g": pa.array(group_ids), "v": values})
    options = pc.ScalarAggregateOptions(min_count=1) if aggregation == "sum" else None
    result = grouped.group_by("g", use_threads=False).aggregate([("v", aggregation, options)])
    out = result.column(1)
    if out.type != values.type:
        out = out.cast(values.type, safe=False)
    return out.combine_chunks()


def group_starts(key_arrays: Sequence[pa.Array | pa.ChunkedArray], rows: int) -> np.ndarray:
    """Whether each row starts a new key (differs from the row before it in some key element)."""
    starts = np.zeros(rows, dtype=bool)
    if rows:
        starts[0] = True
    if rows < 2:
        return starts
    for array in key_arrays:
        if isinstance(array, pa.ChunkedArray):
            array = array.combine_chunks()
        before, after = array.slice(0, rows - 1), array.slice(1)
        try:
            differs = pc.not_equal(after, before)
        except (pa.ArrowNotImplementedError, pa.ArrowTypeError):
            raise UnsupportedError(f"sorting key values of type {array.type} cannot be compared at merges of "
                                   "this engine") from None
        same_null = pc.and_(pc.is_null(after), pc.is_null(before))
        if pa.types.is_floating(array.type):  # NaN equals NaN in ClickHouse's key comparison
            same_null = pc.or_(same_null, pc.and_(pc.is_nan(after), pc.is_nan(before)))
        differs = pc.and_not(pc.fill_null(pc.or_(differs, pc.xor(pc.is_null(after), pc.is_null(before))), False),
                             pc.fill_null(same_null, False))
        starts[1:] |= differs.to_numpy(zero_copy_only=False)
    return starts


def part_sources(levels: Sequence[int], rows: Sequence[int]) -> np.ndarray:
    """Per row (parts' rows one after another), its part's number if the part's level is above 0,
    else -1: what `plan_rows` needs to treat rows as ClickHouse does (see there)."""
    numbers = np.array([n if level > 0 else -1 for n, level in enumerate(levels)], dtype=np.int64)
    return np.repeat(numbers, np.asarray(rows, dtype=np.int64))


def plan_rows(engine: MergingEngine, table: pa.Table, sort_key: Sequence[str], column_types: Mapping[str, str],
              *, final: bool, sources: np.ndarray | None = None) -> RowPlan:
    """The rows a merge (`final=False`) or a FINAL read keeps of `table`, sorted by `sort_key` with
    equal keys in insertion order; `table` holds the key's and the engine's control columns.

    `sources` (`part_sources`, in the rows' sorted order): ClickHouse compares each row with the first
    row of the current key's run, and takes a row of the same part of level > 0 as that first row for
    another key without comparing them (such a part is assumed to hold each key once; ClickHouse issue
    #120649); and so does this. Rows of equal keys come part by part, so within a run of equal keys
    every row of its first part (if of level > 0) starts a run of its own."""
    rows = table.num_rows
    starts = group_starts(key_element_arrays(list(sort_key), table, dict(column_types)), rows)
    per_row = not sort_key and engine.name in ("SummingMergeTree", "AggregatingMergeTree")
    if per_row:  # no key to compare: every row is a key of its own (see the module's description)
        starts[:] = True
    if sources is not None and rows > 1 and engine.name != "VersionedCollapsingMergeTree":
        run_first = np.flatnonzero(starts)[np.cumsum(starts) - 1]
        starts |= (sources >= 0) & (sources == sources[run_first])
    first = np.flatnonzero(starts)
    last = np.append(first[1:] - 1, rows - 1) if rows else first
    name = engine.name
    if name == "ReplacingMergeTree":
        keep = _replacing(table, engine, first, last, starts)
        if final and engine.is_deleted:
            deleted = _numpy(table.column(engine.is_deleted))[keep]
            keep = keep[deleted == 0]
        return RowPlan(engine, keep)
    if name == "CollapsingMergeTree":
        return RowPlan(engine, _collapsing(_signs(table, engine.sign), first, last, only_positive=final))
    if name == "VersionedCollapsingMergeTree":
        return RowPlan(engine, _versioned(_signs(table, engine.sign), starts))
    group_ids = np.cumsum(starts) - 1
    kept = np.arange(len(first))
    if name == "SummingMergeTree" and rows:
        zero = np.ones(len(first), dtype=bool)
        for column in engine.summed:
            sums = table.column(column) if per_row else _aggregate(table.column(column), group_ids, "sum")
            if column_types[column].startswith("Nullable("):  # its default, NULL, is its "zero"; a sum of 0 is not
                zero &= pc.is_null(sums).to_numpy(zero_copy_only=False)
                continue
            zero &= ~pc.fill_null(pc.not_equal(sums, pa.scalar(0, sums.type) if not pa.types.is_boolean(sums.type)
                                               else pa.scalar(False)), False).to_numpy(zero_copy_only=False)
        if engine.summed:
            kept = kept[~zero]
    if per_row:  # nothing to combine: the kept rows as they are
        return RowPlan(engine, first[kept])
    return RowPlan(engine, first[kept], group_ids, kept)


def _numpy(values: pa.Array | pa.ChunkedArray) -> np.ndarray:
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if pa.types.is_boolean(values.type):
        values = values.cast(pa.uint8())
    return values.to_numpy(zero_copy_only=False)


def _signs(table: pa.Table, sign: str | None) -> np.ndarray:
    assert sign is not None
    signs = _numpy(table.column(sign)).astype(np.int8)
    bad = (signs != 1) & (signs != -1)
    if bad.any():
        raise FormatError(f"sign column {sign!r} holds {int(signs[bad][0])} (must be 1 or -1)")
    return signs


def _replacing(table: pa.Table, engine: MergingEngine, first: np.ndarray, last: np.ndarray,
               starts: np.ndarray) -> np.ndarray:
    if engine.version is None:
        return last
    group_ids = np.cumsum(starts) - 1
    ordered = pa.table({"g": group_ids, "v": table.column(engine.version), "i": np.arange(table.num_rows)})
    order = pc.sort_indices(ordered, sort_keys=[("g", "ascending"), ("v", "ascending"), ("i", "ascending")]).to_numpy()
    # the last row of each group in (version, position) order: the latest row of the greatest version
    return order[last]


def _collapsing(signs: np.ndarray, first: np.ndarray, last: np.ndarray, *, only_positive: bool) -> np.ndarray:
    if not len(signs):
        return np.zeros(0, dtype=np.int64)
    positions = np.arange(len(signs))
    positive = signs == 1
    count_positive = np.add.reduceat(positive.astype(np.int64), first)
    count_negative = (last - first + 1) - count_positive
    last_positive = np.maximum.reduceat(np.where(positive, positions, -1), first)
    first_negative = np.minimum.reduceat(np.where(positive, len(signs), positions), first)
    return _collapsed(count_positive, count_negative, first_negative, last_positive, positive[last],
                      only_positive=only_positive)


def _collapsed(count_positive: np.ndarray, count_negative: np.ndarray, first_negative: np.ndarray,
               last_positive: np.ndarray, ends_positive: np.ndarray, *, only_positive: bool) -> np.ndarray:
    """The rows Collapsing keeps of each run, from the run's counts of positive and negative rows,
    its first negative and last positive row and whether its last row is positive."""
    emit = ends_positive | (count_positive != count_negative)
    negative_out = emit & (count_positive <= count_negative) & (count_negative > 0) & (not only_positive)
    positive_out = emit & (count_positive >= count_negative) & (count_positive > 0)
    pairs = np.stack([np.where(negative_out, first_negative, -1), np.where(positive_out, last_positive, -1)], axis=1)
    flat = pairs.reshape(-1)
    return flat[flat >= 0]


def _versioned(signs: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Rows left unmatched when each row cancels the latest unmatched row of the other sign within its
    (key, version): with b the running sum of signs, a row of the final balance's sign s that raises
    s·b to a level above 0 (a row still waiting for its match) survives iff s·b never falls below that
    level afterwards."""
    rows = len(signs)
    if not rows:
        return np.zeros(0, dtype=np.int64)
    group_ids = np.cumsum(starts) - 1
    first = np.flatnonzero(starts)
    running = np.cumsum(signs.astype(np.int64))
    before = np.concatenate([[0], running])[first]  # the running sum before each group
    balance = running - before[group_ids]
    last = np.append(first[1:] - 1, rows - 1)
    direction = np.sign(balance[last])[group_ids]
    level = direction * balance
    # minimum of `level` over the rest of each group: groups offset so none leaks into another
    offset = group_ids.astype(np.int64) * (2 * rows + 2)
    suffix_min = np.minimum.accumulate((level + offset)[::-1])[::-1] - offset
    survives = (direction != 0) & (signs == direction) & (level > 0) & (level <= suffix_min)
    # Until ClickHouse's queue first fills, its length is |balance|: only groups where that reaches the
    # bound can differ from the rule above, and those (thousands of rows of one key) are rare.
    peak = np.maximum.reduceat(np.abs(balance), first)
    for group in np.flatnonzero(peak >= VERSIONED_QUEUE_ROWS):
        begin, end = int(first[group]), int(last[group]) + 1
        survives[begin:end] = _versioned_bounded(signs[begin:end], VERSIONED_QUEUE_ROWS)
    return np.flatnonzero(survives)


class OneKey:
    """What `plan_rows` (a merge: `final=False`) keeps of one run of Replacing or Collapsing rows that
    comes block by block, holding a few numbers instead of the rows: the rows of a table with an empty
    sorting key, all one key (merge_stream.merge_engine_unkeyed)."""

    def __init__(self, engine: MergingEngine) -> None:
        assert engine.name in ("ReplacingMergeTree", "CollapsingMergeTree")
        self.engine = engine
        self.rows = 0
        self._kept = -1  # Replacing: the row kept so far
        self._top: object = None  # ... and its version
        self._counts = [0, 0]  # Collapsing: positive and negative rows so far
        self._first_negative = self._last_positive = -1
        self._ends_positive = False

    def add(self, table: pa.Table) -> None:
        """The run's next rows (at least the engine's control columns)."""
        n = table.num_rows
        if not n:
            return
        engine = self.engine
        if engine.name == "ReplacingMergeTree":
            if engine.version is None:  # the last row
                self._kept = self.rows + n - 1
            else:  # the last row of the greatest version: a later block's wins a tie
                versions = _numpy(table.column(engine.version))
                top = versions.max()
                if self._top is None or top >= self._top:
                    self._top = top
                    self._kept = self.rows + n - 1 - int(np.argmax(versions[::-1] == top))
        else:
            signs = _signs(table, engine.sign)
            positive, negative = np.flatnonzero(signs == 1), np.flatnonzero(signs == -1)
            self._counts[0] += len(positive)
            self._counts[1] += len(negative)
            if len(negative) and self._first_negative < 0:
                self._first_negative = self.rows + int(negative[0])
            if len(positive):
                self._last_positive = self.rows + int(positive[-1])
            self._ends_positive = bool(signs[-1] == 1)
        self.rows += n

    def kept(self) -> np.ndarray:
        """Positions (within the run) of the rows kept, ascending."""
        if not self.rows:
            return np.zeros(0, np.int64)
        if self.engine.name == "ReplacingMergeTree":
            return np.array([self._kept], np.int64)
        positive, negative = (np.array([count]) for count in self._counts)
        return np.sort(_collapsed(positive, negative, np.array([self._first_negative]),
                                  np.array([self._last_positive]), np.array([self._ends_positive]),
                                  only_positive=False))


# ClickHouse's VersionedCollapsing merge keeps at most min(max_block_size, 8192) - 1 unmatched rows of
# one (key, version); merges and FINAL reads use blocks of at least 8192 rows (an insert's own merge
# uses its block's size, which its queue can never reach), so the bound is 8191 everywhere.
VERSIONED_QUEUE_ROWS = 8191


@lazy_njit
def _versioned_bounded(signs: np.ndarray, bound: int) -> np.ndarray:
    """Which rows of one (key, version) survive with a queue of at most `bound` unmatched rows (all of
    one sign): a row arriving at a full queue first writes out the queue's oldest row; then it joins
    the queue if the queue is empty or of its sign, else it cancels the queue's newest row."""
    n = len(signs)
    kept = np.zeros(n, dtype=np.bool_)
    queue = np.empty(n, dtype=np.int64)
    front = 0
    back = 0
    queued_sign = 0
    for row in range(n):
        if back - front >= bound:
            kept[queue[front]] = True
            front += 1
        if back == front or signs[row] == queued_sign:
            if back == front:
                queued_sign = signs[row]
            queue[back] = row
            back += 1
        else:
            back -= 1
    for slot in range(front, back):
        kept[queue[slot]] = True
    return kept


def collapse(engine: MergingEngine, table: pa.Table, sort_key: Sequence[str], column_types: Mapping[str, str],
             *, final: bool) -> pa.Table:
    """`table` (sorted by `sort_key`, equal keys in insertion order) after the engine's merge (or, with
    `final`, its FINAL read)."""
    return plan_rows(engine, table, sort_key, column_types, final=final).apply(table)

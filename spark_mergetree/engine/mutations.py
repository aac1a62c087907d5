"""Mutations: ClickHouse's lightweight DELETE and ALTER TABLE ... UPDATE, as transactions.

A mutation gets a version N: a block number allocated like an insert's, above every part's. As
ClickHouse does, it leaves every part of the table at a data version of at least N: each visible
part is replaced by `<partition>_<min>_<max>_<level>_N`. A part holding rows the mutation changes
is rewritten (DELETE: the `_row_exists` mask gains zeros for the matching rows, every stored row
kept; UPDATE: the assigned columns take their new values in the matching rows that exist); a part
with no such row gets the same files under the new name (hard links where the storage allows).
Patch parts of ClickHouse's lightweight UPDATEs are materialised as ClickHouse's mutations do: rows
are read with them applied, and a part they change is written with them (even when no row of it
matches), its new version N then above theirs (reads skip them).
Once the transaction has committed, `mutation_N.txt` records the command in the table directory as ClickHouse keeps it; a ClickHouse
opening the table finds every part at version N or above and the mutation done (a mutation file
without such parts would make ClickHouse apply it again; so it is written only after the commit).

One transaction removes the old versions and adds the new (snapshots before it keep reading the
old ones until cleanup). Its conflicts are ClickHouse's: a concurrent merge or overwrite of the
same parts takes their removal locks first (SerializationError), and a part another transaction
committed after this one's snapshot or may still commit below N would miss a mutation ClickHouse
applies to it, so the mutation refuses to commit (SerializationError: run it again).
"""

from __future__ import annotations

import datetime as dt
import sys
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from spark_mergetree.engine import background, projections
from spark_mergetree.engine import commit as committing
from spark_mergetree.engine import insert as inserting
from spark_mergetree.engine import select as selecting
from spark_mergetree.engine.part_rewrite import rewrite_in_granules
from spark_mergetree.errors import ExpressionError, InvalidOptionError, SerializationError, UnsupportedError
from spark_mergetree.expressions.ddl import key_column_names
from spark_mergetree.expressions.predicate import (
    Column,
    Expr,
    Literal,
    bind,
    columns_of,
    evaluate,
    evaluate_value,
    parse_expression,
    to_sql,
)
from spark_mergetree.fileops import escape_for_file_name
from spark_mergetree.format.checksums import Checksums
from spark_mergetree.format.part import CHECKSUMS_FILE, COLUMNS_FILE, COUNT_FILE, PartFiles, format_columns
from spark_mergetree.format.part_info import PartInfo
from spark_mergetree.format.part_reader import HIDDEN_COLUMNS, ROW_EXISTS_COLUMN, SUBSTREAMS_FILE, PartReader
from spark_mergetree.format.part_writer import write_wide_part_by_column
from spark_mergetree.format.serialization import default_column
from spark_mergetree.format.types import Json, contains_type, parse_type
from spark_mergetree.txn import Transaction

if TYPE_CHECKING:
    from spark_mergetree.engine.table import MergeTreeTable

MUTATION_FILE = "mutation_{}.txt"


@dataclass(frozen=True)
class Mutation:
    """One mutation command, bound to a table: which rows (`predicate`) and what happens to them
    (`assignments` column → value; none: a lightweight DELETE)."""

    predicate: Expr
    assignments: Mapping[str, Expr]

    @property
    def is_delete(self) -> bool:
        return not self.assignments

    @property
    def command(self) -> str:
        """The command as ClickHouse records it in `mutation_N.txt` (a lightweight DELETE is an
        UPDATE of the mask)."""
        sets = ({ROW_EXISTS_COLUMN: "0"} if self.is_delete
                else {name: to_sql(value) for name, value in self.assignments.items()})
        return f"(UPDATE {', '.join(f'{_quote(n)} = {v}' for n, v in sets.items())} WHERE {to_sql(self.predicate)})"


def _quote(name: str) -> str:
    return to_sql(Column(name))


def delete_mutation(table: MergeTreeTable, where: str | Expr) -> Mutation:
    """A lightweight DELETE of the rows matching `where` (required: ClickHouse's DELETE needs one)."""
    return Mutation(_predicate(table, where, "delete"), {})


def update_mutation(table: MergeTreeTable, assignments: Mapping[str, Any], where: str | Expr) -> Mutation:
    """ALTER TABLE ... UPDATE: `assignments` maps columns to a ClickHouse expression (text, e.g.
    "v * 2" or "'text'") or a Python value. Key columns (ORDER BY, PRIMARY KEY, PARTITION BY and
    the engine's control columns) cannot be updated, as in ClickHouse."""
    meta = table.metadata
    if not isinstance(assignments, Mapping) or not assignments:
        raise InvalidOptionError("update needs a non-empty mapping of column → new value")
    names = [n for n, _ in meta.columns]
    keys = key_column_names(names, meta.definition.order_by, meta.definition.partition_by, meta.definition.primary_key)
    engine = meta.merging_engine
    keys |= set(engine.control_columns if engine else ()) | set(meta.sorting_key) & set(names)
    bound: dict[str, Expr] = {}
    for column, value in assignments.items():
        if column not in meta.column_types:
            raise InvalidOptionError(f"update: unknown column {column!r}; table columns: {', '.join(names)}")
        if column in keys:
            raise UnsupportedError(f"update: column {column!r} is a key column of {table.path} (ORDER BY, PRIMARY KEY, "
                                   "PARTITION BY or the engine's); ClickHouse cannot UPDATE key columns either")
        if contains_type(parse_type(meta.column_types[column]), Json):
            # The new text would go with the other rows' values as text, whose types would be
            # inferred again (a Float64 1.0 would come back Int64): refused rather than done lossily.
            raise UnsupportedError(f"update: column {column!r} of {table.path} is or holds JSON "
                                   f"({meta.column_types[column]}), which UPDATE does not rewrite here (other "
                                   "columns of the table can be updated)")
        if isinstance(value, Expr):
            expr = value
        elif isinstance(value, str):
            try:
                expr = parse_expression(value)
            except ExpressionError as error:
                raise ExpressionError(f"update: value of column {column!r}: {error}") from None
        else:
            expr = Literal(value)
        bound[column] = bind(expr, meta.column_types)
    # Evaluated once over a row of defaults: what cannot be computed or stored fails here, before
    # anything is written (in Spark: on the driver, not in a task).
    sample = pa.table({name: default_column(parse_type(type_text), 1) for name, type_text in meta.columns})
    for column, expr in bound.items():
        new_values(column, expr, sample, table)
    return Mutation(_predicate(table, where, "update"), bound)


def new_values(column: str, expr: Expr, rows: pa.Table, table: MergeTreeTable) -> pa.Array:
    """`expr` over `rows`, as values of `column`'s type (ExpressionError if they do not fit)."""
    meta = table.metadata
    try:
        return evaluate_value(expr, rows).cast(meta.arrow_schema.field(column).type)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as error:
        raise ExpressionError(f"update: {to_sql(expr)} does not fit column {column!r} "
                              f"({meta.column_types[column]}): {error}") from None


def _predicate(table: MergeTreeTable, where: str | Expr, what: str) -> Expr:
    predicate = selecting.bind_where(where, table.metadata.column_types)
    if predicate is None:
        raise InvalidOptionError(f"{what} needs a WHERE condition (where='1' for every row, as in ClickHouse)")
    return predicate


# ------------------------------------------------------------------ rewriting one part


def rewrite_part(reader: PartReader, table: MergeTreeTable, mutation: Mutation | None, *,
                 patched: bool = False) -> PartFiles | None:
    """The files of `reader`'s part with `mutation` applied, every stored row kept in place (same
    granules); None when no existing row of the part matches (unless `patched`: a part that patch
    parts of ClickHouse's lightweight UPDATEs change is then written with them applied, as a
    mutation materialises them, instead of being copied). No `mutation`: only those patches.

    Rows are read with those patches applied (engine/patches.py `PatchSet.stored`): the condition
    sees the updated values, and every column a patch updates (the mask too) is written with them."""
    meta = table.metadata
    is_delete = mutation is not None and mutation.is_delete
    assignments = mutation.assignments if mutation is not None else {}
    if mutation is not None and meta.projections and (is_delete or reader.existing_rows != reader.rows):
        raise UnsupportedError(
            f"table {meta.definition.name!r} has projections ({', '.join(p.name for p in meta.projections)}): "
            "lightweight DELETE is refused on it, as ClickHouse does by default (lightweight_mutation_projection_mode "
            "= 'throw'); drop the projections first or delete in ClickHouse")
    ranges = [(0, reader.n_granules)]
    rows = reader.rows
    patches = table.active_patches()
    touching = patches.changing(reader.part, meta.column_types)

    def read(names: list[str], stored_json: bool = False) -> pa.Table:
        if touching:
            return patches.stored(reader, ranges, names, meta.column_types, touching, stored_json=stored_json)[0]
        return reader.read(names, ranges, meta.column_types, apply_mask=False, stored_json=stored_json)

    condition = mutation.predicate if mutation is not None else None
    wanted = sorted(set(columns_of(condition) if condition is not None else ()).union(
        *(columns_of(e) for e in assignments.values()), assignments))
    # A condition of no column (`WHERE 1`) still needs the part's rows: a placeholder column gives them.
    stored = read(wanted) if wanted else pa.table({"": pa.nulls(rows)})
    exists = patches.stored(reader, ranges, [], meta.column_types, touching)[1] if touching else reader.row_mask(ranges)
    hits = (np.array(evaluate(condition, stored).to_numpy(zero_copy_only=False), dtype=bool) if condition is not None
            else np.zeros(rows, dtype=bool))
    if exists is not None:
        hits &= exists
    if not hits.any() and not (patched and touching):
        return None
    columns = list(meta.columns)
    hidden = {n: t.to_clickhouse() for n, t in reader.types.items() if n in HIDDEN_COLUMNS and n != ROW_EXISTS_COLUMN}
    columns += hidden.items()
    if is_delete or exists is not None:
        columns.append((ROW_EXISTS_COLUMN, "UInt8"))
    changed: dict[str, pa.Array] = {}
    mask = pa.array(hits)
    for name, expr in assignments.items():
        changed[name] = pc.if_else(mask, new_values(name, expr, stored, table), stored.column(name).combine_chunks())

    def column_of(name: str) -> pa.Array | pa.ChunkedArray:
        if name == ROW_EXISTS_COLUMN:
            kept = exists if exists is not None else np.ones(rows, dtype=bool)
            if is_delete:
                kept = kept & ~hits
            return pa.array(kept.astype(np.uint8))
        if name in changed:
            return changed[name]
        if name in hidden and name not in meta.column_types:
            return reader.read_column(name, ranges)
        # JSON columns in their stored form: their values keep their types (text would re-infer them).
        return read([name], stored_json=True).column(0)

    if is_delete and exists is None and not touching and _mask_only(reader):
        return _with_mask(reader, table, column_of(ROW_EXISTS_COLUMN))
    names = [n for n, _ in meta.columns]
    files = rewrite_in_granules(reader, meta, rows, columns, column_of)
    # The projections reading an updated column (assigned, or one a patch part updates) are built again
    # from the updated rows; the others are kept as the part holds them (ClickHouse's ALTER UPDATE
    # rebuilds the first, links the others).
    updated = set(assignments) | (patches.columns if touching else set())
    unchanged = projections.kept_projection_parts(reader, meta.projections, names, updated)
    files = meta.add_projections(files, projections.rows_in_place(column_of, rows), unchanged)
    return meta.with_ttl(files, lambda names: pa.table({name: column_of(name) for name in names}))


def beside_source(files: PartFiles) -> bool:
    """Whether `rewrite_part`'s files go beside the source part's other files (a first DELETE's
    mask: the new version is the source's files with these added or replaced), not replace them all."""
    return CHECKSUMS_FILE in files.files and COUNT_FILE not in files.files


def _mask_only(reader: PartReader) -> bool:
    """Whether a first DELETE may give the part just a `_row_exists` column beside its other files,
    as ClickHouse does: a Wide part with `.mrk2` marks (ours write no others) and no
    columns_substreams.txt to extend; other parts are rewritten whole."""
    return (not reader.is_compact and reader.checksums is not None and SUBSTREAMS_FILE not in reader.files
            and not any(name.endswith((".cmrk2", ".mrk", ".cmrk")) for name in reader.files))


def _with_mask(reader: PartReader, table: MergeTreeTable, mask: pa.Array | pa.ChunkedArray) -> PartFiles:
    """The files a first DELETE changes or adds in a part: the mask's streams (granules as the
    part's), `columns.txt` with `_row_exists` last, and `checksums.txt` listing them; the part's
    other files stay as they are (`replaced` of `TableParts.clone_part`)."""
    settings = replace(table.metadata.writer_settings, skip_indexes=())  # the part keeps its index files
    written = write_wide_part_by_column(reader.rows, [(ROW_EXISTS_COLUMN, "UInt8")], lambda _name: mask, [], None,
                                        settings, np.asarray(reader.granule_rows, dtype=np.int64))
    added = Checksums.parse(written.files[CHECKSUMS_FILE]).files
    stem = escape_for_file_name(ROW_EXISTS_COLUMN) + "."
    out = PartFiles(rows=reader.rows)
    out.files = {name: data for name, data in written.files.items() if name.startswith(stem)}
    out.boundaries = {name: cuts for name, cuts in written.boundaries.items() if name in out.files}
    assert reader.checksums is not None
    entries = {**reader.checksums.files, **{name: added[name] for name in out.files}}
    out.files[COLUMNS_FILE] = format_columns([*reader.columns, (ROW_EXISTS_COLUMN, "UInt8")])
    out.files[CHECKSUMS_FILE] = Checksums(dict(sorted(entries.items()))).to_bytes()
    return out


# ------------------------------------------------------------------ running a mutation


RETRIES = 4  # a mutation of its own transaction that lost a race runs again this often


def run(table: MergeTreeTable, mutation: Mutation, transaction: Transaction | None,
        once: Callable[[MergeTreeTable, Mutation, Transaction | None], list[str]] | None = None) -> list[str]:
    """Apply `mutation` to every visible part in one transaction (`transaction`, or one of its own
    that commits here, run again on a new snapshot when it loses a race: SerializationError after
    `RETRIES` more attempts); return the new parts' names (empty when no existing row matches).
    `once` is one attempt (default `run_once`, or `run_once_in_place` where the part store writes
    parts in place)."""
    attempt_once = once or (run_once_in_place if table.store.writes_in_place else run_once)
    if transaction is not None:
        return attempt_once(table, mutation, transaction)
    for attempt in range(RETRIES + 1):
        try:
            return attempt_once(table, mutation, None)
        except SerializationError:
            if attempt == RETRIES:
                raise
            time.sleep(0.05 * (attempt + 1))
    raise AssertionError("unreachable")


def run_once(table: MergeTreeTable, mutation: Mutation, transaction: Transaction | None) -> list[str]:
    """One attempt of `run`, every part rewritten or copied in this process."""
    tx, parts, candidates = begin(table, mutation, transaction)
    staged: dict[str, str] = {}  # visible part → its staged new version
    try:
        changed = False
        for part in parts:
            name, rewritten = stage_part(table, mutation, part, part in candidates, f"t{tx.tid}_mutation",
                                         copy=False)
            if name is not None:
                staged[part] = name
                changed |= rewritten
        if not changed:
            if transaction is None:
                tx.rollback()
            return []
        for part in parts:
            if part not in staged:
                copied, _ = stage_part(table, mutation, part, False, f"t{tx.tid}_mutation")
                assert copied is not None
                staged[part] = copied
    except BaseException:
        abort(table, tx, staged, own=transaction is None)
        raise
    return finish(table, mutation.command, tx, staged, own=transaction is None)


def begin(table: MergeTreeTable, mutation: Mutation, transaction: Transaction | None, *, staged: bool = True
          ) -> tuple[Transaction, list[str], set[str]]:
    """(transaction, every visible part, the parts whose granules `mutation`'s condition may match):
    the parts a mutation gives new versions, and those it may have to rewrite. `staged`: the
    caller publishes by staging and renaming (`stage_part`, `finish`), which tables that cannot
    rename refuse (object-store tables run their own attempt, writing under final names)."""
    if staged and not table.supports_mutations:
        raise UnsupportedError(f"{table}: DELETE and UPDATE as Spark jobs (part versions staged, then renamed into "
                               "place) are not implemented for this kind of table; the table's own delete() and "
                               "update() run them in one process")
    table.check_same_table()
    table.adopt_directory_parts()
    tx = transaction if transaction is not None else Transaction(table.coordinator)
    try:
        parts = sorted(tx.visible_parts(table.log))
        plan = table.plan_read(None, mutation.predicate, transaction=tx)
    except BaseException:
        if transaction is None:
            tx.rollback()
        raise
    return tx, parts, {p.part for p in plan.parts if p.ranges}


def stage_part(table: MergeTreeTable, mutation: Mutation, part: str, candidate: bool, prefix: str, *,
               copy: bool = True) -> tuple[str | None, bool]:
    """Write `part`'s new version under a staged name starting with `prefix` (any process): rewritten
    when `candidate` and a row changes, else (with `copy`) copied, or rewritten with the patches of
    ClickHouse's lightweight UPDATEs applied when some change the part. Returns (staged name or None,
    whether a row of it changed)."""
    files = rewrite_part(table.reader(part), table, mutation) if candidate else None
    changed = files is not None
    if files is None and copy and table.active_patches().changing(part, table.metadata.column_types):
        files = rewrite_part(table.reader(part), table, mutation, patched=True)
    if files is None and not copy:
        return None, False
    name = f"{inserting.STAGING_PREFIX}{prefix}_{uuid.uuid4().hex[:12]}_0"
    if files is None:
        table.store.clone_part(part, name)
    elif beside_source(files):
        table.store.clone_part(part, name, files.files, files.boundaries)
    else:
        table.store.write_part(name, files.files, files.boundaries)
    return name, changed


def finish(table: MergeTreeTable, command: str, tx: Transaction, staged: Mapping[str, str], *,
           own: bool) -> list[str]:
    """Publish the staged new version of every part (`staged`: old part → staged name) in `tx`,
    commit it if `own`; `mutation_N.txt`, recording `command`, follows the commit. Returns the new
    parts' names; on failure nothing staged is left."""
    placed: set[str] = set()
    try:
        finals, version = _publish(table, tx, staged, placed)
        tx.on_commit(lambda _csn: write_mutation_file(table, version, command))
        if own:
            tx.commit()
    except BaseException:
        abort(table, tx, {part: name for part, name in staged.items() if name not in placed}, own=own)
        raise
    return finals


def abort(table: MergeTreeTable, tx: Transaction, staged: Mapping[str, str], *, own: bool) -> None:
    """After a failure: roll back `tx` if this mutation owns it or lost a conflict (the loser cannot
    commit anything any more, as with removal locks), and delete the staged parts."""
    error = sys.exc_info()[1]
    if tx.state == "unknown":
        return
    if tx.state == "running" and (own or isinstance(error, SerializationError)):
        tx.rollback()
    for name in staged.values():
        table.store.remove_part(name, missing_ok=True)


def _publish(table: MergeTreeTable, tx: Transaction, staged: Mapping[str, str], placed: set[str]
             ) -> tuple[list[str], int]:
    """Under the commit lock: the removal locks of the old versions, the mutation's version, the
    conflict checks, the pending entry naming the new versions and their renames into place."""
    log = table.log
    table_id = log.bind(tx.coordinator.url)
    with log.commit_lock():
        tx.remove_parts(log, list(staged))
        version = committing.allocate_blocks(table, tx, table_id, 1)
        reserved = log.reserved_blocks(tx.coordinator, exclude_tid=tx.tid)
        pending = sorted(p for p, ranges in reserved.items() if any(low < version for low, _ in ranges))
        if pending:
            raise SerializationError(
                f"{table.path}: another transaction is writing parts (partition {pending[0]}) with block numbers "
                f"below this mutation's version {version}; ClickHouse would apply the mutation to them. Run it again")
        refuse_missed_parts(table, tx)
        finals = []
        for part in staged:
            info = PartInfo.parse(part)
            final = PartInfo(info.partition_id, info.min_block, info.max_block, info.level, version).name
            log.claim_name(final, tx.coordinator, tx.tid)
            finals.append(final)
        tx.add_parts(log, finals)
        for name, final in zip(staged.values(), finals, strict=True):
            table.store.rename_part(name, final)
            placed.add(name)
    return finals, version


def refuse_missed_parts(table: MergeTreeTable, tx: Transaction) -> None:
    """SerializationError if a part was committed after `tx`'s snapshot: the mutation would not
    change it, but ClickHouse, seeing its block number below the mutation's version, would."""
    coordinator = tx.coordinator
    latest = table.log.snapshot(coordinator.current_timestamp(), coordinator)
    missed = sorted(latest - table.log.snapshot(tx.snapshot, coordinator))
    if missed:
        raise SerializationError(
            f"{table.path}: part {missed[0]} was committed after this transaction's snapshot; the mutation would "
            "not change it but ClickHouse would. Run it again")


def write_mutation_file(table: MergeTreeTable, version: int, command: str) -> None:
    """`mutation_<version>.txt` as ClickHouse writes it (format_spec/mutations.md): format version,
    local creation time, and the command escaped as in ClickHouse's TSV."""
    created = dt.datetime.now().strftime("%Y-%m-%d %H:%M:%S")
    text = f"format version: 1\ncreate time: {created}\ncommands: {_escape(command)}\n"
    table.put_table_file(MUTATION_FILE.format(version), text.encode())


_ESCAPES = {"\\": "\\\\", "'": "\\'", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\0": "\\0"}


def _escape(text: str) -> str:
    return "".join(_ESCAPES.get(ch, ch) for ch in text)


# ------------------------------------------------------------------ where parts are written in place
#
# Object storage renames nothing: a mutation's new versions are written under their final names
# (`<part>_N`, N allocated first), untouched parts copied on the server, and one transaction
# removes the old versions and adds the new. `run` and `rewrite_every_part_in_place` pick this
# path by the part store's `writes_in_place`.


def run_once_in_place(table: MergeTreeTable, mutation: Mutation, transaction: Transaction | None) -> list[str]:
    """One attempt of a DELETE or UPDATE where parts are written in place."""
    tx, parts, candidates = begin(table, mutation, transaction, staged=False)

    def rewrite(part: str) -> PartFiles | None:
        return rewrite_part(table.reader(part), table, mutation) if part in candidates else None

    return _new_versions(table, tx, transaction is None, parts, rewrite, mutation.command, only_if_changed=True)


def rewrite_every_part_in_place(table: MergeTreeTable, command: str,
                                rewrite: Callable[[PartReader], PartFiles | None]) -> list[str]:
    """`MergeTreeTable.rewrite_every_part` (index and projection ALTERs) where parts are written in
    place, run again on a new snapshot when it loses a race (as `run` is)."""
    def once(_table: MergeTreeTable, _mutation: Any, _transaction: Any) -> list[str]:
        table.check_same_table()
        tx = Transaction(table.coordinator)
        return _new_versions(table, tx, True, sorted(tx.visible_parts(table.log)),
                             lambda part: rewrite(table.reader(part)), command, only_if_changed=False)

    return run(table, None, None, once)  # type: ignore[arg-type]


def _new_versions(table: MergeTreeTable, tx: Transaction, own: bool, parts: Sequence[str],
                  rewrite: Callable[[str], PartFiles | None], command: str, *, only_if_changed: bool) -> list[str]:
    """Give every part of `parts` its new version under the mutation's version N, allocated first
    so each is written once under its final, never reused name `<part>_N`: `rewrite(part)`'s
    files, or a copy made by the store; `mutation_N.txt` records `command` once the transaction
    has committed. With `only_if_changed`, nothing happens unless some part was rewritten."""
    written: dict[str, str] = {}  # visible part → its new version, written
    try:
        version = _mutation_version(table, tx)

        def version_of(part: str) -> str:
            info = PartInfo.parse(part)
            return PartInfo(info.partition_id, info.min_block, info.max_block, info.level, version).name

        for part in parts:
            files = rewrite(part)
            if files is None:
                continue
            written[part] = version_of(part)
            if beside_source(files):
                table.store.clone_part(part, written[part], files.files)
            else:
                table.store.write_part(written[part], files.files)
        if not parts or (only_if_changed and not written):
            if own:
                tx.rollback()
            return []
        tx.remove_parts(table.log, list(parts))  # a concurrent merge or overwrite of them conflicts here
        for part in parts:
            if part not in written:
                written[part] = version_of(part)
                table.store.clone_part(part, written[part])
        refuse_missed_parts(table, tx)
        finals = [written[part] for part in parts]
        tx.add_parts(table.log, finals)
        tx.on_commit(lambda _csn: write_mutation_file(table, version, command))
        if own:
            tx.commit()
    except BaseException:
        abort(table, tx, written, own=own)
        raise
    if own:
        background.after_commit(table)
    return finals


def _mutation_version(table: MergeTreeTable, tx: Transaction) -> int:
    """A mutation's version: a block number above every part's. Nothing orders block allocation
    against this log (an insert's entry follows its upload), so a transaction running now may
    hold a block below it for a part the mutation would miss and ClickHouse would mutate: then
    SerializationError (run it again; `run` does, a few times)."""
    version = tx.allocate_blocks(table.log, 1)
    others = sorted(info.tid for info in tx.coordinator.running() if info.tid != tx.tid)
    if others:
        raise SerializationError(
            f"{table.path}: transaction {others[0]} is running and may write parts with block numbers "
            f"below this mutation's version {version}; ClickHouse would apply the mutation to them. Run it again")
    return version

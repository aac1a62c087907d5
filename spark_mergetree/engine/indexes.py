"""ALTER TABLE ... ADD/DROP/MATERIALIZE INDEX and ADD/DROP/MATERIALIZE/CLEAR PROJECTION on our tables.

ADD INDEX changes the table's statement only: parts written from then on carry the index, parts
written before have no files of it (ClickHouse and we read all their granules). MATERIALIZE INDEX
and DROP INDEX are mutations, as in ClickHouse, run by mutations.py's machinery: one transaction
gives every visible part a new version named with the mutation's block number N (`all_1_1_0` →
`all_1_1_0_N`) and `mutation_N.txt` records the command after the commit. A part the command
changes is written again whole by our writer, every stored row in the same granules, with the
index's files built (MATERIALIZE) or gone (DROP); ClickHouse hard-links the files that do not
change (the rows and the index files are the same). Projections go the same way: ADD PROJECTION
changes the statement, MATERIALIZE PROJECTION builds every declared projection into the parts,
DROP PROJECTION removes the declaration and the `<name>.proj/` directories, CLEAR PROJECTION only
the directories (parts written later get it again).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from spark_mergetree.engine import insert as inserting
from spark_mergetree.engine import mutations, projections
from spark_mergetree.engine.metadata import TableMetadata
from spark_mergetree.engine.projections import check_declared, declared_projections
from spark_mergetree.errors import ExpressionError, SchemaMismatchError, UnsupportedError
from spark_mergetree.expressions.ddl import key_column_names, parse_projection
from spark_mergetree.expressions.predicate import Column, to_sql
from spark_mergetree.expressions.skip_index import check_supported, parse_skip_index
from spark_mergetree.format.compact_writer import write_part_by_column
from spark_mergetree.format.part import PartFiles
from spark_mergetree.format.part_reader import HIDDEN_COLUMNS, PartReader
from spark_mergetree.format.part_writer import PartitionValue
from spark_mergetree.format.skip_index import INDEX_PREFIX, PACKED_FILE
from spark_mergetree.format.types import parse_type, to_arrow
from spark_mergetree.txn import Transaction

if TYPE_CHECKING:
    from spark_mergetree.engine.table import MergeTreeTable

def _with_keyword(declaration: str, keyword: str) -> str:
    """A table element as the statement holds it: with its leading keyword, which callers may omit."""
    text = declaration.strip()
    return text if text.upper().startswith(keyword) else f"{keyword} {text}"


def add_index(table: MergeTreeTable, declaration: str) -> None:
    """`INDEX name expr TYPE type[(args)] [GRANULARITY g]` (the words `INDEX` optional): checked
    against the table's columns and indexes, then added to its statement."""
    text = _with_keyword(declaration, "INDEX")
    index = parse_skip_index(text)
    if index is None:
        raise ExpressionError(f"{declaration!r} is not an index declaration")
    check_supported(index)
    if any(existing.name == index.name for existing in table.metadata.skip_indexes):
        raise SchemaMismatchError(f"table {table.path} already has an index named {index.name!r}")
    missing = [c for c in index.columns if c not in table.metadata.column_types]
    if missing or not index.columns:
        raise SchemaMismatchError(f"index {index.name!r}: expression {index.expression!r} must name columns of the "
                                  f"table ({', '.join(table.metadata.column_types)})")
    table.replace_definition(replace(table.definition, indexes=table.definition.indexes + (text,)))


def drop_index(table: MergeTreeTable, name: str) -> list[str]:
    """Remove index `name` from the statement and its files from every part (a mutation); returns the
    new parts' names."""
    kept = tuple(e for e in table.definition.indexes
                 if (parsed := parse_skip_index(e)) is None or parsed.name != name)
    if len(kept) == len(table.definition.indexes):
        raise SchemaMismatchError(f"table {table.path} has no index named {name!r}")
    table.replace_definition(replace(table.definition, indexes=kept))
    return _mutate(table, f"(DROP INDEX {to_sql(Column(name))})",
                   lambda reader: PACKED_FILE in reader.files or f"{INDEX_PREFIX}{name}." in " ".join(reader.files))


def materialize_index(table: MergeTreeTable, name: str) -> list[str]:
    """Build index `name` into every part that exists (a mutation); returns the new parts' names."""
    if not any(index.name == name for index in table.metadata.skip_indexes):
        raise SchemaMismatchError(f"table {table.path} has no index named {name!r}")
    return _mutate(table, f"(MATERIALIZE INDEX {to_sql(Column(name))})", lambda reader: True)


def add_projection(table: MergeTreeTable, declaration: str) -> None:
    """`PROJECTION name (SELECT ... ORDER BY ...)` (the word `PROJECTION` optional): checked as
    CREATE checks projections (one we could not write is refused), then added to the statement."""
    text = _with_keyword(declaration, "PROJECTION")
    projection = parse_projection(text)
    if projection is None:
        raise ExpressionError(f"{declaration!r} is not a projection declaration")
    meta = table.metadata
    if any(p.name == projection.name for p in declared_projections(table.definition.indexes)):
        raise SchemaMismatchError(f"table {table.path} already has a projection named {projection.name!r}")
    check_declared([projection], meta.column_types, meta.merging_engine is not None, meta.merge_projection_mode)
    table.replace_definition(replace(table.definition, indexes=table.definition.indexes + (text,)))


def _declares_projection(element: str, name: str) -> bool:
    parsed = parse_projection(element)
    return parsed is not None and parsed.name == name


def _check_projection(table: MergeTreeTable, name: str) -> None:
    if not any(_declares_projection(e, name) for e in table.definition.indexes):
        raise SchemaMismatchError(f"table {table.path} has no projection named {name!r}")


def materialize_projection(table: MergeTreeTable, name: str) -> list[str]:
    """Build the table's projections into every part that exists (a mutation); returns the new
    parts' names."""
    _check_projection(table, name)
    return _mutate(table, f"(MATERIALIZE PROJECTION {to_sql(Column(name))})", lambda reader: True)


def drop_projection(table: MergeTreeTable, name: str) -> list[str]:
    """Remove projection `name` from the statement and its directory from every part holding it (a
    mutation); returns the new parts' names."""
    _check_projection(table, name)
    kept = tuple(e for e in table.definition.indexes if not _declares_projection(e, name))
    table.replace_definition(replace(table.definition, indexes=kept))
    return _mutate(table, f"(DROP PROJECTION {to_sql(Column(name))})", lambda reader: name in reader.projections)


def clear_projection(table: MergeTreeTable, name: str) -> list[str]:
    """Remove projection `name`'s directory from every part holding it, keeping the declaration (a
    mutation; parts written later carry it again); returns the new parts' names."""
    _check_projection(table, name)
    kept = tuple(e for e in table.definition.indexes if not _declares_projection(e, name))
    without = TableMetadata(replace(table.definition, indexes=kept), table.metadata.engine_settings)
    return _mutate(table, f"(CLEAR PROJECTION {to_sql(Column(name))})", lambda reader: name in reader.projections,
                   without)


def _mutate(table: MergeTreeTable, command: str, affects: Callable[[PartReader], bool],
            meta: TableMetadata | None = None) -> list[str]:
    """Give every visible part a new version (a mutation: one transaction, version N,
    mutation_N.txt after the commit): rewritten under `meta` (the table's current definition by
    default) where `affects(reader)`, copied otherwise (`MergeTreeTable.rewrite_every_part`)."""
    return table.rewrite_every_part(
        command, lambda reader: _rewritten(meta or table.metadata, reader) if affects(reader) else None)


def rewrite_every_part_staged(table: MergeTreeTable, command: str,
                              rewrite: Callable[[PartReader], PartFiles | None]) -> list[str]:
    """`rewrite_every_part` for tables whose parts are staged, then renamed into place
    (mutations.py's `finish`)."""
    if not table.supports_mutations:
        raise UnsupportedError(f"{table}: {command} (a mutation's new part versions) is not implemented for this "
                               "kind of table")
    table.check_same_table()
    table.adopt_directory_parts()
    tx = Transaction(table.coordinator)
    staged: dict[str, str] = {}  # visible part → its staged new version
    try:
        visible = tx.visible_parts(table.log)
        # The new versions would be above the patches of ClickHouse's lightweight UPDATEs, unapplied.
        table.refuse_if_patched(visible, command)
        for part in sorted(visible):
            name = f"{inserting.STAGING_PREFIX}t{tx.tid}_index_{uuid.uuid4().hex[:12]}_0"
            files = rewrite(table.reader(part))
            if files is not None:
                table.store.write_part(name, files.files, files.boundaries)
            else:
                table.store.clone_part(part, name)
            staged[part] = name
    except BaseException:
        mutations.abort(table, tx, staged, own=True)
        raise
    if not staged:
        tx.rollback()
        return []
    return mutations.finish(table, command, tx, staged, own=True)


def _rewritten(meta: TableMetadata, reader: PartReader) -> PartFiles:
    """The files of `reader`'s part written again with `meta`'s indexes and projections: every
    stored row (with its lightweight-DELETE mask) in the same granules."""
    ranges = [(0, reader.n_granules)]
    columns = list(meta.columns) + [(n, t.to_clickhouse()) for n, t in reader.types.items()
                                    if n in HIDDEN_COLUMNS and n not in meta.column_types]

    def column_of(name: str) -> pa.Array | pa.ChunkedArray:
        if name in meta.column_types:
            return reader.read([name], ranges, meta.column_types, apply_mask=False).column(0)
        return reader.read_column(name, ranges)

    names = [n for n, _ in meta.columns]
    keys = key_column_names(names, meta.definition.order_by, meta.definition.partition_by, meta.definition.primary_key)
    key_table = pa.table({name: column_of(name) for name in names if name in keys})
    key = meta.partition_key
    partition = None
    if key.is_partitioned:
        values = reader.partition_values(key.result_types)
        partition = PartitionValue([pa.array([v], type=to_arrow(parse_type(t))) for v, t in zip(values, key.result_types)],
                                   key.result_types, key.columns)
    # The part keeps its kind, as a ClickHouse mutation (MATERIALIZE INDEX) keeps it.
    files = write_part_by_column(reader.is_compact, reader.rows, columns, column_of, meta.primary_key_values(key_table),
                                 partition, meta.writer_settings, np.asarray(reader.granule_rows, dtype=np.int64))
    files = meta.add_projections(files, projections.rows_in_place(column_of, reader.rows))
    return meta.with_ttl(files, lambda names: pa.table({name: column_of(name) for name in names}))

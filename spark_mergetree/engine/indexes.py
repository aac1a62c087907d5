"""ALTER TABLE ... ADD INDEX / DROP INDEX / MATERIALIZE INDEX on our tables.

ADD INDEX changes the table's statement only: parts written from then on carry the index, parts
written before have no files of it (ClickHouse and we read all their granules). MATERIALIZE INDEX
and DROP INDEX are mutations, as in ClickHouse: the mutation takes a block number N, records its
command in `mutation_N.txt` in the table directory, and replaces every visible part by a new version
of it named with data version N (`all_1_1_0` → `all_1_1_0_N`) holding the same rows, with the
index's files built (MATERIALIZE) or gone (DROP). The replacement is one transaction: readers see
all old parts or all new ones. The new versions are written whole by our writer (ClickHouse
hard-links the files that do not change; the rows and the index files are the same).
"""

from __future__ import annotations

import datetime
from dataclasses import replace
from typing import TYPE_CHECKING

import pyarrow as pa

from spark_mergetree.engine import commit as committing
from spark_mergetree.engine import optimize as optimizing
from spark_mergetree.errors import ExpressionError, SchemaMismatchError
from spark_mergetree.expressions.skip_index import check_supported, parse_skip_index
from spark_mergetree.fileops import write_file_atomically
from spark_mergetree.format.part import PartFiles
from spark_mergetree.format.part_info import PartInfo
from spark_mergetree.format.part_reader import PartReader
from spark_mergetree.format.part_writer import PartitionValue, write_wide_part
from spark_mergetree.format.types import parse_type, to_arrow

if TYPE_CHECKING:
    from spark_mergetree.engine.table import MergeTreeTable

MUTATION_FILE = "mutation_{}.txt"


def add_index(table: MergeTreeTable, declaration: str) -> None:
    """`INDEX name expr TYPE type[(args)] [GRANULARITY g]` (the words `INDEX` optional): checked
    against the table's columns and indexes, then added to its statement."""
    text = declaration.strip()
    if not text.upper().startswith("INDEX"):
        text = "INDEX " + text
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
    return _mutate(table, f"DROP INDEX {name}", lambda reader: f"skp_idx_{name}." in " ".join(reader.files))


def materialize_index(table: MergeTreeTable, name: str) -> list[str]:
    """Build index `name` into every part that exists (a mutation); returns the new parts' names."""
    if not any(index.name == name for index in table.metadata.skip_indexes):
        raise SchemaMismatchError(f"table {table.path} has no index named {name!r}")
    return _mutate(table, f"MATERIALIZE INDEX {name}", lambda reader: True)


def _mutate(table: MergeTreeTable, command: str, affects: object) -> list[str]:
    """Replace each visible part `affects(reader)` holds for by a version rewritten under the table's
    current definition, in one transaction with a new block number as its data version."""
    table.check_same_table()
    tx, _, visible = optimizing.begin_merge_transaction(table)
    created: list[str] = []
    try:
        table_id = table.log.bind(tx.coordinator.url)
        with table.log.commit_lock():
            version = committing.allocate_blocks(table, tx, table_id, 1)
        targets = sorted(p for p in visible if affects(table.reader(p)))  # type: ignore[operator]
        _write_mutation_file(table, version, command)
        if targets:
            tx.remove_parts(table.log, targets)
        for part in targets:
            info = PartInfo.parse(part)
            result = replace(info, mutation=version).name
            files = _rewritten(table, table.reader(part))
            created.append(optimizing.publish_part(table, result, files, tx))
        tx.commit()
    except BaseException:
        if tx.state != "unknown":
            tx.rollback()
        raise
    return created


def _write_mutation_file(table: MergeTreeTable, version: int, command: str) -> None:
    """`mutation_N.txt` as ClickHouse writes it for a finished mutation of a MergeTree table."""
    created = datetime.datetime.now().strftime("%Y-%m-%d %H:%M:%S")
    text = f"format version: 1\ncreate time: {created}\ncommands: {command}\n"
    write_file_atomically(table.path / MUTATION_FILE.format(version), text.encode())


def _rewritten(table: MergeTreeTable, reader: PartReader) -> PartFiles:
    """The files of `reader`'s part written again: its rows (those a lightweight DELETE left), its
    granules when every row stays, the table's current indexes."""
    meta = table.metadata
    rows = reader.read([n for n, _ in meta.columns], None, meta.column_types)
    key = meta.partition_key
    partition = None
    if key.is_partitioned:
        values = reader.partition_values(key.result_types)
        partition = PartitionValue([pa.array([v], type=to_arrow(parse_type(t))) for v, t in zip(values, key.result_types)],
                                   key.result_types, key.columns)
    granules = reader.granule_rows if reader.existing_rows == reader.rows else None
    return write_wide_part(rows, meta.columns, meta.primary_key_values(rows), partition, meta.writer_settings,
                           granule_rows=granules)

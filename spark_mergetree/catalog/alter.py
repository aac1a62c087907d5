"""ALTER TABLE ... ADD COLUMN of a catalog table: the new statement replaces the table's metadata
file in one rename, under the table name's guard (format_spec/catalog.md: the metadata file is the
table's definition; its data directory and parts do not change).

Parts written before hold no file of a new column: readers (ours and ClickHouse) give its default
value (NULL for Nullable types, zero or empty otherwise), as after ClickHouse's own ADD COLUMN.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import replace

from spark_mergetree import fileops
from spark_mergetree.catalog.layout import CatalogLayout, TableInfo, TableName, split_name
from spark_mergetree.errors import SchemaMismatchError
from spark_mergetree.expressions.ddl import ColumnDefinition, format_attach, parse_create


def add_columns(layout: CatalogLayout, name: TableName, columns: Sequence[tuple[str, str]]) -> TableInfo:
    """Append `columns` (name, ClickHouse type) to the table `name`; every column is checked (a name
    that exists, a type the engine cannot read or give a default for) before anything is written."""
    from spark_mergetree.format.aggregate_states import require_known_states
    from spark_mergetree.format.types import parse_column_type

    database, table = split_name(name)
    with layout.guard_tables((database, table)):
        info = layout.table_info((database, table))
        definition = parse_create(info.statement)
        existing = {column.name for column in definition.columns}
        clash = [column for column, _ in columns if column in existing]
        if clash:
            raise SchemaMismatchError(f"column(s) {', '.join(clash)} already exist in table {database}.{table}")
        added = []
        for column, type_text in columns:
            parsed = parse_column_type(column, type_text)
            require_known_states(column, parsed)  # older parts would need its default state
            added.append(ColumnDefinition(column, parsed.to_clickhouse()))
        statement = format_attach(replace(definition, columns=definition.columns + tuple(added)))
        # Written beside the root's other scratch files, which ClickHouse never reads as metadata.
        layout.scratch_dir.mkdir(parents=True, exist_ok=True)
        temporary = layout.scratch_dir / f"alter.{info.uuid}.sql"
        fileops.remove_quietly(temporary)
        fileops.write_new_file(temporary, statement.encode())
        os.replace(temporary, info.metadata_path)
        fileops.fsync_dir(info.metadata_path.parent)
        return replace(info, statement=statement)

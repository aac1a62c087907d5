"""The text of catalog metadata files: `ATTACH DATABASE _ UUID ...` and `ATTACH TABLE _ UUID ...`.

Atomic databases never write a name into a metadata file (the `_` placeholder): the file name is
the only place a name lives, which is what makes RENAME a single file rename. The UUID in the
text is what ties the name to its `store/<first 3>/<uuid>/` directory.
"""

from __future__ import annotations

import dataclasses
import re
import uuid as uuid_module
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from spark_mergetree.errors import FormatError, InvalidOptionError

if TYPE_CHECKING:
    from spark_mergetree.expressions.ddl import TableDefinition

ColumnList = Sequence[tuple[str, str]]

_UUID_PATTERN = r"([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})"
_ATTACH_TABLE = re.compile(r"\A\s*ATTACH\s+TABLE\s+(?:_|`_`)\s+UUID\s+'" + _UUID_PATTERN + "'", re.IGNORECASE)
_ATTACH_DATABASE = re.compile(
    r"\A\s*ATTACH\s+DATABASE\s+(?:_|`_`)(?:\s+UUID\s+'" + _UUID_PATTERN + r"')?", re.IGNORECASE
)
_DATABASE_ENGINE = re.compile(r"\bENGINE\s*=\s*(\w+)", re.IGNORECASE)


def database_statement(database_uuid: str) -> str:
    """What ClickHouse writes into `metadata/<db>.sql` for an Atomic database."""
    return f"ATTACH DATABASE _ UUID '{database_uuid}'\nENGINE = Atomic\n"


def parse_database_statement(text: str, source: str) -> tuple[str | None, str]:
    """(uuid or None, engine name) of a database metadata file; ``source`` names it in errors."""
    match = _ATTACH_DATABASE.match(text)
    if match is None:
        raise FormatError(f"{source}: not an ATTACH DATABASE statement: {text[:80]!r}")
    engine = _DATABASE_ENGINE.search(text, match.end())
    return (match.group(1).lower() if match.group(1) else None), (engine.group(1) if engine else "")


def table_uuid_of(text: str, source: str) -> str:
    """The UUID of an `ATTACH TABLE _ UUID '...'` statement; ``source`` names the file in errors."""
    match = _ATTACH_TABLE.match(text)
    if match is None:
        raise FormatError(
            f"{source}: not an Atomic table metadata file (expected \"ATTACH TABLE _ UUID '...'\"), "
            f"starts with {text[:80]!r}"
        )
    return match.group(1).lower()


def new_uuid() -> str:
    return str(uuid_module.uuid4())


def table_statement(table_uuid: str, definition: Any, *keys: Any, **named_keys: Any) -> str:
    """The ATTACH TABLE text for a new MergeTree table, as ClickHouse would write it (arguments as
    for ``table_definition``)."""
    from spark_mergetree.expressions.ddl import format_attach

    return format_attach(table_definition(table_uuid, definition, *keys, **named_keys))


def table_definition(
    table_uuid: str,
    definition: Any,
    order_by: str | Sequence[str] | None = None,
    partition_by: str | Sequence[str] | None = None,
    primary_key: str | Sequence[str] | None = None,
    settings: Mapping[str, Any] | None = None,
    engine: str | None = None,
) -> TableDefinition:
    """The definition of a new table of the MergeTree family (``engine``, e.g.
    "ReplacingMergeTree(version)"; None: MergeTree) as its metadata file holds it: `_` for the
    name, ``table_uuid`` for the UUID.

    ``definition`` is a column list ``[(name, ClickHouse type), ...]`` or a parsed table
    definition from the expressions layer (then the keys come from it and the key arguments
    must be None).
    """
    if not isinstance(definition, (list, tuple)):
        if any(arg is not None for arg in (order_by, partition_by, primary_key, settings, engine)):
            raise InvalidOptionError(
                "a TableDefinition already carries its engine, keys and settings: pass order_by, partition_by, "
                "primary_key, settings and engine only with a column list"
            )
        return _named_by_uuid(table_uuid, definition)
    if not definition:
        raise InvalidOptionError("schema is empty: a table needs at least one column")
    for item in definition:
        if not (isinstance(item, (list, tuple)) and len(item) == 2 and all(isinstance(x, str) for x in item)):
            raise InvalidOptionError(f"schema entry {item!r} is not a (column name, ClickHouse type) pair")
    from spark_mergetree.expressions.ddl import build_definition

    if order_by is None:
        raise InvalidOptionError("order_by is required for MergeTree (use [] or 'tuple()' for no sorting key)")
    return _named_by_uuid(table_uuid, build_definition(definition, order_by, partition_by, primary_key, settings,
                                                            engine=engine))


def _named_by_uuid(table_uuid: str, definition: TableDefinition) -> TableDefinition:
    from spark_mergetree.expressions.ddl import TableDefinition

    if not isinstance(definition, TableDefinition):
        raise InvalidOptionError(
            f"schema must be a list of (column name, ClickHouse type) pairs or a TableDefinition, "
            f"got {type(definition).__name__}"
        )
    # The name lives only in the file name; the UUID is always the one this catalog chose.
    return dataclasses.replace(definition, uuid=table_uuid, database=None, name="_")

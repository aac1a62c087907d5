"""The statement a ClickHouse server runs to open one of our tables where it lies, read-only.

It is the table's own ATTACH statement (its UUID, columns, engine, keys and settings) plus a disk
whose root is the table's directory (`table_disk = 1`): an `s3_plain` disk over a table in object
storage, a `plain` disk over `local_blob_storage` for a table on a local or mounted disk. Both are
read-only disks for MergeTree: ClickHouse refuses INSERT, merges and mutations on them ("Table is
in readonly mode"), so it never writes beside our commit protocol. (A `local` disk would accept
writes, needs `custom_local_disks_base_directory` in the server's configuration, and takes no
`table_disk`; checked against ClickHouse 26.9.)

ClickHouse does not read our log: it loads every part in the directory that no other part covers.
When that set differs from the parts our latest snapshot shows (replaced parts not yet cleaned up,
leftovers of a crash), the statement is still returned and a warning names the difference.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Sequence

from spark_mergetree.engine import select as selecting
from spark_mergetree.expressions.ddl import TableDefinition, format_attach, quote_string


def attach_statement(definition: TableDefinition, name: str, uuid: str | None, disk: Sequence[str]) -> str:
    """`ATTACH TABLE name UUID '...' (...) ENGINE = ... SETTINGS ..., table_disk = 1, disk = disk(<disk>)`.

    `disk` holds the disk's parameters as `key = value` texts, values already quoted."""
    statement = format_attach(definition).rstrip("\n")
    _head, _, body = statement.partition("\n")
    database, _, table = name.rpartition(".")
    target = ".".join(f"`{piece}`" for piece in ((database, table) if database else (table,)))
    lines = body.split("\n")
    setting = f"table_disk = 1, disk = disk({', '.join(disk)})"
    if lines[-1].startswith("SETTINGS "):
        lines[-1] += ", " + setting
    else:
        lines.append("SETTINGS " + setting)
    return f"ATTACH TABLE {target} UUID {quote_string(uuid or '')}\n" + "\n".join(lines) + "\n"


def local_disk(directory: str) -> list[str]:
    """The read-only disk over a local directory (see the module doc)."""
    return ["type = 'object_storage'", "object_storage_type = 'local_blob_storage'", "metadata_type = 'plain'",
            f"path = {quote_string(directory.rstrip('/') + '/')}"]


def warn_if_clickhouse_sees_other_parts(where: str, on_disk: Iterable[str], visible: set[str]) -> None:
    """Warn when the parts ClickHouse would load from the directory are not the visible ones."""
    loaded = selecting.active_parts(on_disk, where)
    extra, missing = sorted(loaded - visible), sorted(visible - loaded)
    if extra or missing:
        said = [f"also read part(s) {', '.join(extra[:5])} the table's log does not show (replaced or left "
                "by a crash)"] if extra else []
        said += [f"not read part(s) {', '.join(missing[:5])} that a part on disk covers"] if missing else []
        warnings.warn(f"{where}: ClickHouse would {' and '.join(said)}: run cleanup() first", stacklevel=3)

"""Patch parts of ClickHouse lightweight UPDATEs: their names, system columns and `source_parts.dat`.

A patch part `patch-<columns hash>-<partition>_<min>_<max>_<level>_<version>` is an ordinary part
whose rows are updated values of other parts' rows, each identified by `_block_number` and
`_block_offset` (the row's identity in the table) and stamped with `_part_data_version` (the
UPDATE's version). `source_parts.dat` names the parts the UPDATE read, each with the lowest and
highest version of its rows in the patch. How reads apply them is engine/patches.py's; the bytes
are described in format_spec/part.md.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from spark_mergetree.errors import CorruptPartError, UnsupportedError
from spark_mergetree.format.row_binary import read_varuint

PATCH_PART_PREFIX = "patch-"
SOURCE_PARTS_FILE = "source_parts.dat"
# Columns of a patch part that identify and version rows; every other column holds updated values
# (or, in the key-ordered format, the row's sorting key).
PATCH_SYSTEM_COLUMNS = frozenset({"_part", "_part_offset", "_block_number", "_block_offset", "_part_data_version"})
# source_parts.dat versions: 0 = rows ordered by (`_part`, `_part_offset`); 1 = rows ordered by the
# table's sorting key then (`_block_number`, `_block_offset`), the key's text stored after the byte.
_FORMAT_BY_PART = 0
_FORMAT_BY_KEY = 1
_U64 = struct.Struct("<Q")


def original_partition_id(patch_partition_id: str) -> str:
    """The partition of the parts a patch part updates: `patch-<32 hex>-<partition>` → `<partition>`."""
    rest = patch_partition_id[len(PATCH_PART_PREFIX):] if patch_partition_id.startswith(PATCH_PART_PREFIX) else ""
    digest, dash, partition = rest.partition("-")
    if not dash or len(digest) != 32 or not partition:
        raise UnsupportedError(f"patch partition id {patch_partition_id!r} is not patch-<32 hex digits>-<partition>")
    return partition


@dataclass(frozen=True)
class SourceParts:
    """`source_parts.dat`: the format version, the sorting key text (format 1) and, per source part,
    the (lowest, highest) version of the patch rows that update it."""

    format_version: int
    sorting_key: str | None
    versions: dict[str, tuple[int, int]]

    @classmethod
    def parse(cls, data: bytes, where: str) -> SourceParts:
        view = memoryview(data)
        if not data:
            raise CorruptPartError(f"{where}: empty")
        version, pos = data[0], 1
        key: str | None = None
        if version == _FORMAT_BY_KEY:
            size, pos = read_varuint(view, pos, where)
            key = bytes(view[pos:pos + size]).decode()
            pos += size
        elif version != _FORMAT_BY_PART:
            raise UnsupportedError(f"{where}: source parts format version {version}; this version knows 0 and 1")
        if pos + 8 > len(data):
            raise CorruptPartError(f"{where}: truncated before the count of source parts")
        (count,), pos = _U64.unpack_from(data, pos), pos + 8
        versions: dict[str, tuple[int, int]] = {}
        for _ in range(count):
            size, pos = read_varuint(view, pos, where)
            if pos + size + 16 > len(data):
                raise CorruptPartError(f"{where}: truncated in the list of {count} source parts")
            name = bytes(view[pos:pos + size]).decode()
            low, high = _U64.unpack_from(data, pos + size)[0], _U64.unpack_from(data, pos + size + 8)[0]
            versions[name] = (low, high)
            pos += size + 16
        if pos != len(data):
            raise CorruptPartError(f"{where}: {len(data) - pos} bytes after the list of source parts")
        return cls(version, key, versions)

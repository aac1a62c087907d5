"""PartStore: one table's parts on a storage policy, whatever the layout — the storage layer's
interface to the engine.

Everything about single parts (write, read, rename, remove, list) comes from `TableParts`
(table_parts.py), which hands the bytes to the strategy of the part's layout (layouts/).
Maintenance (scrub, rebuild) and transfers (move between volumes, import from and export to
plain ClickHouse part directories) are in maintenance.py and transfer.py. The on-disk layout is
format_spec/storage.md.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from spark_mergetree.fileops import write_file_atomically
from spark_mergetree.storage import maintenance, transfer
from spark_mergetree.storage.policy import StoragePolicy
from spark_mergetree.storage.reports import (
    DegradedReadWarning,
    PartLocation,
    RebuildReport,
    ScrubProblem,
    ScrubReport,
)
from spark_mergetree.storage.table_parts import TableParts
from spark_mergetree.storage.transfer import compressed_block_starts

T = TypeVar("T")

__all__ = ["DegradedReadWarning", "PartLocation", "PartStore", "RebuildReport", "ScrubProblem", "ScrubReport",
           "compressed_block_starts"]


class PartStore(TableParts):
    """The parts of one table on a StoragePolicy: `PartStore(policy, table_path)`; the table's
    directory is `<disk path>/<table_path>` on every disk. `root`: the table's own directory, as
    `part_url` names parts (default: the table's directory on the policy's first disk). Satisfies
    storage/backend.py's `PartStorage`."""

    #: Parts are staged under temporary names and published by a rename.
    writes_in_place = False
    #: A ClickHouse server on the same directory may add parts and patch parts.
    shared_with_clickhouse = True

    def __init__(self, policy: StoragePolicy, table_path: str = "", *, root: str | os.PathLike[str] | None = None
                 ) -> None:
        super().__init__(policy, table_path)
        self.root = str(root) if root is not None else str(self.table_dir(policy.volumes[0].disks[0]))
        self._readers: dict[str, Any] = {}

    def part_url(self, part: str) -> str:
        return f"{self.root}/{part}"

    def cached_reader(self, part: str, open_reader: Callable[[], T]) -> T:
        """A reader per part for this store's life (parts never change once written; `forget` drops
        it when the part is renamed or removed)."""
        with self._lock:
            cached = self._readers.get(part)
        if cached is None:
            cached = open_reader()
            with self._lock:
                cached = self._readers.setdefault(part, cached)
        return cached

    def put_table_file(self, name: str, data: bytes) -> None:
        """Atomically (a temporary file renamed), in the table's own directory."""
        write_file_atomically(Path(self.root) / name, data)

    def read_table_file(self, name: str) -> bytes:
        return (Path(self.root) / name).read_bytes()

    def replace_table_file(self, name: str, data: bytes, expected: bytes) -> bool:
        if self.read_table_file(name) != expected:
            return False
        self.put_table_file(name, data)
        return True

    def forget(self, *parts: str) -> None:
        super().forget(*parts)
        with self._lock:
            for part in parts:
                self._readers.pop(part, None)

    def scrub(self, progress: bool = False) -> ScrubReport:
        """Read every copy of every unit and every parity unit; report what does not verify."""
        return maintenance.scrub(self, progress)

    def rebuild(self, disk_name: str, progress: bool = True) -> RebuildReport:
        """Restore every part's bytes on a replaced disk from the other disks (raid1, raid5, raid6)."""
        return maintenance.rebuild(self, disk_name, progress)

    def move_part(self, part: str, volume: str) -> None:
        """Move a part to another volume of the policy, re-laid out for that volume."""
        transfer.move_part(self, part, volume)

    def move_parts_by_factor(self) -> list[tuple[str, str, str]]:
        """Move the biggest parts off volumes fuller than the policy's move_factor."""
        return transfer.move_parts_by_factor(self)

    def import_plain(self, source_dir: str | os.PathLike[str], part_name: str | None = None) -> str:
        """Store a plain part directory (e.g. one ClickHouse wrote) as a new part of this table."""
        return transfer.import_plain(self, source_dir, part_name)

    def export_plain(self, part: str, dest_dir: str | os.PathLike[str]) -> Path:
        """Write the part as a plain ClickHouse part directory at `dest_dir` (which must not exist)."""
        return transfer.export_plain(self, part, dest_dir)

    def __enter__(self) -> PartStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

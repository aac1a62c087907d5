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
from pathlib import Path

from spark_mergetree.storage import maintenance, transfer
from spark_mergetree.storage.reports import (
    DegradedReadWarning,
    PartLocation,
    RebuildReport,
    ScrubProblem,
    ScrubReport,
)
from spark_mergetree.storage.table_parts import TableParts
from spark_mergetree.storage.transfer import compressed_block_starts

__all__ = ["DegradedReadWarning", "PartLocation", "PartStore", "RebuildReport", "ScrubProblem", "ScrubReport",
           "compressed_block_starts"]


class PartStore(TableParts):
    """The parts of one table on a StoragePolicy: `PartStore(policy, table_path)`; the table's
    directory is `<disk path>/<table_path>` on every disk."""

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

"""RecoveryReport: what a recovery after crashes repaired, for a table's commit log and for a catalog.

One report for both recoveries (`TableLog.recover`, `Catalog.recover`): each fills its own fields
and leaves the others empty.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path


@dataclass
class RecoveryReport:
    # A table's commit log (format_spec/transactions.md): transactions and part directories.
    finalized: list[int] = field(default_factory=list)  # committed: their pending entries got their csn
    rolled_back: list[int] = field(default_factory=list)  # dead or aborted: entries and parts deleted
    deleted_directories: list[str] = field(default_factory=list)  # directories nothing owned any more
    # Part directories no entry names, kept (never deleted): another writer's, such as a ClickHouse
    # server's INSERT or merge on the same directory; `MergeTreeTable.adopt_directory_parts` takes
    # them in.
    foreign_parts: list[str] = field(default_factory=list)
    # A catalog root (format_spec/catalog.md): half-done DDL, symlinks, drops.
    removed_temporary_files: list[Path] = field(default_factory=list)
    removed_orphan_store_dirs: list[Path] = field(default_factory=list)
    repaired_symlinks: list[Path] = field(default_factory=list)
    removed_leftovers: list[Path] = field(default_factory=list)
    collected: list[str] = field(default_factory=list)  # UUIDs of dropped tables whose data was deleted
    # Reported, never touched: store directories no metadata names, and `metadata/<db>` symlinks
    # pointing at a directory with tables that `<db>.sql` does not name.
    unreferenced_store_dirs: list[Path] = field(default_factory=list)
    conflicting_database_links: list[Path] = field(default_factory=list)

    def __str__(self) -> str:
        done = [f"{f.name.replace('_', ' ')}: {', '.join(map(str, getattr(self, f.name)))}"
                for f in fields(self) if getattr(self, f.name)]
        return "recovery: " + ("; ".join(done) if done else "nothing to repair")

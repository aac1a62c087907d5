"""CHECK TABLE: every file of every visible part, and of every active patch part of a lightweight
UPDATE (its rows change what reads return), re-hashed against its checksums.txt."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from spark_mergetree.errors import CorruptPartError
from spark_mergetree.format.part_reader import verify_part

if TYPE_CHECKING:
    from spark_mergetree.engine.table import MergeTreeTable


@dataclass
class CheckReport:
    """Result of `check()`: every visible part's files re-hashed against checksums.txt."""

    parts_checked: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def __str__(self) -> str:
        if self.ok:
            return f"{self.parts_checked} parts checked: all files match checksums.txt"
        return f"{self.parts_checked} parts checked, {len(self.problems)} problem(s):\n" + "\n".join(
            "  " + p for p in self.problems)


def check(table: MergeTreeTable, on_part: Callable[[str], None] | None = None) -> CheckReport:
    """Like CHECK TABLE; `on_part(name)` is called after each part (progress reporting)."""
    report = CheckReport()
    _, visible = table.visible_parts()
    for part in sorted(visible | table.patch_part_names()):
        if report.parts_checked and on_part is not None:
            on_part(part)
        report.parts_checked += 1
        try:
            report.problems += verify_part(table.store, part, table.part_location(part))
        except (CorruptPartError, OSError) as exc:
            report.problems.append(f"{part}: {exc}")
    if report.parts_checked and on_part is not None:
        on_part("")
    return report

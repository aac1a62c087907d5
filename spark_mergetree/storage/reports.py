"""What storage tells its callers about parts and disks: where a part lives, degraded reads,
and the reports of scrub and rebuild."""

from __future__ import annotations

from dataclasses import dataclass, field


class DegradedReadWarning(UserWarning):
    """Bytes were served from a mirror or rebuilt from parity because a disk failed (names disk, part)."""


@dataclass(frozen=True)
class PartLocation:
    """Where a part lives: its volume, that volume's layout, and the disks holding its bytes."""

    volume: str
    layout: str
    disks: tuple[str, ...]


@dataclass
class ScrubProblem:
    part: str
    disk: str
    kind: str  # "missing", "truncated", "checksum", "parity", "map"
    file: str | None = None
    unit: int | None = None
    detail: str = ""

    def __str__(self) -> str:
        where = f"part {self.part} disk {self.disk}"
        if self.file is not None:
            where += f" file {self.file}"
        if self.unit is not None:
            where += f" unit {self.unit}"
        return f"{where}: {self.kind} {self.detail}".rstrip()


@dataclass
class ScrubReport:
    parts_checked: int = 0
    units_checked: int = 0
    parity_checked: int = 0
    unverified_parts: list[str] = field(default_factory=list)
    problems: list[ScrubProblem] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def __str__(self) -> str:
        head = (f"scrub: {self.parts_checked} parts, {self.units_checked} unit copies, "
                f"{self.parity_checked} parity units, {len(self.problems)} problems")
        return "\n".join([head, *map(str, self.problems)])


@dataclass
class RebuildReport:
    disk: str
    parts_rebuilt: list[str] = field(default_factory=list)
    bytes_written: int = 0

"""Part names ``<partition_id>_<min_block>_<max_block>_<level>[_<mutation>]`` and how parts relate.

A part covers the insert blocks ``min_block..max_block`` of one partition. ``level`` counts merges
(0 for a freshly inserted part); ``mutation`` is the data version a mutation gave it (omitted from
the name when 0). See format_spec/part_names.md.
"""

from __future__ import annotations

import functools
import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from spark_mergetree.errors import FormatError, InvalidOptionError, MergeTreeError

__all__ = ["PartInfo", "MAX_BLOCK_NUMBER"]

MAX_BLOCK_NUMBER = (1 << 63) - 1
# Partition ids are decimal values joined by '-' (possibly negative, so '--' occurs), a hex hash or
# 'all': never '_', which separates the name's fields.
_PARTITION_ID = re.compile(r"[A-Za-z0-9\-]+")
_NUMBER = re.compile(r"[0-9]+")


@dataclass(frozen=True, order=True)
class PartInfo:
    """The identity of a part; ordering is by partition id, then block range, level, mutation."""

    partition_id: str
    min_block: int
    max_block: int
    level: int
    mutation: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.partition_id, str) or not _PARTITION_ID.fullmatch(self.partition_id):
            raise InvalidOptionError(
                f"partition id {self.partition_id!r} must be non-empty letters, digits and '-' (no '_')"
            )
        for label in ("min_block", "max_block", "level", "mutation"):
            value = getattr(self, label)
            if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= MAX_BLOCK_NUMBER:
                raise InvalidOptionError(f"part {label} must be an integer in 0..2^63-1, got {value!r}")
        if self.min_block > self.max_block:
            raise InvalidOptionError(f"part min_block {self.min_block} is greater than max_block {self.max_block}")

    @classmethod
    def parse(cls, name: str) -> PartInfo:
        """Parse a part directory name; raises FormatError naming what is wrong."""
        return _parse_cached(name) if cls is PartInfo and isinstance(name, str) else cls._parse(name)

    @classmethod
    def _parse(cls, name: str) -> PartInfo:
        if not isinstance(name, str):
            raise FormatError(f"part name must be a string, got {name!r}")
        fields = name.split("_")
        if len(fields) not in (4, 5):
            raise FormatError(
                f"bad part name {name!r}: expected <partition>_<min_block>_<max_block>_<level>[_<mutation>]"
            )
        partition_id, *numbers = fields
        if not _PARTITION_ID.fullmatch(partition_id):
            raise FormatError(f"bad part name {name!r}: partition id {partition_id!r} must be letters, digits and '-'")
        labels = ("min_block", "max_block", "level", "mutation")
        values: list[int] = []
        for label, text in zip(labels, numbers):
            if not _NUMBER.fullmatch(text):
                raise FormatError(f"bad part name {name!r}: {label} {text!r} is not a non-negative integer")
            value = int(text)
            if value > MAX_BLOCK_NUMBER:
                raise FormatError(f"bad part name {name!r}: {label} {text} does not fit in Int64")
            values.append(value)
        if values[0] > values[1]:
            raise FormatError(f"bad part name {name!r}: min_block {values[0]} is greater than max_block {values[1]}")
        return cls(partition_id, *values)

    @property
    def name(self) -> str:
        base = f"{self.partition_id}_{self.min_block}_{self.max_block}_{self.level}"
        return f"{base}_{self.mutation}" if self.mutation else base

    def __str__(self) -> str:
        return self.name

    def contains(self, other: PartInfo) -> bool:
        """Whether this part covers ``other``, as ClickHouse decides which parts are outdated: same
        partition, its blocks, level and mutation not lower; and a wider block range needs a higher
        level (``all_1_5_2`` does not cover ``all_1_4_2``; ``all_1_5_3`` and ``all_1_4_2_9`` do)."""
        return (
            self.partition_id == other.partition_id
            and self.min_block <= other.min_block
            and self.max_block >= other.max_block
            and self.level >= other.level
            and self.mutation >= other.mutation
            and (self.level > other.level
                 or (self.min_block, self.max_block) == (other.min_block, other.max_block))
        )

    def is_disjoint(self, other: PartInfo) -> bool:
        """Whether the two parts share no block (different partitions or non-overlapping ranges)."""
        return (
            self.partition_id != other.partition_id
            or self.max_block < other.min_block
            or other.max_block < self.min_block
        )

    @classmethod
    def merged(cls, parts: Iterable[PartInfo]) -> PartInfo:
        """The part a merge of ``parts`` produces: their whole block range, level max + 1, mutation max."""
        sources = sorted(parts)
        if not sources:
            raise InvalidOptionError("cannot merge an empty list of parts")
        partitions = {part.partition_id for part in sources}
        if len(partitions) != 1:
            raise InvalidOptionError(f"cannot merge parts of different partitions: {sorted(partitions)}")
        for left, right in zip(sources, sources[1:]):
            if not left.is_disjoint(right):
                raise InvalidOptionError(f"cannot merge overlapping parts {left.name} and {right.name}")
        return cls(
            sources[0].partition_id,
            min(part.min_block for part in sources),
            max(part.max_block for part in sources),
            max(part.level for part in sources) + 1,
            max(part.mutation for part in sources),
        )


@functools.lru_cache(maxsize=1 << 16)
def _parse_cached(name: str) -> PartInfo:
    # Planning parses the name of every visible part on every query; PartInfo is immutable.
    return PartInfo._parse(name)


def uncovered_parts(names: Iterable[str]) -> set[str]:
    """The parts among `names` that no other part covers (`PartInfo.contains`): those ClickHouse
    loads as active from a directory holding them. Names that are not parts are ignored."""
    by_partition: dict[str, list[PartInfo]] = defaultdict(list)
    for name in names:
        try:
            info = PartInfo.parse(name)
        except MergeTreeError:
            continue
        by_partition[info.partition_id].append(info)
    return {info.name for infos in by_partition.values() for info in infos
            if not any(other != info and other.contains(info) for other in infos)}

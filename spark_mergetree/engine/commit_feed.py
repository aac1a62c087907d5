"""The commits of a table in csn order, each with the parts whose rows it inserted: what a streaming
source follows (spark/streaming_source.py), as Delta's source follows the add actions of its log.

Every commit of a table adds parts, removes parts, or both (txn/table_log.py: each part has the csn
that created it and the one that removed it; a checkpoint keeps exactly that, so the grouping below
works on folded history too). What a commit did follows from the part names (format/part_info.py):

* an added part that covers no removed part holds rows nobody saw before: an INSERT (also an
  insert ClickHouse made in the same directory, adopted into the log);
* an added part named exactly as the merge of the removed parts it covers (their block range, the
  next level: `PartInfo.merged`) is a merge's result (a background merge, OPTIMIZE, a TTL merge):
  its rows are the rows of the parts it replaces, already fed;
* anything else changes rows that were fed: a part rewritten at the same level under a new data
  version (a mutation: DELETE, UPDATE, or a MATERIALIZE INDEX/PROJECTION, whose rows are the same
  but which the names cannot tell from an UPDATE), a part covering removed parts and new blocks
  (an overwrite names its new part so, as ClickHouse's loading then drops the old ones), or a
  removed part that no added part covers (an overwrite, a DELETE that emptied a part).

Cleanup deletes parts removed at or below the log's floor: a feed that resumes from a csn below the
floor may have lost parts (a part inserted after the resume point and merged away since), so it is
refused with `HistoryGoneError` rather than read with rows missing.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from spark_mergetree.errors import TransactionError
from spark_mergetree.format.part_info import PartInfo

if TYPE_CHECKING:
    from spark_mergetree.engine.table import MergeTreeTable


class HistoryGoneError(TransactionError):
    """The table's log no longer holds every commit after the csn asked for (cleanup folded them)."""


@dataclass(frozen=True)
class TableCommit:
    """One commit of a table, as a feed of inserted rows sees it."""

    csn: int
    inserted: tuple[str, ...]  # added parts whose rows are new, sorted
    merged: tuple[str, ...]  # added parts that are merge results of removed parts
    removed: tuple[str, ...]
    change: str | None = None  # why the commit changes rows already fed; None if it does not

    @property
    def changes_rows(self) -> bool:
        return self.change is not None


def commits_after(table: MergeTreeTable, after: int, upto: int) -> list[TableCommit]:
    """The table's commits with `after` < csn ≤ `upto`, in csn order. HistoryGoneError when cleanup
    may have deleted parts a commit in that range inserted (`after` is below the log's floor)."""
    floor, versions = table.log.versions(table.coordinator)
    if after < floor:
        raise HistoryGoneError(
            f"table {table.path}: the commits after csn {after} are no longer all in its log: cleanup deleted "
            f"parts removed up to csn {floor} (after old_parts_lifetime), which may include parts inserted "
            f"after csn {after}; rows would be missing. Start again from a snapshot at or after csn {floor}")
    if upto <= after:
        return []
    added: dict[int, list[str]] = defaultdict(list)
    removed: dict[int, list[str]] = defaultdict(list)
    for name, version in versions.items():
        if version.created is not None and after < version.created <= upto:
            added[version.created].append(name)
        if version.removed is not None and after < version.removed <= upto:
            removed[version.removed].append(name)
    return [classify(csn, added.get(csn, ()), removed.get(csn, ())) for csn in sorted(set(added) | set(removed))]


def classify(csn: int, added: Iterable[str], removed: Iterable[str]) -> TableCommit:
    """What the commit at `csn` that added and removed these parts did (see the module doc)."""
    added_infos = {name: PartInfo.parse(name) for name in added}
    removed_infos = {name: PartInfo.parse(name) for name in removed}
    inserted, merged, change = [], [], None
    covered: set[str] = set()
    for name, info in sorted(added_infos.items()):
        sources = [old for old, old_info in removed_infos.items() if info.contains(old_info) and old != name]
        if not sources:
            inserted.append(name)
            continue
        covered.update(sources)
        if info == PartInfo.merged(removed_infos[old] for old in sources):
            merged.append(name)
        elif change is None and info.level == max(removed_infos[old].level for old in sources):
            change = (f"it rewrites part {sorted(sources)[0]} as {name} (a mutation: DELETE, UPDATE, or an index or "
                      "projection materialized)")
        elif change is None:  # new blocks beside the replaced ones: not what a merge of them is named
            change = f"it replaces part(s) {sorted(sources)[:3]} with {name}, which holds other rows (an overwrite)"
    uncovered = sorted(set(removed_infos) - covered)
    if uncovered and change is None:
        change = (f"it removes part(s) {uncovered[:3]} that no part it adds replaces (an overwrite, a DELETE that "
                  "emptied a part, or a dropped partition)")
    return TableCommit(csn, tuple(inserted), tuple(merged), tuple(sorted(removed_infos)), change)


def last_commit(table: MergeTreeTable, upto: int) -> int | None:
    """The csn of the table's last commit at or before `upto` (None: it has none)."""
    _, versions = table.log.versions(table.coordinator)
    events = [csn for version in versions.values() for csn in (version.created, version.removed)
              if csn is not None and csn <= upto]
    return max(events, default=None)


def part_rows(table: MergeTreeTable, parts: Iterable[str]) -> int:
    """Rows stored in `parts` (rows a lightweight DELETE masked included: a bound, for admission control)."""
    return sum(table.reader(name).rows for name in parts)

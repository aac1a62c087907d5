"""A table's commit history as rows: what `SELECT * FROM <catalog>.<db>.<table>.history` lists (the
SQL catalog's history table, jvm/src/.../MergeTreeHistoryTable.java), one row per commit that
changed the table's parts, oldest first.

The commits come from the engine's commit feed (engine/commit_feed.py: the parts each commit sequence
number added and removed, and what that made of it); the time of a commit from its log entry. Both
fold away as cleanup checkpoints the log: the listing starts at the log's floor, a commit's time is
null once its entry is folded, and rows are null for parts cleanup has deleted. Any `version` listed
here is a snapshot `VERSION AS OF` reads, while its parts are still on disk.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from spark_mergetree.engine.commit_feed import TableCommit, commits_after

# The columns of a history row, in order (the Java table declares the same, with these types).
COLUMNS = ("version", "timestamp", "operation", "parts_added", "parts_removed", "rows_added", "rows_removed")


def operation(commit: TableCommit) -> str:
    """What a commit did, in one word, from the part names alone (see engine/commit_feed.py)."""
    if commit.change is None:
        if commit.inserted and commit.merged:
            return "INSERT, MERGE"
        return "INSERT" if commit.inserted else "MERGE"
    if commit.change.startswith("it rewrites"):
        return "MUTATION"  # DELETE, UPDATE, or an index or projection materialized
    return "OVERWRITE" if len(commit.inserted) + len(commit.merged) else "REMOVE"


def history(table: Any) -> list[dict[str, Any]]:
    """The table's commits from the log's floor to now, oldest first (a list of COLUMNS dicts;
    `timestamp` in microseconds since the epoch, or None). Rows are the rows a read sees (a
    lightweight DELETE's masked rows left out), summed over the parts a commit added and removed."""
    floor, versions = table.log.versions(table.coordinator)
    latest = table.coordinator.current_timestamp()
    times = {entry.csn: entry.commit_time for entry in table.log.entries() if entry.csn is not None}
    added: dict[int, list[str]] = defaultdict(list)  # every part a commit created (a mutation's too)
    for name, version in versions.items():
        if version.created is not None:
            added[version.created].append(name)

    def rows(names: Iterable[str]) -> int | None:
        total = 0
        for name in names:  # one part's footer (and delete mask) each: metadata, not a scan
            if not table.store.exists(name):
                return None  # cleanup deleted it
            total += table.reader(name).existing_rows
        return total

    found = []
    for commit in commits_after(table, floor, latest):
        when = times.get(commit.csn)
        created = added.get(commit.csn, [])
        found.append({"version": commit.csn, "timestamp": None if when is None else int(when * 1_000_000),
                      "operation": operation(commit), "parts_added": len(created),
                      "parts_removed": len(commit.removed), "rows_added": rows(created),
                      "rows_removed": rows(commit.removed)})
    return found

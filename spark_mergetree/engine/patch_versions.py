"""Which snapshots see each patch part of a ClickHouse lightweight UPDATE.

Patch parts are ClickHouse's (engine/patches.py): our commit log never names them, and reads take
them from the table's directory. A snapshot must still see an UPDATE only if it was committed
before it: a time-travel read, or a transaction that began before the UPDATE, reads the rows as
they were. So the table records, for each patch part, the csn at which our log first saw it, in
`_mergetree/patch_versions.json`:

    {"format": 1, "patches": {"patch-<hash>-all_3_3_0_3": 17, ...}}

A snapshot S applies the patch parts recorded at a csn ≤ S (of those, the ones no other covers,
as ClickHouse takes the active ones). Recording happens under the table's commit lock, before each
of our writes, merges, mutations and cleanups (`MergeTreeTable.adopt_directory_parts`) and before a
read of the latest snapshot takes its csn, so every snapshot taken after that sees the UPDATE and
none taken before does: its commit point in our history is the moment we first saw it. Patches
found in a table whose log has no history yet (a table ClickHouse wrote, being adopted) are
recorded at csn 0, like its data parts. A patch part that merges recorded ones (level above 0,
covering them) holds nothing newer than they do: it takes the greatest of their csns. Records of
patch parts that are no longer on disk are dropped.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path

from spark_mergetree.errors import FormatError
from spark_mergetree.fileops import write_file_atomically
from spark_mergetree.format.part_info import PartInfo, uncovered_parts
from spark_mergetree.format.patch_part import PATCH_PART_PREFIX
from spark_mergetree.txn import Coordinator, TableLog

FILE = Path("_mergetree") / "patch_versions.json"
_FORMAT = 1


def recorded(table_dir: Path) -> dict[str, int]:
    """The recorded patch parts of a table directory and their csns ({} before any)."""
    path = table_dir / FILE
    try:
        raw = json.loads(path.read_bytes())
    except FileNotFoundError:
        return {}
    except ValueError as error:
        raise FormatError(f"{path}: not JSON ({error})") from error
    if not isinstance(raw, dict) or raw.get("format") != _FORMAT or not isinstance(raw.get("patches"), dict):
        raise FormatError(f"{path}: not a patch version record of format {_FORMAT}")
    return {str(name): int(csn) for name, csn in raw["patches"].items()}


def record(table_dir: Path, log: TableLog, coordinator: Coordinator, on_disk: Iterable[str]) -> dict[str, int]:
    """Record the patch parts among `on_disk` (a listing of the table's directory) not recorded yet;
    return every record. New patches of an UPDATE get a csn of their own (an empty commit at the
    coordinator, so that every snapshot taken before is older)."""
    patches = {name for name in on_disk if name.startswith(PATCH_PART_PREFIX)}
    known = recorded(table_dir)
    if patches <= known.keys() and known.keys() <= patches:
        return known
    with log.commit_lock():
        known = recorded(table_dir)
        new = sorted(patches - known.keys())
        fresh: int | None = None
        since_start = not log.has_history()
        for name in new:
            info = PartInfo.parse(name)
            merged = [csn for other, csn in known.items() if info.contains(PartInfo.parse(other))]
            if since_start:
                known[name] = 0
            elif info.level > 0 and merged:
                known[name] = max(merged)
            else:
                if fresh is None:
                    tid = coordinator.begin().tid
                    fresh = coordinator.commit(tid, (), [str(table_dir)])
                known[name] = fresh
        kept = {name: csn for name, csn in known.items() if name in patches}
        path = table_dir / FILE
        path.parent.mkdir(exist_ok=True)
        write_file_atomically(path, json.dumps({"format": _FORMAT, "patches": kept}, indent=1,
                                               sort_keys=True).encode())
        return kept


def visible_at(on_disk: Iterable[str], versions: Mapping[str, int], snapshot: int | None) -> set[str]:
    """The patch parts a read at `snapshot` applies (None: the latest, every active one on disk)."""
    patches = [name for name in on_disk if name.startswith(PATCH_PART_PREFIX)]
    if snapshot is not None:
        patches = [name for name in patches if name in versions and versions[name] <= snapshot]
    return uncovered_parts(patches)

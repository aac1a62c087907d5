"""Merges of parts that patch parts of ClickHouse's lightweight UPDATEs change: the patches materialised.

ClickHouse's merge (table setting `apply_patches_on_merge = 1`, its default) applies to the rows it
merges the patches that change its sources, up to the merge's start, and names the merged part
with the highest version it applied as its mutation: `all_1_1_0` and `all_2_2_0` under a patch of
version 3 merge into `all_1_2_1_3`, whose data version makes reads skip the patch (which stays
active, format_spec/part.md). We do the same: each source a patch changes is first written again
with the patches applied (`MergeTreeTable.with_patches_applied`: engine/mutations.py's
`rewrite_part` without a mutation; every stored row, its mask as patched) into a temporary
directory, and the merge reads that part in the source's place, so every path of merge.py
(streaming, Compact, the row-combining engines, projections) merges patched rows. Merges of
unpatched parts are not touched.

ClickHouse's merged part of such a table also stores each row's identity (`_block_number`,
`_block_offset`); ours does not: a part without them reads as its min block and the row's position
(engine/patches.py), for ClickHouse as for us, so an UPDATE after the merge meets the same rows.
With `apply_patches_on_merge = 0` ClickHouse merges without applying the patches, which then meet
the merged rows by the identities it carries: that merge we cannot write, so it is refused before
anything is written (`OPTIMIZE`), and background merges leave such parts alone.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from spark_mergetree.engine import ttl_merge
from spark_mergetree.engine.merge import SPILL_PREFIX, MergeCandidate
from spark_mergetree.errors import UnsupportedError
from spark_mergetree.format.part_reader import PartReader
from spark_mergetree.storage.part_store import PartStore
from spark_mergetree.storage.policy import StoragePolicy

if TYPE_CHECKING:
    from spark_mergetree.engine.table import MergeTreeTable


def applies_on_merge(table: MergeTreeTable) -> bool:
    """The table setting `apply_patches_on_merge` (ClickHouse's default: 1)."""
    return table.metadata.definition.settings.get("apply_patches_on_merge", "1").strip().lower() not in ("0", "false")


def patched_parts(table: MergeTreeTable, parts: Iterable[str]) -> dict[str, tuple[str, ...]]:
    """The parts among `parts` that patch parts change, each with those patch parts."""
    patches = table.active_patches()
    if not patches:
        return {}
    columns = table.metadata.column_types
    return {part: touching for part in parts if (touching := patches.changing(part, columns))}


def unmergeable(table: MergeTreeTable, parts: Iterable[str]) -> set[str]:
    """The parts a merge cannot take: those patches change, where merges do not apply patches."""
    return set() if applies_on_merge(table) else set(patched_parts(table, parts))


def with_data_version(table: MergeTreeTable, candidate: MergeCandidate) -> MergeCandidate:
    """`candidate` named as ClickHouse names the merge: its mutation the highest version of the
    patches it materialises, when above its sources' (refused where merges do not apply patches)."""
    patched = patched_parts(table, candidate.parts)
    if not patched:
        return candidate
    if not applies_on_merge(table):
        part, touching = sorted(patched.items())[0]
        raise UnsupportedError(
            f"{table.part_location(touching[0])}: a patch part of a ClickHouse lightweight UPDATE changes rows of part "
            f"{part}, and the table has apply_patches_on_merge = 0: ClickHouse's merge keeps the patches unapplied "
            "and the rows' identities (_block_number, _block_offset) in the merged part, which this version does not "
            "write; merge in ClickHouse, or apply the patches first (ALTER TABLE … APPLY PATCHES)")
    patches = table.active_patches()
    version = max(patches.applied_version(part, touching) for part, touching in patched.items())
    return replace(candidate, data_version=max(candidate.data_version, version))


@contextmanager
def merge_sources(table: MergeTreeTable, parts: Sequence[str]) -> Iterator[list[PartReader]]:
    """Readers of the parts a merge takes, in order (valid inside the `with` block): a part that
    patches change is read from a temporary copy with them applied, then one whose TTL is due from a
    copy without what the merge expires (engine/ttl_merge.py), any other from the table."""
    with _patched_sources(table, parts) as readers, ttl_merge.expire_sources(table, readers) as kept:
        yield kept


@contextmanager
def _patched_sources(table: MergeTreeTable, parts: Sequence[str]) -> Iterator[list[PartReader]]:
    patched = patched_parts(table, parts)
    if not patched:
        yield [table.reader(part) for part in parts]
        return
    granularity = table.metadata.writer_settings.index_granularity
    with tempfile.TemporaryDirectory(prefix=f"{SPILL_PREFIX}{os.getpid()}_patched_") as directory:
        store = PartStore(StoragePolicy.single(Path(directory)), "")
        readers = []
        for part in parts:
            if part not in patched:
                readers.append(table.reader(part))
                continue
            files = table.with_patches_applied(part)
            store.write_part(part, files.files, files.boundaries)
            readers.append(PartReader(store, part, f"{table.part_location(part)} (lightweight UPDATEs applied)",
                                      granularity))
        yield readers


"""TTL moves: parts whose `TTL expr TO DISK 'd'` / `TO VOLUME 'v'` rule is due go to that volume.

ClickHouse applies a move rule to a part once it is due for every row of it (the rule's greatest
time in the part's `ttl.txt` has passed); of several such rules, the one with the greatest time
wins. Its background mover then moves the whole part to the rule's disk or volume, and a merge
writes its result there directly when the rule is due for the merged rows. The target must exist
in the table's storage policy: ClickHouse refuses a CREATE whose TTL names a disk or volume its
policy lacks (BAD_TTL_EXPRESSION); so do we, when a table is created (engine/metadata.py).

We do the same with the table's storage policy (storage/policy.py): `write_staged` writes a merged
part on the volume its due move rule names; `pending_moves` lists the parts a background move
takes. A move is a transaction like a merge of one part (engine/optimize.py `move_one`): the part's
files, copied byte for byte to the target volume, are published as the part of the next level
(`all_1_1_0` becomes `all_1_1_1`) and the source is removed in the same commit, so readers never
see a part half moved (ClickHouse keeps the name; its part set swaps the copy in the same way).
A table opened from a ClickHouse statement whose policy is not ours may name targets our policy
lacks: its parts are then not moved (logged once). Tables in object storage have no volumes.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING

import numpy as np

from spark_mergetree.engine import ttl_merge
from spark_mergetree.errors import InvalidOptionError
from spark_mergetree.expressions.ttl import TTL_FILE, TTLRule, ttl_infos
from spark_mergetree.format.part import PartFiles
from spark_mergetree.storage.filesystem import byte_view
from spark_mergetree.storage.policy import Volume
from spark_mergetree.storage.transfer import compressed_block_starts

if TYPE_CHECKING:
    from spark_mergetree.engine.metadata import TableMetadata
    from spark_mergetree.engine.table import MergeTreeTable

log = logging.getLogger(__name__)
_reported: set[tuple[str, str]] = set()


def move_rules(meta: TableMetadata) -> list[TTLRule]:
    return [rule for rule in meta.ttl_rules if rule.section == "moves"]


def due_move(meta: TableMetadata, data: bytes | None, now: int) -> TTLRule | None:
    """The move rule due for every row of a part whose `ttl.txt` is `data` (the greatest such
    time wins), or None."""
    infos = ttl_infos(data)
    best: tuple[int, TTLRule] | None = None
    for rule in move_rules(meta):
        high = infos.get(("moves", rule.expression), (0, 0))[1]
        if 0 < high <= now and (best is None or high >= best[0]):
            best = (high, rule)
    return None if best is None else best[1]


def destination(table: MergeTreeTable, data: bytes | None, now: int) -> Volume | None:
    """The volume a part with `ttl.txt` `data` belongs on by its due move rule, or None."""
    if table.parts_written_in_place or not move_rules(table.metadata):
        return None
    rule = due_move(table.metadata, data, now)
    if rule is None:
        return None
    assert rule.target is not None
    try:
        return table.storage_policy.move_target(rule.target)
    except InvalidOptionError as error:
        if (str(table.path), rule.target) not in _reported:
            _reported.add((str(table.path), rule.target))
            log.info("%s: parts are not moved by TTL %s TO %s: %s", table.path, rule.expression, rule.target, error)
        return None


def write_staged(table: MergeTreeTable, name: str, files: PartFiles, now: int) -> None:
    """Write a part (a merge's, a move's) under `name`: on the volume its due move rule names when
    it fits there, else where the policy puts every new part."""
    volume = destination(table, bytes(files.files[TTL_FILE]), now) if TTL_FILE in files.files else None
    if volume is not None and (volume.max_data_part_size is None or files.size <= volume.max_data_part_size):
        table.store.write_to_volume(name, {k: byte_view(v) for k, v in files.files.items()}, files.boundaries, volume)
    else:
        table.store.write_part(name, files.files, files.boundaries)


def pending_moves(table: MergeTreeTable, visible: Iterable[str], now: int) -> list[tuple[str, Volume]]:
    """The parts among `visible` whose due move rule names a volume they are not on, with it."""
    meta = table.metadata
    if table.parts_written_in_place or not move_rules(meta):
        return []
    out = []
    for part in sorted(visible):
        volume = destination(table, ttl_merge.ttl_data(table.reader(part), meta), now)
        if volume is None or table.store.open(part).volume is volume:
            continue
        if volume.max_data_part_size is not None and table.part_bytes(part) > volume.max_data_part_size:
            continue  # it would not fit there (ClickHouse's reservation fails the same way): it stays
        out.append((part, volume))
    return out


def copied(table: MergeTreeTable, part: str) -> PartFiles:
    """A part's files as stored, with the points where a striped volume may cut them."""
    files: dict[str, bytes | memoryview] = {name: table.store.read_file(part, name)
                                            for name in table.store.list_files(part)}
    boundaries: dict[str, np.ndarray] = {}
    for name, data in files.items():
        cuts = table.store.boundaries(part, name)
        if cuts is None and name.endswith(".bin"):
            cuts = compressed_block_starts(data)
        if cuts is not None:
            boundaries[name] = cuts
    return PartFiles(files, boundaries, table.reader(part).rows)

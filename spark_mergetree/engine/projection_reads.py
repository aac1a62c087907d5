"""Reads through normal projections: a filter on a projection's ORDER BY reads its parts instead.

A normal projection (`PROJECTION p (SELECT ... ORDER BY b)`) is a part of its own inside every part
that holds it (`p.proj/`), with the parent's rows sorted by `b` and a sparse primary index over `b`
(engine/projections.py writes it). A read filtering on `b` and needing only columns the projection
holds can take the matching granules of those projection parts instead of the parent parts'
granules its own primary index leaves: the same rows, fewer granules. This module decides that, as
ClickHouse's `optimize_use_projections` does (QueryPlanOptimizations optimizeUseNormalProjections):

* only parts the ordinary plan still reads (after partition pruning, the primary key and skip
  indexes) are considered; a part the ordinary plan skips stays skipped;
* a candidate is a normal projection holding every column the read needs (the selected ones and
  those the filter reads); its cost is the granules its projection parts' indexes leave plus the
  granules of the parts read without it (parts written before it was added, or lacking it);
* the cheapest candidate is used when it costs strictly fewer granules than the ordinary plan
  (ties: the first declared); otherwise nothing changes.

Rows ClickHouse would not return are never returned, so these fall back to the part's own rows:
a part with a lightweight DELETE's mask (`_row_exists`: a projection part knows nothing of it, and
ClickHouse's `lightweight_mutation_projection_mode = 'rebuild'` has been seen to leave deleted
rows in it), a projection part that lacks a needed column (written before the column was added) or
has a mask of its own. The caller disables projections altogether for FINAL and whenever the read
applies patch parts of lightweight UPDATEs, as ClickHouse's canUseProjectionForReadingStep does
(`hasPatchParts`): a patch names rows by their place in the parent part.

The choice is planning only: a projection task (`ReadTask.projection`) reads granule ranges of the
projection part (`projection_reader`) and the read filters its rows exactly, like any task.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING

from spark_mergetree.expressions.ddl import Projection
from spark_mergetree.expressions.key_condition import granule_ranges_of_parts, key_columns_for
from spark_mergetree.expressions.predicate import Expr, columns_of, parse_expression
from spark_mergetree.format.part_reader import GranuleRange, PartReader, merge_ranges

if TYPE_CHECKING:
    from spark_mergetree.engine.select import PartPlan

_readers: weakref.WeakKeyDictionary[PartReader, dict[str, PartReader]] = weakref.WeakKeyDictionary()
_readers_lock = threading.Lock()


def projection_reader(parent: PartReader, name: str) -> PartReader:
    """The (cached, per parent reader) reader of the part's projection `name`."""
    with _readers_lock:
        cached = _readers.get(parent, {}).get(name)
    if cached is None:
        cached = parent.projection_reader(name)
        with _readers_lock:
            _readers.setdefault(parent, {})[name] = cached
    return cached


def candidates(projections: Sequence[Projection], needed: Collection[str], stored: Sequence[str],
               predicate: Expr | None) -> list[Projection]:
    """The normal projections a read of `needed` columns filtered by `predicate` may use: those
    holding every needed column whose ORDER BY reads a column the filter reads (an index over
    columns the filter ignores leaves every granule)."""
    if predicate is None:
        return []
    filtered = columns_of(predicate)
    out = []
    for projection in projections:
        if projection.is_aggregate or not projection.order_by:
            continue
        if not set(needed) <= set(projection.columns(list(stored))):
            continue
        keyed = set().union(*(columns_of(parse_expression(element)) for element in projection.order_by))
        if keyed & filtered:
            out.append(projection)
    return out


def _holds(parent: PartReader, name: str, needed: Collection[str]) -> PartReader | None:
    """The projection part of `parent` a read may take its rows from (None: read the parent's)."""
    if name not in parent.projections or parent.has_row_mask:
        return None
    held = projection_reader(parent, name)
    if held.has_row_mask or not set(needed) <= set(held.types):
        return None
    return held


def use_projections(plans: Sequence[PartPlan], readers: Sequence[PartReader], predicate: Expr,
                    needed: Collection[str], projections: Sequence[Projection],
                    column_types: dict[str, str]) -> str | None:
    """Re-plan the parts of `plans` (the ordinary plan, changed in place) through the cheapest
    usable projection, if any reads fewer granules; returns its name (None: the plan is unchanged)."""
    stored = list(column_types)
    usable = candidates(projections, needed, stored, predicate)
    reading = [i for i, plan in enumerate(plans) if plan.ranges]
    if not usable or not reading:
        return None
    ordinary = sum(plans[i].granules_read for i in reading)
    best: tuple[int, Projection, list[int], list[PartReader], list[list[GranuleRange]]] | None = None
    for projection in usable:
        holders, subparts = [], []
        for i in reading:
            held = _holds(readers[i], projection.name, needed)
            if held is not None:
                holders.append(i)
                subparts.append(held)
        if not holders:
            continue
        key = key_columns_for(list(projection.order_by), column_types)
        key_types = [type_text for _, type_text in key]
        ranges = granule_ranges_of_parts(predicate, key, [part.primary_index(key_types) for part in subparts],
                                         [part.n_granules for part in subparts])
        merged = [merge_ranges(part_ranges) for part_ranges in ranges]
        held_set = set(holders)
        cost = sum(end - begin for part_ranges in merged for begin, end in part_ranges) + \
            sum(plans[i].granules_read for i in reading if i not in held_set)
        if cost < ordinary and (best is None or cost < best[0]):
            best = (cost, projection, holders, subparts, merged)
    if best is None:
        return None
    _, projection, holders, subparts, merged = best
    for i, subpart, part_ranges in zip(holders, subparts, merged, strict=True):
        plan = plans[i]
        plan.own_ranges = plan.ranges
        plan.ranges = part_ranges
        plan.projection = projection.name
        plan.projection_granules = subpart.n_granules
        if not part_ranges:
            plan.pruned_by = f"projection {projection.name}"
    return projection.name

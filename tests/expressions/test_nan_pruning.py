"""Pruning with NaN: ClickHouse's minmax indexes leave NaN out of a granule's [min, max], so over
such bounds a comparison may always be false (and `!=` true) somewhere in the granule, and NOT is not
pushed into it; the sorted primary index never hides NaN (it sorts last). Each case is checked
against the rows themselves: a granule holding a matching row is never skipped."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from spark_mergetree.expressions.key_condition import granule_ranges
from spark_mergetree.expressions.predicate import bind, evaluate, parse_predicate
from spark_mergetree.expressions.skip_index import SkipIndex, minmax_may_match

NAN = float("nan")
# Granules of four rows: numbers with a NaN, only NaN, numbers only, a NaN beside infinity.
GRANULES = [[1.0, 2.0, NAN, 3.0], [NAN, NAN, NAN, NAN], [4.0, 5.0, 5.0, 6.0], [NAN, float("inf"), 7.0, 8.0]]
PREDICATES = ["NOT (x <= 5)", "NOT (x < 10)", "x != 2", "NOT (x = 5)", "NOT (x IN (1, 2, 3))", "isNaN(x)",
              "x > 5 OR isNaN(x)", "NOT (x >= 1 AND x <= 3)", "x < 3", "x = 5", "NOT isNaN(x)"]


def _minmax(values: list[float]) -> tuple[float, float]:
    numbers = [v for v in values if not np.isnan(v)]
    return (min(numbers), max(numbers)) if numbers else (NAN, NAN)  # as ClickHouse's minmax index keeps it


@pytest.mark.parametrize("text", PREDICATES)
def test_minmax_index_never_skips_a_granule_whose_nan_matches(text: str) -> None:
    predicate = bind(parse_predicate(text), {"x": "Float64"})
    index = SkipIndex("i", "x", "minmax", (), 1, ("x",))
    bounds = [_minmax(g) for g in GRANULES]
    lo = pa.array([b[0] for b in bounds], pa.float64())
    hi = pa.array([b[1] for b in bounds], pa.float64())
    kept = minmax_may_match(index, ["Float64"], [(lo, hi)], predicate, len(GRANULES))
    for position, granule in enumerate(GRANULES):
        matches = evaluate(predicate, pa.table({"x": pa.array(granule, pa.float64())})).to_pylist()
        if any(matches):
            assert kept[position], (text, granule)


def test_minmax_index_still_prunes_where_no_nan_can_match() -> None:
    predicate = bind(parse_predicate("x < 1.5"), {"x": "Float64"})
    index = SkipIndex("i", "x", "minmax", (), 1, ("x",))
    lo = pa.array([_minmax(g)[0] for g in GRANULES], pa.float64())
    hi = pa.array([_minmax(g)[1] for g in GRANULES], pa.float64())
    assert minmax_may_match(index, ["Float64"], [(lo, hi)], predicate, len(GRANULES)).tolist() == [
        True, True, False, False]  # the all-NaN granule has unknown bounds


def test_primary_key_prunes_isnan_to_the_granules_after_the_numbers() -> None:
    # A sorted Float64 key: NaN last. Marks at rows 0, 4, 8, 12 and the last row.
    rows = sorted([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 11.0, NAN, NAN, NAN, NAN, NAN],
                  key=lambda v: (np.isnan(v), v))
    index = [pa.array([rows[0], rows[4], rows[8], rows[12], rows[15]], pa.float64())]
    ranges = granule_ranges(bind(parse_predicate("isNaN(x)"), {"x": "Float64"}), [("x", "Float64")], index, 4)
    assert ranges == [(2, 4)]  # granule 2 ends at a NaN mark: unknown; granule 3 is all NaN
    kept = granule_ranges(bind(parse_predicate("x > 5 OR isNaN(x)"), {"x": "Float64"}), [("x", "Float64")], index, 4)
    assert kept == [(1, 4)]

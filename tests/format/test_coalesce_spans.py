"""Nearby byte ranges of a file are fetched by one read: every range is inside one merged range,
merged ranges never overlap, and two ranges share one only when the hole between them is small."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from spark_mergetree.format.part_reader import coalesce_spans

SPANS = st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 3_000)).map(lambda p: (p[0], p[0] + p[1])),
                 max_size=12)


@settings(max_examples=300, deadline=None)
@given(spans=SPANS, hole=st.integers(0, 2_000), most=st.integers(1, 8_000))
def test_merged_ranges_cover_every_range_and_respect_the_limits(spans, hole, most) -> None:
    merged = coalesce_spans(spans, hole, most)
    spans = [(start, stop) for start, stop in spans if stop > start]  # an empty range needs no bytes
    assert all(any(a <= start and stop <= z for a, z in merged) for start, stop in spans)
    assert all(z1 <= a2 for (_, z1), (a2, _) in zip(merged, merged[1:]))  # sorted, no overlap
    for a, z in merged:
        inside = sorted(s for s in spans if a <= s[0] and s[1] <= z)
        assert inside and inside[0][0] == a and max(s[1] for s in inside) == z  # no byte beyond what is needed
        reach, overlapped = inside[0][1], False
        for start, stop in inside[1:]:  # each next range starts within `hole` of what came before
            assert start - reach <= hole
            overlapped |= start < reach
            reach = max(reach, stop)
        assert z - a <= most or len(inside) == 1 or overlapped


def test_far_ranges_stay_apart() -> None:
    assert coalesce_spans([(0, 10), (5000, 5010)], hole=100, most=1 << 20) == [(0, 10), (5000, 5010)]
    assert coalesce_spans([(5000, 5010), (0, 10), (20, 30)], hole=100, most=1 << 20) == [(0, 30), (5000, 5010)]

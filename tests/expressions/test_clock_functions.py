"""now(), today() and yesterday() read the clock each time a text is parsed: a long-lived process
(a Spark worker, a merge daemon) must never insert the time of an earlier parse of the same text."""

from __future__ import annotations

import datetime as dt
import time

import pyarrow as pa

from spark_mergetree import MergeTreeTable
from spark_mergetree.expressions.predicate import parse_expression


def test_now_is_read_at_each_parse_while_other_texts_are_parsed_once() -> None:
    first = parse_expression("now()")
    time.sleep(1.1)
    assert parse_expression("NOW()") != first and parse_expression("now()") != first
    assert parse_expression("x > 1") is parse_expression("x > 1")


def test_a_default_now_is_each_inserts_time(tmp_path) -> None:
    table = MergeTreeTable.create(tmp_path / "t", [("id", "UInt64"), ("at", "DateTime DEFAULT now()")], order_by="id")
    table.insert(pa.table({"id": pa.array([1], pa.uint64())}))
    time.sleep(1.1)
    before = dt.datetime.now(dt.timezone.utc).replace(microsecond=0)
    table.insert(pa.table({"id": pa.array([2], pa.uint64())}))
    stamps = dict(zip(*(table.to_arrow().sort_by("id")[c].to_pylist() for c in ("id", "at")), strict=True))
    assert stamps[1] < before <= stamps[2]

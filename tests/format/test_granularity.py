"""Rows per granule: our computation against the spec examples and the marks of chdb-written parts."""

from __future__ import annotations

import numpy as np
import pytest

from spark_mergetree.errors import InvalidOptionError
from spark_mergetree.format.granularity import (
    block_granules,
    granule_offsets,
    part_granules,
    rows_per_granule,
)
from spark_mergetree.format.marks import parse_columns_substreams, read_marks_file
from tests.format.chdb_util import active_part_dirs, make_chdb_table, part_dirs, spec_block

# How chdb builds the data of each example line of format_spec/granularity.md, in order.
CHDB_DATA = [
    ("(id UInt64)", "SELECT number FROM numbers(20000)"),
    ("(id UInt64, s String)", "SELECT number, repeat('x', 1000) FROM numbers(20000)"),
    ("(id UInt64, s String)", "SELECT number, repeat('x', 1000) FROM numbers(3000)"),
    ("(id UInt64, s String)", "SELECT number, repeat('x', number % 100) FROM numbers(20000)"),
    ("(id UInt64)", "SELECT number FROM numbers(2500)"),
    ("(id UInt64)", "SELECT number FROM numbers(2400)"),
    ("(id UInt64)", "SELECT number FROM numbers(2600)"),
    ("(id UInt64)", "SELECT number FROM numbers(500)"),
    ("(id UInt64, n Nullable(UInt64))", "SELECT number, if(number % 2 = 0, NULL, number) FROM numbers(20000)"),
    ("(id UInt64, a Array(UInt16))", "SELECT number, range(number % 4) FROM numbers(20000)"),
]


def _examples():
    examples = []
    for line in spec_block("granularity.md", "granules").strip().splitlines():
        settings, expected = line.split(" -> ")
        rows, block_bytes, granularity, granularity_bytes, layout = settings.split()
        sizes: list[int] = []
        for item in expected.split():
            value, _, repeat = item.partition("x")
            sizes += [int(value)] * int(repeat or 1)
        examples.append((int(rows), int(block_bytes), int(granularity), int(granularity_bytes), layout, sizes))
    assert len(examples) == len(CHDB_DATA)
    return examples


EXAMPLES = _examples()


@pytest.mark.parametrize("example", EXAMPLES)
def test_spec_examples_computed(example):
    rows, block_bytes, granularity, granularity_bytes, layout, sizes = example
    got = block_granules(rows, block_bytes, granularity, granularity_bytes, compact=layout == "compact")
    assert got.tolist() == sizes
    assert got.sum() == rows and got.dtype == np.int64


def _marks_rows(part):
    marks_file = next(path for path in part.iterdir() if "mrk" in path.suffix)
    if marks_file.name.startswith("data."):
        columns = parse_columns_substreams((part / "columns_substreams.txt").read_text())
        marks = read_marks_file(marks_file, sum(len(streams) for _, streams in columns))
        return marks.rows[:-1].tolist()
    marks = read_marks_file(marks_file)
    return marks[:-1, 2].tolist() if marks.shape[1] == 3 else None


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    root = tmp_path_factory.mktemp("granularity")
    parts = []
    for index, ((_rows, _, granularity, granularity_bytes, layout, _), (columns, select)) in enumerate(zip(EXAMPLES, CHDB_DATA)):
        wide = "min_bytes_for_wide_part = 0, " if layout == "wide" else ""
        _, table_dir = make_chdb_table(
            root,
            f"CREATE TABLE t{index} {columns} ENGINE = MergeTree ORDER BY id SETTINGS {wide}"
            f"index_granularity = {granularity}, index_granularity_bytes = {granularity_bytes}",
            [f"INSERT INTO t{index} {select}"],
        )
        (part,) = part_dirs(table_dir)
        parts.append(part)
    return parts


@pytest.mark.parametrize("index", range(len(EXAMPLES)))
def test_spec_examples_match_clickhouse_marks(written, index):
    rows, _, granularity, granularity_bytes, layout, sizes = EXAMPLES[index]
    part = written[index]
    assert (next(part.glob("data.*")) if layout == "compact" else part / "id.bin").exists()
    marks_rows = _marks_rows(part)
    if granularity_bytes == 0:
        # Non-adaptive marks carry no rows: the count of marks is the check.
        marks = read_marks_file(part / "id.cmrk")
        assert marks.shape[0] == len(sizes) and marks_rows is None
    else:
        assert marks_rows == sizes


@pytest.mark.parametrize(
    ("inserts", "blocks", "expected"),
    [
        # The open 1-row granule of the first block is completed up to the second block's size.
        (
            ["SELECT number, repeat('a', 10) FROM numbers(10001)", "SELECT number + 20000, repeat('b', 100) FROM numbers(10000)"],
            [(10001, 10001 * 26), (10000, 10000 * 116)],
            [2500] * 4 + [526] * 19 + [7],
        ),
        # The open 3-row granule already exceeds the second block's size (1 row): it is closed as is.
        (
            ["SELECT number, repeat('a', 10) FROM numbers(10003)", "SELECT number + 20000, repeat('b', 100000) FROM numbers(10)"],
            [(10003, 10003 * 26), (10, 10 * 100016)],
            [2500] * 4 + [3] + [1] * 10,
        ),
    ],
)
def test_merged_wide_granules_continue_across_blocks(tmp_path, inserts, blocks, expected):
    session, _ = make_chdb_table(
        tmp_path,
        "CREATE TABLE m (id UInt64, s String) ENGINE = MergeTree ORDER BY id "
        "SETTINGS min_bytes_for_wide_part = 0, index_granularity_bytes = 60000",
        [f"INSERT INTO m {select}" for select in inserts],
    )
    session.query("OPTIMIZE TABLE m FINAL")
    (merged,) = active_part_dirs(session, "m")
    assert merged.name == "all_1_2_1"
    # Parts with disjoint key ranges are merged as one block per source part.
    assert part_granules(blocks, 8192, 60000).tolist() == expected
    assert _marks_rows(merged) == expected


def test_compact_merge_cuts_each_block_alone(tmp_path):
    session, _ = make_chdb_table(
        tmp_path,
        "CREATE TABLE c (id UInt64) ENGINE = MergeTree ORDER BY id SETTINGS index_granularity = 1000",
        [f"INSERT INTO c SELECT number * 3 + {k} FROM numbers(2500)" for k in range(3)],
    )
    session.query("OPTIMIZE TABLE c FINAL")
    (merged,) = active_part_dirs(session, "c")
    assert merged.name == "all_1_3_1" and (merged / "data.bin").exists()
    assert _marks_rows(merged) == part_granules([(7500, 60000)], 1000, compact=True).tolist() == [1000] * 7 + [500]


def test_edge_cases():
    assert rows_per_granule(10, 10**12, 8192, 1) == 1
    assert rows_per_granule(10, 0) == 8192
    assert block_granules(0).tolist() == []
    assert part_granules([]).tolist() == []
    np.testing.assert_array_equal(granule_offsets(np.array([3, 4, 5])), [0, 3, 7, 12])
    with pytest.raises(InvalidOptionError, match="index_granularity"):
        rows_per_granule(10, 10, index_granularity=0)
    with pytest.raises(InvalidOptionError, match="index_granularity_bytes"):
        rows_per_granule(10, 10, index_granularity_bytes=-1)
    with pytest.raises(InvalidOptionError, match="block"):
        part_granules([(-1, 0)])

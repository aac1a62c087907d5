"""The streaming part writer: a part written block by block (and spilled to files) has the bytes of
the same rows written at once, for every kind of column."""

from __future__ import annotations

import decimal

import numpy as np
import pyarrow as pa
import pytest

from spark_mergetree.errors import SchemaMismatchError
from spark_mergetree.format.part_writer import (
    PartitionValue,
    PartStreamWriter,
    WriterSettings,
    write_wide_part,
)
from spark_mergetree.format.skip_index_writer import IndexSpec

COLUMNS = [
    ("k", "UInt64"),
    ("s", "String"),
    ("lc", "LowCardinality(String)"),
    ("lcn", "LowCardinality(Nullable(String))"),
    ("n", "Nullable(Int32)"),
    ("a", "Array(LowCardinality(String))"),
    ("m", "Map(String, UInt16)"),
    ("d", "Decimal(18, 4)"),
    ("nest.x", "Array(UInt8)"),
    ("nest.y", "Array(String)"),
    ("day", "Date"),
]


def _rows(n: int) -> pa.Table:
    rng = np.random.default_rng(7)
    k = np.sort(rng.integers(0, 1 << 40, n)).astype(np.uint64)
    words = [f"w{i}" for i in rng.integers(0, 20_000, n)]  # > 8192 distinct: shared dictionaries flush
    lengths = rng.integers(0, 4, n)
    nested = [[int(v) for v in rng.integers(0, 200, size)] for size in lengths]
    return pa.table({
        "k": k,
        "s": [("x" * int(i % 37)) + str(i) for i in range(n)],
        "lc": words,
        "lcn": [None if i % 11 == 0 else w for i, w in enumerate(words)],
        "n": pa.array([None if i % 3 == 0 else i - n // 2 for i in range(n)], pa.int32()),
        "a": [[w] * int(i % 3) for i, w in enumerate(words)],
        "m": pa.array([[(w, i % 60000)] * int(i % 2) for i, w in enumerate(words)], pa.map_(pa.string(), pa.uint16())),
        "d": pa.array([decimal.Decimal(i - n // 2).scaleb(-3) for i in range(n)], pa.decimal128(18, 4)),
        "nest.x": pa.array(nested, pa.list_(pa.uint8())),
        "nest.y": pa.array([[str(v) for v in row] for row in nested], pa.list_(pa.string())),
        "day": pa.array((rng.integers(19000, 19030, n)).astype("int32"), pa.int32()).cast(pa.date32()),
    })


@pytest.mark.parametrize("spill", [False, True])
def test_blocks_write_the_bytes_of_one_block(tmp_path, spill):
    n = 30_000
    rows = _rows(n)
    settings = WriterSettings(index_granularity=512, min_compress_block_size=3000, max_compress_block_size=9000)
    granules = np.full(n // 512, 512, np.int64)
    granules = np.append(granules, n - int(granules.sum()))
    partition = PartitionValue([pa.array([7], pa.uint8())], ["UInt8"], ["day"])
    whole = write_wide_part(rows, COLUMNS, [("UInt64", rows["k"])], partition, settings, granule_rows=granules)

    writer = PartStreamWriter(COLUMNS, granules, ["UInt64"], partition, settings,
                              spill_dir=str(tmp_path) if spill else None)
    starts = np.concatenate([[0], np.cumsum(granules)])
    rng = np.random.default_rng(3)
    # Each column in its own cut into blocks (some of whole granules, some not), columns interleaved.
    cuts = {name: np.unique(np.concatenate([[0], rng.choice(starts, 6), rng.integers(0, n, 6), [n]]))
            for name, _ in COLUMNS}
    cuts["k-primary"] = np.unique(np.concatenate([[0], rng.choice(starts, 3), rng.integers(0, n, 3), [n]]))
    for block in range(max(len(c) for c in cuts.values())):
        for name, _ in COLUMNS:
            c = cuts[name]
            if block < len(c) - 1:
                writer.write(name, rows[name].slice(int(c[block]), int(c[block + 1] - c[block])))
        c = cuts["k-primary"]
        if block < len(c) - 1:
            writer.primary_key([rows["k"].slice(int(c[block]), int(c[block + 1] - c[block]))])
    streamed = writer.finish()

    assert sorted(streamed.files) == sorted(whole.files)
    for name, data in whole.files.items():
        assert bytes(streamed.files[name]) == bytes(data), name
    for name, cut in whole.boundaries.items():
        assert np.array_equal(streamed.boundaries[name], cut), name


def test_rows_beyond_or_short_of_the_part_are_refused():
    writer = PartStreamWriter([("k", "UInt64")], np.array([8, 8]), ["UInt64"], None, WriterSettings())
    writer.write("k", pa.array(np.arange(5, dtype=np.uint64)))
    with pytest.raises(SchemaMismatchError, match="got 17 rows, the part has 16"):
        writer.write("k", pa.array(np.arange(12, dtype=np.uint64)))
    writer.write("k", pa.array(np.arange(8, dtype=np.uint64)))
    with pytest.raises(SchemaMismatchError, match="fewer rows"):
        writer.finish()


INDEXES = (
    IndexSpec("k_minmax", "minmax", ("k",), (), 1),
    IndexSpec("pair_minmax", "minmax", ("n", "d"), (), 3),
    IndexSpec("lc_set", "set", ("lc",), (100.0,), 2),
    IndexSpec("pair_set", "set", ("k", "lcn"), (50.0,), 1),
    IndexSpec("s_bloom", "bloom_filter", ("s",), (0.025,), 1),
    IndexSpec("a_bloom", "bloom_filter", ("a",), (0.01,), 4),
    IndexSpec("pair_bloom", "bloom_filter", ("s", "n"), (0.025,), 2),
    IndexSpec("s_ngram", "ngrambf_v1", ("s",), (3.0, 256.0, 2.0, 0.0), 1),
    IndexSpec("pair_tokens", "tokenbf_v1", ("s", "lc"), (256.0, 3.0, 0.0), 3),
)


def test_skip_indexes_are_built_as_granules_come(tmp_path):
    """Skip indexes of a streamed part have the bytes of the same part written at once; with the
    columns given side by side, block by block, no index holds more rows than one index granule's
    and the block that completes it (set and bloom_filter over several columns included)."""
    n = 20_000
    rows = _rows(n)
    settings = WriterSettings(index_granularity=512, skip_indexes=INDEXES)
    granules = np.full(n // 512, 512, np.int64)
    granules = np.append(granules, n - int(granules.sum()))
    whole = write_wide_part(rows, COLUMNS, [("UInt64", rows["k"])], None, settings, granule_rows=granules)
    assert {name for name in whole.files if name.startswith("skp_idx_")} == {
        f"skp_idx_{spec.name}.{ext}" for spec in INDEXES for ext in ("idx2" if spec.type == "minmax" else "idx", "mrk2")}

    writer = PartStreamWriter(COLUMNS, granules, ["UInt64"], None, settings, spill_dir=str(tmp_path))
    held_most = {spec.name: 0 for spec in INDEXES}
    for start in range(0, n, 700):  # blocks that cut granules: every column in turn, block by block
        for name, _ in COLUMNS:
            writer.write(name, rows[name].slice(start, 700))
            for builder in writer._indexes:
                held = sum(len(chunk) for chunk in builder._held.get(name, ()))
                held_most[builder.spec.name] = max(held_most[builder.spec.name], held)
        writer.primary_key([rows["k"].slice(start, 700)])
    streamed = writer.finish()
    for name, data in whole.files.items():
        assert bytes(streamed.files[name]) == bytes(data), name
    for spec in INDEXES:
        bound = 512 * spec.granularity + 700  # one index granule's rows and the block that completes it
        assert held_most[spec.name] <= bound, (spec.name, held_most[spec.name])

    # Columns one after another (a vertical merge's order): the same bytes.
    writer = PartStreamWriter(COLUMNS, granules, ["UInt64"], None, settings, spill_dir=str(tmp_path))
    for name, _ in COLUMNS:
        for start in range(0, n, 700):
            writer.write(name, rows[name].slice(start, 700))
    writer.primary_key([rows["k"]])
    by_column = writer.finish()
    for name, data in whole.files.items():
        assert bytes(by_column.files[name]) == bytes(data), name

"""Merges write column by column (ClickHouse's vertical merge): the merged part is byte for byte the
part the row-wise writer makes from all rows sorted at once."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa

from spark_mergetree import MergeTreeTable
from spark_mergetree.engine import merge as merging
from spark_mergetree.format.part_writer import (
    MERGE_BLOCK_ROWS,
    PartitionValue,
    in_memory_width,
    in_memory_width_of_type,
    plan_granules_of,
    write_wide_part,
)
from spark_mergetree.format.types import parse_type, to_arrow

COLUMNS = [("d", "Date"), ("id", "UInt64"), ("name", "String"), ("score", "Nullable(Float64)"),
           ("tags", "Array(String)"), ("kind", "LowCardinality(String)"), ("flag", "UInt8")]


def _batch(rng: np.random.Generator, n: int) -> pa.Table:
    ids = rng.integers(0, 1_000_000, n).astype(np.uint64)
    return pa.table({
        "d": pa.array((19_700 + rng.integers(0, 90, n)).astype(np.int32)).cast(pa.date32()),
        "id": ids,
        "name": pa.array([f"name-{i}" * (1 + i % 5) for i in ids.tolist()]),
        "score": pa.array([None if i % 7 == 0 else float(i) / 3 for i in ids.tolist()], pa.float64()),
        "tags": pa.array([[f"t{i % 3}"] * (i % 4) for i in ids.tolist()], pa.list_(pa.string())),
        "kind": pa.array([f"k{i % 5}" for i in ids.tolist()]),
        "flag": pa.array((ids % 2).astype(np.uint8)),
    })


def _row_wise(table: MergeTreeTable, parts: list[str]) -> dict[str, bytes]:
    """The part the whole-table writer makes from the same rows (the merge before it went vertical)."""
    meta = table.metadata
    readers = [table.reader(p) for p in parts]
    rows = meta.sort(pa.concat_tables([r.read([n for n, _ in meta.columns], None, meta.column_types)
                                       for r in readers]).combine_chunks())
    key = meta.partition_key
    values = readers[0].partition_values(key.result_types)
    partition = PartitionValue([pa.array([v], type=to_arrow(parse_type(t))) for v, t in zip(values, key.result_types)],
                               key.result_types, key.columns)
    # Sized as a merge sizes its rows: a LowCardinality column at its estimate of 4 bytes a row, unread.
    total = sum(in_memory_width_of_type(parse_type(t), rows.schema.field(n).type, rows.num_rows)
                or in_memory_width(parse_type(t), rows.column(n)) for n, t in meta.columns)
    granules = plan_granules_of(rows.num_rows, total, meta.writer_settings, block_rows=MERGE_BLOCK_ROWS)
    files = write_wide_part(rows, meta.columns, meta.primary_key_values(rows), partition, meta.writer_settings,
                            granules)
    return {name: bytes(data) for name, data in files.files.items()}


def test_vertical_merge_writes_the_row_wise_part_byte_for_byte(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    table = MergeTreeTable.create(tmp_path / "t", COLUMNS, order_by="(toStartOfMonth(d), id)",
                                  partition_by="toYYYYMM(d)",
                                  settings={"auto_merge": False, "index_granularity": 256,
                                            "index_granularity_bytes": 4096, "min_bytes_for_wide_part": 0})
    for n in (3000, 5000, 700):
        table.insert(_batch(rng, n))
    partition = sorted({p.partition_id for p in table.parts()})[0]
    parts = [p.name for p in table.parts() if p.partition_id == partition]
    expected = _row_wise(table, parts)
    merged = merging.merge_parts([table.reader(p) for p in parts], table.metadata)
    assert {name: bytes(data) for name, data in merged.files.items()} == expected


def test_optimize_final_keeps_every_row_and_value(tmp_path: Path) -> None:
    # (tests/format/test_part_interop.py attaches merged parts to ClickHouse and compares its reads.)
    rng = np.random.default_rng(9)
    table = MergeTreeTable.create(tmp_path / "t", COLUMNS, order_by="id", partition_by="toYYYYMM(d)",
                                  settings={"auto_merge": False, "index_granularity": 128})
    batches = [_batch(rng, n) for n in (2000, 3000, 1500)]
    for batch in batches:
        table.insert(batch)
    table.optimize(final=True)
    assert len(table.parts()) == len({p.partition_id for p in table.parts()}) == 4  # Dec 2023 to Mar 2024
    assert table.check().ok
    order = [("id", "ascending"), ("name", "ascending"), ("d", "ascending")]
    assert table.to_arrow().sort_by(order).equals(pa.concat_tables(batches).sort_by(order).cast(table.schema))

"""Writing a part again in its source's granules, kind and partition: what a mutation and a TTL
merge write in place of a part (a lower room both import, so neither imports the other)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from spark_mergetree.expressions.ddl import key_column_names
from spark_mergetree.format.compact_writer import write_part_by_column
from spark_mergetree.format.part import PartFiles
from spark_mergetree.format.part_reader import PartReader
from spark_mergetree.format.part_writer import PartitionValue
from spark_mergetree.format.types import parse_type, to_arrow

if TYPE_CHECKING:
    from spark_mergetree.engine.metadata import TableMetadata


def rewrite_in_granules(reader: PartReader, meta: TableMetadata, rows: int, columns: list[tuple[str, str]],
                        column_of: Callable[[str], pa.Array | pa.ChunkedArray]) -> PartFiles:
    """A part written again from `column_of` (`rows` rows; `columns` as name, type) in its source's
    granules, kind and partition: what a mutation and a TTL merge write in place of a part. It keeps
    the source's kind, as ClickHouse's mutations keep it (whatever its size now)."""
    names = [n for n, _ in meta.columns]
    keys = key_column_names(names, meta.definition.order_by, meta.definition.partition_by, meta.definition.primary_key)
    key_table = pa.table({name: column_of(name) for name in names if name in keys})
    partition = None
    key = meta.partition_key
    if key.is_partitioned:
        values = reader.partition_values(key.result_types)
        partition = PartitionValue([pa.array([v], type=to_arrow(parse_type(t))) for v, t in zip(values, key.result_types)],
                                   key.result_types, key.columns)
    return write_part_by_column(reader.is_compact, rows, columns, column_of, meta.primary_key_values(key_table),
                                partition, meta.writer_settings, np.asarray(reader.granule_rows, dtype=np.int64))

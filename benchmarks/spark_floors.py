"""The floors of a Python data source in this PySpark, for benchmarks/spark.py: format("mergetree_floor").

Reads yield ready Arrow batches of a Parquet copy (loaded into each Python worker once and cached
in this module, so only the yielding is measured), or rows made in memory with path `generate` —
options `path`, `columns`, `start`, `stop` (the rows) and `partitions`; a write only counts the rows it is handed. Spark's workers import this
module by name (benchmarks/ is on their PYTHONPATH), so the cache lives as long as a worker.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    InputPartition,
    WriterCommitMessage,
)

_TYPES = {"id": "id long", "ts": "ts long", "value": "value double", "name": "name string"}
_READY: dict[tuple[str, str], pa.Table] = {}


def ready_table(path: str, columns: str) -> pa.Table:
    """The Parquet copy's columns, loaded once per worker process (then only sliced and yielded)."""
    key = (path, columns)
    if key not in _READY:
        import pyarrow.parquet as pq

        table = pq.read_table(path, columns=columns.split(",")).combine_chunks()
        # Spark's schema exactly: nullable fields, no metadata.
        _READY[key] = table.cast(pa.schema([field.with_nullable(True) for field in table.schema]))
    return _READY[key]


class Share(InputPartition):
    def __init__(self, start: int, stop: int) -> None:
        super().__init__((start, stop))
        self.start, self.stop = start, stop


class FloorReader(DataSourceReader):
    def __init__(self, options: dict[str, str]) -> None:
        self.path, self.columns = options["path"], options["columns"]
        self.start, self.stop = int(options["start"]), int(options["stop"])
        self.count = int(options.get("partitions", "2"))

    def partitions(self) -> list[InputPartition]:
        step = max(1, -(-(self.stop - self.start) // self.count))
        return [Share(begin, min(self.stop, begin + step)) for begin in range(self.start, self.stop, step)]

    def read(self, partition: Any) -> Iterator[pa.RecordBatch]:
        if self.path == "generate":
            yield generated_batch(self.columns, partition.start, partition.stop)
            return
        table = ready_table(self.path, self.columns).slice(partition.start, partition.stop - partition.start)
        yield from table.to_batches(max_chunksize=1 << 16)


def generated_batch(columns: str, start: int, stop: int) -> pa.RecordBatch:
    """Rows start..stop-1 made in memory (path "generate"): a first query's floor, with no file to load."""
    ids = pa.array(np.arange(start, stop, dtype=np.int64))
    made = {"id": ids, "ts": ids, "value": ids.cast(pa.float64()), "name": ids.cast(pa.string())}
    return pa.record_batch([made[column] for column in columns.split(",")], names=columns.split(","))


class CountMessage(WriterCommitMessage):
    def __init__(self, rows: int) -> None:
        self.rows = rows


class CountWriter(DataSourceArrowWriter):
    def write(self, iterator: Iterator[pa.RecordBatch]) -> CountMessage:
        return CountMessage(sum(batch.num_rows for batch in iterator))

    def commit(self, messages: list[Any]) -> None:
        pass


class FloorSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "mergetree_floor"

    def schema(self) -> str:
        return ", ".join(_TYPES[column] for column in self.options.get("columns", "id").split(","))

    def reader(self, schema: Any) -> FloorReader:
        return FloorReader(self.options)

    def writer(self, schema: Any, overwrite: bool) -> CountWriter:
        return CountWriter()

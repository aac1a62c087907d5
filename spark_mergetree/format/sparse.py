"""Sparse columns: the `.sparse.idx` stream of offsets to the non-default rows (ClickHouse's
`SerializationSparse`). Read only: we write every column in full.

Each group is a varuint count of default rows before the next non-default value; a group with bit
62 set ends the granule with that many trailing defaults. The values stream then holds only the
non-default values; `serialization` reads them and spreads them over the rows.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from spark_mergetree.errors import CorruptPartError, UnsupportedError
from spark_mergetree.format.compiled import lazy_njit
from spark_mergetree.format.types import (
    DataType,
    DateTime,
    DateTime64,
    Decimal,
    FixedString,
    Primitive,
    Time,
    Time64,
)
from spark_mergetree.format.values import Cursor, fixed_width, is_string

__all__ = ["sparse_capable", "default_cursors", "read_sparse_positions", "spread_sparse"]


def sparse_capable(dt: DataType) -> bool:
    """Whether ClickHouse can store `dt` sparse here: plain fixed-width and String values."""
    return isinstance(dt, (Primitive, FixedString, DateTime, DateTime64, Time, Time64, Decimal))


def default_cursors(dt: DataType, base: str, string_sizes: bool) -> dict[str, Cursor]:
    """Streams holding one default value of `dt`, to deserialize the value sparse rows leave out."""
    if is_string(dt):
        if string_sizes:
            return {base + ".size": Cursor(base + ".size", bytes(8)), base: Cursor(base, b"")}
        return {base: Cursor(base, b"\0")}
    return {base: Cursor(base, bytes(fixed_width(dt)))}


@lazy_njit
def _scan_sparse(buf: np.ndarray, start: int, n_rows: int) -> tuple[np.ndarray, int]:  # pragma: no cover - compiled
    """Row numbers of the non-default values among the next n_rows, and the end position (-1: bad)."""
    positions = np.empty(n_rows, np.int64)
    count = 0
    row = 0
    pos = start
    size = buf.shape[0]
    end_flag = np.uint64(1) << np.uint64(62)
    while row < n_rows:
        group_start = pos
        value = np.uint64(0)
        shift = 0
        while True:
            if pos >= size or shift > 63:
                return positions[:0], -1
            b = buf[pos]
            pos += 1
            value |= np.uint64(b & 0x7F) << np.uint64(shift)
            shift += 7
            if b < 0x80:
                break
        if value & end_flag:
            row += np.int64(value & ~end_flag)
            continue
        row += np.int64(value)
        if row >= n_rows:
            # The next value lies past the requested rows: leave it for a later read.
            pos = group_start
            break
        positions[count] = row
        count += 1
        row += 1
    return positions[:count], pos


def read_sparse_positions(dt: DataType, base: str, n: int, cursors: dict[str, Cursor]) -> np.ndarray:
    """Row numbers (among the next `n`) of the non-default values; advances the `.sparse.idx` cursor."""
    if not sparse_capable(dt):
        raise UnsupportedError(f"stream {base!r}: sparse serialization of {dt.to_clickhouse()} is not supported")
    index_cursor = cursors[base + ".sparse.idx"]
    positions, end = _scan_sparse(index_cursor.buf, index_cursor.pos, n)
    if end < 0:
        raise CorruptPartError(
            f"stream {index_cursor.name!r}: sparse offsets at byte offset {index_cursor.pos} are truncated")
    index_cursor.pos = int(end)
    return positions


def spread_sparse(default: pa.Array, values: pa.Array, positions: np.ndarray, n: int) -> pa.Array:
    """`n` rows: the k-th non-default row (at positions[k]) takes values[k], every other row `default[0]`."""
    selector = np.zeros(n, np.int64)
    selector[positions] = np.arange(1, len(positions) + 1)
    return pa.concat_arrays([default, values]).take(pa.array(selector))

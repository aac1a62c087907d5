"""AggregateFunction columns: states of aggregate functions, kept as opaque bytes (one per row).

ClickHouse writes the states of a column back to back with no length in between: where one ends
depends on the function and its argument types. The type (`AggregateFunction.state_steps`) gives
the layout of the states whose length can be read from their bytes, as a short program of steps
(fixed bytes, a varuint, a flag byte followed by a value when set, a varuint count of fixed-size
items); this module finds each row's state with a compiled scanner and gives a function's empty
state (the column's default). format_spec/types.md lists the layouts.
"""

from __future__ import annotations

import numpy as np

from spark_mergetree.errors import CorruptPartError, MergeTreeError
from spark_mergetree.format.compiled import lazy_njit
from spark_mergetree.format.types import STATE_FIXED, AggregateFunction

__all__ = ["state_program", "state_lengths", "empty_state"]

def state_program(dt: AggregateFunction) -> np.ndarray:
    """The layout of a state of `dt` as (n, 2) int64 steps (see `AggregateFunction.state_steps`)."""
    return np.array(dt.state_steps, np.int64)


def empty_state(dt: AggregateFunction) -> bytes:
    """The state of no rows: what a column added later holds in older parts."""
    return b"".join(bytes(int(size)) if code == STATE_FIXED else b"\0" for code, size in state_program(dt))


def state_lengths(dt: AggregateFunction, buf: np.ndarray, start: int, n: int, where: str,
                  error: type[MergeTreeError] = CorruptPartError) -> np.ndarray:
    """Byte length of each of the `n` states from buf[start] (uint8); `error` (naming `where`) when
    the bytes end inside a state."""
    lengths, end = _scan(buf, start, n, state_program(dt))
    if end < 0:
        raise error(f"{where}: state {-1 - end} of {n} ({dt.to_clickhouse()}) starting at byte offset {start} "
                    "runs past the end")
    return lengths


@lazy_njit
def _scan(buf: np.ndarray, start: int, n: int, program: np.ndarray) -> tuple[np.ndarray, int]:  # pragma: no cover
    """Length of each of n states laid out by `program`, and the end (-1 - row when one is cut)."""
    lengths = np.empty(n, np.int64)
    pos = start
    size = buf.shape[0]
    for i in range(n):
        begin = pos
        for s in range(program.shape[0]):
            code = program[s, 0]
            width = program[s, 1]
            if code == 0:
                pos += width
            elif code == 2:
                if pos >= size:
                    return lengths, -1 - i
                flag = buf[pos]
                pos += 1
                if flag != 0:
                    pos += width
            else:
                value = 0
                shift = 0
                while True:
                    if pos >= size or shift > 63:
                        return lengths, -1 - i
                    b = buf[pos]
                    pos += 1
                    value |= (b & 0x7F) << shift
                    shift += 7
                    if b < 0x80:
                        break
                if code == 3:
                    pos += value * width
            if pos > size:
                return lengths, -1 - i
        lengths[i] = pos - begin
    return lengths, pos

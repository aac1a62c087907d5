"""How many rows go into each granule of a part (fixed and adaptive index granularity).

Adaptive granularity sizes granules per written block from its in-memory size (String columns
count their characters plus 8 bytes of offset per row). Wide parts continue an unfinished granule
into the next block and end with whatever rows remain; Compact parts start over at every block and
fold a short tail into the previous granule. See format_spec/granularity.md.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from spark_mergetree.errors import InvalidOptionError

__all__ = [
    "DEFAULT_INDEX_GRANULARITY",
    "DEFAULT_INDEX_GRANULARITY_BYTES",
    "rows_per_granule",
    "block_granules",
    "part_granules",
    "granule_offsets",
]

DEFAULT_INDEX_GRANULARITY = 8192
DEFAULT_INDEX_GRANULARITY_BYTES = 10 * 1024 * 1024


def _check_settings(index_granularity: int, index_granularity_bytes: int) -> None:
    if index_granularity < 1:
        raise InvalidOptionError(f"index_granularity must be >= 1, got {index_granularity}")
    if index_granularity_bytes < 0:
        raise InvalidOptionError(f"index_granularity_bytes must be >= 0, got {index_granularity_bytes}")


def rows_per_granule(
    n_rows: int,
    block_bytes: int,
    index_granularity: int = DEFAULT_INDEX_GRANULARITY,
    index_granularity_bytes: int = DEFAULT_INDEX_GRANULARITY_BYTES,
) -> int:
    """The granule size ClickHouse picks for a block of ``n_rows`` rows taking ``block_bytes`` in memory.

    ``index_granularity_bytes = 0`` turns adaptivity off (fixed ``index_granularity`` rows).
    """
    _check_settings(index_granularity, index_granularity_bytes)
    if index_granularity_bytes == 0 or n_rows <= 0:
        return index_granularity
    if block_bytes >= index_granularity_bytes:
        rows = n_rows // (block_bytes // index_granularity_bytes)
    else:
        rows = index_granularity_bytes // max(block_bytes // n_rows, 1)
    return max(1, min(index_granularity, rows))


def block_granules(
    n_rows: int,
    block_bytes: int = 0,
    index_granularity: int = DEFAULT_INDEX_GRANULARITY,
    index_granularity_bytes: int = DEFAULT_INDEX_GRANULARITY_BYTES,
    compact: bool = False,
) -> np.ndarray:
    """Granule row counts (int64) of a part written from one block (one INSERT block)."""
    return part_granules([(n_rows, block_bytes)], index_granularity, index_granularity_bytes, compact)


def _compact_block(n_rows: int, granule: int) -> list[int]:
    if n_rows < granule:
        return [n_rows] if n_rows else []
    full, tail = divmod(n_rows, granule)
    sizes = [granule] * full
    if tail:
        # A tail shorter than half a granule joins the last granule instead of standing alone.
        if tail * 2 >= granule:
            sizes.append(tail)
        else:
            sizes[-1] += tail
    return sizes


def part_granules(
    blocks: Iterable[tuple[int, int]],
    index_granularity: int = DEFAULT_INDEX_GRANULARITY,
    index_granularity_bytes: int = DEFAULT_INDEX_GRANULARITY_BYTES,
    compact: bool = False,
) -> np.ndarray:
    """Granule row counts (int64) of a part written from ``blocks`` of (rows, in-memory bytes).

    An insert writes one block; a merge writes the merged stream in several blocks. Wide: a granule
    left unfinished by one block is completed with the next block's rows up to the next block's
    granule size (or closed as it is if it already holds that many rows), so granules run on across
    blocks; the part's last granule holds what remains. Compact: each block on its own.
    """
    _check_settings(index_granularity, index_granularity_bytes)
    sizes: list[int] = []
    unfinished = 0  # rows still missing from the last Wide granule
    for n_rows, block_bytes in blocks:
        if n_rows < 0 or block_bytes < 0:
            raise InvalidOptionError(f"a block needs non-negative rows and bytes, got ({n_rows}, {block_bytes})")
        if n_rows == 0:
            continue
        granule = rows_per_granule(n_rows, block_bytes, index_granularity, index_granularity_bytes)
        if compact:
            sizes.extend(_compact_block(n_rows, granule))
            continue
        position = 0
        if unfinished:
            written = sizes[-1]
            if written >= granule:
                # The open granule already holds a whole granule at the new size: it is closed as is.
                unfinished = 0
            else:
                # The open granule is re-planned at this block's size and completed from this block.
                take = min(granule - written, n_rows)
                sizes[-1] += take
                unfinished = granule - sizes[-1]
                position = take
        remaining = n_rows - position
        if remaining:
            full, tail = divmod(remaining, granule)
            sizes.extend([granule] * full)
            if tail:
                sizes.append(tail)
                unfinished = granule - tail
    return np.asarray(sizes, dtype=np.int64)


def granule_offsets(granule_rows: np.ndarray) -> np.ndarray:
    """First row of each granule plus the total (n_granules + 1 int64 values)."""
    rows = np.asarray(granule_rows, dtype=np.int64)
    offsets = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum(rows, out=offsets[1:])
    return offsets

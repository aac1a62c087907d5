"""Arrow arrays of plain values as numpy arrays, read from their buffers.

`pa.Array.to_numpy()` and `np.asarray(array)` go through pyarrow's pandas conversion, whose first
call imports pandas: some 0.3 s of CPU in every fresh Spark Python worker. `as_numpy` gives what
`to_numpy(zero_copy_only=False)` gives for arrays without nulls of booleans, integers, floats,
date32 and timestamps (the types planning and sorting look at), from the buffers, and falls back to
`to_numpy` for anything else.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa


def as_numpy(array: pa.Array | pa.ChunkedArray | np.ndarray) -> np.ndarray:
    """`np.asarray(array)` (for Arrow: `to_numpy(zero_copy_only=False)`), without pyarrow's pandas
    conversion where the type allows."""
    if isinstance(array, np.ndarray):
        return array
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    kind = array.type
    if array.null_count:
        return array.to_numpy(zero_copy_only=False)
    n, offset = len(array), array.offset
    if pa.types.is_boolean(kind):
        if n == 0:
            return np.zeros(0, dtype=bool)
        bits = np.frombuffer(array.buffers()[1], np.uint8)
        return np.unpackbits(bits, bitorder="little")[offset:offset + n].astype(bool)
    if pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_date32(kind) \
            or pa.types.is_timestamp(kind):
        width = kind.bit_width // 8
        if n == 0:
            raw = np.zeros(0, np.uint8)
        else:
            raw = np.frombuffer(array.buffers()[1], np.uint8)[offset * width:(offset + n) * width]
        if pa.types.is_date32(kind):
            return raw.view(np.int32).astype("datetime64[D]")
        if pa.types.is_timestamp(kind):
            return raw.view(np.int64).view(f"datetime64[{kind.unit}]")
        if pa.types.is_float16(kind):
            return raw.view(np.float16)
        return raw.view(np.dtype(kind.to_pandas_dtype()))
    return array.to_numpy(zero_copy_only=False)

"""Groups of rows for the tests of the state builders: chdb computes `fState` over consecutive
groups of `number`, and the same values are handed to our builders as the writer is given them."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
from pyarrow import ipc


def group_of(sizes: list[int]) -> tuple[str, np.ndarray, int]:
    """The group key of `number` for consecutive groups of `sizes` rows, their starts, the row count."""
    bounds = np.cumsum(sizes)
    key = "multiIf(" + ", ".join(f"number < {b}, {i}" for i, b in enumerate(bounds[:-1])) + f", {len(sizes) - 1})"
    return key, np.concatenate([[0], bounds[:-1]]).astype(np.int64), int(bounds[-1])


def arrow_of(session: Any, exprs: list[str], types: tuple[str, ...], n: int) -> list[pa.Array]:
    """The values of `exprs` over numbers(n), in order, as the Arrow arrays the writer is given."""
    columns = ", ".join(f"CAST({e} AS {t}) AS a{i}" for i, (e, t) in enumerate(zip(exprs, types, strict=True)))
    raw = session.query(f"SELECT {columns} FROM numbers({n}) SETTINGS max_threads = 1", "Arrow").bytes()
    table = ipc.open_file(pa.py_buffer(raw)).read_all()
    arrays = []
    for i, type_text in enumerate(types):
        arr = table.column(f"a{i}").combine_chunks()
        if hasattr(arr, "storage"):  # UUID: the extension's RFC 4122 bytes
            arr = arr.storage
        if type_text.startswith("DateTime(") and pa.types.is_integer(arr.type):
            arr = arr.cast(pa.int64()).cast(pa.timestamp("s", tz="UTC"))
        if type_text.endswith(("128", "256")) and pa.types.is_fixed_size_binary(arr.type):
            signed = type_text.startswith("Int")
            arr = pa.array([int.from_bytes(v, "little", signed=signed) for v in arr.to_pylist()],
                           pa.decimal256(76 if type_text.endswith("256") else 39, 0))
        arrays.append(arr)
    return arrays

"""ORDER BY / PRIMARY KEY elements over Arrow tables: their values and ClickHouse's row order.

A part's rows are sorted by its ORDER BY elements and primary.idx stores the values of the PRIMARY KEY
elements, both as ClickHouse computes and orders them: ascending, NULLs and NaNs last, Enums by
number and UUIDs by their second half first (Arrow's own order differs for those two).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from spark_mergetree.errors import ExpressionError
from spark_mergetree.expressions.functions import needs_ordering_map, orderable
from spark_mergetree.expressions.predicate import (
    Column,
    Func,
    bind,
    columns_of,
    evaluate_value,
    parse_expression,
)
from spark_mergetree.format.numpy_views import as_numpy


def key_element_types(elements: Sequence[str], schema: Mapping[str, str]) -> list[str | None]:
    """ClickHouse type of each key element (None for functions this package cannot type)."""
    types = []
    for text in elements:
        expr = bind(parse_expression(text), schema)
        types.append(expr.type if isinstance(expr, (Column, Func)) else None)
    return types


def sorting_key_columns(elements: Sequence[str], schema: Mapping[str, str]) -> set[str]:
    """The columns the key elements read."""
    return {name for text in elements for name in columns_of(bind(parse_expression(text), schema))}


def key_element_arrays(elements: Sequence[str], table: pa.Table, schema: Mapping[str, str]) -> list[pa.Array]:
    """The value of every key element for every row (what primary.idx stores for granule starts)."""
    arrays = []
    for text in elements:
        expr = bind(parse_expression(text), schema)
        try:
            arrays.append(evaluate_value(expr, table))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as error:
            raise ExpressionError(f"cannot evaluate key element {text!r}: {error}") from None
    return arrays


def _ordered_arrays(elements: Sequence[str], table: pa.Table, schema: Mapping[str, str]) -> list[pa.Array]:
    """The key elements' values, mapped where Arrow's order differs from ClickHouse's (functions.orderable)."""
    arrays = []
    for array, type_text in zip(key_element_arrays(elements, table, schema), key_element_types(elements, schema),
                                strict=True):
        arrays.append(orderable(array, type_text) if type_text is not None and needs_ordering_map(type_text)
                      else array)
    return arrays


def _as_integers(only: pa.Array | pa.ChunkedArray) -> np.ndarray | None:
    kind = only.type
    if only.null_count or not (pa.types.is_integer(kind) or pa.types.is_date(kind) or pa.types.is_timestamp(kind)):
        return None
    return as_numpy(only)


def integer_key_values(elements: Sequence[str], table: pa.Table, schema: Mapping[str, str]) -> np.ndarray | None:
    """When the key is one integer-like element without NULLs (after the ordering map), its values
    as one numpy array, whose numpy order (stable) is ClickHouse's order of the rows; else None."""
    if len(elements) != 1:
        return None
    return _as_integers(_ordered_arrays(elements, table, schema)[0])


def sort_indices(elements: Sequence[str], table: pa.Table, schema: Mapping[str, str]) -> pa.UInt64Array:
    """Row positions of `table` in the order ClickHouse sorts a part by `elements` (stable)."""
    if not elements or table.num_rows < 2:
        return pa.array(range(table.num_rows), pa.uint64())
    arrays = _ordered_arrays(elements, table, schema)
    values = _as_integers(arrays[0]) if len(arrays) == 1 else None
    if values is not None:
        # One integer-like key without NULLs: numpy's stable sort gives the same order, several
        # times faster, and runs in linear time over the sorted runs a merge concatenates.
        return pa.array(np.argsort(values, kind="stable"), pa.uint64())
    columns = {f"k{number}": array for number, array in enumerate(arrays)}
    keyed = pa.table(columns)
    # Arrow puts NaN after every number and NULL after NaN, as ClickHouse does for ascending keys.
    return pc.sort_indices(keyed, sort_keys=[(name, "ascending", "at_end") for name in columns])

"""Dynamic and JSON columns as Spark's VARIANT, both ways.

Spark hands a VARIANT column to and from a Python data source's Arrow batches as a struct of two
binaries, `value` and `metadata` (the Variant binary encoding: a dictionary of object keys, then the
value), the `metadata` field tagged `variant: true`. PySpark 4.0 to 4.3 carry it so, classic and
Spark Connect alike (checked by running them, tests/spark/test_variant_columns.py).

Reads: a Dynamic value (its type's binary encoding, then the value: format/dynamic.py) becomes a
variant of the same value. Integers up to Int64/UInt32, Float32/64, Bool and String values are
encoded column by column; every other type goes through its JSON text (`binary_values_text`, what
ClickHouse's JSON output prints) and format/variant_binary.py's column-wise encoder, which gives the
bytes PySpark's `VariantUtils.parse_json` gives (the few rows it leaves go through parse_json
itself). A JSON column's text goes through the same encoder. NULL stays NULL.

Writes: a variant's JSON text (as PySpark's `VariantUtils.to_json` prints it; column-wise by
format/variant_binary.py, to_json itself for DECIMAL16, dates, timestamps and binaries) is what is
stored: into a JSON column as that text, into a Dynamic column as the value ClickHouse's insert of the same JSON text
stores (format/json_infer.py types it: integers Int64, fractions Float64, strings String or a date,
arrays Array(...), objects JSON). Text (a string column) is taken the same way.

Where PySpark has no VARIANT in its Arrow path, the columns read as that JSON text instead.

Inside an Array, a Map or a Tuple (spark/types.py rebuilds the container around its converted
children) a variant is the same struct, its `metadata` untagged in Spark's Arrow schema of reads
(PySpark takes batches so typed) and tagged in the batches of writes.
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from spark_mergetree.errors import SchemaMismatchError
from spark_mergetree.format.dynamic import SHARED_VARIANT, binary_values_text, nested_text, split_dynamic
from spark_mergetree.format.json_infer import _Ambiguous, _Object, _Slot
from spark_mergetree.format.json_text import value_text
from spark_mergetree.format.row_binary import interleave_chunks
from spark_mergetree.format.type_codes import DEFAULT_MAX_TYPES
from spark_mergetree.format.types import Dynamic, Json, Primitive
from spark_mergetree.format.values import combine, string_buffers
from spark_mergetree.format.variant_binary import json_to_variant, variant_to_json

__all__ = ["is_variant_arrow", "texts_to_variant", "dynamic_to_variant", "dynamic_to_text",
           "variant_to_texts", "texts_to_dynamic"]

# Header bytes of the Variant encoding's primitives: (type id << 2) | basic type 0.
_TRUE, _FALSE, _INT8, _DOUBLE, _FLOAT, _LONG_STR = 1 << 2, 2 << 2, 6 << 2, 7 << 2, 14 << 2, 16 << 2
_SHORT_STR = 1  # basic type 1: a string of at most 63 bytes, its length in the header's upper 6 bits
_MAX_SHORT_STR = 63
# The metadata of a value with no object keys: version 1, 1-byte offsets, an empty dictionary.
_EMPTY_METADATA = b"\x01\x00\x00"

_INTEGERS = {"Int8", "Int16", "Int32", "Int64", "UInt8", "UInt16", "UInt32"}
_FLOATS = {"Float64": (_DOUBLE, "<f8"), "Float32": (_FLOAT, "<f4")}


def is_variant_arrow(arrow_type: pa.DataType) -> bool:
    """Whether an Arrow type is Spark's rendering of VARIANT (struct of `value`, tagged `metadata`)."""
    if not pa.types.is_struct(arrow_type):
        return False
    names = [arrow_type.field(i).name for i in range(arrow_type.num_fields)]
    if sorted(names) != ["metadata", "value"]:
        return False
    meta = arrow_type.field("metadata").metadata or {}
    return meta.get(b"variant") == b"true"


def _variant_struct(values: pa.Array, metadata: pa.Array, valid: np.ndarray | None, target: pa.DataType
                    ) -> pa.StructArray:
    fields = [target.field(i) for i in range(target.num_fields)]
    children = {"value": values, "metadata": metadata}
    mask = None if valid is None or valid.all() else pa.array(~valid)
    return pa.StructArray.from_arrays([children[f.name] for f in fields], fields=fields, mask=mask)


def texts_to_variant(texts: pa.Array, target: pa.DataType, column: str) -> pa.StructArray:
    """JSON texts (NULL: a NULL variant) → variants, byte for byte as PySpark's own JSON → Variant
    builder makes them: column-wise (format/variant_binary.py), the rows it leaves (see there)
    through PySpark's `VariantUtils.parse_json`, which also raises the error of a text it refuses."""
    texts = combine(texts)
    values, metadata, fallback = json_to_variant(texts)
    if fallback.any():
        rows = np.flatnonzero(fallback)
        slow_values, slow_metadata = _parse_rows(texts.take(pa.array(rows)), rows, column)
        index = np.arange(len(texts))
        index[rows] = len(texts) + np.arange(len(rows))
        take = pa.array(index)
        values = pa.concat_arrays([values, slow_values]).take(take)
        metadata = pa.concat_arrays([metadata, slow_metadata]).take(take)
    valid = np.asarray(texts.is_valid(), dtype=bool)
    return _variant_struct(values, metadata, valid, target)


def _parse_rows(texts: pa.Array, rows: np.ndarray, column: str) -> tuple[pa.Array, pa.Array]:
    """PySpark's `parse_json` of each text (a NULL: an empty value); `rows` number them in errors."""
    from pyspark.sql.variant_utils import VariantUtils

    values: list[bytes] = []
    metadata: list[bytes] = []
    for row, text in zip(rows.tolist(), texts.to_pylist(), strict=True):
        if text is None:
            values.append(b"")
            metadata.append(_EMPTY_METADATA)
            continue
        try:
            value, meta = VariantUtils.parse_json(text)
        except Exception as error:  # noqa: BLE001 - PySpark raises ValueError or its own error classes
            raise SchemaMismatchError(f"column {column!r}: row {row}: {text[:200]!r} is not a value a Spark "
                                      f"variant holds: {error}") from None
        values.append(value)
        metadata.append(meta)
    return pa.array(values, pa.binary()), pa.array(metadata, pa.binary())


def _scalar_values(name: str, field: pa.Array) -> pa.Array | None:
    """Values of one simple type (no NULLs) in the Variant value encoding, column-wise; None for a
    type that goes through text."""
    count = len(field)
    if name in _INTEGERS:
        numbers = np.asarray(field.cast(pa.int64()).to_numpy(zero_copy_only=False), "<i8")
        rows = np.empty((count, 9), np.uint8)
        rows[:, 0] = _INT8
        rows[:, 1:] = numbers.view(np.uint8).reshape(count, 8)
        return _fixed(rows)
    if name in _FLOATS:
        header, dtype = _FLOATS[name]
        numbers = np.asarray(field.to_numpy(zero_copy_only=False), dtype)
        width = numbers.dtype.itemsize
        rows = np.empty((count, 1 + width), np.uint8)
        rows[:, 0] = header
        rows[:, 1:] = numbers.view(np.uint8).reshape(count, width)
        return _fixed(rows)
    if name == "Bool":
        flags = np.asarray(field.to_numpy(zero_copy_only=False), bool)
        return _fixed(np.where(flags, _TRUE, _FALSE).astype(np.uint8).reshape(count, 1))
    if name == "String":
        strings = field.cast(pa.binary())
        lengths = np.asarray(pc.binary_length(strings).to_numpy(zero_copy_only=False), np.int64)
        short = lengths <= _MAX_SHORT_STR
        # Header: 1 byte (short: the length inside) or 5 (long: type, then the length as UInt32).
        heads = np.zeros((count, 5), np.uint8)
        heads[:, 0] = np.where(short, (np.minimum(lengths, _MAX_SHORT_STR) << 2) | _SHORT_STR, _LONG_STR)
        heads[:, 1:] = lengths.astype("<u4").view(np.uint8).reshape(count, 4)
        head_len = np.where(short, 1, 5)
        head_offsets = np.zeros(count + 1, np.int64)
        np.cumsum(head_len, out=head_offsets[1:])
        keep = np.arange(5)[None, :] < head_len[:, None]
        head_data = heads[keep]
        offsets, body = string_buffers(strings)
        offsets = np.asarray(offsets, np.int64)
        data, joined = interleave_chunks([(head_data, head_offsets),
                                          (np.asarray(body, np.uint8), offsets)])
        return _binary(np.asarray(data, np.uint8), np.asarray(joined, np.int64))
    return None


def _fixed(rows: np.ndarray) -> pa.Array:
    count, width = rows.shape
    return _binary(rows.reshape(-1), np.arange(count + 1, dtype=np.int64) * width)


def _binary(data: np.ndarray, offsets: np.ndarray) -> pa.Array:
    return pa.Array.from_buffers(pa.binary(), len(offsets) - 1,
                                 [None, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(data.tobytes())])


def dynamic_to_variant(values: pa.Array, target: pa.DataType, column: str) -> pa.StructArray:
    """Dynamic values in their binary form (type encoding, then the value) → variants of the values."""
    n = len(values)
    if n == 0 or values.null_count == n:
        return _variant_struct(pa.nulls(n, pa.binary()).fill_null(b""), pa.array([_EMPTY_METADATA] * n, pa.binary()),
                               np.zeros(n, bool), target)
    split = split_dynamic(Dynamic(254), values, column)
    value_pieces: list[pa.Array] = []
    meta_pieces: list[pa.Array] = []
    index = np.full(n, -1, np.int64)
    start = 0
    for name, dt, field in zip(split.structure.variant.names, split.structure.variant.variants,
                               split.struct.flatten(), strict=True):
        mine = np.asarray(field.is_valid(), dtype=bool)
        count = int(np.count_nonzero(mine))
        if not count:
            continue
        present = field.filter(pa.array(mine))
        encoded = None if name == SHARED_VARIANT or not isinstance(dt, Primitive) else _scalar_values(name, present)
        if encoded is not None:
            value_pieces.append(encoded)
            meta_pieces.append(pa.array([_EMPTY_METADATA] * count, pa.binary()))
        else:
            texts = (binary_values_text(present.cast(pa.binary()), column, column) if name == SHARED_VARIANT
                     else value_text(dt, present, column, nested_text(column)))
            struct = texts_to_variant(texts, target, column)
            value_pieces.append(struct.field("value"))
            meta_pieces.append(struct.field("metadata"))
        index[mine] = start + np.arange(count)
        start += count
    valid = index >= 0
    take = pa.array(np.where(valid, index, 0))
    every_value = pa.concat_arrays(value_pieces).take(take)
    every_meta = pa.concat_arrays(meta_pieces).take(take)
    return _variant_struct(every_value, every_meta, valid, target)


def dynamic_to_text(values: pa.Array, column: str) -> pa.Array:
    """Dynamic values in their binary form → the JSON text of each value (NULL stays NULL)."""
    if len(values) == 0 or values.null_count == len(values):
        return pa.nulls(len(values), pa.string())
    return binary_values_text(values, column, column)


class _Float(float):
    """A variant's FLOAT or DOUBLE as JSON text: a FLOAT's shortest float32 digits (as Spark's
    to_json prints it: 0.1, not the double 0.10000000149011612); NaN and ±Infinity as `null`, as
    ClickHouse's JSON output prints them."""

    single = False

    def __str__(self) -> str:
        if not math.isfinite(self):
            return "null"
        return str(np.float32(self)) if self.single else float.__repr__(self)


class _Single(_Float):
    single = True


def _json_utils() -> Any:
    """PySpark's variant decoder, its floats printed as `_Float` says."""
    from pyspark.sql.variant_utils import VariantUtils

    class Utils(VariantUtils):
        @classmethod
        def _get_double(cls, value: bytes, pos: int) -> float:
            number = VariantUtils._get_double.__func__(cls, value, pos)  # type: ignore[attr-defined]
            return (_Single if value[pos] >> 2 == VariantUtils.FLOAT else _Float)(number)

    return Utils


def variant_to_texts(variants: pa.StructArray, column: str) -> pa.Array:
    """Spark variants → their JSON text as PySpark's `VariantUtils.to_json` prints it (floats as
    `_Float` says); NULL stays NULL. Column-wise (format/variant_binary.py); the rows it leaves
    (DECIMAL16, dates, timestamps, binaries, UUIDs, malformed bytes) through `to_json` itself."""
    valid = np.asarray(variants.is_valid(), dtype=bool)
    value = variants.field("value")
    metadata = variants.field("metadata")
    texts, fallback = variant_to_json(value, metadata, valid)
    if not fallback.any():
        return texts
    rows = np.flatnonzero(fallback)
    utils = _json_utils()
    slow: list[str] = []
    for row, v, m in zip(rows.tolist(), value.take(pa.array(rows)).to_pylist(), metadata.take(pa.array(rows)).to_pylist(),
                         strict=True):
        try:
            slow.append(utils.to_json(v, m))
        except Exception as error:  # noqa: BLE001 - a malformed variant
            raise SchemaMismatchError(f"column {column!r}: row {row}: not a Spark variant: {error}") from None
    index = np.arange(len(texts))
    index[rows] = len(texts) + np.arange(len(rows))
    return pa.concat_arrays([texts, pa.array(slow, pa.string())]).take(pa.array(index))


def texts_to_dynamic(texts: pa.Array, column: str) -> pa.Array:
    """JSON texts → Dynamic values in their binary form, typed as ClickHouse's insert of the same
    JSON text types them (NULL, and the JSON `null`, a NULL Dynamic value)."""
    slot = _Slot(DEFAULT_MAX_TYPES, Json())
    out: list[bytes | None] = []
    for row, text in enumerate(texts.to_pylist()):
        if text is None:
            out.append(None)
            continue
        try:
            value: Any = json.loads(text, object_pairs_hook=_Object)
        except (ValueError, RecursionError) as error:
            raise SchemaMismatchError(f"column {column!r} (Dynamic): row {row}: {text[:200]!r} is not JSON text: "
                                      f"{error}") from None
        if value is None:
            out.append(None)
            continue
        try:
            out.append(slot.dynamic_bytes(value))
        except _Ambiguous:
            raise SchemaMismatchError(f"column {column!r} (Dynamic): row {row}: ClickHouse would type "
                                      f"{text[:200]!r} by best-effort parsing, which is not repeated here") from None
    return pa.array(out, pa.binary())

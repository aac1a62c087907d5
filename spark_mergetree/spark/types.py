"""Type mapping between a table's Arrow schema (format/types.py) and Spark SQL types, both ways.

Reads: ClickHouse type → Arrow (format.types.to_arrow) → Spark type (here). Batches handed to Spark
must equal Spark's own Arrow rendering of the schema exactly, so `spark_arrow_schema` asks PySpark
for that rendering and `conform_batch` casts the engine's batch to it in one vectorized step.
Writes: Spark's Arrow batches are cast to the table's Arrow schema; a new table's ClickHouse types
come from format.types.from_arrow on Spark's Arrow rendering of the DataFrame schema.
"""

from __future__ import annotations

import functools
import inspect
import re
from collections.abc import Iterable

import numpy as np
import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema, to_arrow_type
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    ByteType,
    DataType,
    DateType,
    DayTimeIntervalType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from spark_mergetree.errors import SchemaMismatchError, UnsupportedError
from spark_mergetree.format.types import (
    Array,
    Dynamic,
    Json,
    LowCardinality,
    Map,
    Nullable,
    Tuple,
    parse_type,
)
from spark_mergetree.format.types import DataType as CHType
from spark_mergetree.format.values import combine
from spark_mergetree.spark.variant import (
    dynamic_to_text,
    dynamic_to_variant,
    is_variant_arrow,
    texts_to_dynamic,
    texts_to_variant,
    variant_to_texts,
)

# Field metadata that adapter.table_schema puts on a table's Dynamic and JSON columns and on the
# Arrays, Maps and Tuples holding such values: the column's ClickHouse type (the Arrow types, binary
# and string, do not say what they hold).
OBJECT_MARK = b"spark_mergetree.object"


def _object_type() -> DataType:
    """Spark's VARIANT where PySpark carries it through a Python data source's Arrow batches (4.0+),
    else the values' JSON text."""
    try:
        from pyspark.sql.types import VariantType

        to_arrow_type(VariantType())
        return VariantType()
    except (ImportError, TypeError, ValueError, NotImplementedError, AssertionError):
        return StringType()
    except Exception:  # noqa: BLE001 - PySpark's own "unsupported type" error classes
        return StringType()


# The Spark type of a Dynamic or JSON column (spark/variant.py converts the values both ways).
OBJECT_TYPE = _object_type()


def mark_objects(schema: pa.Schema, columns: Iterable[tuple[str, str]]) -> pa.Schema:
    """A table's Arrow schema with its columns that are or hold Dynamic or JSON values (`columns`:
    name, ClickHouse type) marked by OBJECT_MARK, whose value is the column's ClickHouse type."""
    kinds = {name: type_text.encode() for name, type_text in columns if _holds_object(parse_type(type_text))}
    if not kinds:
        return schema
    return pa.schema([f.with_metadata({**(f.metadata or {}), OBJECT_MARK: kinds[f.name]}) if f.name in kinds else f
                      for f in schema], metadata=schema.metadata)


def _bare(dt: CHType) -> CHType:
    while isinstance(dt, (Nullable, LowCardinality)):
        dt = dt.inner
    return dt


def _holds_object(dt: CHType) -> bool:
    """Whether `dt` is Dynamic or JSON (Nullable too), or an Array, Map or Tuple holding one, at any
    depth (a ClickHouse Variant's JSON keeps the Variant's struct form)."""
    dt = _bare(dt)
    if isinstance(dt, (Dynamic, Json)):
        return True
    if isinstance(dt, Array):
        return _holds_object(dt.inner)
    if isinstance(dt, Map):
        return _holds_object(dt.value)
    if isinstance(dt, Tuple):
        return any(_holds_object(element) for element in dt.elements)
    return False


@functools.lru_cache(maxsize=256)
def _parsed(type_text: bytes) -> CHType:
    return parse_type(type_text.decode())


def object_type(field: pa.Field) -> CHType | None:
    """The ClickHouse type of a column that is or holds Dynamic or JSON values (None for others)."""
    text = (field.metadata or {}).get(OBJECT_MARK)
    return None if text is None else _parsed(text)


def field_spark_type(field: pa.Field) -> DataType:
    """The Spark type of a table column (Dynamic and JSON values, at any depth of Array, Map and
    Tuple: OBJECT_TYPE)."""
    kind = object_type(field)
    if kind is not None:
        return _object_spark_type(kind, field.type, field.name)
    return spark_type(field.type, field.name)


def _object_spark_type(dt: CHType, arrow_type: pa.DataType, column: str) -> DataType:
    dt = _bare(dt)
    if isinstance(dt, (Dynamic, Json)):
        return OBJECT_TYPE
    if not _holds_object(dt):
        return spark_type(arrow_type, column)
    if isinstance(dt, Array):
        return ArrayType(_object_spark_type(dt.inner, arrow_type.value_type, column),
                         containsNull=arrow_type.value_field.nullable)
    if isinstance(dt, Map):
        return MapType(spark_type(arrow_type.key_type, column), _object_spark_type(dt.value, arrow_type.item_type, column),
                       valueContainsNull=arrow_type.item_field.nullable)
    assert isinstance(dt, Tuple)
    return StructType([StructField(arrow_type.field(i).name, _object_spark_type(element, arrow_type.field(i).type, column),
                                   arrow_type.field(i).nullable) for i, element in enumerate(dt.elements)])


# Spark's widest decimal; wider exact integers (Int128, UInt256, Decimal(>38)) are read as text.
_SPARK_MAX_PRECISION = 38


def spark_type(arrow_type: pa.DataType, column: str) -> DataType:
    """The Spark type a column read into `arrow_type` is presented as (lossless where Spark allows)."""
    t = arrow_type
    simple = {
        pa.bool_(): BooleanType(), pa.int8(): ByteType(), pa.int16(): ShortType(), pa.int32(): IntegerType(),
        pa.int64(): LongType(), pa.float32(): FloatType(), pa.float64(): DoubleType(),
        # Unsigned integers widen to the next signed type; UInt64 needs 20 decimal digits.
        pa.uint8(): ShortType(), pa.uint16(): IntegerType(), pa.uint32(): LongType(),
        pa.uint64(): DecimalType(20, 0),
        pa.string(): StringType(), pa.large_string(): StringType(), pa.date32(): DateType(),
        pa.binary(): BinaryType(), pa.large_binary(): BinaryType(),
    }
    if t in simple:
        return simple[t]
    if pa.types.is_fixed_size_binary(t):
        return BinaryType()
    if pa.types.is_timestamp(t):
        return TimestampType()
    if pa.types.is_duration(t):  # Time, Time64: Spark's interval holds ±999:59:59 (microseconds)
        return DayTimeIntervalType()
    if pa.types.is_decimal(t):
        if t.precision <= _SPARK_MAX_PRECISION:
            return DecimalType(t.precision, t.scale)
        return StringType()
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return ArrayType(spark_type(t.value_type, column), containsNull=t.value_field.nullable)
    if pa.types.is_map(t):
        return MapType(spark_type(t.key_type, column), spark_type(t.item_type, column),
                       valueContainsNull=t.item_field.nullable)
    if pa.types.is_struct(t):
        return StructType([
            StructField(t.field(i).name, spark_type(t.field(i).type, column), t.field(i).nullable)
            for i in range(t.num_fields)
        ])
    if pa.types.is_dictionary(t):
        return spark_type(t.value_type, column)
    raise UnsupportedError(f"column {column!r}: no Spark type for Arrow type {t}")


def spark_schema(arrow_schema: pa.Schema) -> StructType:
    return StructType([StructField(f.name, field_spark_type(f), f.nullable) for f in arrow_schema])


# PySpark 4.0 spells "timestamps as UTC instants" `timestamp_utc=True`; 4.1+ `timezone="UTC"`.
_UTC = ({"timezone": "UTC"} if "timezone" in inspect.signature(to_arrow_schema).parameters
        else {"timestamp_utc": True})


def spark_arrow_schema(schema: StructType) -> pa.Schema:
    """Exactly the Arrow schema PySpark checks the first batch of a read against."""
    return to_arrow_schema(schema, **_UTC)


def _needs_text(source: pa.DataType, target: pa.DataType) -> bool:
    return pa.types.is_decimal(source) and pa.types.is_string(target)


def conform_batch(batch: pa.RecordBatch, target: pa.Schema, table: pa.Schema | None = None) -> pa.RecordBatch:
    """Select, order and cast the columns of `batch` to `target` in one vectorized step per column.
    `table` (the table's schema, its Dynamic and JSON columns marked: mark_objects) says where
    Dynamic and JSON values are nested in Arrays, Maps and Tuples (Spark's Arrow rendering of a
    nested VARIANT does not tag it)."""
    arrays = []
    for target_field in target:
        column = batch.column(batch.schema.get_field_index(target_field.name))
        kind = None
        if table is not None and (index := table.get_field_index(target_field.name)) >= 0:
            kind = object_type(table.field(index))
        if kind is not None:
            column = _objects_to_spark(combine(column), kind, target_field.type, target_field.name)
        else:
            column = _conform_column(column, target_field.type, target_field.name)
        arrays.append(column)
    return pa.RecordBatch.from_arrays(arrays, schema=target)


def _conform_column(column: pa.Array, target: pa.DataType, name: str) -> pa.Array:
    if is_variant_arrow(target):
        return (dynamic_to_variant(column, target, name) if pa.types.is_binary(column.type)
                else texts_to_variant(column, target, name))
    if pa.types.is_binary(column.type) and pa.types.is_string(target):
        return dynamic_to_text(column, name)  # (only a Dynamic column reads binary as text)
    if column.type == target:
        return column
    if _needs_text(column.type, target):
        return column.cast(pa.string())
    if pa.types.is_timestamp(column.type) or pa.types.is_duration(column.type):
        # Spark keeps microseconds: DateTime64(7..9) / Time64(7..9) ticks are truncated, never rejected.
        return column.cast(target, safe=False)
    return column.cast(target, safe=True)


def _offsets(column: pa.Array) -> pa.Array:
    """A list's or map's offsets, unsliced (Arrow rebuilds a list from sliced offsets only without a
    NULL mask)."""
    offsets = column.offsets
    return pa.array(offsets.to_numpy(zero_copy_only=False), offsets.type) if offsets.offset else offsets


def _mask(column: pa.Array) -> pa.Array | None:
    return column.is_null() if column.null_count else None


def _objects_to_spark(column: pa.Array, dt: CHType, target: pa.DataType, name: str) -> pa.Array:
    """A column of ClickHouse type `dt` holding Dynamic or JSON values (binary Dynamic values, JSON
    text) → Spark's Arrow form of it: each Array, Map and Tuple rebuilt around its children, the
    Dynamic and JSON values of every row converted together (one column-wise pass per nesting)."""
    dt = _bare(dt)
    if isinstance(dt, (Dynamic, Json)):
        if pa.types.is_struct(target):  # a variant (untagged where nested)
            return (dynamic_to_variant(column, target, name) if pa.types.is_binary(column.type)
                    else texts_to_variant(column, target, name))
        return _conform_column(column, target, name)  # JSON text, where PySpark has no VARIANT
    if not _holds_object(dt):
        return _conform_column(column, target, name)
    if isinstance(dt, Array):
        values = _objects_to_spark(column.values, dt.inner, target.value_type, name)
        return pa.ListArray.from_arrays(_offsets(column), values, type=target, mask=_mask(column))
    if isinstance(dt, Map):
        keys = _conform_column(column.keys, target.key_type, name)
        items = _objects_to_spark(column.items, dt.value, target.item_type, name)
        return pa.MapArray.from_arrays(_offsets(column), keys, items, type=target, mask=_mask(column))
    assert isinstance(dt, Tuple)
    fields = [target.field(i) for i in range(target.num_fields)]
    children = [_objects_to_spark(child, element, field.type, name)
                for child, element, field in zip(column.flatten(), dt.elements, fields, strict=True)]
    return pa.StructArray.from_arrays(children, fields=fields, mask=_mask(column))


# Field metadata the session extension (jvm/src, ScanPerRelation) puts on a decimal column of
# precision <= 18 it reads as its unscaled longs ("precision,scale"): Spark takes a long from Arrow
# far more cheaply than it builds a Decimal, and the extension's MakeDecimal rebuilds the value.
UNSCALED_MARKER = "spark_mergetree.unscaled"


def unscaled_columns(schema: StructType) -> tuple[StructType, frozenset[str]]:
    """The read schema with the decimals the extension reads as longs restored (what the table
    holds, for every check and the plan), and the names of those columns."""
    fields, names = [], set()
    for field in schema.fields:
        mark = field.metadata.get(UNSCALED_MARKER) if field.metadata else None
        if mark is None:
            fields.append(field)
            continue
        precision, scale = (int(part) for part in str(mark).split(","))
        rest = {key: value for key, value in field.metadata.items() if key != UNSCALED_MARKER}
        fields.append(StructField(field.name, DecimalType(precision, scale), field.nullable, rest or None))
        names.add(field.name)
    return (StructType(fields) if names else schema), frozenset(names)


def with_unscaled(batch: pa.RecordBatch, names: frozenset[str]) -> pa.RecordBatch:
    """`batch` with its decimal128 columns in `names` as their unscaled values (int64, NULLs kept):
    the low 64 bits of each 128-bit value, exact for precision <= 18."""
    arrays, fields = [], []
    for field, column in zip(batch.schema, batch.columns, strict=True):
        if field.name in names:
            n, offset = len(column), column.offset
            words = np.frombuffer(column.buffers()[1], "<i8")[:2 * (offset + n):2]
            column = pa.Array.from_buffers(pa.int64(), n, [column.buffers()[0], pa.py_buffer(np.ascontiguousarray(words))],
                                           null_count=column.null_count, offset=offset)
            field = pa.field(field.name, pa.int64(), field.nullable)
        arrays.append(column)
        fields.append(field)
    return pa.RecordBatch.from_arrays(arrays, schema=pa.schema(fields))


def check_readable_columns(table_schema: pa.Schema, requested: StructType) -> None:
    """A user schema (`.schema(...)`) must name existing columns with the types the table maps to."""
    for field in requested.fields:
        index = table_schema.get_field_index(field.name)
        if index < 0:
            raise SchemaMismatchError(
                f"column {field.name!r} of the requested schema is not in the table; "
                f"table columns: {table_schema.names}"
            )
        expected = field_spark_type(table_schema.field(index))
        if expected != field.dataType:
            raise SchemaMismatchError(
                f"column {field.name!r}: requested Spark type {field.dataType.simpleString()}, but the table "
                f"column reads as {expected.simpleString()}"
            )


_IDENTIFIER = re.compile(r"`([^`]+)`|\b([A-Za-z_][A-Za-z0-9_]*)\b")


def key_columns(*expressions: str | None) -> set[str]:
    """Identifiers mentioned in key expressions (function names included; callers intersect with columns)."""
    names: set[str] = set()
    for text in expressions:
        for quoted, bare in _IDENTIFIER.findall(text or ""):
            names.add(quoted or bare)
    return names


def clickhouse_columns(schema: StructType, non_nullable: set[str]) -> list[tuple[str, str]]:
    """(name, ClickHouse type) for a new table made from a DataFrame schema.

    Key columns (`non_nullable`) are stored without Nullable, as ClickHouse requires of sort and
    partition keys; a NULL written into one fails the write with the column named.
    """
    from spark_mergetree.format.types import from_arrow

    arrow = spark_arrow_schema(schema)
    columns = []
    for spark_field, arrow_field in zip(schema.fields, arrow, strict=True):
        if _holds_variant(spark_field.dataType) and OBJECT_TYPE != StringType():
            # A variant holds any value, as a Dynamic does (in an array, a map's values or a struct too).
            columns.append((spark_field.name, _dynamic_holding(spark_field.dataType, arrow_field.type,
                                                               arrow_field.nullable).to_clickhouse()))
            continue
        try:
            ch_type = from_arrow(arrow_field.type, arrow_field.nullable and spark_field.name not in non_nullable)
        except (SchemaMismatchError, UnsupportedError) as error:
            raise SchemaMismatchError(
                f"column {spark_field.name!r} of Spark type {spark_field.dataType.simpleString()} cannot be "
                f"stored in a MergeTree table: {error}"
            ) from None
        columns.append((spark_field.name, ch_type.to_clickhouse()))
    return columns


def _holds_variant(dt: DataType) -> bool:
    if dt == OBJECT_TYPE:
        return True
    if isinstance(dt, ArrayType):
        return _holds_variant(dt.elementType)
    if isinstance(dt, MapType):
        return _holds_variant(dt.valueType)
    if isinstance(dt, StructType):
        return any(_holds_variant(f.dataType) for f in dt.fields)
    return False


def _dynamic_holding(dt: DataType, arrow_type: pa.DataType, nullable: bool) -> CHType:
    """The ClickHouse type of a new table's column of Spark type `dt` that is or holds a variant:
    Dynamic for each variant, Array, Map and Tuple around them, the rest as from_arrow makes it."""
    from spark_mergetree.format.types import from_arrow

    if dt == OBJECT_TYPE:
        return Dynamic()
    if not _holds_variant(dt):
        return from_arrow(arrow_type, nullable)
    if isinstance(dt, ArrayType):
        return Array(_dynamic_holding(dt.elementType, arrow_type.value_type, arrow_type.value_field.nullable))
    if isinstance(dt, MapType):
        return Map(from_arrow(arrow_type.key_type), _dynamic_holding(dt.valueType, arrow_type.item_type,
                                                                      arrow_type.item_field.nullable))
    assert isinstance(dt, StructType)
    fields = [arrow_type.field(i) for i in range(arrow_type.num_fields)]
    return Tuple(tuple(_dynamic_holding(f.dataType, a.type, a.nullable) for f, a in zip(dt.fields, fields, strict=True)),
                 tuple(f.name for f in dt.fields))


def check_writable(table_schema: pa.Schema, incoming: StructType, merge_schema: bool) -> list[str]:
    """Compare a DataFrame schema with the table's; returns the names of new columns (merge_schema).

    Column order may differ; every DataFrame column must exist with a type Spark can cast into the
    table's type, and columns the DataFrame lacks must be nullable (they are written as NULL).
    """
    table_names = set(table_schema.names)
    incoming_names = [f.name for f in incoming.fields]
    extra = [name for name in incoming_names if name not in table_names]
    missing = [name for name in table_schema.names if name not in set(incoming_names)]
    missing_required = [name for name in missing if not table_schema.field(name).nullable]
    if (extra and not merge_schema) or missing_required:
        parts = []
        if extra:
            parts.append(f"columns {extra} are not in the table (option merge_schema=true adds them)")
        if missing_required:
            parts.append(f"non-nullable table columns {missing_required} are missing from the DataFrame")
        raise SchemaMismatchError(
            "DataFrame schema does not match the table: " + "; ".join(parts)
            + f". Table columns: {[f'{f.name} {field_spark_type(f).simpleString()}' for f in table_schema]}"
        )
    for spark_field in incoming.fields:
        if spark_field.name not in table_names:
            continue
        table_field = table_schema.field(spark_field.name)
        expected = field_spark_type(table_field)
        kind = object_type(table_field)
        if kind is not None and isinstance(_bare(kind), (Dynamic, Json)) and isinstance(spark_field.dataType, StringType):
            continue  # JSON text of the values
        if not _castable(spark_field.dataType, expected):
            raise SchemaMismatchError(
                f"column {spark_field.name!r}: DataFrame type {spark_field.dataType.simpleString()} does not "
                f"match the table's {expected.simpleString()}"
            )
    return extra


_INTEGRAL = (ByteType, ShortType, IntegerType, LongType)


def _castable(source: DataType, target: DataType) -> bool:
    """Only widening, value-preserving conversions are accepted implicitly."""
    if source == target:
        return True
    if target == OBJECT_TYPE and isinstance(source, StringType):
        return True  # JSON text, into a Dynamic or JSON value inside an Array, Map or Tuple
    if isinstance(source, _INTEGRAL) and isinstance(target, _INTEGRAL):
        return _INTEGRAL.index(type(source)) <= _INTEGRAL.index(type(target))
    if isinstance(source, _INTEGRAL) and isinstance(target, DecimalType):
        return True  # range-checked at write time
    if isinstance(source, FloatType) and isinstance(target, DoubleType):
        return True
    if isinstance(source, TimestampNTZType) and isinstance(target, TimestampType):
        return True  # the wall-clock time, stored as a UTC instant (DateTime64(6, 'UTC'))
    if isinstance(source, BinaryType) and isinstance(target, StringType):
        return True  # ClickHouse String holds bytes; see to_table_arrow
    if isinstance(source, ArrayType) and isinstance(target, ArrayType):
        return _castable(source.elementType, target.elementType)
    if isinstance(source, MapType) and isinstance(target, MapType):
        return _castable(source.keyType, target.keyType) and _castable(source.valueType, target.valueType)
    if isinstance(source, StructType) and isinstance(target, StructType):
        return len(source.fields) == len(target.fields) and all(
            _castable(s.dataType, t.dataType) for s, t in zip(source.fields, target.fields, strict=True)
        )
    return False


def to_table_arrow(batch: pa.RecordBatch, table_schema: pa.Schema) -> pa.RecordBatch:
    """Cast one of Spark's write batches to the table's Arrow schema (NULL for columns it lacks).

    The cast is `safe`: a value the table type cannot hold (negative into UInt, overflow) raises
    a SchemaMismatchError naming the column instead of wrapping around.
    """
    arrays = []
    for table_field in table_schema:
        index = batch.schema.get_field_index(table_field.name)
        if index < 0:
            arrays.append(pa.nulls(batch.num_rows, table_field.type))
            continue
        column = batch.column(index)
        kind = object_type(table_field)
        if kind is not None:
            try:
                column = _object_column(combine(column), kind, table_field.type, table_field.name)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as error:
                raise SchemaMismatchError(f"column {table_field.name!r}: cannot store {column.type} values as "
                                          f"{kind.to_clickhouse()}: {error}") from None
        elif pa.types.is_binary(column.type) and pa.types.is_string(table_field.type):
            # Same layout; ClickHouse Strings are arbitrary bytes, so no UTF-8 check on the way in.
            column = column.view(pa.string())
        if column.type != table_field.type:
            try:
                column = _cast(column, table_field.type)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as error:
                raise SchemaMismatchError(
                    f"column {table_field.name!r}: cannot store {column.type} values as {table_field.type}: {error}"
                ) from None
        if not table_field.nullable and column.null_count and _is_nested(table_field.type):
            # ClickHouse has no NULL Array/Map/Tuple; like its input_format_null_as_default, a NULL
            # becomes the empty value (a struct of NULL fields for a Tuple).
            column = column.fill_null(_empty_value(table_field.type))
        if not table_field.nullable and column.null_count:
            raise SchemaMismatchError(
                f"column {table_field.name!r} is not Nullable in the table but the data has "
                f"{column.null_count} NULL value(s)"
            )
        arrays.append(column)
    return pa.RecordBatch.from_arrays(arrays, schema=table_schema)


def _object_column(column: pa.Array, dt: CHType, table_type: pa.DataType, name: str, nested: bool = False
                   ) -> pa.Array:
    """A column of a write batch whose table type `dt` is or holds Dynamic or JSON (Spark variants,
    or JSON text, where the table has those) → the table's Arrow form of it: JSON text for a JSON
    value, binary Dynamic values for a Dynamic one, Arrays, Maps and Tuples rebuilt around them."""
    bare = _bare(dt)
    if isinstance(bare, (Dynamic, Json)):
        if _is_variant_struct(column.type):
            texts = variant_to_texts(column, name)
        elif pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
            texts = column.cast(pa.string())
        else:
            raise SchemaMismatchError(f"column {name!r} ({bare.family}): cannot store {column.type} values; "
                                      "give variants or JSON text")
        if isinstance(bare, Dynamic):
            return texts_to_dynamic(texts, name)
        if nested and not isinstance(dt, Nullable) and texts.null_count:
            texts = texts.fill_null("{}")  # a JSON inside Array, Map or Tuple: NULL is the empty object
        return texts
    if not _holds_object(bare):
        return column if column.type == table_type else _cast(column, table_type)
    if isinstance(bare, Array) and pa.types.is_list(column.type):
        values = _object_column(column.values, bare.inner, table_type.value_type, name, True)
        return pa.ListArray.from_arrays(_offsets(column), values, type=table_type, mask=_mask(column))
    if isinstance(bare, Map) and pa.types.is_map(column.type):
        keys = _cast(column.keys, table_type.key_type) if column.keys.type != table_type.key_type else column.keys
        items = _object_column(column.items, bare.value, table_type.item_type, name, True)
        return pa.MapArray.from_arrays(_offsets(column), keys, items, type=table_type, mask=_mask(column))
    if isinstance(bare, Tuple) and pa.types.is_struct(column.type) and column.type.num_fields == table_type.num_fields:
        fields = [table_type.field(i) for i in range(table_type.num_fields)]
        incoming = {column.type.field(i).name: child for i, child in enumerate(column.flatten())}
        by_position = sorted(incoming) != sorted(f.name for f in fields)
        children = [_object_column(column.flatten()[i] if by_position else incoming[field.name], element, field.type,
                                   name, True)
                    for i, (element, field) in enumerate(zip(bare.elements, fields, strict=True))]
        return pa.StructArray.from_arrays(children, fields=fields, mask=_mask(column))
    raise SchemaMismatchError(f"column {name!r} ({dt.to_clickhouse()}): cannot store {column.type} values")


def _is_variant_struct(arrow_type: pa.DataType) -> bool:
    """Spark's Arrow form of a variant, tagged (a column) or not."""
    return (pa.types.is_struct(arrow_type) and arrow_type.num_fields == 2
            and sorted(arrow_type.field(i).name for i in range(2)) == ["metadata", "value"])


def _cast(column: pa.Array, target: pa.DataType) -> pa.Array:
    """A safe cast; structs field by field, so a NULL struct (a NULL Variant, or a Variant whose
    Tuple field is unset) may hide NULLs under children the target declares non-nullable, which
    Arrow's own struct cast refuses."""
    if not (pa.types.is_struct(target) and pa.types.is_struct(column.type)):
        return column.cast(target, safe=True)
    names = [column.type.field(i).name for i in range(column.type.num_fields)]
    if sorted(names) != sorted(target.field(i).name for i in range(target.num_fields)):
        return column.cast(target, safe=True)
    children = dict(zip(names, column.flatten(), strict=True))
    fields = [target.field(i) for i in range(target.num_fields)]
    mask = column.is_null() if column.null_count else None
    return pa.StructArray.from_arrays([_cast(children[f.name], f.type) for f in fields], fields=fields, mask=mask)


def _is_nested(arrow_type: pa.DataType) -> bool:
    return pa.types.is_list(arrow_type) or pa.types.is_map(arrow_type) or pa.types.is_struct(arrow_type)


def _empty_value(arrow_type: pa.DataType) -> pa.Scalar:
    if pa.types.is_struct(arrow_type):
        return pa.scalar({arrow_type.field(i).name: None for i in range(arrow_type.num_fields)}, arrow_type)
    return pa.scalar([], arrow_type)

"""PARTITION BY keys: which columns they read, the types of their values, evaluation, partition ids.

A part's directory name starts with its partition id, and ClickHouse refuses parts whose id is not
the one it computes itself, so `partition_id` follows ClickHouse exactly (format_spec/partition_ids.md):
all-integer keys render as decimals joined by '-', a Date as YYYYMMDD; anything else is the hex of
ClickHouse's SipHash-2-4-128 over each value's type tag and bytes.
"""

from __future__ import annotations

import datetime as dt
import decimal
import ipaddress
import struct
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from spark_mergetree.errors import ExpressionError, UnsupportedError
from spark_mergetree.expressions.functions import (
    SUPPORTED_FUNCTIONS,
    TypeInfo,
    apply_function,
    result_type,
    type_info,
)
from spark_mergetree.expressions.predicate import Column, Expr, Func, Literal, parse_expression
from spark_mergetree.format.siphash import siphash128_clickhouse
from spark_mergetree.format.types import Decimal, FixedString

# Tags ClickHouse hashes before each value (its Field type numbers).
_TAG_NULL, _TAG_UINT64, _TAG_INT64, _TAG_UINT128, _TAG_INT128 = 0, 1, 2, 4, 5
_TAG_STRING, _TAG_DECIMAL32, _TAG_DECIMAL64, _TAG_DECIMAL128, _TAG_DECIMAL256 = 16, 19, 20, 21, 23
_TAG_UINT256, _TAG_INT256, _TAG_IPV4 = 24, 25, 30

_UNSIGNED_FIELD_TYPES = {"UInt8", "UInt16", "UInt32", "UInt64", "Bool", "Date", "DateTime", "IPv4"}
_SIGNED_FIELD_TYPES = {"Int8", "Int16", "Int32", "Int64", "Date32", "Enum8", "Enum16"}
_EPOCH = dt.date(1970, 1, 1)


@dataclass(frozen=True)
class PartitionGroup:
    """Rows of a table that fall into one partition."""

    values: tuple[object, ...]
    partition_id: str
    row_indices: np.ndarray  # int64 positions in the original table, ascending


@dataclass(frozen=True)
class PartitionKey:
    """A table's PARTITION BY expression, resolved against the table's columns."""

    expression: str | None
    elements: tuple[Expr, ...]
    columns: tuple[str, ...]  # columns the key reads, in order of first use: one minmax_<col>.idx each
    column_types: tuple[str, ...]
    result_types: tuple[str, ...]  # ClickHouse type of each key value, as partition.dat stores it

    @classmethod
    def parse(cls, expression: str | None, schema: Mapping[str, str]) -> PartitionKey:
        """Resolve a PARTITION BY text (None or 'tuple()' for an unpartitioned table) against name → type."""
        if expression is None or not expression.strip():
            return cls(None, (), (), (), ())
        tree = parse_expression(expression)
        elements = tree.args if isinstance(tree, Func) and tree.name == "tuple" else (tree,)
        if not elements:
            return cls(None, (), (), (), ())
        columns: list[str] = []
        bound: list[Expr] = []
        types: list[str] = []
        for element in elements:
            element, element_type = _resolve_element(element, schema, expression)
            for name in _element_columns(element):
                if name not in columns:
                    columns.append(name)
            bound.append(element)
            types.append(element_type)
        return cls(expression.strip(), tuple(bound), tuple(columns), tuple(schema[c] for c in columns), tuple(types))

    @property
    def is_partitioned(self) -> bool:
        return bool(self.elements)

    def evaluate(self, table: pa.Table) -> list[pa.Array]:
        """The key values of every row: one array per key element."""
        return [_evaluate(element, table) for element in self.elements]

    def partition_id(self, values: Sequence[object]) -> str:
        """ClickHouse's partition id of one tuple of key values (Python values, one per element)."""
        if len(values) != len(self.result_types):
            raise ExpressionError(
                f"partition key {self.expression!r} has {len(self.result_types)} values, got {len(values)}: {values!r}"
            )
        if not self.result_types:
            return "all"
        fields = [_field(value, type_text) for value, type_text in zip(values, self.result_types, strict=True)]
        if all(number is not None for _tag, _payload, number in fields):
            rendered = []
            for (_tag, _payload, number), type_text in zip(fields, self.result_types, strict=True):
                if type_info(type_text).base == "Date":
                    day = _EPOCH + dt.timedelta(days=number)  # type: ignore[arg-type]
                    rendered.append(f"{day.year:04d}{day.month:02d}{day.day:02d}")
                else:
                    rendered.append(str(number))
            return "-".join(rendered)
        data = b"".join(bytes([tag]) + payload for tag, payload, _number in fields)
        return siphash128_clickhouse(data).hex()

    def group_rows(self, table: pa.Table) -> list[PartitionGroup]:
        """Split a table's rows by partition: groups sorted by partition id, rows in table order."""
        all_rows = np.arange(table.num_rows, dtype=np.int64)
        if not self.elements:
            return [PartitionGroup((), "all", all_rows)] if table.num_rows else []
        arrays = self.evaluate(table)
        names = [f"k{i}" for i in range(len(arrays))]
        keyed = pa.table({**dict(zip(names, arrays, strict=True)), "__row": pa.array(all_rows)})
        grouped = keyed.group_by(names, use_threads=False).aggregate([("__row", "list")])
        rows_lists = grouped.column("__row_list").combine_chunks()
        offsets = np.asarray(rows_lists.offsets)
        flat_rows = np.asarray(rows_lists.values)
        key_columns = [grouped.column(name).to_pylist() for name in names]
        groups = []
        for g in range(grouped.num_rows):
            values = tuple(column[g] for column in key_columns)
            rows = np.sort(flat_rows[offsets[g]:offsets[g + 1]])
            groups.append(PartitionGroup(values, self.partition_id(values), rows))
        groups.sort(key=lambda group: group.partition_id)
        return groups


def _evaluate(element: Expr, table: pa.Table) -> pa.Array:
    """Values of one resolved key element (a column, or key functions over one, nested)."""
    if isinstance(element, Column):
        return _column(table, element.name)
    assert isinstance(element, Func)
    source = element.args[0]
    constant = element.args[1].value if len(element.args) > 1 else None  # type: ignore[attr-defined]
    return apply_function(element.name, _evaluate(source, table), source.type or "", constant,  # type: ignore[attr-defined]
                          in_partition_key=True)


def _column(table: pa.Table, name: str) -> pa.Array:
    if name not in table.column_names:
        raise ExpressionError(f"partition key reads column {name!r}, which the data lacks (has: {', '.join(table.column_names)})")
    array = table.column(name).combine_chunks()
    return array.dictionary_decode() if pa.types.is_dictionary(array.type) else array


def _element_columns(element: Expr) -> list[str]:
    if isinstance(element, Column):
        return [element.name]
    assert isinstance(element, Func)
    return [name for arg in element.args if isinstance(arg, (Column, Func)) for name in _element_columns(arg)]


def _resolve_element(element: Expr, schema: Mapping[str, str], expression: str) -> tuple[Expr, str]:
    def resolve(node: Expr, inside: str | None) -> tuple[Expr, str]:
        """`node` typed: a column, or a key function of a resolved argument (`intHash32(x) % 4`)."""
        if isinstance(node, Column):
            if node.name not in schema:
                raise ExpressionError(
                    f"partition key {expression!r} reads unknown column {node.name!r}; known columns: {', '.join(schema)}"
                )
            return Column(node.name, schema[node.name]), schema[node.name]
        if isinstance(node, Func) and node.name in SUPPORTED_FUNCTIONS and node.args:
            source, source_type = resolve(node.args[0], node.name)
            constant = None
            if len(node.args) == 2:
                second = node.args[1]
                if not isinstance(second, Literal) or not isinstance(second.value, int) or isinstance(second.value, bool):
                    raise UnsupportedError(f"partition key {expression!r}: {node.name}() needs an integer constant")
                constant = second.value
            elif len(node.args) > 2:
                raise ExpressionError(f"partition key {expression!r}: too many arguments to {node.name}()")
            node_type = result_type(node.name, source_type, constant, in_partition_key=True)
            return Func(node.name, (source, *node.args[1:]), node_type), node_type
        if inside is not None:
            raise UnsupportedError(f"partition key {expression!r}: expected a column or a key function inside "
                                   f"{inside}(), got {node!r}")
        raise UnsupportedError(
            f"partition key {expression!r}: {node!r} is not supported; use columns, tuples and "
            f"{', '.join(sorted(SUPPORTED_FUNCTIONS))} (of columns or of each other), or x % N"
        )

    resolved, element_type = resolve(element, None)
    base = type_info(element_type).base
    if base.startswith("Float") or base == "BFloat16":
        raise ExpressionError(f"partition key {expression!r}: floating point partition keys are not supported (ClickHouse refuses them)")
    return resolved, element_type


_DECIMAL_TAGS = {4: _TAG_DECIMAL32, 8: _TAG_DECIMAL64, 16: _TAG_DECIMAL128, 32: _TAG_DECIMAL256}


def _field(value: object, type_text: str) -> tuple[int, bytes, int | None]:
    """(hash tag, hashed payload, integer value or None) of one key value, as ClickHouse's Field holds it."""
    info = type_info(type_text)
    base = info.base
    if value is None:
        if not info.nullable:
            raise ExpressionError(f"NULL partition value for non-Nullable type {type_text}")
        return _TAG_NULL, b"", None
    try:
        if base in _UNSIGNED_FIELD_TYPES or base in _SIGNED_FIELD_TYPES:
            number = _integer_value(value, info)
            if base == "IPv4":
                # Written as a number in all-integer ids, but hashed with its own tag and 4 bytes.
                return _TAG_IPV4, struct.pack("<I", number), number
            if base in _UNSIGNED_FIELD_TYPES:
                return _TAG_UINT64, struct.pack("<Q", number), number
            return _TAG_INT64, struct.pack("<q", number), number
        if base in ("UInt128", "Int128", "UInt256", "Int256"):
            width = 16 if base.endswith("128") else 32
            tag = {"UInt128": _TAG_UINT128, "Int128": _TAG_INT128, "UInt256": _TAG_UINT256, "Int256": _TAG_INT256}[base]
            return tag, int(value).to_bytes(width, "little", signed=base.startswith("Int")), None  # type: ignore[call-overload]
        if base == "UUID":
            as_uuid = value if isinstance(value, uuid.UUID) else (
                uuid.UUID(bytes=value) if isinstance(value, bytes) else uuid.UUID(str(value)))
            raw = as_uuid.bytes
            # ClickHouse keeps a UUID as two UInt64 halves, each little-endian, first half first.
            return _TAG_UINT128, raw[7::-1] + raw[15:7:-1], None
        if base == "IPv6":
            # Hashed like a 16-byte String holding the address in network byte order.
            raw = value if isinstance(value, bytes) else ipaddress.IPv6Address(value).packed
            return _TAG_STRING, struct.pack("<Q", len(raw)) + raw, None
        if base in ("String", "FixedString"):
            data = value.encode() if isinstance(value, str) else bytes(value)  # type: ignore[call-overload]
            if isinstance(info.data_type, FixedString):
                data = data.ljust(info.data_type.length, b"\0")
            return _TAG_STRING, struct.pack("<Q", len(data)) + data, None
        if isinstance(info.data_type, Decimal):
            width = info.data_type.width
            unscaled = int(decimal.Decimal(str(value)).scaleb(info.data_type.scale).to_integral_value())
            return _DECIMAL_TAGS[width], unscaled.to_bytes(width, "little", signed=True), None
        if base == "DateTime64":
            ticks = _datetime64_ticks(value, info.datetime64_precision)
            return _TAG_DECIMAL64, struct.pack("<q", ticks), None
    except (TypeError, ValueError, OverflowError, decimal.InvalidOperation) as error:
        raise ExpressionError(f"partition value {value!r} does not fit type {type_text}: {error}") from None
    raise UnsupportedError(f"partition keys of type {type_text} are not supported")


def _integer_value(value: object, info: TypeInfo) -> int:
    base = info.base
    if base in ("Date", "Date32"):
        if isinstance(value, dt.datetime):
            value = value.date()
        if isinstance(value, dt.date):
            return (value - _EPOCH).days
    if base == "DateTime" and isinstance(value, dt.datetime):
        aware = value if value.tzinfo else value.replace(tzinfo=dt.timezone.utc)
        return int(aware.timestamp())
    if base in ("Enum8", "Enum16") and isinstance(value, str):
        mapping = info.enum_values()
        if value not in mapping:
            raise ValueError(f"{value!r} is not one of {sorted(mapping)}")
        return mapping[value]
    if base == "IPv4" and not isinstance(value, int):
        return int(ipaddress.IPv4Address(value))
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    raise TypeError(f"expected an integer-like value, got {type(value).__name__}")


def _datetime64_ticks(value: object, precision: int) -> int:
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        return int(value)
    if isinstance(value, dt.datetime):
        aware = value if value.tzinfo else value.replace(tzinfo=dt.timezone.utc)
        delta = aware - dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
        micros = (delta.days * 86400 + delta.seconds) * 10**6 + delta.microseconds
        return micros * 10**precision // 10**6 if precision <= 6 else micros * 10 ** (precision - 6)
    raise TypeError(f"expected a datetime or integer ticks, got {type(value).__name__}")

"""A table's definition and settings, and everything derived from them once.

The definition is a ClickHouse CREATE/ATTACH TABLE statement (kept in `_mergetree/table.sql`,
or in the catalog's metadata file). Settings ClickHouse knows (index_granularity, ...) live in the
statement's SETTINGS clause; settings only we use (codec, merge policy, storage policy, retention)
live in `_mergetree/settings.json`, so ClickHouse can always attach the statement.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from spark_mergetree.engine import projections
from spark_mergetree.engine.engines import MergingEngine, engine_of
from spark_mergetree.errors import ExpressionError, InvalidOptionError, SchemaMismatchError, UnsupportedError
from spark_mergetree.expressions.ddl import (
    CLICKHOUSE_ONLY_SETTINGS,
    UNDERSTOOD_SETTINGS,
    Projection,
    TableDefinition,
    check_settings,
    known_settings_text,
)
from spark_mergetree.expressions.key_condition import key_columns_for
from spark_mergetree.expressions.partition_key import PartitionKey
from spark_mergetree.expressions.skip_index import SkipIndex, skip_indexes_of
from spark_mergetree.expressions.sort_key import (
    key_element_arrays,
    key_element_types,
    sort_indices,
    sorting_key_columns,
)
from spark_mergetree.expressions.ttl import TTL_FILE, TTLRule, merged_ttl_file, ttl_file, ttl_rules
from spark_mergetree.format import granularity
from spark_mergetree.format.aggregate_states import require_known_states
from spark_mergetree.format.compression_codecs import CodecChain, parse_codec, parse_column_codec
from spark_mergetree.format.numpy_views import as_numpy
from spark_mergetree.format.part import PartFiles
from spark_mergetree.format.part_writer import WriterSettings
from spark_mergetree.format.skip_index_writer import IndexSpec
from spark_mergetree.format.types import parse_type, to_arrow, to_arrow_field

META_DIR = "_mergetree"
STATEMENT_FILE = "table.sql"
SETTINGS_FILE = "settings.json"

# Settings of ours, with defaults; anything else in `settings=` must be a ClickHouse setting.
ENGINE_SETTINGS: dict[str, Any] = {
    "codec": "LZ4",  # compression of column streams: LZ4, LZ4HC(level), ZSTD(level), NONE
    "auto_merge": True,  # merge small parts of a partition after inserts
    "merge_parts_threshold": 8,  # merge when a partition has more active parts than this
    "max_parts_to_merge": 10,  # at most this many parts in one merge
    "max_merged_rows": 50_000_000,  # do not grow parts beyond this by automatic merges
    "old_parts_lifetime": 480,  # seconds removed parts are kept for readers and time travel
    "storage_policy": None,  # a storage policy dict (see storage/policy.py); None: the table dir
    "coordinator": None,  # coordinator URL; None: the process default
}

# ClickHouse's MergeTree settings a new table may have: expressions/ddl.py lists them (those we
# understand, and those only ClickHouse uses and we write into the statement untouched).


def _parse_bool(name: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise InvalidOptionError(f"setting {name!r} must be true or false, got {value!r}")


def _parse_int(name: str, value: Any, minimum: int = 0) -> int:
    try:
        number = int(str(value).strip())
    except ValueError:
        raise InvalidOptionError(f"setting {name!r} must be an integer, got {value!r}") from None
    if number < minimum:
        raise InvalidOptionError(f"setting {name!r} must be >= {minimum}, got {number}")
    return number


def split_settings(settings: Mapping[str, Any] | None) -> tuple[dict[str, str], dict[str, Any]]:
    """(ClickHouse settings for the statement, our engine settings) from one user mapping, every
    name and value checked: a new table's settings all pass through here."""
    clickhouse: dict[str, Any] = {}
    ours: dict[str, Any] = {}
    for key, value in (settings or {}).items():
        name = str(key).lower()
        if name in ENGINE_SETTINGS:
            ours[name] = value
        elif name in UNDERSTOOD_SETTINGS or name in CLICKHOUSE_ONLY_SETTINGS:
            clickhouse[name] = value
        else:
            known = [*ENGINE_SETTINGS, *UNDERSTOOD_SETTINGS, *CLICKHOUSE_ONLY_SETTINGS]
            close = difflib.get_close_matches(name, known, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise InvalidOptionError(f"unknown setting {name!r}{hint}; settings of this engine: "
                                     f"{', '.join(ENGINE_SETTINGS)}; ClickHouse MergeTree settings, "
                                     f"{known_settings_text()}")
    return check_settings(clickhouse), validate_engine_settings(ours)


def validate_engine_settings(values: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(values)
    for name, value in values.items():
        if name not in ENGINE_SETTINGS:
            raise InvalidOptionError(f"unknown engine setting {name!r}; valid: {', '.join(ENGINE_SETTINGS)}")
        if name == "codec":
            out[name] = parse_codec(str(value)).setting
        elif name == "auto_merge":
            out[name] = _parse_bool(name, value)
        elif name in ("merge_parts_threshold", "max_parts_to_merge", "max_merged_rows"):
            out[name] = _parse_int(name, value, minimum=2 if name != "max_merged_rows" else 1)
        elif name == "old_parts_lifetime":
            out[name] = _parse_int(name, value)
        elif name == "storage_policy" and isinstance(value, str):
            try:
                out[name] = json.loads(value)
            except ValueError:
                raise InvalidOptionError(f"setting 'storage_policy' must be a JSON object, got {value!r}") from None
    return out


@dataclass(frozen=True)
class TableMetadata:
    """The definition plus engine settings, with derived views used on every read and write."""

    definition: TableDefinition
    engine_settings: Mapping[str, Any] = field(default_factory=dict)

    def setting(self, name: str) -> Any:
        return self.engine_settings.get(name, ENGINE_SETTINGS[name])

    @cached_property
    def columns(self) -> list[tuple[str, str]]:
        """(name, ClickHouse type) of every stored column, in table order."""
        return list(self.definition.stored_schema.items())

    @cached_property
    def column_types(self) -> dict[str, str]:
        return dict(self.columns)

    @cached_property
    def arrow_schema(self) -> pa.Schema:
        return pa.schema([to_arrow_field(name, parse_type(type_text)) for name, type_text in self.columns])

    @cached_property
    def order_by(self) -> list[str]:
        """ORDER BY elements (column names or expressions such as `toStartOfMonth(d)`)."""
        return self._checked_key(self.definition.order_by, "ORDER BY")

    @cached_property
    def merging_engine(self) -> MergingEngine | None:
        """What merges and FINAL reads do to rows of equal keys (None: plain MergeTree)."""
        return engine_of(self.definition)

    @cached_property
    def merge_projection_mode(self) -> str | None:
        """What merges do to the projections of a table whose engine combines rows: its setting
        deduplicate_merge_projection_mode ('throw', ClickHouse's default, when absent; engine/merge.py
        says what each value does). None for a plain MergeTree, whose merges merge them."""
        if self.merging_engine is None:
            return None
        return str(dict(self.definition.settings).get("deduplicate_merge_projection_mode", "throw"))

    @cached_property
    def sorting_key(self) -> list[str]:
        """The order rows are stored in: ORDER BY, plus the version of VersionedCollapsingMergeTree
        (ClickHouse appends it to the sorting key; the primary key stays ORDER BY's)."""
        suffix = self.merging_engine.sort_suffix if self.merging_engine else ()
        return self.order_by + [c for c in suffix if c not in self.order_by]

    @cached_property
    def primary_key(self) -> list[str]:
        return self._checked_key(self.definition.primary_key or self.definition.order_by, "PRIMARY KEY")

    @cached_property
    def primary_key_types(self) -> list[tuple[str, str]]:
        """(element, ClickHouse type) of each PRIMARY KEY element, as the sparse index stores it."""
        return key_columns_for(self.primary_key, self.column_types)

    def _checked_key(self, elements: Sequence[str], clause: str) -> list[str]:
        try:
            types = key_element_types(elements, self.column_types)
        except ExpressionError as exc:
            raise SchemaMismatchError(f"{clause} ({', '.join(elements)}): {exc}") from exc
        untyped = [e for e, t in zip(elements, types) if t is None]
        if untyped:
            raise SchemaMismatchError(
                f"{clause} element(s) {', '.join(untyped)}: only columns and the functions of partition keys "
                "(toYYYYMM, toDate, intDiv, ...) are supported in keys")
        return list(elements)

    @cached_property
    def skip_indexes(self) -> list[SkipIndex]:
        """The statement's data-skipping indexes (`INDEX name expr TYPE ... GRANULARITY g`)."""
        try:
            return skip_indexes_of(self.definition.indexes, self.column_types)
        except ExpressionError as exc:
            raise SchemaMismatchError(f"table {self.definition.name!r}: {exc}") from exc

    @cached_property
    def projections(self) -> list[Projection]:
        """The statement's PROJECTION elements that parts of this version carry (engine/projections.py);
        `unbuildable_projections` names the others."""
        return [p for p in self._declared_projections if p.name not in self.unbuildable_projections]

    @cached_property
    def _declared_projections(self) -> list[Projection]:
        try:
            return projections.declared_projections(self.definition.indexes)
        except ExpressionError as exc:
            raise SchemaMismatchError(f"table {self.definition.name!r}: {exc}") from exc

    @cached_property
    def unbuildable_projections(self) -> dict[str, str]:
        """Name → why, for declared projections this version cannot write (parts holding them are
        not merged: the result would lose them)."""
        return {p.name: reason for p in self._declared_projections
                if (reason := projections.why_unbuildable(p, self.column_types, self.merging_engine is not None,
                                                          self.merge_projection_mode))}

    def of_projection(self, projection: Projection) -> TableMetadata:
        """A normal projection's part described as a table's: its columns (codecs kept), ordered by
        its ORDER BY, no partition, no engine, no indexes; the table's settings."""
        names = projection.columns([n for n, _ in self.columns])
        definition = replace(self.definition, columns=tuple(self.definition.column(n) for n in names),
                             engine="MergeTree", engine_args=(), order_by=tuple(projection.order_by),
                             primary_key=(), explicit_primary_key=False, partition_by=None, indexes=(),
                             sample_by=None, ttl=None, order_by_text=None, primary_key_text=None)
        return TableMetadata(definition, self.engine_settings)

    def add_projections(self, files: PartFiles, rows: Callable[[Projection, list[str]], pa.Table],
                        built: Mapping[str, PartFiles] | None = None) -> PartFiles:
        """A finished part's files with the table's projections added (`rows(projection, names)`:
        the rows to build it from, see engine/projections.py; `built`: projection parts already
        written, by name). A table declaring a projection this version cannot build gets no new
        parts (they would lack it): UnsupportedError naming it."""
        if self.unbuildable_projections:
            name, reason = next(iter(self.unbuildable_projections.items()))
            raise UnsupportedError(f"table {self.definition.name!r}: projection {name!r}: {reason}; parts written "
                                   "here would lack it (write to this table with ClickHouse)")
        return projections.add_projections(files, self.projections, rows, self.columns, self.writer_settings,
                                           dict(self.definition.settings), built or {})

    @cached_property
    def _ttl(self) -> tuple[list[TTLRule], str | None]:
        try:
            rules = ttl_rules(self.definition.ttl, {c.name: c.ttl for c in self.definition.columns if c.ttl})
            # Every rule computed over no rows: an expression that cannot be is refused before any write.
            ttl_file(rules, lambda names: pa.table({n: pa.array([], to_arrow(parse_type(self.column_types[n])))
                                                   for n in names}), self.column_types)
            return rules, None
        except (UnsupportedError, ExpressionError) as error:
            return [], str(error)

    @property
    def ttl_refusal(self) -> str | None:
        """Why parts cannot be written into this table (its TTL holds a rule a part cannot record)."""
        return self._ttl[1]

    def _writable_ttl_rules(self) -> list[TTLRule]:
        """The table's TTL rules, or UnsupportedError when a part written here could not record them."""
        rules, refusal = self._ttl
        if refusal is not None:
            raise UnsupportedError(f"table {self.definition.name!r}: {refusal}")
        return rules

    @property
    def ttl_rules(self) -> list[TTLRule]:
        """The table's TTL rules (UnsupportedError when parts written here could not record them)."""
        return self._writable_ttl_rules()

    def ttl_of(self, rows: Callable[[list[str]], pa.Table], expired_at: int | None = None) -> bytes | None:
        """The `ttl.txt` of the table's TTL rules over a part's rows (`rows(names)`: those columns
        of them; expressions/ttl.py), None when the table has no TTL. `expired_at`: the rows are
        what a merge at that time kept (column rules count the values it did not reset)."""
        return ttl_file(self._writable_ttl_rules(), rows, self.column_types, expired_at)

    def with_ttl(self, files: PartFiles, rows: Callable[[list[str]], pa.Table],
                 expired_at: int | None = None) -> PartFiles:
        """A finished part's files with its `ttl.txt` (`ttl_of`)."""
        data = self.ttl_of(rows, expired_at)
        return files if data is None else files.with_file(TTL_FILE, data)

    def with_merged_ttl(self, files: PartFiles, sources: Sequence[bytes | None]) -> PartFiles:
        """A merged part's files with the `ttl.txt` its sources' give (`merged_ttl_file`)."""
        data = merged_ttl_file(sources) if self._writable_ttl_rules() else None
        return files if data is None else files.with_file(TTL_FILE, data)

    @cached_property
    def partition_key(self) -> PartitionKey:
        return PartitionKey.parse(self.definition.partition_by, self.column_types)

    @cached_property
    def writer_settings(self) -> WriterSettings:
        s = self.definition.settings
        return WriterSettings(
            index_granularity=int(s.get("index_granularity", granularity.DEFAULT_INDEX_GRANULARITY)),
            index_granularity_bytes=int(s.get("index_granularity_bytes", granularity.DEFAULT_INDEX_GRANULARITY_BYTES)),
            codec=parse_codec(str(self.setting("codec"))),
            column_codecs=tuple((column.name, self._column_codec(column.name, column.codec, column.type))
                                for column in self.definition.columns if column.codec and column.is_stored),
            # 0 (ClickHouse's own default for these table settings) means the default block sizes.
            min_compress_block_size=int(s.get("min_compress_block_size", 0)) or WriterSettings.min_compress_block_size,
            max_compress_block_size=int(s.get("max_compress_block_size", 0)) or WriterSettings.max_compress_block_size,
            skip_indexes=tuple(IndexSpec(i.name, i.type, i.columns, i.arguments, i.granularity)
                               for i in self.skip_indexes if i.usable),
        )

    @staticmethod
    def _column_codec(name: str, codec: str, type_text: str) -> CodecChain:
        """A column's CODEC(...) as the statement has it (no CREATE-time checks: the table exists)."""
        try:
            return parse_column_codec(codec, parse_type(type_text), check=False)
        except (InvalidOptionError, UnsupportedError) as error:
            raise type(error)(f"column {name!r}: {error}") from None

    def sort(self, table: pa.Table, rows: np.ndarray | None = None) -> pa.Table:
        """Rows in the order ClickHouse stores them: by ORDER BY, ClickHouse's comparison. With
        `rows` (positions), only those rows: the order is found on the key columns alone and the
        whole table is taken once (a take copies every column; a partition's rows taken and then
        sorted would copy them twice)."""
        order = self.sort_order(table, rows)
        if rows is not None:
            return table.take(pa.array(np.asarray(rows) if order is None else np.asarray(rows)[order]))
        return table if order is None else table.take(pa.array(order))

    def sort_order(self, table: pa.Table, rows: np.ndarray | None = None) -> np.ndarray | None:
        """The order `sort` puts the rows in: positions into `rows` (or into the table), None when
        they are in order already."""
        if rows is not None:
            if not self.sorting_key or len(rows) < 2:
                return None
            keys = table.select([name for name in table.column_names if name in self.sorting_columns])
            keys = keys.take(pa.array(rows))
        else:
            keys = table
            if not self.sorting_key or table.num_rows < 2:
                return None
        if self._already_sorted(keys):
            return None
        return as_numpy(sort_indices(self.sorting_key, keys, self.column_types))

    @cached_property
    def sorting_columns(self) -> set[str]:
        """The columns the sorting key reads."""
        return sorting_key_columns(self.sorting_key, self.column_types)

    def _already_sorted(self, table: pa.Table) -> bool:
        """Cheap check for the common case of a numeric first key column already in order (Spark
        tasks often hand over sorted ranges): then sorting is skipped. Only decides when it can."""
        first = self.sorting_key[0].strip("`")
        if first not in self.column_types or first not in table.column_names:
            return False
        column = table.column(first)
        if column.null_count or not (pa.types.is_integer(column.type) or pa.types.is_floating(column.type)
                                     or pa.types.is_date(column.type) or pa.types.is_timestamp(column.type)):
            return False
        values = as_numpy(column)
        if len(self.sorting_key) == 1:
            return bool((values[1:] >= values[:-1]).all())
        # Strictly increasing first key: the later key columns cannot reorder anything.
        return bool((values[1:] > values[:-1]).all())

    def primary_key_values(self, table: pa.Table) -> list[tuple[str, pa.Array]]:
        """(type, values) of each PRIMARY KEY element over sorted rows: what primary.idx samples."""
        arrays = key_element_arrays(self.primary_key, table, self.column_types)
        return [(type_text, array) for (_, type_text), array in zip(self.primary_key_types, arrays)]

    def validate_keys(self) -> None:
        """Check, before a table exists, that every insert can compute its keys: the sort and
        primary keys order and the partition key groups values of the columns' types (computed
        over two rows of default values, as an insert would). Raises UnsupportedError naming the
        clause, the key element and its type."""
        from spark_mergetree.format.serialization import default_column

        _ = self.order_by, self.primary_key, self.partition_key, self.writer_settings, self.merging_engine
        projections.check_declared(self._declared_projections, self.column_types, self.merging_engine is not None,
                                   self.merge_projection_mode)
        for name, type_text in self.columns:
            require_known_states(name, parse_type(type_text))
        probe = pa.table({name: default_column(parse_type(type_text), 2) for name, type_text in self.columns})
        unorderable = (pa.ArrowTypeError, pa.ArrowNotImplementedError)
        for clause, elements in (("ORDER BY", self.order_by), ("PRIMARY KEY", self.primary_key)):
            for element, element_type in zip(elements, key_element_types(elements, self.column_types), strict=True):
                try:
                    sort_indices([element], probe, self.column_types)
                except unorderable as error:
                    raise UnsupportedError(
                        f"{clause}: {element} ({element_type}) cannot be a sort key: its values cannot be "
                        f"ordered ({error}); sort by other columns") from None
        try:
            self.partition_key.group_rows(probe)
        except unorderable as error:
            raise UnsupportedError(
                f"PARTITION BY: {self.definition.partition_by} cannot partition a table: its values cannot be "
                f"compared ({error})") from None
        self._check_move_targets()

    def _check_move_targets(self) -> None:
        """A TTL move's disk or volume must be in the table's storage policy (ClickHouse refuses the
        CREATE otherwise: BAD_TTL_EXPRESSION)."""
        from spark_mergetree.storage.policy import StoragePolicy

        config = self.setting("storage_policy")
        policy = StoragePolicy.from_dict(config) if config else StoragePolicy.single(".")
        for rule in self._ttl[0]:
            if rule.section == "moves" and rule.target is not None:
                policy.move_target(rule.target)

    def with_definition(self, definition: TableDefinition) -> TableMetadata:
        return replace(self, definition=definition)


def read_engine_settings(table_dir: Path) -> dict[str, Any]:
    path = table_dir / META_DIR / SETTINGS_FILE
    try:
        raw = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except ValueError as exc:
        raise InvalidOptionError(f"{path}: not valid JSON ({exc})") from exc
    return validate_engine_settings({k: v for k, v in raw.items() if k in ENGINE_SETTINGS})

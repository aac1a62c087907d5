"""MergeTreeTable: the user-facing face of one table (create, open, read, write, merge, check).

A table directory holds ClickHouse part directories (plus `format_version.txt` and `detached/`, as
ClickHouse lays out a table's data) and our own `_mergetree/` folder: `table.sql` (the table's
ATTACH TABLE statement, the same text the catalog keeps), `settings.json` (engine settings that are
not ClickHouse's), and `log/` (the commit log that decides which parts are visible; see txn/).

This class holds a table's handles (metadata, storage, commit log, coordinator, part readers) and
delegates the work: directories.py (creating and deleting table directories), staging.py and
insert.py (writing staged parts), commit.py (publishing them: the commit protocol), select.py
(pruning and reading), optimize.py and merge.py (running, choosing and writing merges), check.py
(CHECK TABLE); txn/ decides visibility, storage/ places bytes.
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
import uuid as uuid_module
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeAlias, cast

import numpy as np
import pyarrow as pa

from spark_mergetree.engine import background, clickhouse_ddl, engines, patch_versions, staging
from spark_mergetree.engine import check as checking
from spark_mergetree.engine import clone as cloning
from spark_mergetree.engine import commit as committing
from spark_mergetree.engine import indexes as indexing
from spark_mergetree.engine import insert as inserting
from spark_mergetree.engine import mutations as mutating
from spark_mergetree.engine import optimize as optimizing
from spark_mergetree.engine import select as selecting
from spark_mergetree.engine.check import CheckReport
from spark_mergetree.engine.commit import (
    PARTITION_OVERWRITE_MODES,
    WRITE_MODES,
    PartitionOverwriteMode,
    WriteMode,
)
from spark_mergetree.engine.directories import TableDirectories, remove_table_directory, write_table_directory
from spark_mergetree.engine.merge import MergeCandidate
from spark_mergetree.engine.metadata import (
    META_DIR,
    STATEMENT_FILE,
    TableMetadata,
    read_engine_settings,
    split_settings,
)
from spark_mergetree.engine.patches import PatchSet
from spark_mergetree.errors import (
    FormatError,
    InvalidOptionError,
    SchemaMismatchError,
    SerializationError,
    TableExistsError,
    TableNotFoundError,
    UnsupportedError,
)
from spark_mergetree.expressions.ddl import (
    ColumnDefinition,
    TableDefinition,
    build_definition,
    flatten_nested,
    format_attach,
    key_column_names,
    parse_create,
    with_created_versions,
)
from spark_mergetree.expressions.predicate import Expr, columns_of, filter_table, parse_expression
from spark_mergetree.expressions.sort_key import sort_indices
from spark_mergetree.format.aggregate_states import require_known_states
from spark_mergetree.format.compression_codecs import split_codec_clause
from spark_mergetree.format.part import PartFiles
from spark_mergetree.format.part_info import PartInfo
from spark_mergetree.format.part_reader import PartReader
from spark_mergetree.format.types import from_arrow, parse_column_type
from spark_mergetree.storage import transfer
from spark_mergetree.storage.location import local_path
from spark_mergetree.storage.object_store import OBJECT_SCHEMES, url_scheme
from spark_mergetree.storage.part_store import PartStore, RebuildReport, ScrubReport
from spark_mergetree.storage.policy import StoragePolicy
from spark_mergetree.txn import Coordinator, TableLog, Transaction, coordinator_from_url

SchemaLike: TypeAlias = "pa.Schema | Sequence[tuple[str, str]] | Mapping[str, str]"
#: Table classes for locations that are URLs of remote stores, by canonical scheme (object_table.py
#: registers ObjectStoreTable for "s3", "gs" and "abfss").
URL_TABLES: dict[str, Any] = {}
_log = logging.getLogger(__name__)
#: The table's statement, as a table file of its part storage.
STATEMENT_PATH = f"{META_DIR}/{STATEMENT_FILE}"


def _url_table(path: str | os.PathLike[str]) -> Any:
    """The table class for an object-store URL (None for a local path or file:// URL)."""
    scheme = url_scheme(path) if isinstance(path, str) else None
    if scheme in OBJECT_SCHEMES:
        return URL_TABLES[OBJECT_SCHEMES[scheme]]
    return None


@dataclass(frozen=True)
class PartSummary:
    """One visible part, as `MergeTreeTable.parts()` lists it (like system.parts)."""

    name: str
    partition_id: str
    min_block: int
    max_block: int
    level: int
    rows: int  # rows a read returns
    bytes_on_disk: int
    granules: int
    deleted_rows: int = 0  # rows the part still stores but a ClickHouse lightweight DELETE removed


def _normalize_schema(schema: SchemaLike, key_columns: set[str]) -> list[tuple[str, str]]:
    """(name, ClickHouse type) pairs from an Arrow schema, pairs, or a mapping; a pair's type may end
    with a DEFAULT or MATERIALIZED expression and a CODEC(...) clause (`DateTime DEFAULT now()`,
    `Int64 CODEC(Delta, ZSTD)`), kept after the normalised type."""
    if isinstance(schema, pa.Schema):
        return [(f.name, from_arrow(f.type, f.nullable, nullable_scalars=f.name not in key_columns).to_clickhouse())
                for f in schema]
    pairs = list(schema.items()) if isinstance(schema, Mapping) else [tuple(p) for p in schema]
    out = []
    for pair in pairs:
        if len(pair) != 2:
            raise InvalidOptionError(f"schema entries must be (name, ClickHouse type), got {pair!r}")
        name, (type_text, codec) = str(pair[0]), split_codec_clause(str(pair[1]))
        type_text, default = _split_default(name, type_text)
        out.append((name, parse_column_type(name, type_text).to_clickhouse() + default
                    + (f" CODEC({codec})" if codec else "")))
    if not out:
        raise InvalidOptionError("a table needs at least one column")
    return out


def _split_default(name: str, type_text: str) -> tuple[str, str]:
    """`DateTime DEFAULT now()` → ('DateTime', ' DEFAULT now()'), read as a CREATE statement reads a
    column; ('DateTime', '') without such a clause."""
    if not re.search(r"\b(DEFAULT|MATERIALIZED)\b", type_text, re.IGNORECASE):
        return type_text, ""
    (column,) = parse_create(f"CREATE TABLE _ (`{name}` {type_text}) ENGINE = MergeTree ORDER BY tuple()").columns
    if column.default_kind not in ("DEFAULT", "MATERIALIZED") or column.codec or column.ttl or column.extra:
        raise InvalidOptionError(f"column {name!r}: {type_text!r} is not a type with a DEFAULT or MATERIALIZED "
                                 "expression (and an optional CODEC(...) at the end)")
    parse_expression(str(column.default_expression))  # refused now if it cannot be read, not at an insert
    return column.type, f" {column.default_kind} {column.default_expression}"


def new_definition(schema: SchemaLike, order_by: str | Sequence[str], partition_by: str | None,
                   primary_key: str | Sequence[str] | None, settings: Mapping[str, Any] | None,
                   coordinator: Coordinator | str | None, engine: str | None,
                   projections: Sequence[str] = ()) -> tuple[TableDefinition, dict[str, Any]]:
    """The definition (with a new UUID) and the engine settings of a new table, from `create()`'s
    arguments: one way for tables in every location."""
    clickhouse_settings, engine_settings = split_settings(settings)
    if isinstance(coordinator, str):
        engine_settings["coordinator"] = coordinator
    # ClickHouse keys cannot be Nullable: Arrow fields the keys read are stored non-nullable.
    columns = _normalize_schema(schema, set())
    if isinstance(schema, pa.Schema):
        keys = key_column_names([name for name, _ in columns], order_by, partition_by, primary_key)
        columns = _normalize_schema(schema, keys)
    definition = build_definition(columns, order_by, partition_by, primary_key, clickhouse_settings,
                                  uuid=str(uuid_module.uuid4()), engine=engine)
    if projections:
        if isinstance(projections, str):
            raise InvalidOptionError("projections must be a list of declarations such as "
                                     "'PROJECTION p (SELECT * ORDER BY k)', not one string")
        texts = tuple(t.strip() if t.strip().upper().startswith("PROJECTION") else f"PROJECTION {t.strip()}"
                      for t in projections)
        definition = replace(definition, indexes=definition.indexes + texts)
    return definition, engine_settings


def _check_modes(mode: str, partition_overwrite_mode: str) -> WriteMode:
    if mode not in WRITE_MODES:
        raise InvalidOptionError(f"mode {mode!r} is not valid; use one of {', '.join(WRITE_MODES)}")
    if partition_overwrite_mode not in PARTITION_OVERWRITE_MODES:
        raise InvalidOptionError(f"partition_overwrite_mode {partition_overwrite_mode!r} is not valid; use one of "
                                 f"{', '.join(PARTITION_OVERWRITE_MODES)}")
    return cast(WriteMode, mode)


def _as_parts_store_it(definition: TableDefinition, directory: Path) -> TableDefinition:
    """A user's CREATE statement of a ClickHouse table with `Nested` columns describes flattened
    columns (ClickHouse's default `flatten_nested = 1`) unless its parts store the Nested column
    whole (it was created with `flatten_nested = 0`): the first part's columns.txt tells."""
    flattened = flatten_nested(definition)
    if flattened == definition:
        return definition
    listing = next((p / "columns.txt" for p in sorted(directory.iterdir())
                    if p.is_dir() and (p / "columns.txt").is_file()), None)
    if listing is not None:
        stored = listing.read_text(errors="replace")
        whole = {c.name for c in definition.columns} - {c.name for c in flattened.columns}
        if any(f"`{name}` " in stored for name in whole):
            return definition
    return flattened


class MergeTreeTable:
    """One MergeTree table: create or open it, insert, read, merge, check.

    ```python
    table = MergeTreeTable.create("/data/events", schema, order_by="id", partition_by="toYYYYMM(d)")
    table.insert(arrow_table)
    table.to_arrow(where="id BETWEEN 10 AND 20")
    ```
    """

    @property
    def supports_mutations(self) -> bool:
        """Whether DELETE/UPDATE can run as Spark jobs (new part versions staged, then renamed into
        place: engine/mutations.py): not where parts are written in place (the table's own
        `delete`/`update` run there)."""
        return not self.store.writes_in_place
    @property
    def parts_written_in_place(self) -> bool:
        """Whether a part is written under its final name (object stores) rather than staged and
        renamed: the part store's answer (storage/backend.py)."""
        return self.store.writes_in_place

    def __init__(self, path: str | os.PathLike[str], metadata: TableMetadata,
                 coordinator: Coordinator | None = None) -> None:
        self.path = Path(path).resolve()
        self.metadata = metadata
        self._coordinator = coordinator
        policy_config = metadata.setting("storage_policy")
        self.storage_policy = (StoragePolicy.from_dict(policy_config) if policy_config
                               else StoragePolicy.single(self.path))
        self.store: PartStore = PartStore(self.storage_policy, "" if not policy_config else self._relative_table_path(),
                                          root=self.path)
        self.directories = TableDirectories(self.store)
        self.log = TableLog(self.path, self.directories)
        self._opened_patches: dict[str, Any] = {}  # patch part name → engine/patches.py's opened patch
        self._part_bytes: dict[str, int] = {}
        self._readers_lock = threading.Lock()
        self._external_definition = False
        self._statement_text: str | None = None  # table.sql as this handle's definition was read from it
        self._checked_statement: str | None = None  # table.sql as check_same_table last found it

    def _relative_table_path(self) -> str:
        uuid = self.definition.uuid or "table"
        return f"store/{uuid[:3]}/{uuid}"

    # ------------------------------------------------------------------ create / open

    @classmethod
    def create(cls, path: str | os.PathLike[str], schema: SchemaLike, order_by: str | Sequence[str],
               partition_by: str | None = None, primary_key: str | Sequence[str] | None = None,
               settings: Mapping[str, Any] | None = None, *, if_not_exists: bool = False,
               coordinator: Coordinator | str | None = None,
               storage_options: Mapping[str, Any] | None = None, engine: str | None = None,
               projections: Sequence[str] = ()) -> MergeTreeTable:
        """Create a table directory at `path`.

        `schema`: a pyarrow Schema (types mapped as format_spec/types.md says; non-key nullable
        fields become Nullable) or (name, ClickHouse type) pairs. `order_by`/`primary_key`: a column,
        a list, or "(a, b)". `partition_by`: a ClickHouse expression such as "toYYYYMM(d)".
        `settings`: ClickHouse MergeTree settings (index_granularity, index_granularity_bytes, ...)
        and engine settings (codec, auto_merge, merge_parts_threshold, old_parts_lifetime,
        storage_policy, coordinator). `path` is a local directory, a file:// URL, or an s3:// URL
        (an `ObjectStoreTable`; `storage_options`: endpoint, access_key_id, secret_access_key,
        session_token, region, when the environment's are not the ones to use). `engine`: an engine
        of the MergeTree family with its parameters, e.g. "ReplacingMergeTree(version)" (see
        engine/engines.py for what merges and `final=True` reads do with each). `projections`:
        declarations such as "PROJECTION by_k (SELECT * ORDER BY k)" (the word PROJECTION optional);
        every part gets them (engine/projections.py).
        """
        url_table = _url_table(path)
        if url_table is not None:
            return url_table.create_at(path, schema, order_by, partition_by, primary_key, settings,
                                       if_not_exists=if_not_exists, coordinator=coordinator,
                                       storage_options=storage_options, engine=engine, projections=projections)
        target = local_path(path)
        if (target / META_DIR / STATEMENT_FILE).exists():
            if if_not_exists:
                return cls.open(target, coordinator=coordinator)
            raise TableExistsError(f"a table already exists at {target}")
        definition, engine_settings = new_definition(schema, order_by, partition_by, primary_key, settings,
                                                     coordinator, engine, projections)
        table = cls.new(target, definition, engine_settings,
                        coordinator=coordinator if not isinstance(coordinator, str) else None)
        table.write_directory()
        return table

    @classmethod
    def new(cls, path: str | os.PathLike[str], definition: TableDefinition, engine_settings: Mapping[str, Any],
            *, coordinator: Coordinator | None = None) -> MergeTreeTable:
        """A table whose directory is not written yet, everything about it checked (keys, settings,
        storage policy); `write_directory()` then creates it. The one way tables come to be: `create`
        and the catalog both go through here."""
        metadata = TableMetadata(definition, dict(engine_settings))
        metadata.validate_keys()
        return cls(path, metadata, coordinator)

    def write_directory(self, *, with_statement: bool = True) -> None:
        """Create the table directory of a `new()` table.

        With the statement (`_mergetree/table.sql`, written last and never over another) the
        directory may already exist; without it (a catalog keeps the statement in its own metadata
        file, and names the directory by a new UUID) the directory must not exist yet.
        """
        statement = format_attach(self.definition) if with_statement else None
        write_table_directory(self.path, statement, self.metadata.engine_settings)
        if self.metadata.setting("storage_policy"):
            self.directories.record(self.path)
        self._external_definition = not with_statement
        self._statement_text = statement

    @classmethod
    def open(cls, path: str | os.PathLike[str], create_statement: str | None = None, *,
             coordinator: Coordinator | str | None = None,
             storage_options: Mapping[str, Any] | None = None) -> MergeTreeTable:
        """Open a table directory: ours, or a ClickHouse table data directory (`store/xxx/<uuid>/`)
        given its CREATE/ATTACH TABLE statement (`create_statement`); or a table at an s3:// URL."""
        url_table = _url_table(path)
        if url_table is not None:
            if create_statement is not None:
                raise UnsupportedError(f"{path}: opening a table in object storage by a CREATE statement is not "
                                       "supported; open a table written by this package")
            return url_table.open_at(path, coordinator=coordinator,
                                     storage_options=storage_options)
        target = local_path(path)
        if not target.is_dir():
            raise TableNotFoundError(f"no table at {target}: directory does not exist")
        external = create_statement is not None
        if create_statement is None:
            statement_path = target / META_DIR / STATEMENT_FILE
            try:
                create_statement = statement_path.read_text()
            except FileNotFoundError:
                raise TableNotFoundError(
                    f"no table at {target}: {statement_path} is missing (for a ClickHouse table directory, "
                    "pass its CREATE or ATTACH TABLE statement as create_statement)") from None
        definition = parse_create(create_statement)
        if external and create_statement.lstrip().upper().startswith("CREATE"):
            definition = _as_parts_store_it(with_created_versions(definition), target)
        metadata = TableMetadata(definition, read_engine_settings(target))
        _ = metadata.order_by, metadata.primary_key, metadata.partition_key
        if isinstance(coordinator, str):
            coordinator = coordinator_from_url(coordinator)
        table = cls(target, metadata, coordinator)
        table._external_definition = external
        table._statement_text = None if external else create_statement
        return table

    # ------------------------------------------------------------------ properties

    @property
    def definition(self) -> TableDefinition:
        return self.metadata.definition

    @property
    def schema(self) -> pa.Schema:
        """Arrow schema of the table's columns (see format_spec/types.md for the mapping)."""
        return self.metadata.arrow_schema

    @property
    def uuid(self) -> str | None:
        return self.definition.uuid

    @property
    def coordinator(self) -> Coordinator:
        """Explicit > the table's `coordinator` setting > the one its log is bound to > the default
        for the log's location (`CommitLog.default_coordinator`), which must accept it."""
        if self._coordinator is None:
            url = self.metadata.setting("coordinator")
            identity = self.log.identity()
            if url is None and identity is not None:
                url = identity["coordinator"]
            coordinator = coordinator_from_url(url) if url else self.log.default_coordinator()
            self.log.check_coordinator(coordinator)
            self._coordinator = coordinator
        return self._coordinator

    def __repr__(self) -> str:
        return f"MergeTreeTable({str(self.path)!r})"

    # ------------------------------------------------------------------ snapshots

    def directory_parts(self) -> set[str]:
        """Active parts by directory listing, as ClickHouse finds them on start (for tables with no
        log): a part covered by another (a merge's result, or a mutation's: `all_1_1_0_3` over
        `all_1_1_0`) is outdated. Patch parts of lightweight UPDATEs are not data parts
        (`patch_part_names`). Only where ClickHouse may write beside us: elsewhere the log alone
        names the parts."""
        if not self.store.shared_with_clickhouse:
            raise UnsupportedError(f"table {self.path}: its parts are those its log names, never a listing")
        return selecting.active_parts(self.store.list_parts())

    def patch_part_names(self) -> set[str]:
        """The active patch parts of ClickHouse lightweight UPDATEs, which reads apply
        (engine/patches.py). They are ClickHouse's, taken from the directory whether or not our log
        keeps the table: the log never names nor deletes them (a ClickHouse UPDATE after our
        writes adds one), and our writes leave them in place. None where ClickHouse writes nothing
        (object storage)."""
        if not self.store.shared_with_clickhouse:
            return set()
        return selecting.patch_parts(self.store.list_parts())

    def patch_set(self, names: Iterable[str]) -> PatchSet:
        """The PatchSet of these patch parts (each opened once per handle: parts never change)."""
        with self._readers_lock:
            granularity = self.metadata.writer_settings.index_granularity
            return PatchSet(names, lambda name: PartReader(self.store, name, self.part_location(name), granularity,
                                                           patch=True),
                            self.metadata.column_types, self.metadata.sorting_columns, self._opened_patches)

    def active_patches(self) -> PatchSet:
        """The table's active patch parts, opened (refused if this version cannot apply them)."""
        return self.patch_set(self.patch_part_names())

    def patches_at(self, snapshot: int | None) -> PatchSet:
        """The patch parts a read at `snapshot` applies: those of UPDATEs our log saw by then
        (engine/patch_versions.py); every active one for the latest state (None) and in a table our
        log does not keep yet."""
        names = self.patch_part_names()
        if snapshot is None or not names or self.log.identity() is None:
            return self.patch_set(names)
        return self.patch_set(patch_versions.visible_at(self.store.list_parts(), patch_versions.recorded(self.path),
                                                        snapshot))

    def record_patches(self) -> None:
        """Record when our log first saw each patch part in the directory (engine/patch_versions.py)."""
        if self.patch_part_names() or (self.path / patch_versions.FILE).exists():
            patch_versions.record(self.path, self.log, self.coordinator, self.store.list_parts())

    def refuse_if_patched(self, parts: Iterable[str], action: str) -> None:
        """UnsupportedError, before anything is written, if a patch part changes rows of one of
        `parts`: `action` (a rewrite that does not apply patches) would give their rows a data
        version above the patch, which reads would then skip."""
        patches = self.active_patches()
        for part in sorted(parts):
            touching = patches.changing(part, self.metadata.column_types)
            if touching:
                raise UnsupportedError(
                    f"{self.part_location(touching[0])}: a patch part of a ClickHouse lightweight UPDATE changes rows "
                    f"of part {part}; {action} does not apply it here: run `ALTER TABLE … APPLY PATCHES` in "
                    "ClickHouse (or our delete/update, which apply it) first")

    def with_patches_applied(self, part: str) -> PartFiles:
        """`part` written again with the patches that change it applied (every stored row, its mask as
        patched, same granules): what a merge reads in its place (engine/patch_merge.py)."""
        files = mutating.rewrite_part(self.reader(part), self, None, patched=True)
        if files is None:
            raise UnsupportedError(f"{self.part_location(part)}: no patch part changes this part")
        return files

    def adopt_directory_parts(self) -> list[str]:
        """Take into the log the data parts ClickHouse placed in the table's directory; return those
        adopted. A table ClickHouse wrote has parts but no log history: the log takes them in
        (TableLog.adopt) before the first write, merge or mutation binds it. A table with history
        gets parts a ClickHouse server on the same directory inserted or merged since (parts no
        entry names: TableLog.adopt_foreign, in a commit of their own; a merge's or mutation's
        replaces the parts it covers, as ClickHouse loads them). Parts that do not open as parts of
        this table, or that the log cannot take in (outdated, or covering parts it removed), are
        kept as they are and logged. Patch parts stay the directory's (`patch_part_names`). A table
        no part can be written into (its TTL holds a rule parts here cannot record) is refused
        first, leaving the directory as it is. Nothing where ClickHouse writes no parts (object
        storage)."""
        if not self.store.shared_with_clickhouse:
            return []
        if self.metadata.ttl_refusal is not None:
            raise UnsupportedError(f"table {self.metadata.definition.name!r}: {self.metadata.ttl_refusal}")
        self.record_patches()  # (before the adoption: a table ClickHouse wrote has its patches since csn 0)
        if not self.log.has_history():
            parts = self.directory_parts()
            return sorted(parts) if self.log.adopt(parts) else []
        foreign = self.log.foreign_parts()
        if not foreign:
            return []
        readable, unreadable = [], []
        for name in foreign:
            try:
                self.reader(name)
                readable.append(name)
            except (FormatError, OSError) as error:
                unreadable.append(f"{name} ({error})")
        adopted, kept = self.log.adopt_foreign(self.coordinator, readable) if readable else ([], [])
        if kept or unreadable:
            _log.warning("%s: part(s) the table's log does not name are kept in place, not adopted: %s", self.path,
                         ", ".join(kept + unreadable))
        return adopted

    def visible_parts(self, *, snapshot: int | None = None, transaction: Transaction | None = None
                      ) -> tuple[int | None, set[str]]:
        """(snapshot csn, names of visible parts): the transaction's view, the given csn's, or now's."""
        if transaction is not None:
            return transaction.snapshot, transaction.visible_parts(self.log)
        shared = self.store.shared_with_clickhouse
        if shared and self.log.identity() is None:
            # Never written through a transaction: a ClickHouse-made table or an empty new one.
            return None, self.directory_parts()
        coordinator = self.coordinator
        if snapshot is None and shared:
            self.record_patches()  # an UPDATE not seen yet commits now, before the latest snapshot
        csn = coordinator.current_timestamp() if snapshot is None else int(snapshot)
        return csn, self.log.snapshot(csn, coordinator)

    def put_table_file(self, name: str, data: bytes) -> None:
        """Write a file of the table's own beside its parts (a mutation's `mutation_N.txt`), atomically."""
        self.store.put_table_file(name, data)

    def part_location(self, part: str) -> str:
        """Where a part lies (its directory, or its URL), as errors and reports name it."""
        return self.store.part_url(part)

    def reader(self, part: str) -> PartReader:
        """The reader of one part, cached as its store caches readers (parts never change once
        written: per handle on disks, per process in object storage)."""
        return self.store.cached_reader(part, lambda: PartReader(self.store, part, self.part_location(part),
                                                                 self.metadata.writer_settings.index_granularity))

    # ------------------------------------------------------------------ reading

    def _columns(self, columns: Sequence[str] | None) -> list[str]:
        if columns is None:
            return [n for n, _ in self.metadata.columns]
        unknown = [c for c in columns if c not in self.metadata.column_types]
        if unknown:
            raise InvalidOptionError(f"unknown column(s) {', '.join(unknown)}; table columns: "
                                     f"{', '.join(self.metadata.column_types)}")
        return list(columns)

    def plan_read(self, columns: Sequence[str] | None = None, where: str | Expr | None = None, *,
                  snapshot: int | None = None, transaction: Transaction | None = None,
                  parts: set[str] | None = None,
                  target_rows: int = selecting.DEFAULT_TARGET_ROWS,
                  use_skip_indexes: bool = True, use_projections: bool = True) -> selecting.ReadPlan:
        """Which parts and granule ranges a read touches, cut into ReadTasks of ~target_rows rows.
        With `parts` (a plan over parts chosen before), `snapshot` is the snapshot they were chosen
        at: it decides which lightweight UPDATEs apply (`patches_at`). `use_projections=False` is
        ClickHouse's `optimize_use_projections = 0`: never read through a normal projection (as
        with UPDATE patches in the snapshot, where ClickHouse never does either)."""
        self._columns(columns)
        predicate = selecting.bind_where(where, self.metadata.column_types)
        csn, visible = (snapshot, parts) if parts is not None else self.visible_parts(
            snapshot=snapshot, transaction=transaction)
        plan = selecting.ReadPlan(csn, str(where) if where is not None else None)
        meta = self.metadata
        named = sorted(((PartInfo.parse(name), name) for name in visible),
                       key=lambda pair: (pair[0].partition_id, pair[0].min_block))
        infos = [info for info, _ in named]
        readers = [self.reader(name) for _, name in named]
        patches = self.patches_at(csn)
        # A skip index describes a column's values before the UPDATEs: it cannot rule out a patched granule.
        indexes = [index for index in meta.skip_indexes if not set(index.columns) & patches.columns]
        projections = meta.projections if use_projections and not patches else []
        plan.parts, plan.projection = selecting.plan_projection(
            readers, infos, predicate, meta.partition_key, meta.primary_key_types,
            indexes if use_skip_indexes else [], meta.column_types, columns=columns, projections=projections)
        for reader, part_plan in zip(readers, plan.parts, strict=True):
            touching = patches.for_part(reader.part) if patches else ()
            part_plan.rows = patches.existing_rows(reader, touching)
            plan.tasks.extend(replace(task, patches=touching)
                              for task in selecting.split_tasks(reader, part_plan.ranges, target_rows,
                                                                part_plan.projection, part_plan.own_ranges or ()))
        return plan

    def _patches_of(self, task: selecting.ReadTask) -> PatchSet | None:
        return self.patch_set(task.patches) if task.patches else None

    def read_task(self, task: selecting.ReadTask, columns: Sequence[str] | None = None,
                  where: str | Expr | None = None) -> pa.Table:
        """Rows of one ReadTask (executor side), filtered exactly by `where`."""
        names = self._columns(columns)
        predicate = selecting.bind_where(where, self.metadata.column_types)
        schema = pa.schema([self.schema.field(n) for n in names])
        return selecting.read_task(self.reader(task.part), task, names, predicate, schema,
                                   self.metadata.column_types, self._patches_of(task))

    def iter_task(self, task: selecting.ReadTask, columns: Sequence[str] | None = None,
                  where: str | Expr | None = None, chunk_rows: int = 1 << 18) -> Iterator[pa.RecordBatch]:
        """Batches of one ReadTask (see iter_tasks)."""
        return self.iter_tasks([task], columns, where, chunk_rows)

    def iter_tasks(self, tasks: Sequence[selecting.ReadTask], columns: Sequence[str] | None = None,
                   where: str | Expr | None = None, chunk_rows: int = 1 << 18) -> Iterator[pa.RecordBatch]:
        """Batches of ReadTasks in order, decoded a chunk ahead in a background thread, so decoding
        the next chunk (of this part or the next) overlaps with whatever consumes the current one
        (Spark's transfer to the JVM)."""
        chunks = [replace(chunk, patches=task.patches) for task in tasks
                  for chunk in selecting.split_tasks(self.reader(task.part), task.ranges, chunk_rows,
                                                     task.projection, task.fallback)]
        if len(chunks) < 2:
            for chunk in chunks:
                yield from self.read_task(chunk, columns, where).to_batches()
            return
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="mergetree-prefetch") as pool:
            pending = pool.submit(self.read_task, chunks[0], columns, where)
            for chunk in chunks[1:]:
                ready = pending.result()
                pending = pool.submit(self.read_task, chunk, columns, where)
                yield from ready.to_batches()
            yield from pending.result().to_batches()

    def final_tasks(self, where: str | Expr | None = None, *, snapshot: int | None = None,
                    transaction: Transaction | None = None,
                    parts: set[str] | None = None) -> list[list[selecting.ReadTask]]:
        """The read tasks of a FINAL read, in groups whose rows are merged together: one per partition
        when every partition key column is an element of the sorting key (rows of one key then share
        a partition), else one group of all (ClickHouse's FINAL merges a key's rows across
        partitions).

        `where` prunes only where that keeps every row of each key it can return: granules by the
        primary key (all rows of a key share its value), and partitions in the first case; never by
        skip indexes (a key's other rows decide which of them survives)."""
        key_columns = {element.strip("`") for element in self.metadata.sorting_key}
        by_partition = set(self.metadata.partition_key.columns) <= key_columns
        plan = self.plan_read(None, where if by_partition else None, snapshot=snapshot, transaction=transaction,
                              parts=parts, target_rows=1 << 62, use_skip_indexes=False, use_projections=False)
        groups: dict[str, list[selecting.ReadTask]] = {}
        for task in plan.tasks:
            groups.setdefault(PartInfo.parse(task.part).partition_id if by_partition else "", []).append(task)
        return list(groups.values())

    def read_final(self, tasks: Sequence[selecting.ReadTask], columns: Sequence[str] | None = None,
                   where: str | Expr | None = None) -> pa.Table:
        """Rows of one group of `final_tasks` as ClickHouse's `SELECT ... FINAL` returns them: the
        engine's merge applied across all of them (engines.py), then filtered by `where`."""
        names = self._columns(columns)
        meta = self.metadata
        predicate = selecting.bind_where(where, meta.column_types)
        engine = meta.merging_engine
        needed = key_column_names([n for n, _ in meta.columns], meta.sorting_key) | set(engine.control_columns
                                                                                        if engine else ())
        needed |= columns_of(predicate) if predicate is not None else set()
        wanted = [n for n, _ in meta.columns if n in needed or n in names]
        # Rows of equal keys in ClickHouse's order of parts: by partition id, then block number.
        ordered = sorted(tasks, key=lambda task: (PartInfo.parse(task.part).partition_id,
                                                  PartInfo.parse(task.part).min_block,
                                                  task.ranges[0][0] if task.ranges else 0))
        pieces = [self.read_task(task, wanted) for task in ordered]
        rows = pa.concat_tables(pieces) if pieces else pa.schema([self.schema.field(n) for n in wanted]).empty_table()
        if engine is not None:
            parts = [task.part for task in ordered]
            sources = engines.part_sources([PartInfo.parse(p).level for p in parts], [t.num_rows for t in pieces])
            sources[sources >= 0] = np.unique(parts, return_inverse=True)[1][sources[sources >= 0]]  # one per part
            if meta.sorting_key and rows.num_rows > 1:
                order = sort_indices(meta.sorting_key, rows, meta.column_types)
                rows, sources = rows.take(order), sources[order.to_numpy()]
            rows = engines.plan_rows(engine, rows, meta.sorting_key, meta.column_types, final=True,
                                     sources=sources).apply(rows)
        if predicate is not None:
            rows = filter_table(rows, predicate)
        return rows.select(names)

    def to_arrow(self, columns: Sequence[str] | None = None, where: str | Expr | None = None, *,
                 snapshot: int | None = None, transaction: Transaction | None = None,
                 final: bool = False, use_projections: bool = True) -> pa.Table:
        """Rows of the table (at a snapshot or in a transaction) as an Arrow table.

        `where` is a predicate in ClickHouse/SQL syntax; it prunes partitions and granules and then
        filters rows exactly. `final=True` reads as ClickHouse's `SELECT ... FINAL`: the rows the
        table's engine (ReplacingMergeTree, ...) leaves once every part of a partition is merged.
        A filter on a normal projection's ORDER BY reads through it when that reads fewer granules
        (`use_projections=False`: never; see `plan_read`).
        """
        if final:
            names = self._columns(columns)
            groups = self.final_tasks(where, snapshot=snapshot, transaction=transaction)
            with ThreadPoolExecutor(max_workers=max(1, min(4, len(groups)))) as pool:
                tables = list(pool.map(lambda tasks: self.read_final(tasks, names, where), groups))
            return pa.concat_tables(tables) if tables else pa.schema([self.schema.field(n) for n in names]).empty_table()
        names = self._columns(columns)
        plan = self.plan_read(names, where, snapshot=snapshot, transaction=transaction,
                              use_projections=use_projections)
        schema = pa.schema([self.schema.field(n) for n in names])
        if not plan.tasks:
            return schema.empty_table()
        predicate = selecting.bind_where(where, self.metadata.column_types)

        def run(task: selecting.ReadTask) -> pa.Table:
            return selecting.read_task(self.reader(task.part), task, names, predicate, schema,
                                       self.metadata.column_types, self._patches_of(task))

        if len(plan.tasks) == 1:
            tables = [run(plan.tasks[0])]
        else:
            with ThreadPoolExecutor(max_workers=min(4, len(plan.tasks))) as pool:
                tables = list(pool.map(run, plan.tasks))
        return pa.concat_tables(tables)

    def to_batches(self, columns: Sequence[str] | None = None, where: str | Expr | None = None, *,
                   snapshot: int | None = None, transaction: Transaction | None = None, final: bool = False,
                   use_projections: bool = True) -> Iterator[pa.RecordBatch]:
        """Like to_arrow, one task at a time (bounded memory; `final=True`: a group of `final_tasks` at a time)."""
        names = self._columns(columns)
        if final:
            for tasks in self.final_tasks(where, snapshot=snapshot, transaction=transaction):
                yield from self.read_final(tasks, names, where).to_batches()
            return
        for task in self.plan_read(names, where, snapshot=snapshot, transaction=transaction,
                                   use_projections=use_projections).tasks:
            yield from self.read_task(task, names, where).to_batches()

    def explain(self, where: str | Expr | None = None, *, snapshot: int | None = None,
                transaction: Transaction | None = None, columns: Sequence[str] | None = None,
                use_projections: bool = True) -> selecting.ReadPlan:
        """The parts and granule ranges a read of `columns` (default all) with `where` would touch,
        and the projection it reads through, if any (print it for a summary)."""
        return self.plan_read(columns, where, snapshot=snapshot, transaction=transaction,
                              use_projections=use_projections)

    def parts(self, *, snapshot: int | None = None, transaction: Transaction | None = None) -> list[PartSummary]:
        """The visible parts, like ClickHouse's system.parts."""
        csn, visible = self.visible_parts(snapshot=snapshot, transaction=transaction)
        patches = self.patches_at(csn)
        out = []
        for name in sorted(visible, key=lambda n: (PartInfo.parse(n).partition_id, PartInfo.parse(n).min_block)):
            info = PartInfo.parse(name)
            reader = self.reader(name)
            size = sum(self.store.file_size(name, f) for f in reader.files)
            existing = patches.existing_rows(reader, patches.for_part(name))
            out.append(PartSummary(name, info.partition_id, info.min_block, info.max_block, info.level,
                                   existing, size, reader.n_granules, reader.rows - existing))
        return out

    def count(self, *, snapshot: int | None = None, transaction: Transaction | None = None) -> int:
        """Rows a read returns (rows a ClickHouse lightweight DELETE removed are not counted; a
        lightweight UPDATE changes no count, a DELETE in `lightweight_update_force` mode does)."""
        csn, visible = self.visible_parts(snapshot=snapshot, transaction=transaction)
        patches = self.patches_at(csn)
        return sum(patches.existing_rows(self.reader(p), patches.for_part(p)) for p in visible)

    # ------------------------------------------------------------------ writing

    def check_same_table(self) -> None:
        """Refuse to write through this handle if its table was dropped, or dropped and re-created
        at the same location: `_mergetree/table.sql` must still name the UUID the handle opened.
        (An ALTER by another handle is not refused here: `replace_definition` refuses this handle's
        ALTER over it.)"""
        if self._external_definition:
            return  # a catalog's or ClickHouse's table: a new table gets a new directory
        try:
            text = self.store.read_table_file(STATEMENT_PATH).decode()
        except FileNotFoundError:
            raise TableNotFoundError(f"the table at {self.path} was dropped ({self.path}/{STATEMENT_PATH} is gone) "
                                     "after this handle opened it") from None
        if text in (self._statement_text, self._checked_statement):
            return
        current = parse_create(text).uuid
        if current != self.uuid:
            raise TableNotFoundError(
                f"the table at {self.path} was re-created (UUID {self.uuid} → {current}) after this handle "
                "opened it, possibly with another schema; reopen it with MergeTreeTable.open")
        # Remembered apart from _statement_text (what this handle's definition was read from), so
        # an ALTER through this handle still compares against that.
        self._checked_statement = text

    def stage(self, data: Any, tag: str | None = None, *, transaction: Transaction | None = None,
              progress: bool | None = False) -> list[inserting.StagedPart]:
        """Write rows as invisible staged parts, one per partition (executor side in Spark).

        A staged part has an owner that keeps cleanup away from it: `transaction` (its parts are
        garbage once it ends), or else the write job `tag` (letters and digits, one per Spark
        job; registered in the table's log each time it stages, and ended by `discard_staged`).
        `progress`: as `insert`'s. Where parts are written in place (object storage) they get their
        final names first (`staging.stage_in_place`).
        """
        if self.store.writes_in_place:
            return staging.stage_in_place(self, data, tag, transaction=transaction, progress=progress)
        return staging.stage(self, data, tag, transaction=transaction, progress=progress)

    def discard_staged(self, tag: str, keep: Sequence[str] = ()) -> list[str]:
        """End the write job `tag`: delete its staged parts except `keep` (leftovers of failed or
        duplicate task attempts, or of the whole job when it gave up)."""
        return self.log.discard_job(tag, keep)

    def commit_staged(self, staged: Sequence[inserting.StagedPart], *, mode: WriteMode | str = "append",
                      partition_overwrite_mode: PartitionOverwriteMode = "static",
                      transaction: Transaction | None = None,
                      app_version: tuple[str, int] | None = None) -> list[str]:
        """Make staged parts visible in one atomic step (driver side in Spark).

        Parts get block numbers and final names `<partition>_<n>_<n>_0`. `mode="overwrite"` also
        removes every visible part, or with `partition_overwrite_mode="dynamic"` the visible parts of
        the partitions the new data touches. Inside `transaction`, nothing is visible before it
        commits. Once the commit happened this never raises; a `CommitOutcomeUnknownError` leaves
        every directory in place for recovery to resolve.

        `app_version=(app id, version)` records in the same commit that an application (a
        streaming query) reached a version (a micro-batch id); `app_version(app id)` reads it back.
        If the table already holds that version or a later one, nothing is published (the staged
        parts are deleted) and AlreadyCommittedError is raised: a replayed batch commits nothing
        twice.
        """
        if mode == "overwrite_partitions":
            warnings.warn('mode="overwrite_partitions" is deprecated; use mode="overwrite", '
                          'partition_overwrite_mode="dynamic"', DeprecationWarning, stacklevel=2)
            mode, partition_overwrite_mode = "overwrite", "dynamic"
        write_mode = _check_modes(mode, partition_overwrite_mode)
        self.check_same_table()
        own = transaction is None
        tx = transaction if transaction is not None else Transaction(self.coordinator)
        if write_mode == "append" and staged:
            try:
                background.throttle(self, tx.visible_parts(self.log))
            except BaseException:
                if own:
                    tx.rollback()
                raise
        return committing.commit(self, staged, write_mode, partition_overwrite_mode, tx, own, app_version)

    def app_version(self, app_id: str) -> int | None:
        """The greatest version application `app_id` committed into this table with
        `commit_staged(app_version=...)` (a streaming query's last committed micro-batch), or None."""
        return self.log.app_version(app_id, self.coordinator)

    def _write(self, data: Any, mode: WriteMode, partition_overwrite_mode: PartitionOverwriteMode,
               transaction: Transaction | None, progress: bool | None = False) -> list[str]:
        own = transaction is None
        tx = transaction if transaction is not None else Transaction(self.coordinator)
        try:
            if mode == "append":
                background.throttle(self, tx.visible_parts(self.log))
            staged = self.stage(data, transaction=tx, progress=progress)
        except BaseException:
            if own:
                tx.rollback()
            raise
        return committing.commit(self, staged, mode, partition_overwrite_mode, tx, own)

    def insert(self, data: Any, *, transaction: Transaction | None = None,
               progress: bool | None = False) -> list[str]:
        """Insert rows (pyarrow Table/RecordBatch(es), pandas DataFrame): one part per partition.

        Visible atomically when this returns (or when `transaction` commits). Returns part names.
        `progress=True` draws rows written of the total on stderr, after each part, when the rows make
        more than one part or more than a million rows; `None`: only when stderr is a terminal;
        `False` (the default): none.
        """
        return self._write(data, "append", "static", transaction, progress)

    def overwrite(self, data: Any, *, partition_overwrite_mode: PartitionOverwriteMode = "static",
                  transaction: Transaction | None = None, partitions_only: bool | None = None,
                  progress: bool | None = False) -> list[str]:
        """Replace the table's rows atomically; with `partition_overwrite_mode="dynamic"` only the
        partitions present in `data` (Spark's spelling; ClickHouse's REPLACE PARTITION).
        `partitions_only=True` is the deprecated spelling of `partition_overwrite_mode="dynamic"`.
        `progress`: as `insert`'s."""
        if partitions_only is not None:
            warnings.warn('overwrite(partitions_only=...) is deprecated; use partition_overwrite_mode="dynamic"',
                          DeprecationWarning, stacklevel=2)
            partition_overwrite_mode = "dynamic" if partitions_only else "static"
        _check_modes("overwrite", partition_overwrite_mode)
        return self._write(data, "overwrite", partition_overwrite_mode, transaction, progress)

    # ------------------------------------------------------------------ mutations

    def delete(self, where: str | Expr, *, transaction: Transaction | None = None) -> list[str]:
        """Delete the rows matching `where` as ClickHouse's lightweight `DELETE FROM ... WHERE`:
        every part gets a new version (`all_1_1_0` → `all_1_1_0_<N>`) whose `_row_exists` mask hides
        the deleted rows, and `mutation_<N>.txt` records the command (engine/mutations.py). Atomic,
        and inside `transaction` invisible until it commits; a concurrent merge or overwrite of the
        same parts makes one of them fail with SerializationError. Returns the new parts' names
        (none when no row matches)."""
        return mutating.run(self, mutating.delete_mutation(self, where), transaction)

    def update(self, set: Mapping[str, Any], where: str | Expr, *,  # noqa: A002 - ClickHouse's word
               transaction: Transaction | None = None) -> list[str]:
        """Set columns in the rows matching `where`, as ClickHouse's `ALTER TABLE ... UPDATE col = expr
        WHERE ...`: `set` maps columns to a ClickHouse expression ("v * 2", "'text'") or a Python value.
        Key columns cannot be updated. Parts get new versions as with `delete`."""
        return mutating.run(self, mutating.update_mutation(self, set, where), transaction)

    # ------------------------------------------------------------------ schema

    def add_columns(self, columns: Sequence[tuple[str, str]]) -> None:
        """ALTER TABLE ADD COLUMN: append columns (name, ClickHouse type); parts written before
        hold their default values (NULL for Nullable types, zero or empty otherwise)."""
        self.replace_definition(self.with_columns_added(columns))

    def with_columns_added(self, columns: Sequence[tuple[str, str]]) -> TableDefinition:
        """The table's definition with `columns` (name, ClickHouse type) appended; SchemaMismatchError
        if one exists, UnsupportedError if the definition lives outside the table."""
        if self._external_definition:
            raise UnsupportedError(
                f"{self.path}: the table's definition lives outside the table directory (a catalog or a "
                "ClickHouse metadata file); add columns there")
        existing = set(self.metadata.column_types)
        clash = [name for name, _ in columns if name in existing]
        if clash:
            raise SchemaMismatchError(f"column(s) {', '.join(clash)} already exist in {self.path}")
        parsed = [(name, parse_column_type(name, type_text)) for name, type_text in columns]
        for name, dt in parsed:
            require_known_states(name, dt)  # older parts would need its default state
        added = tuple(ColumnDefinition(name, dt.to_clickhouse()) for name, dt in parsed)
        return replace(self.definition, columns=self.definition.columns + added)

    def replace_definition(self, definition: TableDefinition) -> None:
        """Write the table's new statement (an ALTER of its metadata: columns, indexes), only over
        the statement this handle read (`PartStorage.replace_table_file`): of two concurrent
        ALTERs, or a stale handle's after another's, one wins and the other gets
        SerializationError."""
        if self._external_definition:
            raise UnsupportedError(
                f"{self.path}: the table's definition lives outside the table directory (a catalog or a "
                "ClickHouse metadata file); alter it there")
        self.check_same_table()
        statement = format_attach(definition)
        try:
            replaced = self.store.replace_table_file(STATEMENT_PATH, statement.encode(),
                                                     (self._statement_text or "").encode())
        except FileNotFoundError:
            replaced = False
        if not replaced:
            self.check_same_table()  # names a drop or re-creation since the first check
            raise SerializationError(f"table {self.path}: its statement ({self.path}/{STATEMENT_PATH}) changed "
                                     "since this handle read it (another ALTER); open the table again and retry")
        self.metadata = self.metadata.with_definition(definition)
        self._statement_text = statement

    def merge_worker_description(self) -> dict[str, Any] | None:
        """What a merge worker process (engine/merge_worker.py) needs to open this table: its
        directory, statement, engine settings and coordinator URL, as JSON; None when it cannot."""
        try:
            settings = json.loads(json.dumps(dict(self.metadata.engine_settings)))
        except (TypeError, ValueError):
            return None
        return {"path": str(self.path), "statement": format_attach(self.definition), "engine_settings": settings,
                "external": self._external_definition, "coordinator": self.coordinator.url}

    def rewrite_every_part(self, command: str, rewrite: Callable[[PartReader], PartFiles | None]) -> list[str]:
        """A mutation of every visible part, in one transaction (ALTER ... MATERIALIZE/DROP INDEX, the
        projection ALTERs): each gets a new version, `rewrite(reader)`'s files or (None) a copy;
        `mutation_N.txt` records `command` after the commit. Returns the new parts' names. Where
        parts are written in place each new version is written under its final name first
        (`mutations.rewrite_every_part_in_place`)."""
        if self.store.writes_in_place:
            return mutating.rewrite_every_part_in_place(self, command, rewrite)
        return indexing.rewrite_every_part_staged(self, command, rewrite)

    def add_index(self, declaration: str) -> None:
        """ALTER TABLE ADD INDEX: `INDEX name expr TYPE minmax|set(N)|bloom_filter[(fpr)]|ngrambf_v1(...)|
        tokenbf_v1(...) [GRANULARITY g]`. Parts written from now on carry it; `materialize_index`
        builds it into the parts that exist."""
        indexing.add_index(self, declaration)

    def materialize_index(self, name: str) -> list[str]:
        """ALTER TABLE MATERIALIZE INDEX: a mutation rewriting every part with the index built;
        returns the new parts' names."""
        return indexing.materialize_index(self, name)

    def drop_index(self, name: str) -> list[str]:
        """ALTER TABLE DROP INDEX: removes the index from the statement and, by a mutation, its files
        from every part that has them; returns the new parts' names."""
        return indexing.drop_index(self, name)

    def add_projection(self, declaration: str) -> None:
        """ALTER TABLE ADD PROJECTION: `PROJECTION name (SELECT ... ORDER BY ...)` or an aggregate
        projection we can write (GROUP BY with sum/count/min/max/avg/any/anyLast). Parts written from
        now on carry it; `materialize_projection` builds it into the parts that exist."""
        indexing.add_projection(self, declaration)

    def materialize_projection(self, name: str) -> list[str]:
        """ALTER TABLE MATERIALIZE PROJECTION: a mutation rewriting every part with the table's
        projections built; returns the new parts' names."""
        return indexing.materialize_projection(self, name)

    def drop_projection(self, name: str) -> list[str]:
        """ALTER TABLE DROP PROJECTION: removes the projection from the statement and, by a mutation,
        its directory from every part holding it; returns the new parts' names."""
        return indexing.drop_projection(self, name)

    def clear_projection(self, name: str) -> list[str]:
        """ALTER TABLE CLEAR PROJECTION: by a mutation, removes the projection's directory from every
        part holding it; the declaration stays, so parts written later carry it; returns the new
        parts' names."""
        return indexing.clear_projection(self, name)

    # ------------------------------------------------------------------ merges and upkeep

    def optimize(self, final: bool = False, timeout: float | None = None, *,
                 progress: bool | None = False) -> list[str]:
        """Merge parts, as ClickHouse's OPTIMIZE TABLE: one merge per partition with ≥ 2 parts
        (`final=True`: every partition down to one part). Returns the new parts' names.

        With `final=True`, once it returns a fresh `open()` sees every partition as one part holding
        all the rows committed before the call, on every backend: merges already running (this
        process's background merges, merge workers, other processes, `mergetree merge-daemon`) are
        waited for and their results merged in. Writes that commit while it runs may leave parts of
        their own beside that one. Parts are never merged across a block number that a running
        transaction holds (an insert between allocating its number and committing): OPTIMIZE FINAL
        waits up to `timeout` seconds (default 120, as ClickHouse waits for running merges) for the
        merges and writes that were running when it began to end, then merges such a partition up
        to the blocks still held (a SerializationError if a running merge still holds its parts).

        `progress=True` draws a bar on stderr: parts merged of the parts to merge (`final`), or
        merges run of the partitions that have parts to merge; `None`: only when stderr is a
        terminal; `False` (the default): none."""
        return optimizing.run_merges_showing_progress(self, final, timeout, progress)

    def merge(self) -> list[str]:
        """Run, now and in this thread, the merges the background scheduler would run for this table
        (ClickHouse's simple merge selector; see docs) until it finds nothing more; return the new
        parts' names. Each merge is a transaction."""
        return background.merge_until_settled(self)

    def write_part(self, name: str, files: PartFiles) -> None:
        """Write a part's files under `name` (not visible until a transaction names it)."""
        self.store.write_part(name, files.files, files.boundaries)

    def merged_part_name(self, candidate: MergeCandidate) -> str:
        """The name a merge of `candidate` publishes its result under (`optimize.merged_part_name`)."""
        return optimizing.merged_part_name(self, candidate)

    def publish_merged(self, candidate: MergeCandidate, files: PartFiles, tx: Transaction) -> str:
        """Write a merged part and name it in `tx` (which removes its sources); return its name.
        On failure nothing unnamed is left behind."""
        return optimizing.publish_merged(self, candidate, files, tx)

    @staticmethod
    def wait_for_merges(timeout: float | None = None) -> bool:
        """Wait until this process's background merges (of every table) are done; False on timeout."""
        return background.process_merges().wait(timeout)

    def part_bytes(self, part: str) -> int:
        """Bytes on disk of one part (cached: parts never change once written)."""
        with self._readers_lock:
            cached = self._part_bytes.get(part)
        if cached is None:
            cached = self.store.part_bytes(part)
            with self._readers_lock:
                self._part_bytes[part] = cached
        return cached

    def cleanup(self, orphan_seconds: float = 3600.0) -> list[str]:
        """Delete parts no snapshot can see and that are older than `old_parts_lifetime` seconds;
        finish or roll back transactions interrupted by crashes. Returns deleted part names. Parts
        the log does not name (a ClickHouse server's inserts into the same directory) are never
        deleted: they are adopted first (`adopt_directory_parts`). In object storage, where parts
        are uploaded under their final names before an entry names them, uploads no entry and no
        live write job names are deleted once `orphan_seconds` old (a crash between upload and
        commit); on disks every such part is staged under its owner's name and goes with it."""
        if self.store.shared_with_clickhouse and self.log.identity() is None:
            return []
        self.adopt_directory_parts()
        removed = self.log.cleanup(self.coordinator, float(self.metadata.setting("old_parts_lifetime")),
                                   orphan_seconds=orphan_seconds)
        self.store.forget(*removed)
        with self._readers_lock:
            for name in removed:
                self._part_bytes.pop(name, None)
        return removed

    def check(self, on_part: Callable[[str], None] | None = None) -> CheckReport:
        """Like CHECK TABLE: re-hash every file of every visible part (and active patch part) against
        its checksums.txt.

        `on_part(name)` is called after each part (progress reporting)."""
        return checking.check(self, on_part)

    # ------------------------------------------------------------------ storage upkeep

    def scrub(self, progress: bool = False) -> ScrubReport:
        """Verify every part the table's storage holds: every stripe unit and parity block on the
        table's disks; every object's bytes against its part's checksums.txt in object storage."""
        return self.store.scrub(progress=progress)

    def rebuild(self, disk: str, progress: bool = True) -> RebuildReport:
        """Restore a replaced (empty) disk of a raid1/raid5/raid6 volume from the other disks (a
        table in object storage has none: UnsupportedError, from its store)."""
        return self.store.rebuild(disk, progress=progress)

    def export_part(self, part: str, destination: str | os.PathLike[str]) -> Path:
        """Write a part (striped or not, on disks or in object storage) as a plain ClickHouse part
        directory at `destination`, a local path."""
        if part not in self.visible_parts()[1]:
            raise InvalidOptionError(f"part {part!r} is not a visible part of {self.path}")
        return transfer.export_plain(self.store, part, destination)

    def clickhouse_ddl(self, name: str = "default.events", *, credentials: bool = False) -> str:
        """The ATTACH TABLE statement a ClickHouse server runs to read this table where it lies: a
        read-only disk over the table's directory (engine/clickhouse_ddl.py). The server must see
        the directory at the same path (a local disk, or a shared mount). `credentials` matters only
        for tables in object storage. Tables whose storage policy spreads parts over several disks
        are refused: ClickHouse takes one disk here."""
        if self.metadata.setting("storage_policy"):
            raise UnsupportedError(
                f"{self.path}: the table's storage policy spreads parts over disks; ClickHouse opens a table in "
                "place from one directory (a single-disk table, or a catalog root ClickHouse runs on)")
        clickhouse_ddl.warn_if_clickhouse_sees_other_parts(str(self.path), self.store.list_parts(),
                                                          self.visible_parts()[1])
        return clickhouse_ddl.attach_statement(self.definition, name, self.uuid, clickhouse_ddl.local_disk(str(self.path)))

    def clone(self, destination: str | os.PathLike[str]) -> MergeTreeTable:
        """A new table at `destination` (a new directory) holding this table's rows as they are
        now: the parts one snapshot sees, hard-linked where the destination is on the same file
        system (else copied), under a new UUID and a table id of its own, so writes to either never
        affect the other (engine/clone.py). The supported way to copy a table: a directory copied
        by `cp -a` becomes a table of its own only on its first write."""
        return type(self).open(cloning.clone_local(self, destination), coordinator=self._coordinator)

    def drop_data(self) -> None:
        """Delete the table's data on every disk of its storage policy, then the table directory
        (the table object is unusable after)."""
        remove_table_directory(self.path)

"""ObjectStoreTable: a MergeTree table in object storage (`s3://bucket/prefix/table`, `gs://...`,
`abfss://container@account.dfs.core.windows.net/...`).

The same table as a local one — ClickHouse part directories (as keys under the table's prefix) and
`_mergetree/` (table.sql, settings.json, the commit log) — written by a protocol that needs no
rename, no lock and no listing to decide anything:

1. rows become parts, each uploaded once under its final key `<table>/<partition>_<n>_<n>_0/<file>`,
   block numbers `n` coming from the coordinator (so names never collide);
2. the transaction appends a write-once entry to the table's log naming the parts it adds and
   removes (txn/object_log.py);
3. the coordinator commits the transaction (the one commit point); readers see the parts from then.

A crash before 3 leaves parts no committed entry names: `cleanup()` deletes them. All of this is
`MergeTreeTable`'s code over `ObjectParts` and `ObjectTableLog` (staging, merges, mutations and
ALTERs pick their in-place variants by `PartStorage.writes_in_place`: ARCHITECTURE.md "One table,
every location"); what this class still keeps is creating and opening a table whose statement is
an object, the ClickHouse disk over its prefix, clone and drop.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from spark_mergetree.engine import clickhouse_ddl
from spark_mergetree.engine import clone as cloning
from spark_mergetree.engine import table as table_module
from spark_mergetree.engine.metadata import (
    META_DIR,
    SETTINGS_FILE,
    STATEMENT_FILE,
    TableMetadata,
    validate_engine_settings,
)
from spark_mergetree.engine.table import MergeTreeTable, SchemaLike, new_definition
from spark_mergetree.errors import (
    InvalidOptionError,
    TableExistsError,
    TableNotFoundError,
    UnsupportedError,
)
from spark_mergetree.expressions.ddl import format_attach, parse_create
from spark_mergetree.storage.object_store import (
    OBJECT_SCHEMES,
    Bucket,
    ObjectParts,
    ObjectUrl,
    PreconditionFailed,
    bucket_for,
    check_storage_options,
    parse_object_url,
)
from spark_mergetree.txn import Coordinator, coordinator_from_url
from spark_mergetree.txn.object_log import ObjectTableLog


class ObjectStoreTable(MergeTreeTable):
    """A table under an object-store prefix; `MergeTreeTable.create/open` return one for an s3://,
    gs:// or abfss:// URL."""

    def __init__(self, location: ObjectUrl, metadata: TableMetadata, coordinator: Coordinator | None = None,
                 storage_options: Mapping[str, Any] | None = None) -> None:
        # Not MergeTreeTable.__init__: no local directory, storage policy or flock'ed log here.
        if metadata.setting("storage_policy"):
            raise UnsupportedError(f"table {location.url}: storage policies over object storage are not supported")
        self.location = location
        self.path = location.url  # type: ignore[assignment]
        self.metadata = metadata
        self.storage_options = check_storage_options(storage_options, location.scheme)
        self._coordinator = coordinator
        self.parts_store = ObjectParts(location, self.storage_options)
        self.store = self.parts_store  # type: ignore[assignment]
        self.log = ObjectTableLog(location, self.parts_store, metadata.definition.uuid or location.url)
        if coordinator is not None:
            self.log.check_coordinator(coordinator)
        self.directories = self.log.directories  # type: ignore[assignment]
        self._part_bytes = {}
        self._readers_lock = threading.Lock()
        self._opened_patches = {}  # (none are written here; reads look for them as for any table)
        self._external_definition = False
        self._statement_text: str | None = None
        self._checked_statement: str | None = None

    def __repr__(self) -> str:
        return f"ObjectStoreTable({self.location.url!r})"

    # ------------------------------------------------------------------ create / open

    @staticmethod
    def _bucket(location: ObjectUrl, options: Mapping[str, Any] | None) -> Bucket:
        bucket = bucket_for(location, options)
        bucket.check(location.key)  # a missing bucket, no credentials, access denied: fail now, naming the URL
        return bucket

    @classmethod
    def create_at(cls, url: str, schema: SchemaLike, order_by: str | Sequence[str], partition_by: str | None = None,
                  primary_key: str | Sequence[str] | None = None, settings: Mapping[str, Any] | None = None, *,
                  if_not_exists: bool = False, coordinator: Coordinator | str | None = None,
                  storage_options: Mapping[str, Any] | None = None, engine: str | None = None,
                  projections: Sequence[str] = ()) -> ObjectStoreTable:
        location = parse_object_url(url)
        bucket = cls._bucket(location, storage_options)
        definition, engine_settings = new_definition(schema, order_by, partition_by, primary_key, settings,
                                                     coordinator, engine, projections)
        metadata = TableMetadata(definition, validate_engine_settings(engine_settings))
        metadata.validate_keys()
        statement_key = location.child(META_DIR, STATEMENT_FILE).key
        settings_key = location.child(META_DIR, SETTINGS_FILE).key
        try:
            bucket.head(statement_key)
            exists = True
        except FileNotFoundError:
            exists = False
        if exists:
            if if_not_exists:
                return cls.open_at(url, coordinator=coordinator, storage_options=storage_options)
            raise TableExistsError(f"a table already exists at {location.url}")
        # Settings first, the statement last and only if absent: the statement makes the table.
        bucket.put(settings_key, json.dumps(metadata.engine_settings, indent=1, sort_keys=True).encode())
        try:
            bucket.put(statement_key, format_attach(definition).encode(), if_absent=True)
        except PreconditionFailed:
            if if_not_exists:
                return cls.open_at(url, coordinator=coordinator, storage_options=storage_options)
            raise TableExistsError(f"a table already exists at {location.url}") from None
        table = cls(location, metadata, coordinator if not isinstance(coordinator, str) else None, storage_options)
        table._statement_text = format_attach(definition)
        return table

    @classmethod
    def open_at(cls, url: str, *, coordinator: Coordinator | str | None = None,
                storage_options: Mapping[str, Any] | None = None) -> ObjectStoreTable:
        location = parse_object_url(url)
        bucket = cls._bucket(location, storage_options)
        try:
            statement = bucket.get(location.child(META_DIR, STATEMENT_FILE).key).decode()
        except FileNotFoundError:
            raise TableNotFoundError(f"no table at {location.url}: {location.child(META_DIR, STATEMENT_FILE).url} "
                                     "is missing") from None
        try:
            raw = json.loads(bucket.get(location.child(META_DIR, SETTINGS_FILE).key))
        except FileNotFoundError:
            raw = {}
        except ValueError as error:
            raise InvalidOptionError(f"{location.child(META_DIR, SETTINGS_FILE).url}: not valid JSON ({error})") from None
        metadata = TableMetadata(parse_create(statement), validate_engine_settings(raw))
        _ = metadata.order_by, metadata.primary_key, metadata.partition_key
        if isinstance(coordinator, str):
            coordinator = coordinator_from_url(coordinator)
        table = cls(location, metadata, coordinator, storage_options)
        table._statement_text = statement
        return table

    # ------------------------------------------------------------------ coordinator, reading

    # ------------------------------------------------------------------ writing

    def merge_worker_description(self) -> dict[str, Any] | None:
        """None: an object-store table merges in a thread of its process (engine/merge_worker.py
        says why)."""
        return None

    # ------------------------------------------------------------------ ClickHouse

    def clickhouse_ddl(self, name: str = "default.events", *, credentials: bool = False) -> str:
        """The ATTACH TABLE statement a ClickHouse server runs to read this table where it lies: a
        read-only plain object-storage disk over the table's prefix (engine/clickhouse_ddl.py), with
        `table_disk = 1` (the disk's root is the table's directory), so ClickHouse reads our parts
        in place.

        ClickHouse reads every part under the prefix, not our log: it returns the same rows once
        `cleanup()` has removed replaced parts and leftovers (a warning names any it would read).
        `credentials=True` writes the S3 access key and secret, or the Azure account key, into the
        statement; otherwise the server uses its own (its environment, its identity). For gs://
        ClickHouse goes through GCS's S3-compatible API with an HMAC key of its own.
        """
        clickhouse_ddl.warn_if_clickhouse_sees_other_parts(
            self.location.url, (n for n in self.parts_store.part_names() if n), self.visible_parts()[1])
        location, bucket = self.location, self.parts_store.bucket
        options = dict(bucket.options)
        if location.scheme == "s3":
            disk = clickhouse_ddl.s3_disk(location.url, options, location.bucket, location.key,
                                          bucket.credentials() if credentials else None, credentials)
        elif location.scheme == "gs":
            disk = clickhouse_ddl.gcs_disk(location.url, location.bucket, location.key, credentials)
        else:
            disk = clickhouse_ddl.azure_disk(location.url, options, location.account, location.bucket, location.key,
                                             credentials)
        return clickhouse_ddl.attach_statement(self.definition, name, self.uuid, disk)

    def clone(self, destination: str | os.PathLike[str]) -> ObjectStoreTable:
        """A new table at `destination` (a new prefix in the same bucket) holding this table's rows as
        they are now, every object copied on the server, under a new UUID and table id
        (engine/clone.py). A prefix copied by other tools is refused writes; this is the way to copy."""
        location = cloning.clone_object(self, str(destination))
        own_default = self.coordinator.url == self.log.default_coordinator().url
        return type(self).open_at(location.url, coordinator=None if own_default else self._coordinator,
                                  storage_options=self.storage_options)

    def drop_data(self) -> None:
        """Delete every object of the table (its parts, log and metadata)."""
        self.parts_store.bucket.delete_prefix(self.location.key + "/")


for _scheme in set(OBJECT_SCHEMES.values()):
    table_module.URL_TABLES[_scheme] = ObjectStoreTable

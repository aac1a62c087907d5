"""PartStorage: what the engine asks of the place a table's parts live, wherever that is.

Two implementations satisfy it: `PartStore` (part_store.py: a storage policy's local disks, any
layout, parts staged and published by a rename) and `ObjectParts` (object_store.py: a prefix in a
bucket, every object written once under its final key, nothing renamed). The table engine holds
one of them and calls only what this protocol declares, so one table class serves every location;
where a feature cannot exist for a location (rebuilding a RAID disk of a bucket) the backend's
method raises the error, and nothing above it branches on the kind of store.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Protocol, TypeVar, runtime_checkable

import numpy as np

from spark_mergetree.storage.filesystem import Buffer
from spark_mergetree.storage.reports import RebuildReport, ScrubReport

T = TypeVar("T")


@runtime_checkable
class PartStorage(Protocol):
    """One table's parts: read (the part reader's `FileSource`), written, cloned, removed, listed,
    and verified. (Exporting a part as a plain directory is the same for every store:
    transfer.py `export_plain` over the reading methods.)"""

    #: True when a part is written under its final name and never renamed (object stores): the
    #: engine then names parts before writing them (block numbers first) instead of staging them.
    writes_in_place: bool
    #: True where a ClickHouse server may write parts beside ours (a local table directory): the
    #: engine then takes in parts and lightweight-UPDATE patch parts it finds by listing. False in
    #: object storage, where ClickHouse only reads in place and the log alone names the parts.
    shared_with_clickhouse: bool

    # ---- reading (format/part_reader.py FileSource)
    def list_files(self, part: str) -> list[str]: ...
    def read_file(self, part: str, name: str) -> bytes: ...
    def read_range(self, part: str, name: str, start: int, end: int, verify: bool = True) -> bytes | memoryview: ...
    def file_size(self, part: str, name: str) -> int: ...

    # ---- parts
    def list_parts(self) -> list[str]:
        """Names of the part directories under the table (temporary ones excluded)."""
        ...

    def exists(self, part: str) -> bool: ...

    def part_bytes(self, part: str) -> int:
        """Bytes the part's files take."""
        ...

    def part_url(self, part: str) -> str:
        """Where the part lies, as errors and reports name it (a directory or a URL)."""
        ...

    def write_part(self, part: str, files: Mapping[str, Buffer],
                   boundaries: Mapping[str, np.ndarray] | None = None) -> None:
        """Write a new part whole (invisible until a committed transaction names it)."""
        ...

    def clone_part(self, source: str, target: str, replaced: Mapping[str, Buffer] | None = None,
                   boundaries: Mapping[str, np.ndarray] | None = None) -> None:
        """`source`'s files as the new part `target`, `replaced`'s files instead of or beside them."""
        ...

    def remove_part(self, part: str, *, missing_ok: bool = False) -> None: ...

    def cached_reader(self, part: str, open_reader: Callable[[], T]) -> T:
        """The reader of `part`, opened by `open_reader` once per cache: the store decides how long
        a reader lives (a handle's life on disks; the process's for objects written once)."""
        ...

    def put_table_file(self, name: str, data: bytes) -> None:
        """Write, whole and at once, a file of the table's own beside its parts (`mutation_N.txt`)."""
        ...

    def read_table_file(self, name: str) -> bytes:
        """A file of the table's own (`_mergetree/table.sql`); FileNotFoundError if it is gone."""
        ...

    def replace_table_file(self, name: str, data: bytes, expected: bytes) -> bool:
        """Write `data` over the table file `name` only if it still holds `expected`; False (nothing
        written) if it holds anything else, FileNotFoundError if it is gone. So of two handles that
        read the same statement and ALTER it, one wins and the other learns it lost. In a bucket the
        comparison and the write are one conditional put; on disks the file is compared, then
        replaced by a rename (a concurrent writer in between is not caught there)."""
        ...

    def forget(self, *parts: str) -> None:
        """Drop what is cached about `parts` (they were removed)."""
        ...

    # ---- upkeep
    def scrub(self, progress: bool = False) -> ScrubReport: ...
    def rebuild(self, disk_name: str, progress: bool = True) -> RebuildReport: ...
    def close(self) -> None: ...


if TYPE_CHECKING:  # mypy checks here that both stores satisfy the protocol
    from spark_mergetree.storage.object_store import ObjectParts
    from spark_mergetree.storage.part_store import PartStore

    def _both_are_part_storages(disks: PartStore, objects: ObjectParts) -> tuple[PartStorage, PartStorage]:
        return disks, objects

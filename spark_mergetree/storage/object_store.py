"""Object storage (S3 and S3-compatible stores, Google Cloud Storage, Azure Blob Storage / ADLS Gen2)
under the `FileSystem` primitives, plus what a commit protocol without rename needs from it:
conditional writes and write-once objects.

`Bucket` is the interface: get, ranged get, get with a version token, head, put, put-if-absent,
compare-and-swap, list, list with times, delete (storage/object_base.py). One implementation per cloud, each on the
cloud's own SDK, chosen because it is the client that exposes the cloud's conditional writes
(what the object-store coordinator and the write-once log are built on) and plain ranged GETs:

- S3 (`S3Bucket`, storage/s3_store.py): boto3. `If-None-Match: *` = put-if-absent, `If-Match: <etag>` =
  compare-and-swap; ranged GETs and multipart uploads are plain calls; its retry mode ("standard":
  exponential backoff with jitter on throttling, 5xx and connection errors) covers transient
  faults; credentials the way AWS tools take them (environment, `~/.aws` profiles, instance and
  container roles, `AWS_ENDPOINT_URL`). pyarrow's S3 file system is faster for whole-file streaming
  but has no conditional writes; s3fs adds an asyncio layer over botocore for nothing we need.
- GCS (`GcsBucket`, storage/gcs_store.py): google-cloud-storage. `ifGenerationMatch=0` =
  put-if-absent, `ifGenerationMatch=<generation>` = compare-and-swap; ranged downloads; retries of
  idempotent and precondition-guarded requests with backoff; Application Default Credentials.
- Azure (`AzureBucket`, storage/azure_store.py): azure-storage-blob on the account's Blob endpoint
  (which serves ADLS Gen2 accounts too). `If-None-Match: *` = put-if-absent, `If-Match: <etag>` =
  compare-and-swap; ranged downloads; exponential retries; account keys, SAS, connection strings or
  azure-identity's DefaultAzureCredential.

pyarrow.fs's GcsFileSystem and AzureFileSystem (and fsspec's gcsfs/adlfs) offer no preconditions
on writes: an output stream overwrites whatever is there, so neither put-if-absent nor
compare-and-swap can be had from them, and the commit protocol cannot run on them.

Paths are URLs: `s3://bucket/key` (`s3a://` and `s3n://`, as Hadoop writes them, are aliases),
`gs://bucket/key`, `abfss://container@account.dfs.core.windows.net/key` (`abfs://` is an alias:
both reach the account's https Blob endpoint). Directories do not exist in object storage: a
"directory" is a key prefix ending in "/", present while any object lies under it. There is no
rename: callers that publish by renaming (the local part layouts) cannot run here; the
object-store table writes every object once under its final key and publishes by a committed log
entry instead (engine/object_table.py).

Endpoint and credentials: each cloud's own chain by default; `set_storage_options` (and the
`storage_options` arguments) add explicit ones (STORAGE_OPTION_KEYS, per cloud), e.g. from a
Spark job's options (`s3.endpoint`, `gcs.credentials_file`, `azure.account_key`, ...).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import numpy as np

from spark_mergetree.errors import CorruptPartError, StorageError, UnsupportedError
from spark_mergetree.fileops import release_mapped
from spark_mergetree.storage.azure_store import AzureBucket
from spark_mergetree.storage.filesystem import LOCAL, Buffer, Entry, FileSystem, RangeReader, byte_view
from spark_mergetree.storage.gcs_store import GcsBucket
from spark_mergetree.storage.object_base import (  # noqa: F401 - the object-store API, re-exported
    CLOUD_NAMES,
    MULTIPART_THRESHOLD,
    OBJECT_SCHEMES,
    OPTION_PREFIXES,
    OTHER_REMOTE_SCHEMES,
    REQUESTS,
    S3_SCHEMES,
    STORAGE_OPTION_KEYS,
    URL_FORMS,
    Bucket,
    ObjectUrl,
    PreconditionFailed,
    RequestCounter,
    check_storage_options,
    http_time,
    is_object_url,
    joined,
    parse_object_url,
    set_storage_options,
    storage_options,
    url_scheme,
)
from spark_mergetree.storage.reports import RebuildReport, ScrubProblem, ScrubReport
from spark_mergetree.storage.s3_store import S3Bucket

T = TypeVar("T")


def bucket_for(url: ObjectUrl | str, options: Mapping[str, Any] | None = None) -> Bucket:
    """The bucket handle of a location, for its cloud (S3, GCS or Azure Blob Storage)."""
    location = url if isinstance(url, ObjectUrl) else parse_object_url(url)
    if location.scheme == "gs":
        return GcsBucket(location, options)
    if location.scheme == "abfss":
        return AzureBucket(location, options)
    return S3Bucket(location, options)


# ---------------------------------------------------------------------------------------------- FileSystem


class _ObjectReader(RangeReader):
    def __init__(self, fs: ObjectFileSystem) -> None:
        self._fs = fs

    def read_into(self, path: str, offset: int, buffer: memoryview) -> int:
        data = self._fs.read_range(path, offset, offset + len(buffer))
        buffer[:len(data)] = data
        return len(data)

    def close(self) -> None:
        pass


class ObjectFileSystem(FileSystem):
    """The `FileSystem` primitives over object storage (paths are s3://, gs:// or abfss:// URLs). No
    rename: see the module doc. `options`: explicit options of the paths' cloud."""

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        self.options = dict(options or {})

    def _locate(self, path: str) -> tuple[Bucket, str]:
        location = parse_object_url(path)
        return bucket_for(location, self.options), location.key

    def write(self, path: str, chunks: Sequence[Buffer]) -> None:
        bucket, key = self._locate(path)
        bucket.put(key, list(chunks))

    def put_if_absent(self, path: str, data: bytes) -> bool:
        """Create the object only if no object has that key; False if one does."""
        bucket, key = self._locate(path)
        try:
            bucket.put(key, data, if_absent=True)
            return True
        except PreconditionFailed:
            return False

    def read_range(self, path: str, start: int, end: int) -> bytes:
        bucket, key = self._locate(path)
        return bucket.get(key, start, end)

    def reader(self) -> RangeReader:
        return _ObjectReader(self)

    def size(self, path: str) -> int:
        bucket, key = self._locate(path)
        return bucket.head(key)

    def ls(self, path: str) -> list[Entry]:
        bucket, key = self._locate(path)
        prefix = key + "/" if key else ""
        objects, prefixes = bucket.list_objects(prefix)
        if not objects and not prefixes:
            raise FileNotFoundError(2, "no objects under this prefix", path)
        return ([Entry(k[len(prefix):], False) for k in objects]
                + [Entry(p[len(prefix):].rstrip("/"), True) for p in prefixes])

    def isdir(self, path: str) -> bool:
        bucket, key = self._locate(path)
        response_objects, prefixes = bucket.list_objects(key + "/" if key else "")
        return bool(response_objects or prefixes)

    def isfile(self, path: str) -> bool:
        bucket, key = self._locate(path)
        try:
            bucket.head(key)
            return True
        except FileNotFoundError:
            return False

    def makedirs(self, path: str) -> None:
        """Nothing: prefixes need no creating."""

    def rename(self, source: str, destination: str) -> None:
        raise UnsupportedError(f"cannot rename {source} to {destination}: object storage has no atomic rename; "
                               "objects are written once under their final keys")

    def remove(self, path: str) -> None:
        bucket, key = self._locate(path)
        bucket.delete([key])
        bucket.delete_prefix(key + "/")

    def sync_dir(self, path: str) -> None:
        """Nothing: a completed PUT is durable."""


def filesystem_for(disk_path: str) -> FileSystem:
    """The file system a disk's path lives on: object storage for an object-store URL, else this machine's."""
    return ObjectFileSystem() if is_object_url(disk_path) else LOCAL


# ---------------------------------------------------------------------------------------------- parts

# Part files by part identity (its URL): parts are immutable once written (a name is never
# reused: block numbers are unique), so what one LIST found stays true for the process's life.
_PART_FILES: dict[str, dict[str, int]] = {}
_PART_FILES_LOCK = threading.Lock()
# Readers by part identity (its URL), for the whole process, for the same reason.
_READERS: dict[str, Any] = {}
# Upload threads by pid (a pool's threads do not survive fork()) and kind: "parts" (a part at a
# time, waiting for its files) and "files" (the PUTs) never share a pool, so no wait can deadlock.
_UPLOADS: dict[tuple[int, str], ThreadPoolExecutor] = {}


def upload_pool(kind: str) -> ThreadPoolExecutor:
    """This process's pool of upload threads of `kind` ("parts" or "files")."""
    with _PART_FILES_LOCK:
        pool = _UPLOADS.get((os.getpid(), kind))
        if pool is None:
            pool = _UPLOADS[(os.getpid(), kind)] = ThreadPoolExecutor(
                max_workers=4 if kind == "parts" else 16, thread_name_prefix=f"mergetree-upload-{kind}")
        return pool


class ObjectParts:
    """The parts of one table under an object-store prefix: `<table>/<part>/<file>`, written once under
    their final keys. Implements the reader's `FileSource` (list_files, read_file, read_range,
    file_size) with one LIST per part per process (sizes included) and one ranged GET per range,
    and storage/backend.py's `PartStorage`: parts are uploaded under their final keys by this
    process's upload pool, never renamed."""

    #: Every range is a request with latency: readers fetch a read's columns in parallel.
    parallel_reads = True
    #: No rename in a bucket: a part is uploaded once under its final name.
    writes_in_place = True
    #: ClickHouse reads a bucket's table in place, read-only: only our log names parts here.
    shared_with_clickhouse = False

    def __init__(self, location: ObjectUrl, options: Mapping[str, Any] | None = None) -> None:
        self.location = location
        self.bucket = bucket_for(location, options)

    def _key(self, part: str, name: str = "") -> str:
        return self.location.child(part, name).key if name else self.location.child(part).key

    def url(self, part: str, name: str = "") -> str:
        return self.bucket.url(self._key(part, name))

    def part_url(self, part: str) -> str:
        return self.url(part)

    def cached_reader(self, part: str, open_reader: Callable[[], T]) -> T:
        """The process-wide reader of a part (its metadata read once per process)."""
        url = self.url(part)
        with _PART_FILES_LOCK:
            cached = _READERS.get(url)
        if cached is None:
            cached = open_reader()
            with _PART_FILES_LOCK:
                cached = _READERS.setdefault(url, cached)
        return cached

    def forget(self, *parts: str) -> None:
        """Nothing: a part's name is never reused, so what is cached about it stays true."""

    def files(self, part: str) -> dict[str, int]:
        """{file name: size} of a part (cached by part identity); FileNotFoundError if it has none."""
        url = self.url(part)
        with _PART_FILES_LOCK:
            cached = _PART_FILES.get(url)
        if cached is not None:
            return cached
        prefix = self._key(part) + "/"
        objects, _ = self.bucket.list_objects(prefix, delimiter=None)
        if not objects:
            raise FileNotFoundError(2, "part has no objects", url)
        found = {key[len(prefix):]: size for key, size in objects.items()}
        with _PART_FILES_LOCK:
            _PART_FILES[url] = found
        return found

    def list_files(self, part: str) -> list[str]:
        try:
            return sorted(self.files(part))
        except FileNotFoundError:
            raise StorageError(f"part {part!r} not found at {self.url(part)}") from None

    def file_size(self, part: str, name: str) -> int:
        size = self.files(part).get(name)
        if size is None:
            raise FileNotFoundError(2, "no such file in the part", self.url(part, name))
        return size

    def read_file(self, part: str, name: str) -> bytes:
        return self.bucket.get(self._key(part, name))

    def read_range(self, part: str, name: str, start: int, end: int, verify: bool = True) -> bytes:
        """Bytes [start, end) of a part's file: one ranged GET (blocks carry their own checksums)."""
        return self.bucket.get(self._key(part, name), start, end)

    def write_part(self, part: str, files: Mapping[str, Buffer], boundaries: Mapping[str, np.ndarray] | None = None,
                   ) -> None:
        """Upload every file of a new part under its final keys, in parallel (this process's upload
        pool). Nothing reads them before a committed log entry names the part. (`boundaries` are for
        striped layouts: an object is stored whole.)"""
        items = sorted(files.items())
        pool = upload_pool("files")

        def put(name: str, data: Buffer) -> None:
            self.bucket.put(self._key(part, name), data)
            if isinstance(data, memoryview):
                release_mapped(data)  # a merge's spilled stream: its pages leave memory once sent

        for future in [pool.submit(put, name, data) for name, data in items]:
            future.result()
        with _PART_FILES_LOCK:
            _PART_FILES[self.url(part)] = {name: len(byte_view(data)) for name, data in items}

    def clone_part(self, source: str, target: str, replaced: Mapping[str, Buffer] | None = None,
                   boundaries: Mapping[str, np.ndarray] | None = None) -> None:
        """Write `source`'s files as the new part `target`: copied on the server (no bytes through
        this machine), except the files of `replaced`, uploaded instead of or beside them."""
        replaced = dict(replaced or {})
        files = self.files(source)
        copied = sorted(name for name in files if name not in replaced)
        pool = upload_pool("files")

        def copy(name: str) -> None:
            self.bucket.copy(self._key(source, name), self._key(target, name))

        for future in [pool.submit(copy, name) for name in copied]:
            future.result()
        self.write_part(target, replaced)
        with _PART_FILES_LOCK:
            _PART_FILES[self.url(target)] = {**{name: files[name] for name in copied},
                                             **{name: len(byte_view(data)) for name, data in replaced.items()}}

    def exists(self, part: str) -> bool:
        try:
            self.files(part)
            return True
        except FileNotFoundError:
            return False

    def remove(self, part: str) -> None:
        """Delete every object of a part (nothing if it has none)."""
        with _PART_FILES_LOCK:
            _PART_FILES.pop(self.url(part), None)
        self.bucket.delete_prefix(self._key(part) + "/")

    def remove_part(self, part: str, *, missing_ok: bool = False) -> None:
        """`remove`, under the name the local part stores give it."""
        self.remove(part)

    def put_table_file(self, name: str, data: bytes) -> None:
        """One PUT under the table's prefix."""
        self.bucket.put(self.location.child(name).key, data)

    def read_table_file(self, name: str) -> bytes:
        return self.bucket.get(self.location.child(name).key)

    def replace_table_file(self, name: str, data: bytes, expected: bytes) -> bool:
        """Compared and written by one conditional put (over the version read)."""
        key = self.location.child(name).key
        current, token = self.bucket.get_versioned(key)
        if current != expected:
            return False
        try:
            self.bucket.put(key, data, if_match=token)
        except PreconditionFailed:
            return False
        return True

    def part_bytes(self, part: str) -> int:
        return sum(self.files(part).values())

    def list_parts(self) -> list[str]:
        """Every part name under the table's prefix (one listing), whether a log names it or not."""
        return sorted(name for name in self.part_names() if name)

    def scrub(self, progress: bool = False) -> ScrubReport:
        """Re-hash every object of every part under the prefix against its checksums.txt (the store
        keeps its own redundancy: there are no stripe units or parity here to verify)."""
        from tqdm import tqdm  # only here: every process that opens a table imports this module

        from spark_mergetree.format.part_reader import verify_part

        report = ScrubReport()
        for part in tqdm(self.list_parts(), desc="scrub", unit="part", disable=not progress):
            report.parts_checked += 1
            try:
                found = verify_part(self, part, self.url(part))
                report.units_checked += len(self.files(part))
            except (CorruptPartError, StorageError, OSError) as error:
                found = [str(error)]
            report.problems += [ScrubProblem(part, self.location.bucket, "checksum", detail=what) for what in found]
        return report

    def rebuild(self, disk_name: str, progress: bool = True) -> RebuildReport:
        raise UnsupportedError(f"{self.location.url}: a table in object storage has no disks to rebuild "
                               f"({disk_name!r}); the store keeps its objects' redundancy itself")

    def close(self) -> None:
        """Nothing: the caches are the process's, the pools shared."""

    def part_names(self) -> dict[str, float]:
        """{part directory name: newest object time} of everything under the table's prefix that
        is not the table's own metadata (`_mergetree/`), with the server's time now under ""."""
        prefix = self.location.key + "/" if self.location.key else ""
        times, now = self.bucket.list_with_times(prefix)
        names: dict[str, float] = {}
        for key, modified in times.items():
            head, _, rest = key[len(prefix):].partition("/")
            if rest and not head.startswith("_"):
                names[head] = max(names.get(head, 0.0), modified)
        names[""] = now
        return names

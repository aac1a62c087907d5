"""Object storage (S3 and S3-compatible stores) under the `FileSystem` primitives, plus what a
commit protocol without rename needs from it: conditional writes and write-once objects.

Why boto3 (and not pyarrow.fs or fsspec/s3fs): it is the one client that exposes S3's conditional
writes (`If-None-Match: *` = put-if-absent, `If-Match: <etag>` = compare-and-swap), which the
object-store coordinator and the write-once log are built on; ranged GETs and multipart uploads
are plain calls; its retry mode ("standard": exponential backoff with jitter on throttling, 5xx
and connection errors) covers transient faults; and it takes credentials the way AWS tools do
(environment, `~/.aws` profiles, instance and container roles, `AWS_ENDPOINT_URL`). pyarrow's S3
file system is faster for whole-file streaming but has no conditional writes; s3fs adds an
asyncio layer over botocore for nothing we need. Ranged reads here go straight to GET with a
`Range` header, issued in parallel by the reader's thread pool.

Paths are URLs: `s3://bucket/key` (`s3a://` and `s3n://`, as Hadoop writes them, are aliases).
Directories do not exist in object storage: a "directory" is a key prefix ending in "/", present
while any object lies under it. There is no rename: callers that publish by renaming (the local
part layouts) cannot run here; the object-store table writes every object once under its final
key and publishes by a committed log entry instead (engine/object_table.py).

Endpoint and credentials: boto3's chain by default; `set_storage_options` (and the
`storage_options` arguments) add explicit ones (`endpoint`, `access_key_id`, `secret_access_key`,
`session_token`, `region`), e.g. from a Spark job's options.
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from spark_mergetree.errors import InvalidOptionError, StorageError, UnsupportedError
from spark_mergetree.storage.filesystem import LOCAL, Buffer, Entry, FileSystem, RangeReader, byte_view

#: URL schemes served by the S3 client; the value is the canonical scheme.
S3_SCHEMES = {"s3": "s3", "s3a": "s3", "s3n": "s3"}
#: Schemes of other remote stores, refused with a message naming what is supported.
OTHER_REMOTE_SCHEMES = ("gs", "gcs", "abfs", "abfss", "wasb", "wasbs", "hdfs", "viewfs", "dbfs", "oss", "cos")
#: Explicit options a user may give (Spark `.option("s3.endpoint", ...)` and the like).
STORAGE_OPTION_KEYS = ("endpoint", "access_key_id", "secret_access_key", "session_token", "region")
# Files at least this big go up as a multipart upload (parts of this size, uploaded in parallel).
MULTIPART_THRESHOLD = 64 << 20
_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*)://([^/]*)/?(.*)$")
# Bucket names as S3 takes them (3-63 characters: lower-case letters, digits, dots, hyphens).
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9]$")


class PreconditionFailed(StorageError):
    """A conditional write did not hold: the object exists (put-if-absent) or changed (compare-and-swap)."""


@dataclass(frozen=True)
class ObjectUrl:
    """`s3://bucket/key`: a bucket and a key prefix with no leading or trailing slash."""

    bucket: str
    key: str

    @property
    def url(self) -> str:
        return f"s3://{self.bucket}/{self.key}" if self.key else f"s3://{self.bucket}"

    def child(self, *names: str) -> ObjectUrl:
        return ObjectUrl(self.bucket, "/".join([p for p in (self.key, *names) if p]))

    def __str__(self) -> str:
        return self.url


def url_scheme(text: str) -> str | None:
    """The lower-cased scheme of a `scheme://...` URL, or None."""
    match = _URL.match(text)
    return match.group(1).lower() if match else None


def is_object_url(text: str | os.PathLike[str]) -> bool:
    """Whether `text` names a location in object storage this package can use (`s3://`, `s3a://`)."""
    return isinstance(text, str) and url_scheme(text) in S3_SCHEMES


def parse_object_url(text: str) -> ObjectUrl:
    """`s3://bucket/prefix` → ObjectUrl; InvalidOptionError naming the URL when it is not one."""
    match = _URL.match(text)
    scheme = match.group(1).lower() if match else None
    if match is None or scheme not in S3_SCHEMES:
        raise InvalidOptionError(f"{text!r} is not an s3:// URL")
    bucket, key = match.group(2), match.group(3).strip("/")
    if not _BUCKET.match(bucket):
        raise InvalidOptionError(f"{text!r}: {bucket!r} is not a valid bucket name (3-63 characters: lower-case "
                                 "letters, digits, dots and hyphens)")
    if "//" in key or any(part in (".", "..") for part in key.split("/")):
        raise InvalidOptionError(f"{text!r}: the key must not hold empty, '.' or '..' path segments")
    return ObjectUrl(bucket, key)


# ---------------------------------------------------------------------------------------------- options

_process_options: dict[str, str] = {}
_bucket_options: dict[str, dict[str, str]] = {}
_options_lock = threading.Lock()


def check_storage_options(options: Mapping[str, Any] | None) -> dict[str, str]:
    """The explicit storage options, checked: InvalidOptionError naming an unknown one."""
    out: dict[str, str] = {}
    for name, value in (options or {}).items():
        if name not in STORAGE_OPTION_KEYS:
            raise InvalidOptionError(f"unknown storage option {name!r}; known: {', '.join(STORAGE_OPTION_KEYS)}")
        if value is not None and str(value) != "":
            out[name] = str(value)
    if ("access_key_id" in out) != ("secret_access_key" in out):
        raise InvalidOptionError("storage options access_key_id and secret_access_key go together: give both")
    return out


def set_storage_options(options: Mapping[str, Any] | None) -> None:
    """Explicit endpoint/credentials for every s3:// location this process opens afterwards
    (options given to a call win over these; these win over boto3's own chain)."""
    checked = check_storage_options(options)
    with _options_lock:
        _process_options.clear()
        _process_options.update(checked)


def storage_options() -> dict[str, str]:
    with _options_lock:
        return dict(_process_options)


# ---------------------------------------------------------------------------------------------- client

_clients: dict[tuple[int, tuple[tuple[str, str], ...]], Any] = {}
_clients_lock = threading.Lock()


def _client(options: Mapping[str, str]) -> Any:
    """A boto3 S3 client for these options (one per process and options; boto3 clients are thread-safe)."""
    key = (os.getpid(), tuple(sorted(options.items())))
    with _clients_lock:
        client = _clients.get(key)
        if client is not None:
            return client
    try:
        import boto3
        from botocore.config import Config
    except ImportError as error:  # pragma: no cover - boto3 is a dependency
        raise UnsupportedError("s3:// locations need boto3: pip install 'spark-mergetree[s3]'") from error
    config = Config(retries={"max_attempts": 8, "mode": "standard"}, connect_timeout=10, read_timeout=60,
                    max_pool_connections=32, s3={"addressing_style": "path"} if "endpoint" in options else None)
    session = boto3.session.Session()
    client = session.client(
        "s3", endpoint_url=options.get("endpoint"), region_name=options.get("region"),
        aws_access_key_id=options.get("access_key_id"), aws_secret_access_key=options.get("secret_access_key"),
        aws_session_token=options.get("session_token"), config=config)
    with _clients_lock:
        return _clients.setdefault(key, client)


def _translate(error: Exception, url: str, bucket: str) -> OSError:
    """A boto3/botocore failure as our error, naming the URL and the cause."""
    from botocore.exceptions import (
        BotoCoreError,
        ClientError,
        EndpointConnectionError,
        NoCredentialsError,
        PartialCredentialsError,
    )

    if isinstance(error, (NoCredentialsError, PartialCredentialsError)):
        return StorageError(f"{url}: no usable credentials ({error}); set AWS_ACCESS_KEY_ID and "
                            "AWS_SECRET_ACCESS_KEY, a profile (AWS_PROFILE) or an instance role, or pass the "
                            "access_key_id and secret_access_key options")
    if isinstance(error, EndpointConnectionError):
        return StorageError(f"{url}: cannot reach the storage endpoint ({error})")
    if isinstance(error, ClientError):
        info = error.response.get("Error", {})
        code = str(info.get("Code", ""))
        status = error.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        message = info.get("Message", "") or str(error)
        if code == "NoSuchBucket":
            return StorageError(f"{url}: bucket {bucket!r} does not exist")
        if code in ("NoSuchKey", "404", "NotFound") or status == 404:
            return FileNotFoundError(2, "no such object", url)
        if code in ("PreconditionFailed", "ConditionalRequestConflict") or status in (412, 409):
            return PreconditionFailed(f"{url}: conditional write did not hold ({code})")
        if code in ("AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "403", "Forbidden",
                    "AllAccessDisabled") or status == 403:
            return StorageError(f"{url}: access denied ({code}: {message}); check the credentials and the "
                                "bucket policy")
        if code in ("PermanentRedirect", "AuthorizationHeaderMalformed", "301", "IllegalLocationConstraintException"):
            return StorageError(f"{url}: wrong region for bucket {bucket!r} ({code}: {message}); set the region "
                                "option or AWS_DEFAULT_REGION")
        return StorageError(f"{url}: {code or status}: {message}")
    if isinstance(error, BotoCoreError):
        return StorageError(f"{url}: {error}")
    return StorageError(f"{url}: {error}")


class RequestCounter:
    """Requests sent by one bucket handle, by kind (GET, PUT, HEAD, LIST, DELETE)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.counts: dict[str, int] = {}

    def add(self, kind: str) -> None:
        with self._lock:
            self.counts[kind] = self.counts.get(kind, 0) + 1

    def total(self) -> int:
        with self._lock:
            return sum(self.counts.values())

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self.counts)


#: Requests this process sent to object storage, by kind (for tests and the benchmark).
REQUESTS = RequestCounter()


class Bucket:
    """One bucket through one client: the object operations everything else is built from."""

    def __init__(self, bucket: str, options: Mapping[str, Any] | None = None) -> None:
        explicit = check_storage_options(options)
        if explicit:
            with _options_lock:
                # Options given for a bucket (a table's, e.g. from a Spark job's options) serve every
                # handle of that bucket in this process (its coordinator, its log), also one made
                # before them: a handle takes its options when it first sends a request.
                _bucket_options[bucket] = explicit
        self.name = bucket
        self._explicit = explicit
        self._resolved: tuple[dict[str, str], Any] | None = None

    def _resolve(self) -> tuple[dict[str, str], Any]:
        if self._resolved is None:
            merged = storage_options()
            with _options_lock:
                merged.update(_bucket_options.get(self.name, {}))
            merged.update(self._explicit)
            self._resolved = (merged, _client(merged))
        return self._resolved

    @property
    def options(self) -> dict[str, str]:
        return self._resolve()[0]

    @property
    def _client(self) -> Any:
        return self._resolve()[1]

    def credentials(self) -> tuple[str, str] | None:
        """(access key id, secret) this handle signs with, if it has any."""
        if "access_key_id" in self.options:
            return self.options["access_key_id"], self.options["secret_access_key"]
        found = self._client._request_signer._credentials
        return (found.access_key, found.secret_key) if found is not None else None

    def _url(self, key: str) -> str:
        return f"s3://{self.name}/{key}"

    def _call(self, kind: str, key: str, method: str, **arguments: Any) -> Any:
        REQUESTS.add(kind)
        try:
            return getattr(self._client, method)(Bucket=self.name, **arguments)
        except Exception as error:  # noqa: BLE001 - every client failure becomes an OSError naming the URL
            raise _translate(error, self._url(key), self.name) from error

    def check(self, key: str = "") -> None:
        """Fail now, naming the URL and the cause, if the bucket is missing, unreachable or denied."""
        self._call("LIST", key, "list_objects_v2", Prefix=key, MaxKeys=1)

    def get(self, key: str, start: int | None = None, end: int | None = None) -> bytes:
        """The object's bytes, or bytes [start, end) of it; FileNotFoundError if absent."""
        if start is not None and end is not None and end <= start:
            return b""
        arguments: dict[str, Any] = {"Key": key}
        if start is not None:
            arguments["Range"] = f"bytes={start}-{'' if end is None else end - 1}"
        try:
            response = self._call("GET", key, "get_object", **arguments)
        except StorageError as error:
            if "InvalidRange" in str(error):
                return b""
            raise
        return response["Body"].read()

    def get_versioned(self, key: str) -> tuple[bytes, str]:
        """(bytes, ETag) of an object, for a later compare-and-swap; FileNotFoundError if absent."""
        response = self._call("GET", key, "get_object", Key=key)
        return response["Body"].read(), response["ETag"]

    def head(self, key: str) -> int:
        """The object's size; FileNotFoundError if absent."""
        return int(self._call("HEAD", key, "head_object", Key=key)["ContentLength"])

    def put(self, key: str, data: Buffer | Sequence[Buffer], *, if_absent: bool = False,
            if_match: str | None = None) -> str:
        """Write an object whole; its ETag. `if_absent`: only if no object has the key; `if_match`:
        only if the object's ETag is that one. PreconditionFailed when the condition does not hold."""
        chunks = [data] if isinstance(data, (bytes, bytearray, memoryview)) or hasattr(data, "__array__") else data
        body = b"".join(byte_view(chunk) for chunk in chunks)  # type: ignore[arg-type]
        if len(body) >= MULTIPART_THRESHOLD and not if_absent and if_match is None:
            return self._multipart(key, body)
        arguments: dict[str, Any] = {"Key": key, "Body": body}
        if if_absent:
            arguments["IfNoneMatch"] = "*"
        if if_match is not None:
            arguments["IfMatch"] = if_match
        return str(self._call("PUT", key, "put_object", **arguments)["ETag"])

    def _multipart(self, key: str, body: bytes) -> str:
        from concurrent.futures import ThreadPoolExecutor

        upload = self._call("PUT", key, "create_multipart_upload", Key=key)["UploadId"]
        view = memoryview(body)
        pieces = [(number + 1, view[offset:offset + MULTIPART_THRESHOLD])
                  for number, offset in enumerate(range(0, len(body), MULTIPART_THRESHOLD))]

        def send(piece: tuple[int, memoryview]) -> dict[str, Any]:
            number, chunk = piece
            response = self._call("PUT", key, "upload_part", Key=key, UploadId=upload, PartNumber=number,
                                  Body=bytes(chunk))
            return {"PartNumber": number, "ETag": response["ETag"]}

        try:
            with ThreadPoolExecutor(min(8, len(pieces))) as pool:
                parts = list(pool.map(send, pieces))
            return str(self._call("PUT", key, "complete_multipart_upload", Key=key, UploadId=upload,
                                  MultipartUpload={"Parts": parts})["ETag"])
        except BaseException:
            try:
                self._call("DELETE", key, "abort_multipart_upload", Key=key, UploadId=upload)
            except OSError:
                pass
            raise

    def list_objects(self, prefix: str, delimiter: str | None = "/") -> tuple[dict[str, int], list[str]]:
        """({key: size} of the objects under `prefix`, the common prefixes one level down)."""
        objects: dict[str, int] = {}
        prefixes: list[str] = []
        arguments: dict[str, Any] = {"Prefix": prefix}
        if delimiter:
            arguments["Delimiter"] = delimiter
        while True:
            response = self._call("LIST", prefix, "list_objects_v2", **arguments)
            for item in response.get("Contents", ()):
                objects[item["Key"]] = int(item["Size"])
            prefixes.extend(item["Prefix"] for item in response.get("CommonPrefixes", ()))
            if not response.get("IsTruncated"):
                return objects, prefixes
            arguments["ContinuationToken"] = response["NextContinuationToken"]

    def list_with_times(self, prefix: str) -> tuple[dict[str, float], float]:
        """({key: last-modified epoch seconds} of every object under `prefix`, the server's time
        now): ages measured on the server's clock, whatever this machine's clock says."""
        out: dict[str, float] = {}
        arguments: dict[str, Any] = {"Prefix": prefix}
        while True:
            response = self._call("LIST", prefix, "list_objects_v2", **arguments)
            for item in response.get("Contents", ()):
                out[item["Key"]] = item["LastModified"].timestamp()
            if not response.get("IsTruncated"):
                return out, _server_time(response)
            arguments["ContinuationToken"] = response["NextContinuationToken"]

    def age(self, key: str) -> float:
        """Seconds since the object was last written, on the server's clock; FileNotFoundError if absent."""
        response = self._call("HEAD", key, "head_object", Key=key)
        return _server_time(response) - response["LastModified"].timestamp()

    def delete(self, keys: Iterable[str]) -> None:
        """Delete objects (absent ones are no error), 1000 per request."""
        batch = list(keys)
        for begin in range(0, len(batch), 1000):
            chunk = batch[begin:begin + 1000]
            self._call("DELETE", chunk[0], "delete_objects",
                       Delete={"Objects": [{"Key": key} for key in chunk], "Quiet": True})

    def delete_prefix(self, prefix: str) -> list[str]:
        """Delete every object under `prefix`; the keys deleted."""
        keys = list(self.list_objects(prefix, delimiter=None)[0])
        self.delete(keys)
        return keys


def _server_time(response: Mapping[str, Any]) -> float:
    """The server's clock when it answered (the HTTP Date header), else this machine's."""
    from email.utils import parsedate_to_datetime

    date = response.get("ResponseMetadata", {}).get("HTTPHeaders", {}).get("date")
    try:
        return parsedate_to_datetime(date).timestamp() if date else time.time()
    except (TypeError, ValueError):
        return time.time()


def bucket_for(url: ObjectUrl | str, options: Mapping[str, Any] | None = None) -> Bucket:
    location = url if isinstance(url, ObjectUrl) else parse_object_url(url)
    return Bucket(location.bucket, options)


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
    """The `FileSystem` primitives over S3 (paths are s3:// URLs). No rename: see the module doc."""

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        self.options = check_storage_options(options)

    def _locate(self, path: str) -> tuple[Bucket, str]:
        location = parse_object_url(path)
        return Bucket(location.bucket, self.options), location.key

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
    """The file system a disk's path lives on: object storage for an s3:// URL, else this machine's."""
    return ObjectFileSystem() if is_object_url(disk_path) else LOCAL


# ---------------------------------------------------------------------------------------------- parts

# Part files by part identity (its URL): parts are immutable once written (a name is never
# reused: block numbers are unique), so what one LIST found stays true for the process's life.
_PART_FILES: dict[str, dict[str, int]] = {}
_PART_FILES_LOCK = threading.Lock()


class ObjectParts:
    """The parts of one table under an s3:// prefix: `<table>/<part>/<file>`, written once under
    their final keys. Implements the reader's `FileSource` (list_files, read_file, read_range,
    file_size) with one LIST per part per process (sizes included) and one ranged GET per range."""

    #: Every range is a request with latency: readers fetch a read's columns in parallel.
    parallel_reads = True

    def __init__(self, location: ObjectUrl, options: Mapping[str, Any] | None = None) -> None:
        self.location = location
        self.bucket = Bucket(location.bucket, options)

    def _key(self, part: str, name: str = "") -> str:
        return self.location.child(part, name).key if name else self.location.child(part).key

    def url(self, part: str, name: str = "") -> str:
        return f"s3://{self.bucket.name}/{self._key(part, name)}"

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

    def write_part(self, part: str, files: Mapping[str, Buffer], pool: Any = None) -> None:
        """Upload every file of a new part under its final keys (in parallel with `pool`). Nothing
        reads them before a committed log entry names the part."""
        items = sorted(files.items())
        if pool is None:
            for name, data in items:
                self.bucket.put(self._key(part, name), data)
        else:
            for future in [pool.submit(self.bucket.put, self._key(part, name), data) for name, data in items]:
                future.result()
        with _PART_FILES_LOCK:
            _PART_FILES[self.url(part)] = {name: len(byte_view(data)) for name, data in items}

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

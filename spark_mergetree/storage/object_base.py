"""The object-store interface every cloud implements (`Bucket`), object URLs and storage options.

storage/object_store.py explains the design and picks the implementation per URL (`bucket_for`);
the implementations are storage/s3_store.py (boto3), storage/gcs_store.py (google-cloud-storage)
and storage/azure_store.py (azure-storage-blob).
"""

from __future__ import annotations

import bisect
import io
import os
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from spark_mergetree.errors import InvalidOptionError, StorageError
from spark_mergetree.storage.filesystem import Buffer, byte_view

#: URL schemes of object storage; the value is the canonical scheme ("s3", "gs", "abfss").
OBJECT_SCHEMES = {"s3": "s3", "s3a": "s3", "s3n": "s3", "gs": "gs", "abfs": "abfss", "abfss": "abfss"}
#: The URL schemes served by the S3 client.
S3_SCHEMES = {name: canonical for name, canonical in OBJECT_SCHEMES.items() if canonical == "s3"}
#: How each cloud's locations are written (for messages).
URL_FORMS = ("s3://bucket/path", "gs://bucket/path", "abfss://container@account.dfs.core.windows.net/path")
CLOUD_NAMES = {"s3": "S3", "gs": "Google Cloud Storage", "abfss": "Azure"}
#: Schemes of other remote stores, refused with a message naming what is supported.
OTHER_REMOTE_SCHEMES = ("gcs", "wasb", "wasbs", "hdfs", "viewfs", "dbfs", "oss", "cos")
#: Explicit options a user may give, per cloud (Spark: `.option("s3.endpoint", ...)`,
#: `.option("gcs.endpoint", ...)`, `.option("azure.account_key", ...)`: OPTION_PREFIXES).
STORAGE_OPTION_KEYS = {
    "s3": ("endpoint", "access_key_id", "secret_access_key", "session_token", "region"),
    # endpoint: an emulator or private endpoint (else $STORAGE_EMULATOR_HOST, else Google's);
    # credentials_file: a service-account or ADC JSON file; token: an OAuth2 access token.
    "gs": ("endpoint", "project", "credentials_file", "token"),
    # endpoint: the Blob service URL (e.g. an emulator's http://127.0.0.1:10000/account), else
    # https://<account>.blob.core.windows.net; client_id/client_secret/tenant_id: a service principal.
    "abfss": ("endpoint", "account_key", "sas_token", "connection_string", "client_id", "client_secret",
              "tenant_id"),
}
#: The prefix of each cloud's options among a Spark job's options.
OPTION_PREFIXES = {"s3": "s3.", "gs": "gcs.", "abfss": "azure."}
_OPTION_GROUPS = {"s3": (("access_key_id", "secret_access_key"),),
                  "abfss": (("client_id", "client_secret", "tenant_id"),)}
# Files at least this big go up as a multipart upload (parts of this size, uploaded in parallel).
MULTIPART_THRESHOLD = 64 << 20
_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*)://([^/]*)/?(.*)$")
# Bucket names as S3 takes them (3-63 characters: lower-case letters, digits, dots, hyphens).
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9]$")
# GCS also allows underscores (and up to 222 characters with dots).
_GCS_BUCKET = re.compile(r"^[a-z0-9][a-z0-9._\-]{1,220}[a-z0-9]$")
# Azure: containers 3-63 lower-case letters, digits and single hyphens; accounts 3-24 letters/digits.
_CONTAINER = re.compile(r"^[a-z0-9][a-z0-9\-]{1,61}[a-z0-9]$")
_ACCOUNT = re.compile(r"^[a-z0-9]{3,24}$")


class PreconditionFailed(StorageError):
    """A conditional write did not hold: the object exists (put-if-absent) or changed (compare-and-swap)."""


@dataclass(frozen=True)
class ObjectUrl:
    """A bucket (an Azure container) and a key prefix with no leading or trailing slash. `scheme` is
    the canonical one ("s3", "gs", "abfss"); `host` is an Azure location's
    `account.dfs.core.windows.net` ("" elsewhere)."""

    bucket: str
    key: str
    scheme: str = "s3"
    host: str = ""

    @property
    def root(self) -> str:
        """The bucket's URL (the container's, with its account)."""
        return f"{self.scheme}://{self.bucket}@{self.host}" if self.host else f"{self.scheme}://{self.bucket}"

    @property
    def url(self) -> str:
        return f"{self.root}/{self.key}" if self.key else self.root

    @property
    def account(self) -> str:
        """The Azure storage account ("" for S3 and GCS)."""
        return self.host.split(".", 1)[0]

    def child(self, *names: str) -> ObjectUrl:
        return replace(self, key="/".join([p for p in (self.key, *names) if p]))

    def __str__(self) -> str:
        return self.url


def url_scheme(text: str) -> str | None:
    """The lower-cased scheme of a `scheme://...` URL, or None."""
    match = _URL.match(text)
    return match.group(1).lower() if match else None


def is_object_url(text: str | os.PathLike[str]) -> bool:
    """Whether `text` names a location in object storage this package can use (s3://, gs://, abfss://...)."""
    return isinstance(text, str) and url_scheme(text) in OBJECT_SCHEMES


def parse_object_url(text: str) -> ObjectUrl:
    """`s3://bucket/prefix`, `gs://bucket/prefix`, `abfss://container@account.dfs.core.windows.net/prefix`
    → ObjectUrl; InvalidOptionError naming the URL and what is wrong when it is not one."""
    match = _URL.match(text)
    given = match.group(1).lower() if match else None
    if match is None or given not in OBJECT_SCHEMES:
        raise InvalidOptionError(f"{text!r} is not an object-store URL ({', '.join(URL_FORMS)})")
    scheme = OBJECT_SCHEMES[given]
    authority, key = match.group(2), match.group(3).strip("/")
    host = ""
    if scheme == "abfss":
        container, at, host = authority.partition("@")
        account, dot, _ = host.partition(".")
        if not at or not container:
            raise InvalidOptionError(f"{text!r}: no container; Azure locations are "
                                     f"{given}://container@account.dfs.core.windows.net/path")
        if not dot or not _ACCOUNT.match(account):
            raise InvalidOptionError(f"{text!r}: {host!r} is not a storage account's host (account.dfs.core."
                                     "windows.net; account names are 3-24 lower-case letters and digits)")
        if not _CONTAINER.match(container) or "--" in container:
            raise InvalidOptionError(f"{text!r}: {container!r} is not a valid container name (3-63 characters: "
                                     "lower-case letters, digits and single hyphens)")
        bucket = container
    else:
        bucket = authority
        pattern = _BUCKET if scheme == "s3" else _GCS_BUCKET
        if not bucket:
            raise InvalidOptionError(f"{text!r}: no bucket; write {given}://bucket/path")
        if not pattern.match(bucket):
            raise InvalidOptionError(f"{text!r}: {bucket!r} is not a valid bucket name (3-63 characters: lower-case "
                                     f"letters, digits, dots and hyphens{', underscores' if scheme == 'gs' else ''})")
    if "//" in key or any(part in (".", "..") for part in key.split("/")):
        raise InvalidOptionError(f"{text!r}: the key must not hold empty, '.' or '..' path segments")
    return ObjectUrl(bucket, key, scheme, host)


# ---------------------------------------------------------------------------------------------- options

_process_options: dict[str, dict[str, str]] = {}
_bucket_options: dict[str, dict[str, str]] = {}
_options_lock = threading.Lock()


def check_storage_options(options: Mapping[str, Any] | None, scheme: str = "s3") -> dict[str, str]:
    """The explicit storage options of one cloud (`scheme`: "s3", "gs", "abfss"), checked:
    InvalidOptionError naming an unknown one or an incomplete set."""
    known = STORAGE_OPTION_KEYS[scheme]
    out: dict[str, str] = {}
    for name, value in (options or {}).items():
        if name not in known:
            raise InvalidOptionError(f"unknown {CLOUD_NAMES[scheme]} storage option {name!r}; known: {', '.join(known)}")
        if value is not None and str(value) != "":
            out[name] = str(value)
    for group in _OPTION_GROUPS.get(scheme, ()):
        given = [name for name in group if name in out]
        if given and len(given) != len(group):
            raise InvalidOptionError(f"storage options {' and '.join(group)} go together: give all of them")
    return out


def set_storage_options(options: Mapping[str, Any] | None, scheme: str = "s3") -> None:
    """Explicit endpoint/credentials for every location of one cloud this process opens afterwards
    (options given to a call win over these; these win over the cloud's own chain)."""
    checked = check_storage_options(options, scheme)
    with _options_lock:
        _process_options[scheme] = checked


def storage_options(scheme: str = "s3") -> dict[str, str]:
    with _options_lock:
        return dict(_process_options.get(scheme, {}))


# ---------------------------------------------------------------------------------------------- requests


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

_clients: dict[tuple[Any, ...], Any] = {}
_clients_lock = threading.Lock()


def http_time(date: str | None) -> float:
    """An HTTP Date header as epoch seconds (the server's clock), else this machine's time now."""
    from email.utils import parsedate_to_datetime

    try:
        return parsedate_to_datetime(date).timestamp() if date else time.time()
    except (TypeError, ValueError):
        return time.time()


class Bucket:
    """One bucket (an Azure container) through one client: the object operations everything else
    is built from. One implementation per cloud (S3Bucket, GcsBucket, AzureBucket); make one
    with `bucket_for`. Every client failure becomes an OSError naming the URL and the cause:
    FileNotFoundError (no such object), PreconditionFailed (a conditional write did not hold),
    StorageError (missing bucket, no credentials, access denied, unreachable endpoint...)."""

    #: Environment variables the cloud's client takes its endpoint and credentials from: part of
    #: the key of the process's client cache, so a changed environment gets a new client.
    ENVIRONMENT: tuple[str, ...] = ()

    def __init__(self, location: ObjectUrl, options: Mapping[str, Any] | None = None) -> None:
        explicit = check_storage_options(options, location.scheme)
        self.location = replace(location, key="")
        if explicit:
            with _options_lock:
                # Options given for a bucket (a table's, e.g. from a Spark job's options) serve every
                # handle of that bucket in this process (its coordinator, its log), also one made
                # before them: a handle takes its options when it first sends a request.
                _bucket_options[self.location.root] = explicit
        self.name = location.bucket
        self._explicit = explicit
        self._resolved: tuple[dict[str, str], Any] | None = None

    # ------------------------------------------------------------------ client

    def _resolve(self) -> tuple[dict[str, str], Any]:
        if self._resolved is None:
            merged = storage_options(self.location.scheme)
            with _options_lock:
                merged.update(_bucket_options.get(self.location.root, {}))
            merged.update(self._explicit)
            key = (os.getpid(), self.location.scheme, self.location.host, tuple(sorted(merged.items())),
                   tuple(os.environ.get(name) for name in self.ENVIRONMENT))
            with _clients_lock:
                client = _clients.get(key)
            if client is None:
                client = self._make_client(merged)
                with _clients_lock:
                    client = _clients.setdefault(key, client)
            self._resolved = (merged, client)
        return self._resolved

    def _make_client(self, options: Mapping[str, str]) -> Any:
        """A client of the cloud's SDK for these options (one per process and options: thread-safe)."""
        raise NotImplementedError

    def _translate(self, error: Exception, url: str) -> OSError:
        """A client failure as our error, naming the URL and the cause."""
        raise NotImplementedError

    @property
    def options(self) -> dict[str, str]:
        return self._resolve()[0]

    @property
    def _client(self) -> Any:
        return self._resolve()[1]

    def url(self, key: str) -> str:
        return self.location.child(key).url

    def _call(self, kind: str, key: str, operation: Callable[[Any], Any]) -> Any:
        """`operation(client)`, counted as one request of `kind`, its failures translated."""
        REQUESTS.add(kind)
        try:
            return operation(self._client)
        except OSError as error:
            if isinstance(error, (StorageError, FileNotFoundError)):
                raise
            raise self._translate(error, self.url(key)) from error
        except Exception as error:  # noqa: BLE001 - every client failure becomes an OSError naming the URL
            raise self._translate(error, self.url(key)) from error

    def credentials(self) -> tuple[str, str] | None:
        """(access key id, secret) this handle signs with, if it has such a pair (S3 only)."""
        return None

    # ------------------------------------------------------------------ operations

    def check(self, key: str = "") -> None:
        """Fail now, naming the URL and the cause, if the bucket is missing, unreachable or denied."""
        raise NotImplementedError

    def get(self, key: str, start: int | None = None, end: int | None = None) -> bytes:
        """The object's bytes, or bytes [start, end) of it (fewer past its end); FileNotFoundError if absent."""
        raise NotImplementedError

    def get_versioned(self, key: str) -> tuple[bytes, str]:
        """(bytes, version token) of an object, for a later compare-and-swap (`put(if_match=token)`)."""
        raise NotImplementedError

    def head(self, key: str) -> int:
        """The object's size; FileNotFoundError if absent."""
        raise NotImplementedError

    def put(self, key: str, data: Buffer | Sequence[Buffer], *, if_absent: bool = False,
            if_match: str | None = None) -> str:
        """Write an object whole; its version token. `if_absent`: only if no object has the key;
        `if_match`: only if the object's version is that token. PreconditionFailed when the
        condition does not hold."""
        raise NotImplementedError

    def copy(self, key: str, new_key: str) -> None:
        """Copy an object to `new_key` in this bucket on the server (no bytes through this machine);
        FileNotFoundError if it is absent."""
        raise NotImplementedError

    def list_objects(self, prefix: str, delimiter: str | None = "/") -> tuple[dict[str, int], list[str]]:
        """({key: size} of the objects under `prefix`, the common prefixes one level down)."""
        raise NotImplementedError

    def list_with_times(self, prefix: str) -> tuple[dict[str, float], float]:
        """({key: last-modified epoch seconds} of every object under `prefix`, the server's time
        now): ages measured on the server's clock, whatever this machine's clock says."""
        raise NotImplementedError

    def age(self, key: str) -> float:
        """Seconds since the object was last written, on the server's clock; FileNotFoundError if absent."""
        raise NotImplementedError

    def delete(self, keys: Iterable[str]) -> None:
        """Delete objects (absent ones are no error)."""
        raise NotImplementedError

    def delete_prefix(self, prefix: str) -> list[str]:
        """Delete every object under `prefix`; the keys deleted."""
        keys = list(self.list_objects(prefix, delimiter=None)[0])
        self.delete(keys)
        return keys

    def _delete_each(self, keys: Iterable[str], delete_one: Callable[[Any, str], None]) -> None:
        """Delete objects one request each (stores with no batch delete), eight at a time."""
        batch = list(keys)
        if not batch:
            return
        from concurrent.futures import ThreadPoolExecutor

        def run(key: str) -> None:
            try:
                self._call("DELETE", key, lambda client: delete_one(client, key))
            except FileNotFoundError:
                pass

        with ThreadPoolExecutor(min(8, len(batch))) as pool:
            list(pool.map(run, batch))


class BufferStream(io.RawIOBase):
    """An object's body (one buffer or a sequence of them) as a seekable binary stream, read in
    place: SDKs that upload from a stream (in blocks or chunks, rewinding to retry) take it without
    the body being copied into one bytes object first."""

    def __init__(self, data: Buffer | Sequence[Buffer]) -> None:
        super().__init__()
        chunks = [data] if isinstance(data, (bytes, bytearray, memoryview)) or hasattr(data, "__array__") else data
        self._views = [byte_view(chunk) for chunk in chunks]  # type: ignore[arg-type]
        self._starts = [0]
        for view in self._views:
            self._starts.append(self._starts[-1] + len(view))
        self._position = 0

    def __len__(self) -> int:
        return self._starts[-1]

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._position, io.SEEK_END: len(self)}[whence]
        self._position = max(0, base + offset)
        return self._position

    def readinto(self, buffer: Any) -> int:
        target = memoryview(buffer).cast("B")
        written = 0
        index = bisect.bisect_right(self._starts, self._position) - 1
        while written < len(target) and index < len(self._views):
            view, inner = self._views[index], self._position - self._starts[index]
            take = min(len(view) - inner, len(target) - written)
            target[written:written + take] = view[inner:inner + take]
            written += take
            self._position += take
            index += 1
        return written


def joined(data: Buffer | Sequence[Buffer]) -> bytes:
    """An object's body as one bytes object (from one buffer or a sequence of them)."""
    chunks = [data] if isinstance(data, (bytes, bytearray, memoryview)) or hasattr(data, "__array__") else data
    return b"".join(byte_view(chunk) for chunk in chunks)  # type: ignore[arg-type]



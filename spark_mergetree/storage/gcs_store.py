"""Google Cloud Storage buckets (`gs://bucket/key`) behind the object-store `Bucket` interface.

Client: google-cloud-storage (the JSON API). Why it: it exposes GCS's generation preconditions,
which the commit protocol needs — `ifGenerationMatch=0` creates an object only if none has the key
(put-if-absent), `ifGenerationMatch=<generation>` replaces it only if it is still that generation
(compare-and-swap) — plus ranged downloads and retries with backoff (requests guarded by a
precondition are retried safely). pyarrow.fs.GcsFileSystem and gcsfs write with no precondition.
An object's version token here is its generation.

Credentials, in this order: the `token` option (an OAuth2 access token); the `credentials_file`
option (a service-account or authorized-user JSON file); with an endpoint (the `endpoint` option
or $STORAGE_EMULATOR_HOST, as Google's emulators are addressed) and neither of those, none (an
emulator takes anonymous requests); else Application Default Credentials
($GOOGLE_APPLICATION_CREDENTIALS, `gcloud auth application-default login`, the metadata server of
GCE, GKE, Dataproc, Cloud Run).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from spark_mergetree.errors import StorageError, UnsupportedError
from spark_mergetree.storage.filesystem import Buffer
from spark_mergetree.storage.object_base import Bucket, BufferStream, PreconditionFailed, http_time, joined

_SCOPES = ("https://www.googleapis.com/auth/devstorage.read_write",)
_CREDENTIAL_HELP = ("set GOOGLE_APPLICATION_CREDENTIALS to a service-account key file, run `gcloud auth "
                    "application-default login`, run where a metadata server gives credentials, or pass the "
                    "credentials_file or token option (Spark: gcs.credentials_file, gcs.token)")


def _seconds(moment: Any) -> float:
    """An object's time in whole seconds: the server's clock (an HTTP Date header) has no finer
    resolution, and an object written just now must not look younger than "now"."""
    return float(int(moment.timestamp()))

# Bodies bigger than this go up as resumable uploads in chunks of this size (a multiple of 256 KiB).
UPLOAD_CHUNK_BYTES = 8 << 20


class GcsBucket(Bucket):
    """A GCS bucket through google-cloud-storage."""

    ENVIRONMENT = ("STORAGE_EMULATOR_HOST", "GOOGLE_APPLICATION_CREDENTIALS", "GOOGLE_CLOUD_PROJECT")

    def _make_client(self, options: Mapping[str, str]) -> Any:
        try:
            import google.auth
            from google.auth.credentials import AnonymousCredentials
            from google.cloud import storage
        except ImportError as error:
            raise UnsupportedError("gs:// locations need google-cloud-storage: pip install "
                                   "'spark-mergetree[gcs]'") from error
        endpoint = options.get("endpoint") or os.environ.get("STORAGE_EMULATOR_HOST")
        if endpoint and "://" not in endpoint:
            endpoint = "http://" + endpoint
        project = options.get("project") or os.environ.get("GOOGLE_CLOUD_PROJECT")
        credentials: Any
        if "token" in options:
            from google.oauth2.credentials import Credentials
            credentials = Credentials(options["token"])
        elif "credentials_file" in options:
            credentials, found = google.auth.load_credentials_from_file(options["credentials_file"], scopes=_SCOPES)
            project = project or found
        elif endpoint:
            credentials = AnonymousCredentials()
        else:
            credentials, found = google.auth.default(scopes=_SCOPES)
            project = project or found
        # The project names where new buckets go; reading and writing objects needs none.
        return storage.Client(project=project or "<none>", credentials=credentials,
                              client_options={"api_endpoint": endpoint} if endpoint else None)

    def _translate(self, error: Exception, url: str) -> OSError:
        from google.api_core import exceptions as api
        from google.auth import exceptions as auth

        if isinstance(error, (auth.DefaultCredentialsError, auth.RefreshError)):
            return StorageError(f"{url}: no usable credentials ({error}); {_CREDENTIAL_HELP}")
        if isinstance(error, api.NotFound):
            if "bucket" in str(error).lower() and "does not exist" in str(error).lower():
                return StorageError(f"{url}: bucket {self.name!r} does not exist")
            return FileNotFoundError(2, "no such object", url)
        if isinstance(error, api.PreconditionFailed):
            return PreconditionFailed(f"{url}: conditional write did not hold (generation precondition)")
        if isinstance(error, (api.Forbidden, api.Unauthorized)):
            return StorageError(f"{url}: access denied ({error}); check the credentials and the bucket's IAM")
        if isinstance(error, api.GoogleAPICallError):
            return StorageError(f"{url}: {error}")
        if isinstance(error, (ConnectionError, auth.TransportError)) or type(error).__module__.startswith("requests"):
            return StorageError(f"{url}: cannot reach the storage endpoint ({error})")
        return StorageError(f"{url}: {error}")

    def _blob(self, client: Any, key: str) -> Any:
        return client.bucket(self.name).blob(key)

    def check(self, key: str = "") -> None:
        def probe(client: Any) -> None:
            from google.api_core import exceptions as api
            try:
                list(client.list_blobs(self.name, prefix=key, max_results=1))
            except api.NotFound:
                raise StorageError(f"{self.url(key)}: bucket {self.name!r} does not exist") from None

        self._call("LIST", key, probe)

    def get(self, key: str, start: int | None = None, end: int | None = None) -> bytes:
        if start is not None and end is not None and end <= start:
            return b""

        def download(client: Any) -> bytes:
            from google.api_core import exceptions as api
            blob = self._blob(client, key)
            if start is None:
                return bytes(blob.download_as_bytes(raw_download=True))
            try:  # `end` of the client is inclusive; a ranged read cannot be checksummed whole
                return bytes(blob.download_as_bytes(start=start, end=None if end is None else end - 1,
                                                    raw_download=True, checksum=None))
            except api.RequestRangeNotSatisfiable:
                return b""

        return self._call("GET", key, download)

    def get_versioned(self, key: str) -> tuple[bytes, str]:
        def download(client: Any) -> tuple[bytes, str]:
            blob = self._blob(client, key)
            data = bytes(blob.download_as_bytes(raw_download=True))
            return data, str(blob.generation)

        return self._call("GET", key, download)

    def head(self, key: str) -> int:
        def stat(client: Any) -> int:
            blob = self._blob(client, key)
            blob.reload()
            return int(blob.size)

        return self._call("HEAD", key, stat)

    def put(self, key: str, data: Buffer | Sequence[Buffer], *, if_absent: bool = False,
            if_match: str | None = None) -> str:
        def upload(client: Any) -> str:
            from google.cloud.storage.retry import DEFAULT_RETRY
            blob = self._blob(client, key)
            condition = 0 if if_absent else (int(if_match) if if_match is not None else None)
            if condition is not None:
                # Conditional writes (log entries, statements: small) go in one request, where the
                # precondition is checked; not every server checks it on a resumable session.
                blob.upload_from_string(joined(data), content_type="application/octet-stream",
                                        if_generation_match=condition, retry=DEFAULT_RETRY)
                return str(blob.generation)
            blob.chunk_size = UPLOAD_CHUNK_BYTES  # bodies above it: a resumable upload, chunk by chunk
            body = BufferStream(data)  # read in place, not joined into one copy first
            # An unconditional write is retried too: every object is written whole, once, under its key.
            blob.upload_from_file(body, size=len(body), content_type="application/octet-stream",
                                  retry=DEFAULT_RETRY)
            return str(blob.generation)

        return self._call("PUT", key, upload)

    def copy(self, key: str, new_key: str) -> None:
        """A rewrite, repeated with its token until the server has copied the whole object."""
        def rewrite(client: Any) -> None:
            token = None
            target = self._blob(client, new_key)
            while True:
                token, _, _ = target.rewrite(self._blob(client, key), token=token)
                if token is None:
                    return

        self._call("COPY", new_key, rewrite)

    def _listing(self, client: Any, prefix: str, delimiter: str | None) -> Any:
        return client.list_blobs(self.name, prefix=prefix, delimiter=delimiter or None)

    def list_objects(self, prefix: str, delimiter: str | None = "/") -> tuple[dict[str, int], list[str]]:
        def run(client: Any) -> tuple[dict[str, int], list[str]]:
            listing = self._listing(client, prefix, delimiter)
            objects = {blob.name: int(blob.size) for blob in listing}
            return objects, sorted(listing.prefixes)

        return self._call("LIST", prefix, run)

    def _server_now(self, client: Any) -> float:
        """The server's clock: the Date header of a bucket metadata request."""
        base = client._connection.API_BASE_URL.rstrip("/")
        response = client._http.request("GET", f"{base}/storage/v1/b/{self.name}?fields=name")
        return http_time(response.headers.get("Date"))

    def list_with_times(self, prefix: str) -> tuple[dict[str, float], float]:
        def run(client: Any) -> tuple[dict[str, float], float]:
            out = {blob.name: _seconds(blob.updated) for blob in self._listing(client, prefix, None)}
            return out, self._server_now(client)

        return self._call("LIST", prefix, run)

    def age(self, key: str) -> float:
        def run(client: Any) -> float:
            blob = self._blob(client, key)
            blob.reload()
            return self._server_now(client) - _seconds(blob.updated)

        return self._call("HEAD", key, run)

    def delete(self, keys: Iterable[str]) -> None:
        self._delete_each(keys, lambda client, key: self._blob(client, key).delete())

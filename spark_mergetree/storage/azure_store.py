"""Azure Blob Storage containers (ADLS Gen2 `abfss://container@account.dfs.core.windows.net/key`)
behind the object-store `Bucket` interface.

Client: azure-storage-blob, on the account's Blob endpoint (`https://account.blob.core.windows.net`;
ADLS Gen2 accounts serve the Blob API too). Why it: it exposes the conditional headers the commit
protocol needs — `If-None-Match: *` creates a blob only if none has the name (put-if-absent),
`If-Match: <etag>` replaces it only if unchanged (compare-and-swap) — plus ranged downloads and
exponential retries. pyarrow.fs.AzureFileSystem and adlfs write with no precondition. An object's
version token here is its ETag.

Credentials, in this order: a connection string (the `connection_string` option, else
$AZURE_STORAGE_CONNECTION_STRING); an account key (`account_key`, else $AZURE_STORAGE_KEY); a SAS
token (`sas_token`, else $AZURE_STORAGE_SAS_TOKEN); a service principal (`client_id`,
`client_secret`, `tenant_id`); else azure-identity's DefaultAzureCredential (environment
variables AZURE_CLIENT_ID/AZURE_TENANT_ID/AZURE_CLIENT_SECRET, workload and managed identity, the
Azure CLI's login). Tokens are only sent over https: an http endpoint (an emulator) needs a key.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from spark_mergetree.errors import StorageError, UnsupportedError
from spark_mergetree.storage.filesystem import Buffer
from spark_mergetree.storage.object_base import Bucket, BufferStream, PreconditionFailed, http_time

UPLOAD_BLOCK_BYTES = 8 << 20

_CREDENTIAL_HELP = ("set AZURE_STORAGE_CONNECTION_STRING or AZURE_STORAGE_KEY, sign in for "
                    "DefaultAzureCredential (AZURE_CLIENT_ID/AZURE_TENANT_ID/AZURE_CLIENT_SECRET, a managed "
                    "identity, `az login`), or pass the account_key, sas_token or connection_string option "
                    "(Spark: azure.account_key, ...)")


class AzureBucket(Bucket):
    """One container of one storage account through azure-storage-blob."""

    ENVIRONMENT = ("AZURE_STORAGE_CONNECTION_STRING", "AZURE_STORAGE_ACCOUNT", "AZURE_STORAGE_KEY",
                   "AZURE_STORAGE_SAS_TOKEN", "AZURE_CLIENT_ID", "AZURE_TENANT_ID")

    def _make_client(self, options: Mapping[str, str]) -> Any:
        try:
            from azure.storage.blob import BlobServiceClient, ExponentialRetry
        except ImportError as error:
            raise UnsupportedError("abfss:// locations need azure-storage-blob: pip install "
                                   "'spark-mergetree[azure]'") from error
        account = self.location.account
        # Throttling (503), 5xx and dropped connections: up to 6 retries, about 1, 3, 5, 9, 17, 33 s apart
        # (the SDK's default waits 15 s and more from the first retry on).
        retry = ExponentialRetry(initial_backoff=1, increment_base=2, retry_total=6, random_jitter_range=1)
        # Bodies over UPLOAD_BLOCK_BYTES go up as staged blocks of that size (4 at once), read from the
        # body in place; the conditional header then goes with the block list that commits them.
        settings: dict[str, Any] = {"retry_policy": retry, "connection_timeout": 10, "read_timeout": 60,
                                    "max_single_put_size": UPLOAD_BLOCK_BYTES, "max_block_size": UPLOAD_BLOCK_BYTES}
        connection = options.get("connection_string") or os.environ.get("AZURE_STORAGE_CONNECTION_STRING")
        if connection:
            fields = dict(part.split("=", 1) for part in connection.split(";") if "=" in part)
            if fields.get("AccountName", account) != account:
                raise StorageError(f"{self.location.root}: the connection string is for account "
                                   f"{fields['AccountName']!r}, not {account!r}")
            return BlobServiceClient.from_connection_string(connection, **settings)
        host = self.location.host
        endpoint = options.get("endpoint") or f"https://{host.replace('.dfs.', '.blob.', 1)}"
        env_key = os.environ.get("AZURE_STORAGE_KEY")
        if os.environ.get("AZURE_STORAGE_ACCOUNT", account) != account:
            env_key = None  # the environment's key is another account's
        key = options.get("account_key") or env_key
        sas = options.get("sas_token") or os.environ.get("AZURE_STORAGE_SAS_TOKEN")
        credential: Any
        if key:
            credential = {"account_name": account, "account_key": key}
        elif sas:
            from azure.core.credentials import AzureSasCredential
            credential = AzureSasCredential(sas.lstrip("?"))
        elif endpoint.startswith("http://"):
            raise StorageError(f"{self.location.root}: no credentials for the http endpoint {endpoint} (tokens "
                               f"go only over https); {_CREDENTIAL_HELP}")
        else:
            try:
                from azure import identity
            except ImportError as error:
                raise StorageError(f"{self.location.root}: no credentials (no key, SAS or connection string, and "
                                   f"azure-identity is not installed); {_CREDENTIAL_HELP}") from error
            if "client_id" in options:
                credential = identity.ClientSecretCredential(options["tenant_id"], options["client_id"],
                                                             options["client_secret"])
            else:
                credential = identity.DefaultAzureCredential()
        return BlobServiceClient(endpoint, credential=credential, **settings)

    def _call(self, kind: str, key: str, operation: Callable[[Any], Any]) -> Any:
        """`operation(container client)`: the service client is shared by the account's containers."""
        return super()._call(kind, key, lambda service: operation(service.get_container_client(self.name)))

    def _translate(self, error: Exception, url: str) -> OSError:
        from azure.core import exceptions as az

        if isinstance(error, (az.ClientAuthenticationError,)) and getattr(error, "status_code", None) in (None, 401):
            return StorageError(f"{url}: no usable credentials ({error}); {_CREDENTIAL_HELP}")
        if isinstance(error, az.HttpResponseError):
            raw = getattr(error, "error_code", "") or ""
            code = str(getattr(raw, "value", raw))
            status = error.status_code
            if code == "ContainerNotFound":
                return StorageError(f"{url}: container {self.name!r} does not exist in account "
                                    f"{self.location.account!r}")
            if status == 404:
                return FileNotFoundError(2, "no such object", url)
            if status == 412 or code in ("ConditionNotMet", "BlobAlreadyExists"):
                return PreconditionFailed(f"{url}: conditional write did not hold ({code or status})")
            if status == 403:
                return StorageError(f"{url}: access denied ({code or status}); check the credentials and the "
                                    "container's access (a role such as Storage Blob Data Contributor)")
            return StorageError(f"{url}: {code or status}: {error.message}")
        if isinstance(error, az.ServiceRequestError):
            return StorageError(f"{url}: cannot reach the storage endpoint ({error})")
        return StorageError(f"{url}: {error}")

    def check(self, key: str = "") -> None:
        self._call("LIST", key, lambda client: next(iter(client.list_blobs(name_starts_with=key,
                                                                           results_per_page=1)), None))

    def get(self, key: str, start: int | None = None, end: int | None = None) -> bytes:
        if start is not None and end is not None and end <= start:
            return b""

        def download(client: Any) -> bytes:
            from azure.core.exceptions import HttpResponseError
            blob = client.get_blob_client(key)
            if start is None:
                return bytes(blob.download_blob().readall())
            try:
                length = None if end is None else end - start
                return bytes(blob.download_blob(offset=start, length=length).readall())
            except HttpResponseError as error:
                if error.status_code == 416:  # starts at or past the end
                    return b""
                raise

        return self._call("GET", key, download)

    def get_versioned(self, key: str) -> tuple[bytes, str]:
        def download(client: Any) -> tuple[bytes, str]:
            stream = client.get_blob_client(key).download_blob()
            return bytes(stream.readall()), str(stream.properties.etag)

        return self._call("GET", key, download)

    def head(self, key: str) -> int:
        return int(self._call("HEAD", key, lambda client: client.get_blob_client(key).get_blob_properties().size))

    def put(self, key: str, data: Buffer | Sequence[Buffer], *, if_absent: bool = False,
            if_match: str | None = None) -> str:
        def upload(client: Any) -> str:
            from azure.core import MatchConditions
            body = BufferStream(data)  # read in place: big bodies go up in staged blocks, not joined first
            arguments: dict[str, Any] = {"overwrite": not if_absent, "max_concurrency": 4, "length": len(body)}
            if if_match is not None:
                arguments.update(etag=if_match, match_condition=MatchConditions.IfNotModified)
            # overwrite=False sends If-None-Match: * (409 BlobAlreadyExists when a blob has the name),
            # with the single put or with the block list that commits a staged upload.
            return str(client.get_blob_client(key).upload_blob(body, **arguments)["etag"])

        return self._call("PUT", key, upload)

    def copy(self, key: str, new_key: str) -> None:
        """Copy Blob from the source's URL in the same account (authorised by this request), waited
        for until the server reports it done."""
        import time

        def run(client: Any) -> None:
            target = client.get_blob_client(new_key)
            status = target.start_copy_from_url(client.get_blob_client(key).url)["copy_status"]
            while status == "pending":
                time.sleep(0.05)
                status = target.get_blob_properties().copy.status
            if status != "success":
                raise OSError(f"copy of {key} ended {status}")

        self._call("COPY", new_key, run)

    def list_objects(self, prefix: str, delimiter: str | None = "/") -> tuple[dict[str, int], list[str]]:
        def run(client: Any) -> tuple[dict[str, int], list[str]]:
            objects: dict[str, int] = {}
            prefixes: list[str] = []
            items = (client.walk_blobs(name_starts_with=prefix, delimiter=delimiter) if delimiter
                     else client.list_blobs(name_starts_with=prefix))
            for item in items:
                if getattr(item, "size", None) is None:  # a BlobPrefix
                    prefixes.append(item.name)
                else:
                    objects[item.name] = int(item.size)
            return objects, prefixes

        return self._call("LIST", prefix, run)

    def list_with_times(self, prefix: str) -> tuple[dict[str, float], float]:
        def run(client: Any) -> tuple[dict[str, float], float]:
            dates: list[str] = []
            hook = lambda response: dates.append(response.http_response.headers.get("Date"))  # noqa: E731
            out = {item.name: item.last_modified.timestamp()
                   for item in client.list_blobs(name_starts_with=prefix, raw_response_hook=hook)}
            return out, http_time(dates[-1] if dates else None)

        return self._call("LIST", prefix, run)

    def age(self, key: str) -> float:
        def run(client: Any) -> float:
            dates: list[str] = []
            hook = lambda response: dates.append(response.http_response.headers.get("Date"))  # noqa: E731
            properties = client.get_blob_client(key).get_blob_properties(raw_response_hook=hook)
            return http_time(dates[-1] if dates else None) - properties.last_modified.timestamp()

        return self._call("HEAD", key, run)

    def delete(self, keys: Iterable[str]) -> None:
        self._delete_each(keys, lambda client, key: client.get_blob_client(key).delete_blob())

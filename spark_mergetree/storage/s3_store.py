"""S3 buckets (`s3://bucket/key`, and S3-compatible stores) behind the object-store `Bucket`
interface, through boto3: storage/object_store.py says why boto3."""

from __future__ import annotations

import mmap
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from spark_mergetree.errors import StorageError, UnsupportedError
from spark_mergetree.fileops import release_mapped
from spark_mergetree.storage.filesystem import Buffer
from spark_mergetree.storage.object_base import (
    MULTIPART_THRESHOLD,
    Bucket,
    PreconditionFailed,
    http_time,
    joined,
)

# Parts of a memory-mapped body (a merge's spilled stream) uploaded at once: each is copied once.
MAPPED_UPLOAD_THREADS = 3


class S3Bucket(Bucket):
    """An S3 bucket through boto3 (see the module doc for why boto3)."""

    ENVIRONMENT = ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_ACCESS_KEY_ID", "AWS_PROFILE", "AWS_REGION",
                   "AWS_DEFAULT_REGION")

    def _make_client(self, options: Mapping[str, str]) -> Any:
        try:
            import boto3
            from botocore.config import Config
        except ImportError as error:  # pragma: no cover - boto3 is a dependency
            raise UnsupportedError("s3:// locations need boto3: pip install boto3") from error
        config = Config(retries={"max_attempts": 8, "mode": "standard"}, connect_timeout=10, read_timeout=60,
                        max_pool_connections=32, s3={"addressing_style": "path"} if "endpoint" in options else None)
        session = boto3.session.Session()
        return session.client(
            "s3", endpoint_url=options.get("endpoint"), region_name=options.get("region"),
            aws_access_key_id=options.get("access_key_id"), aws_secret_access_key=options.get("secret_access_key"),
            aws_session_token=options.get("session_token"), config=config)

    def _translate(self, error: Exception, url: str) -> OSError:
        from botocore.exceptions import (
            BotoCoreError,
            ClientError,
            EndpointConnectionError,
            NoCredentialsError,
            PartialCredentialsError,
        )

        bucket = self.name
        if isinstance(error, (NoCredentialsError, PartialCredentialsError)):
            return StorageError(f"{url}: no usable credentials ({error}); set AWS_ACCESS_KEY_ID and "
                                "AWS_SECRET_ACCESS_KEY, a profile (AWS_PROFILE) or an instance role, or pass the "
                                "access_key_id and secret_access_key storage options (Spark: the options "
                                "s3.access_key_id and s3.secret_access_key)")
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
            if code in ("PermanentRedirect", "AuthorizationHeaderMalformed", "301",
                        "IllegalLocationConstraintException"):
                return StorageError(f"{url}: wrong region for bucket {bucket!r} ({code}: {message}); set the "
                                    "region storage option (Spark: s3.region) or AWS_DEFAULT_REGION")
            return StorageError(f"{url}: {code or status}: {message}")
        if isinstance(error, BotoCoreError):
            return StorageError(f"{url}: {error}")
        return StorageError(f"{url}: {error}")

    def _s3(self, kind: str, key: str, method: str, **arguments: Any) -> Any:
        return self._call(kind, key, lambda client: getattr(client, method)(Bucket=self.name, **arguments))

    def credentials(self) -> tuple[str, str] | None:
        if "access_key_id" in self.options:
            return self.options["access_key_id"], self.options["secret_access_key"]
        found = self._client._request_signer._credentials
        return (found.access_key, found.secret_key) if found is not None else None

    def check(self, key: str = "") -> None:
        self._s3("LIST", key, "list_objects_v2", Prefix=key, MaxKeys=1)

    def get(self, key: str, start: int | None = None, end: int | None = None) -> bytes:
        if start is not None and end is not None and end <= start:
            return b""
        arguments: dict[str, Any] = {"Key": key}
        if start is not None:
            arguments["Range"] = f"bytes={start}-{'' if end is None else end - 1}"
        try:
            response = self._s3("GET", key, "get_object", **arguments)
        except StorageError as error:
            if "InvalidRange" in str(error):
                return b""
            raise
        return response["Body"].read()

    def get_versioned(self, key: str) -> tuple[bytes, str]:
        response = self._s3("GET", key, "get_object", Key=key)
        return response["Body"].read(), response["ETag"]

    def head(self, key: str) -> int:
        return int(self._s3("HEAD", key, "head_object", Key=key)["ContentLength"])

    def put(self, key: str, data: Buffer | Sequence[Buffer], *, if_absent: bool = False,
            if_match: str | None = None) -> str:
        if isinstance(data, memoryview) and isinstance(data.obj, mmap.mmap) and len(data) >= MULTIPART_THRESHOLD \
                and not if_absent and if_match is None:
            return self._multipart(key, data, threads=MAPPED_UPLOAD_THREADS)  # not copied whole
        body = joined(data)
        if len(body) >= MULTIPART_THRESHOLD and not if_absent and if_match is None:
            return self._multipart(key, body)
        arguments: dict[str, Any] = {"Key": key, "Body": body}
        if if_absent:
            arguments["IfNoneMatch"] = "*"
        if if_match is not None:
            arguments["IfMatch"] = if_match
        return str(self._s3("PUT", key, "put_object", **arguments)["ETag"])

    def _multipart(self, key: str, body: bytes | memoryview, threads: int = 8) -> str:
        """Upload in parts of MULTIPART_THRESHOLD bytes, `threads` at once. A memory-mapped body (a
        merge's spilled stream) is read a part at a time and its pages dropped once sent."""
        from concurrent.futures import ThreadPoolExecutor

        upload = self._s3("PUT", key, "create_multipart_upload", Key=key)["UploadId"]
        view = memoryview(body)
        pieces = [(number + 1, view[offset:offset + MULTIPART_THRESHOLD])
                  for number, offset in enumerate(range(0, len(body), MULTIPART_THRESHOLD))]

        def send(piece: tuple[int, memoryview]) -> dict[str, Any]:
            number, chunk = piece
            response = self._s3("PUT", key, "upload_part", Key=key, UploadId=upload, PartNumber=number,
                                Body=bytes(chunk))
            release_mapped(chunk)
            return {"PartNumber": number, "ETag": response["ETag"]}

        try:
            with ThreadPoolExecutor(min(threads, len(pieces))) as pool:
                parts = list(pool.map(send, pieces))
            return str(self._s3("PUT", key, "complete_multipart_upload", Key=key, UploadId=upload,
                                MultipartUpload={"Parts": parts})["ETag"])
        except BaseException:
            try:
                self._s3("DELETE", key, "abort_multipart_upload", Key=key, UploadId=upload)
            except OSError:
                pass
            raise

    def copy(self, key: str, new_key: str) -> None:
        """CopyObject (boto3's managed copy: a multipart copy for objects past its threshold)."""
        self._call("COPY", new_key, lambda client: client.copy({"Bucket": self.name, "Key": key}, self.name, new_key))

    def list_objects(self, prefix: str, delimiter: str | None = "/") -> tuple[dict[str, int], list[str]]:
        objects: dict[str, int] = {}
        prefixes: list[str] = []
        arguments: dict[str, Any] = {"Prefix": prefix}
        if delimiter:
            arguments["Delimiter"] = delimiter
        while True:
            response = self._s3("LIST", prefix, "list_objects_v2", **arguments)
            for item in response.get("Contents", ()):
                objects[item["Key"]] = int(item["Size"])
            prefixes.extend(item["Prefix"] for item in response.get("CommonPrefixes", ()))
            if not response.get("IsTruncated"):
                return objects, prefixes
            arguments["ContinuationToken"] = response["NextContinuationToken"]

    def list_with_times(self, prefix: str) -> tuple[dict[str, float], float]:
        out: dict[str, float] = {}
        arguments: dict[str, Any] = {"Prefix": prefix}
        while True:
            response = self._s3("LIST", prefix, "list_objects_v2", **arguments)
            for item in response.get("Contents", ()):
                out[item["Key"]] = item["LastModified"].timestamp()
            if not response.get("IsTruncated"):
                return out, _server_time(response)
            arguments["ContinuationToken"] = response["NextContinuationToken"]

    def age(self, key: str) -> float:
        response = self._s3("HEAD", key, "head_object", Key=key)
        return _server_time(response) - response["LastModified"].timestamp()

    def delete(self, keys: Iterable[str]) -> None:
        """Delete objects (absent ones are no error), 1000 per request."""
        batch = list(keys)
        for begin in range(0, len(batch), 1000):
            chunk = batch[begin:begin + 1000]
            self._s3("DELETE", chunk[0], "delete_objects",
                     Delete={"Objects": [{"Key": key} for key in chunk], "Quiet": True})


def _server_time(response: Mapping[str, Any]) -> float:
    """The server's clock when it answered (the HTTP Date header), else this machine's."""
    return http_time(response.get("ResponseMetadata", {}).get("HTTPHeaders", {}).get("date"))



"""The statement a ClickHouse server runs to open one of our tables where it lies, read-only.

It is the table's own ATTACH statement (its UUID, columns, engine, keys and settings) plus a disk
whose root is the table's directory (`table_disk = 1`): a plain object-storage disk over a table
in object storage (`s3_plain` for s3:// and, through GCS's S3-compatible API, gs://; `azure` with
`metadata_type = 'plain'` for abfss://), a `plain` disk over `local_blob_storage` for a table on a
local or mounted disk. They are
read-only disks for MergeTree: ClickHouse refuses INSERT, merges and mutations on them ("Table is
in readonly mode"), so it never writes beside our commit protocol. (A `local` disk would accept
writes, needs `custom_local_disks_base_directory` in the server's configuration, and takes no
`table_disk`; checked against ClickHouse 26.9.)

ClickHouse does not read our log: it loads every part in the directory that no other part covers.
When that set differs from the parts our latest snapshot shows (replaced parts not yet cleaned up,
leftovers of a crash), the statement is still returned and a warning names the difference.
"""

from __future__ import annotations

import os
import uuid as uuid_module
import warnings
from collections.abc import Iterable, Mapping, Sequence

from spark_mergetree.engine import select as selecting
from spark_mergetree.errors import InvalidOptionError
from spark_mergetree.expressions.ddl import TableDefinition, format_attach, quote_string


def attach_statement(definition: TableDefinition, name: str, uuid: str | None, disk: Sequence[str]) -> str:
    """`ATTACH TABLE name UUID '...' (...) ENGINE = ... SETTINGS ..., table_disk = 1, disk = disk(<disk>)`.

    `disk` holds the disk's parameters as `key = value` texts, values already quoted. A ClickHouse
    data directory opened with a statement that names no UUID gets one derived from its disk: an
    Atomic database needs one, it names no path here (the data is on the statement's own disk), and
    the same directory gets the same UUID every time, unlike the table it was copied from."""
    statement = format_attach(definition).rstrip("\n")
    _head, _, body = statement.partition("\n")
    database, _, table = name.rpartition(".")
    target = ".".join(f"`{piece}`" for piece in ((database, table) if database else (table,)))
    lines = body.split("\n")
    setting = f"table_disk = 1, disk = disk({', '.join(disk)})"
    if lines[-1].startswith("SETTINGS "):
        lines[-1] += ", " + setting
    else:
        lines.append("SETTINGS " + setting)
    uuid = uuid or str(uuid_module.uuid5(uuid_module.NAMESPACE_URL, ", ".join(disk)))
    return f"ATTACH TABLE {target} UUID {quote_string(uuid)}\n" + "\n".join(lines) + "\n"


def local_disk(directory: str) -> list[str]:
    """The read-only disk over a local directory (see the module doc)."""
    return ["type = 'object_storage'", "object_storage_type = 'local_blob_storage'", "metadata_type = 'plain'",
            f"path = {quote_string(directory.rstrip('/') + '/')}"]


def warn_if_clickhouse_sees_other_parts(where: str, on_disk: Iterable[str], visible: set[str]) -> None:
    """Warn when the parts ClickHouse would load from the directory are not the visible ones."""
    loaded = selecting.active_parts(on_disk)
    extra, missing = sorted(loaded - visible), sorted(visible - loaded)
    if extra or missing:
        said = [f"also read part(s) {', '.join(extra[:5])} the table's log does not show (replaced or left "
                "by a crash)"] if extra else []
        said += [f"not read part(s) {', '.join(missing[:5])} that a part on disk covers"] if missing else []
        warnings.warn(f"{where}: ClickHouse would {' and '.join(said)}: run cleanup() first", stacklevel=3)


def s3_disk(url: str, options: Mapping[str, str], bucket: str, key: str,
            credentials: tuple[str, str] | None, with_credentials: bool) -> list[str]:
    """An `s3_plain` disk over `s3://bucket/key` (`url` names the table in errors)."""
    endpoint = options.get("endpoint") or os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    prefix = key + "/" if key else ""
    if endpoint:
        root = f"{endpoint.rstrip('/')}/{bucket}/{prefix}"
    else:
        region = options.get("region") or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
        root = f"https://{bucket}.s3.{region + '.' if region else ''}amazonaws.com/{prefix}"
    disk = [f"type = s3_plain, endpoint = {quote_string(root)}"]
    if with_credentials:
        if credentials is None:
            raise InvalidOptionError(f"{url}: no credentials to write into the statement")
        disk.append(f"access_key_id = {quote_string(credentials[0])}, secret_access_key = {quote_string(credentials[1])}")
    else:
        disk.append("use_environment_credentials = 1")
    return disk


def gcs_disk(url: str, bucket: str, key: str, with_credentials: bool) -> list[str]:
    """An `s3_plain` disk over `gs://bucket/key` through GCS's S3-compatible (XML) API, which signs
    with an HMAC key: ClickHouse takes it from its environment (AWS_ACCESS_KEY_ID/SECRET) or from
    access_key_id/secret_access_key added to the disk; this package's own GCS credentials (a service
    account) are not such a key, so `with_credentials` is refused."""
    if with_credentials:
        raise InvalidOptionError(f"{url}: ClickHouse reads GCS with an HMAC key, which this package does not hold; "
                                 "give the server one (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY) and omit credentials")
    prefix = key + "/" if key else ""
    return [f"type = s3_plain, endpoint = {quote_string(f'https://storage.googleapis.com/{bucket}/{prefix}')}",
            "use_environment_credentials = 1"]


def azure_disk(url: str, options: Mapping[str, str], account: str, container: str, key: str,
               with_credentials: bool) -> list[str]:
    """A plain `azure` object-storage disk over the container's prefix. Without credentials the
    server authenticates as its own identity (managed or workload identity)."""
    connection = options.get("connection_string") or os.environ.get("AZURE_STORAGE_CONNECTION_STRING") or ""
    fields = dict(part.split("=", 1) for part in connection.split(";") if "=" in part)
    endpoint = options.get("endpoint") or fields.get("BlobEndpoint") or \
        f"{fields.get('DefaultEndpointsProtocol', 'https')}://{account}.blob.{fields.get('EndpointSuffix', 'core.windows.net')}"
    prefix = key + "/" if key else ""
    disk = ["type = object_storage, object_storage_type = 'azure', metadata_type = 'plain'",
            f"endpoint = {quote_string(f'{endpoint.rstrip(chr(47))}/{container}/{prefix}')}"]
    if with_credentials:
        env_key = os.environ.get("AZURE_STORAGE_KEY") if os.environ.get("AZURE_STORAGE_ACCOUNT", account) == account else None
        account_key = options.get("account_key") or fields.get("AccountKey") or env_key
        if not account_key:
            raise InvalidOptionError(f"{url}: no account key to write into the statement (a SAS token or an "
                                     "identity cannot be); omit credentials to let the server use its own identity")
        disk.append(f"account_name = {quote_string(account)}, account_key = {quote_string(account_key)}")
    return disk

"""Where a table or catalog lives, as a user writes it: a local path or a `file://` URL.

Object storage (`s3://`, `gs://`, `abfss://`) holds tables, served by storage/object_store.py, not
here: places that must be a directory (a catalog root, a coordinator directory) refuse it. Other
remote file systems (`hdfs://`, `dbfs:/`, ...) are not supported, nor Databricks' FUSE mounts of
object storage (`/dbfs`, `/Volumes`). Such a location is refused before anything is written: taken
as a path it would quietly become a local directory named `s3:` in the working directory of every
process, while its user believes the data went to the bucket.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from urllib.parse import unquote, urlparse

from spark_mergetree.errors import UnsupportedError
from spark_mergetree.storage.object_base import OBJECT_SCHEMES

# A scheme followed by ":/" (RFC 3986 letters); "data:2024" without a slash stays a file name.
_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*):/")
# Databricks' FUSE mounts over object storage (DBFS, Unity Catalog volumes, workspace files). Nothing
# documents atomic rename, hard links, file locks or fsync on them (delta-rs's atomic commit fails
# there with "Function not implemented", delta-rs#2540), and a commit relies on all four. macOS
# mounts ordinary disks at /Volumes, so that prefix is a Databricks one only elsewhere.
_FUSE_MOUNTS = ("/dbfs", "/Workspace") + (() if sys.platform == "darwin" else ("/Volumes",))


def refuse_fuse_mount(path: str | os.PathLike[str], what: str) -> None:
    """Raise UnsupportedError naming `path` if it is on a Databricks FUSE mount (see _FUSE_MOUNTS)."""
    absolute = os.path.abspath(os.fspath(path))
    for mount in _FUSE_MOUNTS:
        if absolute == mount or absolute.startswith(mount + "/"):
            raise UnsupportedError(
                f"{what} {os.fspath(path)!r} is on {mount}, a Databricks FUSE mount over object storage: it has "
                "no atomic rename, hard links, file locks or fsync that a commit can rely on. Keep tables, "
                "catalogs and coordinator directories on a local disk or an NFS mount, and use a ZooKeeper "
                "coordinator across machines (README, 'Databricks')")


def local_path(location: str | os.PathLike[str]) -> Path:
    """The local directory `location` names: a path as given, or the path of a `file:` URL
    (`file:///abs`, `file://localhost/abs`, Hadoop's `file:/abs`; percent-escapes decoded).

    Raises UnsupportedError naming the location for any other URL scheme.
    """
    text = os.fspath(location)
    match = _URL.match(text)
    if match is None or len(match.group(1)) == 1:  # no scheme, or a Windows drive letter
        refuse_fuse_mount(text, "location")
        return Path(text)
    scheme = match.group(1).lower()
    if scheme == "file":
        parsed = urlparse(text)
        if parsed.netloc not in ("", "localhost"):
            raise UnsupportedError(f"location {text!r}: a file URL on another host is not supported; "
                                   "use file:///path or a path mounted on this machine")
        refuse_fuse_mount(unquote(parsed.path), "location")
        return Path(unquote(parsed.path))
    if scheme in OBJECT_SCHEMES:
        raise UnsupportedError(
            f"location {text!r}: {scheme}:// is object storage, which holds tables (MergeTreeTable.create/open, "
            "format('mergetree') paths) but not this: use a local directory, a file:// URL or a file system "
            "every process mounts as a local path (e.g. NFS)")
    raise UnsupportedError(
        f"location {text!r}: {scheme}: URLs are not supported (tables live in local directories, file:// URLs, "
        "s3://, gs:// or abfss://); use one of those, or a file system every process mounts as a local path "
        "(e.g. NFS)")

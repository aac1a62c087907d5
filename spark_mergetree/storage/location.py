"""Where a table or catalog lives, as a user writes it: a local path or a `file://` URL.

Object storage and other remote file systems (`s3://`, `gs://`, `abfss://`, `hdfs://`, `dbfs:/`,
...) are not supported yet. Such a location is refused before anything is written: taken as a
path it would quietly become a local directory named `s3:` in the working directory of every
process, while its user believes the data went to the bucket.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from urllib.parse import unquote, urlparse

from spark_mergetree.errors import UnsupportedError

# A scheme followed by ":/" (RFC 3986 letters); "data:2024" without a slash stays a file name.
_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*):/")


def local_path(location: str | os.PathLike[str]) -> Path:
    """The local directory `location` names: a path as given, or the path of a `file:` URL
    (`file:///abs`, `file://localhost/abs`, Hadoop's `file:/abs`; percent-escapes decoded).

    Raises UnsupportedError naming the location for any other URL scheme.
    """
    text = os.fspath(location)
    match = _URL.match(text)
    if match is None or len(match.group(1)) == 1:  # no scheme, or a Windows drive letter
        return Path(text)
    scheme = match.group(1).lower()
    if scheme == "file":
        parsed = urlparse(text)
        if parsed.netloc not in ("", "localhost"):
            raise UnsupportedError(f"location {text!r}: a file URL on another host is not supported; "
                                   "use file:///path or a path mounted on this machine")
        return Path(unquote(parsed.path))
    raise UnsupportedError(
        f"location {text!r}: {scheme}: URLs are not supported yet (object storage and remote file systems); "
        "use a local directory or a file:// URL, or a mount of that storage every process sees as a local "
        "path (e.g. /dbfs/..., /Volumes/...)")

"""moto's S3 server with its writes serialised: run as `python tests/moto_serialized.py -H HOST -p PORT`
(tests/s3_server.py does), with the arguments of `moto_server`.

Why: moto (5.2) answers a conditional PUT (`If-Match: <etag>`, `If-None-Match: *`) by reading the
object, comparing, and then storing the new one, with nothing held in between; its server runs a
thread per request. Two compare-and-swaps of the same object with the same etag can both pass the
comparison and both succeed, which S3 never allows. The object-store coordinator builds every
timestamp on such a swap of `clock.json`, so under contention two transactions got the same tid
(the torture harness's objstore rounds saw it as a committed transaction visible in one table and
missing from another). Here every request that changes something (PUT, POST, DELETE) runs alone,
so each conditional write is checked and applied in one step, as S3 does; reads stay concurrent.

`--switch-interval S` sets the server's thread switch interval (sys.setswitchinterval): small
values make a thread switch inside moto's check-then-store far likelier, which a test uses to show
the writes are serialised.
"""

from __future__ import annotations

import os
import sys
import threading
from typing import Any

_WRITES = threading.Lock()
_READS = frozenset(("GET", "HEAD", "OPTIONS"))


def _serialised(respond: Any) -> Any:
    def wrapper(self: Any, request: Any, full_url: str, headers: Any) -> Any:
        if request.method in _READS:
            return respond(self, request, full_url, headers)
        with _WRITES:
            return respond(self, request, full_url, headers)

    wrapper.__name__ = respond.__name__
    return wrapper


def main(argv: list[str]) -> None:
    # Run as a script, this file's directory (tests/) leads sys.path: keep its modules from
    # shadowing the ones moto imports.
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [entry for entry in sys.path if os.path.abspath(entry or ".") != here]
    if "--switch-interval" in argv:
        at = argv.index("--switch-interval")
        sys.setswitchinterval(float(argv[at + 1]))
        argv = argv[:at] + argv[at + 2:]
    from moto.s3.responses import S3Response
    from moto.server import main as moto_main

    S3Response.key_response = _serialised(S3Response.key_response)  # type: ignore[method-assign]
    S3Response.bucket_response = _serialised(S3Response.bucket_response)  # type: ignore[method-assign]
    moto_main(argv)


if __name__ == "__main__":
    main(sys.argv[1:])

"""A real S3-protocol server for tests: moto's standalone server (`moto[server]` from PyPI) on 127.0.0.1.

moto speaks S3 over HTTP (the same requests boto3 sends to AWS), including what the object-store
commit protocol relies on: conditional writes (`If-None-Match: *` and `If-Match: <etag>` answer 412
when they do not hold) and ranged GETs. `S3Server().start()` runs `moto_server` on a free port in a
process of its own and waits until it answers; `bucket()` creates a fresh bucket.
"""

from __future__ import annotations

import os
import sys
import uuid
from pathlib import Path

from tests.cloud_servers import LoopbackServer
from tests.zookeeper_server import free_port

ACCESS_KEY = "testing-access-key"
SECRET_KEY = "testing-secret-key"
REGION = "us-east-1"


class S3Server(LoopbackServer):
    """One moto S3 server process; `endpoint` is its http URL."""

    name = "moto_server"

    def __init__(self, auth: bool = False, switch_interval: float | None = None) -> None:
        """`auth`: moto checks every request's credentials (IAM), as S3 does: ours are unknown to it.
        `switch_interval`: the server's thread switch interval (see tests/moto_serialized.py)."""
        super().__init__()
        self.auth = auth
        self.switch_interval = switch_interval
        if auth:
            self.env = dict(os.environ, INITIAL_NO_AUTH_ACTION_COUNT="0")

    def environment(self) -> dict[str, str]:
        """The variables boto3 (and our filesystem layer) take their endpoint and credentials from."""
        return {"AWS_ENDPOINT_URL": self.endpoint, "AWS_ACCESS_KEY_ID": ACCESS_KEY,
                "AWS_SECRET_ACCESS_KEY": SECRET_KEY, "AWS_DEFAULT_REGION": REGION}

    def _command(self) -> list[str]:
        # moto's server with its writes serialised (tests/moto_serialized.py: moto's conditional
        # PUTs are not atomic on their own)
        command = [sys.executable, str(Path(__file__).with_name("moto_serialized.py")), "-H", "127.0.0.1",
                   "-p", str(self.port)]
        if self.switch_interval is not None:
            command += ["--switch-interval", repr(self.switch_interval)]
        return command

    def _probe(self) -> str:
        return self.endpoint + "/moto-api/"

    def client(self):  # type: ignore[no-untyped-def]
        import boto3
        return boto3.client("s3", endpoint_url=self.endpoint, aws_access_key_id=ACCESS_KEY,
                            aws_secret_access_key=SECRET_KEY, region_name=REGION)

    def bucket(self) -> str:
        """A new, empty bucket (valid S3 names: lower case, 3-63 characters)."""
        name = f"test-{uuid.uuid4().hex[:16]}"
        self.client().create_bucket(Bucket=name)
        return name


class FlakyProxy:
    """An HTTP proxy in front of the S3 server that answers every `every`-th request (at most `limit`
    of them) with 503 SlowDown, S3's throttling answer, without forwarding it: transient faults, to
    show clients retry them."""

    def __init__(self, upstream: str, every: int = 3, limit: int = 1 << 30) -> None:
        import http.client
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
        from urllib.parse import urlparse

        target = urlparse(upstream)
        proxy = self
        self.injected = 0
        self.forwarded = 0
        self._lock = threading.Lock()
        self._count = 0

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # answers `Expect: 100-continue` at once, keeps connections

            def log_message(self, *args: object) -> None:
                pass

            def _relay(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with proxy._lock:
                    proxy._count += 1
                    fail = proxy._count % every == 0 and proxy.injected < limit
                    if fail:
                        proxy.injected += 1
                    else:
                        proxy.forwarded += 1
                if fail:
                    payload = (b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code>'
                               b"<Message>Please reduce your request rate.</Message></Error>")
                    self.send_response(503)
                    self.send_header("Content-Type", "application/xml")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                    return
                connection = http.client.HTTPConnection(target.hostname, target.port, timeout=30)
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "expect")}
                headers["Host"] = target.netloc
                connection.request(self.command, self.path, body=body, headers=headers)
                response = connection.getresponse()
                data = response.read()
                self.send_response(response.status)
                for name, value in response.getheaders():
                    if name.lower() not in ("transfer-encoding", "connection", "content-length", "date", "server"):
                        self.send_header(name, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                connection.close()

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _relay

        self.server = ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

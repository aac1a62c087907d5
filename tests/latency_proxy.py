"""An HTTP proxy on 127.0.0.1 that adds latency to every request: object stores are slower than the
emulators tests run against (moto, fake-gcs-server, Azurite answer in about a millisecond), and
races between a client's own requests (a background merge and an OPTIMIZE, an upload and a
commit) show only when requests take time.

`LatencyProxy(upstream, delay)` relays each request to `upstream` after sleeping `delay` seconds
(the request's body is read first, so the delay is the round trip a distant server adds, not a slow
upload). It is bounded: it stops by itself after `lifetime` seconds, or after `max_requests`
requests (later ones are answered 503 at once, which clients retry and then fail on, so a runaway
loop fails fast instead of hanging). Use it as a context manager or through the `latency_proxy`
fixture (tests/conftest.py), which closes every proxy a test made.

    with LatencyProxy(s3_server.endpoint, delay=0.02) as proxy:
        table = MergeTreeTable.create(url, schema, storage_options={"endpoint": proxy.endpoint, ...})
"""

from __future__ import annotations

import http.client
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from urllib.parse import urlparse

from tests.zookeeper_server import free_port

# Headers that describe one hop, not the message: never copied across the proxy.
_HOP_HEADERS = frozenset(("transfer-encoding", "connection", "content-length", "date", "server", "keep-alive"))


class LatencyProxy:
    """Relays HTTP requests to `upstream`, each after `delay` seconds; stops itself after `lifetime`
    seconds or `max_requests` requests. `requests` counts those relayed."""

    def __init__(self, upstream: str, delay: float = 0.02, *, lifetime: float = 300.0,
                 max_requests: int = 200_000) -> None:
        target = urlparse(upstream)
        if target.hostname is None or target.port is None:
            raise ValueError(f"upstream {upstream!r} needs a host and a port")
        host, port, netloc = target.hostname, target.port, target.netloc
        proxy = self
        self.delay = delay
        self.max_requests = max_requests
        self.requests = 0
        self.refused = 0
        self._lock = threading.Lock()
        self._closed = threading.Event()
        local = threading.local()  # one upstream connection per handler thread, kept alive

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # answers `Expect: 100-continue` at once, keeps connections

            def log_message(self, *args: object) -> None:
                pass

            def _relay(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with proxy._lock:
                    allowed = proxy.requests < proxy.max_requests and not proxy._closed.is_set()
                    if allowed:
                        proxy.requests += 1
                    else:
                        proxy.refused += 1
                if not allowed:
                    self.send_response(503)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                proxy._closed.wait(proxy.delay)  # the added latency (cut short when the proxy closes)
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "expect")}
                headers["Host"] = netloc
                status, reason, answer, data = self._forward(headers, body)
                self.send_response(status, reason)
                for name, value in answer:
                    if name.lower() not in _HOP_HEADERS:
                        self.send_header(name, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            def _forward(self, headers: dict[str, str], body: bytes
                         ) -> tuple[int, str, list[tuple[str, str]], bytes]:
                for attempt in range(2):  # a kept-alive connection the server closed: once more on a new one
                    connection = getattr(local, "connection", None)
                    if connection is None:
                        connection = local.connection = http.client.HTTPConnection(host, port, timeout=60)
                    try:
                        connection.request(self.command, self.path, body=body, headers=headers)
                        response = connection.getresponse()
                        data = response.read()
                        if response.will_close:
                            connection.close()
                            local.connection = None
                        return response.status, response.reason, response.getheaders(), data
                    except (ConnectionError, http.client.HTTPException):
                        connection.close()
                        local.connection = None
                        if attempt:
                            raise
                raise AssertionError("unreachable")

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = do_PATCH = do_OPTIONS = _relay

        self.server = ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.1},
                                       name="latency-proxy", daemon=True)
        self.thread.start()
        self._timer = threading.Timer(lifetime, self.close)
        self._timer.daemon = True
        self._timer.start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        """Stop answering (idempotent; also called when the lifetime ends)."""
        with self._lock:
            if self._closed.is_set():
                return
            self._closed.set()
        self._timer.cancel()
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> LatencyProxy:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.close()


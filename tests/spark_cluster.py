"""A real Spark standalone cluster for tests, from the pip-installed pyspark, on loopback addresses.

`SparkCluster().start()` runs `spark-class org.apache.spark.deploy.master.Master` on 127.0.0.1 and
two `org.apache.spark.deploy.worker.Worker`s of one core each, the first on 127.0.0.1 and the second
on 127.0.0.2 (still loopback: Spark launches a speculative copy of a task only on another host than
the first attempt's), each with a work directory of its own. Start-up is bounded: it waits for the
master's JSON (`/json/`) to list both workers ALIVE and fails naming the process and its log if one
exits or the time runs out. Every daemon binds to its loopback address (SPARK_LOCAL_IP, --host).

`Application` is a driver of the cluster in a Python process of its own (a classic SparkSession, or a
Spark Connect client of a `ConnectServer` attached to the cluster): the test calls the functions of
tests/spark/cluster_jobs.py in it by name and gets their JSON results back. Separate processes keep
the test process free of any SparkContext (pytest-xdist runs this module beside other Spark tests,
whose shared local session may already live in this process) and make a second application a
second application.

`stop()` ends every process started here by its pid: drivers and Connect servers with their JVMs and
Python workers, the workers with their executors (and the executors' Python workers), the master —
SIGTERM first, SIGKILL for whatever is left after a bound.
"""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from tests.zookeeper_server import free_port

REPO = Path(__file__).resolve().parent.parent
MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
EXECUTOR_CLASS = "org.apache.spark.executor.CoarseGrainedExecutorBackend"
CONNECT_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
WORKER_HOSTS = ("127.0.0.1", "127.0.0.2")
DAEMON_MEMORY = "256m"


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def python_path() -> str:
    """The repository first: drivers, executors and Python workers import the package and the tests'
    jobs from the checkout (as a user's nodes import the installed package)."""
    parts = [str(REPO)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return os.pathsep.join(dict.fromkeys(parts))


def base_environment(local_ip: str) -> dict[str, str]:
    env = dict(os.environ, SPARK_LOCAL_IP=local_ip, PYSPARK_PYTHON=sys.executable,
               PYSPARK_DRIVER_PYTHON=sys.executable, PYTHONPATH=python_path(),
               SPARK_HOME=str(spark_home()), SPARK_NO_DAEMONIZE="1")
    # Nothing a cluster's nodes would not have: no Spark session of this process, no coordinator or
    # object-store credentials of the test session (drivers get what they need named, executors
    # through options).
    for name in ("SPARK_CONF_DIR", "SPARK_REMOTE", "SPARK_CONNECT_MODE_ENABLED", "SPARK_LOCAL_REMOTE",
                 "PYSPARK_GATEWAY_PORT", "PYSPARK_GATEWAY_SECRET", "MASTER", "SPARK_MERGETREE_COORDINATOR"):
        env.pop(name, None)
    for name in [name for name in env if name.startswith("AWS_")]:
        env.pop(name)
    return env


# --- processes ---------------------------------------------------------------------------------------

def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        tree.setdefault(parent, []).append(int(entry))
    return tree


def descendants(pid: int) -> list[int]:
    """Every living process below `pid` (children first listed, deepest last)."""
    tree, found, todo = _children(), [], [pid]
    while todo:
        for child in tree.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def command_line(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def end_processes(pids: Iterable[int], grace: float = 10.0) -> None:
    """SIGTERM each pid, wait up to `grace` seconds, SIGKILL what is left (each by its pid)."""
    pids = [pid for pid in dict.fromkeys(pids) if alive(pid)]
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(alive(pid) for pid in pids):
        time.sleep(0.1)
    for pid in pids:
        if alive(pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def end_tree(process: subprocess.Popen | None, grace: float = 10.0) -> None:
    """End a process we started and everything below it, each by its pid."""
    if process is None:
        return
    below = descendants(process.pid)
    end_processes([process.pid, *below], grace)
    try:
        process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=grace)
    end_processes(below, 1.0)  # anything that outlived its parent's exit


def _tail(path: Path, chars: int = 4000) -> str:
    try:
        return path.read_text(errors="replace")[-chars:]
    except OSError:
        return "(no log)"


# --- the cluster -------------------------------------------------------------------------------------

class SparkCluster:
    """A master and two one-core workers; `master_url` is what applications connect to."""

    def __init__(self, directory: str | os.PathLike | None = None, worker_memory: str = "2g") -> None:
        self.directory = Path(directory or tempfile.mkdtemp(prefix="spark-cluster-"))
        self.worker_memory = worker_memory
        self.port = free_port()
        self.webui_port = free_port()
        self.master: subprocess.Popen | None = None
        self.workers: list[subprocess.Popen] = []
        self.work_dirs = [self.directory / f"worker{i}" for i in range(len(WORKER_HOSTS))]

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def _spawn(self, name: str, local_ip: str, args: list[str]) -> subprocess.Popen:
        log = open(self.directory / f"{name}.log", "ab")
        env = base_environment(local_ip)
        env["SPARK_DAEMON_MEMORY"] = DAEMON_MEMORY
        env["SPARK_LOG_DIR"] = str(self.directory / "logs")
        env["SPARK_WORKER_DIR"] = str(self.directory / f"{name}-work")
        env["SPARK_MASTER_OPTS"] = "-Dspark.master.rest.enabled=false"  # no REST server on its fixed port 6066
        try:
            return subprocess.Popen([str(spark_home() / "bin" / "spark-class"), *args], env=env, stdout=log,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=self.directory)
        finally:
            log.close()

    def state(self) -> dict[str, Any]:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.webui_port}/json/", timeout=2) as answer:
            return json.load(answer)

    def alive_workers(self) -> list[dict[str, Any]]:
        try:
            return [w for w in self.state().get("workers", []) if w.get("state") == "ALIVE"]
        except OSError:
            return []

    def start(self, timeout: float = 180.0) -> SparkCluster:
        self.directory.mkdir(parents=True, exist_ok=True)
        self.master = self._spawn("master", "127.0.0.1", [
            MASTER_CLASS, "--host", "127.0.0.1", "--port", str(self.port), "--webui-port", str(self.webui_port)])
        for i, host in enumerate(WORKER_HOSTS):
            self.work_dirs[i].mkdir(parents=True, exist_ok=True)
            self.workers.append(self._spawn(f"worker{i}", host, [
                WORKER_CLASS, self.master_url, "--host", host, "--port", str(free_port()),
                "--webui-port", str(free_port()), "--cores", "1", "--memory", self.worker_memory,
                "--work-dir", str(self.work_dirs[i])]))
        deadline = time.monotonic() + timeout
        try:
            while True:
                for name, process in [("master", self.master)] + [(f"worker{i}", w) for i, w in enumerate(self.workers)]:
                    if process.poll() is not None:
                        raise RuntimeError(f"the Spark {name} exited with {process.returncode} while the cluster "
                                           f"started:\n{_tail(self.directory / f'{name}.log')}")
                workers = self.alive_workers()
                if sorted(w["host"] for w in workers) == sorted(WORKER_HOSTS):
                    return self
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"the Spark cluster at {self.master_url} did not list both workers ALIVE within {timeout} s "
                        f"(alive: {[w.get('host') for w in workers]}):\n"
                        + "\n".join(f"--- {name}.log\n{_tail(self.directory / f'{name}.log', 2000)}"
                                    for name in ("master", "worker0", "worker1")))
                time.sleep(0.2)
        except BaseException:
            self.stop()
            raise

    def executors(self, app_id: str | None = None) -> list[tuple[int, str, str]]:
        """(pid, app id, host) of every executor JVM the workers run (of one application if given)."""
        found = []
        for worker in self.workers:
            for pid in descendants(worker.pid):
                args = command_line(pid)
                if EXECUTOR_CLASS not in args or not alive(pid):
                    continue
                app = args[args.index("--app-id") + 1] if "--app-id" in args else ""
                host = args[args.index("--hostname") + 1] if "--hostname" in args else ""
                if app_id is None or app == app_id:
                    found.append((pid, app, host))
        return found

    def wait_for_executors(self, app_id: str, count: int, timeout: float = 120.0) -> list[tuple[int, str, str]]:
        deadline = time.monotonic() + timeout
        while True:
            running = self.executors(app_id)
            if len(running) >= count:
                return running
            if time.monotonic() > deadline:
                raise RuntimeError(f"application {app_id} has {len(running)} executors after {timeout} s, "
                                   f"not {count}: {self.state().get('activeapps')}")
            time.sleep(0.2)

    def running_applications(self) -> list[str]:
        try:
            return [app["id"] for app in self.state().get("activeapps", [])]
        except OSError:
            return []

    def stop(self) -> None:
        # Workers first (their executors and those executors' Python workers with them), then the master.
        for worker in self.workers:
            end_tree(worker)
        end_tree(self.master)
        self.workers, self.master = [], None

    def __enter__(self) -> SparkCluster:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


# --- applications ------------------------------------------------------------------------------------

class ApplicationError(AssertionError):
    pass


class Application:
    """A driver process of the cluster (tests/spark/cluster_jobs.py `serve`): `call(name, **kwargs)`
    runs `cluster_jobs.<name>(spark, **kwargs)` there and returns its JSON result."""

    def __init__(self, name: str, directory: Path, *, master: str | None = None, remote: str | None = None,
                 confs: dict[str, str] | None = None, env: dict[str, str] | None = None,
                 timeout: float = 180.0) -> None:
        self.name = name
        self.log = directory / f"{name}.log"
        config = {"master": master, "remote": remote, "app_name": name, "confs": confs or {}}
        environment = base_environment("127.0.0.1")
        environment.update(env or {})
        read_end, write_end = os.pipe()
        log = open(self.log, "ab")
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-c", "from tests.spark.cluster_jobs import serve; serve()", json.dumps(config),
                 str(write_end)],
                env=environment, cwd=directory, stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT,
                pass_fds=(write_end,), text=True)
        finally:
            log.close()
            os.close(write_end)
        self._answers: queue.Queue[dict[str, Any] | None] = queue.Queue()
        threading.Thread(target=self._read, args=(os.fdopen(read_end, "r"),), daemon=True).start()
        self._lock = threading.Lock()
        try:
            ready = self._answer(timeout, "start")
        except BaseException:
            self.close()
            raise
        self.app_id: str = ready["app_id"]

    def _read(self, stream: Any) -> None:
        with stream:
            for line in stream:
                self._answers.put(json.loads(line))
        self._answers.put(None)

    def _answer(self, timeout: float, what: str) -> Any:
        try:
            answer = self._answers.get(timeout=timeout)
        except queue.Empty:
            raise ApplicationError(f"{self.name}: {what} did not answer within {timeout} s:\n{_tail(self.log)}") from None
        if answer is None:
            raise ApplicationError(f"{self.name} exited during {what} ({self.process.poll()}):\n{_tail(self.log)}")
        if "error" in answer:
            raise ApplicationError(f"{self.name}: {what} failed:\n{answer['error']}")
        return answer["result"]

    def call(self, function: str, timeout: float = 180.0, **kwargs: Any) -> Any:
        with self._lock:
            assert self.process.stdin is not None
            self.process.stdin.write(json.dumps({"call": function, "kwargs": kwargs}) + "\n")
            self.process.stdin.flush()
            return self._answer(timeout, function)

    def close(self, timeout: float = 30.0) -> None:
        if self.process.poll() is None and self.process.stdin is not None:
            try:
                self.process.stdin.close()  # serve() stops the session and exits at the end of its input
                self.process.wait(timeout=timeout)
            except (OSError, subprocess.TimeoutExpired):
                pass
        end_tree(self.process)

    def __enter__(self) -> Application:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class ConnectServer:
    """A Spark Connect server attached to the cluster (`spark-submit --class SparkConnectServer`, as
    `start-connect-server.sh` runs it), with mergetree's settings (`mergetree spark-submit-args`),
    listening on 127.0.0.1 only."""

    def __init__(self, cluster: SparkCluster, directory: Path, confs: dict[str, str], timeout: float = 180.0) -> None:
        from spark_mergetree import jvm

        self.port = free_port()
        self.log = directory / "connect-server.log"
        args = [str(spark_home() / "bin" / "spark-submit"), "--class", CONNECT_CLASS, "--name", "connect-server",
                "--master", cluster.master_url, *jvm.submit_args(jvm.ensure_extension()),
                "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
                "--conf", f"spark.connect.grpc.binding.port={self.port}"]
        for key, value in confs.items():
            args += ["--conf", f"{key}={value}"]
        log = open(self.log, "ab")
        try:
            self.process = subprocess.Popen([*args, "spark-internal"], env=base_environment("127.0.0.1"),
                                            cwd=directory, stdout=log, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL)
        finally:
            log.close()
        deadline = time.monotonic() + timeout
        pattern = re.compile(r"Spark Connect server started")
        while not pattern.search(_tail(self.log, 200_000)):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.close()
                raise RuntimeError(f"the Spark Connect server did not start within {timeout} s "
                                   f"(exit {self.process.poll()}):\n{_tail(self.log)}")
            time.sleep(0.2)

    @property
    def url(self) -> str:
        return f"sc://127.0.0.1:{self.port}"

    def close(self) -> None:
        end_tree(self.process)

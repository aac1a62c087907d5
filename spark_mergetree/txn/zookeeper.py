"""ZooKeeperCoordinator: the coordinator on a ZooKeeper ensemble, through kazoo.

Layout under the root path (see format_spec/transactions.md):
  log/origin              makes every sequence number ≥ 1
  log/r-<seq>             EPHEMERAL_SEQUENTIAL: a running transaction, tid = seq; dies with the
                          driver's session, which aborts the transaction and frees its locks
  log/c-<tid>-<seq>       PERSISTENT_SEQUENTIAL commit decision, csn = seq (data: removals, tables)
  log/a-<tid>-<seq>       an abort record (introspection only)
  txn/<tid>               created in the commit multi; data gets the csn right after
  removals/<table>/<part> EPHEMERAL while a running transaction holds the removal lock,
                          PERSISTENT once the removal committed
  blocks/<table>          next free block number (compare-and-set on the znode version)
  staged/<tid>/<hash>     a table other processes staged changes in for the running transaction
                          tid (data: the table); created only while log/r-<tid> exists

Transaction ids and commit sequence numbers are both sequence numbers of children of `log/`, so
they share one sequence, and every commit with csn < tid was decided before `tid` began: the
snapshot of `tid` is `tid - 1` without any read. The commit point is one multi-op (delete the
running node, create the decision and the removal records): all of it happens or none does, also
when the session expires in the middle.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import quote

from kazoo.client import KazooClient
from kazoo.exceptions import (
    BadVersionError,
    ConnectionClosedError,
    ConnectionLoss,
    KazooException,
    NodeExistsError,
    NoNodeError,
    OperationTimeoutError,
    RolledBackError,
    SessionExpiredError,
)
from kazoo.retry import KazooRetry

from spark_mergetree.errors import SerializationError, TransactionError
from spark_mergetree.txn.coordinator import (
    CommitOutcomeUnknownError,
    Coordinator,
    TxnInfo,
    TxnRecord,
    TxnState,
    _check_count,
)

# Errors after which the request may or may not have been applied; the session may come back.
_TRANSIENT = (ConnectionLoss, SessionExpiredError, OperationTimeoutError)
_PRUNE_EVERY = 500
_KEEP_DECISIONS = 1000


def _encode(name: str) -> str:
    """A table id or part name as one znode name ('/' and '.' escaped, never '.' or '..')."""
    return quote(name, safe="").replace(".", "%2E") or "%00"


def _json(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def _sequence(name: str) -> int:
    return int(name.rsplit("-", 1)[1])


class ZooKeeperCoordinator(Coordinator):
    """Coordinator on ZooKeeper. Every call gives up after `operation_timeout` seconds."""

    def __init__(self, hosts: str, root_path: str = "/spark_mergetree", *,
                 session_timeout: float = 10.0, operation_timeout: float = 20.0) -> None:
        self.hosts = hosts
        self.root = "/" + root_path.strip("/")
        self.operation_timeout = operation_timeout
        # Reconnect forever in the background; our own deadlines bound every call.
        self.client = KazooClient(hosts=hosts, timeout=session_timeout,
                                  connection_retry=KazooRetry(max_tries=-1, delay=0.1, max_delay=1.0))
        try:
            self.client.start(timeout=operation_timeout)
        except Exception as error:
            self.client.close()
            raise TransactionError(f"cannot connect to ZooKeeper at {hosts}: {error}") from error
        self._mutex = threading.RLock()
        self._owned: set[int] = set()
        self._locks: dict[int, set[tuple[str, str]]] = {}
        self._known_csn: dict[int, int] = {}
        self._commits_since_prune = 0
        self._closed = False
        self._ensure_layout()

    @staticmethod
    def url_for(hosts: str, root_path: str) -> str:
        return f"zk://{hosts}/{root_path.strip('/')}"

    @property
    def url(self) -> str:
        return self.url_for(self.hosts, self.root)

    # ---- calls with deadlines ------------------------------------------------------------------

    def _path(self, *parts: str) -> str:
        return "/".join((self.root,) + parts)

    def _wait(self, async_result: Any, what: str, deadline: float) -> Any:
        try:
            return async_result.get(timeout=max(0.0, deadline - time.monotonic()))
        except self.client.handler.timeout_exception:
            raise OperationTimeoutError(what) from None

    def _retrying(self, what: str, call: Callable[[], Any]) -> Any:
        """Run an idempotent asynchronous call, retrying across disconnections until the deadline."""
        deadline = time.monotonic() + self.operation_timeout
        while True:
            try:
                return self._wait(call(), what, deadline)
            except _TRANSIENT as error:
                if time.monotonic() >= deadline:
                    raise TransactionError(
                        f"ZooKeeper at {self.hosts} did not answer ({what}) within "
                        f"{self.operation_timeout} s: {type(error).__name__}") from None
                time.sleep(0.05)
            except ConnectionClosedError as error:
                raise TransactionError(f"coordinator {self.url} is closed") from error

    def _get(self, path: str) -> tuple[bytes, Any] | None:
        try:
            return self._retrying(f"get {path}", lambda: self.client.get_async(path))
        except NoNodeError:
            return None

    def _exists(self, path: str) -> Any:
        return self._retrying(f"exists {path}", lambda: self.client.exists_async(path))

    def _children(self, path: str) -> list[str]:
        return self._retrying(f"list {path}", lambda: self.client.get_children_async(path))

    def _ensure(self, path: str) -> None:
        # ensure_path is idempotent; run it under our deadline.
        self._retrying(f"create {path}", lambda: self.client.ensure_path_async(path))

    def _ensure_layout(self) -> None:
        for child in ("log", "txn", "removals", "blocks", "staged"):
            self._ensure(self._path(child))
        stat = self._exists(self._path("log"))
        if stat is not None and stat.cversion == 0:
            try:
                self._retrying("create log/origin",
                               lambda: self.client.create_async(self._path("log", "origin"), b""))
            except NodeExistsError:
                pass

    # ---- the Coordinator interface -------------------------------------------------------------

    def begin(self) -> TxnInfo:
        started = time.time()
        nonce = uuid.uuid4().hex
        data = _json({"started": started, "host": socket.gethostname(), "pid": os.getpid(),
                      "nonce": nonce})
        deadline = time.monotonic() + self.operation_timeout
        while True:
            pending = self.client.create_async(self._path("log", "r-"), data, ephemeral=True, sequence=True)
            try:
                path = self._wait(pending, "begin", deadline)
                break
            except OperationTimeoutError:
                # The request may still run later; delete the node then so it cannot pose as a
                # running transaction that holds back cleanup.
                pending.rawlink(lambda result: self._discard_late_node(result))
                raise TransactionError(
                    f"ZooKeeper at {self.hosts} did not start a transaction within "
                    f"{self.operation_timeout} s") from None
            except _TRANSIENT:
                found = self._find_running_by_nonce(nonce, deadline)
                if found is not None:
                    path = found
                    break
                if time.monotonic() >= deadline:
                    raise TransactionError(f"ZooKeeper at {self.hosts} unreachable while beginning a transaction") from None
                time.sleep(0.05)
        tid = _sequence(path)
        with self._mutex:
            self._owned.add(tid)
            self._locks[tid] = set()
        return TxnInfo(tid=tid, snapshot=tid - 1, started=started)

    def _discard_late_node(self, result: Any) -> None:
        try:
            path = result.get_nowait()
        except Exception:
            return
        self.client.delete_async(path)

    def _find_running_by_nonce(self, nonce: str, deadline: float) -> str | None:
        while time.monotonic() < deadline:
            try:
                for name in self._children(self._path("log")):
                    if name.startswith("r-"):
                        found = self._get(self._path("log", name))
                        if found is not None and json.loads(found[0]).get("nonce") == nonce:
                            return self._path("log", name)
                return None
            except TransactionError:
                time.sleep(0.05)
        return None

    def _running_path(self, tid: int) -> str:
        return self._path("log", f"r-{tid:010d}")

    def _removal_path(self, table_id: str, part_name: str) -> str:
        return self._path("removals", _encode(table_id), _encode(part_name))

    def _describe_removal(self, table_id: str, part_name: str) -> str:
        found = self._get(self._removal_path(table_id, part_name))
        if found is None:
            return "another transaction raced for it"
        data, stat = found
        holder = json.loads(data).get("tid")
        if stat.ephemeralOwner:
            return f"transaction {holder} holds its removal lock"
        return f"transaction {holder} already removed it"

    def lock_removal(self, tid: int, table_id: str, part_name: str) -> None:
        with self._mutex:
            if tid not in self._owned:
                state, csn = self.status(tid)
                raise TransactionError(f"cannot lock a part for transaction {tid}: it is {state.value} "
                                       "or owned by another process")
            if (table_id, part_name) in self._locks[tid]:
                return
        self._ensure(self._path("removals", _encode(table_id)))
        path = self._removal_path(table_id, part_name)

        def send() -> Any:
            # Only while the transaction lives: after a session expiry the lock would otherwise be
            # taken by the new session for a transaction that can never commit.
            request = self.client.transaction()
            request.check(self._running_path(tid), 0)
            request.create(path, _json({"tid": tid}), ephemeral=True)
            return request.commit_async()

        results = self._retrying(f"lock {path}", send)
        if isinstance(results[0], Exception) and not isinstance(results[0], RolledBackError):
            self._forget(tid)
            raise TransactionError(f"transaction {tid} is no longer running (its ZooKeeper session "
                                   "expired or it was aborted)")
        if isinstance(results[1], NodeExistsError):
            found = self._get(path)
            if found is None or json.loads(found[0]).get("tid") != tid:
                raise SerializationError(
                    f"transaction {tid} cannot remove part {part_name!r} of table {table_id!r}: "
                    f"{self._describe_removal(table_id, part_name)}") from None
        elif isinstance(results[1], Exception):
            raise TransactionError(f"locking {path} failed: {results[1]!r}")
        with self._mutex:
            self._locks.setdefault(tid, set()).add((table_id, part_name))

    def _staged_tables_path(self, tid: int) -> str:
        return self._path("staged", f"{tid:010d}")

    def add_staged_table(self, tid: int, table: str) -> None:
        parent = self._staged_tables_path(tid)
        self._ensure(parent)
        path = f"{parent}/{hashlib.sha256(table.encode()).hexdigest()[:32]}"

        def send() -> Any:
            # In one multi with a check of the running node: never recorded for an ended transaction.
            request = self.client.transaction()
            request.check(self._running_path(tid), 0)
            request.create(path, table.encode())
            return request.commit_async()

        results = self._retrying(f"record {path}", send)
        if isinstance(results[0], Exception) and not isinstance(results[0], RolledBackError):
            state, csn = self.status(tid)
            raise TransactionError(f"transaction {tid} is {state.value}"
                                   + (f" at csn {csn}" if csn is not None else "")
                                   + f": nothing can be staged for it any more (table {table})")
        if isinstance(results[1], Exception) and not isinstance(results[1], NodeExistsError):
            raise TransactionError(f"recording {path} failed: {results[1]!r}")

    def staged_tables(self, tid: int) -> list[str]:
        parent = self._staged_tables_path(tid)
        try:
            names = self._children(parent)
        except NoNodeError:
            return []
        tables = []
        for name in sorted(names):
            found = self._get(f"{parent}/{name}")
            if found is not None:
                tables.append(found[0].decode())
        return tables

    def _drop_staged_tables(self, tid: int) -> None:
        """Best effort: an ended transaction's records (prune_log removes what is left)."""
        parent = self._staged_tables_path(tid)
        try:
            for path in [f"{parent}/{name}" for name in self._children(parent)] + [parent]:
                try:
                    self._retrying(f"delete {path}", functools.partial(self.client.delete_async, path))
                except NoNodeError:
                    pass
        except (NoNodeError, TransactionError, KazooException):
            pass

    def commit(self, tid: int, removals: Iterable[tuple[str, str]] = (),
               tables: Iterable[str] = ()) -> int:
        removal_list = sorted({(str(table), str(part)) for table, part in removals})
        with self._mutex:
            owned = tid in self._owned
            held = set(self._locks.get(tid, ()))
        if not owned:
            state, csn = self.status(tid)
            if state is TxnState.COMMITTED and csn is not None:
                return csn
            if state is TxnState.RUNNING:
                raise TransactionError(f"cannot commit transaction {tid}: another process owns it")
            raise TransactionError(f"cannot commit transaction {tid}: it is no longer running (aborted, "
                                   "or its ZooKeeper session expired)")
        for table_id in sorted({table for table, _ in removal_list}):
            self._ensure(self._path("removals", _encode(table_id)))
        decision = _json({"tid": tid, "removals": removal_list, "tables": sorted(set(tables)),
                          "time": time.time()})
        removal_record = _json({"tid": tid, "committed": True})

        def send() -> Any:
            request = self.client.transaction()
            request.delete(self._running_path(tid))
            request.create(self._path("log", f"c-{tid:010d}-"), decision, sequence=True)
            request.create(self._path("txn", f"{tid:010d}"), _json({"state": "committed"}))
            for table_id, part_name in removal_list:
                path = self._removal_path(table_id, part_name)
                if (table_id, part_name) in held:
                    request.delete(path)
                request.create(path, removal_record)
            return request.commit_async()

        deadline = time.monotonic() + self.operation_timeout
        pending = send()
        while True:
            try:
                results = pending.get(timeout=max(0.0, deadline - time.monotonic()))
                break
            except self.client.handler.timeout_exception:
                raise CommitOutcomeUnknownError(
                    f"ZooKeeper at {self.hosts} did not answer the commit of transaction {tid} "
                    f"within {self.operation_timeout} s; its outcome will be resolved from "
                    f"{self._path('txn')}") from None
            except _TRANSIENT:
                # The multi may or may not have been applied: ask ZooKeeper which.
                try:
                    if self._exists(self._path("txn", f"{tid:010d}")) is not None:
                        return self._finish_commit(tid, self._csn_of(tid))
                    alive = self._exists(self._running_path(tid)) is not None
                except TransactionError as error:
                    raise CommitOutcomeUnknownError(
                        f"commit of transaction {tid}: outcome unknown ({error})") from None
                if not alive:
                    self._forget(tid)
                    raise TransactionError(
                        f"transaction {tid} was lost before its commit: its ZooKeeper session "
                        "expired (the transaction is aborted)") from None
                pending = send()
            except ConnectionClosedError as error:
                raise TransactionError(f"coordinator {self.url} is closed") from error

        failures = [(index, result) for index, result in enumerate(results)
                    if isinstance(result, Exception) and not isinstance(result, RolledBackError)]
        if not failures:
            csn = _sequence(results[1])
            return self._finish_commit(tid, csn)
        index, failure = failures[0]
        if index == 0 or index == 2:
            # Running node gone, or the decision exists already (a retried multi).
            if self._exists(self._path("txn", f"{tid:010d}")) is not None:
                return self._finish_commit(tid, self._csn_of(tid))
            self._forget(tid)
            raise TransactionError(f"transaction {tid} is no longer running (its ZooKeeper session "
                                   "expired or it was aborted); nothing was committed")
        # Index ≥ 3: a removal record or lock; find which part.
        position = 3
        for table_id, part_name in removal_list:
            width = 2 if (table_id, part_name) in held else 1
            if position <= index < position + width:
                description = self._describe_removal(table_id, part_name)
                self.abort(tid)
                raise SerializationError(
                    f"transaction {tid} cannot commit: removing part {part_name!r} of table "
                    f"{table_id!r} conflicts: {description}")
            position += width
        self.abort(tid)
        raise TransactionError(f"commit of transaction {tid} failed: {failure!r}")

    def _finish_commit(self, tid: int, csn: int) -> int:
        self._forget(tid)
        self._drop_staged_tables(tid)
        self._known_csn[tid] = csn
        try:
            self._retrying("record csn", lambda: self.client.set_async(
                self._path("txn", f"{tid:010d}"), _json({"state": "committed", "csn": csn})))
        except (TransactionError, KazooException):
            pass  # readers fall back to the decision node
        with self._mutex:
            self._commits_since_prune += 1
            due = self._commits_since_prune >= _PRUNE_EVERY
            if due:
                self._commits_since_prune = 0
        if due:
            try:
                self.prune_log()
            except (TransactionError, KazooException):
                pass
        return csn

    def _forget(self, tid: int) -> None:
        with self._mutex:
            self._owned.discard(tid)
            self._locks.pop(tid, None)

    def _csn_of(self, tid: int) -> int:
        """The csn of a committed tid: from txn/<tid>, else from its decision node's name."""
        known = self._known_csn.get(tid)
        if known is not None:
            return known
        found = self._get(self._path("txn", f"{tid:010d}"))
        if found is not None:
            csn = json.loads(found[0]).get("csn")
            if csn is not None:
                self._known_csn[tid] = int(csn)
                return int(csn)
        prefix = f"c-{tid:010d}-"
        for name in self._children(self._path("log")):
            if name.startswith(prefix):
                csn = _sequence(name)
                self._known_csn[tid] = csn
                try:
                    self._retrying("record csn", functools.partial(
                        self.client.set_async, self._path("txn", f"{tid:010d}"), _json({"state": "committed", "csn": csn})))
                except (TransactionError, KazooException):
                    pass
                return csn
        raise TransactionError(f"transaction {tid} is committed but its decision node {prefix}* "
                               f"is missing under {self._path('log')}")

    def abort(self, tid: int) -> None:
        with self._mutex:
            held = set(self._locks.get(tid, ()))
        if tid in self._known_csn or self._exists(self._path("txn", f"{tid:010d}")) is not None:
            raise TransactionError(f"cannot abort transaction {tid}: it committed")
        if tid not in self._owned and self._exists(self._running_path(tid)) is not None:
            raise TransactionError(f"cannot abort transaction {tid}: another process owns it")
        def send() -> Any:
            request = self.client.transaction()
            request.delete(self._running_path(tid))
            for table_id, part_name in sorted(held):
                request.delete(self._removal_path(table_id, part_name))
            request.create(self._path("log", f"a-{tid:010d}-"), _json({"tid": tid, "time": time.time()}),
                           sequence=True)
            return request.commit_async()

        try:
            self._retrying(f"abort {tid}", send)
        except TransactionError:
            pass  # an unreachable server: the session's end aborts it anyway
        finally:
            self._forget(tid)
        self._drop_staged_tables(tid)

    def status(self, tid: int) -> tuple[TxnState, int | None]:
        if tid in self._known_csn:
            return TxnState.COMMITTED, self._known_csn[tid]
        if self._exists(self._path("txn", f"{tid:010d}")) is not None:
            return TxnState.COMMITTED, self._csn_of(tid)
        if self._exists(self._running_path(tid)) is not None:
            # Committing deletes the running node in the same multi that creates txn/<tid>: check
            # once more so a commit between the two reads is not reported as aborted.
            return TxnState.RUNNING, None
        if self._exists(self._path("txn", f"{tid:010d}")) is not None:
            return TxnState.COMMITTED, self._csn_of(tid)
        return TxnState.ABORTED, None

    def forget_removals(self, table_id: str, part_names: Iterable[str]) -> None:
        for part_name in sorted(set(part_names)):
            path = self._removal_path(table_id, part_name)
            found = self._get(path)
            if found is None or found[1].ephemeralOwner:
                continue  # never removed, or only locked by a running transaction
            try:
                self._retrying(f"delete {path}", functools.partial(self.client.delete_async, path,
                                                                   version=found[1].version))
            except (NoNodeError, BadVersionError):
                pass

    def running(self) -> list[TxnInfo]:
        names = [name for name in self._children(self._path("log")) if name.startswith("r-")]
        requests = [(name, self.client.get_async(self._path("log", name))) for name in names]
        infos = []
        deadline = time.monotonic() + self.operation_timeout
        for name, request in requests:
            try:
                data, _ = self._wait(request, f"get {name}", deadline)
            except NoNodeError:
                continue
            except _TRANSIENT as error:
                raise TransactionError(f"ZooKeeper at {self.hosts} did not list running transactions: "
                                       f"{type(error).__name__}") from None
            tid = _sequence(name)
            infos.append(TxnInfo(tid=tid, snapshot=tid - 1, started=float(json.loads(data).get("started", 0.0))))
        return sorted(infos, key=lambda info: info.tid)

    def current_timestamp(self) -> int:
        stat = self._exists(self._path("log"))
        # The next child gets sequence number cversion; everything handed out is below it.
        return stat.cversion - 1

    def allocate_blocks(self, table_id: str, count: int = 1) -> int:
        _check_count(count)
        path = self._path("blocks", _encode(table_id))
        deadline = time.monotonic() + self.operation_timeout
        while time.monotonic() < deadline:
            found = self._get(path)
            try:
                if found is None:
                    self._retrying(f"create {path}", lambda: self.client.create_async(path, str(1 + count).encode()))
                    return 1
                first = int(found[0])
                version = found[1].version
                self._retrying(f"set {path}", functools.partial(
                    self.client.set_async, path, str(first + count).encode(), version=version))
                return first
            except (NodeExistsError, BadVersionError):
                continue  # somebody else allocated meanwhile
        raise TransactionError(f"could not allocate blocks for table {table_id!r} within "
                               f"{self.operation_timeout} s (contention on {path})")

    def list_transactions(self, limit: int = 100) -> list[TxnRecord]:
        names = self._children(self._path("log"))
        running = sorted((name for name in names if name.startswith("r-")), key=_sequence, reverse=True)
        decided = sorted((name for name in names if name[:2] in ("c-", "a-")), key=_sequence, reverse=True)
        records: list[TxnRecord] = []
        for name in running[:limit]:
            found = self._get(self._path("log", name))
            if found is None:
                continue
            header = json.loads(found[0])
            tid = _sequence(name)
            with self._mutex:
                locks = tuple(sorted(self._locks.get(tid, ())))
            records.append(TxnRecord(tid=tid, state=TxnState.RUNNING, snapshot=tid - 1, removals=locks,
                                     time=header.get("started"),
                                     owner=f"{header.get('host', '')}:{header.get('pid', '')}"))
        for name in decided[: max(0, limit - len(records))]:
            found = self._get(self._path("log", name))
            if found is None:
                continue
            record = json.loads(found[0])
            tid = int(name.split("-")[1])
            committed = name.startswith("c-")
            records.append(TxnRecord(
                tid=tid, state=TxnState.COMMITTED if committed else TxnState.ABORTED,
                csn=_sequence(name) if committed else None, snapshot=tid - 1,
                tables=tuple(record.get("tables", ())),
                removals=tuple(tuple(pair) for pair in record.get("removals", ())),
                time=record.get("time")))
        return records[:limit]

    def prune_log(self, keep: int = _KEEP_DECISIONS) -> int:
        """Delete decision nodes beyond the newest `keep` once txn/<tid> holds their csn."""
        names = self._children(self._path("log"))
        decided = sorted((name for name in names if name[:2] in ("c-", "a-")), key=_sequence)
        deleted = 0
        for name in decided[: max(0, len(decided) - keep)]:
            tid = int(name.split("-")[1])
            if name.startswith("c-"):
                found = self._get(self._path("txn", f"{tid:010d}"))
                if found is None or json.loads(found[0]).get("csn") is None:
                    self._csn_of(tid)  # writes the csn into txn/<tid> first
            try:
                self._retrying(f"delete {name}", functools.partial(self.client.delete_async, self._path("log", name)))
                deleted += 1
            except NoNodeError:
                pass
        # Staged-table records of transactions that ended without removing them (an owner died).
        for name in self._children(self._path("staged")):
            if name.isdigit() and self.status(int(name))[0] is not TxnState.RUNNING:
                self._drop_staged_tables(int(name))
        return deleted

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for tid in list(self._owned):
            try:
                self.abort(tid)
            except (TransactionError, KazooException):
                pass
        try:
            self.client.stop()
        finally:
            self.client.close()

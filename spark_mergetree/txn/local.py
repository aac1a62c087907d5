"""LocalCoordinator: a coordinator in one directory, safe across the processes of one machine.

Layout (see format_spec/transactions.md):
  lock          flock'ed exclusively around every state change and read
  counter       8 bytes little-endian: the last timestamp handed out (fsynced at begin)
  log.jsonl     append-only, fsynced decisions: commits (with removals), aborts, block allocations
  running/<tid> one file per running transaction, flock'ed by its owner for its whole life;
                a lock anybody else can take means the owner died, so the transaction is aborted
  staged/<tid>/ tables other processes staged changes in for the running transaction tid
"""

from __future__ import annotations

import collections
import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import socket
import struct
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from spark_mergetree.errors import SerializationError, TransactionError
from spark_mergetree.fileops import write_file_atomically
from spark_mergetree.storage.location import refuse_fuse_mount
from spark_mergetree.txn.coordinator import (
    Coordinator,
    TxnInfo,
    TxnRecord,
    TxnState,
    _check_count,
)

_RECENT_DECISIONS = 1000


class LocalCoordinator(Coordinator):
    """Coordinator on local files. Create one per process (fcntl locks do not survive fork())."""

    def __init__(self, directory: str | os.PathLike, *, compact_threshold_bytes: int = 64 << 20) -> None:
        """`compact_threshold_bytes`: once log.jsonl is larger than this and twice its size after
        the last compaction, a commit rewrites it without the records nobody needs any more."""
        refuse_fuse_mount(Path(directory).expanduser(), "coordinator directory")
        self.directory = Path(directory).expanduser().resolve()
        self.compact_threshold_bytes = compact_threshold_bytes
        self._running_dir = self.directory / "running"
        try:
            self._running_dir.mkdir(parents=True, exist_ok=True)
            self._lock_fd = os.open(self.directory / "lock", os.O_RDWR | os.O_CREAT, 0o644)
            self._counter_fd = os.open(self.directory / "counter", os.O_RDWR | os.O_CREAT, 0o644)
            self._log_fd = os.open(self.directory / "log.jsonl", os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        except OSError as error:
            raise TransactionError(f"cannot open coordinator directory {self.directory}: {error}") from error
        self._mutex = threading.RLock()
        self._lock_depth = 0
        # A cache of log.jsonl, caught up under the lock before every operation.
        self._log_offset = 0
        self._compacted_size = 0
        self._last_timestamp = 0
        self._committed: dict[int, int] = {}
        self._aborted: set[int] = set()
        self._removed_by: dict[tuple[str, str], int] = {}
        self._next_block: dict[str, int] = {}
        self._recent: collections.deque[dict[str, Any]] = collections.deque(maxlen=_RECENT_DECISIONS)
        # tid -> open descriptor of its running file (holding the owner's flock).
        self._owned: dict[int, int] = {}
        self._owned_locks: dict[int, set[tuple[str, str]]] = {}
        self._closed = False

    @staticmethod
    def url_for(directory: str | os.PathLike) -> str:
        return Path(directory).expanduser().resolve().as_uri()

    @property
    def url(self) -> str:
        return self.directory.as_uri()

    # ---- locking and the log cache -------------------------------------------------------------

    class _Locked:
        def __init__(self, owner: LocalCoordinator) -> None:
            self.owner = owner

        def __enter__(self) -> None:
            owner = self.owner
            owner._mutex.acquire()
            if owner._closed:
                owner._mutex.release()
                raise TransactionError(f"coordinator {owner.url} is closed")
            if owner._lock_depth == 0:
                fcntl.flock(owner._lock_fd, fcntl.LOCK_EX)
                try:
                    owner._catch_up()
                except BaseException:
                    fcntl.flock(owner._lock_fd, fcntl.LOCK_UN)
                    owner._mutex.release()
                    raise
            owner._lock_depth += 1

        def __exit__(self, *exc_info: object) -> None:
            owner = self.owner
            owner._lock_depth -= 1
            if owner._lock_depth == 0:
                fcntl.flock(owner._lock_fd, fcntl.LOCK_UN)
            owner._mutex.release()

    def _locked(self) -> _Locked:
        return LocalCoordinator._Locked(self)

    def _reset_cache(self) -> None:
        self._log_offset = 0
        self._committed = {}
        self._aborted = set()
        self._removed_by = {}
        self._next_block = {}
        self._recent.clear()

    def _catch_up(self) -> None:
        log_path = self.directory / "log.jsonl"
        if os.stat(log_path).st_ino != os.fstat(self._log_fd).st_ino:
            # Another process compacted the log: read the new file from its start.
            os.close(self._log_fd)
            self._log_fd = os.open(log_path, os.O_RDWR | os.O_APPEND)
            self._reset_cache()
            self._compacted_size = os.fstat(self._log_fd).st_size
        size = os.fstat(self._log_fd).st_size
        if size > self._log_offset:
            data = os.pread(self._log_fd, size - self._log_offset, self._log_offset)
            complete = data.rfind(b"\n") + 1
            if complete < len(data):
                # A writer died mid-append (we hold the lock, so it is not writing now): the
                # torn record was never acknowledged, drop it.
                os.ftruncate(self._log_fd, self._log_offset + complete)
            for line_number, line in enumerate(data[:complete].splitlines()):
                try:
                    self._apply(json.loads(line))
                except (ValueError, KeyError, TypeError) as error:
                    raise TransactionError(
                        f"{self.directory / 'log.jsonl'}: corrupt record near byte "
                        f"{self._log_offset} (+{line_number} lines): {error}") from error
            self._log_offset += complete
        counter = os.pread(self._counter_fd, 8, 0)
        if len(counter) == 8:
            self._last_timestamp = max(self._last_timestamp, struct.unpack("<Q", counter)[0])

    def _apply(self, record: dict[str, Any]) -> None:
        op = record["op"]
        if op == "commit":
            tid, csn = int(record["tid"]), int(record["csn"])
            self._committed[tid] = csn
            for table_id, part_name in record.get("removals", ()):
                self._removed_by[(table_id, part_name)] = tid
            self._last_timestamp = max(self._last_timestamp, csn)
            self._recent.append(record)
        elif op == "abort":
            self._aborted.add(int(record["tid"]))
            self._recent.append(record)
        elif op == "blocks":
            self._next_block[record["table"]] = int(record["next"])
        elif op == "forget":
            for part_name in record["parts"]:
                self._removed_by.pop((record["table"], part_name), None)
        else:
            raise ValueError(f"unknown op {op!r}")

    @contextlib.contextmanager
    def _file(self, name: str) -> Iterator[None]:
        """Turn an OSError (a full disk, an I/O error) into a TransactionError naming the file."""
        try:
            yield
        except OSError as error:
            raise TransactionError(
                f"coordinator file {self.directory / name}: {error.strerror or error}") from error

    def _append(self, record: dict[str, Any], durable: bool) -> None:
        line = json.dumps(record, separators=(",", ":")).encode() + b"\n"
        with self._file("log.jsonl"):
            written = os.write(self._log_fd, line)
            if written != len(line):
                raise TransactionError(f"{self.directory / 'log.jsonl'}: short write ({written} of {len(line)} bytes)")
            if durable:
                os.fsync(self._log_fd)
        self._apply(record)
        self._log_offset += len(line)

    def _next_timestamp(self) -> int:
        timestamp = self._last_timestamp + 1
        with self._file("counter"):
            os.pwrite(self._counter_fd, struct.pack("<Q", timestamp), 0)
        self._last_timestamp = timestamp
        return timestamp

    # ---- running transactions ------------------------------------------------------------------

    def _running_path(self, tid: int) -> Path:
        return self._running_dir / f"{tid:020d}"

    def _read_running(self, path: Path) -> tuple[dict[str, Any], list[tuple[str, str]]] | None:
        try:
            lines = path.read_bytes().splitlines()
        except FileNotFoundError:
            return None
        if not lines:
            return None
        header = json.loads(lines[0])
        locks = []
        for line in lines[1:]:
            try:
                table_id, part_name = json.loads(line)
                locks.append((table_id, part_name))
            except ValueError:
                break  # torn last line of a dead owner
        return header, locks

    def _is_alive(self, tid: int) -> bool:
        """Whether a running file's owner lives; a dead owner's transaction is aborted here."""
        if tid in self._owned:
            return True
        path = self._running_path(tid)
        try:
            probe = os.open(path, os.O_RDWR)
        except FileNotFoundError:
            return False
        try:
            try:
                fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return True
            if tid not in self._committed and tid not in self._aborted:
                self._append({"op": "abort", "tid": tid, "time": time.time(), "reason": "owner died"},
                             durable=False)
            self._drop_staged_tables(tid)
            path.unlink(missing_ok=True)
            return False
        finally:
            os.close(probe)

    def _release(self, tid: int) -> None:
        self._drop_staged_tables(tid)
        descriptor = self._owned.pop(tid, None)
        self._owned_locks.pop(tid, None)
        if descriptor is not None:
            # Unlink while still holding the flock, so nobody mistakes it for a dead owner.
            self._running_path(tid).unlink(missing_ok=True)
            os.close(descriptor)

    def _conflicting_owner(self, tid: int, table_id: str, part_name: str) -> str | None:
        key = (table_id, part_name)
        remover = self._removed_by.get(key)
        if remover is not None and remover != tid:
            return f"transaction {remover} already removed it (committed at csn {self._committed[remover]})"
        for other, locks in self._owned_locks.items():
            if other != tid and key in locks:
                return f"transaction {other} holds its removal lock"
        for path in self._running_dir.iterdir():
            if not path.name.isdigit():
                continue
            other = int(path.name)
            if other == tid or other in self._owned:
                continue
            content = self._read_running(path)
            if content is not None and key in content[1] and self._is_alive(other):
                return f"transaction {other} holds its removal lock"
        return None

    def _staged_tables_dir(self, tid: int) -> Path:
        return self.directory / "staged" / f"{tid:020d}"

    def _drop_staged_tables(self, tid: int) -> None:
        shutil.rmtree(self._staged_tables_dir(tid), ignore_errors=True)

    # ---- the Coordinator interface -------------------------------------------------------------

    def begin(self) -> TxnInfo:
        with self._locked():
            tid = self._next_timestamp()
            # Durable before anything names this tid, so a crash can never hand it out again.
            with self._file("counter"):
                os.fsync(self._counter_fd)
            started = time.time()
            header = {"tid": tid, "snapshot": tid - 1, "started": started, "pid": os.getpid(),
                      "host": socket.gethostname()}
            temporary = self._running_dir / f"tmp_{tid}_{os.getpid()}"
            descriptor = os.open(temporary, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
            try:
                with self._file(f"running/{tid:020d}"):
                    fcntl.flock(descriptor, fcntl.LOCK_EX)
                    os.write(descriptor, json.dumps(header).encode() + b"\n")
                    os.rename(temporary, self._running_path(tid))
            except BaseException:
                os.close(descriptor)
                temporary.unlink(missing_ok=True)
                raise
            self._owned[tid] = descriptor
            self._owned_locks[tid] = set()
            return TxnInfo(tid=tid, snapshot=tid - 1, started=started)

    def _require_own_running(self, tid: int, action: str) -> None:
        if tid in self._owned:
            return
        state, csn = self.status(tid)
        if state is TxnState.RUNNING:
            raise TransactionError(f"cannot {action} transaction {tid}: another process owns it")
        raise TransactionError(f"cannot {action} transaction {tid}: it is already {state.value}"
                               + (f" at csn {csn}" if csn is not None else ""))

    def lock_removal(self, tid: int, table_id: str, part_name: str) -> None:
        with self._locked():
            self._require_own_running(tid, "lock a part for")
            conflict = self._conflicting_owner(tid, table_id, part_name)
            if conflict is not None:
                raise SerializationError(
                    f"transaction {tid} cannot remove part {part_name!r} of table {table_id!r}: {conflict}")
            key = (table_id, part_name)
            if key not in self._owned_locks[tid]:
                os.write(self._owned[tid], json.dumps([table_id, part_name]).encode() + b"\n")
                self._owned_locks[tid].add(key)

    def commit(self, tid: int, removals: Iterable[tuple[str, str]] = (),
               tables: Iterable[str] = ()) -> int:
        removal_list = sorted({(str(table), str(part)) for table, part in removals})
        with self._locked():
            if tid in self._committed:
                return self._committed[tid]
            self._require_own_running(tid, "commit")
            for table_id, part_name in removal_list:
                conflict = self._conflicting_owner(tid, table_id, part_name)
                if conflict is not None:
                    self._abort_locked(tid, f"conflict on {table_id}/{part_name}")
                    raise SerializationError(
                        f"transaction {tid} cannot commit: removing part {part_name!r} of table "
                        f"{table_id!r} conflicts: {conflict}")
            csn = self._next_timestamp()
            self._append({"op": "commit", "tid": tid, "csn": csn, "removals": removal_list,
                          "tables": sorted(set(tables)), "time": time.time()}, durable=True)
            self._release(tid)
            try:
                self._maybe_compact()
            except OSError:
                pass  # the commit is durable; compaction can wait for the next one
            return csn

    def _abort_locked(self, tid: int, reason: str) -> None:
        if tid in self._committed or tid in self._aborted:
            self._release(tid)
            return
        try:
            self._append({"op": "abort", "tid": tid, "time": time.time(), "reason": reason}, durable=False)
        finally:
            # Without its record the transaction is aborted all the same once its running file
            # is gone: the record is for introspection.
            self._release(tid)

    def abort(self, tid: int) -> None:
        with self._locked():
            if tid in self._committed:
                raise TransactionError(f"cannot abort transaction {tid}: it committed at csn {self._committed[tid]}")
            if tid not in self._owned and self._running_path(tid).exists() and self._is_alive(tid):
                raise TransactionError(f"cannot abort transaction {tid}: another process owns it")
            self._abort_locked(tid, "aborted")

    def add_staged_table(self, tid: int, table: str) -> None:
        with self._locked():
            state, csn = self.status(tid)
            if state is not TxnState.RUNNING:
                raise TransactionError(f"transaction {tid} is {state.value}"
                                       + (f" at csn {csn}" if csn is not None else "")
                                       + f": nothing can be staged for it any more (table {table})")
            directory = self._staged_tables_dir(tid)
            with self._file(f"staged/{tid:020d}"):
                directory.mkdir(parents=True, exist_ok=True)
                # Under the lock that decides the transaction: a record is never left behind by a
                # commit or abort that ran first.
                write_file_atomically(directory / hashlib.sha256(table.encode()).hexdigest()[:32], table.encode())

    def staged_tables(self, tid: int) -> list[str]:
        with self._locked():
            try:
                paths = sorted(self._staged_tables_dir(tid).iterdir())
            except FileNotFoundError:
                return []
            return [path.read_text() for path in paths if not path.name.startswith(".")]

    def status(self, tid: int) -> tuple[TxnState, int | None]:
        with self._locked():
            csn = self._committed.get(tid)
            if csn is not None:
                return TxnState.COMMITTED, csn
            if tid in self._aborted:
                return TxnState.ABORTED, None
            if self._is_alive(tid):
                return TxnState.RUNNING, None
            return TxnState.ABORTED, None

    def compact(self) -> int:
        """Rewrite log.jsonl keeping only what is still needed: every commit's tid → csn, the
        removal records not forgotten, one block counter per table and the recent decisions in
        full. Returns the new size in bytes."""
        with self._locked():
            recent_tids = {int(record["tid"]) for record in self._recent}
            removals_by_tid: dict[int, list[list[str]]] = collections.defaultdict(list)
            for (table_id, part_name), tid in sorted(self._removed_by.items()):
                removals_by_tid[tid].append([table_id, part_name])
            records: list[dict[str, Any]] = []
            for tid, csn in sorted(self._committed.items(), key=lambda item: item[1]):
                if tid not in recent_tids:
                    record: dict[str, Any] = {"op": "commit", "tid": tid, "csn": csn}
                    if tid in removals_by_tid:
                        record["removals"] = removals_by_tid[tid]
                    records.append(record)
            records.extend({"op": "blocks", "table": table_id, "next": next_block}
                           for table_id, next_block in sorted(self._next_block.items()))
            for record in self._recent:
                if record["op"] == "commit":
                    record = dict(record, removals=removals_by_tid.get(int(record["tid"]), []))
                records.append(record)
            data = b"".join(json.dumps(record, separators=(",", ":")).encode() + b"\n" for record in records)
            log_path = self.directory / "log.jsonl"
            write_file_atomically(log_path, data)
            os.close(self._log_fd)
            self._log_fd = os.open(log_path, os.O_RDWR | os.O_APPEND)
            self._log_offset = self._compacted_size = len(data)
            # Records of transactions whose end nobody observed (an owner died unnoticed).
            staged = self.directory / "staged"
            for directory in staged.iterdir() if staged.is_dir() else ():
                if directory.name.isdigit() and self.status(int(directory.name))[0] is not TxnState.RUNNING:
                    self._drop_staged_tables(int(directory.name))
            return len(data)

    def _maybe_compact(self) -> None:
        if self._log_offset > self.compact_threshold_bytes and self._log_offset > 2 * self._compacted_size:
            self.compact()

    def forget_removals(self, table_id: str, part_names: Iterable[str]) -> None:
        names = sorted(set(part_names))
        if not names:
            return
        with self._locked():
            # Not fsynced: forgetting again after a crash is harmless.
            self._append({"op": "forget", "table": table_id, "parts": names}, durable=False)

    def running(self) -> list[TxnInfo]:
        with self._locked():
            infos = []
            for path in sorted(self._running_dir.iterdir()):
                if not path.name.isdigit():
                    continue
                tid = int(path.name)
                content = self._read_running(path)
                if content is None or not self._is_alive(tid):
                    continue
                header = content[0]
                infos.append(TxnInfo(tid=tid, snapshot=int(header["snapshot"]),
                                     started=float(header.get("started", 0.0))))
            return infos

    def current_timestamp(self) -> int:
        with self._locked():
            return self._last_timestamp

    def allocate_blocks(self, table_id: str, count: int = 1) -> int:
        _check_count(count)
        with self._locked():
            first = self._next_block.get(table_id, 1)
            self._append({"op": "blocks", "table": table_id, "next": first + count}, durable=True)
            return first

    def list_transactions(self, limit: int = 100) -> list[TxnRecord]:
        with self._locked():
            records: list[TxnRecord] = []
            for path in sorted(self._running_dir.iterdir(), reverse=True):
                if not path.name.isdigit():
                    continue
                tid = int(path.name)
                content = self._read_running(path)
                if content is None or not self._is_alive(tid):
                    continue
                header, locks = content
                records.append(TxnRecord(
                    tid=tid, state=TxnState.RUNNING, snapshot=int(header["snapshot"]),
                    removals=tuple(locks), time=header.get("started"),
                    owner=f"{header.get('host', '')}:{header.get('pid', '')}"))
            for record in reversed(self._recent):
                if len(records) >= limit:
                    break
                committed = record["op"] == "commit"
                records.append(TxnRecord(
                    tid=int(record["tid"]),
                    state=TxnState.COMMITTED if committed else TxnState.ABORTED,
                    csn=record.get("csn"), snapshot=int(record["tid"]) - 1,
                    tables=tuple(record.get("tables", ())),
                    removals=tuple(tuple(pair) for pair in record.get("removals", ())),
                    time=record.get("time")))
            return records[:limit]

    def close(self) -> None:
        with self._mutex:
            if self._closed:
                return
            for tid in list(self._owned):
                # Leaving the file would look like a dead owner anyway; say it explicitly.
                try:
                    with self._locked():
                        self._abort_locked(tid, "coordinator closed")
                except (OSError, TransactionError):
                    pass
            self._closed = True
            for descriptor in (self._lock_fd, self._counter_fd, self._log_fd):
                os.close(descriptor)

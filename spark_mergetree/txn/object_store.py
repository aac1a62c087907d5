"""ObjectStoreCoordinator: a coordinator that lives in object storage (`s3://bucket/prefix`,
`gs://bucket/prefix`, `abfss://container@account.dfs.core.windows.net/prefix`), built only on
conditional writes (storage/object_store.py maps them to each cloud) — no locks, no renames, no listing for any decision.

Objects under the prefix (format_spec/transactions.md, "Object-store coordinator"):
  clock.json                {"ts": n, "decided": {tid: csn}}: the last timestamp handed out, and the
                            commits decided but perhaps not yet recorded. Changed only by
                            compare-and-swap (`If-Match: <etag>`): begin and commit each move `ts` on
                            by one, so every timestamp and every commit decision is serialised here.
  txn/<tid>.json            the fate of a transaction, written once (`If-None-Match: *`):
                            {"state": "committed", "csn", ...} or {"state": "aborted"}. The first one
                            written is the fate; a commit decided in clock.json is recorded by
                            whoever reads it first (the same bytes, so every writer agrees).
  running/<tid>-<ms>.json   the owner's lease (`ms`: when it began), rewritten every lease/3 s; its
                            age on the server's clock past the lease means the owner died
  removals/<table>/<part>   {"tid"}: the part's remover; put-if-absent, taken over by compare-and-swap
                            only from an aborted holder. Held by a committed tid it is permanent.
  blocks/<table>.json       {"next"}: the next free block number, moved on by compare-and-swap
  staged/<tid>/<hash>.json  tables other processes staged changes in for running `tid`

Snapshot reads: a commit takes its csn in the same compare-and-swap that records the decision, so
a reader whose snapshot S was read from clock.json either finds the transaction decided (in
txn/ or in clock.json's `decided`) or knows its csn, if it ever commits, will be larger than S.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import socket
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import parse_qs, quote, urlparse

from spark_mergetree.errors import InvalidOptionError, SerializationError, TransactionError
from spark_mergetree.storage.object_store import ObjectUrl, PreconditionFailed, bucket_for, parse_object_url
from spark_mergetree.txn.coordinator import Coordinator, TxnInfo, TxnRecord, TxnState, _check_count

DEFAULT_LEASE = 10.0  # seconds a running transaction's owner may go without renewing its lease


def _name(text: str) -> str:
    """A table id or part name as one key segment."""
    return quote(text, safe="")


class ObjectStoreCoordinator(Coordinator):
    """Coordinator in an object-store prefix. One instance per process (`coordinator_from_url` shares it)."""

    def __init__(self, url: str, *, lease: float | None = None) -> None:
        parsed = urlparse(url)
        query = parse_qs(parsed.query)
        if lease is None:
            try:
                lease = float(query.get("lease", [DEFAULT_LEASE])[0])
            except ValueError:
                raise InvalidOptionError(f"coordinator url {url!r}: lease must be a number of seconds") from None
        if lease <= 0:
            raise InvalidOptionError(f"coordinator url {url!r}: lease must be positive")
        self.location: ObjectUrl = parse_object_url(url.split("?", 1)[0])
        self.lease = float(lease)
        self._bucket = bucket_for(self.location)
        self._owned: dict[int, str] = {}  # tid -> its running key
        self._locks: dict[int, set[str]] = {}
        self._mutex = threading.Lock()
        self._stop = threading.Event()
        self._heartbeat: threading.Thread | None = None
        self._owner = f"{socket.gethostname()}:{os.getpid()}"
        self._closed = False

    @staticmethod
    def url_for(location: str, lease: float = DEFAULT_LEASE) -> str:
        base = parse_object_url(location).url
        return base if lease == DEFAULT_LEASE else f"{base}?lease={lease:g}"

    @property
    def url(self) -> str:
        return self.url_for(self.location.url, self.lease)

    # ------------------------------------------------------------------ objects

    def _key(self, *names: str) -> str:
        return self.location.child(*names).key

    def _get_json(self, key: str) -> Any:
        data = self._bucket.get(key)
        try:
            return json.loads(data)
        except ValueError as error:
            raise TransactionError(f"{self._bucket.url(key)}: corrupt coordinator object: {error}") from error

    def _put_json(self, key: str, value: Any, *, if_absent: bool = False, if_match: str | None = None) -> None:
        self._bucket.put(key, json.dumps(value, sort_keys=True).encode(), if_absent=if_absent, if_match=if_match)

    def _swap(self, key: str, change: Callable[[Any], Any], initial: Any) -> tuple[Any, Any]:
        """Compare-and-swap the JSON object `key` (created as `initial` when absent): (old, new)."""
        attempt = 0
        while True:
            if self._closed:
                raise TransactionError(f"coordinator {self.url} is closed")
            try:
                data, etag = self._bucket.get_versioned(key)
                old = json.loads(data)
            except FileNotFoundError:
                try:
                    self._put_json(key, initial, if_absent=True)
                except PreconditionFailed:
                    pass
                continue
            new = change(old)
            try:
                self._put_json(key, new, if_match=etag)
                return old, new
            except PreconditionFailed:
                attempt += 1
                time.sleep(random.uniform(0, min(0.2, 0.005 * 2 ** min(attempt, 6))))

    def _clock(self) -> dict[str, Any]:
        try:
            return dict(self._get_json(self._key("clock.json")))
        except FileNotFoundError:
            return {"ts": 0, "decided": {}}

    def _record_key(self, tid: int) -> str:
        return self._key("txn", f"{tid:020d}.json")

    def _record(self, tid: int) -> dict[str, Any] | None:
        try:
            return dict(self._get_json(self._record_key(tid)))
        except FileNotFoundError:
            return None

    def _write_record(self, tid: int, record: dict[str, Any]) -> dict[str, Any]:
        """Record a fate once; the fate that is recorded (ours, or the one written first)."""
        try:
            self._put_json(self._record_key(tid), record, if_absent=True)
            return record
        except PreconditionFailed:
            existing = self._record(tid)
            assert existing is not None
            return existing

    def _committed_record(self, tid: int, csn: int, removals: list[list[str]] = (),  # type: ignore[assignment]
                          tables: list[str] = (), time_: float | None = None) -> dict[str, Any]:  # type: ignore[assignment]
        return {"state": "committed", "tid": tid, "csn": csn, "removals": list(removals), "tables": list(tables),
                "time": time_}

    # ------------------------------------------------------------------ liveness

    def _running_prefix(self) -> str:
        return self._key("running") + "/"

    def _running_entries(self) -> tuple[dict[int, tuple[str, float]], float]:
        """{tid: (key, last renewal)} of the running keys, and the server's time now."""
        times, now = self._bucket.list_with_times(self._running_prefix())
        out = {}
        for key, modified in times.items():
            stem = key.rsplit("/", 1)[-1].split(".", 1)[0]
            tid_text, _, _ = stem.partition("-")
            if tid_text.isdigit():
                out[int(tid_text)] = (key, modified)
        return out, now

    def _renew(self) -> None:
        # One thread per coordinator while it owns transactions: it ends when the last one ends (under
        # the mutex, so begin() starts a new one), so a process that touched many tables' coordinators
        # keeps no idle thread for each.
        while not self._stop.wait(self.lease / 3):
            with self._mutex:
                owned = list(self._owned)
                if not owned:
                    self._heartbeat = None
                    return
            for tid in owned:
                # Under the mutex: a transaction that ends meanwhile has its lease object deleted
                # after it leaves _owned, so a renewal never writes one back for an ended transaction.
                with self._mutex:
                    key = self._owned.get(tid)
                    if key is None:
                        continue
                    try:
                        self._put_json(key, {"tid": tid, "owner": self._owner})
                    except OSError:
                        pass  # the next round tries again; a lease that lapses aborts the transaction

    def _owned_now(self) -> set[int]:
        with self._mutex:
            return set(self._owned)

    def _alive(self, tid: int) -> bool:
        with self._mutex:
            if tid in self._owned:
                return True
        entries, now = self._running_entries()
        found = entries.get(tid)
        return found is not None and now - found[1] <= self.lease

    def _release(self, tid: int, locks_too: bool) -> None:
        with self._mutex:
            key = self._owned.pop(tid, None)
            locks = self._locks.pop(tid, set())
        doomed = ([key] if key else []) + (sorted(locks) if locks_too else [])
        try:
            self._bucket.delete(doomed)
            self._bucket.delete_prefix(self._key("staged", f"{tid:020d}") + "/")
        except OSError:
            pass  # leftovers of a decided transaction are harmless

    # ------------------------------------------------------------------ the contract

    def begin(self) -> TxnInfo:
        _, clock = self._swap(self._key("clock.json"), lambda c: {**c, "ts": c["ts"] + 1}, {"ts": 0, "decided": {}})
        tid = int(clock["ts"])
        started = time.time()
        key = self._key("running", f"{tid:020d}-{int(started * 1000)}.json")
        self._put_json(key, {"tid": tid, "owner": self._owner})
        with self._mutex:
            self._owned[tid] = key
            self._locks[tid] = set()
            if self._heartbeat is None:
                self._heartbeat = threading.Thread(target=self._renew, name="coordinator-lease", daemon=True)
                self._heartbeat.start()
        return TxnInfo(tid=tid, snapshot=tid - 1, started=started)

    def status(self, tid: int) -> tuple[TxnState, int | None]:
        record = self._record(tid)
        if record is None:
            clock = self._clock()
            decided = clock.get("decided", {})
            if str(tid) in decided:
                # Decided is committed, for the owner too: its commit may have failed after the
                # decision (writing the record), and a reader may already have recorded it
                # committed, so the owner must not take it for running and roll it back.
                record = self._write_record(tid, self._committed_record(tid, int(decided[str(tid)])))
            elif tid in self._owned_now():
                return TxnState.RUNNING, None
            elif tid > int(clock["ts"]):
                return TxnState.ABORTED, None  # never begun
            elif self._alive(tid):
                return TxnState.RUNNING, None
            else:
                record = self._write_record(tid, {"state": "aborted", "tid": tid, "time": time.time(),
                                                  "reason": "owner died"})
        if record["state"] == "committed":
            return TxnState.COMMITTED, int(record["csn"])
        return TxnState.ABORTED, None

    def _require_own_running(self, tid: int, action: str) -> None:
        with self._mutex:
            if tid in self._owned:
                return
        state, csn = self.status(tid)
        if state is TxnState.RUNNING:
            raise TransactionError(f"cannot {action} transaction {tid}: another process owns it")
        raise TransactionError(f"cannot {action} transaction {tid}: it is already {state.value}"
                               + (f" at csn {csn}" if csn is not None else ""))

    def _removal_key(self, table_id: str, part_name: str) -> str:
        return self._key("removals", _name(table_id), _name(part_name) + ".json")

    def _take_removal(self, tid: int, table_id: str, part_name: str) -> None:
        key = self._removal_key(table_id, part_name)
        while True:
            try:
                self._put_json(key, {"tid": tid}, if_absent=True)
                break
            except PreconditionFailed:
                pass
            try:
                data, etag = self._bucket.get_versioned(key)
            except FileNotFoundError:
                continue  # forgotten meanwhile
            holder = int(json.loads(data)["tid"])
            if holder == tid:
                break
            state, csn = self.status(holder)
            if state is TxnState.COMMITTED:
                raise SerializationError(f"transaction {tid} cannot remove part {part_name!r} of table {table_id!r}: "
                                         f"already removed by transaction {holder} (csn {csn})")
            if state is TxnState.RUNNING:
                raise SerializationError(f"transaction {tid} cannot remove part {part_name!r} of table {table_id!r}: "
                                         f"transaction {holder} is removing it")
            try:
                self._put_json(key, {"tid": tid}, if_match=etag)  # the holder aborted: take it over
                break
            except PreconditionFailed:
                continue
        with self._mutex:
            self._locks.setdefault(tid, set()).add(key)

    def lock_removal(self, tid: int, table_id: str, part_name: str) -> None:
        self._require_own_running(tid, "lock a part for")
        self._take_removal(tid, table_id, part_name)

    def commit(self, tid: int, removals: Iterable[tuple[str, str]] = (), tables: Iterable[str] = ()) -> int:
        removal_list = sorted({(str(table), str(part)) for table, part in removals})
        with self._mutex:
            mine = tid in self._owned
        if not mine:
            record = self._record(tid)
            if record is not None and record["state"] == "committed":
                return int(record["csn"])  # repeating a successful commit answers the same csn
            self._require_own_running(tid, "commit")
        for table_id, part_name in removal_list:
            try:
                self._take_removal(tid, table_id, part_name)
            except SerializationError as error:
                self.abort(tid)
                raise SerializationError(f"transaction {tid} cannot commit: {error}") from None

        def decide(clock: dict[str, Any]) -> dict[str, Any]:
            return {"ts": clock["ts"] + 1, "decided": {**clock.get("decided", {}), str(tid): clock["ts"] + 1}}

        _, clock = self._swap(self._key("clock.json"), decide, {"ts": 0, "decided": {}})
        csn = int(clock["ts"])
        fate = self._write_record(tid, self._committed_record(tid, csn, [list(r) for r in removal_list],
                                                              sorted(set(tables)), time.time()))
        self._swap(self._key("clock.json"),
                   lambda c: {**c, "decided": {k: v for k, v in c.get("decided", {}).items() if k != str(tid)}},
                   {"ts": 0, "decided": {}})
        if fate["state"] != "committed":
            self._release(tid, locks_too=True)
            raise TransactionError(f"transaction {tid} was aborted (its lease lapsed) before it could commit")
        self._release(tid, locks_too=False)
        return int(fate["csn"])

    def abort(self, tid: int) -> None:
        state, csn = self.status(tid)
        if state is TxnState.COMMITTED:
            raise TransactionError(f"cannot abort transaction {tid}: it committed at csn {csn}")
        if state is TxnState.RUNNING:
            with self._mutex:
                mine = tid in self._owned
            if not mine:
                raise TransactionError(f"cannot abort transaction {tid}: another process owns it")
            fate = self._write_record(tid, {"state": "aborted", "tid": tid, "time": time.time(), "reason": "aborted"})
            if fate["state"] == "committed":
                raise TransactionError(f"cannot abort transaction {tid}: it committed at csn {fate['csn']}")
        self._release(tid, locks_too=True)

    def forget_removals(self, table_id: str, part_names: Iterable[str]) -> None:
        doomed = []
        for part in part_names:
            key = self._removal_key(table_id, part)
            try:
                holder = int(self._get_json(key)["tid"])
            except FileNotFoundError:
                continue
            # Only a committed removal is forgotten: it is never taken over, so nothing can have
            # replaced it between this check and the delete (a live or aborted holder's can be).
            if self.status(holder)[0] is TxnState.COMMITTED:
                doomed.append(key)
        self._bucket.delete(doomed)

    def running(self) -> list[TxnInfo]:
        entries, now = self._running_entries()
        out = []
        for tid, (key, modified) in sorted(entries.items()):
            with self._mutex:
                mine = tid in self._owned
            if mine or now - modified <= self.lease:
                started = int(key.rsplit("-", 1)[-1].split(".", 1)[0]) / 1000
                out.append(TxnInfo(tid=tid, snapshot=tid - 1, started=started))
        return out

    def current_timestamp(self) -> int:
        return int(self._clock()["ts"])

    def allocate_blocks(self, table_id: str, count: int = 1) -> int:
        _check_count(count)
        old, _ = self._swap(self._key("blocks", _name(table_id) + ".json"),
                            lambda b: {"next": b["next"] + count}, {"next": 1})
        return int(old["next"])

    def add_staged_table(self, tid: int, table: str) -> None:
        state, csn = self.status(tid)
        if state is not TxnState.RUNNING:
            raise TransactionError(f"transaction {tid} is {state.value}" + (f" at csn {csn}" if csn is not None else "")
                                   + f": nothing can be staged for it any more (table {table})")
        digest = hashlib.sha256(table.encode()).hexdigest()[:32]
        self._bucket.put(self._key("staged", f"{tid:020d}", digest + ".json"), table.encode())

    def staged_tables(self, tid: int) -> list[str]:
        if self.status(tid)[0] is not TxnState.RUNNING:
            return []
        objects, _ = self._bucket.list_objects(self._key("staged", f"{tid:020d}") + "/")
        return sorted({self._bucket.get(key).decode() for key in objects})

    def list_transactions(self, limit: int = 100) -> list[TxnRecord]:
        records: dict[int, TxnRecord] = {}
        for info in self.running():
            records[info.tid] = TxnRecord(info.tid, TxnState.RUNNING, snapshot=info.snapshot, time=info.started)
        objects, _ = self._bucket.list_objects(self._key("txn") + "/")
        decided = sorted((int(key.rsplit("/", 1)[-1].split(".", 1)[0]) for key in objects), reverse=True)
        for tid in decided[:limit]:
            record = self._record(tid)
            if record is None:
                continue
            state = TxnState.COMMITTED if record["state"] == "committed" else TxnState.ABORTED
            records[tid] = TxnRecord(
                tid, state, csn=record.get("csn"), snapshot=tid - 1, tables=tuple(record.get("tables", ())),
                removals=tuple((str(t), str(p)) for t, p in record.get("removals", ())), time=record.get("time"))
        return [records[tid] for tid in sorted(records, reverse=True)[:limit]]

    def close(self) -> None:
        self._stop.set()
        with self._mutex:
            owned = list(self._owned)
        for tid in owned:
            try:
                self.abort(tid)
            except (OSError, TransactionError):
                pass
        self._closed = True

"""ObjectTableLog: the commit log of a table in object storage, written once and never renamed.

Objects under `<table>/_mergetree/log/` (format_spec/transactions.md, "Tables in object storage"):
  table.json           {"table_id", "coordinator", "location"}: written once (put-if-absent) by the
                       first writer; a table whose table.json names another URL is a copy (`bind`)
  <seq>.json           entries numbered 0, 1, 2, ... with no gaps, each taken by put-if-absent:
                       {tid, coordinator, added, removed}. A transaction that changes its mind
                       writes another entry; its last one (highest seq) counts.
  checkpoint-<seq>.json, _checkpoint.json: entries before seq folded, and a hint naming the newest;
                       cleanup deletes entries an hour-old checkpoint folded (`_delete_folded_entries`).

Objects under `<table>/_mergetree/jobs/` (a write job that uploads parts before a commit names
them: a Spark job's tasks): `<tag>.lease` (its driver's lease: transactions it holds open, renewed
by txn/job_lease.py), `<tag>.json` (a task's registration; its age is the job's last activity),
`<tag>/<part>` (one empty object per part a task of it uploads, written before the upload) and
`<tag>.ended` (the job committed or gave up). While the job is alive (a lease runs, or without
one it was active within the staged lifetime), cleanup keeps the parts it recorded however old;
once it is dead or ended, they go at once unless an entry names them.

No entry carries a csn: a transaction's fate lives at its coordinator only (the coordinator's
record is the commit point), so entries never change after they are written. Readers find entries
by reading `<seq>.json` for seq = 0, 1, ... until one is absent (no listing); entries, and the
fates of decided transactions, are cached per process, so a warm snapshot costs one GET of the
next, absent entry plus one per transaction still undecided.

It is a `TableLog` for `Transaction` (which reads and writes logs through that interface), so
transactions span object-store tables exactly as they span local ones.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
import uuid
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from spark_mergetree.errors import InvalidOptionError, TransactionError, UnsupportedError
from spark_mergetree.storage.object_store import Bucket, ObjectParts, ObjectUrl, PreconditionFailed
from spark_mergetree.txn.connect import COORDINATOR_ENV, coordinator_from_url, reachable_everywhere
from spark_mergetree.txn.coordinator import Coordinator, TxnState
from spark_mergetree.txn.table_log import (
    _JOB_TAG,
    CHECKPOINT_EVERY,
    FORMAT_VERSION,
    STAGED_LIFETIME,
    LeaseStates,
    LogEntry,
    PartVersion,
    TableLog,
)

# What this process knows of each log (by log URL; entries never change) and fates of decided transactions
# by (coordinator URL, tid).
_STATES: dict[str, _LogState] = {}
_FATES: dict[tuple[str, int], tuple[TxnState, int | None]] = {}
_CACHE_LOCK = threading.Lock()
# When this process last read each log's checkpoint hint (monotonic seconds, by log URL). Entries a
# checkpoint folded are deleted LOG_GRACE_SECONDS after it was written (`cleanup`); a process whose
# knowledge of a log is older than HINT_RECHECK_SECONDS reads the hint again before trusting that an
# absent entry ends the log (it may have been deleted), and every commit reads it first.
_HINT_READ: dict[str, float] = {}
HINT_RECHECK_SECONDS = 60.0
LOG_GRACE_SECONDS = 3600.0
_POOLS: dict[int, ThreadPoolExecutor] = {}  # by pid: threads do not survive fork()


def _log_pool() -> ThreadPoolExecutor:
    with _CACHE_LOCK:
        pool = _POOLS.get(os.getpid())
        if pool is None:
            pool = _POOLS[os.getpid()] = ThreadPoolExecutor(16, thread_name_prefix="mergetree-log")
        return pool


@dataclass(frozen=True)
class _LogState:
    """What a process knows of a log: entries before `base` folded into `folded` (a checkpoint),
    then `entries` (seq base, base + 1, ...). Replaced, never changed."""

    base: int
    folded: dict[str, PartVersion]
    entries: tuple[LogEntry, ...]


def _copy(versions: dict[str, PartVersion]) -> dict[str, PartVersion]:
    return {name: PartVersion(v.created, v.removed, v.removed_time) for name, v in versions.items()}


class _PartObjects:
    """The `PartDirectories` of an object-store table: its parts' key prefixes."""

    def __init__(self, parts: ObjectParts) -> None:
        self.parts = parts

    def names(self) -> set[str]:
        return {name for name in self.parts.part_names() if name}

    def exists(self, name: str) -> bool:
        return self.parts.exists(name)

    def remove(self, name: str) -> None:
        self.parts.remove(name)


def default_coordinator_url(location: ObjectUrl) -> str:
    """The coordinator of an object-store table that names none: $SPARK_MERGETREE_COORDINATOR if it
    is one every machine reaching the bucket can share, else one under the table's own prefix."""
    url = os.environ.get(COORDINATOR_ENV, "")
    return url if reachable_everywhere(url) else location.child("_mergetree", "coordinator").url


class ObjectTableLog(TableLog):
    """The write-once commit log of one object-store table."""

    def __init__(self, location: ObjectUrl, parts: ObjectParts, table_id: str) -> None:
        # Not TableLog.__init__: nothing here is a local path.
        self.location = location
        self.table_dir = location.url  # type: ignore[assignment]
        self.log_location = location.child("_mergetree", "log")
        self.directory = self.log_location.url  # type: ignore[assignment]
        self._log_url = self.log_location.url
        self.parts = parts
        self.directories = _PartObjects(parts)
        self._bucket: Bucket = parts.bucket
        self._table_id = table_id
        self._identity: dict[str, str] | None = None

    def table_key(self) -> str:
        return self.location.url

    def _key(self, name: str) -> str:
        return self.log_location.child(name).key

    def commit_lock(self) -> contextlib.AbstractContextManager[None]:
        """Nothing to lock: entries are put-if-absent and part names come from the coordinator."""
        return contextlib.nullcontext()

    @contextlib.contextmanager
    def _lock(self, exclusive: bool) -> Iterator[None]:
        yield

    # ---- identity

    def default_coordinator(self) -> Coordinator:
        """The coordinator of a table that names none (`default_coordinator_url`)."""
        return coordinator_from_url(default_coordinator_url(self.location))

    def check_coordinator(self, coordinator: Coordinator) -> None:
        """Refuse a local-directory coordinator: the other machines reaching the bucket cannot share it."""
        if not reachable_everywhere(coordinator.url):
            raise UnsupportedError(
                f"table {self.location.url} is in object storage, but coordinator {coordinator.url} is a local "
                "directory that the other machines reaching the bucket cannot share: use an object-store "
                "coordinator (coordinator='s3://bucket/prefix', 'gs://...' or 'abfss://...') or ZooKeeper "
                "(coordinator='zk://host:port/path')")

    def identity(self) -> dict[str, str] | None:
        if self._identity is None:
            try:
                self._identity = json.loads(self._bucket.get(self._key("table.json")))
            except FileNotFoundError:
                return None
        return self._identity

    def bind(self, coordinator_url: str) -> str:
        """Bind the table to a coordinator (the first writer's `table.json` wins); return its id.

        `table.json` records the table's URL. Object storage has no rename, so a table whose
        `table.json` names another URL was copied there (or copied and deleted, which is a move):
        it still carries the original's id, and its writes would change the original's state at the
        coordinator, so it is refused before anything is written; `MergeTreeTable.clone` (`mergetree
        clone`) makes a copy with an id of its own."""
        identity = self.identity()
        if identity is None:
            proposal = {"format": FORMAT_VERSION, "table_id": self._table_id, "coordinator": coordinator_url,
                        "location": self.location.url}
            try:
                self._bucket.put(self._key("table.json"), json.dumps(proposal).encode(), if_absent=True)
            except PreconditionFailed:
                pass
            identity = self.identity()
            assert identity is not None
        recorded = identity.get("location")
        if recorded is not None and recorded != self.location.url:
            raise TransactionError(
                f"table {self.location.url} was copied from {recorded} ({self.log_location.child('table.json').url} "
                "names that location), so it shares that table's id at the coordinator and cannot be written: "
                f"delete it and make the copy with `mergetree clone {recorded} {self.location.url}` "
                "(MergeTreeTable.clone), which gives the copy an id of its own")
        if identity["coordinator"] != coordinator_url:
            raise TransactionError(
                f"table {self.table_dir} is coordinated by {identity['coordinator']}, not by "
                f"{coordinator_url}: one transaction cannot span tables of different coordinators")
        return identity["table_id"]

    # ---- entries

    def _entry_key(self, seq: int) -> str:
        return self._key(f"{seq:020d}.json")

    def _read_entry(self, seq: int) -> LogEntry | None:
        return self._read_change(self._entry_key(seq))

    def _read_change(self, key: str) -> LogEntry | None:
        """An entry or a staged proposal (the same body); None if absent."""
        try:
            raw = json.loads(self._bucket.get(key))
        except FileNotFoundError:
            return None
        except ValueError as error:
            raise TransactionError(f"{self._bucket.url(key)}: corrupt log entry: {error}") from None
        return LogEntry(tid=int(raw["tid"]), coordinator=str(raw["coordinator"]), added=tuple(raw["added"]),
                        removed=tuple(raw["removed"]), csn=None, commit_time=raw.get("time"))

    @staticmethod
    def _change_body(tid: int, coordinator_url: str, added: Iterable[str], removed: Iterable[str]) -> bytes:
        return json.dumps({"format": FORMAT_VERSION, "tid": tid, "coordinator": coordinator_url,
                           "added": list(added), "removed": list(removed), "time": time.time()}).encode()

    def _hint(self) -> int:
        """The seq of the checkpoint `_checkpoint.json` names (0: none yet)."""
        try:
            seq = int(json.loads(self._bucket.get(self._key("_checkpoint.json")))["seq"])
        except FileNotFoundError:
            seq = 0
        except (ValueError, KeyError, TypeError) as error:
            raise TransactionError(f"{self.directory}: corrupt checkpoint hint: {error!r}") from None
        with _CACHE_LOCK:
            _HINT_READ[self._log_url] = time.monotonic()
        return seq

    def _checkpoint_seqs(self) -> dict[int, str]:
        """seq → key of every checkpoint object of the log (one LIST)."""
        found, _ = self._bucket.list_objects(self._key("checkpoint-"), delimiter=None)
        seqs = {}
        for key in found:
            digits = key.rsplit("checkpoint-", 1)[-1].removesuffix(".json")
            if digits.isdigit():
                seqs[int(digits)] = key
        return seqs

    def _cold_state(self) -> _LogState:
        """The checkpoint the hint names (none: from entry 0). Should the hint name one that cleanup
        has replaced (a slower process wrote the hint last), the newest checkpoint listed."""
        seq = self._hint()
        if not seq:
            return _LogState(0, {}, ())
        try:
            raw = json.loads(self._bucket.get(self._key(f"checkpoint-{seq:020d}.json")))
        except FileNotFoundError:
            newest = max(self._checkpoint_seqs().items(), default=None)
            if newest is None:
                raise TransactionError(f"{self.directory}: the checkpoint the log's hint names ({seq}) is missing "
                                       "and no other exists") from None
            raw = json.loads(self._bucket.get(newest[1]))
        except ValueError as error:
            raise TransactionError(f"{self.directory}: corrupt checkpoint: {error!r}") from None
        try:
            folded = {name: PartVersion(created, removed, removed_time)
                      for name, (created, removed, removed_time) in raw["parts"].items()}
            return _LogState(int(raw["seq"]), folded, ())
        except (ValueError, KeyError, TypeError) as error:
            raise TransactionError(f"{self.directory}: corrupt checkpoint: {error!r}") from None

    def _state(self, recheck: bool = False) -> _LogState:
        """The cached state, caught up: new entries read until one is absent. The first new one is
        read alone (a warm reader usually finds none); then 2, 4, ... up to 16 at once, so a process
        new to a long log reads it in few round trips. Knowledge older than HINT_RECHECK_SECONDS (or
        any, with `recheck`) is checked against the checkpoint hint first: entries behind a newer
        checkpoint may be deleted, so the state restarts from it."""
        with _CACHE_LOCK:
            state = _STATES.get(self._log_url)
            read_at = _HINT_READ.get(self._log_url)
        if state is not None and (recheck or read_at is None or time.monotonic() - read_at > HINT_RECHECK_SECONDS):
            if self._hint() > state.base + len(state.entries):
                with _CACHE_LOCK:
                    if _STATES.get(self._log_url) is state:
                        del _STATES[self._log_url]
                state = None
        if state is None:
            state = self._cold_state()
        known = list(state.entries)
        batch = 1
        while True:
            first = state.base + len(known)
            found = ([self._read_entry(first)] if batch == 1
                     else list(_log_pool().map(self._read_entry, range(first, first + batch))))
            for entry in found:
                if entry is None:
                    break
                known.append(entry)
            if None in found:
                break
            batch = min(batch * 2, 16)
        state = _LogState(state.base, state.folded, tuple(known))
        with _CACHE_LOCK:
            cached = _STATES.get(self._log_url)
            if cached is None or (cached.base + len(cached.entries), cached.base) < (state.base + len(known), state.base):
                _STATES[self._log_url] = state
        return state

    def entries(self) -> list[LogEntry]:
        """The entries past the last checkpoint this process knows, in seq order."""
        return list(self._state().entries)

    @staticmethod
    def _latest(state: _LogState) -> list[LogEntry]:
        """The last entry of every transaction, in the order of their first entries."""
        latest: dict[int, LogEntry] = {}
        for entry in state.entries:
            latest[entry.tid] = entry
        return list(latest.values())

    def allocation_fence(self, coordinator: Coordinator) -> tuple[int, bool] | None:
        """(watermark, busy) for a merge, taken before its snapshot: nothing orders block allocation
        against this log (an insert's entry is written after its upload), so a block a running
        insert holds may be in no entry yet. Blocks from `watermark` on were allocated after this
        call; a block below it is committed, lost, or held by a transaction running now (`busy`)."""
        watermark = coordinator.allocate_blocks(self.bind(coordinator.url), 1)
        return watermark, bool(coordinator.running())

    def _refuse_apps(self) -> UnsupportedError:
        return UnsupportedError(f"table {self.table_key()}: an object-store table's log does not record "
                                "application versions yet (exactly-once streaming writes need them); "
                                "stream into a table on a file system")

    def app_version(self, app_id: str, coordinator: Coordinator | None) -> int | None:
        """Refused: this log records no application versions yet (asked before a commit records one)."""
        raise self._refuse_apps()

    def write_pending(self, tid: int, coordinator_url: str, added: Iterable[str], removed: Iterable[str],
                      apps: Iterable[tuple[str, int]] = ()) -> None:
        """Append an entry naming what `tid` adds and removes (before the coordinator commits it)."""
        if tuple(apps):
            raise self._refuse_apps()
        self.bind(coordinator_url)
        body = self._change_body(tid, coordinator_url, added, removed)
        state = self._state(recheck=True)  # never a seq behind a checkpoint: its entry may be deleted
        seq = state.base + len(state.entries)
        while True:
            try:
                self._bucket.put(self._entry_key(seq), body, if_absent=True)
                return
            except PreconditionFailed:
                seq += 1  # another writer took this number; the next one is ours to try

    def finalize(self, tid: int, csn: int, commit_time: float | None = None) -> None:
        """Nothing: the csn is the coordinator's; entries are never rewritten."""

    def maybe_checkpoint(self, every: int = CHECKPOINT_EVERY) -> bool:
        """Once `every` entries follow the last checkpoint: fold the longest run of them whose
        transactions are all decided and write no later entry into `checkpoint-<seq>.json`
        (put-if-absent), then point `_checkpoint.json` at it. Entries stay (they are write-once);
        a process new to the log starts from the checkpoint. True if one was written."""
        state = self._state()
        identity = self.identity()
        if len(state.entries) < every or identity is None:
            return False
        coordinator = coordinator_from_url(identity["coordinator"])
        last = {entry.tid: index for index, entry in enumerate(state.entries)}
        cut, reach = 0, -1
        for index, entry in enumerate(state.entries):
            if self.status(coordinator, entry.tid)[0] is TxnState.RUNNING:
                break
            reach = max(reach, last[entry.tid])
            if reach == index:
                cut = index + 1
        if cut == 0:
            return False
        folded = _copy(state.folded)
        latest: dict[int, LogEntry] = {}
        for entry in state.entries[:cut]:
            latest[entry.tid] = entry
        for entry, csn in self._resolve(list(latest.values()), coordinator, None):
            if csn is not None:
                self._fold(folded, entry, csn)
        seq = state.base + cut
        body = json.dumps({"format": FORMAT_VERSION, "seq": seq, "coordinator": coordinator.url,
                           "parts": {name: [v.created, v.removed, v.removed_time] for name, v in sorted(folded.items())}})
        try:
            self._bucket.put(self._key(f"checkpoint-{seq:020d}.json"), body.encode(), if_absent=True)
        except PreconditionFailed:
            pass  # another process folded the same entries: the same content
        if self._hint() < seq:  # (a slower process may still move it back: readers cope, see _cold_state)
            self._bucket.put(self._key("_checkpoint.json"), json.dumps({"seq": seq}).encode())
        with _CACHE_LOCK:
            _STATES[self._log_url] = _LogState(seq, folded, state.entries[cut:])
        return True

    # ---- proposals: changes another process (a Spark job's commit) stages for a transaction

    def _staged_prefix(self, tid: int | None) -> str:
        return self._key("staged") + "/" + (f"{tid:020d}-" if tid is not None else "")

    def stage(self, tid: int, coordinator_url: str, added: Iterable[str], removed: Iterable[str] = ()) -> Any:
        """Propose changes for transaction `tid` from another process: a write-once object
        `staged/<tid>-<random>.json` (put-if-absent) with an entry's body. Readers other than the
        transaction ignore it; its owner adopts it (`Transaction.adopt_staged`) before committing.
        Returns its key."""
        self.bind(coordinator_url)
        key = self._staged_prefix(tid) + f"{uuid.uuid4().hex[:12]}.json"
        self._bucket.put(key, self._change_body(tid, coordinator_url, added, removed), if_absent=True)
        return key

    def staged(self, tid: int | None = None) -> list[tuple[Any, LogEntry]]:
        """(key, proposal) of the proposals staged for `tid` (or all), found by listing the
        transaction's prefix (S3, GCS and Azure list a completed PUT at once)."""
        objects, _ = self._bucket.list_objects(self._staged_prefix(tid), delimiter=None)
        found = []
        for key in sorted(objects):
            proposal = self._read_change(key)
            if proposal is not None:
                found.append((key, proposal))
        return found

    def drop_staged(self, key: Any) -> None:
        self._bucket.delete([key])

    def _named_parts(self) -> set[str]:
        state = self._state()
        return set(state.folded) | {name for entry in state.entries for name in entry.added}

    def _sync_log(self) -> None:
        """Nothing: a completed PUT or DELETE is durable."""

    def discard(self, tid: int, delete_added_parts: bool = True, also: Iterable[str] = ()) -> None:
        """After `tid` aborted: delete the parts it added that no other transaction names."""
        if not delete_added_parts:
            return
        entries = self.entries()
        mine = {name for entry in entries if entry.tid == tid for name in entry.added} | set(also)
        others = {name for entry in entries if entry.tid != tid for name in entry.added}
        for name in sorted(mine - others):
            self.parts.remove(name)

    # ---- reading

    def status(self, coordinator: Coordinator, tid: int) -> tuple[TxnState, int | None]:
        """A transaction's fate, cached once decided (fates never change)."""
        key = (coordinator.url, tid)
        with _CACHE_LOCK:
            fate = _FATES.get(key)
        if fate is None:
            fate = coordinator.status(tid)
            if fate[0] is not TxnState.RUNNING:
                with _CACHE_LOCK:
                    _FATES[key] = fate
        return fate

    def _resolve(self, entries: list[LogEntry], coordinator: Coordinator | None,
                 own_tid: int | None) -> list[tuple[LogEntry, int | None]]:
        if coordinator is None:
            return [(entry, None) for entry in entries]
        for entry in entries:
            if entry.coordinator != coordinator.url:
                raise TransactionError(f"{self.directory}: transaction {entry.tid} belongs to coordinator "
                                       f"{entry.coordinator}, not {coordinator.url}")
        with _CACHE_LOCK:
            unknown = sorted({e.tid for e in entries if e.tid != own_tid and (coordinator.url, e.tid) not in _FATES})
        # Each fate once per call; a process new to the log asks for them all at once.
        fates = dict(zip(unknown, _log_pool().map(lambda tid: self.status(coordinator, tid), unknown)
                         if len(unknown) > 1 else (self.status(coordinator, tid) for tid in unknown)))
        resolved = []
        for entry in entries:
            csn = None
            if entry.tid != own_tid:
                state, committed = fates.get(entry.tid) or self.status(coordinator, entry.tid)
                csn = committed if state is TxnState.COMMITTED else None
            resolved.append((entry, csn))
        return resolved

    def versions(self, coordinator: Coordinator | None) -> tuple[int, dict[str, PartVersion]]:
        state = self._state()
        versions = _copy(state.folded)
        for entry, csn in self._resolve(self._latest(state), coordinator, None):
            if csn is not None:
                self._fold(versions, entry, csn)
        return -1, versions

    def snapshot(self, snapshot_csn: int, coordinator: Coordinator, own_tid: int | None = None) -> set[str]:
        """The parts visible at `snapshot_csn`, plus the changes of running transaction `own_tid`:
        its last entry and the proposals staged for it (one LIST)."""
        state = self._state()
        versions = _copy(state.folded)
        own: list[LogEntry] = []
        for entry, csn in self._resolve(self._latest(state), coordinator, own_tid):
            if entry.tid == own_tid:
                own.append(entry)
            elif csn is not None:
                self._fold(versions, entry, csn)
        if own_tid is not None:
            own += [proposal for _, proposal in self.staged(own_tid)]
        visible = {name for name, version in versions.items() if version.visible_at(snapshot_csn)}
        # Part names are never reused: every addition before every removal is right in any order.
        for change in own:
            visible.update(change.added)
        for change in own:
            visible.difference_update(change.removed)
        return visible

    # ---- write jobs: parts uploaded before a commit names them (see the module docstring)

    def _job_key(self, name: str) -> str:
        return self.location.child("_mergetree", "jobs", name).key

    def register_job(self, tag: str, leases: Sequence[tuple[str, int]] = ()) -> None:
        """Record that job `tag` uploads parts: its driver with `leases` (coordinator URL, tid of a
        transaction it holds open while the job runs), a task without (its activity). Refused
        (TransactionError) once the job ended."""
        if not _JOB_TAG.fullmatch(tag):
            raise InvalidOptionError(f"job tag {tag!r} must be 1 to 64 letters and digits, and not t<number>")
        if self.job_ended(tag):
            raise TransactionError(f"write job {tag!r} of {self.table_dir} has ended (it committed, gave up, or "
                                   "its driver is gone): a late task of it uploads nothing that lasts")
        record: dict[str, Any] = {"tag": tag}
        if leases:
            record["leases"] = [{"coordinator": url, "tid": int(tid)} for url, tid in leases]
        self._bucket.put(self._job_key(f"{tag}.lease" if leases else f"{tag}.json"), json.dumps(record).encode())

    def record_staged(self, tag: str, part: str) -> None:
        """Record, before its upload, that job `tag` uploads part `part` (cleanup keeps it while the
        job lives, and deletes it once the job is dead)."""
        self._bucket.put(self._job_key(f"{tag}/{part}"), b"")

    def end_job(self, tag: str) -> None:
        """The job committed or gave up: mark it ended (a late task of it cannot register again) and
        drop its registrations."""
        self._bucket.put(self._job_key(f"{tag}.ended"), b"")
        self._bucket.delete([self._job_key(f"{tag}.json"), self._job_key(f"{tag}.lease")])

    def discard_job(self, tag: str, keep: Iterable[str] = ()) -> list[str]:
        """End the write job `tag`: delete the parts it recorded except `keep` and those an entry
        names, and its records. A task of it still uploading removes what it uploads (it sees the
        job ended)."""
        self.end_job(tag)  # first: a task finishing after the listing below sees it
        recorded = self.job_parts(tag)
        named = {name for entry in self.entries() for name in entry.added} | set(self.versions(None)[1])
        removed = sorted(recorded - set(keep) - named)
        for name in removed:
            self.parts.remove(name)
        self.forget_job_parts(tag, recorded)
        return removed

    def job_ended(self, tag: str) -> bool:
        return self._exists(self._job_key(f"{tag}.ended"))

    def job_leased(self, tag: str) -> bool:
        """Whether job `tag` is registered with a lease and has not ended (what its holder watches)."""
        return not self.job_ended(tag) and self._exists(self._job_key(f"{tag}.lease"))

    def job_parts(self, tag: str) -> set[str]:
        """The parts job `tag` recorded."""
        prefix = self._job_key(f"{tag}/")
        return {key[len(prefix):] for key in self._bucket.list_objects(prefix, delimiter=None)[0]}

    def forget_job_parts(self, tag: str, parts: Iterable[str]) -> None:
        self._bucket.delete([self._job_key(f"{tag}/{part}") for part in parts])

    def job_alive(self, tag: str, lifetime: float = STAGED_LIFETIME, leases: LeaseStates | None = None) -> bool:
        """Whether job `tag` may still publish what it uploaded: not ended, and one of its leases
        runs at its coordinator, or (no lease) a task registered within `lifetime` seconds."""
        jobs, now = self._jobs()
        job = jobs.get(tag)
        if job is None:
            return False
        if leases is None:
            with LeaseStates(None) as own:
                return self._alive(job, now, lifetime, own)
        return self._alive(job, now, lifetime, leases)

    def _exists(self, key: str) -> bool:
        try:
            self._bucket.age(key)
        except FileNotFoundError:
            return False
        return True

    def _jobs(self) -> tuple[dict[str, dict[str, Any]], float]:
        """Every job with objects: tag -> {"lease", "task", "ended": key -> last-modified, "parts":
        set}; and the server's time now (one LIST)."""
        prefix = self._job_key("")
        prefix = prefix if prefix.endswith("/") else prefix + "/"
        times, now = self._bucket.list_with_times(prefix)
        jobs: dict[str, dict[str, Any]] = {}
        for key, modified in times.items():
            rest = key[len(prefix):]
            tag, slash, part = rest.partition("/")
            if slash:
                jobs.setdefault(tag, {"parts": set()})["parts"].add(part)
                continue
            tag, _, kind = rest.rpartition(".")
            slot = {"lease": "lease", "json": "task", "ended": "ended"}.get(kind)
            if slot is not None:
                jobs.setdefault(tag, {"parts": set()})[slot] = (key, modified)
        return jobs, now

    def _alive(self, job: dict[str, Any], now: float, lifetime: float, leases: LeaseStates) -> bool:
        if "ended" in job:
            return False
        if "lease" in job:
            try:
                record = json.loads(self._bucket.get(job["lease"][0]))
            except FileNotFoundError:
                record = None
            except ValueError:
                return True  # unreadable: kept, as one another version writes would be
            if record is not None and record.get("leases"):
                return leases.any_running(record["leases"])
        if "task" in job:
            return now - job["task"][1] < lifetime
        # Part records only: a task records its parts after it registers, and a registration goes
        # only with the job's end (or its death, judged here before): nothing is alive there.
        return False

    def _judge_jobs(self, coordinator: Coordinator, lifetime: float) -> tuple[set[str], set[str], list[str]]:
        """(parts live jobs recorded, parts dead or ended jobs recorded, the job objects to delete
        once those parts are gone: a dead job's registrations and records, an ended mark once it is
        `lifetime` old). A dead job not yet ended is marked ended (a late task of it then removes
        what it uploads)."""
        jobs, now = self._jobs()
        kept: set[str] = set()
        abandoned: set[str] = set()
        doomed_keys: list[str] = []
        with LeaseStates(coordinator) as leases:
            for tag, job in sorted(jobs.items()):
                if self._alive(job, now, lifetime, leases):
                    kept.update(job["parts"])
                    continue
                abandoned.update(job["parts"])
                doomed_keys += [self._job_key(f"{tag}/{part}") for part in job["parts"]]
                doomed_keys += [job[slot][0] for slot in ("lease", "task") if slot in job]
                if "ended" not in job:
                    self._bucket.put(self._job_key(f"{tag}.ended"), b"")  # a late task stages nothing that lasts
                elif now - job["ended"][1] >= lifetime:
                    doomed_keys.append(job["ended"][0])
        return kept, abandoned, doomed_keys

    # ---- maintenance

    def cleanup(self, coordinator: Coordinator, retention_seconds: float = 0.0,
                job_lifetime: float = STAGED_LIFETIME, *, orphan_seconds: float = 3600.0) -> list[str]:
        """Delete what no snapshot can read any more; return the part names deleted:
        * parts removed by a committed transaction before every running snapshot, `retention_seconds` ago;
        * parts of aborted transactions;
        * objects no entry names, last written `orphan_seconds` ago (uploads a crash interrupted:
          parts are uploaded before their entry is written, so a younger one may still be named),
          except those a live write job recorded (kept however old), and at once those a dead or
          ended job recorded; `orphan_seconds` is also the lifetime of a job without a lease
          (`job_lifetime`, the files' log's, does not apply);
        * proposals of transactions that ended (the parts they alone named go as such objects)."""
        if self.identity() is not None:
            self.bind(coordinator.url)  # a copy's cleanup is refused before it deletes anything
        state = self._state()
        entries = self._latest(state)
        floor = coordinator.min_running_snapshot()
        versions = _copy(state.folded)
        named: set[str] = set(versions)
        doomed: set[str] = set()
        removals: list[str] = []
        now = time.time()
        for entry, csn in self._resolve(entries, coordinator, None):
            named.update(entry.added)
            if self.status(coordinator, entry.tid)[0] is TxnState.ABORTED:
                doomed.update(name for name in entry.added)
            elif csn is not None:
                self._fold(versions, entry, csn)
        for key, proposal in self.staged():
            if self.status(coordinator, proposal.tid)[0] is TxnState.RUNNING:
                named.update(proposal.added)  # its owner may still adopt it
            else:
                self.drop_staged(key)  # its owner ended: adopted into an entry, or never
        for name, version in versions.items():
            if version.removed is not None and version.removed <= floor and \
                    now - (version.removed_time or now) >= retention_seconds:
                doomed.add(name)
                removals.append(name)
        kept, abandoned, job_objects = self._judge_jobs(coordinator, orphan_seconds)
        on_store = self.parts.part_names()
        server_now = on_store.pop("")
        for name, modified in on_store.items():
            if name in named or name in kept:
                continue
            if name in abandoned or server_now - modified >= orphan_seconds:
                doomed.add(name)
        deleted = []
        for name in sorted(doomed):
            if name in on_store:
                self.parts.remove(name)
                deleted.append(name)
        self._bucket.delete(job_objects)  # after the parts: a crash in between leaves them to judge again
        if removals:
            coordinator.forget_removals(self.bind(coordinator.url), removals)
        self._delete_folded_entries()
        return deleted

    def _delete_folded_entries(self) -> list[str]:
        """Delete the entries (and older checkpoints) behind the newest checkpoint written at least
        LOG_GRACE_SECONDS ago, never behind the one the hint names: by then every process has
        re-read the hint (HINT_RECHECK_SECONDS) and reads from a checkpoint at or past them, and a
        commit reads the hint before it takes a seq. Returns the keys deleted."""
        found, server_now = self._bucket.list_with_times(self._key(""))
        checkpoints = self._checkpoint_seqs()
        old_enough = [seq for seq, key in checkpoints.items()
                      if key in found and server_now - found[key] >= LOG_GRACE_SECONDS]
        if not old_enough:
            return []
        floor = min(max(old_enough), self._hint())
        doomed = [key for key in found if (name := key.rsplit("/", 1)[-1]).removesuffix(".json").isdigit()
                  and int(name.removesuffix(".json")) < floor]
        doomed += [key for seq, key in checkpoints.items() if seq < floor]
        self._bucket.delete(doomed)
        return doomed

"""TableLog: a table's commit log in `<table>/_mergetree/log/`, and which parts a snapshot sees.

Files (see format_spec/transactions.md):
  table.json         {"table_id": uuid, "coordinator": url, "location": dir, "inode": n}: binds the
                     table to a coordinator and its id to its directory (see `bind`: a copy of the
                     directory gets an id of its own on its first write, a renamed one keeps it)
  <tid>.json         one entry per transaction that touched the table:
                     {tid, coordinator, added, removed, csn, commit_time}; csn null = pending;
                     "apps": {app id: version} when the transaction also recorded that an
                     application (a streaming query) reached a version (a micro-batch id)
  checkpoint.json    the folded state of older entries: part -> [created, removed, removed_time],
                     and "apps": each application's greatest committed version
  .lock              flock: shared for readers; exclusive for publishing parts (naming them in a
                     pending entry, then renaming them into place), checkpoint, recover, cleanup
  ../jobs/<tag>.json a write job that stages parts with no transaction yet (a Spark job): while it
                     is registered and its driver's lease (`<tag>.lease`) runs (see `register_job`),
                     its staged directories are not garbage; `<tag>.ended` marks a job that ended

The log also decides who owns a part directory. A part directory no entry names is another
writer's: a ClickHouse server on the same directory (a catalog root, or a table attached to it)
inserts `all_N_N_0` parts and merges, and its data is never ours to delete. Recovery and cleanup
keep such parts and report them (`RecoveryReport.foreign_parts`); `adopt_foreign` takes them into
the log in a commit of their own. None of our own leftovers looks like one: publishing names a
part before its rename, rolling back deletes directories before the entry, and cleanup deletes a
part's directory before it drops the part from the checkpoint. The patch parts of ClickHouse's
lightweight UPDATEs (`patch-…`) are ClickHouse's too, never in the log, never deleted by it; reads
take them from the directory (engine/patches.py). ClickHouse's temporaries (`tmp_insert_…`,
`tmp_merge_…`, an INSERT or merge in flight) are left to it; ours (`tmp_<part>`, `delete_tmp_…`)
are garbage. `staged_t<tid>_*` directories belong to transaction `tid` (garbage once it is not running);
`staged_<tag>_*` directories belong to the registered job `tag`. It never finds or deletes a
directory itself: it is given a `PartDirectories` (the engine's, over the table's storage; by
default the table directory's own subdirectories) and asks it to.

Every part has a creation csn and (once removed) a removal csn. Snapshot S sees a part iff
created ≤ S < removed. Folding entries is order-independent and idempotent, so a checkpoint can
take any set of finalized entries.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import threading
import time
import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from spark_mergetree.errors import InvalidOptionError, SerializationError, TransactionError
from spark_mergetree.fileops import Subdirectories, fsync_dir, write_file_atomically
from spark_mergetree.format.part_info import PartInfo, uncovered_parts
from spark_mergetree.format.patch_part import PATCH_PART_PREFIX
from spark_mergetree.recovery import RecoveryReport
from spark_mergetree.txn.connect import coordinator_from_url, default_coordinator
from spark_mergetree.txn.coordinator import Coordinator, TxnState

LOG_DIRECTORY = Path("_mergetree") / "log"
CHECKPOINT_EVERY = 100
FORMAT_VERSION = 1
_ENTRY_NAME = re.compile(r"^(\d{20})\.json$", re.ASCII)
_STAGED_NAME = re.compile(r"^(\d{20})\.staged-[0-9a-f]+\.json$", re.ASCII)
# Names the engine gives part directories, and the temporary names it writes them under.
_PART_DIRECTORY = re.compile(r"^[0-9A-Za-z-]+_\d+_\d+_\d+(?:_\d+)?$", re.ASCII)
# Staged directories (and the tmp_ directories they are written under) name their owner: a
# transaction (`staged_t<tid>_...`) or a registered write job (`staged_<tag>_...`).
_TRANSACTION_STAGED = re.compile(r"^(?:tmp_)?staged_t(\d+)_", re.ASCII)
_JOB_STAGED = re.compile(r"^(?:tmp_)?staged_([0-9A-Za-z]+)_")
_JOB_TAG = re.compile(r"(?!t\d+$)[0-9A-Za-z]{1,64}", re.ASCII)
# Our own temporaries: a part written as `tmp_<part>` before its rename, and a deletion renamed to
# `delete_tmp_…` first. ClickHouse's (`tmp_insert_<part>`, `tmp_merge_…`, `tmp_mut_…`) are not ours.
_TEMPORARY_DIRECTORY = re.compile(r"^(?:delete_tmp_|tmp_[0-9A-Za-z-]+_\d+_\d+_\d+(?:_\d+)?$)", re.ASCII)
JOBS_DIRECTORY = Path("_mergetree") / "jobs"
# How long the mark of an ended job stays (a late task of it that starts meanwhile stages
# nothing), and, for a job registered with no lease (the engine's `stage(tag=...)` used by hand),
# the seconds after its last staging that it counts as abandoned. A job its driver registered with
# a lease (every Spark job) lives exactly as long as the lease, however long it runs.
STAGED_LIFETIME = 3600.0
# Locks this thread holds, per log directory: [exclusive, depth]. flock locks belong to an open
# file, so a nested acquisition through another descriptor would wait for itself.
_held_locks = threading.local()


class PartDirectories(Protocol):
    """The directories a table's parts are written in, wherever they live (one directory, or the
    same name on several disks). The commit log lists and probes them, and deletes those it has
    decided are garbage, only through this."""

    def names(self) -> set[str]:
        """Every directory name (parts, staged parts, `tmp_*` and `delete_tmp_*` leftovers)."""
        ...

    def exists(self, name: str) -> bool:
        ...

    def remove(self, name: str) -> None:
        """Delete the directory `name` everywhere it is, each deletion atomic; nothing if absent."""
        ...


@dataclass(frozen=True)
class LogEntry:
    tid: int
    coordinator: str
    added: tuple[str, ...]
    removed: tuple[str, ...]
    csn: int | None
    commit_time: float | None = None
    # (application id, version) pairs the transaction recorded with its changes: a streaming
    # query's id and the micro-batch it committed (as Delta's SetTransaction records a txn app id
    # and version), so a replayed batch can tell it was committed. Committed exactly when the
    # entry's transaction is.
    apps: tuple[tuple[str, int], ...] = ()

    def to_json(self) -> bytes:
        body: dict[str, Any] = {"format": FORMAT_VERSION, "tid": self.tid, "coordinator": self.coordinator,
                                "added": list(self.added), "removed": list(self.removed),
                                "csn": self.csn, "commit_time": self.commit_time}
        if self.apps:
            body["apps"] = dict(self.apps)
        return json.dumps(body, indent=1).encode()


@dataclass
class PartVersion:
    """A part's life in csn: created (None until its adding entry is seen) and removed."""

    created: int | None = None
    removed: int | None = None
    removed_time: float | None = None

    def visible_at(self, snapshot: int) -> bool:
        return (self.created is not None and self.created <= snapshot
                and (self.removed is None or snapshot < self.removed))


class TableLog:
    """The commit log of one table directory.

    `directories` owns the table's part directories (the engine passes its storage's); without
    it, they are the subdirectories of the table directory.
    """

    def __init__(self, table_dir: str | os.PathLike, directories: PartDirectories | None = None) -> None:
        self.table_dir = Path(table_dir)
        self.directory = self.table_dir / LOG_DIRECTORY
        self.directories: PartDirectories = directories if directories is not None else Subdirectories(self.table_dir)

    def table_key(self) -> Path | str:
        """What names this table in a transaction: its resolved directory."""
        return self.table_dir.resolve()

    # ---- files ---------------------------------------------------------------------------------

    def _entry_path(self, tid: int) -> Path:
        return self.directory / f"{tid:020d}.json"

    @contextlib.contextmanager
    def _lock(self, exclusive: bool) -> Iterator[None]:
        """The log's flock, re-entrant within a thread (an exclusive holder may nest either kind)."""
        held: dict[str, list[Any]] = _held_locks.__dict__.setdefault("locks", {})
        key = os.path.realpath(self.directory)
        current = held.get(key)
        if current is not None:
            if exclusive and not current[0]:
                raise TransactionError(f"{self.directory}: cannot take the exclusive log lock while holding it shared")
            current[1] += 1
            try:
                yield
            finally:
                current[1] -= 1
            return
        if not exclusive and not self.directory.is_dir():
            yield  # nothing to read; do not create directories on a read (read-only tables)
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        descriptor = os.open(self.directory / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
            held[key] = [exclusive, 1]
            try:
                yield
            finally:
                del held[key]
        finally:
            os.close(descriptor)

    def commit_lock(self) -> contextlib.AbstractContextManager[None]:
        """Exclusive lock held while block numbers are allocated, a pending entry names new parts and
        they are renamed into place: cleanup never sees a named-but-absent or placed-but-unnamed
        directory, and merges see every allocated block (see `reserved_blocks`)."""
        return self._lock(exclusive=True)

    def _read_json(self, path: Path) -> Any:
        try:
            return json.loads(path.read_bytes())
        except ValueError as error:
            raise TransactionError(f"{path}: corrupt log file: {error}") from error

    def default_coordinator(self) -> Coordinator:
        """The coordinator of a table that names none: the process default ($SPARK_MERGETREE_COORDINATOR,
        else a local directory in ~/.spark_mergetree)."""
        return default_coordinator()

    def check_coordinator(self, coordinator: Coordinator) -> None:
        """Refuse a coordinator this log cannot commit through (any will do for a local directory)."""

    def identity(self) -> dict[str, str] | None:
        """{"table_id", "coordinator"} once the table has been written through a transaction."""
        path = self.directory / "table.json"
        try:
            return self._read_json(path)
        except FileNotFoundError:
            return None

    def has_history(self) -> bool:
        """Whether anything was ever written through the log (an entry, or a checkpoint)."""
        return bool(self.entries()) or (self.directory / "checkpoint.json").exists()

    def adopt(self, names: Iterable[str]) -> bool:
        """Take in the parts a table directory held before this log had any history (a table
        ClickHouse wrote): a checkpoint in which each exists since csn 0, so every snapshot sees it.

        Adoption is no transaction: a transaction that rolled back would delete the parts it named
        (ClickHouse's own data). It runs before the first write binds the log, so readers, which
        take an unbound table's parts from its directory, see the same parts before and after.
        Returns whether it wrote the checkpoint (False: the log has history, or no parts)."""
        names = sorted(names)
        if not names:
            return False
        with self._lock(exclusive=True):
            if self.has_history():
                return False
            identity = self.identity()
            self._write_checkpoint(-1, {name: PartVersion(created=0) for name in names},
                                   identity["coordinator"] if identity else None)
            fsync_dir(self.directory)
        return True

    def foreign_parts(self) -> list[str]:
        """Part directories no entry, proposal or the checkpoint names: another writer's (a ClickHouse
        server's INSERT or merge on the same directory), kept until `adopt_foreign` takes them in."""
        with self._lock(exclusive=False):
            named = self._named_parts()
            for entry in self.entries():
                named.update(entry.removed)
            for _, staged in self.staged():
                named.update(staged.added)
            return sorted(name for name in self.directories.names() if name not in named and _is_foreign_part(name))

    def adopt_foreign(self, coordinator: Coordinator, names: Iterable[str]) -> tuple[list[str], list[str]]:
        """Take parts another writer placed in a table with history (`foreign_parts`) into the log,
        as ClickHouse would load them; return (adopted, kept).

        A part no live part of the log covers is adopted; one that covers live parts (a ClickHouse
        merge or mutation of them) replaces them. The rest are kept as they are, untouched: parts
        that a live or another foreign part covers (outdated: ClickHouse removes them itself), and
        parts covering one the log removed or a running transaction names (histories that
        diverged). The adoption is a commit of its own at the coordinator whose entry is written
        finalized under the exclusive lock, so no reader sees it half done, and never pending: a
        pending entry that rolled back would delete the parts, which are not ours to delete. A crash
        between the commit and the entry leaves the parts unnamed, to be adopted again."""
        if not self.has_history():
            raise TransactionError(f"{self.table_dir}: the log has no history; adopt() takes a ClickHouse table in")
        table_id = self.bind(coordinator.url)
        with self._lock(exclusive=True):
            _floor, versions, entries = self._folded_state()
            busy: set[str] = set()
            for entry, csn in self._resolve(entries, coordinator, None):
                if csn is not None:
                    self._fold(versions, entry, csn)
                else:
                    busy.update(entry.added + entry.removed)
            for _, staged in self.staged():
                busy.update(staged.added + staged.removed)
            on_disk = self.directories.names()
            candidates = sorted({n for n in names if n in on_disk and _is_foreign_part(n)} - set(versions) - busy)
            live = [name for name, version in versions.items() if version.removed is None]
            adopted, kept, replaced = [], [], set()
            for name in candidates:
                info = PartInfo.parse(name)
                covering = [o for o in live + candidates if o != name and PartInfo.parse(o).contains(info)]
                covered = [o for o in list(versions) + sorted(busy) if info.contains(PartInfo.parse(o))]
                if covering or any(o in busy or versions[o].removed is not None for o in covered):
                    kept.append(name)
                else:
                    adopted.append(name)
                    replaced.update(covered)
            if not adopted:
                return [], kept
            tid = coordinator.begin().tid
            try:
                csn = coordinator.commit(tid, [(table_id, name) for name in sorted(replaced)],
                                         [str(self.table_dir)])
            except SerializationError:
                return [], kept + adopted  # a transaction of ours replaces a part they cover: next time
            entry = LogEntry(tid, coordinator.url, tuple(adopted), tuple(sorted(replaced)), csn, time.time())
            write_file_atomically(self._entry_path(tid), entry.to_json())
        return adopted, kept

    def bind(self, coordinator_url: str) -> str:
        """Bind the table to a coordinator (first writer wins); return the table id.

        The id names the table's state at the coordinator (removal records, block numbers), so it
        belongs to one directory: `table.json` records the directory's path and inode number. A
        directory renamed on its file system keeps its inode and its id (the new path is recorded);
        a copy (`cp -a`, a restored backup) has another inode and gets a new id here, before it
        writes anything (`_rekey_copy`), as ClickHouse gives an attached copy its own UUID.

        Raises TransactionError if the table belongs to another coordinator.
        """
        identity = self.identity()
        if identity is None:
            self.directory.mkdir(parents=True, exist_ok=True)
            proposal = {"format": FORMAT_VERSION, "table_id": str(uuid.uuid4()), "coordinator": coordinator_url,
                        **self._placement()}
            write_file_atomically(self.directory / "table.json", json.dumps(proposal).encode(), replace=False)
            identity = self.identity()
            assert identity is not None
        if identity["coordinator"] != coordinator_url:
            raise TransactionError(
                f"table {self.table_dir} is coordinated by {identity['coordinator']}, not by "
                f"{coordinator_url}: one transaction cannot span tables of different coordinators")
        if self._verdict(identity, self._placement()) != "same":
            identity = self._rebind_location(coordinator_url)
        return identity["table_id"]

    def _placement(self) -> dict[str, Any]:
        """Where this log's table is: its resolved directory and that directory's inode number
        (a rename keeps the inode; a copy has a new one). The device number is left out: it
        differs between the NFS clients of one directory and may change when a disk is mounted again."""
        try:
            inode: int | None = os.stat(self.table_dir).st_ino
        except FileNotFoundError:
            inode = None
        return {"location": str(self.table_dir.resolve()), "inode": inode}

    def _verdict(self, identity: dict[str, Any], here: dict[str, Any]) -> str:
        """"same" (the directory the id was bound in), "moved" (renamed: same inode, another path),
        "copied" (another directory: a copy, or a restored backup) or "unrecorded" (bound by a
        version that did not record the location)."""
        if "location" not in identity:
            return "unrecorded"
        if identity.get("inode") != here["inode"]:
            return "copied"
        if identity["location"] == here["location"]:
            return "same"
        # Same inode number, another path: a rename, unless the recorded directory still holds the
        # table under the same id (a copy on another file system that drew the same inode number).
        original = Path(identity["location"])
        try:
            if not os.path.samefile(original, self.table_dir):
                recorded = json.loads((original / LOG_DIRECTORY / "table.json").read_bytes())
                if recorded.get("table_id") == identity["table_id"]:
                    return "copied"
        except (OSError, ValueError):
            pass
        return "moved"

    def _rebind_location(self, coordinator_url: str) -> dict[str, Any]:
        """Record where the table is now, under the log's exclusive lock (the first process to get
        it decides; the others find the new record): a renamed table (or one bound before locations
        were recorded) keeps its id; a copy gets a new one."""
        with self._lock(exclusive=True):
            identity = self.identity()
            assert identity is not None
            here = self._placement()
            verdict = self._verdict(identity, here)
            if verdict == "same":
                return identity
            updated = {**identity, **here}
            if verdict == "copied":
                updated["table_id"] = str(uuid.uuid4())
                updated["copied_from"] = {"table_id": identity["table_id"], "location": identity["location"]}
                self._disown_copied_transactions(coordinator_url)
            write_file_atomically(self.directory / "table.json", json.dumps(updated).encode())
            return updated

    def _disown_copied_transactions(self, coordinator_url: str) -> None:
        """A copy takes the original's committed changes only: entries of transactions that
        committed are finalized; those still running in the original, or aborted, are rolled back
        here with the directories they alone added (their outcome is the original's, not the
        copy's); their staged proposals are dropped (recovery deletes what they staged). Called
        under the exclusive lock, before the copy gets its id."""
        pending = [entry for entry in self.entries() if entry.csn is None]
        proposals = self.staged()
        if not pending and not proposals:
            return
        coordinator = coordinator_from_url(coordinator_url)
        for entry in pending:
            state, csn = coordinator.status(entry.tid)
            if state is TxnState.COMMITTED and csn is not None:
                self._finalize_locked(entry.tid, csn)
            else:
                self.discard(entry.tid, delete_added_parts=True)
        for path, _ in proposals:
            self.drop_staged(path)
        self._sync_log()

    @property
    def table_id(self) -> str:
        identity = self.identity()
        if identity is None:
            raise TransactionError(f"table {self.table_dir} has no commit log yet ({self.directory / 'table.json'})")
        return identity["table_id"]

    def _parse_entry(self, path: Path, raw: Any) -> LogEntry:
        try:
            return LogEntry(tid=int(raw["tid"]), coordinator=str(raw["coordinator"]),
                            added=tuple(raw["added"]), removed=tuple(raw["removed"]),
                            csn=None if raw["csn"] is None else int(raw["csn"]),
                            commit_time=raw.get("commit_time"),
                            apps=tuple((str(app), int(version)) for app, version in raw.get("apps", {}).items()))
        except (KeyError, TypeError, ValueError) as error:
            raise TransactionError(f"{path}: malformed log entry ({error!r})") from error

    def entries(self) -> list[LogEntry]:
        """Every entry file, in tid order (entries vanish when a checkpoint folds them)."""
        try:
            names = sorted(name for name in os.listdir(self.directory) if _ENTRY_NAME.match(name))
        except FileNotFoundError:
            return []
        result = []
        for name in names:
            path = self.directory / name
            try:
                result.append(self._parse_entry(path, self._read_json(path)))
            except FileNotFoundError:
                continue
        return result

    def _folded_state(self) -> tuple[int, dict[str, PartVersion], list[LogEntry]]:
        """(floor, checkpointed versions, entries), under the caller's shared lock. A log never
        bound and never adopted into (a table ClickHouse wrote) holds the data parts its directory
        holds, as ClickHouse loads them (the uncovered ones), since csn 0: what `adopt` will write. (Every
        change of ours binds the log first, so none of its parts can be among them.)"""
        floor, versions = self._load_checkpoint()
        entries = self.entries()
        if (not entries and not versions and self.identity() is None
                and not (self.directory / "checkpoint.json").exists()):
            versions = {name: PartVersion(created=0) for name in uncovered_parts(self.directories.names())
                        if not name.startswith(PATCH_PART_PREFIX)}
        return floor, versions, entries

    def _load_checkpoint(self) -> tuple[int, dict[str, PartVersion]]:
        path = self.directory / "checkpoint.json"
        try:
            raw = self._read_json(path)
        except FileNotFoundError:
            return -1, {}
        try:
            versions = {name: PartVersion(created, removed, removed_time)
                        for name, (created, removed, removed_time) in raw["parts"].items()}
            return int(raw["floor"]), versions
        except (KeyError, TypeError, ValueError) as error:
            raise TransactionError(f"{path}: malformed checkpoint ({error!r})") from error

    # ---- writing entries -----------------------------------------------------------------------

    def write_pending(self, tid: int, coordinator_url: str, added: Iterable[str], removed: Iterable[str],
                      apps: Iterable[tuple[str, int]] = ()) -> None:
        """Durably record what `tid` adds and removes here (and the application versions it
        records, see `LogEntry.apps`), before the coordinator commits it."""
        self.bind(coordinator_url)
        entry = LogEntry(tid=tid, coordinator=coordinator_url, added=tuple(added), removed=tuple(removed), csn=None,
                         apps=tuple(apps))
        write_file_atomically(self._entry_path(tid), entry.to_json())

    def finalize(self, tid: int, csn: int, commit_time: float | None = None) -> None:
        """Fill in the csn of a committed entry (readers can then skip asking the coordinator)."""
        # Shared lock: a checkpoint must not fold and delete the entry between our read and our
        # rewrite, or the rewrite would resurrect an entry whose parts were cleaned up.
        with self._lock(exclusive=False):
            self._finalize_locked(tid, csn, commit_time)

    def _finalize_locked(self, tid: int, csn: int, commit_time: float | None = None) -> None:
        path = self._entry_path(tid)
        try:
            entry = self._parse_entry(path, self._read_json(path))
        except FileNotFoundError:
            return  # already folded into a checkpoint
        if entry.csn == csn:
            return
        if entry.csn is not None:
            raise TransactionError(f"{path}: entry has csn {entry.csn}, cannot set {csn}")
        final = LogEntry(tid, entry.coordinator, entry.added, entry.removed, csn,
                         commit_time if commit_time is not None else time.time(), entry.apps)
        # No directory fsync: if the rename is lost in a crash, the pending version is still
        # there and resolves through the coordinator to the same csn.
        write_file_atomically(path, final.to_json(), sync_directory=False)

    def stage(self, tid: int, coordinator_url: str, added: Iterable[str], removed: Iterable[str] = ()) -> Path:
        """Propose changes for transaction `tid` from another process (e.g. a Spark job's commit,
        which runs outside the process that owns the transaction). Readers ignore staged files;
        the owner takes them in with `Transaction.adopt_staged` before it commits."""
        self.bind(coordinator_url)
        path = self.directory / f"{tid:020d}.staged-{uuid.uuid4().hex[:12]}.json"
        entry = LogEntry(tid=tid, coordinator=coordinator_url, added=tuple(added), removed=tuple(removed), csn=None)
        write_file_atomically(path, entry.to_json())
        return path

    def staged(self, tid: int | None = None) -> list[tuple[Path, LogEntry]]:
        """Staged proposals (of one transaction, or all)."""
        try:
            names = sorted(os.listdir(self.directory))
        except FileNotFoundError:
            return []
        result = []
        for name in names:
            match = _STAGED_NAME.match(name)
            if match and (tid is None or int(match.group(1)) == tid):
                path = self.directory / name
                try:
                    result.append((path, self._parse_entry(path, self._read_json(path))))
                except FileNotFoundError:
                    continue
        return result

    def drop_staged(self, path: Path) -> None:
        """Delete one proposal (adopted by its transaction, which has ended)."""
        path.unlink(missing_ok=True)

    def discard_staged(self, tid: int, only: Iterable[Path] | None = None) -> None:
        """Delete the proposals staged for a transaction that ended without adopting them (or
        `only` those files: a failed job takes its own back), with the directories they name that
        no entry or checkpoint names (under the exclusive lock)."""
        with self._lock(exclusive=True):
            proposals = self.staged(tid)
            if only is not None:
                chosen = set(only)
                proposals = [(path, proposal) for path, proposal in proposals if path in chosen]
            if not proposals:
                return
            held = self._named_parts()
            for path, proposal in proposals:
                for name in proposal.added:
                    if name not in held:
                        self.directories.remove(name)
                self.drop_staged(path)
            self._sync_log()

    def _named_parts(self) -> set[str]:
        """Every part an entry or the checkpoint names."""
        _, checkpointed = self._load_checkpoint()
        held = set(checkpointed)
        for entry in self.entries():
            held.update(entry.added)
        return held

    def _sync_log(self) -> None:
        """Make the log directory's changes durable."""
        fsync_dir(self.directory)

    def discard(self, tid: int, delete_added_parts: bool = True, also: Iterable[str] = ()) -> None:
        """Roll back the pending entry of a transaction that did not commit, with the directories it
        added (and `also`, names it may have placed). Under the exclusive lock, and only names no
        other entry holds: a directory is deleted by its owner, never by name after a lost race."""
        with self._lock(exclusive=True):
            path = self._entry_path(tid)
            try:
                entry: LogEntry | None = self._parse_entry(path, self._read_json(path))
            except FileNotFoundError:
                entry = None
            if entry is not None and entry.csn is not None:
                raise TransactionError(f"{path}: refusing to discard an entry committed at csn {entry.csn}")
            names = list(dict.fromkeys(list(entry.added if entry else ()) + list(also)))
            if delete_added_parts and names:
                _, checkpointed = self._load_checkpoint()
                held = set(checkpointed)
                for other in self.entries():
                    if other.tid != tid:
                        held.update(other.added)
                for name in names:
                    if name not in held:
                        self.directories.remove(name)
            if entry is not None:
                path.unlink(missing_ok=True)
                fsync_dir(self.directory)

    # ---- reading -------------------------------------------------------------------------------

    def _resolve(self, entries: list[LogEntry], coordinator: Coordinator | None,
                 own_tid: int | None) -> list[tuple[LogEntry, int | None]]:
        """(entry, csn) with the csn of pending entries looked up; None while not committed."""
        resolved = []
        for entry in entries:
            csn = entry.csn
            if csn is None and entry.tid != own_tid and coordinator is not None:
                if entry.coordinator != coordinator.url:
                    raise TransactionError(
                        f"{self._entry_path(entry.tid)} belongs to coordinator {entry.coordinator}, "
                        f"not {coordinator.url}")
                state, committed_csn = coordinator.status(entry.tid)
                if state is TxnState.COMMITTED:
                    csn = committed_csn
            resolved.append((entry, csn))
        return resolved

    @staticmethod
    def _fold(versions: dict[str, PartVersion], entry: LogEntry, csn: int) -> None:
        for name in entry.added:
            versions.setdefault(name, PartVersion()).created = csn
        for name in entry.removed:
            version = versions.setdefault(name, PartVersion())
            version.removed = csn
            version.removed_time = entry.commit_time if entry.commit_time is not None else time.time()

    def versions(self, coordinator: Coordinator | None) -> tuple[int, dict[str, PartVersion]]:
        """(floor, part -> PartVersion) over the checkpoint and every committed entry."""
        with self._lock(exclusive=False):
            # Entries are listed after the checkpoint is read: a concurrent checkpoint only deletes
            # entries it folded, and the shared lock keeps it out while we read both.
            floor, versions, entries = self._folded_state()
        for entry, csn in self._resolve(entries, coordinator, None):
            if csn is not None:
                self._fold(versions, entry, csn)
        return floor, versions

    def snapshot(self, snapshot_csn: int, coordinator: Coordinator, own_tid: int | None = None) -> set[str]:
        """Names of the parts visible at `snapshot_csn`, plus the changes of running transaction
        `own_tid`: its pending entry and the proposals staged for it (a reader inside it sees them)."""
        with self._lock(exclusive=False):
            floor, versions, entries = self._folded_state()
            proposals = [proposal for _, proposal in self.staged(own_tid)] if own_tid is not None else []
        if snapshot_csn < floor:
            raise TransactionError(
                f"table {self.table_dir}: snapshot {snapshot_csn} is older than the retained history "
                f"(parts removed up to csn {floor} were cleaned up); raise the retention to travel further back")
        own: LogEntry | None = None
        for entry, csn in self._resolve(entries, coordinator, own_tid):
            if entry.tid == own_tid and entry.csn is None:
                own = entry
            elif csn is not None:
                self._fold(versions, entry, csn)
        visible = {name for name, version in versions.items() if version.visible_at(snapshot_csn)}
        # Part names are never reused, so applying every addition before every removal is right in
        # whatever order the changes were made.
        own_changes = ([own] if own is not None else []) + proposals
        for change in own_changes:
            visible.update(change.added)
        for change in own_changes:
            visible.difference_update(change.removed)
        return visible

    def _checkpoint_apps(self) -> dict[str, int]:
        """The application versions the checkpoint folded (see `LogEntry.apps`)."""
        path = self.directory / "checkpoint.json"
        try:
            raw = self._read_json(path)
        except FileNotFoundError:
            return {}
        try:
            return {str(app): int(version) for app, version in raw.get("apps", {}).items()}
        except (AttributeError, TypeError, ValueError) as error:
            raise TransactionError(f"{path}: malformed checkpoint ({error!r})") from error

    def app_version(self, app_id: str, coordinator: Coordinator | None) -> int | None:
        """The greatest version application `app_id` recorded in a committed transaction of this
        table (`LogEntry.apps`; a pending entry counts once its transaction committed), None if it
        recorded none."""
        with self._lock(exclusive=False):
            apps = self._checkpoint_apps()
            entries = [entry for entry in self.entries() if any(app == app_id for app, _ in entry.apps)]
        best = apps.get(app_id)
        for entry, csn in self._resolve(entries, coordinator, None):
            if csn is None:
                continue
            for app, version in entry.apps:
                if app == app_id and (best is None or version > best):
                    best = version
        return best

    # ---- maintenance ---------------------------------------------------------------------------

    def _write_checkpoint(self, floor: int, versions: dict[str, PartVersion], url: str | None,
                          apps: dict[str, int] | None = None) -> None:
        payload: dict[str, Any] = {"format": FORMAT_VERSION, "coordinator": url, "floor": floor,
                                   "parts": {name: [v.created, v.removed, v.removed_time]
                                             for name, v in sorted(versions.items())}}
        if apps:
            payload["apps"] = dict(sorted(apps.items()))
        write_file_atomically(self.directory / "checkpoint.json", json.dumps(payload, indent=0).encode())

    def _checkpoint_locked(self, drop: Iterable[str] = (), floor: int | None = None) -> int:
        old_floor, versions = self._load_checkpoint()
        apps = self._checkpoint_apps()
        folded = []
        for entry in self.entries():
            if entry.csn is not None:
                self._fold(versions, entry, entry.csn)
                _fold_apps(apps, entry)
                folded.append(entry.tid)
        dropped = set(drop)
        if not folded and not dropped:
            return 0
        for name in dropped:
            versions.pop(name, None)
        identity = self.identity()
        self._write_checkpoint(max(old_floor, floor if floor is not None else old_floor),
                               versions, identity["coordinator"] if identity else None, apps)
        for tid in folded:
            self._entry_path(tid).unlink(missing_ok=True)
        fsync_dir(self.directory)
        return len(folded)

    def checkpoint(self) -> int:
        """Fold every finalized entry into checkpoint.json; return how many were folded."""
        with self._lock(exclusive=True):
            return self._checkpoint_locked()

    def maybe_checkpoint(self, every: int = CHECKPOINT_EVERY) -> bool:
        """Checkpoint when ≥ `every` entry files piled up and nobody else is maintaining the log."""
        try:
            count = sum(1 for name in os.listdir(self.directory) if _ENTRY_NAME.match(name))
        except FileNotFoundError:
            return False
        if count < every:
            return False
        descriptor = os.open(self.directory / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            try:
                fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False
            self._checkpoint_locked()
            return True
        finally:
            os.close(descriptor)

    def _recover_locked(self, coordinator: Coordinator, job_lifetime: float) -> RecoveryReport:
        report = RecoveryReport()
        for entry, csn in self._resolve(self.entries(), coordinator, None):
            if entry.csn is not None:
                continue
            if csn is not None:
                self._finalize_locked(entry.tid, csn)
                report.finalized.append(entry.tid)
                continue
            state, _ = coordinator.status(entry.tid)
            if state is TxnState.ABORTED:
                self.discard(entry.tid, delete_added_parts=True)
                report.rolled_back.append(entry.tid)
        _, checkpointed = self._load_checkpoint()
        named = set(checkpointed)
        for entry in self.entries():
            # Pending entries left here belong to running transactions (or ones whose outcome the
            # coordinator could not tell): their directories are never touched.
            named.update(entry.added)
            named.update(entry.removed)
        for path, staged in self.staged():
            if coordinator.status(staged.tid)[0] is TxnState.RUNNING:
                named.update(staged.added)
                continue
            # The owner finished without adopting it (or crashed after adopting): whatever no
            # entry names is garbage.
            for name in staged.added:
                if name not in named:
                    self.directories.remove(name)
                    report.deleted_directories.append(name)
            path.unlink(missing_ok=True)
        states: dict[int, TxnState] = {}
        with LeaseStates(coordinator) as leases:
            for name in sorted(self.directories.names()):
                if name in named:
                    continue
                if _is_foreign_part(name):
                    report.foreign_parts.append(name)
                    continue
                if not self._is_garbage(name, coordinator, states, job_lifetime, leases):
                    continue
                self.directories.remove(name)
                if name not in report.deleted_directories:
                    report.deleted_directories.append(name)
            self._forget_finished_jobs(job_lifetime, leases)
        return report

    def _is_garbage(self, name: str, coordinator: Coordinator, states: dict[int, TxnState],
                    job_lifetime: float, leases: LeaseStates) -> bool:
        """Whether a directory the log does not name has no live owner (the caller holds the lock)."""
        owned = _TRANSACTION_STAGED.match(name)
        if owned:
            tid = int(owned.group(1))
            if tid not in states:
                states[tid] = coordinator.status(tid)[0]
            return states[tid] is not TxnState.RUNNING
        job = _JOB_STAGED.match(name)
        if job:
            return not self.job_alive(job.group(1), job_lifetime, leases)
        if name.startswith(PATCH_PART_PREFIX) or _is_foreign_part(name):
            return False  # ClickHouse's (see the module docstring)
        # A deletion that was interrupted, or a write into a tmp_ directory of no staged part:
        # publishing names a part under this lock before it exists.
        return bool(_TEMPORARY_DIRECTORY.match(name))

    # ---- write jobs (staged parts with no transaction yet) --------------------------------------

    def _job_path(self, tag: str) -> Path:
        return self.table_dir / JOBS_DIRECTORY / f"{tag}.json"

    def register_job(self, tag: str, leases: Sequence[tuple[str, int]] = ()) -> None:
        """Record that job `tag` stages parts.

        Its driver registers it first with `leases`: (coordinator URL, tid) of a transaction it
        holds open while the job runs (`txn/job_lease.py` for a Spark job; a distributed OPTIMIZE or
        mutation names the transaction it commits in). The job's staged directories are then kept
        exactly as long as one of them runs at its coordinator: a driver that died, or a job that
        ended, leaves garbage, a long job loses nothing. A task staging for it (no `leases`)
        records its own activity beside the lease, never over it. A job no driver registered with a
        lease is kept while it staged within `STAGED_LIFETIME` (each task's staging renews it)."""
        if not _JOB_TAG.fullmatch(tag):
            raise InvalidOptionError(f"job tag {tag!r} must be 1 to 64 letters and digits, and not "
                                     "t<number> (the names of transaction-owned parts)")
        if self.job_ended(tag):
            raise TransactionError(f"write job {tag!r} of {self.table_dir} has ended (it committed, gave up, or "
                                   "its driver is gone): a late task of it stages nothing")
        record: dict[str, Any] = {"tag": tag, "active": time.time()}
        path = self._job_path(tag)
        if leases:  # in a file of its own: a task's registration never replaces it
            record["leases"] = [{"coordinator": url, "tid": int(tid)} for url, tid in leases]
            path = path.with_suffix(".lease")
        path.parent.mkdir(parents=True, exist_ok=True)
        write_file_atomically(path, json.dumps(record).encode(), sync_directory=False)

    def record_staged(self, tag: str, part: str) -> None:
        """Nothing: a part staged in a directory carries its job's tag in its name (`staged_<tag>_*`)."""

    def end_job(self, tag: str) -> None:
        """The job committed or gave up: whatever it staged and did not publish is garbage. A mark
        that it ended stays for the job lifetime, so a task of it still running (Spark does not wait
        for them when a job fails, nor for a speculative attempt when it commits) cannot register
        it again, and removes what it stages after."""
        ended = self._job_path(tag).with_suffix(".ended")
        ended.parent.mkdir(parents=True, exist_ok=True)
        ended.touch()
        self._job_path(tag).unlink(missing_ok=True)
        self._job_path(tag).with_suffix(".lease").unlink(missing_ok=True)

    def discard_job(self, tag: str, keep: Iterable[str] = ()) -> list[str]:
        """End the write job `tag` and delete its staged parts (`staged_<tag>_*`) except `keep`, and
        the directories of its task attempts that died while writing (`tmp_staged_<tag>_*`). A task
        of it still running, or a speculative attempt that starts later, stages nothing that lasts
        (it sees the job ended and removes its own)."""
        self.end_job(tag)  # first: a task staging after the listing below sees it and removes its parts
        kept, removed = set(keep), []
        for name in sorted(self.directories.names()):
            match = _JOB_STAGED.match(name)
            if match is not None and match.group(1) == tag and name not in kept:
                self.directories.remove(name)
                removed.append(name)
        return removed

    def job_ended(self, tag: str) -> bool:
        """Whether job `tag` ended (`end_job`) within the job lifetime."""
        return self._job_path(tag).with_suffix(".ended").exists()

    def job_leased(self, tag: str) -> bool:
        """Whether job `tag` is registered with a lease and has not ended (what its holder watches)."""
        return not self.job_ended(tag) and self._job_path(tag).with_suffix(".lease").exists()

    def _job_record(self, tag: str) -> dict[str, Any] | None:
        """The job's registration (its driver's lease if it has one); None if there is none, {} if
        it cannot be read."""
        for path in (self._job_path(tag).with_suffix(".lease"), self._job_path(tag)):
            try:
                record = json.loads(path.read_bytes())
            except FileNotFoundError:
                continue
            except ValueError:
                return {}
            return record if isinstance(record, dict) else {}
        return None

    def job_alive(self, tag: str, lifetime: float = STAGED_LIFETIME, leases: LeaseStates | None = None) -> bool:
        """Whether job `tag` may still publish what it staged: registered, and one of its leases
        runs at its coordinator (`leases` caches their states), or, with no lease, it staged within
        `lifetime` seconds."""
        record = self._job_record(tag)
        if record is None:
            return False
        held = record.get("leases")
        if held:
            if leases is None:
                with LeaseStates(None) as own:
                    return own.any_running(held)
            return leases.any_running(held)
        try:
            return time.time() - float(record["active"]) < lifetime
        except (KeyError, TypeError, ValueError):
            return True  # unreadable: kept, as a file being written by another version would be

    def _forget_finished_jobs(self, lifetime: float, leases: LeaseStates) -> None:
        try:
            tags = {p.stem for p in (self.table_dir / JOBS_DIRECTORY).iterdir() if p.suffix in (".json", ".lease")}
        except FileNotFoundError:
            return
        for tag in sorted(tags):
            if not self.job_alive(tag, lifetime, leases):
                self.end_job(tag)
        now = time.time()
        for mark in (self.table_dir / JOBS_DIRECTORY).glob("*.ended"):
            try:
                if now - mark.stat().st_mtime >= lifetime:
                    mark.unlink()
            except FileNotFoundError:
                pass

    # ---- block numbers and names in flight ---------------------------------------------------------

    def allocation_fence(self, coordinator: Coordinator) -> tuple[int, bool] | None:
        """None here: `commit_lock` orders block allocation against `reserved_blocks`. A log without
        that lock returns (watermark, busy) taken before a merge's snapshot (see ObjectTableLog)."""
        return None

    def reserved_blocks(self, coordinator: Coordinator, exclude_tid: int | None = None
                        ) -> dict[str, list[tuple[int, int]]]:
        """Per partition, the block ranges of parts that running transactions named (pending entries
        and staged proposals) but did not commit yet. Call under `commit_lock`, where block numbers
        are allocated: every allocated block is then in a committed part, in one of these ranges,
        or lost with an aborted transaction. Merges and covering names must not span these."""
        pending = [e for e in self.entries() if e.csn is None] + [e for _, e in self.staged()]
        states: dict[int, TxnState] = {}
        out: dict[str, list[tuple[int, int]]] = {}
        for entry in pending:
            if entry.tid == exclude_tid:
                continue
            if entry.tid not in states:
                states[entry.tid] = coordinator.status(entry.tid)[0]
            if states[entry.tid] is not TxnState.RUNNING:
                continue  # committed: visible to any snapshot taken now; aborted: a gap
            for name in entry.added:
                info = PartInfo.parse(name)
                out.setdefault(info.partition_id, []).append((info.min_block, info.max_block))
        return out

    def claim_name(self, name: str, coordinator: Coordinator, tid: int) -> None:
        """Make sure part name `name` is free for transaction `tid` to publish (under `commit_lock`).

        A leftover of an aborted transaction with the same name (a merge of the same parts that
        died) is rolled back first; a name another live or committed transaction holds is refused.
        """
        for entry in self.entries():
            if entry.tid == tid or name not in entry.added:
                continue
            if entry.csn is not None:
                raise TransactionError(f"part {name!r} of {self.table_dir} was already committed by "
                                       f"transaction {entry.tid}")
            state, _ = coordinator.status(entry.tid)
            if state is TxnState.RUNNING:
                raise SerializationError(f"part {name!r} of {self.table_dir} is being created by "
                                         f"transaction {entry.tid}")
            if state is TxnState.COMMITTED:
                raise TransactionError(f"part {name!r} of {self.table_dir} was already committed by "
                                       f"transaction {entry.tid}")
            self.discard(entry.tid, delete_added_parts=True)
        _, checkpointed = self._load_checkpoint()
        if name in checkpointed:
            raise TransactionError(f"part {name!r} of {self.table_dir} is already in the table's log")
        if self.directories.exists(name):
            # Named by no entry: another writer's part (a ClickHouse server's merge of the same
            # parts, say), never ours to replace.
            raise SerializationError(f"part {name!r} of {self.table_dir} exists and the table's log does not name it "
                                     "(another writer, such as a ClickHouse server on the same directory, placed it); "
                                     "adopt_directory_parts() takes it in")

    def recover(self, coordinator: Coordinator, job_lifetime: float = STAGED_LIFETIME) -> RecoveryReport:
        """Finalize entries whose transaction committed; roll back aborted or dead ones with the
        directories they added; delete directories no entry names and no live owner holds (see
        the module docstring). Nothing is deleted for a transaction whose outcome is unknown: the
        coordinator's errors propagate."""
        if self.identity() is not None:
            self.bind(coordinator.url)
        with self._lock(exclusive=True):
            return self._recover_locked(coordinator, job_lifetime)

    def cleanup(self, coordinator: Coordinator, retention_seconds: float = 0.0,
                job_lifetime: float = STAGED_LIFETIME, *, orphan_seconds: float = 3600.0) -> list[str]:
        """Delete parts no snapshot can see any more; return their names.

        A part removed at csn R goes when R ≤ every running snapshot and the removal is older than
        `retention_seconds` (time travel to snapshots before R works until then). Recovery runs
        first and every finalized entry is folded into the checkpoint. (`orphan_seconds` does not
        apply: a directory here is staged under its owner's name, and goes with its owner.)
        """
        if retention_seconds < 0:
            raise InvalidOptionError(f"retention_seconds must be ≥ 0, got {retention_seconds}")
        if self.identity() is not None:
            self.bind(coordinator.url)
        with self._lock(exclusive=True):
            self._recover_locked(coordinator, job_lifetime)
            # Fold every entry and delete it durably first: if a crash left an entry that adds a
            # part behind after the part was dropped from the checkpoint, it would resurrect it.
            self._checkpoint_locked()
            horizon = coordinator.min_running_snapshot()
            now = time.time()
            _, versions = self._load_checkpoint()
            for entry in self.entries():
                if entry.csn is not None:
                    self._fold(versions, entry, entry.csn)
            drop = [name for name, version in versions.items()
                    if version.removed is not None and version.removed <= horizon
                    and now - (version.removed_time or 0.0) >= retention_seconds]
            floor = max((removed for name in drop if (removed := versions[name].removed) is not None), default=None)
            # Directories first: a crash in between leaves the checkpoint naming parts that are gone
            # (the next cleanup drops them), never a part directory no entry names, which is
            # another writer's (see the module docstring).
            for name in drop:
                self.directories.remove(name)
            self._checkpoint_locked(drop=drop, floor=floor)
            identity = self.identity()
            if drop and identity is not None:
                coordinator.forget_removals(identity["table_id"], drop)
            return sorted(drop)


def _fold_apps(apps: dict[str, int], entry: LogEntry) -> None:
    for app, version in entry.apps:
        apps[app] = max(version, apps.get(app, version))


class LeaseStates:
    """Whether job leases run, asked once per (coordinator, tid) during one recovery or cleanup. A
    lease at the cleaner's own coordinator is asked there; one at another URL through a coordinator
    opened for it (closed at the end). The coordinator's errors propagate: nothing is deleted for a
    job whose driver's liveness cannot be told."""

    def __init__(self, coordinator: Coordinator | None) -> None:
        self._coordinators: dict[str, Coordinator] = {coordinator.url: coordinator} if coordinator else {}
        self._opened: list[Coordinator] = []
        self._states: dict[tuple[str, int], bool] = {}

    def running(self, url: str, tid: int) -> bool:
        key = (url, tid)
        if key not in self._states:
            coordinator = self._coordinators.get(url)
            if coordinator is None:
                coordinator = self._coordinators[url] = coordinator_from_url(url)
                self._opened.append(coordinator)
            self._states[key] = coordinator.status(tid)[0] is TxnState.RUNNING
        return self._states[key]

    def any_running(self, leases: Iterable[Any]) -> bool:
        try:
            pairs = [(str(lease["coordinator"]), int(lease["tid"])) for lease in leases]
        except (KeyError, TypeError, ValueError):
            return True  # unreadable: kept
        return any(self.running(url, tid) for url, tid in pairs)

    def __enter__(self) -> LeaseStates:
        return self

    def __exit__(self, *exc_info: object) -> None:
        for coordinator in self._opened:
            coordinator.close()


TableLike = str | os.PathLike[str] | TableLog
"""How transactions name a table: its directory, or its `TableLog` (which knows where its part
directories live; the engine passes that)."""


def _is_foreign_part(name: str) -> bool:
    """Whether a directory the log does not name is a data part's (another writer's: see the module
    docstring), not a staged part, a temporary or a lightweight UPDATE's patch part."""
    return bool(_PART_DIRECTORY.match(name)) and not name.startswith(("staged_", PATCH_PART_PREFIX))


def table_dir_of(table: TableLike) -> Path | str:
    """The resolved table directory of a path or a `TableLog` (an object-store table's URL)."""
    if isinstance(table, TableLog):
        return table.table_key()
    return Path(table).resolve()

"""TableLog: a table's commit log in `<table>/_mergetree/log/`, and which parts a snapshot sees.

Files (see format_spec/transactions.md):
  table.json         {"table_id": uuid, "coordinator": url}: written once, binds the table
  <tid>.json         one entry per transaction that touched the table:
                     {tid, coordinator, added, removed, csn, commit_time}; csn null = pending
  checkpoint.json    the folded state of older entries: part -> [created, removed, removed_time]
  .lock              flock: shared for readers, exclusive for checkpoint / recover / cleanup

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
import shutil
import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from spark_mergetree.errors import InvalidOptionError, TransactionError
from spark_mergetree.txn.coordinator import Coordinator, TxnState

LOG_DIRECTORY = Path("_mergetree") / "log"
CHECKPOINT_EVERY = 100
FORMAT_VERSION = 1
_ENTRY_NAME = re.compile(r"^(\d{20})\.json$")
_STAGED_NAME = re.compile(r"^(\d{20})\.staged-[0-9a-f]+\.json$")
# Names the engine gives part directories, and the temporary names it writes them under.
_PART_DIRECTORY = re.compile(r"^[0-9A-Za-z-]+_\d+_\d+_\d+(?:_\d+)?$")
_TEMPORARY_DIRECTORY = re.compile(r"^(?:tmp|delete_tmp|staged)[_-]")
# Where a table's part directories live when they are not (only) in the table directory: written by
# the engine for tables on multi-disk storage policies. {"roots": [dirs], "sidecar_suffixes": [...]}
PART_ROOTS_FILE = Path("_mergetree") / "part_roots.json"
# Seconds after which a staged (written, never committed) part directory counts as abandoned.
STAGED_LIFETIME = 3600.0


def fsync_directory(path: Path) -> None:
    descriptor = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def write_file_atomically(path: Path, data: bytes, *, replace: bool = True, sync_directory: bool = True) -> bool:
    """Write, fsync, rename into place, fsync the directory. With replace=False an existing file
    wins and False is returned."""
    temporary = path.with_name(f".{path.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    with open(temporary, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    try:
        if replace:
            os.replace(temporary, path)
        else:
            try:
                os.link(temporary, path)
            except FileExistsError:
                return False
    finally:
        if not replace:
            temporary.unlink(missing_ok=True)
    if sync_directory:
        fsync_directory(path.parent)
    return True


def remove_directory(path: Path) -> None:
    """Remove a part directory: first rename it to a temporary name (one atomic step), then delete."""
    if not path.exists():
        return
    doomed = path.with_name(f"delete_tmp_{path.name}_{uuid.uuid4().hex[:8]}")
    try:
        os.rename(path, doomed)
    except FileNotFoundError:
        return
    shutil.rmtree(doomed, ignore_errors=True)


@dataclass(frozen=True)
class LogEntry:
    tid: int
    coordinator: str
    added: tuple[str, ...]
    removed: tuple[str, ...]
    csn: int | None
    commit_time: float | None = None

    def to_json(self) -> bytes:
        return json.dumps({"format": FORMAT_VERSION, "tid": self.tid, "coordinator": self.coordinator,
                           "added": list(self.added), "removed": list(self.removed),
                           "csn": self.csn, "commit_time": self.commit_time},
                          indent=1).encode()


@dataclass
class PartVersion:
    """A part's life in csn: created (None until its adding entry is seen) and removed."""

    created: int | None = None
    removed: int | None = None
    removed_time: float | None = None

    def visible_at(self, snapshot: int) -> bool:
        return (self.created is not None and self.created <= snapshot
                and (self.removed is None or snapshot < self.removed))


@dataclass
class RecoveryReport:
    finalized: list[int] = field(default_factory=list)
    rolled_back: list[int] = field(default_factory=list)
    deleted_directories: list[str] = field(default_factory=list)


class TableLog:
    """The commit log of one table directory."""

    def __init__(self, table_dir: str | os.PathLike) -> None:
        self.table_dir = Path(table_dir)
        self.directory = self.table_dir / LOG_DIRECTORY
        self._roots: tuple[list[Path], list[str]] | None = None

    # ---- part directories ------------------------------------------------------------------------

    def _part_roots(self) -> tuple[list[Path], list[str]]:
        """(directories holding part directories, suffixes of files kept beside a part directory)."""
        if self._roots is None:
            try:
                raw = json.loads((self.table_dir / PART_ROOTS_FILE).read_bytes())
                roots = [self.table_dir / r for r in raw.get("roots", [])] or [self.table_dir]
                self._roots = (roots, list(raw.get("sidecar_suffixes", [])))
            except FileNotFoundError:
                self._roots = ([self.table_dir], [])
        return self._roots

    def part_directory_exists(self, name: str) -> bool:
        return any((root / name).is_dir() for root in self._part_roots()[0])

    def remove_part_directory(self, name: str) -> None:
        """Delete a part directory on every root (and its sidecar files), each removal atomic."""
        roots, suffixes = self._part_roots()
        for root in roots:
            for suffix in suffixes:
                try:
                    os.unlink(root / (name + suffix))
                except FileNotFoundError:
                    pass
            remove_directory(root / name)

    # ---- files ---------------------------------------------------------------------------------

    def _entry_path(self, tid: int) -> Path:
        return self.directory / f"{tid:020d}.json"

    @contextlib.contextmanager
    def _lock(self, exclusive: bool) -> Iterator[None]:
        if not exclusive and not self.directory.is_dir():
            yield  # nothing to read; do not create directories on a read (read-only tables)
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        descriptor = os.open(self.directory / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
            yield
        finally:
            os.close(descriptor)

    def _read_json(self, path: Path) -> Any:
        try:
            return json.loads(path.read_bytes())
        except ValueError as error:
            raise TransactionError(f"{path}: corrupt log file: {error}") from error

    def identity(self) -> dict[str, str] | None:
        """{"table_id", "coordinator"} once the table has been written through a transaction."""
        path = self.directory / "table.json"
        try:
            return self._read_json(path)
        except FileNotFoundError:
            return None

    def bind(self, coordinator_url: str) -> str:
        """Bind the table to a coordinator (first writer wins); return the table id.

        Raises TransactionError if the table belongs to another coordinator.
        """
        identity = self.identity()
        if identity is None:
            self.directory.mkdir(parents=True, exist_ok=True)
            proposal = {"format": FORMAT_VERSION, "table_id": str(uuid.uuid4()), "coordinator": coordinator_url}
            write_file_atomically(self.directory / "table.json", json.dumps(proposal).encode(), replace=False)
            identity = self.identity()
            assert identity is not None
        if identity["coordinator"] != coordinator_url:
            raise TransactionError(
                f"table {self.table_dir} is coordinated by {identity['coordinator']}, not by "
                f"{coordinator_url}: one transaction cannot span tables of different coordinators")
        return identity["table_id"]

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
                            commit_time=raw.get("commit_time"))
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

    def write_pending(self, tid: int, coordinator_url: str, added: Iterable[str], removed: Iterable[str]) -> None:
        """Durably record what `tid` adds and removes here, before the coordinator commits it."""
        self.bind(coordinator_url)
        entry = LogEntry(tid=tid, coordinator=coordinator_url, added=tuple(added), removed=tuple(removed), csn=None)
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
                         commit_time if commit_time is not None else time.time())
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

    def discard(self, tid: int, delete_added_parts: bool = True) -> None:
        """Roll back a pending entry whose transaction did not commit (and its part directories)."""
        path = self._entry_path(tid)
        try:
            entry = self._parse_entry(path, self._read_json(path))
        except FileNotFoundError:
            return
        if entry.csn is not None:
            raise TransactionError(f"{path}: refusing to discard an entry committed at csn {entry.csn}")
        if delete_added_parts:
            for name in entry.added:
                self.remove_part_directory(name)
        path.unlink(missing_ok=True)
        fsync_directory(self.directory)

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
            floor, versions = self._load_checkpoint()
            entries = self.entries()
        for entry, csn in self._resolve(entries, coordinator, None):
            if csn is not None:
                self._fold(versions, entry, csn)
        return floor, versions

    def snapshot(self, snapshot_csn: int, coordinator: Coordinator, own_tid: int | None = None) -> set[str]:
        """Names of the parts visible at `snapshot_csn` (plus own_tid's pending changes)."""
        with self._lock(exclusive=False):
            floor, versions = self._load_checkpoint()
            entries = self.entries()
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
        if own is not None:
            visible.update(own.added)
            visible.difference_update(own.removed)
        return visible

    # ---- maintenance ---------------------------------------------------------------------------

    def _write_checkpoint(self, floor: int, versions: dict[str, PartVersion], url: str | None) -> None:
        payload = {"format": FORMAT_VERSION, "coordinator": url, "floor": floor,
                   "parts": {name: [v.created, v.removed, v.removed_time]
                             for name, v in sorted(versions.items())}}
        write_file_atomically(self.directory / "checkpoint.json", json.dumps(payload, indent=0).encode())

    def _checkpoint_locked(self, drop: Iterable[str] = (), floor: int | None = None) -> int:
        old_floor, versions = self._load_checkpoint()
        folded = []
        for entry in self.entries():
            if entry.csn is not None:
                self._fold(versions, entry, entry.csn)
                folded.append(entry.tid)
        dropped = set(drop)
        if not folded and not dropped:
            return 0
        for name in dropped:
            versions.pop(name, None)
        identity = self.identity()
        self._write_checkpoint(max(old_floor, floor if floor is not None else old_floor),
                               versions, identity["coordinator"] if identity else None)
        for tid in folded:
            self._entry_path(tid).unlink(missing_ok=True)
        fsync_directory(self.directory)
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

    def _recover_locked(self, coordinator: Coordinator, clock_margin: float) -> RecoveryReport:
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
                    self.remove_part_directory(name)
                    report.deleted_directories.append(name)
            path.unlink(missing_ok=True)
        running = coordinator.running()
        # A running transaction may be between writing a directory and naming it in its entry:
        # spare whatever changed after the oldest one began.
        cutoff = min(info.started for info in running) - clock_margin if running else float("inf")
        candidates = []
        for root in self._part_roots()[0]:
            try:
                candidates.extend(os.scandir(root))
            except FileNotFoundError:
                continue
        for item in candidates:
            if not item.is_dir(follow_symlinks=False) or item.name in named:
                continue
            if not (_PART_DIRECTORY.match(item.name) or _TEMPORARY_DIRECTORY.match(item.name)):
                continue
            try:
                modified = item.stat(follow_symlinks=False).st_mtime
            except FileNotFoundError:
                continue
            if item.name.startswith("staged_"):
                # Staged parts of a running Spark job belong to no transaction yet: only ones
                # abandoned for a long time are garbage.
                if time.time() - modified < STAGED_LIFETIME:
                    continue
            elif modified >= cutoff:
                continue
            self.remove_part_directory(item.name)
            if item.name not in report.deleted_directories:
                report.deleted_directories.append(item.name)
        return report

    def recover(self, coordinator: Coordinator, clock_margin: float = 5.0) -> RecoveryReport:
        """Finalize entries whose transaction committed; roll back aborted or dead ones with the
        directories they added; delete part and tmp_* directories no entry names (sparing those
        younger than the oldest running transaction minus `clock_margin` seconds)."""
        if self.identity() is not None:
            self.bind(coordinator.url)
        with self._lock(exclusive=True):
            return self._recover_locked(coordinator, clock_margin)

    def cleanup(self, coordinator: Coordinator, retention_seconds: float = 0.0) -> list[str]:
        """Delete parts no snapshot can see any more; return their names.

        A part removed at csn R goes when R ≤ every running snapshot and the removal is older than
        `retention_seconds` (time travel to snapshots before R works until then). Recovery runs
        first and every finalized entry is folded into the checkpoint.
        """
        if retention_seconds < 0:
            raise InvalidOptionError(f"retention_seconds must be ≥ 0, got {retention_seconds}")
        if self.identity() is not None:
            self.bind(coordinator.url)
        with self._lock(exclusive=True):
            self._recover_locked(coordinator, clock_margin=5.0)
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
            floor = max((versions[name].removed for name in drop), default=None)
            self._checkpoint_locked(drop=drop, floor=floor)
            for name in drop:
                self.remove_part_directory(name)
            identity = self.identity()
            if drop and identity is not None:
                coordinator.forget_removals(identity["table_id"], drop)
            return sorted(drop)

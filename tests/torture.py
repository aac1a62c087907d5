"""A torture harness: writers, transfers, merges, overwrites, cleanup and readers on the same tables
at once, with random `kill -9` of any of them and (with ZooKeeper) the coordinator stopped and
started, for a bounded time; then every invariant is checked.

Used by tests/engine/test_torture.py (a short run) and benchmarks/torture.py (`--minutes N`).

Tables (in one catalog root, so ClickHouse can open them afterwards):
  db.main  (id UInt64, p UInt8) PARTITION BY p: writers insert unique ids into partitions 0..3;
           the overwriter replaces partition 9 with whole versions of 50 rows
  db.a, db.b  (id UInt64, amount Int64): each transfer inserts -x into a and +x into b in one
           transaction, so sum(a) + sum(b) = 0 in every snapshot

Every process journals what it attempts and how it ended (`b` begun, `a` acknowledged, `f`
failed, `u` outcome unknown) with unbuffered writes, so a kill loses nothing it had said.
Invariants: an acknowledged write is present exactly once; a failed one is absent; a begun or
unknown one is present at most once; partition 9 holds exactly one whole version, never older
than the last acknowledged one; sum(a) + sum(b) = 0 in every snapshot readers took and at the end;
no two visible parts of a partition overlap; `check()` passes; after cleanup no directory is left
that no visible part owns; ClickHouse (chdb) on the same root returns the same rows.

History clients (`clients`): transactions of random reads and writes over db.s0, db.s1 (set objects:
rows (k, v), each transaction appends unique values to keys and reads keys whole) and db.reg
(registers: a partition per key holding a short list, read and overwritten with one more value),
journalled as they happen (begin with tid and snapshot, every read with what it returned, every
write before it is made, the outcome with the csn). After the run the journals become a history
(tests/history.py): unknown outcomes are resolved through the coordinator, a final transaction reads
every table whole, and the checker looks for the anomalies snapshot isolation forbids.

Coordinators: local files, ZooKeeper (stopped and started: `outage_*`), or the object store
(`objstore`: a moto S3 server behind a latency proxy that adds `latency` seconds to every request and
spikes of `spike_latency` at the outage intervals); tables are local in every case.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import random
import signal
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

FORK = multiprocessing.get_context("fork")
VERSION_ROWS = 50
OVERWRITTEN_PARTITION = 9
EXPECTED_ERRORS = ("SerializationError", "TransactionError", "CommitOutcomeUnknownError")


@dataclass
class TortureConfig:
    seconds: float = 20.0
    writers: int = 4
    transfers: int = 1
    readers: int = 1
    kill_interval: tuple[float, float] = (0.4, 1.5)   # seconds between kill -9s
    zookeeper: bool = False
    outage_interval: tuple[float, float] = (4.0, 8.0)  # seconds between coordinator outages
    outage_length: tuple[float, float] = (0.3, 1.5)
    seed: int = 1
    clients: int = 0  # history clients (see the module's docstring)
    log_clients: int = 0  # history clients on the transaction layer alone (`_log_client`)
    overwriters: int = 1
    objstore: bool = False  # the object-store coordinator, behind a latency proxy
    latency: float = 0.005  # seconds added to every object-store request
    spike_latency: float = 0.25  # seconds per request during a latency spike
    max_transactions: int | None = None  # stop the workload early once clients committed or failed this many
    maintenance_pause: tuple[float, float] = (0.0, 0.2)  # seconds between optimize / cleanup calls
    # Coordinator outages the run must see: past `seconds`, it goes on (up to twice as long) until it
    # has, as a restarted ZooKeeper's JVM can take seconds to come back on a loaded machine.
    least_outages: int = 0
    least_transactions: int = 0  # the same for history clients' transactions (committed or failed)


@dataclass
class TortureReport:
    operations: dict[str, int] = field(default_factory=dict)
    kills: int = 0
    outages: int = 0
    invariants_checked: int = 0
    violations: list[str] = field(default_factory=list)
    transactions: int = 0  # history transactions checked (clients' and the final read)
    outcomes: dict[str, int] = field(default_factory=dict)  # ok / fail / unknown
    anomalies: dict[str, int] = field(default_factory=dict)
    history_check: str = ""
    checker_seconds: float = 0.0

    def __str__(self) -> str:
        ops = ", ".join(f"{k} {v}" for k, v in sorted(self.operations.items()))
        history = ""
        if self.transactions:
            outcomes = ", ".join(f"{k} {v}" for k, v in sorted(self.outcomes.items()))
            found = ", ".join(f"{k} {v}" for k, v in sorted(self.anomalies.items())) or "none"
            history = (f"; history: {self.transactions} transactions ({outcomes}), anomalies: {found} "
                       f"(checked in {self.checker_seconds:.1f} s)")
        return (f"operations: {ops}; kill -9: {self.kills}; coordinator outages: {self.outages}; "
                f"invariants checked: {self.invariants_checked}; violations: {len(self.violations)}{history}")


# ------------------------------------------------------------------------------------ workers


class Journal:
    def __init__(self, path: Path) -> None:
        self.descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def write(self, *fields: object) -> None:
        os.write(self.descriptor, (" ".join(str(f) for f in fields) + "\n").encode())


def _coordinator(url: str) -> Any:
    if url.startswith("s3://"):
        from spark_mergetree.txn.object_store import ObjectStoreCoordinator

        return ObjectStoreCoordinator(url)
    if url.startswith("zk://"):
        from spark_mergetree.txn.zookeeper import ZooKeeperCoordinator

        hosts, _, root = url[len("zk://"):].partition("/")
        return ZooKeeperCoordinator(hosts, "/" + root, session_timeout=4.0, operation_timeout=2.0)
    from spark_mergetree.txn import coordinator_from_url

    return coordinator_from_url(url)


Locations = dict[str, tuple[str, str]]  # table -> (data directory, ATTACH statement)


def _open(locations: Locations, name: str, coordinator: Any) -> Any:
    from spark_mergetree.engine.table import MergeTreeTable

    path, statement = locations[name]
    return MergeTreeTable.open(path, create_statement=statement, coordinator=coordinator)


def _describe(error: BaseException) -> str:
    trace = traceback.format_exception(error)
    return " | ".join(line.strip().replace("\n", " ") for line in trace[-6:])


def _classify(error: BaseException) -> str:
    names = {type(error).__name__} | {cls.__name__ for cls in type(error).__mro__}
    if "CommitOutcomeUnknownError" in names:
        return "u"
    if names & set(EXPECTED_ERRORS):
        return "f"
    return "e"


_INCARNATION = 0  # which spawn of the harness this worker process is (history values are unique by it)


def _run_worker(role: str, body: Callable[[Journal, random.Random, Any], None], directory: str, url: str,
                seed: int, incarnation: int = 0) -> None:
    global _INCARNATION
    _INCARNATION = incarnation
    journal = Journal(Path(directory) / f"{role}-{os.getpid()}.journal")
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                coordinator = _coordinator(url)
                break
            except Exception as error:  # noqa: BLE001 - started during an outage: try again
                if _classify(error) == "e" or time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        body(journal, random.Random(seed), coordinator)
    except BaseException:  # noqa: BLE001 - anything unexpected is a finding
        journal.write("e", traceback.format_exc().replace("\n", " | "))


def _writer(root: Locations, journal: Journal, rng: random.Random, coordinator: Any, worker: int) -> None:
    table = _open(root, "main", coordinator)
    counter = 0
    while True:
        first = ((worker * 100_000 + os.getpid() % 100_000) * 1_000_000 + counter) * 100
        count = rng.randint(1, 60)
        counter += 1
        ids = list(range(first, first + count))
        journal.write("b", first, count)
        try:
            table.insert(pa.table({"id": pa.array(ids, pa.uint64()),
                                   "p": pa.array([rng.randint(0, 3)] * count, pa.uint8())}))
        except Exception as error:  # noqa: BLE001
            kind = _classify(error)
            journal.write(kind, first, count, "" if kind != "e" else _describe(error))
            continue
        journal.write("a", first, count)


def _overwriter(root: Locations, journal: Journal, rng: random.Random, coordinator: Any) -> None:
    table = _open(root, "main", coordinator)
    version = int(time.time() * 1000) % 10**9
    while True:
        version += 1
        ids = [OVERWRITTEN_PARTITION * 10**15 + version * 1000 + j for j in range(VERSION_ROWS)]
        journal.write("b", version, VERSION_ROWS)
        try:
            table.overwrite(pa.table({"id": pa.array(ids, pa.uint64()),
                                      "p": pa.array([OVERWRITTEN_PARTITION] * VERSION_ROWS, pa.uint8())}),
                            partition_overwrite_mode="dynamic")
        except Exception as error:  # noqa: BLE001
            kind = _classify(error)
            journal.write(kind, version, VERSION_ROWS, "" if kind != "e" else _describe(error))
            continue
        journal.write("a", version, VERSION_ROWS)
        time.sleep(rng.uniform(0.05, 0.3))


def _transfer(root: Locations, journal: Journal, rng: random.Random, coordinator: Any) -> None:
    from spark_mergetree.txn import Transaction

    a, b = _open(root, "a", coordinator), _open(root, "b", coordinator)
    counter = 0
    while True:
        counter += 1
        ident = (os.getpid() % 100_000) * 1_000_000 + counter
        amount = rng.randint(1, 1000)
        journal.write("b", ident, 1)
        try:
            with Transaction(coordinator) as tx:
                a.insert(pa.table({"id": pa.array([ident], pa.uint64()), "amount": pa.array([-amount], pa.int64())}),
                         transaction=tx)
                b.insert(pa.table({"id": pa.array([ident], pa.uint64()), "amount": pa.array([amount], pa.int64())}),
                         transaction=tx)
        except Exception as error:  # noqa: BLE001
            kind = _classify(error)
            journal.write(kind, ident, 1, "" if kind != "e" else _describe(error))
            continue
        journal.write("a", ident, 1)


def _maintenance(root: Locations, journal: Journal, rng: random.Random, coordinator: Any, job: str,
                 pause: tuple[float, float] = (0.0, 0.2)) -> None:
    tables = [_open(root, name, coordinator) for name in ("main", "a", "b", *SET_TABLES)]
    if job == "cleanup":
        tables.append(_open(root, REGISTER_TABLE, coordinator))
    while True:
        table = rng.choice(tables)
        try:
            if job == "optimize":
                table.optimize(final=rng.random() < 0.2)
            else:
                table.cleanup()
        except Exception as error:  # noqa: BLE001
            kind = _classify(error)
            if kind == "e":
                journal.write("e", table.path.name, _describe(error))
            continue
        journal.write("a", job, 0)
        time.sleep(rng.uniform(*pause))


def _reader(root: Locations, journal: Journal, rng: random.Random, coordinator: Any) -> None:
    from spark_mergetree.txn import Transaction

    main, a, b = (_open(root, name, coordinator) for name in ("main", "a", "b"))
    while True:
        try:
            with Transaction(coordinator) as tx:
                rows = main.to_arrow(["id", "p"], transaction=tx)
                ids = rows.column("id").to_pylist()
                total = sum(a.to_arrow(["amount"], transaction=tx).column("amount").to_pylist()) + sum(
                    b.to_arrow(["amount"], transaction=tx).column("amount").to_pylist())
        except Exception as error:  # noqa: BLE001
            kind = _classify(error)
            if kind == "e":
                journal.write("e", _describe(error))
            continue
        problems = []
        if len(ids) != len(set(ids)):
            problems.append(f"snapshot {tx.snapshot}: {len(ids) - len(set(ids))} duplicate ids")
        versions = {i // 1000 % 10**9 for i, p in zip(ids, rows.column("p").to_pylist()) if p == OVERWRITTEN_PARTITION}
        overwritten = sum(1 for p in rows.column("p").to_pylist() if p == OVERWRITTEN_PARTITION)
        if len(versions) > 1 or (versions and overwritten != VERSION_ROWS):
            problems.append(f"snapshot {tx.snapshot}: partition 9 holds versions {sorted(versions)[:5]}, {overwritten} rows")
        if total != 0:
            problems.append(f"snapshot {tx.snapshot}: sum(a) + sum(b) = {total}")
        for problem in problems:
            journal.write("v", problem)
        journal.write("a", "read", 0)
        time.sleep(rng.uniform(0.0, 0.1))



SET_TABLES = ("s0", "s1")
REGISTER_TABLE = "reg"
REGISTERS = 6
REGISTER_WINDOW = 4  # values a register keeps
EPOCH_SECONDS = 5.0  # set keys move on every epoch, so each key gets a bounded number of values
KEYS_PER_EPOCH = 6


def _set_key(rng: random.Random) -> int:
    return int(time.time() / EPOCH_SECONDS) * KEYS_PER_EPOCH + rng.randrange(KEYS_PER_EPOCH)


def _client(root: Locations, journal: Journal, rng: random.Random, coordinator: Any, incarnation: int) -> None:
    """Random transactions over the set tables and the registers, every step journalled (`H` lines)."""
    from spark_mergetree.txn import Transaction

    tables = {name: _open(root, name, coordinator) for name in (*SET_TABLES, REGISTER_TABLE)}

    def note(*event: object) -> None:
        journal.write("H", json.dumps(event, separators=(",", ":")))

    counter = 0
    while True:
        counter += 1
        local = f"{incarnation}.{counter}"
        values = iter(range((incarnation * 1_000_000 + counter) * 16, (incarnation * 1_000_000 + counter + 1) * 16))
        plan = _plan(rng)
        tx = None
        try:
            tx = Transaction(coordinator)
            note("b", local, tx.tid, tx.snapshot)
            for step in plan:
                kind, name, key = step
                table = tables[name]
                if kind == "r":
                    got = table.to_arrow(["v"], where=f"k = {key}", transaction=tx).column("v").to_pylist()
                    note("op", local, ["r", name, key, sorted(got)])
                elif kind == "a":
                    value = next(values)
                    note("op", local, ["a", name, key, value])
                    table.insert(pa.table({"k": pa.array([key], pa.uint64()), "v": pa.array([value], pa.uint64())}),
                                 transaction=tx)
                else:  # a register: read it, then overwrite it with one more value
                    rows = table.to_arrow(["pos", "v"], where=f"k = {key}", transaction=tx)
                    current = [v for _, v in sorted(zip(rows.column("pos").to_pylist(), rows.column("v").to_pylist()))]
                    note("op", local, ["rr", name, key, current])
                    if kind == "rw":
                        new = ([*current, next(values)])[-REGISTER_WINDOW:]
                        note("op", local, ["w", name, key, new])
                        table.overwrite(pa.table({"k": pa.array([key] * len(new), pa.uint64()),
                                                  "pos": pa.array(range(len(new)), pa.uint64()),
                                                  "v": pa.array(new, pa.uint64())}),
                                        partition_overwrite_mode="dynamic", transaction=tx)
        except Exception as error:  # noqa: BLE001
            kind = _classify(error)
            if tx is not None:
                with contextlib.suppress(Exception):
                    tx.rollback()
            note("f", local, type(error).__name__)
            if kind == "e":
                journal.write("e", _describe(error))
            continue
        try:
            csn = tx.commit()
        except Exception as error:  # noqa: BLE001
            kind = _classify(error)
            note("u" if kind == "u" else "f", local, type(error).__name__)
            if kind == "e":
                journal.write("e", _describe(error))
            continue
        note("c", local, csn)


def _plan(rng: random.Random) -> list[tuple[str, str, int]]:
    """One transaction's steps: (r | a | rr | rw, table, key)."""
    roll = rng.random()
    steps: list[tuple[str, str, int]] = []
    if roll < 0.3:  # read only: keys of both set tables, sometimes a register
        for _ in range(rng.randint(2, 3)):
            steps.append(("r", rng.choice(SET_TABLES), _set_key(rng)))
        if rng.random() < 0.3:
            steps.append(("rr", REGISTER_TABLE, rng.randrange(REGISTERS)))
    elif roll < 0.85:  # reads and appends on the set tables, often the same key in both tables
        for _ in range(rng.randint(1, 3)):
            key, table, what = _set_key(rng), rng.choice(SET_TABLES), rng.random()
            if what < 0.35:
                steps.append(("r", table, key))
            elif what < 0.7:
                steps.append(("a", table, key))
            elif what < 0.9:
                steps += [("a", name, key) for name in SET_TABLES]
            else:
                steps += [("a", table, key), ("a", table, key)]
            if rng.random() < 0.3:
                steps.append(("r", rng.choice(SET_TABLES), key))
    else:  # registers: read-modify-write, sometimes two registers, sometimes with an append
        first = rng.randrange(REGISTERS)
        steps.append(("rw", REGISTER_TABLE, first))
        if rng.random() < 0.25:
            steps.append(("rw", REGISTER_TABLE, (first + rng.randrange(1, REGISTERS)) % REGISTERS))
        if rng.random() < 0.3:
            steps.append(("a", rng.choice(SET_TABLES), _set_key(rng)))
    return steps


LOG_TABLES = {"s0": "l0", "s1": "l1", REGISTER_TABLE: "lreg"}  # what the log clients call the tables
LOG_VALUES = 10**15  # log clients' values: LOG_VALUES + block * 4 + the table's number


def _log_value(name: str, block: int) -> int:
    return LOG_VALUES + block * 4 + sorted(LOG_TABLES.values()).index(name)


def _log_read(tx: Any, directory: Path, name: str, key: int) -> tuple[str | None, list[int]]:
    """(a part of the key, the key's values): set tables hold one part per value, named
    `<key>_<block>_<block>_0`; a register's part holds its list in the marker file."""
    from tests.txn.conftest import MARKER

    prefix = f"{key}_"
    parts = sorted(p for p in tx.visible_parts(directory / name) if p.startswith(prefix))
    if name != LOG_TABLES[REGISTER_TABLE]:
        return None, sorted(_log_value(name, int(p.split("_")[1])) for p in parts)
    values: list[int] = []
    for part in parts:  # one, unless something is wrong: then the list read is garbage
        values += json.loads((directory / name / part / MARKER).read_text())
    return (parts[0] if len(parts) == 1 else None), values


def _log_client(directory: Path, journal: Journal, rng: random.Random, coordinator: Any, incarnation: int) -> None:
    """`_client`'s transactions on the transaction layer alone (much cheaper than real parts, so a
    run reaches many more transactions): each table is a commit log of dummy parts
    (tests/txn/conftest.py `publish`); an append publishes a part whose block number is the value,
    a register write removes the register's part (first remover wins) and publishes the new list."""
    from spark_mergetree.txn import Transaction
    from tests.txn.conftest import publish

    def note(*event: object) -> None:
        journal.write("H", json.dumps(event, separators=(",", ":")))

    counter = 0
    while True:
        counter += 1
        local = f"L{incarnation}.{counter}"
        tx = None
        try:
            tx = Transaction(coordinator)
            note("b", local, tx.tid, tx.snapshot)
            for kind, table, key in _plan(rng):
                name = LOG_TABLES[table]
                if kind == "r":
                    note("op", local, ["r", name, key, _log_read(tx, directory, name, key)[1]])
                elif kind == "a":
                    block = tx.allocate_blocks(directory / name, 1)
                    note("op", local, ["a", name, key, _log_value(name, block)])
                    publish(tx, directory / name, f"{key}_{block}_{block}_0")
                else:
                    part, current = _log_read(tx, directory, name, key)
                    note("op", local, ["rr", name, key, current])
                    if kind == "rw":
                        block = tx.allocate_blocks(directory / name, 1)
                        new = [*current, _log_value(name, block)][-REGISTER_WINDOW:]
                        note("op", local, ["w", name, key, new])
                        if part is not None:
                            tx.remove_parts(directory / name, [part])
                        publish(tx, directory / name, f"{key}_{block}_{block}_0", json.dumps(new))  # type: ignore[arg-type]
        except Exception as error:  # noqa: BLE001
            if tx is not None:
                with contextlib.suppress(Exception):
                    tx.rollback()
            note("f", local, type(error).__name__)
            if _classify(error) == "e":
                journal.write("e", _describe(error))
            continue
        try:
            csn = tx.commit()
        except Exception as error:  # noqa: BLE001
            kind = _classify(error)
            note("u" if kind == "u" else "f", local, type(error).__name__)
            if kind == "e":
                journal.write("e", _describe(error))
            continue
        note("c", local, csn)


def _seed_log_registers(directory: Path, url: str, journals: Path) -> None:
    from spark_mergetree.txn import Transaction
    from tests.txn.conftest import publish

    name = LOG_TABLES[REGISTER_TABLE]
    for table in LOG_TABLES.values():
        (directory / table).mkdir(parents=True, exist_ok=True)
    journal = Journal(journals / "client-logsetup.journal")
    coordinator = _coordinator(url)
    with Transaction(coordinator) as tx:
        journal.write("H", json.dumps(["b", "logsetup", tx.tid, tx.snapshot]))
        for key in range(REGISTERS):
            block = tx.allocate_blocks(directory / name, 1)
            value = [_log_value(name, block)]
            journal.write("H", json.dumps(["op", "logsetup", ["w", name, key, value]]))
            publish(tx, directory / name, f"{key}_{block}_{block}_0", json.dumps(value))  # type: ignore[arg-type]
    journal.write("H", json.dumps(["c", "logsetup", tx.csn]))
    coordinator.close()


def _seed_registers(locations: Locations, url: str, journals: Path) -> None:
    """Give every register a first version (a register written over nothing would conflict with nobody)."""
    from spark_mergetree.txn import Transaction

    journal = Journal(journals / "client-setup.journal")
    coordinator = _coordinator(url)
    table = _open(locations, REGISTER_TABLE, coordinator)
    with Transaction(coordinator) as tx:
        journal.write("H", json.dumps(["b", "setup", tx.tid, tx.snapshot]))
        for key in range(REGISTERS):
            journal.write("H", json.dumps(["op", "setup", ["w", REGISTER_TABLE, key, [key + 1]]]))
            table.overwrite(pa.table({"k": pa.array([key], pa.uint64()), "pos": pa.array([0], pa.uint64()),
                                      "v": pa.array([key + 1], pa.uint64())}),
                            partition_overwrite_mode="dynamic", transaction=tx)
    journal.write("H", json.dumps(["c", "setup", tx.csn]))
    coordinator.close()


def _history(journals: Path, coordinator: Any, locations: Locations, log_tables: Path | None = None) -> list[Any]:
    """The clients' journals as a history; unknown outcomes asked of the coordinator; then a final
    transaction that reads every table whole."""
    from spark_mergetree.txn import Transaction, TxnState
    from tests.history import Txn

    txns: dict[str, Any] = {}
    for path in sorted(journals.glob("*client*.journal")):
        process = path.stem
        for line in path.read_text().splitlines():
            if not line.startswith("H "):
                continue
            event = json.loads(line[2:])
            local = event[1]
            if event[0] == "b":
                txns[local] = Txn(len(txns), process, [], "unknown", tid=event[2], snapshot=event[3])
                continue
            txn = txns.get(local)
            if txn is None:
                continue
            if event[0] == "op":
                op = event[2]
                txn.ops.append((op[0], op[1], op[2], tuple(op[3]) if isinstance(op[3], list) else op[3]))
            elif event[0] == "c":
                txn.outcome, txn.csn = "ok", event[2]
            elif event[0] == "f":
                txn.outcome = "fail"
            elif event[0] == "u":
                txn.outcome = "unknown"
    history = list(txns.values())
    for txn in history:
        if txn.outcome == "unknown" and txn.tid is not None:
            try:
                state, csn = coordinator.status(txn.tid)
            except Exception:  # noqa: BLE001 - stays unknown
                continue
            txn.resolved = "committed" if state is TxnState.COMMITTED else (
                "aborted" if state is TxnState.ABORTED else None)
            if csn is not None:
                txn.csn = csn
    tables = {name: _open(locations, name, coordinator) for name in (*SET_TABLES, REGISTER_TABLE)}
    keys = {(op[1], op[2]) for txn in history for op in txn.ops}
    with Transaction(coordinator) as tx:
        final = Txn(len(history), "final", [], "ok", tid=tx.tid, snapshot=tx.snapshot, final=True)
        for name in SET_TABLES:
            rows = tables[name].to_arrow(["k", "v"], transaction=tx)
            per_key: dict[int, list[int]] = {}
            for k, v in zip(rows.column("k").to_pylist(), rows.column("v").to_pylist()):
                per_key.setdefault(k, []).append(v)
            for key in sorted(set(per_key) | {k for t, k in keys if t == name}):
                final.ops.append(("r", name, key, tuple(sorted(per_key.get(key, ())))))
        rows = tables[REGISTER_TABLE].to_arrow(["k", "pos", "v"], transaction=tx)
        registers: dict[int, list[tuple[int, int]]] = {}
        for k, pos, v in zip(*(rows.column(c).to_pylist() for c in ("k", "pos", "v"))):
            registers.setdefault(k, []).append((pos, v))
        for key in sorted(registers):
            final.ops.append(("rr", REGISTER_TABLE, key, tuple(v for _, v in sorted(registers[key]))))
        if log_tables is not None:
            for table, name in LOG_TABLES.items():
                present = {int(p.split("_")[0]) for p in tx.visible_parts(log_tables / name)}
                for key in sorted(present | {k for t, k in keys if t == name}):
                    values = _log_read(tx, log_tables, name, key)[1]
                    final.ops.append(("rr" if table == REGISTER_TABLE else "r", name, key, tuple(values)))
    history.append(final)
    return history


def _clients_done(journals: Path, seen: dict[Path, tuple[int, int]]) -> int:
    """Client transactions that ended (committed, failed or unknown) so far; `seen` keeps, per
    journal, how far it was read and what it held, so each call reads only what was added."""
    for path in journals.glob("*client*.journal"):
        offset, done = seen.get(path, (0, 0))
        with open(path, "rb") as handle:
            handle.seek(offset)
            data = handle.read()
        end = data.rfind(b"\n") + 1  # a line being written is counted next time
        data = data[:end]
        seen[path] = (offset + end, done + data.count(b'H ["c"') + data.count(b'H ["f"') + data.count(b'H ["u"'))
    return sum(done for _, done in seen.values())


# ------------------------------------------------------------------------------------ harness


@contextlib.contextmanager
def _coordinator_service(config: TortureConfig, directory: Path) -> Iterator[tuple[str, Any]]:
    if config.objstore:
        with _object_store_service(config) as service:
            yield service
        return
    if not config.zookeeper:
        yield (directory / "coordinator").resolve().as_uri(), None
        return
    from spark_mergetree.txn.zookeeper import ZooKeeperCoordinator
    from tests.zookeeper_server import ZooKeeperServer

    server = ZooKeeperServer(directory / "zookeeper").start()
    try:
        yield ZooKeeperCoordinator.url_for(server.hosts, "/torture"), server
    finally:
        server.close()


@contextlib.contextmanager
def _object_store_service(config: TortureConfig) -> Iterator[tuple[str, Any]]:
    """A moto S3 server behind a latency proxy; the object-store coordinator's URL. Every process of
    the run (forked after this) reaches the server through the proxy (AWS_ENDPOINT_URL)."""
    from spark_mergetree.txn.object_store import ObjectStoreCoordinator
    from tests.latency_proxy import LatencyProxy
    from tests.s3_server import S3Server

    server = S3Server().start()
    saved: dict[str, str | None] = {}
    proxy = None
    try:
        proxy = LatencyProxy(server.endpoint, delay=config.latency, lifetime=config.seconds + 900,
                             max_requests=10**9)
        environment = dict(server.environment(), AWS_ENDPOINT_URL=proxy.endpoint)
        saved = {name: os.environ.get(name) for name in environment}
        os.environ.update(environment)
        bucket = server.bucket()
        yield ObjectStoreCoordinator.url_for(f"s3://{bucket}/torture", lease=3.0), proxy
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        if proxy is not None:
            proxy.close()
        server.close()


def _setup(root: Path, url: str) -> Locations:
    from spark_mergetree.catalog import Catalog

    catalog = Catalog(root)
    catalog.create_database("db")
    settings = {"coordinator": url, "old_parts_lifetime": 0, "merge_parts_threshold": 6}
    catalog.create_table("db.main", [("id", "UInt64"), ("p", "UInt8")], "id", partition_by="p",
                         settings=settings)
    for name in ("a", "b"):
        catalog.create_table(f"db.{name}", [("id", "UInt64"), ("amount", "Int64")], "id", settings=settings)
    for name in SET_TABLES:
        catalog.create_table(f"db.{name}", [("k", "UInt64"), ("v", "UInt64")], "(k, v)", settings=settings)
    catalog.create_table(f"db.{REGISTER_TABLE}", [("k", "UInt64"), ("pos", "UInt64"), ("v", "UInt64")], "pos",
                         partition_by="k", settings=settings)
    out = {}
    for name in ("main", "a", "b", *SET_TABLES, REGISTER_TABLE):
        info = catalog.table_info(f"db.{name}")
        out[name] = (str(info.data_path), info.statement)
    return out


def run_torture(directory: Path, config: TortureConfig, log: Callable[[str], None] = lambda _: None) -> TortureReport:
    """Run the workload in `directory` (made empty by the caller) and check every invariant."""
    directory.mkdir(parents=True, exist_ok=True)
    journals = directory / "journals"
    journals.mkdir()
    root = directory / "root"
    report = TortureReport()
    rng = random.Random(config.seed)
    with _coordinator_service(config, directory) as (url, server):
        locations = _setup(root, url)
        if config.clients:
            _seed_registers(locations, url, journals)
        roles: dict[str, Callable[[Journal, random.Random, Any], None]] = {}
        if config.log_clients:
            _seed_log_registers(directory / "logs", url, journals)
        for k in range(config.log_clients):
            roles[f"logclient{k}"] = lambda j, r, c: _log_client(directory / "logs", j, r, c, _INCARNATION)
        for k in range(config.clients):
            roles[f"client{k}"] = lambda j, r, c: _client(locations, j, r, c, _INCARNATION)
        for k in range(config.writers):
            roles[f"writer{k}"] = lambda j, r, c, k=k: _writer(locations, j, r, c, k)
        for k in range(config.transfers):
            roles[f"transfer{k}"] = lambda j, r, c: _transfer(locations, j, r, c)
        for k in range(config.readers):
            roles[f"reader{k}"] = lambda j, r, c: _reader(locations, j, r, c)
        if config.overwriters:
            roles["overwriter"] = lambda j, r, c: _overwriter(locations, j, r, c)
        roles["optimizer"] = lambda j, r, c: _maintenance(locations, j, r, c, "optimize", config.maintenance_pause)
        roles["cleaner"] = lambda j, r, c: _maintenance(locations, j, r, c, "cleanup", config.maintenance_pause)

        spawned = [0]

        def spawn(role: str) -> multiprocessing.process.BaseProcess:
            spawned[0] += 1
            process = FORK.Process(target=_run_worker, args=(role, roles[role], str(journals), url,
                                                             rng.randrange(1 << 30), spawned[0]), daemon=True)
            process.start()
            return process

        processes = {role: spawn(role) for role in roles}
        deadline = time.monotonic() + config.seconds
        next_kill = time.monotonic() + rng.uniform(*config.kill_interval)
        next_outage = time.monotonic() + rng.uniform(*config.outage_interval)
        next_count = time.monotonic() + 2.0
        counted: dict[Path, tuple[int, int]] = {}
        done = 0
        try:
            while True:
                time.sleep(0.05)
                now = time.monotonic()
                if (config.max_transactions is not None or config.least_transactions) and now >= next_count:
                    next_count = now + 2.0
                    done = _clients_done(journals, counted)
                    if (config.max_transactions is not None and done >= config.max_transactions
                            and report.outages >= config.least_outages):
                        break
                if now >= deadline and ((report.outages >= config.least_outages and done >= config.least_transactions)
                                        or now >= deadline + config.seconds):
                    break
                if now >= next_kill:
                    victim = rng.choice([r for r in roles if not r.startswith("reader")])
                    os.kill(processes[victim].pid, signal.SIGKILL)
                    processes[victim].join()
                    processes[victim] = spawn(victim)
                    report.kills += 1
                    next_kill = now + rng.uniform(*config.kill_interval)
                if server is not None and now >= next_outage:
                    if config.objstore:  # a latency spike: every request slow for a while
                        server.delay = config.spike_latency
                        time.sleep(rng.uniform(*config.outage_length))
                        server.delay = config.latency
                    else:
                        server.stop()
                        time.sleep(rng.uniform(*config.outage_length))
                        server.start()
                    report.outages += 1
                    next_outage = time.monotonic() + rng.uniform(*config.outage_interval)
        finally:
            for process in processes.values():
                if process.is_alive():
                    os.kill(process.pid, signal.SIGKILL)
                process.join()
        log(f"workload done: {report.kills} kills, {report.outages} outages; verifying")
        _verify(root, locations, url, journals, report, history_path=directory / "history.jsonl"
                if config.clients or config.log_clients else None, log_tables=directory / "logs"
                if config.log_clients else None)
    return report


def _journal_lines(journals: Path, prefix: str) -> list[list[str]]:
    lines = []
    for path in sorted(journals.glob(f"{prefix}*.journal")):
        for line in path.read_text().splitlines():
            fields = line.split(" ", 3)
            if fields and fields[0] in "bafuev" and len(fields[0]) == 1:
                lines.append(fields)
    return lines


def _outcomes(lines: list[list[str]]) -> dict[int, str]:
    """key -> last recorded state (b, a, f, u) of each attempt."""
    states: dict[int, str] = {}
    for fields in lines:
        if fields[0] in "bafu" and len(fields) >= 2 and fields[1].isdigit():
            states[int(fields[1])] = fields[0]
    return states


def _verify(root: Path, locations: Locations, url: str, journals: Path, report: TortureReport,
            history_path: Path | None = None, log_tables: Path | None = None) -> None:
    from spark_mergetree.format.part_info import PartInfo
    from tests.catalog.chdb_runner import rows as tsv_rows
    from tests.catalog.chdb_runner import run_chdb

    violations = report.violations
    for fields in _journal_lines(journals, ""):
        if fields[0] in "ev":
            violations.append(" ".join(fields))
    for role in ("writer", "transfer", "overwriter", "reader", "optimizer", "cleaner"):
        report.operations[role] = sum(1 for f in _journal_lines(journals, role) if f[0] == "a")

    coordinator = _coordinator(url)
    deadline = time.monotonic() + 60
    while coordinator.running() and time.monotonic() < deadline:
        time.sleep(0.2)  # sessions of killed processes expire
    if history_path is not None:
        _check_history(journals, coordinator, locations, history_path, report, log_tables)
    tables = {name: _open(locations, name, coordinator) for name in ("main", "a", "b")}
    try:
        for table in tables.values():
            table.cleanup()
        for name in (*SET_TABLES, REGISTER_TABLE):  # ClickHouse (below) loads these tables too
            _open(locations, name, coordinator).cleanup()
        main_rows = tables["main"].to_arrow(["id", "p"])
    except Exception as error:  # noqa: BLE001 - an unreadable table is the finding
        violations.append(f"tables unreadable after the run: {error!r}")
        return
    ids = main_rows.column("id").to_pylist()
    present: dict[int, int] = {}
    for i in ids:
        present[i] = present.get(i, 0) + 1
    report.invariants_checked += 1
    duplicates = [i for i, n in present.items() if n > 1]
    if duplicates:
        violations.append(f"main: {len(duplicates)} ids present more than once, e.g. {duplicates[:3]}")

    writes = _journal_lines(journals, "writer")
    counts = {int(f[1]): int(f[2]) for f in writes if f[0] == "b"}
    for first, state in _outcomes(writes).items():
        block = range(first, first + counts[first])
        found = sum(1 for i in block if i in present)
        report.invariants_checked += 1
        if state == "a" and found != len(block):
            violations.append(f"main: acknowledged insert {first}+{len(block)}: {found} rows present")
        elif state == "f" and found:
            violations.append(f"main: failed insert {first}+{len(block)}: {found} rows visible")
        elif state in "bu" and found not in (0, len(block)):
            violations.append(f"main: insert {first}+{len(block)} with unknown outcome is partly visible ({found})")
    begun = {first + j for first, n in counts.items() for j in range(n)}
    strays = [i for i in present if i not in begun and i // 10**15 != OVERWRITTEN_PARTITION]
    if strays:
        violations.append(f"main: {len(strays)} ids nobody wrote, e.g. {strays[:3]}")

    versions = _outcomes(_journal_lines(journals, "overwriter"))
    seen = {i // 1000 % 10**9 for i in present if i // 10**15 == OVERWRITTEN_PARTITION}
    overwritten_rows = sum(1 for i in present if i // 10**15 == OVERWRITTEN_PARTITION)
    acknowledged = [v for v, s in versions.items() if s == "a"]
    report.invariants_checked += 1
    if len(seen) > 1 or (seen and overwritten_rows != VERSION_ROWS):
        violations.append(f"main: partition 9 holds versions {sorted(seen)}, {overwritten_rows} rows")
    elif acknowledged and (not seen or min(seen) < max(acknowledged)):
        violations.append(f"main: partition 9 holds {sorted(seen)}, older than acknowledged {max(acknowledged)}")
    elif seen and versions.get(min(seen)) == "f":
        violations.append(f"main: partition 9 holds version {min(seen)} whose overwrite failed")

    sums = {name: tables[name].to_arrow(["id", "amount"]) for name in ("a", "b")}
    report.invariants_checked += 1
    total = sum(sums["a"].column("amount").to_pylist()) + sum(sums["b"].column("amount").to_pylist())
    if total != 0:
        violations.append(f"transfers: sum(a) + sum(b) = {total}")
    ids_a, ids_b = (set(sums[n].column("id").to_pylist()) for n in ("a", "b"))
    for ident, state in _outcomes(_journal_lines(journals, "transfer")).items():
        report.invariants_checked += 1
        if (ident in ids_a) != (ident in ids_b):
            violations.append(f"transfers: {ident} is in only one table")
        if state == "a" and ident not in ids_a:
            violations.append(f"transfers: acknowledged transfer {ident} missing")
        if state == "f" and ident in ids_a:
            violations.append(f"transfers: failed transfer {ident} visible")

    for name, table in tables.items():
        parts = [p.name for p in table.parts()]
        infos = [PartInfo.parse(p) for p in parts]
        report.invariants_checked += 3
        for x in infos:
            for y in infos:
                if x != y and x.partition_id == y.partition_id and not (
                        x.max_block < y.min_block or y.max_block < x.min_block):
                    violations.append(f"{name}: visible parts {x.name} and {y.name} overlap")
        check = table.check()
        if not check.ok:
            violations.append(f"{name}: check() found {check.problems[:3]}")
        on_disk = {e.name for e in os.scandir(table.path) if e.is_dir() and e.name not in ("_mergetree", "detached")}
        if on_disk != set(parts):
            violations.append(f"{name}: after cleanup, directories no visible part owns: {sorted(on_disk - set(parts))[:5]}"
                              + (f"; missing: {sorted(set(parts) - on_disk)[:5]}" if set(parts) - on_disk else ""))

    clickhouse_main, clickhouse_a, clickhouse_b = run_chdb(
        root, "SELECT id FROM db.main ORDER BY id", "SELECT id, amount FROM db.a ORDER BY id",
        "SELECT id, amount FROM db.b ORDER BY id")
    report.invariants_checked += 3
    if [int(r[0]) for r in tsv_rows(clickhouse_main)] != sorted(ids):
        violations.append("ClickHouse returns other rows than we do for db.main")
    for name, text in (("a", clickhouse_a), ("b", clickhouse_b)):
        ours = sorted(zip(sums[name].column("id").to_pylist(), sums[name].column("amount").to_pylist()))
        if [(int(r[0]), int(r[1])) for r in tsv_rows(text)] != ours:
            violations.append(f"ClickHouse returns other rows than we do for db.{name}")


def _check_history(journals: Path, coordinator: Any, locations: Locations, path: Path,
                   report: TortureReport, log_tables: Path | None = None) -> None:
    from tests.history import check, save

    try:
        history = _history(journals, coordinator, locations, log_tables)
    except Exception as error:  # noqa: BLE001 - an unreadable table is the finding
        report.violations.append(f"history: the final read failed: {_describe(error)}")
        return
    save(history, path)
    started = time.monotonic()
    result = check(history)
    report.checker_seconds = time.monotonic() - started
    report.transactions = len(history)
    for txn in history:
        report.outcomes[txn.outcome] = report.outcomes.get(txn.outcome, 0) + 1
    report.anomalies = {kind: count for kind, count in result.counts.items() if count}
    report.history_check = result.summary()
    report.invariants_checked += 1
    for examples in result.examples.values():
        report.violations.extend(f"history: {anomaly}" for anomaly in examples)
    # A tid names one transaction: two that got the same one share its log entries (a local log's
    # <tid>.json) and its fate, which the checker can only report as other anomalies.
    holders: dict[int, list[str]] = {}
    for txn in history:
        if txn.tid is not None:
            holders.setdefault(txn.tid, []).append(txn.process)
    for tid, processes in sorted(holders.items()):
        if len(processes) > 1:
            report.violations.append(f"history: the coordinator gave tid {tid} to {len(processes)} "
                                     f"transactions ({', '.join(processes)})")

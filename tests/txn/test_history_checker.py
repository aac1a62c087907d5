"""The history checker (tests/history.py) before it is trusted: clean histories made by an in-memory
snapshot-isolation database give no anomaly, each planted anomaly is found under its name (with the
recorded timestamps and without them), and 100,000 transactions check in well under a minute."""

from __future__ import annotations

import bisect
import dataclasses
import random
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.history import Txn, check, load, save

SETS = ("s0", "s1")


def simulate(count: int, seed: int, clients: int = 8, registers: int = 4) -> list[Txn]:
    """A history of `count` transactions from a model snapshot-isolation database: `clients`
    transactions open at once, each reading at its snapshot plus its own writes, first committer
    wins on registers, some aborts and some unknown outcomes (resolved afterwards, as the torture
    harness does through the coordinator), then a final read of everything."""
    rng = random.Random(seed)
    clock = 1
    sets: dict[tuple, list[tuple[int, int]]] = {}  # object -> [(csn, value)]
    versions: dict[tuple, list[tuple[int, tuple]]] = {}  # register -> [(csn, list)]
    setup = Txn(0, "setup", [], "ok", tid=1, snapshot=0, csn=1)
    for r in range(registers):
        versions[("reg", r)] = [(1, (r + 1,))]
        setup.ops.append(("w", "reg", r, (r + 1,)))
    history = [setup]
    value = 1000
    running: list[dict] = []

    def read_set(state: dict, obj: tuple) -> tuple:
        committed = [v for c, v in sets.get(obj, ()) if c <= state["txn"].snapshot]
        return tuple(sorted(committed + state["own"].get(obj, [])))

    def read_register(state: dict, obj: tuple) -> tuple:
        if obj in state["regs"]:
            return state["regs"][obj]
        history_of = versions[obj]
        return history_of[bisect.bisect_right(history_of, (state["txn"].snapshot, (2**63,))) - 1][1]

    while len(history) + len(running) < count or running:
        if (not running or (len(running) < clients and rng.random() < 0.4)) and len(history) + len(running) < count:
            clock += 1
            txn = Txn(len(history) + len(running), f"c{rng.randrange(clients)}", [], "ok", tid=clock, snapshot=clock - 1)
            window = len(history) // 150
            plan = []
            for _ in range(rng.randint(1, 4)):
                what = rng.random()
                key = window * 5 + rng.randrange(5)
                if what < 0.4:
                    plan.append(("r", rng.choice(SETS), key))
                elif what < 0.7:
                    plan.append(("a", rng.choice(SETS), key))
                elif what < 0.85:
                    plan += [("a", name, key) for name in SETS]
                else:
                    plan.append(("rw", "reg", rng.randrange(registers)))
            running.append({"txn": txn, "plan": plan, "own": {}, "regs": {}})
            continue
        state = running[rng.randrange(len(running))]
        txn = state["txn"]
        if state["plan"]:
            kind, table, key = state["plan"].pop(0)
            obj = (table, key)
            if kind == "r":
                txn.ops.append(("r", table, key, read_set(state, obj)))
            elif kind == "a":
                value += 1
                state["own"].setdefault(obj, []).append(value)
                txn.ops.append(("a", table, key, value))
            else:
                current = read_register(state, obj)
                txn.ops.append(("rr", table, key, current))
                value += 1
                new = (*current, value)[-4:]
                state["regs"][obj] = new
                txn.ops.append(("w", table, key, new))
            continue
        running.remove(state)
        history.append(txn)
        txn.index = len(history) - 1
        writes = state["own"] or state["regs"]
        conflict = any(versions[obj][-1][0] > txn.snapshot for obj in state["regs"])
        roll = rng.random()
        if conflict or roll < 0.03:
            txn.outcome = "fail"
            continue
        if not writes:
            continue  # read only: ok, no csn
        commits = roll >= 0.06 or rng.random() < 0.5
        if roll < 0.06:
            txn.outcome = "unknown"
            txn.resolved = "committed" if commits else rng.choice(["aborted", None])
        if not commits:
            continue
        clock += 1
        txn.csn = clock
        for obj, values in state["own"].items():
            sets.setdefault(obj, []).extend((clock, v) for v in values)
        for obj, values in state["regs"].items():
            versions[obj].append((clock, values))
    for i, txn in enumerate(history):
        txn.index = i
    final = Txn(len(history), "final", [], "ok", tid=clock + 1, snapshot=clock, final=True)
    for obj in sorted(sets):
        final.ops.append(("r", obj[0], obj[1], tuple(sorted(v for _, v in sets[obj]))))
    for obj in sorted(versions):
        final.ops.append(("rr", obj[0], obj[1], versions[obj][-1][1]))
    history.append(final)
    return history


# ------------------------------------------------------------------------------ planted anomalies


def _add(history: list[Txn], ops: list[tuple], outcome: str = "ok", snapshot: int | None = None,
         csn: int | None = None, final: bool = False) -> Txn:
    txn = Txn(len(history), "planted", ops, outcome, snapshot=snapshot, csn=csn, final=final)
    history.append(txn)
    return txn


def _clock(history: list[Txn]) -> int:
    return max(max(t.snapshot or 0, t.csn or 0) for t in history) + 10


def plant_g0(history: list[Txn]) -> None:
    """Two registers whose version orders disagree: x has T1 before T2, y has T2 before T1."""
    c = _clock(history)
    _add(history, [("w", "preg", 1, (101,)), ("w", "preg", 2, (201,))], snapshot=c, csn=c + 1)
    _add(history, [("rr", "preg", 1, (101,)), ("w", "preg", 1, (101, 102)),
                   ("rr", "preg", 2, (201, 202)), ("w", "preg", 2, (201, 202, 203))], snapshot=c + 2, csn=c + 5)
    _add(history, [("rr", "preg", 1, (101, 102)), ("w", "preg", 1, (101, 102, 103)),
                   ("rr", "preg", 2, (201,)), ("w", "preg", 2, (201, 202))], snapshot=c + 3, csn=c + 4)


def plant_g1a(history: list[Txn]) -> None:
    c = _clock(history)
    _add(history, [("a", "p0", 1, 3001)], outcome="fail", snapshot=c)
    _add(history, [("r", "p0", 1, (3001,))], snapshot=c + 2)


def plant_g1b(history: list[Txn]) -> None:
    c = _clock(history)
    _add(history, [("a", "p0", 2, 3101), ("a", "p0", 2, 3102)], snapshot=c, csn=c + 1)
    _add(history, [("r", "p0", 2, (3101,))], snapshot=c + 2)


def plant_g1c(history: list[Txn]) -> None:
    c = _clock(history)
    _add(history, [("a", "p0", 3, 3201), ("r", "p1", 3, (3202,))], snapshot=c, csn=c + 2)
    _add(history, [("r", "p0", 3, (3201,)), ("a", "p1", 3, 3202)], snapshot=c + 1, csn=c + 3)


def plant_lost_update(history: list[Txn]) -> None:
    c = _clock(history)
    _add(history, [("w", "preg", 3, (4001,))], snapshot=c, csn=c + 1)
    _add(history, [("rr", "preg", 3, (4001,)), ("w", "preg", 3, (4001, 4002))], snapshot=c + 1, csn=c + 3)
    _add(history, [("rr", "preg", 3, (4001,)), ("w", "preg", 3, (4001, 4003))], snapshot=c + 2, csn=c + 4)


def plant_read_skew(history: list[Txn]) -> None:
    """R misses W1's append to p0 yet sees W2's append to p1, and W2 had read W1's append."""
    c = _clock(history)
    _add(history, [("a", "p0", 5, 5001)], snapshot=c, csn=c + 1)
    _add(history, [("r", "p0", 5, (5001,)), ("a", "p1", 5, 5002)], snapshot=c + 1, csn=c + 2)
    _add(history, [("r", "p0", 5, ()), ("r", "p1", 5, (5002,))], snapshot=c + 3)


def plant_fractured_read(history: list[Txn]) -> None:
    c = _clock(history)
    _add(history, [("a", "p0", 6, 6001), ("a", "p1", 6, 6002)], snapshot=c, csn=c + 1)
    _add(history, [("r", "p0", 6, (6001,)), ("r", "p1", 6, ())], snapshot=c + 2)


def plant_g_single(history: list[Txn]) -> None:
    """As read skew, inside one table."""
    c = _clock(history)
    _add(history, [("a", "p0", 7, 7001)], snapshot=c, csn=c + 1)
    _add(history, [("r", "p0", 7, (7001,)), ("a", "p0", 8, 7002)], snapshot=c + 1, csn=c + 2)
    _add(history, [("r", "p0", 7, ()), ("r", "p0", 8, (7002,))], snapshot=c + 3)


def plant_lost_write(history: list[Txn]) -> None:
    c = _clock(history)
    _add(history, [("a", "p0", 9, 8001)], snapshot=c, csn=c + 1)
    _add(history, [("r", "p0", 9, ())], snapshot=c + 2, final=True)


def plant_internal(history: list[Txn]) -> None:
    c = _clock(history)
    _add(history, [("a", "p0", 10, 9001), ("r", "p0", 10, ())], snapshot=c, csn=c + 1)


def plant_incompatible_order(history: list[Txn]) -> None:
    c = _clock(history)
    _add(history, [("a", "p0", 11, 9101)], snapshot=c, csn=c + 1)
    _add(history, [("a", "p0", 11, 9102)], snapshot=c, csn=c + 2)
    _add(history, [("r", "p0", 11, (9101,))], snapshot=c + 3)
    _add(history, [("r", "p0", 11, (9102,))], snapshot=c + 3)


def plant_aborted_register_read(history: list[Txn]) -> None:
    c = _clock(history)
    _add(history, [("w", "preg", 4, (9201,))], snapshot=c, csn=c + 1)
    _add(history, [("rr", "preg", 4, (9201,)), ("w", "preg", 4, (9201, 9202))], outcome="unknown", snapshot=c + 1)
    history[-1].resolved = "aborted"
    _add(history, [("rr", "preg", 4, (9201, 9202))], snapshot=c + 3)


PLANTED: dict[str, Callable[[list[Txn]], None]] = {
    "G0": plant_g0, "G1a": plant_g1a, "G1b": plant_g1b, "G1c": plant_g1c, "lost-update": plant_lost_update,
    "read-skew": plant_read_skew, "fractured-read": plant_fractured_read, "G-single": plant_g_single,
    "lost-write": plant_lost_write, "internal": plant_internal, "incompatible-order": plant_incompatible_order,
}


def _without_timestamps(history: list[Txn]) -> list[Txn]:
    return [dataclasses.replace(t, snapshot=None, csn=None, ops=list(t.ops)) for t in history]


def test_clean_histories_have_no_anomalies() -> None:
    for seed in range(4):
        history = simulate(2000, seed)
        result = check(history)
        assert result.counts == {}, result.report()
        assert result.stats["certificate"] == "held"
        assert sum(t.outcome == "fail" for t in history) > 20
        assert sum(t.outcome == "unknown" for t in history) > 10
        assert result.stats["edges"] > 2000


def test_a_clean_history_without_timestamps_has_no_anomalies() -> None:
    """Without timestamps the checker searches every read-write edge inside a cycle of the whole
    graph (write skew makes such cycles; snapshot isolation allows them)."""
    result = check(_without_timestamps(simulate(600, 7)))
    assert result.counts == {}, result.report()
    assert result.stats["certificate"].startswith("failed")
    assert result.stats["searched"] > 0


@pytest.mark.parametrize("timestamps", [True, False], ids=["timestamps", "no-timestamps"])
@pytest.mark.parametrize("kind", sorted(PLANTED))
def test_each_planted_anomaly_is_found(kind: str, timestamps: bool) -> None:
    history = simulate(400, 3)
    PLANTED[kind](history)
    if not timestamps:
        history = _without_timestamps(history)
    result = check(history)
    assert kind in result.kinds(), result.report()
    assert result.kinds() <= {kind} | SECONDARY.get(kind, set()), result.report()
    planted = {t.index for t in history if t.process == "planted"}
    for anomaly in result.examples[kind]:
        assert set(anomaly.txns) & planted, anomaly


#: What a planted anomaly also is, by definition: G0's transactions read the registers they write, so
#: each saw the other's write of one register and missed its write of the other (a fractured read).
SECONDARY: dict[str, set[str]] = {"G0": {"fractured-read"}}


def test_an_aborted_writers_register_version_read_is_g1a() -> None:
    history = simulate(200, 4)
    plant_aborted_register_read(history)
    assert check(history).kinds() == {"G1a"}


def test_every_planted_anomaly_at_once_in_one_history() -> None:
    history = simulate(1000, 5)
    for plant in PLANTED.values():
        plant(history)
    assert check(history).kinds() == set(PLANTED)


def test_unknown_outcomes_count_as_committed_once_read() -> None:
    """A writer whose outcome nobody learnt, whose value was read: it committed (no G1a); one that
    the coordinator says aborted: G1a."""
    c = 100
    history = [Txn(0, "w", [("a", "p0", 1, 11)], "unknown", snapshot=c, csn=None),
               Txn(1, "r", [("r", "p0", 1, (11,))], "ok", snapshot=c + 2)]
    assert check(history).counts == {}
    history[0].resolved = "aborted"
    assert check(history).kinds() == {"G1a"}


def test_histories_round_trip_through_json(tmp_path: Path) -> None:
    history = simulate(300, 6)
    plant_lost_update(history)
    save(history, tmp_path / "h.jsonl")
    again = load(tmp_path / "h.jsonl")
    assert [t.to_json() for t in again] == [t.to_json() for t in history]
    assert check(again).kinds() == {"lost-update"}


@pytest.mark.long
def test_a_clean_history_of_100000_transactions_is_checked_clean() -> None:
    """The checker's answer on a history the size of a long run (its speed: benchmarks/history_check.py)."""
    history = simulate(100_000, 9)
    result = check(history)
    assert result.counts == {}, result.report()
    assert result.stats["transactions"] == 100_001 and result.stats["edges"] > 500_000

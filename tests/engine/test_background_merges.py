"""Background merges: off the commit path, the simple selector, the insert back-pressure, several
writing processes, kill -9 of merging processes, and the merge daemon."""

from __future__ import annotations

import multiprocessing
import os
import random
import select
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path

import pytest

from spark_mergetree import MergeTreeTable, Transaction
from spark_mergetree.engine import background
from spark_mergetree.engine.merge import PartStats, SelectorSettings, select_automatic
from spark_mergetree.errors import TooManyPartsError
from spark_mergetree.format.part_info import PartInfo
from tests.engine.test_concurrency import COLUMNS, batch, directories, ids_of

pytestmark = pytest.mark.long  # a minute or more: scheduled early (tests/conftest.py)

SPAWN = multiprocessing.get_context("spawn")
REPO = Path(__file__).resolve().parents[2]


def per_partition(table: MergeTreeTable) -> dict[str, int]:
    counts: dict[str, int] = {}
    for part in table.parts():
        counts[part.partition_id] = counts.get(part.partition_id, 0) + 1
    return counts


# ------------------------------------------------------------------ the selector


def _parts(sizes: list[int], partition: str = "all", first: int = 1) -> dict[str, PartStats]:
    return {PartInfo(partition, first + n, first + n, 0).name: PartStats(rows=size, bytes=size, age=0.0)
            for n, size in enumerate(sizes)}


def test_selector_merges_adjacent_small_parts_and_leaves_big_ones() -> None:
    stats = _parts([10 << 30] + [1000] * 12)  # one 10 GiB part, then twelve small ones
    (chosen,) = select_automatic(sorted(stats), stats, SelectorSettings())
    assert chosen.parts == tuple(PartInfo("all", n, n, 0).name for n in range(2, 12))  # ten small, not the big one
    assert chosen.result_name == "all_2_11_1"


def test_selector_respects_caps_threshold_and_reserved_blocks() -> None:
    stats = _parts([1000] * 12)
    names = sorted(stats, key=lambda n: PartInfo.parse(n).min_block)
    (capped,) = select_automatic(names, stats, SelectorSettings(max_parts=4))
    assert len(capped.parts) == 4
    # Runs capped at 3 (bytes) or 2 (rows) parts never pass the ratio rule (base ≈ 5): the
    # partition is over the threshold, so the best run within the caps merges anyway.
    (by_bytes,) = select_automatic(names, stats, SelectorSettings(max_bytes=3500))
    assert len(by_bytes.parts) == 3
    (by_rows,) = select_automatic(names, stats, SelectorSettings(max_rows=2500))
    assert len(by_rows.parts) == 2
    assert select_automatic(names, stats, SelectorSettings(max_rows=2500, threshold=12)) == []
    # Block 6 is held by a running transaction: no run spans it.
    for candidate in select_automatic(names, stats, SelectorSettings(max_parts=10), {"all": [(6, 6)]}):
        blocks = [PartInfo.parse(p).min_block for p in candidate.parts]
        assert max(blocks) < 6 or min(blocks) > 6


def test_selector_waits_for_age_or_crowding_before_merging_few_big_parts() -> None:
    big = 1 << 30
    young = {PartInfo("all", n, n, 0).name: PartStats(1, big, age=1.0) for n in range(1, 5)}
    assert select_automatic(sorted(young), young, SelectorSettings()) == []  # 4 equal parts: ratio 4 < base ≈ 5
    old = {name: PartStats(1, big, age=40 * 86400.0) for name in young}
    (merged,) = select_automatic(sorted(old), old, SelectorSettings())  # old enough: the base is lowered to 2
    assert len(merged.parts) == 4
    (crowded,) = select_automatic(sorted(young), young, SelectorSettings(threshold=3))  # over the threshold
    assert len(crowded.parts) == 4


def test_insert_delay_follows_clickhouse_documented_formula() -> None:
    # The examples of ClickHouse's max_delay_to_insert documentation (formula since 23.1).
    assert background.insert_delay(224, 150, 300, 1.0) == pytest.approx(0.5)
    assert background.insert_delay(149, 150, 300, 1.0) == 0.0
    assert background.insert_delay(150, 150, 300, 1.0) == pytest.approx(max(0.010, 1 / 150))


# ------------------------------------------------------------------ the commit path


def test_insert_returns_before_the_background_merge_runs(tmp_path: Path) -> None:
    table = MergeTreeTable.create(tmp_path / "t", COLUMNS, order_by="id",
                                  settings={"merge_parts_threshold": 4, "max_parts_to_merge": 5})
    rows_per_part = 300_000
    for n in range(4):
        table.insert(batch(range(n * rows_per_part, (n + 1) * rows_per_part)))
    assert MergeTreeTable.wait_for_merges(timeout=60)
    assert len(table.parts()) == 4  # at the threshold: nothing to merge yet
    names = table.insert(batch(range(4 * rows_per_part, 5 * rows_per_part)))
    # The fifth part crosses the threshold; the commit returned before its merge (of 1.5 M rows).
    assert sorted(p.name for p in table.parts()) == sorted([f"all_{n}_{n}_0" for n in range(1, 5)] + names)
    assert MergeTreeTable.wait_for_merges(timeout=120)
    assert [p.name for p in table.parts()] == ["all_1_5_1"]
    assert table.count() == 5 * rows_per_part


def test_background_merges_keep_old_snapshots_readable(tmp_path: Path) -> None:
    table = MergeTreeTable.create(tmp_path / "t", COLUMNS, order_by="id",
                                  settings={"merge_parts_threshold": 2, "max_parts_to_merge": 3})
    table.insert(batch(range(0, 10)))
    table.insert(batch(range(10, 20)))
    old = Transaction(table.coordinator)
    snapshot = table.visible_parts()[0]
    table.insert(batch(range(20, 30)))
    assert MergeTreeTable.wait_for_merges(timeout=60)
    assert table.merge() == []  # settled
    assert [p.name for p in table.parts()] == ["all_1_3_1"]
    assert ids_of(table) == list(range(30))
    assert table.to_arrow(["id"], transaction=old).column("id").to_pylist() == list(range(20))
    assert sorted(table.to_arrow(["id"], snapshot=snapshot).column("id").to_pylist()) == list(range(20))
    old.commit()


def test_too_many_parts_delays_then_refuses_inserts_naming_the_partition(tmp_path: Path) -> None:
    table = MergeTreeTable.create(tmp_path / "t", COLUMNS, order_by="id", partition_by="id % 2",
                                  settings={"auto_merge": False, "parts_to_delay_insert": 3,
                                            "parts_to_throw_insert": 5, "max_delay_to_insert": 1})
    for n in range(4):
        table.insert(batch([2 * n]))  # partition 0
    started = time.monotonic()
    # Into partition 1, but partition 0 has 4 parts ≥ 3 (as in ClickHouse, the most crowded
    # partition decides): delayed 1 s · (4 − 3 + 1) / (5 − 3) = 1 s.
    table.insert(batch([9]))
    assert time.monotonic() - started >= 1.0
    table.insert(batch([10]))  # the fifth part of partition 0
    before = directories(table)
    with pytest.raises(TooManyPartsError, match=r"too many parts \(5\) in partition '0'.*parts_to_throw_insert is 5"):
        table.insert(batch([12]))
    assert directories(table) == before  # nothing was written
    table.optimize(final=True)
    table.insert(batch([12]))
    assert ids_of(table) == [0, 2, 4, 6, 9, 10, 12]


# ------------------------------------------------------------------ processes


def _appender(path: str, url: str, first: int, count: int, queue: multiprocessing.Queue) -> None:
    try:
        table = MergeTreeTable.open(path, coordinator=url)
        for i in range(first, first + count):
            table.insert(batch([i]))
        MergeTreeTable.wait_for_merges(timeout=60)
        queue.put((first, None))
    except BaseException:
        queue.put((first, traceback.format_exc()))


# 2,000 appends (4 × 500) pass too but take ~135 s here (fsyncs, and the insert delays of the
# back-pressure): scaled to 4 × 150 (~20 s).
APPENDERS, APPENDS_EACH = 4, 150


def test_appends_from_several_processes_keep_parts_bounded_and_count_exact(tmp_path: Path) -> None:
    # Back-pressure as in ClickHouse, scaled down: inserts slow down from 30 parts in a partition
    # and would fail (TooManyPartsError, reported by the writer) at 100.
    table = MergeTreeTable.create(tmp_path / "t", COLUMNS, order_by="id", partition_by="id % 2",
                                  settings={"old_parts_lifetime": 0, "parts_to_delay_insert": 30,
                                            "parts_to_throw_insert": 100})
    url = table.coordinator.url
    queue = SPAWN.Queue()
    writers = [SPAWN.Process(target=_appender, args=(str(table.path), url, n * 100_000, APPENDS_EACH, queue))
               for n in range(APPENDERS)]
    for writer in writers:
        writer.start()
    peak = 0
    results = []
    deadline = time.monotonic() + 240
    while len(results) < APPENDERS and time.monotonic() < deadline:
        peak = max([peak, *per_partition(table).values()])
        while not queue.empty():
            results.append(queue.get())
        time.sleep(0.2)
    for writer in writers:
        writer.join(timeout=30)
    assert len(results) == APPENDERS and [r for r in results if r[1]] == []
    expected = sorted(n * 100_000 + i for n in range(APPENDERS) for i in range(APPENDS_EACH))
    assert ids_of(table) == expected
    # Single-row parts only, no explicit merge: the writers' background merges (and the delays)
    # kept every partition below parts_to_throw_insert: no insert failed, and merges happened.
    assert peak < 100, peak
    assert max(p.level for p in table.parts()) >= 2
    table.cleanup()
    assert directories(table) == {p.name for p in table.parts()}


def _merge_forever(path: str, url: str) -> None:
    table = MergeTreeTable.open(path, coordinator=url)
    while True:
        table.merge()
        table.optimize(final=True)


def test_kill_9_of_merging_processes_loses_and_leaks_nothing(tmp_path: Path) -> None:
    table = MergeTreeTable.create(tmp_path / "t", COLUMNS, order_by="id", partition_by="id % 3",
                                  settings={"auto_merge": False, "old_parts_lifetime": 0, "merge_parts_threshold": 2})
    url = table.coordinator.url
    rng = random.Random(17)
    expected: list[int] = []
    trials = 0
    deadline = time.monotonic() + 90
    while trials < 30 and time.monotonic() < deadline:
        for _ in range(3):
            ids = list(range(len(expected), len(expected) + rng.randint(1, 2000)))
            table.insert(batch(ids))
            expected.extend(ids)
        merger = multiprocessing.get_context("fork").Process(target=_merge_forever, args=(str(table.path), url))
        merger.start()
        time.sleep(rng.uniform(0.0, 0.6))
        os.kill(merger.pid, signal.SIGKILL)
        merger.join(timeout=10)
        trials += 1
        if trials % 5 == 0:
            assert ids_of(table) == expected
    assert trials >= 30
    assert ids_of(table) == expected
    table.cleanup()
    assert ids_of(table) == expected
    assert directories(table) == {p.name for p in table.parts()}
    assert not [e.name for e in os.scandir(table.log.directory) if "staged" in e.name]
    assert table.check().ok


def _daemon(*args: str) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.Popen([sys.executable, "-m", "spark_mergetree", "merge-daemon", *args, "--interval", "0.1"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def _wait_for_line(process: subprocess.Popen, text: str, seconds: float) -> None:
    """Read the process's stderr until a line holding `text` (failing after `seconds`)."""
    deadline = time.monotonic() + seconds
    assert process.stderr is not None
    poller = select.poll()  # not select.select: a long test session's descriptors pass 1024
    poller.register(process.stderr, select.POLLIN | select.POLLHUP)
    while time.monotonic() < deadline:
        ready = poller.poll(max(0, int((deadline - time.monotonic()) * 1000)))
        line = process.stderr.readline() if ready else ""
        if text in line:
            return
        assert ready and line, f"no {text!r} from pid {process.pid} (exit code {process.poll()})"
    raise AssertionError(f"no {text!r} from pid {process.pid} within {seconds} s")


def test_merge_daemons_merge_and_stop_cleanly_on_sigterm(tmp_path: Path) -> None:
    table = MergeTreeTable.create(tmp_path / "t", COLUMNS, order_by="id",
                                  settings={"auto_merge": False, "merge_parts_threshold": 3, "old_parts_lifetime": 0})
    daemons = [_daemon(str(table.path)) for _ in range(2)]  # two daemons on one table
    try:
        for daemon in daemons:  # a SIGTERM before its handler is set would kill a daemon still starting
            _wait_for_line(daemon, "merge-daemon: started", 60)
        for n in range(40):
            table.insert(batch(range(n * 10, n * 10 + 10)))
        deadline = time.monotonic() + 60
        while len(table.parts()) > 3 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert len(table.parts()) <= 3
    finally:
        for daemon in daemons:
            daemon.send_signal(signal.SIGTERM)
        outputs = [daemon.communicate(timeout=60) for daemon in daemons]
    assert [daemon.returncode for daemon in daemons] == [0, 0]
    lines = [line for out, _ in outputs for line in out.splitlines()]
    assert lines and all(": merged " in line for line in lines)
    merged = [line.split(": merged ")[1].split()[0] for line in lines]
    assert len(merged) == len(set(merged))  # no merge committed twice
    assert all("merge-daemon: stopped" in err for _, err in outputs)
    assert ids_of(table) == list(range(400))
    table.cleanup()
    assert directories(table) == {p.name for p in table.parts()}


# ------------------------------------------------------------------ merge workers


def test_background_merges_run_in_a_worker_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The writing process's threads never run a merge (it would hold the interpreter lock its
    inserts need): a merge step that fails in this process changes nothing, the worker merges."""
    def not_here(table: MergeTreeTable) -> None:
        raise AssertionError("a merge ran in the writing process")

    monkeypatch.setattr(background.optimizing, "merge_step", not_here)
    table = MergeTreeTable.create(tmp_path / "t", COLUMNS, order_by="id",
                                  settings={"merge_parts_threshold": 3, "old_parts_lifetime": 0})
    for n in range(6):
        table.insert(batch(range(n * 10, n * 10 + 10)))
    assert MergeTreeTable.wait_for_merges(timeout=60)
    assert len(table.parts()) < 6 and max(p.level for p in table.parts()) >= 1
    assert ids_of(table) == list(range(60))
    workers = background.process_merges()._workers
    assert workers and all(w.alive() and w.process.pid != os.getpid() for w in workers)


def test_tables_a_worker_cannot_open_merge_in_a_thread(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(MergeTreeTable, "merge_worker_description", lambda table: None)
    table = MergeTreeTable.create(tmp_path / "t", COLUMNS, order_by="id", settings={"merge_parts_threshold": 2})
    for n in range(4):
        table.insert(batch([n]))
    assert MergeTreeTable.wait_for_merges(timeout=60)
    assert len(table.parts()) < 4 and ids_of(table) == [0, 1, 2, 3]


def test_a_worker_that_died_while_idle_is_dropped_and_replaced(tmp_path: Path) -> None:
    """A worker killed between merges is reaped and forgotten when the next merge finds it dead (a
    fresh one merges); stopping drops the idle ones: none is left in the pool's list."""
    merges = background.BackgroundMerges()
    table = MergeTreeTable.create(tmp_path / "t", COLUMNS, order_by="id",
                                  settings={"auto_merge": False, "merge_parts_threshold": 2,
                                            "merge_selecting_sleep_ms": 0})
    try:
        for round_ in range(2):
            for n in range(3):
                table.insert(batch([round_ * 10 + n]))
            merges.schedule(table)
            assert merges.wait(timeout=60)
            (worker,) = merges._workers
            assert worker.alive() and merges._idle_workers == [worker]
            if round_ == 0:
                os.kill(worker.process.pid, signal.SIGKILL)
                worker.process.wait(timeout=10)
                first = worker
        assert worker is not first and not first.alive()
        assert len(table.parts()) == 1 and ids_of(table) == [0, 1, 2, 10, 11, 12]
    finally:
        merges.stop()
    assert merges._workers == [] and not worker.alive()


def _insert_then_die(path: str, url: str) -> None:
    table = MergeTreeTable.open(path, coordinator=url)
    for n in range(8):
        table.insert(batch(range(n * 50_000, (n + 1) * 50_000)))
    MergeTreeTable.wait_for_merges(timeout=0.05)  # a merge has been handed to the worker
    workers = background.process_merges()._workers
    print(" ".join(str(w.process.pid) for w in workers), flush=True)
    os.kill(os.getpid(), signal.SIGKILL)


def test_a_worker_dies_with_its_killed_parent(tmp_path: Path) -> None:
    """kill -9 of the writing process in the middle of a merge: its worker sees its input end and
    exits at once, abandoning the merge as a merge thread would die with its process; every
    committed row is there once, and cleanup leaves no garbage."""
    table = MergeTreeTable.create(tmp_path / "t", COLUMNS, order_by="id",
                                  settings={"merge_parts_threshold": 2, "merge_selecting_sleep_ms": 0,
                                            "old_parts_lifetime": 0})
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    code = ("import sys; from tests.engine.test_background_merges import _insert_then_die; "
            "_insert_then_die(sys.argv[1], sys.argv[2])")
    writer = subprocess.run([sys.executable, "-c", code, str(table.path), table.coordinator.url], env=env,
                            capture_output=True, text=True, timeout=120, cwd=REPO)
    assert writer.returncode == -signal.SIGKILL, writer.stderr
    pids = [int(p) for p in writer.stdout.split()]
    assert pids, "the writer had no merge worker"
    deadline = time.monotonic() + 10
    while any(_running(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(_running(pid) for pid in pids), "a merge worker outlived its parent"
    assert ids_of(table) == list(range(8 * 50_000))
    table.cleanup()
    assert directories(table) == {p.name for p in table.parts()}
    assert table.check().ok


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(")")[-1].split()[0] != "Z"  # a zombie has exited
    except FileNotFoundError:
        return False

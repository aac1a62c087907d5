"""Long torture run: writers, transfers, merges, overwrites, cleanup, readers and history clients on
the same tables at once, random kill -9 of any of them (readers aside), and coordinator faults:
ZooKeeper stopped and started, or object-store requests slowed by a latency proxy with spikes.
Runs in rounds (each a fresh set of tables, verified at its end) until the time or the transaction
target is reached; every round's history (tests/history.py) is checked for the anomalies snapshot
isolation forbids and kept with --keep.

    # >= 100,000 history transactions over the three coordinators, one process each (README, Tests)
    for spec in "local 65000" "zookeeper 45000" "objstore 4000"; do set -- $spec
      python benchmarks/torture.py --backend $1 --clients 2 --log-clients 4 --minutes 110 \\
          --transactions $2 --data-dir /dev/shm --keep runs/$1 > runs/$1.log 2>&1 &
    done
    python benchmarks/torture.py --minutes 5 --backend local --round-seconds 120    # the old mix

`--clients 0 --writers 4` is the original invariant-only mix. A saved history is checked again by
`python -m tests.history runs/local/round-1.jsonl`.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.torture import TortureConfig, TortureReport, run_torture  # noqa: E402

BACKENDS = ("local", "zookeeper", "objstore")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=5.0, help="total workload time (a bound)")
    parser.add_argument("--round-seconds", type=float, default=600.0, help="workload time of one round (a bound)")
    parser.add_argument("--backend", choices=(*BACKENDS, "both", "all"), default="all",
                        help="both: local and ZooKeeper rounds in turn; all: the three in turn")
    parser.add_argument("--transactions", type=int, default=None,
                        help="stop once the history clients ended this many transactions")
    parser.add_argument("--clients", type=int, default=3, help="history clients (0: the invariant-only mix)")
    parser.add_argument("--log-clients", type=int, default=0,
                        help="history clients on the transaction layer alone (dummy parts: many more transactions)")
    parser.add_argument("--writers", type=int, default=1)
    parser.add_argument("--transfers", type=int, default=1)
    parser.add_argument("--readers", type=int, default=0)
    parser.add_argument("--kill-every", type=float, nargs=2, default=(1.0, 4.0), metavar=("MIN", "MAX"),
                        help="seconds between kill -9s")
    parser.add_argument("--latency", type=float, default=0.005, help="seconds added to each object-store request")
    parser.add_argument("--data-dir", default=None, help="where rounds run (e.g. /dev/shm: kill -9 needs no fsync)")
    parser.add_argument("--keep", default=None, help="directory to keep every round's history (JSON lines)")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    deadline = time.monotonic() + args.minutes * 60
    backends = {"both": ("local", "zookeeper"), "all": BACKENDS}.get(args.backend, (args.backend,))
    keep = Path(args.keep) if args.keep else None
    if keep:
        keep.mkdir(parents=True, exist_ok=True)
    totals = TortureReport()
    per_backend: dict[str, int] = {}
    rounds = 0
    while time.monotonic() < deadline - 10 and (args.transactions is None or totals.transactions < args.transactions):
        backend = backends[rounds % len(backends)]
        seconds = max(10.0, min(args.round_seconds, deadline - time.monotonic()))
        left = None if args.transactions is None else args.transactions - totals.transactions
        config = TortureConfig(seconds=seconds, writers=args.writers, transfers=args.transfers, readers=args.readers,
                               clients=args.clients, log_clients=args.log_clients, zookeeper=backend == "zookeeper", objstore=backend == "objstore",
                               seed=args.seed + rounds, kill_interval=tuple(args.kill_every), latency=args.latency,
                               outage_interval=(5.0, 12.0), max_transactions=left,
                               maintenance_pause=(0.3, 1.0) if args.clients or args.log_clients else (0.0, 0.2))
        directory = Path(tempfile.mkdtemp(prefix="mergetree-torture-", dir=args.data_dir))
        started = time.monotonic()
        try:
            report = run_torture(directory / "run", config)
        except Exception as error:  # noqa: BLE001 - a round that breaks is a finding; the next one starts
            report = TortureReport(violations=[f"round failed: {error!r}"[:3000]])
        finally:
            if keep and (directory / "run" / "history.jsonl").exists():
                shutil.copy(directory / "run" / "history.jsonl", keep / f"{backend}-round-{rounds + 1}.jsonl")
            shutil.rmtree(directory, ignore_errors=True)
        rounds += 1
        faults = "ZooKeeper restarts" if backend == "zookeeper" else (
            "latency spikes" if backend == "objstore" else "coordinator outages")
        print(f"round {rounds} ({backend}, {time.monotonic() - started:.0f} s): {report} [{faults}]", flush=True)
        if report.history_check:
            print(f"  history check: {report.history_check}", flush=True)
        for violation in report.violations[:50]:
            print(f"  VIOLATION: {violation}", flush=True)
        for key, value in report.operations.items():
            totals.operations[key] = totals.operations.get(key, 0) + value
        for key, value in report.anomalies.items():
            totals.anomalies[key] = totals.anomalies.get(key, 0) + value
        for key, value in report.outcomes.items():
            totals.outcomes[key] = totals.outcomes.get(key, 0) + value
        per_backend[backend] = per_backend.get(backend, 0) + report.transactions
        totals.kills += report.kills
        totals.outages += report.outages
        totals.invariants_checked += report.invariants_checked
        totals.violations += report.violations
        totals.transactions += report.transactions
        totals.checker_seconds += report.checker_seconds
    print(f"total over {rounds} rounds: {totals}")
    print("history transactions per coordinator: " + ", ".join(f"{k} {v}" for k, v in per_backend.items()))
    return 1 if totals.violations else 0


if __name__ == "__main__":
    sys.exit(main())

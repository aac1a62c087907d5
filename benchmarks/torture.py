"""Long torture run: writers, transfers, merges, overwrites, cleanup and readers on three tables at
once, random kill -9 of any of them and, with ZooKeeper, the coordinator stopped and started;
then every invariant of tests/torture.py is checked. Runs in rounds (each a fresh set of tables,
verified at its end) until the time is up, and prints operations done and invariants checked.

    python benchmarks/torture.py --minutes 30                # alternate local / ZooKeeper rounds
    python benchmarks/torture.py --minutes 5 --backend local --round-seconds 120
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=5.0, help="total workload time")
    parser.add_argument("--round-seconds", type=float, default=180.0, help="workload time of one round")
    parser.add_argument("--backend", choices=("local", "zookeeper", "both"), default="both")
    parser.add_argument("--writers", type=int, default=4)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    deadline = time.monotonic() + args.minutes * 60
    totals = TortureReport()
    rounds = 0
    while time.monotonic() < deadline:
        seconds = max(10.0, min(args.round_seconds, deadline - time.monotonic()))
        zookeeper = args.backend == "zookeeper" or (args.backend == "both" and rounds % 2 == 1)
        config = TortureConfig(seconds=seconds, writers=args.writers, zookeeper=zookeeper, seed=args.seed + rounds)
        directory = Path(tempfile.mkdtemp(prefix="mergetree-torture-"))
        started = time.monotonic()
        try:
            report = run_torture(directory / "run", config)
        finally:
            shutil.rmtree(directory, ignore_errors=True)
        rounds += 1
        print(f"round {rounds} ({'zookeeper' if zookeeper else 'local'}, {time.monotonic() - started:.0f} s): "
              f"{report}", flush=True)
        for violation in report.violations:
            print(f"  VIOLATION: {violation}", flush=True)
        for key, value in report.operations.items():
            totals.operations[key] = totals.operations.get(key, 0) + value
        totals.kills += report.kills
        totals.outages += report.outages
        totals.invariants_checked += report.invariants_checked
        totals.violations += report.violations
    print(f"total over {rounds} rounds: {totals}")
    return 1 if totals.violations else 0


if __name__ == "__main__":
    sys.exit(main())

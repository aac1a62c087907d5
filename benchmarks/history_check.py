"""The history checker's speed (tests/history.py): CPU seconds to check clean histories of a
snapshot-isolation model of growing size, against reading the same history back from its JSON
lines (the floor any check pays: it must at least read what it checks), measured in the same run.

    python benchmarks/history_check.py [--sizes 10000 100000] [--runs 3]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.history import check, load, save  # noqa: E402
from tests.txn.test_history_checker import simulate  # noqa: E402


def cpu_seconds(runs: int, action) -> float:  # type: ignore[no-untyped-def]
    """The median CPU time of `runs` calls of `action`, after one warm-up call."""
    action()
    times = []
    for _ in range(runs):
        started = time.process_time()
        action()
        times.append(time.process_time() - started)
    return sorted(times)[len(times) // 2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    print(f"{'transactions':>12}  {'read JSON (s)':>13}  {'check (s)':>9}  {'check/read':>10}  {'txn/s checked':>13}")
    with tempfile.TemporaryDirectory() as work:
        for size in args.sizes:
            history = simulate(size, 9)
            path = Path(work) / f"h{size}.jsonl"
            save(history, path)
            reading = cpu_seconds(args.runs, lambda path=path: load(path))
            checking = cpu_seconds(args.runs, lambda history=history: check(history))
            assert check(history).counts == {}
            print(f"{size:>12,}  {reading:>13.2f}  {checking:>9.2f}  {checking / reading:>9.1f}×  {size / checking:>13,.0f}")


if __name__ == "__main__":
    main()

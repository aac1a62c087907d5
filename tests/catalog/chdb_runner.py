"""Test helper: run SQL with chdb in a separate process on a catalog root.

chdb allows one session path per process, and a fresh process is what a restarted ClickHouse
server is: it loads metadata/, store/ and metadata_dropped/ from disk and nothing else.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

_SCRIPT = r"""
import json, sys
from chdb import session
sess = session.Session(sys.argv[1])
results = []
for query in json.loads(sys.stdin.read()):
    try:
        results.append(["ok", sess.query(query, "TabSeparated").bytes().decode()])
    except Exception as exc:  # report, so tests can assert on ClickHouse's refusals
        results.append(["error", str(exc)])
sess.close()
print(json.dumps(results))
"""


class ChdbError(RuntimeError):
    pass


def run_chdb(root: Path | str, *queries: str, allow_errors: bool = False) -> list[str]:
    """Run ``queries`` in one new chdb session on ``root``; return each result as TSV text."""
    completed = subprocess.run(
        [sys.executable, "-c", _SCRIPT, str(root)],
        input=json.dumps(list(queries)),
        capture_output=True,
        text=True,
        timeout=120,
    )
    if completed.returncode != 0:
        raise ChdbError(f"chdb process failed ({completed.returncode}): {completed.stderr[-2000:]}")
    results = json.loads(completed.stdout.strip().splitlines()[-1])
    out = []
    for (status, text), query in zip(results, queries, strict=True):
        if status == "error" and not allow_errors:
            raise ChdbError(f"chdb refused {query!r}: {text[:1000]}")
        out.append(text if status == "ok" else "ERROR: " + text)
    return out


def rows(text: str) -> list[list[str]]:
    return [line.split("\t") for line in text.splitlines() if line]

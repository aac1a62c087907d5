"""How much of the exhaustive test material a run covers.

The default run (`./scripts/test`) covers every behaviour with a fixed sample of the large corpora,
seeds and example counts, so that it stays within its time budget; `pytest --exhaustive` (or
`SPARK_MERGETREE_EXHAUSTIVE=1`, which `--exhaustive` sets for the Spark workers too) runs all of
them. Samples are fixed (seeded by the case's name), so a failure found in the default run is found
again by the next default run.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Sequence
from typing import TypeVar

ENV = "SPARK_MERGETREE_EXHAUSTIVE"

T = TypeVar("T")


def exhaustive() -> bool:
    """Whether this run covers the whole material (`pytest --exhaustive`)."""
    return os.environ.get(ENV, "") not in ("", "0")


def scaled(default: int, whole: int) -> int:
    """An example or iteration count: `default` in the default run, `whole` in an exhaustive one."""
    return whole if exhaustive() else default


def sample(cases: Sequence[T], share: float, name: Callable[[T], str] = str, keep: Sequence[str] = ()) -> list[T]:
    """About `share` of `cases` (every case in an exhaustive run): those whose name hashes below the
    share, always at least one, plus every case whose name contains one of `keep`."""
    if exhaustive() or share >= 1:
        return list(cases)
    limit = int(share * 2**32)
    chosen = [case for case in cases
              if int.from_bytes(hashlib.sha256(name(case).encode()).digest()[:4], "big") < limit
              or any(word in name(case) for word in keep)]
    return chosen or list(cases[:1])

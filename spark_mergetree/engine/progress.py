"""Progress bars of long table operations (OPTIMIZE, large inserts) on stderr, through tqdm.

`progress`: True draws the bar, None draws it only when stderr is a terminal (what the command line
passes), False (the Python API's default) draws nothing and does not import tqdm.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager


@contextmanager
def progress_bar(total: int, unit: str, description: str, progress: bool | None) -> Iterator[Callable[[int], None]]:
    """A bar of `total` `unit`s; yields the function that advances it by n."""
    if progress is False:
        yield lambda n: None
        return
    from tqdm import tqdm  # only here: every process that opens a table imports the engine

    with tqdm(total=total, unit=unit, desc=description, file=sys.stderr, unit_scale=unit == "row",
              disable=None if progress is None else False) as bar:
        def advance(n: int) -> None:
            bar.update(n)

        yield advance

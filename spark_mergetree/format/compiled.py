"""Numba kernels compiled on first use.

Importing numba costs about a tenth of a second, which every fresh Spark Python worker would pay;
most reads never need a compiled kernel (only classic strings and sparse columns do), so kernels
are compiled, and numba imported, the first time one is called.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def lazy_njit(function: Callable[..., Any] | None = None, *, nogil: bool = False) -> Any:
    """`numba.njit(cache=True, nogil=nogil)(function)`, deferred to the first call. `nogil`: the
    kernel runs without the GIL (for kernels called from several threads at once, as the column
    writers of one part are)."""
    if function is None:
        return lambda inner: lazy_njit(inner, nogil=nogil)
    compiled: Callable[..., Any] | None = None

    def call(*args: Any) -> Any:
        nonlocal compiled
        if compiled is None:
            import numba

            compiled = numba.njit(cache=True, nogil=nogil)(function)
        return compiled(*args)

    call.__name__ = function.__name__
    call.__doc__ = function.__doc__
    return call

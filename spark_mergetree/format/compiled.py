"""Numba kernels compiled on first use.

Importing numba costs about a tenth of a second, which every fresh Spark Python worker would pay;
most reads never need a compiled kernel (only classic strings and sparse columns do), so kernels
are compiled, and numba imported, the first time one is called. A kernel may call other lazy
kernels of its module: they are compiled with it.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any


def lazy_njit(function: Callable[..., Any] | None = None, *, nogil: bool = False) -> Any:
    """`numba.njit(cache=True, nogil=nogil)(function)`, deferred to the first call. `nogil`: the
    kernel runs without the GIL (for kernels called from several threads at once, as the column
    writers of one part are)."""
    if function is None:
        return lambda inner: lazy_njit(inner, nogil=nogil)
    compiled: Callable[..., Any] | None = None

    def dispatcher() -> Callable[..., Any]:
        nonlocal compiled
        if compiled is None:
            import numba

            compiled = numba.njit(cache=True, nogil=nogil)(_seeing_compiled_kernels(function))
        return compiled

    def call(*args: Any) -> Any:
        return (compiled if compiled is not None else dispatcher())(*args)

    call.__name__ = function.__name__
    call.__doc__ = function.__doc__
    call.dispatcher = dispatcher  # type: ignore[attr-defined]
    return call


def _seeing_compiled_kernels(function: Callable[..., Any]) -> Callable[..., Any]:
    """`function` with the lazy kernels it calls replaced by their numba dispatchers (numba cannot
    call the Python wrappers)."""
    scope = function.__globals__
    kernels = {name: scope[name].dispatcher() for name in function.__code__.co_names
               if callable(getattr(scope.get(name), "dispatcher", None))}
    if not kernels:
        return function
    copy = types.FunctionType(function.__code__, {**scope, **kernels}, function.__name__,
                              function.__defaults__, function.__closure__)
    copy.__qualname__ = function.__qualname__
    copy.__module__ = function.__module__
    return copy

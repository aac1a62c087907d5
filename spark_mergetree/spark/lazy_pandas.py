"""Keeps pyarrow from importing pandas in Spark's Python workers that never use it.

pyarrow asks its pandas shim whether an object is a pandas object on nearly every conversion
(`pa.array` of a list or a numpy array, `pa.scalar`, `to_numpy`), and the shim answers by
importing pandas: some 0.3 s of CPU in every fresh worker (planning, write tasks) that only
handles Arrow data. The true answer while pandas is not imported is "no object is a pandas
object", so `defer_pandas()` makes the shim record that (its one import attempt fails while
`_Blocker` refuses pandas) and then restores the shim the moment anything imports
pandas: the finder below runs pandas' own import and then lets the shim import it again, after
which every conversion behaves as it would have. Calls that need pandas (`to_pandas`,
`from_pandas`) import it themselves and restore the shim the same way.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
import threading
from types import ModuleType
from typing import Any

_lock = threading.Lock()
_deferred = False


def defer_pandas() -> None:
    """In this process, pyarrow imports pandas only when pandas is used (idempotent; nothing to do
    once pandas is imported)."""
    global _deferred
    with _lock:
        if _deferred or "pandas" in sys.modules:
            return
        from pyarrow.lib import _pandas_api

        blocker = _Blocker()
        sys.meta_path.insert(0, blocker)  # the shim's one import attempt fails...
        try:
            _pandas_api.have_pandas  # noqa: B018 - ...here: it now answers "no pandas" without importing
        finally:
            sys.meta_path.remove(blocker)
        sys.meta_path.insert(0, _RestoreShim(_pandas_api))
        _deferred = True


class _Blocker(importlib.abc.MetaPathFinder):
    """Refuses pandas, for the shim's probe only."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if name == "pandas":
            raise ImportError("pandas is imported when used (spark_mergetree.spark.lazy_pandas)")
        return None


class _RestoreShim(importlib.abc.MetaPathFinder):
    """On the first import of pandas, after pandas' own module ran: the shim imports it again
    (its normal state), and this finder steps aside."""

    def __init__(self, shim: Any) -> None:
        self.shim = shim

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if name != "pandas":
            return None
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)  # by the finders after this one
        if spec is None or spec.loader is None:
            return spec
        loader, shim = spec.loader, self.shim

        class _Loader(importlib.abc.Loader):
            def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
                return loader.create_module(spec)

            def exec_module(self, module: ModuleType) -> None:
                loader.exec_module(module)
                shim.pd  # noqa: B018 - the shim imports pandas (now loaded) and knows it from here on

        spec.loader = _Loader()
        return spec

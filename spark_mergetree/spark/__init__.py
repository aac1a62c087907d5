"""The PySpark Python DataSource for format("mergetree"); the only layer that imports pyspark.

`configure(builder)` sets a session builder up (column pruning and safe filter pushdown through the
session extension, fast worker sockets); `register(spark)` registers the source explicitly (pip
installs auto-register it through the top-level module `pyspark_mergetree`); `transaction(spark)`
makes several Spark writes atomic; `optimize(spark, table)` merges a table's parts on the executors;
`delete(spark, table, where)` and `update(spark, table, set, where)` run mutations there.

Owns the DataSource contract (source.py), its options (options.py), Spark ↔ Arrow types
(types.py), Spark filters (filters.py), the session set-up (session.py) and Spark transactions
(transaction.py), the distributed OPTIMIZE (optimize.py) and DELETE/UPDATE (mutations.py); every call into the layers below goes through adapter.py. May import every
package below; the only one that imports pyspark.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

# Each entry point and its module, imported on first use: every Spark Python worker (planning, read
# and write tasks, commit) imports this package to unpickle the source, and must not pay for the
# modules of DELETE/UPDATE, OPTIMIZE or transactions it never runs.
_OWNERS = {
    "configure": "spark_mergetree.spark.session",
    "MergeTreeDataSource": "spark_mergetree.spark.source",
    "register": "spark_mergetree.spark.source",
    "SparkTransaction": "spark_mergetree.spark.transaction",
    "transaction": "spark_mergetree.spark.transaction",
    "delete": "spark_mergetree.spark.mutations",
    "update": "spark_mergetree.spark.mutations",
    "optimize": "spark_mergetree.spark.optimize",
}


def __getattr__(name: str) -> object:
    owner = _OWNERS.get(name)
    if owner is None:
        raise AttributeError(f"module 'spark_mergetree.spark' has no attribute {name!r}")
    value = getattr(importlib.import_module(owner), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_OWNERS))


if TYPE_CHECKING:
    from spark_mergetree.spark.mutations import delete, update
    from spark_mergetree.spark.optimize import optimize
    from spark_mergetree.spark.session import configure
    from spark_mergetree.spark.source import MergeTreeDataSource, register
    from spark_mergetree.spark.transaction import SparkTransaction, transaction

__all__ = ["configure", "MergeTreeDataSource", "SparkTransaction", "delete", "optimize", "register", "transaction",
           "update"]

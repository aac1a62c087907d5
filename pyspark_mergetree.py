"""Auto-registration of format("mergetree"): Spark lists top-level `pyspark_*` modules on its Python
path (pkgutil.iter_modules(), once per JVM) and registers their `DefaultSource`, so an installed
package needs no register call. A session started before the install needs
`spark_mergetree.register(spark)`.

Spark's lookup step imports every `pyspark_*` module in a new Python process, for whichever Python
data source a session first uses, so this module imports nothing of the package: constructing a
`DefaultSource` (Spark's next step, when a query names `mergetree`) builds the real
`MergeTreeDataSource`, whose imports (pyarrow, the engine) only that query pays.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql.datasource import DataSource


class DefaultSource(DataSource):
    """The `mergetree` source as Spark discovers it; instances are `MergeTreeDataSource`."""

    def __new__(cls, options: dict[str, str]) -> Any:
        from spark_mergetree.spark.source import MergeTreeDataSource

        return MergeTreeDataSource(options)

    @classmethod
    def name(cls) -> str:
        return "mergetree"  # spark_mergetree.spark.source.SOURCE_NAME; test_install checks both agree


__all__ = ["DefaultSource"]

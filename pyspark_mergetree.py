"""Auto-registration of format("mergetree"): Spark lists top-level `pyspark_*` modules on its Python
path (pkgutil.iter_modules(), once per JVM) and registers their `DefaultSource`, so an installed
package needs no register call. A session started before the install needs
`spark_mergetree.register(spark)`."""

from spark_mergetree.spark.source import MergeTreeDataSource


class DefaultSource(MergeTreeDataSource):
    """The `mergetree` source as Spark discovers it."""


__all__ = ["DefaultSource"]

"""Auto-registration of format("mergetree"): Spark imports top-level `pyspark_*` modules on its
Python path and registers their `DefaultSource`, so an installed package needs no register call."""

from spark_mergetree.spark.source import MergeTreeDataSource


class DefaultSource(MergeTreeDataSource):
    """The `mergetree` source as Spark discovers it."""


__all__ = ["DefaultSource"]

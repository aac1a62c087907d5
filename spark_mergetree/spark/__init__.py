"""The PySpark Python DataSource for format("mergetree"); the only layer that imports pyspark.

`configure(builder)` sets a session builder up (column pruning and safe filter pushdown through the
session extension, fast worker sockets); `register(spark)` registers the source explicitly (pip
installs auto-register it through the top-level module `pyspark_mergetree`); `transaction(spark)`
makes several Spark writes atomic.
"""

from spark_mergetree.spark.session import configure
from spark_mergetree.spark.source import MergeTreeDataSource, register
from spark_mergetree.spark.transaction import SparkTransaction, transaction

__all__ = ["configure", "MergeTreeDataSource", "SparkTransaction", "register", "transaction"]

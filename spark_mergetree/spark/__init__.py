"""The PySpark Python DataSource for format("mergetree"); the only layer that imports pyspark.

`register(spark)` registers the source explicitly (pip installs auto-register it through the
top-level module `pyspark_mergetree`); `transaction(spark)` makes several Spark writes atomic.
"""

from spark_mergetree.spark.source import MergeTreeDataSource, register
from spark_mergetree.spark.transaction import SparkTransaction, transaction

__all__ = ["MergeTreeDataSource", "SparkTransaction", "register", "transaction"]

"""The PySpark Python DataSource for format("mergetree"); the only layer that imports pyspark."""

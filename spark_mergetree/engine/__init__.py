"""A MergeTree table: its part set at a snapshot, inserts, selects, merges, CHECK and cleanup.

Owns a table directory (creating and deleting it: directories.py) and everything one table does;
`MergeTreeTable` (table.py) is its face. May import txn/, expressions/, format/, storage/, fileops,
recovery and errors; never catalog/ or spark/.
"""

from spark_mergetree.engine import object_table as _object_table  # noqa: F401 - registers s3:// tables

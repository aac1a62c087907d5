"""MergeTreeTable: the public face of one table directory.

A table directory holds ClickHouse part directories plus our own `_mergetree/` folder:
`_mergetree/table.sql` (the table's ATTACH TABLE statement, the same text the catalog keeps) and
`_mergetree/log/` (the commit log that decides which parts are visible; see txn/).
This module wires the layers together; the work is done in insert.py, select.py and merge.py.
"""

from __future__ import annotations

# NOTE: interface being implemented; see ARCHITECTURE.md. Signatures here are the contract the
# Spark layer builds against:
#
# class MergeTreeTable:
#     path: pathlib.Path                      # the table data directory
#     definition: TableDefinition             # parsed ATTACH/CREATE statement
#     schema: pyarrow.Schema                  # Arrow schema of all columns (see format/types.py)
#     uuid: str                               # stable id (from the statement or generated)
#
#     @classmethod
#     def create(cls, path, schema, order_by, partition_by=None, primary_key=None, settings=None,
#                *, if_not_exists=False, coordinator=None, storage_policy=None) -> MergeTreeTable
#         # schema: pyarrow.Schema, or a list of (name, ClickHouse type string)
#     @classmethod
#     def open(cls, path, create_statement=None, *, coordinator=None) -> MergeTreeTable
#
#     def insert(self, data, *, transaction=None) -> list[str]          # part names
#     def to_arrow(self, columns=None, where=None, *, snapshot=None, transaction=None) -> pa.Table
#     def parts(self, *, snapshot=None) -> list[PartSummary]
#     def optimize(self, final=False) -> list[str]
#     def check(self) -> CheckReport
#     def explain(self, where=None) -> ReadPlan
#
#     # building blocks for distributed readers/writers (the Spark layer):
#     def plan_read(self, columns=None, where=None, *, snapshot=None, transaction=None,
#                   target_rows=...) -> ReadPlan        # .tasks: list[ReadTask] (picklable)
#     def read_task(self, task, columns, where=None) -> Iterator[pa.RecordBatch]   # executor side
#     def stage(self, data, tag) -> list[StagedPart]     # executor side: write tmp parts
#     def commit_staged(self, staged, *, mode="append"|"overwrite"|"overwrite_partitions",
#                       transaction=None) -> list[str]   # driver side: name, log, commit
#     def discard_staged(self, tag, keep=()) -> None     # remove a job's leftover tmp parts

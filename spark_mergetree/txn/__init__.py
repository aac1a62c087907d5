"""Transactions: timestamps, snapshots, per-table commit logs, local and ZooKeeper coordinators."""

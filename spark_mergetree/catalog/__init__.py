"""The Atomic catalog: databases and tables by name over UUID directories, laid out as ClickHouse does."""

"""A MergeTree table: its part set at a snapshot, inserts, selects, merges and cleanup."""

"""Bytes of a MergeTree part: blocks, hashes, checksums, marks, types, readers and writers."""

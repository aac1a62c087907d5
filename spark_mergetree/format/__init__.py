"""Bytes of a MergeTree part: blocks, hashes, checksums, marks, types, readers and writers.

Owns what a part's files contain, byte for byte as ClickHouse writes them (format_spec/), and the
ClickHouse type model (types.py). Reads and writes files through what it is handed (a storage
`PartStore`, or plain bytes); may import fileops and errors only.
"""

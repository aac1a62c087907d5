"""The sparse primary index of big parts, decoded without a Python loop per granule: the keys of
ClickHouse's own primary.idx (String and number keys, thousands of granules) equal the rows
ClickHouse returns at every granule start; a parsed index is cached by its content."""

from __future__ import annotations

import pyarrow as pa

from spark_mergetree.format.part_reader import PartReader
from spark_mergetree.storage.part_store import PartStore
from spark_mergetree.storage.policy import StoragePolicy
from tests.format.chdb_util import close_session, make_chdb_table, part_dirs

GRANULE = 4
ROWS = 20_001


def test_a_big_index_of_string_and_number_keys_matches_clickhouse(tmp_path) -> None:
    sess, table_dir = make_chdb_table(
        tmp_path,
        f"CREATE TABLE k (s String, x Int64, d Date, v Float64) ENGINE = MergeTree ORDER BY (s, x, d) "
        f"SETTINGS index_granularity = {GRANULE}, min_bytes_for_wide_part = 0",
        [f"INSERT INTO k SELECT repeat('k', number % 13) || toString(number % 97), -toInt64(number), "
         f"toDate('2024-01-01') + number % 300, number FROM numbers({ROWS})"],
    )
    rows = pa.ipc.open_file(pa.py_buffer(sess.query("SELECT s, x, d FROM k ORDER BY s, x, d", "Arrow").bytes())).read_all()
    close_session()
    (part,) = part_dirs(table_dir)
    store = PartStore(StoragePolicy.single(part.parent))
    reader = PartReader(store, part.name, str(part))
    index = reader.primary_index(["String", "Int64", "Date"])
    starts = list(range(0, ROWS, GRANULE))
    expected = starts + [ROWS - 1] if len(index[0]) == len(starts) + 1 else starts
    assert len(index[0]) == len(expected) > 5000
    for column, array in zip(("s", "x", "d"), index, strict=True):
        assert array.to_pylist() == rows.column(column).take(expected).to_pylist()
    # Another reader of the same part (another table object, another process's cache entry) gets
    # the parsed index by the file's checksum, without parsing it again.
    again = PartReader(store, part.name, str(part)).primary_index(["String", "Int64", "Date"])
    assert all(a is b for a, b in zip(again, index, strict=True))

"""format_spec/part.md's worked example is what our writer produces, and ClickHouse agrees."""

from __future__ import annotations

import datetime as dt
import shutil

import pyarrow as pa

from spark_mergetree.format.part_writer import PartitionValue, write_wide_part
from tests.format.chdb_util import close_session, make_chdb_table, spec_block, spec_hex

COLUMNS = [("x", "UInt32"), ("s", "String"), ("d", "Date")]


def _example_part():
    rows = pa.table({"x": pa.array([9, 7], pa.uint32()), "s": ["abc", "hi"],
                     "d": pa.array([dt.date(2024, 1, 20), dt.date(2024, 1, 15)], pa.date32())})
    rows = rows.sort_by("x")
    partition = PartitionValue([pa.array([202401], pa.uint32())], ["UInt32"], ["d"])
    return write_wide_part(rows, COLUMNS, [("UInt32", rows["x"])], partition)


def test_text_files_match_the_spec():
    files = _example_part().files
    assert files["columns.txt"].decode() == spec_block("part.md", "text columns.txt")
    assert files["serialization.json"].decode() == spec_block("part.md", "text serialization.json").strip()
    assert files["count.txt"] == b"2"


def test_binary_files_match_the_spec():
    files = _example_part().files
    for name in ("primary.idx", "partition.dat", "minmax_d.idx"):
        assert files[name] == spec_hex("part.md", name), name
    assert files["x.bin"][16:] == spec_hex("part.md", "x.bin payload")


def test_clickhouse_attaches_the_example(tmp_path):
    files = _example_part()
    sess, data_dir = make_chdb_table(
        tmp_path, "CREATE TABLE spec_t (x UInt32, s String, d Date) ENGINE = MergeTree "
                  "PARTITION BY toYYYYMM(d) ORDER BY x")
    part = data_dir / "detached" / "202401_1_1_0"
    part.mkdir(parents=True)
    for name, data in files.files.items():
        (part / name).write_bytes(data)
    sess.query("ALTER TABLE spec_t ATTACH PART '202401_1_1_0'")
    assert sess.query("CHECK TABLE spec_t", "TabSeparatedRaw").bytes().decode().split()[1] == "1"
    assert sess.query("SELECT x, s, d FROM spec_t ORDER BY x", "TabSeparatedRaw").bytes().decode() == \
        "7\thi\t2024-01-15\n9\tabc\t2024-01-20\n"
    close_session()
    shutil.rmtree(tmp_path / "chdb", ignore_errors=True)

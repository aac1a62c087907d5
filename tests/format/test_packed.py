"""Packed part storage (`data.packed`, ClickHouse 26.x `min_bytes_for_full_part_storage`): the archive
read from parts chdb made; damage is reported naming the part and the file. (Reads of every type
from packed parts: tests/conformance.)"""

from __future__ import annotations

import shutil

import pytest

from spark_mergetree import MergeTreeTable
from spark_mergetree.errors import CorruptPartError, UnsupportedError
from spark_mergetree.format.packed import PACKED_PART_FILE, parse_packed_part
from tests.format.chdb_util import active_part_dirs, close_session, make_chdb_table

CREATE = ("CREATE TABLE p (id UInt64, s String) ENGINE = MergeTree ORDER BY id SETTINGS "
          "min_bytes_for_full_part_storage = 1000000000, min_bytes_for_wide_part = 0, index_granularity = 16")


@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("packed")
    sess, data_dir = make_chdb_table(tmp, CREATE, ["INSERT INTO p SELECT number, toString(number) FROM numbers(100)"])
    statement = sess.query("SHOW CREATE TABLE p", "TabSeparatedRaw").bytes().decode()
    (part,) = active_part_dirs(sess, "p")
    expected = sess.query("SELECT * FROM p ORDER BY id", "TabSeparatedRaw").bytes().decode()
    close_session()
    yield data_dir, part.name, statement, expected


def _copy(packed, tmp_path):
    data_dir, part, statement, _ = packed
    copy = tmp_path / "t"
    shutil.copytree(data_dir, copy)
    return copy, copy / part / PACKED_PART_FILE, statement


def test_the_archive_lists_the_files_of_a_part(packed):
    data_dir, part, _, _ = packed
    entries = parse_packed_part((data_dir / part / PACKED_PART_FILE).read_bytes(), "x")
    assert {"checksums.txt", "columns.txt", "count.txt", "id.bin", "s.bin"} <= set(entries)


def test_packed_part_reads_as_clickhouse_selects(packed):
    data_dir, _, statement, expected = packed
    rows = MergeTreeTable.open(data_dir, create_statement=statement).to_arrow().sort_by("id").to_pylist()
    assert "".join(f"{r['id']}\t{r['s']}\n" for r in rows) == expected


def test_damaged_packed_part_is_reported(packed, tmp_path):
    copy, archive, statement = _copy(packed, tmp_path)
    data = bytearray(archive.read_bytes())
    offset, size = parse_packed_part(bytes(data), "x")["s.bin"]
    data[offset + size - 1] ^= 0xFF
    archive.write_bytes(bytes(data))
    report = MergeTreeTable.open(copy, create_statement=statement).check()
    assert not report.ok and "s.bin" in str(report)
    with pytest.raises(CorruptPartError, match="s.bin"):
        MergeTreeTable.open(copy, create_statement=statement).to_arrow()


def test_unknown_archive_version_is_refused_naming_the_file(packed, tmp_path):
    copy, archive, statement = _copy(packed, tmp_path)
    archive.write_bytes(b"\x07" + archive.read_bytes()[1:])
    with pytest.raises(UnsupportedError, match=f"{archive.parent.name}/{PACKED_PART_FILE}: packed part archive version 7"):
        MergeTreeTable.open(copy, create_statement=statement).to_arrow()

"""Parts with ClickHouse features beyond plain columns, and damaged or mismatched parts.

* Columns with codecs beyond LZ4/ZSTD (Delta, FPC, T64, Gorilla, DoubleDelta, GCD, chains) read
  as ClickHouse returns them (test_codecs.py covers every codec).
* Projections (`<name>.proj/`): read past (the part's own columns are the table) and checked.
* Skip indexes, TTL and statistics files are known; an unknown file or a transaction's
  `txn_version.txt` is refused by name.
* Damaged marks (with checksums.txt that agrees: a writer's error, not a flipped bit, which the
  checksums catch: test_metadata_checksums.py) and columns.txt, and a CREATE statement that does not
  describe the parts: errors name the marks file / columns.txt (with mark number or byte offset) and
  the column.

Expected rows come from ClickHouse (chdb) SELECTs of the same tables.
"""

from __future__ import annotations

import shutil
import struct
from pathlib import Path

import pyarrow as pa
import pytest

from spark_mergetree import MergeTreeTable
from spark_mergetree.errors import CorruptPartError, SchemaMismatchError, UnsupportedError
from spark_mergetree.format.checksums import CHECKSUMS_FILE, Checksums, compute_file_checksum
from spark_mergetree.format.part_reader import PartReader
from spark_mergetree.storage.part_store import PartStore
from spark_mergetree.storage.policy import StoragePolicy
from tests.format.chdb_util import active_part_dirs, close_session, make_chdb_table

WIDE = "min_bytes_for_wide_part = 0, min_rows_for_wide_part = 0"
COMPACT = "min_bytes_for_wide_part = 1000000000, min_rows_for_wide_part = 1000000000"
CODECS = {"a": "CODEC(Delta, ZSTD)", "b": "CODEC(FPC)", "c": "CODEC(T64)", "d": "CODEC(Gorilla)",
          "e": "CODEC(DoubleDelta, LZ4)", "f": "CODEC(GCD, LZ4)"}
CODEC_TYPES = {"a": "Int64", "b": "Float64", "c": "UInt32", "d": "Float64", "e": "Int64", "f": "UInt64"}


def _rows(table: pa.Table) -> list[tuple]:
    columns = [[v.decode() if isinstance(v, bytes) else v for v in c.to_pylist()] for c in table.columns]
    return sorted(zip(*columns))


def _chdb_rows(sess, sql: str) -> list[tuple]:
    return _rows(pa.ipc.open_file(pa.py_buffer(sess.query(sql, "Arrow").bytes())).read_all())


def _reader(part_dir: Path) -> PartReader:
    return PartReader(PartStore(StoragePolicy.single(part_dir.parent)), part_dir.name, str(part_dir))


def _copy_table(data_dir: Path, tmp_path: Path, name: str) -> Path:
    target = tmp_path / name
    shutil.copytree(data_dir, target)
    return target


@pytest.fixture(scope="module")
def tables(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("features")
    made, expected, statements, parts = {}, {}, {}, {}
    codec_columns = ", ".join(f"{c} {CODEC_TYPES[c]} {clause}" for c, clause in CODECS.items())
    specs = {
        "codecs_wide": (f"(k UInt64, g String CODEC(LZ4HC), {codec_columns})", WIDE, "ORDER BY k"),
        "codecs_compact": (f"(k UInt64, g String CODEC(LZ4HC), {codec_columns})", COMPACT, "ORDER BY k"),
        "proj_wide": ("(k UInt64, g UInt32, v Float64, PROJECTION by_g (SELECT g, k, v ORDER BY g), "
                      "PROJECTION sums (SELECT g, sum(v) GROUP BY g))", WIDE, "ORDER BY k"),
        "proj_compact": ("(k UInt64, g UInt32, v Float64, PROJECTION by_g (SELECT g, k, v ORDER BY g))", COMPACT,
                         "ORDER BY k"),
        "indexed": ("(k UInt64, d DateTime, v String, n Nullable(Int32), INDEX iv v TYPE bloom_filter GRANULARITY 2, "
                    "INDEX ik k TYPE minmax GRANULARITY 1)", WIDE + ", auto_statistics_types = 'minmax, uniq'",
                    "ORDER BY k TTL d + INTERVAL 1 YEAR"),
        # Uncompressed marks and several compressed blocks per column, so single marks can be damaged.
        "marks_wide": ("(k UInt64, s String)", WIDE + ", compress_marks = 0, index_granularity = 1000", "ORDER BY k"),
        "marks_compact": ("(k UInt64, s String)", COMPACT + ", compress_marks = 0, index_granularity = 1000",
                          "ORDER BY k"),
    }
    inserts = {
        "codecs": "SELECT number, toString(number), number * 3, number / 7, number, number * 1.5, number * 1000, "
                  "number * 10 FROM numbers(3000)",
        "proj": "SELECT number, number % 10, number / 3 FROM numbers(5000)",
        "indexed": "SELECT number, now() - number * 86400 * 3, toString(number), if(number % 5 = 0, NULL, number) "
                   "FROM numbers(1000)",
        "marks": "SELECT number, toString(number) FROM numbers(20000)",
    }
    sess = None
    for name, (columns, settings, order) in specs.items():
        create = f"CREATE TABLE {name} {columns} ENGINE = MergeTree {order} SETTINGS {settings}"
        rows = inserts[name.split("_")[0]]
        sess, data_dir = make_chdb_table(tmp, create, [f"INSERT INTO {name} {rows}", f"INSERT INTO {name} {rows}"]
                                         + ([f"OPTIMIZE TABLE {name} FINAL"] if name == "indexed" else []))
        made[name] = data_dir
        statements[name] = sess.query(f"SHOW CREATE TABLE {name}", "TabSeparatedRaw").bytes().decode()
        parts[name] = [p.name for p in active_part_dirs(sess, name)]
        plain = {"indexed": "k, v, n"}.get(name.split("_")[0], "*")
        expected[name] = _chdb_rows(sess, f"SELECT {plain} FROM {name}")
    close_session()
    return {"dirs": made, "expected": expected, "statements": statements, "parts": parts}


def _open(tables, name: str, directory: Path | None = None) -> MergeTreeTable:
    return MergeTreeTable.open(directory or tables["dirs"][name], create_statement=tables["statements"][name])


# ---------------------------------------------------------------------------------------------- codecs


@pytest.mark.parametrize("name", ["codecs_wide", "codecs_compact"])
def test_codec_columns_read_like_clickhouse(tables, name):
    # Codec chains, FPC, T64, Gorilla, DoubleDelta and GCD (test_codecs.py has every codec in depth).
    table = _open(tables, name)
    assert _rows(table.to_arrow()) == tables["expected"][name]
    assert table.check().ok


# ---------------------------------------------------------------------------------------------- projections


@pytest.mark.parametrize("name", ["proj_wide", "proj_compact"])
def test_projections_are_read_past_and_checked(tables, name, tmp_path):
    table = _open(tables, name)
    assert _rows(table.to_arrow()) == tables["expected"][name]
    assert _rows(table.to_arrow(where="k >= 100 AND k < 300")) == [
        row for row in tables["expected"][name] if 100 <= row[0] < 300]
    assert table.check().ok
    # A damaged file inside a projection is found by check(), named by its path in the part.
    copy = _copy_table(tables["dirs"][name], tmp_path, "damaged")
    part = tables["parts"][name][0]
    projection_file = next(p for p in sorted((copy / part / "by_g.proj").iterdir()) if p.name.endswith(".bin"))
    data = bytearray(projection_file.read_bytes())
    data[-1] ^= 0xFF
    projection_file.write_bytes(bytes(data))
    report = _open(tables, name, copy).check()
    assert not report.ok and f"{part}/by_g.proj/{projection_file.name}" in str(report)
    # Reads never touch projections.
    assert _rows(_open(tables, name, copy).to_arrow()) == tables["expected"][name]


# ---------------------------------------------------------------------------------------------- known and unknown files


def test_skip_indexes_ttl_and_statistics_do_not_stop_reads(tables):
    part = tables["dirs"]["indexed"] / tables["parts"]["indexed"][0]
    files = {p.name for p in part.iterdir()}
    assert {"skp_idx.packed", "ttl.txt", "statistics.packed"} <= files
    table = _open(tables, "indexed")
    assert _rows(table.to_arrow(["k", "v", "n"])) == tables["expected"]["indexed"]
    assert table.check().ok


@pytest.mark.parametrize(("file", "named"), [
    ("deleted_rows_mask.bin", r"deleted_rows_mask\.bin: file is neither a stream of a column in columns\.txt"),
    ("future_feature.txt", r"future_feature\.txt: file is neither a stream"),
    ("txn_version.txt", r"txn_version\.txt: a part created or removed inside a ClickHouse transaction"),
])
def test_unknown_or_row_changing_files_are_refused_by_name(tables, tmp_path, file, named):
    copy = _copy_table(tables["dirs"]["marks_wide"], tmp_path, "t")
    part = tables["parts"]["marks_wide"][0]
    (copy / part / file).write_bytes(b"\x01" * 16)
    with pytest.raises(UnsupportedError, match=rf"{part}/{named}"):
        _open(tables, "marks_wide", copy).to_arrow()


# ---------------------------------------------------------------------------------------------- damaged marks


def _patch_mark(path: Path, mark: int, field: int, width: int, value: int) -> None:
    data = bytearray(path.read_bytes())
    struct.pack_into("<Q", data, (mark * width + field) * 8, value)
    path.write_bytes(bytes(data))


def _read_mark(path: Path, mark: int, field: int, width: int) -> int:
    return struct.unpack_from("<Q", path.read_bytes(), (mark * width + field) * 8)[0]


def _record_checksums(part: Path) -> None:
    """Rewrite checksums.txt to match the files as they are now: a part whose writer got the marks
    wrong but its checksums right (a flipped bit alone is refused by the checksums)."""
    listing = part / CHECKSUMS_FILE
    checksums = Checksums.parse(listing.read_bytes())
    for file, entry in checksums.files.items():
        checksums.files[file] = compute_file_checksum(part / file, entry.is_compressed)
    listing.write_bytes(checksums.to_bytes())


def _damaged(tables, tmp_path, name: str, damage) -> tuple[MergeTreeTable, Path]:
    copy = _copy_table(tables["dirs"][name], tmp_path, "t")
    part = copy / tables["parts"][name][0]
    damage(part)
    _record_checksums(part)
    return _open(tables, name, copy), part


def test_wide_marks_past_the_data_file_name_the_marks_file(tables, tmp_path):
    table, _ = _damaged(tables, tmp_path, "marks_wide", lambda p: _patch_mark(p / "k.mrk2", 3, 0, 3, 10**9))
    with pytest.raises(CorruptPartError, match=r"all_\d+_\d+_0/k\.mrk2: mark 3 points at \(1000000000, \d+\), "
                                               r"past the end of k\.bin \(\d+ bytes\)"):
        table.to_arrow()


def test_wide_marks_going_backwards_name_the_marks_file(tables, tmp_path):
    table, _ = _damaged(tables, tmp_path, "marks_wide", lambda p: _patch_mark(p / "s.size.mrk2", 4, 1, 3, 1))
    with pytest.raises(CorruptPartError, match=r"s\.size\.mrk2: mark 4 points at \(0, 1\), before mark 3"):
        table.to_arrow()


def test_wide_marks_with_other_granule_rows_name_the_marks_file(tables, tmp_path):
    table, _ = _damaged(tables, tmp_path, "marks_wide", lambda p: _patch_mark(p / "s.mrk2", 2, 2, 3, 7))
    with pytest.raises(CorruptPartError, match=r"s\.mrk2: mark 2 says 7 rows, the part's granule 2 has 1000"):
        table.to_arrow()


def _second_block_marks(marks: Path) -> tuple[int, int]:
    """(last mark in k.bin's first block, first mark in its second block)."""
    first_block = _read_mark(marks, 0, 0, 3)
    second = next(m for m in range(20) if _read_mark(marks, m, 0, 3) > first_block)
    return second - 1, second


@pytest.mark.parametrize(("which", "named"), [
    # The first mark of the second block, moved one byte back: inside the first block.
    ("block", r"k\.mrk2: mark {mark} points at \(\d+, 0\) in k\.bin, where no block starts at byte \d+"),
    # The last mark of the first block, pointing beyond that block's bytes.
    ("offset", r"k\.mrk2: mark {mark} points at \(\d+, 1000000\) in k\.bin, where the block there holds \d+ bytes"),
])
def test_mark_that_fits_no_block_names_the_marks_file(tables, tmp_path, which, named):
    chosen = {}

    def damage(part: Path) -> None:
        marks = part / "k.mrk2"
        last, second = _second_block_marks(marks)
        if which == "block":
            chosen["mark"] = second
            _patch_mark(marks, second, 0, 3, _read_mark(marks, second, 0, 3) - 1)
        else:
            chosen["mark"] = last
            _patch_mark(marks, last, 1, 3, 1000000)

    table, _ = _damaged(tables, tmp_path, "marks_wide", damage)
    mark = chosen["mark"]
    # Granule `mark` holds keys mark*1000 ...: a read that starts inside it starts at the damaged mark.
    with pytest.raises(CorruptPartError, match=named.format(mark=mark)):
        table.to_arrow(where=f"k >= {mark * 1000 + 500} AND k < {mark * 1000 + 510}")


def test_compact_marks_going_backwards_name_the_marks_file(tables, tmp_path):
    # data.mrk4: per granule (block, offset) for k, s.size and s, then rows: 7 numbers per mark.
    table, _ = _damaged(tables, tmp_path, "marks_compact", lambda p: _patch_mark(p / "data.mrk4", 3, 0, 7, 1))
    with pytest.raises(CorruptPartError, match=r"data\.mrk4: mark 3 of k points at \(1, \d+\), before mark 2 of s "):
        table.to_arrow()


def test_compact_marks_into_a_block_name_the_marks_file(tables, tmp_path):
    # The mark of s.size in granule 4, one byte back: still in order, but inside k's block.
    def damage(part: Path) -> None:
        marks = part / "data.mrk4"
        _patch_mark(marks, 4, 2, 7, _read_mark(marks, 4, 2, 7) - 1)

    table, _ = _damaged(tables, tmp_path, "marks_compact", damage)
    with pytest.raises(CorruptPartError, match=r"data\.mrk4: mark 4 of s\.size points at \(\d+, 0\) in data\.bin, "
                                               r"where no block starts at byte"):
        table.to_arrow()


# ---------------------------------------------------------------------------------------------- damaged columns.txt


@pytest.mark.parametrize(("text", "error", "named"), [
    (b"columns format version: 1\n2 columns:\n`k` UInt64\n`s\xff` String\n", CorruptPartError,
     r"columns\.txt: not UTF-8 text \(byte offset 50\)"),
    (b"columns format version: 1\n2 columns:\n`k` UInt64\n`k` String\n", CorruptPartError,
     r"columns\.txt: line 4 \(byte offset 48\) repeats column 'k'"),
    (b"columns format version: 1\n2 columns:\n`k` UInt64\n`s` Strin\n", UnsupportedError,
     r"columns\.txt: column 's': unsupported ClickHouse type 'Strin'"),
    (b"columns format version: 1\n2 columns:\n`k` UInt64\n`s` String", CorruptPartError,
     r"columns\.txt: truncated: the last line has no end of line \(byte offset 58\)"),
    (b"columns format version: 1\n2 columns:\n`k` UInt64\n`t` String\n", UnsupportedError,
     r"s(\.size)?\.(bin|mrk2): file is neither a stream of a column in columns\.txt .* or a damaged columns\.txt"),
    (b"columns format version: 1\n2 columns:\n`k` UInt32\n`s` String\n", SchemaMismatchError,
     r"columns\.txt: column 'k' is UInt32 in the part but UInt64 in the table's statement"),
])
def test_damaged_columns_txt_is_named(tables, tmp_path, text, error, named):
    table, _ = _damaged(tables, tmp_path, "marks_wide", lambda p: (p / "columns.txt").write_bytes(text))
    with pytest.raises(error, match=named):
        table.to_arrow()


def test_compact_columns_txt_out_of_step_with_substreams_is_named(tables, tmp_path):
    swapped = b"columns format version: 1\n2 columns:\n`s` String\n`k` UInt64\n"
    table, _ = _damaged(tables, tmp_path, "marks_compact", lambda p: (p / "columns.txt").write_bytes(swapped))
    with pytest.raises(CorruptPartError, match=r"columns_substreams\.txt: lists columns \['k', 's'\] but "
                                               r"columns\.txt lists \['s', 'k'\]"):
        table.to_arrow()


# ---------------------------------------------------------------------------------------------- wrong CREATE


@pytest.mark.parametrize("name", ["marks_wide", "marks_compact"])
@pytest.mark.parametrize(("columns", "column", "stored", "declared"), [
    ("k UInt32, s String", "k", "UInt64", "UInt32"),
    ("k UInt64, s UInt8", "s", "String", "UInt8"),
    ("k UInt64, s Nullable(String)", "s", "String", "Nullable\\(String\\)"),
    ("k Int64, s String", "k", "UInt64", "Int64"),
])
def test_create_statement_that_does_not_match_the_parts_names_column_and_part(tables, name, columns, column,
                                                                             stored, declared):
    wrong = f"CREATE TABLE t ({columns}) ENGINE = MergeTree ORDER BY k"
    table = MergeTreeTable.open(tables["dirs"][name], create_statement=wrong)
    part = tables["parts"][name][0]
    with pytest.raises(SchemaMismatchError, match=rf"{part}/columns\.txt: column '{column}' is {stored} in the part "
                                                  rf"but {declared} in the table's statement"):
        table.to_arrow()


@pytest.mark.parametrize("name", ["marks_wide", "marks_compact"])
def test_create_statement_with_other_column_names_names_them(tables, name):
    """A column the parts lack reads as defaults (ALTER ADD COLUMN) only when the parts hold no
    column the statement lacks; otherwise the statement does not describe the table."""
    wrong = "CREATE TABLE t (k UInt64, t String) ENGINE = MergeTree ORDER BY k"
    part = tables["parts"][name][0]
    with pytest.raises(SchemaMismatchError, match=rf"{part}/columns\.txt: the table's statement has column 't', "
                                                  r"which the part does not store, and lacks the part's column\(s\) 's'"):
        MergeTreeTable.open(tables["dirs"][name], create_statement=wrong).to_arrow()
    # A statement with one more column than the parts (added later) still reads.
    added = "CREATE TABLE t (k UInt64, s String, z Int32) ENGINE = MergeTree ORDER BY k"
    out = MergeTreeTable.open(tables["dirs"][name], create_statement=added).to_arrow(["k", "s", "z"])
    assert _rows(out.select(["k", "s"])) == tables["expected"][name]

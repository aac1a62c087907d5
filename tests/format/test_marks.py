"""Marks files of Wide and Compact parts, compared byte for byte with chdb-written parts."""

from __future__ import annotations

import numpy as np
import pytest

from spark_mergetree.errors import CorruptPartError, FormatError, InvalidOptionError
from spark_mergetree.format.compression import CompressedStreamWriter, decompress_all, iter_blocks
from spark_mergetree.format.compression_codecs import LZ4
from spark_mergetree.format.marks import (
    MARKS_COMPRESS_BLOCK_SIZE,
    CompactMarks,
    format_columns_substreams,
    parse_columns_substreams,
    read_compact_marks,
    read_marks_file,
    read_wide_marks,
    wide_marks_with_rows,
    write_compact_marks,
    write_wide_marks,
)
from tests.format.chdb_util import make_chdb_table, part_dirs, spec_hex

COLUMNS = "(id UInt64, s String, n Nullable(Int32), a Array(UInt16))"
ROWS_SQL = "SELECT number, toString(number), if(number % 3 = 0, NULL, number), range(number % 4) FROM numbers({rows})"
TABLES = {
    "wide_plain": "min_bytes_for_wide_part = 0, compress_marks = 0",
    "wide_compressed": "min_bytes_for_wide_part = 0, compress_marks = 1",
    "wide_fixed_plain": "min_bytes_for_wide_part = 0, compress_marks = 0, index_granularity_bytes = 0, index_granularity = 1000",
    "wide_fixed_compressed": "min_bytes_for_wide_part = 0, compress_marks = 1, index_granularity_bytes = 0, index_granularity = 1000",
    "compact_substreams_plain": "compress_marks = 0",
    "compact_substreams_compressed": "compress_marks = 1",
    "compact_columns_plain": "compress_marks = 0, write_marks_for_substreams_in_compact_parts = 0",
    "compact_columns_compressed": "compress_marks = 1, write_marks_for_substreams_in_compact_parts = 0",
    "wide_many_marks": "min_bytes_for_wide_part = 0, compress_marks = 1, index_granularity = 8",
}


@pytest.fixture(scope="module")
def parts(tmp_path_factory):
    root = tmp_path_factory.mktemp("marks")
    found = {}
    for index, (name, settings) in enumerate(TABLES.items()):
        rows = 30000 if name == "wide_many_marks" else 20000
        _, table_dir = make_chdb_table(
            root,
            f"CREATE TABLE t{index} {COLUMNS} ENGINE = MergeTree ORDER BY id SETTINGS {settings}",
            [f"INSERT INTO t{index} " + ROWS_SQL.format(rows=rows)],
        )
        found[name] = part_dirs(table_dir)[0]
    for name, settings in (("tiny_wide", "min_bytes_for_wide_part = 0, compress_marks = 0"), ("tiny_compact", "compress_marks = 0")):
        _, table_dir = make_chdb_table(
            root,
            f"CREATE TABLE {name} (x UInt32, s String) ENGINE = MergeTree ORDER BY x SETTINGS {settings}",
            [f"INSERT INTO {name} VALUES (7, 'hi'), (9, 'abc')"],
        )
        found[name] = part_dirs(table_dir)[0]
    # Two granules of exactly 64 KiB: the final mark comes after a flush.
    _, table_dir = make_chdb_table(
        root,
        "CREATE TABLE even (id UInt64) ENGINE = MergeTree ORDER BY id SETTINGS min_bytes_for_wide_part = 0, compress_marks = 0",
        ["INSERT INTO even SELECT number FROM numbers(16384)"],
    )
    found["even"] = part_dirs(table_dir)[0]
    return found


def _stream_count(part, extension):
    if extension.endswith("3"):
        # One pair per column: columns.txt's second line is "<N> columns:".
        assert not (part / "columns_substreams.txt").exists()
        return int((part / "columns.txt").read_text().splitlines()[1].split()[0])
    columns = parse_columns_substreams((part / "columns_substreams.txt").read_text())
    return sum(len(substreams) for _, substreams in columns)


@pytest.mark.parametrize("name", list(TABLES))
def test_read_and_write_back_every_marks_file(parts, name):
    part = parts[name]
    files = [path for path in part.iterdir() if "mrk" in path.suffix]
    assert files
    for path in files:
        raw = path.read_bytes()
        compressed = path.suffix.startswith(".c")
        if path.name.startswith("data."):
            marks = read_marks_file(path, _stream_count(part, path.suffix))
            assert isinstance(marks, CompactMarks)
            assert int(marks.rows.sum()) == 20000 and marks.rows[-1] == 0
            assert write_compact_marks(marks, compressed=compressed) == raw
        else:
            marks = read_marks_file(path)
            rows = 30000 if name == "wide_many_marks" else 20000
            if "fixed" in name:
                assert marks.shape == (20, 2)
            else:
                assert marks.shape[1] == 3 and int(marks[:, 2].sum()) == rows and marks[-1, 2] == 0
            assert write_wide_marks(marks, compressed=compressed) == raw


def test_expected_extensions(parts):
    suffixes = {name: {path.suffix for path in part.iterdir() if "mrk" in path.suffix} for name, part in parts.items()}
    assert suffixes["wide_plain"] == {".mrk2"} and suffixes["wide_compressed"] == {".cmrk2"}
    assert suffixes["wide_fixed_plain"] == {".mrk"} and suffixes["wide_fixed_compressed"] == {".cmrk"}
    assert suffixes["compact_substreams_plain"] == {".mrk4"} and suffixes["compact_substreams_compressed"] == {".cmrk4"}
    assert suffixes["compact_columns_plain"] == {".mrk3"} and suffixes["compact_columns_compressed"] == {".cmrk3"}


def test_compressed_marks_cut_every_64_kib(parts):
    raw = (parts["wide_many_marks"] / "id.cmrk2").read_bytes()
    sizes = [block.decompressed_size for block in iter_blocks(raw, "id.cmrk2")]
    assert len(sizes) > 1 and set(sizes[:-1]) == {MARKS_COMPRESS_BLOCK_SIZE}
    assert len(decompress_all(raw, "id.cmrk2")) % 24 == 0


def test_spec_examples(parts):
    assert spec_hex("marks.md", "x.mrk2") == (parts["tiny_wide"] / "x.mrk2").read_bytes()
    assert spec_hex("marks.md", "data.mrk4") == (parts["tiny_compact"] / "data.mrk4").read_bytes()
    marks = read_compact_marks(spec_hex("marks.md", "data.mrk4"), 3)
    assert marks.offsets[0].tolist() == [[0, 0], [34, 0], [34, 16]]
    assert marks.rows.tolist() == [2, 0]
    assert marks.offsets[1].tolist() == [[75, 0]] * 3
    assert (parts["tiny_compact"] / "data.bin").stat().st_size == 75


@pytest.mark.parametrize("part_name", ["wide_plain", "even"])
def test_marks_we_build_equal_clickhouse(parts, part_name):
    part = parts[part_name]
    real = read_wide_marks((part / "id.mrk2").read_bytes())
    ids = decompress_all((part / "id.bin").read_bytes(), "id.bin")
    writer = CompressedStreamWriter(LZ4)
    row = 0
    for rows in real[:-1, 2].tolist():
        writer.write_granule(ids[8 * row : 8 * (row + rows)])
        row += rows
    final = writer.finish()
    ours = wide_marks_with_rows(writer.marks, real[:-1, 2], final)
    assert write_wide_marks(ours) == (part / "id.mrk2").read_bytes()
    if part_name == "even":
        assert final == ((part / "id.bin").stat().st_size, 0)


def test_bad_marks_are_rejected(parts):
    raw = (parts["wide_plain"] / "id.mrk2").read_bytes()
    with pytest.raises(CorruptPartError, match=r"p/id.mrk2: 95 bytes"):
        read_wide_marks(raw[:-1], "p/id.mrk2")
    with pytest.raises(CorruptPartError, match="marks of 3 streams"):
        read_compact_marks(b"\x00" * 40, 3, "p/data.mrk4")
    compressed = bytearray((parts["wide_compressed"] / "id.cmrk2").read_bytes())
    compressed[-1] ^= 0x10
    with pytest.raises(CorruptPartError, match="id.cmrk2: checksum mismatch"):
        read_wide_marks(bytes(compressed), "p/id.cmrk2", compressed=True)
    with pytest.raises(InvalidOptionError, match="n_streams"):
        read_marks_file(parts["compact_substreams_plain"] / "data.mrk4")
    odd = parts["wide_plain"] / "id.bin"
    with pytest.raises(FormatError, match="unknown marks extension"):
        read_marks_file(odd)
    with pytest.raises(InvalidOptionError):
        write_wide_marks(np.zeros((3, 4), dtype=np.uint64))


def test_columns_substreams_round_trip(parts):
    text = (parts["compact_substreams_plain"] / "columns_substreams.txt").read_text()
    columns = parse_columns_substreams(text)
    assert columns == [("id", ["id"]), ("s", ["s.size", "s"]), ("n", ["n.null", "n"]), ("a", ["a.size0", "a"])]
    assert format_columns_substreams(columns) == text
    odd = [("we`ird", ["we%60ird"])]
    assert parse_columns_substreams(format_columns_substreams(odd)) == odd
    with pytest.raises(FormatError, match="columns_substreams.txt"):
        parse_columns_substreams(text.replace("2 substreams", "3 substreams", 1))


def test_compact_data_and_marks_rebuilt_like_clickhouse(parts):
    part = parts["compact_substreams_plain"]
    columns = parse_columns_substreams((part / "columns_substreams.txt").read_text())
    real_data = (part / "data.bin").read_bytes()
    real = read_compact_marks((part / "data.mrk4").read_bytes(), sum(len(streams) for _, streams in columns))
    blocks = {block.offset: bytes(decompress_all(real_data[block.offset : block.end], "data.bin"))
              for block in iter_blocks(real_data, "data.bin")}
    writer = CompressedStreamWriter(LZ4, min_compress_block_size=0)
    offsets = []
    for granule in range(len(real.rows) - 1):
        stream = 0
        granule_marks = []
        for _, substreams in columns:
            block = blocks[int(real.offsets[granule, stream, 0])]
            starts = [int(real.offsets[granule, stream + k, 1]) for k in range(len(substreams))] + [len(block)]
            for k in range(len(substreams)):
                granule_marks.append(writer.position)
                writer.write(block[starts[k] : starts[k + 1]])
            writer.flush()
            stream += len(substreams)
        offsets.append(granule_marks)
    final = writer.finish()
    offsets.append([final] * len(offsets[0]))
    ours = CompactMarks(np.array(offsets, dtype=np.uint64), real.rows)
    assert writer.getvalue() == real_data
    assert write_compact_marks(ours) == (part / "data.mrk4").read_bytes()

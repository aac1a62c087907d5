"""Compressed blocks: codecs, block bytes, the stream writer's cutting rule and marks, verified reads."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_mergetree.errors import CorruptPartError, InvalidOptionError, UnsupportedError
from spark_mergetree.format.cityhash import cityhash128, file_hash
from spark_mergetree.format.compression import (
    CompressedStreamWriter,
    compress_block,
    decompress_all,
    decompress_range,
    decompress_ranges,
    iter_blocks,
)
from spark_mergetree.format.compression_codecs import LZ4, NONE, ZSTD, parse_codec
from spark_mergetree.format.granularity import block_granules
from spark_mergetree.format.marks import read_wide_marks
from tests.format.chdb_util import make_chdb_table, part_dirs, spec_hex

WIDE = "SETTINGS min_bytes_for_wide_part = 0, compress_marks = 0, compress_primary_key = 0"
ROWS = 20000


@pytest.fixture(scope="module")
def parts(tmp_path_factory):
    """Wide parts written by ClickHouse with each codec, plus the tiny example part of the spec."""
    root = tmp_path_factory.mktemp("compression")
    found = {}
    for table, codec in (("t_lz4", "LZ4"), ("t_lz4hc", "LZ4HC(9)"), ("t_zstd", "ZSTD(1)"), ("t_zstd5", "ZSTD(5)"),
                         ("t_none", "NONE")):
        _, table_dir = make_chdb_table(
            root,
            f"CREATE TABLE {table} (id UInt64, s String) ENGINE = MergeTree ORDER BY id "
            f"{WIDE}, default_compression_codec = '{codec}'",
            [f"INSERT INTO {table} SELECT number, toString(number * 7) FROM numbers({ROWS})"],
        )
        found[codec] = part_dirs(table_dir)[0]
    _, table_dir = make_chdb_table(
        root,
        f"CREATE TABLE tiny (x UInt32, s String) ENGINE = MergeTree ORDER BY x {WIDE}",
        ["INSERT INTO tiny VALUES (7, 'hi'), (9, 'abc')"],
    )
    found["tiny"] = part_dirs(table_dir)[0]
    # Three strings of 1.2 MB: a single granule of 3.6 MB must span several 1 MiB blocks.
    _, table_dir = make_chdb_table(
        root,
        f"CREATE TABLE big (id UInt64, s String) ENGINE = MergeTree ORDER BY id {WIDE}",
        ["INSERT INTO big SELECT number, repeat(repeat(char(65 + number), 1000), 1200) FROM numbers(3)"],
    )
    found["big"] = part_dirs(table_dir)[0]
    return found


@pytest.mark.parametrize(
    ("text", "name", "level", "spelling"),
    [
        ("LZ4", "LZ4", None, "CODEC(LZ4)"),
        ("lz4", "LZ4", None, "CODEC(LZ4)"),
        ("NONE", "NONE", None, "CODEC(NONE)"),
        ("ZSTD", "ZSTD", 1, "CODEC(ZSTD(1))"),
        ("ZSTD(3)", "ZSTD", 3, "CODEC(ZSTD(3))"),
        ("CODEC(ZSTD(1))", "ZSTD", 1, "CODEC(ZSTD(1))"),
        (" CODEC( LZ4 ) ", "LZ4", None, "CODEC(LZ4)"),
        ("LZ4HC", "LZ4HC", None, "CODEC(LZ4HC)"),
        ("lz4hc(12)", "LZ4HC", 12, "CODEC(LZ4HC(12))"),
        ("CODEC(LZ4HC(0))", "LZ4HC", 0, "CODEC(LZ4HC(0))"),
        # As in ClickHouse: level 0 is zstd's default, negative levels its fast ones; LZ4HC below 1 its default.
        ("ZSTD(0)", "ZSTD", 0, "CODEC(ZSTD(0))"),
        ("ZSTD(-7)", "ZSTD", -7, "CODEC(ZSTD(-7))"),
        ("LZ4HC(-1)", "LZ4HC", 0, "CODEC(LZ4HC(0))"),
    ],
)
def test_parse_codec(text, name, level, spelling):
    codec = parse_codec(text)
    assert (codec.name, codec.level, codec.text) == (name, level, spelling)
    assert parse_codec(codec.text) == codec


@pytest.mark.parametrize("text", ["", "GZIP", "ZSTD(-200000)", "ZSTD(23)", "ZSTD(x)", "LZ4(1)", "CODEC(LZ4", "Delta, LZ4",
                                  "LZ4HC(13)", "Delta", "ZSTD(3, 24)", "Default"])
def test_parse_codec_rejects(text):
    with pytest.raises(InvalidOptionError, match="valid codecs: NONE, LZ4, LZ4HC"):
        parse_codec(text)


@pytest.mark.parametrize("codec", ["LZ4", "LZ4HC(9)", "ZSTD(1)", "ZSTD(5)", "NONE"])
def test_codec_spelling_matches_clickhouse(parts, codec):
    assert (parts[codec] / "default_compression_codec.txt").read_text() == parse_codec(codec).text


def test_spec_examples_are_real_blocks(parts):
    for name in ("x.bin", "s.bin"):
        real = (parts["tiny"] / name).read_bytes()
        assert spec_hex("blocks.md", name) == real
        payload = decompress_all(real, name)
        assert compress_block(LZ4, payload) == real
    assert decompress_all(spec_hex("blocks.md", "x.bin"), "x.bin") == struct.pack("<II", 7, 9)
    assert decompress_all(spec_hex("blocks.md", "s.bin"), "s.bin") == b"hiabc"


def _granule_chunks(part, rows):
    """The uncompressed bytes of each granule of id (UInt64) and s (String chars), from the part itself."""
    offsets = np.concatenate([[0], np.cumsum(rows)]).astype(int).tolist()
    ids = decompress_all((part / "id.bin").read_bytes(), "id.bin")
    lengths = np.frombuffer(decompress_all((part / "s.size.bin").read_bytes(), "s.size.bin"), dtype="<u8")
    chars = decompress_all((part / "s.bin").read_bytes(), "s.bin")
    char_offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(int)[offsets].tolist()
    return {
        "id": [ids[8 * a : 8 * b] for a, b in zip(offsets[:-1], offsets[1:])],
        "s": [chars[a:b] for a, b in zip(char_offsets[:-1], char_offsets[1:])],
    }


@pytest.mark.parametrize("codec", ["LZ4", "LZ4HC(9)", "ZSTD(1)", "ZSTD(5)", "NONE"])
def test_writer_reproduces_clickhouse_streams(parts, codec):
    part = parts[codec]
    rows = block_granules(ROWS, ROWS * 8 + ROWS * 8)
    for stream, chunks in _granule_chunks(part, rows).items():
        writer = CompressedStreamWriter(parse_codec(codec))
        for chunk in chunks:
            writer.write_granule(chunk)
        final = writer.finish()
        real_marks = read_wide_marks((part / f"{stream}.mrk2").read_bytes())
        assert writer.getvalue() == (part / f"{stream}.bin").read_bytes(), stream
        np.testing.assert_array_equal(writer.marks, real_marks[:-1, :2])
        assert final == tuple(int(v) for v in real_marks[-1, :2])
        plain = b"".join(chunks)
        assert writer.uncompressed_size == len(plain)
        assert writer.uncompressed_hash == file_hash(plain)


def test_huge_granule_spans_one_mib_blocks_like_clickhouse(parts):
    part = parts["big"]
    real = (part / "s.bin").read_bytes()
    real_sizes = [block.decompressed_size for block in iter_blocks(real, "s.bin")]
    chars = decompress_all(real, "s.bin")
    assert len(chars) == 3 * 1200000
    writer = CompressedStreamWriter(LZ4)
    writer.write_granule(chars)
    writer.finish()
    ours = [block.decompressed_size for block in iter_blocks(writer.getvalue(), "ours")]
    assert ours == real_sizes == [1048576, 1048576, 1048576, 3600000 - 3 * 1048576]
    assert writer.getvalue() == real


def test_decompress_range_between_marks(parts):
    part = parts["LZ4"]
    data = (part / "s.bin").read_bytes()
    marks = read_wide_marks((part / "s.mrk2").read_bytes())
    whole = decompress_all(data, "s.bin")
    lengths = np.frombuffer(decompress_all((part / "s.size.bin").read_bytes(), "s.size.bin"), dtype="<u8")
    starts = np.concatenate([[0], np.cumsum(lengths)]).astype(int).tolist()
    row_of_mark = np.concatenate([[0], np.cumsum(marks[:, 2])]).astype(int).tolist()
    for first in range(len(marks) - 1):
        for last in range(first + 1, len(marks)):
            got = decompress_range(data, "s.bin", tuple(marks[first, :2]), tuple(marks[last, :2]))
            assert got == whole[starts[row_of_mark[first]] : starts[row_of_mark[last]]]
    assert decompress_range(data, "s.bin", tuple(marks[1, :2]), None) == whole[starts[row_of_mark[1]] :]


@settings(max_examples=40, deadline=None)
@given(
    granules=st.lists(st.binary(min_size=0, max_size=300), min_size=1, max_size=12),
    min_size=st.integers(min_value=0, max_value=400),
    max_size=st.integers(min_value=1, max_value=500),
    codec=st.sampled_from([LZ4, NONE, ZSTD(1)]),
)
def test_writer_round_trip_and_marks(granules, min_size, max_size, codec):
    writer = CompressedStreamWriter(codec, min_compress_block_size=min_size, max_compress_block_size=max_size)
    for granule in granules:
        writer.write_granule(granule)
    final = writer.finish()
    data = writer.getvalue()
    assert decompress_all(data, "w.bin") == b"".join(granules)
    assert all(block.decompressed_size <= max_size for block in iter_blocks(data, "w.bin"))
    bounds = [tuple(int(v) for v in mark) for mark in writer.marks] + [final]
    for index, granule in enumerate(granules):
        assert decompress_range(data, "w.bin", bounds[index], bounds[index + 1]) == granule


@settings(max_examples=150, deadline=None)
@given(
    prefix=st.binary(min_size=0, max_size=20),
    granules=st.lists(st.binary(min_size=0, max_size=300), min_size=0, max_size=15),
    min_size=st.integers(min_value=0, max_value=400),
    max_size=st.integers(min_value=1, max_value=500),
)
def test_a_whole_stream_at_once_makes_the_blocks_and_marks_of_granule_by_granule(prefix, granules, min_size,
                                                                               max_size):
    """write_granules finds block cuts per block; writing granule by granule is the oracle."""
    one_by_one = CompressedStreamWriter(NONE, min_compress_block_size=min_size, max_compress_block_size=max_size)
    if prefix:
        one_by_one.write(prefix)
    for granule in granules:
        one_by_one.write_granule(granule)
    at_once = CompressedStreamWriter(NONE, min_compress_block_size=min_size, max_compress_block_size=max_size)
    offsets = np.cumsum([0, len(prefix)] + [len(g) for g in granules])[1:]
    at_once.write_granules(prefix + b"".join(granules), offsets)
    assert at_once.finish() == one_by_one.finish()
    assert at_once.getvalue() == one_by_one.getvalue()
    assert at_once.marks.tolist() == one_by_one.marks.tolist()
    assert at_once.uncompressed_hash == one_by_one.uncompressed_hash


def _block_with(method: int, compressed_size: int, decompressed_size: int, payload: bytes) -> bytes:
    body = struct.pack("<BII", method, compressed_size, decompressed_size) + payload
    return cityhash128(body) + body


def test_corruption_is_detected_with_file_and_offset():
    first = compress_block(LZ4, b"a" * 1000)
    second = compress_block(LZ4, bytes(range(256)) * 4)
    good = first + second
    assert decompress_all(good, "c.bin") == b"a" * 1000 + bytes(range(256)) * 4

    flipped = bytearray(good)
    flipped[len(first) + 30] ^= 0x01
    with pytest.raises(CorruptPartError, match=rf"c\.bin: checksum mismatch .* byte offset {len(first)}"):
        decompress_all(bytes(flipped), "c.bin")

    with pytest.raises(CorruptPartError, match=rf"c\.bin: truncated .* byte offset {len(first)}"):
        decompress_all(good[:-3], "c.bin")
    with pytest.raises(CorruptPartError, match=rf"truncated .* byte offset {len(first)}"):
        decompress_all(good[: len(first) + 10], "c.bin")

    lying_none = _block_with(0x02, 9 + 3, 4, b"abc")
    with pytest.raises(CorruptPartError, match="byte offset 0"):
        decompress_all(lying_none, "c.bin")

    payload = first[25:]
    lying_lz4 = _block_with(0x82, 9 + len(payload), 999, payload)
    with pytest.raises(CorruptPartError, match="c.bin.*byte offset 0"):
        decompress_all(lying_lz4, "c.bin")

    # The checksum is verified before anything else: a damaged header is a checksum error.
    damaged_header = bytearray(first)
    damaged_header[21] ^= 0x04
    with pytest.raises(CorruptPartError, match="checksum mismatch"):
        decompress_all(bytes(damaged_header), "c.bin")


@settings(max_examples=150, deadline=None)
@given(
    granules=st.lists(st.binary(min_size=0, max_size=300), min_size=1, max_size=15),
    max_size=st.integers(min_value=1, max_value=500),
    picks=st.lists(st.integers(min_value=0, max_value=14), max_size=8),
    codec=st.sampled_from([LZ4, NONE, ZSTD(1)]),
)
def test_decompress_ranges_equals_the_ranges_joined(granules, max_size, picks, codec):
    # A Compact part's column: a mark range per granule, whole blocks or not.
    writer = CompressedStreamWriter(codec, min_compress_block_size=0, max_compress_block_size=max_size)
    for granule in granules:
        writer.write_granule(granule)
    final = writer.finish()
    data = writer.getvalue()
    bounds = [tuple(int(v) for v in mark) for mark in writer.marks] + [final]
    ranges = [(bounds[i], bounds[i + 1]) for i in (pick % len(granules) for pick in picks)]
    assert bytes(decompress_ranges(data, "r.bin", ranges)) == b"".join(granules[pick % len(granules)] for pick in picks)
    every = [(bounds[i], bounds[i + 1]) for i in range(len(granules))]
    assert bytes(decompress_ranges(data, "r.bin", every)) == b"".join(granules)


def test_decompress_ranges_verifies_every_block():
    data = compress_block(LZ4, b"x" * 100) + compress_block(LZ4, b"y" * 100)
    middle = len(data) // 2
    assert bytes(decompress_ranges(data, "r.bin", [((0, 0), (middle, 0)), ((middle, 0), None)])) == b"x" * 100 + b"y" * 100
    flipped = bytearray(data)
    flipped[middle + 20] ^= 0x01
    with pytest.raises(CorruptPartError, match=rf"r\.bin: .* byte offset {middle}"):
        decompress_ranges(bytes(flipped), "r.bin", [((0, 0), (middle, 0)), ((middle, 0), None)])
    with pytest.raises(CorruptPartError, match="block boundary"):
        decompress_ranges(data, "r.bin", [((0, 0), (10, 0))])


def test_decompress_range_rejects_bad_marks():
    data = compress_block(LZ4, b"x" * 100) + compress_block(LZ4, b"y" * 100)
    with pytest.raises(CorruptPartError, match="beyond"):
        decompress_range(data, "r.bin", (0, 150), None)
    with pytest.raises(CorruptPartError, match="past the end"):
        decompress_range(data, "r.bin", (0, 0), (len(data) + 5, 0))
    with pytest.raises(CorruptPartError, match="block boundary"):
        decompress_range(data, "r.bin", (0, 0), (10, 0))
    assert decompress_range(data, "r.bin", (0, 90), (len(data) // 2, 10)) == b"x" * 10 + b"y" * 10


def test_writer_misuse():
    writer = CompressedStreamWriter(LZ4)
    with pytest.raises(InvalidOptionError):
        writer.getvalue()
    writer.finish()
    with pytest.raises(InvalidOptionError):
        writer.write_granule(b"late")
    with pytest.raises(InvalidOptionError):
        CompressedStreamWriter(LZ4, max_compress_block_size=0)
    empty = CompressedStreamWriter(NONE)
    assert empty.finish() == (0, 0) and empty.getvalue() == b"" and empty.marks.shape == (0, 2)


@pytest.mark.parametrize("path", ["system libraries", "python packages", "threads"])
def test_every_decompression_path_agrees(monkeypatch, path):
    from spark_mergetree.format import compression

    if path == "python packages":
        monkeypatch.setattr(compression, "_lz4_decoder", None)
        monkeypatch.setattr(compression, "_zstd_decoder", None)
    if path == "threads":
        monkeypatch.setattr(compression, "_PARALLEL_THRESHOLD", 1)
    granules = [bytes([i]) * 3000 + bytes(range(256)) * (i + 1) for i in range(40)]
    for codec in (LZ4, ZSTD(1), NONE):
        writer = CompressedStreamWriter(codec, min_compress_block_size=4096, max_compress_block_size=8192)
        for granule in granules:
            writer.write_granule(granule)
        writer.finish()
        data = writer.getvalue()
        assert decompress_all(data, "p.bin") == b"".join(granules)
        assert decompress_range(data, "p.bin", tuple(writer.marks[5]), tuple(writer.marks[30])) == b"".join(granules[5:30])
        if codec is not NONE:
            payload = next(iter_blocks(data, "p.bin")).payload
            size = next(iter_blocks(data, "p.bin")).decompressed_size
            lying = _block_with(codec.method, 9 + len(payload), size - 1, bytes(payload))
            with pytest.raises(CorruptPartError, match="p.bin.*byte offset 0"):
                decompress_all(lying, "p.bin")


@pytest.mark.parametrize(("method", "payload", "named"), [
    (0x91, bytes([2, 0x92, 0x96]) + b"xyz", r"codec chain CODEC\(Delta, AES_128_GCM_SIV\) \(method byte 0x91\)"),
    (0x91, bytes([2, 0x94, 0xAB]) + b"xyz", r"codec chain CODEC\(DoubleDelta, 0xab\)"),
    (0x96, b"xyz", r"codec AES_128_GCM_SIV \(method byte 0x96\)"),
    (0x97, b"xyz", r"codec AES_256_GCM_SIV"),
    (0x99, b"xyz", r"codec DeflateQpl"),
    (0x9B, b"xyz", r"codec ZSTD_QPL"),
    (0x9C, b"xyz", r"codec SZ3"),
    (0xAB, b"xyz", r"unknown compression method 0xab"),
])
def test_intact_block_of_a_codec_we_lack_is_unsupported_not_corrupt(method, payload, named):
    first = compress_block(LZ4, b"a" * 1000)
    block = _block_with(method, 9 + len(payload), 3, payload)
    with pytest.raises(UnsupportedError, match=rf"c\.bin: block at byte offset {len(first)} is compressed with {named}"):
        decompress_all(first + block, "c.bin")
    # The same block with a damaged byte fails its checksum first: that is corruption.
    damaged = bytearray(block)
    damaged[-1] ^= 1
    with pytest.raises(CorruptPartError, match=rf"checksum mismatch .* byte offset {len(first)}"):
        decompress_all(first + bytes(damaged), "c.bin")

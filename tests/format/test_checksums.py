"""checksums.txt: parsing, byte-exact writing and recomputing every entry of chdb-written parts."""

from __future__ import annotations

import struct

import pytest

from spark_mergetree.errors import CorruptPartError, FormatError, UnsupportedError
from spark_mergetree.format.checksums import (
    Checksums,
    FileChecksum,
    combine_stream_hashes,
    compute_file_checksum,
    is_compressed_file,
)
from spark_mergetree.format.cityhash import cityhash128_with_seed, file_hash
from spark_mergetree.format.compression import compress_block, decompress_all
from spark_mergetree.format.compression_codecs import ZSTD
from tests.format.chdb_util import make_chdb_table, part_dirs, spec_hex

LAYOUTS = {
    "wide_lz4_plain_marks": "min_bytes_for_wide_part = 0, compress_marks = 0, compress_primary_key = 0",
    "wide_zstd_compressed_marks": "min_bytes_for_wide_part = 0, compress_marks = 1, compress_primary_key = 1, "
    "default_compression_codec = 'ZSTD(1)'",
    "compact_lz4_plain_marks": "compress_marks = 0, compress_primary_key = 0",
    "compact_zstd_compressed_marks": "compress_marks = 1, compress_primary_key = 1, default_compression_codec = 'ZSTD(3)'",
    "wide_partitioned_merged": "min_bytes_for_wide_part = 0",
}


@pytest.fixture(scope="module")
def parts(tmp_path_factory):
    root = tmp_path_factory.mktemp("checksums")
    found = {}
    for index, (layout, settings) in enumerate(LAYOUTS.items()):
        table = f"t{index}"
        partition = "PARTITION BY toYYYYMM(d)" if "partitioned" in layout else ""
        index = ", INDEX by_s s TYPE bloom_filter GRANULARITY 1" if "partitioned" in layout else ""
        inserts = [
            f"INSERT INTO {table} SELECT number, toDate('2024-01-01') + number % 40, toString(number), "
            f"if(number % 3 = 0, NULL, number) FROM numbers({offset}, 7000)"
            for offset in (0, 7000)
        ]
        session, table_dir = make_chdb_table(
            root,
            f"CREATE TABLE {table} (id UInt64, d Date, s String, n Nullable(Int32){index}) ENGINE = MergeTree "
            f"{partition} ORDER BY id SETTINGS {settings}",
            inserts,
        )
        if "merged" in layout:
            session.query(f"OPTIMIZE TABLE {table} FINAL")
        found[layout] = part_dirs(table_dir)
    _, table_dir = make_chdb_table(
        root,
        "CREATE TABLE tiny (x UInt32, s String) ENGINE = MergeTree ORDER BY x "
        "SETTINGS min_bytes_for_wide_part = 0, compress_marks = 0, compress_primary_key = 0",
        ["INSERT INTO tiny VALUES (7, 'hi'), (9, 'abc')"],
    )
    found["tiny"] = part_dirs(table_dir)
    return found


@pytest.mark.parametrize("layout", list(LAYOUTS) + ["tiny"])
def test_parse_and_write_back_byte_for_byte(parts, layout):
    for part in parts[layout]:
        raw = (part / "checksums.txt").read_bytes()
        parsed = Checksums.parse(raw, part / "checksums.txt")
        assert parsed.to_bytes() == raw
        listed = {path.name for path in part.iterdir()} - {
            "checksums.txt", "columns.txt", "columns_substreams.txt",
            "default_compression_codec.txt", "metadata_version.txt",
        }
        assert set(parsed.files) == listed


@pytest.mark.parametrize("layout", list(LAYOUTS) + ["tiny"])
def test_recomputed_entries_equal_stored(parts, layout):
    for part in parts[layout]:
        parsed = Checksums.parse((part / "checksums.txt").read_bytes())
        compact = (part / "data.bin").exists()
        for name, stored in parsed.files.items():
            assert stored.is_compressed == is_compressed_file(name), name
            computed = compute_file_checksum(part / name, is_compressed_file(name), compact_data=compact and name == "data.bin")
            assert computed == stored, f"{part.name}/{name}"
            assert compute_file_checksum((part / name).read_bytes(), stored.is_compressed,
                                         compact_data=compact and name == "data.bin") == stored
        parsed.verify_files(part)


def test_compact_data_hash_folds_the_stream_hash(parts):
    part = parts["compact_lz4_plain_marks"][0]
    stored = Checksums.parse((part / "checksums.txt").read_bytes()).files["data.bin"]
    stream_hash = file_hash(decompress_all((part / "data.bin").read_bytes(), "data.bin"))
    assert stored.uncompressed_hash == combine_stream_hashes([stream_hash])
    assert stored.uncompressed_hash == cityhash128_with_seed(stream_hash, bytes(16))


def test_spec_example_body(parts):
    raw = (parts["tiny"][0] / "checksums.txt").read_bytes()
    body = spec_hex("checksums.md", "body")
    assert decompress_all(raw[len(b"checksums format version: 4\n"):], "checksums.txt") == body
    parsed = Checksums.parse(raw)
    assert parsed.body_bytes() == body
    assert parsed.files["count.txt"] == FileChecksum(1, bytes.fromhex("6d6ee28eebb4755396b925d25ba6f21c"))
    assert parsed.files["x.bin"].uncompressed_hash == parsed.files["primary.idx"].file_hash


def test_version_3_and_version_2(parts):
    parsed = Checksums.parse((parts["wide_zstd_compressed_marks"][0] / "checksums.txt").read_bytes())
    version_3 = b"checksums format version: 3\n" + parsed.body_bytes()
    assert Checksums.parse(version_3) == parsed

    lines = [f"{len(parsed.files)} files:"]
    for name, entry in sorted(parsed.files.items()):
        low, high = struct.unpack("<QQ", entry.file_hash)
        lines += [name, f"\tsize: {entry.file_size}", f"\thash: {low} {high}", f"\tcompressed: {int(entry.is_compressed)}"]
        if entry.is_compressed:
            low, high = struct.unpack("<QQ", entry.uncompressed_hash)
            lines += [f"\tuncompressed size: {entry.uncompressed_size}", f"\tuncompressed hash: {low} {high}"]
    version_2 = ("checksums format version: 2\n" + "\n".join(lines) + "\n").encode()
    assert Checksums.parse(version_2) == parsed
    with pytest.raises(CorruptPartError, match="version 2"):
        Checksums.parse(version_2.replace(b"\tsize:", b"\tsise:", 1))


def test_refuses_unknown_and_malformed(parts):
    raw = (parts["tiny"][0] / "checksums.txt").read_bytes()
    with pytest.raises(UnsupportedError, match="version 1"):
        Checksums.parse(b"checksums format version: 1\n", "p/checksums.txt")
    with pytest.raises(UnsupportedError, match="version 5"):
        Checksums.parse(b"checksums format version: 5\n")
    with pytest.raises(FormatError, match="p/checksums.txt"):
        Checksums.parse(b"hello\n", "p/checksums.txt")
    damaged = bytearray(raw)
    damaged[-1] ^= 0xFF
    with pytest.raises(CorruptPartError, match="checksum mismatch"):
        Checksums.parse(bytes(damaged), "p/checksums.txt")
    body = spec_hex("checksums.md", "body")
    header = b"checksums format version: 4\n"
    with pytest.raises(CorruptPartError, match="ends inside"):
        Checksums.parse(header + compress_block(ZSTD(3), body[:-5]))
    with pytest.raises(CorruptPartError, match="unexpected bytes"):
        Checksums.parse(header + compress_block(ZSTD(3), body + b"\x00"))


def test_verify_files_detects_changes(parts, tmp_path):
    source = parts["wide_lz4_plain_marks"][0]
    copy = tmp_path / source.name
    copy.mkdir()
    for path in source.iterdir():
        (copy / path.name).write_bytes(path.read_bytes())
    parsed = Checksums.parse((copy / "checksums.txt").read_bytes())
    parsed.verify_files(copy)
    marks = bytearray((copy / "id.mrk2").read_bytes())
    marks[5] ^= 1
    (copy / "id.mrk2").write_bytes(bytes(marks))
    with pytest.raises(CorruptPartError, match="id.mrk2: content does not match checksums.txt"):
        parsed.verify_files(copy)
    parsed.verify_files(copy, check_hashes=False)
    (copy / "id.bin").write_bytes((copy / "id.bin").read_bytes()[:-1])
    with pytest.raises(CorruptPartError, match="id.bin: size"):
        parsed.verify_files(copy, check_hashes=False)
    (copy / "count.txt").unlink()
    with pytest.raises(CorruptPartError, match="count.txt: listed in checksums.txt but missing"):
        parsed.verify_files(copy, check_hashes=False)


def test_compressed_file_names():
    for name in ("a.bin", "a.null.bin", "a.cmrk2", "data.cmrk4", "data.cmrk3", "a.cmrk", "primary.cidx", "skp_idx_i.idx"):
        assert is_compressed_file(name), name
    for name in ("a.mrk2", "data.mrk4", "primary.idx", "minmax_d.idx", "partition.dat", "count.txt", "serialization.json"):
        assert not is_compressed_file(name), name


def test_partitioned_part_with_skip_index_is_covered(parts):
    names = {name for part in parts["wide_partitioned_merged"] for name in Checksums.parse((part / "checksums.txt").read_bytes()).files}
    assert {"partition.dat", "minmax_d.idx", "skp_idx.packed"} <= names  # 26.9 packs skip indexes
    assert any(part.name.endswith("_1") for part in parts["wide_partitioned_merged"])

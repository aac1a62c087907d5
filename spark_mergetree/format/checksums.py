"""``checksums.txt``: the size and hash of every file of a part, read (versions 2, 3, 4) and written (4).

Version 4 is the header line ``checksums format version: 4\\n`` followed by compressed blocks whose
decompressed bytes are the version 3 body (binary). Version 2 is text. See format_spec/checksums.md.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from spark_mergetree.errors import CorruptPartError, FormatError, UnsupportedError
from spark_mergetree.format.cityhash import ZERO_HASH, FileHasher, cityhash128_with_seed
from spark_mergetree.format.compression import compress_block, decompress_all, decompress_block, iter_blocks
from spark_mergetree.format.compression_codecs import METHOD_MULTIPLE, ZSTD, Codec
from spark_mergetree.format.siphash import siphash128_clickhouse

__all__ = [
    "CHECKSUMS_FILE",
    "CHECKSUMS_CODEC",
    "FileChecksum",
    "Checksums",
    "compute_file_checksum",
    "combine_stream_hashes",
    "is_compressed_file",
    "matches_entry",
    "PROJECTION_SUFFIX",
]

CHECKSUMS_FILE = "checksums.txt"
# A projection is a directory `<name>.proj/` inside the part, holding a part of its own; the parent's
# checksums.txt lists it as one entry (see Checksums.total_size / total_hash).
PROJECTION_SUFFIX = ".proj"
# ClickHouse compresses checksums.txt with ZSTD at level 3 whatever the table's codec is.
CHECKSUMS_CODEC: Codec = ZSTD(3)
_HEADER_PREFIX = b"checksums format version: "
_hash_halves = struct.Struct("<QQ")


@dataclass(frozen=True)
class FileChecksum:
    """One file's entry; the uncompressed fields are only meaningful when ``is_compressed``."""

    file_size: int
    file_hash: bytes
    is_compressed: bool = False
    uncompressed_size: int = 0
    uncompressed_hash: bytes = bytes(16)


def _write_varuint(out: bytearray, value: int) -> None:
    if value < 0:
        raise FormatError(f"cannot write negative value {value} as a varuint")
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


class _Cursor:
    """Reads the binary checksums body, naming the file and offset on malformed input."""

    def __init__(self, data: bytes, path: str) -> None:
        self.data = data
        self.position = 0
        self.path = path

    def _need(self, count: int, what: str) -> None:
        if self.position + count > len(self.data):
            raise CorruptPartError(
                f"{self.path}: checksums body ends inside {what} at decompressed offset {self.position}"
            )

    def varuint(self, what: str) -> int:
        value = 0
        for shift in range(0, 70, 7):
            self._need(1, what)
            byte = self.data[self.position]
            self.position += 1
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                return value
        raise CorruptPartError(f"{self.path}: varuint too long in {what} at decompressed offset {self.position}")

    def take(self, count: int, what: str) -> bytes:
        self._need(count, what)
        chunk = self.data[self.position : self.position + count]
        self.position += count
        return chunk


@dataclass
class Checksums:
    """The parsed ``checksums.txt`` of a part: file name → entry."""

    files: dict[str, FileChecksum] = field(default_factory=dict)

    @classmethod
    def parse(cls, data: bytes | bytearray | memoryview, path: str | os.PathLike[str] = CHECKSUMS_FILE) -> Checksums:
        """Parse any version ClickHouse may leave: 4 (current), 3 (binary), 2 (text)."""
        raw = bytes(data)
        where = str(path)
        newline = raw.find(b"\n")
        if not raw.startswith(_HEADER_PREFIX) or newline < 0:
            raise FormatError(f"{where}: does not start with {_HEADER_PREFIX.decode()!r}<version>\\n")
        version_text = raw[len(_HEADER_PREFIX) : newline]
        if not version_text.isdigit():
            raise FormatError(f"{where}: bad checksums format version {version_text!r}")
        version = int(version_text)
        body_start = newline + 1
        if version == 4:
            body = decompress_all(memoryview(raw)[body_start:], f"{where} (blocks start at byte {body_start})")
            return cls._parse_binary(bytes(body), where)
        if version == 3:
            return cls._parse_binary(raw[body_start:], where)
        if version == 2:
            return cls._parse_text(raw[body_start:], where)
        raise UnsupportedError(f"{where}: checksums format version {version} is not supported (2, 3 and 4 are)")

    @classmethod
    def _parse_binary(cls, body: bytes, where: str) -> Checksums:
        cursor = _Cursor(body, where)
        count = cursor.varuint("the file count")
        files: dict[str, FileChecksum] = {}
        for _ in range(count):
            name_length = cursor.varuint("a file name length")
            name = cursor.take(name_length, "a file name").decode("utf-8", errors="strict")
            file_size = cursor.varuint(f"the size of {name}")
            file_hash = cursor.take(16, f"the hash of {name}")
            flag = cursor.take(1, f"the compressed flag of {name}")[0]
            if flag > 1:
                raise CorruptPartError(f"{where}: compressed flag of {name} is {flag}, expected 0 or 1")
            if flag:
                uncompressed_size = cursor.varuint(f"the uncompressed size of {name}")
                uncompressed_hash = cursor.take(16, f"the uncompressed hash of {name}")
                files[name] = FileChecksum(file_size, file_hash, True, uncompressed_size, uncompressed_hash)
            else:
                files[name] = FileChecksum(file_size, file_hash)
        if cursor.position != len(body):
            raise CorruptPartError(
                f"{where}: {len(body) - cursor.position} unexpected bytes after {count} entries "
                f"at decompressed offset {cursor.position}"
            )
        return cls(files)

    @classmethod
    def _parse_text(cls, body: bytes, where: str) -> Checksums:
        try:
            text = body.decode("utf-8")
            lines = text.split("\n")
            head = lines[0]
            if not head.endswith(" files:"):
                raise ValueError(f"expected '<N> files:', got {head!r}")
            count = int(head[: -len(" files:")])
            files: dict[str, FileChecksum] = {}
            line_number = 1

            def field_value(label: str) -> str:
                nonlocal line_number
                line = lines[line_number]
                prefix = f"\t{label}: "
                if not line.startswith(prefix):
                    raise ValueError(f"line {line_number + 2}: expected {prefix!r}, got {line!r}")
                line_number += 1
                return line[len(prefix) :]

            def hash_value(label: str) -> bytes:
                low, high = field_value(label).split(" ")
                return _hash_halves.pack(int(low), int(high))

            for _ in range(count):
                name = lines[line_number]
                line_number += 1
                file_size = int(field_value("size"))
                file_hash = hash_value("hash")
                compressed = int(field_value("compressed"))
                if compressed:
                    size = int(field_value("uncompressed size"))
                    files[name] = FileChecksum(file_size, file_hash, True, size, hash_value("uncompressed hash"))
                else:
                    files[name] = FileChecksum(file_size, file_hash)
        except (ValueError, IndexError, UnicodeDecodeError) as exc:
            raise CorruptPartError(f"{where}: malformed checksums version 2 text: {exc}") from exc
        return cls(files)

    @property
    def total_size(self) -> int:
        """Bytes of every listed file: the size a parent part records for a projection directory."""
        return sum(entry.file_size for entry in self.files.values())

    def total_hash(self) -> bytes:
        """The hash a parent part records for a projection directory: ClickHouse's sipHash128 over,
        per file in name order, the UInt64 LE length of the name, the name and the file's hash."""
        data = bytearray()
        for name in sorted(self.files):
            encoded = name.encode("utf-8")
            data += struct.pack("<Q", len(encoded)) + encoded + self.files[name].file_hash
        return siphash128_clickhouse(bytes(data))

    def body_bytes(self) -> bytes:
        """The version 3 binary body (what version 4 compresses)."""
        out = bytearray()
        _write_varuint(out, len(self.files))
        for name in sorted(self.files):
            entry = self.files[name]
            encoded = name.encode("utf-8")
            _write_varuint(out, len(encoded))
            out += encoded
            _write_varuint(out, entry.file_size)
            out += entry.file_hash
            out.append(1 if entry.is_compressed else 0)
            if entry.is_compressed:
                _write_varuint(out, entry.uncompressed_size)
                out += entry.uncompressed_hash
        return bytes(out)

    def to_bytes(self) -> bytes:
        """The version 4 file, byte for byte as ClickHouse writes it."""
        return _HEADER_PREFIX + b"4\n" + compress_block(CHECKSUMS_CODEC, self.body_bytes())

    def problems(self, read: Callable[[str], bytes | bytearray | memoryview], size: Callable[[str], int],
                 where: str, check_hashes: bool = True, prefix: str = "") -> list[str]:
        """What differs between the listed files and their entries, as CHECK TABLE finds it.

        ``read(name)``/``size(name)`` give a file of the part by its path inside the part (raising
        OSError when it is missing); ``where`` is the part's location for messages. A projection
        entry (``<name>.proj``) is checked through the projection's own checksums.txt, whose files
        must add up to the entry (see total_size / total_hash).
        """
        out: list[str] = []
        # A Wide column named "data" also has data.bin; Compact parts are told apart by their marks file.
        is_compact = any(name.startswith("data.") and "mrk" in name for name in self.files)
        for name, expected in sorted(self.files.items()):
            path = prefix + name
            shown = f"{where}/{path}"
            try:
                if name.endswith(PROJECTION_SUFFIX):
                    listing = f"{path}/{CHECKSUMS_FILE}"
                    inner = Checksums.parse(read(listing), f"{where}/{listing}")
                    out += inner.problems(read, size, where, check_hashes, prefix=path + "/")
                    if (inner.total_size, inner.total_hash()) != (expected.file_size, expected.file_hash):
                        out.append(f"{shown}: the projection's {CHECKSUMS_FILE} does not add up to its entry "
                                   f"in the part's {CHECKSUMS_FILE}")
                    continue
                actual_size = size(path)
                if actual_size != expected.file_size:
                    out.append(f"{shown}: size {actual_size} differs from {expected.file_size} in {CHECKSUMS_FILE}")
                elif check_hashes and not matches_entry(read(path), expected, shown,
                                                        compact_data=is_compact and name == "data.bin"):
                    out.append(f"{shown}: content does not match {CHECKSUMS_FILE}")
            except FileNotFoundError:
                out.append(f"{shown}: listed in {CHECKSUMS_FILE} but missing")
            except (CorruptPartError, FormatError, OSError) as exc:
                out.append(f"{shown}: {exc}")
        return out

    def verify_files(self, part_dir: str | os.PathLike[str], check_hashes: bool = True) -> None:
        """Check every listed file of ``part_dir`` against its entry (size always, hashes if asked);
        raises CorruptPartError naming the first file that differs."""
        root = Path(part_dir)
        found = self.problems(lambda name: (root / name).read_bytes(), lambda name: (root / name).stat().st_size,
                              str(root), check_hashes)
        if found:
            raise CorruptPartError(found[0] if len(found) == 1 else f"{found[0]} (and {len(found) - 1} more)")


_COMPRESSED_SUFFIXES = (".bin", ".cmrk", ".cmrk2", ".cmrk3", ".cmrk4", ".cidx")


def is_compressed_file(name: str) -> bool:
    """Whether ClickHouse records the uncompressed size and hash of this file in checksums.txt.

    Every file made of compressed blocks is: column streams (``.bin``), compressed marks
    (``.cmrk*``), the compressed primary index (``primary.cidx``) and skip index data
    (``skp_idx_*.idx``, ``skp_idx_*.idx2``). ``primary.idx``, ``.mrk*``, ``minmax_*.idx`` and text files are plain.
    """
    return name.endswith(_COMPRESSED_SUFFIXES) or (name.startswith("skp_idx_") and name.endswith((".idx", ".idx2")))


def combine_stream_hashes(stream_hashes: list[bytes]) -> bytes:
    """The uncompressed hash of a file fed by several compressed streams (Compact ``data.bin``).

    ClickHouse folds each stream's uncompressed hash into a running seeded hash starting at zero;
    a Compact part with one codec has one stream, so its entry is ``seeded(hash, seed=0)``.
    """
    combined = ZERO_HASH
    for stream_hash in stream_hashes:
        combined = cityhash128_with_seed(stream_hash, combined)
    return combined


def compute_file_checksum(
    source: str | os.PathLike[str] | bytes | bytearray | memoryview,
    is_compressed: bool,
    compact_data: bool = False,
    where: str = "<bytes>",
) -> FileChecksum:
    """The checksums.txt entry of a file (a path or its bytes); compressed blocks are verified on the way.

    ``compact_data``: the file is a Compact part's ``data.bin`` written with one codec, whose
    uncompressed hash goes through :func:`combine_stream_hashes`.
    """
    if isinstance(source, (str, os.PathLike)):
        where = str(source)
        data: bytes | bytearray | memoryview = Path(source).read_bytes()
    else:
        data = source
    hasher = FileHasher()
    hasher.update(data)
    if not is_compressed:
        return FileChecksum(hasher.size, hasher.digest())
    uncompressed = FileHasher()
    for block in iter_blocks(data, where):
        uncompressed.update(decompress_block(block, where))
    uncompressed_hash = uncompressed.digest()
    if compact_data:
        uncompressed_hash = combine_stream_hashes([uncompressed_hash])
    return FileChecksum(hasher.size, hasher.digest(), True, uncompressed.size, uncompressed_hash)


def _codec_streams(data: bytes | bytearray | memoryview, where: str) -> int:
    """How many codecs wrote the blocks of a file, told apart by method byte (and a chain's codecs)."""
    signatures = set()
    for block in iter_blocks(data, where):
        chain = bytes(block.payload[: 1 + block.payload[0]]) if block.method == METHOD_MULTIPLE else b""
        signatures.add((block.method, chain))
    return len(signatures)


def matches_entry(data: bytes | bytearray | memoryview, expected: FileChecksum, where: str,
                  compact_data: bool = False) -> bool:
    """Whether a file's bytes match its checksums.txt entry; every compressed block is verified.

    A compressed file whose blocks use a codec this version cannot decode (encryption, ...) is
    checked by its stored bytes only (size and file hash, which cover every block): its uncompressed
    hash cannot be recomputed without the codec. So is the uncompressed hash of a Compact part's
    `data.bin` written by several codecs, which ClickHouse folds in an order of its own; its
    uncompressed size is still compared.
    """
    try:
        actual = compute_file_checksum(data, expected.is_compressed, compact_data=compact_data, where=where)
    except UnsupportedError:
        actual = compute_file_checksum(data, False)
        return (actual.file_size, actual.file_hash) == (expected.file_size, expected.file_hash)
    if actual == expected:
        return True
    if compact_data and expected.is_compressed and _codec_streams(data, where) > 1:
        return ((actual.file_size, actual.file_hash, actual.uncompressed_size)
                == (expected.file_size, expected.file_hash, expected.uncompressed_size))
    return False

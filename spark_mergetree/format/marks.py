"""Mark files: where each granule starts in the compressed column files of a part.

Wide parts: ``.mrk2`` (per granule: block offset, offset in decompressed block, rows; then a
final mark), ``.cmrk2`` (the same bytes in compressed blocks), and non-adaptive ``.mrk`` (no rows
column; ``.cmrk`` compressed). Compact parts: ``.mrk3``/``.cmrk3`` (one offset pair per column, then rows) and
``.mrk4``/``.cmrk4`` (one pair per substream listed in ``columns_substreams.txt``, then rows).
All numbers are UInt64 little-endian. See format_spec/marks.md.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from spark_mergetree.errors import CorruptPartError, FormatError, InvalidOptionError
from spark_mergetree.format.compression import CompressedStreamWriter, decompress_all
from spark_mergetree.format.compression_codecs import ZSTD, Codec

__all__ = [
    "MARKS_CODEC",
    "MARKS_COMPRESS_BLOCK_SIZE",
    "WIDE_EXTENSIONS",
    "COMPACT_EXTENSIONS",
    "CompactMarks",
    "marks_payload",
    "encode_marks_payload",
    "read_wide_marks",
    "write_wide_marks",
    "read_compact_marks",
    "write_compact_marks",
    "read_marks_file",
    "wide_marks_with_rows",
    "check_mark_offsets",
    "mark_label",
    "parse_columns_substreams",
    "format_columns_substreams",
]

# ClickHouse defaults: marks_compression_codec = ZSTD(3), marks_compress_block_size = 65536.
MARKS_CODEC: Codec = ZSTD(3)
MARKS_COMPRESS_BLOCK_SIZE = 65536

WIDE_EXTENSIONS = {".mrk": (False, False), ".cmrk": (False, True), ".mrk2": (True, False), ".cmrk2": (True, True)}
# extension → (adaptive: has a rows column, compressed)
# extension → (one pair per substream rather than per column, compressed)
COMPACT_EXTENSIONS = {".mrk3": (False, False), ".cmrk3": (False, True), ".mrk4": (True, False), ".cmrk4": (True, True)}

_LE_U64 = np.dtype("<u8")


def marks_payload(data: bytes | bytearray | memoryview, path: str, compressed: bool) -> bytes | bytearray | memoryview:
    """The raw mark bytes of a marks file, decompressed (and every block verified) if ``compressed``."""
    if compressed:
        return decompress_all(data, path)
    return memoryview(data).cast("B")


def encode_marks_payload(payload: bytes | bytearray | memoryview, compressed: bool, codec: Codec = MARKS_CODEC) -> bytes:
    """A marks file from raw mark bytes; compressed files are cut into 64 KiB blocks like ClickHouse's."""
    if not compressed:
        return bytes(payload)
    # Block boundaries ignore mark boundaries: the buffer is flushed whenever it holds 64 KiB.
    writer = CompressedStreamWriter(codec, min_compress_block_size=MARKS_COMPRESS_BLOCK_SIZE + 1,
                                    max_compress_block_size=MARKS_COMPRESS_BLOCK_SIZE)
    writer.write(payload)
    writer.finish()
    return bytes(writer.getvalue())


def _as_u64_rows(payload: bytes | bytearray | memoryview, width: int, path: str, what: str) -> np.ndarray:
    row_bytes = 8 * width
    if len(payload) % row_bytes:
        raise CorruptPartError(
            f"{path}: {len(payload)} bytes of marks is not a whole number of {what} ({row_bytes} bytes each); "
            f"the last mark starts at byte {len(payload) // row_bytes * row_bytes}"
        )
    return np.frombuffer(payload, dtype=_LE_U64).reshape(-1, width).astype(np.uint64, copy=False)


def read_wide_marks(
    data: bytes | bytearray | memoryview,
    path: str = "<marks>",
    compressed: bool = False,
    adaptive: bool = True,
) -> np.ndarray:
    """Marks of one Wide stream: uint64 array (n_marks, 3) = block offset, offset in block, rows.

    Non-adaptive ``.mrk`` files (``adaptive=False``) give (n_marks, 2): there is no rows column and
    no final mark.
    """
    return _as_u64_rows(marks_payload(data, path, compressed), 3 if adaptive else 2, path, "marks")


def write_wide_marks(marks: np.ndarray, compressed: bool = False, codec: Codec = MARKS_CODEC) -> bytes:
    """The bytes of a ``.mrk2`` (or ``.cmrk2`` if ``compressed``) file from an (n, 3) array."""
    array = np.asarray(marks)
    if array.ndim != 2 or array.shape[1] not in (2, 3):
        raise InvalidOptionError(f"marks must be an (n, 3) or (n, 2) array, got shape {array.shape}")
    return encode_marks_payload(np.ascontiguousarray(array, dtype=_LE_U64).tobytes(), compressed, codec)


def wide_marks_with_rows(granule_marks: np.ndarray, granule_rows: np.ndarray, final_mark: tuple[int, int]) -> np.ndarray:
    """Full ``.mrk2`` content: each granule's mark and rows, then ``final_mark`` with 0 rows."""
    starts = np.asarray(granule_marks, dtype=np.uint64).reshape(-1, 2)
    rows = np.asarray(granule_rows, dtype=np.uint64).reshape(-1)
    if len(starts) != len(rows):
        raise InvalidOptionError(f"{len(starts)} granule marks but {len(rows)} granule row counts")
    out = np.empty((len(rows) + 1, 3), dtype=np.uint64)
    out[:-1, :2] = starts
    out[:-1, 2] = rows
    out[-1] = (final_mark[0], final_mark[1], 0)
    return out


def mark_label(index: int, streams: Sequence[str] = ()) -> str:
    """How errors name a mark: its number, and in Compact marks (one pair per substream, flattened
    in file order) the substream it belongs to."""
    if len(streams) < 2:
        return f"mark {index}"
    return f"mark {index // len(streams)} of {streams[index % len(streams)]}"


def check_mark_offsets(offsets: np.ndarray, data_size: int, path: str, data_name: str,
                       streams: Sequence[str] = ()) -> None:
    """Marks (n, 2), in file order, must never go backwards and must stay inside the ``data_size``
    bytes of the compressed file ``data_name`` they point into (a mark may sit at its very end,
    offset 0). Compact marks are given flattened, with their substream names. Raises
    CorruptPartError naming the marks file and the mark."""
    blocks, inner = offsets[:, 0], offsets[:, 1]
    outside = np.flatnonzero((blocks > data_size) | ((blocks == data_size) & (inner > 0)))
    if len(outside):
        at = int(outside[0])
        raise CorruptPartError(f"{path}: {mark_label(at, streams)} points at ({int(blocks[at])}, {int(inner[at])}), "
                               f"past the end of {data_name} ({data_size} bytes)")
    backwards = np.flatnonzero((blocks[1:] < blocks[:-1]) | ((blocks[1:] == blocks[:-1]) & (inner[1:] < inner[:-1])))
    if len(backwards):
        at = int(backwards[0]) + 1
        raise CorruptPartError(f"{path}: {mark_label(at, streams)} points at ({int(blocks[at])}, {int(inner[at])}), "
                               f"before {mark_label(at - 1, streams)} ({int(blocks[at - 1])}, {int(inner[at - 1])}) "
                               f"in {data_name}")


@dataclass(frozen=True)
class CompactMarks:
    """Marks of a Compact part: ``offsets[mark, stream] = (block offset, offset in block)``, ``rows[mark]``."""

    offsets: np.ndarray  # uint64 (n_marks, n_streams, 2)
    rows: np.ndarray  # uint64 (n_marks,)


def read_compact_marks(
    data: bytes | bytearray | memoryview,
    n_streams: int,
    path: str = "<marks>",
    compressed: bool = False,
) -> CompactMarks:
    """Parse ``.mrk3``/``.cmrk3`` (``n_streams`` = columns) or ``.mrk4``/``.cmrk4`` (= substreams)."""
    if n_streams < 1:
        raise InvalidOptionError(f"a Compact marks file needs at least one stream, got n_streams={n_streams}")
    table = _as_u64_rows(marks_payload(data, path, compressed), 2 * n_streams + 1, path, f"marks of {n_streams} streams")
    return CompactMarks(table[:, : 2 * n_streams].reshape(-1, n_streams, 2), table[:, 2 * n_streams].copy())


def write_compact_marks(marks: CompactMarks, compressed: bool = False, codec: Codec = MARKS_CODEC) -> bytes:
    """The bytes of a Compact marks file."""
    offsets = np.asarray(marks.offsets, dtype=np.uint64)
    rows = np.asarray(marks.rows, dtype=np.uint64)
    if offsets.ndim != 3 or offsets.shape[2] != 2 or offsets.shape[0] != rows.shape[0]:
        raise InvalidOptionError(f"compact marks need offsets (n, streams, 2) and rows (n,), got {offsets.shape} and {rows.shape}")
    n_marks, n_streams = offsets.shape[:2]
    table = np.empty((n_marks, 2 * n_streams + 1), dtype=_LE_U64)
    table[:, : 2 * n_streams] = offsets.reshape(n_marks, 2 * n_streams)
    table[:, 2 * n_streams] = rows
    return encode_marks_payload(table.tobytes(), compressed, codec)


def read_marks_file(path: str | os.PathLike[str], n_streams: int | None = None) -> np.ndarray | CompactMarks:
    """Read a marks file, choosing the layout by its extension; Compact ones need ``n_streams``."""
    file_path = Path(path)
    extension = file_path.suffix
    data = file_path.read_bytes()
    if extension in WIDE_EXTENSIONS:
        adaptive, compressed = WIDE_EXTENSIONS[extension]
        return read_wide_marks(data, str(file_path), compressed=compressed, adaptive=adaptive)
    if extension in COMPACT_EXTENSIONS:
        if n_streams is None:
            raise InvalidOptionError(f"{file_path}: reading Compact marks needs n_streams (columns or substreams)")
        _, compressed = COMPACT_EXTENSIONS[extension]
        return read_compact_marks(data, n_streams, str(file_path), compressed=compressed)
    raise FormatError(
        f"{file_path}: unknown marks extension {extension!r}; known: "
        f"{', '.join(sorted({**WIDE_EXTENSIONS, **COMPACT_EXTENSIONS}))}"
    )


_SUBSTREAMS_HEADER = re.compile(r"columns substreams version: 1\n(\d+) columns:\n", re.ASCII)
_COLUMN_HEADER = re.compile(r"(\d+) substreams for column `((?:[^`\\]|\\.)*)`:\n", re.ASCII)


def parse_columns_substreams(text: str, path: str = "columns_substreams.txt") -> list[tuple[str, list[str]]]:
    """``columns_substreams.txt`` → [(column name, [substream names in mark order])]."""
    header = _SUBSTREAMS_HEADER.match(text)
    if header is None:
        raise FormatError(f"{path}: does not start with 'columns substreams version: 1\\n<N> columns:\\n'")
    position = header.end()
    columns: list[tuple[str, list[str]]] = []
    for _ in range(int(header.group(1))):
        column = _COLUMN_HEADER.match(text, position)
        if column is None:
            raise FormatError(f"{path}: expected '<N> substreams for column `name`:' at character {position}")
        position = column.end()
        names: list[str] = []
        for _ in range(int(column.group(1))):
            end = text.find("\n", position)
            if not text.startswith("\t", position) or end < 0:
                raise FormatError(f"{path}: expected a tab-indented substream name at character {position}")
            names.append(text[position + 1 : end])
            position = end + 1
        name = re.sub(r"\\(.)", r"\1", column.group(2))
        columns.append((name, names))
    if position != len(text):
        raise FormatError(f"{path}: unexpected text at character {position}")
    return columns


def format_columns_substreams(columns: list[tuple[str, list[str]]]) -> str:
    """The text of ``columns_substreams.txt``."""
    lines = [f"columns substreams version: 1\n{len(columns)} columns:\n"]
    for name, substreams in columns:
        quoted = name.replace("\\", "\\\\").replace("`", "\\`")
        lines.append(f"{len(substreams)} substreams for column `{quoted}`:\n")
        lines.extend(f"\t{substream}\n" for substream in substreams)
    return "".join(lines)

"""Parts moving in and out of a table's storage: between volumes of its policy (`move_part`, and
the background moves `move_parts_by_factor`), from a plain part directory (`import_plain`, e.g.
one ClickHouse wrote) and back to one (`export_plain`)."""

from __future__ import annotations

import os
import shutil
import struct
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from spark_mergetree.errors import InvalidOptionError, StorageError
from spark_mergetree.fileops import fsync_dir, write_file
from spark_mergetree.storage.filesystem import Buffer, byte_view
from spark_mergetree.storage.stripe_map import SUBPART_SUFFIX
from spark_mergetree.storage.table_dirs import TMP_PREFIX
from spark_mergetree.storage.table_parts import TableParts

if TYPE_CHECKING:
    from spark_mergetree.format.part_reader import FileSource

#: A compressed block starts with a 16-byte checksum and a 9-byte header (method, sizes).
_BLOCK_HEADER = 25
#: Method bytes of ClickHouse codecs: NONE, LZ4, and the 0x90.. family (ZSTD, Multiple, Delta, ...).
_CODEC_BYTES = frozenset({0x02, 0x82, *range(0x90, 0xA0)})


def compressed_block_starts(data: Buffer) -> np.ndarray | None:
    """Offsets of the compressed blocks of a ClickHouse `.bin` stream, or None if it is not one.

    Used to re-stripe parts that carry no recorded cut points; one Python step per block.
    """
    view = byte_view(data)
    starts = []
    position = 0
    while position < len(view):
        if position + _BLOCK_HEADER > len(view) or view[position + 16] not in _CODEC_BYTES:
            return None
        compressed_size = struct.unpack_from("<I", view, position + 17)[0]
        if compressed_size < 9:
            return None
        starts.append(position)
        position += 16 + compressed_size
    return np.asarray(starts, dtype=np.int64) if position == len(view) else None


def _cut_points(files: dict[str, bytes], recorded: dict[str, np.ndarray | None] | None) -> dict[str, np.ndarray]:
    """The cut points recorded in a part's map; without a map, the compressed block starts of
    its `.bin` files."""
    if recorded is None:
        recorded = {name: compressed_block_starts(data) for name, data in files.items() if name.endswith(".bin")}
    return {name: bounds for name, bounds in recorded.items() if bounds is not None}


def move_part(parts: TableParts, part: str, volume: str) -> None:
    """Move a part to another volume of the policy, re-laid out for that volume."""
    opened = parts.open(part)
    destination = parts.policy.volume(volume)
    if destination is opened.volume:
        return
    files = {name: parts.read_file(part, name) for name in parts.list_files(part)}
    recorded = {name: parts.boundaries(part, name) for name in files} if opened.stripe_map is not None else None
    size = sum(len(data) for data in files.values())
    if destination.max_data_part_size is not None and size > destination.max_data_part_size:
        raise InvalidOptionError(f"part {part!r} ({size} bytes) exceeds max_data_part_size_bytes "
                                 f"{destination.max_data_part_size} of volume {volume!r}")
    parts.write_to_volume(part, {name: memoryview(data) for name, data in files.items()},
                          _cut_points(files, recorded), destination)
    sidecar = not opened.layout.map_inside
    for disk in opened.disks:
        parts.dirs.retire(disk, part, sidecar)
    parts.forget(part)


def move_parts_by_factor(parts: TableParts) -> list[tuple[str, str, str]]:
    """Background move: while a volume's free fraction is below move_factor, move its biggest
    parts to the next volume. Returns (part, from volume, to volume) per move."""
    moves = []
    volumes = parts.policy.volumes
    for index, volume in enumerate(volumes[:-1]):
        while volume.free_fraction() < parts.policy.move_factor:
            on_volume = [p for p in parts.list_parts() if parts.open(p).volume is volume]
            if not on_volume:
                break
            biggest = max(on_volume, key=parts.part_bytes)
            size = parts.part_bytes(biggest)
            target = next((v for v in volumes[index + 1:]
                           if v.max_data_part_size is None or size <= v.max_data_part_size), None)
            if target is None:
                break
            move_part(parts, biggest, target.name)
            moves.append((biggest, volume.name, target.name))
    return moves


def import_plain(parts: TableParts, source_dir: str | os.PathLike[str], part_name: str | None = None) -> str:
    """Store a plain part directory (e.g. one ClickHouse wrote) as a new part of this table.

    `.bin` files are cut at their compressed block starts, so striped volumes spread them.
    Returns the part name (the directory's name unless `part_name` is given).
    """
    source = Path(source_dir)
    if not source.is_dir():
        raise InvalidOptionError(f"import_plain: {source} is not a directory")
    files = {p.name: p.read_bytes() for p in sorted(source.iterdir()) if p.is_file()}
    for sub in sorted(p for p in source.iterdir() if p.is_dir() and p.name.endswith(SUBPART_SUFFIX)):
        files.update({f"{sub.name}/{p.name}": p.read_bytes() for p in sorted(sub.iterdir()) if p.is_file()})
    if not files:
        raise InvalidOptionError(f"import_plain: {source} holds no files")
    part = part_name or source.name
    parts.write_part(part, files, _cut_points(files, None))
    return part


def export_plain(parts: FileSource, part: str, dest_dir: str | os.PathLike[str]) -> Path:
    """Write the part as a plain ClickHouse part directory at `dest_dir` (which must not exist)."""
    destination = Path(dest_dir)
    if destination.exists():
        raise StorageError(f"cannot export part {part!r}: {destination} already exists")
    destination.parent.mkdir(parents=True, exist_ok=True)
    staging = destination.parent / (TMP_PREFIX + "export_" + destination.name)
    if staging.exists():
        shutil.rmtree(staging)
    staging.mkdir()
    try:
        names = parts.list_files(part)
        subdirectories = sorted({name.rsplit("/", 1)[0] for name in names if "/" in name})
        for sub in subdirectories:  # projections' directories
            (staging / sub).mkdir()
        for name in names:
            write_file(staging / name, [parts.read_file(part, name)])
        for sub in subdirectories:
            fsync_dir(staging / sub)
        fsync_dir(staging)
        os.rename(staging, destination)
        fsync_dir(destination.parent)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return destination

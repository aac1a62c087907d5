"""The stripe map of a part: where every unit of every file lives, and each unit's checksum.

Files with cut points (column `.bin` files) are split into units: runs of whole compressed blocks
of about `stripe_unit_bytes`. Files without cut points are one unit. The map is JSON after a
header line carrying the CityHash128 of the JSON body, so a damaged copy is detected and another
disk's copy used. Its byte layout is specified in format_spec/storage.md.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from spark_mergetree.errors import InvalidOptionError, StorageError
from spark_mergetree.storage.parity import unit_checksum

MAP_MAGIC = "spark-mergetree stripe map v1"
#: Name of the map inside a striped part directory; plain layouts keep it beside the directory.
STRIPED_MAP_NAME = "stripe_map.json"
PLAIN_MAP_SUFFIX = ".stripe_map"
#: On each disk of a striped part, the units that disk holds, back to back in stripe order.
UNITS_FILE_NAME = "units.bin"
#: Unit disk index meaning "the plain file of that name, on every disk that holds the part".
IN_PLAIN_FILE = -1

_RESERVED_NAMES = frozenset({STRIPED_MAP_NAME, UNITS_FILE_NAME})


def _no_rows() -> np.ndarray:
    return np.zeros(0, dtype=np.int64)


def _rows(values: Any) -> np.ndarray:
    return np.asarray(values, dtype=np.int64)


def cut_points(size: int, boundaries: np.ndarray | None, unit_bytes: int, file_name: str) -> np.ndarray:
    """Offsets 0 = c0 < c1 < ... < cn = size splitting a file into units of whole blocks.

    Each unit ends at the last boundary within `unit_bytes` of its start; a single block longer
    than that becomes a unit on its own. No boundaries: the file is one unit.
    """
    if boundaries is None or size == 0:
        return np.array([0, size], dtype=np.int64) if size else np.zeros(1, dtype=np.int64)
    b = np.asarray(boundaries)
    if b.ndim != 1 or (b.size and not np.issubdtype(b.dtype, np.integer)):
        raise InvalidOptionError(f"boundaries[{file_name!r}] must be a 1-D integer array, got {b.dtype} {b.shape}")
    b = b.astype(np.int64, copy=False)
    if b.size and (b.min() < 0 or b.max() > size):
        raise InvalidOptionError(
            f"boundaries[{file_name!r}] must lie in [0, {size}] (the file size), got {b.min()}..{b.max()}")
    if b.size > 1 and np.any(np.diff(b) < 0):
        raise InvalidOptionError(f"boundaries[{file_name!r}] must be sorted ascending")
    points = np.unique(np.concatenate(([0], b, [size])))
    cuts = [0]
    position = 0
    while position < size:
        i = int(np.searchsorted(points, position + unit_bytes, side="right")) - 1
        following = int(points[i])
        if following <= position:
            following = int(points[np.searchsorted(points, position, side="right")])
        cuts.append(following)
        position = following
    return np.asarray(cuts, dtype=np.int64)


@dataclass
class FileEntry:
    """One file of the part: its size, where its units are in the unit table, its cut points."""

    name: str
    size: int
    striped: bool
    first_unit: int
    unit_count: int
    boundaries: list[int] | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "size": self.size, "striped": self.striped,
                               "units": [self.first_unit, self.unit_count]}
        if self.boundaries is not None:
            out["boundaries"] = self.boundaries
        return out


@dataclass
class StripeMap:
    """Columns of the unit table (one row per unit) and, for raid5/raid6, of the stripe table.

    Layouts that cut files into units (raid0, raid5, raid6) place each striped unit on a disk;
    every other unit is a range of a whole file (`IN_PLAIN_FILE`). A stripe's P parity is the XOR
    of its data units; raid6 adds the Q parity (format_spec/storage.md).
    """

    layout: str
    disks: list[str]
    stripe_unit_bytes: int
    files: dict[str, FileEntry] = field(default_factory=dict)
    unit_file: np.ndarray = field(default_factory=_no_rows)
    unit_offset: np.ndarray = field(default_factory=_no_rows)
    unit_length: np.ndarray = field(default_factory=_no_rows)
    unit_disk: np.ndarray = field(default_factory=_no_rows)
    unit_disk_offset: np.ndarray = field(default_factory=_no_rows)
    unit_hash: list[str] = field(default_factory=list)
    unit_stripe: np.ndarray = field(default_factory=_no_rows)
    stripe_first_unit: np.ndarray = field(default_factory=_no_rows)
    stripe_unit_count: np.ndarray = field(default_factory=_no_rows)
    parity_disk: np.ndarray = field(default_factory=_no_rows)
    parity_disk_offset: np.ndarray = field(default_factory=_no_rows)
    parity_length: np.ndarray = field(default_factory=_no_rows)
    parity_hash: list[str] = field(default_factory=list)
    q_disk: np.ndarray = field(default_factory=_no_rows)
    q_disk_offset: np.ndarray = field(default_factory=_no_rows)
    q_hash: list[str] = field(default_factory=list)

    @property
    def file_names(self) -> list[str]:
        return list(self.files)

    @property
    def n_stripes(self) -> int:
        return int(self.stripe_first_unit.size)

    def units_of(self, name: str) -> range:
        entry = self.files[name]
        return range(entry.first_unit, entry.first_unit + entry.unit_count)

    def stripe_units(self, stripe: int) -> range:
        first = int(self.stripe_first_unit[stripe])
        return range(first, first + int(self.stripe_unit_count[stripe]))

    def file_of(self, unit: int) -> str:
        return self.file_names[int(self.unit_file[unit])]

    def disk_units_bytes(self, disk_index: int) -> int:
        """Length of `units.bin` on the disk with this index."""
        ends = [0]
        for disks, offsets, lengths in ((self.unit_disk, self.unit_disk_offset, self.unit_length),
                                        (self.parity_disk, self.parity_disk_offset, self.parity_length),
                                        (self.q_disk, self.q_disk_offset, self.parity_length[:self.q_disk.size])):
            on_disk = disks == disk_index
            if on_disk.any():
                ends.append(int((offsets[on_disk] + lengths[on_disk]).max()))
        return max(ends)

    def to_bytes(self) -> bytes:
        stripes: dict[str, Any] = {
            "first_unit": self.stripe_first_unit.tolist(), "unit_count": self.stripe_unit_count.tolist(),
            "parity_disk": self.parity_disk.tolist(), "parity_disk_offset": self.parity_disk_offset.tolist(),
            "parity_length": self.parity_length.tolist(), "parity_checksum": self.parity_hash}
        if self.layout == "raid6":
            stripes.update(q_disk=self.q_disk.tolist(), q_disk_offset=self.q_disk_offset.tolist(),
                           q_checksum=self.q_hash)
        body = json.dumps({
            "layout": self.layout,
            "disks": self.disks,
            "stripe_unit_bytes": self.stripe_unit_bytes,
            "files": [e.to_json() for e in self.files.values()],
            "units": {"file": self.unit_file.tolist(), "offset": self.unit_offset.tolist(),
                      "length": self.unit_length.tolist(), "disk": self.unit_disk.tolist(),
                      "disk_offset": self.unit_disk_offset.tolist(), "checksum": self.unit_hash},
            "stripes": stripes,
        }, separators=(",", ":")).encode()
        return f"{MAP_MAGIC} {unit_checksum(body)}\n".encode() + body

    @classmethod
    def from_bytes(cls, data: bytes, where: str) -> StripeMap:
        """Parse a map copy; StorageError naming `where` if it is damaged."""
        newline = data.find(b"\n")
        header = data[:newline].decode("ascii", "replace") if newline >= 0 else ""
        magic, _, checksum = header.rpartition(" ")
        if newline < 0 or magic != MAP_MAGIC:
            raise StorageError(f"{where}: not a stripe map (header {header[:60]!r})")
        body = data[newline + 1:]
        if unit_checksum(body) != checksum:
            raise StorageError(f"{where}: stripe map checksum mismatch (expected {checksum}, "
                               f"body of {len(body)} bytes hashes to {unit_checksum(body)})")
        try:
            raw = json.loads(body)
            units, stripes = raw["units"], raw["stripes"]
            stripe_map = cls(
                layout=raw["layout"], disks=list(raw["disks"]), stripe_unit_bytes=int(raw["stripe_unit_bytes"]),
                files={f["name"]: FileEntry(f["name"], int(f["size"]), bool(f["striped"]), int(f["units"][0]),
                                            int(f["units"][1]), f.get("boundaries")) for f in raw["files"]},
                unit_file=_rows(units["file"]), unit_offset=_rows(units["offset"]),
                unit_length=_rows(units["length"]), unit_disk=_rows(units["disk"]),
                unit_disk_offset=_rows(units["disk_offset"]), unit_hash=list(units["checksum"]),
                stripe_first_unit=_rows(stripes["first_unit"]), stripe_unit_count=_rows(stripes["unit_count"]),
                parity_disk=_rows(stripes["parity_disk"]), parity_disk_offset=_rows(stripes["parity_disk_offset"]),
                parity_length=_rows(stripes["parity_length"]), parity_hash=list(stripes["parity_checksum"]),
                q_disk=_rows(stripes.get("q_disk", [])), q_disk_offset=_rows(stripes.get("q_disk_offset", [])),
                q_hash=list(stripes.get("q_checksum", [])))
        except (KeyError, TypeError, ValueError, IndexError) as e:
            raise StorageError(f"{where}: malformed stripe map: {e!r}") from e
        stripe_map.unit_stripe = np.full(stripe_map.unit_file.size, -1, dtype=np.int64)
        for s, (first, count) in enumerate(zip(stripe_map.stripe_first_unit, stripe_map.stripe_unit_count)):
            stripe_map.unit_stripe[first:first + count] = s
        return stripe_map


def cut_files(layout: str, disks: list[str], unit_bytes: int, files: Mapping[str, Any],
              boundaries: Mapping[str, np.ndarray] | None, stripe: bool) -> StripeMap:
    """The unit table of a part: every file cut into units, none placed yet (checksums come later).

    With `stripe`, files with boundaries are cut at them and marked striped, and their units come
    first (files in name order), so a layout can deal them to disks in unit order. Every other
    file is one unit of its plain file (`IN_PLAIN_FILE`); boundaries given for it still cut it
    into checksum ranges.
    """
    boundaries = boundaries or {}
    for name in boundaries:
        if name not in files:
            raise InvalidOptionError(f"boundaries given for {name!r}, which is not among the part's files")
    stripe_map = StripeMap(layout, list(disks), unit_bytes)
    unit_rows: list[tuple[int, int, int]] = []  # (file index, offset, length)
    order = sorted(files, key=lambda n: (not (stripe and boundaries.get(n) is not None), n))
    for file_index, name in enumerate(order):
        size = len(memoryview(files[name]).cast("B"))
        file_bounds = boundaries.get(name)
        cuts = cut_points(size, file_bounds, unit_bytes, name)
        if file_bounds is None:
            cuts = np.array([0, size], dtype=np.int64)  # whole files are one unit, even when empty
        first = len(unit_rows)
        unit_rows.extend((file_index, int(a), int(b - a)) for a, b in zip(cuts[:-1], cuts[1:]))
        stripe_map.files[name] = FileEntry(
            name, size, stripe and file_bounds is not None, first, len(cuts) - 1,
            None if file_bounds is None else np.asarray(file_bounds, dtype=np.int64).tolist())
    n_units = len(unit_rows)
    rows = np.asarray(unit_rows, dtype=np.int64).reshape(n_units, 3)
    stripe_map.unit_file, stripe_map.unit_offset, stripe_map.unit_length = rows[:, 0], rows[:, 1], rows[:, 2]
    stripe_map.unit_disk = np.full(n_units, IN_PLAIN_FILE, dtype=np.int64)
    stripe_map.unit_disk_offset = rows[:, 1].copy()
    stripe_map.unit_stripe = np.full(n_units, -1, dtype=np.int64)
    return stripe_map


def striped_units(stripe_map: StripeMap) -> np.ndarray:
    """Indices of the units to deal over disks (the first rows of the unit table)."""
    return np.arange(sum(e.unit_count for e in stripe_map.files.values() if e.striped), dtype=np.int64)


SUBPART_SUFFIX = ".proj"  # a projection's directory inside a part: the one subdirectory parts have


def check_file_name(name: str, part: str) -> None:
    """A part's file is a plain name, or `<projection>.proj/<name>` for a file of a projection."""
    pieces = name.split("/") if isinstance(name, str) else [name]
    if len(pieces) == 2 and isinstance(pieces[0], str) and pieces[0].endswith(SUBPART_SUFFIX) \
            and len(pieces[0]) > len(SUBPART_SUFFIX):
        pieces = pieces[1:] if pieces[0] not in (".", "..") else pieces
    if len(pieces) != 1 or not isinstance(name, str) or not pieces[0] or pieces[0] in (".", "..") or "\0" in name:
        raise InvalidOptionError(f"part {part!r}: file name {name!r} must be a non-empty name without '/' "
                                 f"(or <projection>{SUBPART_SUFFIX}/<name>)")
    if name in _RESERVED_NAMES:
        raise InvalidOptionError(f"part {part!r}: file name {name!r} is reserved by the storage layer; "
                                 f"reserved: {', '.join(sorted(_RESERVED_NAMES))}")

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
    """Columns of the unit table (one row per unit) and, for raid5, of the stripe table."""

    layout: str
    disks: list[str]
    stripe_unit_bytes: int
    files: dict[str, FileEntry] = field(default_factory=dict)
    unit_file: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    unit_offset: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    unit_length: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    unit_disk: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    unit_disk_offset: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    unit_hash: list[str] = field(default_factory=list)
    unit_stripe: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    stripe_first_unit: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    stripe_unit_count: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    parity_disk: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    parity_disk_offset: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    parity_length: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    parity_hash: list[str] = field(default_factory=list)

    @property
    def file_names(self) -> list[str]:
        return list(self.files)

    def units_of(self, name: str) -> range:
        entry = self.files[name]
        return range(entry.first_unit, entry.first_unit + entry.unit_count)

    def disk_units_bytes(self, disk_index: int) -> int:
        """Length of `units.bin` on the disk with this index."""
        ends = [0]
        on_disk = self.unit_disk == disk_index
        if on_disk.any():
            ends.append(int((self.unit_disk_offset[on_disk] + self.unit_length[on_disk]).max()))
        on_parity = self.parity_disk == disk_index
        if on_parity.any():
            ends.append(int((self.parity_disk_offset[on_parity] + self.parity_length[on_parity]).max()))
        return max(ends)

    def to_bytes(self) -> bytes:
        body = json.dumps({
            "layout": self.layout,
            "disks": self.disks,
            "stripe_unit_bytes": self.stripe_unit_bytes,
            "files": [e.to_json() for e in self.files.values()],
            "units": {"file": self.unit_file.tolist(), "offset": self.unit_offset.tolist(),
                      "length": self.unit_length.tolist(), "disk": self.unit_disk.tolist(),
                      "disk_offset": self.unit_disk_offset.tolist(), "checksum": self.unit_hash},
            "stripes": {"first_unit": self.stripe_first_unit.tolist(),
                        "unit_count": self.stripe_unit_count.tolist(),
                        "parity_disk": self.parity_disk.tolist(),
                        "parity_disk_offset": self.parity_disk_offset.tolist(),
                        "parity_length": self.parity_length.tolist(), "parity_checksum": self.parity_hash},
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
            as_array = lambda values: np.asarray(values, dtype=np.int64)  # noqa: E731
            stripe_map = cls(
                layout=raw["layout"], disks=list(raw["disks"]), stripe_unit_bytes=int(raw["stripe_unit_bytes"]),
                files={f["name"]: FileEntry(f["name"], int(f["size"]), bool(f["striped"]), int(f["units"][0]),
                                            int(f["units"][1]), f.get("boundaries")) for f in raw["files"]},
                unit_file=as_array(units["file"]), unit_offset=as_array(units["offset"]),
                unit_length=as_array(units["length"]), unit_disk=as_array(units["disk"]),
                unit_disk_offset=as_array(units["disk_offset"]), unit_hash=list(units["checksum"]),
                stripe_first_unit=as_array(stripes["first_unit"]),
                stripe_unit_count=as_array(stripes["unit_count"]),
                parity_disk=as_array(stripes["parity_disk"]),
                parity_disk_offset=as_array(stripes["parity_disk_offset"]),
                parity_length=as_array(stripes["parity_length"]), parity_hash=list(stripes["parity_checksum"]))
        except (KeyError, TypeError, ValueError, IndexError) as e:
            raise StorageError(f"{where}: malformed stripe map: {e!r}") from e
        stripe_map.unit_stripe = np.full(stripe_map.unit_file.size, -1, dtype=np.int64)
        for s, (first, count) in enumerate(zip(stripe_map.stripe_first_unit, stripe_map.stripe_unit_count)):
            stripe_map.unit_stripe[first:first + count] = s
        return stripe_map


def plan(layout: str, disks: list[str], unit_bytes: int, files: Mapping[str, Any],
         boundaries: Mapping[str, np.ndarray] | None) -> StripeMap:
    """Cut every file into units and place them for `layout` (checksums are filled in later).

    raid0 deals striped units round robin over the disks; raid5 groups them n-1 at a time into
    stripes whose parity sits on disk (n-1-s) mod n and whose data follows it round the ring.
    Plain layouts keep every file whole in its own file; units there are only checksum ranges.
    """
    boundaries = boundaries or {}
    for name in boundaries:
        if name not in files:
            raise InvalidOptionError(f"boundaries given for {name!r}, which is not among the part's files")
    striped_layout = layout in ("raid0", "raid5")
    n_disks = len(disks)
    stripe_map = StripeMap(layout, list(disks), unit_bytes)
    unit_rows: list[tuple[int, int, int]] = []  # (file index, offset, length)
    # Striped files first, so the units of a raid5 stripe are consecutive rows of the unit table.
    order = sorted(files, key=lambda n: (not (striped_layout and n in boundaries and boundaries[n] is not None), n))
    for file_index, name in enumerate(order):
        size = len(memoryview(files[name]).cast("B"))
        file_bounds = boundaries.get(name)
        cuts = cut_points(size, file_bounds, unit_bytes, name)
        striped = striped_layout and file_bounds is not None
        if not striped and file_bounds is None:
            cuts = np.array([0, size], dtype=np.int64)  # whole files are one unit, even when empty
        first = len(unit_rows)
        unit_rows.extend((file_index, int(a), int(b - a)) for a, b in zip(cuts[:-1], cuts[1:]))
        stripe_map.files[name] = FileEntry(
            name, size, striped, first, len(cuts) - 1,
            None if file_bounds is None else np.asarray(file_bounds, dtype=np.int64).tolist())
    n_units = len(unit_rows)
    rows = np.asarray(unit_rows, dtype=np.int64).reshape(n_units, 3)
    stripe_map.unit_file, stripe_map.unit_offset, stripe_map.unit_length = rows[:, 0], rows[:, 1], rows[:, 2]
    stripe_map.unit_disk = np.full(n_units, IN_PLAIN_FILE, dtype=np.int64)
    stripe_map.unit_disk_offset = rows[:, 1].copy()
    stripe_map.unit_stripe = np.full(n_units, -1, dtype=np.int64)
    if not striped_layout:
        return stripe_map
    striped_units = np.arange(sum(e.unit_count for e in stripe_map.files.values() if e.striped), dtype=np.int64)
    disk_fill = np.zeros(n_disks, dtype=np.int64)
    if layout == "raid0":
        for k, u in enumerate(striped_units):
            d = k % n_disks
            stripe_map.unit_disk[u] = d
            stripe_map.unit_disk_offset[u] = disk_fill[d]
            disk_fill[d] += stripe_map.unit_length[u]
        return stripe_map
    width = n_disks - 1
    firsts, counts, parity_disks, parity_offsets, parity_lengths = [], [], [], [], []
    for s, start in enumerate(range(0, striped_units.size, width)):
        members = striped_units[start:start + width]
        parity_disk = (n_disks - 1 - s) % n_disks
        for k, u in enumerate(members):
            d = (parity_disk + 1 + k) % n_disks
            stripe_map.unit_disk[u] = d
            stripe_map.unit_disk_offset[u] = disk_fill[d]
            stripe_map.unit_stripe[u] = s
            disk_fill[d] += stripe_map.unit_length[u]
        length = int(stripe_map.unit_length[members].max())
        firsts.append(int(members[0]))
        counts.append(int(members.size))
        parity_disks.append(parity_disk)
        parity_offsets.append(int(disk_fill[parity_disk]))
        parity_lengths.append(length)
        disk_fill[parity_disk] += length
    as_array = lambda values: np.asarray(values, dtype=np.int64)  # noqa: E731
    stripe_map.stripe_first_unit, stripe_map.stripe_unit_count = as_array(firsts), as_array(counts)
    stripe_map.parity_disk, stripe_map.parity_disk_offset = as_array(parity_disks), as_array(parity_offsets)
    stripe_map.parity_length = as_array(parity_lengths)
    return stripe_map


def check_file_name(name: str, part: str) -> None:
    if not isinstance(name, str) or not name or "/" in name or name in (".", "..") or "\0" in name:
        raise InvalidOptionError(f"part {part!r}: file name {name!r} must be a non-empty name without '/'")
    if name in _RESERVED_NAMES:
        raise InvalidOptionError(f"part {part!r}: file name {name!r} is reserved by the storage layer; "
                                 f"reserved: {', '.join(sorted(_RESERVED_NAMES))}")

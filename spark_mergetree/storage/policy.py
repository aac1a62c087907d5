"""Disks, volumes and storage policies: their configuration, validation and free-space accounting.

A policy is an ordered list of volumes; a volume is a set of disks with one layout (single, jbod,
raid0, raid1, raid5, raid6). The shape follows ClickHouse's `<storage_configuration>`: disks are named
directories, volumes are tried in order, and `move_factor` is the free-space fraction below which
new parts go to (and old parts are moved to) the next volume. What a layout does with the bytes
is in `storage/layouts/`; here are only the facts configuration and space accounting need.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import shutil
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

from spark_mergetree.errors import InvalidOptionError

Layout = Literal["single", "jbod", "raid0", "raid1", "raid5", "raid6"]
LAYOUTS: tuple[str, ...] = get_args(Layout)
JbodPlacement = Literal["round_robin", "least_used"]
JBOD_PLACEMENTS: tuple[str, ...] = get_args(JbodPlacement)

#: Minimum number of disks per layout: raid5 and raid6 need two data disks beside their parity.
MIN_DISKS: dict[str, int] = {"single": 1, "jbod": 1, "raid0": 2, "raid1": 2, "raid5": 3, "raid6": 4}
#: Layouts that cut big files into units spread over every disk of the volume.
STRIPED_LAYOUTS = frozenset({"raid0", "raid5", "raid6"})
#: Parity units per stripe (how many disks a stripe survives losing).
PARITY_UNITS: dict[str, int] = {"raid5": 1, "raid6": 2}
DEFAULT_STRIPE_UNIT_BYTES = 1 << 20
MIN_STRIPE_UNIT_BYTES = 1 << 10

_POLICY_KEYS = ("name", "move_factor", "disks", "volumes")
_DISK_KEYS = ("path", "capacity_bytes")
_VOLUME_KEYS = ("name", "disks", "layout", "stripe_unit_bytes", "max_data_part_size_bytes",
                "jbod_placement")


def _check_keys(given: Mapping[str, Any], valid: Sequence[str], where: str) -> None:
    unknown = sorted(set(given) - set(valid))
    if unknown:
        raise InvalidOptionError(
            f"unknown key {unknown[0]!r} in {where}; valid keys: {', '.join(valid)}")


def _positive_int(value: Any, option: str, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InvalidOptionError(f"{option} must be an integer >= {minimum}, got {value!r}")
    return value


def _directory_bytes(path: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except FileNotFoundError:
                pass  # removed while walking: a concurrent delete, not an error
    return total


@dataclass(frozen=True)
class Disk:
    """A named directory. `capacity_bytes` caps it below the file system's size (quotas, tests)."""

    name: str
    path: str
    capacity_bytes: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name or "/" in self.name:
            raise InvalidOptionError(f"disk name must be a non-empty string without '/', got {self.name!r}")
        if not isinstance(self.path, (str, os.PathLike)) or not str(self.path):
            raise InvalidOptionError(f"disk {self.name!r}: path must be a non-empty string, got {self.path!r}")
        object.__setattr__(self, "path", os.path.abspath(os.fspath(self.path)))
        if self.capacity_bytes is not None:
            _positive_int(self.capacity_bytes, f"disk {self.name!r} capacity_bytes")

    def free_bytes(self) -> int:
        """Bytes still available: the file system's free space, capped by `capacity_bytes`."""
        probe = Path(self.path)
        while not probe.exists() and probe != probe.parent:
            probe = probe.parent  # a missing disk directory still reports its file system
        fs_free = shutil.disk_usage(probe).free
        if self.capacity_bytes is None:
            return fs_free
        used = _directory_bytes(Path(self.path)) if Path(self.path).exists() else 0
        return max(0, min(fs_free, self.capacity_bytes - used))

    def total_bytes(self) -> int:
        if self.capacity_bytes is not None:
            return self.capacity_bytes
        probe = Path(self.path)
        while not probe.exists() and probe != probe.parent:
            probe = probe.parent
        return shutil.disk_usage(probe).total


@dataclass
class Volume:
    """Disks sharing one layout. Units of striped layouts are `stripe_unit_bytes` long, cut at
    granule boundaries; `max_data_part_size` sends bigger parts to the next volume."""

    name: str
    disks: Sequence[Disk]
    layout: Layout = "single"
    stripe_unit_bytes: int = DEFAULT_STRIPE_UNIT_BYTES
    max_data_part_size: int | None = None
    jbod_placement: JbodPlacement = "round_robin"
    _round_robin: itertools.count = field(default_factory=itertools.count, init=False, repr=False, compare=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise InvalidOptionError(f"volume name must be a non-empty string, got {self.name!r}")
        where = f"volume {self.name!r}"
        if self.layout not in LAYOUTS:
            raise InvalidOptionError(f"{where}: layout {self.layout!r} is not one of {', '.join(LAYOUTS)}")
        self.disks = tuple(self.disks)
        if not all(isinstance(d, Disk) for d in self.disks):
            raise InvalidOptionError(f"{where}: disks must be Disk objects")
        need = MIN_DISKS[self.layout]
        if len(self.disks) < need:
            raise InvalidOptionError(
                f"{where}: layout {self.layout} needs at least {need} disks, got {len(self.disks)}")
        if self.layout == "single" and len(self.disks) != 1:
            raise InvalidOptionError(f"{where}: layout single takes exactly 1 disk, got {len(self.disks)}; "
                                     f"use {', '.join(LAYOUTS[1:])} for several")
        names = [d.name for d in self.disks]
        paths = [d.path for d in self.disks]
        if len(set(names)) != len(names) or len(set(paths)) != len(paths):
            raise InvalidOptionError(f"{where}: disk names and paths must be distinct, got {names} at {paths}")
        _positive_int(self.stripe_unit_bytes, f"{where} stripe_unit_bytes", MIN_STRIPE_UNIT_BYTES)
        if self.max_data_part_size is not None:
            _positive_int(self.max_data_part_size, f"{where} max_data_part_size_bytes")
        if self.jbod_placement not in JBOD_PLACEMENTS:
            raise InvalidOptionError(f"{where}: jbod_placement {self.jbod_placement!r} is not one of "
                                     f"{', '.join(JBOD_PLACEMENTS)}")

    @property
    def striped(self) -> bool:
        """Whether a part's big files are cut into units spread over disks (not plain directories)."""
        return self.layout in STRIPED_LAYOUTS

    def _usable(self, per_disk: list[int]) -> int:
        """Bytes of parts a volume holds when its disks hold `per_disk` bytes each."""
        if self.layout in ("single", "jbod"):
            return sum(per_disk)
        if self.layout == "raid1":
            return min(per_disk)
        return min(per_disk) * (len(self.disks) - PARITY_UNITS.get(self.layout, 0))

    def disk(self, name: str) -> Disk:
        for d in self.disks:
            if d.name == name:
                return d
        raise InvalidOptionError(f"volume {self.name!r} has no disk {name!r}; disks: "
                                 f"{', '.join(d.name for d in self.disks)}")

    def free_bytes(self) -> int:
        """Usable free bytes: the sum for jbod, the smallest disk times data disks for raid."""
        return self._usable([d.free_bytes() for d in self.disks])

    def total_bytes(self) -> int:
        return self._usable([d.total_bytes() for d in self.disks])

    def free_fraction(self) -> float:
        total = self.total_bytes()
        return self.free_bytes() / total if total else 0.0

    def choose_jbod_disk(self) -> Disk:
        """The disk for a new whole part: round robin as ClickHouse does, or the one with most free space."""
        if self.jbod_placement == "least_used":
            return max(self.disks, key=lambda d: d.free_bytes())
        with self._lock:
            return self.disks[next(self._round_robin) % len(self.disks)]

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "disks": [d.name for d in self.disks], "layout": self.layout,
                "stripe_unit_bytes": self.stripe_unit_bytes,
                "max_data_part_size_bytes": self.max_data_part_size,
                "jbod_placement": self.jbod_placement}


@dataclass
class StoragePolicy:
    """Volumes in priority order. A new part goes to the first volume that accepts its size and
    whose free fraction is at least `move_factor` (else the last volume that accepts its size)."""

    name: str
    volumes: Sequence[Volume]
    move_factor: float = 0.1

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise InvalidOptionError(f"storage policy name must be a non-empty string, got {self.name!r}")
        self.volumes = tuple(self.volumes)
        if not self.volumes:
            raise InvalidOptionError(f"storage policy {self.name!r}: volumes must not be empty")
        if not all(isinstance(v, Volume) for v in self.volumes):
            raise InvalidOptionError(f"storage policy {self.name!r}: volumes must be Volume objects")
        if isinstance(self.move_factor, bool) or not isinstance(self.move_factor, (int, float)) \
                or not 0.0 <= self.move_factor <= 1.0:
            raise InvalidOptionError(
                f"storage policy {self.name!r}: move_factor must be a number in [0, 1], got {self.move_factor!r}")
        volume_names = [v.name for v in self.volumes]
        if len(set(volume_names)) != len(volume_names):
            raise InvalidOptionError(f"storage policy {self.name!r}: volume names repeat: {volume_names}")
        all_disks = [d for v in self.volumes for d in v.disks]
        disk_names = [d.name for d in all_disks]
        disk_paths = [d.path for d in all_disks]
        if len(set(disk_names)) != len(disk_names) or len(set(disk_paths)) != len(disk_paths):
            raise InvalidOptionError(
                f"storage policy {self.name!r}: a disk may belong to one volume only, got {disk_names}")

    @classmethod
    def single(cls, path: str | os.PathLike[str]) -> StoragePolicy:
        """The default: one plain directory, which is the table directory itself."""
        return cls("default", [Volume("default", [Disk("default", os.fspath(path))], "single")], 0.0)

    @classmethod
    def from_dict(cls, config: Mapping[str, Any]) -> StoragePolicy:
        """Build from `{"name", "move_factor", "disks": {name: {"path", "capacity_bytes"}},
        "volumes": [{"name", "disks": [names], "layout", "stripe_unit_bytes",
        "max_data_part_size_bytes", "jbod_placement"}]}`; `volumes` may also map name → spec."""
        if not isinstance(config, Mapping):
            raise InvalidOptionError(f"storage policy config must be a mapping, got {type(config).__name__}")
        _check_keys(config, _POLICY_KEYS, "storage policy")
        for required in ("disks", "volumes"):
            if required not in config:
                raise InvalidOptionError(f"storage policy: missing key {required!r}; required: disks, volumes")
        name = config.get("name", "default")
        disks_config = config["disks"]
        if not isinstance(disks_config, Mapping) or not disks_config:
            raise InvalidOptionError("storage policy: 'disks' must map disk names to {'path': ...}")
        disks: dict[str, Disk] = {}
        for disk_name, spec in disks_config.items():
            if isinstance(spec, str):
                spec = {"path": spec}
            if not isinstance(spec, Mapping):
                raise InvalidOptionError(f"disks.{disk_name}: must be a path or a mapping with 'path'")
            _check_keys(spec, _DISK_KEYS, f"disks.{disk_name}")
            if "path" not in spec:
                raise InvalidOptionError(f"disks.{disk_name}: missing key 'path'")
            disks[disk_name] = Disk(disk_name, spec["path"], spec.get("capacity_bytes"))
        volumes_config = config["volumes"]
        if isinstance(volumes_config, Mapping):
            volumes_config = [{"name": k, **v} if isinstance(v, Mapping) else v
                              for k, v in volumes_config.items()]
        if not isinstance(volumes_config, Sequence) or isinstance(volumes_config, str) or not volumes_config:
            raise InvalidOptionError("storage policy: 'volumes' must be a non-empty list of volume specs")
        volumes: list[Volume] = []
        for index, spec in enumerate(volumes_config):
            where = f"volumes[{index}]"
            if not isinstance(spec, Mapping):
                raise InvalidOptionError(f"{where}: must be a mapping with keys {', '.join(_VOLUME_KEYS)}")
            _check_keys(spec, _VOLUME_KEYS, where)
            layout = spec.get("layout", "jbod")
            if layout not in LAYOUTS:
                raise InvalidOptionError(f"{where}.layout: {layout!r} is not one of {', '.join(LAYOUTS)}")
            disk_names = spec.get("disks")
            if isinstance(disk_names, str):
                disk_names = [disk_names]
            if not isinstance(disk_names, Sequence) or not disk_names:
                raise InvalidOptionError(f"{where}.disks: must be a non-empty list of disk names")
            for disk_name in disk_names:
                if disk_name not in disks:
                    raise InvalidOptionError(
                        f"{where}.disks: unknown disk {disk_name!r}; defined disks: {', '.join(disks)}")
            volumes.append(Volume(
                spec.get("name", f"volume_{index}"), [disks[n] for n in disk_names], layout,
                spec.get("stripe_unit_bytes", DEFAULT_STRIPE_UNIT_BYTES),
                spec.get("max_data_part_size_bytes"), spec.get("jbod_placement", "round_robin")))
        return cls(name, volumes, config.get("move_factor", 0.1))

    @classmethod
    def from_json(cls, path: str | os.PathLike[str]) -> StoragePolicy:
        try:
            with open(path, encoding="utf-8") as f:
                config = json.load(f)
        except json.JSONDecodeError as e:
            raise InvalidOptionError(f"storage policy file {os.fspath(path)}: not valid JSON: {e}") from e
        return cls.from_dict(config)

    def to_dict(self) -> dict[str, Any]:
        disks = {d.name: {"path": d.path, **({"capacity_bytes": d.capacity_bytes} if d.capacity_bytes else {})}
                 for v in self.volumes for d in v.disks}
        return {"name": self.name, "move_factor": self.move_factor, "disks": disks,
                "volumes": [v.to_dict() for v in self.volumes]}

    def volume(self, name: str) -> Volume:
        for v in self.volumes:
            if v.name == name:
                return v
        raise InvalidOptionError(f"storage policy {self.name!r} has no volume {name!r}; volumes: "
                                 f"{', '.join(v.name for v in self.volumes)}")

    def choose_volume(self, part_bytes: int) -> Volume:
        """The volume for a new part of `part_bytes` bytes."""
        fitting = [v for v in self.volumes if v.max_data_part_size is None or part_bytes <= v.max_data_part_size]
        if not fitting:
            raise InvalidOptionError(
                f"storage policy {self.name!r}: a part of {part_bytes} bytes exceeds max_data_part_size_bytes "
                f"of every volume ({', '.join(f'{v.name}={v.max_data_part_size}' for v in self.volumes)})")
        if len(fitting) == 1 or self.move_factor == 0.0:
            return fitting[0]
        for v in fitting:
            if v.free_fraction() >= self.move_factor:
                return v
        return fitting[-1]

    def move_target(self, target: str) -> Volume:
        """The volume a TTL move rule's target (`DISK 'd'` or `VOLUME 'v'`) names: a disk's volume
        for a disk. InvalidOptionError when the policy has no such disk or volume (ClickHouse
        refuses such a TTL when the table is created, BAD_TTL_EXPRESSION)."""
        found = re.fullmatch(r"\s*(DISK|VOLUME)\s+(?:'([^']*)'|\"([^\"]*)\"|`([^`]*)`)\s*", target, re.I)
        if found is None:
            raise InvalidOptionError(f"TTL ... TO {target}: expected DISK 'name' or VOLUME 'name'")
        kind, name = found.group(1).upper(), next(g for g in found.groups()[1:] if g is not None)
        for volume in self.volumes:
            if (kind == "VOLUME" and volume.name == name) or (kind == "DISK" and any(d.name == name for d in volume.disks)):
                return volume
        have = [v.name for v in self.volumes] if kind == "VOLUME" else [d.name for v in self.volumes for d in v.disks]
        raise InvalidOptionError(f"TTL ... TO {kind} '{name}': storage policy {self.name!r} has no {kind.lower()} "
                                 f"{name!r} ({kind.lower()}s: {', '.join(have)})")

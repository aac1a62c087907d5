"""Maintenance of a table's parts: scrub (read and verify every copy, every parity) and rebuild
(recreate a replaced disk's share of every part from the other disks, byte for byte)."""

from __future__ import annotations

from spark_mergetree.errors import InvalidOptionError, StorageError
from spark_mergetree.storage.filesystem import byte_view
from spark_mergetree.storage.reports import RebuildReport, ScrubProblem, ScrubReport
from spark_mergetree.storage.table_parts import TableParts


def scrub(parts: TableParts, progress: bool = False) -> ScrubReport:
    """Read every copy of every unit and every parity unit; report what does not verify."""
    report = ScrubReport()
    parts.forget(*parts.list_parts())
    from tqdm import tqdm  # only here: every process that opens a table imports this module

    for part in tqdm(parts.list_parts(), desc="scrub", unit="part", disable=not progress):
        report.parts_checked += 1
        try:
            opened = parts.open(part)
        except StorageError as e:
            report.problems.append(ScrubProblem(part, "?", "map", detail=str(e)))
            continue
        if opened.stripe_map is None:
            # A plain directory without a map (a ClickHouse part) or whose only map copy is damaged.
            report.problems.extend(ScrubProblem(part, disk, "map", detail=what) for disk, what in opened.map_problems)
            report.unverified_parts.append(part)
            continue
        report.problems += opened.layout.scrub_part(opened, report)
    return report


def rebuild(parts: TableParts, disk_name: str, progress: bool = True) -> RebuildReport:
    """Restore every part's bytes on a replaced (empty or damaged) disk from the other disks.

    The rebuilt files are byte-identical to what was written. Layouts without redundancy
    (single, jbod, raid0) raise StorageError naming the disk. With raid6, two replaced disks are
    rebuilt one after the other.
    """
    policy = parts.policy
    volume = next((v for v in policy.volumes if any(d.name == disk_name for d in v.disks)), None)
    if volume is None:
        raise InvalidOptionError(f"no disk {disk_name!r} in storage policy {policy.name!r}; disks: "
                                 + ", ".join(d.name for v in policy.volumes for d in v.disks))
    layout = parts.layout(volume)
    if not layout.redundant:
        raise StorageError(f"disk {disk_name!r} of volume {volume.name!r} cannot be rebuilt: layout "
                           f"{volume.layout} keeps no redundant copy (raid1, raid5 and raid6 do)")
    disk = volume.disk(disk_name)
    report = RebuildReport(disk_name)
    parts.forget(*parts.list_parts())
    on_volume = [p for p in parts.list_parts() if parts.open(p).volume is volume]
    dirs = parts.dirs
    from tqdm import tqdm

    for part in tqdm(on_volume, desc=f"rebuild {disk_name}", unit="part", disable=not progress):
        opened = parts.open(part)
        if disk not in opened.disks:
            continue
        files, sidecar = layout.rebuild_part(opened, disk)
        dirs.stage(disk, part, files, sidecar)
        if dirs.fs(disk).isdir(dirs.part_dir(disk, part)):
            dirs.retire(disk, part, sidecar=not layout.map_inside)
        dirs.publish(disk, part, sidecar is not None)
        report.parts_rebuilt.append(part)
        report.bytes_written += len(sidecar or b"")
        report.bytes_written += sum(len(byte_view(chunk)) for _name, chunks in files for chunk in chunks)
    parts.forget(*on_volume)
    return report

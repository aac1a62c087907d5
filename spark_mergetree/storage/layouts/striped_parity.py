"""raid5 and raid6: striped units grouped into stripes with one (P) or two (P, Q) parity units.

With n disks and k parity units (raid5 k = 1, raid6 k = 2), striped units are grouped n − k at a
time into stripes (the last may be shorter). Stripe `s` puts P on disk `p = (n − 1 − s) mod n`,
raid6's Q on `(p + 1) mod n`, and its `i`-th data unit on `(p + k + i) mod n`: the parity rotates
round the disks as in Linux md's left-symmetric layout. P is the XOR of the data units, Q their
Reed–Solomon syndrome (storage/parity.py); each is as long as the stripe's longest data unit.

Any k lost or damaged units of a stripe (data, P or Q, found by their checksums) are recovered
from the rest; a replaced disk is rebuilt stripe by stripe, and scrub recomputes every parity.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from spark_mergetree.errors import StorageError
from spark_mergetree.fileops import scratch
from spark_mergetree.storage.filesystem import Buffer, Files
from spark_mergetree.storage.layouts.base import OpenPart, UnitFault, UnitReader
from spark_mergetree.storage.layouts.striped import StripedLayout
from spark_mergetree.storage.parity import q_parity, recover, unit_checksum, xor_parity
from spark_mergetree.storage.policy import PARITY_UNITS, Disk
from spark_mergetree.storage.reports import ScrubProblem, ScrubReport
from spark_mergetree.storage.stripe_map import STRIPED_MAP_NAME, UNITS_FILE_NAME, StripeMap, striped_units

#: Names of the parity units in messages: P (XOR) and Q (Reed–Solomon).
_PARITY_NAMES = ("parity", "Q parity")


class StripedParityLayout(StripedLayout):
    redundant = True

    @property
    def parities(self) -> int:
        return PARITY_UNITS[self.volume.layout]

    def _parity_columns(self, stripe_map: StripeMap, which: int) -> tuple[np.ndarray, np.ndarray, list[str]]:
        """(disk, offset in units.bin, checksum) columns of P (which = 0) or Q (which = 1)."""
        if which == 0:
            return stripe_map.parity_disk, stripe_map.parity_disk_offset, stripe_map.parity_hash
        return stripe_map.q_disk, stripe_map.q_disk_offset, stripe_map.q_hash

    # ---------------------------------------------------------------- writing

    def place(self, stripe_map: StripeMap) -> None:
        n_disks, k = len(stripe_map.disks), self.parities
        width = n_disks - k
        units = striped_units(stripe_map)
        fill = np.zeros(n_disks, dtype=np.int64)
        n_stripes = -(-units.size // width)
        columns = np.zeros((6, n_stripes), dtype=np.int64)  # first, count, P disk, P offset, Q disk, Q offset
        lengths = np.zeros(n_stripes, dtype=np.int64)
        for s in range(n_stripes):
            members = units[s * width:(s + 1) * width]
            p = (n_disks - 1 - s) % n_disks
            for i, u in enumerate(members.tolist()):
                d = (p + k + i) % n_disks
                stripe_map.unit_disk[u] = d
                stripe_map.unit_disk_offset[u] = fill[d]
                stripe_map.unit_stripe[u] = s
                fill[d] += stripe_map.unit_length[u]
            lengths[s] = int(stripe_map.unit_length[members].max())
            columns[:4, s] = members[0], members.size, p, fill[p]
            fill[p] += lengths[s]
            if k == 2:
                q = (p + 1) % n_disks
                columns[4:, s] = q, fill[q]
                fill[q] += lengths[s]
        (stripe_map.stripe_first_unit, stripe_map.stripe_unit_count, stripe_map.parity_disk,
         stripe_map.parity_disk_offset) = columns[:4]
        stripe_map.parity_length = lengths
        if k == 2:
            stripe_map.q_disk, stripe_map.q_disk_offset = columns[4:]

    def _parity_units(self, data: Sequence[Buffer], length: int) -> list[np.ndarray]:
        return [xor_parity(data, length), q_parity(data, length)][:self.parities]

    def encode(self, stripe_map: StripeMap, unit_views: list[memoryview]) -> list[tuple[int, int, Buffer]]:
        def one(s: int) -> list[np.ndarray]:
            members = stripe_map.stripe_units(s)
            return self._parity_units(unit_views[members.start:members.stop], int(stripe_map.parity_length[s]))

        computed = list(self.pool.map(one, range(stripe_map.n_stripes)))
        stripe_map.parity_hash = [unit_checksum(units[0]) for units in computed]
        if self.parities == 2:
            stripe_map.q_hash = [unit_checksum(units[1]) for units in computed]
        pieces: list[tuple[int, int, Buffer]] = []
        for which in range(self.parities):
            disks, offsets, _hashes = self._parity_columns(stripe_map, which)
            pieces += [(int(disks[s]), int(offsets[s]), units[which]) for s, units in enumerate(computed)]
        return pieces

    # ---------------------------------------------------------------- recovery

    def _read_parity(self, opened: OpenPart, stripe: int, which: int, faults: list[UnitFault],
                     reader: UnitReader, excluded: int | None) -> memoryview | None:
        stripe_map = opened.stripe_map
        assert stripe_map is not None
        disks, offsets, hashes = self._parity_columns(stripe_map, which)
        if int(disks[stripe]) == excluded:
            return None
        disk = opened.disks[int(disks[stripe])]
        buffer = scratch(int(stripe_map.parity_length[stripe]))
        try:
            reader.read(disk, f"{self.dirs.part_dir(disk, opened.name)}/{UNITS_FILE_NAME}", int(offsets[stripe]),
                        buffer, hashes[stripe])
        except UnitFault as fault:
            faults.append(fault)
            return None
        return buffer

    def stripe_data(self, opened: OpenPart, stripe: int, lost: set[int], faults: list[UnitFault],
                    reader: UnitReader, excluded: int | None = None) -> list[np.ndarray] | None:
        stripe_map = opened.stripe_map
        assert stripe_map is not None
        members = stripe_map.stripe_units(stripe)
        units: list[np.ndarray | None] = []
        for u in members:
            if u in lost or int(stripe_map.unit_disk[u]) == excluded:
                units.append(None)
                continue
            buffer = np.empty(int(stripe_map.unit_length[u]), dtype=np.uint8)
            disk, path, offset = self.unit_sources(opened, u)[0]
            try:
                reader.read(disk, path, offset, buffer.data, stripe_map.unit_hash[u])
                units.append(buffer)
            except UnitFault as fault:
                faults.append(fault)
                units.append(None)
        missing = [i for i, unit in enumerate(units) if unit is None]
        if not missing:
            return [unit for unit in units if unit is not None]
        length = int(stripe_map.parity_length[stripe])
        p = self._read_parity(opened, stripe, 0, faults, reader, excluded)
        q = None
        if self.parities == 2 and (p is None or len(missing) == 2):
            q = self._read_parity(opened, stripe, 1, faults, reader, excluded)
        try:
            rebuilt = recover(units, p, q, length)
        except StorageError:
            return None
        for i, padded in zip(missing, rebuilt):
            u = members[i]
            data = padded[: int(stripe_map.unit_length[u])]
            if unit_checksum(data) != stripe_map.unit_hash[u]:
                disk = opened.disks[int(stripe_map.parity_disk[stripe])]
                faults.append(UnitFault(disk.name, "parity", f"stripe {stripe} does not rebuild unit {u}"))
                return None
            units[i] = data
        return [unit for unit in units if unit is not None]

    # ---------------------------------------------------------------- rebuild

    def rebuild_part(self, opened: OpenPart, disk: Disk) -> tuple[Files, bytes | None]:
        stripe_map = opened.stripe_map
        assert stripe_map is not None and opened.map_bytes is not None
        index = opened.disks.index(disk)
        files: list[tuple[str, Sequence[Buffer]]] = [
            (name, [self.read_excluding(opened, name, disk)])
            for name, entry in stripe_map.files.items() if not entry.striped]
        units = np.zeros(stripe_map.disk_units_bytes(index), dtype=np.uint8)
        columns = [self._parity_columns(stripe_map, which) for which in range(self.parities)]
        with UnitReader(self.dirs) as reader:
            for s in range(stripe_map.n_stripes):
                members = stripe_map.stripe_units(s)
                here = [u for u in members if int(stripe_map.unit_disk[u]) == index]
                parities_here = [which for which, (disks, _o, _h) in enumerate(columns) if int(disks[s]) == index]
                if not here and not parities_here:
                    continue
                faults: list[UnitFault] = []
                data = self.stripe_data(opened, s, set(here), faults, reader, excluded=index)
                if data is None:
                    raise StorageError(f"part {opened.name!r}: stripe {s} of disk {disk.name} cannot be rebuilt: "
                                       + "; ".join(map(str, faults)))
                for u in here:
                    o = int(stripe_map.unit_disk_offset[u])
                    units[o:o + int(stripe_map.unit_length[u])] = data[u - members.start]
                if parities_here:
                    computed = self._parity_units(data, int(stripe_map.parity_length[s]))
                    for which in parities_here:
                        o = int(columns[which][1][s])
                        units[o:o + computed[which].size] = computed[which]
        files += [(UNITS_FILE_NAME, [units]), (STRIPED_MAP_NAME, [opened.map_bytes])]
        return files, None

    # ---------------------------------------------------------------- scrub

    def scrub_parity(self, opened: OpenPart, report: ScrubReport, data_ok: np.ndarray,
                     reader: UnitReader) -> list[ScrubProblem]:
        stripe_map = opened.stripe_map
        assert stripe_map is not None
        problems = []
        for s in range(stripe_map.n_stripes):
            stored = []
            for which in range(self.parities):
                report.parity_checked += 1
                faults: list[UnitFault] = []
                if self._read_parity(opened, s, which, faults, reader, None) is not None:
                    stored.append(which)
                for fault in faults:
                    problems.append(ScrubProblem(opened.name, fault.disk, fault.kind, UNITS_FILE_NAME, None,
                                                 f"{_PARITY_NAMES[which]} of stripe {s}: {fault.detail}"))
            members = stripe_map.stripe_units(s)
            if not stored or not data_ok[members.start:members.stop].all():
                continue
            data = self.stripe_data(opened, s, set(), [], reader)
            if data is None:
                continue  # a member changed since it verified: the next scrub reports it
            computed = self._parity_units(data, int(stripe_map.parity_length[s]))
            for which in stored:
                disks, _offsets, hashes = self._parity_columns(stripe_map, which)
                if unit_checksum(computed[which]) != hashes[s]:
                    what = "XOR" if which == 0 else "Reed-Solomon syndrome (Q)"
                    problems.append(ScrubProblem(
                        opened.name, opened.disks[int(disks[s])].name, "parity", UNITS_FILE_NAME, None,
                        f"stripe {s}: {what} of its data units differs from the stored {_PARITY_NAMES[which]}"))
        return problems

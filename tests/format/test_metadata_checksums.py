"""Small files a read interprets (count, indexes, partition values, marks, serialization) are verified
against checksums.txt when a part is opened or the file is loaded: one flipped bit in any of them
makes a read raise CorruptPartError naming the part and the file, never return other rows.

Parts come from our writer and from ClickHouse (chdb): Wide with compressed marks, the compressed
primary index and a lightweight-delete mask; Wide with plain marks and primary.idx; Compact.
Expected rows come from the data we inserted and from chdb SELECTs.
"""

from __future__ import annotations

import datetime as dt
import re
import shutil
from pathlib import Path

import pyarrow as pa
import pytest

from spark_mergetree import MergeTreeTable
from spark_mergetree.errors import CorruptPartError
from spark_mergetree.format.checksums import Checksums
from tests.format.chdb_util import active_part_dirs, close_session, make_chdb_table

WHERE = "k >= 100 AND k < 300 AND d >= '2024-01-02'"
CHDB_TABLES = {
    "chdb_wide": "min_bytes_for_wide_part = 0, index_granularity = 64",
    "chdb_wide_plain": "min_bytes_for_wide_part = 0, index_granularity = 64, compress_marks = 0, "
                       "compress_primary_key = 0",
    "chdb_compact": "min_bytes_for_wide_part = 1000000000, min_rows_for_wide_part = 1000000000, "
                    "index_granularity = 64",
}


def _sorted_rows(table: pa.Table) -> list[tuple]:
    columns = [[v.decode() if isinstance(v, bytes) else v for v in c.to_pylist()] for c in table.columns]
    return sorted(zip(*columns))


def _select(sess, sql: str) -> list[tuple]:
    return _sorted_rows(pa.ipc.open_file(pa.py_buffer(sess.query(sql, "Arrow").bytes())).read_all())


@pytest.fixture(scope="module")
def sources(tmp_path_factory) -> dict[str, tuple[Path, str | None, list[tuple], list[tuple]]]:
    """name → (table directory, create statement (None for ours), all rows, rows matching WHERE)."""
    tmp = tmp_path_factory.mktemp("metadata")
    out = {}
    ours = MergeTreeTable.create(tmp / "ours", [("k", "UInt64"), ("d", "Date"), ("s", "String")], order_by="k",
                                 partition_by="toYYYYMM(d)", settings={"index_granularity": 64, "auto_merge": False,
                                           "min_bytes_for_wide_part": 0})
    keys = list(range(500))
    data = pa.table({"k": pa.array(keys, pa.uint64()),
                     "d": pa.array([dt.date(2024, 1, 1) + dt.timedelta(days=k % 20) for k in keys], pa.date32()),
                     "s": [f"s{k}" for k in keys]})
    ours.insert(data)
    everything = _sorted_rows(data)
    matching = [r for r in everything if 100 <= r[0] < 300 and r[1] >= dt.date(2024, 1, 2)]
    out["ours"] = (ours.path, None, everything, matching)
    for name, settings in CHDB_TABLES.items():
        create = (f"CREATE TABLE {name} (k UInt64, d Date, s String) ENGINE = MergeTree PARTITION BY toYYYYMM(d) "
                  f"ORDER BY k SETTINGS {settings}")
        inserts = [f"INSERT INTO {name} SELECT number, toDate('2024-01-01') + number % 20, concat('s', "
                   "toString(number)) FROM numbers(500)"]
        if name == "chdb_wide":
            inserts.append(f"DELETE FROM {name} WHERE k % 50 = 7")
        sess, data_dir = make_chdb_table(tmp, create, inserts)
        statement = sess.query(f"SHOW CREATE TABLE {name}", "TabSeparatedRaw").bytes().decode()
        assert len(active_part_dirs(sess, name)) == 1
        out[name] = (data_dir, statement, _select(sess, f"SELECT k, d, s FROM {name}"),
                     _select(sess, f"SELECT k, d, s FROM {name} WHERE {WHERE}"))
    close_session()
    return out


def _open(directory: Path, statement: str | None) -> MergeTreeTable:
    return MergeTreeTable.open(directory, create_statement=statement)


def _active_part(table: MergeTreeTable) -> Path:
    (part,) = table.parts()
    return table.path / part.name


def _checked_small_files(part: Path) -> list[str]:
    """Every file checksums.txt lists except the column data (.bin: each block carries a checksum)
    and files reads never use (skip indexes, statistics)."""
    listed = Checksums.parse((part / "checksums.txt").read_bytes()).files
    return sorted(n for n in listed if not n.endswith(".bin") and not n.startswith(("skp_idx", "statistics")))


@pytest.mark.parametrize("source", ["ours", *CHDB_TABLES])
def test_flipped_bit_in_any_small_file_is_refused_by_name(sources, source, tmp_path):
    directory, statement, everything, matching = sources[source]
    intact = _open(directory, statement)
    assert _sorted_rows(intact.to_arrow(["k", "d", "s"])) == everything
    assert _sorted_rows(intact.to_arrow(["k", "d", "s"], where=WHERE)) == matching
    part = _active_part(intact)
    files = _checked_small_files(part)
    # Every kind of file a read interprets is covered by this source.
    kinds = {re.sub(r"^(minmax_).*|^.*(\.c?mrk\d?)$", r"\1\2", name) for name in files}
    assert {"count.txt", "partition.dat", "minmax_", "serialization.json"} <= kinds
    assert kinds & {"primary.idx", "primary.cidx"} and kinds & {".mrk2", ".cmrk2", ".mrk3", ".cmrk3", ".mrk4",
                                                                  ".cmrk4"}
    if source == "chdb_wide":
        assert "_row_exists.cmrk2" in files
    for name in files:
        copy = tmp_path / name
        shutil.copytree(directory, copy)
        damaged = copy / part.name / name
        data = bytearray(damaged.read_bytes())
        data[len(data) // 2] ^= 0x01
        damaged.write_bytes(bytes(data))
        # Compressed marks are verified block by block as they are decompressed; the other files
        # against their checksums.txt entry.
        cause = "checksum mismatch in compressed block" if ".cmrk" in name else r".*checksums\.txt"
        named = rf"{re.escape(part.name)}/{re.escape(name)}: {cause}"
        for where in (WHERE, None):
            with pytest.raises(CorruptPartError, match=named):
                _open(copy, statement).to_arrow(["k", "d", "s"], where=where)
        report = _open(copy, statement).check()
        assert not report.ok and f"{part.name}/{name}" in str(report)
        shutil.rmtree(copy)


@pytest.mark.parametrize("source", ["ours", "chdb_compact"])
def test_check_lists_every_damaged_file_of_a_part_that_cannot_be_opened(sources, source, tmp_path):
    directory, statement, _, _ = sources[source]
    copy = tmp_path / "t"
    shutil.copytree(directory, copy)
    part = _active_part(_open(copy, statement))
    damaged = ["partition.dat", "count.txt", "data.bin" if source == "chdb_compact" else "s.bin"]
    for name in damaged:
        data = bytearray((part / name).read_bytes())
        data[-1] ^= 0x01
        (part / name).write_bytes(bytes(data))
    with pytest.raises(CorruptPartError, match=rf"{part.name}/count\.txt: "):
        _open(copy, statement).to_arrow()
    problems = _open(copy, statement).check().problems
    assert sorted(p.split(": ")[0].rsplit("/", 1)[1] for p in problems) == sorted(damaged)

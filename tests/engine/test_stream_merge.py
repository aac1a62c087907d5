"""The streaming merge (engine/merge_stream.py) writes, block by block, the part the in-memory merge
writes from whole columns: byte for byte, for every kind of column and key, with ties across
parts, lightweight-deleted rows and ORDER BY tuple(); and its memory does not grow with the parts."""

from __future__ import annotations

import decimal
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from spark_mergetree import MergeTreeTable
from spark_mergetree.engine import merge as merging
from spark_mergetree.engine import merge_stream
from tests.format.chdb_util import close_session, make_chdb_table

REPO = Path(__file__).resolve().parents[2]

COLUMNS = [("d", "Date"), ("id", "UInt64"), ("name", "String"), ("score", "Nullable(Float64)"),
           ("tags", "Array(LowCardinality(String))"), ("kind", "LowCardinality(Nullable(String))"),
           ("attrs", "Map(String, Int32)"), ("price", "Decimal(18, 3)"), ("flag", "UInt8")]


def _batch(rng: np.random.Generator, n: int, salt: int) -> pa.Table:
    ids = rng.integers(0, 300, n).astype(np.uint64)  # few distinct keys: ties across parts
    seq = np.arange(n) + salt
    return pa.table({
        "d": pa.array((19_700 + rng.integers(0, 40, n)).astype(np.int32)).cast(pa.date32()),
        "id": ids,
        "name": pa.array([f"n{i % 40}" + "x" * int(s % 9) for i, s in zip(ids.tolist(), seq.tolist())]),
        "score": pa.array([None if s % 7 == 0 else s / 3 for s in seq.tolist()], pa.float64()),
        "tags": pa.array([[f"t{s % 9000}"] * int(s % 3) for s in seq.tolist()], pa.list_(pa.string())),
        "kind": pa.array([None if s % 5 == 0 else f"k{s % 9500}" for s in seq.tolist()]),
        "attrs": pa.array([[("a", int(s))] * int(s % 2) for s in seq.tolist()], pa.map_(pa.string(), pa.int32())),
        "price": pa.array([decimal.Decimal(int(s)).scaleb(-3) for s in seq.tolist()], pa.decimal128(18, 3)),
        "flag": pa.array((seq % 2).astype(np.uint8)),
    })


def _both(table: MergeTreeTable, parts: list[str]) -> tuple[dict[str, bytes], dict[str, bytes]]:
    readers = [table.reader(p) for p in parts]
    whole = merging.merge_parts(readers, table.metadata)
    with merging.merged_part(readers, table.metadata) as streamed:
        assert any(isinstance(data, memoryview) for data in streamed.files.values())  # the streaming path
        return ({name: bytes(data) for name, data in whole.files.items()},
                {name: bytes(data) for name, data in streamed.files.items()})


@pytest.mark.parametrize("order_by", ["id", "(name, id)", "(toStartOfMonth(d), score)", "tuple()"])
def test_streaming_merge_writes_the_in_memory_merge_byte_for_byte(tmp_path: Path, monkeypatch, order_by: str) -> None:
    monkeypatch.setattr(merge_stream, "READ_BLOCK_ROWS", 700)  # many windows and blocks per part
    rng = np.random.default_rng(11)
    settings = {"auto_merge": False, "index_granularity": 256, "allow_nullable_key": 1,
                "min_bytes_for_wide_part": 0}  # Wide parts: the merge streams
    table = MergeTreeTable.create(tmp_path / "t", COLUMNS, order_by=order_by, partition_by="toYYYYMM(d)",
                                  settings=settings)
    for number, n in enumerate((3000, 5000, 700, 2500)):
        table.insert(_batch(rng, n, number * 100_000))
    partition = max({p.partition_id for p in table.parts()}, key=lambda pid: sum(
        p.rows for p in table.parts() if p.partition_id == pid))
    parts = [p.name for p in table.parts() if p.partition_id == partition]
    assert len(parts) == 4
    whole, streamed = _both(table, parts)
    assert sorted(streamed) == sorted(whole)
    for name in whole:
        assert streamed[name] == whole[name], name


@pytest.mark.parametrize("whole_keys", [False, True])
def test_windows_of_an_integer_key_take_the_rows_the_sort_of_the_whole_window_takes(monkeypatch, whole_keys: bool
                                                                                     ) -> None:
    """An integer key's windows are cut by binary search (merge_stream._emitted_prefixes): the rows
    come in the order, and with whole_keys each key in one window, as cutting the sorted window gives."""
    rng = np.random.default_rng(5)

    def merged(parts: list[np.ndarray], by_search: bool) -> list[tuple[np.ndarray, np.ndarray]]:
        if not by_search:
            monkeypatch.setattr(merge_stream, "_emitted_prefixes", lambda *args, **kwargs: None)
        sizes = np.random.default_rng(9)

        def blocks(keys: np.ndarray):
            position = 0
            while position < len(keys):
                n = int(sizes.integers(1, 40))
                yield pa.table({"k": pa.array(keys[position:position + n], pa.int64()),
                                "row": pa.array(np.arange(position, min(position + n, len(keys))))})
                position += n

        out: list[tuple[np.ndarray, np.ndarray]] = []
        merge_stream.merge_sorted_blocks([blocks(keys) for keys in parts], ["k"], {"k": "Int64", "row": "Int64"},
                                         lambda window, owner: out.append((window.column("row").to_numpy(), owner)),
                                         whole_keys=whole_keys)
        monkeypatch.undo()
        return out

    for _ in range(60):
        parts = [np.sort(rng.integers(0, int(rng.integers(1, 30)), int(rng.integers(0, 120))))
                 for _ in range(int(rng.integers(1, 6)))]
        searched, sorted_whole = merged(parts, True), merged(parts, False)
        for field in range(2):
            assert np.array_equal(np.concatenate([w[field] for w in searched] or [np.zeros(0)]),
                                  np.concatenate([w[field] for w in sorted_whole] or [np.zeros(0)]))
        if whole_keys:  # every key's rows in one window
            keys = [{int(parts[o][r]) for r, o in zip(*window, strict=True)} for window in searched]
            assert sum(len(k) for k in keys) == len(set().union(*keys))


def test_streaming_merge_drops_deleted_rows_as_clickhouse_reads_them(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(merge_stream, "READ_BLOCK_ROWS", 5000)
    create = ("CREATE TABLE t (k UInt64, v String, n Nullable(Int32)) ENGINE = MergeTree ORDER BY k "
              "SETTINGS index_granularity = 1024, min_parts_to_merge_at_once = 1000, "
              "min_bytes_for_wide_part = 0, min_rows_for_wide_part = 0")
    sess, data_dir = make_chdb_table(tmp_path, create, [
        "INSERT INTO t SELECT number * 2, toString(number), if(number % 5 = 0, NULL, number) FROM numbers(40000)",
        "INSERT INTO t SELECT number * 3, repeat('v', number % 11), NULL FROM numbers(30000)",
        "DELETE FROM t WHERE k % 7 = 0",
    ])
    expected = sess.query("SELECT k FROM t", "TSV").bytes().decode()
    statement = sess.query("SHOW CREATE TABLE t", "TabSeparatedRaw").bytes().decode()
    close_session()
    table = MergeTreeTable.open(data_dir, create_statement=statement)
    parts = sorted(p.name for p in table.parts())
    assert len(parts) == 2 and all(table.reader(p).has_row_mask for p in parts)
    whole, streamed = _both(table, parts)
    assert streamed == whole
    assert int(streamed["count.txt"]) == len(expected.splitlines())  # the rows ClickHouse reads


_RSS_SCRIPT = textwrap.dedent("""
    import json, sys, time
    from spark_mergetree import MergeTreeTable
    from spark_mergetree.engine import merge as merging

    def status(field):  # kB; VmHWM: this process's peak resident memory since it started
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith(field + ":"))

    table = MergeTreeTable.open(sys.argv[1])
    readers = [table.reader(p.name) for p in table.parts()]
    import numpy as np  # numba's compiler and kernels load first: a fixed cost, not the merge's
    from spark_mergetree.format.skip_index_compiled import string_hashes
    string_hashes(np.frombuffer(b"warm", np.uint8), np.array([0, 4], np.int64))
    before = status("VmHWM")
    started = time.perf_counter()
    if sys.argv[2] == "streaming":
        with merging.merged_part(readers, table.metadata) as files:
            rows = files.rows
    else:
        rows = merging.merge_parts(readers, table.metadata).rows
    print(json.dumps({"before_kb": before, "peak_kb": status("VmHWM"), "rows": rows,
                      "seconds": time.perf_counter() - started}))
""")


def merge_memory(table_path: Path, how: str = "streaming") -> dict[str, float]:
    """Peak resident memory (and rows, seconds) of a fresh process merging every part of a table."""
    done = subprocess.run([sys.executable, "-c", _RSS_SCRIPT, str(table_path), how], capture_output=True, text=True,
                          cwd=REPO, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}, timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_merge_memory_does_not_grow_with_the_parts(tmp_path: Path) -> None:
    # 3 parts, 7.5M rows, ~660 MB decoded (four 8-byte columns and a 56-byte string column); values
    # that compress well, so the output the merge holds mapped stays small. The in-memory merge
    # holds the sorted keys (60 MB), one whole decoded column (the strings: 420+ MB with their
    # offsets) and its compressed copy: far over the bound.
    rows, parts = 7_500_000, 3
    table = MergeTreeTable.create(tmp_path / "t", [("id", "UInt64"), ("a", "UInt64"), ("b", "Float64"),
                                                   ("c", "Int64"), ("s", "String")],
                                  order_by="id", settings={"auto_merge": False})
    for number in range(parts):
        ids = np.arange(number, rows, parts, dtype=np.uint64)
        text = pa.array(np.char.add("value-of-a-fairly-long-string-column-number-", (ids % 1000).astype("U12")))
        table.insert(pa.table({"id": ids, "a": ids * 3, "b": (ids % 1024).astype(np.float64), "c": -ids.astype(np.int64),
                               "s": text}))
    decoded = sum(r.rows for r in (table.reader(p.name) for p in table.parts())) * (32 + 8 + 56)
    assert decoded > 600e6
    report = merge_memory(tmp_path / "t")
    assert report["rows"] == rows
    grown_mb = (report["peak_kb"] - report["before_kb"]) / 1024
    assert grown_mb < 200, report


_KILLED_MERGE = textwrap.dedent("""
    import os, signal, sys
    from spark_mergetree import MergeTreeTable
    from spark_mergetree.engine import merge_stream
    def gather_then_die(*args, **kwargs):  # the keys are merged and spilled: die mid-merge
        os.kill(os.getpid(), signal.SIGKILL)
    merge_stream._gather_columns = gather_then_die
    MergeTreeTable.open(sys.argv[1]).optimize(final=True)
""")


def test_a_killed_merge_leaves_its_spill_for_the_next_merge_to_remove(tmp_path: Path, monkeypatch) -> None:
    spills = tmp_path / "spills"
    spills.mkdir()
    table = MergeTreeTable.create(tmp_path / "t", [("id", "UInt64"), ("v", "String")], order_by="id",
                                  settings={"auto_merge": False, "min_bytes_for_wide_part": 0})  # streams
    for start in (0, 1):
        table.insert(pa.table({"id": np.arange(start, 20_000, 2, dtype=np.uint64),
                               "v": pa.array([str(i) for i in range(start, 20_000, 2)])}))
    env = {"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", "TMPDIR": str(spills)}
    done = subprocess.run([sys.executable, "-c", _KILLED_MERGE, str(tmp_path / "t")], env=env, cwd=REPO,
                          capture_output=True, timeout=120)
    assert done.returncode == -9, done.stderr
    left = list(spills.iterdir())
    assert len(left) == 1 and left[0].name.startswith(merging.SPILL_PREFIX) and any(left[0].iterdir())
    assert len(table.parts()) == 2  # nothing committed

    monkeypatch.setenv("TMPDIR", str(spills))
    monkeypatch.setattr("tempfile.tempdir", None)
    table.optimize(final=True)
    assert list(spills.iterdir()) == []  # the dead merge's spill removed, this merge's own too
    assert len(table.parts()) == 1 and table.count() == 20_000


def test_merge_memory_does_not_grow_with_projections_and_skip_indexes(tmp_path: Path) -> None:
    """A table's projection (its sources' projection parts merged by its key) and skip indexes
    (built as the merged granules come, over one column or several) are merged in bounded memory too. Built from whole rows, the
    projection alone would hold ~290 MB decoded (4M rows of 8 + 8 + 56 bytes, sorted by `c`)."""
    rows, parts = 4_000_000, 3
    table = MergeTreeTable.create(
        tmp_path / "t", [("id", "UInt64"), ("c", "Int64"), ("s", "String")], order_by="id",
        projections=["PROJECTION by_c (SELECT * ORDER BY c)"], settings={"auto_merge": False})
    table.add_index("INDEX s_bloom s TYPE bloom_filter GRANULARITY 2")
    table.add_index("INDEX c_minmax c TYPE minmax GRANULARITY 1")
    # Over several columns, set and bloom_filter need their columns side by side: non-key columns
    # are gathered together, a non-key column of an index with a key column goes with the keys.
    table.add_index("INDEX cs_set (c, s) TYPE set(100) GRANULARITY 1")
    table.add_index("INDEX id_s_bloom (id, s) TYPE bloom_filter GRANULARITY 1")
    for number in range(parts):
        ids = np.arange(number, rows, parts, dtype=np.uint64)
        text = pa.array(np.char.add("value-of-a-fairly-long-string-column-number-", (ids % 1000).astype("U12")))
        table.insert(pa.table({"id": ids, "c": -ids.astype(np.int64), "s": text}))
    report = merge_memory(tmp_path / "t")
    assert report["rows"] == rows
    grown_mb = (report["peak_kb"] - report["before_kb"]) / 1024
    # Measured ~235 MB at 2M, 4M and 8M rows alike (the window of three columns side by side and
    # the index granules' work); holding c and s whole for the two-column indexes grew it past 540 MB.
    assert grown_mb < 300, report

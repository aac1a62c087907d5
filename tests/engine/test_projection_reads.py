"""Reads through normal projections (engine/projection_reads.py): a filter on a projection's ORDER
BY reads the granules its projection parts' index leaves when that is fewer than the parts' own
index leaves, and returns the same rows as without it (`use_projections=False`, ClickHouse's
optimize_use_projections = 0) and as ClickHouse over the same directory. Parts without the
projection, parts with a lightweight DELETE's mask and reads needing a column the projection lacks
read the parts' own rows; patch parts of lightweight UPDATEs turn projections off, as in ClickHouse."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from spark_mergetree import MergeTreeTable
from tests.format.chdb_util import attach_and_check, close_session, make_chdb_table, open_session

COLUMNS = [("id", "UInt64"), ("k", "UInt32"), ("v", "Float64"), ("s", "String")]
PROJECTIONS = ["PROJECTION by_k (SELECT * ORDER BY k)", "PROJECTION by_s (SELECT s, id ORDER BY s)"]
KINDS = {"Wide": {"min_bytes_for_wide_part": 0}, "Compact": {"min_bytes_for_wide_part": 1 << 30}}


def _rows(n: int, start: int = 0, seed: int = 1) -> pa.Table:
    rng = np.random.default_rng(seed)
    ids = np.arange(start, start + n, dtype=np.uint64)
    return pa.table({"id": ids, "k": rng.integers(0, 500, n).astype(np.uint32), "v": rng.random(n),
                     "s": pa.array([str(i % 997) for i in range(start, start + n)])})


def _table(path: Path, kind: str = "Wide", projections: list[str] = PROJECTIONS) -> MergeTreeTable:
    return MergeTreeTable.create(path, COLUMNS, "id", settings={"index_granularity": 64, "auto_merge": False,
                                                                **KINDS[kind]}, projections=projections)


def _sorted(table: pa.Table) -> list[tuple]:
    return sorted(zip(*(c.to_pylist() for c in table.columns)), key=repr)


def _same_rows(table: MergeTreeTable, columns: list[str] | None, where: str) -> None:
    with_projection = table.to_arrow(columns, where=where)
    without = table.to_arrow(columns, where=where, use_projections=False)
    assert with_projection.schema == without.schema
    assert _sorted(with_projection) == _sorted(without), where
    batches = pa.Table.from_batches(list(table.to_batches(columns, where=where)), schema=without.schema)
    assert _sorted(batches) == _sorted(without), where


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_filter_on_a_projection_key_reads_fewer_granules_and_the_same_rows(tmp_path: Path, kind: str) -> None:
    table = _table(tmp_path / "t", kind)
    table.insert(_rows(20_000))
    table.insert(_rows(5_000, start=20_000, seed=2))
    for columns, where, projection in [(None, "k = 17", "by_k"), (["id", "v"], "k IN (3, 499) AND v > 0.5", "by_k"),
                                       (None, "k BETWEEN 100 AND 104", "by_k"), (["id"], "s = '123'", "by_s"),
                                       (["s", "id"], "s >= '990' AND id < 3000", "by_s")]:
        plan = table.explain(where, columns=columns)
        ordinary = table.explain(where, columns=columns, use_projections=False)
        assert plan.projection == projection, where
        assert ordinary.projection is None
        assert plan.granules_read < ordinary.granules_read, where
        assert plan.granules_total == ordinary.granules_total
        text = str(plan)
        assert f"projection {projection}: {plan.granules_read} of " in text
        assert all(p.projection == projection for p in plan.parts if p.pruned_by != "primary key")
        assert all(task.projection == projection for task in plan.tasks)
        _same_rows(table, columns, where)


def test_no_projection_when_it_reads_no_fewer_granules(tmp_path: Path) -> None:
    table = _table(tmp_path / "t")
    table.insert(_rows(10_000))
    for where in ("id BETWEEN 10 AND 20", "v > 0.5", "k >= 0"):  # the part's own key; no key; every granule
        assert table.explain(where).projection is None, where
        _same_rows(table, None, where)
    assert table.explain(None).projection is None
    assert table.to_arrow(where="id = 77").num_rows == 1


def test_a_projection_lacking_a_needed_column_is_not_used(tmp_path: Path) -> None:
    table = _table(tmp_path / "t", projections=["PROJECTION by_s (SELECT s, id ORDER BY s)"])
    table.insert(_rows(10_000))
    assert table.explain("s = '5'", columns=["id", "s"]).projection == "by_s"
    for columns, where in [(["id", "v"], "s = '5'"), (None, "s = '5'"), (["id"], "s = '5' AND k > 3")]:
        plan = table.explain(where, columns=columns)
        assert plan.projection is None and all(t.projection is None for t in plan.tasks), (columns, where)
        _same_rows(table, columns, where)


def test_parts_without_the_projection_read_their_own_rows(tmp_path: Path) -> None:
    table = _table(tmp_path / "t", projections=[])
    table.insert(_rows(10_000))
    table.insert(_rows(10_000, start=10_000, seed=3))
    table.add_projection("PROJECTION by_k (SELECT * ORDER BY k)")
    table.insert(_rows(10_000, start=20_000, seed=4))
    plan = table.explain("k = 42")
    assert plan.projection == "by_k"
    held = [p for p in plan.parts if p.projection == "by_k"]
    assert len(held) == 1 and len(plan.parts) == 3
    assert all(p.projection is None and p.granules_read == p.granules for p in plan.parts if p not in held)
    assert "2 parts read without it" in str(plan)
    _same_rows(table, None, "k = 42")
    _same_rows(table, ["id"], "k IN (1, 2, 3)")
    table.materialize_projection("by_k")
    plan = table.explain("k = 42")
    assert [p.projection for p in plan.parts] == ["by_k"] * 3
    _same_rows(table, None, "k = 42")


def test_a_part_without_rows_to_read_stays_skipped(tmp_path: Path) -> None:
    table = _table(tmp_path / "t")
    table.insert(_rows(10_000))
    table.insert(_rows(10_000, start=10_000, seed=5))
    plan = table.explain("k = 7 AND id < 5000")
    assert plan.projection == "by_k"
    assert [p.pruned_by for p in plan.parts][1] == "primary key"
    assert plan.parts[1].projection is None
    _same_rows(table, None, "k = 7 AND id < 5000")
    plan = table.explain("k = 100000")  # no granule of the projection can hold it: the part is skipped
    assert plan.projection == "by_k" and plan.granules_read == 0 and not plan.tasks
    assert all(p.pruned_by == "projection by_k" for p in plan.parts)
    assert table.to_arrow(where="k = 100000").num_rows == 0


def test_final_reads_no_projection(tmp_path: Path) -> None:
    table = _table(tmp_path / "t")
    table.insert(_rows(5_000))
    groups = table.final_tasks("k = 3")
    assert all(task.projection is None for group in groups for task in group)
    assert _sorted(table.to_arrow(where="k = 3", final=True)) == _sorted(table.to_arrow(where="k = 3"))


# --------------------------------------------------------------------------- ClickHouse's directories

CH_SETTINGS = ("SETTINGS index_granularity = 8, min_bytes_for_wide_part = 0, enable_block_number_column = 1, "
               "enable_block_offset_column = 1, lightweight_mutation_projection_mode = 'rebuild'")
CH_CREATE = ("CREATE TABLE u (id UInt64, k UInt32, s String, PROJECTION pk (SELECT * ORDER BY k), "
             f"PROJECTION ps (SELECT s, id ORDER BY s)) ENGINE = MergeTree ORDER BY id {CH_SETTINGS}")
CH_INSERTS = ["INSERT INTO u SELECT number, number % 50, toString(number % 333) FROM numbers(1000)",
              "INSERT INTO u SELECT number + 1000, number % 47, toString(number % 101) FROM numbers(1000)"]
CH_READS = [(["id", "k", "s"], "k = 3"), (["id"], "k IN (1, 46) AND id > 500"), (["id", "s"], "s = '42'")]


def _clickhouse(sess, columns: list[str], where: str, settings: str = "") -> list[tuple]:
    query = f"SELECT {', '.join(columns)} FROM u WHERE {where} {settings}"
    data = pa.ipc.open_file(pa.py_buffer(sess.query(query, "Arrow").bytes())).read_all()
    return sorted(zip(*([v.decode() if isinstance(v, bytes) else v for v in c.to_pylist()] for c in data.columns)),
                  key=repr)


def _clickhouse_granules(sess, columns: list[str], where: str) -> tuple[str, int]:
    """The table or projection ClickHouse's plan reads, and the granules it reads."""
    text = sess.query(f"EXPLAIN indexes = 1 SELECT {', '.join(columns)} FROM u WHERE {where}",
                      "TabSeparatedRaw").bytes().decode()
    source = re.search(r"ReadFromMergeTree \(([^)]*)\)", text)
    granules = re.findall(r"Granules: (\d+)/\d+", text)
    assert source is not None and granules, text
    return source.group(1), int(granules[-1])


def _open(sess, directory: Path) -> MergeTreeTable:
    statement = sess.query("SHOW CREATE TABLE u", "TabSeparatedRaw").bytes().decode()
    return MergeTreeTable.open(directory, create_statement=statement)


@pytest.mark.parametrize("layout", ["min_bytes_for_wide_part = 0", "min_bytes_for_wide_part = 1000000000"])
def test_clickhouse_parts_read_through_their_projections_as_clickhouse_reads_them(tmp_path: Path, layout: str) -> None:
    sess, directory = make_chdb_table(tmp_path, CH_CREATE.replace("min_bytes_for_wide_part = 0", layout), CH_INSERTS)
    try:
        table = _open(sess, directory)
        for columns, where in CH_READS:
            plan = table.explain(where, columns=columns)
            source, granules = _clickhouse_granules(sess, columns, where)
            assert plan.projection == source, (where, source)
            assert plan.granules_read == granules, where
            ours = table.to_arrow(columns, where=where)
            assert _sorted(ours) == _clickhouse(sess, columns, where, "SETTINGS force_optimize_projection = 1")
            assert _sorted(ours) == _clickhouse(sess, columns, where, "SETTINGS optimize_use_projections = 0")
    finally:
        close_session()


def test_parts_with_a_lightweight_delete_read_their_own_rows(tmp_path: Path) -> None:
    # ClickHouse's 'rebuild' mode leaves the deleted rows in the projection part (its count stays
    # 1000) and a read through it returns them; the part's own rows are the table's rows.
    sess, directory = make_chdb_table(tmp_path, CH_CREATE, [*CH_INSERTS, "DELETE FROM u WHERE id % 3 = 0 AND id < 1000"])
    try:
        table = _open(sess, directory)
        masked = [p.part for p in table.explain("k = 3").parts if table.reader(p.part).has_row_mask]
        assert len(masked) == 1 and table.reader(masked[0]).projection_reader("pk").rows == 1000
        for columns, where in CH_READS:
            plan = table.explain(where, columns=columns)
            assert plan.projection is not None, where
            by_part = {p.part: p for p in plan.parts}
            assert by_part[masked[0]].projection is None
            assert all(p.projection == plan.projection for name, p in by_part.items() if name != masked[0])
            assert _sorted(table.to_arrow(columns, where=where)) == \
                _clickhouse(sess, columns, where, "SETTINGS optimize_use_projections = 0")
            _same_rows(table, columns, where)
    finally:
        close_session()


def test_patch_parts_turn_projections_off(tmp_path: Path) -> None:
    # ClickHouse rejects every projection while the table has patch parts ("projection pk is rejected
    # because the table has unmaterialized mutations or patch parts"); so do we. (The UPDATE's WHERE
    # is on the table's key: chdb 26.9's UPDATE filtered through a projection records the rows' places
    # in the projection part as their block offsets.)
    sess, directory = make_chdb_table(tmp_path, CH_CREATE, CH_INSERTS)
    try:
        table = _open(sess, directory)
        before = table.plan_read(["id", "k", "s"], "k = 3")
        assert before.projection == "pk"
        sess.query("UPDATE u SET s = 'changed' WHERE id BETWEEN 1500 AND 1600")
        assert any(p.name.startswith("patch-") for p in directory.iterdir())
        with pytest.raises(Exception, match="PROJECTION_NOT_USED"):
            _clickhouse(sess, ["id"], "k = 3", "SETTINGS force_optimize_projection = 1")
        table = _open(sess, directory)
        for columns, where in [*CH_READS, (["id", "s"], "s = 'changed'")]:
            plan = table.explain(where, columns=columns)
            assert plan.projection is None and all(t.projection is None for t in plan.tasks), where
            _same_rows(table, columns, where)
            assert _sorted(table.to_arrow(columns, where=where)) == _clickhouse(sess, columns, where)
        changed = table.to_arrow(["id", "k", "s"], where="k = 3", use_projections=False)
        assert "changed" in changed.column("s").to_pylist()
        # Tasks planned through the projection before the UPDATE, read with its patch (a transaction's
        # view seeing an UPDATE its plan did not): they read the parts' own granules instead.
        patches = table.active_patches()
        tasks = [replace(task, patches=patches.for_part(task.part)) for task in before.tasks]
        assert all(task.projection == "pk" for task in tasks) and any(task.patches for task in tasks)
        rows = pa.Table.from_batches(list(table.iter_tasks(tasks, ["id", "k", "s"], "k = 3")), schema=changed.schema)
        assert _sorted(rows) == _sorted(changed)
    finally:
        close_session()


def test_our_parts_read_through_projections_as_clickhouse_reads_them(tmp_path: Path) -> None:
    ours = tmp_path / "ours"
    table = MergeTreeTable.create(ours, [("id", "UInt64"), ("k", "UInt32"), ("s", "String")], "id",
                                  settings={"index_granularity": 8, "min_bytes_for_wide_part": 0, "auto_merge": False},
                                  projections=["PROJECTION pk (SELECT * ORDER BY k)"])
    n = 2000
    table.insert(pa.table({"id": np.arange(n, dtype=np.uint64), "k": (np.arange(n) % 50).astype(np.uint32),
                           "s": pa.array([str(i % 333) for i in range(n)])}))
    sess = open_session(tmp_path)
    try:
        sess.query("CREATE TABLE u (id UInt64, k UInt32, s String, PROJECTION pk (SELECT * ORDER BY k)) "
                   "ENGINE = MergeTree ORDER BY id SETTINGS index_granularity = 8, min_bytes_for_wide_part = 0")
        attach_and_check(sess, "u", [ours / part.name for part in table.parts()])
        for columns, where in [(["id", "k", "s"], "k = 3"), (["id"], "k IN (1, 46) AND id > 500")]:
            plan = table.explain(where, columns=columns)
            assert (plan.projection, plan.granules_read) == _clickhouse_granules(sess, columns, where)
            assert _sorted(table.to_arrow(columns, where=where)) == \
                _clickhouse(sess, columns, where, "SETTINGS force_optimize_projection = 1")
    finally:
        close_session()

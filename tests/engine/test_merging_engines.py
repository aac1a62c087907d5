"""The MergeTree engine family against ClickHouse (chdb): the same rows, inserted in several parts
into a ClickHouse table and into ours, give the same `SELECT ... FINAL` rows (ours with
`final=True`), ClickHouse attaching our parts agrees, and our `optimize(final=True)` leaves the rows
ClickHouse leaves after `OPTIMIZE TABLE ... FINAL`. Every expected row set comes from ClickHouse."""

from __future__ import annotations

import itertools
import shutil
from datetime import date, datetime
from decimal import Decimal
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from spark_mergetree import MergeTreeTable
from spark_mergetree.engine import engines, merge_stream
from spark_mergetree.errors import InvalidOptionError, SchemaMismatchError, UnsupportedError
from spark_mergetree.expressions.sort_key import sort_indices
from tests.format.chdb_util import attach_and_check, close_session, make_chdb_table

COLUMNS = [("k", "UInt32"), ("p", "UInt8"), ("v", "UInt32"), ("d", "UInt8"), ("s", "Int8"), ("x", "Int64"),
           ("y", "Float64"), ("name", "String")]
AGGREGATES = [("mx", "SimpleAggregateFunction(max, UInt32)"), ("total", "SimpleAggregateFunction(sum, Int64)"),
              ("latest", "SimpleAggregateFunction(anyLast, String)")]
ENGINES = ["ReplacingMergeTree", "ReplacingMergeTree(v)", "ReplacingMergeTree(v, d)", "SummingMergeTree",
           "SummingMergeTree((x, y))", "AggregatingMergeTree", "SummingMergeTree(total)",
           "CollapsingMergeTree(s)", "VersionedCollapsingMergeTree(s, v)"]
NO_MERGES = "index_granularity = 64, min_parts_to_merge_at_once = 1000"


def _columns(engine: str) -> list[tuple[str, str]]:
    return COLUMNS + (AGGREGATES if engine.startswith(("Aggregating", "SummingMergeTree(total")) else [])


def _batches(engine: str, seed: int) -> list[pa.Table]:
    rng = np.random.default_rng(seed)
    out = []
    for size in (300, 200, 250, 150):
        k = rng.integers(0, 120, size).astype(np.uint32)
        batch = {
            "k": k, "p": (k % 3).astype(np.uint8), "v": rng.integers(0, 4, size).astype(np.uint32),
            "d": (rng.random(size) < 0.2).astype(np.uint8),
            "s": np.where(rng.random(size) < 0.6, 1, -1).astype(np.int8),
            "x": rng.integers(-3, 4, size).astype(np.int64), "y": rng.integers(-2, 3, size).astype(np.float64),
            "name": pa.array([f"n{i}" for i in rng.integers(0, 10_000, size)]),
        }
        if len(_columns(engine)) > len(COLUMNS):
            batch |= {"mx": rng.integers(0, 1000, size).astype(np.uint32),
                      "total": rng.integers(-5, 6, size).astype(np.int64),
                      "latest": pa.array([f"l{i}" for i in rng.integers(0, 10_000, size)])}
        out.append(pa.table(batch))
    return out


def _create(name: str, engine: str) -> str:
    columns = ", ".join(f"{n} {t}" for n, t in _columns(engine))
    # ClickHouse asks AggregatingMergeTree tables with plain columns outside the key to say so
    dimensions = ", allow_dimensions_outside_sorting_key = 1" if engine.startswith("Aggregating") else ""
    return (f"CREATE TABLE {name} ({columns}) ENGINE = {engine} PARTITION BY p ORDER BY (k, p) "
            f"SETTINGS {NO_MERGES}{dimensions}")


def _rows(table: pa.Table) -> list[tuple]:
    values = [[v.decode() if isinstance(v, bytes) else int(v.timestamp()) if isinstance(v, datetime) else v
               for v in c.to_pylist()] for c in table.columns]
    return sorted(zip(*values))


def _select(sess, sql: str) -> list[tuple]:
    return _rows(pa.ipc.open_file(pa.py_buffer(sess.query(sql, "Arrow").bytes())).read_all())


@pytest.mark.parametrize("engine", ENGINES)
def test_final_and_optimize_match_clickhouse(tmp_path: Path, engine: str) -> None:
    batches = _batches(engine, seed=len(engine))
    files = []
    for number, batch in enumerate(batches):
        files.append(tmp_path / f"b{number}.parquet")
        pq.write_table(batch, files[-1])
    names = ", ".join(n for n, _ in _columns(engine))
    sess, _ = make_chdb_table(tmp_path, _create("t", engine),
                              [f"INSERT INTO t SELECT {names} FROM file('{f}', Parquet)" for f in files])
    expected_final = _select(sess, f"SELECT {names} FROM t FINAL")
    sess.query("OPTIMIZE TABLE t FINAL")
    expected_optimized = _select(sess, f"SELECT {names} FROM t")
    expected_filtered = _select(sess, f"SELECT {names} FROM t FINAL WHERE x > 0")
    expected_keys = _select(sess, f"SELECT {names} FROM t FINAL WHERE k BETWEEN 30 AND 50 AND x > 0 AND p = 1")

    ours = MergeTreeTable.create(tmp_path / "ours", _columns(engine), order_by="(k, p)", partition_by="p", engine=engine,
                                 settings={"auto_merge": False, "index_granularity": 64})
    for batch in batches:
        ours.insert(batch)
    assert len(ours.parts()) > 3  # several parts per partition: FINAL works across them
    assert _rows(ours.to_arrow(final=True)) == expected_final
    assert _rows(pa.Table.from_batches(list(ours.to_batches(final=True)), ours.schema)) == expected_final
    # conditions on the key prune granules and partitions, and still give ClickHouse's rows
    key_where = "k BETWEEN 30 AND 50 AND x > 0 AND p = 1"
    assert _rows(ours.to_arrow(where=key_where, final=True)) == expected_keys
    pruned = [task for tasks in ours.final_tasks(key_where) for task in tasks]
    assert 0 < sum(t.rows for t in pruned) < sum(t.rows for tasks in ours.final_tasks() for t in tasks)

    # ClickHouse attaching our parts (in block order) reads the same FINAL rows.
    sess, data_dir = make_chdb_table(tmp_path, _create("back", engine))
    for part in sorted(ours.visible_parts()[1], key=lambda n: int(n.split("_")[1])):
        shutil.copytree(ours.path / part, data_dir / "detached" / part)
        sess.query(f"ALTER TABLE back ATTACH PART '{part}'")
    assert _select(sess, f"SELECT {names} FROM back FINAL") == expected_final
    close_session()

    ours.optimize(final=True)
    assert all(p.level > 0 for p in ours.parts())
    assert _rows(ours.to_arrow()) == expected_optimized
    # a filter on a non-key column applies after FINAL, as in ClickHouse
    assert _rows(ours.to_arrow(where="x > 0", final=True)) == expected_filtered


def test_engine_statement_round_trip_and_clickhouse_made_table(tmp_path: Path) -> None:
    """A ClickHouse-made ReplacingMergeTree table opens from its statement and reads FINAL as ClickHouse."""
    create = ("CREATE TABLE r (k UInt32, ver DateTime, del UInt8, x String) ENGINE = ReplacingMergeTree(ver, del) "
              f"ORDER BY k SETTINGS {NO_MERGES}")
    sess, data_dir = make_chdb_table(tmp_path, create, [
        "INSERT INTO r SELECT number % 50, toDateTime('2024-01-01') + number, number % 7 = 0, toString(number) "
        f"FROM numbers({start}, 100)" for start in (0, 100, 200)])
    expected = _select(sess, "SELECT * FROM r FINAL")
    statement = sess.query("SHOW CREATE TABLE r", "TabSeparatedRaw").bytes().decode()
    close_session()
    table = MergeTreeTable.open(data_dir, create_statement=statement)
    assert table.definition.engine == "ReplacingMergeTree" and table.definition.engine_args == ("ver", "del")
    assert _rows(table.to_arrow(final=True)) == expected


def test_bad_engines_are_refused_before_anything_is_written(tmp_path: Path) -> None:
    cases = [("ReplacingMergeTree(nope)", SchemaMismatchError), ("ReplacingMergeTree(name)", SchemaMismatchError),
             ("SummingMergeTree(k)", SchemaMismatchError), ("Log", InvalidOptionError),
             ("ReplacingMergeTree(v) SETTINGS index_granularity = 1", InvalidOptionError),
             ("CollapsingMergeTree(x)", SchemaMismatchError), ("CollapsingMergeTree", SchemaMismatchError),
             ("VersionedCollapsingMergeTree(s, name)", SchemaMismatchError)]
    cases.append(("ReplacingMergeTree(nv)", SchemaMismatchError))  # a Nullable version
    for number, (engine, error) in enumerate(cases):
        with pytest.raises(error):
            MergeTreeTable.create(tmp_path / str(number), [*COLUMNS, ("nv", "Nullable(UInt32)")], order_by="k",
                                  engine=engine)
        assert not (tmp_path / str(number)).exists()
    with pytest.raises(UnsupportedError, match="AggregateFunction states"):
        MergeTreeTable.create(tmp_path / "agg", [("k", "UInt32"), ("u", "AggregateFunction(sum, UInt64)")],
                              order_by="k", engine="AggregatingMergeTree")


@pytest.mark.parametrize("engine", ["CollapsingMergeTree(s)", "VersionedCollapsingMergeTree(s, v)"])
def test_collapsing_algorithms_match_clickhouse_over_one_sequence(tmp_path: Path, engine: str) -> None:
    """engines.py's Collapsing and VersionedCollapsing rules against ClickHouse merging parts of level 0
    (inserts not collapsed): every sign sequence of up to 5 rows per key, and random keys."""
    rng = np.random.default_rng(3)
    signs = [s for n in range(1, 6) for s in itertools.product((1, -1), repeat=n)]
    k = np.concatenate([np.full(len(s), number) for number, s in enumerate(signs)] + [rng.integers(0, 40, 400) + 1000])
    table = pa.table({"k": k.astype(np.uint32), "v": rng.integers(0, 2, len(k)).astype(np.uint32),
                      "s": np.concatenate([np.array([x for s in signs for x in s]),
                                           np.where(rng.random(400) < 0.5, 1, -1)]).astype(np.int8),
                      "x": np.arange(len(k), dtype=np.uint32)})
    types = {"k": "UInt32", "v": "UInt32", "s": "Int8", "x": "UInt32"}
    pq.write_table(table, tmp_path / "rows.parquet")
    sess, _ = make_chdb_table(tmp_path, f"CREATE TABLE c (k UInt32, v UInt32, s Int8, x UInt32) ENGINE = {engine} "
                              f"ORDER BY k SETTINGS {NO_MERGES}",
                              [f"INSERT INTO c SELECT * FROM file('{tmp_path}/rows.parquet', Parquet) "
                               "SETTINGS optimize_on_insert = 0"])
    expected_final = _select(sess, "SELECT k, v, s, x FROM c FINAL")
    sess.query("OPTIMIZE TABLE c FINAL")
    expected_merged = _select(sess, "SELECT k, v, s, x FROM c")
    close_session()
    versioned = engine.startswith("Versioned")
    spec = engines.MergingEngine(engine.split("(")[0], sign="s", version="v" if versioned else None)
    key = ["k", "v"] if versioned else ["k"]
    rows = table.take(sort_indices(key, table, types))
    assert _rows(engines.collapse(spec, rows, key, types, final=True)) == expected_final
    assert _rows(engines.collapse(spec, rows, key, types, final=False)) == expected_merged


def test_versioned_collapsing_writes_out_rows_beyond_clickhouses_queue(tmp_path: Path) -> None:
    """Long runs of one sign for one (key, version): ClickHouse keeps at most 8191 unmatched rows
    waiting and writes out the oldest when more come, so those can no longer be cancelled. Inserts,
    FINAL reads and OPTIMIZE FINAL keep exactly ClickHouse's rows."""
    runs = [(1, 10_000), (-1, 10_000), (1, 3), (-1, 9_000)]  # key 7: long runs; key 8: a short mix
    signs = np.concatenate([np.full(n, sign) for sign, n in runs]).astype(np.int8)
    parts = [pa.table({"k": np.full(n, 7, np.uint32), "v": np.ones(n, np.uint32), "s": np.full(n, sign, np.int8),
                       "x": np.arange(n, dtype=np.uint32) + 100_000 * i})
             for i, (sign, n) in enumerate(runs)]
    parts.append(pa.table({"k": np.full(4, 8, np.uint32), "v": np.ones(4, np.uint32),
                           "s": np.array([1, -1, 1, 1], np.int8), "x": np.arange(4, dtype=np.uint32)}))
    create = ("CREATE TABLE c (k UInt32, v UInt32, s Int8, x UInt32) ENGINE = VersionedCollapsingMergeTree(s, v) "
              f"ORDER BY k SETTINGS {NO_MERGES}")
    inserts = []
    for i, part in enumerate(parts):
        pq.write_table(part, tmp_path / f"rows{i}.parquet")
        inserts.append(f"INSERT INTO c SELECT * FROM file('{tmp_path}/rows{i}.parquet', Parquet)")
    sess, _ = make_chdb_table(tmp_path, create, inserts)
    expected_final = _select(sess, "SELECT k, v, s, x FROM c FINAL")
    sess.query("OPTIMIZE TABLE c FINAL")
    expected_merged = _select(sess, "SELECT k, v, s, x FROM c")
    close_session()
    assert len(expected_merged) > 4, "ClickHouse cancelled every long run: the queue bound did not show"
    assert len(signs) > 2 * 8191

    table = MergeTreeTable.create(tmp_path / "ours", [("k", "UInt32"), ("v", "UInt32"), ("s", "Int8"), ("x", "UInt32")],
                                  order_by="k", engine="VersionedCollapsingMergeTree(s, v)",
                                  settings={"auto_merge": False})
    for part in parts:
        table.insert(part)
    assert _rows(table.to_arrow(final=True)) == expected_final
    table.optimize(final=True)
    assert _rows(table.to_arrow()) == expected_merged


def test_replacing_without_sorting_key_keeps_the_last_row_when_merged(tmp_path: Path) -> None:
    """ORDER BY tuple(): every row has the same key; a merge keeps ClickHouse's one row (it wrote none)."""
    create = f"CREATE TABLE r (a UInt32, b String) ENGINE = ReplacingMergeTree ORDER BY tuple() SETTINGS {NO_MERGES}"
    sess, _ = make_chdb_table(tmp_path, create, ["INSERT INTO r VALUES (1, 'x'), (2, 'y')", "INSERT INTO r VALUES (3, 'z')"])
    expected_final = _select(sess, "SELECT * FROM r FINAL")
    sess.query("OPTIMIZE TABLE r FINAL")
    expected = _select(sess, "SELECT * FROM r")
    close_session()
    table = MergeTreeTable.create(tmp_path / "ours", [("a", "UInt32"), ("b", "String")], order_by="tuple()",
                                  engine="ReplacingMergeTree", settings={"auto_merge": False})
    table.insert(pa.table({"a": pa.array([1, 2], pa.uint32()), "b": ["x", "y"]}))
    table.insert(pa.table({"a": pa.array([3], pa.uint32()), "b": ["z"]}))
    assert _rows(table.to_arrow(final=True)) == expected_final
    table.optimize(final=True)
    assert _rows(table.to_arrow()) == expected


@pytest.mark.parametrize("level", [1, 0])
@pytest.mark.parametrize("engine", ENGINES)
def test_engines_without_sorting_key_match_clickhouse(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, engine: str,
                                                      level: int) -> None:
    """ORDER BY tuple(): ClickHouse's Replacing and Collapsing take all rows for one key, its Summing and
    Aggregating every row for a key of its own (Summing dropping rows summed to zero). Inserts, FINAL and
    OPTIMIZE FINAL keep ClickHouse's rows; the merge of Wide parts streams, in blocks of a few granules.
    level 1: our inserts (merged as ClickHouse's optimize_on_insert merges them); level 0: ClickHouse's
    parts inserted without that, adopted (each row of a first part of level > 0 is compared with none)."""
    monkeypatch.setattr(merge_stream, "READ_BLOCK_ROWS", 40)
    streamed = []

    def spied(merge):
        def spy(*args, **kwargs):
            files = merge(*args, **kwargs)
            streamed.append(files is not None)
            return files
        return spy

    # (VersionedCollapsing's sorting key is its version: the keyed streaming merge)
    for name in ("merge_engine_unkeyed", "merge_engine_streaming"):
        monkeypatch.setattr(merge_stream, name, spied(getattr(merge_stream, name)))
    batches = _batches(engine, seed=len(engine) + 7)
    files = []
    for number, batch in enumerate(batches):
        files.append(tmp_path / f"b{number}.parquet")
        pq.write_table(batch, files[-1])
    names = ", ".join(n for n, _ in _columns(engine))
    on_insert = "" if level else " SETTINGS optimize_on_insert = 0"
    create = (_create("t", engine).replace("ORDER BY (k, p)", "ORDER BY tuple()")
              .replace("min_parts_to_merge_at_once", "min_bytes_for_wide_part = 0, min_parts_to_merge_at_once"))
    sess, data_dir = make_chdb_table(tmp_path, create, [f"INSERT INTO t SELECT {names} FROM file('{f}', Parquet)"
                                                        f"{on_insert}" for f in files])
    inserted = _select(sess, f"SELECT {names} FROM t")
    expected_final = _select(sess, f"SELECT {names} FROM t FINAL")
    statement = sess.query("SHOW CREATE TABLE t", "TabSeparatedRaw").bytes().decode()
    if not level:
        shutil.copytree(data_dir, tmp_path / "adopted")
    sess.query("OPTIMIZE TABLE t FINAL")
    expected_merged = _select(sess, f"SELECT {names} FROM t")
    close_session()
    if level:
        ours = MergeTreeTable.create(tmp_path / "ours", _columns(engine), order_by="tuple()", partition_by="p",
                                     engine=engine, settings={"auto_merge": False, "index_granularity": 16,
                                                              "min_bytes_for_wide_part": 0})
        for batch in batches:
            ours.insert(batch)
    else:
        ours = MergeTreeTable.open(tmp_path / "adopted", create_statement=statement)
    assert {p.level for p in ours.parts()} == {level}
    assert _rows(ours.to_arrow()) == inserted
    assert _rows(ours.to_arrow(final=True)) == expected_final
    ours.optimize(final=True)
    assert _rows(ours.to_arrow()) == expected_merged
    assert streamed and all(streamed[:3])  # every partition's merge streamed (kept rows)


@pytest.mark.parametrize("wide", [True, False])
def test_collapsing_without_sorting_key_compares_no_two_rows_of_a_merged_first_part(tmp_path: Path,
                                                                                    wide: bool) -> None:
    """ORDER BY tuple(), a first part of level 1 holding (-1, +1), then (+1): ClickHouse takes the first
    part's rows for keys of their own (not compared), so its merge keeps the -1 and the last +1, where
    one run of all three rows would keep only the +1. The streaming merge (Wide) and the in-memory one agree."""
    settings = "min_bytes_for_wide_part = 0" if wide else "min_bytes_for_wide_part = 10485760"
    sess, _ = make_chdb_table(tmp_path, "CREATE TABLE c (x UInt32, s Int8) ENGINE = CollapsingMergeTree(s) "
                              f"ORDER BY tuple() SETTINGS {NO_MERGES}, {settings}",
                              ["INSERT INTO c VALUES (1, -1), (2, 1)", "INSERT INTO c VALUES (3, 1)"])
    expected_final = _select(sess, "SELECT * FROM c FINAL")
    sess.query("OPTIMIZE TABLE c FINAL")
    expected = _select(sess, "SELECT * FROM c")
    close_session()
    assert expected == [(1, -1), (3, 1)]
    table = MergeTreeTable.create(tmp_path / "ours", [("x", "UInt32"), ("s", "Int8")], order_by="tuple()",
                                  engine="CollapsingMergeTree(s)",
                                  settings={"auto_merge": False, "min_bytes_for_wide_part": 0 if wide else 10 << 20})
    table.insert(pa.table({"x": pa.array([1, 2], pa.uint32()), "s": pa.array([-1, 1], pa.int8())}))
    table.insert(pa.table({"x": pa.array([3], pa.uint32()), "s": pa.array([1], pa.int8())}))
    assert _rows(table.to_arrow(final=True)) == expected_final
    table.optimize(final=True)
    assert _rows(table.to_arrow()) == expected


@pytest.mark.parametrize("wide", [True, False])
def test_a_merge_that_keeps_no_row_writes_clickhouses_empty_part(tmp_path: Path, wide: bool) -> None:
    """A Collapsing merge whose rows all cancel leaves an empty part, as ClickHouse's does: Compact,
    its marks file empty and every column's substreams listed (as ClickHouse's); we read on (the next
    merge, the rows) and ClickHouse attaches it with CHECK TABLE = 1."""
    settings = f"min_bytes_for_wide_part = {0 if wide else 10 << 20}"
    columns = [("x", "UInt32"), ("s", "Int8"), ("n", "Nullable(String)"), ("a", "Array(String)"),
               ("l", "LowCardinality(String)"), ("m", "Map(String, UInt8)")]
    create = f"CREATE TABLE c ({', '.join(f'{n} {t}' for n, t in columns)}) ENGINE = CollapsingMergeTree(s) " \
             f"ORDER BY x SETTINGS {NO_MERGES}, {settings}"
    sess, data_dir = make_chdb_table(tmp_path, create, ["INSERT INTO c VALUES (1, 1, 'a', ['b'], 'c', {'d': 1})",
                                                        "INSERT INTO c VALUES (1, -1, NULL, [], 'e', {})"])
    sess.query("OPTIMIZE TABLE c FINAL")
    (theirs,) = [d for d in data_dir.iterdir() if d.name == "all_1_2_2"]
    table = MergeTreeTable.create(tmp_path / "ours", columns, order_by="x", engine="CollapsingMergeTree(s)",
                                  settings={"auto_merge": False, "index_granularity": 64,
                                            "min_bytes_for_wide_part": 0 if wide else 10 << 20})
    for sign, n, a, low, m in ((1, "a", ["b"], "c", [("d", 1)]), (-1, None, [], "e", [])):
        table.insert(pa.table({"x": pa.array([1], pa.uint32()), "s": pa.array([sign], pa.int8()),
                               "n": pa.array([n], pa.string()), "a": [a], "l": [low],
                               "m": pa.array([m], pa.map_(pa.string(), pa.uint8()))}))
    (merged,) = table.optimize(final=True)
    assert merged == "all_1_2_2" and table.reader(merged).rows == 0 and table.to_arrow().num_rows == 0
    mine = table.path / merged
    assert (mine / "data.bin").exists() == (not wide)
    if not wide:
        for name in ("data.bin", "data.cmrk4", "columns_substreams.txt", "count.txt"):
            assert (mine / name).read_bytes() == (theirs / name).read_bytes(), name
    sess.query(create.replace("TABLE c", "TABLE back"))
    attach_and_check(sess, "back", [mine])
    assert _select(sess, "SELECT count() FROM back") == [(0,)]
    close_session()
    table.insert(pa.table({"x": pa.array([2], pa.uint32()), "s": pa.array([1], pa.int8()), "n": ["b"], "a": [["c"]],
                           "l": ["d"], "m": pa.array([[("e", 2)]], pa.map_(pa.string(), pa.uint8()))}))
    table.optimize(final=True)
    assert table.to_arrow(["x", "s", "n", "l"]).to_pylist() == [{"x": 2, "s": 1, "n": "b", "l": "d"}]


@pytest.mark.parametrize("engine", ["ReplacingMergeTree", "SummingMergeTree"])
def test_final_merges_a_key_across_partitions_when_the_partition_is_not_in_the_key(tmp_path: Path,
                                                                                   engine: str) -> None:
    """PARTITION BY a column outside ORDER BY: ClickHouse's FINAL merges a key's rows of every partition
    (parts in partition-id, then block order), while merges keep partitions apart."""
    inserts = ["INSERT INTO r VALUES (1, 2, 5), (2, 1, 1)", "INSERT INTO r VALUES (1, 1, 7), (3, 3, 0)",
               "INSERT INTO r VALUES (2, 3, 4)"]
    sess, _ = make_chdb_table(tmp_path, f"CREATE TABLE r (k UInt32, p UInt8, x Int32) ENGINE = {engine} "
                              f"PARTITION BY p ORDER BY k SETTINGS {NO_MERGES}", inserts)
    expected_final = _select(sess, "SELECT * FROM r FINAL")
    sess.query("OPTIMIZE TABLE r FINAL")
    expected_merged = _select(sess, "SELECT * FROM r")
    close_session()
    table = MergeTreeTable.create(tmp_path / "ours", [("k", "UInt32"), ("p", "UInt8"), ("x", "Int32")],
                                  order_by="k", partition_by="p", engine=engine, settings={"auto_merge": False})
    for rows in ([(1, 2, 5), (2, 1, 1)], [(1, 1, 7), (3, 3, 0)], [(2, 3, 4)]):
        table.insert(pa.table({"k": pa.array([r[0] for r in rows], pa.uint32()),
                               "p": pa.array([r[1] for r in rows], pa.uint8()),
                               "x": pa.array([r[2] for r in rows], pa.int32())}))
    assert _rows(table.to_arrow(final=True)) == expected_final
    # a condition on the partition column cannot prune partitions here: a key's row elsewhere may win
    assert _rows(table.to_arrow(where="p = 1", final=True)) == [r for r in expected_final if r[1] == 1]
    table.optimize(final=True)
    assert _rows(table.to_arrow()) == expected_merged
    assert _rows(table.to_arrow(final=True)) == expected_final


def test_summing_types_nullable_decimal_bool_date_and_wrapping(tmp_path: Path) -> None:
    """Nullable sums skip NULLs and only an all-NULL sum counts as zero; Decimal and Bool are summed,
    Int8 wraps, Date and LowCardinality(String) keep the key's first row — as ClickHouse does."""
    columns = [("k", "UInt32"), ("n", "Nullable(Int32)"), ("dec", "Decimal(10, 2)"), ("b", "Bool"), ("d", "Date"),
               ("lc", "LowCardinality(String)"), ("i8", "Int8")]
    data = pa.table({"k": pa.array([1, 1, 2, 2, 3, 4], pa.uint32()), "n": pa.array([None, None, 3, -3, None, None],
                                                                                      pa.int32()),
                     "dec": pa.array([Decimal("1.5"), Decimal("2.5"), 0, 0, 0, 0], pa.decimal128(10, 2)),
                     "b": [True, False, False, False, False, True],
                     "d": [date(2020, 1, 1), date(2020, 1, 2), *[date(2020, 1, 1)] * 4],
                     "lc": ["a", "b", "c", "c", "c", "c"], "i8": pa.array([100, 100, 0, 0, 0, 0], pa.int8())})
    pq.write_table(data, tmp_path / "rows.parquet")
    ddl = ", ".join(f"{n} {t}" for n, t in columns)
    sess, _ = make_chdb_table(tmp_path, f"CREATE TABLE s ({ddl}) ENGINE = SummingMergeTree ORDER BY k "
                              f"SETTINGS {NO_MERGES}",
                              [f"INSERT INTO s SELECT * FROM file('{tmp_path}/rows.parquet', Parquet) "
                               "SETTINGS optimize_on_insert = 0"])
    expected = _select(sess, "SELECT * FROM s FINAL")
    close_session()
    table = MergeTreeTable.create(tmp_path / "ours", columns, order_by="k", engine="SummingMergeTree",
                                  settings={"auto_merge": False})
    table.insert(data)
    assert _rows(table.to_arrow(final=True)) == expected
    assert _rows(table.to_arrow()) == expected  # the insert itself was summed (optimize_on_insert)

"""Projections of tables whose engine combines rows in merges (Replacing, Summing, Aggregating,
Collapsing, VersionedCollapsing), as ClickHouse 26.9 (chdb) has them: CREATE refuses them unless the
table setting deduplicate_merge_projection_mode is 'drop', 'rebuild' or 'ignore'; an insert builds
them from the block it merged (optimize_on_insert), in the part's order; a merge then drops them
('drop'), builds them again from the merged rows ('rebuild'), or merges the sources' projection parts
as a plain MergeTree does, a projection of offsets built again ('ignore').

For every engine and mode, chdb's table and ours (made from its statement) get the same inserts: the
inserted parts hold ClickHouse's projection bytes; after OPTIMIZE FINAL on both, the merged parts
hold the same projections (the same bytes), ClickHouse attaches ours, CHECK TABLE passes, and queries
that must use each projection answer as over ClickHouse's own table."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from spark_mergetree import MergeTreeTable
from spark_mergetree.engine import merge_stream, projection_merge
from spark_mergetree.errors import InvalidOptionError, UnsupportedError
from spark_mergetree.expressions.ddl import format_attach, parse_create
from spark_mergetree.format.part_reader import PartReader
from spark_mergetree.storage.policy import StoragePolicy
from spark_mergetree.storage.table_parts import TableParts
from tests.format.chdb_util import (
    active_part_dirs,
    attach_and_check,
    close_session,
    make_chdb_table,
    open_session,
    paired_part_dirs,
)

ENGINES = {
    "ReplacingMergeTree": "ReplacingMergeTree(ver)",
    "SummingMergeTree": "SummingMergeTree",
    "AggregatingMergeTree": "AggregatingMergeTree",
    "CollapsingMergeTree": "CollapsingMergeTree(sign)",
    "VersionedCollapsingMergeTree": "VersionedCollapsingMergeTree(sign, ver)",
}
MODES = ("drop", "rebuild", "ignore")
# A normal projection, two of offsets (ties of their keys: their order is the merged rows'), an
# aggregate one.
PROJECTIONS = {
    "by_v": "PROJECTION by_v (SELECT k, v, s ORDER BY v)",
    "by_s": "PROJECTION by_s (SELECT _part_offset ORDER BY s)",
    "by_sk": "PROJECTION by_sk INDEX (s, k) TYPE basic",
    "per_group": "PROJECTION per_group (SELECT k % 4, sum(v), count(), max(s) GROUP BY k % 4)",
}
CREATE = """CREATE TABLE t (k UInt32, v Int64, s String, ver UInt32, sign Int8, {projections})
    ENGINE = {engine} ORDER BY k
    SETTINGS index_granularity = 16, compress_primary_key = 0, deduplicate_merge_projection_mode = '{mode}', {kind}"""
KINDS = {"Wide": "min_bytes_for_wide_part = 0, compress_marks = 0", "Compact": "min_bytes_for_wide_part = 1000000000"}
# Keys repeated within an insert and across both (each engine combines them on insert and in the
# merge); signs chosen so Collapsing and VersionedCollapsing cancel some rows and keep others.
ROWS = ("SELECT toUInt32((number * 7) % 40) AS k, toInt64((number * 13 + {offset}) % 97) AS v, "
        "toString((number * 31) % 5) AS s, toUInt32((number + {offset}) % 3) AS ver, "
        "toInt8(if((number + {offset}) % 5 = 0, -1, 1)) AS sign FROM numbers({rows})")
INSERTS = ((0, 150), (150, 100))
# What ClickHouse must answer from each projection (force_optimize_projection: it refuses the query
# otherwise); a projection of offsets filters the parent's rows, which EXPLAIN names.
USE_OFFSETS = "min_table_rows_to_use_projection_index = 0"
QUERIES = {
    "by_v": ("SELECT k, v, s FROM {} WHERE v = (SELECT min(v) FROM t)", "force_optimize_projection = 1"),
    "by_s": ("SELECT k, v, s FROM {} WHERE s = '3'", USE_OFFSETS),
    "by_sk": ("SELECT k, v, s FROM {} WHERE s = '2' AND k < 20", USE_OFFSETS),
    "per_group": ("SELECT k % 4, sum(v), count(), max(s) FROM {} GROUP BY k % 4", "force_optimize_projection = 1"),
}
# Files our writer writes differently from ClickHouse 26 in every part (no per-column default counts,
# no substreams listing); the rest must be ClickHouse's bytes.
NOT_COMPARED = ("serialization.json", "columns_substreams.txt", "checksums.txt")


def _statement(engine: str, mode: str, kind: str = "Wide") -> str:
    return CREATE.format(projections=", ".join(PROJECTIONS.values()), engine=ENGINES[engine], mode=mode,
                         kind=KINDS[kind])


def _arrow(sess, query: str) -> pa.Table:
    return pa.ipc.open_file(pa.py_buffer(sess.query(query, "Arrow").bytes())).read_all()


def _rows(data: pa.Table) -> list[tuple]:
    columns = [[v.decode() if isinstance(v, bytes) else v for v in c.to_pylist()] for c in data.columns]
    return sorted(zip(*columns))


def _projection_files(part: Path) -> dict[str, bytes]:
    return {f"{d.name}/{f.name}": f.read_bytes() for d in sorted(part.glob("*.proj")) for f in sorted(d.iterdir())
            if f.name not in NOT_COMPARED}


def _projection_rows(part: Path, name: str) -> list[dict]:
    store = TableParts(StoragePolicy.single(str(part.parent)))
    return PartReader(store, part.name, str(part)).projection_reader(name).read().to_pylist()


def _uses_projections(sess, table: str, stale: bool = False) -> None:
    """Each projection answers its query over `table` as ClickHouse's `t` answers it from its own
    projections, and (unless `stale`: 'ignore' merges keep rows the engine combined away) as `t`
    answers it without any."""
    for name, (query, use) in QUERIES.items():
        settings = f" SETTINGS {use}, preferred_optimize_projection_name = '{name}'"
        explain = sess.query(f"EXPLAIN projections = 1 {query.format(table)}{settings}", "TabSeparatedRaw")
        plan = explain.bytes().decode()  # (a projection read: "ReadFromMergeTree (name)"; one of offsets: "Name: name")
        assert f"({name})" in plan or f"Name: {name}\n" in plan, (table, name, plan)
        answer = _rows(_arrow(sess, query.format(table) + settings))
        assert answer == _rows(_arrow(sess, query.format("t") + settings)), (table, name)
        if not stale:
            assert answer and answer == _rows(_arrow(sess, query.format("t") + " SETTINGS optimize_use_projections = 0"))


def _tables(tmp: Path, engine: str, mode: str, kind: str):
    """chdb's table `t` (merges stopped) and ours from its statement, with the same inserts."""
    sess, data_dir = make_chdb_table(tmp, _statement(engine, mode, kind))
    sess.query("SYSTEM STOP MERGES t")
    statement = sess.query("SHOW CREATE TABLE t", "TabSeparatedRaw").bytes().decode()
    ours = MergeTreeTable.new(tmp / "ours", parse_create(statement), {"auto_merge": False})
    ours.write_directory()
    for offset, rows in INSERTS:
        sess.query("INSERT INTO t " + ROWS.format(offset=offset, rows=rows))
        ours.insert(_arrow(sess, ROWS.format(offset=offset, rows=rows)))
    return sess, data_dir, ours


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("engine", list(ENGINES))
def test_inserted_and_merged_projections_are_clickhouses(tmp_path, engine, mode, kind) -> None:
    sess, data_dir, ours = _tables(tmp_path, engine, mode, kind)
    # Inserts: the projections built from the block the engine merged, ClickHouse's bytes.
    for theirs, mine in paired_part_dirs(data_dir, ours):
        expected = _projection_files(theirs)
        assert {name.split("/")[0] for name in expected} == {f"{p}.proj" for p in PROJECTIONS}
        assert _projection_files(mine) == expected, mine.name
    assert ours.check().ok
    sess.query("CREATE TABLE inserted AS t")
    attach_and_check(sess, "inserted", [ours.path / part.name for part in ours.parts()])
    _uses_projections(sess, "inserted")

    sess.query("SYSTEM START MERGES t")
    sess.query("OPTIMIZE TABLE t FINAL")
    (merged,) = ours.optimize(final=True)
    (theirs,) = active_part_dirs(sess, "t")
    assert merged == theirs.name and ours.check().ok
    mine = ours.path / merged
    assert (mine / "count.txt").read_text() == (theirs / "count.txt").read_text()
    expected = _projection_files(theirs)
    assert {name.split("/")[0] for name in expected} == (set() if mode == "drop" else {f"{p}.proj" for p in PROJECTIONS})
    # (ClickHouse's merge of Compact projection parts ends a granule where one source runs out, as
    # tests/engine/test_projection_writing.py notes: the same rows, other granules; ClickHouse
    # answers from ours below)
    cut = ("by_v.proj/",) if kind == "Compact" and mode == "ignore" else ()
    assert {n: b for n, b in _projection_files(mine).items() if not n.startswith(cut or "/")} == \
        {n: b for n, b in expected.items() if not n.startswith(cut or "/")}
    if cut:
        assert _projection_rows(mine, "by_v") == _projection_rows(theirs, "by_v")
    sess.query("CREATE TABLE merged AS t")
    attach_and_check(sess, "merged", [mine])
    assert _rows(_arrow(sess, "SELECT * FROM merged")) == _rows(_arrow(sess, "SELECT * FROM t"))
    if mode != "drop":
        _uses_projections(sess, "merged", stale=mode == "ignore")
    close_session()


@pytest.mark.parametrize("runs", (False, True))
@pytest.mark.parametrize("mode", ("rebuild", "ignore"))
def test_streaming_merges_build_the_same_projections(tmp_path, monkeypatch, mode, runs) -> None:
    """A merge streaming blocks of few rows (the engine's windows of whole keys) gives the same
    projections: rebuilt ones are built from the merged part's rows, whichever way it was written;
    with `runs`, every projection is built from runs of them (projection_merge.py: bounded memory)."""
    monkeypatch.setattr(merge_stream, "READ_BLOCK_ROWS", 16)
    if runs:
        monkeypatch.setattr(projection_merge, "RUN_BYTES", 1)
    sess, data_dir, ours = _tables(tmp_path, "ReplacingMergeTree", mode, "Wide")
    sess.query("SYSTEM START MERGES t")
    sess.query("OPTIMIZE TABLE t FINAL")
    (merged,) = ours.optimize(final=True)
    (theirs,) = active_part_dirs(sess, "t")
    assert ours.check().ok
    if runs:  # (runs cut the rows into other granules; the same rows, which ClickHouse answers from)
        for name in PROJECTIONS:
            assert _projection_rows(ours.path / merged, name) == _projection_rows(theirs, name), name
        sess.query("CREATE TABLE merged AS t")
        attach_and_check(sess, "merged", [ours.path / merged])
        _uses_projections(sess, "merged", stale=mode == "ignore")
    else:
        assert _projection_files(ours.path / merged) == _projection_files(theirs)
    close_session()


def test_merges_of_clickhouses_parts(tmp_path) -> None:
    """ClickHouse's inserted parts merged by us: its own merge's projections."""
    import shutil

    sess, data_dir, _ = _tables(tmp_path, "CollapsingMergeTree", "ignore", "Compact")
    statement = sess.query("SHOW CREATE TABLE t", "TabSeparatedRaw").bytes().decode()
    copy = tmp_path / "copy"
    shutil.copytree(data_dir, copy)
    table = MergeTreeTable.open(copy, create_statement=statement)
    (merged,) = table.optimize(final=True)
    sess.query("SYSTEM START MERGES t")
    sess.query("OPTIMIZE TABLE t FINAL")
    (theirs,) = active_part_dirs(sess, "t")
    assert merged == theirs.name and _projection_files(copy / merged) == _projection_files(theirs)
    close_session()


@pytest.mark.parametrize("engine", list(ENGINES))
def test_projections_refused_as_clickhouse_refuses_them(tmp_path, engine) -> None:
    """Without the setting (or with 'throw') ClickHouse refuses the statement, and so do we, naming
    the setting; a plain MergeTree needs none. A value ClickHouse does not know is refused too."""
    sess = open_session(tmp_path)
    for setting in ("", ", deduplicate_merge_projection_mode = 'throw'"):
        statement = _statement(engine, "drop").replace(", deduplicate_merge_projection_mode = 'drop'", setting)
        with pytest.raises(Exception, match="deduplicate_merge_projection_mode"):
            sess.query(statement)
        with pytest.raises(UnsupportedError, match="deduplicate_merge_projection_mode"):
            MergeTreeTable.new(tmp_path / "refused", parse_create(statement), {}).write_directory()
        assert not (tmp_path / "refused").exists()
        with pytest.raises(UnsupportedError, match="deduplicate_merge_projection_mode"):
            MergeTreeTable.create(tmp_path / "made", [("k", "UInt32"), ("v", "Int64"), ("s", "String"), ("ver", "UInt32"),
                                                      ("sign", "Int8")], "k", engine=ENGINES[engine],
                                  projections=["p (SELECT * ORDER BY v)"],
                                  settings={"deduplicate_merge_projection_mode": "throw"} if setting else None)
        assert not (tmp_path / "made").exists()
    close_session()
    with pytest.raises(InvalidOptionError, match="deduplicate_merge_projection_mode"):
        MergeTreeTable.create(tmp_path / "bad", [("k", "UInt32")], "k", engine="ReplacingMergeTree",
                              settings={"deduplicate_merge_projection_mode": "keep"})


@pytest.mark.parametrize("mode", MODES)
def test_create_accepts_the_modes_clickhouse_accepts(tmp_path, mode) -> None:
    table = MergeTreeTable.create(tmp_path / mode, [("k", "UInt32"), ("v", "Int64"), ("ver", "UInt32")], "k",
                                  engine="ReplacingMergeTree(ver)", projections=["p (SELECT * ORDER BY v)"],
                                  settings={"deduplicate_merge_projection_mode": mode})
    table.insert(pa.table({"k": pa.array([2, 1, 2], pa.uint32()), "v": [5, 6, 7], "ver": pa.array([1, 1, 2], pa.uint32())}))
    (part,) = table.parts()
    assert (table.path / part.name / "p.proj" / "count.txt").read_text() == "2"
    assert f"deduplicate_merge_projection_mode = '{mode}'" in format_attach(table.definition)


def test_mutations_of_such_tables(tmp_path) -> None:
    """ALTER UPDATE builds the projections from the rewritten part's rows, ClickHouse's bytes; a
    lightweight DELETE is refused by both (lightweight_mutation_projection_mode = 'throw', the default:
    the engine changes nothing there)."""
    sess, _, ours = _tables(tmp_path, "VersionedCollapsingMergeTree", "rebuild", "Wide")
    sess.query("SYSTEM START MERGES t")
    sess.query("ALTER TABLE t UPDATE v = v + 1000 WHERE s = '2' SETTINGS mutations_sync = 2")
    ours.update({"v": "v + 1000"}, where="s = '2'")
    theirs = active_part_dirs(sess, "t")
    mine = sorted(ours.path / part.name for part in ours.parts())
    assert [p.name for p in mine] == [p.name for p in theirs]
    for their_part, our_part in zip(theirs, mine, strict=True):
        assert _projection_files(our_part) == _projection_files(their_part), our_part.name
    with pytest.raises(Exception, match="lightweight_mutation_projection_mode"):
        sess.query("DELETE FROM t WHERE k = 1")
    with pytest.raises(UnsupportedError, match="lightweight_mutation_projection_mode"):
        ours.delete(where="k = 1")
    close_session()


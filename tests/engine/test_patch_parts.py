"""Tables with patch parts of ClickHouse lightweight UPDATEs (chdb writes them): our reads return
exactly the rows and values ClickHouse's SELECT returns — for all columns, a column subset and a
WHERE on an updated column. Our writes on them leave the table as ClickHouse would: inserts above
every patch's version, merges and mutations materialising the patches (ClickHouse then reads the
directory as we do); what would not apply them is refused before writing."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from spark_mergetree import MergeTreeTable
from spark_mergetree.engine.patches import PatchSet
from spark_mergetree.errors import UnsupportedError
from spark_mergetree.format.part_info import PartInfo
from tests.format.chdb_util import close_session, make_chdb_table, open_session

IDS = "SETTINGS enable_block_number_column = 1, enable_block_offset_column = 1, index_granularity = 8"
LAYOUTS = {
    "wide": "min_bytes_for_wide_part = 0, min_rows_for_wide_part = 0",
    "compact": "min_bytes_for_wide_part = 1000000000, min_rows_for_wide_part = 1000000000",
}
COLUMNS = "(id UInt64, s String, v UInt32, n Nullable(Int32), lc LowCardinality(String), d Date)"
INSERT = ("INSERT INTO u SELECT number + {start}, toString(number), number, if(number % 4 = 0, NULL, number), "
          "['a', 'b', 'c'][number % 3 + 1], toDate('2024-01-20') + number * 3 FROM numbers({count})")


def _insert(start: int, count: int) -> str:
    return INSERT.format(start=start, count=count)


def _create(layout: str = "wide", partition: str = "", extra: str = "", indexes: str = "",
            identities: str = IDS) -> str:
    columns = COLUMNS if not indexes else COLUMNS[:-1] + ", " + indexes + ")"
    settings = ", ".join(filter(None, [identities, LAYOUTS[layout], extra]))
    return f"CREATE TABLE u {columns} ENGINE = MergeTree {partition} ORDER BY id {settings}"


def _clickhouse(sess, columns: str, where: str | None, source: str = "u") -> list[tuple]:
    query = f"SELECT {columns} FROM {source}" + (f" WHERE {where}" if where else "")
    data = pa.ipc.open_file(pa.py_buffer(sess.query(query, "Arrow").bytes())).read_all()
    return sorted(zip(*([v.decode() if isinstance(v, bytes) else v for v in c.to_pylist()] for c in data.columns)),
                  key=repr)


def _ours(table: MergeTreeTable, columns: list[str] | None, where: str | None) -> list[tuple]:
    data = table.to_arrow(columns, where=where)
    return sorted(zip(*(c.to_pylist() for c in data.columns)), key=repr)


READS = [
    (None, None),
    (["v", "lc"], None),
    (["id", "s"], "v >= 999 OR n IS NULL"),
    (None, "lc = 'zz' AND id < 120"),
]


def _check(tmp_path: Path, create: str, statements: list[str], min_patches: int = 1) -> MergeTreeTable:
    """Run the statements in chdb; our reads of its directory equal its SELECTs."""
    sess, directory = make_chdb_table(tmp_path, create, statements)
    try:
        return _compare(sess, directory, min_patches)
    finally:
        close_session()


def _compare(sess, directory: Path, min_patches: int = 1) -> MergeTreeTable:
    patches = [p.name for p in directory.iterdir() if p.name.startswith("patch-")]
    assert len(patches) >= min_patches
    statement = sess.query("SHOW CREATE TABLE u", "TabSeparatedRaw").bytes().decode()
    table = MergeTreeTable.open(directory, create_statement=statement)
    for columns, where in READS:
        names = ", ".join(columns) if columns else "*"
        assert _ours(table, columns, where) == _clickhouse(sess, names, where), (columns, where)
    assert table.count() == int(sess.query("SELECT count() FROM u", "TabSeparatedRaw").bytes())
    report = table.check()  # patch parts are checked too
    assert report.ok and report.parts_checked == len(table.visible_parts()[1]) + len(table.patch_part_names())
    # Spark's path: read tasks (which name their parts' patch parts) in chunks of a few rows.
    where = "v >= 999 OR n IS NULL"
    tasks = table.plan_read(["id", "v", "n"], where).tasks
    batches = list(table.iter_tasks(tasks, ["id", "v", "n"], where, chunk_rows=8))
    spark = sorted(zip(*(c.to_pylist() for c in pa.Table.from_batches(batches).columns)), key=repr) if batches else []
    assert spark == _clickhouse(sess, "id, v, n", where)
    return table


FORCE = " SETTINGS lightweight_delete_mode = 'lightweight_update_force'"
# name → (CREATE arguments, statements, patch parts at least on disk after them)
SCENARIOS: dict[str, tuple[dict[str, str], list[str], int]] = {
    # Several updates of the same rows and of other columns; a WHERE on another (updated) column.
    "same rows and other columns": ({}, [
        _insert(0, 40), _insert(100, 30), "UPDATE u SET v = 999 WHERE id % 10 = 0",
        "UPDATE u SET s = 'x', n = NULL, lc = 'zz' WHERE id % 7 = 0", "UPDATE u SET v = v + 1 WHERE id % 5 = 0",
        "UPDATE u SET n = 7, lc = 'zz' WHERE v > 20"], 4),
    "update insert update": ({}, [
        _insert(0, 30), "UPDATE u SET v = 999 WHERE id % 3 = 0",
        _insert(100, 30), "UPDATE u SET v = 1000, s = 'y' WHERE id % 4 = 0"], 2),
    # The merge materialises the first patch (the merged part's data version is above it); the
    # later ones apply to the merged part, whose rows keep their identities.
    "optimize final": ({}, [
        _insert(0, 30), _insert(100, 30), "UPDATE u SET v = 999 WHERE id % 10 = 0",
        "OPTIMIZE TABLE u FINAL", "UPDATE u SET lc = 'zz', v = 5 WHERE id % 4 = 0",
        _insert(200, 10), "UPDATE u SET s = 'q' WHERE id % 3 = 0"], 3),
    # apply_patches_on_merge = 0: the merged part keeps data version 1 and the patches name its
    # sources, so they meet its rows by (_block_number, _block_offset).
    "merged parts by row identity": ({"extra": "apply_patches_on_merge = 0"}, [
        _insert(0, 30), _insert(100, 30), "UPDATE u SET v = 999 WHERE id % 10 = 0",
        "OPTIMIZE TABLE u FINAL", "UPDATE u SET n = NULL, lc = 'zz' WHERE id % 3 = 0",
        "UPDATE u SET v = 1000 WHERE id % 20 = 0"], 3),
    "partitioned": ({"partition": "PARTITION BY toYYYYMM(d)"}, [
        _insert(0, 30), _insert(100, 30), "UPDATE u SET v = 999, s = 'p' WHERE id % 4 = 0",
        "OPTIMIZE TABLE u PARTITION 202402 FINAL", "UPDATE u SET lc = 'zz' WHERE id % 5 = 0"], 4),
    "lightweight deletes": ({}, [
        _insert(0, 30), _insert(100, 30), "UPDATE u SET v = 999 WHERE id % 10 = 0",
        "DELETE FROM u WHERE id % 9 = 0", "UPDATE u SET lc = 'zz', v = 1000 WHERE id % 4 = 0",
        "DELETE FROM u WHERE id % 8 = 1"], 2),
    # lightweight_update_force: the DELETE patches the row mask `_row_exists`, versioned like a column.
    "deletes written as patches": ({}, [
        _insert(0, 30), _insert(100, 30), "UPDATE u SET v = 999 WHERE id % 10 = 0",
        "DELETE FROM u WHERE id % 4 = 0" + FORCE, "DELETE FROM u WHERE id % 9 = 0",
        "UPDATE u SET v = 1000, lc = 'zz' WHERE id % 5 = 0", "DELETE FROM u WHERE id % 7 = 0" + FORCE,
        _insert(200, 10), "DELETE FROM u WHERE v > 995" + FORCE], 4),
    # Parts merged before the table stored row identities: ClickHouse reads a part's rows as its
    # min block and their positions in it, and its patch rows record those.
    "parts merged before the settings": ({"identities": "SETTINGS index_granularity = 8"}, [
        _insert(0, 30), _insert(100, 30), "OPTIMIZE TABLE u FINAL", _insert(200, 20),
        "ALTER TABLE u MODIFY SETTING enable_block_number_column = 1, enable_block_offset_column = 1",
        "UPDATE u SET v = 999, lc = 'zz' WHERE id % 10 = 0", _insert(300, 10),
        "UPDATE u SET v = 5 WHERE id % 4 = 0"], 2),
    # The ALTER's mutation materialises the patch of v UInt32 into every part (a higher data
    # version), so the stale patch, which stays active, applies to no part.
    "update before a type change": ({}, [
        _insert(0, 30), "UPDATE u SET v = 999 WHERE id % 10 = 0", "ALTER TABLE u MODIFY COLUMN v UInt64",
        _insert(100, 30), "UPDATE u SET v = 5 WHERE id % 4 = 0"], 2),
}
# patch_parts_version = 'v1': the older format (`_part`, `_part_offset`, source_parts.dat format 0),
# which ClickHouse still reads: the same rows meet by the same identities.
for name in ("same rows and other columns", "merged parts by row identity", "deletes written as patches"):
    arguments, statements, count = SCENARIOS[name]
    extra = ", ".join(filter(None, [arguments.get("extra", ""), "patch_parts_version = 'v1'"]))
    SCENARIOS[f"{name} (v1 patches)"] = ({**arguments, "extra": extra}, statements, count)
CASES = [(name, layout) for name in SCENARIOS for layout in LAYOUTS
         if layout == "wide" or name in ("same rows and other columns", "partitioned", "deletes written as patches")]


@pytest.mark.parametrize(("scenario", "layout"), CASES, ids=[f"{name}-{layout}" for name, layout in CASES])
def test_scenario(tmp_path: Path, scenario: str, layout: str) -> None:
    arguments, statements, patches = SCENARIOS[scenario]
    _check(tmp_path, _create(layout, **arguments), statements, min_patches=patches)


def test_merged_patch_parts_and_apply_patches(tmp_path: Path) -> None:
    # Patch parts of one column set merge like parts (`patch-<hash>-all_3_7_1_6`): rows of several
    # UPDATEs, one per row identity; APPLY PATCHES then rewrites the part at a higher data version.
    sess, directory = make_chdb_table(tmp_path, _create(), [
        _insert(0, 40), "UPDATE u SET v = 999 WHERE id % 10 = 0", "UPDATE u SET v = 5 WHERE id % 4 = 0",
        "UPDATE u SET v = 6 WHERE id % 6 = 0", "UPDATE u SET s = 'q' WHERE id % 3 = 0"])
    try:
        partitions = sess.query("SELECT DISTINCT partition_id FROM system.parts WHERE table = 'u' AND active "
                                "AND startsWith(partition_id, 'patch-')", "TabSeparatedRaw").bytes().decode().split()
        for partition in partitions:
            sess.query(f"OPTIMIZE TABLE u PARTITION ID '{partition}' FINAL")
        assert any(p.name.startswith("patch-") and "_1_" in p.name.split("-")[-1] for p in directory.iterdir())
        _compare(sess, directory)
        sess.query("UPDATE u SET v = 7 WHERE id % 7 = 0")
        sess.query("ALTER TABLE u APPLY PATCHES")
        _compare(sess, directory)
    finally:
        close_session()


def test_skip_index_on_an_updated_column_is_not_used(tmp_path: Path) -> None:
    table = _check(tmp_path, _create(indexes="INDEX i_v v TYPE minmax GRANULARITY 1"), [
        _insert(0, 60), "UPDATE u SET v = 999 WHERE id % 10 = 0",
    ])
    assert table.to_arrow(["id"], where="v = 999").num_rows == 6



def test_patch_rows_of_an_update_read_through_a_projection_change_no_row(tmp_path: Path) -> None:
    # ClickHouse 26.9 writes the patch rows of an UPDATE whose WHERE it read through a projection with
    # the projection part's offsets beside the real rows' keys: the identity names another row, the key
    # no row at that identity, and ClickHouse's reads and merges change nothing. Ours must not either.
    create = ("CREATE TABLE u (id UInt64, k UInt32, v UInt32, s LowCardinality(String), "
              "PROJECTION by_k (SELECT * ORDER BY k)) ENGINE = MergeTree ORDER BY (s, id) " + IDS)
    sess, directory = make_chdb_table(tmp_path, create, [
        "INSERT INTO u SELECT number, (number * 7919) % 1000, number, ['a', 'b'][number % 2 + 1] FROM numbers(600)",
        "INSERT INTO u SELECT number, (number * 7919) % 1000, number, ['a', 'b'][number % 2 + 1] "
        "FROM numbers(600, 400)",
        "UPDATE u SET v = 999999 WHERE k IN (5, 17, 600) SETTINGS force_optimize_projection = 1",
        "UPDATE u SET v = 555 WHERE id = 20"])  # an ordinary one beside it, which applies
    try:
        table = MergeTreeTable.open(directory, create_statement=_statement(sess))
        assert any(table.active_patches().for_part(p) for p in table.visible_parts()[1])
        assert _ours(table, None, None) == _clickhouse(sess, "*", None)
        where = "v = 999999 OR id = 20"
        assert _ours(table, ["id", "v"], where) == _clickhouse(sess, "id, v", where) == [(20, 555)]
        table.optimize(final=True)  # our merge materialises the patches as ClickHouse's would
        assert not any(table.active_patches().for_part(p) for p in table.visible_parts()[1])
        assert _ours(table, None, None) == _clickhouse(sess, "*", None)
    finally:
        close_session()
    sess = open_session(tmp_path)  # ClickHouse reads the part we merged
    try:
        assert _ours(table, None, None) == _clickhouse(sess, "*", None)
        _clickhouse_check(sess)
    finally:
        close_session()

def _statement(sess) -> str:
    return sess.query("SHOW CREATE TABLE u", "TabSeparatedRaw").bytes().decode()


def _clickhouse_check(sess) -> None:
    result = sess.query("CHECK TABLE u", "TabSeparatedRaw").bytes().decode().split()
    assert result and "0" not in result, result


def _more_rows(table: MergeTreeTable, shift: int) -> pa.Table:
    """Rows like the table's (every type of COLUMNS), with ids moved by `shift`."""
    rows = table.to_arrow()
    return rows.set_column(0, "id", pa.compute.add(rows.column("id"), pa.scalar(shift, pa.uint64())))


@pytest.mark.parametrize("layout", ["wide", "compact"])
def test_inserts_into_a_patched_table_and_clickhouse_updates_after(tmp_path: Path, layout: str) -> None:
    sess, directory = make_chdb_table(tmp_path, _create(layout), [
        _insert(0, 40), _insert(100, 30), "UPDATE u SET v = 999 WHERE id % 10 = 0"])
    statement = _statement(sess)
    theirs = sorted(p.name for p in directory.iterdir() if p.name.startswith("all_"))
    close_session()
    table = MergeTreeTable.open(directory, create_statement=statement)
    (ours,) = table.insert(_more_rows(table, 1000))
    patches = table.patch_part_names()
    # Above every block and version ClickHouse gave (the patch's too), so no patch applies to it;
    # like ClickHouse's inserted parts, it stores no row identity (they read as block and position).
    assert PartInfo.parse(ours).min_block > max(max(PartInfo.parse(p).max_block, PartInfo.parse(p).mutation)
                                                for p in patches)
    assert [c for c in (directory / ours / "columns.txt").read_text().splitlines()] == \
        (directory / theirs[0] / "columns.txt").read_text().splitlines()
    sess = open_session(tmp_path)  # ClickHouse loads our part
    try:
        _compare(sess, directory)
        _clickhouse_check(sess)
        # ClickHouse updates rows of its parts and of ours (a new patch part in the directory our log keeps).
        sess.query("UPDATE u SET v = 7, s = 'w', n = NULL WHERE id % 3 = 0")
        sess.query("UPDATE u SET lc = 'zz' WHERE id % 4 = 1 AND id > 1000")
        table = _compare(sess, directory, min_patches=3)
        assert table.patch_part_names() > patches
        statement = _statement(sess)
    finally:
        close_session()
    table = MergeTreeTable.open(directory, create_statement=statement)
    table.insert(_more_rows(table, 5000))
    table.cleanup()  # the log never takes ClickHouse's patch parts for garbage
    assert table.patch_part_names() >= patches
    sess = open_session(tmp_path)
    try:
        _compare(sess, directory, min_patches=3)
        _clickhouse_check(sess)
    finally:
        close_session()


# name → (CREATE arguments, ClickHouse statements, our mutation, ClickHouse's SELECT of the rows it leaves)
MUTATIONS = {
    "delete": ({}, "id % 5 = 0 OR v = 999", "SELECT * FROM u WHERE NOT (id % 5 = 0 OR v = 999)"),
    # A part no row of which matches is rewritten too: its new version would skip the patches.
    "update": ({}, "id < 20 AND lc = 'zz'",
               "SELECT id, s, if(id < 20 AND lc = 'zz', v + 1000, v) AS v, n, lc, d FROM u"),
    "delete after patched deletes": ({"partition": "PARTITION BY toYYYYMM(d)"}, "v > 20 AND v < 30",
                                     "SELECT * FROM u WHERE NOT (v > 20 AND v < 30)"),
}
PATCHING = [_insert(0, 40), _insert(100, 30), _insert(200, 30), "UPDATE u SET v = 999 WHERE id % 10 = 0",
            "UPDATE u SET lc = 'zz', n = NULL WHERE id % 3 = 0", "DELETE FROM u WHERE id % 7 = 0" + FORCE,
            "UPDATE u SET v = 25 WHERE id % 11 = 0"]


@pytest.mark.parametrize("layout", ["wide", "compact"])
@pytest.mark.parametrize("name", list(MUTATIONS))
def test_our_mutations_materialise_the_patches(tmp_path: Path, name: str, layout: str) -> None:
    arguments, where, expected_query = MUTATIONS[name]
    sess, directory = make_chdb_table(tmp_path, _create(layout, **arguments), PATCHING)
    statement = _statement(sess)
    expected = _clickhouse(sess, "*", None, f"({expected_query})")
    close_session()
    table = MergeTreeTable.open(directory, create_statement=statement)
    patched = {p for p in table.visible_parts()[1] if table.active_patches().changing(p, ["v"])}
    assert patched
    if name.startswith("delete"):
        new = table.delete(where)
    else:
        new = table.update({"v": "v + 1000"}, where)
    # Every part at the mutation's version, above every patch's: reads no longer apply them.
    (version,) = {PartInfo.parse(p).mutation for p in new}
    assert version > max(PartInfo.parse(p).mutation for p in table.patch_part_names())
    assert not any(table.active_patches().for_part(p) for p in new)
    assert _ours(table, None, None) == expected
    sess = open_session(tmp_path)  # ClickHouse reads the directory we mutated
    try:
        assert _clickhouse(sess, "*", None) == expected
        _compare(sess, directory)
        _clickhouse_check(sess)
    finally:
        close_session()


NO_MERGES = "min_parts_to_merge_at_once = 1000"  # (no background merge in chdb changes the part set)
# name → (CREATE text, ClickHouse statements before the OPTIMIZE FINAL)
MERGES = {
    "wide": (_create("wide", extra=NO_MERGES), PATCHING),
    "compact": (_create("compact", extra=NO_MERGES), PATCHING),
    "partitioned": (_create("wide", partition="PARTITION BY toYYYYMM(d)", extra=NO_MERGES), PATCHING),
    # A source at a mutation's version above some patches: only the newer ones apply to it.
    "after a mutation": (_create("wide", extra=NO_MERGES), [
        _insert(0, 40), "UPDATE u SET v = 999 WHERE id % 10 = 0", "DELETE FROM u WHERE id = 5",
        _insert(100, 30), "UPDATE u SET v = 5 WHERE id % 4 = 0", "DELETE FROM u WHERE id % 9 = 0" + FORCE]),
    # The engine's merge keeps the updated values of the rows it keeps, and none of the deleted rows.
    "replacing": ("CREATE TABLE u (id UInt64, s String, v UInt32, n Nullable(Int32), lc LowCardinality(String), "
                  f"d Date) ENGINE = ReplacingMergeTree(v) ORDER BY (id % 50) {IDS}, {NO_MERGES}",
                  [_insert(0, 40), _insert(100, 30), "UPDATE u SET s = concat(s, '!'), n = 1 WHERE id % 3 = 0",
                   "DELETE FROM u WHERE id % 7 = 0" + FORCE]),
}


def _active(sess) -> list[str]:
    return sorted(sess.query("SELECT name FROM system.parts WHERE table = 'u' AND active",
                             "TabSeparatedRaw").bytes().decode().split())


@pytest.mark.parametrize("name", list(MERGES))
def test_our_merges_materialise_the_patches_as_clickhouse_does(tmp_path: Path, name: str) -> None:
    create, statements = MERGES[name]
    # ClickHouse's own OPTIMIZE FINAL of the same table: the parts it leaves and the rows it reads.
    sess, _ = make_chdb_table(tmp_path / "theirs", create, statements)
    try:
        before = _clickhouse(sess, "*", None)
        sess.query("OPTIMIZE TABLE u FINAL")
        theirs, merged_rows = _active(sess), _clickhouse(sess, "*", None)
    finally:
        close_session()
    sess, directory = make_chdb_table(tmp_path / "ours", create, statements)
    statement = _statement(sess)
    close_session()
    table = MergeTreeTable.open(directory, create_statement=statement)
    assert table.active_patches().changing(sorted(table.visible_parts()[1])[0], ["v"])
    created = table.optimize(final=True)
    # Named as ClickHouse names them: the highest applied patch version is the merged part's mutation.
    # (ClickHouse's OPTIMIZE FINAL also rewrites a partition's lone part; ours leaves it. The patch
    # parts' block numbers differ between the two runs: an UPDATE numbers its partitions in any order.)
    assert set(created) <= set(theirs)
    assert len(created) == len({PartInfo.parse(p).partition_id for p in theirs if not p.startswith("patch-")}
                               - {PartInfo.parse(p).partition_id for p in table.visible_parts()[1] - set(created)})
    assert not any(table.active_patches().for_part(p) for p in created)
    assert _ours(table, None, None) == (merged_rows if name == "replacing" else before) == merged_rows
    sess = open_session(tmp_path / "ours")  # ClickHouse reads the parts we merged
    try:
        assert _active(sess) == sorted(table.visible_parts()[1] | table.patch_part_names())
        _compare(sess, directory)
        _clickhouse_check(sess)
        sess.query("UPDATE u SET s = 'after' WHERE id % 6 = 0")  # meets our merged rows by their identity
        _compare(sess, directory)
    finally:
        close_session()


def test_merges_that_would_not_apply_patches_are_refused_or_left_alone(tmp_path: Path) -> None:
    # apply_patches_on_merge = 0: ClickHouse's merge keeps the rows' identities for the patches, which
    # ours does not write: OPTIMIZE refuses before writing, background merges take the other parts.
    create = _create(extra=f"apply_patches_on_merge = 0, {NO_MERGES}")
    sess, directory = make_chdb_table(tmp_path, create, [
        _insert(0, 20), _insert(100, 20), "UPDATE u SET v = 999 WHERE id < 10", _insert(200, 20),
        _insert(300, 20)])
    statement = _statement(sess)
    close_session()
    table = MergeTreeTable.open(directory, create_statement=statement)
    before = sorted(p.name for p in directory.iterdir())
    with pytest.raises(UnsupportedError, match="patch-[0-9a-f]{32}-all_4_4_0_3: a patch part .* part all_1_1_0, and "
                                               "the table has apply_patches_on_merge = 0"):
        table.optimize(final=True)
    assert sorted(p.name for p in directory.iterdir() if p.name != "_mergetree") == before
    from spark_mergetree.engine import optimize as optimizing
    visible = table.visible_parts()[1]
    kept, reserved = optimizing._without_unmergeable(table, visible, {})
    assert kept == visible - {"all_1_1_0"} and reserved == {"all": [(1, 1)]}


def test_writes_that_do_not_apply_patches_are_refused_before_writing(tmp_path: Path) -> None:
    create = _create(indexes="INDEX i_s s TYPE minmax GRANULARITY 1")
    _sess, directory = make_chdb_table(tmp_path, create, [_insert(0, 20), "UPDATE u SET v = 999 WHERE id < 3"])
    close_session()
    before = sorted(p.name for p in directory.iterdir())
    table = MergeTreeTable.open(directory, create_statement=create)
    with pytest.raises(UnsupportedError, match="patch-[0-9a-f]{32}-all_3_3_0_2: a patch part .* part all_1_1_0"):
        table.materialize_index("i_s")
    assert sorted(p.name for p in directory.iterdir() if p.name != "_mergetree") == before


def test_final_read_of_a_replacing_table_applies_patches_first(tmp_path: Path) -> None:
    create = ("CREATE TABLE u (id UInt64, s String, v UInt32) ENGINE = ReplacingMergeTree(v) ORDER BY id "
              f"{IDS}")
    sess, directory = make_chdb_table(tmp_path, create, [
        "INSERT INTO u SELECT number % 20, toString(number), number FROM numbers(30)",
        "INSERT INTO u SELECT number % 20, concat('b', toString(number)), number + 5 FROM numbers(30)",
        "UPDATE u SET s = concat(s, '!') WHERE id % 3 = 0 AND s LIKE 'b%'",
        "UPDATE u SET s = 'zz' WHERE id % 4 = 0"])
    try:
        expected = _clickhouse(sess, "*", None, "u FINAL")
    finally:
        close_session()
    table = MergeTreeTable.open(directory, create_statement=create)
    assert sorted(zip(*(c.to_pylist() for c in table.to_arrow(final=True).columns)), key=repr) == expected


@pytest.mark.parametrize("base", [0, 1 << 40])
def test_rows_meet_patch_rows_by_identity_of_any_size(base: int) -> None:
    # Identities that fit in 32 bits each join on one packed key, others on both columns: same rows.
    number, offsets = np.uint64(base + 7), np.arange(5, dtype=np.uint64) + np.uint64(base)
    rows = pa.table({"v": pa.array([0, 1, 2, 3, 4], pa.uint32()), "_block_number": np.full(5, number),
                     "_block_offset": offsets})
    older = pa.table({"_block_number": np.full(2, number), "_block_offset": offsets[[1, 3]],
                      "_part_data_version": np.array([5, 5], np.uint64), "v": pa.array([10, 30], pa.uint32())})
    newer = pa.table({"_block_number": np.full(2, number), "_block_offset": offsets[[3, 4]],
                      "_part_data_version": np.array([9, 2], np.uint64), "v": pa.array([31, 41], pa.uint32())})
    updated = PatchSet._updated(rows, "v", [older, newer], [(), ()], 4, (base + 7, base + 7))
    assert updated.to_pylist() == [0, 10, 2, 31, 4]  # version 2 is not above the part's 4
    # A patch that stores the sorting key: a row whose key differs from the patch row's is not its row.
    keyed = rows.append_column("id", pa.array([100, 101, 102, 103, 104], pa.uint64()))
    older = older.append_column("id", pa.array([101, 999], pa.uint64()))
    newer = newer.append_column("id", pa.array([103, 104], pa.uint64()))
    updated = PatchSet._updated(keyed, "v", [older, newer], [("id",), ("id",)], 4, (base + 7, base + 7))
    assert updated.to_pylist() == [0, 10, 2, 31, 4]  # (103's older patch row names id 999: no row)
    older = older.set_column(3, "v", pa.array([10, 77], pa.uint32()))
    updated = PatchSet._updated(keyed, "v", [older, newer.slice(0, 0)], [("id",), ("id",)], 4, (base + 7, base + 7))
    assert updated.to_pylist() == [0, 10, 2, 3, 4]

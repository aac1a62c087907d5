"""Our DELETE and UPDATE (engine/mutations.py) as ClickHouse sees them, and as transactions.

Expected rows come from an independent computation over the inserted Arrow data and from chdb
opening the same catalog root in a fresh process (a restarted ClickHouse): CHECK TABLE, SELECT,
system.mutations, and its own OPTIMIZE FINAL afterwards.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from spark_mergetree import MergeTreeTable
from spark_mergetree.catalog import Catalog
from spark_mergetree.errors import ExpressionError, InvalidOptionError, SerializationError, UnsupportedError
from spark_mergetree.format.part_info import PartInfo
from spark_mergetree.txn import Transaction
from tests.catalog.chdb_runner import rows, run_chdb

SCHEMA = [("k", "UInt64"), ("p", "UInt8"), ("v", "String"), ("w", "Int32")]


def _data(start: int, count: int) -> pa.Table:
    keys = pa.array(range(start, start + count), pa.uint64())
    return pa.table({"k": keys, "p": pc.cast(pc.bit_wise_and(keys, 1), pa.uint8()),
                     "v": pa.array([f"s{i}" for i in range(start, start + count)]),
                     "w": pa.array([i % 7 for i in range(start, start + count)], pa.int32())})


def _catalog_table(tmp_path: Path, **settings: Any) -> tuple[Path, Any]:
    root = tmp_path / "root"
    cat = Catalog(root)
    cat.create_database("db")
    table = cat.create_table("db.t", SCHEMA, "k", partition_by="p",
                             settings={"auto_merge": False, "index_granularity": 64, **settings})
    return root, table


def _tsv(table: pa.Table) -> list[list[str]]:
    return [[str(v) for v in row.values()] for row in table.sort_by("k").to_pylist()]


def test_delete_is_a_lightweight_delete_clickhouse_agrees_with(tmp_path: Path) -> None:
    root, table = _catalog_table(tmp_path)
    table.insert(_data(0, 500))
    table.insert(_data(500, 300))
    inserted = pa.concat_tables([_data(0, 500), _data(500, 300)])
    before = {p.name for p in table.parts()}

    new = table.delete("k % 3 = 0 AND k < 600")

    keep = pc.invert(pc.and_(pc.equal(pc.subtract(inserted["k"], pc.multiply(pc.divide(inserted["k"], 3), 3)), 0),
                             pc.less(inserted["k"], 600)))
    expected = inserted.filter(keep)
    assert _tsv(table.to_arrow()) == _tsv(expected)
    # Every part has a new version (the mutation's), as ClickHouse leaves them; the mask keeps the rows.
    versions = {PartInfo.parse(name).mutation for name in new}
    assert len(versions) == 1 and {PartInfo(**{**PartInfo.parse(n).__dict__, "mutation": 0}).name for n in new} == before
    (version,) = versions
    mutation_file = (table.path / f"mutation_{version}.txt").read_text()
    assert mutation_file.startswith("format version: 1\ncreate time: ")
    assert "commands: (UPDATE _row_exists = 0 WHERE " in mutation_file
    assert sum(p.deleted_rows for p in table.parts()) == inserted.num_rows - expected.num_rows
    assert table.check().ok

    check, select, parts, pending, _, merged = run_chdb(
        root, "CHECK TABLE db.t SETTINGS check_query_single_value_result = 1", "SELECT * FROM db.t ORDER BY k",
        "SELECT name FROM system.parts WHERE database = 'db' AND table = 't' AND active ORDER BY name",
        "SELECT count() FROM system.mutations WHERE database = 'db' AND table = 't' AND NOT is_done",
        "OPTIMIZE TABLE db.t FINAL", "SELECT * FROM db.t ORDER BY k")
    assert rows(check) == [["1"]]
    assert rows(select) == _tsv(expected)
    assert sorted(sum(rows(parts), [])) == sorted(new)
    assert rows(pending) == [["0"]]
    assert rows(merged) == _tsv(expected)


def test_update_is_a_mutation_clickhouse_agrees_with(tmp_path: Path) -> None:
    root, table = _catalog_table(tmp_path)
    table.insert(_data(0, 400))
    table.delete("k < 5")
    new = table.update({"w": "w * 10 + 1", "v": "'changed'"}, "k BETWEEN 3 AND 40")
    data = _data(0, 400).to_pylist()
    expected = []
    for row in data:
        if row["k"] < 5:
            continue
        if 3 <= row["k"] <= 40:
            row = {**row, "w": row["w"] * 10 + 1, "v": "changed"}
        expected.append(row)
    expected_table = pa.Table.from_pylist(expected, schema=table.schema)
    assert _tsv(table.to_arrow()) == _tsv(expected_table)
    version = PartInfo.parse(new[0]).mutation
    assert "commands: (UPDATE w = ((w * 10) + 1), v = \\'changed\\' WHERE " in (
        table.path / f"mutation_{version}.txt").read_text()
    assert table.check().ok
    check, select, pending, _, merged = run_chdb(
        root, "CHECK TABLE db.t SETTINGS check_query_single_value_result = 1", "SELECT * FROM db.t ORDER BY k",
        "SELECT count() FROM system.mutations WHERE database = 'db' AND table = 't' AND NOT is_done",
        "OPTIMIZE TABLE db.t FINAL", "SELECT * FROM db.t ORDER BY k")
    assert rows(check) == [["1"]] and rows(pending) == [["0"]]
    assert rows(select) == _tsv(expected_table) == rows(merged)


def test_update_refuses_key_columns_and_bad_values_before_writing(tmp_path: Path) -> None:
    _, table = _catalog_table(tmp_path)
    table.insert(_data(0, 10))
    before = sorted(p.name for p in table.path.iterdir())
    with pytest.raises(UnsupportedError, match="'k' is a key column"):
        table.update({"k": 1}, "k = 2")
    with pytest.raises(UnsupportedError, match="'p' is a key column"):
        table.update({"p": 1}, "k = 2")
    with pytest.raises(InvalidOptionError, match="unknown column 'nope'"):
        table.update({"nope": 1}, "k = 2")
    with pytest.raises(InvalidOptionError, match="needs a WHERE"):
        table.delete("")
    with pytest.raises(ExpressionError, match="does not fit column 'w'"):
        table.update({"w": "'text'"}, "k = 2")
    assert sorted(p.name for p in table.path.iterdir()) == before


def test_no_matching_row_changes_nothing(tmp_path: Path) -> None:
    _, table = _catalog_table(tmp_path)
    table.insert(_data(0, 10))
    before = {p.name for p in table.parts()}
    assert table.delete("k > 1000") == []
    assert table.update({"w": 1}, "k > 1000") == []
    assert {p.name for p in table.parts()} == before
    assert not list(table.path.glob("mutation_*.txt"))



def test_a_condition_of_no_column_applies_to_every_row_or_none(tmp_path: Path) -> None:
    # ClickHouse's `DELETE FROM t WHERE 1` deletes every row and `UPDATE ... WHERE 1 = 1` sets every
    # row; a constant false or NULL condition matches none.
    _, table = _catalog_table(tmp_path)
    table.insert(_data(0, 10))
    table.insert(_data(10, 10))
    for nothing in ("0", "NULL", "1 = 2"):
        assert table.delete(nothing) == [] and table.update({"w": 5}, nothing) == []
    assert table.update({"w": 99}, "1 = 1")
    assert set(table.to_arrow(["w"]).column("w").to_pylist()) == {99}
    assert table.delete("1")
    assert table.count() == 0 and table.to_arrow().num_rows == 0

def test_delete_in_a_rolled_back_multi_table_transaction_leaves_nothing(tmp_path: Path) -> None:
    root, table = _catalog_table(tmp_path)
    other = Catalog(root).create_table("db.u", SCHEMA, "k", settings={"auto_merge": False})
    table.insert(_data(0, 50))
    other.insert(_data(0, 50))
    dirs = sorted(p.name for p in table.path.iterdir()), sorted(p.name for p in other.path.iterdir())
    with pytest.raises(RuntimeError, match="boom"):
        with Transaction(table.coordinator) as tx:
            table.delete("k < 10", transaction=tx)
            other.update({"w": 99}, "k < 10", transaction=tx)
            # Invisible outside until commit; visible inside.
            assert table.count() == 50 and table.count(transaction=tx) == 40
            assert other.to_arrow(where="w = 99").num_rows == 0
            assert other.to_arrow(where="w = 99", transaction=tx).num_rows == 10
            raise RuntimeError("boom")
    assert table.count() == 50 and other.to_arrow(where="w = 99").num_rows == 0
    assert (sorted(p.name for p in table.path.iterdir()), sorted(p.name for p in other.path.iterdir())) == dirs
    (count,) = run_chdb(root, "SELECT count() FROM db.t WHERE k < 10")
    assert rows(count) == [["10"]]


def test_multi_table_transaction_commits_both(tmp_path: Path) -> None:
    root, table = _catalog_table(tmp_path)
    other = Catalog(root).create_table("db.u", SCHEMA, "k", settings={"auto_merge": False})
    table.insert(_data(0, 50))
    other.insert(_data(0, 50))
    with Transaction(table.coordinator) as tx:
        table.delete("k < 10", transaction=tx)
        other.update({"w": 99}, "k < 10", transaction=tx)
    assert table.count() == 40 and other.to_arrow(where="w = 99").num_rows == 10
    t_count, u_count = run_chdb(root, "SELECT count() FROM db.t", "SELECT count() FROM db.u WHERE w = 99")
    assert rows(t_count) == [["40"]] and rows(u_count) == [["10"]]


def test_two_mutations_in_one_transaction(tmp_path: Path) -> None:
    """The second mutation rewrites the first's new versions; the parts the transaction itself
    replaced are no part 'committed after its snapshot'."""
    root, table = _catalog_table(tmp_path)
    table.insert(_data(0, 50))
    with Transaction(table.coordinator) as tx:
        table.delete("k < 10", transaction=tx)
        table.update({"w": 99}, "k < 20", transaction=tx)
    assert table.count() == 40 and table.to_arrow(where="w = 99").num_rows == 10
    counts = run_chdb(root, "SELECT count() FROM db.t", "SELECT count() FROM db.t WHERE w = 99")
    assert [rows(c) for c in counts] == [[["40"]], [["10"]]]


def test_time_travel_to_before_the_delete_sees_the_rows(tmp_path: Path) -> None:
    _, table = _catalog_table(tmp_path)
    table.insert(_data(0, 100))
    snapshot = table.coordinator.current_timestamp()
    table.delete("k < 30")
    assert table.count() == 70
    assert table.count(snapshot=snapshot) == 100
    assert _tsv(table.to_arrow(snapshot=snapshot)) == _tsv(_data(0, 100))


def test_delete_racing_a_merge_of_the_same_parts_never_loses_or_resurrects_rows(tmp_path: Path) -> None:
    """Bounded: each round inserts parts, then a delete and an OPTIMIZE FINAL race; whatever wins,
    the table afterwards holds exactly the inserted rows minus the deleted ones (if the delete
    committed), and a loser fails with SerializationError and leaves nothing."""
    _, table = _catalog_table(tmp_path)
    expected = _data(0, 1).slice(0, 0)
    deadline = time.monotonic() + 20
    for round_number in range(6):
        if time.monotonic() > deadline:
            break
        start = round_number * 100
        for chunk in range(3):
            table.insert(_data(start + chunk * 30, 30))
        expected = pa.concat_tables([expected, _data(start, 90)])
        outcome: dict[str, object] = {}

        def merge(outcome: dict[str, object] = outcome) -> None:
            try:
                outcome["merge"] = table.optimize(final=True)
            except SerializationError as error:
                outcome["merge"] = error

        def delete(start: int = start, outcome: dict[str, object] = outcome) -> None:
            try:
                outcome["delete"] = table.delete(f"k >= {start} AND k % 5 = 0")
            except SerializationError as error:
                outcome["delete"] = error

        threads = [threading.Thread(target=merge), threading.Thread(target=delete)][::1 if round_number % 2 else -1]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        if not isinstance(outcome["delete"], SerializationError):
            keys = expected["k"]
            gone = pc.and_(pc.greater_equal(keys, start),
                           pc.equal(pc.subtract(keys, pc.multiply(pc.divide(keys, 5), 5)), 0))
            expected = expected.filter(pc.invert(gone))
        assert _tsv(table.to_arrow()) == _tsv(expected), outcome
        assert table.check().ok
    table.optimize(final=True)
    assert _tsv(table.to_arrow()) == _tsv(expected)


def test_delete_in_a_transaction_fails_cleanly_when_a_merge_replaced_its_parts(tmp_path: Path) -> None:
    _, table = _catalog_table(tmp_path)
    table.insert(_data(0, 40))
    table.insert(_data(40, 40))
    tx = Transaction(table.coordinator)
    tx.visible_parts(table.log)  # the snapshot is taken
    table.optimize(final=True)  # commits a merge of the parts the delete will want to replace
    merged = {p.name for p in table.parts()}
    with pytest.raises(SerializationError):
        table.delete("k < 10", transaction=tx)
    assert tx.state == "aborted"
    assert {p.name for p in table.parts()} == merged and table.count() == 80
    assert not list(table.path.glob("mutation_*.txt"))
    assert not [p for p in table.path.iterdir() if p.name.startswith("staged_")]


def test_delete_refuses_to_miss_an_insert_committed_after_its_snapshot(tmp_path: Path) -> None:
    """ClickHouse applies mutation N to every part below version N: a part committed after the
    mutation's snapshot with a lower block would be deleted from by ClickHouse and not by us."""
    _, table = _catalog_table(tmp_path)
    table.insert(_data(0, 40))
    tx = Transaction(table.coordinator)
    tx.visible_parts(table.log)
    table.insert(_data(40, 40))
    with pytest.raises(SerializationError, match="committed after this transaction's snapshot"):
        table.delete("k % 2 = 0", transaction=tx)
    assert tx.state == "aborted" and table.count() == 80
    # Without a transaction of the caller's, the delete runs again on a new snapshot.
    table.delete("k % 2 = 0")
    inserted = _data(0, 80)
    assert _tsv(table.to_arrow()) == _tsv(inserted.filter(pc.equal(pc.bit_wise_and(inserted["k"], 1), 1)))


def test_our_delete_and_update_on_a_table_clickhouse_wrote_and_deleted_from(tmp_path: Path) -> None:
    """(a) ClickHouse's DELETE, then ours, on its Compact parts: ClickHouse restarted on the
    directory returns the rows we return, checks the parts, and merges them to the same rows."""
    from tests.format.chdb_util import close_session, make_chdb_table

    create = ("CREATE TABLE t (k UInt64, v String) ENGINE = MergeTree ORDER BY k "
              "SETTINGS index_granularity = 128, min_parts_to_merge_at_once = 1000")
    sess, data_dir = make_chdb_table(tmp_path, create, [
        "INSERT INTO t SELECT number, toString(number) FROM numbers(1000)",
        "INSERT INTO t SELECT number + 1000, toString(number) FROM numbers(500)",
        "DELETE FROM t WHERE k % 4 = 1",
    ])
    statement = sess.query("SHOW CREATE TABLE t", "TabSeparatedRaw").bytes().decode()
    close_session()
    table = MergeTreeTable.open(data_dir, create_statement=statement)
    table.delete("k % 4 = 2 AND k < 1200")
    table.update({"v": "'u'"}, "k < 20")
    ours = _tsv(table.to_arrow())
    assert len(ours) == 1500 - 375 - 300 and table.check().ok
    check, select, pending, _, merged = run_chdb(
        tmp_path / "chdb", "CHECK TABLE t SETTINGS check_query_single_value_result = 1", "SELECT * FROM t ORDER BY k",
        "SELECT count() FROM system.mutations WHERE table = 't' AND NOT is_done",
        "OPTIMIZE TABLE t FINAL", "SELECT * FROM t ORDER BY k")
    assert rows(check) == [["1"]] and rows(pending) == [["0"]]
    assert rows(select) == ours == rows(merged)


def test_parts_without_matching_rows_get_hard_links_on_a_single_disk(tmp_path: Path) -> None:
    _, table = _catalog_table(tmp_path)
    table.insert(_data(0, 100))
    (old,) = [p.name for p in table.parts() if p.partition_id == "0"]
    new = table.delete("k = 1")  # partition 1 only
    (copied,) = [name for name in new if PartInfo.parse(name).partition_id == "0"]
    for file in (table.path / old).iterdir():
        assert (table.path / copied / file.name).stat().st_ino == file.stat().st_ino


def test_a_first_delete_adds_only_the_mask_beside_hard_links(tmp_path: Path) -> None:
    """As ClickHouse leaves a Wide part after a lightweight DELETE: `_row_exists.bin` + marks, a new
    columns.txt and checksums.txt; every other file is the old part's (hard links)."""
    root, table = _catalog_table(tmp_path, min_bytes_for_wide_part=0)
    table.insert(_data(0, 100))
    (old,) = [p.name for p in table.parts() if p.partition_id == "1"]
    new = table.delete("k = 1")
    (masked,) = [name for name in new if PartInfo.parse(name).partition_id == "1"]
    files = {p.name for p in (table.path / masked).iterdir()}
    assert files == {p.name for p in (table.path / old).iterdir()} | {"_row_exists.bin", "_row_exists.mrk2"}
    for name in files - {"_row_exists.bin", "_row_exists.mrk2", "checksums.txt", "columns.txt"}:
        assert (table.path / masked / name).stat().st_ino == (table.path / old / name).stat().st_ino
    assert (table.path / masked / "columns.txt").read_text().endswith("`_row_exists` UInt8\n")
    check, count = run_chdb(root, "CHECK TABLE db.t SETTINGS check_query_single_value_result = 1",
                            "SELECT count() FROM db.t WHERE k = 1")
    assert rows(check) == [["1"]] and rows(count) == [["0"]]


def test_updates_of_every_kind_of_column_read_the_same_in_clickhouse(tmp_path: Path) -> None:
    """LowCardinality, Nullable (set to NULL, and NULL + 1), Date, Array and Decimal columns."""
    root = tmp_path / "root"
    cat = Catalog(root)
    cat.create_database("db")
    table = cat.create_table("db.t", [("k", "UInt64"), ("lc", "LowCardinality(String)"), ("n", "Nullable(Int32)"),
                                      ("d", "Date"), ("a", "Array(UInt8)"), ("dec", "Decimal(10, 2)")], "k",
                             settings={"auto_merge": False})
    table.insert(pa.table({
        "k": pa.array(range(6), pa.uint64()), "lc": ["a", "b", "a", "c", "b", "c"],
        "n": pa.array([1, None, 3, 4, 5, 6], pa.int32()),
        "d": pa.array([19000 + i for i in range(6)], pa.int32()).cast(pa.date32()),
        "a": pa.array([[1], [2, 3], [], [4], [5], [6]], pa.list_(pa.uint8())),
        "dec": pa.array(["1.00", "2.00", "3.00", "4.00", "5.00", "6.00"]).cast(pa.decimal128(10, 2))}))
    for assignment, where in [({"lc": "'z'"}, "k >= 3"), ({"n": None}, "k = 4"), ({"n": "n + 1"}, "k >= 4"),
                              ({"d": "'2025-02-03'"}, "k = 5"), ({"dec": "1.5"}, "lc = 'z'"), ({"a": [9]}, "k < 2")]:
        table.update(assignment, where)
    table.delete("lc = 'b'")

    def text(value: object) -> str:
        if value is None:
            return "\\N"
        if isinstance(value, list):
            return "[" + ",".join(map(str, value)) + "]"
        return f"{float(value):g}" if type(value).__name__ == "Decimal" else str(value)

    ours = [[text(v) for v in row.values()] for row in table.to_arrow().sort_by("k").to_pylist()]
    assert len(ours) == 5
    (select,) = run_chdb(root, "SELECT k, lc, n, d, a, toFloat64(dec) FROM db.t ORDER BY k")
    assert rows(select) == ours


def test_delete_racing_an_overwrite_never_resurrects_replaced_rows(tmp_path: Path) -> None:
    _, table = _catalog_table(tmp_path)
    table.insert(_data(0, 50))
    tx = Transaction(table.coordinator)
    tx.visible_parts(table.log)
    table.overwrite(_data(1000, 20))  # replaces every part the delete would give a new version
    with pytest.raises(SerializationError):
        table.delete("k % 2 = 0", transaction=tx)
    assert _tsv(table.to_arrow()) == _tsv(_data(1000, 20))
    # And the other way round: the overwrite loses to a delete holding the removal locks.
    tx = Transaction(table.coordinator)
    table.delete("k % 2 = 0", transaction=tx)
    with pytest.raises(SerializationError):
        table.overwrite(_data(2000, 5))
    tx.commit()
    expected = _data(1000, 20)
    assert _tsv(table.to_arrow()) == _tsv(expected.filter(pc.equal(pc.bit_wise_and(expected["k"], 1), 1)))


def test_mutations_keep_skip_indexes_usable_and_clickhouse_agrees(tmp_path: Path) -> None:
    from spark_mergetree.expressions.ddl import parse_create

    root = tmp_path / "root"
    cat = Catalog(root)
    cat.create_database("db")
    table = cat.create_table("db.t", parse_create(
        "CREATE TABLE db.t (k UInt64, v String, INDEX iv v TYPE bloom_filter GRANULARITY 1) ENGINE = MergeTree "
        "ORDER BY k SETTINGS index_granularity = 16"), settings={"auto_merge": False})
    table.insert(pa.table({"k": pa.array(range(100), pa.uint64()), "v": [f"s{i}" for i in range(100)]}))
    table.delete("k < 10")  # the mask beside the part's files, its index files kept
    assert any(p.name.startswith("skp_idx_iv") for p in (table.path / table.parts()[0].name).iterdir())
    table.update({"v": "'zz'"}, "k = 50")  # rewritten: the index is built again from the new values
    plan = table.explain("v = 'zz'")
    assert plan.granules_read == 1 and table.to_arrow(where="v = 'zz'")["k"].to_pylist() == [50]
    assert table.explain("v = 's60'").granules_read == 1
    check, zz, count = run_chdb(root, "CHECK TABLE db.t SETTINGS check_query_single_value_result = 1",
                                "SELECT k FROM db.t WHERE v = 'zz'", "SELECT count() FROM db.t")
    assert rows(check) == [["1"]] and rows(zz) == [["50"]] and rows(count) == [["90"]]

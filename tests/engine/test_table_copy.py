"""A table directory copied with `cp -a` is a new table: on its first write it gets an id of its own
(the id names the table's state at the coordinator), so nothing done to the copy touches the
original. A renamed directory keeps its id. `MergeTreeTable.clone` / `mergetree clone` is the
supported way to copy a table."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest
from click.testing import CliRunner

from spark_mergetree import MergeTreeTable, Transaction
from spark_mergetree.cli import main
from spark_mergetree.errors import TableExistsError
from spark_mergetree.txn import TableLog

SCHEMA = [("id", "UInt64"), ("v", "Int64")]


def _rows(*ids: int) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.uint64()), "v": pa.array([i * 10 for i in ids], pa.int64())})


def _table(path: Path, inserts: int = 3) -> MergeTreeTable:
    table = MergeTreeTable.create(path, SCHEMA, "id", settings={"auto_merge": False})
    for i in range(inserts):
        table.insert(_rows(i))
    return table


def _ids(table: MergeTreeTable) -> list[int]:
    return sorted(table.to_arrow(["id"]).column("id").to_pylist())


def _values(table: MergeTreeTable) -> dict[int, int]:
    read = table.to_arrow(["id", "v"])
    return dict(zip(read.column("id").to_pylist(), read.column("v").to_pylist()))


def _identity(path: Path) -> dict:
    return json.loads((path / "_mergetree" / "log" / "table.json").read_text())


def _cp(source: Path, target: Path) -> None:
    subprocess.run(["cp", "-a", str(source), str(target)], check=True)


def test_merging_a_copy_leaves_the_original_writable(tmp_path: Path) -> None:
    original = _table(tmp_path / "events")
    _cp(original.path, tmp_path / "events_copy")
    copy = MergeTreeTable.open(tmp_path / "events_copy")
    assert len(copy.optimize(final=True)) == 1
    # Every kind of removal in the original: merge, DELETE, UPDATE (each failed with
    # SerializationError when the copy shared the original's id).
    original = MergeTreeTable.open(tmp_path / "events")
    assert original.delete("id = 1")
    assert original.update({"v": "v + 1"}, "id = 2")
    assert len(original.optimize(final=True)) == 1
    assert _values(original) == {0: 0, 2: 21}
    assert _values(copy) == {0: 0, 1: 10, 2: 20}
    # and the other way round: the copy's later writes are its own
    copy.delete("id = 0")
    copy.insert(_rows(7))
    assert _ids(copy) == [1, 2, 7]
    assert _values(original) == {0: 0, 2: 21}
    assert _identity(copy.path)["table_id"] != _identity(original.path)["table_id"]
    assert _identity(copy.path)["copied_from"] == {"table_id": _identity(original.path)["table_id"],
                                                   "location": str(original.path)}


def test_a_copy_is_rekeyed_before_its_cleanup_touches_the_coordinator(tmp_path: Path) -> None:
    original = _table(tmp_path / "events")
    original.optimize(final=True)  # removes the three inserted parts
    _cp(original.path, tmp_path / "copy")
    copy = MergeTreeTable.open(tmp_path / "copy")
    copy.metadata.engine_settings["old_parts_lifetime"] = 0
    copy.cleanup()  # dropping the copy's removal records must not drop the original's
    assert _identity(copy.path)["table_id"] != _identity(original.path)["table_id"]
    original.insert(_rows(5))
    assert len(original.optimize(final=True)) == 1
    assert _ids(original) == [0, 1, 2, 5]


def test_a_renamed_table_keeps_its_id_and_its_history(tmp_path: Path) -> None:
    table = _table(tmp_path / "a")
    before = _identity(table.path)
    snapshot = table.coordinator.current_timestamp()
    table.insert(_rows(9))
    os.rename(tmp_path / "a", tmp_path / "b")
    moved = MergeTreeTable.open(tmp_path / "b")
    assert moved.delete("id = 0")
    assert len(moved.optimize(final=True)) == 1
    after = _identity(moved.path)
    assert after["table_id"] == before["table_id"] and "copied_from" not in after
    assert after["location"] == str(tmp_path / "b")
    assert _ids(moved) == [1, 2, 9]
    assert sorted(moved.to_arrow(["id"], snapshot=snapshot).column("id").to_pylist()) == [0, 1, 2]


def test_a_copy_restored_in_place_of_its_original_is_a_new_table(tmp_path: Path) -> None:
    table = _table(tmp_path / "t")
    old_id = _identity(table.path)["table_id"]
    _cp(table.path, tmp_path / "backup")
    os.rename(tmp_path / "t", tmp_path / "t_old")  # the original, renamed: keeps its id
    _cp(tmp_path / "backup", tmp_path / "t")  # the backup, restored at the original's path
    restored = MergeTreeTable.open(tmp_path / "t")
    restored.optimize(final=True)
    assert _identity(restored.path)["table_id"] != old_id
    old = MergeTreeTable.open(tmp_path / "t_old")
    assert len(old.optimize(final=True)) == 1
    assert _identity(old.path)["table_id"] == old_id
    assert _ids(old) == _ids(restored) == [0, 1, 2]


def test_processes_writing_to_a_copy_at_once_agree_on_its_new_id(tmp_path: Path, private_coordinator: str) -> None:
    original = _table(tmp_path / "events")
    _cp(original.path, tmp_path / "copy")
    script = ("import sys; from spark_mergetree.txn import TableLog; "
              "print(TableLog(sys.argv[1]).bind(sys.argv[2]))")
    processes = [subprocess.Popen([sys.executable, "-c", script, str(tmp_path / "copy"), private_coordinator],
                                  stdout=subprocess.PIPE, text=True) for _ in range(4)]
    ids = {process.communicate(timeout=120)[0].strip() for process in processes}
    assert all(process.returncode == 0 for process in processes)
    assert ids == {_identity(tmp_path / "copy")["table_id"]}
    assert ids != {_identity(original.path)["table_id"]}


def test_a_copy_made_while_a_transaction_runs_leaves_it_to_the_original(tmp_path: Path) -> None:
    original = _table(tmp_path / "events")
    tx = Transaction(original.coordinator)
    original.insert(_rows(4), transaction=tx)
    original.delete("id = 0", transaction=tx)  # pending entry: adds a part and removes others
    _cp(original.path, tmp_path / "copy")
    copy = MergeTreeTable.open(tmp_path / "copy")
    copy.insert(_rows(6))  # re-keys the copy: the running transaction's changes are not the copy's
    tx.commit()
    assert _ids(original) == [1, 2, 4]
    assert _ids(copy) == [0, 1, 2, 6]
    assert len(copy.optimize(final=True)) == 1
    assert _ids(copy) == [0, 1, 2, 6]


def test_a_table_bound_before_locations_were_recorded_records_its_own(tmp_path: Path) -> None:
    table = _table(tmp_path / "t")
    identity_path = table.path / "_mergetree" / "log" / "table.json"
    legacy = {key: value for key, value in _identity(table.path).items() if key not in ("location", "inode")}
    identity_path.write_text(json.dumps(legacy))
    assert TableLog(table.path).bind(table.coordinator.url) == legacy["table_id"]
    assert _identity(table.path)["location"] == str(table.path)


def test_clone_holds_the_current_rows_as_a_new_table(tmp_path: Path) -> None:
    source = _table(tmp_path / "events")
    source.optimize(final=True)  # leaves removed parts in the directory until cleanup
    source.insert(_rows(3))
    snapshot = source.coordinator.current_timestamp()
    clone = source.clone(tmp_path / "events_clone")
    visible = source.visible_parts()[1]
    assert {p.name for p in clone.path.iterdir() if "_" in p.name and p.is_dir() and p.name[0].isalnum()} == visible
    assert clone.visible_parts()[1] == visible
    assert clone.uuid != source.uuid and _identity(clone.path)["table_id"] != _identity(source.path)["table_id"]
    assert _identity(clone.path)["coordinator"] == _identity(source.path)["coordinator"]
    part = sorted(visible)[0]
    assert (os.stat(clone.path / part / "checksums.txt").st_ino
            == os.stat(source.path / part / "checksums.txt").st_ino)  # hard links
    assert _values(clone) == _values(source)
    # Writes to either never affect the other.
    source.delete("id = 1")
    source.optimize(final=True)
    clone.update({"v": "v * 2"}, "id = 2")
    clone.insert(_rows(8))
    clone.optimize(final=True)
    assert _values(source) == {0: 0, 2: 20, 3: 30}
    assert _values(clone) == {0: 0, 1: 10, 2: 40, 3: 30, 8: 80}
    assert sorted(source.to_arrow(["id"], snapshot=snapshot).column("id").to_pylist()) == [0, 1, 2, 3]
    with pytest.raises(TableExistsError, match="a table already exists there"):
        source.clone(tmp_path / "events_clone")


def test_clone_copies_files_onto_another_file_system(tmp_path: Path) -> None:
    shm = Path("/dev/shm")
    if not shm.is_dir() or os.stat(shm).st_dev == os.stat(tmp_path).st_dev:
        pytest.skip("no second file system at /dev/shm")
    source = _table(tmp_path / "events")
    target = shm / f"clone-{os.getpid()}-{tmp_path.name}"
    try:
        clone = source.clone(target)
        part = sorted(source.visible_parts()[1])[0]
        assert os.stat(target / part / "checksums.txt").st_nlink == 1
        assert _values(clone) == _values(source)
        clone.insert(_rows(5))
        assert _ids(clone) == [0, 1, 2, 5] and _ids(source) == [0, 1, 2]
    finally:
        subprocess.run(["rm", "-rf", str(target)], check=True)


def test_mergetree_clone_command(tmp_path: Path) -> None:
    source = _table(tmp_path / "events")
    result = CliRunner().invoke(main, ["clone", str(source.path), str(tmp_path / "copy")], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert f"into {tmp_path / 'copy'}" in result.output
    copy = MergeTreeTable.open(tmp_path / "copy")
    assert _ids(copy) == [0, 1, 2]
    copy.optimize(final=True)
    assert len(source.optimize(final=True)) == 1
    again = subprocess.run([sys.executable, "-m", "spark_mergetree", "clone", str(source.path), str(tmp_path / "copy")],
                           capture_output=True, text=True, timeout=120)
    assert again.returncode == 2
    assert again.stderr.strip() == f"error: cannot clone into {tmp_path / 'copy'}: a table already exists there"

"""ALTER TABLE ADD / MATERIALIZE / DROP / CLEAR PROJECTION on our tables, against ClickHouse (chdb)
running the same ALTERs on the same rows: the projection files we build into existing parts are
ClickHouse's bytes, ClickHouse attaches our parts (CHECK TABLE) and answers from the projection."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from spark_mergetree import MergeTreeTable
from spark_mergetree.errors import SchemaMismatchError, UnsupportedError
from spark_mergetree.expressions.ddl import parse_create
from tests.format.chdb_util import attach_and_check, close_session, make_chdb_table

# Each insert is a partition of its own: ClickHouse runs mutations only with merges started, and
# then must not merge the two parts.
CREATE = """CREATE TABLE t (id UInt64, k UInt32, s String) ENGINE = MergeTree ORDER BY id PARTITION BY intDiv(id, 400)
    SETTINGS index_granularity = 64, min_bytes_for_wide_part = 0, compress_marks = 0, compress_primary_key = 0"""
ROWS = "SELECT (number * 7919) % {rows} + {offset} AS id, toUInt32((number * 7) % 13) AS k, toString(number % 97) AS s " \
       "FROM numbers({rows})"
PROJECTION = "PROJECTION by_k (SELECT * ORDER BY k)"
NOT_COMPARED = ("serialization.json", "columns_substreams.txt", "checksums.txt")


def _arrow(sess, query: str) -> pa.Table:
    return pa.ipc.open_file(pa.py_buffer(sess.query(query, "Arrow").bytes())).read_all()


def _projection_files(part: Path) -> dict[str, bytes]:
    return {f"{d.name}/{f.name}": f.read_bytes() for d in sorted(part.glob("*.proj")) for f in sorted(d.iterdir())
            if f.name not in NOT_COMPARED}


def _active(sess, table: str) -> list[str]:
    names = sess.query(f"SELECT name FROM system.parts WHERE table = '{table}' AND active ORDER BY name",
                       "TabSeparatedRaw").bytes().decode().split()
    return names


@pytest.fixture
def tables(tmp_path):
    sess, data_dir = make_chdb_table(tmp_path, CREATE)
    sess.query("SYSTEM STOP MERGES t")
    ours = MergeTreeTable.new(tmp_path / "ours", parse_create(sess.query("SHOW CREATE TABLE t", "TabSeparatedRaw")
                                                                 .bytes().decode()), {"auto_merge": False})
    ours.write_directory()
    for offset, rows in ((0, 400), (400, 300)):
        sess.query("INSERT INTO t " + ROWS.format(offset=offset, rows=rows))
        ours.insert(_arrow(sess, ROWS.format(offset=offset, rows=rows)))
    yield sess, data_dir, ours
    close_session()


# A projection of offsets materialized: the part's rows in order, offsets 0, 1, 2, ... sorted by k.
OFFSETS = "PROJECTION by_k INDEX k TYPE basic"


@pytest.mark.parametrize("declaration", [PROJECTION, OFFSETS])
def test_add_and_materialize_build_clickhouses_projection_into_existing_parts(tables, declaration) -> None:
    sess, data_dir, ours = tables
    ours.add_projection(declaration)
    assert all(not table_part_projections(ours, part) for part in ours.parts())  # only the statement changed
    sess.query(f"ALTER TABLE t ADD {declaration}")
    sess.query("SYSTEM START MERGES t")
    sess.query("ALTER TABLE t MATERIALIZE PROJECTION by_k SETTINGS mutations_sync = 1")
    mine = ours.materialize_projection("by_k")
    theirs = {name: data_dir / name for name in _active(sess, "t")}
    assert sorted(mine) == sorted(theirs)  # the same mutation versions
    for name in mine:
        expected = _projection_files(theirs[name])
        assert {key.split("/")[0] for key in expected} == {"by_k.proj"}
        assert _projection_files(ours.path / name) == expected, name
    assert ours.check().ok
    assert sorted(p.name for p in (ours.path).glob("mutation_*.txt"))  # ClickHouse's record of the command

    sess.query("CREATE TABLE attached AS t")
    attach_and_check(sess, "attached", [ours.path / name for name in mine])
    # (a projection of offsets filters the parent's rows: force_optimize_projection does not count it)
    forced = "SELECT id, k, s FROM attached WHERE k = 5 SETTINGS " + (
        "force_optimize_projection = 1" if declaration == PROJECTION else "min_table_rows_to_use_projection_index = 0")
    assert "by_k" in sess.query(f"EXPLAIN projections = 1 {forced}", "TabSeparatedRaw").bytes().decode()
    answer = _arrow(sess, forced).sort_by("id")
    assert answer.num_rows and answer.to_pylist() == _arrow(sess, "SELECT id, k, s FROM t WHERE k = 5 ORDER BY id").to_pylist()


def table_part_projections(table: MergeTreeTable, part) -> list[str]:
    return table.reader(part.name).projections


def test_drop_and_clear_remove_the_projection_from_every_part(tables) -> None:
    _, _, ours = tables
    ours.add_projection(PROJECTION)
    ours.materialize_projection("by_k")
    assert all(table_part_projections(ours, part) == ["by_k"] for part in ours.parts())

    cleared = ours.clear_projection("by_k")  # the declaration stays: new parts carry it again
    assert cleared and all(not table_part_projections(ours, part) for part in ours.parts())
    assert [p.name for p in ours.metadata.projections] == ["by_k"]
    (new_part,) = ours.insert(pa.table({"id": pa.array([5000], pa.uint64()), "k": pa.array([1], pa.uint32()),
                                         "s": ["x"]}))
    assert ours.reader(new_part).projections == ["by_k"]

    rows = ours.to_arrow().num_rows
    dropped = ours.drop_projection("by_k")
    assert dropped and all(not table_part_projections(ours, part) for part in ours.parts())
    assert ours.metadata.projections == []
    assert not any("by_k" in element for element in MergeTreeTable.open(ours.path).definition.indexes)
    assert ours.to_arrow().num_rows == rows and ours.check().ok


def test_projection_alters_refuse_what_they_cannot_do_before_changing_anything(tables) -> None:
    _, _, ours = tables
    before = ours.definition
    with pytest.raises(UnsupportedError, match="u.*uniqUpTo"):
        ours.add_projection("PROJECTION u (SELECT k, uniqUpTo(3)(id) GROUP BY k)")
    with pytest.raises(SchemaMismatchError, match="no projection named 'nope'"):
        ours.materialize_projection("nope")
    with pytest.raises(SchemaMismatchError, match="no projection named 'nope'"):
        ours.drop_projection("nope")
    ours.add_projection(PROJECTION)
    with pytest.raises(SchemaMismatchError, match="already has a projection named 'by_k'"):
        ours.add_projection("by_k (SELECT id ORDER BY id)")
    assert MergeTreeTable.open(ours.path).definition.indexes == before.indexes + (PROJECTION,)

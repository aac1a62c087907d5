"""Aggregate projections as ClickHouse users declare them: GROUP BY expressions and Nullable keys,
keys not selected or selected after the aggregates, aliases, no GROUP BY at all, -If conditions, Nullable arguments, and the functions whose states we build
(format/state_builders.py). Our inserted and merged parts carry them under ClickHouse's column
names and types; ClickHouse (chdb) attaches the parts, CHECK TABLE passes, and a query that must use
the projection (force_optimize_projection) returns what the same query over ClickHouse's own rows
returns without projections."""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow as pa
import pytest

from spark_mergetree import MergeTreeTable
from spark_mergetree.engine import projection_merge
from spark_mergetree.errors import UnsupportedError
from spark_mergetree.expressions.ddl import parse_create
from tests.format.chdb_util import attach_and_check, close_session, make_chdb_table, paired_part_dirs

# Each projection with the query that must be answered from it (its select list over the table).
PROJECTIONS = {
    "hourly": ("toStartOfHour(ts), s, count(), countIf(b > 1), sumIf(k, 1 < k AND b > 2.5), sum(b), avg(b), "
               "count(b), min(v), max(k), sum(k), avg(v), sum(k * 2), avg(v / 3), max(k - 1), sum(b * 2), "
               "quantile(0.9)(v), quantiles(0.5, 0.9)(b), quantileExact(k), quantileTDigest(0.25)(v), "
               "quantileTiming(0.5)(k), quantileIf(0.5)(v, k > 3), argMax(s, v), argMin(id, k), min(s), max(ts), "
               "groupArray(k), varPop(v), stddevSampStable(v), covarPop(v, k), sumKahan(v)", "toStartOfHour(ts), s"),
    "by_flag": ("f, sum(v), avg(v), any(id), anyLast(id), min(v), max(v), argMin(id, k), sumKahan(v), count(), "
                "sum(k), max(b), anyLast(s), groupArray(id)", "f"),
    "by_enum": ("e, sum(v), any(id), avg(v), count()", "e"),
    "by_lc": ("lc, count(), uniq(nlc), uniqExact(lc), min(lc), any(nlc), groupArray(nlc), countIf(nlc = 'a3'), "
              "max(nlc)", "lc"),
    "events": ("s, countDistinct(k), count(DISTINCT id), retention(k > 3, k < 5), windowFunnel(3600)(ts, k = 1, k = 2), "
               "sumDistinct(k), topK(3)(k), entropy(k), sequenceCount('(?1)(?2)')(ts, k = 1, k = 2), deltaSum(id), "
               "groupBitOr(k), groupBitmap(k)", "s"),
    "aliased": ("max(v) AS top, count() AS n, toString(k) AS ks", "ks, f"),
    "reordered": ("count(), max(v), k", "k"),
    "by_lower": ("upper(nlc), count(), countIf(length(lc) > 0), countIf(NOT (lc = '1')), min(cityHash64(lc))",
                 "upper(nlc)"),
    "by_null": ("nk, count(), sum(k), min(b), countIf(nk = 1), sum(v), any(id), anyLast(s)", "nk"),
    "totals": ("count(), max(v), sum(id), minIf(k, b > 3)", ""),
    "sets": ("s, uniq(id), uniqExact(k), uniqHLL12(k), uniqCombined(id), uniqCombined64(s), groupUniqArray(k), "
             "uniqIf(id, k > 3), uniqExact(b), uniq(s, k), groupUniqArray(3)(s)", "s"),
}
# Projections whose merged states hold ClickHouse's sets with their cells in another order (uniqExact,
# groupUniqArray of numbers, uniqCombined's hash set): merged, they are compared by their answers,
# arrays sorted.
SET_ORDER_DIFFERS = {"sets", "events"}
CREATE = """CREATE TABLE t (ts DateTime('UTC'), id UInt64, k UInt32, v Float64, b Nullable(Float64), s String,
    nk Nullable(UInt8), f UInt8, e Enum8('x' = -3, 'y' = 5),
    lc LowCardinality(String), nlc LowCardinality(Nullable(String)), {projections})
    ENGINE = MergeTree ORDER BY id
    SETTINGS index_granularity = 64, compress_primary_key = 0, allow_nullable_key = 1, {kind}"""
KINDS = {"Wide": "min_bytes_for_wide_part = 0, compress_marks = 0", "Compact": "min_bytes_for_wide_part = 1000000000"}
ROWS = ("SELECT toDateTime('2024-03-01 00:00:00', 'UTC') + (number * 7919) % 20000 AS ts, number + {offset} AS id, "
        "toUInt32((number * 7) % 13) AS k, (number + {offset}) / 3 AS v, "
        "if(number % 5 = 0, NULL, (number % 17) / 4) AS b, toString((number * 31) % 4) AS s, "
        "if(number % 3 = 0, NULL, toUInt8(number % 2)) AS nk, toUInt8((number * 13) % 3) AS f, "
        "CAST(if(number % 7 < 3, 'x', 'y'), 'Enum8(\\'x\\' = -3, \\'y\\' = 5)') AS e, "
        "toLowCardinality(toString(number % 6)) AS lc, if(number % 4 = 0, NULL, concat('a', toString(number % 9))) AS nlc "
        "FROM numbers({rows})")
INSERTS = ((0, 700), (700, 400))


def _statement(kind: str) -> str:
    projections = ", ".join(f"PROJECTION {name} (SELECT {select}" + (f" GROUP BY {group})" if group else ")")
                            for name, (select, group) in PROJECTIONS.items())
    return CREATE.format(projections=projections, kind=KINDS[kind])


def _arrow(sess, query: str) -> pa.Table:
    return pa.ipc.open_file(pa.py_buffer(sess.query(query, "Arrow").bytes())).read_all()


def _value(v: object, sort_lists: bool) -> object:
    if isinstance(v, float):
        return round(v, 6)
    if isinstance(v, bytes):
        return v.decode()
    return sorted(v, key=repr) if sort_lists and isinstance(v, list) else v


def _rows(data: pa.Table, sort_lists: bool = False) -> list[tuple]:
    columns = [[_value(v, sort_lists) for v in c.to_pylist()] for c in data.columns]
    return sorted(zip(*columns), key=repr)


# A projection ClickHouse 26.9 writes but answers no query from (its aliases, a GROUP BY element not
# selected): its parts are compared byte for byte only.
NOT_USED = {"aliased"}


def _query(name: str, table: str) -> str:
    select, group = PROJECTIONS[name]
    return f"SELECT {select} FROM {table}" + (f" GROUP BY {group}" if group else "")


def _uses_projections(sess, table: str, merged: bool = False) -> None:
    """Each projection answers its query over `table` (ClickHouse refuses otherwise), with what it
    answers from the projections of ClickHouse's own parts of the same rows (`t`)."""
    for name in (p for p in PROJECTIONS if p not in NOT_USED):
        settings = f" SETTINGS force_optimize_projection = 1, preferred_optimize_projection_name = '{name}'"
        explain = sess.query(f"EXPLAIN projections = 1 {_query(name, table)}{settings}", "TabSeparatedRaw").bytes().decode()
        assert name in explain, explain
        unordered = merged and name in SET_ORDER_DIFFERS
        expected = _rows(_arrow(sess, _query(name, "t") + settings), unordered)
        assert _rows(_arrow(sess, _query(name, table) + settings), unordered) == expected, name


@pytest.fixture(scope="module", params=list(KINDS))
def tables(request, tmp_path_factory):
    tmp = tmp_path_factory.mktemp(f"aggproj_{request.param}")
    sess, data_dir = make_chdb_table(tmp, _statement(request.param))
    sess.query("SYSTEM STOP MERGES t")
    statement = sess.query("SHOW CREATE TABLE t", "TabSeparatedRaw").bytes().decode()
    ours = MergeTreeTable.new(tmp / "ours", parse_create(statement), {"auto_merge": False})
    ours.write_directory()
    for offset, rows in INSERTS:
        sess.query("INSERT INTO t " + ROWS.format(offset=offset, rows=rows))
        ours.insert(_arrow(sess, ROWS.format(offset=offset, rows=rows)))
    yield sess, data_dir, ours
    close_session()


def _columns_files(part: Path) -> dict[str, str]:
    return {d.name: (d / "columns.txt").read_text() for d in sorted(part.glob("*.proj"))}


def _same_projections(theirs: Path, mine: Path, merged: bool = False) -> None:
    """Two parts hold projections with the same columns and the same bytes."""
    assert _columns_files(mine) == _columns_files(theirs)
    for projection in PROJECTIONS:
        if merged and projection in SET_ORDER_DIFFERS:
            continue
        files = sorted(f.name for f in (theirs / f"{projection}.proj").iterdir() if f.suffix in (".bin", ".idx"))
        for name in files:
            assert (mine / f"{projection}.proj" / name).read_bytes() == \
                (theirs / f"{projection}.proj" / name).read_bytes(), (mine.name, projection, name)


def test_projection_parts_have_clickhouses_columns_and_bytes(tables) -> None:
    sess, data_dir, ours = tables
    for theirs, mine in paired_part_dirs(data_dir, ours):
        _same_projections(theirs, mine)
    assert ours.check().ok


def _merge_theirs(sess, data_dir: Path) -> Path:
    """ClickHouse's OPTIMIZE FINAL of `t`: its merged part."""
    sess.query("SYSTEM START MERGES t")
    sess.query("OPTIMIZE TABLE t FINAL")
    (merged,) = [p for p in data_dir.iterdir() if p.name == "all_1_2_1"]
    return merged


def test_clickhouse_answers_from_the_projections_of_our_parts(tables) -> None:
    sess, _, ours = tables
    sess.query("CREATE TABLE attached AS t")
    attach_and_check(sess, "attached", [ours.path / part.name for part in ours.parts()])
    _uses_projections(sess, "attached")


def test_merged_parts_carry_the_combined_states(tables) -> None:
    """Our merge combines the states as ClickHouse's merge does: the same bytes (float sums added in
    the same order, reservoirs merged with ClickHouse's generator), the same answers."""
    sess, data_dir, ours = tables
    ours.optimize(final=True)
    (part,) = ours.parts()
    assert ours.check().ok
    _same_projections(_merge_theirs(sess, data_dir), ours.path / part.name, merged=True)
    sess.query("CREATE TABLE merged AS t")
    attach_and_check(sess, "merged", [ours.path / part.name])
    _uses_projections(sess, "merged", merged=True)


def test_we_merge_clickhouses_parts_combining_their_states(tmp_path) -> None:
    """ClickHouse's parts (its states, its hash tables' order) merged by us: the projections of
    ClickHouse's own merge of them."""
    sess, data_dir = make_chdb_table(tmp_path, _statement("Compact"))
    sess.query("SYSTEM STOP MERGES t")
    for offset, rows in INSERTS:
        sess.query("INSERT INTO t " + ROWS.format(offset=offset, rows=rows))
    statement = sess.query("SHOW CREATE TABLE t", "TabSeparatedRaw").bytes().decode()
    copy = tmp_path / "copy"
    shutil.copytree(data_dir, copy)
    table = MergeTreeTable.open(copy, create_statement=statement)
    table.optimize(final=True)
    (part,) = table.parts()
    assert part.name == "all_1_2_1" and table.check().ok
    _same_projections(_merge_theirs(sess, data_dir), copy / part.name, merged=True)
    sess.query("CREATE TABLE merged AS t")
    attach_and_check(sess, "merged", [copy / part.name])
    _uses_projections(sess, "merged", merged=True)
    close_session()


def test_big_merges_combine_states_from_runs(tmp_path, monkeypatch) -> None:
    """Above projection_merge.RUN_BYTES the sources' states are combined a window of keys at a time
    (bounded memory): the same answers."""
    sess, _ = make_chdb_table(tmp_path, _statement("Wide"))
    statement = sess.query("SHOW CREATE TABLE t", "TabSeparatedRaw").bytes().decode()
    ours = MergeTreeTable.new(tmp_path / "ours", parse_create(statement), {"auto_merge": False})
    ours.write_directory()
    for offset, rows in INSERTS:
        sess.query("INSERT INTO t " + ROWS.format(offset=offset, rows=rows))
        ours.insert(_arrow(sess, ROWS.format(offset=offset, rows=rows)))
    monkeypatch.setattr(projection_merge, "RUN_BYTES", 1)
    combined = []
    real = projection_merge.projections.combined_states
    monkeypatch.setattr(projection_merge.projections, "combined_states",
                        lambda *args: combined.append(args[0].name) or real(*args))
    ours.optimize(final=True)
    assert set(combined) == set(PROJECTIONS)
    sess.query("OPTIMIZE TABLE t FINAL")
    sess.query("CREATE TABLE merged AS t")
    attach_and_check(sess, "merged", [ours.path / part.name for part in ours.parts()])
    _uses_projections(sess, "merged", merged=True)
    close_session()


def test_projections_that_cannot_be_built_are_refused_by_name(tmp_path) -> None:
    columns = [("k", "UInt32"), ("v", "Float64"), ("s", "String")]
    for projection, reason in (("p (SELECT k, uniqUpTo(3)(v) GROUP BY k)", "uniqUpTo"),
                               ("p (SELECT k, max(reverse(s)) GROUP BY k)", "reverse"),
                               ("p (SELECT k, sum(v * k * s) GROUP BY k)", "v \\* k \\* s"),
                               ("p (SELECT k, sum(v) GROUP BY k ORDER BY k)", "ORDER BY"),
                               ("p (SELECT s, sum(v) GROUP BY k)", "s is selected outside GROUP BY")):
        with pytest.raises(UnsupportedError, match=rf"'p': .*{reason}"):
            MergeTreeTable.create(tmp_path / "x", columns, "k", projections=[projection])
        assert not (tmp_path / "x").exists()

"""A Spark write into a table that declares projections: every part holds them, ClickHouse attaches
the parts (CHECK TABLE) and answers from the projections what it answers from the base columns."""

from __future__ import annotations

import pytest

from tests.format.chdb_util import attach_and_check, close_session, make_chdb_table

pytestmark = pytest.mark.spark

CREATE = """CREATE TABLE t (k UInt64, g UInt32, v Int64,
    PROJECTION by_v (SELECT * ORDER BY v),
    PROJECTION per_g (SELECT g, sum(v), count(), uniq(k), quantile(0.9)(v), min(k), countIf(v > 0) GROUP BY g))
    ENGINE = MergeTree ORDER BY k SETTINGS index_granularity = 128"""


def test_spark_writes_parts_with_the_tables_projections(spark, tmp_path) -> None:
    from spark_mergetree import MergeTreeTable
    from spark_mergetree.expressions.ddl import parse_create

    sess, _ = make_chdb_table(tmp_path, CREATE)
    statement = sess.query("SHOW CREATE TABLE t", "TabSeparatedRaw").bytes().decode()
    ours = MergeTreeTable.new(tmp_path / "ours", parse_create(statement), {"auto_merge": False})
    ours.write_directory()
    rows = spark.range(3000).selectExpr("cast(id as long) as k", "cast(id % 17 as int) as g",
                                        "cast(id * 7919 % 1009 as long) - 500 as v")
    rows.repartition(2).write.format("mergetree").mode("append").save(str(ours.path))
    parts = [p.name for p in ours.parts()]
    assert len(parts) >= 2
    for name in parts:
        assert ours.reader(name).projections == ["by_v", "per_g"]
    attach_and_check(sess, "t", [ours.path / name for name in parts])
    try:
        for query in ("SELECT g, sum(v), count(), uniq(k), quantile(0.9)(v), min(k), countIf(v > 0) FROM t "
                      "GROUP BY g ORDER BY g",
                      "SELECT k, g, v FROM t WHERE v = 3"):
            forced = sess.query(f"{query} SETTINGS force_optimize_projection = 1", "TabSeparatedRaw").bytes()
            plain = sess.query(f"{query} SETTINGS optimize_use_projections = 0", "TabSeparatedRaw").bytes()
            assert sorted(forced.split(b"\n")) == sorted(plain.split(b"\n")) and forced.strip(), query
    finally:
        close_session()


def test_spark_write_creates_a_table_with_projections(spark, tmp_path) -> None:
    """Option `projections` declares them on the table the first write creates; an aggregate we
    cannot build is refused before anything is written."""
    from spark_mergetree import MergeTreeTable

    rows = spark.range(200).selectExpr("cast(id as long) as k", "cast(id % 7 as int) as g")
    target = str(tmp_path / "t")
    with pytest.raises(Exception, match="uniqUpTo"):
        (rows.write.format("mergetree").mode("append").option("order_by", "(g, k)")
         .option("projections", "u (SELECT g, uniqUpTo(3)(k) GROUP BY g)").save(target))
    assert not (tmp_path / "t" / "_mergetree" / "table.sql").exists()
    (rows.write.format("mergetree").mode("append").option("order_by", "(g, k)")
     .option("projections", "by_g (SELECT * ORDER BY g); n (SELECT g, count() GROUP BY g)").save(target))
    table = MergeTreeTable.open(target)
    assert [p.name for p in table.metadata.projections] == ["by_g", "n"]
    assert all(table.reader(p.name).projections == ["by_g", "n"] for p in table.parts())
    assert table.check().ok


def test_a_filter_on_a_projection_key_reads_the_projections_granules(spark, tmp_path) -> None:
    """`load(p).filter(k == v)` on a normal projection's key: Spark's pushed filter plans the scan
    through the projection (engine/projection_reads.py), so the scan hands Spark the rows of the
    projection's granules the engine's own plan names, fewer than the same table without the
    projection hands it, and the query returns the same rows."""
    import numpy as np
    import pyarrow as pa

    from spark_mergetree import MergeTreeTable
    from spark_mergetree.spark.filters import FILTER_PUSHDOWN
    from tests.spark.test_pushdown import _collect_with_scan_rows, _mode

    columns = [("id", "UInt64"), ("k", "UInt32"), ("v", "Float64")]
    settings = {"index_granularity": 128, "auto_merge": False}
    table = MergeTreeTable.create(tmp_path / "t", columns, "id", settings=settings,
                                  projections=["PROJECTION by_k (SELECT * ORDER BY k)"])
    plain = MergeTreeTable.create(tmp_path / "plain", columns, "id", settings=settings)
    rng = np.random.default_rng(7)
    for start in (0, 30_000):
        rows = pa.table({"id": np.arange(start, start + 30_000, dtype=np.uint64),
                         "k": rng.integers(0, 1000, 30_000).astype(np.uint32), "v": rng.random(30_000)})
        table.insert(rows)
        plain.insert(rows)
    with _mode(spark, "true", "true"):
        for where, selected in [("k = 17", ["id", "k", "v"]), ("k IN (3, 999) AND v > 0.5", ["id", "k", "v"]),
                                ("k BETWEEN 10 AND 12", ["id", "k"])]:
            ours, scanned = _collect_with_scan_rows(
                spark.read.format("mergetree").load(str(table.path)).filter(where).select(*selected))
            theirs, plain_scanned = _collect_with_scan_rows(
                spark.read.format("mergetree").load(str(plain.path)).filter(where).select(*selected))
            expected = table.to_arrow(selected, where=where, use_projections=False)
            assert sorted(tuple(r) for r in ours) == sorted(tuple(r) for r in theirs) == \
                sorted(zip(*(c.to_pylist() for c in expected.columns))), where
            through = table.explain(where, columns=selected)
            assert through.projection == "by_k", where
            own = table.explain(where, columns=selected, use_projections=False)
            assert through.granules_read < own.granules_read
            if FILTER_PUSHDOWN:
                assert scanned == sum(task.rows for task in through.tasks), where
                assert plain_scanned == sum(task.rows for task in own.tasks) > scanned, where


def test_use_projections_false_reads_the_parts_own_granules(spark, tmp_path) -> None:
    """`option("useProjections", "false")` is ClickHouse's optimize_use_projections = 0: the same
    filter on a projection's key reads the parts' own granules (more rows handed to Spark than by
    default, the rows the engine's plan without projections names) and returns the same rows."""
    import numpy as np
    import pyarrow as pa

    from spark_mergetree import MergeTreeTable
    from spark_mergetree.errors import InvalidOptionError
    from spark_mergetree.spark.filters import FILTER_PUSHDOWN
    from tests.spark.test_pushdown import _collect_with_scan_rows, _mode

    table = MergeTreeTable.create(tmp_path / "t", [("id", "UInt64"), ("k", "UInt32"), ("v", "Float64")], "id",
                                  settings={"index_granularity": 128, "auto_merge": False},
                                  projections=["PROJECTION by_k (SELECT * ORDER BY k)"])
    rng = np.random.default_rng(11)
    table.insert(pa.table({"id": np.arange(40_000, dtype=np.uint64),
                           "k": rng.integers(0, 1000, 40_000).astype(np.uint32), "v": rng.random(40_000)}))
    where = "k BETWEEN 20 AND 21"
    with _mode(spark, "true", "true"):
        through, through_scanned = _collect_with_scan_rows(
            spark.read.format("mergetree").load(str(table.path)).filter(where))
        own, own_scanned = _collect_with_scan_rows(
            spark.read.format("mergetree").option("useProjections", "false").load(str(table.path)).filter(where))
    expected = table.to_arrow(["id", "k", "v"], where=where, use_projections=False)
    assert sorted(tuple(r) for r in through) == sorted(tuple(r) for r in own) == \
        sorted(zip(*(c.to_pylist() for c in expected.columns)))
    assert len(own) > 0
    if FILTER_PUSHDOWN:
        by_projection = table.explain(where, columns=["id", "k", "v"])
        by_parts = table.explain(where, columns=["id", "k", "v"], use_projections=False)
        assert by_projection.projection == "by_k" and by_parts.projection is None
        assert through_scanned == sum(task.rows for task in by_projection.tasks) < own_scanned
        assert own_scanned == sum(task.rows for task in by_parts.tasks)
    with pytest.raises(Exception, match="useProjections|useprojections") as refused:
        spark.read.format("mergetree").option("useProjections", "maybe").load(str(table.path)).collect()
    assert "InvalidOptionError" in str(refused.value) or isinstance(refused.value, InvalidOptionError)

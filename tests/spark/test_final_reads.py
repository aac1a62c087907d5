"""Spark writes a ReplacingMergeTree table (option `engine`) in several appends and reads it with
option `final`: exactly ClickHouse's `SELECT ... FINAL` rows for the same inserts (chdb)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.format.chdb_util import close_session, make_chdb_table

pytestmark = pytest.mark.spark

SCHEMA = "k long not null, v long not null, x long not null, name string not null"


def _batches() -> list[pa.Table]:
    rng = np.random.default_rng(7)
    out = []
    for size in (200, 150, 100):
        out.append(pa.table({"k": rng.integers(0, 80, size), "v": rng.integers(0, 3, size),
                             "x": rng.integers(-5, 6, size), "name": [f"n{i}" for i in rng.integers(0, 999, size)]}))
    return out


def _sorted(rows: Iterable[Any]) -> list[tuple]:
    return sorted(tuple(r) for r in rows)


def test_spark_final_reads_match_clickhouse(spark, tmp_path: Path) -> None:
    batches = _batches()
    inserts = []
    for number, batch in enumerate(batches):
        pq.write_table(batch, tmp_path / f"b{number}.parquet")
        inserts.append(f"INSERT INTO t SELECT k, v, x, name FROM file('{tmp_path}/b{number}.parquet', Parquet)")
    sess, _ = make_chdb_table(tmp_path, "CREATE TABLE t (k Int64, v Int64, x Int64, name String) "
                              "ENGINE = ReplacingMergeTree(v) PARTITION BY k % 3 ORDER BY k "
                              "SETTINGS min_parts_to_merge_at_once = 1000", inserts)
    text = sess.query("SELECT k, v, x, name FROM t FINAL", "JSONCompactEachRow").bytes().decode()
    expected = _sorted(json.loads(line) for line in text.splitlines())
    expected_filtered = [row for row in expected if row[2] > 0]
    close_session()

    path = str(tmp_path / "ours")
    for batch in batches:
        df = spark.createDataFrame([tuple(r.values()) for r in batch.to_pylist()], SCHEMA)
        (df.write.format("mergetree").mode("append").option("order_by", "k").option("partition_by", "k % 3")
         .option("engine", "ReplacingMergeTree(v)").option("setting.auto_merge", "false").save(path))
    plain = spark.read.format("mergetree").load(path)
    assert plain.count() > len(expected)  # the parts still hold replaced rows
    final = spark.read.format("mergetree").option("final", "true").load(path)
    assert _sorted(final.collect()) == expected
    # a filter on a non-key column applies to FINAL's rows, never prunes the rows that replace others
    assert _sorted(final.filter("x > 0").collect()) == expected_filtered

    with pytest.raises(Exception, match="engine"):
        (spark.createDataFrame([(1, 1, 1, "a")], SCHEMA).write.format("mergetree").mode("append")
         .option("engine", "SummingMergeTree").save(path))

"""MergeTreeTable behaviour: round trips, partitions, pruning, merges, errors, corruption, concurrency."""

from __future__ import annotations

import datetime as dt
import json
import multiprocessing
import os
import random
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spark_mergetree import (
    CorruptPartError,
    InvalidOptionError,
    MergeTreeTable,
    SchemaMismatchError,
    TableExistsError,
    TableNotFoundError,
)
from spark_mergetree.errors import ExpressionError, UnsupportedError
from spark_mergetree.format.checksums import Checksums, compute_file_checksum
from spark_mergetree.format.part_info import PartInfo
from spark_mergetree.txn import Transaction

COLUMNS = [("id", "UInt64"), ("d", "Date"), ("name", "String"), ("score", "Nullable(Float64)")]


def rows(start: int, count: int, seed: int = 0) -> pa.Table:
    rng = np.random.default_rng(seed)
    ids = np.arange(start, start + count, dtype=np.uint64)
    days = [dt.date(2024, 1, 1) + dt.timedelta(days=int(i % 90)) for i in ids]
    scores = rng.random(count)
    return pa.table({
        "id": ids,
        "d": pa.array(days, pa.date32()),
        "name": pa.array([f"n{i % 97}" for i in ids]),
        "score": pa.array(scores, mask=(ids % 7 == 0)),
    })


@pytest.fixture
def table(tmp_path) -> MergeTreeTable:
    return MergeTreeTable.create(tmp_path / "t", COLUMNS, order_by="id", partition_by="toYYYYMM(d)",
                                 settings={"index_granularity": 64, "auto_merge": False})


def test_round_trip_and_parts_per_partition(table):
    data = rows(0, 2000)
    names = table.insert(data)
    assert sorted(PartInfo.parse(n).partition_id for n in names) == ["202401", "202402", "202403"]
    assert table.count() == 2000
    out = table.to_arrow().sort_by("id")
    assert out.equals(data.cast(out.schema))
    assert [p.rows for p in table.parts()] == [pc.sum(pc.equal(pc.strftime(data["d"], "%Y%m"), m)).as_py()
                                              for m in ("202401", "202402", "202403")]


def test_rows_in_a_part_are_sorted_by_the_key(table):
    data = rows(0, 1000).take(np.random.default_rng(1).permutation(1000))
    table.insert(data)
    for part in table.parts():
        ids = table.reader(part.name).read(["id"]).column("id").to_numpy()
        assert (np.diff(ids.astype(np.int64)) > 0).all()


# Each predicate with an independent Python reference over rows.
PREDICATES = {
    "id = 77": lambda r: r["id"] == 77,
    "id BETWEEN 100 AND 300": lambda r: 100 <= r["id"] <= 300,
    "id < 50 OR id > 1950": lambda r: r["id"] < 50 or r["id"] > 1950,
    "id IN (5, 500, 1500)": lambda r: r["id"] in (5, 500, 1500),
    "d >= '2024-02-15' AND name = 'n3'": lambda r: r["d"] >= dt.date(2024, 2, 15) and r["name"] == "n3",
    "NOT (id < 1990)": lambda r: not r["id"] < 1990,
    "score IS NULL AND id < 200": lambda r: r["score"] is None and r["id"] < 200,
    "toYYYYMM(d) = 202402": lambda r: (r["d"].year, r["d"].month) == (2024, 2),
    "name LIKE 'n1%' AND id > 1000": lambda r: r["name"].startswith("n1") and r["id"] > 1000,
    "score > 0.5 AND id >= 1500": lambda r: r["score"] is not None and r["score"] > 0.5 and r["id"] >= 1500,
}


@pytest.mark.parametrize("where", list(PREDICATES))
def test_where_returns_exactly_the_matching_rows(table, where):
    data = rows(0, 2000)
    table.insert(data.slice(0, 1000))
    table.insert(data.slice(1000))
    got = table.to_arrow(where=where).sort_by("id").column("id").to_pylist()
    expected = [r["id"] for r in data.to_pylist() if PREDICATES[where](r)]
    assert got == expected


def test_key_range_reads_few_granules(table):
    table.insert(rows(0, 2000))
    plan = table.explain("id BETWEEN 600 AND 620")
    assert all(p.granules_read <= 2 for p in plan.parts)
    assert plan.granules_total > 20
    point = table.explain("id = 601 AND d = '2024-03-12'")
    assert [p.partition_id for p in point.parts if p.ranges] == ["202403"]
    assert point.granules_read == 1
    by_partition = table.explain("d < '2024-02-01'")
    assert {p.partition_id for p in by_partition.parts if p.ranges} == {"202401"}


def test_columns_selection_and_unknown_columns(table):
    table.insert(rows(0, 100))
    assert table.to_arrow(["name", "id"]).column_names == ["name", "id"]
    with pytest.raises(InvalidOptionError, match="nope"):
        table.to_arrow(["nope"])
    with pytest.raises(ExpressionError, match="unknown column 'nope'"):
        table.to_arrow(where="nope = 1")


def test_schema_mismatch_errors_name_the_columns(table):
    data = rows(0, 10)
    with pytest.raises(SchemaMismatchError, match="missing column\\(s\\) name"):
        table.insert(data.drop_columns(["name"]))  # (a Nullable column left out is NULL)
    with pytest.raises(SchemaMismatchError, match="unknown column\\(s\\) extra"):
        table.insert(data.append_column("extra", pa.array(range(10))))
    with pytest.raises(SchemaMismatchError, match="'id'.*NULL"):
        table.insert(data.set_column(0, "id", pa.array([None] * 10, pa.uint64())))
    assert table.count() == 0 and table.parts() == []


def test_create_and_open_errors(tmp_path, table):
    with pytest.raises(TableExistsError):
        MergeTreeTable.create(table.path, COLUMNS, order_by="id")
    assert MergeTreeTable.create(table.path, COLUMNS, order_by="id", if_not_exists=True).path == table.path
    with pytest.raises(TableNotFoundError, match="create_statement"):
        MergeTreeTable.open(tmp_path)
    with pytest.raises(TableNotFoundError):
        MergeTreeTable.open(tmp_path / "missing")
    with pytest.raises(ExpressionError, match="ORDER BY 'nope' uses unknown column 'nope'"):
        MergeTreeTable.create(tmp_path / "x", COLUMNS, order_by="nope")
    with pytest.raises(InvalidOptionError, match="codec"):
        MergeTreeTable.create(tmp_path / "y", COLUMNS, order_by="id", settings={"codec": "SNAPPY"})
    with pytest.raises(ExpressionError, match="prefix"):
        MergeTreeTable.create(tmp_path / "z", COLUMNS, order_by="id", primary_key="name")


def test_create_from_arrow_schema_and_reopen(tmp_path):
    schema = pa.schema([pa.field("k", pa.int64(), nullable=False), pa.field("v", pa.string()),
                        pa.field("ts", pa.timestamp("us", tz="UTC")), pa.field("tags", pa.list_(pa.string()))])
    t = MergeTreeTable.create(tmp_path / "a", schema, order_by="k", settings={"codec": "ZSTD(3)"})
    assert t.metadata.column_types == {"k": "Int64", "v": "Nullable(String)",
                                       "ts": "Nullable(DateTime64(6, 'UTC'))", "tags": "Array(Nullable(String))"}
    data = pa.table({"k": [3, 1, 2], "v": ["c", None, "b"],
                     "ts": pa.array([0, 1, 2], pa.timestamp("us", tz="UTC")), "tags": [["x"], [], None]})
    t.insert(data)
    again = MergeTreeTable.open(tmp_path / "a")
    out = again.to_arrow().sort_by("k")
    assert out.column("v").to_pylist() == [None, "b", "c"]
    assert out.column("tags").to_pylist() == [[], [], ["x"]]  # a NULL list is stored empty, as ClickHouse does
    part = again.parts()[0].name
    assert (tmp_path / "a" / part / "default_compression_codec.txt").read_text() == "CODEC(ZSTD(3))"


def test_optimize_merges_contiguous_parts_with_clickhouse_names(table):
    for i in range(4):
        table.insert(rows(i * 7, 7))  # all January: parts 202401_1_1_0 .. 202401_4_4_0
    assert [p.name for p in table.parts()] == [f"202401_{i}_{i}_0" for i in range(1, 5)]
    created = table.optimize()
    assert created == ["202401_1_4_1"]
    assert [p.name for p in table.parts()] == ["202401_1_4_1"]
    table.insert(rows(28, 3))
    assert table.optimize(final=True) == ["202401_1_5_2"]
    assert table.count() == 31
    assert table.to_arrow().sort_by("id").column("id").to_pylist() == list(range(31))


def test_automatic_merges_bound_parts_per_partition(tmp_path):
    t = MergeTreeTable.create(tmp_path / "auto", COLUMNS, order_by="id",
                              settings={"merge_parts_threshold": 4, "max_parts_to_merge": 3})
    for i in range(20):
        t.insert(rows(i * 5, 5))
    # Merges run in background threads after each commit, not inside insert().
    assert MergeTreeTable.wait_for_merges(timeout=60)
    assert len(t.parts()) <= 4
    assert t.count() == 100
    levels = [p.level for p in t.parts()]
    assert max(levels) >= 1


def test_cleanup_keeps_parts_a_running_snapshot_reads(tmp_path):
    t = MergeTreeTable.create(tmp_path / "c", COLUMNS, order_by="id",
                              settings={"auto_merge": False, "old_parts_lifetime": 0})
    t.insert(rows(0, 10))
    t.insert(rows(10, 10))
    reader_tx = Transaction(t.coordinator)
    before = t.to_arrow(transaction=reader_tx)
    t.optimize(final=True)
    assert t.cleanup() == []  # the running snapshot still sees the two source parts
    assert t.to_arrow(transaction=reader_tx).equals(before)
    reader_tx.commit()
    removed = t.cleanup()
    assert sorted(removed) == ["all_1_1_0", "all_2_2_0"]
    assert not (t.path / "all_1_1_0").exists()
    assert t.count() == 20


def test_transaction_makes_two_tables_visible_together(tmp_path):
    a = MergeTreeTable.create(tmp_path / "a", COLUMNS, order_by="id")
    b = MergeTreeTable.create(tmp_path / "b", COLUMNS, order_by="id")
    with Transaction(a.coordinator) as tx:
        a.insert(rows(0, 5), transaction=tx)
        b.insert(rows(0, 7), transaction=tx)
        assert a.count() == 0 and b.count() == 0
        assert a.count(transaction=tx) == 5
    assert (a.count(), b.count()) == (5, 7)
    with pytest.raises(RuntimeError), Transaction(a.coordinator) as tx:
        a.insert(rows(5, 5), transaction=tx)
        raise RuntimeError("boom")
    assert a.count() == 5
    assert not [d for d in os.listdir(a.path) if d.startswith(("staged_", "tmp"))]


def test_time_travel_to_an_older_snapshot(table):
    table.insert(rows(0, 10))
    csn, _ = table.visible_parts()
    table.overwrite(rows(100, 3))
    assert table.count() == 3
    assert table.to_arrow(snapshot=csn).num_rows == 10


def test_overwrite_partitions_replaces_only_touched_partitions(table):
    table.insert(rows(0, 100))  # Jan..Apr 10 (ids 0..99 → days 0..89, 90..99 → days 0..9)
    january = rows(1000, 5).set_column(1, "d", pa.array([dt.date(2024, 1, 3)] * 5, pa.date32()))
    table.overwrite(january, partition_overwrite_mode="dynamic")
    out = table.to_arrow()
    jan = out.filter(pc.equal(pc.strftime(out["d"], "%Y%m"), "202401"))
    assert sorted(jan.column("id").to_pylist()) == list(range(1000, 1005))
    assert out.num_rows == 100 - 41 + 5  # 31 + 10 January rows replaced by 5


def test_partition_overwrite_has_one_spelling(table):
    """`partition_overwrite_mode` (Spark's word) everywhere; the older spellings still work, with a warning."""
    table.insert(rows(0, 100))
    january = rows(1000, 5).set_column(1, "d", pa.array([dt.date(2024, 1, 3)] * 5, pa.date32()))
    with pytest.warns(DeprecationWarning, match="partition_overwrite_mode"):
        table.overwrite(january, partitions_only=True)
    assert table.count() == 100 - 41 + 5
    staged = table.stage(january, "job1")
    with pytest.warns(DeprecationWarning, match="partition_overwrite_mode"):
        table.commit_staged(staged, mode="overwrite_partitions")
    assert table.count() == 100 - 41 + 5
    with pytest.raises(InvalidOptionError, match="partition_overwrite_mode 'sometimes'"):
        table.overwrite(january, partition_overwrite_mode="sometimes")  # type: ignore[arg-type]
    with pytest.raises(InvalidOptionError, match="mode 'overwrite_all'"):
        table.commit_staged(staged, mode="overwrite_all")


# ---------------------------------------------------------------------------------- corruption


@pytest.fixture
def one_part(tmp_path) -> tuple[MergeTreeTable, Path]:
    # Wide (min_bytes_for_wide_part = 0): the tests damage one column's files.
    t = MergeTreeTable.create(tmp_path / "k", COLUMNS, order_by="id",
                              settings={"index_granularity": 64, "min_bytes_for_wide_part": 0})
    t.insert(rows(0, 20).set_column(1, "d", pa.array([dt.date(2024, 1, 1)] * 20, pa.date32())))
    (name,) = [p.name for p in t.parts()]
    return t, t.path / name


def _fresh(t: MergeTreeTable) -> MergeTreeTable:
    return MergeTreeTable.open(t.path)


def test_flipped_byte_in_a_column_is_detected_with_file_and_offset(one_part):
    t, part = one_part
    data = bytearray((part / "name.bin").read_bytes())
    data[30] ^= 0xFF
    (part / "name.bin").write_bytes(bytes(data))
    with pytest.raises(CorruptPartError, match=r"name\.bin.*offset 0"):
        _fresh(t).to_arrow()
    report = _fresh(t).check()
    assert not report.ok and "name.bin" in str(report)


def test_truncated_file_is_detected(one_part):
    t, part = one_part
    data = (part / "id.bin").read_bytes()
    (part / "id.bin").write_bytes(data[:-5])
    with pytest.raises(CorruptPartError, match=r"id\.bin"):
        _fresh(t).to_arrow()


def test_missing_file_is_detected(one_part):
    t, part = one_part
    (part / "score.null.bin").unlink()
    with pytest.raises(CorruptPartError, match=r"score\.null\.bin.*missing"):
        _fresh(t).to_arrow()


def test_wrong_count_is_detected(one_part):
    t, part = one_part
    (part / "count.txt").write_text("21")
    with pytest.raises(CorruptPartError, match=r"all_1_1_0/count\.txt: 2 bytes hash \w+ do not match checksums\.txt"):
        _fresh(t).to_arrow()
    # A count that checksums.txt agrees with (a writer's error) must still add up to the marks.
    listing = Checksums.parse((part / "checksums.txt").read_bytes())
    listing.files["count.txt"] = compute_file_checksum(part / "count.txt", False)
    (part / "checksums.txt").write_bytes(listing.to_bytes())
    with pytest.raises(CorruptPartError, match="count.txt.*21.*20"):
        _fresh(t).to_arrow()


# ---------------------------------------------------------------------------------- concurrency


def _insert_worker(path: str, coordinator: str, worker: int, count: int) -> None:
    os.environ["SPARK_MERGETREE_COORDINATOR"] = coordinator
    t = MergeTreeTable.open(path)
    for i in range(count):
        t.insert(rows(worker * 1000 + i * 3, 3))


def test_concurrent_writer_processes_get_unique_block_numbers(tmp_path, private_coordinator):
    t = MergeTreeTable.create(tmp_path / "conc", COLUMNS, order_by="id", settings={"auto_merge": False})
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_insert_worker, args=(str(t.path), private_coordinator, w, 8)) for w in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    parts = t.parts()
    blocks = [p.min_block for p in parts]
    assert len(blocks) == len(set(blocks)) == 24
    assert t.count() == 72


# ---------------------------------------------------------------------------------- properties

TYPES = ["UInt8", "Int32", "Int64", "Float64", "String", "Nullable(String)", "Date", "Array(Int32)",
         "Nullable(Int16)", "LowCardinality(String)", "Decimal(18, 3)", "DateTime64(3, 'UTC')"]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.sampled_from(TYPES), min_size=1, max_size=4), st.integers(0, 300), st.integers(1, 40),
       st.randoms(use_true_random=False))
def test_random_schemas_round_trip(tmp_path_factory, types, n, granularity, rnd):
    path = tmp_path_factory.mktemp("prop") / "t"
    columns = [("k", "UInt32")] + [(f"c{i}", t) for i, t in enumerate(types)]
    t = MergeTreeTable.create(path, columns, order_by="k", settings={"index_granularity": granularity})
    data = {"k": pa.array(np.arange(n, dtype=np.uint32))}
    for name, type_text in columns[1:]:
        data[name] = _random_column(type_text, n, rnd)
    table = pa.table(data).cast(t.schema)
    t.insert(table)
    assert t.to_arrow().sort_by("k").equals(table)
    if n:
        key = rnd.randrange(n)
        assert t.to_arrow(where=f"k = {key}").num_rows == 1


def _random_column(type_text: str, n: int, rnd: random.Random) -> pa.Array:
    if type_text in ("UInt8", "Nullable(Int16)"):
        values = [rnd.randrange(0, 200) for _ in range(n)]
        if type_text.startswith("Nullable"):
            values = [None if rnd.random() < 0.2 else v for v in values]
        return pa.array(values)
    if type_text in ("Int32", "Int64"):
        return pa.array([rnd.randrange(-2**31, 2**31) for _ in range(n)])
    if type_text == "Float64":
        return pa.array([rnd.uniform(-1e9, 1e9) for _ in range(n)])
    if type_text in ("String", "LowCardinality(String)"):
        return pa.array(["".join(rnd.choice("abcé日 ") for _ in range(rnd.randrange(0, 12))) for _ in range(n)])
    if type_text == "Nullable(String)":
        return pa.array([None if rnd.random() < 0.3 else "x" * rnd.randrange(0, 5) for _ in range(n)])
    if type_text == "Date":
        return pa.array([dt.date(1970, 1, 1) + dt.timedelta(days=rnd.randrange(0, 40000)) for _ in range(n)])
    if type_text == "Array(Int32)":
        return pa.array([[rnd.randrange(-9, 9) for _ in range(rnd.randrange(0, 4))] for _ in range(n)],
                        pa.list_(pa.int32()))
    if type_text == "Decimal(18, 3)":
        import decimal

        return pa.array([decimal.Decimal(rnd.randrange(-10**9, 10**9)) / 1000 for _ in range(n)], pa.decimal128(18, 3))
    if type_text == "DateTime64(3, 'UTC')":
        return pa.array([rnd.randrange(-10**12, 10**12) for _ in range(n)], pa.timestamp("ms", tz="UTC"))
    raise AssertionError(type_text)


def test_wrong_columns_txt_is_detected(one_part):
    t, part = one_part
    text = (part / "columns.txt").read_text().replace("`id` UInt64", "`id` UInt32")
    (part / "columns.txt").write_text(text)
    with pytest.raises(SchemaMismatchError, match=r"all_1_1_0/columns\.txt: column 'id' is UInt32 in the part but "
                                                  "UInt64 in the table's statement"):
        _fresh(t).to_arrow()


def test_expression_keys_sort_and_prune_like_clickhouse(tmp_path):
    t = MergeTreeTable.create(tmp_path / "e", COLUMNS, order_by="(toStartOfMonth(d), id)",
                              settings={"index_granularity": 16, "auto_merge": False})
    data = rows(0, 500)
    t.insert(data)
    out = t.to_arrow()
    months = [(r["d"].year, r["d"].month) for r in out.to_pylist()]
    assert months == sorted(months)
    got = t.to_arrow(where="toStartOfMonth(d) = '2024-02-01' AND id < 100").column("id").to_pylist()
    assert sorted(got) == [r["id"] for r in data.to_pylist() if r["d"].month == 2 and r["id"] < 100]
    assert t.explain("toStartOfMonth(d) = '2024-02-01'").granules_read < t.explain().granules_read


def test_added_columns_read_as_defaults_in_older_parts(table):
    table.insert(rows(0, 50))
    table.add_columns([("tag", "String"), ("extra", "Nullable(Int32)"), ("list", "Array(UInt8)")])
    newer = rows(50, 10).append_column("tag", pa.array(["t"] * 10)) \
        .append_column("extra", pa.array(range(10), pa.int32())).append_column("list", pa.array([[1]] * 10))
    table.insert(newer)
    out = MergeTreeTable.open(table.path).to_arrow(["id", "tag", "extra", "list"]).sort_by("id")
    assert out.column("tag").to_pylist() == [""] * 50 + ["t"] * 10
    assert out.column("extra").to_pylist() == [None] * 50 + list(range(10))
    assert out.column("list").to_pylist() == [[]] * 50 + [[1]] * 10
    assert table.to_arrow(where="tag = ''").num_rows == 50
    assert table.optimize(final=True)
    assert table.to_arrow(["tag"]).num_rows == 60
    with pytest.raises(SchemaMismatchError, match="already exist"):
        table.add_columns([("tag", "String")])


def test_cleanup_spares_fresh_staged_parts_and_removes_abandoned_ones(tmp_path):
    t = MergeTreeTable.create(tmp_path / "s", COLUMNS, order_by="id")
    t.insert(rows(0, 5))
    fresh = t.stage(rows(5, 5), tag="job1")
    old = t.stage(rows(10, 5), tag="job0")
    # job0 was last active two hours ago (longer than the staged-part lifetime): abandoned.
    registration = t.path / "_mergetree" / "jobs" / "job0.json"
    registration.write_text(json.dumps({"tag": "job0", "active": __import__("time").time() - 7200}))
    t.cleanup()
    assert all((t.path / p.name).is_dir() for p in fresh)
    assert not any((t.path / p.name).exists() for p in old)
    assert t.commit_staged(fresh) and t.count() == 10


def test_iter_task_yields_the_task_rows_in_order(table):
    table.insert(rows(0, 3000).set_column(1, "d", pa.array([dt.date(2024, 1, 2)] * 3000, pa.date32())))
    (task,) = table.plan_read().tasks
    batches = list(table.iter_task(task, ["id", "name"], "id >= 100", chunk_rows=256))
    assert len(batches) > 5
    assert pa.Table.from_batches(batches).column("id").to_pylist() == list(range(100, 3000))


@pytest.mark.parametrize("key", ["m", "(id, m)"])
def test_an_unorderable_sort_key_is_refused_before_the_table_exists(tmp_path, key):
    with pytest.raises(UnsupportedError, match=r"ORDER BY: m \(Map\(String, UInt64\)\) cannot be a sort key"):
        MergeTreeTable.create(tmp_path / "t", [("id", "UInt64"), ("m", "Map(String, UInt64)")], order_by=key)
    assert not (tmp_path / "t").exists()

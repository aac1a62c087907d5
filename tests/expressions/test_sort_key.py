"""Key element values and row order agree with the order ClickHouse stores rows in."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa

from spark_mergetree.expressions.sort_key import key_element_arrays, key_element_types, sort_indices


def test_row_order_matches_clickhouse(clickhouse):
    enum_type = "Enum8('z' = 1, 'a' = 2, 'm' = -1)"
    schema = {"n": "Nullable(Int32)", "f": "Float64", "e": enum_type, "u": "UUID", "d": "Date", "i": "Int64"}
    rows = [
        (3, float("nan"), "a", "00000000-0000-0001-0000-000000000000", "2024-01-31", 5),
        (None, 1.0, "z", "10000000-0000-0000-0000-000000000000", "2024-02-01", -3),
        (1, 2.0, "m", "00000000-0000-0000-0000-000000000001", "2024-01-01", 100),
        (None, -1.0, "a", "00000000-0000-0000-1000-000000000000", "2023-12-31", -100),
        (3, 1.0, "m", "ffffffff-0000-0000-0000-000000000000", "2024-01-15", 0),
        (3, float("-inf"), "z", "00000000-ffff-0000-0000-000000000000", "2024-01-15", 7),
    ]
    columns = ", ".join(f"{name} {type_text}" for name, type_text in schema.items())
    values = ", ".join(
        "(" + ", ".join(["NULL" if n is None else str(n), repr(f) if f == f else "nan", f"'{e}'", f"'{u}'", f"'{d}'",
                         str(i)]) + ")"
        for n, f, e, u, d, i in rows
    )
    table = pa.table({
        "n": pa.array([r[0] for r in rows], pa.int32()), "f": pa.array([r[1] for r in rows]),
        "e": pa.array([r[2] for r in rows]), "u": pa.array([r[3] for r in rows]),
        "d": pa.array([dt.date.fromisoformat(r[4]) for r in rows]), "i": pa.array([r[5] for r in rows], pa.int64()),
    })
    for number, order in enumerate([("n", "f"), ("e", "u"), ("u",), ("toStartOfMonth(d)", "e", "n"), ("i",),
                                      ("toStartOfMonth(d)",)]):
        clickhouse.query(f"CREATE TABLE db.sorted_{number} ({columns}) ENGINE = MergeTree ORDER BY ({', '.join(order)}) "
                         "SETTINGS allow_nullable_key = 1")
        clickhouse.query(f"INSERT INTO db.sorted_{number} VALUES {values}")
        stored = [line.split("\t")[0] for line in clickhouse.query(
            f"SELECT toString(u) FROM db.sorted_{number} SETTINGS max_threads = 1").splitlines()]
        assert table.take(sort_indices(order, table, schema)).column("u").to_pylist() == stored, order
    assert key_element_types(["toStartOfMonth(d)", "n", "-n"], schema) == ["Date", "Nullable(Int32)", None]
    month = key_element_arrays(["toYYYYMM(d)"], table, schema)[0]
    assert month.type == pa.uint32() and month.to_pylist() == [202401, 202402, 202401, 202312, 202401, 202401]

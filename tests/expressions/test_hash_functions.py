"""cityHash64 and intHash64 in keys against ClickHouse 26.9: every value equals chdb's, for strings
of every length class CityHash64 distinguishes and for numbers of each width and sign; and a table
sampled by `cityHash64(session)` round-trips between ClickHouse and us."""

from __future__ import annotations

import shutil

import numpy as np
import pyarrow as pa
import pytest

from spark_mergetree import MergeTreeTable
from spark_mergetree.errors import UnsupportedError
from spark_mergetree.expressions.functions import apply_function, result_type

_ARROW = {"UInt8": pa.uint8(), "UInt16": pa.uint16(), "UInt32": pa.uint32(), "UInt64": pa.uint64(),
          "Int8": pa.int8(), "Int16": pa.int16(), "Int32": pa.int32(), "Int64": pa.int64()}


def test_city_hash64_of_strings_equals_clickhouses(clickhouse) -> None:
    rng = np.random.default_rng(3)
    # 0..16, 17..32, 33..64 and longer take different paths through CityHash64.
    texts = ["".join(map(chr, rng.integers(32, 127, n))) for n in [*range(0, 140), 200, 1000]] + ["é漢字", "a'b\\"]
    literal = ", ".join("'" + t.replace("\\", "\\\\").replace("'", "\\'") + "'" for t in texts)
    theirs = [int(v) for v in clickhouse.query(f"SELECT cityHash64(x) FROM (SELECT arrayJoin([{literal}]) AS x)").split()]
    assert apply_function("cityHash64", pa.array(texts), "String").to_pylist() == theirs
    assert apply_function("cityHash64", pa.array(texts), "LowCardinality(String)").to_pylist() == theirs
    fixed = [t.encode()[:6].ljust(6, b"\0") for t in texts[:20]]
    theirs = [int(v) for v in clickhouse.query(
        f"SELECT cityHash64(toFixedString(substring(x, 1, 6), 6)) FROM (SELECT arrayJoin([{literal}]) AS x) LIMIT 20").split()]
    assert apply_function("cityHash64", pa.array(fixed, pa.binary(6)), "FixedString(6)").to_pylist() == theirs


@pytest.mark.parametrize("type_text", list(_ARROW))
def test_hashes_of_numbers_equal_clickhouses(clickhouse, type_text: str) -> None:
    info = np.iinfo(_ARROW[type_text].to_pandas_dtype())
    values = [int(info.min), int(info.max), 0, 1, int(info.max) // 3, int(info.min) // 7]
    source = "UInt64" if type_text == "UInt64" else "Int64"
    rows = clickhouse.rows(f"SELECT cityHash64(CAST(x AS {type_text})), intHash64(CAST(x AS {type_text})) "
                           f"FROM (SELECT arrayJoin(CAST({values} AS Array({source}))) AS x)")
    array = pa.array(values, _ARROW[type_text])
    assert apply_function("cityHash64", array, type_text).to_pylist() == [int(r[0]) for r in rows]
    assert apply_function("intHash64", array, type_text).to_pylist() == [int(r[1]) for r in rows]
    assert result_type("cityHash64", type_text) == "UInt64"


def test_hashes_of_dates_equal_clickhouses(clickhouse) -> None:
    days = [0, 19000, 65535]
    theirs = [int(v) for v in clickhouse.query(f"SELECT cityHash64(toDate(x)) FROM (SELECT arrayJoin({days}) AS x)").split()]
    assert apply_function("cityHash64", pa.array(days, pa.int32()).cast(pa.date32()), "Date").to_pylist() == theirs
    seconds = [0, 1_700_000_000, 2**32 - 1]
    theirs = [int(v) for v in clickhouse.query(
        f"SELECT cityHash64(toDateTime(x, 'UTC')) FROM (SELECT arrayJoin({seconds}) AS x)").split()]
    instants = pa.array(seconds, pa.int64()).cast(pa.timestamp("s", "UTC"))
    assert apply_function("cityHash64", instants, "DateTime('UTC')").to_pylist() == theirs
    with pytest.raises(UnsupportedError, match="cityHash64"):
        result_type("cityHash64", "Float64")


SESSIONS = """CREATE TABLE sessions (user_id UInt64, session String, hits UInt32)
ENGINE = MergeTree PARTITION BY cityHash64(session) % 4 ORDER BY (user_id, cityHash64(session))
SAMPLE BY cityHash64(session) SETTINGS index_granularity = 128"""


def test_a_table_sampled_by_city_hash64_round_trips_with_clickhouse(clickhouse, tmp_path) -> None:
    clickhouse.query(SESSIONS.replace("TABLE sessions", "TABLE db.sessions"))
    clickhouse.query("INSERT INTO db.sessions SELECT number % 50, concat('s', toString(number)), number FROM numbers(3000)")
    copy = tmp_path / "sessions"
    shutil.copytree(clickhouse.table_dir("db", "sessions"), copy)
    table = MergeTreeTable.open(copy, create_statement=SESSIONS)
    assert table.to_arrow(where="user_id = 7").num_rows == 60
    rows = table.to_arrow()
    table.insert(rows.set_column(2, "hits", pa.array(np.asarray(rows["hits"]) + 10_000, pa.uint32())))
    theirs = {r[0] for r in clickhouse.rows("SELECT partition_id FROM system.parts WHERE table = 'sessions' AND active")}
    assert {p.name.split("_")[0] for p in table.parts()} == theirs  # partition ids: cityHash64(session) % 4
    table.optimize(final=True)
    clickhouse.query(table.clickhouse_ddl("db.sessions_ours"))
    assert [row[1] for row in clickhouse.rows("CHECK TABLE db.sessions_ours")] == ["1"] * len(table.parts())
    assert clickhouse.query("SELECT count(), sum(hits) FROM db.sessions_ours WHERE user_id = 7 "
                            "SETTINGS force_primary_key = 1").split() == ["120", str(2 * sum(range(7, 3000, 50)) + 600_000)]
    sampled = int(clickhouse.query("SELECT count() FROM db.sessions_ours SAMPLE 1/2"))
    assert 0 < sampled < 6000

"""Date and time key functions against ClickHouse 26.9: every value of every function equals what
chdb computes for it, across time zones (half-hour and 45-minute offsets, summer time after 2037,
midnight skipped by a change), the ends of DateTime's range and DateTime64 beyond them; and a
time-series table keyed by `toDateTime(ts)` round-trips between ClickHouse and us."""

from __future__ import annotations

import datetime as dt
import shutil

import numpy as np
import pyarrow as pa
import pytest

from spark_mergetree import MergeTreeTable
from spark_mergetree.errors import ExpressionError, SchemaMismatchError, UnsupportedError
from spark_mergetree.expressions.functions import apply_function, is_monotonic
from spark_mergetree.expressions.predicate import parse_expression

DAY_FUNCTIONS = ["toDate", "toYYYYMM", "toYYYYMMDD", "toYear", "toMonday", "toStartOfMonth"]
TIME_FUNCTIONS = ["toDateTime", "toUnixTimestamp", "toStartOfDay", "toStartOfHour", "toStartOfMinute",
                  "toStartOfFiveMinutes", "toStartOfTenMinutes", "toStartOfFifteenMinutes"]
ZONES = ["UTC", "Asia/Kolkata", "America/New_York", "Australia/Lord_Howe", "Asia/Kathmandu", "America/Sao_Paulo"]
TYPES = ([f"DateTime('{zone}')" for zone in ZONES] + ["DateTime", "DateTime64(3)", "DateTime64(9, 'Asia/Kolkata')",
         "DateTime64(6, 'America/New_York')", "DateTime64(0, 'Australia/Lord_Howe')", "Date"])
# Near the epoch (local dates before 1970 west of UTC), the ends of UInt32, a day's edges.
EDGES = [0, 1, 59, 3599, 18000, 19800, 66599, 86399, 86400, 2**31, 2**32 - 86400, 2**32 - 1]
_UNITS = {0: "s", 3: "ms", 6: "us", 9: "ns"}


def _values(type_text: str, rng: np.random.Generator) -> tuple[pa.Array, list[str]]:
    """Random values of the type, as an Arrow array and as ClickHouse literals."""
    zone = type_text.split("'")[1] if "'" in type_text else "UTC"
    if type_text == "Date":
        days = np.concatenate([rng.integers(0, 65536, 100), [0, 1, 49709, 49710, 65535]])
        return pa.array(days.astype(np.int32)).cast(pa.date32()), [f"toDate({d})" for d in days]
    if type_text.startswith("DateTime64"):
        precision = int(type_text[11])
        seconds = np.concatenate([rng.integers(-(2**31), 2**33, 80), rng.integers(0, 2**32, 80), EDGES,
                                  [-1, -86400, 2**32, 2**32 + 5]])
        ticks = seconds * 10**precision + (rng.integers(0, 10**precision, len(seconds)) if precision else 0)
        ticks[:3] = [-992, -(10**precision) // 2 or -1, 10**precision // 2]  # within a second of the epoch
        literal = {0: "toDateTime64({}, 0, '{}')", 3: "fromUnixTimestamp64Milli({}, '{}')",
                   6: "fromUnixTimestamp64Micro({}, '{}')", 9: "fromUnixTimestamp64Nano({}, '{}')"}[precision]
        return (pa.array(ticks, pa.int64()).cast(pa.timestamp(_UNITS[precision], zone)),
                [literal.format(t, zone) for t in ticks])
    seconds = np.concatenate([rng.integers(0, 2**32, 150), EDGES])
    return pa.array(seconds, pa.int64()).cast(pa.timestamp("s", zone)), [f"toDateTime({s}, '{zone}')" for s in seconds]


def _as_numbers(array: pa.Array) -> np.ndarray:
    if pa.types.is_date32(array.type):
        array = array.cast(pa.int32())
    return np.asarray(array.cast(pa.int64()))


@pytest.mark.parametrize("type_text", TYPES)
def test_key_functions_equal_clickhouses_values(clickhouse, type_text: str) -> None:
    rng = np.random.default_rng(sum(map(ord, type_text)))
    array, literals = _values(type_text, rng)
    for name in DAY_FUNCTIONS + TIME_FUNCTIONS:
        if type_text == "Date" and name in TIME_FUNCTIONS[3:]:
            continue  # ClickHouse refuses hours and minutes of a Date
        numbers = ", ".join(f"if(toTypeName({name}({v})) = 'Date', toInt64(toUInt16({name}({v}))), "
                            f"toInt64({name}({v})))" for v in literals)
        try:
            theirs = np.array([int(x) for x in clickhouse.query(f"SELECT arrayJoin([{numbers}])").split()])
        except Exception as refusal:  # chdb raises its own type
            with pytest.raises(ExpressionError, match="outside the UInt32 range"):
                apply_function(name, array, type_text)
            assert "overflow" in str(refusal).lower(), refusal
            continue
        ours = _as_numbers(apply_function(name, array, type_text))
        wrong = np.nonzero(ours != theirs)[0]
        assert not len(wrong), [(name, literals[i], int(ours[i]), int(theirs[i])) for i in wrong[:5]]


def test_only_functions_that_keep_order_prune() -> None:
    assert is_monotonic("toStartOfHour", "DateTime64(3)") and is_monotonic("toDateTime", "DateTime")
    assert is_monotonic("toUnixTimestamp", "DateTime64(9)")
    # These wrap modulo 2^32: a 1960 instant becomes 2096.
    assert not is_monotonic("toDateTime", "DateTime64(3)") and not is_monotonic("toDateTime", "Date")
    wrapped = apply_function("toDateTime", pa.array([-315589349, 0], pa.timestamp("s")), "DateTime64(0)")
    assert wrapped[0].as_py() > wrapped[1].as_py()


TRACES = """CREATE TABLE traces (
    Timestamp DateTime64(9) CODEC(Delta, ZSTD(1)),
    TraceId String CODEC(ZSTD(1)),
    ServiceName LowCardinality(String),
    SpanName LowCardinality(String),
    Duration UInt64,
    INDEX idx_duration Duration TYPE minmax GRANULARITY 1
) ENGINE = MergeTree
PARTITION BY toDate(Timestamp)
ORDER BY (ServiceName, SpanName, toDateTime(Timestamp))
SETTINGS index_granularity = 256"""


def test_a_table_keyed_by_to_date_time_round_trips_with_clickhouse(clickhouse, tmp_path) -> None:
    # The OpenTelemetry exporter's traces table: keys of toDate and toDateTime of a DateTime64(9).
    clickhouse.query(TRACES.replace("TABLE traces", "TABLE db.traces"))
    clickhouse.query("INSERT INTO db.traces SELECT toDateTime64('2026-11-20 23:00:00', 9) + toIntervalMillisecond(number * 1373), "
                     "hex(number), ['api', 'db'][number % 2 + 1], ['get', 'put', 'scan'][number % 3 + 1], number "
                     "FROM numbers(5000)")
    copy = tmp_path / "traces"
    shutil.copytree(clickhouse.table_dir("db", "traces"), copy)
    table = MergeTreeTable.open(copy, create_statement=TRACES)
    where = "Timestamp >= '2026-11-21 00:10:00' AND Timestamp < '2026-11-21 00:20:00' AND ServiceName = 'db'"
    clickhouse_where = where.replace("'2026", "toDateTime64('2026").replace(":00'", ":00', 9)")
    expected = int(clickhouse.query(f"SELECT count() FROM db.traces WHERE {clickhouse_where}"))
    assert expected > 0 and table.to_arrow(where=where).num_rows == expected

    # Our rows, sorted by our key and indexed with our key values, answer ClickHouse's pruned queries.
    ours = table.to_arrow()
    shifted = ours.set_column(0, "Timestamp", pa.array(
        np.asarray(ours["Timestamp"].combine_chunks().cast(pa.int64())) + 86_400 * 10**9, pa.int64())
        .cast(ours.schema.field("Timestamp").type))
    table.insert(shifted)
    table.optimize(final=True)
    assert {p.name.split("_")[0] for p in table.parts()} == {"20261120", "20261121", "20261122"}
    clickhouse.query(table.clickhouse_ddl("db.traces_ours"))
    checked = [row[1] for row in clickhouse.rows("CHECK TABLE db.traces_ours")]
    assert checked == ["1"] * len(table.parts())
    later = clickhouse_where.replace("2026-11-21", "2026-11-22")
    for condition in (clickhouse_where, later):
        theirs = int(clickhouse.query(f"SELECT count() FROM db.traces_ours WHERE {condition} "
                                      "SETTINGS force_primary_key = 1"))
        assert theirs == table.to_arrow(where=condition.replace(", 9)", "").replace("toDateTime64(", "")).num_rows
    assert int(clickhouse.query(f"SELECT count() FROM db.traces_ours WHERE {later}")) == expected


INTERVALS = """CREATE TABLE readings (ts DateTime('Asia/Kolkata'), v Float64) ENGINE = MergeTree
PARTITION BY toStartOfInterval(ts, INTERVAL 1 DAY) ORDER BY (toStartOfInterval(ts, toIntervalMinute(15)), ts)"""


def test_to_start_of_interval_keys_round_trip_and_odd_intervals_are_refused(clickhouse, tmp_path) -> None:
    clickhouse.query(INTERVALS.replace("TABLE readings", "TABLE db.readings"))
    clickhouse.query("INSERT INTO db.readings SELECT toDateTime('2026-01-01 00:00:00', 'Asia/Kolkata') + number * 1117, "
                     "number FROM numbers(300)")
    copy = tmp_path / "readings"
    shutil.copytree(clickhouse.table_dir("db", "readings"), copy)
    table = MergeTreeTable.open(copy, create_statement=INTERVALS)
    rows = table.to_arrow()
    table.overwrite(rows)  # our parts, partitioned and sorted by our values of the keys
    theirs = {r[0] for r in clickhouse.rows("SELECT DISTINCT partition_id FROM system.parts WHERE table = 'readings'")}
    assert {p.name.split("_")[0] for p in table.parts()} == theirs
    clickhouse.query(table.clickhouse_ddl("db.readings_ours"))
    assert {row[1] for row in clickhouse.rows("CHECK TABLE db.readings_ours")} == {"1"}
    assert clickhouse.query("SELECT count(), sum(v) FROM db.readings_ours").split() == ["300", str(sum(range(300)))]
    for keys in ({"order_by": "ts", "partition_by": "toStartOfInterval(ts, INTERVAL 2 DAY)"},
                 {"order_by": "toStartOfInterval(ts, toIntervalMinute(7))"}):
        with pytest.raises((UnsupportedError, SchemaMismatchError), match="toStartOfInterval is supported for"):
            MergeTreeTable.create(tmp_path / "odd", [("ts", "DateTime"), ("v", "Float64")], **keys)
        assert not (tmp_path / "odd").exists()


def test_date_and_time_constants_move_as_clickhouse_moves_them(clickhouse) -> None:
    constants = ["toDate('2024-01-31') + INTERVAL 1 MONTH", "toDateTime('2024-03-31 10:00:00', 'UTC') - INTERVAL 1 MONTH",
                 "toDate('2024-02-29') + INTERVAL 1 YEAR", "toDate('2024-01-01') - INTERVAL 1 QUARTER",
                 "toDateTime('2024-01-01 00:00:00', 'UTC') - INTERVAL 90 MINUTE", "toDate('2024-01-10') - 10",
                 "toDateTime('2024-01-10 00:00:00', 'UTC') + 3600", "toDate('2024-03-01') - INTERVAL 2 WEEK"]
    theirs = clickhouse.query(f"SELECT {', '.join(f'toString({c})' for c in constants)}").rstrip("\n").split("\t")
    ours = [parse_expression(c) for c in constants]
    assert [str(o.value).replace("+00:00", "") for o in ours] == theirs  # type: ignore[attr-defined]
    # now(), today(), yesterday(): the instant and dates a query starts at (UTC).
    before = dt.datetime.now(dt.timezone.utc).replace(microsecond=0)
    moved = parse_expression("now() - INTERVAL 1 HOUR").value  # type: ignore[attr-defined]
    assert before - dt.timedelta(hours=1) <= moved <= dt.datetime.now(dt.timezone.utc) - dt.timedelta(hours=1)
    assert parse_expression("today() - 1").value == parse_expression("yesterday()").value  # type: ignore[attr-defined]
    with pytest.raises(UnsupportedError, match="Date moves by whole days"):
        parse_expression("toDate('2024-01-01') + INTERVAL 1 HOUR")

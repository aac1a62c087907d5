"""Benchmark of the column codecs: encode and decode throughput per codec, against LZ4 and against
ClickHouse (chdb) on the same column, in one run.

Two columns of `--rows` values: `ts`, Int64 timestamps (a constant step with jitter, the usual
time-series key), and `value`, Float64 (a random walk of cents). For each codec clause:

  * ours encode: the column's bytes through `CompressedStreamWriter` in 8192-row granules, as the
    part writer compresses a stream; ours decode: `decompress_all` of that file (every block's
    checksum verified);
  * chdb encode: `INSERT INTO t SELECT * FROM Python(arrow)` into a Wide table whose column has the
    clause (includes ClickHouse's Arrow conversion and part writing); chdb decode: `SELECT
    sum(<column>)` over that table (reads and decompresses the column; the sum is negligible).

Throughput is MB/s of uncompressed column bytes (best of `--runs`); `ratio` is uncompressed /
compressed. The first call of a compiled codec (DoubleDelta, Gorilla, FPC) pays numba's compile or
cache load once, before timing. The machine is shared: numbers are noisy.

    python benchmarks/codecs.py                  # 4M rows, best of 3
    python benchmarks/codecs.py --rows 10000000 --runs 5
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from spark_mergetree.format.compression import CompressedStreamWriter, decompress_all
from spark_mergetree.format.compression_codecs import parse_column_codec
from spark_mergetree.format.types import parse_type  # noqa: E402

CASES = [  # (column, ClickHouse type, codec clause)
    ("ts", "Int64", "LZ4"),
    ("ts", "Int64", "ZSTD(1)"),
    ("ts", "Int64", "Delta, LZ4"),
    ("ts", "Int64", "Delta, ZSTD"),
    ("ts", "Int64", "DoubleDelta"),
    ("ts", "Int64", "DoubleDelta, LZ4"),
    ("ts", "Int64", "T64, LZ4"),
    ("ts", "Int64", "GCD, LZ4"),
    ("value", "Float64", "LZ4"),
    ("value", "Float64", "Gorilla"),
    ("value", "Float64", "Gorilla, LZ4"),
    ("value", "Float64", "FPC"),
    ("value", "Float64", "FPC, ZSTD"),
]
GRANULE_ROWS = 8192


def columns(rows: int) -> pa.Table:
    rng = np.random.default_rng(7)
    ts = 1_700_000_000_000 + np.arange(rows, dtype=np.int64) * 1000 + rng.integers(0, 3, rows) * 1000
    value = np.round(np.cumsum(rng.normal(0, 1, rows)) * 100) / 100
    return pa.table({"ts": ts, "value": value})


def best(action: Callable[[], object], runs: int) -> float:
    seconds = float("inf")
    for _ in range(runs):
        started = time.perf_counter()
        action()
        seconds = min(seconds, time.perf_counter() - started)
    return seconds


def encode(data: memoryview, codec) -> bytes:
    writer = CompressedStreamWriter(codec)
    step = GRANULE_ROWS * 8
    for start in range(0, len(data), step):
        writer.write_granule(data[start:start + step])
    writer.finish()
    return writer.getvalue()


def ours(table: pa.Table, column: str, type_text: str, clause: str, runs: int) -> tuple[float, float, float]:
    dt = parse_type(type_text)
    codec = parse_column_codec(clause, dt, check=False).for_stream(dt, parse_column_codec("LZ4", dt).codecs[0])
    data = memoryview(table.column(column).to_numpy()).cast("B")
    compressed = encode(data[: 1 << 16], codec)  # compile or load compiled kernels before timing
    compressed = encode(data, codec)
    assert bytes(decompress_all(compressed, "x.bin")) == data.tobytes()
    size = len(data)
    return (size / best(lambda: encode(data, codec), runs) / 1e6,
            size / best(lambda: decompress_all(compressed, "x.bin"), runs) / 1e6, size / len(compressed))


def clickhouse(session, table: pa.Table, column: str, type_text: str, clause: str, runs: int) -> tuple[float, float]:
    size = table.column(column).nbytes
    arrow = table.select([column])  # noqa: F841 - read by chdb's Python() table function below

    def insert() -> None:
        session.query("DROP TABLE IF EXISTS bench")
        session.query(f"CREATE TABLE bench ({column} {type_text} CODEC({clause})) ENGINE = MergeTree ORDER BY tuple() "
                      "SETTINGS min_bytes_for_wide_part = 0")
        session.query("INSERT INTO bench SELECT * FROM Python(arrow)")

    encode_seconds = best(insert, runs)
    decode_seconds = best(lambda: session.query(f"SELECT sum({column}) FROM bench SETTINGS max_threads = 1"), runs)
    return size / encode_seconds / 1e6, size / decode_seconds / 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=4_000_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    table = columns(args.rows)
    from chdb import session as chdb_session

    with tempfile.TemporaryDirectory() as root:
        session = chdb_session.Session(root)
        session.query("SET allow_suspicious_codecs = 1")
        print(f"{args.rows} rows, MB/s of uncompressed column bytes (best of {args.runs})")
        print(f"{'column':8} {'codec':18} {'ratio':>6} {'ours enc':>9} {'ours dec':>9} {'chdb enc':>9} {'chdb dec':>9}"
              f" {'enc/LZ4':>8} {'dec/LZ4':>8}")
        baseline: dict[str, tuple[float, float]] = {}
        for column, type_text, clause in CASES:
            encode_rate, decode_rate, ratio = ours(table, column, type_text, clause, args.runs)
            chdb_encode, chdb_decode = clickhouse(session, table, column, type_text, clause, args.runs)
            if clause == "LZ4":
                baseline[column] = (encode_rate, decode_rate)
            lz4_encode, lz4_decode = baseline[column]
            print(f"{column:8} {clause:18} {ratio:6.1f} {encode_rate:9.0f} {decode_rate:9.0f} {chdb_encode:9.0f} "
                  f"{chdb_decode:9.0f} {encode_rate / lz4_encode:8.2f} {decode_rate / lz4_decode:8.2f}")
        session.close()


if __name__ == "__main__":
    main()

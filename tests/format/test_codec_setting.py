"""The `codec` of a table: one check for the engine setting and Spark's option, and parts written
with LZ4HC that ClickHouse reads, checks and merges (chdb in a fresh process on the catalog root)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from spark_mergetree.catalog import Catalog
from spark_mergetree.engine.metadata import validate_engine_settings
from spark_mergetree.errors import InvalidOptionError
from spark_mergetree.format.compression import iter_blocks
from spark_mergetree.format.compression_codecs import METHOD_LZ4
from spark_mergetree.spark.options import WriteOptions
from tests.catalog.chdb_runner import rows, run_chdb

ACCEPTED = ["LZ4", "lz4", "LZ4HC", "LZ4HC(0)", "LZ4HC(12)", "CODEC(LZ4HC(9))", "ZSTD", "ZSTD(3)", "NONE"]
REFUSED = ["LZ4HC(13)", "LZ4HC(x)", "LZ4(1)", "ZSTD(23)", "ZSTD(-200000)", "Delta", "Delta, LZ4", "GZIP", ""]


def _spark_option(text: str) -> str:
    return WriteOptions.parse({"path": "/tmp/unused", "codec": text}, overwrite=False).settings["codec"]


def _engine_setting(text: str) -> str:
    return validate_engine_settings({"codec": text})["codec"]


@pytest.mark.parametrize("text", ACCEPTED)
def test_engine_and_spark_accept_the_same_codecs(text):
    assert _spark_option(text) == _engine_setting(text)


@pytest.mark.parametrize("text", REFUSED)
def test_engine_and_spark_refuse_the_same_codecs(text):
    with pytest.raises(InvalidOptionError, match="valid codecs: NONE, LZ4, LZ4HC"):
        _engine_setting(text)
    with pytest.raises(InvalidOptionError, match="option 'codec'.*valid codecs: NONE, LZ4, LZ4HC"):
        _spark_option(text)


def _data(count: int) -> pa.Table:
    words = [f"word{(i * 7919) % 1000}-{(i * 31) % 17}" for i in range(count)]
    return pa.table({"id": pa.array(range(count), pa.uint64()), "s": words})


def test_clickhouse_reads_checks_and_merges_lz4hc_parts(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("SPARK_MERGETREE_COORDINATOR", (tmp_path / "coordinator").resolve().as_uri())
    catalog = Catalog(tmp_path)
    catalog.create_database("db")
    sizes = {}
    for name, codec in (("lz4", "LZ4"), ("hc", "LZ4HC(12)"), ("hc_default", "LZ4HC")):
        catalog.create_table(f"db.{name}", [("id", "UInt64"), ("s", "String")], "id",
                             settings={"codec": codec, "auto_merge": False, "min_bytes_for_wide_part": 0})
        table = catalog.table(f"db.{name}")
        table.insert(_data(30000))
        table.insert(_data(1000))
        part = table.path / max(table.parts(), key=lambda summary: summary.rows).name
        assert (part / "default_compression_codec.txt").read_text() == f"CODEC({codec})"
        blocks = list(iter_blocks((part / "s.bin").read_bytes(), "s.bin"))
        assert {block.method for block in blocks} == {METHOD_LZ4}  # LZ4HC blocks are LZ4 blocks
        sizes[name] = (part / "s.bin").stat().st_size
    assert sizes["hc"] < sizes["lz4"]  # the high-compression mode did run
    expected = _data(30000).column("s").to_pylist() + _data(1000).column("s").to_pylist()
    for name in ("hc", "hc_default"):
        checked, counted, merged, again = run_chdb(
            tmp_path, f"CHECK TABLE db.{name} SETTINGS check_query_single_value_result = 1", f"SELECT count(), sum(id), groupArray(s) FROM db.{name}",
            f"OPTIMIZE TABLE db.{name} FINAL", f"SELECT count(), sum(id) FROM db.{name}")
        assert checked.strip() == "1"
        count, total, strings = rows(counted)[0]
        assert (int(count), int(total)) == (31000, sum(range(30000)) + sum(range(1000)))
        assert sorted(strings.strip("[]").replace("'", "").split(",")) == sorted(expected)
        assert rows(again)[0] == [count, total]

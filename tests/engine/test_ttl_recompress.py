"""TTL recompression (`expr RECOMPRESS CODEC(...)`): a merge whose rows are all past the rule
writes its part with that codec, as ClickHouse's merge does (same rows, `ttl.txt` and
`default_compression_codec.txt` as chdb's OPTIMIZE FINAL, blocks in that codec); OPTIMIZE FINAL
and the background merges take a lone part to recompress it, once."""

from __future__ import annotations

import shutil
from pathlib import Path

from spark_mergetree.engine import optimize as optimizing
from spark_mergetree.engine import ttl_selection
from spark_mergetree.expressions.ttl import TTL_FILE
from spark_mergetree.format.part import CODEC_FILE
from tests.engine.test_ttl_merges import _open, _ours, _rows, _select
from tests.format.chdb_util import close_session, make_chdb_table, open_session

CREATE = ("CREATE TABLE {name} (d DateTime('UTC'), id UInt64, v UInt32, w String, n Nullable(Int32)) "
          "ENGINE = MergeTree ORDER BY id TTL d + INTERVAL 1 DAY RECOMPRESS CODEC(ZSTD(3)), d + INTERVAL 60 DAY "
          "SETTINGS merge_with_ttl_timeout = 100000, merge_with_recompression_ttl_timeout = 100000, "
          "min_bytes_for_wide_part = 0, index_granularity = 4")
ZSTD_METHOD = 0x90


def _table(tmp_path: Path):
    sess, directory = make_chdb_table(tmp_path, CREATE.format(name="t"), ["SYSTEM STOP MERGES t"])
    statement = sess.query("SHOW CREATE TABLE t", "TabSeparatedRaw").bytes().decode()
    close_session()
    return _open(directory, statement), directory


def _clickhouse_final(tmp_path: Path, directory: Path, sources: list[str]) -> tuple[list[tuple], Path]:
    _, copy = make_chdb_table(tmp_path / "copy", CREATE.format(name="c"), ["SYSTEM STOP MERGES c"])
    for name in sources:
        shutil.copytree(directory / name, copy / "detached" / name)
    sess = open_session(tmp_path / "copy")
    try:
        for name in sources:
            sess.query(f"ALTER TABLE c ATTACH PART '{name}'")
        sess.query("SYSTEM START MERGES c")
        sess.query("OPTIMIZE TABLE c FINAL")
        (path,) = sess.query("SELECT path FROM system.parts WHERE table = 'c' AND active",
                             "TabSeparatedRaw").bytes().decode().split()
        return _select(sess, "c"), Path(path)
    finally:
        close_session()


def test_a_merge_past_the_rule_writes_its_part_with_the_rules_codec_as_clickhouse_does(tmp_path: Path) -> None:
    table, directory = _table(tmp_path)
    table.insert(_rows(0, [2, 3, 4, 5]))
    table.insert(_rows(10, [2, 7]))
    assert (directory / "all_1_1_0" / CODEC_FILE).read_text() == "CODEC(LZ4)"
    expected, theirs = _clickhouse_final(tmp_path, directory, ["all_1_1_0", "all_2_2_0"])
    (merged,) = table.optimize(final=True)
    ours = directory / merged
    assert _ours(table) == expected
    assert (ours / CODEC_FILE).read_text() == (theirs / CODEC_FILE).read_text() == "CODEC(ZSTD(3))"
    assert (ours / TTL_FILE).read_text() == (theirs / TTL_FILE).read_text()
    assert (ours / "id.bin").read_bytes()[16] == ZSTD_METHOD
    assert table.check().ok
    sess = open_session(tmp_path)  # ClickHouse reads and checks our recompressed part
    try:
        sess.query("DETACH TABLE t")
        sess.query("ATTACH TABLE t")
        assert _select(sess, "t") == expected
        checked = sess.query("CHECK TABLE t", "TabSeparatedRaw").bytes().decode().split("\n")
        assert [line.split("\t")[1] for line in checked if line] == ["1"]
    finally:
        close_session()


def test_a_row_not_yet_past_the_rule_keeps_the_tables_codec(tmp_path: Path) -> None:
    table, directory = _table(tmp_path)
    table.insert(_rows(0, [2, 3]))
    table.insert(_rows(10, [0.5]))
    (merged,) = table.optimize(final=True)
    assert (directory / merged / CODEC_FILE).read_text() == "CODEC(LZ4)"
    assert table.optimize(final=True) == []  # (nothing would change: the lone part stays)


def test_final_and_background_merges_recompress_a_lone_part_once(tmp_path: Path) -> None:
    table, directory = _table(tmp_path)
    table.insert(_rows(0, [2, 3]))
    assert table.optimize(final=True) == ["all_1_1_1"]
    assert (directory / "all_1_1_1" / CODEC_FILE).read_text() == "CODEC(ZSTD(3))"
    assert table.optimize(final=True) == []  # its codec is the rule's now
    ttl_selection.forget_postponements()
    table.insert(_rows(10, [4, 5]))
    # The background's recompression selector takes the part whose codec the rule changes, alone
    # (its neighbour is recompressed already).
    assert optimizing.merge_step(table) == "all_2_2_1"
    assert (directory / "all_2_2_1" / CODEC_FILE).read_text() == "CODEC(ZSTD(3))"
    assert optimizing.merge_step(table) is None
    ttl_selection.forget_postponements()
    assert [r[0] for r in _ours(table)] == [0, 1, 10, 11]

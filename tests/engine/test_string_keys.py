"""Sort keys of string functions (`ORDER BY (lower(s), id)`): our parts hold ClickHouse's rows in
ClickHouse's order with its primary index, for the same inserts (chdb 26.9)."""

from __future__ import annotations

import pyarrow as pa

from spark_mergetree import MergeTreeTable
from tests.format.chdb_util import close_session, make_chdb_table

CREATE = ("CREATE TABLE {} (id UInt64, s String) ENGINE = MergeTree ORDER BY (lower(s), length(s), id) "
          "SETTINGS index_granularity = 4, min_bytes_for_wide_part = 0")
INSERT = "INSERT INTO {} SELECT number, ['Ab', 'aB', 'x', 'XYZ', 'abc', 'ÄBC'][number % 6 + 1] || toString(number % 3) FROM numbers(40)"


def test_string_function_sort_keys_give_clickhouses_parts(tmp_path) -> None:
    sess, theirs_dir = make_chdb_table(tmp_path, CREATE.format("k"), [INSERT.format("k")])
    statement = sess.query("SHOW CREATE TABLE k", "TabSeparatedRaw").bytes().decode()
    rows = pa.ipc.open_file(pa.py_buffer(sess.query("SELECT * FROM k", "Arrow").bytes())).read_all()
    matching = int(sess.query("SELECT count() FROM k WHERE lower(s) = 'äbc2' OR lower(s) = 'abc1'", "TabSeparatedRaw")
                   .bytes().decode())
    _, empty = make_chdb_table(tmp_path, CREATE.format("m"))
    close_session()
    ours = MergeTreeTable.open(empty, create_statement=statement.replace("default.k", "m"))
    ours.insert(rows.sort_by("id"))
    (part,) = ours.parts()
    theirs = MergeTreeTable.open(theirs_dir, create_statement=statement)
    assert theirs.reader(part.name).read(["id", "s"]).equals(ours.reader(part.name).read(["id", "s"]))
    key_types = ["String", "UInt64", "UInt64"]
    assert theirs.reader(part.name).primary_index(key_types) == ours.reader(part.name).primary_index(key_types)
    assert ours.to_arrow(where="lower(s) = 'äbc2' OR lower(s) = 'abc1'").num_rows == matching == 6

"""Error messages are one sentence of ours that stands alone: they name the text, option, column or
table at fault and where, never sqlglot's classes or colour codes, never the placeholder table
name `_` of statements made from options, and they come before any row is read."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from spark_mergetree import MergeTreeTable
from spark_mergetree.errors import ExpressionError, StorageError, UnsupportedError
from spark_mergetree.expressions.predicate import parse_predicate


@pytest.mark.parametrize(("text", "expected"), [
    ("id >", "cannot parse 'id >': it ends too early, after '>' at position 4, where an operand is missing"),
    ("id > 3 AND", "cannot parse 'id > 3 AND': it ends too early, after 'AND' at position 8"),
    ("id IN (1,", "cannot parse 'id IN (1,': a ')' is missing at its end, after ',' at position 9"),
    ("id = = 3", "cannot parse 'id = = 3': an operand is missing near '=' at position 6"),
    ("id > 3)", "cannot parse 'id > 3)': unexpected ')' at position 7"),
    ("s = 'abc", "cannot parse \"s = 'abc\": the quote ' at position 5 is never closed"),
    ("id >\n AND x", "an operand is missing near 'AND' at position 7"),
])
def test_a_bad_condition_is_named_with_its_position(text: str, expected: str) -> None:
    with pytest.raises(ExpressionError) as caught:
        parse_predicate(text)
    message = str(caught.value)
    assert expected in message
    assert "sqlglot" not in message and "<class" not in message and "\x1b[" not in message
    assert "\n" not in message


def _table(path: Path) -> MergeTreeTable:
    table = MergeTreeTable.create(str(path), [("id", "UInt64"), ("s", "String")], order_by="id")
    table.insert(pa.table({"id": pa.array([1, 2], pa.uint64()), "s": ["apple", "banana"]}))
    return table


def test_rlike_is_refused_naming_rlike(tmp_path: Path) -> None:
    for text in ("s RLIKE '^a'", "s REGEXP '^a'", "match(s, '^a')"):
        with pytest.raises(UnsupportedError, match=r"RLIKE \(REGEXP, match\(\)\) in .* is not supported: regular "
                                                   r"expressions are not evaluated here; use LIKE"):
            parse_predicate(text)
    table = _table(tmp_path / "t")
    with pytest.raises(UnsupportedError, match=r"^RLIKE"):
        table.to_arrow(where="s RLIKE '^a'")
    assert table.to_arrow(where="s LIKE 'a%'").num_rows == 1


def test_an_unknown_function_fails_when_bound_not_when_rows_are_read(tmp_path: Path) -> None:
    table = _table(tmp_path / "t")
    with pytest.raises(UnsupportedError, match=r"^function reverse\(\) in reverse\(s\) cannot be evaluated in a "
                                               r"condition \(supported: .*lower"):
        table.explain("reverse(s) = 'elppa'")  # plans only: no row is read
    assert table.to_arrow(where="lower(s) = 'apple'").num_rows == 1


@pytest.mark.parametrize(("keys", "expected"), [
    ({"order_by": "id +"}, "order_by: cannot parse 'id +': it ends too early, after '+' at position 4"),
    ({"order_by": ["id", "s +"]}, "order_by: cannot parse 's +': it ends too early"),
    ({"order_by": "id", "partition_by": "toYYYYMM("},
     "partition_by: cannot parse 'toYYYYMM(': a ')' is missing at its end, after '(' at position 9"),
    ({"order_by": "id", "primary_key": "(id"}, "primary_key: cannot parse '(id': a ')' is missing"),
])
def test_bad_key_options_name_the_option_and_position(tmp_path: Path, keys: dict, expected: str) -> None:
    with pytest.raises(ExpressionError) as caught:
        MergeTreeTable.create(str(tmp_path / "t"), [("id", "UInt64"), ("s", "String")], **keys)
    message = str(caught.value)
    assert expected in message
    assert "table '_'" not in message and "needs ORDER BY" not in message and "offset" not in message


def test_messages_of_tables_made_from_options_do_not_name_the_placeholder(tmp_path: Path) -> None:
    with pytest.raises(ExpressionError) as caught:
        MergeTreeTable.create(str(tmp_path / "t"), [("id", "UInt64")], order_by="id", partition_by="nope")
    assert str(caught.value) == "the table: PARTITION BY 'nope' uses unknown column 'nope'; columns: id"
    (tmp_path / "u").mkdir()
    with pytest.raises(ExpressionError, match=r"^table 't': PRIMARY KEY \(b\) must be a prefix of ORDER BY \(a\)$"):
        MergeTreeTable.open(str(tmp_path / "u"), "CREATE TABLE shop.t (a UInt8, b UInt8) ENGINE = MergeTree "
                                                  "PRIMARY KEY b ORDER BY a")


def test_s3_credentials_hint_names_the_spark_options() -> None:
    from botocore.exceptions import NoCredentialsError

    from spark_mergetree.storage.object_store import bucket_for

    bucket = bucket_for("s3://some-bucket", {"region": "us-east-1", "endpoint": "http://127.0.0.1:1"})
    error = bucket._translate(NoCredentialsError(), "s3://some-bucket/t")
    assert isinstance(error, StorageError)
    message = str(error)
    assert message.startswith("s3://some-bucket/t: no usable credentials")
    assert "access_key_id and secret_access_key storage options" in message
    assert "(Spark: the options s3.access_key_id and s3.secret_access_key)" in message

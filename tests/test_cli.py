"""The mergetree command line, run as users run it (click's runner, real tables and catalogs)."""

from __future__ import annotations

import pyarrow as pa
from click.testing import CliRunner

from spark_mergetree import MergeTreeTable
from spark_mergetree.cli import main


def invoke(*args: str) -> str:
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def test_table_commands(tmp_path):
    table = MergeTreeTable.create(tmp_path / "t", [("id", "UInt64"), ("s", "String")], order_by="id",
                                  settings={"index_granularity": 4, "auto_merge": False})
    for start in (0, 10):
        table.insert(pa.table({"id": pa.array(range(start, start + 10), pa.uint64()), "s": ["x"] * 10}))
    assert "2 parts, 20 rows" in invoke("parts", str(table.path))
    assert "2 parts checked: all files match" in invoke("check", str(table.path))
    assert "1 of 2 parts" in invoke("explain", str(table.path), "id = 3")
    head = invoke("head", str(table.path), "-n", "3", "--where", "id >= 12", "--columns", "id")
    assert head.splitlines() == ["id", "--", "12", "13", "14", "(3 rows)"]
    assert "merged into all_1_2_1" in invoke("optimize", "--final", str(table.path))
    (table.path / "all_1_2_1" / "count.txt").write_text("21")
    result = CliRunner().invoke(main, ["check", str(table.path)])
    assert result.exit_code == 1 and "count.txt" in result.output


def test_catalog_commands(tmp_path):
    root = str(tmp_path / "root")
    invoke("catalog", "-r", root, "create-database", "shop")
    invoke("catalog", "-r", root, "create-table", "shop.a", "-c", "id UInt64", "--order-by", "id")
    invoke("catalog", "-r", root, "create-table", "shop.b", "-c", "id UInt64", "-c", "v String", "--order-by", "id")
    before = invoke("catalog", "-r", root, "tables", "shop")
    invoke("catalog", "-r", root, "exchange", "shop.a", "shop.b")
    after = invoke("catalog", "-r", root, "tables", "shop")
    uuids = dict(line.split("\t") for line in before.splitlines())
    assert dict(line.split("\t") for line in after.splitlines()) == {"shop.a": uuids["shop.b"], "shop.b": uuids["shop.a"]}
    invoke("catalog", "-r", root, "rename", "shop.b", "shop.c")
    assert "dropped shop.c" in invoke("catalog", "-r", root, "drop", "shop.c")
    assert "(dropped" in invoke("catalog", "-r", root, "tables", "shop")
    invoke("catalog", "-r", root, "undrop", "shop.c")
    assert "shop.c\t" in invoke("catalog", "-r", root, "tables", "shop")
    assert invoke("catalog", "-r", root, "databases").split() == ["shop"]

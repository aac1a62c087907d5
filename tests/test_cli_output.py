"""What `mergetree head` and `mergetree optimize` print: an aligned text table of the rows, and a
progress bar with its total for merges (drawn on request or on a terminal only)."""

from __future__ import annotations

import pyarrow as pa
from click.testing import CliRunner

from spark_mergetree import MergeTreeTable
from spark_mergetree.cli import main, text_table


def test_head_prints_an_aligned_table_not_a_python_repr(tmp_path) -> None:
    table = MergeTreeTable.create(tmp_path / "t", [("id", "UInt64"), ("name", "Nullable(String)"), ("v", "Float64")],
                                  order_by="id")
    table.insert(pa.table({"id": pa.array([1, 22, 333], pa.uint64()), "name": ["ann", None, "bob"],
                           "v": [0.5, 12.25, 3.0]}))
    result = CliRunner().invoke(main, ["head", str(table.path), "-n", "2"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == [
        "id  name      v",
        "--  ----  -----",
        " 1  ann     0.5",
        "22  NULL  12.25",
        "(2 rows)",
    ]
    assert "{" not in result.output and "'" not in result.output


def test_text_table_aligns_text_left_numbers_right_and_cuts_long_values() -> None:
    lines = text_table(["k", "text"], [{"k": 5, "text": "a\nb"}, {"k": 10, "text": "x" * 80}])
    assert lines[0] == " k  text"
    assert lines[2] == " 5  a\\nb"
    assert lines[3].startswith("10  " + "x" * 59 + "…") and len(lines[3]) == 4 + 60
    assert text_table(["a"], []) == ["a", "-"]


def test_optimize_shows_parts_merged_of_the_total_when_asked(tmp_path, capsys) -> None:
    table = MergeTreeTable.create(tmp_path / "t", [("id", "UInt64"), ("m", "UInt8")], order_by="id",
                                  partition_by="m", settings={"auto_merge": False})
    for start in range(0, 30, 10):
        table.insert(pa.table({"id": pa.array(range(start, start + 10), pa.uint64()),
                               "m": pa.array([i % 2 for i in range(10)], pa.uint8())}))
    assert len(table.parts()) == 6
    created = table.optimize(final=True, progress=True)
    assert len(created) == 2
    err = capsys.readouterr().err
    assert "optimize final" in err and "6/6" in err and "part" in err
    table.insert(pa.table({"id": pa.array([100, 101], pa.uint64()), "m": pa.array([0, 1], pa.uint8())}))
    assert len(table.optimize()) == 2 and capsys.readouterr().err == ""  # quiet by default
    table.insert(pa.table({"id": pa.array([200], pa.uint64()), "m": pa.array([0], pa.uint8())}))
    table.optimize(progress=True)
    assert "1/1" in capsys.readouterr().err  # one partition with parts to merge: one merge


def test_cli_optimize_is_quiet_when_not_on_a_terminal(tmp_path) -> None:
    table = MergeTreeTable.create(tmp_path / "t", [("id", "UInt64")], order_by="id", settings={"auto_merge": False})
    for start in (0, 10):
        table.insert(pa.table({"id": pa.array(range(start, start + 10), pa.uint64())}))
    result = CliRunner().invoke(main, ["optimize", "--final", str(table.path)], catch_exceptions=False)
    assert result.exit_code == 0
    assert result.output == "merged into all_1_2_1\n"

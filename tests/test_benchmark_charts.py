"""The benchmarks whose figures docs/spark.md shows draw them as charts (docs/img/*.png): from a
run's results, or from the doc's own table (`--chart-from-docs`); without matplotlib they skip the
chart with a note."""

from __future__ import annotations

import importlib.util
import struct
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def _load(name: str, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.syspath_prepend(str(BENCHMARKS))  # the scripts import harness and charts beside them
    spec = importlib.util.spec_from_file_location(f"benchmark_{name}", BENCHMARKS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _png_size(path: Path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n", path
    return struct.unpack(">II", head[16:24])


@pytest.mark.parametrize("name", ["spark", "first_query"])
def test_chart_from_the_docs_table(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    import matplotlib  # noqa: F401 - a test dependency: the test fails, never skips, without it
    module = _load(name, monkeypatch)
    module.chart_from_docs(tmp_path / "chart.png")
    width, height = _png_size(tmp_path / "chart.png")
    assert width == 800 and 300 <= height <= 1200
    assert f"chart: {tmp_path / 'chart.png'}" in capsys.readouterr().out
    # The doc shows the chart the benchmark draws.
    assert f"](img/{module.CHART.name})" in module.DOC.read_text()
    assert module.CHART.exists()


def test_docs_tables_give_every_measurement(monkeypatch: pytest.MonkeyPatch) -> None:
    charts = _load("charts", monkeypatch)
    rows = charts.markdown_table(charts.REPO_ROOT / "docs" / "spark.md", "| | Parquet | mergetree | floor |")
    assert len(rows) == 7 and rows[0][0] == "write"
    assert all(charts.seconds(cell) > 0 for row in rows for cell in row[1:4])
    assert charts.seconds("5.62 s (1.35 s above the floor)") == 5.62
    with pytest.raises(ValueError):
        charts.seconds("fast")


def test_without_matplotlib_the_chart_is_skipped_with_a_note(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            capsys) -> None:
    module = _load("first_query", monkeypatch)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib raises ImportError
    module.write_chart(tmp_path / "chart.png", "t", {(a, k): 1.0 for a in ("read", "write") for k in module.KINDS})
    assert not (tmp_path / "chart.png").exists()
    assert "matplotlib is not installed" in capsys.readouterr().out

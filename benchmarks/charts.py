"""Charts of benchmark results for the docs (docs/img/*.png), drawn by the benchmark that measured
them. matplotlib (the `[dev]` extra) is imported only when a chart is drawn; without it the chart is
skipped with a note.

A benchmark too long to rerun for a chart can draw it from the table of its figures in the docs
(`markdown_table`), as its `--chart-from-docs` option does.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
IMAGES = REPO_ROOT / "docs" / "img"
COLOURS = ("#9e9e9e", "#f4a261", "#1f77b4", "#2ca02c")


def grouped_bars(path: Path, title: str, labels: list[str], series: dict[str, list[float | None]],
                 unit: str = "s") -> Path | None:
    """Horizontal bars, one group per label (top to bottom) and one bar per series in each, the
    value written at each bar's end; saved as PNG at `path`. None (and a printed note) without
    matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"chart {path} skipped: matplotlib is not installed (pip install -e '.[dev]')")
        return None
    height = 0.8 / len(series)
    title_lines = textwrap.wrap(title, 60)
    fig, ax = plt.subplots(figsize=(8, 1.3 + 0.2 * len(title_lines) + len(labels) * (0.3 + 0.25 * len(series))),
                           dpi=100)
    largest = max(v for values in series.values() for v in values if v is not None)
    for number, (name, values) in enumerate(series.items()):
        positions = [row + (number - (len(series) - 1) / 2) * height for row in range(len(labels))]
        shown = [(p, v) for p, v in zip(positions, values, strict=True) if v is not None]
        bars = ax.barh([p for p, _ in shown], [v for _, v in shown], height=height * 0.92, label=name,
                       color=COLOURS[number % len(COLOURS)])
        ax.bar_label(bars, labels=[f"{v:.2f} {unit}" for _, v in shown], padding=3, fontsize=8)
    ax.set_yticks(range(len(labels)), ["\n".join(textwrap.wrap(label, 34)) for label in labels], fontsize=9)
    ax.invert_yaxis()  # the first label on top, as in the table
    ax.set_xlim(0, largest * 1.18)
    ax.set_xlabel("seconds" if unit == "s" else unit)
    ax.set_title("\n".join(title_lines), fontsize=10)
    fig.legend(*ax.get_legend_handles_labels(), loc="lower center", ncol=len(series), fontsize=8, frameon=False)
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout(rect=(0, 0.3 / fig.get_figheight(), 1, 1))  # the legend below the axes
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    print(f"chart: {path}")
    return path


def markdown_table(doc: Path, header_start: str) -> list[list[str]]:
    """The body rows (cells stripped, backticks removed) of the first table in `doc` whose header
    row starts with `header_start` (e.g. "| | Parquet |")."""
    lines = doc.read_text().splitlines()
    for number, line in enumerate(lines):
        if line.startswith(header_start):
            rows = []
            for row in lines[number + 2:]:  # after the header and its rule
                if not row.startswith("|"):
                    break
                rows.append([cell.strip().replace("`", "") for cell in row.strip().strip("|").split("|")])
            return rows
    raise ValueError(f"{doc}: no table whose header starts with {header_start!r}")


def seconds(cell: str) -> float:
    """The seconds a table cell starts with: '1.44 s', '5.62 s (1.35 s above the floor)'."""
    found = re.match(r"\s*([\d.]+)\s*s\b", cell)
    if found is None:
        raise ValueError(f"not a time in seconds: {cell!r}")
    return float(found[1])

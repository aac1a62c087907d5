"""The quickstart notebook runs top to bottom in a fresh kernel (its own local SparkSession, set up by
spark_mergetree.configure) and prints what its saved outputs show.

The notebook is committed with its outputs. After changing it, save them again with

    python3 -m tests.spark.test_notebook

(run from the repository, with the session extension's jar built: ./scripts/build-jvm).
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

import nbformat
import pytest
from nbclient import NotebookClient

from spark_mergetree.spark.filters import FILTER_PUSHDOWN

pytestmark = pytest.mark.spark

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "quickstart.ipynb"


def kernel_environment(directory: Path) -> dict[str, str]:
    """The kernel's environment: this interpreter for Spark's Python workers, temporary files and a
    coordinator under `directory`, nothing of the tests' own Spark session (a Connect one sets
    variables of its own)."""
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("SPARK_CONNECT", "SPARK_LOCAL_REMOTE", "SPARK_REMOTE", "PYSPARK_"))}
    return dict(env, PYSPARK_PYTHON=sys.executable, TMPDIR=str(directory),
                SPARK_MERGETREE_COORDINATOR=(directory / "coordinator").resolve().as_uri())


def execute(directory: Path) -> Any:
    """The notebook run in a fresh kernel whose working and temporary directory is `directory`,
    without what the kernel wrote on stderr (the JVM's start-up notes)."""
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    client = NotebookClient(notebook, timeout=300, kernel_name="python3", record_timing=False,
                            resources={"metadata": {"path": str(directory)}})
    client.execute(env=kernel_environment(directory))
    for cell in notebook.cells:
        if cell.cell_type == "code":
            cell.outputs = [o for o in cell.outputs if not (o.output_type == "stream" and o.name == "stderr")]
    return notebook


def _text(cell: Any) -> str:
    return "".join(o.get("text", "") for o in cell.get("outputs", []) if o.output_type == "stream")


def _code_cells(notebook: Any) -> list[Any]:
    return [cell for cell in notebook.cells if cell.cell_type == "code"]


def test_saved_notebook_uses_configure_and_holds_its_outputs() -> None:
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    source = "\n".join(cell.source for cell in notebook.cells)
    assert "spark_mergetree.configure(" in source and "sys.path" not in source
    assert "reads every granule" not in source
    cells = _code_cells(notebook)
    assert all(cell.execution_count for cell in cells), "save the executed notebook (see this module's docstring)"
    text = "".join(_text(cell) for cell in cells)
    assert "200000 rows" in text and "the scan read" in text
    assert not re.search(r"/tmp/|/home/|/root/|\d+\.\d+ ?s\b", text), "machine-specific paths or timings saved"
    assert any("image/png" in o.get("data", {}) for cell in cells for o in cell.outputs)


@pytest.mark.own_session  # the kernel's session is classic whatever the tests' session is
def test_quickstart_notebook_executes_and_prints_its_saved_outputs(spark, tmp_path: Path) -> None:
    # `spark` is requested only so the shared session (and the extension's jar) exists first.
    saved = nbformat.read(NOTEBOOK, as_version=4)
    ran = execute(tmp_path)
    outputs = [o for cell in _code_cells(ran) for o in cell.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    assert any("image/png" in o.get("data", {}) for o in outputs), "the pruning plot was not drawn"
    if not FILTER_PUSHDOWN:
        # PySpark 4.0 pushes no filter to Python data sources: its scans read every row (the notebook
        # says pruning by Spark's filters needs 4.1+); everything else it prints is the same.
        def unpruned(text: str) -> str:
            return re.sub(r"the scan read +[\d,]+", "the scan read N", text)

        assert [unpruned(_text(cell)) for cell in _code_cells(ran)] == [
            unpruned(_text(cell)) for cell in _code_cells(saved)]
        return
    assert [_text(cell) for cell in _code_cells(ran)] == [_text(cell) for cell in _code_cells(saved)]
    text = "".join(_text(cell) for cell in _code_cells(ran))
    # Spark's filter read whole granules of the key range, not the table (1024 rows a granule).
    scans = [(int(found.replace(",", "")), int(read.replace(",", ""))) for found, read in
             re.findall(r": +([\d,]+) rows; +\d+ of \d+ granules, the scan read +([\d,]+) of", text)]
    assert len(scans) == 5
    for found, read in scans:  # at most a granule more at each end of the range in each month's part
        assert found <= read <= found + 4 * 1024 < 200_000
    january = sum(1 for i in range(200_000) if i % 60 < 31)
    assert f"day >= '2024-02-01': {200_000 - january:,} rows; the scan read {200_000 - january:,} rows" in text


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as work:
        nbformat.write(execute(Path(work)), NOTEBOOK)
    print(f"saved the outputs of {NOTEBOOK}")

"""The quickstart notebook runs top to bottom in a fresh kernel (its own local SparkSession)."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

pytestmark = pytest.mark.spark

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "quickstart.ipynb"


@pytest.mark.own_session  # the kernel's session is classic whatever the tests' session is
def test_quickstart_notebook_executes(spark) -> None:
    # `spark` is requested only so the shared session exists first; the kernel starts its own.
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    client = NotebookClient(notebook, timeout=300, kernel_name="python3",
                            resources={"metadata": {"path": str(NOTEBOOK.parent)}})
    client.execute()
    outputs = [output for cell in notebook.cells if cell.cell_type == "code" for output in cell.get("outputs", [])]
    assert not [o for o in outputs if o.output_type == "error"]
    assert any("image/png" in o.get("data", {}) for o in outputs), "the pruning plot was not drawn"
    text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert "200000 rows" in text and "granules" in text

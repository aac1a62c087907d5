"""Every Python example of the README runs (with /data/ pointed at a temporary directory)."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"


def _blocks() -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", README.read_text(), re.MULTILINE | re.DOTALL)


def test_readme_has_examples():
    assert len(_blocks()) >= 4


def test_readme_python_examples_run(spark, tmp_path):
    # The session's coordinator (tests/conftest.py): Spark's Python workers were started with it, so
    # the user's process and Spark's agree on the default, as they do in a deployment.
    for number, block in enumerate(_blocks()):
        root = tmp_path / f"block{number}"
        root.mkdir()
        code = block.replace('"/data/', f'"{root}/').replace("f\"/data/", f'f"{root}/')
        exec(compile(code, f"README.md python block {number}", "exec"), {"spark": spark, "__name__": "readme"})

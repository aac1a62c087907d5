"""Every Python example of the README runs, in order, in one directory (as a user pasting them one
after another would run them: `./data/...` pointed at a temporary directory), and the README's
command line section names every command of the parser."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"


def _blocks() -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", README.read_text(), re.MULTILINE | re.DOTALL)


def test_readme_has_examples():
    assert len(_blocks()) >= 4


def test_readme_paths_are_writable_by_a_user():
    text = README.read_text()
    assert not re.search(r"(?<![.\w])/data/", text), "paths under /data need root: write ./data/..."


def test_readme_python_examples_run_in_order(spark, tmp_path):
    # The session's coordinator (tests/conftest.py): Spark's Python workers were started with it, so
    # the user's process and Spark's agree on the default, as they do in a deployment. One root for
    # every block: two examples that create one path with different columns fail here.
    root = tmp_path / "data"
    root.mkdir()
    for number, block in enumerate(_blocks()):
        code = block.replace('"./data/', f'"{root}/').replace("f\"./data/", f'f"{root}/')
        exec(compile(code, f"README.md python block {number}", "exec"), {"spark": spark, "__name__": "readme"})


def test_readme_command_line_section_names_every_command():
    from spark_mergetree.cli import main

    section = README.read_text().split("## Command line", 1)[1].split("\n## ", 1)[0]
    for name, command in main.commands.items():
        assert f"`{name}" in section or f"| {name}" in section or f" {name} " in section, name
        for sub in getattr(command, "commands", {}):
            assert sub in section, f"{name} {sub}"

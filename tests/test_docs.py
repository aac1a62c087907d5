"""Every Python example of docs/*.md runs as written, as tests/test_readme.py runs the README's: the
blocks of one doc file in order, in one namespace (a reader going through the page in one session)
and one directory of its own (`./data/...` pointed at a temporary directory), on the tests' shared
SparkSession (a block's `x = ...SparkSession.builder...getOrCreate()` gets it).

A block that needs what the suite cannot give (a Databricks workspace, a cluster of several hosts,
spark-submit) opens with the visible line `# not run in the tests: <reason>`; every other python
block runs. Blocks indented under a list item count too.
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parent.parent / "docs"
NOT_RUN = "# not run in the tests:"
_FENCE = re.compile(r"^(?P<indent>[ \t]*)```python[ \t]*\n(?P<body>.*?)^(?P=indent)```[ \t]*$", re.MULTILINE | re.DOTALL)
_SESSION = re.compile(r"^(?P<indent>[ \t]*)(?P<name>\w+)\s*=\s*.*\bSparkSession\.builder\b.*\.getOrCreate\(\)[ \t]*$",
                      re.MULTILINE)


@dataclass(frozen=True)
class Block:
    line: int  # 1-based line of the opening fence
    code: str  # dedented
    not_run: str | None  # the reason given by the marker line, or None: the block runs


def python_blocks(text: str) -> list[Block]:
    blocks = []
    for match in _FENCE.finditer(text):
        indent = match["indent"]
        body = "".join(line[len(indent):] if line.startswith(indent) else line
                       for line in match["body"].splitlines(keepends=True))
        code = textwrap.dedent(body)
        first = code.lstrip("\n").split("\n", 1)[0].strip()
        reason = first[len(NOT_RUN):].strip() if first.startswith(NOT_RUN) else None
        blocks.append(Block(text.count("\n", 0, match.start()) + 1, code, reason))
    return blocks


def runnable(code: str, data_root: Path) -> str:
    """The block as the test runs it: `./data/` under `data_root`, a session built by the block
    replaced by the tests' one (its static settings are the same: tests/conftest.py)."""
    code = _SESSION.sub(lambda m: f"{m['indent']}{m['name']} = spark  # the tests' shared session", code)
    return code.replace('"./data/', f'"{data_root}/').replace("'./data/", f"'{data_root}/")


def _doc_files() -> list[Path]:
    return sorted(DOCS.glob("*.md"))


def test_the_marker_convention() -> None:
    text = ("x\n```python\nprint(1)\n```\n* item\n\n  ```python\n  # not run in the tests: needs a Databricks "
            "workspace\n  dbutils.fs.ls('/')\n  ```\n```bash\nls\n```\n")
    blocks = python_blocks(text)
    assert [(b.line, b.code, b.not_run) for b in blocks] == [
        (2, "print(1)\n", None),
        (7, "# not run in the tests: needs a Databricks workspace\ndbutils.fs.ls('/')\n", "needs a Databricks workspace")]
    session = 'import x\nspark = x.configure(SparkSession.builder.master("local[4]")).getOrCreate()\n'
    assert runnable(session, Path("/r")) == "import x\nspark = spark  # the tests' shared session\n"
    assert runnable('t.save("./data/t")', Path("/r")) == 't.save("/r/t")'


@pytest.mark.parametrize("doc", _doc_files(), ids=lambda path: path.name)
def test_blocks_not_run_say_why(doc: Path) -> None:
    for block in python_blocks(doc.read_text()):
        assert block.not_run != "", f"{doc.name}:{block.line}: `{NOT_RUN}` needs a reason after the colon"
        assert NOT_RUN not in block.code.split("\n", 1)[-1], f"{doc.name}:{block.line}: the marker goes on the first line"


@pytest.mark.parametrize("doc", _doc_files(), ids=lambda path: path.name)
def test_doc_paths_are_writable_by_a_user(doc: Path) -> None:
    assert not re.search(r"(?<![.\w])/data/", doc.read_text()), f"{doc.name}: paths under /data need root: write ./data/..."


@pytest.mark.parametrize("doc", _doc_files(), ids=lambda path: path.name)
def test_doc_images_exist(doc: Path) -> None:
    for image in re.findall(r"!\[[^\]]*\]\(([^)\s]+)\)", doc.read_text()):
        assert (doc.parent / image).is_file(), f"{doc.name}: {image} is missing"


@pytest.mark.parametrize("doc", [d for d in _doc_files() if any(b.not_run is None for b in python_blocks(d.read_text()))],
                         ids=lambda path: path.name)
def test_doc_python_examples_run_in_order(doc: Path, spark, tmp_path: Path) -> None:
    root = tmp_path / "data"
    root.mkdir()
    namespace: dict[str, object] = {"spark": spark, "__name__": "docs"}
    for block in python_blocks(doc.read_text()):
        if block.not_run is None:
            exec(compile(runnable(block.code, root), f"docs/{doc.name}:{block.line}", "exec"), namespace)

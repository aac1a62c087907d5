"""The package's layering, checked on its source (every import, function-level ones included).

    spark/, cli.py           the PySpark DataSource and the command line
      catalog/               Atomic databases over UUID directories (creates tables through the engine)
        engine/              a table: parts at a snapshot, insert, select, merge, cleanup
          txn/, expressions/ visibility and commit logs; SQL text → expression trees
            storage/         where part bytes live (uses format/'s helpers, never the reverse)
              format/        the bytes of a part
                fileops.py   file operations every layer uses; recovery.py, the recovery report
                jvm.py       the session extension's jar and its build (standard library only)
                  errors.py  the one error hierarchy

A module imports only from its own package or from packages below it; packages on the same
level do not import each other. Only spark/ imports pyspark. Imports do not form cycles (imports
under `if TYPE_CHECKING:` are for annotations only and do not count there).
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "spark_mergetree"

LEVEL = {
    "errors": 0, "fileops": 1, "recovery": 1, "jvm": 1, "format": 2, "storage": 3, "txn": 4, "expressions": 4, "engine": 5,
    "catalog": 6, "spark": 7, "cli": 7, "__main__": 8, "__init__": 8,
}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def _imports(name: str, path: Path) -> list[tuple[str, int, bool]]:
    """(imported module, line, only for type checking) of every import in a module."""
    tree = ast.parse(path.read_text(), str(path))
    typing_only: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            typing_only.update(id(inner) for statement in node.body for inner in ast.walk(statement))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".")
                base = base[:len(base) - node.level + (1 if path.name == "__init__.py" else 0)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            submodules = [f"{module}.{alias.name}" for alias in node.names if f"{module}.{alias.name}" in MODULES]
            targets = submodules + ([module] if len(submodules) < len(node.names) else [])
        else:
            continue
        found += [(target, node.lineno, id(node) in typing_only) for target in targets]
    return found


def _package_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def test_every_package_has_a_level() -> None:
    assert {_package_of(name) for name in MODULES} <= set(LEVEL)


def test_no_module_imports_a_higher_or_sibling_layer() -> None:
    wrong = []
    for name, path in MODULES.items():
        mine = _package_of(name)
        for target, line, _ in _imports(name, path):
            if not target.startswith("spark_mergetree"):
                continue
            theirs = _package_of(target)
            if theirs != mine and LEVEL[theirs] >= LEVEL[mine]:
                wrong.append(f"{path.relative_to(PACKAGE.parent)}:{line}: {mine} imports {target}")
    assert not wrong, "imports against the layering:\n" + "\n".join(wrong)


def test_only_the_spark_layer_imports_pyspark() -> None:
    wrong = [f"{path.relative_to(PACKAGE.parent)}:{line}: imports {target}"
             for name, path in MODULES.items() if _package_of(name) != "spark"
             for target, line, _ in _imports(name, path) if target.split(".")[0] in ("pyspark", "py4j")]
    assert not wrong, "pyspark outside spark/:\n" + "\n".join(wrong)


def test_imports_form_no_cycles() -> None:
    graph = {name: {target for target, _, typing_only in _imports(name, path)
                    if target in MODULES and target != name and not typing_only}
             for name, path in MODULES.items()}
    cycles = []
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()

    def visit(node: str) -> None:  # Tarjan's strongly connected components
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for successor in graph[node]:
            if successor not in index:
                visit(successor)
                low[node] = min(low[node], low[successor])
            elif successor in on_stack:
                low[node] = min(low[node], index[successor])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in graph:
        if node not in index:
            visit(node)
    assert not cycles, f"import cycles: {cycles}"


def test_the_checker_sees_function_level_and_relative_imports(tmp_path: Path) -> None:
    """The checks above would pass vacuously if imports inside functions went unseen."""
    found = {target for target, _, _ in _imports("spark_mergetree.spark.adapter", PACKAGE / "spark" / "adapter.py")}
    assert "pyspark" in found  # imported inside a function there
    assert "spark_mergetree.catalog.catalog" in found or "spark_mergetree.catalog" in found

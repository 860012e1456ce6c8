"""The compiler package stays easy to change: small files, no import cycles."""

from __future__ import annotations

import ast
from pathlib import Path

import compiler

ROOT = Path(compiler.__file__).parent
MAX_LINES = 500


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def imports_of(path: Path, module: str, known: set[str]) -> set[str]:
    """Compiler modules ``module`` imports anywhere (function-level too; ``TYPE_CHECKING`` blocks
    aside, they never run)."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text()))
    # a package's own __init__ is not an edge back to it
    return {m for m in found if m in known and m != module and not module.startswith(m + ".")
            and m != "compiler"}


def import_cycles() -> list[list[str]]:
    modules = _modules()
    graph = {m: imports_of(p, m, set(modules)) for m, p in modules.items()}
    cycles, state = [], {}

    def dfs(m: str, stack: list[str]) -> None:
        state[m] = "open"
        for dep in sorted(graph[m]):
            if state.get(dep) == "open":
                cycles.append(stack[stack.index(dep):] + [dep])
            elif dep not in state:
                dfs(dep, stack + [dep])
        state[m] = "done"

    for m in sorted(graph):
        if m not in state:
            dfs(m, [m])
    return cycles


def test_no_import_cycles_in_the_compiler() -> None:
    assert import_cycles() == []


def test_no_compiler_file_over_500_lines() -> None:
    sizes = {str(p.relative_to(ROOT.parent)): len(p.read_text().splitlines()) for p in _modules().values()}
    assert {f: n for f, n in sizes.items() if n > MAX_LINES} == {}

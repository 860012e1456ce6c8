"""Project hygiene: one module reads the environment, every variable is validated, one cache root,
packages import only downward.

These tests read source text; they import no Dynamo and run in milliseconds. The docs' tables of
options, variables and debug levels are checked against ``compiler/config.py`` by
``tests/test_docs.py``, which reuses ``variables_config_reads`` from here.
"""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest

from compiler import config

REPO = Path(__file__).resolve().parents[1]
COMPILER = REPO / "compiler"
CONFIG = COMPILER / "config.py"
ENV_FUNCTIONS = {"getenv", "putenv", "unsetenv", "getenvb"}
ENV_NAMES = {"environ", "environb"}


def environment_reads(source: str) -> list[int]:
    """Line numbers where ``source`` touches the process environment through ``os``."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr in ENV_NAMES | ENV_FUNCTIONS:
            lines.append(node.lineno)
        elif isinstance(node, ast.ImportFrom) and node.module == "os":
            if any(alias.name in ENV_NAMES | ENV_FUNCTIONS for alias in node.names):
                lines.append(node.lineno)
    return lines


def test_environment_read_detector_sees_every_spelling() -> None:
    spellings = ["os.environ.get('X')", "os.environ['X']", "os.getenv('X')", "'X' in os.environ",
                 "from os import environ", "from os import getenv as g", "os.environ.setdefault('X', '')"]
    for text in spellings:
        assert environment_reads(text), text
    assert not environment_reads("config.cache_root()\nenviron_like = 1")


def test_only_config_reads_the_environment() -> None:
    offenders = [f"{path.relative_to(REPO)}:{line}" for path in sorted(COMPILER.rglob("*.py")) if path != CONFIG
                 for line in environment_reads(path.read_text())]
    assert not offenders, ("read the environment through compiler/config.py, not directly: "
                           + ", ".join(offenders))


def variables_config_reads() -> set[str]:
    """Names of the environment variables config.py reads, from its source."""
    names = set()
    for node in ast.walk(ast.parse(CONFIG.read_text())):
        func = node.func if isinstance(node, ast.Call) else None
        is_read = isinstance(func, ast.Attribute) and (
            func.attr == "getenv" or (func.attr == "get" and getattr(func.value, "attr", None) == "environ"))
        if is_read and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
            names.add(node.args[0].value)
        elif isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) \
                and getattr(node.value, "attr", None) == "environ":
            names.add(node.slice.value)
    return names


def test_code_uses_only_documented_debug_levels() -> None:
    """Every ``debug_level() >= N`` (or ``level >= N`` on its value) names a level of DEBUG_LEVELS."""
    used = set()
    for path in COMPILER.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Compare):
                continue
            left = node.left
            is_level = (isinstance(left, ast.Call) and getattr(left.func, "attr", None) == "debug_level") \
                or (isinstance(left, ast.Name) and left.id == "level")
            if is_level:
                used |= {c.value for c in node.comparators if isinstance(c, ast.Constant)
                         and type(c.value) is int}  # not a kernel's store level ("x", "xr")
    assert used and used <= set(config.DEBUG_LEVELS), sorted(used)


@pytest.mark.parametrize("variable", ["CRUCIBLE_CACHE_DIR", "XDG_CACHE_HOME"])
def test_cache_root_expands_home(variable: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Regression: the C++ cache expanded ``~`` in CRUCIBLE_CACHE_DIR and the Triton cache did not,
    so one setting put the two caches in different trees (one of them a literal ``~`` directory)."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("CRUCIBLE_CACHE_DIR", raising=False)
    monkeypatch.setenv(variable, "~/kernels")
    expected = tmp_path / "kernels" if variable == "CRUCIBLE_CACHE_DIR" else tmp_path / "kernels" / "crucible"
    assert config.cache_root() == expected
    from compiler import cpp_build, runtime

    assert cpp_build.cache_dir() == expected / "cpp"
    assert runtime.triton_source_dir() == expected / "triton"


def test_triton_cache_refuses_a_directory_others_can_write(monkeypatch: pytest.MonkeyPatch,
                                                            tmp_path: Path) -> None:
    """Regression: the Triton module cache imported files from a world-writable directory, which
    the C++ cache already refused (importing a module runs its code)."""
    from compiler import runtime

    monkeypatch.setenv("CRUCIBLE_CACHE_DIR", str(tmp_path))
    path = runtime.triton_source_dir()
    assert path.stat().st_mode & 0o777 == 0o700
    path.chmod(0o777)
    with pytest.raises(config.UnsafeCacheDir, match="not writable by others"):
        runtime.load_module("X = 1\n", "hygiene_probe")


def test_environment_override_restores(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CRUCIBLE_CACHE_DIR", "/before")
    with config.environment_override("CRUCIBLE_CACHE_DIR", "/during"):
        assert str(config.cache_root()) == "/during"
    assert str(config.cache_root()) == "/before"
    monkeypatch.delenv("CRUCIBLE_CACHE_DIR")
    with config.environment_override("CRUCIBLE_CACHE_DIR", "/during"):
        pass
    assert "CRUCIBLE_CACHE_DIR" not in os.environ


def test_cpp_tuning_flags_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CRUCIBLE_CPP_FLAGS", raising=False)
    assert config.cpp_tuning_flags() == config.DEFAULT_CPP_TUNING_FLAGS
    monkeypatch.setenv("CRUCIBLE_CPP_FLAGS", "-O2 '-DNAME=a b'")
    assert config.cpp_tuning_flags() == ("-O2", "-DNAME=a b")
    monkeypatch.setenv("CRUCIBLE_CPP_FLAGS", "")
    assert config.cpp_tuning_flags() == ()



def test_debug_level_parsing(monkeypatch: pytest.MonkeyPatch) -> None:
    """Regression: an unparsable CRUCIBLE_DEBUG (``=yes``, ``=-1``) silently meant level 1; it is
    now a one-line error naming the variable and the levels, like CRUCIBLE_COMPILE_THREADS."""
    for value, level in (("", 0), (" ", 0), ("0", 0), ("2", 2), ("3", 3)):
        monkeypatch.setenv("CRUCIBLE_DEBUG", value)
        assert config.debug_level() == level
    monkeypatch.delenv("CRUCIBLE_DEBUG")
    assert config.debug_level() == 0
    for bad in ("yes", "-1"):
        monkeypatch.setenv("CRUCIBLE_DEBUG", bad)
        with pytest.raises(ValueError, match=rf"CRUCIBLE_DEBUG='{bad}': expected a level 0-3"):
            config.debug_level()


# --- imports between modules ----------------------------------------------------------------------

LAYERS = ("corpus", "compiler", "simulator", "harness")  # each may import only the ones before it


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    """ids of the nodes under ``if TYPE_CHECKING:`` (imports for annotations never run)."""
    skipped = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped.update(id(n) for n in ast.walk(node))
    return skipped


def imported_modules(path: Path, known: set[str], module: str | None = None) -> dict[str, int]:
    """The project modules ``path`` imports (function-level imports included, ``TYPE_CHECKING``
    blocks not, ``importlib.import_module("a.literal")`` included), each with its first line. ``from pkg import sub`` counts as importing ``pkg.sub``
    alone when ``sub`` is a module: the package's ``__init__`` runs first, but what the importer
    depends on is the submodule."""
    tree = ast.parse(path.read_text())
    skipped = _type_checking_nodes(tree)
    parts = (module or _module_name(path)).split(".")
    package = parts if path.name == "__init__.py" else parts[:-1]
    found: dict[str, int] = {}
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = ".".join(package[:len(package) - node.level + 1] + [node.module or ""]).strip(".") \
                if node.level else node.module or ""
            subs = [f"{base}.{alias.name}" for alias in node.names]
            names = subs if all(s in known for s in subs) else [base, *[s for s in subs if s in known]]
        elif (isinstance(node, ast.Call) and ast.unparse(node.func).endswith("import_module") and node.args
              and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            names = [node.args[0].value]
        for name in names:
            if name in known:
                found.setdefault(name, node.lineno)
    return found


def import_graph(packages: tuple[str, ...] = LAYERS) -> dict[str, dict[str, int]]:
    """module -> {imported project module: line}, for every module of ``packages``."""
    paths = {_module_name(p): p for pkg in packages for p in sorted((REPO / pkg).rglob("*.py"))}
    known = set(paths)
    return {name: {m: line for m, line in imported_modules(path, known).items() if m != name}
            for name, path in paths.items()}


def import_cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(graph[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            child = next((e for e in edges if e in graph), None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(graph[child])))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    cycles.append(sorted(component))
    return cycles


def test_import_cycle_detector_sees_function_level_imports(tmp_path: Path) -> None:
    graph = {"a": {"b": 1}, "b": {"c": 3}, "c": {"a": 7}, "d": {"a": 2}}
    assert import_cycles(graph) == [["a", "b", "c"]]
    assert import_cycles({"a": {"b": 1}, "b": {}}) == []
    module = tmp_path / "probe.py"
    module.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import simulator.launch\n"
                      "def f():\n    from simulator import session\n    from compiler.ir import Expr\n"
                      "    importlib.import_module('harness.cli')\n")
    found = imported_modules(module, {"simulator.launch", "simulator.session", "compiler.ir", "compiler", "harness.cli"},
                             "probe")
    assert found == {"simulator.session": 5, "compiler.ir": 6, "harness.cli": 7}


def test_no_import_cycles_in_the_whole_tree() -> None:
    """Regression: ``simulator.reference`` and ``simulator.reference_templates`` imported each other
    (one of the imports inside a function); in the harness, the runner's pool, the fuzzer's executor
    and the decomposition campaign, the fuzzer's op specs and their builder, the minimizer's check and
    its worker, and the CLI and the minimizer's command did. Function-level imports count."""
    cycles = import_cycles(import_graph(LAYERS))
    assert not cycles, f"import cycles: {cycles}"


def test_packages_import_only_downward() -> None:
    """Regression: the runtime and the wrapper imported ``simulator.interpreter`` inside functions (an
    upward import: the simulator sits above the compiler); the simulator now installs its checks
    through ``compiler.kernel_checks``. Function-level imports count; ``TYPE_CHECKING`` ones do not."""
    rank = {package: i for i, package in enumerate(LAYERS)}
    upward = [f"{module} -> {imported} (line {line})" for module, imports in import_graph().items()
              for imported, line in imports.items()
              if rank[imported.split(".")[0]] > rank[module.split(".")[0]]]
    assert not upward, "imports against the layering corpus <- compiler <- simulator <- harness: " + "; ".join(upward)


# Each variable config.py reads, by how ``environment_problems`` validates it.
VALIDATED_VARIABLES = {*config.BOOLEAN_VARIABLES, "CRUCIBLE_DEBUG", "CRUCIBLE_COMPILE_THREADS",
                       "CRUCIBLE_COMPILE_PROCESSES", "CRUCIBLE_CPP_FLAGS", "CXX", "CRUCIBLE_CACHE_DIR", "XDG_CACHE_HOME",
                       "CRUCIBLE_DUMP_DIR", "CRUCIBLE_TUNING_CACHE"}


def test_environment_problems_cover_every_variable() -> None:
    """A variable added to config.py must be validated by ``environment_problems`` (then listed here)."""
    assert variables_config_reads() == VALIDATED_VARIABLES


@pytest.fixture
def clean_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    for name in VALIDATED_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("CRUCIBLE_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path


def test_environment_problems_name_variable_value_and_remedy(clean_environment: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Regression: a bad value (``CRUCIBLE_DEBUG=abc``) surfaced as a compile failure of every harness
    entry; ``environment_problems`` reports each one up front, one line each."""
    assert config.environment_problems() == []
    a_file = clean_environment / "a_file"
    a_file.write_text("")
    bad = {"CRUCIBLE_DEBUG": ("abc", "expected a level 0-3"),
           "CRUCIBLE_COMPILE_THREADS": ("0", "expected a positive integer"),
           "CRUCIBLE_COMPILE_PROCESSES": ("many", "expected 0 (build on threads) or a positive number"),
           "CRUCIBLE_KERNEL_TIMES": ("yes", "expected 0 or 1"),
           "CRUCIBLE_STATIC_LAUNCH": ("true", "expected 0 or 1"),
           "CRUCIBLE_CPP_FLAGS": ("-O2 '-DNAME", "fix its quoting"),
           "CXX": ("no-such-compiler-here -v", "not an executable on PATH; install it"),
           "CRUCIBLE_CACHE_DIR": (str(a_file / "cache"), f"{a_file} is not a directory; point CRUCIBLE_CACHE_DIR at"),
           "CRUCIBLE_DUMP_DIR": (str(a_file), f"{a_file} is not a directory; give a directory"),
           "CRUCIBLE_TUNING_CACHE": (str(clean_environment), "is a directory; give a file path")}
    for name, (value, _) in bad.items():
        monkeypatch.setenv(name, value)
    problems = config.environment_problems()
    assert len(problems) == len(bad), problems
    for name, (value, remedy) in bad.items():
        (line,) = [p for p in problems if p.startswith(f"{name}={value!r}: ")]
        assert remedy in line and "\n" not in line, line


def test_environment_problems_see_unsafe_cache_directories(clean_environment: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CRUCIBLE_CACHE_DIR", str(clean_environment / "open"))
    (clean_environment / "open" / "cpp").mkdir(parents=True)
    (clean_environment / "open" / "cpp").chmod(0o777)
    (problem,) = config.environment_problems()
    assert problem.startswith(f"CRUCIBLE_CACHE_DIR='{clean_environment / 'open'}': ") and "writable by others" in problem
    monkeypatch.delenv("CRUCIBLE_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(clean_environment / "open" / "cpp"))  # the root is cpp/crucible
    assert config.environment_problems() == []


def test_environment_problems_without_a_kernel_checker(clean_environment: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """CRUCIBLE_SIM_CHECK=1 where no checker is registered (an uninstalled checkout) is reported before a
    run, with what to do."""
    from compiler import kernel_checks

    monkeypatch.setenv("CRUCIBLE_SIM_CHECK", "1")
    monkeypatch.setattr(kernel_checks, "ENTRY_POINT_GROUP", "crucible.kernel_checks_nobody_registers")
    kernel_checks.registered.cache_clear()
    try:
        (problem,) = config.environment_problems()
    finally:
        kernel_checks.registered.cache_clear()
    assert problem.startswith("CRUCIBLE_SIM_CHECK=1 asks for checked Triton kernels") and "pip install -e ." in problem

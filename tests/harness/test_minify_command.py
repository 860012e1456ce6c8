"""``crucible minify``'s settings are checked before any work starts (one line, exit 2, nothing
written), the entry is found with ``--corpus``, and the minimizer's modules import no cycle and
never ``harness.cli``. Everything here runs in this process and captures nothing."""

from __future__ import annotations

import ast
import shlex
from pathlib import Path

import pytest

import harness.minify
from harness.cli import main
from harness.result import Result
from harness.store import ResultStore

TINY = """
import torch
from corpus.entry import Built, Entry


def entries():
    return [Entry(name="tiny/sine", source="tiny", family="mlp", tier="smoke",
                  factory=lambda scale: Built(torch.nn.Identity(), (torch.randn(3),)))]
"""


@pytest.fixture(autouse=True)
def _here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    # the planted bugs of test_minify's workers must never be imported into this process
    monkeypatch.delenv("CRUCIBLE_MINIFY_PLUGINS", raising=False)


def _usage_error(args: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """The one line ``crucible minify ARGS`` prints, having exited 2 and written nothing."""
    assert main(["minify", *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert not Path("out").exists()
    return err


@pytest.mark.parametrize("args, message", [
    (["--time-limit", "0"], "--time-limit must be a positive number, got 0"),
    (["--max-checks", "-3"], "--max-checks must be a positive integer, got -3"),
    (["--check-timeout", "-5"], "--check-timeout must be a positive number, got -5"),
    (["--corpus", "missing"], "--corpus missing: no such directory"),
    (["--plugin", "no_such_plugin_module"], "--plugin no_such_plugin_module: no module of that name"),
    (["--plugin", "no_such_package.plugin"], "--plugin no_such_package.plugin: no module of that name"),
    (["--run", "r9"], "--run r9: no results database at"),
])
def test_bad_setting_stops_before_any_work(args: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert message in _usage_error(["tiny/sine", "--out", "out", "--target", "crucible-cpp", *args], capsys)


@pytest.mark.parametrize("target, message", [
    ("nosuch", "unknown target 'nosuch'"),
    ("crucible-cpp:nosuch=1", "crucible-cpp:nosuch=1"),
])
def test_bad_target_stops_before_any_work(target: str, message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert message in _usage_error(["tiny/sine", "--out", "out", "--target", target], capsys)


def test_out_must_be_a_directory(capsys: pytest.CaptureFixture[str]) -> None:
    Path("file").write_text("")
    assert "--out file: is a file" in _usage_error(["tiny/sine", "--out", "file", "--target", "crucible-cpp"], capsys)
    assert "file is a file, so the directory cannot be created" in _usage_error(
        ["tiny/sine", "--out", "file/sub", "--target", "crucible-cpp"], capsys)


def test_run_missing_from_the_database(capsys: pytest.CaptureFixture[str]) -> None:
    db = "my runs.sqlite"
    with ResultStore(db) as store:
        store.create_run("r1", "tiny", "crucible-cpp", {})
        store.record("r1", Result(name="tiny/sine", target="crucible-cpp", status="fail_accuracy"))
    err = _usage_error(["tiny/sine", "--out", "out", "--db", db, "--run", "r9"], capsys)
    assert "--run r9: no such run" in err and shlex.join(["crucible", "report", "--runs", "--db", db]) in err
    err = _usage_error(["tiny/other", "--out", "out", "--db", db, "--run", "r1"], capsys)
    assert "has no entry 'tiny/other'" in err


def test_entry_is_looked_up_in_the_external_corpus(make_corpus, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    from harness.minify.command import find_entry

    corpus = make_corpus(tmp_path / "my corpus", {"tiny.py": TINY})
    args = ["--corpus", str(corpus), "--target", "crucible-cpp", "--out", "out"]
    err = _usage_error(["tiny/sin", *args], capsys)
    assert "no corpus entry 'tiny/sin'; did you mean tiny/sine?" in err
    assert shlex.join(["crucible", "list", "--corpus", str(corpus)]) in err  # a command to paste, quoted
    import argparse

    found = find_entry(argparse.Namespace(entry="tiny/sine", corpus=[str(corpus)]))
    assert found.name == "tiny/sine"


def _imports(path: Path) -> set[str]:
    """Every module ``path`` imports, at the top or inside functions (both make a cycle)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names |= {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
    return names


def test_minify_modules_import_no_cycle_and_never_the_cli() -> None:
    """Regression: check.py imported worker.py inside a function while worker.py imported check.py,
    and command.py imported harness.cli (which imports command.py)."""
    root = Path(harness.minify.__file__).parent
    modules = {f"harness.minify.{p.stem}": _imports(p) for p in root.glob("*.py") if p.stem != "__init__"}
    for name, imported in modules.items():
        assert not any(i == "harness.cli" or i.startswith("harness.cli.") for i in imported), name
    edges = {name: {m for m in modules if m in imported} for name, imported in modules.items()}
    done: set[str] = set()

    def visit(name: str, path: tuple[str, ...]) -> None:
        assert name not in path, " -> ".join((*path, name))
        if name not in done:
            for nxt in edges[name]:
                visit(nxt, (*path, name))
            done.add(name)

    for name in edges:
        visit(name, ())

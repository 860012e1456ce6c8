"""The Triton kernel module cache (``compiler.runtime.load_module``): a damaged file is rewritten, not fatal."""

from __future__ import annotations

import importlib.util
import py_compile
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

import compiler
from compiler import runtime

SOURCE = "def answer():\n    return 41 + 1\n"


@pytest.fixture
def module_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("CRUCIBLE_CACHE_DIR", str(tmp_path))
    return tmp_path / "triton"


def _load_in_a_fresh_process(stem: str = "probe", source: str = SOURCE) -> object:
    """``load_module`` as a new process would run it: nothing of the cache loaded yet."""
    for key in [k for k in runtime._MODULES if k.startswith(f"crucible_gen_{stem}_")]:
        sys.modules.pop(key, None)
        del runtime._MODULES[key]
    return runtime.load_module(source, stem)


def truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:10])


def garble(path: Path) -> None:
    path.write_bytes(b"\xff\xfe" + path.read_bytes()[2:])  # not UTF-8: reading it as text raised


@pytest.mark.parametrize("damage", [truncate, garble])
def test_damaged_kernel_module_is_rewritten(module_cache: Path, damage: Callable[[Path], None],
                                            capfd: pytest.CaptureFixture) -> None:
    """Regression: a kernel module file that is not the source its name digests is rewritten, with
    one line on stderr; one that is not UTF-8 used to fail every load (UnicodeDecodeError)."""
    path = Path(_load_in_a_fresh_process().__file__)
    damage(path)
    capfd.readouterr()
    assert _load_in_a_fresh_process().answer() == 42
    assert path.read_text() == SOURCE
    assert capfd.readouterr().err == (f"crucible: rebuilt the Triton kernel module {path}: it did not match "
                                      f"the digest recorded when it was written (truncated or corrupted)\n")
    _load_in_a_fresh_process()
    assert not capfd.readouterr().err  # intact: reused as it is


def test_truncated_bytecode_next_to_a_module_is_not_loaded(module_cache: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Regression: modules were imported through Python's import, which trusts a ``__pycache__`` file
    whose header matches the source's time and size: a truncated one failed every later load of that
    kernel ("marshal data too short"). Modules are compiled from their verified source."""
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    path = Path(_load_in_a_fresh_process().__file__)
    cached = Path(importlib.util.cache_from_source(str(path)))
    py_compile.compile(str(path), cfile=str(cached))
    cached.write_bytes(cached.read_bytes()[:-12])
    assert _load_in_a_fresh_process().answer() == 42
    assert _load_in_a_fresh_process("other", "X = 1\n").__file__ != str(path)


def test_compiled_graph_survives_a_damaged_kernel_module(module_cache: Path, capfd: pytest.CaptureFixture) -> None:
    """End to end: a graph whose cached Triton kernel file was truncated compiles and runs."""
    x = torch.randn(6, 4)
    fn = lambda a: (a.sum(-1)[:, None] * a).exp()  # noqa: E731
    torch.testing.assert_close(compiler.compile_graph(compiler.trace_aten(fn, x), [x])(x), fn(x))
    files = sorted(module_cache.glob("crucible_gen_*.py"))
    assert files
    for path in files:
        truncate(path)
    runtime._MODULES.clear()
    capfd.readouterr()
    torch.testing.assert_close(compiler.compile_graph(compiler.trace_aten(fn, x), [x])(x), fn(x))
    assert capfd.readouterr().err.count("crucible: rebuilt the Triton kernel module") == len(files)

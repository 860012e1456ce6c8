"""The cyclic garbage collector is paused while a graph compiles (``compiler.backend.gc_paused``) and
restored afterwards, whatever the compile's outcome."""

from __future__ import annotations

import gc
import threading

import pytest
import torch

from compiler import backend
from compiler.lowering import LOWERINGS


@pytest.fixture
def seen_in_lowering(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """``gc.isenabled()`` as the lowering of ``aten.sin`` saw it, once per compile."""
    import compiler.lowerings  # noqa: F401  (register every rule first, or the import would undo the patch)

    seen: list[bool] = []
    real = LOWERINGS[torch.ops.aten.sin]

    def spy(*args, **kwargs):
        seen.append(gc.isenabled())
        return real(*args, **kwargs)

    monkeypatch.setitem(LOWERINGS, torch.ops.aten.sin, spy)
    return seen


def _compile_and_run(**options) -> torch.Tensor:
    x = torch.randn(8)
    compiled = torch.compile(lambda a: a.sin() + 1, backend="crucible", options={"strict": True, **options})
    out = compiled(x)
    torch.testing.assert_close(out, x.sin() + 1)
    return out


def test_collector_is_off_during_a_compile_and_on_after(seen_in_lowering: list[bool]) -> None:
    assert gc.isenabled()
    _compile_and_run()
    assert seen_in_lowering == [False]
    assert gc.isenabled()


def test_environment_keeps_the_collector_on(seen_in_lowering: list[bool], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CRUCIBLE_COMPILE_GC", "1")
    _compile_and_run()
    assert seen_in_lowering == [True]


def test_a_collector_the_user_turned_off_stays_off(seen_in_lowering: list[bool]) -> None:
    gc.disable()
    try:
        _compile_and_run()
        assert seen_in_lowering == [False]
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_a_failing_compile_restores_the_collector(monkeypatch: pytest.MonkeyPatch) -> None:
    import compiler.lowerings  # noqa: F401

    def explode(*args, **kwargs):
        raise RuntimeError("planted bug in the sin lowering")

    monkeypatch.setitem(LOWERINGS, torch.ops.aten.sin, explode)
    with pytest.raises(Exception, match="planted bug"):
        _compile_and_run()
    assert gc.isenabled()


def test_nested_and_concurrent_pauses_end_with_the_last() -> None:
    entered, release = threading.Event(), threading.Event()

    def other_compile() -> None:
        with backend.gc_paused():
            entered.set()
            release.wait(10)

    thread = threading.Thread(target=other_compile)
    with backend.gc_paused():
        thread.start()
        assert entered.wait(10)
        with backend.gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert not gc.isenabled()  # the other thread's compile is still running
    release.set()
    thread.join(10)
    assert gc.isenabled()

"""How kernels run in Triton's interpreter (compiler/interpreter.py): without the interpreter's dead
integer-overflow checks, which cost 5 numpy ops per int32 index op and check nothing unless Triton's
``debug`` option is on; and with ATen on one intra-op thread around them (no OpenMP wake-ups)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest
import torch
import triton
import triton.language as tl
from triton.runtime.interpreter import interpreter_builder

from compiler.interpreter import interpreted, interpreted_function, lean_interpreted_function, on_one_aten_thread


@triton.jit
def _gather(p0, p1, XBLOCK: tl.constexpr):
    x = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)
    row = x // 7
    col = x % 7
    src = tl.where(row * 7 + col - 3 > 0, row * 7 + col - 3, 0)
    tl.store(p1 + x, tl.load(p0 + src, mask=x < 100, other=-1.0), mask=x < 100)


@pytest.fixture
def options() -> Iterator[None]:
    saved = interpreter_builder.options
    yield
    interpreter_builder.options = saved


def _seen_during_launch(fn: object) -> list[bool]:
    seen: list[bool] = []
    fn.add_pre_run_hook(lambda *a, **k: seen.append(interpreter_builder.options.sanitize_overflow))
    return seen


def test_launches_skip_the_dead_overflow_checks_and_restore_them(options: None) -> None:
    x = torch.randn(100)
    expected, got = torch.empty(100), torch.empty(100)
    interpreted_function(_gather)[(4,)](x, expected, XBLOCK=32)
    fn = interpreted(_gather)
    seen = _seen_during_launch(fn)
    fn[(4,)](x, got, XBLOCK=32)
    assert seen == [False]
    assert interpreter_builder.options.sanitize_overflow  # Triton's default again after the launch
    assert torch.equal(got, expected)


def test_debug_mode_keeps_the_overflow_checks(options: None) -> None:
    interpreter_builder.options = dataclasses.replace(interpreter_builder.options, debug=True)
    fn = lean_interpreted_function(_gather)
    seen = _seen_during_launch(fn)
    fn[(4,)](torch.randn(100), torch.empty(100), XBLOCK=32)
    assert seen == [True]


def test_a_failing_launch_restores_the_options(options: None) -> None:
    before = interpreter_builder.options
    with pytest.raises(Exception, match="p1"):
        lean_interpreted_function(_gather)[(1,)](torch.randn(100), XBLOCK=32)  # p1 missing
    assert interpreter_builder.options is before


def test_one_aten_thread_inside_the_call_and_restored_after() -> None:
    saved = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        seen: list[int] = []

        def call(args: list) -> list:
            seen.append(torch.get_num_threads())
            if args:
                raise RuntimeError("boom")
            return args

        wrapped = on_one_aten_thread(call)
        wrapped([])
        assert seen == [1] and torch.get_num_threads() == 2
        with pytest.raises(RuntimeError, match="boom"):
            wrapped([1])
        assert seen == [1, 1] and torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(saved)


def test_graphs_with_interpreted_kernels_run_aten_on_one_thread(codegen: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Only interpreted graphs: C++ kernels use the intra-op threads themselves."""
    import compiler.backend

    wrapped: list[bool] = []

    def recording(call: object) -> object:
        wrapped.append(True)
        return on_one_aten_thread(call)

    monkeypatch.setattr(compiler.backend, "on_one_aten_thread", recording)
    x, w = torch.randn(8, 16), torch.randn(16, 4)
    fn = torch.compile(lambda x, w: torch.relu(x @ w) + 1, backend="crucible", options={"codegen": codegen})
    torch.testing.assert_close(fn(x, w), torch.relu(x @ w) + 1)
    assert wrapped == ([True] if codegen == "triton" else [])

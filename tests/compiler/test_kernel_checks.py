"""The hooks through which a checker wraps interpreted Triton kernels (compiler/kernel_checks.py).

These tests install a recording checker of their own, not the simulator's: the compiler's side of
the hooks must work for any checker (the simulator's own tests cover its checks)."""

from __future__ import annotations

from typing import Any

import pytest
import torch

import compiler
from compiler import interpreter, kernel_checks
from compiler.kernel_checks import KernelChecks, NoKernelChecks


class RecordingChecks:
    """A checker that launches kernels unchanged and records what passed through its hooks."""

    def __init__(self, name: str = "recording") -> None:
        self.launched: list[str] = []
        self.allocated: list[torch.Tensor] = []
        self.checks = KernelChecks(name, self.wrap, self.allocate)

    def wrap(self, fn: Any) -> Any:
        recorder = self

        class Recorded:
            def __getitem__(self, grid: Any) -> Any:
                def launch(*args: Any, **meta: Any) -> None:
                    recorder.launched.append(fn.fn.__name__)
                    fn[grid](*args, **meta)

                return launch

        return Recorded()

    def allocate(self, t: torch.Tensor) -> torch.Tensor:
        self.allocated.append(t)
        return t


def _two_kernels(x: torch.Tensor) -> torch.Tensor:
    return x.sum(-1)[:, None] * x.sum(0)[None, :]


def _compile(x: torch.Tensor, codegen: str = "triton") -> Any:
    return compiler.compile_graph(compiler.trace_aten(_two_kernels, x), [x], codegen=codegen)


def test_installed_checks_wrap_kernels_created_inside() -> None:
    """Kernels compiled inside ``installed`` launch through its hook, even when called after the block;
    the wrapper hands the hook every buffer it allocates; kernels compiled outside are plain."""
    x = torch.randn(8, 5)
    recording = RecordingChecks()
    with kernel_checks.installed(recording.checks):
        checked = _compile(x)
    torch.testing.assert_close(checked(x), _two_kernels(x))
    assert len(recording.launched) == 3 and len(recording.allocated) >= 2
    plain = _compile(x)
    plain(x)
    assert len(recording.launched) == 3


def test_innermost_block_wins_and_blocks_close_out_of_order() -> None:
    outer, inner = RecordingChecks("outer").checks, RecordingChecks("inner").checks
    assert kernel_checks.innermost() is None
    first = kernel_checks.installed(outer)
    first.__enter__()
    with kernel_checks.installed(inner):
        assert kernel_checks.innermost() is inner
        first.__exit__(None, None, None)  # the harness keeps one block open across an entry's phases
        assert kernel_checks.innermost() is inner
    assert kernel_checks.innermost() is None


def test_no_allocation_hook_for_gpu_buffers() -> None:
    with kernel_checks.installed(RecordingChecks().checks):
        assert interpreter.allocation_hook("cpu") is not None
        assert interpreter.allocation_hook(torch.device("cuda", 0)) is None
    assert interpreter.allocation_hook("cpu") is None


def test_cpp_graphs_get_the_allocation_hook_too() -> None:
    """The wrapper asks the hooks about every CPU graph: its buffers may feed interpreted kernels."""
    x = torch.randn(8, 5)
    recording = RecordingChecks()
    with kernel_checks.installed(recording.checks):
        _compile(x, "cpp")(x)
    assert recording.allocated and not recording.launched


def test_environment_variable_without_a_registered_checker_is_a_clear_error(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """CRUCIBLE_SIM_CHECK=1 where no checker is registered (an uninstalled checkout) names the variable
    and what to do, instead of silently running unchecked kernels."""
    monkeypatch.setenv("CRUCIBLE_SIM_CHECK", "1")
    monkeypatch.setattr(kernel_checks, "ENTRY_POINT_GROUP", "crucible.kernel_checks_nobody_registers")
    kernel_checks.registered.cache_clear()
    try:
        with pytest.raises(NoKernelChecks, match=r"CRUCIBLE_SIM_CHECK=1 .* no kernel checker is registered .*"
                                                 r"pip install -e \..*unset CRUCIBLE_SIM_CHECK"):
            interpreter.interpreted(lambda: None)
        with kernel_checks.installed(RecordingChecks().checks):  # an installed block needs no registration
            assert interpreter.active_checks() is not None
    finally:
        kernel_checks.registered.cache_clear()


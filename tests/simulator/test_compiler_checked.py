"""The compiler's generated Triton kernels under the simulator, in process and through the harness."""

from __future__ import annotations

import dataclasses

import pytest
import torch

import compiler  # noqa: F401  (registers the backend)
from compiler.codegen.triton import TritonRenderer
from corpus.entry import Built, Entry
from harness.entry_subject import run_entry
from harness.status import Status
from harness.targets import parse_target
from simulator import SimulatorMemoryError, session


def _model(x: torch.Tensor) -> torch.Tensor:
    return torch.relu(x * 2.0 + 1.0).sum(-1)


@pytest.fixture
def off_by_one_masks(monkeypatch: pytest.MonkeyPatch) -> None:
    """The renderer's bounds checks planted as ``<=`` (the issue's first new-user experiment)."""
    render = TritonRenderer.render

    def planted(self: TritonRenderer, kernel: object) -> object:
        out = render(self, kernel)
        source = out.source.replace("xmask = xindex < xnumel", "xmask = xindex <= xnumel")
        return dataclasses.replace(out, source=source.replace("rmask = rindex < rnumel", "rmask = rindex <= rnumel"))

    monkeypatch.setattr(TritonRenderer, "render", planted)


def test_generated_kernels_run_checked_and_counted() -> None:
    torch._dynamo.reset()
    x = torch.randn(33, 17)
    with session.checking() as recorder:
        out = torch.compile(_model, backend="crucible", options={"codegen": "triton", "strict": True})(x)
    torch.testing.assert_close(out, _model(x))
    assert recorder.reports and all(r.ok for r in recorder.reports)
    summary = recorder.summary()
    assert summary["bytes_moved"] >= x.numel() * 4 + 33 * 4
    assert summary["est_h200_s"] > 0 and summary["memory_kernels"] is None


def test_planted_renderer_bug_is_a_memory_error(off_by_one_masks: None) -> None:
    torch._dynamo.reset()
    with session.checking(), pytest.raises(SimulatorMemoryError) as info:
        torch.compile(_model, backend="crucible", options={"codegen": "triton", "strict": True})(torch.randn(33, 17))
    assert "out_of_bounds" in info.value.kinds
    first = info.value.findings[0]
    assert first.line is not None and ("tl.load" in first.source or "tl.store" in first.source), str(info.value)


def _entry() -> Entry:
    return Entry(name="planted/relu_sum", source="planted", family="planted", tier="smoke", devices=("cpu",),
                 factory=lambda scale: Built(_model, (torch.randn(33, 17),)))


def test_harness_reports_fail_memory_not_crash(off_by_one_masks: None) -> None:
    """Regression: with the planted ``<=`` the interpreter crashed or passed; crucible-sim says fail_memory."""
    result = run_entry(_entry(), parse_target("crucible-sim"), capture=False, reference="none")
    assert result.status == Status.FAIL_MEMORY, result.error
    assert "out_of_bounds" in result.error and result.memory_kernels


def test_harness_records_bytes_and_h200_estimate() -> None:
    result = run_entry(_entry(), parse_target("crucible-sim"), capture=False, reference="none")
    assert result.status == Status.PASS, result.error
    assert result.bytes_moved >= 33 * 17 * 4 and result.ideal_bytes > 0
    assert 0 < result.est_h200_s < 1e-3
    assert result.traffic_ratio >= 1.0 and result.traffic_kernel


def _two_reductions(x: torch.Tensor) -> torch.Tensor:
    return x.sum(-1)[:, None] * x.sum(0)[None, :]


def test_skipped_producer_kernel_is_an_uninitialized_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """The wrapper's buffers count as unwritten under checks: a consumer kernel reading a buffer whose
    producer never ran is reported (a scheduling bug that dropped or reordered a kernel)."""
    from compiler.runtime import KernelLauncher

    torch._dynamo.reset()
    x = torch.randn(8, 5)
    with session.checking() as recorder:  # first, the real schedule: clean
        torch.testing.assert_close(torch.compile(_two_reductions, backend="crucible", options={
            "codegen": "triton", "strict": True})(x), _two_reductions(x))
    assert len(recorder.reports) == 3 and all(r.ok for r in recorder.reports)
    launch, calls = KernelLauncher.__call__, []

    def skip_first(self: KernelLauncher, *args: object) -> None:
        calls.append(self)
        if len(calls) > 1:
            launch(self, *args)

    monkeypatch.setattr(KernelLauncher, "__call__", skip_first)
    torch._dynamo.reset()
    with session.checking(), pytest.raises(SimulatorMemoryError) as info:
        torch.compile(_two_reductions, backend="crucible", options={"codegen": "triton", "strict": True})(x)
    assert info.value.kinds == {"uninitialized"}, str(info.value)


def test_environment_variable_turns_checks_on(monkeypatch: pytest.MonkeyPatch) -> None:
    from compiler.interpreter import interpreted
    from simulator.hooks import CheckedKernel
    from tests.simulator.kernels import add

    monkeypatch.delenv("CRUCIBLE_SIM_CHECK", raising=False)
    assert not isinstance(interpreted(add), CheckedKernel)
    monkeypatch.setenv("CRUCIBLE_SIM_CHECK", "1")
    checked = interpreted(add)
    assert isinstance(checked, CheckedKernel)
    x = torch.randn(10)
    with pytest.raises(SimulatorMemoryError, match="out_of_bounds"):
        checked[(1,)](x, x, torch.empty(10), 12, BLOCK=16)  # n larger than the tensors


PLAIN_USER = """
import sys
import torch
from compiler.codegen.triton import TritonRenderer

render = TritonRenderer.render

def planted(self, kernel):
    out = render(self, kernel)
    return type(out)(**{**out.__dict__, "source": out.source.replace("xmask = xindex < xnumel",
                                                                     "xmask = xindex <= xnumel")})

model = lambda x: torch.relu(x * 2.0 + 1.0)
x = torch.randn(33, 17)
assert "simulator" not in sys.modules
out = torch.compile(model, backend="crucible", options={"codegen": "triton", "strict": True})(x)
torch.testing.assert_close(out, model(x))
assert "simulator.hooks" in sys.modules, "no checks were loaded"
TritonRenderer.render = planted
torch._dynamo.reset()
try:
    torch.compile(model, backend="crucible", options={"codegen": "triton", "strict": True})(x)
except Exception as error:
    print("caught", type(error).__name__, error)
"""


def test_environment_variable_checks_a_plain_torch_compile_user(tmp_path) -> None:
    """A ``torch.compile(model, backend="crucible")`` user who never imports the simulator gets checked
    kernels with CRUCIBLE_SIM_CHECK=1: the compiler finds the simulator's hooks through the
    ``crucible.kernel_checks`` entry point (an upward import used to do it). Needs the package
    installed (``pip install -e .``), as that user has it."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "CRUCIBLE_SIM_CHECK": "1", "CRUCIBLE_CACHE_DIR": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", PLAIN_USER], env=env, capture_output=True, text=True, timeout=600,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "caught SimulatorMemoryError" in done.stdout and "out_of_bounds" in done.stdout, done.stdout[-2000:]


def test_a_stale_egg_info_on_sys_path_does_not_hide_the_checker(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Regression: run from the source tree, a ``crucible.egg-info`` left there by an older install (no
    ``crucible.kernel_checks`` group) came first on sys.path and hid the installed package's entry
    points, so CRUCIBLE_SIM_CHECK=1 said no checker was registered."""
    from compiler import kernel_checks
    from simulator.hooks import CheckedKernel

    stale = tmp_path / "crucible.egg-info"
    stale.mkdir()
    (stale / "PKG-INFO").write_text("Metadata-Version: 2.1\nName: crucible\nVersion: 0.1.0\n")
    (stale / "entry_points.txt").write_text("[torch_dynamo_backends]\ncrucible = compiler.backend:crucible_backend\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    kernel_checks.registered.cache_clear()
    try:
        checks = kernel_checks.registered()
    finally:
        kernel_checks.registered.cache_clear()
    assert checks.name == "simulator" and isinstance(checks.launch(lambda: None), CheckedKernel)


def test_checked_programs_run_without_the_dead_overflow_checks(monkeypatch: pytest.MonkeyPatch) -> None:
    """As the runtime's plain interpreted launches (compiler/interpreter.py): Triton's sanitizer
    recomputes each int32 index op in int64 for an assert that is off without ``debug``."""
    import triton
    import triton.language as tl
    from triton.runtime.interpreter import interpreter_builder

    from simulator.launch import check_launch

    @triton.jit
    def shifted(p0, p1, BLOCK: tl.constexpr):
        x = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        i = x * 3 - 5
        tl.store(p1 + x, tl.load(p0 + tl.where(i > 0, i, 0), mask=x < 20, other=0.0), mask=x < 20)

    seen: list[bool] = []
    original = interpreter_builder.set_grid_idx

    def recording(*pid: int) -> None:
        seen.append(interpreter_builder.options.sanitize_overflow)
        original(*pid)

    monkeypatch.setattr(interpreter_builder, "set_grid_idx", recording)
    x, out = torch.randn(60), torch.empty(20)
    assert check_launch(shifted, (2,), (x, out), {"BLOCK": 16}).ok
    assert seen == [False, False] and interpreter_builder.options.sanitize_overflow
    i = torch.arange(20) * 3 - 5
    torch.testing.assert_close(out, x[i.clamp(min=0)])

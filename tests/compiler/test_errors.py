"""Unsupported ops, compiler errors and options: the documented fallbacks and reasons."""

from __future__ import annotations

import os

import pytest
import torch

import compiler
from compiler.pipeline import CompilerError
from compiler.report import ExternReason, FallbackReason


def test_unlowered_op_runs_as_extern_with_reason(codegen: str, device: str) -> None:
    x = torch.randn(4, 5, device=device)
    fn = lambda a: torch.cumsum(a.sin(), 1) * 2
    report = compiler.inspect(fn, x, codegen=codegen, strict=True)
    (ext,) = report.externs
    assert "cumsum" in ext.op and ext.reason is ExternReason.LIBRARY_KERNEL
    compiled = torch.compile(fn, backend="crucible", options={"codegen": codegen})
    torch.testing.assert_close(compiled(x), fn(x))


def test_no_lowering_rule_reason(codegen: str, device: str) -> None:
    x = torch.rand(3, 4, device=device) + 0.5
    fn = lambda a: torch.special.digamma(a) + 1
    report = compiler.inspect(fn, x, codegen=codegen, strict=True)
    assert [e.reason for e in report.externs] == [ExternReason.NO_LOWERING]
    compiled = torch.compile(fn, backend="crucible", options={"codegen": codegen, "strict": True})
    torch.testing.assert_close(compiled(x), fn(x))


@pytest.fixture
def broken_lowering(monkeypatch: pytest.MonkeyPatch):
    import compiler.lowerings  # noqa: F401  (register every rule first, or the import would undo the patch)
    from compiler.lowering import LOWERINGS

    def explode(*args, **kwargs):
        raise RuntimeError("planted bug in the sin lowering")

    monkeypatch.setitem(LOWERINGS, torch.ops.aten.sin, explode)


def test_compiler_error_falls_back_to_eager_with_report(broken_lowering, codegen: str, device: str) -> None:
    x = torch.randn(8, device=device)
    fn = lambda a: a.sin() + 1
    torch._dynamo.reset()
    compiled = torch.compile(fn, backend="crucible", options={"codegen": codegen})
    with compiler.collect_reports() as report, pytest.warns(UserWarning, match="falls back to eager"):
        out = compiled(x)
    torch.testing.assert_close(out, fn(x))
    (graph,) = report.fallbacks
    assert graph.fallback is FallbackReason.COMPILER_ERROR
    assert graph.failed_pass == "lower" and "planted bug" in graph.fallback_message


def test_strict_mode_raises_with_pass_and_graph(broken_lowering, codegen: str, device: str) -> None:
    compiled = torch.compile(lambda a: a.sin() + 1, backend="crucible",
                             options={"codegen": codegen, "strict": True})
    with pytest.raises(Exception) as info:
        compiled(torch.randn(8, device=device))
    err = info.value
    while err is not None and not isinstance(err, CompilerError):
        err = err.__cause__ or err.__context__
    assert isinstance(err, CompilerError)
    assert err.pass_name == "lower" and "aten.sin" in err.graph_code


def test_symbolic_shapes_compile_not_wrong(codegen: str, device: str) -> None:
    """Regression (weak test): the first call's output was compared with itself (``fn(ones) * 0 +
    out``), so a wrong result could not fail the test. Symbolic sizes now compile (issue 36): each
    call is compared with eager, at two sizes, by one size-generic kernel."""
    fn = lambda a: a * 2 + 1
    compiled = torch.compile(fn, backend="crucible", options={"codegen": codegen, "strict": True}, dynamic=True)
    with compiler.collect_reports() as report:
        for n in (5, 7):
            x = torch.randn(n, device=device)
            torch.testing.assert_close(compiled(x), fn(x))
    assert not report.fallbacks and len(report.kernels) == 1 and report.kernels[0].size_args


def test_unknown_option_is_a_clear_error() -> None:
    compiled = torch.compile(lambda a: a + 1, backend="crucible", options={"codgen": "cpp"})
    with pytest.raises(Exception, match="unknown crucible option"):
        compiled(torch.randn(3))


def test_bad_codegen_value_is_a_clear_error() -> None:
    compiled = torch.compile(lambda a: a + 1, backend="crucible", options={"codegen": "cuda"})
    with pytest.raises(Exception, match="codegen must be one of"):
        compiled(torch.randn(3))


def test_backend_registered_without_import() -> None:
    """The package's ``torch_dynamo_backends`` entry point registers "crucible" in a fresh process."""
    import subprocess
    import sys
    from importlib.metadata import entry_points

    if "crucible" not in {e.name for e in entry_points(group="torch_dynamo_backends")}:
        pytest.skip("the package is not installed (pip install -e .): no entry point to test")
    code = ("import torch\nf = torch.compile(lambda a: a * 3, backend='crucible', "
            "options={'codegen': 'triton', 'strict': True})\nprint(float(f(torch.ones(2)).sum()))")
    out = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().endswith("6.0")


def test_debug_and_dump(tmp_path, monkeypatch: pytest.MonkeyPatch, capfd, codegen: str, device: str) -> None:
    monkeypatch.setenv("CRUCIBLE_DEBUG", "3")
    monkeypatch.setenv("CRUCIBLE_DUMP_DIR", str(tmp_path))
    compiler.inspect(lambda a: torch.softmax(a, -1), torch.randn(4, 8, device=device), codegen=codegen)
    err = capfd.readouterr().err
    assert "after lower" in err and "after schedule" in err and "kernel0" in err
    (graph_dir,) = [p for p in tmp_path.iterdir() if p.name.startswith("graph_")]
    names = {p.name for p in graph_dir.iterdir()}
    assert {"00_aten_graph.py", "01_lower.txt", "02_schedule.txt", "wrapper.py", "repro.py"} <= names
    import subprocess
    import sys

    run = subprocess.run([sys.executable, str(graph_dir / "repro.py")], check=False, capture_output=True, text=True,
                         timeout=300, env={**os.environ, "CRUCIBLE_DEBUG": "0"})
    assert run.returncode == 0, run.stderr[-3000:]
    assert "outputs match eager" in run.stdout


def test_complex_ops_run_as_externs(codegen: str, device: str) -> None:
    """Regression (opinfo fft.fft2): complex values reached the renderer's dtype table."""
    x = torch.randn(4, 6, device=device)
    fn = lambda a: torch.fft.fft2(a * 2).abs() + 1
    report = compiler.inspect(fn, x, codegen=codegen, strict=True)
    assert any(e.reason is ExternReason.UNSUPPORTED_DTYPE for e in report.externs)
    compiled = torch.compile(fn, backend="crucible", options={"codegen": codegen, "strict": True})
    torch.testing.assert_close(compiled(x), fn(x), rtol=1e-4, atol=1e-4)


def test_cpu_flash_attention_keeps_its_logsumexp() -> None:
    """Regression: torch's decomposition returned attention weights as the op's second output.
    (The test compared only shapes of that output, which a wrong tensor of the same shape passed.)"""
    q, k, v = (torch.randn(2, 2, 3, 4) for _ in range(3))
    op = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default
    fn = lambda a, b, c: op(a, b, c)
    compiled = torch.compile(fn, backend="crucible", options={"codegen": "triton", "strict": True})
    got, want = compiled(q, k, v), fn(q, k, v)
    assert [t.shape for t in got] == [t.shape for t in want]
    torch.testing.assert_close(got[0], want[0])
    torch.testing.assert_close(got[1], want[1])  # the logsumexp itself, not only its shape


def test_extern_keyword_tensor_arguments_are_realized() -> None:
    """Regression (transformers/marian): a computed tensor passed by keyword to an extern call
    reached ATen as a lowering value."""
    q, k, v = (torch.randn(2, 2, 3, 4) for _ in range(3))
    mask_src = torch.randn(3, 3)
    op = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default

    def fn(a, b, c, m):
        return op(a, b, c, attn_mask=torch.where(m > 0, 0.0, -1e4), scale=0.5)[0]

    compiled = torch.compile(fn, backend="crucible", options={"codegen": "triton", "strict": True})
    torch.testing.assert_close(compiled(q, k, v, mask_src), fn(q, k, v, mask_src))

"""The one parity check every compiler test body uses: compile with Crucible, compare with eager."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

import compiler
from compiler.report import CompileReport, collect_reports

# Per-dtype tolerances against eager. Interpreter and C++ math differ from ATen's
# in the last bits (exp, erf, fused fp32 intermediates of fp16 chains).
TOLERANCES = {
    torch.float32: {"rtol": 2e-5, "atol": 2e-5},
    torch.float64: {"rtol": 1e-7, "atol": 1e-7},
    torch.float16: {"rtol": 2e-3, "atol": 2e-3},
    torch.bfloat16: {"rtol": 2e-2, "atol": 2e-2},
}


def flatten(out: Any) -> list:
    if isinstance(out, (list, tuple)):
        return [t for o in out for t in flatten(o)]
    return [out]


LOW_PRECISION = (torch.float16, torch.bfloat16)


def upcast(inputs: tuple) -> tuple:
    return tuple(t.double() if isinstance(t, torch.Tensor) and t.dtype in LOW_PRECISION else t for t in inputs)


@dataclass(frozen=True)
class Reference:
    """``fn`` run in float64 on inputs that hold 16-bit floats, and the coarsest of those dtypes."""
    value: Any
    dtype: torch.dtype


def reference_for(fn: Callable, inputs: tuple) -> Reference | None:
    """The float64 reference of ``fn`` when an input is fp16/bf16 (bf16 wins: it rounds coarser)."""
    low = {t.dtype for t in inputs if isinstance(t, torch.Tensor) and t.dtype in LOW_PRECISION}
    if not low:
        return None
    return Reference(fn(*upcast(inputs)), torch.bfloat16 if torch.bfloat16 in low else torch.float16)


def assert_close(got: Any, expected: Any, loosen: float = 1.0, reference: Reference | None = None) -> None:
    """Equal within per-dtype tolerances. When the inputs hold 16-bit floats, an element of a
    floating output also passes when it is no further from the float64 ``reference`` than eager
    is, give or take the 16-bit dtype's tolerance: a fused kernel that rounds once is allowed to
    beat eager's per-op rounding, never to be worse. That holds for a float32 output computed
    in fp16 too (``(x_fp16 * w).float()``): its values carry fp16 rounding either way."""
    got_flat, exp_flat = flatten(got), flatten(expected)
    ref_flat = flatten(reference.value) if reference is not None else [None] * len(exp_flat)
    assert len(got_flat) == len(exp_flat)
    for g, e, r in zip(got_flat, exp_flat, ref_flat):
        if isinstance(r, torch.Tensor) and isinstance(e, torch.Tensor) and e.is_floating_point() \
                and isinstance(g, torch.Tensor) and g.shape == e.shape and g.dtype == e.dtype:
            tol = TOLERANCES[e.dtype if e.dtype in LOW_PRECISION else reference.dtype]
            r = r.to(torch.float64)
            slack = tol["atol"] * loosen + tol["rtol"] * loosen * r.abs()
            err_g, err_e = (g.double() - r).abs(), (e.double() - r).abs()
            ok = (err_g <= err_e + slack) | (torch.isnan(g) & torch.isnan(e)) | (g.double() == e.double())
            assert bool(ok.all()), f"{int((~ok).sum())} elements further from float64 than eager: " \
                                   f"max {float((err_g - err_e)[~ok].max())}"
            continue
        if not isinstance(e, torch.Tensor):
            assert g == e
            continue
        assert isinstance(g, torch.Tensor), f"expected a tensor, got {type(g)}"
        assert g.shape == e.shape and g.dtype == e.dtype, (g.shape, g.dtype, e.shape, e.dtype)
        tol = TOLERANCES.get(e.dtype)
        if tol is None:
            assert torch.equal(g.cpu(), e.cpu()), f"mismatch:\n{g}\n{e}"
        else:
            torch.testing.assert_close(g, e, rtol=tol["rtol"] * loosen, atol=tol["atol"] * loosen,
                                       equal_nan=True)


def check_parity(fn: Callable, inputs: tuple, codegen: str, loosen: float = 1.0,
                 max_externs: int | None = 0, backward: bool = False) -> CompileReport:
    """Compile ``fn`` (strict), compare outputs (and input grads) with eager; return the report."""
    torch._dynamo.reset()
    compiled = torch.compile(fn, backend="crucible", options={"codegen": codegen, "strict": True})
    with compiler.collect_reports() as report:
        got = compiled(*inputs)
        if backward:
            got_grads = _grads(got, inputs)
    expected = fn(*inputs)
    reference = reference_for(fn, inputs) if not backward else None
    assert_close(got, expected, loosen, reference)
    if backward:
        assert_close(got_grads, _grads(expected, inputs), loosen)
    if max_externs is not None:
        assert len(report.externs) <= max_externs, f"unexpected extern calls: {report.externs}"
    assert not report.fallbacks
    return report


def _grads(out: Any, inputs: tuple) -> list:
    leaves = [t for t in inputs if isinstance(t, torch.Tensor) and t.requires_grad]
    total = sum((o.float().sum() for o in flatten(out) if isinstance(o, torch.Tensor) and o.requires_grad),
                torch.zeros(()))
    return list(torch.autograd.grad(total, leaves))



def compiled_run(model: Callable, x: torch.Tensor, calls: int = 1, **options: Any) -> tuple[Callable, Any, CompileReport]:
    """``model`` compiled by Crucible in strict mode and called ``calls`` times on ``x`` without
    gradients: (the compiled callable, its last output, the report of its compiles)."""
    compiled = torch.compile(model, backend="crucible", options={"strict": True, **options})
    with torch.no_grad(), collect_reports() as report:
        outs = [compiled(x) for _ in range(calls)]
    return compiled, outs[-1], report

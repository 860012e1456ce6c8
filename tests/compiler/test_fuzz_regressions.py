"""Regression tests for compiler bugs the fuzzer (``crucible fuzz``) found; each docstring names
the shrunk graph that exposed it."""

from __future__ import annotations

import math

import torch

import compiler

aten = torch.ops.aten
SPECIALS = [math.nan, -0.0, 0.0, 2.5, -3.0, math.inf, -math.inf]


def _compiled(fn, *inputs, codegen: str):
    return compiler.compile_graph(compiler.trace_aten(fn, *inputs), list(inputs), codegen=codegen)


def _call(op):
    return lambda a: op(a)


def test_sign_of_nan_and_negative_zero_is_zero(codegen: str, device: str) -> None:
    """Fuzzer, crucible-cpp, seed 1: ``aten.sign.default(x0)`` over a float32 input with NaN.
    The lowering kept NaN and -0.0 (``sel(x < 0, -1, x)``); ATen computes (0 < x) - (x < 0)."""
    for dtype in (torch.float32, torch.bfloat16, torch.float64):
        x = torch.tensor(SPECIALS, dtype=dtype, device=device)
        for op in (aten.sign.default, aten.sgn.default):
            got = _compiled(_call(op), x, codegen=codegen)(x)
            want = op(x)
            assert torch.equal(got, want), (op, dtype, got, want)
            assert not torch.signbit(got[1]), "sign(-0.0) must be +0.0 as in ATen"


def test_asinh_of_huge_values_and_negative_zero(codegen: str, device: str) -> None:
    """Found writing the sign fix's test (asinh shared the sign helper): asinh(+-inf) and
    asinh(1e30) gave NaN (x*x overflowed to inf/inf); asinh(-0.0) must stay -0.0."""
    x = torch.tensor(SPECIALS + [1e30, -1e20, 1e9, 3e8], device=device)
    got = _compiled(lambda a: aten.asinh.default(a), x, codegen=codegen)(x)
    torch.testing.assert_close(got, torch.asinh(x), equal_nan=True)
    assert torch.signbit(got[1])


def test_var_mean_over_an_empty_or_too_small_reduction(codegen: str, device: str) -> None:
    """Fuzzer, crucible-interpret, seed 0: ``aten.var_mean.correction`` over a 0-size dim raised
    ZeroDivisionError in Triton's interpreter (a literal division by 0.0) and gave mean 0 where
    ATen gives NaN; with correction >= n ATen divides by zero (NaN or inf)."""
    for shape, dims, correction in (((0, 3), [0], 1), ((17, 0, 5), [-3, -2], 1), ((1, 3), [0], 1),
                                    ((2, 3), [0], 2), ((4, 3), [0], 0)):
        x = torch.randn(shape, device=device)
        fn = _var_mean(dims, correction)
        got, want = _compiled(fn, x, codegen=codegen)(x), fn(x)
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w, equal_nan=True)


def _var_mean(dims, correction):
    return lambda a: aten.var_mean.correction(a, dims, correction=correction, keepdim=False)

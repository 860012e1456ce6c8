"""Regression tests for fuzzer findings where Crucible must evaluate as ATen's kernels do: the order of a
window's sum, a fused multiply-add's product (``test_fuzz_regressions.py`` has the older ones). Each
docstring names the shrunk graph that exposed the bug."""

from __future__ import annotations

import math

import torch

import compiler

aten = torch.ops.aten
BIG32 = torch.finfo(torch.float32).max
BIG64 = torch.finfo(torch.float64).max


def _compiled(fn, *inputs, codegen: str):
    return compiler.compile_graph(compiler.trace_aten(fn, *inputs), list(inputs), codegen=codegen)


def _same(got: torch.Tensor, want: torch.Tensor) -> bool:
    return bool(((got == want) | (torch.isnan(got) & torch.isnan(want))).all())


def test_average_pooling_sums_each_window_in_atens_order(codegen: str, device: str) -> None:
    """Fuzzer, crucible-interpret:extern=none, seed 0: ``_adaptive_avg_pool2d(x, [1, 2])`` over a
    1x3x7x6 float32 input holding +-3.4e38 gave 0.0657 (interpreter) and 0.0743 (C++) where eager and
    float64 give 0.0650: a reduction's tree order absorbed other elements into the partial sum near
    3.4e38 than ATen's row-major order does. The window below is of that kind: in ATen's order
    1..9 sum to 45, 3.4e38 absorbs it and the next eight, -3.4e38 cancels, and 20 + 21 remain."""
    window = torch.arange(1, 22, dtype=torch.float32, device=device).view(7, 3)
    window[3, 0], window[6, 0] = BIG32, -BIG32
    x = torch.stack([window, window.flip(1), window * 0.5]).unsqueeze(0)  # 1x3x7x3
    fns = [lambda a: aten._adaptive_avg_pool2d.default(a, [1, 1]),
           lambda a: aten.avg_pool2d.default(a, [7, 3], [7, 3]),
           # padded positions add nothing (ATen skips them); count_include_pad's divisor is 9
           lambda a: aten.avg_pool2d.default(a, [3, 3], [2, 2], [1, 1], False, True)]
    for fn in fns:
        got, want = _compiled(fn, x, codegen=codegen)(x), fn(x)
        if device == "cpu":  # ATen's CUDA kernels add in the same order; eager is the reference here
            # within an ulp: C++ multiplies by the reciprocal of a divisor invariant along the row
            torch.testing.assert_close(got, want, rtol=2**-23, atol=0, equal_nan=True)
    got = _compiled(fns[0], x, codegen=codegen)(x).flatten().cpu()
    assert torch.equal(got, torch.tensor([41.0, 0.0, 20.5]) / 7 / 3), got
    # a window of -0.0 sums to +0.0 from ATen's initial 0
    zeros = torch.full((1, 1, 2, 2), -0.0, device=device)
    got = _compiled(fns[0], zeros, codegen=codegen)(zeros)
    assert not torch.signbit(got).any(), got


def test_average_pooling_in_every_float_dtype_is_eagers_bit_for_bit(codegen: str, device: str) -> None:
    """The ordered sum (``test_average_pooling_sums_each_window_in_atens_order``) over ordinary values:
    ATen accumulates float16 in float32 and divides an adaptive window's sum by its height, then by its
    width, and avg_pool2d's by the product. A 7x7 window (49 elements) stays a reduction."""
    if device != "cpu":
        return
    gen = torch.Generator().manual_seed(0)
    for dtype in (torch.float32, torch.float16, torch.float64):
        x = (torch.randn(2, 3, 9, 6, generator=gen, dtype=torch.float64) * 10).to(dtype)
        for fn in (lambda a: aten._adaptive_avg_pool2d.default(a, [1, 2]),  # 9x3 windows
                   lambda a: aten._adaptive_avg_pool2d.default(a, [3, 3]),
                   lambda a: aten.avg_pool2d.default(a, [3, 3], [2, 2], [1, 1], True, False)):
            got, want = _compiled(fn, x, codegen=codegen)(x), fn(x)
            assert _same(got, want), (dtype, (got - want).abs().max())
    x = torch.randn(1, 2, 7, 7, generator=gen)
    fn = lambda a: aten._adaptive_avg_pool2d.default(a, [1, 1])  # noqa: E731
    torch.testing.assert_close(_compiled(fn, x, codegen=codegen)(x), fn(x))


def test_float64_lerp_fuses_its_product(codegen: str, device: str) -> None:
    """Fuzzer, crucible-interpret:extern=none, seed 0: ``lerp.Scalar(x0, x1, -0.5)`` over float64 with
    x1 = -finfo.max gave +inf where eager gives finfo.max / 2, and ``lerp.Tensor`` likewise (then NaN
    downstream, lerp(x, x, inf - 1)): ATen computes fma(weight - 1, end - start, end), and Triton's
    interpreter computes tl.fma as x * y + z (numpy), whose product overflows. Float32 already went
    through float64; float64 has nothing wider."""
    start = torch.tensor([1.0, -0.25, 2.0, 0.5, math.nan, 1.0, -3.0, 1e300], dtype=torch.float64, device=device)
    end = torch.tensor([-BIG64, BIG64, -BIG64, BIG64, 1.0, math.inf, 2.0, -1e300], dtype=torch.float64, device=device)
    weight = torch.tensor([-0.5, 1.5, 0.75, -1.0, 0.5, 0.25, 0.4, 3.0], dtype=torch.float64, device=device)
    for fn, args in ((lambda a, b: aten.lerp.Scalar(a, b, -0.5), (start, end)),
                     (lambda a, b, w: aten.lerp.Tensor(a, b, w), (start, end, weight)),
                     (lambda a, b, w: aten.lerp.Tensor(a, a, aten.lerp.Tensor(a, b, w)), (start, end, weight))):
        got, want = _compiled(fn, *args, codegen=codegen)(*args), fn(*args)
        assert torch.equal(torch.isfinite(got), torch.isfinite(want)), (got, want)
        torch.testing.assert_close(got, want, equal_nan=True)
    got = _compiled(lambda a, b: aten.lerp.Scalar(a, b, -0.5), start, end, codegen=codegen)(start, end)
    # 1.5 * finfo.max - finfo.max; the interpreter rounds twice (see the Triton renderer's FMA)
    assert math.isclose(got[0].item(), BIG64 / 2, rel_tol=1e-15), got

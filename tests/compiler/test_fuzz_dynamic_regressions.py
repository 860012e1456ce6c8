"""Regression tests for compiler bugs ``crucible fuzz --dynamic`` found (graphs compiled once with symbolic
sizes and run at several sizes); each docstring names the graph that exposed it."""

from __future__ import annotations

import torch

from compiler.backend import crucible_backend
from compiler.report import collect_reports

aten = torch.ops.aten


def _dynamic(fn, codegen: str):
    return torch.compile(fn, backend=crucible_backend, options={"codegen": codegen, "strict": True}, dynamic=True)


def test_channels_last_convolution_with_symbolic_sizes() -> None:
    """crucible fuzz --dynamic, crucible-cpp, seed 130: ``convolution(x0 [1, 2, 5, 5], x1 [2, 2, 1, 1])``
    fell back to eager (compiler_error in 'lower': "Cannot convert symbols to int"): the C++ codegen's
    channels-last layout computed NHWC strides with ``int()`` of each size. Static sizes compiled."""
    def conv(x, w):
        return (aten.convolution.default(x, w, None, [1, 1], [0, 0], [1, 1], False, [0, 0], 1),)

    compiled = _dynamic(conv, "cpp")
    w = torch.randn(2, 2, 1, 1)
    with collect_reports() as report:
        for shape in ((1, 2, 5, 5), (1, 2, 63, 63), (1, 2, 7, 9)):
            x = torch.randn(shape)
            torch.testing.assert_close(compiled(x, w)[0], conv(x, w)[0])
    assert report.graphs and not report.fallbacks, [g.fallback_message for g in report.fallbacks]


def test_upsample_by_a_scale_factor_with_symbolic_sizes(codegen: str) -> None:
    """crucible fuzz --dynamic, crucible-cpp, seed 134: ``upsample_bilinear2d.vec(x [1, 2, 4, 5], None,
    False, [2.0, 1.5])`` fell back to eager (compiler_error in 'schedule': "size expression
    TruncToInt(1.5*ToFloat(s13)) has no integer spelling"): an output size computed through floats
    had no C or Python spelling. Static sizes compiled."""
    def upsample(x):
        return (aten.upsample_bilinear2d.vec(x, None, False, [2.0, 1.5]),)

    compiled = _dynamic(upsample, codegen)
    with collect_reports() as report:
        for shape in ((1, 2, 4, 5), (1, 2, 7, 9), (3, 2, 33, 17)):
            x = torch.randn(shape)
            torch.testing.assert_close(compiled(x)[0], upsample(x)[0])
    assert report.graphs and not report.fallbacks, [g.fallback_message for g in report.fallbacks]


def test_diagonal_with_an_offset_over_symbolic_sizes(codegen: str) -> None:
    """crucible fuzz --dynamic, crucible-cpp, seed 136: ``exp(diagonal(x [2, 1], -1))`` fell back to eager
    (compiler_error in 'render': "size expression Min(1, s4 - 1) has no integer spelling"): a diagonal's
    length is the smaller of two sizes. Static sizes compiled."""
    def diagonal_exp(x, y):
        return (aten.exp.default(aten.diagonal.default(x, -1)), aten.diagonal.default(y, 1).exp())

    compiled = _dynamic(diagonal_exp, codegen)
    with collect_reports() as report:
        for rows, cols in ((2, 5), (3, 9), (9, 4)):
            x, y = torch.randn(rows, 1), torch.randn(rows, cols)
            for got, want in zip(compiled(x, y), diagonal_exp(x, y)):
                torch.testing.assert_close(got, want)
    assert report.graphs and not report.fallbacks, [g.fallback_message for g in report.fallbacks]


def test_size_casts_and_clips_build_for_the_gpu(monkeypatch) -> None:
    """The spellings of the two tests above, float()/int() and min(), built in the interpreter but not
    for a GPU: Triton's JIT refused ``float()`` of a size argument ("float() argument must be a string
    or a real number, not 'tensor'"). Kernel bodies now spell the casts as Triton conversions; every
    kernel is also built for an H200 here (``CRUCIBLE_GPU_BUILD_CHECK``)."""
    import pytest

    from compiler import gpu_build

    if not gpu_build.available():
        pytest.skip("this Triton has no GPU backend to build with")
    monkeypatch.setenv("CRUCIBLE_GPU_BUILD_CHECK", "1")

    def graph(x):
        return (aten.upsample_bilinear2d.vec(x, None, False, [2.0, 1.5]), torch.exp(torch.diagonal(x, -1)))

    compiled = _dynamic(graph, "triton")
    with collect_reports() as report:
        for shape in ((1, 2, 4, 5), (1, 2, 7, 9)):
            x = torch.randn(shape)
            for got, want in zip(compiled(x), graph(x)):
                torch.testing.assert_close(got, want)
    assert report.graphs and not report.fallbacks, [g.fallback_message for g in report.fallbacks]


def test_a_slice_from_the_end_past_a_symbolic_size_starts_at_zero(codegen: str) -> None:
    """crucible fuzz --dynamic, crucible-cpp:extern=all, seed 213: ``slice(elu(x0 [7, 1]), 0, -100)``
    gave values of 1e31: the start was taken as s0 - 100, before the rows, where torch clamps it to 0
    (under its guard s0 < 100). The lowering now takes the start torch computed (the view's storage
    offset), so a start within the size, an explicit end and a step still read the same rows."""
    def slices(x):
        v = aten.elu.default(x)
        return (aten.slice.Tensor(v, 0, -100, None, 1), aten.slice.Tensor(v, 0, -3, None, 1),
                aten.slice.Tensor(v, 0, 2, -1, 1), aten.slice.Tensor(x, 0, 1, -1, 2))

    compiled = _dynamic(slices, codegen)
    with collect_reports() as report:
        for rows in (7, 4, 9):
            x = torch.randn(rows, 3)
            for got, want in zip(compiled(x), slices(x)):
                torch.testing.assert_close(got, want)
    assert report.graphs and not report.fallbacks, [g.fallback_message for g in report.fallbacks]


def test_a_mean_over_a_symbolic_count_is_scaled_so_its_sum_cannot_overflow(codegen: str, device: str) -> None:
    """crucible fuzz --dynamic, crucible-interpret, seed 270: ``std.correction(x0, dim=[0])`` over 8191
    bfloat16 values near 1.4e38 was NaN where the static kernel gives inf (torch's rule, sqrt of an
    overflowing variance): with a symbolic count the first mean's float32 sum was not scaled by a power
    of two (the static count's 2^-13), overflowed, and x - inf made inf - inf. The scale is now computed
    from the count at run time, for mean too (a float32 mean of values near max is then finite, as the
    static kernel's)."""
    big = torch.full((8191,), 1.4e38, dtype=torch.bfloat16, device=device)
    big[::3] = 1.0e38
    fns = {"std": lambda t: aten.std.correction(t, dim=[0]), "mean": lambda t: t.mean(0),
           "var_mean": lambda t: torch.var_mean(t, 0)}
    for name, fn in fns.items():
        static = torch.compile(fn, backend=crucible_backend, options={"codegen": codegen, "strict": True}, dynamic=False)
        want = static(big)
        got = _dynamic(fn, codegen)(big)
        for g, w in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
            assert not bool(torch.isnan(g).any()), (name, g)
            torch.testing.assert_close(g.float(), w.float(), rtol=1e-2, atol=0, equal_nan=True)
        torch._dynamo.reset()
    ordinary = torch.randn(1000, device=device)
    torch.testing.assert_close(_dynamic(fns["std"], codegen)(ordinary), fns["std"](ordinary))


def test_a_compound_size_the_guards_make_one_is_broadcast(codegen: str) -> None:
    """crucible fuzz --dynamic, crucible-cpp, seed 286: ``div.Tensor(x0 [2, 3], diagonal(x0, -1))`` was
    2.9 RMSE off: the diagonal's length ``Min(s27, s77 - 1)`` is 1 under the tracer's broadcast guard,
    but the rules test ``n == 1`` on the expression, so the divisor was read along the row instead of
    broadcast. Sizes the guards make 1 are 1 (``sizes.size_of``); a size that is only 1 at the example
    (``x[1:]`` at 2 rows, no guard) stays symbolic, as the second graph checks at other row counts."""
    def divide_by_diagonal(x):
        return (aten.div.Tensor(x, aten.diagonal.default(x, -1)),)

    def add_tail(x, y):
        return (aten.add.Tensor(x[1:], y),)

    compiled, tails = _dynamic(divide_by_diagonal, codegen), _dynamic(add_tail, codegen)
    with collect_reports() as report:
        for cols in (3, 15, 6):
            x = torch.randn(2, cols)
            torch.testing.assert_close(compiled(x)[0], divide_by_diagonal(x)[0])
        for rows in (2, 5, 9):
            x, y = torch.randn(rows, 4), torch.randn(rows - 1, 4)
            torch.testing.assert_close(tails(x, y)[0], add_tail(x, y)[0])
    assert report.graphs and not report.fallbacks, [g.fallback_message for g in report.fallbacks]


def test_a_sum_over_a_short_symbolic_inner_dim_still_cascades() -> None:
    """crucible fuzz --dynamic, crucible-cpp, seed 359: ``sum(log_softmax(x, 0), [-1, -2])`` of an
    expanded [511, 8] input was 53 ulps off float64 (eager: under 1). With symbolic sizes the row pass
    keeps 32 lanes; an inner dim of 8 is all tail loop, whose values never counted toward a cascade
    flush, so each lane summed its 511 values one after another (the per-column statistics keep the
    two reduced dims apart)."""
    def total(x):
        return (torch.log_softmax(x, 0).sum([-1, -2]),)

    compiled = _dynamic(total, "cpp")
    compiled(torch.ones(4, 3))
    for shape in ((511, 8), (2000, 5), (300, 40)):
        for x in (torch.full(shape, 0.7), torch.rand(shape)):  # equal values: every rounding leans one way
            exact = total(x.double())[0]
            err = ((compiled(x)[0] - exact).abs() / exact.abs()).item()
            eager = ((total(x)[0].double() - exact).abs() / exact.abs()).item()
            assert err <= 4 * eager + 4 * torch.finfo(torch.float32).eps, (shape, err, eager)

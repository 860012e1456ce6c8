"""The C++ codegen: three-way parity (eager, Triton interpreter, C++) on fused graphs,
kernel cache behaviour, and hostile names that must not break the generated source.

Op-level and module-level parity for every codegen lives in the shared test bodies
(``codegen`` parameter); this file holds what is specific to the C++ renderer.
"""

from __future__ import annotations

import ctypes
import subprocess
from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F

import compiler
from compiler import cpp_build, ir
from compiler.codegen import cpp_lang
from compiler.codegen.cpp import CppRenderer
from compiler.runtime import CppLauncher
from compiler.scheduler import Level, Store, make_kernel
from tests.compiler.parity import assert_close, reference_for


def compiled_run(fn: Callable, inputs: tuple, codegen: str) -> tuple[object, compiler.CompileReport]:
    torch._dynamo.reset()
    opt = torch.compile(fn, backend="crucible", options={"codegen": codegen, "strict": True})
    with compiler.collect_reports() as report:
        out = opt(*inputs)
    return out, report


def three_way(fn: Callable, *inputs: torch.Tensor) -> compiler.CompileReport:
    """Eager, the Triton interpreter and C++ agree; both codegens render the same kernels."""
    expected = fn(*inputs)
    reference = reference_for(fn, inputs)
    cpp, cpp_report = compiled_run(fn, inputs, "cpp")
    triton, triton_report = compiled_run(fn, inputs, "triton")
    assert_close(cpp, expected, reference=reference)
    assert_close(triton, expected, reference=reference)
    assert_close(cpp, triton, loosen=2.0, reference=reference)
    assert not cpp_report.fallbacks and not cpp_report.externs
    cpp_kernels = [(k.name, k.kind, k.ops) for g in cpp_report.graphs for k in g.kernels]
    triton_kernels = [(k.name, k.kind, k.ops) for g in triton_report.graphs for k in g.kernels]
    assert cpp_kernels == triton_kernels  # same scheduled kernels, only the rendering differs
    assert all(k.codegen == "cpp" for g in cpp_report.graphs for k in g.kernels)
    return cpp_report


def chain(x, y, z):
    return torch.sigmoid((x * 1.5 + y).relu() - z) * torch.tanh(x)


def softmax(x):
    return torch.softmax(x, dim=-1)


def layer_norm(x, w, b):
    return F.layer_norm(x, (x.shape[-1],), w, b)


def leading_dim_reductions(x):
    return x.sum(0), x.amax(1), x.mean((0, 2)), x.argmin(0)


def argmax_nan(x):
    return x.argmax(-1), x.argmin(-1), x.amax(-1), x.max(-1)


def broadcast_strided(x, bias, y):
    return (x.t() * bias + y[:, ::2]).relu(), x.t().sum(-1)


def test_pointwise_chain():
    report = three_way(chain, torch.randn(1000), torch.randn(1000), torch.randn(1000))
    assert [k.kind for g in report.graphs for k in g.kernels] == ["pointwise"]


def test_softmax_one_kernel():
    x = torch.randn(37, 129) * 10
    x[3, 7] = float("inf")
    x[5] = float("-inf")
    report = three_way(softmax, x)
    assert len(report.graphs[0].kernels) == 1


def test_layer_norm_one_kernel():
    report = three_way(layer_norm, torch.randn(24, 300) + 3, torch.randn(300), torch.randn(300))
    assert len(report.graphs[0].kernels) == 1


def test_prefetching_rows_ahead_keeps_values_and_stops_at_the_last_row():
    """Multi-pass rows of 1 KiB or more prefetch rows ahead (``cpp_plan.prefetched``), guarded so the
    last rows prefetch nothing past the input; values are those of eager and the interpreter, for
    float32 and bfloat16 rows (whose lines hold 32 elements)."""
    report = three_way(softmax, torch.randn(5, 2048) * 4)
    source = report.graphs[0].kernels[0].source
    assert "__builtin_prefetch(&" in source and "if (xi + 2 < 5)" in source and "+ 4096]" in source
    passes = source.split("// pass over the reduced dims:")  # the prefetches run in the exp pass
    assert ["__builtin_prefetch" in p for p in passes[1:]] == [False, True, False], source
    w, b = torch.randn(1024).bfloat16(), torch.randn(1024).bfloat16()
    report = three_way(layer_norm, torch.randn(3, 1024).bfloat16(), w, b)
    source = report.graphs[0].kernels[0].source
    assert "q += 32" in source and "__builtin_prefetch" in source.split("// pass over the reduced dims:")[1]


def test_reductions_over_leading_dims():
    three_way(leading_dim_reductions, torch.randn(33, 40, 7))


def test_argmax_nan_and_ties():
    x = torch.randn(6, 70)
    x[0, 5] = x[0, 9] = float("nan")  # the first NaN wins
    x[1, :] = 1.0  # ties: the lowest index
    x[2, 3] = x[2, 60] = 50.0
    x[3, 64:] = float("nan")  # NaN only in the tail of a row
    x[4, :] = float("-inf")
    three_way(argmax_nan, x)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_low_precision_inputs(dtype):
    x = (torch.randn(16, 200) * 4).to(dtype)
    w, b = torch.randn(200).to(dtype), torch.randn(200).to(dtype)
    three_way(lambda x, w, b: (softmax(x), layer_norm(x, w, b), (x * 3 - 1).sigmoid(), x.sum(0)), x, w, b)


def test_broadcast_and_non_contiguous_inputs():
    x = torch.randn(50, 12)
    y = torch.randn(12, 100)
    three_way(broadcast_strided, x, torch.randn(12, 1), y)
    three_way(lambda x: (x * 2).exp(), torch.randn(30, 40)[5:25, ::3])


def test_long_row_sum_is_accurate():
    x = torch.rand(3, 1 << 20) + 1.0
    got, _ = compiled_run(lambda x: x.sum(-1), (x,), "cpp")
    reference = x.double().sum(-1)
    eager_err = (x.sum(-1).double() - reference).abs().max()
    cpp_err = (got.double() - reference).abs().max()
    assert cpp_err <= max(4 * eager_err, 1e-6 * reference.abs().max())


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_a_sum_of_products_accumulates_as_a_fused_multiply_add(dtype):
    """Sums of same-dtype float products take one rounding a term (``fusable_product``; -ffp-contract
    is off, so ``acc + a * b`` was two roundings and two vector ops): within the long-row test's bound of
    eager's error (the orders of the sums differ), in
    short rows and long cascaded ones, with the product's other users unchanged."""
    torch.manual_seed(0)
    for rows, cols in ((64, 1024), (2, 1 << 17)):
        a, b = torch.randn(rows, cols, dtype=dtype), torch.randn(rows, cols, dtype=dtype)
        fn = lambda a, b: ((a * b).sum(-1), (a * b)[:, :3] + 1)
        (got, head), report = compiled_run(fn, (a, b), "cpp")
        assert "crucible::madd(" in "".join(k.source for g in report.graphs for k in g.kernels)
        torch.testing.assert_close(head, (a * b)[:, :3] + 1, rtol=0, atol=0)
        if dtype == torch.float64:
            torch.testing.assert_close(got, (a * b).sum(-1))
            continue
        exact = (a.double() * b.double()).sum(-1)
        eager_err = ((a * b).sum(-1).double() - exact).abs().max()  # the sums' orders differ: as the
        assert (got.double() - exact).abs().max() <= 4 * eager_err + 1e-7 * exact.abs().max()  # long-row test


def test_a_sum_of_16_bit_products_rounds_each_product():
    """A bfloat16 product rounds to bfloat16 before its sum (eager's value): no fused accumulation."""
    a, b = torch.randn(8, 512, dtype=torch.bfloat16), torch.randn(8, 512, dtype=torch.bfloat16)
    for fn in (lambda a, b: (a * b).sum(-1), lambda a, b: (a * b).float().sum(-1)):
        got, report = compiled_run(fn, (a, b), "cpp")
        assert "crucible::madd(" not in "".join(k.source for g in report.graphs for k in g.kernels)
        torch.testing.assert_close(got, fn(a, b))


@pytest.mark.parametrize("fn, shape, short", [
    (lambda x: torch.softmax(x, -1), (64, 1024), True),  # exp-and-sum pass: 16 lanes, 64 lane iterations
    (lambda x: x.sum(-1), (8, 12_000), True),  # rows layout, 64 lanes, 187 iterations
    (lambda x: x.exp().sum(-1), (64, 70_000), False),  # 16 lanes, 4375 iterations: past CASCADE_FAN pushes
    (lambda x: x.sum(0), (200, 64), True),  # column layout: each lane finishes its own total
    (lambda x: x.sum(0), (3000, 64), False),
])
def test_a_short_cascade_sums_bit_for_bit_as_the_cascade_object(fn, shape, short, monkeypatch):
    """A cascade that never leaves its first level is spelled as a second lane array
    (``cpp_plan._short_cascade``); its sums equal the SumCascade's bit for bit, -0.0 and all."""
    from compiler.codegen import cpp_plan

    torch.manual_seed(0)
    x = torch.randn(*shape) * 3
    x.view(-1)[::7] = -0.0
    got, report = compiled_run(fn, (x,), "cpp")
    monkeypatch.setattr(cpp_plan, "_short_cascade", lambda iterations: False)
    whole, whole_report = compiled_run(fn, (x,), "cpp")
    source, whole_source = ("".join(k.source for g in r.graphs for k in g.kernels) for r in (report, whole_report))
    assert "SumCascade" in whole_source and ("SumCascade" in source) == (not short), source
    assert ("short_cascade_" in source) == short
    assert torch.equal(got, whole) and torch.equal(got.signbit(), whole.signbit())
    torch.testing.assert_close(got, fn(x), rtol=2e-6, atol=1e-5)


def test_a_pass_of_vector_math_keeps_one_vector_of_lanes():
    """Softmax's exp-and-sum pass takes 16 float lanes (``MATH_LANE_BYTES``), its max pass 64."""
    _, report = compiled_run(lambda x: torch.softmax(x, -1), (torch.randn(16, 1024),), "cpp")
    source = report.graphs[0].kernels[0].source
    assert "float acc0[64];" in source and "crucible::exp_f32" in source and "float acc4[16];" in source, source


def test_two_cascaded_passes_in_one_scope():
    """Regression (timm poolformer_s24: 'redeclaration of int flush'): a whole-tensor group norm
    makes two long cascaded sum passes in the kernel's one scope, each with its flush counter."""
    x = torch.randn(1, 32, 24, 24) * 3 + 1  # 18,432 elements: long enough to cascade, too short to split
    got, _ = compiled_run(lambda t: F.group_norm(t, 1), (x,), "cpp")
    torch.testing.assert_close(got, F.group_norm(x, 1), rtol=1e-5, atol=1e-5)


def test_long_rows_split_across_threads():
    """Few outer points and long rows: chunks reduced in parallel, partials folded in order."""
    x = torch.randn(3, 1 << 17)
    x[0, 70_000] = x[0, 100_000] = float("nan")
    x[1, 5] = x[1, 90_000] = 99.0  # a tie across chunks: the lowest index wins
    x[2, 131_000] = float("nan")

    def f(x):
        return x.argmax(-1), x.argmin(-1), x.amax(-1), x.sum(-1), x.view(-1).sum(), x.view(3, 64, -1).sum((0, 2))

    got, report = compiled_run(f, (x,), "cpp")
    assert any("c < " in k.source for g in report.graphs for k in g.kernels)
    assert_close(got, f(x), loosen=10.0)


def test_integer_division_semantics():
    a = torch.tensor([7, -7, 7, -7, 0, 123456789], dtype=torch.int64)
    b = torch.tensor([2, 2, -2, -2, 3, -10], dtype=torch.int64)

    def f(a, b):
        return torch.div(a, b, rounding_mode="trunc"), a // b, a % b, torch.fmod(a, b), a << 3, a >> 1

    got, _ = compiled_run(f, (a, b), "cpp")
    for g, e in zip(got, f(a, b)):
        assert torch.equal(g, e)


@pytest.mark.parametrize("op", ["floordiv", "mod", "trunc", "fmod"])
def test_integer_division_by_zero_raises_like_aten(op):
    """Regression: integer division by zero gave 0 in C++ kernels; ATen raises on the CPU."""
    fns = {"floordiv": lambda a, b: (a * 2) // b, "mod": lambda a, b: (a * 2) % b,
           "trunc": lambda a, b: torch.div(a * 2, b, rounding_mode="trunc"),
           "fmod": lambda a, b: torch.fmod(a * 2, b)}
    a = torch.arange(-6, 6, dtype=torch.int32).reshape(3, 4)
    b = torch.tensor([3, -2, 1, 5], dtype=torch.int32)
    opt = torch.compile(fns[op], backend="crucible", options={"codegen": "cpp", "strict": True})
    assert torch.equal(opt(a, b), fns[op](a, b))
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        fns[op](a, b * 0)
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        opt(a, b * 0)
    assert torch.equal(opt(a, b), fns[op](a, b))  # the flag was cleared: the next call is fine


def test_cpu_tensors_default_to_cpp():
    report = compiler.inspect(lambda x: (x + 1).relu().sum(-1), torch.randn(8, 16))
    assert report.graphs and all(g.codegen == "cpp" for g in report.graphs)
    kernels = [k for g in report.graphs for k in g.kernels]
    assert kernels and all(k.codegen == "cpp" and 'extern "C"' in k.source for k in kernels)


# --- cache ---------------------------------------------------------------------------------------

@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CRUCIBLE_CACHE_DIR", str(tmp_path / "cache"))
    cpp_build.clear_memory_cache()
    cpp_build.stats.reset()
    yield tmp_path / "cache" / "cpp"
    cpp_build.clear_memory_cache()


def test_second_compile_does_not_run_the_compiler(fresh_cache):
    x = torch.randn(10, 33)
    first, _ = compiled_run(softmax, (x,), "cpp")
    assert cpp_build.stats.compiles == 1
    second, _ = compiled_run(softmax, (x,), "cpp")  # same process: the loaded library
    cpp_build.clear_memory_cache()
    third, _ = compiled_run(softmax, (x,), "cpp")  # as a new process would: the disk cache
    assert cpp_build.stats.compiles == 1
    assert cpp_build.stats.memory_hits >= 1 and cpp_build.stats.disk_hits >= 1
    assert torch.equal(first, second) and torch.equal(first, third)


def test_truncated_cache_entry_is_rebuilt(fresh_cache):
    x = torch.randn(10, 33)
    expected, _ = compiled_run(softmax, (x,), "cpp")
    libraries = list(fresh_cache.glob("*.so"))
    assert len(libraries) == 1
    # a new file, as a crashed writer would leave it (truncating the loaded file in place
    # would pull pages from under this process's mapping)
    damaged = libraries[0].with_suffix(".damaged")
    damaged.write_bytes(libraries[0].read_bytes()[:100])
    damaged.replace(libraries[0])
    cpp_build.clear_memory_cache()
    cpp_build.stats.reset()
    got, _ = compiled_run(softmax, (x,), "cpp")
    assert cpp_build.stats.rebuilds == 1 and cpp_build.stats.compiles == 1
    assert torch.equal(got, expected)


NEW_PROCESS = """
import torch
import compiler
from compiler import cpp_build
x = torch.randn(8, 300)
report = compiler.inspect(lambda x: (torch.softmax(x, -1), x.sum(0)), x)
print(cpp_build.stats.compiles)
print("\\n".join(k.source for g in report.graphs for k in g.kernels))
"""


def test_new_process_same_source_and_disk_hits(tmp_path):
    """Generated source is the same in every process (no hash-seed-dependent order), so a
    second process finds every kernel in the disk cache."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    runs = []
    for seed in ("1", "2"):
        env = dict(os.environ, CRUCIBLE_CACHE_DIR=str(tmp_path), PYTHONHASHSEED=seed)
        done = subprocess.run([sys.executable, "-c", NEW_PROCESS], cwd=root, env=env, capture_output=True,
                              text=True, timeout=300, check=True)
        compiles, source = done.stdout.split("\n", 1)
        runs.append((int(compiles), source))
    assert runs[0][0] >= 2 and runs[1][0] == 0
    assert runs[0][1] == runs[1][1]


# --- hostile names -------------------------------------------------------------------------------

HOSTILE = "evil */ #error injected\n??/ \\"


def test_hostile_module_and_parameter_names():
    model = torch.nn.Module()
    inner = torch.nn.Module()
    inner.register_parameter(HOSTILE.replace(".", ""), torch.nn.Parameter(torch.randn(8)))
    model.add_module(HOSTILE, inner)

    def forward(x):
        return torch.softmax(x * getattr(getattr(model, HOSTILE), HOSTILE), dim=-1)

    x = torch.randn(4, 8)
    got, report = compiled_run(forward, (x,), "cpp")
    torch.testing.assert_close(got, forward(x))
    assert report.graphs[0].kernels


def test_hostile_names_in_a_kernel_stay_in_comments_and_identifiers():
    """Buffer names, kernel name and origins straight from a graph: the source still compiles."""
    src, out = 'in */ "x"\n#define', "out\n*/ y"
    value = ir.binary(ir.Op.ADD, ir.load(src, ir.xvar(0), torch.float32), ir.const(1.0, torch.float32))
    k = make_kernel(f"kernel */ {HOSTILE}", (5,), [Store(out, ir.xvar(0), value, Level.X)], kept={out},
                    origins=[HOSTILE, "*/ int boom;"])
    rendered = CppRenderer().render(k)
    for line in rendered.source.splitlines():
        code = line.strip()
        if code.startswith("//"):
            assert "\\" not in code and "*/" not in code and "??" not in code, line
        elif code.startswith("#"):
            assert code == '#include "cpp_prelude.h"' or code.startswith("#pragma omp"), line
        else:
            assert '"' not in code.replace('extern "C"', ""), line
    a, b = torch.arange(5.0), torch.empty(5)
    launcher = CppLauncher(rendered)
    args = {src: a, out: b}
    launcher(*[args[name] for name in rendered.args])
    assert torch.equal(b, a + 1)
    assert isinstance(launcher.fn, ctypes._CFuncPtr)


def batch_norm_relu_pool(x, mean, var, w, b):
    y = torch.relu((x - mean[:, None, None]) / torch.sqrt(var[:, None, None] + 1e-5) * w[:, None, None]
                   + b[:, None, None])
    return y, F.max_pool2d(y, 2), F.max_pool2d(y, 3, 2, 1, return_indices=True)


def test_short_reductions_and_hoisted_row_invariants():
    """Pooling windows take the window layout (a loop nest over the output, the window inside);
    per-channel values are computed once per row, before the innermost loop."""
    c = 5
    x = torch.randn(2, c, 9, 8)
    x[0, 1, 2, 3] = float("nan")  # propagates through the max windows that contain it
    report = three_way(batch_norm_relu_pool, x, torch.randn(c), torch.rand(c) + 0.5, torch.randn(c), torch.randn(c))
    sources = [k.source for g in report.graphs for k in g.kernels]
    assert len(sources) == 3  # two pooling kernels (bn + relu fused in) and the bn + relu output
    for source in sources:
        assert source.index("std::sqrt") < source.rindex("for (int64_t x"), source  # before the innermost loop
        assert "xi /" not in source  # a loop per dim, no index unraveling per point


def _ulp_distance(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Distance in float32 units in the last place (monotonic integer view of the bits)."""
    def ordered(t: torch.Tensor) -> torch.Tensor:
        bits = t.contiguous().view(torch.int32).long()
        return torch.where(bits < 0, -(bits & 0x7FFFFFFF), bits)

    return (ordered(a) - ordered(b)).abs()


# the prelude's math functions use FMA where -march allows it, plain a * b + c elsewhere
MATH_FLAGS = [None, "-O3 -fno-math-errno"]  # default (-march=native), baseline x86-64 (no FMA)


def _prelude_math(fn, x: torch.Tensor, flags: str | None, monkeypatch) -> torch.Tensor:
    if flags is not None:
        monkeypatch.setenv("CRUCIBLE_CPP_FLAGS", flags)
    return torch.compile(fn, backend="crucible", options={"codegen": "cpp", "strict": True})(x)


@pytest.mark.parametrize("flags", MATH_FLAGS)
def test_vectorizable_exp_is_within_one_ulp(flags, monkeypatch):
    """The prelude's exp_f32 against the correctly rounded exp, over the whole range (overflow,
    subnormal results, underflow to 0) and the special values."""
    x = torch.cat([torch.linspace(-104, 89, 1_000_001), torch.linspace(-2, 2, 200_001), torch.logspace(-38, 1, 20_000),
                   -torch.logspace(-38, 1, 20_000),
                   torch.tensor([0.0, -0.0, 88.72, 88.73, -87.33, -103.97, -103.98, 1e-45, float("inf"), float("-inf"),
                                 float("nan")])])
    got = _prelude_math(torch.exp, x, flags, monkeypatch)
    finite = torch.isfinite(x)
    assert _ulp_distance(got[finite], torch.exp(x[finite].double()).float()).max() <= 1
    assert got[-3] == float("inf") and got[-2] == 0 and got[-1].isnan()


@pytest.mark.parametrize("flags", MATH_FLAGS)
def test_vectorizable_erf_is_within_two_ulp(flags, monkeypatch):
    """The prelude's erf_f32 (vectorizable, unlike std::erf) against the correctly rounded erf."""
    x = torch.cat([torch.linspace(-6, 6, 400_001), torch.logspace(-38, 1, 20_000), -torch.logspace(-38, 1, 20_000),
                   torch.tensor([0.0, -0.0, 1.0, -1.0, 3.92, 4.0, 1e-45, float("inf"), float("-inf"), float("nan")])])
    got = _prelude_math(torch.erf, x, flags, monkeypatch)
    finite = torch.isfinite(x)
    assert _ulp_distance(got[finite], torch.erf(x[finite].double()).float()).max() <= 2
    assert torch.equal(got[-3:-1], torch.tensor([1.0, -1.0])) and got[-1].isnan()
    assert torch.signbit(got[x == 0]).tolist() == torch.signbit(x[x == 0]).tolist()


@pytest.mark.parametrize("flags", MATH_FLAGS)
def test_vectorizable_log_is_within_one_ulp(flags, monkeypatch):
    x = torch.cat([torch.logspace(-45, 38, 200_001), torch.linspace(0.5, 2, 100_001),
                   torch.tensor([0.0, -0.0, -1.0, float("inf"), float("-inf"), float("nan"), 1e-45])])
    got = _prelude_math(torch.log, x, flags, monkeypatch)
    ref = torch.log(x.double()).float()
    finite = torch.isfinite(ref) & (x > 0)
    assert _ulp_distance(got[finite], ref[finite]).max() <= 1
    torch.testing.assert_close(got[-7:], torch.log(x[-7:]), equal_nan=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_softmax_keeps_exp_in_its_output_row(dtype):
    """exp(x - max) waits for the row sum in the output row itself (as ATen's softmax does) when
    the output has the value's dtype; a 16-bit output cannot hold it, so a row buffer does."""
    x = (torch.randn(12, 700) * 5).to(dtype)
    x[2, 5] = float("inf")
    x[3] = float("-inf")
    report = three_way(softmax, x)
    (kernel,) = report.graphs[0].kernels
    assert ("row" in kernel.source) == (dtype != torch.float32), kernel.source


def test_short_pointwise_kernels_call_libm_math_as_aten_scalar_loop_does():
    """Fuzzer, crucible-cpp, seed 13: exp(exp(x)) of a 0-d int32 4, and of 3 elements, was 1.98e18
    off eager's: the prelude's vectorizable exp (within an ulp, as ATen's vectorized Sleef exp) gave
    exp(4) an ulp above glibc's correctly rounded expf, which ATen's elementwise loop calls below
    2 x 16 floats, and the outer exp multiplied the error by 54. Shorter kernels call libm too."""
    from compiler.codegen.cpp_expr import SCALAR_MATH_BELOW
    from compiler.lowering import lower
    from compiler.scheduler import schedule

    fn = lambda a: torch.exp(torch.exp(a))  # noqa: E731
    for four in (torch.tensor(4, dtype=torch.int32), torch.full((1, 1, 1, 3), 4, dtype=torch.int32)):
        torch._dynamo.reset()
        got = torch.compile(fn, backend="crucible", options={"codegen": "cpp", "strict": True})(four)
        assert torch.equal(got, fn(four))
    # 7 points in a kernel that also reduces them (a norm fused beside the exps)
    with_norm = lambda a: (torch.exp(torch.exp(a)), torch.linalg.vector_norm(a.float()))  # noqa: E731
    seven = torch.full((1, 1, 1, 7), 4, dtype=torch.int32)
    torch._dynamo.reset()
    got = torch.compile(with_norm, backend="crucible", options={"codegen": "cpp", "strict": True})(seven)
    assert torch.equal(got[0], with_norm(seven)[0])
    aten, renderer = torch.ops.aten, CppRenderer()
    for n, call in ((SCALAR_MATH_BELOW - 1, "std::exp("), (SCALAR_MATH_BELOW, "crucible::exp_f32(")):
        gm = compiler.trace_aten(lambda a: aten.log.default(aten.exp.default(a)), torch.full((n,), 4.0))
        (kernel,) = schedule(lower(gm, torch.device("cpu"), renderer.capabilities), renderer.capabilities).kernels
        assert call in renderer.render(kernel).source


@pytest.mark.parametrize("function", sorted(set(cpp_lang.VECTOR_MATH.values())))
def test_prelude_math_vectorizes_inside_a_loop(function, tmp_path):
    """Every vectorizable prelude function must let g++ vectorize the loop calling it, with the flags
    kernels build with. Regression: erf_f32 and log_f32 evaluated their polynomials with a loop,
    which g++ 12 had not unrolled when its vectorizer ran ("two or more consecutive inner loops"),
    so every GELU and log kernel ran scalar (a 4M-element transcendental chain 2.6x slower than eager)."""
    _, report = gcc_vectorizer_report('#include "cpp_prelude.h"\n'
                                      'extern "C" void run(float* __restrict__ out, const float* __restrict__ in, '
                                      'long n) {\n'
                                      f"  for (long i = 0; i < n; ++i) out[i] = crucible::{function}(in[i]);\n"
                                      "}\n", "loop.cpp", "optimized", tmp_path)
    assert "loop.cpp:3" in report and "loop vectorized" in report, report


def gcc_vectorizer_report(source: str, name: str, kind: str, tmp_path) -> tuple[str, str]:
    """``source`` written to ``name`` and compiled with the flags kernels build with; the file's path and
    g++'s vectorizer report (``-fopt-info-vec-{kind}``). Skips where the C++ compiler is not GCC."""
    from compiler import config
    from compiler.runtime import EXTRA_FLAGS

    command = cpp_build.find_compiler()
    if "GCC" not in cpp_build.compiler_identity(tuple(command)) and "g++" not in command[0]:
        pytest.skip("the vectorizer report is read in GCC's -fopt-info format")
    path = tmp_path / name
    path.write_text(source)
    flags = [*cpp_build.SEMANTIC_FLAGS, *config.cpp_tuning_flags(), *EXTRA_FLAGS]
    done = subprocess.run([*command, *flags, "-I", str(cpp_build.PRELUDE.parent), f"-fopt-info-vec-{kind}",
                           "-c", str(path), "-o", str(tmp_path / "kernel.o")], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return str(path), done.stderr


@pytest.mark.parametrize("fn, shape", [(softmax, (256, 1024)), (lambda x: x.sum(-1), (512, 2048)),
                                       (lambda x: x.sum(0), (512, 2048))])
def test_parallel_loops_keep_the_pointers_apart(fn, shape, tmp_path):
    """OpenMP outlines a parallel loop into a function that reaches the kernel's pointers through a
    struct, and g++ drops their ``__restrict__`` there: every vectorized lane loop was versioned
    behind a run-time overlap test of the input and output pointers (once per lane block, softmax
    8192x1024 about 10% slower). The loop's body now takes the pointers again as ``__restrict__``
    parameters of a lambda; g++'s report names no loop of the kernel versioned for aliasing."""
    x = torch.randn(*shape)
    out, report = compiled_run(fn, (x,), "cpp")
    assert_close(out, fn(x))
    (kernel,) = report.graphs[0].kernels
    signature = kernel.source.split('extern "C" void ')[1].split(") {")[0].split("(", 1)[1]
    assert "#pragma omp parallel for" in kernel.source
    assert f"[&]({signature}) {{" in kernel.source  # every pointer, restrict-qualified as in the signature
    source, report = gcc_vectorizer_report(kernel.source, "kernel.cpp", "all", tmp_path)
    assert "kernel.cpp" in report and "loop vectorized" in report
    versioned = [line for line in report.splitlines()
                 if line.startswith(source) and "versioned for vectorization because of possible aliasing" in line]
    assert not versioned, "\n".join(versioned)


def test_a_short_cascade_flushes_its_lanes_as_one_vector_loop(tmp_path):
    """A float sum over long rows pushes its lanes into a cascade every CASCADE_BLOCK lane
    iterations. g++ 12 unrolled that push first, split the cascade into one scalar register a lane
    and added the lanes one at a time; kept a loop, it vectorizes (softmax 8192x1024: 0.94x the
    kernel's time, the same bits). g++'s report says the push's own line is a vectorized loop.
    Wider lane arrays keep the unrolled push (a 1024x8192 layer norm ran slower with the loop)."""
    x = torch.randn(64, 1024)
    out, report = compiled_run(softmax, (x,), "cpp")
    assert_close(out, softmax(x))
    (kernel,) = report.graphs[0].kernels
    lines = kernel.source.splitlines()
    (push,) = [number for number, line in enumerate(lines, start=1) if "_c[j] + " in line]
    source, vectorizer = gcc_vectorizer_report(kernel.source, "kernel.cpp", "optimized", tmp_path)
    assert any(line.startswith(f"{source}:{push}:") and "loop vectorized" in line
               for line in vectorizer.splitlines()), vectorizer
    wide = torch.randn(4, 8192)
    out, report = compiled_run(lambda x: x.sum(-1), (wide,), "cpp")
    assert_close(out, wide.sum(-1))
    source = report.graphs[0].kernels[0].source
    assert "_c[j] + " in source and "[64];" in source and "_Pragma" not in source

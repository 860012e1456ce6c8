"""Op-level parity: one test body over ops x dtypes x shapes x codegens.

Every op here must become generated kernels (no extern call). Inputs are made per
op domain (positive for log, (-1, 1) for atanh, ...) and include NaN/inf where
the op's NaN semantics matter.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import pytest
import torch
import torch.nn.functional as F

import compiler

from tests.compiler.parity import check_parity

F32, F16, BF16, I64, BOOL = torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.bool
FLOATS = (F32, F16, BF16)


@dataclass(frozen=True)
class OpCase:
    name: str
    fn: Callable
    arity: int = 1
    dtypes: tuple = FLOATS
    domain: str = "any"  # any | pos | unit | gt1 | small | nonzero
    loosen: float = 1.0


def make(shape: tuple, dtype: torch.dtype, domain: str, device: str) -> torch.Tensor:
    if dtype == BOOL:
        return torch.rand(shape, device=device) > 0.5
    if not dtype.is_floating_point:
        lo, hi = {"pos": (1, 9), "nonzero": (1, 9), "small": (0, 5)}.get(domain, (-9, 9))
        t = torch.randint(lo, hi, shape, device=device, dtype=dtype)
        return t
    t = torch.randn(shape, device=device)
    if domain == "pos":
        t = t.abs() + 0.1
    elif domain == "unit":
        t = torch.rand(shape, device=device) * 1.8 - 0.9
    elif domain == "gt1":
        t = t.abs() + 1.1
    elif domain == "small":
        t = t * 0.5
    elif domain == "nonzero":
        t = t.sign() * (t.abs() + 0.5)
    return t.to(dtype)


UNARY = [
    OpCase("exp", torch.exp), OpCase("exp2", torch.exp2), OpCase("expm1", torch.expm1),
    OpCase("log", torch.log, domain="pos"), OpCase("log2", torch.log2, domain="pos"),
    OpCase("log10", torch.log10, domain="pos"), OpCase("log1p", torch.log1p, domain="pos"),
    OpCase("sqrt", torch.sqrt, domain="pos"), OpCase("rsqrt", torch.rsqrt, domain="pos"),
    OpCase("sin", torch.sin), OpCase("cos", torch.cos), OpCase("tan", torch.tan, domain="small"),
    OpCase("tanh", torch.tanh), OpCase("sigmoid", torch.sigmoid), OpCase("erf", torch.erf),
    OpCase("erfc", torch.erfc), OpCase("atan", torch.atan, loosen=2), OpCase("asin", torch.asin, domain="unit", loosen=2),
    OpCase("acos", torch.acos, domain="unit", loosen=2), OpCase("sinh", torch.sinh), OpCase("cosh", torch.cosh),
    OpCase("asinh", torch.asinh), OpCase("acosh", torch.acosh, domain="gt1"),
    OpCase("atanh", torch.atanh, domain="unit", loosen=2), OpCase("reciprocal", torch.reciprocal, domain="nonzero"),
    OpCase("neg", torch.neg, dtypes=FLOATS + (I64,)), OpCase("abs", torch.abs, dtypes=FLOATS + (I64,)),
    OpCase("relu", torch.relu, dtypes=FLOATS + (I64,)), OpCase("sign", torch.sign, dtypes=FLOATS + (I64,)),
    OpCase("floor", torch.floor), OpCase("ceil", torch.ceil), OpCase("trunc", torch.trunc),
    OpCase("round", lambda x: torch.round(x * 4)), OpCase("frac", torch.frac),
    OpCase("square", torch.square, dtypes=FLOATS + (I64,)), OpCase("gelu", F.gelu),
    OpCase("gelu_tanh", lambda x: F.gelu(x, approximate="tanh")), OpCase("silu", F.silu),
    OpCase("mish", F.mish), OpCase("hardswish", F.hardswish), OpCase("hardsigmoid", F.hardsigmoid),
    OpCase("elu", F.elu), OpCase("leaky_relu", F.leaky_relu), OpCase("softplus", F.softplus),
    OpCase("hardtanh", F.hardtanh), OpCase("logit", torch.logit, domain="unit"),
    OpCase("isnan", lambda x: torch.isnan(x / x.round())), OpCase("isinf", lambda x: torch.isinf(1 / x.round())),
    OpCase("isfinite", lambda x: torch.isfinite(1 / x.round())),
    OpCase("nan_to_num", lambda x: torch.nan_to_num(torch.log(x)), dtypes=(F32,)),
    OpCase("bitwise_not", torch.bitwise_not, dtypes=(I64, BOOL)), OpCase("logical_not", torch.logical_not,
                                                                       dtypes=(F32, I64, BOOL)),
    OpCase("to_f16", lambda x: x.to(F16), dtypes=(F32, I64, BOOL)),
    OpCase("to_i32", lambda x: (x * 3).to(torch.int32), dtypes=(F32, F16)),
    OpCase("to_bool", lambda x: x.to(BOOL), dtypes=(F32, I64)),
    OpCase("bool_to_f32", lambda x: (x > 0).float(), dtypes=(F32, I64)),
    OpCase("scalar_mul_int", lambda x: x * 2.5, dtypes=(I64,)),
    OpCase("int_true_div", lambda x: x / 4, dtypes=(I64,)),
    OpCase("full_like_add", lambda x: torch.full_like(x, 3.0) + x + torch.ones_like(x)),
    OpCase("arange_add", lambda x: x + torch.arange(x.shape[-1], device=x.device, dtype=x.dtype)),
]

BINARY = [
    OpCase("add", torch.add, 2, FLOATS + (I64, BOOL)), OpCase("add_alpha", lambda a, b: torch.add(a, b, alpha=3), 2),
    OpCase("sub", torch.sub, 2, FLOATS + (I64,)), OpCase("rsub", lambda a, b: 1 - a + b, 2),
    OpCase("mul", torch.mul, 2, FLOATS + (I64, BOOL)), OpCase("div", torch.div, 2, domain="nonzero"),
    OpCase("div_floor", lambda a, b: torch.div(a, b, rounding_mode="floor"), 2, FLOATS + (I64,), "nonzero"),
    OpCase("div_trunc", lambda a, b: torch.div(a, b, rounding_mode="trunc"), 2, FLOATS + (I64,), "nonzero"),
    OpCase("remainder", torch.remainder, 2, (F32, I64), "nonzero", loosen=4),
    OpCase("fmod", torch.fmod, 2, (F32, I64), "nonzero", loosen=4),
    OpCase("pow", torch.pow, 2, domain="pos", loosen=2), OpCase("pow_scalar", lambda a, b: a ** 2 + b ** 0.5 * 0, 2,
                                                             domain="pos"),
    OpCase("maximum", torch.maximum, 2, FLOATS + (I64,)), OpCase("minimum", torch.minimum, 2, FLOATS + (I64,)),
    OpCase("atan2", torch.atan2, 2, (F32,), loosen=2),
    OpCase("eq", torch.eq, 2, FLOATS + (I64,)), OpCase("ne", torch.ne, 2, (F32, I64)),
    OpCase("lt", torch.lt, 2, (F32, I64)), OpCase("le", torch.le, 2, (F32,)), OpCase("gt", torch.gt, 2, (F32, I64)),
    OpCase("ge", torch.ge, 2, (F32,)),
    OpCase("logical_and", torch.logical_and, 2, (BOOL, F32)), OpCase("logical_or", torch.logical_or, 2, (BOOL,)),
    OpCase("logical_xor", torch.logical_xor, 2, (BOOL, I64)),
    OpCase("bitwise_and", torch.bitwise_and, 2, (I64, BOOL)), OpCase("bitwise_or", torch.bitwise_or, 2, (I64, BOOL)),
    OpCase("bitwise_xor", torch.bitwise_xor, 2, (I64, BOOL)),
    OpCase("shift_left", lambda a, b: torch.bitwise_left_shift(a, b.abs() % 5), 2, (I64,)),
    OpCase("shift_right", lambda a, b: torch.bitwise_right_shift(a, b.abs() % 5), 2, (I64,)),
    OpCase("where", lambda a, b: torch.where(a > b, a, b * 2), 2, FLOATS + (I64,)),
    OpCase("clamp", lambda a, b: torch.clamp(a, -0.5, 0.5) + b, 2, FLOATS + (I64,)),
    OpCase("clamp_tensor", lambda a, b: torch.clamp(a, min=b), 2),
    OpCase("lerp", lambda a, b: torch.lerp(a, b, 0.3), 2), OpCase("addcmul", lambda a, b: torch.addcmul(a, a, b, value=2), 2),
    OpCase("masked_fill", lambda a, b: a.masked_fill(b > 0, -1.5), 2),
    OpCase("promote_int_float", lambda a, b: a + b.to(I64), 2, (F32, F16)),
    OpCase("promote_half_float", lambda a, b: a.to(F16) * b.float(), 2, (F32,)),
    OpCase("promote_bool_int", lambda a, b: (a > 0) + b, 2, (I64,)),
]

CASES = UNARY + BINARY
MATRIX = [pytest.param(case, dtype, id=f"{case.name}-{str(dtype)[6:]}") for case in CASES for dtype in case.dtypes]


@pytest.mark.parametrize("case,dtype", MATRIX)
def test_op_parity(case: OpCase, dtype: torch.dtype, codegen: str, device: str) -> None:
    shape = (5, 7)
    inputs = tuple(make(shape if i == 0 else (7,), dtype, case.domain, device) for i in range(case.arity))
    check_parity(case.fn, inputs, codegen, loosen=case.loosen)


# Shapes that stress indexing: scalar, empty, non-contiguous, broadcast, odd, several programs.
SHAPE_CASES = {
    "scalar": lambda d, dt: (make((), dt, "pos", d), make((), dt, "pos", d)),
    "empty": lambda d, dt: (make((0, 3), dt, "pos", d), make((3,), dt, "pos", d)),
    "noncontig": lambda d, dt: (make((9, 6), dt, "pos", d).t(), make((12, 18), dt, "pos", d)[::2, 1::2]),
    "broadcast": lambda d, dt: (make((4, 1, 3), dt, "pos", d), make((5, 3), dt, "pos", d)),
    "odd": lambda d, dt: (make((7, 13, 3), dt, "pos", d), make((13, 1), dt, "pos", d)),
    "multi_program": lambda d, dt: (make((3, 70001), dt, "pos", d), make((70001,), dt, "pos", d)),
}


@pytest.mark.parametrize("shape_name", list(SHAPE_CASES))
@pytest.mark.parametrize("dtype", [F32, F16, I64], ids=["float32", "float16", "int64"])
@pytest.mark.parametrize("fn_name", ["add_mul_chain", "exp_where"])
def test_shapes(fn_name: str, dtype: torch.dtype, shape_name: str, codegen: str, device: str) -> None:
    a, b = SHAPE_CASES[shape_name](device, dtype)
    if fn_name == "add_mul_chain":
        def fn(x, y):
            return (x + y) * y - x
    else:
        def fn(x, y):
            z = x.float() if not dtype.is_floating_point else x
            return torch.where(z > 1, torch.exp(-z), z * 2) + y
    check_parity(fn, (a, b), codegen)


REDUCTIONS = [
    OpCase("sum_last", lambda x: x.sum(-1), dtypes=FLOATS + (I64, BOOL)),
    OpCase("sum_first", lambda x: x.sum(0), dtypes=FLOATS + (I64,)),
    OpCase("sum_02_keep", lambda x: x.sum((0, 2), keepdim=True)), OpCase("sum_all", lambda x: x.sum()),
    OpCase("mean", lambda x: x.mean(1)), OpCase("mean_all", lambda x: x.mean()),
    OpCase("prod", lambda x: (x * 0.3 + 1).prod(-1), dtypes=(F32,)),
    OpCase("amax", lambda x: x.amax(-1), dtypes=FLOATS + (I64,)), OpCase("amin", lambda x: x.amin((0, 1))),
    OpCase("amax_nan", lambda x: (x / x.round()).amax(1), dtypes=(F32,)),
    OpCase("argmax", lambda x: x.argmax(-1), dtypes=FLOATS + (I64,)), OpCase("argmin", lambda x: x.argmin(1)),
    OpCase("argmax_flat", lambda x: x.argmax()), OpCase("argmax_nan", lambda x: (x / x.round()).argmax(-1), dtypes=(F32,)),
    OpCase("max_dim", lambda x: x.max(1)), OpCase("min_dim_keep", lambda x: x.min(-1, keepdim=True)),
    OpCase("any", lambda x: (x > 1).any(-1), dtypes=(F32,)), OpCase("all", lambda x: (x > -2).all(0), dtypes=(F32,)),
    OpCase("var", lambda x: x.var(-1), loosen=2), OpCase("var0", lambda x: x.var(0, correction=0), loosen=2),
    OpCase("std", lambda x: x.std((1, 2), keepdim=True), loosen=2), OpCase("var_mean", lambda x: torch.var_mean(x, -1)),
    OpCase("logsumexp", lambda x: torch.logsumexp(x, -1), loosen=2),
    OpCase("softmax_last", lambda x: torch.softmax(x, -1)), OpCase("softmax_first", lambda x: torch.softmax(x, 0)),
    OpCase("log_softmax", lambda x: torch.log_softmax(x, -1), loosen=2),
    OpCase("layer_norm", lambda x: F.layer_norm(x, x.shape[-1:]), loosen=2),
    OpCase("group_norm", lambda x: F.group_norm(x, 1), loosen=2),
    OpCase("rms_norm", lambda x: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6), loosen=2),
]


@pytest.mark.parametrize("case,dtype", [pytest.param(c, d, id=f"{c.name}-{str(d)[6:]}")
                                        for c in REDUCTIONS for d in c.dtypes])
def test_reduction_parity(case: OpCase, dtype: torch.dtype, codegen: str, device: str) -> None:
    x = make((6, 5, 33), dtype, case.domain, device)
    check_parity(case.fn, (x,), codegen, loosen=case.loosen)


@pytest.mark.parametrize("rows,cols", [(3, 1), (2, 70000), (1, 1), (4, 0)])
def test_reduction_sizes(rows: int, cols: int, codegen: str, device: str) -> None:
    """Degenerate and large rows: a single element, an empty row, a row past the persistent limit."""
    x = make((rows, cols), F32, "any", device)
    check_parity(lambda t: (t.sum(-1), t.amax(-1) if cols else t.sum(-1), t.mean(-1) if cols else t.sum(-1) * 2),
                 (x,), codegen, loosen=4)


VIEW_CASES = [
    OpCase("view", lambda x: x.view(3, 14).sin()), OpCase("reshape_noncontig", lambda x: x.t().reshape(-1).cos()),
    OpCase("permute", lambda x: x.unsqueeze(0).permute(2, 0, 1) * 2), OpCase("transpose", lambda x: x.transpose(0, 1) + 1),
    OpCase("expand", lambda x: x[:, :1].expand(6, 35) * 2), OpCase("squeeze", lambda x: x[None].squeeze(0) - 1),
    OpCase("slice_step", lambda x: x[1::2, ::3] * 3), OpCase("select", lambda x: x[2] + x[:, -1].sum()),
    OpCase("as_strided", lambda x: torch.as_strided(x, (4, 4), (7, 2), 3) + 1),
    OpCase("split", lambda x: [t * 2 for t in x.split(4, dim=1)]), OpCase("unbind", lambda x: [t + 1 for t in x.unbind(0)]),
    OpCase("chunk", lambda x: [t.exp() for t in x.chunk(3, 1)]), OpCase("flatten", lambda x: x.flatten() * 2),
    OpCase("narrow", lambda x: x.narrow(1, 2, 3).abs()),
    OpCase("cat", lambda x: torch.cat([x, x * 2, x[:, :1]], dim=1)),
    OpCase("cat0", lambda x: torch.cat([x[:2], x.sin()], dim=0)),
    OpCase("stack", lambda x: torch.stack([x, x + 1], dim=1)),
    OpCase("pad", lambda x: F.pad(x, (1, 2, 0, 3), value=0.5)), OpCase("pad_crop", lambda x: F.pad(x, (-1, 2))),
    OpCase("gather", lambda x: torch.gather(x, 1, (x.abs() * 3).long().clamp(max=6))),
    OpCase("index", lambda x: x[torch.tensor([0, 2, 2, 5], device=x.device)]),
    OpCase("index_2d", lambda x: x[torch.tensor([0, 2], device=x.device), torch.tensor([1, 3], device=x.device)]),
    OpCase("index_cols", lambda x: x[:, torch.tensor([6, 0, 1], device=x.device)]),
    OpCase("index_select", lambda x: x.index_select(1, torch.tensor([1, 1, 0], device=x.device))),
    OpCase("embedding", lambda x: F.embedding(torch.tensor([[1, 0], [5, 3]], device=x.device), x)),
    # accumulate into a small table: a reduction over the values (compiler/lowerings/indexing.py)
    OpCase("index_put_accumulate", lambda x: x.index_put((torch.tensor([0, 5, -1, 0, 2], device=x.device),),
                                                         x[1:] * 2 + 1, accumulate=True)),
    OpCase("index_put_accumulate_broadcast", lambda x: x.index_put(
        (torch.tensor([[3, 3], [1, -6]], device=x.device),), x[0], accumulate=True)),
    OpCase("full", lambda x: x + torch.full((6, 7), 2.0, device=x.device, dtype=x.dtype)),
]


@pytest.mark.parametrize("case", VIEW_CASES, ids=[c.name for c in VIEW_CASES])
def test_views_and_indexing(case: OpCase, codegen: str, device: str) -> None:
    check_parity(case.fn, (make((6, 7), F32, "any", device),), codegen)


def test_a_small_embedding_table_gradient_is_generated(codegen: str, device: str) -> None:
    """bert's token-type table (2 rows): its gradient, index_put with accumulate after the embedding
    backward's decomposition, is a generated reduction; a table past SMALL_TABLE_ROWS stays ATen's,
    except on a GPU while the reduction reads at most GPU_TABLE_READS values (swin's bias tables)."""
    from compiler.lowerings.indexing import GPU_TABLE_READS, SMALL_TABLE_ROWS
    from compiler.report import collect_reports

    torch.manual_seed(0)
    ids = torch.randint(0, 2, (4, 64), device=device)
    gpu = device == "cuda" and codegen == "triton"
    too_many = GPU_TABLE_READS // ids.numel() // 24 + 1
    for rows, generated in ((2, True), (SMALL_TABLE_ROWS + 1, gpu), (too_many, False)):
        table = torch.nn.Embedding(rows, 24).to(device)
        ref = torch.nn.Embedding(rows, 24).to(device)
        ref.load_state_dict(table.state_dict())
        weights = torch.randn(4, 64, 24, device=device)
        with collect_reports() as reports:
            (torch.compile(table, backend="crucible", options={"strict": True, "codegen": codegen})(ids)
             * weights).sum().backward()
        (ref(ids) * weights).sum().backward()
        torch.testing.assert_close(table.weight.grad, ref.weight.grad, rtol=1e-5, atol=1e-5)
        externs = [e.op for g in reports.graphs for e in g.externs]
        assert any("index_put" in op for op in externs) is not generated, externs


def test_a_relative_position_bias_gradient_is_generated_for_the_gpu() -> None:
    """swin's [169, heads] bias table summed from 2,401 x heads values: a reduction when lowered for
    a GPU (the read count is under GPU_TABLE_READS), ATen's kernel for the CPU (rows past
    SMALL_TABLE_ROWS). Lowered only: the graph's tensors stay on the CPU."""
    import compiler
    from compiler.codegen.triton import TritonRenderer
    from compiler.graph import ExternNode
    from compiler.lowering import lower

    table, idx, grad = torch.zeros(169, 3), torch.randint(0, 169, (2401,)), torch.randn(2401, 3)
    gm = compiler.trace_aten(lambda t, i, g: torch.ops.aten.index_put.default(t, [i], g, True), table, idx, grad)
    gpu = TritonRenderer(interpret=False).capabilities
    for device, generated in ((torch.device("cuda"), True), (torch.device("cpu"), False)):
        externs = [n.op for n in lower(gm, device, gpu).nodes if isinstance(n, ExternNode)]
        assert (externs == []) is generated, externs


def test_pure_view_generates_no_kernel(codegen: str, device: str) -> None:
    x = make((4, 6), F32, "any", device)
    report = check_parity(lambda t: t.t()[1:, ::2].unsqueeze(0), (x,), codegen)
    assert report.kernels == []


@pytest.mark.parametrize("dtype", [F32, F16, BF16], ids=["float32", "float16", "bfloat16"])
def test_nan_inf_propagation(dtype: torch.dtype, codegen: str, device: str) -> None:
    x = torch.tensor([[1.0, math.nan, -math.inf], [math.inf, 2.0, -0.0]], device=device, dtype=dtype)
    check_parity(lambda t: (torch.maximum(t, t.flip(1)), t.amax(1), t.amin(0), torch.relu(t), t.clamp(-1, 1),
                            t.sum(1)), (x,), codegen)


def test_cat_with_empty_input(codegen: str, device: str) -> None:
    """Regression: an input empty along the cat dim (no storage) was read at a clamped index 0,
    which crashed the interpreter with a segfault (found on transformers/dinov3_vit)."""
    x = make((4, 7), F32, "any", device)
    empty = torch.empty(0, 7, device=device)
    check_parity(lambda a, e: torch.cat([a[:1], e, a.cos()], dim=0), (x, empty), codegen)
    check_parity(lambda e: F.pad(e, (0, 0, 1, 2), value=3.0), (empty,), codegen)


def test_argmax_of_a_long_row_stays_correct(codegen: str, device: str) -> None:
    """Rows past the persistent limit: argmax runs as an extern call with a reason, never fails."""
    x = make((2, 40000), F32, "any", device)
    report = check_parity(lambda t: (t.argmax(-1), t.amax(-1)), (x,), codegen, max_externs=1)
    assert [e.reason.value for e in report.externs] == ["unsupported_args"]


POOLS = [
    OpCase("max_pool", lambda x: F.max_pool2d(x, 3, 2, 1)),
    OpCase("max_pool_indices", lambda x: F.max_pool2d(x, 2, return_indices=True)),
    OpCase("max_pool_ceil_dilated", lambda x: F.max_pool2d(x, 3, 2, 1, dilation=2, ceil_mode=True)),
    OpCase("avg_pool", lambda x: F.avg_pool2d(x, 3, 2, 1)),
    OpCase("avg_pool_exclude_pad", lambda x: F.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False)),
    OpCase("avg_pool_divisor", lambda x: F.avg_pool2d(x, 2, divisor_override=3)),
    OpCase("adaptive_avg_pool_global", lambda x: F.adaptive_avg_pool2d(x, 1)),
    OpCase("adaptive_avg_pool_even", lambda x: F.adaptive_avg_pool2d(x, (3, 2))),
    OpCase("bn_relu_pool", lambda x: F.max_pool2d(torch.relu(x * 2 - 1), 2)),
    OpCase("max_pool_nan", lambda x: F.max_pool2d(x / x.round(), 3, 1)),
    OpCase("max_pool_nan_padded", lambda x: F.max_pool2d(x / x.round(), 3, 2, 1, return_indices=True)),
    OpCase("min_pool_window", lambda x: -F.max_pool2d(-x, (2, 3), (1, 2))),
]


@pytest.mark.parametrize("case", POOLS, ids=[c.name for c in POOLS])
@pytest.mark.parametrize("dtype", [F32, F16], ids=["float32", "float16"])
def test_pooling(case: OpCase, dtype: torch.dtype, codegen: str, device: str) -> None:
    x = make((2, 3, 9, 8), dtype, "any", device)
    check_parity(case.fn, (x,), codegen)


def test_pooling_inside_the_input_has_no_bounds_checks(codegen: str, device: str) -> None:
    """Windows that never leave the input (no padding, no ceil-mode overhang) read without masks
    or clamps; only padded axes get them (a ``where`` remains: the index of a window's last NaN)."""
    x = make((2, 3, 8, 8), F32, "any", device)
    report = check_parity(lambda t: F.max_pool2d(t, 2), (x,), codegen)
    assert not {"ge", "lt", "max", "min"} & set(report.kernels[0].ir_ops)
    padded = check_parity(lambda t: F.max_pool2d(t, 3, 2, 1), (x,), codegen)
    assert {"where", "ge", "lt"} <= set(padded.kernels[0].ir_ops)


@pytest.mark.parametrize("dtype", [F16, BF16], ids=["float16", "bfloat16"])
def test_16bit_results_are_rounded_like_eager(dtype: torch.dtype, codegen: str, device: str) -> None:
    """Regression (a flaky to_i32 parity case): kernels compute 16-bit floats in fp32; each op's
    result is rounded to its dtype like eager's tensor, so (x * 3).int(), comparisons and floor
    see 1.0 where fp32 would see 0.99975 (Inductor by default does not round here)."""
    x = torch.tensor([0.33325, 1.6665, -0.33325, 2.333, 0.6665], device=device).to(dtype)

    def fn(t):
        y = t * 3
        return y.to(torch.int32), y == 1, torch.floor(y), (y > 5).float(), torch.trunc(t / 0.3333)

    got = torch.compile(fn, backend="crucible", options={"codegen": codegen, "strict": True})(x)
    for g, e in zip(got, fn(x)):
        assert torch.equal(g, e), (g, e)


@pytest.mark.parametrize("dtype", [torch.int32, I64], ids=["int32", "int64"])
def test_integer_overflow_wraps_like_aten(dtype: torch.dtype, codegen: str, device: str) -> None:
    """Regression: integer +, -, *, negation and sums wrap around on overflow like ATen's
    (generated C++ must not rely on undefined signed overflow)."""
    info = torch.iinfo(dtype)
    x = torch.tensor([[info.max, info.min, info.max - 3, 7]] * 3, device=device, dtype=dtype)
    check_parity(lambda t: (t + 5, t - 9, t * 3, -t, t.sum(-1), (t * t).sum(0)), (x,), codegen)


def test_reshape_of_a_non_viewable_layout(codegen: str, device: str) -> None:
    """Regression (attention heads on torch 2.11): merging dims of a permuted tensor copies first."""
    x = make((2, 4, 5, 8), F32, "any", device)
    check_parity(lambda t: t.transpose(1, 2).reshape(2, 5, 32) * 2, (x,), codegen)


@pytest.mark.parametrize("dtype", [F32, torch.float64], ids=["float32", "float64"])
def test_view_as_an_integer_dtype_of_one_width_is_a_bit_cast(dtype: torch.dtype, codegen: str, device: str) -> None:
    """``x.view(int)`` and back (``Op.BITCAST``): the float's bits, NaN, inf, -0.0 and subnormals
    included, read as the integer of its width, shifted and masked, and integers read as floats (the
    norms' power-of-two scale is built this way). Compared bit for bit."""
    bits = torch.int32 if dtype == F32 else I64
    tiny = torch.finfo(dtype).tiny
    x = torch.tensor([1.0, -2.5, math.inf, -math.inf, math.nan, 0.0, -0.0, tiny / 8, tiny, 3e38, 1e-3],
                     device=device, dtype=dtype)
    shift, bias = (23, 127) if dtype == F32 else (52, 1023)

    def fn(t: torch.Tensor) -> tuple[torch.Tensor, ...]:
        powers = ((bias - torch.arange(-3, 8, device=t.device, dtype=bits)) << shift).view(dtype)
        return ((t.view(bits) >> shift) & 0x7FF) - 3, ((t * 2).view(bits) + 1).view(dtype), powers * t

    torch._dynamo.reset()
    compiled = torch.compile(fn, backend="crucible", options={"codegen": codegen, "strict": True})
    for got, want in zip(compiled(x), fn(x), strict=True):
        assert got.dtype == want.dtype
        as_bits = (lambda t: t.view(bits)) if want.is_floating_point() else (lambda t: t)
        same = (as_bits(got) == as_bits(want)) | (got.isnan() & want.isnan() if want.is_floating_point() else False)
        assert bool(same.all()), (got, want)


def test_a_bit_cast_of_another_width_is_refused_with_its_reason(codegen: str, device: str) -> None:
    """A 16-bit float's bits are not at hand (renderers compute it in float32): its view as int16 stays an
    extern call, with the reason in the report."""
    x = torch.randn(8, device=device, dtype=torch.float16)
    torch._dynamo.reset()
    compiled = torch.compile(lambda t: (t * 2).view(torch.int16) + 1, backend="crucible", options={"codegen": codegen})
    with compiler.collect_reports() as report:
        got = compiled(x)
    assert torch.equal(got, (x * 2).view(torch.int16) + 1)
    assert any("int16" in e.message for e in report.externs), report.externs


def test_int64_arithmetic_on_loop_indices_does_not_wrap(codegen: str, device: str) -> None:
    """Regression (found writing the bit-cast test): Triton's loop indices are int32, and int64
    arithmetic on them (an arange shifted or scaled past int32) wrapped to 0 or refused the constant;
    such operands are widened where int32 might not hold the result. Small index arithmetic stays int32."""
    x = torch.zeros(11, device=device, dtype=I64)
    check_parity(lambda t: (((1023 - torch.arange(-3, 8, device=t.device)) << 52) + t,
                            torch.arange(11, device=t.device) * 3_000_000_000 + t,
                            torch.arange(11, device=t.device) * 300_000_000 + t), (x,), codegen)

"""Pointwise lowerings: unary math, binary arithmetic, comparisons, logic, casts.

Each rule builds an ``Expr`` from its inputs read at the output's index, with
PyTorch's type promotion, and returns a ``Lazy`` value (consumers inline it).
Math the renderers lack as a primitive (tanh, expm1, atan, ...) is written from
primitives in ``compiler.lowerings.formulas``.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import sympy
import torch
from torch._prims_common import ELEMENTWISE_TYPE_PROMOTION_KIND, elementwise_dtypes

from compiler import ir
from compiler.sizes import shape_of
from compiler.ir import Expr, Op
from compiler.lowerings.formulas import (V, acosh, asinh, atan, atan2, atanh, cosh, erfc, expm1, lerp, log1p,
                                         round_half_even, sel, sigmoid, sign, sinh, tanh, trunc, vabs, vexp, vlog,
                                         vmax, vmin, vsqrt)
from compiler.lowerings.powers import pow_
from compiler.lowerings.rules import Lazy, Strided, Unsupported, broadcast_read, register
from compiler.lowerings.symbolic import size_scalar
from compiler.report import ExternReason

if TYPE_CHECKING:
    from compiler.lowering import GraphLowering

aten = torch.ops.aten
prims = torch.ops.prims


# --- type promotion and building Lazy values --------------------------------

def _promotion_key(v: Any) -> Any:
    """What torch's elementwise promotion reads of an operand: a tensor's dtype and whether it is
    zero-dimensional, a number's type."""
    if isinstance(v, (Lazy, Strided)):
        return v.dtype, not v.shape
    if type(v) in (bool, int, float, complex):
        return type(v)
    return None


def _meta(dtype: torch.dtype, zero_dim: bool) -> torch.Tensor:
    return torch.empty([] if zero_dim else [1], dtype=dtype, device="meta")


@functools.lru_cache(maxsize=4096)
def _promoted(keys: tuple, kind: ELEMENTWISE_TYPE_PROMOTION_KIND) -> torch.dtype:
    metas = [k() if isinstance(k, type) else _meta(*k) for k in keys]
    return elementwise_dtypes(*metas, type_promotion_kind=kind)[1]


def promote(*args: Any, kind: ELEMENTWISE_TYPE_PROMOTION_KIND = ELEMENTWISE_TYPE_PROMOTION_KIND.DEFAULT
            ) -> torch.dtype:
    """torch's elementwise result dtype of ``args`` (None skipped), memoized on what promotion reads:
    building meta tensors for it was a tenth of a transformer's lowering."""
    keys = tuple(_promotion_key(a) for a in args if a is not None)
    if None in keys:  # an operand promotion reads more of, left to torch as it is
        metas = [_meta(a.dtype, not a.shape) if isinstance(a, (Lazy, Strided)) else a for a in args if a is not None]
        return elementwise_dtypes(*metas, type_promotion_kind=kind)[1]
    return _promoted(keys, kind)


def out_meta(node: Any) -> tuple[tuple[int, ...], torch.dtype]:
    val = node.meta["val"]
    return shape_of(val.shape), val.dtype


def operand(v: Any, shape: tuple[int, ...], dtype: torch.dtype) -> Expr:
    if isinstance(v, (Lazy, Strided)):
        return ir.cast(broadcast_read(v, shape), dtype)
    if isinstance(v, (bool, int, float)):
        if dtype in REDUCED_FLOATS and not isinstance(v, bool):
            v = torch.tensor(v, dtype=dtype).item()  # eager reads a number as the 16-bit common dtype
        return ir.const(v, dtype)
    if isinstance(v, sympy.Expr):  # a number of symbolic sizes (x / x.shape[-1], 1 / numel)
        return ir.cast(size_scalar(v), dtype)
    raise Unsupported(ExternReason.UNSUPPORTED_ARGS, f"operand of type {type(v).__name__}")


# ATen's reduced-float scalar rule. Eager computes float16/bfloat16 arithmetic in float32 after
# reading every operand as the 16-bit common dtype (int32 -2**31 becomes -inf, 3001 becomes 3000),
# except where a kernel reads a scalar operand at float32 from its original dtype. Measured on
# torch's CPU kernels: mul and div (every rounding mode) read a one-element second operand (a
# Python number or a tensor of one element) that way, so float16 inf / int32 -2**31 is -inf where
# narrowing first gives inf / -inf = NaN; add, sub, remainder, fmod, atan2, maximum, pow and the
# comparisons narrow. On CUDA (from the kernels' source, opmath_gpu_kernel_with_scalars, not yet
# measured) the add, sub, mul and div kernels read a CPU scalar (a graph's Python number) at float32
# in any position; device tensors narrow.
REDUCED_FLOATS = (torch.float16, torch.bfloat16)
_CPU_OPMATH_SECOND = (aten.mul, aten.div)
_CUDA_OPMATH_NUMBERS = (aten.add, aten.sub, aten.rsub, aten.mul, aten.div)


def reads_at_opmath(device: torch.device, node: Any, index: int, arg: Any) -> bool:
    """Whether eager reads operand ``index`` of ``node`` at float32 instead of narrowing it."""
    packet = getattr(node.target, "overloadpacket", None)
    number = isinstance(arg, (int, float)) and not isinstance(arg, bool)
    if device.type == "cuda":
        return number and packet in _CUDA_OPMATH_NUMBERS
    one_element = number or (isinstance(arg, (Lazy, Strided)) and math.prod(arg.shape) == 1)
    return index == 1 and one_element and packet in _CPU_OPMATH_SECOND


def pointwise(node: Any, fn: Callable[..., V], *args: Any, compute: torch.dtype | None = None,
              device: torch.device | None = None) -> Lazy:
    """Lazy value of ``fn(*args)`` at the node's output shape, cast to its dtype. With ``device``,
    a 16-bit computation follows ATen's reduced-float scalar rule on it (``reads_at_opmath``)."""
    shape, out_dtype = out_meta(node)
    if compute is None:
        compute = promote(*args)
    if out_dtype in (torch.complex64, torch.complex128) or compute in (torch.complex64, torch.complex128):
        raise Unsupported(ExternReason.UNSUPPORTED_DTYPE, "complex tensors")
    wide = [device is not None and compute in REDUCED_FLOATS and reads_at_opmath(device, node, i, a)
            for i, a in enumerate(args)]
    if any(wide):  # like the kernel: every operand in float32, one rounding of the result
        exprs = [V(operand(a, shape, torch.float32) if w else ir.cast(operand(a, shape, compute), torch.float32))
                 for a, w in zip(args, wide)]
    else:
        exprs = [V(operand(a, shape, compute)) for a in args]
    result = fn(*exprs).e
    if out_dtype in (torch.float16, torch.bfloat16) and result.dtype == out_dtype \
            and result.op not in (Op.LOAD, Op.CAST, Op.CONST):
        # Renderers compute 16-bit floats in fp32; round each op's result to its dtype like eager's
        # 16-bit tensor (else (x * 3).int(), comparisons and floor differ from eager by whole units)
        result = ir.cast(ir.cast(result, torch.float32), out_dtype)
    return Lazy(shape, out_dtype, ir.cast(result, out_dtype))


def opmath(dtype: torch.dtype) -> torch.dtype:
    """The type ATen's kernels compute ``dtype`` in: float32 for 16-bit floats."""
    return torch.float32 if dtype in REDUCED_FLOATS else dtype


def float_compute(node: Any, *args: Any) -> torch.dtype:
    """Compute dtype of ops that map integers to floats (exp, sin, div, ...)."""
    return promote(*args, kind=ELEMENTWISE_TYPE_PROMOTION_KIND.INT_TO_FLOAT)


def _unary_float(fn: Callable[[V], V]) -> Callable:
    def rule(ctx: GraphLowering, node: Any, x: Any) -> Lazy:
        return pointwise(node, fn, x, compute=float_compute(node, x))

    return rule


FLOAT_UNARY: dict[Any, Callable[[V], V]] = {
    aten.exp: vexp,
    # exp(x * log(2)) was off by |x| ulps: the product's rounding error is the result's relative error
    aten.exp2: lambda x: x.u(Op.EXP2),
    aten.expm1: expm1,
    aten.log: vlog,
    # log(x) / log(2) was an ulp or two off: log2(8) not 3, and pow(a, log2(b)) amplified it
    aten.log2: lambda x: x.u(Op.LOG2),
    # log(x) / log(10) was an ulp off at powers of ten: log10(1000) not 3, and frac(log10(x)) 1 off
    # (fuzzer, crucible-cpp, seed 41)
    aten.log10: lambda x: x.u(Op.LOG10),
    aten.log1p: log1p,
    aten.sqrt: vsqrt,
    aten.rsqrt: lambda x: x.u(Op.RSQRT),
    aten.sin: lambda x: x.u(Op.SIN),
    aten.cos: lambda x: x.u(Op.COS),
    aten.tan: lambda x: x.u(Op.SIN) / x.u(Op.COS),
    aten.tanh: tanh,
    aten.sigmoid: sigmoid,
    aten.erf: lambda x: x.u(Op.ERF),
    aten.erfc: erfc,
    aten.atan: atan,
    aten.asin: lambda x: atan2(x, vsqrt((1 - x) * (1 + x))),
    aten.acos: lambda x: atan2(vsqrt((1 - x) * (1 + x)), x),
    aten.sinh: sinh,
    aten.cosh: cosh,
    aten.asinh: asinh,
    aten.acosh: acosh,
    aten.atanh: atanh,
    aten.reciprocal: lambda x: 1 / x,
}
for _op, _fn in FLOAT_UNARY.items():
    register(_op)(_unary_float(_fn))


def frac(x: V) -> V:
    """ATen's ``x - trunc(x)`` with +0.0 zeros: the GPU gave frac(-0.0) = -0.0 (H200, fuzzer seed 187)."""
    diff = x - trunc(x)
    return sel(diff.eq(0), 0, diff)


SAME_TYPE_UNARY: dict[Any, Callable[[V], V]] = {
    aten.neg: lambda x: -x,
    aten.abs: vabs,
    aten.relu: lambda x: sel(x < 0, 0, x) if x.e.dtype != torch.bool else x,  # NaN and -0.0 pass through
    aten.sign: sign,
    aten.sgn: sign,
    aten.floor: lambda x: x.u(Op.FLOOR) if x.e.dtype.is_floating_point else x,
    aten.ceil: lambda x: x.u(Op.CEIL) if x.e.dtype.is_floating_point else x,
    aten.trunc: lambda x: trunc(x) if x.e.dtype.is_floating_point else x,
    aten.round: lambda x: round_half_even(x) if x.e.dtype.is_floating_point else x,
    aten.frac: lambda x: frac(x),
    aten.square: lambda x: x * x,
    aten.bitwise_not: lambda x: x.u(Op.NOT) if x.e.dtype == torch.bool else x.u(Op.BITNOT),
    aten.positive: lambda x: x,
}


def _unary_same(fn: Callable[[V], V]) -> Callable:
    def rule(ctx: GraphLowering, node: Any, x: Any, *rest: Any, **kwargs: Any) -> Lazy:
        if rest or kwargs:  # round(x, decimals=...), ...
            raise Unsupported(ExternReason.UNSUPPORTED_ARGS, f"extra arguments {rest or kwargs}")
        compute = x.dtype if isinstance(x, (Lazy, Strided)) else out_meta(node)[1]
        return pointwise(node, fn, x, compute=compute)

    return rule


for _op, _fn in SAME_TYPE_UNARY.items():
    register(_op)(_unary_same(_fn))


@register(aten.isnan)
def lower_isnan(ctx: GraphLowering, node: Any, x: Any) -> Lazy:
    return pointwise(node, lambda v: v.u(Op.ISNAN) if v.e.dtype.is_floating_point else v.ne(v), x,
                     compute=x.dtype)


@register(aten.isinf)
def lower_isinf(ctx: GraphLowering, node: Any, x: Any) -> Lazy:
    return pointwise(node, lambda v: vabs(v).eq(math.inf) if v.e.dtype.is_floating_point else v.ne(v), x,
                     compute=x.dtype)


@register(aten.isfinite)
def lower_isfinite(ctx: GraphLowering, node: Any, x: Any) -> Lazy:
    if not x.dtype.is_floating_point:
        return pointwise(node, lambda v: v.eq(v), x, compute=x.dtype)
    return pointwise(node, lambda v: (v - v).eq(0), x, compute=x.dtype)


@register(aten.logical_not)
def lower_logical_not(ctx: GraphLowering, node: Any, x: Any) -> Lazy:
    return pointwise(node, lambda v: v.u(Op.NOT), x, compute=torch.bool)


# --- binary ------------------------------------------------------------------

def _plus_scaled(x: V, y: V, alpha: Any) -> V:
    """``x + alpha * y`` as ATen computes it: one fused multiply-add for floats (its kernels' fmadd), so
    the product alone may overflow where the sum does not (fuzzer, crucible-interpret, seed 21:
    ``sub(x, x, alpha=2)`` at -finfo.max gave inf, eager finfo.max); integers wrap the same either way."""
    if x.e.dtype.is_floating_point:
        return V(ir.fma(y.e, ir.const(alpha, y.e.dtype), x.e))
    return x + y * alpha


@register(aten.add)
def lower_add(ctx: GraphLowering, node: Any, a: Any, b: Any, alpha: Any = None) -> Lazy:
    if promote(a, b) == torch.bool:
        return pointwise(node, lambda x, y: V(ir.binary(Op.OR, x.e, y.e)), a, b)
    return pointwise(node, lambda x, y: x + y if alpha in (None, 1) else _plus_scaled(x, y, alpha), a, b,
                     device=ctx.graph.device)


@register(aten.sub, aten.rsub)
def lower_sub(ctx: GraphLowering, node: Any, a: Any, b: Any, alpha: Any = None) -> Lazy:
    if node.target.overloadpacket is aten.rsub:
        a, b = b, a
    return pointwise(node, lambda x, y: x - y if alpha in (None, 1) else _plus_scaled(x, y, -alpha), a, b,
                     device=ctx.graph.device)


@register(aten.mul)
def lower_mul(ctx: GraphLowering, node: Any, a: Any, b: Any) -> Lazy:
    if promote(a, b) == torch.bool:
        return pointwise(node, lambda x, y: V(ir.binary(Op.AND, x.e, y.e)), a, b)
    return pointwise(node, lambda x, y: x * y, a, b, device=ctx.graph.device)


@register(aten.div)
def lower_div(ctx: GraphLowering, node: Any, a: Any, b: Any, rounding_mode: str | None = None) -> Lazy:
    if rounding_mode is None:
        return pointwise(node, lambda x, y: x / y, a, b, compute=float_compute(node, a, b), device=ctx.graph.device)
    common = promote(a, b)
    if rounding_mode == "trunc":
        fn = (lambda x, y: trunc(x / y)) if common.is_floating_point else (lambda x, y: x / y)
    elif rounding_mode == "floor":
        fn = float_floor_div if common.is_floating_point else (lambda x, y: V(ir.binary(Op.FLOORDIV, x.e, y.e)))
    else:
        raise Unsupported(ExternReason.UNSUPPORTED_ARGS, f"rounding_mode={rounding_mode!r}")
    return pointwise(node, fn, a, b, device=ctx.graph.device)


def float_floor_div(x: V, y: V) -> V:
    """ATen's floor division for floats: from the exact fmod, so a quotient just below an
    integer is not rounded up to it by the division (floor(x / y) is off by one there); a zero
    quotient has the sign of x / y (-0.29 // -1.5 is +0.0: (x - mod) / y alone gave -0.0)."""
    mod = V(ir.binary(Op.MOD, x.e, y.e))
    div = (x - mod) / y
    div = sel(mod.ne(0) & (y < 0).ne(mod < 0), div - 1, div)
    floored = div.u(Op.FLOOR)
    floored = sel(div - floored > 0.5, floored + 1, floored)
    return sel(y.eq(0), x / y, sel(div.eq(0), (x / y) * 0, floored))


def python_mod(x: V, y: V) -> V:
    r = V(ir.binary(Op.MOD, x.e, y.e))
    return sel(r.ne(0) & ((r < 0).ne(y < 0)), r + y, r)


@register(aten.remainder)
def lower_remainder(ctx: GraphLowering, node: Any, a: Any, b: Any) -> Lazy:
    return pointwise(node, python_mod, a, b)  # fmod-based for floats too, like ATen


@register(aten.fmod)
def lower_fmod(ctx: GraphLowering, node: Any, a: Any, b: Any) -> Lazy:
    return pointwise(node, lambda x, y: V(ir.binary(Op.MOD, x.e, y.e)), a, b)  # C fmod, floats and ints


@register(aten.pow)
def lower_pow(ctx: GraphLowering, node: Any, a: Any, b: Any) -> Lazy:
    common = promote(a, b)
    if isinstance(b, (int, float)) and not isinstance(b, bool):
        if b == 2:
            return pointwise(node, lambda x: x * x, a, compute=common)
        if b == 1:
            return pointwise(node, lambda x: x, a, compute=common)
        if b == 0.5 and common.is_floating_point:  # ATen's pow(x, 0.5) is sqrt: NaN for -inf, -0.0 kept
            return pointwise(node, vsqrt, a, compute=common)
        if b == -0.5 and common.is_floating_point:  # ... and pow(x, -0.5) rsqrt: NaN for -inf, -inf for -0.0
            return pointwise(node, lambda x: x.u(Op.RSQRT), a, compute=common)
        if b == 3:
            return pointwise(node, lambda x: x * x * x, a, compute=common)
        if b == -1 and common.is_floating_point:
            return pointwise(node, lambda x: 1 / x, a, compute=common)
    if not common.is_floating_point:
        raise Unsupported(ExternReason.UNSUPPORTED_DTYPE, "integer pow with a non-constant exponent")
    if Op.POW in ctx.capabilities.ops:  # C's pow: exp(y * log x) in float64 was 1e-13 off near overflow
        return pointwise(node, lambda x, y: V(ir.binary(Op.POW, x.e, y.e)), a, b)
    return pointwise(node, pow_, a, b)  # the interpreter's: no libdevice.pow


@register(aten.maximum, aten.max.other)
def lower_maximum(ctx: GraphLowering, node: Any, a: Any, b: Any) -> Lazy:
    return pointwise(node, vmax, a, b)


@register(aten.minimum, aten.min.other)
def lower_minimum(ctx: GraphLowering, node: Any, a: Any, b: Any) -> Lazy:
    return pointwise(node, vmin, a, b)


@register(aten.atan2)
def lower_atan2(ctx: GraphLowering, node: Any, a: Any, b: Any) -> Lazy:
    return pointwise(node, atan2, a, b, compute=float_compute(node, a, b))


def _compare(op: Op) -> Callable:
    def rule(ctx: GraphLowering, node: Any, a: Any, b: Any) -> Lazy:
        return pointwise(node, lambda x, y: V(ir.binary(op, x.e, y.e)), a, b, compute=promote(a, b))

    return rule


for _op, _irop in {aten.eq: Op.EQ, aten.ne: Op.NE, aten.lt: Op.LT, aten.le: Op.LE, aten.gt: Op.GT,
                   aten.ge: Op.GE}.items():
    register(_op)(_compare(_irop))


def _logical(op: Op) -> Callable:
    def rule(ctx: GraphLowering, node: Any, a: Any, b: Any) -> Lazy:
        def fn(x: V, y: V) -> V:
            return V(ir.binary(op, x.ne(0).e if x.e.dtype != torch.bool else x.e,
                               y.ne(0).e if y.e.dtype != torch.bool else y.e))

        return pointwise(node, fn, a, b)

    return rule


register(aten.logical_and)(_logical(Op.AND))
register(aten.logical_or)(_logical(Op.OR))
register(aten.logical_xor)(_logical(Op.NE))


def _bitwise(op: Op, bool_op: Op) -> Callable:
    def rule(ctx: GraphLowering, node: Any, a: Any, b: Any) -> Lazy:
        common = promote(a, b)
        if common.is_floating_point:
            raise Unsupported(ExternReason.UNSUPPORTED_DTYPE, "bitwise op on floats")
        use = bool_op if common == torch.bool else op
        return pointwise(node, lambda x, y: V(ir.binary(use, x.e, y.e)), a, b)

    return rule


register(aten.bitwise_and)(_bitwise(Op.BITAND, Op.AND))
register(aten.bitwise_or)(_bitwise(Op.BITOR, Op.OR))
register(aten.bitwise_xor)(_bitwise(Op.BITXOR, Op.NE))
register(aten.bitwise_left_shift, aten.__lshift__)(_bitwise(Op.SHL, Op.SHL))
register(aten.bitwise_right_shift, aten.__rshift__)(_bitwise(Op.SHR, Op.SHR))


@register(aten.where.self)
def lower_where(ctx: GraphLowering, node: Any, cond: Any, a: Any, b: Any) -> Lazy:
    shape, out_dtype = out_meta(node)
    common = promote(a, b)
    c = operand(cond, shape, torch.bool)
    return Lazy(shape, out_dtype, ir.cast(ir.where(c, operand(a, shape, common), operand(b, shape, common)),
                                          out_dtype))


@register(aten.clamp, aten.clamp_min, aten.clamp_max)
def lower_clamp(ctx: GraphLowering, node: Any, x: Any, lo: Any = None, hi: Any = None) -> Lazy:
    if node.target.overloadpacket is aten.clamp_max:
        lo, hi = None, lo
    common = promote(x, lo, hi)

    def may_be_nan(bound: Any) -> bool:
        return common.is_floating_point and not (isinstance(bound, (int, float)) and not math.isnan(bound))

    # the GPU's max and min order -0.0 below +0.0, as ATen's CUDA clamp does (``Capabilities.ordered_zeros``)
    ordered = ctx.capabilities.ordered_zeros and common.is_floating_point

    def bound(v: V, b: V, given: Any, low: bool) -> V:
        if ordered:
            return vmax(v, b) if low else vmin(v, b)
        past = v < b if low else v > b
        return sel(past | b.ne(b), b, v) if may_be_nan(given) else sel(past, b, v)

    def fn(v: V, *bounds: V) -> V:
        it = iter(bounds)  # NaN in v stays NaN, and a NaN bound gives NaN, like ATen
        v = bound(v, next(it), lo, True) if lo is not None else v
        return bound(v, next(it), hi, False) if hi is not None else v

    return pointwise(node, fn, x, *[b for b in (lo, hi) if b is not None], compute=common)


@register(aten.lerp)
def lower_lerp(ctx: GraphLowering, node: Any, start: Any, end: Any, weight: Any) -> Lazy:
    common = promote(start, end, weight)
    if not common.is_floating_point:
        raise Unsupported(ExternReason.UNSUPPORTED_DTYPE, f"lerp of {common}")
    # ATen's opmath: 16-bit tensors and a scalar weight in float32, one rounding of the result
    return pointwise(node, lerp, start, end, weight, compute=opmath(common))


@register(aten.addcmul)
def lower_addcmul(ctx: GraphLowering, node: Any, x: Any, t1: Any, t2: Any, value: Any = 1) -> Lazy:
    common = promote(x, t1, t2)
    if not common.is_floating_point:
        return pointwise(node, lambda s, a, b: s + a * b * value if value != 1 else s + a * b, x, t1, t2)

    def fn(s: V, a: V, b: V) -> V:  # ATen's kernels: self + (value * t1) * t2, fused
        return V(ir.fma((a if value == 1 else a * value).e, b.e, s.e))

    return pointwise(node, fn, x, t1, t2, compute=opmath(common))  # one rounding


def lower_copy_like(ctx: GraphLowering, node: Any, x: Any, *dtype: Any, **kwargs: Any) -> Lazy:
    # ``dtype``: prims.convert_element_type's positional target dtype (the result's meta says it too)
    val = node.meta["val"]
    if isinstance(x, (Lazy, Strided)) and val.device != ctx.graph.device:
        raise Unsupported(ExternReason.UNSUPPORTED_ARGS, f"device copy to {val.device}")
    return pointwise(node, lambda v: v, x, compute=x.dtype if isinstance(x, (Lazy, Strided)) else val.dtype)


register(aten._to_copy, aten.clone, aten.lift_fresh_copy, prims.convert_element_type)(lower_copy_like)


@register(aten.alias, aten.detach)
def lower_alias(ctx: GraphLowering, node: Any, x: Any) -> Any:
    """The buffer view ``x`` itself where the graph computes its buffer: a training forward returns
    ``alias(sdpa_out)`` for the backward beside the view of it a GEMM reads, and as a copy vit_base
    saved one more [tokens, 768] tensor a layer than Inductor (+222 MB at batch 32). A graph input's
    alias is copied: the graph may write the input back later, and the alias is the value before."""
    if isinstance(x, Strided) and x.buffer not in {b.name for b in ctx.graph.inputs if b is not None}:
        return x
    return lower_copy_like(ctx, node, x)


@register(aten.copy)
def lower_copy(ctx: GraphLowering, node: Any, dst: Any, src: Any, non_blocking: bool = False) -> Lazy:
    return pointwise(node, lambda v: v, src, compute=src.dtype if isinstance(src, (Lazy, Strided)) else dst.dtype)


@register(aten.view.dtype)
def lower_view_dtype(ctx: GraphLowering, node: Any, x: Any, dtype: torch.dtype) -> Lazy:
    """``x.view(dtype)`` of one width: its bits read as ``dtype``, elementwise (the norms' power-of-two
    scale reads a float's exponent field this way)."""
    src = x.dtype if isinstance(x, (Lazy, Strided)) else None
    if src is None or (src, dtype) not in ir.BITCAST_PAIRS:
        raise Unsupported(ExternReason.UNSUPPORTED_DTYPE, f"view of a {src} tensor as {dtype} (bit casts between "
                                                          "32- and 64-bit floats and integers of their width)")
    return pointwise(node, lambda v: V(ir.bitcast(v.e, dtype)), x, compute=src)

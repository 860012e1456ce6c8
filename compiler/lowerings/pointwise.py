"""Pointwise lowerings: unary math, binary arithmetic, comparisons, logic, casts.

Each rule builds an ``Expr`` from its inputs read at the output's index, with
PyTorch's type promotion, and returns a ``Lazy`` value (consumers inline it).
Math the renderers lack as a primitive (tanh, expm1, atan, ...) is written here
from primitives, so every renderer's op table stays small and interpreter-safe.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch._prims_common import ELEMENTWISE_TYPE_PROMOTION_KIND, elementwise_dtypes

from compiler import ir
from compiler.ir import Expr, Op
from compiler.lowering import GraphLowering, Lazy, Strided, Unsupported, broadcast_read, register
from compiler.report import ExternReason

aten = torch.ops.aten
prims = torch.ops.prims


class V:
    """Operator sugar over Expr for writing math formulas; constants take V's dtype."""

    __slots__ = ("e",)

    def __init__(self, e: Expr) -> None:
        self.e = e

    def _c(self, other: Any) -> Expr:
        return other.e if isinstance(other, V) else ir.const(other, self.e.dtype)

    def __add__(self, o: Any) -> V:
        return V(ir.binary(Op.ADD, self.e, self._c(o)))

    __radd__ = __add__

    def __sub__(self, o: Any) -> V:
        return V(ir.binary(Op.SUB, self.e, self._c(o)))

    def __rsub__(self, o: Any) -> V:
        return V(ir.binary(Op.SUB, self._c(o), self.e))

    def __mul__(self, o: Any) -> V:
        return V(ir.binary(Op.MUL, self.e, self._c(o)))

    __rmul__ = __mul__

    def __truediv__(self, o: Any) -> V:
        return V(ir.binary(Op.DIV, self.e, self._c(o)))

    def __rtruediv__(self, o: Any) -> V:
        return V(ir.binary(Op.DIV, self._c(o), self.e))

    def __neg__(self) -> V:
        return V(ir.unary(Op.NEG, self.e))

    def __lt__(self, o: Any) -> V:
        return V(ir.binary(Op.LT, self.e, self._c(o)))

    def __le__(self, o: Any) -> V:
        return V(ir.binary(Op.LE, self.e, self._c(o)))

    def __gt__(self, o: Any) -> V:
        return V(ir.binary(Op.GT, self.e, self._c(o)))

    def __ge__(self, o: Any) -> V:
        return V(ir.binary(Op.GE, self.e, self._c(o)))

    def eq(self, o: Any) -> V:
        return V(ir.binary(Op.EQ, self.e, self._c(o)))

    def ne(self, o: Any) -> V:
        return V(ir.binary(Op.NE, self.e, self._c(o)))

    def __and__(self, o: V) -> V:
        return V(ir.binary(Op.AND, self.e, o.e))

    def u(self, op: Op) -> V:
        return V(ir.unary(op, self.e))


def sel(cond: V, a: V | float, b: V | float, like: V | None = None) -> V:
    """where(cond, a, b); python numbers take the dtype of the other arm (or ``like``)."""
    ref = a if isinstance(a, V) else b if isinstance(b, V) else like
    if ref is None:
        raise TypeError("sel() needs a tensor arm or like=")
    return V(ir.where(cond.e, ref._c(a), ref._c(b)))


def vabs(x: V) -> V:
    return x.u(Op.ABS)


def vexp(x: V) -> V:
    return x.u(Op.EXP)


def vlog(x: V) -> V:
    return x.u(Op.LOG)


def vsqrt(x: V) -> V:
    return x.u(Op.SQRT)


def vmax(a: V, b: V) -> V:
    return V(ir.binary(Op.MAX, a.e, b.e))


def vmin(a: V, b: V) -> V:
    return V(ir.binary(Op.MIN, a.e, b.e))


def expm1(x: V) -> V:
    # exp(x) - 1 cancels near 0; a short Taylor series is exact to fp32 there.
    series = x * (1 + x * (0.5 + x * (1 / 6 + x * (1 / 24 + x * (1 / 120 + x * (1 / 720))))))
    return sel(vabs(x) < 0.1, series, vexp(x) - 1)


def log1p(x: V) -> V:
    series = x * (1 + x * (-0.5 + x * (1 / 3 + x * (-0.25 + x * (0.2 + x * (-1 / 6))))))
    return sel(vabs(x) < 0.05, series, vlog(x + 1))


def sigmoid(x: V) -> V:
    return 1 / (vexp(-x) + 1)


def tanh(x: V) -> V:
    m = expm1(vabs(x) * -2)  # in (-1, 0]
    mag = -m / (m + 2)
    return sel(x < 0, -mag, mag)


def atan(x: V) -> V:
    # Range reduction to |t| <= tan(pi/12), then an odd minimax polynomial (Cephes atanf).
    a = vabs(x)
    big = a > 2.414213562373095
    mid = a > 0.4142135623730950
    t = sel(big, -1 / a, sel(mid, (a - 1) / (a + 1), a))
    base = sel(big, math.pi / 2, sel(mid, math.pi / 4, 0.0, like=x))
    z = t * t
    poly = (((8.05374449538e-2 * z - 1.38776856032e-1) * z + 1.99777106478e-1) * z - 3.33329491539e-1) * z * t + t
    r = base + poly
    return sel(x < 0, -r, r)


def atan2(y: V, x: V) -> V:
    r = atan(y / x)
    r = sel(x < 0, sel(y < 0, r - math.pi, r + math.pi), r)
    r = sel(x.eq(0), sel(y > 0, math.pi / 2, sel(y < 0, -math.pi / 2, 0.0, like=y)), r)
    return r


def sign(x: V) -> V:
    # ATen computes (0 < x) - (x < 0): NaN gives 0 and -0.0 gives +0.0
    return sel(x > 0, 1, sel(x < 0, -1, 0, like=x), like=x)


def unit_sign(x: V) -> V:
    return sel(x > 0, 1, sel(x < 0, -1, x, like=x), like=x)  # keeps NaN and -0.0 (for odd functions)


def asinh(x: V) -> V:
    # x*x overflows past ~1e19 in float32 (inf/inf = NaN); there asinh(|x|) = log(2|x|) to
    # within 1/(4x^2), far below one ulp.
    a = vabs(x)
    small = log1p(a + a * a / (vsqrt(a * a + 1) + 1))
    return unit_sign(x) * sel(a > 1e9, vlog(a) + math.log(2.0), small)


def round_half_even(x: V) -> V:
    f = x.u(Op.FLOOR)
    diff = x - f
    half = f * 0.5
    f_even = half.u(Op.FLOOR).eq(half)
    up = sel(diff > 0.5, f + 1, sel(diff < 0.5, f, sel(f_even, f, f + 1)))
    return sel(up.eq(0), x * 0, up)  # -0.3 rounds to -0.0, like ATen


def trunc(x: V) -> V:
    return sel(x < 0, x.u(Op.CEIL), x.u(Op.FLOOR))


def pow_(x: V, y: V) -> V:
    """x ** y for floats with C pow's special cases (negative base, zero, y == 0)."""
    mag = vexp(y * vlog(vabs(x)))
    y_int = y.u(Op.FLOOR).eq(y)
    y_odd = y_int & (y * 0.5).u(Op.FLOOR).ne(y * 0.5)
    neg = sel(y_int, sel(y_odd, -mag, mag), x * 0 + math.nan)
    r = sel(x < 0, neg, mag)
    return sel(y.eq(0), y * 0 + 1, sel(x.eq(1), x, r))


# --- type promotion and building Lazy values --------------------------------

def _meta(v: Any) -> Any:
    if isinstance(v, (Lazy, Strided)):
        return torch.empty([1] * len(v.shape), dtype=v.dtype, device="meta")
    return v


def promote(*args: Any, kind: ELEMENTWISE_TYPE_PROMOTION_KIND = ELEMENTWISE_TYPE_PROMOTION_KIND.DEFAULT
            ) -> torch.dtype:
    metas = [_meta(a) for a in args if a is not None]
    return elementwise_dtypes(*metas, type_promotion_kind=kind)[1]


def out_meta(node: Any) -> tuple[tuple[int, ...], torch.dtype]:
    val = node.meta["val"]
    return tuple(val.shape), val.dtype


def operand(v: Any, shape: tuple[int, ...], dtype: torch.dtype) -> Expr:
    if isinstance(v, (Lazy, Strided)):
        return ir.cast(broadcast_read(v, shape), dtype)
    if isinstance(v, (bool, int, float)):
        return ir.const(v, dtype)
    raise Unsupported(ExternReason.UNSUPPORTED_ARGS, f"operand of type {type(v).__name__}")


def pointwise(node: Any, fn: Callable[..., V], *args: Any, compute: torch.dtype | None = None) -> Lazy:
    """Lazy value of ``fn(*args)`` at the node's output shape, cast to its dtype."""
    shape, out_dtype = out_meta(node)
    if compute is None:
        compute = promote(*args)
    if out_dtype in (torch.complex64, torch.complex128) or compute in (torch.complex64, torch.complex128):
        raise Unsupported(ExternReason.UNSUPPORTED_DTYPE, "complex tensors")
    exprs = [V(operand(a, shape, compute)) for a in args]
    result = fn(*exprs).e
    if out_dtype in (torch.float16, torch.bfloat16) and result.dtype == out_dtype \
            and result.op not in (Op.LOAD, Op.CAST, Op.CONST):
        # Renderers compute 16-bit floats in fp32; round each op's result to its dtype like eager's
        # 16-bit tensor (else (x * 3).int(), comparisons and floor differ from eager by whole units)
        result = ir.cast(ir.cast(result, torch.float32), out_dtype)
    return Lazy(shape, out_dtype, ir.cast(result, out_dtype))


def float_compute(node: Any, *args: Any) -> torch.dtype:
    """Compute dtype of ops that map integers to floats (exp, sin, div, ...)."""
    return promote(*args, kind=ELEMENTWISE_TYPE_PROMOTION_KIND.INT_TO_FLOAT)


def _unary_float(fn: Callable[[V], V]) -> Callable:
    def rule(ctx: GraphLowering, node: Any, x: Any) -> Lazy:
        return pointwise(node, fn, x, compute=float_compute(node, x))

    return rule


FLOAT_UNARY: dict[Any, Callable[[V], V]] = {
    aten.exp: vexp,
    aten.exp2: lambda x: vexp(x * math.log(2.0)),
    aten.expm1: expm1,
    aten.log: vlog,
    aten.log2: lambda x: vlog(x) * (1 / math.log(2.0)),
    aten.log10: lambda x: vlog(x) * (1 / math.log(10.0)),
    aten.log1p: log1p,
    aten.sqrt: vsqrt,
    aten.rsqrt: lambda x: x.u(Op.RSQRT),
    aten.sin: lambda x: x.u(Op.SIN),
    aten.cos: lambda x: x.u(Op.COS),
    aten.tan: lambda x: x.u(Op.SIN) / x.u(Op.COS),
    aten.tanh: tanh,
    aten.sigmoid: sigmoid,
    aten.erf: lambda x: x.u(Op.ERF),
    aten.erfc: lambda x: 1 - x.u(Op.ERF),
    aten.atan: atan,
    aten.asin: lambda x: atan2(x, vsqrt((1 - x) * (1 + x))),
    aten.acos: lambda x: atan2(vsqrt((1 - x) * (1 + x)), x),
    aten.sinh: lambda x: (expm1(x) - expm1(-x)) * 0.5,
    aten.cosh: lambda x: (vexp(x) + vexp(-x)) * 0.5,
    aten.asinh: asinh,
    aten.acosh: lambda x: vlog(x + vsqrt((x - 1) * (x + 1))),
    aten.atanh: lambda x: log1p(2 * x / (1 - x)) * 0.5,
    aten.reciprocal: lambda x: 1 / x,
}
for _op, _fn in FLOAT_UNARY.items():
    register(_op)(_unary_float(_fn))


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
    aten.frac: lambda x: x - trunc(x),
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

def _alpha(b: V, alpha: Any) -> V:
    return b if alpha in (None, 1) else b * alpha


@register(aten.add)
def lower_add(ctx: GraphLowering, node: Any, a: Any, b: Any, alpha: Any = None) -> Lazy:
    if promote(a, b) == torch.bool:
        return pointwise(node, lambda x, y: V(ir.binary(Op.OR, x.e, y.e)), a, b)
    return pointwise(node, lambda x, y: x + _alpha(y, alpha), a, b)


@register(aten.sub, aten.rsub)
def lower_sub(ctx: GraphLowering, node: Any, a: Any, b: Any, alpha: Any = None) -> Lazy:
    if node.target.overloadpacket is aten.rsub:
        a, b = b, a
    return pointwise(node, lambda x, y: x - _alpha(y, alpha), a, b)


@register(aten.mul)
def lower_mul(ctx: GraphLowering, node: Any, a: Any, b: Any) -> Lazy:
    if promote(a, b) == torch.bool:
        return pointwise(node, lambda x, y: V(ir.binary(Op.AND, x.e, y.e)), a, b)
    return pointwise(node, lambda x, y: x * y, a, b)


@register(aten.div)
def lower_div(ctx: GraphLowering, node: Any, a: Any, b: Any, rounding_mode: str | None = None) -> Lazy:
    if rounding_mode is None:
        return pointwise(node, lambda x, y: x / y, a, b, compute=float_compute(node, a, b))
    common = promote(a, b)
    if rounding_mode == "trunc":
        fn = (lambda x, y: trunc(x / y)) if common.is_floating_point else (lambda x, y: x / y)
    elif rounding_mode == "floor":
        fn = float_floor_div if common.is_floating_point else (lambda x, y: V(ir.binary(Op.FLOORDIV, x.e, y.e)))
    else:
        raise Unsupported(ExternReason.UNSUPPORTED_ARGS, f"rounding_mode={rounding_mode!r}")
    return pointwise(node, fn, a, b)


def float_floor_div(x: V, y: V) -> V:
    """ATen's floor division for floats: from the exact fmod, so a quotient just below an
    integer is not rounded up to it by the division (floor(x / y) is off by one there)."""
    mod = V(ir.binary(Op.MOD, x.e, y.e))
    div = (x - mod) / y
    div = sel(mod.ne(0) & (y < 0).ne(mod < 0), div - 1, div)
    floored = div.u(Op.FLOOR)
    floored = sel(div - floored > 0.5, floored + 1, floored)
    return sel(y.eq(0), x / y, floored)


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
        if b == 0.5 and common.is_floating_point:
            return pointwise(node, vsqrt, a, compute=common)
        if b == 3:
            return pointwise(node, lambda x: x * x * x, a, compute=common)
        if b == -1 and common.is_floating_point:
            return pointwise(node, lambda x: 1 / x, a, compute=common)
    if not common.is_floating_point:
        raise Unsupported(ExternReason.UNSUPPORTED_DTYPE, "integer pow with a non-constant exponent")
    return pointwise(node, pow_, a, b)


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

    def fn(v: V, *bounds: V) -> V:
        it = iter(bounds)
        if lo is not None:
            low = next(it)
            v = sel(v < low, low, v)  # NaN in v stays NaN, like ATen
        if hi is not None:
            high = next(it)
            v = sel(v > high, high, v)
        return v

    return pointwise(node, fn, x, *[b for b in (lo, hi) if b is not None], compute=common)


def lower_copy_like(ctx: GraphLowering, node: Any, x: Any, **kwargs: Any) -> Lazy:
    val = node.meta["val"]
    if isinstance(x, (Lazy, Strided)) and val.device != ctx.graph.device:
        raise Unsupported(ExternReason.UNSUPPORTED_ARGS, f"device copy to {val.device}")
    return pointwise(node, lambda v: v, x, compute=x.dtype if isinstance(x, (Lazy, Strided)) else val.dtype)


register(aten._to_copy, aten.clone, aten.alias, aten.lift_fresh_copy, aten.detach, prims.convert_element_type
         )(lower_copy_like)


@register(aten.copy)
def lower_copy(ctx: GraphLowering, node: Any, dst: Any, src: Any, non_blocking: bool = False) -> Lazy:
    return pointwise(node, lambda v: v, src, compute=src.dtype if isinstance(src, (Lazy, Strided)) else dst.dtype)

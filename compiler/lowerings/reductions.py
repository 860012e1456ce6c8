"""Reduction lowerings: sum, mean, prod, amax/amin, argmax/argmin, any/all, var.

Every reduction realizes one node whose body is read at (XVAR kept dims, RVAR
reduced dims); the scheduler fuses producers (inlined in the body) and
consumers (matching indexing) around it. Accumulation is in float32 (float64
for float64) and int64 for integer sums, like ATen.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import torch

from compiler import ir
from compiler.ir import Expr, Op, ReduceOp
from compiler.lowerings.formulas import V
from compiler.lowerings.pointwise import out_meta, pointwise
from compiler.lowerings.rules import Lazy, TensorValue, Unsupported, as_expr, broadcast_read, register
from compiler.lowerings.views import reshape
from compiler.report import ExternReason
from compiler.sizes import prod

if TYPE_CHECKING:
    from compiler.lowering import GraphLowering

aten = torch.ops.aten


def _dims(x: TensorValue, dims: Any) -> list[int]:
    nd = len(x.shape)
    if dims is None or (isinstance(dims, (list, tuple)) and len(dims) == 0):
        return list(range(nd))
    if isinstance(dims, int):
        dims = [dims]
    return sorted({d % max(nd, 1) for d in dims}) if nd else []


def acc_dtype_for(dtype: torch.dtype) -> torch.dtype:
    if dtype == torch.float64:
        return torch.float64
    if dtype.is_floating_point:
        return torch.float32
    return torch.int64


def reduce_to(ctx: GraphLowering, node: Any, x: TensorValue, dims: list[int], keepdim: bool, op: ReduceOp,
              acc: torch.dtype, out_dtype: torch.dtype | None = None) -> TensorValue:
    """One reduction, with the degenerate sizes (nothing or a single element reduced) made pointwise."""
    out_dtype = out_dtype or out_meta(node)[1]
    rnumel = math.prod(x.shape[d] for d in dims)
    if rnumel == 1 or rnumel == 0:
        identity = {ReduceOp.SUM: 0, ReduceOp.PROD: 1, ReduceOp.ARGMAX: 0, ReduceOp.ARGMIN: 0,
                    ReduceOp.MAX: -math.inf, ReduceOp.MIN: math.inf}[op]
        shape = tuple(1 if d in dims else n for d, n in enumerate(x.shape) if keepdim or d not in dims)
        if rnumel == 0 or op in (ReduceOp.ARGMAX, ReduceOp.ARGMIN):
            return Lazy(shape, out_dtype, ir.const(identity, out_dtype))
        return Lazy(shape, out_dtype, ir.cast(as_expr(reshape(ctx, x, shape)), out_dtype))
    limit = ctx.capabilities.max_persistent_rnumel
    if op in (ReduceOp.ARGMAX, ReduceOp.ARGMIN) and not ctx.capabilities.persistent(rnumel):
        # index tracking is written for rows held in one block; longer rows stay with ATen
        raise Unsupported(ExternReason.UNSUPPORTED_ARGS, f"{op.value} over {rnumel} > {limit} elements")
    return ctx.reduction(x, dims, keepdim, op, acc, out_dtype)


def _source(ctx: GraphLowering, x: TensorValue, dtype: torch.dtype | None) -> TensorValue:
    if dtype is None or dtype == x.dtype:
        return x
    return Lazy(x.shape, dtype, ir.cast(as_expr(x), dtype))


@register(aten.sum.dim_IntList, aten.sum.default)
def lower_sum(ctx: GraphLowering, node: Any, x: TensorValue, dims: Any = None, keepdim: bool = False,
              dtype: torch.dtype | None = None) -> TensorValue:
    out = out_meta(node)[1]
    x = _source(ctx, x, dtype)
    return reduce_to(ctx, node, x, _dims(x, dims), keepdim, ReduceOp.SUM, acc_dtype_for(out))


@register(aten.prod.dim_int, aten.prod.default)
def lower_prod(ctx: GraphLowering, node: Any, x: TensorValue, dim: Any = None, keepdim: bool = False,
               dtype: torch.dtype | None = None) -> TensorValue:
    out = out_meta(node)[1]
    x = _source(ctx, x, dtype)
    return reduce_to(ctx, node, x, _dims(x, dim), keepdim, ReduceOp.PROD, acc_dtype_for(out))


@register(aten.mean.dim, aten.mean.default)
def lower_mean(ctx: GraphLowering, node: Any, x: TensorValue, dims: Any = None, keepdim: bool = False,
               dtype: torch.dtype | None = None) -> TensorValue:
    out = out_meta(node)[1]
    x = _source(ctx, x, dtype)
    d = _dims(x, dims)
    acc = acc_dtype_for(out)
    count = prod(x.shape[i] for i in d)  # a static 0 beside symbolic sizes: the int 0
    if acc == torch.float64 or (isinstance(count, int) and not count):
        total = reduce_to(ctx, node, x, d, keepdim, ReduceOp.SUM, acc, acc)
        return pointwise(node, lambda s: s * math.nan if isinstance(count, int) and not count else s / count,
                         total, compute=acc)
    # A float32 sum as (sum of x * 2^-k) / n * 2^k with 2^k >= n, as var's first mean: no partial sum
    # can overflow (fuzzer, crucible-cpp, seed 13: a row holding inf and two -3.4e38 gave NaN, the two
    # finite values summed to -inf in one accumulator, where eager's order and float64 give inf).
    # Scaling by a power of two is exact, so the sum rounds as the plain one does; only a mean below
    # finfo.tiny * 2^k loses bits to subnormals. A float64 sum stays plain: its reference is float64
    # too, so an overflow is judged against eager's own, and the scaled mean of -1.8e308 twice and
    # inf twice was inf where eager (and so the reference) gave NaN (same campaign). Whether a plain
    # float64 sum that overflows agrees with eager depends on the summation order. A symbolic count
    # (at least 2) takes its scale at run time (``_pow2_at_least``).
    scale, inv = _pow2_at_least(count, acc)
    scaled = Lazy(x.shape, acc, ir.binary(Op.MUL, ir.cast(as_expr(x), acc), inv))
    total = reduce_to(ctx, node, scaled, d, keepdim, ReduceOp.SUM, acc, acc)
    if not isinstance(count, int):
        return pointwise(node, lambda s: s / count * V(scale), total, compute=acc)
    if scale.arg == count:  # the scaled sum is the mean
        return pointwise(node, lambda s: s, total, compute=acc)
    return pointwise(node, lambda s: s / count * scale.arg, total, compute=acc)


def _minmax(op: ReduceOp):
    def rule(ctx: GraphLowering, node: Any, x: TensorValue, dims: Any = None, keepdim: bool = False
             ) -> TensorValue:
        return reduce_to(ctx, node, x, _dims(x, dims), keepdim, op, x.dtype if x.dtype != torch.bool
                         else torch.int32)

    return rule


register(aten.amax)(_minmax(ReduceOp.MAX))
register(aten.amin)(_minmax(ReduceOp.MIN))
register(aten.max.default)(_minmax(ReduceOp.MAX))
register(aten.min.default)(_minmax(ReduceOp.MIN))


def _arg(op: ReduceOp):
    def rule(ctx: GraphLowering, node: Any, x: TensorValue, dim: int | None = None, keepdim: bool = False
             ) -> TensorValue:
        if dim is None and keepdim:
            dims = list(range(len(x.shape)))
        elif dim is None:
            x, dims = reshape(ctx, x, (math.prod(x.shape),)), [0]
        else:
            dims = _dims(x, dim)
        return reduce_to(ctx, node, x, dims, keepdim, op, torch.int64)

    return rule


register(aten.argmax)(_arg(ReduceOp.ARGMAX))
register(aten.argmin)(_arg(ReduceOp.ARGMIN))


def _minmax_dim(value_op: ReduceOp, index_op: ReduceOp):
    def rule(ctx: GraphLowering, node: Any, x: TensorValue, dim: int, keepdim: bool = False) -> list:
        dims = _dims(x, dim)
        values = reduce_to(ctx, node, x, dims, keepdim, value_op, x.dtype, x.dtype)
        indices = reduce_to(ctx, node, x, dims, keepdim, index_op, torch.int64, torch.int64)
        return [values, indices]

    return rule


register(aten.max.dim)(_minmax_dim(ReduceOp.MAX, ReduceOp.ARGMAX))
register(aten.min.dim)(_minmax_dim(ReduceOp.MIN, ReduceOp.ARGMIN))


def _truth(ctx: GraphLowering, x: TensorValue) -> TensorValue:
    e = as_expr(x)
    nonzero = ir.binary(ir.Op.NE, e, ir.const(0, e.dtype)) if e.dtype != torch.bool else e
    return Lazy(x.shape, torch.int32, ir.cast(nonzero, torch.int32))


def _anyall(op: ReduceOp):
    def rule(ctx: GraphLowering, node: Any, x: TensorValue, dims: Any = None, keepdim: bool = False
             ) -> TensorValue:
        truth = _truth(ctx, x)
        d = _dims(x, dims)
        if math.prod(x.shape[i] for i in d) == 0:
            return pointwise(node, lambda: V(ir.const(op is ReduceOp.MIN, torch.bool)), compute=torch.bool)
        return reduce_to(ctx, node, truth, d, keepdim, op, torch.int32)

    return rule


register(aten.any)(_anyall(ReduceOp.MAX))
register(aten.all)(_anyall(ReduceOp.MIN))


def _number(value: Any, dtype: torch.dtype) -> Expr:
    """A count as a ``dtype`` value: a constant, or a symbolic size converted (``compiler.sizes``)."""
    return ir.const(value, dtype) if isinstance(value, (int, float)) else ir.cast(ir.size(value), dtype)


def _pow2_at_least(count: Any, dtype: torch.dtype) -> tuple[Expr, Expr]:
    """(2^k, 2^-k) as ``dtype`` values with 2^k >= ``count``: a mean's exact scale. For a symbolic
    count, computed at run time as exp2(ceil(log2(count))) (an approximate log2 can only pick a larger
    power of two, which scales as exactly): unscaled, the float32 sum of 8191 bfloat16 values near
    1.4e38 overflowed, and std was NaN where the static kernel gives inf (fuzzer, crucible-interpret
    --dynamic, seed 270)."""
    if isinstance(count, int):
        scale = 2.0 ** math.ceil(math.log2(max(count, 1)))
        return ir.const(scale, dtype), ir.const(1 / scale, dtype)
    k = ir.unary(Op.CEIL, ir.unary(Op.LOG2, _number(count, torch.float64)))
    return (ir.cast(ir.unary(Op.EXP2, k), dtype),
            ir.cast(ir.unary(Op.EXP2, ir.unary(Op.NEG, k)), dtype))


def variance(ctx: GraphLowering, node: Any, x: TensorValue, dims: Any, correction: Any, keepdim: bool
             ) -> tuple[TensorValue, TensorValue]:
    """Two-pass variance (mean first, then squared deviations): numerically sound, and
    both reductions fuse into one kernel when the reduction fits a block."""
    if not x.dtype.is_floating_point:
        raise Unsupported(ExternReason.UNSUPPORTED_DTYPE, "var of a non-float tensor")
    d = _dims(x, dims)
    acc = acc_dtype_for(x.dtype)
    # sizes.prod: a product of symbolic sizes and a static 0 is the int 0, an empty reduction's count,
    # not a symbolic one (fuzzer, crucible-cpp --dynamic, seed 192: var over (s77, s27, 0) divided by
    # 0 - 1 and gave -0.0 where ATen's 0/0 is NaN)
    n = prod(x.shape[i] for i in d)
    corr = 1 if correction is None else correction
    xs = ir.cast(as_expr(x), acc)
    if n == 0:  # an empty reduction's mean is 0/0 = NaN in ATen; the sum is exactly 0, and 0 * inf = NaN
        total = reduce_to(ctx, node, x, d, True, ReduceOp.SUM, acc, acc)
        mean_kd = Lazy(total.shape, acc, ir.binary(Op.MUL, as_expr(total), ir.const(math.inf, acc)))
        dev = ir.binary(Op.SUB, xs, broadcast_read(mean_kd, x.shape))
        ssq = reduce_to(ctx, node, Lazy(x.shape, acc, ir.binary(Op.MUL, dev, dev)), d, True, ReduceOp.SUM, acc, acc)
        centred = as_expr(ssq)
    else:
        # A first mean as (sum of x * 2^-k) / n * 2^k, 2^k >= n (scaling by a power of two is exact: the
        # plain sum overflowed near finfo.max, where var of two 3.4e38 was inf and eager's 0), then the
        # corrected two-pass sums over d = x - mean0: mean = mean0 + sum(d) / n, var's sum of squares
        # sum(d^2) - sum(d) * sum(d) / n. ATen's Welford is exact on a row of equal values; the plain
        # mean was an ulp off (layer norm of such rows 3.8e-5 where eager is exactly 0; fuzzer, crucible-cpp)
        # (a symbolic count: the scale computed from it at run time, the count a size value)
        scale, inv_acc = _pow2_at_least(n, acc)
        scaled_x = Lazy(x.shape, acc, ir.binary(Op.MUL, xs, inv_acc))
        total = reduce_to(ctx, node, scaled_x, d, True, ReduceOp.SUM, acc, acc)
        mean0 = Lazy(total.shape, acc, ir.binary(Op.MUL, ir.binary(Op.DIV, as_expr(total), _number(n, acc)), scale))
        # The deviations d = x - mean0 are summed in float64 whatever x's dtype: a float32 d neither
        # overflows there (3.4e38 - -1.7e36 was inf: the mean inf where eager gives -1.7e36; fuzzer,
        # crucible-cpp, seed 22) nor does its square (an ulp's deviation from a mean near max squares
        # past float32: var_mean of 17 equal -3.4e38 was inf where eager gives 0; seed 24), and the
        # sums of a row of values near max do not (seed 21). Three reductions, the last two siblings
        # that fuse into one pass. float64 inputs keep the scaled sum of d near float64's max.
        wide = torch.float64
        xw, mean0w = ir.cast(xs, wide), ir.cast(broadcast_read(mean0, x.shape), wide)
        dev = ir.binary(Op.SUB, xw, mean0w)
        scale_w, inv = _pow2_at_least(n, wide)
        if acc == wide:  # x - mean0 overflowed near max: each scaled before the subtraction
            dev_scaled = ir.where(ir.binary(Op.LT, ir.unary(Op.ABS, dev), ir.const(math.inf, wide)),
                                  ir.binary(Op.MUL, dev, inv),
                                  ir.binary(Op.SUB, ir.binary(Op.MUL, xw, inv), ir.binary(Op.MUL, mean0w, inv)))
        else:
            dev_scaled = ir.binary(Op.MUL, dev, inv)
        s1_scaled = reduce_to(ctx, node, Lazy(x.shape, wide, dev_scaled), d, True, ReduceOp.SUM, wide, wide)
        mean_kd = Lazy(mean0.shape, wide, ir.binary(Op.ADD, ir.cast(as_expr(mean0), wide), ir.binary(
            Op.MUL, ir.binary(Op.DIV, as_expr(s1_scaled), _number(n, wide)), scale_w)))
        ssq = reduce_to(ctx, node, Lazy(x.shape, wide, ir.binary(Op.MUL, dev, dev)), d, True, ReduceOp.SUM,
                        wide, wide)
        s1, squares = ir.binary(Op.MUL, as_expr(s1_scaled), scale_w), as_expr(ssq)
        correction_term = ir.binary(Op.MUL, ir.binary(Op.DIV, s1, _number(n, wide)), s1)  # <= sum(d^2)
        # an infinite sum of squares stays inf (the correction is inf too: inf - inf would be NaN), and
        # rounding never makes it negative (std would be NaN)
        less = ir.binary(Op.SUB, squares, correction_term)
        less = ir.where(ir.binary(Op.LT, less, ir.const(0, wide)), ir.const(0, wide), less)
        centred = ir.where(ir.binary(Op.LT, squares, ir.const(math.inf, wide)), less, squares)
        acc = wide
    if isinstance(n, int):
        denom = max(n - corr, 0)
    elif float(corr).is_integer():
        denom = n - int(corr)  # a symbolic count is at least 2
    else:
        raise Unsupported(ExternReason.SYMBOLIC_SIZE, f"a fractional correction {corr} of a symbolic count")
    # No degrees of freedom: ATen divides by zero (0/0 = NaN, ssq/0 = inf). A literal division
    # by 0.0 raised ZeroDivisionError in Triton's interpreter when the sum folded to a Python
    # float (fuzzer: var_mean over a 0-size dim); multiplying by inf gives the same values.
    scaled = (ir.binary(Op.MUL, centred, ir.const(math.inf, acc)) if denom == 0 else
              ir.binary(Op.DIV, centred, _number(denom, acc)))
    var = Lazy(ssq.shape, x.dtype, ir.cast(scaled, x.dtype))
    mean = Lazy(mean_kd.shape, x.dtype, ir.cast(as_expr(mean_kd), x.dtype))
    if not keepdim:
        reduced = tuple(size for i, size in enumerate(x.shape) if i not in d)
        var, mean = reshape(ctx, var, reduced), reshape(ctx, mean, reduced)
    return var, mean


@register(aten.var.correction)
def lower_var(ctx: GraphLowering, node: Any, x: TensorValue, dims: Any = None, *, correction: Any = None,
              keepdim: bool = False) -> TensorValue:
    return variance(ctx, node, x, dims, correction, keepdim)[0]


@register(aten.var_mean.correction)
def lower_var_mean(ctx: GraphLowering, node: Any, x: TensorValue, dims: Any = None, *, correction: Any = None,
                   keepdim: bool = False) -> list:
    var, mean = variance(ctx, node, x, dims, correction, keepdim)
    return [var, mean]


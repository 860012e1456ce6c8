"""2-d pooling as windowed reductions: max (with indices), average, adaptive average.

A pooled element is a reduction over the window (the RVARs) of the input read at
``out * stride - pad + window * dilation``. Window positions outside the input
read a clamped, valid address and are replaced by the reduction's identity
(``-inf`` for max, ``0`` for sums), so nothing reads out of bounds. Producers
(batch norm, ReLU) inline into the window read like into any reduction.

Average pooling sums a window of up to ``SUMMED_IN_ORDER`` elements as ATen's CPU and CUDA kernels
do, one element after another in row-major order, as a pointwise expression rather than a
reduction: a reduction's tree order absorbs other elements into a partial sum near finfo.max than
ATen's order does, and then cancels it differently (fuzzer, crucible-interpret and crucible-cpp:
the adaptive mean of a 7x3 window holding +-3.4e38 was 0.0657 and 0.0743, eager's and float64's
0.0650). Larger windows (global pooling) stay reductions.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import torch

from compiler import ir
from compiler.sizes import shape_of
from compiler.ir import Expr, Op, ReduceOp
from compiler.lowerings.indexing import c64, clamp_index
from compiler.lowerings.pointwise import out_meta
from compiler.lowerings.reductions import acc_dtype_for
from compiler.lowerings.rules import Lazy, TensorValue, Unsupported, as_expr, read, register
from compiler.report import ExternReason

if TYPE_CHECKING:
    from compiler.lowering import GraphLowering

aten = torch.ops.aten


def pair(value: Any, default: tuple[int, int]) -> tuple[int, int]:
    """A pooling argument (an int, or a list of one or two) as two ints; ``default`` where absent."""
    if value is None or (isinstance(value, (list, tuple)) and len(value) == 0):
        return default
    if isinstance(value, int):
        return (value, value)
    return (value[0], value[0]) if len(value) == 1 else (value[0], value[1])


def _var(make: Any, dim: int, size: int) -> Expr:
    return make(dim) if size != 1 else c64(0)


class Window:
    """Index arithmetic of one pooling window over the last two dims of ``x``."""

    def __init__(self, x: TensorValue, out_shape: tuple[int, ...], kernel: tuple[int, int],
                 stride: tuple[int, int], padding: tuple[int, int], dilation: tuple[int, int] = (1, 1)) -> None:
        if len(x.shape) not in (3, 4):
            raise Unsupported(ExternReason.UNSUPPORTED_ARGS, f"pooling input of rank {len(x.shape)}")
        self.x, self.out_shape, self.kernel = x, out_shape, kernel
        self.lead = len(x.shape) - 2
        self.height, self.width = x.shape[-2], x.shape[-1]
        oh = _var(ir.xvar, self.lead, out_shape[-2])
        ow = _var(ir.xvar, self.lead + 1, out_shape[-1])
        self.kh, self.kw = _var(ir.rvar, 0, kernel[0]), _var(ir.rvar, 1, kernel[1])
        self.ih = _affine(oh, stride[0], self.kh, dilation[0], -padding[0])
        self.iw = _affine(ow, stride[1], self.kw, dilation[1], -padding[1])
        # axes whose window positions can leave the input (padding, ceil mode) need bounds checks
        # and clamped reads; the others read in bounds for every output and window position
        self.h_leaves = _may_leave(out_shape[-2], stride[0], kernel[0], dilation[0], padding[0], self.height)
        self.w_leaves = _may_leave(out_shape[-1], stride[1], kernel[1], dilation[1], padding[1], self.width)

    @property
    def rranges(self) -> tuple[int, int]:
        return self.kernel

    def lead_index(self) -> list[Expr]:
        return [_var(ir.xvar, d, self.out_shape[d]) for d in range(self.lead)]

    def valid(self) -> Expr | None:
        """Whether the window position is inside the input; None when it always is."""
        checks = []
        for leaves, pos, extent in ((self.h_leaves, self.ih, self.height), (self.w_leaves, self.iw, self.width)):
            if leaves:
                checks += [ir.binary(Op.GE, pos, c64(0)), ir.binary(Op.LT, pos, c64(extent))]
        if not checks:
            return None
        out = checks[0]
        for c in checks[1:]:
            out = ir.binary(Op.AND, out, c)
        return out

    def value(self, fill: Any, dtype: torch.dtype) -> Expr:
        """The input at the window position, ``fill`` where the window leaves the input."""
        ih = clamp_index(self.ih, self.height) if self.h_leaves else self.ih
        iw = clamp_index(self.iw, self.width) if self.w_leaves else self.iw
        loaded = ir.cast(read(self.x, self.lead_index() + [ih, iw]), dtype)
        valid = self.valid()
        return loaded if valid is None else ir.where(valid, loaded, ir.const(fill, dtype))


def _may_leave(out_size: int, stride: int, kernel: int, dilation: int, padding: int, extent: int) -> bool:
    """Whether ``out * stride - padding + k * dilation`` leaves ``[0, extent)`` for some output
    position ``out < out_size`` and window offset ``k < kernel``."""
    last = (out_size - 1) * stride - padding + (kernel - 1) * dilation
    if not isinstance(last, int) or not isinstance(extent, int):
        return True  # symbolic sizes: checked and clamped, right whatever the sizes
    return padding > 0 or last >= extent


def _affine(out: Expr, stride: int, window: Expr, dilation: int, offset: int) -> Expr:
    terms: dict = {None: offset}
    for var, coef in ((out, stride), (window, dilation)):
        if var.op is Op.CONST:
            terms[None] += var.arg * coef
        else:
            terms[var] = terms.get(var, 0) + coef
    return ir.from_affine(terms)


@register(aten.max_pool2d_with_indices)
def lower_max_pool2d(ctx: GraphLowering, node: Any, x: TensorValue, kernel_size: Any, stride: Any = None,
                     padding: Any = 0, dilation: Any = 1, ceil_mode: bool = False) -> list:
    kernel = pair(kernel_size, (1, 1))
    win = Window(x, shape_of(node.meta["val"][0].shape), kernel, pair(stride, kernel), pair(padding, (0, 0)),
                 pair(dilation, (1, 1)))
    lowest = -math.inf if x.dtype.is_floating_point else torch.iinfo(x.dtype).min
    body = win.value(lowest, x.dtype)
    out_shape = win.out_shape
    if math.prod(kernel) == 1:
        values: TensorValue = Lazy(out_shape, x.dtype, body)
        kh = kw = c64(0)
    else:
        values = ctx.reduce_body(out_shape, win.rranges, body, ReduceOp.MAX, x.dtype, x.dtype)
        arg = ctx.reduce_body(out_shape, win.rranges, body, ReduceOp.ARGMAX, torch.int64, torch.int64)
        flat = _aten_argmax(ctx, win, body, as_expr(arg), as_expr(values), lowest)
        kh = ir.binary(Op.FLOORDIV, flat, c64(kernel[1]))
        kw = ir.binary(Op.MOD, flat, c64(kernel[1]))
    # indices are flat positions in the input plane, as ATen returns them
    ih = ir.substitute(win.ih, {win.kh: kh} if win.kh.op is not Op.CONST else {})
    iw = ir.substitute(win.iw, {win.kw: kw} if win.kw.op is not Op.CONST else {})
    index = ir.binary(Op.ADD, ir.binary(Op.MUL, ih, c64(win.width)), iw)
    return [values, Lazy(out_shape, torch.int64, index)]


def _aten_argmax(ctx: GraphLowering, win: Window, body: Expr, first: Expr, best: Expr, lowest: float) -> Expr:
    """The window position ATen's max-pool kernels (CPU and CUDA) return, from ``first`` (ARGMAX's:
    the first maximum or first NaN, as torch.argmax). Those kernels start at the first position
    inside the input with the value ``lowest`` and take ``val > max || isnan(val)``: a window of
    nothing but ``lowest`` gives that first inside position (ARGMAX may pick a padded one), and of
    several NaNs the last. The extra reductions (int32: window positions are small, and the index
    arithmetic is int32 in Triton) fuse with ARGMAX's."""
    rflat = ir.binary(Op.ADD, ir.binary(Op.MUL, win.kh, c64(win.kernel[1])), win.kw)

    def position(pick: Expr, none: int, op: ReduceOp) -> Expr:
        at = ir.cast(ir.where(pick, rflat, c64(none)), torch.int32)
        return as_expr(ctx.reduce_body(win.out_shape, win.rranges, at, op, torch.int32, torch.int32))

    out = first
    valid = win.valid()
    if valid is not None:
        inside = position(valid, math.prod(win.kernel), ReduceOp.MIN)
        out = ir.where(ir.binary(Op.EQ, best, ir.const(lowest, best.dtype)), ir.cast(inside, torch.int64), out)
    if body.dtype.is_floating_point:
        last_nan = position(ir.unary(Op.ISNAN, body, torch.bool), -1, ReduceOp.MAX)
        out = ir.where(ir.binary(Op.GE, last_nan, ir.const(0, torch.int32)), ir.cast(last_nan, torch.int64), out)
    return out


def _avg_pool(ctx: GraphLowering, node: Any, x: TensorValue, kernel: tuple[int, int], stride: tuple[int, int],
              padding: tuple[int, int], count_include_pad: bool, divisor_override: int | None) -> TensorValue:
    out_shape, out_dtype = out_meta(node)
    if not x.dtype.is_floating_point:
        raise Unsupported(ExternReason.UNSUPPORTED_DTYPE, "integer average pooling")
    win = Window(x, out_shape, kernel, stride, padding)
    acc = acc_dtype_for(x.dtype)
    total = _window_sum(ctx, win, acc)
    if divisor_override:
        divisor: Expr = ir.const(divisor_override, acc)
    else:
        divisor = ir.cast(_window_count(win, stride, padding, kernel, count_include_pad), acc)
    return Lazy(out_shape, out_dtype, ir.cast(ir.binary(Op.DIV, total, divisor), out_dtype))


# Windows of at most this many elements are summed in ATen's order (see the module docstring):
# each element is a load of its own, so this bounds a pooled element's loads. It covers the usual
# 2x2, 3x3 and 5x5 windows and the fuzzer's largest adaptive window (9x3); global pooling
# (7x7 and up) stays a reduction.
SUMMED_IN_ORDER = 32


def _window_sum(ctx: GraphLowering, win: Window, acc: torch.dtype) -> Expr:
    """The sum of each window in ``acc``: from 0, one element after another in row-major order as
    ATen's kernels add them (padded positions add 0, which changes no sum), or a reduction over a
    window larger than ``SUMMED_IN_ORDER``."""
    body = win.value(0, acc)
    if math.prod(win.kernel) > SUMMED_IN_ORDER:
        return as_expr(ctx.reduce_body(win.out_shape, win.rranges, body, ReduceOp.SUM, acc, acc))
    total = ir.const(0, acc)  # 0 + -0.0 is +0.0: a window of -0.0 sums to +0.0, as in ATen
    for i in range(win.kernel[0]):
        for j in range(win.kernel[1]):
            at = {v: c64(k) for v, k in ((win.kh, i), (win.kw, j)) if v.op is not Op.CONST}
            total = ir.binary(Op.ADD, total, ir.substitute(body, at) if at else body)
    return total


def _window_count(win: Window, stride: tuple[int, int], padding: tuple[int, int], kernel: tuple[int, int],
                  count_include_pad: bool) -> Expr:
    """Elements ATen divides by for each output position (its avg_pool2d rule)."""
    sizes = []
    for axis, extent in ((0, win.height), (1, win.width)):
        out = _var(ir.xvar, win.lead + axis, win.out_shape[-2 + axis])
        start = _affine(out, stride[axis], c64(0), 1, -padding[axis])
        end = ir.binary(Op.MIN, ir.binary(Op.ADD, start, c64(kernel[axis])), c64(extent + padding[axis]))
        if count_include_pad:
            sizes.append(ir.binary(Op.SUB, end, start))
        else:
            lo = ir.binary(Op.MAX, start, c64(0))
            hi = ir.binary(Op.MIN, end, c64(extent))
            sizes.append(ir.binary(Op.SUB, hi, lo))
    return ir.binary(Op.MUL, sizes[0], sizes[1])


@register(aten.avg_pool2d)
def lower_avg_pool2d(ctx: GraphLowering, node: Any, x: TensorValue, kernel_size: Any, stride: Any = None,
                     padding: Any = 0, ceil_mode: bool = False, count_include_pad: bool = True,
                     divisor_override: int | None = None) -> TensorValue:
    kernel = pair(kernel_size, (1, 1))
    return _avg_pool(ctx, node, x, kernel, pair(stride, kernel), pair(padding, (0, 0)), count_include_pad,
                     divisor_override)


@register(aten._adaptive_avg_pool2d)
def lower_adaptive_avg_pool2d(ctx: GraphLowering, node: Any, x: TensorValue, output_size: Any) -> TensorValue:
    out_h, out_w = pair(output_size, (1, 1))
    height, width = x.shape[-2], x.shape[-1]
    if out_h == 0 or out_w == 0 or height % out_h or width % out_w:
        raise Unsupported(ExternReason.UNSUPPORTED_ARGS, "adaptive pooling with uneven windows")
    kernel = (height // out_h, width // out_w)
    out_shape, out_dtype = out_meta(node)
    if not x.dtype.is_floating_point:
        raise Unsupported(ExternReason.UNSUPPORTED_DTYPE, "integer average pooling")
    win = Window(x, out_shape, kernel, kernel, (0, 0))
    acc = acc_dtype_for(x.dtype)
    # ATen divides the window's sum by its height, then by its width (avg_pool2d: by their product)
    mean = _window_sum(ctx, win, acc)
    for extent in kernel:
        mean = ir.binary(Op.DIV, mean, ir.const(extent, acc))
    return Lazy(out_shape, out_dtype, ir.cast(mean, out_dtype))

"""2-d convolution as an implicit GEMM on the GEMM template: ``out[m, co] = sum_k A[m, k] * B[k, co]``
with ``m = (n, oh, ow)``, ``k = (ci, kh, kw)``; ``A`` gathers the input window (zero outside the
padding, its address clamped so masked-off reads stay in bounds) and ``B`` is the weight, both as
prologue expressions the template computes while loading its tiles. Groups (depthwise included) are
the GEMM's batch dim. The result is stored as ``(groups, N*OH*OW, C_out/groups)``, i.e. channels-last
for one group, and handed on as an ``(N, C, OH, OW)`` view of it (a gather for grouped convolutions
with several channels per group).

Symbolic sizes (batch, image): the index arithmetic takes them as ``SIZE`` leaves
(``compiler.sizes``), so the same gather and store serve every size; channels and the kernel window
come from the weight, which is static.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from compiler import ir
from compiler.graph import View
from compiler.lowerings.rules import Lazy, TensorValue, read, register
from compiler.sizes import shape_of
from compiler.templates.emit import DTYPES, decide, emit
from compiler.templates.spec import GemmTemplate, acc_read

if TYPE_CHECKING:
    from compiler.lowering import GraphLowering

aten = torch.ops.aten
I = ir.INDEX_DTYPE  # noqa: E741


def _c(v: int) -> ir.Expr:
    return ir.size(v)  # a constant, or a symbolic size


def _div(a: ir.Expr, b: int) -> ir.Expr:
    return a if b == 1 else ir.binary(ir.Op.DIV, a, _c(b))


def _mod(a: ir.Expr, b: int) -> ir.Expr:
    return ir.binary(ir.Op.MOD, a, _c(b))


def _add(*terms: ir.Expr) -> ir.Expr:
    out = terms[0]
    for t in terms[1:]:
        out = ir.binary(ir.Op.ADD, out, t)
    return out


def _mul(a: ir.Expr, b: int) -> ir.Expr:
    return a if b == 1 else ir.binary(ir.Op.MUL, a, _c(b))


def _unsupported(x: TensorValue, w: TensorValue, transposed: bool) -> str | None:
    if len(x.shape) != 4:
        return f"{len(x.shape) - 2}-d convolution (the template covers 2-d)"
    if transposed:
        return "transposed convolution"
    if x.dtype not in DTYPES or w.dtype != x.dtype:
        return f"{x.dtype} x {w.dtype} convolution (templates cover float32, float16, bfloat16)"
    return None


@register(aten.convolution)
def lower_convolution(ctx: GraphLowering, node: Any, x: TensorValue, w: TensorValue, bias: TensorValue | None,
                      stride: list, padding: list, dilation: list, transposed: bool, output_padding: list,
                      groups: int) -> Any:
    out = node.meta["val"]
    unsupported = _unsupported(x, w, transposed)
    shape = shape_of(out.shape)
    decide(ctx, "conv", unsupported, shape, x.dtype, node)
    n, cin, h, wd = x.shape
    cout, cin_g, kh, kw = w.shape
    _, _, oh, ow = shape
    (sh, sw), (ph, pw), (dh, dw) = stride, padding, dilation
    g, cout_g, m, k = groups, cout // groups, n * oh * ow, cin_g * kh * kw
    batched = g > 1
    lead = [ir.xvar(0)] if batched else []
    gv = ir.xvar(0) if batched else _c(0)
    mv, kv = ir.xvar(len(lead)), ir.xvar(len(lead) + 1)
    # A[g, m, k]: the input window element, 0 in the padding
    bn, oy, ox = _div(mv, oh * ow), _mod(_div(mv, ow), oh), _mod(mv, ow)
    ci, ky, kx = _div(kv, kh * kw), _mod(_div(kv, kw), kh), _mod(kv, kw)
    iy = _add(_mul(oy, sh), _mul(ky, dh), _c(-ph))
    ix = _add(_mul(ox, sw), _mul(kx, dw), _c(-pw))
    inside = ir.binary(ir.Op.AND, ir.binary(ir.Op.AND, ir.binary(ir.Op.GE, iy, _c(0)), ir.binary(ir.Op.LT, iy, _c(h))),
                       ir.binary(ir.Op.AND, ir.binary(ir.Op.GE, ix, _c(0)), ir.binary(ir.Op.LT, ix, _c(wd))))

    def clamp(v: ir.Expr, hi: int) -> ir.Expr:
        return ir.binary(ir.Op.MIN, ir.binary(ir.Op.MAX, v, _c(0)), _c(hi - 1))

    xs = ctx.realize(x) if isinstance(x, Lazy) else x
    a = ir.where(inside, read(xs, [bn, _add(_mul(gv, cin_g), ci), clamp(iy, h), clamp(ix, wd)]), ir.const(0, x.dtype))
    # B[g, k, co]: the weight
    kb, cb = ir.xvar(len(lead)), ir.xvar(len(lead) + 1)
    ws = ctx.realize(w) if isinstance(w, Lazy) else w
    b = read(ws, [_add(_mul(gv, cout_g), cb), _div(kb, kh * kw), _mod(_div(kb, kw), kh), _mod(kb, kw)])
    template = GemmTemplate(ctx.new_name("acc"), g, m, cout_g, k, a, b, x.dtype, batched)
    body = acc_read(template)
    if bias is not None:
        channel = _add(_mul(ir.xvar(0), cout_g), ir.xvar(2)) if batched else ir.xvar(1)
        body = ir.binary(ir.Op.ADD, body, ir.cast(read(bias, [channel]), torch.float32))
    flat = emit(ctx, template, ir.cast(body, out.dtype), out.dtype)
    # (N, C, OH, OW) over the (G, M, C/G) result
    if g == 1:
        return View(flat.buffer, shape, (oh * ow * cout, 1, ow * cout, cout), 0, out.dtype)
    if cout_g == 1:
        return View(flat.buffer, shape, (oh * ow, m, ow, 1), 0, out.dtype)
    xn, xc, xy, xx = (ir.xvar(d) for d in range(4))
    spot = _add(_mul(_div(xc, cout_g), m * cout_g), _mul(_add(_mul(xn, oh * ow), _mul(xy, ow), xx), cout_g),
                _mod(xc, cout_g))
    return Lazy(shape, out.dtype, ir.load(flat.buffer, spot, out.dtype))

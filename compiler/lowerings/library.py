"""GPU library calls whose bias is added apart, in the kernel of whatever reads their result.

- A convolution: cuDNN leaves the bias to ATen, which adds it in a kernel of its own
  (``output.add_(bias)``: 1.06 ms of resnet50's 3.84 ms of GPU time in float32 on an H200, once batch
  norm was folded into biases). Inductor's lowering splits it off the same way. The sum is rounded
  to the result's dtype, as ATen's in-place add rounds it.
- A float32 ``addmm`` only pointwise ops read: cuBLASLt's bias epilogue picked a slower kernel than
  the plain GEMM for BERT's and ViT's MLP down-projection (``python -m harness.bench.extern_gemms
  --dtype fp32 --only bias`` on an H200: 1.17-1.20x for [M, 3072] x [3072, 768], 0.98-1.02x for
  the other linears). 16-bit ones keep the epilogue: one rounding, as eager, and the same bench
  measured ``mm`` alone no faster there (0.93-1.10x). A result something else reads too (a
  training forward returns an MLP's up-projection for its activation's backward; attention's
  projections go on to batched GEMMs) is written whole anyway: apart, the bias cost a second
  full-size buffer and a pass writing it (swin_tiny's first MLP: 0.26 ms against Inductor's 0.10
  for the GELU after it, H100, fp32 training).

The add is lazy: it joins its consumer's kernel (an activation, a residual add, a layer norm), so it
costs no pass over the result. CPU graphs keep the bias in the call (oneDNN fuses it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from compiler import ir
from compiler.lowerings.pointwise import opmath
from compiler.lowerings.rules import Lazy, Strided, read
from compiler.report import ExternReason

if TYPE_CHECKING:
    from compiler.lowering import GraphLowering

aten = torch.ops.aten


def bias_apart(node: torch.fx.Node, args: tuple, device: torch.device) -> bool:
    """A CUDA convolution with a 1-d bias, or a float32 ``addmm`` read by pointwise ops alone."""
    from compiler.templates.emit import feeds_pointwise, pointwise, read_by

    val = node.meta.get("val")
    if device.type != "cuda" or not isinstance(val, torch.Tensor) or val.dim() < 2:
        return False
    if node.target is aten.convolution.default and len(args) > 2:
        bias = args[2]
    elif node.target is aten.addmm.default and not node.kwargs and len(args) == 3 and val.dtype == torch.float32:
        bias = args[0] if feeds_pointwise(node) and not read_by(node, lambda u: not pointwise(u)) else None
    else:
        return False
    return (isinstance(bias, (Lazy, Strided)) and len(bias.shape) == 1 and bias.dtype == val.dtype
            and bias.shape[0] == val.shape[1])


def extern_without_bias(ctx: GraphLowering, node: torch.fx.Node, args: tuple, kwargs: dict, reason: ExternReason,
                        message: str) -> Lazy:
    """The library call (``bias_apart``) without its bias, and the bias added lazily along dim 1."""
    if node.target is aten.convolution.default:
        out = ctx.extern(node, (*args[:2], None, *args[3:]), kwargs, reason, message,
                         aten.convolution.default, (*node.args[:2], None, *node.args[3:]))
        bias = args[2]
    else:
        out = ctx.extern(node, args[1:3], {}, reason, message, aten.mm.default, tuple(node.args[1:3]))
        bias = args[0]
    compute = opmath(out.dtype)
    result = ir.cast(read(out, [ir.xvar(d) for d in range(len(out.shape))]), compute)
    term = ir.cast(read(bias, [ir.xvar(1)]), compute)
    return Lazy(out.shape, out.dtype, ir.cast(ir.binary(ir.Op.ADD, result, term), out.dtype))

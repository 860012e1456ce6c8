"""Lowering rules, one module per family. Importing this package registers them all."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from compiler.lowerings import indexing, mutation, pointwise, pooling, reductions, views  # noqa: F401
from compiler.lowerings.rules import Unsupported, register
from compiler.report import ExternReason

if TYPE_CHECKING:
    from compiler.lowering import GraphLowering

aten = torch.ops.aten

# Ops a vendor library does better than generated loops: matmul, convolution,
# attention, pooling backward. They run as extern calls with this reason.
LIBRARY_OPS = [
    aten.mm, aten.bmm, aten.addmm, aten._addmm_activation, aten.baddbmm, aten.convolution, aten.convolution_backward,
    aten._scaled_dot_product_flash_attention, aten._scaled_dot_product_efficient_attention,
    aten._scaled_dot_product_flash_attention_for_cpu,
    aten.max_pool2d_with_indices_backward, aten.avg_pool2d_backward,
    aten._adaptive_avg_pool2d_backward, aten._native_batch_norm_legit,
    aten.native_batch_norm_backward, aten.sort, aten.topk, aten.cumsum, aten.cumprod,
    aten.scatter_add, aten.index_put, aten.scatter, aten.scatter_reduce, aten.embedding_dense_backward,
]
if hasattr(torch.ops.mkldnn, "_linear_pointwise"):  # oneDNN's fused linear (compiler.extern_passes.onednn_linears)
    LIBRARY_OPS.append(torch.ops.mkldnn._linear_pointwise)
RANDOM_OPS = [aten.rand, aten.randn, aten.bernoulli, aten.native_dropout, aten.randint, aten.rand_like,
              aten.randn_like, aten.normal, aten.uniform, aten.randperm]


def _library(ctx: GraphLowering, node: Any, *args: Any, **kwargs: Any) -> Any:
    raise Unsupported(ExternReason.LIBRARY_KERNEL, "vendor library kernel")


def _random(ctx: GraphLowering, node: Any, *args: Any, **kwargs: Any) -> Any:
    raise Unsupported(ExternReason.RANDOMNESS, "keeps ATen's random generator semantics")


for _op in LIBRARY_OPS:
    register(_op)(_library)
for _op in RANDOM_OPS:
    register(_op)(_random)

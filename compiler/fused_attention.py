"""Scaled dot-product attention kept as one call through AOTAutograd, on CUDA.

``F.scaled_dot_product_attention`` is a composite op: tracing picks its kernel once, through
``torch._fused_sdp_choice`` on the graph's fake tensors, and inlines it. Under the fake mode
torch 2.11 answers MATH for inputs whose real choice on the H200 is cuDNN attention (every fused
backend accepts them: ``python -m harness.bench.sdpa_choice``), so a traced BERT held SDPA's math
decomposition (float32 ``bmm``, softmax, ``bmm``: 2.85 ms of a 5.07 ms bf16 call) and ran slower
than eager. ``keep_fused_attention`` rewrites each inference call of a CUDA graph, before AOTAutograd
sees it, into ``crucible::sdpa``: an opaque op whose kernel calls SDPA on the real tensors at run
time, so the library chooses as it does in eager. Lowering treats it like the fused ATen attention
ops: the attention template where the ``extern`` policy picks one, else this extern call.

Left to the trace as before: CPU graphs (their trace keeps ``_scaled_dot_product_flash_attention_for_cpu``),
dropout (random), calls whose inputs need gradients (the op has no backward) and masked float32
calls (``MASKED_DTYPES``). Training calls in float32 keep the trace's memory-efficient kernel: written
as SDPA's math decomposition instead (GEMMs around a generated softmax, as Inductor's trace has it),
bert_base's fp32 training step on the H200 took 64.0 ms against 62.9 and peaked 1.7 GB higher
(A/B in one session, ``CRUCIBLE_FUSED_SDPA`` on and off; eager's math path is 1.31 ms against the
efficient kernel's 0.90 for 8 x 12 x 512 x 64 forward and backward).
"""

# no ``from __future__ import annotations``: custom_op reads the real annotations for its schema

import torch
import torch.nn.functional as F

from compiler import config

SDPA_TARGETS = (F.scaled_dot_product_attention, torch._C._nn.scaled_dot_product_attention)
_PARAMS = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa")
_DEFAULTS = {"attn_mask": None, "dropout_p": 0.0, "is_causal": False, "scale": None, "enable_gqa": False}


@torch.library.custom_op("crucible::sdpa", mutates_args=())
def sdpa(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attn_mask: torch.Tensor | None = None,
         dropout_p: float = 0.0, is_causal: bool = False, *, scale: float | None = None,
         enable_gqa: bool = False) -> torch.Tensor:
    """SDPA with the kernel chosen at run time (the same arguments as the functional)."""
    return F.scaled_dot_product_attention(query, key, value, attn_mask, dropout_p, is_causal, scale=scale,
                                          enable_gqa=enable_gqa)


@sdpa.register_fake
def _(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attn_mask: torch.Tensor | None = None,
      dropout_p: float = 0.0, is_causal: bool = False, *, scale: float | None = None,
      enable_gqa: bool = False) -> torch.Tensor:
    # the fused kernels' layout, (B, L, H, D) memory viewed as (B, H, L, D): the usual
    # transpose(1, 2).reshape(B, L, H * D) after it is a view; a library result laid out otherwise
    # is copied into it by the wrapper (its extern results keep their compiled strides)
    shape = (*query.shape[:-1], value.shape[-1])
    if len(shape) == 4:
        b, h, length, d = shape
        return query.new_empty((b, length, h, d)).transpose(1, 2)
    return query.new_empty(shape)


OP = torch.ops.crucible.sdpa.default
# Masked calls are rewritten in 16-bit floats only, where the default rule makes them the attention
# template (compiler.templates.policy): the library's masked kernel, chosen at run time, ran BERT-base
# bf16 at 9.83 ms against 5.03 ms through the math decomposition, and float32 (24.8 against 21.3 ms)
# has no measured template rule, so float32 masked attention keeps what the trace chose.
MASKED_DTYPES = (torch.bfloat16, torch.float16)


def _example(arg: object) -> object:
    return arg.meta.get("example_value") if isinstance(arg, torch.fx.Node) else arg


def bound_sdpa_args(node: torch.fx.Node) -> dict | None:
    """An SDPA call's arguments by name, defaults filled in; None for a call written otherwise."""
    if len(node.args) > len(_PARAMS) or set(node.kwargs) - set(_PARAMS):
        return None
    found = dict(_DEFAULTS)
    found.update(zip(_PARAMS, node.args))
    found.update(node.kwargs)
    return found if all(k in found for k in ("query", "key", "value")) else None


def keep_fused_attention(gm: torch.fx.GraphModule, devices: tuple[str, ...] = ("cuda",)) -> int:
    """Rewrite ``gm``'s (a Dynamo graph's) inference SDPA calls on ``devices`` into ``crucible::sdpa``,
    in place; the number rewritten. (Tests name "cpu" to run the op's lowering without a GPU.)"""
    if not config.fused_sdpa():
        return 0
    count = 0
    grad = torch.is_grad_enabled()
    for node in gm.graph.nodes:
        if node.op != "call_function" or node.target not in SDPA_TARGETS:
            continue
        args = bound_sdpa_args(node)
        if args is None:
            continue
        q, k, v = (_example(args[n]) for n in ("query", "key", "value"))
        if not all(isinstance(t, torch.Tensor) for t in (q, k, v)) or q.device.type not in devices:
            continue
        if grad and any(t.requires_grad for t in (q, k, v)):
            continue
        if not isinstance(args["dropout_p"], (int, float)) or args["dropout_p"] != 0:
            continue
        if any(isinstance(args[n], torch.fx.Node) for n in ("is_causal", "scale", "enable_gqa")):
            continue
        if args["attn_mask"] is not None and q.dtype not in MASKED_DTYPES:
            continue
        node.target = OP
        node.args = tuple(args[n] for n in _PARAMS[:6])
        node.kwargs = {"scale": args["scale"], "enable_gqa": args["enable_gqa"]}
        count += 1
    if count:
        gm.recompile()
    return count

"""The reference evaluator's semantics for template kernels (``compiler.templates.spec``).

A template kernel is data: a core op (a GEMM over operand expressions, or attention over buffer
views) whose float32 result, the accumulator, the epilogue reads as ``LOAD(acc, <row-major index>)``.
``template_accumulator`` computes that result with torch from the description alone, so
``simulator.reference.evaluate_kernel`` can hand it to the epilogue's stores as one more buffer:

* GEMM (``mm``/``addmm``/``bmm``, and 2-d convolutions, which lowering writes as an implicit GEMM
  whose ``a`` operand gathers the input window): each operand expression is evaluated over its
  index space by the evaluator's own expression semantics (prologues included, loads
  bounds-checked), rounded to the dtype the MMA consumes, and multiplied with float32 accumulation.
  A convolution is deliberately *not* recomputed with ``conv2d`` from its shapes: the gather is
  lowering's IR, and an IR reference must show a wrong gather as a lowering fault.
* attention: ``softmax(q @ k^T * scale + mask) @ v`` in float32, causal masking top-left aligned
  (SDPA's ``is_causal``), query head ``h`` reading key/value head ``h // (H // Hkv)``.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from compiler.graph import View
from compiler.ir import Expr
from compiler.templates.spec import AttentionTemplate, GemmTemplate
from simulator.ir_semantics import (
    POINTS_PER_CHUNK,
    ChunkEvaluator,
    KernelFacts,
    ReferenceUnsupported,
    checked_load,
    compute_dtype,
    numel,
    round_to,
)


def template_accumulator(facts: KernelFacts, tensors: Mapping[str, torch.Tensor],
                         device: torch.device) -> torch.Tensor:
    """The template's float32 result over its output shape, contiguous (as the epilogue indexes it)."""
    t = facts.template
    if isinstance(t, GemmTemplate):
        out = _gemm(facts.name, t, tensors, device)
    elif isinstance(t, AttentionTemplate):
        out = _attention(facts.name, t, tensors, device)
    else:
        kind = getattr(t, "family", type(t).__name__)
        raise ReferenceUnsupported(f"kernel {facts.name}: reference evaluator has no semantics for template "
                                   f"{kind!r} ({type(t).__name__})")
    return out.to(torch.float32).contiguous()


def _values_over(kernel: str, expr: Expr, ranges: tuple[int, ...], tensors: Mapping[str, torch.Tensor],
                device: torch.device) -> torch.Tensor:
    """``expr`` at every point of ``ranges`` (no reduction) as a tensor of that shape, in its compute
    dtype, in chunks like a kernel's stores; faults name ``kernel``."""
    facts = KernelFacts(kernel, tuple(ranges), (), (), ())
    total = numel(ranges)
    parts = []
    for start in range(0, total, POINTS_PER_CHUNK):
        ev = ChunkEvaluator(facts, tensors, torch.arange(start, min(total, start + POINTS_PER_CHUNK), device=device),
                        device)
        parts.append(ev.values([expr])[0].expand(ev.points[0], 1).reshape(-1))
    if not parts:
        return torch.empty(ranges, dtype=compute_dtype(expr.dtype), device=device)
    return torch.cat(parts).reshape(ranges)


def _gemm(kernel: str, t: GemmTemplate, tensors: Mapping[str, torch.Tensor], device: torch.device) -> torch.Tensor:
    lead = (t.batch,) if t.batched else ()
    # the kernel rounds each operand to what the MMA consumes (a 16-bit prologue's fp32 value included)
    a = round_to(_values_over(kernel, t.a, lead + (t.m, t.k), tensors, device), t.operand_dtype).to(torch.float32)
    b = round_to(_values_over(kernel, t.b, lead + (t.k, t.n), tensors, device), t.operand_dtype).to(torch.float32)
    return torch.matmul(a, b)


def _view(kernel: str, view: View, tensors: Mapping[str, torch.Tensor], device: torch.device) -> torch.Tensor:
    """The elements ``view`` addresses, in float32, bounds-checked like the IR's loads."""
    index = torch.full((1,) * len(view.shape), view.offset, dtype=torch.int64, device=device)
    for d, (n, st) in enumerate(zip(view.shape, view.stride)):
        shape = [1] * len(view.shape)
        shape[d] = n
        index = index + torch.arange(n, device=device).reshape(shape) * st
    index = index.expand(*view.shape)
    return checked_load(kernel, tensors, view.buffer, index).to(torch.float32)


def _attention(kernel: str, t: AttentionTemplate, tensors: Mapping[str, torch.Tensor],
               device: torch.device) -> torch.Tensor:
    if t.lse is not None:  # (lowering keeps SDPA as an extern call when the log-sum-exp is read)
        raise ReferenceUnsupported(f"kernel {kernel}: reference evaluator has no semantics for an attention "
                                   f"template that writes its log-sum-exp ({t.lse})")
    q, k, v = (_view(kernel, view, tensors, device) for view in (t.q, t.k, t.v))
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    scores = q @ k.transpose(-1, -2) * t.scale
    if t.mask is not None:
        scores = scores + _view(kernel, t.mask, tensors, device)
    if t.causal:
        length, keys = scores.shape[-2:]
        later = torch.ones(length, keys, dtype=torch.bool, device=device).triu(1)
        scores = scores.masked_fill(later, float("-inf"))
    # a row with every key masked is 0/0 = NaN in the kernel, as softmax over all -inf is here
    return torch.softmax(scores, dim=-1) @ v

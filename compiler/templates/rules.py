"""Lowering rules for the ops templates cover: ``aten.mm``/``addmm``/``bmm`` (``linear`` reaches us as
``addmm`` or ``mm`` of views) and the SDPA ops. Each builds a ``TemplateNode`` or raises
``Unsupported`` with the reason the op stays an ATen call (``policy.choose``).

Importing this module registers the rules over the library-kernel rules of ``compiler.lowerings``.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import torch

from compiler import fused_attention, ir, sizes
from compiler.graph import View
from compiler.lowerings.rules import (Lazy, Strided, TensorValue, Unsupported, as_expr, broadcast_read, identity_index,
                                      read, register)
from compiler.lowerings.symbolic import dense_order
from compiler.report import ExternReason
from compiler.templates import conv  # noqa: F401  (registers the convolution rule)
from compiler.templates.emit import DTYPES, decide, emit
from compiler.templates.spec import AttentionTemplate, GemmTemplate, acc_read, query_group
from compiler.templates.tiles import gemm_split_k

if TYPE_CHECKING:
    from compiler.lowering import GraphLowering

aten = torch.ops.aten
# An operand computed by a pointwise expression of at most this many ops is recomputed inside the
# GEMM's K loop (a cast, a scaling: the "prologue"); a bigger one is realized first, since each
# element is recomputed once per output tile column.
MAX_PROLOGUE_OPS = 4
MAX_HEAD_DIM = 256  # one head's row must fit the attention template's registers


# --- GEMM -----------------------------------------------------------------------------
def _operand(ctx: GraphLowering, value: TensorValue) -> ir.Expr:
    """The operand as an expression over its own index space: a strided read, or a small pointwise
    prologue (cast, scaling) computed while the tile is loaded."""
    if isinstance(value, Lazy) and _value_ops(value.expr) > MAX_PROLOGUE_OPS:
        value = ctx.realize(value)
    return as_expr(value)


def _value_ops(expr: ir.Expr) -> int:
    """Operations computing ``expr``'s value (address arithmetic inside loads not counted)."""
    count, stack = 0, [expr]
    while stack:
        e = stack.pop()
        if e.op is ir.Op.LOAD:
            continue
        count += bool(e.src)
        stack.extend(e.src)
    return count


def _gemm_unsupported(a: TensorValue, b: TensorValue) -> str | None:
    if a.dtype not in DTYPES or b.dtype not in DTYPES:
        return f"{a.dtype} x {b.dtype} operands (templates cover float32, float16, bfloat16)"
    if a.dtype != b.dtype:
        return f"mixed operand dtypes {a.dtype} x {b.dtype}"
    return None


def _gemm(ctx: GraphLowering, node: Any, a: TensorValue, b: TensorValue, bias: TensorValue | None = None,
          alpha: float = 1, beta: float = 1) -> TensorValue:
    batched = len(a.shape) == 3
    batch = a.shape[0] if batched else 1
    m, k = a.shape[-2:]
    n = b.shape[-1]
    out_dtype = node.meta["val"].dtype
    unsupported = _gemm_unsupported(a, b)
    if bias is not None and unsupported is None and bias.dtype not in DTYPES:
        unsupported = f"{bias.dtype} bias"
    decide(ctx, "gemm", unsupported, (batch, m, n, k), a.dtype, node)
    ea, eb = _operand(ctx, a), _operand(ctx, b)
    splits = 1 if batched or alpha == 0 else gemm_split_k(m, n, k, ctx.capabilities.interpreted)
    if splits > 1:
        acc, shape = _split_k(ctx, m, n, k, splits, ea, eb, a.dtype), (m, n)
    else:
        template = GemmTemplate(ctx.new_name("acc"), batch, m, n, k, ea, eb, a.dtype, batched)
        acc, shape = acc_read(template), template.out_shape
    body = acc
    if alpha == 0:  # as ATen (a BLAS gemm with alpha 0 reads neither matrix): NaN in a or b ignored
        body = ir.const(0.0, torch.float32)
    elif alpha != 1:
        body = ir.binary(ir.Op.MUL, body, ir.const(alpha, torch.float32))
    if bias is not None and beta != 0:  # beta == 0: ATen ignores the bias, NaN included
        term = ir.cast(broadcast_read(bias, shape), torch.float32)
        if beta != 1:
            term = ir.binary(ir.Op.MUL, term, ir.const(beta, torch.float32))
        body = ir.binary(ir.Op.ADD, body, term)
    if splits > 1:  # the epilogue follows the reduction over the chunks (it fuses into that kernel)
        return Lazy(shape, out_dtype, ir.cast(body, out_dtype))
    return emit(ctx, template, ir.cast(body, out_dtype), out_dtype)


def _split_k(ctx: GraphLowering, m: int, n: int, k: int, splits: int, a: ir.Expr, b: ir.Expr,
             dtype: torch.dtype) -> ir.Expr:
    """Split-K (``tiles.gemm_split_k``): a batched template over the ``splits`` chunks of K writes float32
    partials ``(splits, M, N)``; their sum over the chunks, read at the output element, is returned."""
    x = ir.xvar
    start = ir.binary(ir.Op.MUL, x(0), ir.const(k // splits, ir.INDEX_DTYPE))  # chunk x(0)'s first k
    # a over (m, k) -> (chunk, m, k'); b over (k, n) -> (chunk, k', n); k = start + k'
    a_split = ir.substitute(a, {x(0): x(1), x(1): ir.binary(ir.Op.ADD, start, x(2))})
    b_split = ir.substitute(b, {x(0): ir.binary(ir.Op.ADD, start, x(1)), x(1): x(2)})
    template = GemmTemplate(ctx.new_name("acc"), splits, m, n, k // splits, a_split, b_split, dtype, True)
    partials = emit(ctx, template, acc_read(template), torch.float32)
    return as_expr(ctx.reduction(partials, [0], False, ir.ReduceOp.SUM, torch.float32, torch.float32))


@register(aten.mm)
def lower_mm(ctx: GraphLowering, node: Any, a: TensorValue, b: TensorValue) -> TensorValue:
    return _gemm(ctx, node, a, b)


@register(aten.bmm)
def lower_bmm(ctx: GraphLowering, node: Any, a: TensorValue, b: TensorValue) -> Strided:
    return _gemm(ctx, node, a, b)


@register(aten.addmm)
def lower_addmm(ctx: GraphLowering, node: Any, bias: TensorValue, a: TensorValue, b: TensorValue, *,
                beta: float = 1, alpha: float = 1) -> TensorValue:
    return _gemm(ctx, node, a, b, bias, alpha, beta)


# --- attention ------------------------------------------------------------------------
def _strided(ctx: GraphLowering, value: TensorValue) -> View:
    return ctx.realize(value)


def _mask_view(ctx: GraphLowering, mask: TensorValue, full: tuple[int, ...]) -> View:
    """The additive mask as a view broadcast to (B, H, L, S): stride 0 along its broadcast dims."""
    m = ctx.realize(mask)
    lead = len(full) - len(m.shape)
    shape = (1,) * lead + tuple(m.shape)
    stride = (0,) * lead + tuple(m.stride)
    stride = tuple(0 if n == 1 else st for n, st in zip(shape, stride))
    return View(m.buffer, full, stride, m.offset, m.dtype)


def _output_stride(val: Any) -> tuple[int, ...] | None:
    """Eager's output layout when it is a dense permutation (flash attention returns (B, L, H, D)
    memory viewed as (B, H, L, D): consumers' reshape to (B, L, H*D) is then a view)."""
    shape, stride = sizes.shape_of(val.shape), sizes.shape_of(val.stride())
    if not sizes.all_static(shape + stride):  # symbolic sizes: matched by structure (they cannot be sorted)
        return stride if dense_order(shape, stride) is not None else None
    dims = sorted((st, n) for st, n in zip(val.stride(), val.shape) if n > 1)
    span = 1
    for st, n in dims:
        if st != span:
            return None
        span *= n
    return tuple(int(s) for s in val.stride())


def _attention(ctx: GraphLowering, node: Any, q: TensorValue, k: TensorValue, v: TensorValue,
               mask: TensorValue | None, dropout_p: float, causal: bool, scale: float | None) -> Any:
    """The template's output (a list like the op's results, where the op returns several)."""
    single = isinstance(node.meta["val"], torch.Tensor)
    vals = [node.meta["val"]] if single else node.meta["val"]
    # results something reads (a traced graph keeps dead getitems of the log-sum-exp)
    used = {u.args[1] for u in node.users if getattr(u.target, "__name__", "") == "getitem" and u.users}
    if any(len(t.shape) != 4 for t in (q, k, v)):  # (the CPU kernel takes other ranks too)
        decide(ctx, "attention", f"rank-{len(q.shape)} attention (the template takes (B, H, L, D))", (), q.dtype)
    batch, heads, length, dim = q.shape
    kv_heads, keys = k.shape[1], k.shape[2]
    head_dim = max(dim, v.shape[3]) if sizes.all_static((dim, v.shape[3])) else None
    unsupported = None
    if q.dtype not in DTYPES or k.dtype != q.dtype or v.dtype != q.dtype:
        unsupported = f"{q.dtype} attention (templates cover float32, float16, bfloat16)"
    elif dropout_p:
        unsupported = "attention dropout (keeps ATen's random generator)"
    elif used - {0}:
        unsupported = "the log-sum-exp or RNG state is read (a backward needs it; the template is forward only)"
    elif head_dim is not None and head_dim > MAX_HEAD_DIM:
        unsupported = f"head dim {head_dim} (template up to {MAX_HEAD_DIM})"
    elif (query_group(heads, kv_heads) == 0 and sizes.all_static((heads, kv_heads))) or k.shape[0] != batch:
        unsupported = f"{heads} query heads over {kv_heads} key/value heads"
    elif mask is not None and mask.dtype not in DTYPES:
        unsupported = f"{mask.dtype} attention mask (boolean masks reach us as additive float masks)"
    decide(ctx, "attention", unsupported, (batch, heads, length, keys, dim), q.dtype, masked=mask is not None)
    if head_dim is None and not ctx.capabilities.interpreted:  # (the interpreter has no register limit)
        raise Unsupported(ExternReason.SYMBOLIC_SIZE, f"a symbolic head dim ({dim}, {v.shape[3]}): the attention "
                          f"template's registers need it known to be at most {MAX_HEAD_DIM}")
    if query_group(heads, kv_heads) == 0 and not _guarded_divisible(vals[0], heads, kv_heads):
        raise Unsupported(ExternReason.SYMBOLIC_SIZE, f"{heads} query heads over {kv_heads} key/value heads: the "
                          "template needs the group size static, or its divisibility guarded by Dynamo")
    if scale is not None and not isinstance(scale, (int, float)):
        raise Unsupported(ExternReason.SYMBOLIC_SIZE, f"a softmax scale computed from sizes ({scale})")
    full = (batch, heads, length, keys)
    # SDPA's default scale 1 / sqrt(head dim): a number here, or (a symbolic head dim) computed at
    # each launch from the actual one (``launch.AttentionSizeLaunch``)
    default_scale = 1 / math.sqrt(dim) if sizes.is_static(dim) else None
    template = AttentionTemplate(ctx.new_name("acc"), _strided(ctx, q), _strided(ctx, k), _strided(ctx, v),
                                 _mask_view(ctx, mask, full) if mask is not None else None, bool(causal),
                                 float(scale) if scale is not None else default_scale)
    out = emit(ctx, template, ir.cast(acc_read(template), q.dtype), q.dtype, _output_stride(vals[0]))
    return out if single else [out] + [None] * (len(vals) - 1)


def _guarded_divisible(val: Any, heads: Any, kv_heads: Any) -> bool:
    """Whether Dynamo already guards ``heads % kv_heads == 0`` (SDPA's grouped-query check installs it),
    so the kernel may compute the group size as a floor division at run time; read from the shape
    environment's guards, never adding one."""
    env = getattr(getattr(val, "fake_mode", None), "shape_env", None)
    wanted = f"Eq(Mod({heads}, {kv_heads}), 0)"
    return env is not None and any(str(g.expr) == wanted for g in getattr(env, "guards", ()))


def _additive(mask: TensorValue, dtype: torch.dtype) -> TensorValue:
    """A boolean attention mask (True: attend) as the additive mask the template reads."""
    keep = read(mask, identity_index(tuple(mask.shape)))
    return Lazy(tuple(mask.shape), dtype, ir.where(keep, ir.const(0.0, dtype), ir.const(-math.inf, dtype)))


@register(fused_attention.OP.overloadpacket)
def lower_sdpa_runtime_choice(ctx: GraphLowering, node: Any, q: TensorValue, k: TensorValue, v: TensorValue,
                              attn_mask: TensorValue | None = None, dropout_p: float = 0.0, is_causal: bool = False,
                              *, scale: float | None = None, enable_gqa: bool = False) -> TensorValue:
    """``compiler.fused_attention``'s op: the template, else the extern call (SDPA choosing its kernel
    at run time)."""
    if attn_mask is not None and attn_mask.dtype == torch.bool:
        attn_mask = _additive(attn_mask, q.dtype)
    return _attention(ctx, node, q, k, v, attn_mask, dropout_p, is_causal, scale)


@register(aten._scaled_dot_product_flash_attention_for_cpu)
def lower_sdpa_cpu(ctx: GraphLowering, node: Any, q: TensorValue, k: TensorValue, v: TensorValue,
                   dropout_p: float = 0.0, is_causal: bool = False, *, attn_mask: TensorValue | None = None,
                   scale: float | None = None) -> list:
    return _attention(ctx, node, q, k, v, attn_mask, dropout_p, is_causal, scale)


@register(aten._scaled_dot_product_flash_attention)
def lower_sdpa_flash(ctx: GraphLowering, node: Any, q: TensorValue, k: TensorValue, v: TensorValue,
                     dropout_p: float = 0.0, is_causal: bool = False, return_debug_mask: bool = False, *,
                     scale: float | None = None) -> list:
    return _attention(ctx, node, q, k, v, None, dropout_p, is_causal, scale)


@register(aten._scaled_dot_product_efficient_attention)
def lower_sdpa_efficient(ctx: GraphLowering, node: Any, q: TensorValue, k: TensorValue, v: TensorValue,
                         attn_bias: TensorValue | None, compute_log_sumexp: bool, dropout_p: float = 0.0,
                         is_causal: bool = False, *, scale: float | None = None) -> list:
    return _attention(ctx, node, q, k, v, attn_bias, dropout_p, is_causal, scale)


@register(aten._scaled_dot_product_cudnn_attention)
def lower_sdpa_cudnn(ctx: GraphLowering, node: Any, q: TensorValue, k: TensorValue, v: TensorValue,
                     attn_bias: TensorValue | None, compute_log_sumexp: bool, dropout_p: float = 0.0,
                     is_causal: bool = False, return_debug_mask: bool = False, *,
                     scale: float | None = None) -> list:
    return _attention(ctx, node, q, k, v, attn_bias, dropout_p, is_causal, scale)

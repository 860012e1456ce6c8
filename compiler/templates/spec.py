"""What a template kernel computes, as data: lowering makes it, the scheduler fuses into it,
the Triton renderer writes it.

Index variables. A GEMM over an output of shape ``(M, N)`` or ``(B, M, N)`` names its output
element by XVAR(d) over that shape; its operands are expressions over the same kind of space:
``a`` over ``(B?, M, K)`` and ``b`` over ``(B?, K, N)``. Attention's output ``(B, H, L, D)``
is indexed alike; its operands are buffer views (``View``). The value a template computes (the
float32 accumulator) is read by the epilogue as ``LOAD(acc, <output's row-major index>)`` of a
buffer that exists only in registers, so fused consumers substitute it like any kernel-local
value and the renderer recognises it by name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import sympy
import torch
from torch.utils._sympy.functions import FloorDiv

from compiler import ir, sizes
from compiler.graph import ComputedNode, View, contiguous_strides
from compiler.ir import Expr
from compiler.scheduler import Kernel


@dataclass(frozen=True)
class GemmTemplate:
    """``acc[b, m, n] = sum_k a[b, m, k] * b[b, k, n]`` in float32 (batch dim only when ``batched``)."""

    acc: str  # the accumulator's register-only buffer name
    batch: int
    m: int
    n: int
    k: int
    a: Expr  # over XVAR(0..): (b,) m, k
    b: Expr  # over (b,) k, n
    operand_dtype: torch.dtype  # what the MMA consumes (fp16/bf16 go to the tensor cores as they are)
    batched: bool
    allow_tf32: bool = False  # float32 inputs: exact ("ieee") products unless asked otherwise

    family = "gemm"

    @property
    def out_shape(self) -> tuple[int, ...]:
        return (self.batch, self.m, self.n) if self.batched else (self.m, self.n)

    def operand_loads(self) -> list[Expr]:
        return list(ir.loads(self.a)) + list(ir.loads(self.b))


@dataclass(frozen=True)
class AttentionTemplate:
    """``softmax(q @ k^T * scale + mask) @ v`` over ``(B, H, L, D)``; keys and values may have fewer
    heads than queries (grouped-query attention: query head h reads kv head h // (H // Hkv))."""

    acc: str
    q: View
    k: View
    v: View
    mask: View | None  # additive float mask broadcast to (B, H, L, S), or None
    causal: bool
    scale: float | None  # None: SDPA's 1 / sqrt(head dim) of a symbolic head dim, computed per launch
    lse: str | None = None  # buffer for the log-sum-exp (natural log) per (B, H, L), when it is read

    family = "attention"

    @property
    def out_shape(self) -> tuple[int, ...]:
        return (self.q.shape[0], self.q.shape[1], self.q.shape[2], self.v.shape[3])

    @property
    def group(self) -> Any:
        """Query heads per kv head: an int, or (symbolic head counts whose divisibility Dynamo guards,
        ``rules._guarded_divisible``) the floor division the kernel computes from its size arguments."""
        heads, kv_heads = self.q.shape[1], self.k.shape[1]
        return query_group(heads, kv_heads) or FloorDiv(heads, kv_heads)

    def operand_loads(self) -> list[Expr]:
        return []


Template = GemmTemplate | AttentionTemplate


def query_group(heads: Any, kv_heads: Any) -> int:
    """Query heads per key/value head; 0 when ``kv_heads`` does not divide ``heads`` or (symbolic
    head counts) is not known to: sizes are compared by structure, never guarded (``compiler.sizes``)."""
    if sizes.all_static((heads, kv_heads)):
        return heads // kv_heads if heads % kv_heads == 0 else 0
    ratio = sympy.simplify(sympy.sympify(heads) / kv_heads)
    return int(ratio) if ratio.is_Integer and ratio > 0 else 0


def acc_read(template: Template) -> Expr:
    """The epilogue's read of the accumulator at the output element XVAR(0..)."""
    shape = template.out_shape
    index = ir.linear_index([ir.xvar(d) for d in range(len(shape))], contiguous_strides(shape))
    return ir.load(template.acc, index, torch.float32)


@dataclass
class TemplateNode(ComputedNode):
    """A lowered node computed by a template: ``body`` (the epilogue over XVARs of the output,
    reading ``acc_read(template)``) is stored into ``buffer``."""

    template: Template | None = None

    def __str__(self) -> str:
        return ir.render_definition(f"{self.name}: {str(self.buffer.dtype).replace('torch.', '')}"
                                    f"{list(self.ranges)} {describe(self.template)}", " -> ", self.body)


def describe(template: Template | None) -> str:
    """One line naming the template and its sizes (IR dumps, kernel dumps)."""
    if isinstance(template, GemmTemplate):
        batch = f"{template.batch} x " if template.batched else ""
        return f"template gemm {batch}{template.m}x{template.n}x{template.k} {template.operand_dtype}"
    if isinstance(template, AttentionTemplate):
        return (f"template attention q{list(template.q.shape)} k{list(template.k.shape)}"
                f"{' causal' if template.causal else ''}{' masked' if template.mask is not None else ''}")
    return "template"


@dataclass(frozen=True)
class TemplateKernel(Kernel):
    """A scheduled template: ``stores`` are the epilogue (the template's own output and fused
    consumers), ``ranges`` the output shape, ``params`` operands first."""

    template: Template | None = None

    @property
    def family(self) -> str:
        assert self.template is not None
        return self.template.family

    @property
    def size_args(self) -> tuple[str, ...]:
        """The epilogue's size symbols plus the template's own (its M/N/K or attention shapes, its
        operands' strides and offsets): a template kernel over symbolic sizes takes them all as
        arguments, its grid and tiles chosen at each launch (``compiler.templates.launch``)."""
        return sizes.ordered(set(super().size_args) | template_symbols(self.template))

    def __str__(self) -> str:
        lines = super().__str__().splitlines()
        return "\n".join([f"{lines[0]} {describe(self.template)}", *lines[1:]])


def template_symbols(template: Template | None) -> set[str]:
    """The size symbols ``template``'s loop reads (none for static sizes)."""
    if isinstance(template, GemmTemplate):
        leaves = [e.arg for x in (template.a, template.b) for e in x.walk() if e.op is ir.Op.SIZE]
        return sizes.symbols(template.batch, template.m, template.n, template.k, leaves)
    if isinstance(template, AttentionTemplate):
        views = [v for v in (template.q, template.k, template.v, template.mask) if v is not None]
        return sizes.symbols(*[(v.shape, v.stride, v.offset) for v in views])
    return set()

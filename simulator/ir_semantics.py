"""The IR's semantics on torch tensors: expression values over a chunk of a kernel's iteration points.

What ``simulator.reference`` (whole kernels and graphs) and ``simulator.reference_templates`` (a
template kernel's core op) both evaluate expressions with; it imports neither of them.

Semantics follow the renderers' contract for the IR (``compiler/ir.py``): 16-bit floats are
computed in float32 and rounded only where the IR casts; ``DIV`` truncates integers, ``MOD``
keeps the dividend's sign, ``MAX``/``MIN``/reductions propagate NaN, ``ARGMAX``/``ARGMIN``
return the first extreme (the first NaN when there is one). Index expressions address a
buffer's elements from its first element, as kernel pointers do, and every load is
bounds-checked against the tensor it addresses (``ReferenceFault``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from compiler.ir import Expr, Op, ReduceOp

# Iteration points evaluated at once (a whole reduction row is always one chunk, however long).
# Each torch call costs ~15 ms on a loaded 2-core machine whatever its size (thread-pool waits),
# so chunks are large; a value is freed after its last use, so memory follows the expression's
# width, not its depth.
POINTS_PER_CHUNK = 1 << 18


class ReferenceFault(RuntimeError):
    """The IR addresses memory outside a buffer: a lowering or scheduling fault."""


class ReferenceUnsupported(NotImplementedError):
    """The evaluator has no semantics for an IR op or a template kind: its own limit, nobody's fault."""


# --- what the evaluator reads of a scheduled kernel --------------------------------------------

@dataclass(frozen=True)
class KernelStore:
    buffer: str
    index: Expr
    value: Expr
    level: str  # "x": one value per outer point; "xr": one per outer x reduction point


@dataclass(frozen=True)
class KernelFacts:
    name: str
    ranges: tuple[int, ...]
    rranges: tuple[int, ...]
    stores: tuple[KernelStore, ...]  # the stores that reach memory
    buffers: tuple[str, ...]  # every buffer loaded or stored, in first-use order (a template's operands first)
    template: Any = None  # a template kernel's core op as data (``compiler.templates.spec``), else None


# --- evaluation ----------------------------------------------------------------------------------

def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype a value is computed in (16-bit floats in float32, as every renderer does)."""
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def _span(t: torch.Tensor) -> int:
    """Elements addressable from ``t``'s first element: what its strides reach."""
    if t.numel() == 0:
        return 0
    return 1 + sum((n - 1) * s for n, s in zip(t.shape, t.stride()))


def flat_elements(t: torch.Tensor) -> torch.Tensor:
    return torch.as_strided(t, (_span(t),), (1,), t.storage_offset())


def _unravel(flat: torch.Tensor, sizes: tuple[int, ...]) -> list[torch.Tensor]:
    out, stride = [], 1
    strides = []
    for n in reversed(sizes):
        strides.append(stride)
        stride *= n
    for n, st in zip(sizes, reversed(strides)):
        out.append((flat // st) % n)
    return out


_UNARY: dict[Op, Callable[[torch.Tensor], torch.Tensor]] = {
    Op.NEG: torch.neg, Op.ABS: torch.abs, Op.EXP: torch.exp, Op.EXP2: torch.exp2, Op.LOG2: torch.log2, Op.LOG10: torch.log10, Op.LOG: torch.log, Op.SQRT: torch.sqrt,
    Op.RSQRT: torch.rsqrt, Op.SIN: torch.sin, Op.COS: torch.cos, Op.ERF: torch.erf, Op.FLOOR: torch.floor,
    Op.CEIL: torch.ceil,
}
_BINARY: dict[Op, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    Op.ADD: torch.add, Op.SUB: torch.sub, Op.MUL: torch.mul, Op.MOD: torch.fmod, Op.MAX: torch.maximum,
    Op.MIN: torch.minimum, Op.BITAND: torch.bitwise_and, Op.BITOR: torch.bitwise_or,
    Op.BITXOR: torch.bitwise_xor, Op.SHL: torch.bitwise_left_shift, Op.SHR: torch.bitwise_right_shift,
}
_COMPARE: dict[Op, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    Op.EQ: torch.eq, Op.NE: torch.ne, Op.LT: torch.lt, Op.LE: torch.le, Op.GT: torch.gt, Op.GE: torch.ge,
    Op.AND: torch.logical_and, Op.OR: torch.logical_or,
}


class ChunkEvaluator:
    """Values of expressions over one chunk of iteration points: tensors of shape [C, 1] (per outer
    point) or [C, R] (per outer x reduction point), memoized per expression."""

    def __init__(self, facts: KernelFacts, tensors: Mapping[str, torch.Tensor], xflat: torch.Tensor,
                 device: torch.device) -> None:
        self.facts, self.tensors, self.device = facts, tensors, device
        self.xs = [v[:, None] for v in _unravel(xflat, facts.ranges)]
        rflat = torch.arange(max(1, numel(facts.rranges)), device=device)
        self.rs = [v[None, :] for v in _unravel(rflat, facts.rranges)] if facts.rranges else []
        self.points = (xflat.numel(), rflat.numel())

    def values(self, roots: Sequence[Expr]) -> list[torch.Tensor]:
        """The values of ``roots``, sharing common sub-expressions, each freed after its last use."""
        order: dict[Expr, None] = {}
        for root in roots:
            order.update((e, None) for e in root.walk() if e not in order)  # operands before users
        users = Counter(s for e in order for s in e.src)
        done: dict[Expr, torch.Tensor] = {}
        for e in order:
            done[e] = self.apply(e, [done[s] for s in e.src])
            for s in e.src:
                users[s] -= 1
                if users[s] == 0 and s not in roots:
                    done.pop(s, None)
        return [done[r] for r in roots]

    def apply(self, e: Expr, a: list[torch.Tensor]) -> torch.Tensor:
        op, cd = e.op, compute_dtype(e.dtype)
        if op is Op.CONST:
            return torch.tensor(e.arg, dtype=cd, device=self.device).reshape(1, 1)
        if op is Op.XVAR:
            return self.xs[e.arg]
        if op is Op.RVAR:
            return self.rs[e.arg]
        if op is Op.LOAD:
            return self.load(e.arg, a[0]).to(cd)
        if op is Op.CAST:
            return round_to(a[0], e.dtype)
        if op is Op.BITCAST:
            return a[0].to(compute_dtype(e.src[0].dtype)).view(e.dtype)
        if op is Op.REDUCE:
            return _reduce(e.arg, a[0].expand(*self.points), cd)
        if op in _COMPARE:
            return _COMPARE[op](a[0], a[1])
        if op is Op.NOT:
            return torch.logical_not(a[0])
        if op is Op.ISNAN:
            return torch.isnan(a[0])
        if op is Op.WHERE:
            return torch.where(a[0].bool(), a[1].to(cd), a[2].to(cd))
        a = [t.to(cd) for t in a]
        if op in _UNARY:
            return _UNARY[op](a[0])
        if op is Op.BITNOT:
            return torch.logical_not(a[0]) if cd == torch.bool else torch.bitwise_not(a[0])
        if op in _BINARY:
            return _BINARY[op](a[0], a[1])
        if op is Op.DIV:
            return a[0] / a[1] if cd.is_floating_point else torch.div(a[0], a[1], rounding_mode="trunc")
        if op is Op.FLOORDIV:
            return torch.div(a[0], a[1], rounding_mode="floor")
        if op is Op.POW:
            return torch.pow(a[0], a[1])
        if op is Op.FMA:  # float64 for float32 operands: the product is exact, the sum rounds once more
            wide = torch.float64 if cd == torch.float32 else cd
            return torch.addcmul(a[2].to(wide), a[0].to(wide), a[1].to(wide)).to(cd)
        raise ReferenceUnsupported(f"reference evaluator: no semantics for {op}")

    def check(self, buffer: str, index: torch.Tensor, what: str) -> torch.Tensor:
        return checked_index(self.facts.name, self.tensors, buffer, index, what)

    def load(self, buffer: str, index: torch.Tensor) -> torch.Tensor:
        return checked_load(self.facts.name, self.tensors, buffer, index)


def checked_index(kernel: str, tensors: Mapping[str, torch.Tensor], buffer: str, index: torch.Tensor,
                  what: str) -> torch.Tensor:
    """``index`` (elements from ``buffer``'s first) as int64, or ``ReferenceFault`` when it leaves the buffer."""
    tensor = tensors.get(buffer)
    if tensor is None:
        raise ReferenceFault(f"kernel {kernel}: {what} of {buffer}, which no tensor was given for")
    span = _span(tensor)
    index = index.to(torch.int64)
    if index.numel() and (int(index.min()) < 0 or int(index.max()) >= span):
        raise ReferenceFault(f"kernel {kernel}: {what} of {buffer} at index "
                             f"{int(index.min())}..{int(index.max())}, outside its {span} elements")
    return index


def checked_load(kernel: str, tensors: Mapping[str, torch.Tensor], buffer: str, index: torch.Tensor) -> torch.Tensor:
    """The elements of ``buffer`` at ``index`` (any shape), bounds-checked like every load of the IR."""
    return flat_elements(tensors[buffer])[checked_index(kernel, tensors, buffer, index, "load")]


def numel(shape: Sequence[int]) -> int:
    out = 1
    for n in shape:
        out *= n
    return out


def round_to(value: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    if dtype == torch.bool:
        return value != 0
    if dtype in (torch.float16, torch.bfloat16):  # round to the 16-bit type, keep computing in fp32
        return value.to(torch.float32).to(dtype).to(torch.float32)
    return value.to(dtype)


def _reduce(op: ReduceOp, v: torch.Tensor, out: torch.dtype) -> torch.Tensor:
    v = v.to(compute_dtype(v.dtype)) if v.dtype != torch.bool else v.to(torch.int64)
    if op is ReduceOp.SUM:
        return v.sum(1, keepdim=True).to(out)
    if op is ReduceOp.PROD:
        return v.prod(1, keepdim=True).to(out)
    if op is ReduceOp.MAX:
        return v.amax(1, keepdim=True).to(out)
    if op is ReduceOp.MIN:
        return v.amin(1, keepdim=True).to(out)
    position = torch.arange(v.shape[1], device=v.device).expand_as(v)
    best = v.amax(1, keepdim=True) if op is ReduceOp.ARGMAX else v.amin(1, keepdim=True)
    # the first position holding the extreme; NaN is the extreme when a row has one
    hit = (v == best) | (torch.isnan(v) if v.is_floating_point() else torch.zeros_like(v, dtype=torch.bool))
    first = torch.where(hit, position, v.shape[1]).amin(1, keepdim=True)
    return first.to(out)

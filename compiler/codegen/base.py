"""The renderer interface shared by every codegen.

A renderer turns one scheduled ``Kernel`` into source text plus the launch facts
the runtime needs (argument buffers, grid). Building, caching and launching live
in ``compiler.runtime``. ``OPS`` is the renderer's op table: the IR ops it can
emit; lowering never produces others, and ``check_ops`` guards the contract.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import ClassVar

import torch

from compiler import ir
from compiler.capabilities import MAX_PERSISTENT_RNUMEL, Capabilities
from compiler.ir import Expr, Op, ReduceOp
from compiler.scheduler import Kernel


@dataclass(frozen=True)
class RenderedKernel:
    name: str
    codegen: str
    source: str
    args: tuple[str, ...]  # buffer names, in parameter order
    grid: tuple[int, ...]
    meta: dict = field(default_factory=dict)  # constexprs / launch options (num_warps, ...)
    alternatives: tuple = ()  # further (grid, meta) launch configs the runtime may time and pick from
    symbol: str = ""  # the function's name in ``source`` when it is not ``name`` (sanitized, or by content)


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype a renderer computes a value of ``dtype`` in: 16-bit floats in float32."""
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def reduction_identity(op: ReduceOp, dtype: torch.dtype) -> float | int:
    """The value a reduction starts from (each renderer spells it): 0, 1, or the extreme of the
    compute dtype (for bool, of int32) that loses to every element."""
    if op is ReduceOp.SUM:
        return 0
    if op is ReduceOp.PROD:
        return 1
    lowest = op in (ReduceOp.MAX, ReduceOp.ARGMAX)
    if dtype.is_floating_point:
        return -math.inf if lowest else math.inf
    info = torch.iinfo(torch.int32 if dtype == torch.bool else dtype)
    return info.min if lowest else info.max


class Renderer:
    """Turns a scheduled ``Kernel`` into source text; publishes what it can emit."""

    codegen: ClassVar[str] = ""
    OPS: ClassVar[frozenset[Op]] = frozenset()

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(self.codegen, self.OPS, MAX_PERSISTENT_RNUMEL, interpreted=False)

    def render(self, kernel: Kernel) -> RenderedKernel:
        raise NotImplementedError

    def check_ops(self, kernel: Kernel) -> None:
        """The contract lowering keeps: a kernel holds only ops of this renderer's table."""
        for store in kernel.stores:
            for e in store.value.walk():
                if e.op not in self.OPS:
                    raise ValueError(f"{self.codegen} renderer cannot emit {e.op} (kernel {kernel.name})")


class ExprLevels:
    """Where a value of a reduction kernel lives, memoized per expression.

    ``is_xr``: it varies along the reduced dims (an RVAR outside any REDUCE), so it is
    computed per reduction element; otherwise once per outer point. ``after_reduce``:
    it depends on a REDUCE result, so it can only be computed after that reduction.
    Iterative, because fused expressions can be deeper than Python's recursion limit.
    """

    def __init__(self) -> None:
        self._xr: dict[Expr, bool] = {}
        self._after: dict[Expr, bool] = {}

    def _fill(self, root: Expr) -> None:
        stack: list[tuple[Expr, bool]] = [(root, False)]
        while stack:
            e, ready = stack.pop()
            if e in self._xr:
                continue
            if not ready:
                stack.append((e, True))
                stack.extend((s, False) for s in e.src if s not in self._xr)
                continue
            if e.op is Op.RVAR:
                self._xr[e] = True
            elif e.op is Op.REDUCE:
                self._xr[e] = False
            else:
                self._xr[e] = any(self._xr[s] for s in e.src)
            self._after[e] = e.op is Op.REDUCE or any(self._after[s] for s in e.src)

    def is_xr(self, e: Expr) -> bool:
        if e not in self._xr:
            self._fill(e)
        return self._xr[e]

    def after_reduce(self, e: Expr) -> bool:
        if e not in self._after:
            self._fill(e)
        return self._after[e]


def affine_index_code(index: Expr, name_of: Callable[[Expr], str]) -> str | None:
    """``index`` as ``a + 3 * b + 7`` (valid C++ and Python), or None when it is not affine.

    ``name_of`` renders a loop variable or other term; both renderers share this text."""
    aff = ir.to_affine(index)
    if aff is None:
        return None
    terms = [name_of(var) if coef == 1 else f"{coef} * {name_of(var)}"
             for var, coef in aff.items() if var is not None and coef != 0]
    if aff.get(None, 0) or not terms:
        terms.append(str(aff.get(None, 0)))
    return " + ".join(terms)

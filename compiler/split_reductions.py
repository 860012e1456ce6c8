"""Split reductions: a GPU reduction with few outputs over many elements runs as two.

A looped Triton reduction runs one program per output (per ``XBLOCK`` outputs), each walking its
whole row. With few outputs the GPU is mostly idle: a training batch norm's statistics and gradients
over (N, H, W) give one output per channel, 64 programs on 132 SMs each walking 401,408 elements at
resnet50's first layer (batch 32), where Inductor's kernels split the rows (its ``num_splits``).

Split, the reduction over ``R`` elements becomes a first reduction over ``S`` chunks of ``R / S``
(outputs x ``S`` programs, each a contiguous run of the flattened reduced dims) into a float
accumulator buffer, and a second over the ``S`` partial results. Only where the accumulation can be
regrouped without changing what it means (sum, product, max, min: max and min propagate NaN in both
stages; arg-reductions keep the first index and are not split), ``S`` divides ``R`` (no masked
tail: every read stays in bounds), and sizes are static. Renderers opt in with
``Capabilities.split_reductions`` (compiled GPU Triton); the interpreter and the C++ renderer loop
over long rows on few programs anyway.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch

from compiler import ir
from compiler.ir import Expr, Op, ReduceOp
from compiler.lowerings.rules import Strided, TensorValue, read
from compiler.sizes import all_static

if TYPE_CHECKING:
    from compiler.lowering import GraphLowering

SPLIT_OPS = frozenset({ReduceOp.SUM, ReduceOp.PROD, ReduceOp.MAX, ReduceOp.MIN})
FEW_OUTPUTS = 256  # at least this many outputs keep the GPU's SMs busy unsplit (2 per SM on a 132-SM part)
MIN_RNUMEL = 16384  # shorter rows: one program walks them fast enough
TARGET_PROGRAMS = 1024  # outputs x splits aimed at
MIN_CHUNK = 2048  # elements a first-stage program reduces at least (one looped block of the tile rule)


def split_count(xnumel: int, rnumel: int) -> int:
    """How many chunks a reduction of ``xnumel`` outputs over ``rnumel`` elements is split into: the
    largest power of two that divides ``rnumel``, keeps outputs x chunks within ``TARGET_PROGRAMS``
    and chunks at least ``MIN_CHUNK`` long; 1 (no split) for many outputs or short rows."""
    if xnumel >= FEW_OUTPUTS or rnumel < MIN_RNUMEL:
        return 1
    splits = 1
    while (xnumel * splits * 2 <= TARGET_PROGRAMS and rnumel % (splits * 2) == 0
           and rnumel // (splits * 2) >= MIN_CHUNK):
        splits *= 2
    return splits


def split_reduction(ctx: GraphLowering, value: TensorValue, index: list[Expr], out_shape: tuple[int, ...],
                    rranges: tuple[int, ...], op: ReduceOp, acc: torch.dtype, out_dtype: torch.dtype
                    ) -> Strided | None:
    """``value`` read at ``index`` (XVARs over ``out_shape``, RVARs over ``rranges``), reduced in two
    stages when the renderer splits reductions and this one qualifies (module docstring); else None."""
    if not ctx.capabilities.split_reductions or op not in SPLIT_OPS or not all_static((*out_shape, *rranges)):
        return None
    rnumel, xnumel = math.prod(rranges), math.prod(out_shape)
    splits = split_count(xnumel, rnumel)
    if splits == 1:
        return None
    chunk = rnumel // splits
    # the flattened reduced position of (chunk s = the new last output dim, element j of it), unravelled
    # row-major over the reduced dims
    flat = ir.binary(Op.ADD, ir.binary(Op.MUL, ir.xvar(len(out_shape)), ir.const(chunk, ir.INDEX_DTYPE)),
                     ir.rvar(0))
    unravelled: dict[Expr, Expr] = {}
    inner = rnumel
    for j, n in enumerate(rranges):
        inner //= n
        position = ir.binary(Op.FLOORDIV, flat, ir.const(inner, ir.INDEX_DTYPE)) if inner > 1 else flat
        unravelled[ir.rvar(j)] = position if j == 0 else ir.binary(Op.MOD, position, ir.const(n, ir.INDEX_DTYPE))
    body = read(value, [unravelled.get(e, e) for e in index])
    partial = ctx.reduce_body((*out_shape, splits), (chunk,), body, op, acc, acc)
    kept = [ir.xvar(d) if n != 1 else ir.const(0, ir.INDEX_DTYPE) for d, n in enumerate(out_shape)]
    return ctx.reduce_body(out_shape, (splits,), read(partial, [*kept, ir.rvar(0)]), op, acc, out_dtype)

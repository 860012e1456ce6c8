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

A reduction that walks columns (``column_reads``: its reads step 1 along an output and further
along the rows, as a bias's or a norm weight's gradient summed over the tokens of a row-major
activation) is split too, whatever its output count: a program per output reads one element of each
row it walks, a 4-byte use of a 32-byte memory sector (bert_base's training step spent 3.8 ms of
its backward in such sums on the H200, against Inductor's 0.26 ms). Split into chunks of
``COLUMN_CHUNK`` rows, with the chunk as the partial buffer's outermost dim, the first stage is a
short column reduction over outputs that are neighbours in memory, so a program's tile spans whole
sectors of neighbouring outputs (``compiler.codegen.triton_tiles``: a persistent row of 64 takes 32
or 64 outputs a program); the second reduces the chunks' partial results the same way, split
again while it is long. A reduction that also reads rows (a layer norm's weight gradient over a
channels-last gradient and its NCHW input, swin_tiny's first norm after the patch convolution) is
split so where it would be split anyway (few outputs, long rows): the row read then covers a
chunk's 64 contiguous elements, where the row split's program, walking one output's whole row,
used an eighth of every sector the column reads touched (0.55 ms of its training step on an H100).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch

from compiler import ir
from compiler.index_terms import simplify_loads
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
# Column reductions: rows reduced a chunk. Up to COLUMN_MIN_RNUMEL rows the persistent tile already
# spans neighbouring outputs; a chunk is the largest power of two dividing the rows, from
# MIN_COLUMN_CHUNK to COLUMN_CHUNK, and the partial results are split again while they are long. A
# chunk of 64 rows takes 8 neighbouring float32 outputs a program (``triton_tiles``: 512 elements a
# persistent program), a 32-byte sector; longer chunks took fewer, 2 at 256 rows. (Chunks grew to
# keep at most 2048 of them: channels-last statistics over 32x112x112 rows then read 8 bytes a row, 111
# us on an H100 where chunks of 64 took 46 and Inductor's kernel 38; the batch-norm gradient's sums 263
# against 114.)
COLUMN_MIN_RNUMEL = 1024
COLUMN_CHUNK = 64
MIN_COLUMN_CHUNK = 16


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


def column_chunk(rnumel: int) -> int:
    """Rows a first-stage program of a column reduction over ``rnumel`` rows reduces (module
    docstring); 0: not split (short rows, or too few factors of two to cut them evenly)."""
    if rnumel < COLUMN_MIN_RNUMEL:
        return 0
    chunk = min(rnumel & -rnumel, COLUMN_CHUNK)  # the largest power of two dividing it, capped
    return chunk if chunk >= MIN_COLUMN_CHUNK else 0


def column_reads(body: Expr) -> tuple[bool, bool]:
    """Whether some read of a reduction's ``body`` walks columns (it moves with the outputs and the
    reduced dims, stepping 1 along an output dim and further along every reduced one), and whether
    some read walks rows (it steps 1 along a reduced dim, or is not affine in them). A read that
    moves with the reduced dims alone, a row's mean or scale, is one value for a program's outputs
    and counts as neither."""
    columns = rows = False
    for load in ir.loads(body):
        affine = ir.to_affine(load.src[0])
        if affine is None:
            rows = rows or any(e.op is Op.RVAR for e in load.src[0].walk())
            continue
        terms = [(t.op, c if isinstance(c, int) else None) for t, c in affine.items() if t is not None and c]
        rsteps = [c for op, c in terms if op is Op.RVAR]
        if not rsteps or all(op is Op.RVAR for op, _ in terms):
            continue
        if any(c is None or abs(c) == 1 for c in rsteps):
            rows = True
        else:
            columns = columns or (Op.XVAR, 1) in terms
    return columns, rows


def split_reduction(ctx: GraphLowering, value: TensorValue, index: list[Expr], out_shape: tuple[int, ...],
                    rranges: tuple[int, ...], op: ReduceOp, acc: torch.dtype, out_dtype: torch.dtype
                    ) -> Strided | None:
    """``value`` read at ``index`` (XVARs over ``out_shape``, RVARs over ``rranges``), reduced in two
    stages when the renderer splits reductions and this one qualifies (module docstring); else None."""
    if not ctx.capabilities.split_reductions or op not in SPLIT_OPS or not all_static((*out_shape, *rranges)):
        return None
    rnumel, xnumel = math.prod(rranges), math.prod(out_shape)
    splits = split_count(xnumel, rnumel)
    chunk = column_chunk(rnumel)  # (cheap: the body is read only for rows long enough to split)
    if chunk:
        columns, rows = column_reads(read(value, index))
        if not columns or (rows and splits == 1):
            chunk = 0
    if chunk:
        return _split(ctx, value, index, out_shape, rranges, op, acc, out_dtype, chunk, columns=True)
    if splits == 1:
        return None
    return _split(ctx, value, index, out_shape, rranges, op, acc, out_dtype, rnumel // splits, columns=False)


def _split(ctx: GraphLowering, value: TensorValue, index: list[Expr], out_shape: tuple[int, ...],
           rranges: tuple[int, ...], op: ReduceOp, acc: torch.dtype, out_dtype: torch.dtype, chunk: int,
           columns: bool) -> Strided:
    """The two stages over chunks of ``chunk`` elements: the chunk is the partial buffer's last dim,
    or its first with ``columns`` (then the outputs stay the first stage's innermost dims, and the
    second stage, a column reduction itself, may split again)."""
    rnumel = math.prod(rranges)
    splits = rnumel // chunk
    chunk_dim = 0 if columns else len(out_shape)
    if columns:  # the output dims move one place in: XVAR(0) is the chunk
        shifted = {ir.xvar(d): ir.xvar(d + 1) for d in range(len(out_shape))}
        index = [shifted.get(e, e) for e in index]
    # the flattened reduced position of (chunk s = the new output dim, element j of it), unravelled
    # row-major over the reduced dims
    flat = ir.binary(Op.ADD, ir.binary(Op.MUL, ir.xvar(chunk_dim), ir.const(chunk, ir.INDEX_DTYPE)), ir.rvar(0))
    unravelled: dict[Expr, Expr] = {}
    inner = rnumel
    for j, n in enumerate(rranges):
        inner //= n
        position = ir.binary(Op.FLOORDIV, flat, ir.const(inner, ir.INDEX_DTYPE)) if inner > 1 else flat
        unravelled[ir.rvar(j)] = position if j == 0 else ir.binary(Op.MOD, position, ir.const(n, ir.INDEX_DTYPE))
    # (positions of dims that nest in memory merged: no division or remainder where none is needed)
    body = simplify_loads(read(value, [unravelled.get(e, e) for e in index]))
    kept = [ir.xvar(d) if n != 1 else ir.const(0, ir.INDEX_DTYPE) for d, n in enumerate(out_shape)]
    if not columns:
        partial = ctx.reduce_body((*out_shape, splits), (chunk,), body, op, acc, acc)
        return ctx.reduce_body(out_shape, (splits,), read(partial, [*kept, ir.rvar(0)]), op, acc, out_dtype)
    partial = ctx.reduce_body((splits, *out_shape), (chunk,), body, op, acc, acc)
    second = [ir.rvar(0), *kept]
    return (split_reduction(ctx, partial, second, out_shape, (splits,), op, acc, out_dtype)
            or ctx.reduce_body(out_shape, (splits,), read(partial, second), op, acc, out_dtype))

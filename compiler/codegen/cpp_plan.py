"""The C++ writer's plan for a kernel, as pure data: tuning constants, and for a reduction
its layout, passes and chunks (``plan_reduction``), decided before any line is emitted.

Layouts: ``window`` (a few elements per output point: unrolled, vectorized across points),
``column`` (a reduction over a leading dim: vectorized across outer points), ``split`` (few
outer points and long rows: chunks reduced in parallel, then folded in order) and ``rows``
(one outer point per iteration, the reductions in passes; see ``compiler.codegen.cpp``).
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass

import torch

from compiler import ir
from compiler.codegen.cpp_lang import compute_dtype
from compiler.ir import Expr, Op, ReduceOp
from compiler.scheduler import Kernel, Level, Store

# Work (elements x ops) below which a kernel runs on one thread: an OpenMP fork/join
# costs a few microseconds, about what one core needs for this much work.
PARALLEL_MIN_WORK = 1 << 16
LANE_BYTES = 128  # reduction lanes per accumulator: 32 floats / 16 doubles (several vector registers)
# Rows of at least LONG_ROW elements get twice the lanes: more independent add chains hide the
# add latency (layer_norm 8192x1024: 1.72 -> 1.48 ms); shorter rows lose more to the wider fold
# (sum over rows of 64: 1.62 -> 1.93 ms).
LONG_ROW = 256
LONG_ROW_LANE_BYTES = 256
CASCADE_BLOCK = 256  # lane iterations between flushes of a float sum into its cascade
INNER_TILE = 1 << 14  # a long innermost dim is split into tiles when the outer dims are too few to share
# A reduction at least this long with fewer outer points than SPLIT_MAX_XNUMEL is cut into
# chunks reduced in parallel (at most SPLIT_MAX_CHUNKS; fixed at render time, not by the
# thread count, so results do not depend on it).
SPLIT_MIN_RNUMEL = 1 << 16
SPLIT_MAX_CHUNKS = 64
SPLIT_MAX_XNUMEL = 8
# xr-level values worth keeping in a row buffer rather than recomputing in a later pass
EXPENSIVE = frozenset({Op.EXP, Op.LOG, Op.SIN, Op.COS, Op.ERF, Op.SQRT, Op.RSQRT, Op.DIV})
ROW_BUFFER_BYTES = 64 * 1024  # on the stack of each thread, per buffered value
# Fewer outer points than this leave threads idle, so a long innermost dim is tiled. A constant,
# not the thread count: the source (and the cache key) must not depend on the thread setting.
TILE_MAX_OUTER = 16
# Reductions over at most this many elements per output point take the window layout
# (pooling windows, rows of a few elements).
WINDOW_MAX_RNUMEL = 16  # measured on contiguous rows: 2-3x faster than lanes at 16, mixed at 32, slower at 64


def _stride_along(index: Expr, var: Expr) -> int | None:
    """The coefficient of ``var`` in an affine ``index``; None when the index is not affine."""
    aff = ir.to_affine(index)
    return None if aff is None else aff.get(var, 0)


def _size(dtype: torch.dtype) -> int:
    return 1 if dtype == torch.bool else dtype.itemsize


def _cascaded(e: Expr) -> bool:
    return e.arg is ReduceOp.SUM and compute_dtype(e.dtype).is_floating_point


class Layout(str, enum.Enum):
    WINDOW = "window"
    COLUMN = "column"
    SPLIT = "split"
    ROWS = "rows"


@dataclass(frozen=True)
class ReductionPlan:
    layout: Layout
    reduces: tuple[Expr, ...]  # every REDUCE of the kernel, inner reductions first
    passes: tuple[tuple[tuple[Expr, ...], tuple[Store, ...]], ...]  # per pass: its reductions, xr stores
    x_stores: tuple[Store, ...]  # stores once per outer point, after the passes
    split: int = 1  # chunks of the reduced space (layout split)


def plan_reduction(k: Kernel, live: list[Store], is_xr: Callable[[Expr], bool]) -> ReductionPlan:
    """Passes: a reduction joins the first pass after every reduction it reads; an xr-level store
    joins the pass after the reductions it reads. Then the cheapest layout that fits."""
    reduces: list[Expr] = []
    seen: set[Expr] = set()
    for s in live:
        for e in s.value.walk():
            if e.op is Op.REDUCE and e not in seen:
                seen.add(e)
                reduces.append(e)
    depth: dict[Expr, int] = {}
    for e in reduces:  # walk() yields operands first, so inner reductions come first
        depth[e] = 1 + max((depth[d] for d in e.src[0].walk() if d.op is Op.REDUCE), default=0)

    def pass_of(s: Store) -> int:
        return 1 + max((depth[d] for d in s.value.walk() if d.op is Op.REDUCE), default=0)

    xr_stores = [s for s in live if s.level == Level.XR or is_xr(s.value)]
    x_stores = tuple(s for s in live if s not in xr_stores)
    count = max([*depth.values(), *(pass_of(s) for s in xr_stores)], default=0)
    passes = tuple((tuple(e for e in reduces if depth[e] == p),
                    tuple(s for s in xr_stores if pass_of(s) == p)) for p in range(1, count + 1))
    one_pass = count == 1 and not xr_stores
    if one_pass and k.ranges and k.rnumel <= WINDOW_MAX_RNUMEL:
        return ReductionPlan(Layout.WINDOW, tuple(reduces), passes, x_stores)
    if one_pass and column_layout(k, live):
        return ReductionPlan(Layout.COLUMN, tuple(reduces), passes, x_stores)
    split = split_count(k) if one_pass else 1
    if split > 1:
        return ReductionPlan(Layout.SPLIT, tuple(reduces), passes, x_stores, split)
    return ReductionPlan(Layout.ROWS, tuple(reduces), passes, x_stores)


def split_count(k: Kernel) -> int:
    """Chunks of the reduced space reduced in parallel: a power of two, or 1 when there are
    enough outer points to share or the rows are short."""
    if k.xnumel >= SPLIT_MAX_XNUMEL or k.rnumel < SPLIT_MIN_RNUMEL:
        return 1
    chunks = min(SPLIT_MAX_CHUNKS, k.rnumel // (SPLIT_MIN_RNUMEL // 4), k.rranges[0])
    return 1 << (chunks.bit_length() - 1) if chunks >= 2 else 1


def column_layout(k: Kernel, live: list[Store]) -> bool:
    """The inputs are contiguous along the last outer dim and not along the reduced ones
    (a reduction over a leading dim): vectorize across outer points instead of lanes."""
    if not k.ranges or k.ranges[-1] < 4:
        return False
    xl, rl = ir.xvar(len(k.ranges) - 1), ir.rvar(len(k.rranges) - 1)
    affs = [ir.to_affine(e.src[0]) for s in live for e in ir.loads(s.value)]
    along_x = any(a is not None and a.get(xl, 0) == 1 for a in affs)
    along_r = any(a is not None and a.get(rl, 0) == 1 for a in affs)
    return along_x and not along_r

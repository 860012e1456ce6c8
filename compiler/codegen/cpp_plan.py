"""The C++ writer's plan for a reduction kernel, as pure data decided before any line is
emitted: its layout, its passes over the reduced dims with their lanes and cascades, its row
buffers and its chunks (``plan_reduction``), plus the writer's tuning constants.

Layouts: ``window`` (a few elements per output point: unrolled, vectorized across points),
``column`` (a reduction over a leading dim: vectorized across outer points), ``split`` (few
outer points and long rows: chunks reduced in parallel, then folded in order) and ``rows``
(one outer point per iteration, the reductions in passes; see ``compiler.codegen.cpp``).
The emitters (``compiler.codegen.cpp_reduction``) render a plan and decide nothing.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass

import torch

from compiler import ir, sizes
from compiler.codegen.cpp_lang import VECTOR_MATH
from compiler.codegen.shared import ExprLevels, compute_dtype
from compiler.ir import Expr, Op, ReduceOp
from compiler.scheduler import Kernel, Level, Store

# Work (elements x ops) below which a kernel runs on one thread: an OpenMP fork/join
# costs a few microseconds, about what one core needs for this much work.
PARALLEL_MIN_WORK = 1 << 16
LANE_BYTES = 128  # reduction lanes per accumulator: 32 floats / 16 doubles (several vector registers)
# Rows of at least LONG_ROW elements get twice the lanes: more independent add chains hide the
# add latency (layer_norm 8192x1024: 1.72 -> 1.48 ms; kernel alone 0.89x -> 1.18x eager); shorter
# rows lose more to the wider fold (sum over rows of 64: 1.62 -> 1.93 ms; layer_norm 32768x256:
# 1.02-1.04x eager with 32 lanes, 0.91-0.92x with 64; softmax 32768x256 0.97-0.98x against 1.00;
# 512-wide rows alike either way).
LONG_ROW = 512
LONG_ROW_LANE_BYTES = 256
# A pass whose reduced values go through the prelude's vectorized exp, erf or log (20-30 vector
# instructions an element) keeps one vector of lanes: the math hides the add latency that more lanes
# are for, and with LONG_ROW_LANE_BYTES the body was unrolled four times and spilled its constants and
# accumulators (softmax 8192x1024's exp-and-sum pass, kernel alone, 2-core Xeon, three processes:
# 0.90-1.05x eager with 64 lanes, 0.97-1.05x with 32, 1.05-1.19x with 16).
MATH_LANE_BYTES = 64
# Lane iterations between flushes of a float sum into its cascade: 16, as ATen's cascade sum steps,
# so no lane adds more than 16 values in a row (256 let a sum of 3136 sin values, 49 a lane, err
# 3.6e-5 where eager's is 7.7e-6: fuzzer, crucible-cpp, seed 27; now 9.6e-6). Costs the CPU's
# softmax/layer_norm 8192-wide rows 5-10% (noisy machine; harness/bench/RESULTS.md).
CASCADE_BLOCK = 16
# The prelude's SumCascade adds a level every CASCADE_FAN pushes (its FAN). An accumulation of at most
# that many pushes (the final one included) never leaves the first level, so it is spelled as a
# second lane array beside the first (``Pass.short_cascade``): the same sums, bit for bit, where the
# object's level arrays and counters kept g++ from holding the lanes in registers (softmax 8192x1024's
# exp-and-sum pass with 16 lanes, kernel alone, 2-core Xeon: 0.85-1.01x eager as a SumCascade, 1.00-1.04x
# as two arrays).
CASCADE_FAN = 16
INNER_TILE = 1 << 14  # a long innermost dim is split into tiles when the outer dims are too few to share
# A reduction at least this long with fewer outer points than SPLIT_MAX_XNUMEL is cut into
# chunks reduced in parallel (at most SPLIT_MAX_CHUNKS; fixed at render time, not by the
# thread count, so results do not depend on it).
SPLIT_MIN_RNUMEL = 1 << 16
SPLIT_MAX_CHUNKS = 64
SPLIT_MAX_XNUMEL = 8
# xr-level values worth keeping in a row buffer rather than recomputing in a later pass
EXPENSIVE = frozenset({Op.EXP, Op.EXP2, Op.LOG2, Op.LOG10, Op.LOG, Op.SIN, Op.COS, Op.ERF, Op.SQRT, Op.RSQRT, Op.DIV})
ROW_BUFFER_BYTES = 64 * 1024  # on the stack of each thread, per buffered value
# Fewer outer points than this leave threads idle, so a long innermost dim is tiled. A constant,
# not the thread count: the source (and the cache key) must not depend on the thread setting.
TILE_MAX_OUTER = 16
# Bytes of accumulators per tile of the column layout when there are tiles enough for the threads.
# A tile walks down the rows reading its width of each: 128 bytes a row (32 floats) ran a column
# sum of 4096x4096 floats in 25-35 ms at 2 threads, 1 KiB a row in 12-16 ms (standalone, loaded
# machine): each row of a tile is a new page and a new prefetch stream, so wider tiles read more
# per page walk. The sum's order per column (row by row, cascaded) does not depend on the width.
COLUMN_TILE_BYTES = 1024
# Rows layout with several passes: one pass prefetches the rows PREFETCH_ROWS_AHEAD ahead while
# the passes compute from L1. The hardware prefetcher stops at page ends, and each pass after the
# first leaves memory idle: a layer norm of 8192x1024 floats (three passes) ran 0.91x eager's time
# without it and 1.00-1.02x with it, a softmax of 1024x8192 0.93x -> 1.09x (2 threads, kernel
# alone; 1-6 rows ahead measured alike). The prefetches go in the pass computing the most math
# functions (PREFETCH_HOST_OPS; the first pass when none does): there the requests overlap tens
# of instructions an element instead of crowding a pass that only streams its row. Softmax
# 8192x1024 float32, the prefetches in its exp pass rather than its max pass: 0.84-0.88x the
# kernel's time at 1 thread, 0.89-0.92x at 2; 1024x8192 0.74x at 1 and 2 (kernel alone, both
# orders, this session's 2-core AMD EPYC). A layer norm (no math function) ran 1.13x slower with
# them in its second pass and 1.44x in its third: cheap passes keep them in the first.
PREFETCH_ROWS_AHEAD = 2
PREFETCH_MIN_ROW_BYTES = 1024
PREFETCH_HOST_OPS = (EXPENSIVE - {Op.SQRT, Op.RSQRT, Op.DIV}) | {Op.POW}  # the math functions
# Reductions over at most this many elements per output point take the window layout
# (pooling windows, rows of a few elements).
WINDOW_MAX_RNUMEL = 16  # measured on contiguous rows: 2-3x faster than lanes at 16, mixed at 32, slower at 64


def stride_along(index: Expr, var: Expr) -> int | None:
    """The coefficient of ``var`` in an affine ``index``; None when the index is not affine."""
    aff = ir.to_affine(index)
    return None if aff is None else aff.get(var, 0)


def value_bytes(dtype: torch.dtype) -> int:
    return 1 if dtype == torch.bool else dtype.itemsize


def cascaded(e: Expr) -> bool:
    """A float sum: its lanes flush into a cascade (log-like error growth on long rows)."""
    return e.arg is ReduceOp.SUM and compute_dtype(e.dtype).is_floating_point


class Layout(str, enum.Enum):
    WINDOW = "window"
    COLUMN = "column"
    SPLIT = "split"
    ROWS = "rows"


@dataclass(frozen=True)
class Pass:
    """One loop over the reduced dims: the reductions whose inputs are ready and the xr-level
    stores it computes, with the accumulator slots each reduction keeps (``lanes``: along the
    innermost reduced dim in rows/split, the outer points of a tile in column, 1 in window) and
    whether its float sums flush their lanes into a cascade (rows long enough to need it)."""

    reduces: tuple[Expr, ...]
    stores: tuple[Store, ...]
    lanes: int
    cascade: bool
    short_cascade: bool = False  # the cascade never leaves its first level (CASCADE_FAN)


@dataclass(frozen=True)
class RowBuffer:
    """An expensive xr-level value computed in pass ``home`` and read again by a later pass: kept
    per outer point in the row of output store ``scratch`` (until that pass overwrites it), or in
    a per-thread stack buffer of ``rnumel`` values when ``scratch`` is None."""

    value: Expr
    home: int  # 1-based pass number
    scratch: Store | None


@dataclass(frozen=True)
class ReductionPlan:
    layout: Layout
    reduces: tuple[Expr, ...]  # every REDUCE of the kernel, inner reductions first
    passes: tuple[Pass, ...]
    x_stores: tuple[Store, ...]  # stores once per outer point, after the passes
    row_buffers: tuple[RowBuffer, ...] = ()  # rows layout only, in declaration order
    prefetch: tuple[Expr, ...] = ()  # rows layout: first-pass loads prefetched PREFETCH_ROWS_AHEAD rows ahead
    prefetch_pass: int = 1  # the 1-based pass that issues them (``prefetch_host``)
    split: int = 1  # chunks of the reduced space (layout split)
    chunk: int = 0  # elements of the first reduced dim per chunk (layout split)


def plan_reduction(k: Kernel, levels: ExprLevels | None = None) -> ReductionPlan:
    """Passes: a reduction joins the first pass after every reduction it reads; an xr-level store
    joins the pass after the reductions it reads. Then the cheapest layout that fits, the lanes
    of each pass and, for rows, the values kept in row buffers."""
    levels = levels if levels is not None else ExprLevels()
    live = k.live_stores()
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

    xr_stores = [s for s in live if s.level == Level.XR or levels.is_xr(s.value)]
    x_stores = tuple(s for s in live if s not in xr_stores)
    count = max([*depth.values(), *(pass_of(s) for s in xr_stores)], default=0)
    groups = [(tuple(e for e in reduces if depth[e] == p), tuple(s for s in xr_stores if pass_of(s) == p))
              for p in range(1, count + 1)]
    one_pass = count == 1 and not xr_stores
    if one_pass and k.ranges and sizes.within(k.rnumel, WINDOW_MAX_RNUMEL):
        passes = tuple(Pass(r, s, 1, False) for r, s in groups)
        return ReductionPlan(Layout.WINDOW, tuple(reduces), passes, x_stores)
    if one_pass and column_layout(k, live):
        cascade = k.rnumel > CASCADE_BLOCK and any(map(cascaded, reduces))  # one pass: every reduction
        passes = tuple(Pass(r, s, tile_width(k, r), cascade, cascade and _short_cascade(k.rnumel))
                       for r, s in groups)
        return ReductionPlan(Layout.COLUMN, tuple(reduces), passes, x_stores)
    split = split_count(k) if one_pass else 1
    passes = tuple(row_pass(k, r, s, split) for r, s in groups)
    if split > 1:
        return ReductionPlan(Layout.SPLIT, tuple(reduces), passes, x_stores, split=split,
                             chunk=chunk_size(k, split, passes[0].lanes))
    row_buffers = plan_row_buffers(k, passes, levels)
    return ReductionPlan(Layout.ROWS, tuple(reduces), passes, x_stores, row_buffers, prefetch=prefetched(k, passes),
                         prefetch_pass=prefetch_host(passes, row_buffers, levels))


def prefetched(k: Kernel, passes: tuple[Pass, ...]) -> tuple[Expr, ...]:
    """The first pass's loads worth prefetching rows ahead (``PREFETCH_ROWS_AHEAD``): with several
    passes, one outer dim and one static reduced dim of at least PREFETCH_MIN_ROW_BYTES, the loads
    that read along the row (stride 1) and step a constant number of elements from row to row."""
    if len(passes) < 2 or len(k.ranges) != 1 or len(k.rranges) != 1 or not isinstance(k.rranges[0], int):
        return ()
    xvar, rvar = ir.xvar(0), ir.rvar(0)
    found: dict[Expr, None] = {}
    for e in passes[0].reduces:
        for load in e.src[0].walk():
            if load.op is not Op.LOAD or load in found:
                continue
            row_step = stride_along(load.src[0], xvar)
            if (stride_along(load.src[0], rvar) == 1 and isinstance(row_step, int) and row_step != 0
                    and k.rranges[0] * value_bytes(load.dtype) >= PREFETCH_MIN_ROW_BYTES):
                found[load] = None
    return tuple(found)


def prefetch_host(passes: tuple[Pass, ...], row_buffers: tuple[RowBuffer, ...], levels: ExprLevels) -> int:
    """The 1-based pass whose loop issues the row prefetches: the one computing the most
    PREFETCH_HOST_OPS per element (values along the row only: a value kept in a row buffer counts
    in its home pass, a row's statistic such as the log of its sum not at all); the earliest on a
    tie, the first when none has any."""
    def math_ops(number: int, p: Pass) -> int:
        kept = {rb.value for rb in row_buffers if rb.home != number}
        seen: set[Expr] = set()
        stack = [e.src[0] for e in p.reduces] + [s.value for s in p.stores]
        while stack:
            e = stack.pop()
            if e in seen or e in kept or not levels.is_xr(e):
                continue
            seen.add(e)
            stack.extend(e.src)
        return sum(e.op in PREFETCH_HOST_OPS for e in seen)

    counts = [math_ops(number, p) for number, p in enumerate(passes, start=1)]
    return 1 + counts.index(max(counts)) if counts else 1


def _widest(reduces: tuple[Expr, ...]) -> int:
    """Bytes of the widest accumulator or input of ``reduces`` (1 when there are none)."""
    return max([1] + [value_bytes(compute_dtype(e.dtype)) for e in reduces]
               + [value_bytes(compute_dtype(e.src[0].dtype)) for e in reduces])


def row_pass(k: Kernel, reduces: tuple[Expr, ...], stores: tuple[Store, ...], split: int) -> Pass:
    """A pass of the rows or split layout: lanes along the innermost reduced dim; a cascade when
    each lane sees more than CASCADE_BLOCK elements (of its chunk)."""
    lanes = row_lanes(k, reduces)
    # symbolic rows (``compiler.sizes``) may be long: they cascade
    long_rows = not isinstance(k.rnumel, int) or k.rnumel // split > CASCADE_BLOCK * lanes
    cascade = long_rows and any(map(cascaded, reduces))
    return Pass(reduces, stores, lanes, cascade, cascade and _short_cascade(_lane_iterations(k, split, lanes)))


def _lane_iterations(k: Kernel, split: int, lanes: int) -> int | None:
    """At most how many times a rows/split pass's lane loop runs for one accumulation (its flush
    counter's count; a chunk's under split); None for symbolic sizes."""
    rr = k.rranges
    if not all(isinstance(r, int) for r in rr):
        return None
    first = -(-rr[0] // split)
    if len(rr) == 1:
        return -(-first // lanes)
    return first * math.prod(rr[1:-1]) * -(-rr[-1] // lanes)


def _short_cascade(iterations: object) -> bool:
    """Whether a cascade flushed every CASCADE_BLOCK of ``iterations`` lane iterations, plus the final
    push, stays within its first level (``CASCADE_FAN`` pushes); never for a symbolic count."""
    return isinstance(iterations, int) and iterations // CASCADE_BLOCK + 1 <= CASCADE_FAN


def row_lanes(k: Kernel, reduces: tuple[Expr, ...]) -> int:
    """Accumulators per reduction along the innermost reduced dim: LANE_BYTES (LONG_ROW_LANE_BYTES
    on long rows) of the widest accumulator, at most the dim's size rounded down to a power of two."""
    inner = k.rranges[-1]
    if not isinstance(inner, int):  # a symbolic row: the short rows' lanes, the tail loop takes the rest
        return LANE_BYTES // _widest(reduces)
    lane_bytes = LONG_ROW_LANE_BYTES if inner >= LONG_ROW else LANE_BYTES
    if _vector_math(reduces):
        lane_bytes = MATH_LANE_BYTES
    return min(lane_bytes // _widest(reduces), 1 << (inner.bit_length() - 1))


def _vector_math(reduces: tuple[Expr, ...]) -> bool:
    """Whether the values ``reduces`` fold in this pass go through a float32 exp, erf or log (the
    prelude's vectorized math; ``cpp_lang.VECTOR_MATH``), not counting earlier passes' reductions."""
    stack, seen = [e.src[0] for e in reduces], set()
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        if node.op in VECTOR_MATH and node.dtype == torch.float32:
            return True
        if node.op is not Op.REDUCE:
            stack.extend(node.src)
    return False


def tile_width(k: Kernel, reduces: tuple[Expr, ...]) -> int:
    """Outer points per tile of the column layout (one accumulator each), a power of two: as wide as
    COLUMN_TILE_BYTES of the widest accumulator while at least TILE_MAX_OUTER tiles remain to share
    among threads, at least LANE_BYTES, at most the last outer dim."""
    size, widest = k.ranges[-1], _widest(reduces)
    share = math.prod(k.ranges) // TILE_MAX_OUTER
    wide = min(COLUMN_TILE_BYTES // widest, 1 << max(0, share.bit_length() - 1))
    return min(max(LANE_BYTES // widest, wide), 1 << (size.bit_length() - 1))


def chunk_size(k: Kernel, split: int, lanes: int) -> int:
    """Elements of the first reduced dim per chunk; a whole number of lanes when it is the only one."""
    chunk = -(-k.rranges[0] // split)
    return -(-chunk // lanes) * lanes if len(k.rranges) == 1 else chunk


def split_count(k: Kernel) -> int:
    """Chunks of the reduced space reduced in parallel: a power of two, or 1 when there are
    enough outer points to share or the rows are short."""
    if not sizes.all_static([k.xnumel, k.rnumel]) or k.xnumel >= SPLIT_MAX_XNUMEL or k.rnumel < SPLIT_MIN_RNUMEL:
        return 1
    chunks = min(SPLIT_MAX_CHUNKS, k.rnumel // (SPLIT_MIN_RNUMEL // 4), k.rranges[0])
    return 1 << (chunks.bit_length() - 1) if chunks >= 2 else 1


def column_layout(k: Kernel, live: list[Store]) -> bool:
    """The inputs are contiguous along the last outer dim and not along the reduced ones
    (a reduction over a leading dim): vectorize across outer points instead of lanes. A load that
    does not move with the last outer dim (one value a row: a norm's mean and rstd in its weight
    gradient) is the same for every point of a tile and does not count as contiguous along the
    reduced dim: counted, it put a layer norm backward's column sums into the rows layout, whose
    lanes read the [rows, 256] gradient 256 floats apart, unvectorized (7x slower on the CPU)."""
    if not k.ranges or not sizes.all_static(k.ranges + k.rranges) or k.ranges[-1] < 4:
        return False  # symbolic sizes take the rows layout
    xl, rl = ir.xvar(len(k.ranges) - 1), ir.rvar(len(k.rranges) - 1)
    affs = [ir.to_affine(e.src[0]) for s in live for e in ir.loads(s.value)]
    along_x = any(a is not None and a.get(xl, 0) == 1 for a in affs)
    along_r = any(a is not None and a.get(rl, 0) == 1 and a.get(xl, 0) != 0 for a in affs)
    return along_x and not along_r


def plan_row_buffers(k: Kernel, passes: tuple[Pass, ...], levels: ExprLevels) -> tuple[RowBuffer, ...]:
    """Keep expensive xr-level values (exp, log, ...) that a later pass needs again in a row
    buffer per outer point instead of recomputing them (softmax: exp(x - max) from the sum pass
    to the store pass). Cheap values are recomputed (rows stay in cache)."""
    if not isinstance(k.rnumel, int):
        return ()  # rows of symbolic length: values are recomputed (no stack buffer of unknown size)
    seen_in = [xr_nodes([e.src[0] for e in p.reduces] + [s.value for s in p.stores], levels) for p in passes]
    budget = 4 * ROW_BUFFER_BYTES  # all buffers of a kernel, per thread
    taken: set[str] = set()
    out: dict[Expr, RowBuffer] = {}
    digests: dict = {}
    for p, nodes in enumerate(seen_in, start=1):
        for n in sorted(nodes, key=lambda e: ir.fingerprint(e, digests)):  # a stable order: same source every time
            size = k.rnumel * value_bytes(compute_dtype(n.dtype))
            if size <= min(ROW_BUFFER_BYTES, budget) and n.op in EXPENSIVE and n not in out \
                    and any(n in later for later in seen_in[p:]):
                last_use = max(q for q in range(p + 1, len(passes) + 1) if n in seen_in[q - 1])
                scratch = scratch_store(k, n, passes[last_use - 1], levels, taken)
                if scratch is not None:  # the output row itself holds the value until overwritten
                    taken.add(scratch.buffer)
                else:
                    budget -= size
                out[n] = RowBuffer(n, p, scratch)
    return tuple(out.values())


def scratch_store(k: Kernel, n: Expr, last: Pass, levels: ExprLevels, taken: set[str]) -> Store | None:
    """A store of ``last``, the pass that last uses ``n``, whose row can hold ``n`` until then (what
    ATen's softmax does with its output): same dtype, written once per reduced element, its buffer
    not read by this kernel, and no reduction of that pass reading ``n``, nor a store after it unless
    its own value reads ``n`` (the pass evaluates its stores in order, each value once: a later
    store would read the row after this one overwrote it; fuzzer, crucible-cpp, seed 261: two layer
    norms over one input, the second weighted by a third's output). Saves a row buffer's worth of
    cache traffic."""
    if compute_dtype(n.dtype) != n.dtype or n in xr_nodes([e.src[0] for e in last.reduces], levels):
        return None
    live = k.live_stores()
    loaded = {e.arg for s in live for e in ir.loads(s.value)}
    for i, s in enumerate(last.stores):
        aff = ir.to_affine(s.index)
        if s.value.dtype != n.dtype or s.buffer in taken or s.buffer in loaded or aff is None \
                or sum(1 for t in live if t.buffer == s.buffer) != 1:
            continue
        # a later store may read ``n`` if this one does: the pass then holds it in a register first
        if n not in xr_nodes([s.value], levels) and any(n in xr_nodes([t.value], levels) for t in last.stores[i + 1:]):
            continue
        if all(aff.get(ir.rvar(d), 0) != 0 for d, size in enumerate(k.rranges) if size > 1):
            return s
    return None


def xr_nodes(roots: list[Expr], levels: ExprLevels) -> set[Expr]:
    """The xr-level nodes a pass evaluates for ``roots`` (not looking inside reductions)."""
    out: set[Expr] = set()
    stack = list(roots)
    while stack:
        e = stack.pop()
        if e in out or e.op is Op.REDUCE or not levels.is_xr(e):
            continue
        out.add(e)
        stack.extend(e.src)
    return out

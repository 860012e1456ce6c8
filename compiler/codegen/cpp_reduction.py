"""The C++ writer's reduction emitters: each layout of a ``cpp_plan.ReductionPlan`` rendered as
loop nests with lane accumulators, cascaded float sums, row buffers and chunk folds.

The plan decides (layout, passes, lanes, cascades, row buffers, chunks); the emitters only spell
it, through an ``ExprWriter`` whose scopes they open and an ``Accumulator`` per reduction.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from compiler import ir
from compiler.codegen.cpp_accumulators import Accumulator, accumulators, flat_rindex
from compiler.codegen.cpp_expr import ExprWriter
from compiler.codegen.cpp_lang import FOLD, Scope, block, cvalue_type
from compiler.codegen.cpp_loops import parallel_if, x_nest
from compiler.codegen.shared import size_code, unravel, unravel_terms
from compiler.codegen.cpp_plan import (
    CASCADE_BLOCK,
    PARALLEL_MIN_WORK,
    PREFETCH_ROWS_AHEAD,
    Layout,
    Pass,
    ReductionPlan,
    stride_along,
)
from compiler.ir import Expr, ReduceOp
from compiler.scheduler import Store

# xr value -> (the pass computing it, its row buffer's name or the output store whose row holds it)
RowHomes = dict[Expr, tuple[int, "str | Store"]]


def emit_reduction(w: ExprWriter, plan: ReductionPlan) -> list[str]:
    """The body of a reduction kernel laid out as ``plan`` says."""
    return _LAYOUTS[plan.layout](w, plan)


def unravel_x(ranges: tuple[int, ...]) -> list[str]:
    """The outer indices of outer point ``xi``."""
    return [f"const int64_t x{i} = {code};" for i, code in enumerate(unravel("xi", ranges, "/"))]


def _rows(w: ExprWriter, plan: ReductionPlan) -> list[str]:
    """One outer point per iteration of a parallel loop; per point, the passes in order."""
    k = w.k
    xscope = Scope(w.root)
    w.xscope = w.scope = xscope
    homes: RowHomes = {}
    for rb in plan.row_buffers:
        if rb.scratch is not None:
            homes[rb.value] = (rb.home, rb.scratch)
            continue
        name = w.fresh("row")
        homes[rb.value] = (rb.home, name)
        xscope.lines.append(f"{cvalue_type(rb.value.dtype)} {name}[{k.rnumel}];")
    for number, p in enumerate(plan.passes, start=1):
        ahead = _prefetch_lines(w, plan.prefetch, p.lanes) if number == plan.prefetch_pass else []
        _fold(w, xscope, _emit_pass(w, p, number, homes, ahead=ahead))
    w.scope = xscope
    for s in plan.x_stores:
        w.store(s)
    w.scope, w.xscope = w.root, None
    if not k.ranges:
        return xscope.lines
    work = k.xnumel * k.rnumel * max(1, len(plan.reduces)) * len(plan.passes)
    if not isinstance(work, int):  # symbolic sizes: threads or not decided per call
        pragma = "#pragma omp parallel for schedule(static)" + parallel_if(work)
    else:
        pragma = "#pragma omp parallel for schedule(static)" if k.xnumel > 1 and work >= PARALLEL_MIN_WORK \
            else None
    return block(f"for (int64_t xi = 0; xi < {size_code(k.xnumel)}; ++xi)", unravel_x(k.ranges) + xscope.lines,
                 pragma)


def _window(w: ExprWriter, plan: ReductionPlan) -> list[str]:
    """Short reductions (pooling windows, a few rows): the outer dims as a loop nest like a
    pointwise kernel, the innermost vectorized across output points, and per point the whole
    reduced space in constant-trip loops the C++ compiler unrolls (no per-point index
    arithmetic, no lane arrays)."""
    k = w.k
    (p,) = plan.passes
    hoist = w.start_hoisting()
    xscope = Scope(hoist)
    w.xscope = xscope
    accs = accumulators(w, p.reduces, p.lanes, p.cascade)
    head = [line for acc in accs for line in acc.declare()]
    rscope = Scope(xscope)
    w.scope = rscope
    for acc in accs:
        acc.update(w, "0")
    loop = rscope.lines
    for d in reversed(range(len(k.rranges))):
        loop = block(f"for (int64_t r{d} = 0; r{d} < {k.rranges[d]}; ++r{d})", loop)
    xscope.lines += head + loop
    _fold(w, xscope, accs)
    w.scope = xscope
    for s in plan.x_stores:
        w.store(s)
    w.scope, w.xscope, w.hoist = w.root, None, None
    simd = all(stride_along(s.index, w.inner) == 1 for s in w.live)
    work = k.xnumel * k.rnumel * max(1, len(plan.reduces))
    return x_nest(k, xscope.lines, simd, work, hoist.lines)


def _split(w: ExprWriter, plan: ReductionPlan) -> list[str]:
    """Few outer points, long rows: one parallel loop over (outer point, chunk of the reduced
    space) computing partial results, then a fold per outer point in chunk order (so the result
    does not depend on the thread count)."""
    k, split = w.k, plan.split
    (p,) = plan.passes
    chunk_scope = Scope(w.root)
    w.xscope = w.scope = chunk_scope
    accs = _emit_pass(w, p, 1, {}, split, plan.chunk)
    decls, final_scope = [], Scope(w.root)
    for acc in accs:
        e, name = acc.reduce, w.fresh("red")
        vt = cvalue_type(e.src[0].dtype if acc.is_arg else e.dtype)
        total = f"{k.xnumel * split}"
        decls.append(f"{vt} {name}_part[{total}];")
        slot = f"{name}_part[xi * {split} + c]"
        if acc.is_arg:
            decls.append(f"int64_t {name}_part_i[{total}];")
            chunk_scope.lines.append(f"{name}_part_i[xi * {split} + c] = {acc.fold('&' + slot)};")
            is_max = str(e.arg is ReduceOp.ARGMAX).lower()
            final = f"crucible::fold_arg<{is_max}, {vt}, {split}>({name}_part + xi * {split}, " \
                    f"{name}_part_i + xi * {split})"
        else:
            chunk_scope.lines.append(f"{slot} = {acc.fold()};")
            final = f"{FOLD[e.arg]}<{vt}, {split}>({name}_part + xi * {split})"
        final_scope.lines.append(f"const {cvalue_type(e.dtype)} {name} = {final};")
        final_scope.names[e] = name
    w.xscope = w.scope = final_scope
    for s in plan.x_stores:
        w.store(s)
    w.scope, w.xscope = w.root, None
    unravel = unravel_x(k.ranges)
    chunks = block(f"for (int64_t c = 0; c < {split}; ++c)", unravel + chunk_scope.lines)
    pragma = "#pragma omp parallel for collapse(2) schedule(static)"
    return (decls + block(f"for (int64_t xi = 0; xi < {k.xnumel}; ++xi)", chunks, pragma)
            + block(f"for (int64_t xi = 0; xi < {k.xnumel}; ++xi)", unravel + final_scope.lines))


def _column(w: ExprWriter, plan: ReductionPlan) -> list[str]:
    """Per tile of ``lanes`` consecutive points of the last outer dim: loop over the reduced
    dims, and inside, over the tile (contiguous loads, one accumulator per point)."""
    k = w.k
    (p,) = plan.passes
    last, size, rr, xb = len(k.ranges) - 1, k.ranges[-1], k.rranges, p.lanes
    ntiles = -(-size // xb)
    head = [f"const int64_t base = (w % {ntiles}) * {xb};",
            f"const int64_t width = std::min<int64_t>({xb}, {size} - base);"]
    # tile w unravels over (outer dims but the last, tiles): the division spelled even by 1
    for i, (stride, modulus) in enumerate(unravel_terms(k.ranges[:last] + (ntiles,))[:last]):
        head.append(f"const int64_t x{i} = (w / {stride})" + (f" % {modulus};" if modulus else ";"))
    accs = accumulators(w, p.reduces, xb, p.cascade, p.short_cascade)
    head += [line for acc in accs for line in acc.declare()]
    w.xscope = None
    scope = Scope(w.root)
    w.scope = scope
    scope.lines.append(f"const int64_t x{last} = base + j;")
    for acc in accs:
        acc.update(w, "j")
    loop = block("for (int64_t j = 0; j < width; ++j)", scope.lines)
    flush = [acc.push() for acc in accs if acc.flushes]
    if flush:
        counter = w.fresh("flush")  # passes may share a scope: one counter each
        head.append(f"int {counter} = 0;")
        loop += block(f"if (++{counter} == {CASCADE_BLOCK})", [f"{counter} = 0;", *flush])
    for d in reversed(range(len(rr))):
        loop = block(f"for (int64_t r{d} = 0; r{d} < {rr[d]}; ++r{d})", loop)
    finish = [acc.finish() for acc in accs if acc.flushes]
    out = Scope(w.root)
    w.scope = out
    out.lines.append(f"const int64_t x{last} = base + j;")
    for acc in accs:
        out.names[acc.reduce] = f"{acc.name}_i[j]" if acc.is_arg else f"{acc.name}[j]"
    for s in plan.x_stores:
        w.store(s)
    w.scope = w.root
    body = head + loop + finish + block("for (int64_t j = 0; j < width; ++j)", out.lines)
    items = math.prod(k.ranges[:last]) * ntiles
    work = k.xnumel * k.rnumel * max(1, len(plan.reduces))
    pragma = "#pragma omp parallel for schedule(static)" if items > 1 and work >= PARALLEL_MIN_WORK \
        else None
    return block(f"for (int64_t w = 0; w < {items}; ++w)", body, pragma)


def _fold(w: ExprWriter, scope: Scope, accs: list[Accumulator]) -> None:
    """Each reduction's result as a named value of ``scope``, folded from its lanes."""
    for acc in accs:
        name = w.fresh("red")
        scope.lines.append(f"const {cvalue_type(acc.reduce.dtype)} {name} = {acc.fold()};")
        scope.names[acc.reduce] = name


def _prefetch_lines(w: ExprWriter, loads: tuple[Expr, ...], lanes: int) -> list[str]:
    """The start of a lane group's body in the prefetching pass: one prefetch per cache line of this
    group's span of each load, PREFETCH_ROWS_AHEAD rows ahead (``cpp_plan.prefetched``); none past
    the last row."""
    if not loads:
        return []
    lines = []
    for load in loads:
        step = max(1, 64 // load.dtype.itemsize)  # elements per 64-byte line
        ahead = PREFETCH_ROWS_AHEAD * stride_along(load.src[0], ir.xvar(0))
        address = f"&{w.params.name(load.arg)}[{w.index_code(load.src[0])} + {ahead}]"
        lines += block(f"for (int64_t q = 0; q < {lanes}; q += {step})",
                       ["const int64_t r0 = rb + q;", f"__builtin_prefetch({address});"])
    return block(f"if (xi + {PREFETCH_ROWS_AHEAD} < {size_code(w.k.xnumel)})", lines)


def _row_slot(w: ExprWriter, row: str | Store, flat: str) -> str:
    if isinstance(row, Store):
        return f"{w.params.name(row.buffer)}[{w.index_code(row.index)}]"
    return f"{row}[{flat}]"


def _emit_pass(w: ExprWriter, p: Pass, number: int, homes: RowHomes, split: int = 1,
               chunk: int = 0, ahead: list[str] | None = None) -> list[Accumulator]:
    """One loop over the reduced dims computing ``p``'s reductions and xr-level stores, into the
    current scope; returns the accumulators for the caller to fold. ``ahead`` starts each lane
    group's body (the rows layout's prefetches).

    With ``split`` > 1 the first reduced dim is cut into chunks of ``chunk`` elements, this scope
    being the body of a parallel loop over (outer point, chunk ``c``)."""
    k = w.k
    xscope = w.scope
    rr = k.rranges
    last = len(rr) - 1
    lanes = p.lanes
    names = ", ".join(e.arg.value for e in p.reduces) or "stores"
    head: list[str] = [f"// pass over the reduced dims: {names}"]
    if split > 1:
        head += [f"const int64_t lo = c * {chunk};",
                 f"const int64_t hi = std::min<int64_t>(lo + {chunk}, {rr[0]});"]
        lo, hi = "lo", "hi"
    else:
        lo, hi = "0", size_code(rr[0])
    if last == 0 and split > 1:
        head.append(f"const int64_t main_end = lo + (hi - lo) / {lanes} * {lanes};")
        main_lo, main_hi, tail_hi = lo, "main_end", hi
    elif not isinstance(rr[last], int):  # a symbolic row: whole lane groups, then the tail
        main_lo, main_hi, tail_hi = "0", f"({size_code(rr[last])} / {lanes} * {lanes})", size_code(rr[last])
    else:
        main_lo, main_hi, tail_hi = "0", str(rr[last] // lanes * lanes), str(rr[last])
    accs = accumulators(w, p.reduces, lanes, p.cascade, p.short_cascade)
    head += [line for acc in accs for line in acc.declare()]
    flush = any(acc.flushes for acc in accs)
    counter = w.fresh("flush") if flush else ""  # passes may share a scope: one counter each
    if flush:
        head.append(f"int {counter} = 0;")
    flat = flat_rindex(rr)
    body = _pass_body(w, p, number, homes, accs, flat)
    main_body = body("j", "rb + j")
    tail_body = body(f"r{last} - {main_hi}", "rt")
    inner = block(f"for (int64_t j = 0; j < {lanes}; ++j)", main_body)
    count = block(f"if (++{counter} == {CASCADE_BLOCK})",
                  [f"{counter} = 0;", *[a.push() for a in accs if a.flushes]]) if flush else []
    inner += count
    loop = block(f"for (int64_t rb = {main_lo}; rb < {main_hi}; rb += {lanes})", (ahead or []) + inner)
    if main_hi != tail_hi:
        loop += [f"crucible::lanes_barrier({a});" for a in _integer_lanes(accs)]
        loop += block(f"for (int64_t rt = {main_hi}; rt < {tail_hi}; ++rt)", tail_body)
        if last > 0:
            # under outer reduced loops the tail runs again and again, one more value a lane each time:
            # it counts as a lane iteration, or a symbolic inner dim shorter than the lanes (all tail)
            # never flushed (511 x 8 values summed 511 a lane: 53 ulps; fuzzer, crucible-cpp --dynamic, seed 359)
            loop += count
    for d in reversed(range(last)):
        bounds = (lo, hi) if d == 0 else ("0", size_code(rr[d]))
        loop = block(f"for (int64_t r{d} = {bounds[0]}; r{d} < {bounds[1]}; ++r{d})", loop)
    xscope.lines += head + loop
    return accs


def _integer_lanes(accs: list[Accumulator]) -> list[str]:
    """The lane arrays of integer accumulators: g++ 12 at -O3 with 512-bit vectors miscompiled an
    integer sum of 8- or 16-bit values whose lane loop a tail loop over the same lanes follows (a
    count_nonzero of 33 bfloat16 values was 32; fuzzer, crucible-cpp, seed 21, harness/FINDINGS.md).
    A compiler barrier between the two loops (``crucible::lanes_barrier``, no instruction) avoids
    it. Float accumulators showed no such miscompile and keep their code."""
    out = []
    for acc in accs:
        dtype = acc.reduce.src[0].dtype if acc.is_arg else acc.reduce.dtype
        if not dtype.is_floating_point:
            out.append(acc.name)
        if acc.is_arg:
            out.append(f"{acc.name}_i")
    return out


def _pass_body(w: ExprWriter, p: Pass, number: int, homes: RowHomes, accs: list[Accumulator],
               flat: str) -> Callable[[str, str], list[str]]:
    """The innermost body of a pass at lane ``lane`` and innermost reduced index ``rvar``: values
    buffered by earlier passes read back, accumulators updated, stores, this pass's buffers filled."""
    xscope = w.scope
    last = len(w.k.rranges) - 1

    def body(lane: str, rvar: str) -> list[str]:
        scope = Scope(xscope)
        w.scope = scope
        scope.lines.append(f"const int64_t r{last} = {rvar};")
        mine = [(n, row) for n, (home, row) in homes.items() if home == number]
        for n, (home, row) in homes.items():
            if home < number:
                scope.names[n] = _row_slot(w, row, flat)
        for acc in accs:
            acc.update(w, lane)
        for s in p.stores:
            w.store(s)
        for n, row in mine:
            scope.lines.append(f"{_row_slot(w, row, flat)} = {w.value(n)};")
        w.scope = xscope
        return scope.lines

    return body


_LAYOUTS: dict[Layout, Callable[[ExprWriter, ReductionPlan], list[str]]] = {
    Layout.ROWS: _rows, Layout.WINDOW: _window, Layout.SPLIT: _split, Layout.COLUMN: _column,
}

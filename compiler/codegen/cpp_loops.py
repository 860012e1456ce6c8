"""The C++ writer's loop nests over the outer dims: pointwise kernels, and the window layout's
outer loops (``cpp_reduction``).

One loop per outer dim (no div/mod per element), the innermost last: ``#pragma omp simd`` when
every access along it is contiguous or invariant, the outer loops collapsed into one OpenMP
``parallel for`` when the work pays for threads, a long innermost dim cut into tiles when the
outer dims are too few to share.
"""

from __future__ import annotations

import math

from compiler import ir
from compiler.codegen.cpp_expr import ExprWriter
from compiler.codegen.cpp_lang import Scope, block
from compiler.codegen.cpp_plan import INNER_TILE, PARALLEL_MIN_WORK, TILE_MAX_OUTER
from compiler.codegen.shared import size_code
from compiler.ir import Expr
from compiler.scheduler import Kernel, Store


def work_per_element(live: list[Store]) -> int:
    return max(1, sum(1 for s in live for e in s.value.walk() if e.src))


def inner_simd_ok(live: list[Store], var: Expr) -> bool:
    """Every access is contiguous or invariant along ``var`` (worth forcing vectorization)."""
    sites = [s.index for s in live] + [e.src[0] for s in live for e in ir.loads(s.value)]
    for site in sites:
        aff = ir.to_affine(site)
        if aff is None:
            if any(v == var for v in site.walk()):
                return False
        elif aff.get(var, 0) not in (0, 1):
            return False
    return True


def pointwise(w: ExprWriter) -> list[str]:
    """The body of a pointwise kernel: every live store, inside the outer loop nest."""
    k = w.k
    hoist = w.start_hoisting() if k.ranges else None
    body = Scope(hoist or w.root)
    w.scope = body
    for s in w.live:
        w.store(s)
    w.scope, w.hoist = w.root, None
    if hoist is None:
        return body.lines
    simd = inner_simd_ok(w.live, w.inner)
    return x_nest(k, body.lines, simd, k.xnumel * work_per_element(w.live), hoist.lines)


def x_nest(k: Kernel, body: list[str], simd: bool, work: int, hoisted: list[str] = ()) -> list[str]:
    """``body`` inside one loop per outer dim, the innermost dim last (``#pragma omp simd``
    when ``simd``), the outer loops shared by threads when ``work`` is worth it; ``hoisted``
    lines (values that do not vary along the innermost dim) come right before the innermost loop."""
    n = len(k.ranges)
    inner = n - 1
    size = k.ranges[inner]
    if not isinstance(work, int):  # symbolic sizes: threads or not is decided at run time
        return dynamic_x_nest(k, body, simd, work, hoisted)
    parallel = work >= PARALLEL_MIN_WORK and k.xnumel > 1
    outer_points = math.prod(k.ranges[:inner])
    tiled = parallel and n >= 2 and outer_points < TILE_MAX_OUTER and size >= 2 * INNER_TILE
    if tiled:
        lo, hi = f"xt * {INNER_TILE}", f"std::min<int64_t>(xt * {INNER_TILE} + {INNER_TILE}, {size})"
    else:
        lo, hi = "0", str(size)
    var = f"x{inner}"
    if n == 1 and parallel:
        pragma = "#pragma omp parallel for simd schedule(static)" if simd else \
            "#pragma omp parallel for schedule(static)"
    else:
        pragma = "#pragma omp simd" if simd else None
    lines = [*hoisted, *block(f"for (int64_t {var} = {lo}; {var} < {hi}; ++{var})", body, pragma)]
    heads = [f"for (int64_t x{d} = 0; x{d} < {k.ranges[d]}; ++x{d})" for d in range(inner)]
    if tiled:
        heads.append(f"for (int64_t xt = 0; xt < {-(-size // INNER_TILE)}; ++xt)")
    for depth, head in reversed(list(enumerate(heads))):
        pragma = None
        if depth == 0 and parallel:
            collapse = f" collapse({len(heads)})" if len(heads) > 1 else ""
            pragma = f"#pragma omp parallel for{collapse} schedule(static)"
        lines = block(head, lines, pragma)
    return lines


def parallel_if(work: object) -> str:
    """An OpenMP ``if`` clause sharing a loop among threads when a symbolic amount of ``work`` pays
    for them (``PARALLEL_MIN_WORK``), decided per call from the size arguments."""
    return f" if({size_code(work)} >= {PARALLEL_MIN_WORK})"


def dynamic_x_nest(k: Kernel, body: list[str], simd: bool, work: object, hoisted: list[str] = ()) -> list[str]:
    """``x_nest`` over symbolic sizes: the same nest with the bounds as size expressions, no tiling of
    the innermost dim, and the parallel loop's threads decided at run time (``parallel_if``).
    The innermost loop's bound is a size argument: g++ vectorizes it with a scalar remainder loop."""
    n = len(k.ranges)
    inner = n - 1
    var = f"x{inner}"
    if n == 1:
        pragma = ("#pragma omp parallel for simd schedule(static)" if simd else
                  "#pragma omp parallel for schedule(static)") + parallel_if(work)
    else:
        pragma = "#pragma omp simd" if simd else None
    lines = [*hoisted, *block(f"for (int64_t {var} = 0; {var} < {size_code(k.ranges[inner])}; ++{var})", body, pragma)]
    heads = [f"for (int64_t x{d} = 0; x{d} < {size_code(k.ranges[d])}; ++x{d})" for d in range(inner)]
    for depth, head in reversed(list(enumerate(heads))):
        pragma = None
        if depth == 0:
            collapse = f" collapse({len(heads)})" if len(heads) > 1 else ""
            pragma = f"#pragma omp parallel for{collapse} schedule(static){parallel_if(work)}"
        lines = block(head, lines, pragma)
    return lines

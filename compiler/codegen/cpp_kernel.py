"""The C++ kernel writer behind ``CppRenderer``: loop nests, passes and expressions.

Expressions become ``const`` locals in the innermost scope that has their inputs:
x-level values of a reduction kernel (they depend on outer indices and reduction
results only) are computed once per outer point, xr-level values inside the loop of
the pass that needs them. See ``compiler.codegen.cpp`` for the overall scheme.
"""

from __future__ import annotations

import math
import re

import torch

from compiler import cpp_build, ir
from compiler.codegen.base import ExprLevels, RenderedKernel, affine_index_code
from compiler.codegen.cpp import (
    CALL,
    CASCADE_BLOCK,
    FOLD,
    FROM_FLOAT,
    INFIX,
    INNER_TILE,
    INT_CALL,
    LANE_BYTES,
    LONG_ROW,
    LONG_ROW_LANE_BYTES,
    PARALLEL_MIN_WORK,
    SPLIT_MAX_CHUNKS,
    SPLIT_MAX_XNUMEL,
    SPLIT_MIN_RNUMEL,
    TO_FLOAT,
    compute_dtype,
    ctype,
    cvalue_type,
    literal,
    reduce_init,
)
from compiler.ir import Expr, Op, ReduceOp
from compiler.scheduler import Kernel, Store


class Scope:
    """Lines of one block plus the values computed in it (visible to nested blocks)."""

    def __init__(self, parent: Scope | None) -> None:
        self.parent = parent
        self.lines: list[str] = []
        self.names: dict[Expr, str] = {}

    def find(self, e: Expr) -> str | None:
        scope: Scope | None = self
        while scope is not None:
            hit = scope.names.get(e)
            if hit is not None:
                return hit
            scope = scope.parent
        return None


def block(head: str, body: list[str], pragma: str | None = None) -> list[str]:
    out = [pragma] if pragma else []
    return out + [head + " {"] + ["  " + line for line in body] + ["}"]


class KernelWriter:
    def __init__(self, k: Kernel) -> None:
        self.k = k
        self.live = k.live_stores()
        self.params: dict[str, str] = {}
        self.args: list[str] = []
        self.counter = 0
        self.levels = ExprLevels()
        self.root = Scope(None)
        self.scope = self.root
        self.xscope: Scope | None = None  # per outer point, in reduction kernels
        # loop nests over the outer dims: values that do not vary along the innermost dim are
        # computed once per row, before the innermost loop (hoisted), not once per element
        self.hoist: Scope | None = None
        self.inner: Expr | None = None
        self._varies: dict[Expr, bool] = {}
        self.split_decls: list[str] = []  # partial-result arrays of a split reduction
        # xr value -> (pass computing it, a row buffer's name or the output store whose row holds it)
        self.row_buffers: dict[Expr, tuple[int, str | Store]] = {}
        self.pass_number = 1
        self.split_finals: list[tuple[Expr, str, str]] = []
        self.in_index = False  # rendering a load/store address (never overflows: no wrapping helpers)

    # --- names ----------------------------------------------------------------------------
    def fresh(self, prefix: str = "t") -> str:
        self.counter += 1
        return f"{prefix}{self.counter - 1}"

    def param(self, buffer: str) -> str:
        if buffer not in self.params:
            name = cpp_build.sanitize_identifier(f"p_{buffer}")
            taken = set(self.params.values())
            base, n = name, 1
            while name in taken:
                name, n = f"{base}_{n}", n + 1
            self.params[buffer] = name
            self.args.append(buffer)
        return self.params[buffer]

    def is_xr(self, e: Expr) -> bool:
        """Depends on a reduction index outside any REDUCE."""
        return self.levels.is_xr(e)

    # --- expressions --------------------------------------------------------------------------
    def value(self, e: Expr) -> str:
        op = e.op
        if op is Op.CONST:
            return literal(e.arg, e.dtype)
        if op is Op.XVAR:
            return f"x{e.arg}"
        if op is Op.RVAR:
            return f"r{e.arg}"
        hit = self.scope.find(e)
        if hit is not None:
            return hit
        if op is Op.REDUCE:
            raise ValueError(f"cpp renderer: reduction {ir.render_expr(e)} used before its pass")
        target = self.xscope if self.xscope is not None and not self.is_xr(e) else self.scope
        if self.hoist is not None and (target is self.xscope or self.xscope is None) and not self.varies(e):
            target = self.hoist
        saved, self.scope = self.scope, target
        try:
            code = self.op_code(e)
        finally:
            self.scope = saved
        if code.isidentifier() or ATOMIC_LITERAL.fullmatch(code):  # used inline by its users
            target.names[e] = code
            return code
        name = self.fresh()
        target.lines.append(f"const {cvalue_type(e.dtype)} {name} = {code};")
        target.names[e] = name
        return name

    def varies(self, e: Expr) -> bool:
        """Depends on the innermost loop's index or on a reduction index (iterative, memoized)."""
        memo = self._varies
        stack = [e]
        while stack:
            top = stack[-1]
            if top in memo:
                stack.pop()
                continue
            pending = [s for s in top.src if s not in memo]
            if pending:
                stack.extend(pending)
                continue
            stack.pop()
            memo[top] = (top == self.inner or top.op is Op.RVAR or top.op is Op.REDUCE
                         or any(memo[s] for s in top.src))
        return memo[e]

    def invariant_divisor(self, e: Expr) -> bool:
        """A division inside the innermost loop (or a reduction's row loop) by a value computed
        outside it."""
        num, den = e.src
        if den.op is Op.CONST:
            return False
        if self.hoist is not None:
            return self.varies(num) and not self.varies(den)
        return self.xscope is not None and self.is_xr(num) and not self.is_xr(den)

    def index_code(self, e: Expr) -> str:
        saved, self.in_index = self.in_index, True  # addresses: plain int64 arithmetic, no wrapping
        try:
            code = affine_index_code(e, self.value)
            return code.replace("+ -", "- ") if code is not None else self.value(e)
        finally:
            self.in_index = saved

    def op_code(self, e: Expr) -> str:
        op = e.op
        if op is Op.LOAD:
            buf = self.param(e.arg)
            code = f"{buf}[{self.index_code(e.src[0])}]"
            return f"{TO_FLOAT[e.dtype]}({code})" if e.dtype in TO_FLOAT else code
        a = [self.value(s) for s in e.src]
        src_dt = compute_dtype(e.src[0].dtype)
        dt = compute_dtype(e.dtype)
        t = cvalue_type(e.dtype)
        is_float = dt.is_floating_point
        if op is Op.CAST:
            return self.cast(a[0], e.src[0].dtype, e.dtype)
        if op in WRAPPING and dt in WIDE_INTS and not self.in_index:
            return f"crucible::{WRAPPING[op]}<{t}>({a[0]}, {a[1]})"
        if op in INFIX:
            return f"{a[0]} {INFIX[op]} {a[1]}"
        if op is Op.DIV:
            if is_float and self.invariant_divisor(e):
                # one division per row, a multiplication per element (as ATen's softmax does;
                # within an ulp of the quotient); vector division costs ~20x a multiplication
                inverse = self.value(ir.binary(Op.DIV, ir.const(1, e.src[1].dtype), e.src[1]))
                return f"{a[0]} * {inverse}"
            if is_float or _safe_divisor(e.src[1]):
                return f"{a[0]} / {a[1]}"
            return f"crucible::div_trunc<{t}>({a[0]}, {a[1]})"
        if op is Op.MOD:
            if is_float:
                return f"std::fmod({a[0]}, {a[1]})"
            if _safe_divisor(e.src[1]):
                return f"{a[0]} % {a[1]}"
            return f"crucible::mod_trunc<{t}>({a[0]}, {a[1]})"
        if op in INT_CALL:
            if is_float:
                return f"std::floor({a[0]} / {a[1]})"
            return f"{INT_CALL[op]}<{t}>({a[0]}, {a[1]})"
        if op in (Op.MAX, Op.MIN):
            fn = "max_nan" if op is Op.MAX else "min_nan"
            return f"crucible::{fn}<{t}>({a[0]}, {a[1]})"
        if op is Op.WHERE:
            return f"{a[0]} ? {a[1]} : {a[2]}"
        if op is Op.NEG:
            return f"crucible::wrap_neg<{t}>({a[0]})" if dt in WIDE_INTS and not self.in_index else f"-{a[0]}"
        if op is Op.ABS:
            return f"std::abs({a[0]})" if is_float else f"({a[0]} < 0 ? {t}(-{a[0]}) : {a[0]})"
        if op in VECTOR_MATH and dt == torch.float32:
            return f"crucible::{VECTOR_MATH[op]}({a[0]})"
        if op is Op.RSQRT:
            return f"{literal(1, dt)} / std::sqrt({a[0]})"
        if op in CALL:
            return f"{CALL[op]}({a[0]})"
        if op is Op.ISNAN:
            return f"{a[0]} != {a[0]}" if src_dt.is_floating_point else "false"
        if op is Op.NOT:
            return f"!{a[0]}"
        if op is Op.BITNOT:
            return f"!{a[0]}" if dt == torch.bool else f"~{a[0]}"
        raise ValueError(f"cpp renderer: no code for {op}")

    def cast(self, code: str, src: torch.dtype, dst: torch.dtype) -> str:
        if dst == torch.bool:
            return code if src == torch.bool else f"{code} != 0"
        if dst in FROM_FLOAT:
            inner = code if compute_dtype(src) == torch.float32 else f"static_cast<float>({code})"
            return f"{TO_FLOAT[dst]}({FROM_FLOAT[dst]}({inner}))"
        if compute_dtype(src) == compute_dtype(dst):
            return code
        return f"static_cast<{cvalue_type(dst)}>({code})"

    def store(self, s: Store) -> None:
        buf = self.param(s.buffer)
        value = self.value(s.value)
        index = self.index_code(s.index)
        dt = s.value.dtype
        if dt in FROM_FLOAT:
            value = f"{FROM_FLOAT[dt]}({value})"
        self.scope.lines.append(f"{buf}[{index}] = {value};")

    # --- kernels ------------------------------------------------------------------------------
    def write(self) -> RenderedKernel:
        body = self.reduction() if self.k.is_reduction else self.pointwise()
        return self.assemble(body)

    def work_per_element(self) -> int:
        return max(1, sum(1 for s in self.live for e in s.value.walk() if e.src))

    def inner_simd_ok(self, var: Expr) -> bool:
        """Every access is contiguous or invariant along ``var`` (worth forcing vectorization)."""
        sites = [s.index for s in self.live] + [e.src[0] for s in self.live for e in ir.loads(s.value)]
        for site in sites:
            aff = ir.to_affine(site)
            if aff is None:
                if any(v == var for v in site.walk()):
                    return False
            elif aff.get(var, 0) not in (0, 1):
                return False
        return True

    def pointwise(self) -> list[str]:
        hoist = self.start_hoisting() if self.k.ranges else None
        body = Scope(hoist or self.root)
        self.scope = body
        for s in self.live:
            self.store(s)
        self.scope, self.hoist = self.root, None
        if hoist is None:
            return body.lines
        simd = self.inner_simd_ok(self.inner)
        return self.x_nest(body.lines, simd, self.k.xnumel * self.work_per_element(), hoist.lines)

    def start_hoisting(self) -> Scope:
        self.hoist = Scope(self.root)
        self.inner = ir.xvar(len(self.k.ranges) - 1)
        self._varies = {}
        return self.hoist

    def x_nest(self, body: list[str], simd: bool, work: int, hoisted: list[str] = ()) -> list[str]:
        """``body`` inside one loop per outer dim, the innermost dim last (``#pragma omp simd``
        when ``simd``), the outer loops shared by threads when ``work`` is worth it; ``hoisted``
        lines (values that do not vary along the innermost dim) come right before the innermost loop."""
        k = self.k
        n = len(k.ranges)
        parallel = work >= PARALLEL_MIN_WORK and k.xnumel > 1
        inner = n - 1
        size = k.ranges[inner]
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

    # --- reductions ---------------------------------------------------------------------------
    def reduction(self) -> list[str]:
        k = self.k
        reduces: list[Expr] = []
        seen: set[Expr] = set()
        for s in self.live:
            for e in s.value.walk():
                if e.op is Op.REDUCE and e not in seen:
                    seen.add(e)
                    reduces.append(e)
        depth: dict[Expr, int] = {}
        for e in reduces:  # walk() yields operands first, so inner reductions come first
            depth[e] = 1 + max((depth[d] for d in e.src[0].walk() if d.op is Op.REDUCE), default=0)

        def pass_of(s: Store) -> int:
            return 1 + max((depth[d] for d in s.value.walk() if d.op is Op.REDUCE), default=0)

        xr_stores = [s for s in self.live if s.level == "xr" or self.is_xr(s.value)]
        x_stores = [s for s in self.live if s not in xr_stores]
        passes = max([*depth.values(), *(pass_of(s) for s in xr_stores)], default=0)
        if passes == 1 and not xr_stores and k.ranges and k.rnumel <= WINDOW_MAX_RNUMEL:
            return self.window_reduction(reduces, x_stores)
        if passes == 1 and not xr_stores and self.column_layout():
            return self.column_reduction(reduces, x_stores)
        split = self.split_count() if passes == 1 and not xr_stores else 1
        if split > 1:
            return self.split_reduction(reduces, x_stores, split)
        xscope = Scope(self.root)
        self.xscope = self.scope = xscope
        plan = [([e for e in reduces if depth[e] == p], [s for s in xr_stores if pass_of(s) == p])
                for p in range(1, passes + 1)]
        self.plan_row_buffers(plan)
        for p, (pass_reduces, pass_stores) in enumerate(plan, start=1):
            self.pass_number = p
            self.emit_pass(pass_reduces, pass_stores, split)
        self.scope = xscope
        for s in x_stores:
            self.store(s)
        self.scope, self.xscope = self.root, None
        if not k.ranges:
            return xscope.lines
        work = k.xnumel * k.rnumel * max(1, len(reduces)) * passes
        pragma = "#pragma omp parallel for schedule(static)" if k.xnumel > 1 and work >= PARALLEL_MIN_WORK \
            else None
        return block(f"for (int64_t xi = 0; xi < {k.xnumel}; ++xi)", self.unravel_x() + xscope.lines, pragma)

    def window_reduction(self, reduces: list[Expr], x_stores: list[Store]) -> list[str]:
        """Short reductions (pooling windows, a few rows): the outer dims as a loop nest like a
        pointwise kernel, the innermost vectorized across output points, and per point the whole
        reduced space in constant-trip loops the C++ compiler unrolls (no per-point index
        arithmetic, no lane arrays)."""
        k = self.k
        hoist = self.start_hoisting()
        xscope = Scope(hoist)
        self.xscope = xscope
        head: list[str] = []
        accs = []
        for e in reduces:
            acc = self.fresh("acc")
            accs.append((e, acc))
            head += self.acc_decl(e, acc, 1, False)
        rscope = Scope(xscope)
        self.scope = rscope
        for e, acc in accs:
            self.accumulate(e, acc, "0")
        loop = rscope.lines
        for d in reversed(range(len(k.rranges))):
            loop = block(f"for (int64_t r{d} = 0; r{d} < {k.rranges[d]}; ++r{d})", loop)
        xscope.lines += head + loop
        for e, acc in accs:
            name = self.fresh("red")
            xscope.lines.append(f"const {cvalue_type(e.dtype)} {name} = {self.fold(e, acc, 1, False)};")
            xscope.names[e] = name
        self.scope = xscope
        for s in x_stores:
            self.store(s)
        self.scope, self.xscope, self.hoist = self.root, None, None
        simd = all(_stride_along(s.index, self.inner) == 1 for s in self.live)
        work = k.xnumel * k.rnumel * max(1, len(reduces))
        return self.x_nest(xscope.lines, simd, work, hoist.lines)

    def plan_row_buffers(self, plan: list[tuple[list[Expr], list[Store]]]) -> None:
        """Keep expensive xr-level values (exp, log, ...) that a later pass needs again in a
        row buffer per outer point instead of recomputing them (softmax: exp(x - max) from the
        sum pass to the store pass). Cheap values are recomputed (rows stay in cache)."""
        seen_in: list[set[Expr]] = []
        for pass_reduces, pass_stores in plan:
            roots = [e.src[0] for e in pass_reduces] + [s.value for s in pass_stores]
            seen_in.append(self.xr_nodes(roots))
        budget = 4 * ROW_BUFFER_BYTES  # all buffers of a kernel, per thread
        taken: set[str] = set()
        for p, nodes in enumerate(seen_in, start=1):
            for n in sorted(nodes, key=lambda e: ir.render_expr(e)):  # a stable order: same source every time
                size = self.k.rnumel * _size(compute_dtype(n.dtype))
                if size <= min(ROW_BUFFER_BYTES, budget) and n.op in EXPENSIVE and n not in self.row_buffers \
                        and any(n in later for later in seen_in[p:]):
                    last_use = max(q for q in range(p + 1, len(plan) + 1) if n in seen_in[q - 1])
                    scratch = self.scratch_store(n, plan[last_use - 1][1], taken)
                    if scratch is not None:  # the output row itself holds the value until overwritten
                        taken.add(scratch.buffer)
                        self.row_buffers[n] = (p, scratch)
                        continue
                    budget -= size
                    name = self.fresh("row")
                    self.row_buffers[n] = (p, name)
                    self.scope.lines.append(f"{cvalue_type(n.dtype)} {name}[{self.k.rnumel}];")

    def scratch_store(self, n: Expr, stores: list[Store], taken: set[str]) -> Store | None:
        """A store of the pass that last uses ``n`` whose row can hold ``n`` until then (what ATen's
        softmax does with its output): same dtype, written once per reduced element, its buffer
        not read by this kernel. Saves a row buffer's worth of cache traffic."""
        if compute_dtype(n.dtype) != n.dtype:
            return None
        loaded = {e.arg for s in self.live for e in ir.loads(s.value)}
        for s in stores:
            aff = ir.to_affine(s.index)
            if s.value.dtype != n.dtype or s.buffer in taken or s.buffer in loaded or aff is None \
                    or sum(1 for t in self.live if t.buffer == s.buffer) != 1:
                continue
            if all(aff.get(ir.rvar(d), 0) != 0 for d, size in enumerate(self.k.rranges) if size > 1):
                return s
        return None

    def row_slot(self, row: str | Store, flat: str) -> str:
        if isinstance(row, Store):
            return f"{self.param(row.buffer)}[{self.index_code(row.index)}]"
        return f"{row}[{flat}]"

    def xr_nodes(self, roots: list[Expr]) -> set[Expr]:
        """The xr-level nodes a pass evaluates for ``roots`` (not looking inside reductions)."""
        out: set[Expr] = set()
        stack = [r for r in roots]
        while stack:
            e = stack.pop()
            if e in out or e.op is Op.REDUCE or not self.is_xr(e):
                continue
            out.add(e)
            stack.extend(e.src)
        return out

    def unravel_x(self) -> list[str]:
        lines = []
        for i, size in enumerate(self.k.ranges):
            stride = math.prod(self.k.ranges[i + 1:])
            code = "xi" if stride == 1 else f"(xi / {stride})"
            if i > 0:
                code = f"{code} % {size}"
            lines.append(f"const int64_t x{i} = {code};")
        return lines

    def split_reduction(self, reduces: list[Expr], x_stores: list[Store], split: int) -> list[str]:
        """Few outer points, long rows: one parallel loop over (outer point, chunk of the
        reduced space) computing partial results, then a fold per outer point."""
        k = self.k
        self.split_decls, self.split_finals = [], []
        chunk_scope = Scope(self.root)
        self.xscope = self.scope = chunk_scope
        self.emit_pass(reduces, [], split)
        final_scope = Scope(self.root)
        self.xscope = self.scope = final_scope
        for e, name, line in self.split_finals:
            final_scope.lines.append(line)
            final_scope.names[e] = name
        for s in x_stores:
            self.store(s)
        self.scope, self.xscope = self.root, None
        unravel = self.unravel_x()
        chunks = block(f"for (int64_t c = 0; c < {split}; ++c)", unravel + chunk_scope.lines)
        pragma = "#pragma omp parallel for collapse(2) schedule(static)"
        return (self.split_decls + block(f"for (int64_t xi = 0; xi < {k.xnumel}; ++xi)", chunks, pragma)
                + block(f"for (int64_t xi = 0; xi < {k.xnumel}; ++xi)", unravel + final_scope.lines))

    def split_count(self) -> int:
        """Chunks of the reduced space reduced in parallel: a power of two, or 1 when there are
        enough outer points to share or the rows are short."""
        k = self.k
        if k.xnumel >= SPLIT_MAX_XNUMEL or k.rnumel < SPLIT_MIN_RNUMEL:
            return 1
        chunks = min(SPLIT_MAX_CHUNKS, k.rnumel // (SPLIT_MIN_RNUMEL // 4), k.rranges[0])
        return 1 << (chunks.bit_length() - 1) if chunks >= 2 else 1

    def column_layout(self) -> bool:
        """The inputs are contiguous along the last outer dim and not along the reduced ones
        (a reduction over a leading dim): vectorize across outer points instead of lanes."""
        k = self.k
        if not k.ranges or k.ranges[-1] < 4:
            return False
        xl, rl = ir.xvar(len(k.ranges) - 1), ir.rvar(len(k.rranges) - 1)
        affs = [ir.to_affine(e.src[0]) for s in self.live for e in ir.loads(s.value)]
        along_x = any(a is not None and a.get(xl, 0) == 1 for a in affs)
        along_r = any(a is not None and a.get(rl, 0) == 1 for a in affs)
        return along_x and not along_r

    def column_reduction(self, reduces: list[Expr], x_stores: list[Store]) -> list[str]:
        """Per tile of ``xb`` consecutive points of the last outer dim: loop over the reduced
        dims, and inside, over the tile (contiguous loads, one accumulator per point)."""
        k = self.k
        last, size, rr = len(k.ranges) - 1, k.ranges[-1], k.rranges
        widest = max([1] + [_size(compute_dtype(e.dtype)) for e in reduces]
                     + [_size(compute_dtype(e.src[0].dtype)) for e in reduces])
        xb = min(LANE_BYTES // widest, 1 << (size.bit_length() - 1))
        ntiles = -(-size // xb)
        head = [f"const int64_t base = (w % {ntiles}) * {xb};",
                f"const int64_t width = std::min<int64_t>({xb}, {size} - base);"]
        for i in range(last):
            stride = math.prod(k.ranges[i + 1:last]) * ntiles
            head.append(f"const int64_t x{i} = (w / {stride})" + (f" % {k.ranges[i]};" if i else ";"))
        cascade = k.rnumel > CASCADE_BLOCK
        accs = []
        for e in reduces:
            acc = self.fresh("acc")
            accs.append((e, acc))
            head += self.acc_decl(e, acc, xb, cascade)
        self.xscope = None
        scope = Scope(self.root)
        self.scope = scope
        scope.lines.append(f"const int64_t x{last} = base + j;")
        for e, acc in accs:
            self.accumulate(e, acc, "j")
        loop = block("for (int64_t j = 0; j < width; ++j)", scope.lines)
        flush = [f"{acc}_c.push({acc});" for e, acc in accs if cascade and _cascaded(e)]
        if flush:
            counter = self.fresh("flush")  # passes may share a scope: one counter each
            head.append(f"int {counter} = 0;")
            loop += block(f"if (++{counter} == {CASCADE_BLOCK})", [f"{counter} = 0;", *flush])
        for d in reversed(range(len(rr))):
            loop = block(f"for (int64_t r{d} = 0; r{d} < {rr[d]}; ++r{d})", loop)
        finish = [f"{acc}_c.finish({acc});" for e, acc in accs if cascade and _cascaded(e)]
        out = Scope(self.root)
        self.scope = out
        out.lines.append(f"const int64_t x{last} = base + j;")
        for e, acc in accs:
            arg = e.arg in (ReduceOp.ARGMAX, ReduceOp.ARGMIN)
            out.names[e] = f"{acc}_i[j]" if arg else f"{acc}[j]"
        for s in x_stores:
            self.store(s)
        self.scope = self.root
        body = head + loop + finish + block("for (int64_t j = 0; j < width; ++j)", out.lines)
        items = math.prod(k.ranges[:last]) * ntiles
        work = k.xnumel * k.rnumel * max(1, len(reduces))
        pragma = "#pragma omp parallel for schedule(static)" if items > 1 and work >= PARALLEL_MIN_WORK \
            else None
        return block(f"for (int64_t w = 0; w < {items}; ++w)", body, pragma)

    def emit_pass(self, reduces: list[Expr], stores: list[Store], split: int = 1) -> None:
        """One loop over the reduced dims computing ``reduces`` and the xr-level ``stores``.

        With ``split`` > 1 the first reduced dim is cut into that many chunks reduced in
        parallel (for kernels with too few outer points to share): each chunk folds its lanes
        into a partial result and the partials are folded in chunk order, so the result does
        not depend on the thread count."""
        k = self.k
        xscope = self.scope
        rr = k.rranges
        last = len(rr) - 1
        widest = max([1] + [_size(compute_dtype(e.dtype)) for e in reduces]
                     + [_size(compute_dtype(e.src[0].dtype)) for e in reduces])
        lane_bytes = LONG_ROW_LANE_BYTES if rr[last] >= LONG_ROW else LANE_BYTES
        lanes = min(lane_bytes // widest, 1 << (rr[last].bit_length() - 1))
        accs: list[tuple[Expr, str]] = []
        cascade = k.rnumel // split > CASCADE_BLOCK * lanes
        head: list[str] = [f"// pass over the reduced dims: {', '.join(e.arg.value for e in reduces) or 'stores'}"]
        if split > 1:
            chunk = -(-rr[0] // split)
            if last == 0:
                chunk = -(-chunk // lanes) * lanes
            head += [f"const int64_t lo = c * {chunk};", f"const int64_t hi = std::min<int64_t>(lo + {chunk}, {rr[0]});"]
            lo, hi = "lo", "hi"
        else:
            lo, hi = "0", str(rr[0])
        if last == 0 and split > 1:
            head.append(f"const int64_t main_end = lo + (hi - lo) / {lanes} * {lanes};")
            main_lo, main_hi, tail_hi = lo, "main_end", hi
        else:
            main_lo, main_hi, tail_hi = "0", str(rr[last] // lanes * lanes), str(rr[last])
        for e in reduces:
            acc = self.fresh("acc")
            accs.append((e, acc))
            head += self.acc_decl(e, acc, lanes, cascade)
        flush = cascade and any(_cascaded(e) for e in reduces)
        counter = self.fresh("flush") if flush else ""  # passes may share a scope: one counter each
        if flush:
            head.append(f"int {counter} = 0;")

        flat = " + ".join(f"r{d} * {math.prod(rr[d + 1:])}" if d < last else f"r{d}" for d in range(last + 1))

        def body(lane: str, rvar: str) -> list[str]:
            scope = Scope(xscope)
            self.scope = scope
            scope.lines.append(f"const int64_t r{last} = {rvar};")
            mine = [(n, row) for n, (home, row) in self.row_buffers.items() if home == self.pass_number]
            for n, (home, row) in self.row_buffers.items():
                if home < self.pass_number:
                    scope.names[n] = self.row_slot(row, flat)
            for e, acc in accs:
                self.accumulate(e, acc, lane)
            for s in stores:
                self.store(s)
            for n, row in mine:
                scope.lines.append(f"{self.row_slot(row, flat)} = {self.value(n)};")
            self.scope = xscope
            return scope.lines

        main_body = body("j", "rb + j")
        tail_body = body(f"r{last} - {main_hi}", "rt")
        inner = block(f"for (int64_t j = 0; j < {lanes}; ++j)", main_body)
        if flush:
            push = [f"{acc}_c.push({acc});" for e, acc in accs if _cascaded(e)]
            inner += block(f"if (++{counter} == {CASCADE_BLOCK})", [f"{counter} = 0;", *push])
        loop = block(f"for (int64_t rb = {main_lo}; rb < {main_hi}; rb += {lanes})", inner)
        if main_hi != tail_hi:
            loop += block(f"for (int64_t rt = {main_hi}; rt < {tail_hi}; ++rt)", tail_body)
        for d in reversed(range(last)):
            bounds = (lo, hi) if d == 0 else ("0", str(rr[d]))
            loop = block(f"for (int64_t r{d} = {bounds[0]}; r{d} < {bounds[1]}; ++r{d})", loop)
        if split == 1:
            xscope.lines += head + loop
            for e, acc in accs:
                name = self.fresh("red")
                xscope.lines.append(f"const {cvalue_type(e.dtype)} {name} = {self.fold(e, acc, lanes, cascade)};")
                xscope.names[e] = name
            return
        # split: this scope is the body of the parallel loop over (outer point, chunk); the
        # caller declares the partial arrays and folds them per outer point afterwards
        parts = []
        for e, acc in accs:
            name = self.fresh("red")
            arg = e.arg in (ReduceOp.ARGMAX, ReduceOp.ARGMIN)
            vt = cvalue_type(e.src[0].dtype if arg else e.dtype)
            total = f"{self.k.xnumel * split}"
            self.split_decls.append(f"{vt} {name}_part[{total}];")
            slot = f"{name}_part[xi * {split} + c]"
            if arg:
                self.split_decls.append(f"int64_t {name}_part_i[{total}];")
                parts.append(f"{name}_part_i[xi * {split} + c] = {self.fold(e, acc, lanes, cascade, '&' + slot)};")
                is_max = str(e.arg is ReduceOp.ARGMAX).lower()
                final = f"crucible::fold_arg<{is_max}, {vt}, {split}>({name}_part + xi * {split}, " \
                        f"{name}_part_i + xi * {split})"
            else:
                parts.append(f"{slot} = {self.fold(e, acc, lanes, cascade)};")
                final = f"{FOLD[e.arg]}<{vt}, {split}>({name}_part + xi * {split})"
            self.split_finals.append((e, name, f"const {cvalue_type(e.dtype)} {name} = {final};"))
        xscope.lines += head + loop + parts

    def acc_decl(self, e: Expr, acc: str, lanes: int, cascade: bool) -> list[str]:
        op: ReduceOp = e.arg
        if op in (ReduceOp.ARGMAX, ReduceOp.ARGMIN):
            vt = cvalue_type(e.src[0].dtype)
            return [f"{vt} {acc}[{lanes}];", f"int64_t {acc}_i[{lanes}];",
                    (f"for (int j = 0; j < {lanes}; ++j) {{ {acc}[j] = {reduce_init(op, e.src[0].dtype)}; "
                    f"{acc}_i[j] = -1; }}")]
        t = cvalue_type(e.dtype)
        lines = [f"{t} {acc}[{lanes}];",
                 f"for (int j = 0; j < {lanes}; ++j) {acc}[j] = {reduce_init(op, e.dtype)};"]
        if cascade and _cascaded(e):
            lines.append(f"crucible::SumCascade<{t}, {lanes}> {acc}_c;")
        return lines

    def accumulate(self, e: Expr, acc: str, lane: str) -> None:
        op: ReduceOp = e.arg
        src = e.src[0]
        v = self.value(src)
        lines = self.scope.lines
        slot = f"{acc}[{lane}]"
        if op in (ReduceOp.ARGMAX, ReduceOp.ARGMIN):
            flat = " + ".join(f"r{d} * {math.prod(self.k.rranges[d + 1:])}" if d < len(self.k.rranges) - 1
                              else f"r{d}" for d in range(len(self.k.rranges)))
            cmp = ">" if op is ReduceOp.ARGMAX else "<"
            take = self.fresh("take")
            nan = f"!({slot} != {slot}) & (({v} != {v}) | ({v} {cmp} {slot}))"
            lines.append(f"const bool {take} = ({acc}_i[{lane}] < 0) | ({nan});")
            lines.append(f"{slot} = {take} ? {v} : {slot};")
            lines.append(f"{acc}_i[{lane}] = {take} ? ({flat}) : {acc}_i[{lane}];")
            return
        t = cvalue_type(e.dtype)
        if compute_dtype(src.dtype) != compute_dtype(e.dtype):
            v = f"static_cast<{t}>({v})"
        if op in (ReduceOp.SUM, ReduceOp.PROD) and compute_dtype(e.dtype) in WIDE_INTS:
            fn = "wrap_add" if op is ReduceOp.SUM else "wrap_mul"
            lines.append(f"{slot} = crucible::{fn}<{t}>({slot}, {v});")
        elif op is ReduceOp.SUM:
            lines.append(f"{slot} = {slot} + {v};")
        elif op is ReduceOp.PROD:
            lines.append(f"{slot} = {slot} * {v};")
        else:
            fn = "max_nan" if op is ReduceOp.MAX else "min_nan"
            lines.append(f"{slot} = crucible::{fn}<{t}>({slot}, {v});")

    def fold(self, e: Expr, acc: str, lanes: int, cascade: bool, best_value: str = "nullptr") -> str:
        op: ReduceOp = e.arg
        if op in (ReduceOp.ARGMAX, ReduceOp.ARGMIN):
            vt = cvalue_type(e.src[0].dtype)
            is_max = str(op is ReduceOp.ARGMAX).lower()
            return f"crucible::fold_arg<{is_max}, {vt}, {lanes}>({acc}, {acc}_i, {best_value})"
        if cascade and _cascaded(e):
            return f"{acc}_c.total({acc})"
        return f"{FOLD[op]}<{cvalue_type(e.dtype)}, {lanes}>({acc})"

    # --- the function -----------------------------------------------------------------------
    def assemble(self, body: list[str]) -> RenderedKernel:
        k = self.k
        symbol = cpp_build.sanitize_identifier(k.name)
        params = []
        for buf in self.args:
            dtype = self.k.param(buf).dtype
            const = "" if self.k.param(buf).written else "const "
            params.append(f"{const}{ctype(dtype)}* __restrict__ {self.params[buf]}")
        origins = cpp_build.safe_comment(", ".join(dict.fromkeys(k.origins))) or "(none)"
        shape = f"ranges {list(k.ranges)}" + (f", reduced {list(k.rranges)}" if k.rranges else "")
        lines = [
            "// Generated by crucible's C++ renderer.",
            f"// {cpp_build.safe_comment(k.name)}: {shape}",
            f"// fused: {origins}",
            '#include "cpp_prelude.h"',
            "",
            f'extern "C" void {symbol}({", ".join(params)}) {{',
        ]
        lines += ["  " + line for line in body]
        lines.append("}")
        return RenderedKernel(k.name, "cpp", "\n".join(lines) + "\n", tuple(self.args), (), symbol=symbol)



# Integer ops that overflow (undefined in C++) in the types C++ does not promote: rendered as
# wrapping helpers (values only: addresses stay plain). Narrower integers compute in int, where they
# cannot overflow.
WRAPPING = {Op.ADD: "wrap_add", Op.SUB: "wrap_sub", Op.MUL: "wrap_mul"}
WIDE_INTS = frozenset({torch.int32, torch.int64})

# Codes a user may embed in an infix expression as they are: one literal token. Anything longer
# gets a named temporary (regression: `INT64_C(0) < INT64_C(1) ? t0 : t5`, a select on a folded
# condition, was embedded as `... ? t0 : t5 + t6 ...`, so the adds bound to the select's else arm).
ATOMIC_LITERAL = re.compile(r"-?(INT64_C\(-?\d+\)|UINT64_C\(\d+\)|INT64_MIN|std::numeric_limits<[\w ]+>::\w+\(\))")

# float32 math with vectorizable prelude versions (the libm calls stay scalar)
VECTOR_MATH = {Op.EXP: "exp_f32", Op.ERF: "erf_f32", Op.LOG: "log_f32"}

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


def _safe_divisor(e: Expr) -> bool:
    return e.op is Op.CONST and int(e.arg) not in (0, -1)


def _size(dtype: torch.dtype) -> int:
    return 1 if dtype == torch.bool else dtype.itemsize


def _cascaded(e: Expr) -> bool:
    return e.arg is ReduceOp.SUM and compute_dtype(e.dtype).is_floating_point

"""The C++ writer's reduction emitters: the layouts ``cpp_plan.plan_reduction`` picks, each
as loop nests with lane accumulators, cascaded float sums, row buffers and chunk folds.

``ReductionWriter`` is the reduction half of ``cpp_kernel.KernelWriter``: it emits into the
writer's scopes and names values through its expression methods.
"""

from __future__ import annotations

import math

from compiler import ir
from compiler.codegen.cpp_lang import (
    FOLD,
    WIDE_INTS,
    Scope,
    block,
    compute_dtype,
    cvalue_type,
    reduce_init,
)
from compiler.codegen.cpp_plan import (
    CASCADE_BLOCK,
    EXPENSIVE,
    LANE_BYTES,
    LONG_ROW,
    LONG_ROW_LANE_BYTES,
    PARALLEL_MIN_WORK,
    ROW_BUFFER_BYTES,
    Layout,
    _cascaded,
    _size,
    _stride_along,
    plan_reduction,
)
from compiler.ir import Expr, Op, ReduceOp
from compiler.scheduler import Store


class ReductionWriter:
    """Reduction layouts of the C++ writer (mixed into ``KernelWriter``)."""

    def reduction(self) -> list[str]:
        k = self.k
        plan = plan_reduction(k, self.live, self.is_xr)
        reduces, x_stores = list(plan.reduces), list(plan.x_stores)
        if plan.layout is Layout.WINDOW:
            return self.window_reduction(reduces, x_stores)
        if plan.layout is Layout.COLUMN:
            return self.column_reduction(reduces, x_stores)
        if plan.layout is Layout.SPLIT:
            return self.split_reduction(reduces, x_stores, plan.split)
        xscope = Scope(self.root)
        self.xscope = self.scope = xscope
        passes = [(list(r), list(s)) for r, s in plan.passes]
        self.plan_row_buffers(passes)
        for p, (pass_reduces, pass_stores) in enumerate(passes, start=1):
            self.pass_number = p
            self.emit_pass(pass_reduces, pass_stores, plan.split)
        self.scope = xscope
        for s in x_stores:
            self.store(s)
        self.scope, self.xscope = self.root, None
        if not k.ranges:
            return xscope.lines
        work = k.xnumel * k.rnumel * max(1, len(reduces)) * len(passes)
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

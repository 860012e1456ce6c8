"""How the C++ writer spells one reduction's accumulators: ``lanes`` slots folded in a fixed order
at the end (an index array beside them for argmax/argmin), and a cascade behind a float sum.

max/min/argmax/argmin follow ATen's NaN rules (NaN wins; argmax: first NaN, ties to the lowest
index); 32/64-bit integer sums and products wrap instead of overflowing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from compiler.codegen.cpp_expr import ExprWriter
from compiler.codegen.cpp_lang import FOLD, WIDE_INTS, compute_dtype, cvalue_type, reduce_init
from compiler.codegen.cpp_plan import MATH_LANE_BYTES, cascaded
from compiler.codegen.shared import size_code
from compiler.ir import Expr, Op, ReduceOp


def flat_rindex(rranges: tuple[int, ...]) -> str:
    """The flat index into the reduced space, from the reduced loop variables."""
    last = len(rranges) - 1
    return " + ".join(f"r{d} * {size_code(math.prod(rranges[d + 1:]))}" if d < last else f"r{d}"
                      for d in range(last + 1))


@dataclass(frozen=True)
class Accumulator:
    reduce: Expr  # the REDUCE it computes
    name: str
    lanes: int
    cascade: bool  # the pass flushes float sums into cascades
    short: bool = False  # ... which never leave their first level: a second lane array (``_c``)

    @property
    def is_arg(self) -> bool:
        return self.reduce.arg in (ReduceOp.ARGMAX, ReduceOp.ARGMIN)

    @property
    def flushes(self) -> bool:
        """Its lanes are pushed into a cascade every CASCADE_BLOCK lane iterations."""
        return self.cascade and cascaded(self.reduce)

    def declare(self) -> list[str]:
        e, acc, lanes = self.reduce, self.name, self.lanes
        op: ReduceOp = e.arg
        if self.is_arg:
            vt = cvalue_type(e.src[0].dtype)
            return [f"{vt} {acc}[{lanes}];", f"int64_t {acc}_i[{lanes}];",
                    (f"for (int j = 0; j < {lanes}; ++j) {{ {acc}[j] = {reduce_init(op, e.src[0].dtype)}; "
                    f"{acc}_i[j] = -1; }}")]
        t = cvalue_type(e.dtype)
        lines = [f"{t} {acc}[{lanes}];",
                 f"for (int j = 0; j < {lanes}; ++j) {acc}[j] = {reduce_init(op, e.dtype)};"]
        if self.flushes and self.short:
            lines += [f"{t} {acc}_c[{lanes}];", f"for (int j = 0; j < {lanes}; ++j) {acc}_c[j] = {t}(0);"]
        elif self.flushes:
            lines.append(f"crucible::SumCascade<{t}, {lanes}> {acc}_c;")
        return lines

    def push(self) -> str:
        """A flush of the lanes into the cascade (``SumCascade::push``'s first level, spelled inline
        for a short cascade). A short flush of one vector of lanes is kept a loop (``GCC unroll
        1``): g++ 12 unrolled it first, split the cascade's array into one scalar register a lane
        and added the lanes one by one (16 ``vaddss`` and their extracts per flush of a float
        softmax's sum); as a loop it is one vector add (softmax 8192x1024 0.94x the kernel's time).
        Wider lane arrays keep the unrolled form: a layer norm of 1024x8192 (64 float lanes) ran
        1.08-1.16x slower with the loop."""
        acc, lanes = self.name, self.lanes
        if self.short:
            t = cvalue_type(self.reduce.dtype)
            one_vector = lanes * compute_dtype(self.reduce.dtype).itemsize <= MATH_LANE_BYTES
            return (('_Pragma("GCC unroll 1") ' if one_vector else "") + f"for (int j = 0; j < {lanes}; ++j) "
                    f"{{ {acc}_c[j] = {acc}_c[j] + {acc}[j]; {acc}[j] = {t}(0); }}")
        return f"{acc}_c.push({acc});"

    def finish(self) -> str:
        """Each lane's own total into its slot (the column layout: one output point a lane)."""
        acc, t = self.name, cvalue_type(self.reduce.dtype)
        if self.short:
            return f"crucible::short_cascade_finish<{t}, {self.lanes}>({acc}_c, {acc});"
        return f"{acc}_c.finish({acc});"

    def update(self, w: ExprWriter, lane: str) -> None:
        """Fold the reduction's input at the current point into slot ``lane`` (lines into ``w``'s scope)."""
        e, acc = self.reduce, self.name
        op: ReduceOp = e.arg
        src = e.src[0]
        slot = f"{acc}[{lane}]"
        if op is ReduceOp.SUM and fusable_product(e):
            a, b = (w.value(factor) for factor in src.src)
            w.scope.lines.append(f"{slot} = crucible::madd({a}, {b}, {slot});")
            return
        v = w.value(src)
        lines = w.scope.lines
        if self.is_arg:
            cmp = ">" if op is ReduceOp.ARGMAX else "<"
            take = w.fresh("take")
            nan = f"!({slot} != {slot}) & (({v} != {v}) | ({v} {cmp} {slot}))"
            lines.append(f"const bool {take} = ({acc}_i[{lane}] < 0) | ({nan});")
            lines.append(f"{slot} = {take} ? {v} : {slot};")
            lines.append(f"{acc}_i[{lane}] = {take} ? ({flat_rindex(w.k.rranges)}) : {acc}_i[{lane}];")
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

    def fold(self, best_value: str = "nullptr") -> str:
        """The reduction's result from its lanes (argmax/argmin: the index; the value goes to
        ``best_value`` when that is a pointer)."""
        e, acc, lanes = self.reduce, self.name, self.lanes
        if self.is_arg:
            vt = cvalue_type(e.src[0].dtype)
            is_max = str(e.arg is ReduceOp.ARGMAX).lower()
            return f"crucible::fold_arg<{is_max}, {vt}, {lanes}>({acc}, {acc}_i, {best_value})"
        if self.flushes and self.short:
            return f"crucible::short_cascade_total<{cvalue_type(e.dtype)}, {lanes}>({acc}_c, {acc})"
        if self.flushes:
            return f"{acc}_c.total({acc})"
        return f"{FOLD[e.arg]}<{cvalue_type(e.dtype)}, {lanes}>({acc})"


def fusable_product(e: Expr) -> bool:
    """Whether sum reduction ``e`` sums products of its own float32/float64 dtype, which the
    accumulator takes as one fused multiply-add where the target has FMA (``crucible::madd``):
    kernels build with -ffp-contract=off, so ``acc + a * b`` rounded twice and took two vector ops.
    One rounding is as close to float64 or closer (sums' order differs from ATen's anyway), and the
    GPU's Triton kernels contract it too. A layer norm's sums (of x * 2^-k and of squared
    deviations) ran ~6% faster on a 2-core Xeon. A 16-bit product is not fused: its rounding to the
    narrow dtype is part of the value."""
    src = e.src[0]
    return (src.op is Op.MUL and e.dtype in (torch.float32, torch.float64)
            and src.dtype == e.dtype and all(s.dtype == e.dtype for s in src.src))


def accumulators(w: ExprWriter, reduces: tuple[Expr, ...], lanes: int, cascade: bool,
                 short: bool = False) -> list[Accumulator]:
    """One accumulator per reduction, named in order."""
    return [Accumulator(e, w.fresh("acc"), lanes, cascade, short) for e in reduces]

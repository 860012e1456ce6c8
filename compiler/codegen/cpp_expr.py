"""The C++ writer's expressions: names, scopes, values, casts and stores of one kernel.

Expressions become ``const`` locals in the innermost scope that has their inputs:
x-level values of a reduction kernel (they depend on outer indices and reduction
results only) are computed once per outer point, xr-level values inside the loop of
the pass that needs them, and in a loop nest over the outer dims values that do not vary
along the innermost dim before the innermost loop. The loop emitters (``cpp_loops``,
``cpp_reduction``) open the scopes; an ``ExprWriter`` fills them.
"""

from __future__ import annotations

import torch

from compiler import cpp_build, ir
from compiler.codegen.cpp_lang import (
    ATOMIC_LITERAL,
    CALL,
    FROM_FLOAT,
    INFIX,
    INT_CALL,
    TO_FLOAT,
    VECTOR_MATH,
    WIDE_INTS,
    WRAPPING,
    Scope,
    _safe_divisor,
    compute_dtype,
    cvalue_type,
    literal,
)
from compiler.codegen.shared import ExprLevels, Parameters, affine_index_code, leaf
from compiler.index_terms import nonnegative, positive_divisor
from compiler.ir import Expr, Op
from compiler.scheduler import Kernel, Store


def cpp_parameter_name(position: int, buffer: str) -> str:
    """``p_`` and the buffer's name as an identifier: readable in a debugger and a profile."""
    return cpp_build.sanitize_identifier(f"p_{buffer}")


SCALAR_MATH_BELOW = 32  # points: ATen's vectorized loop takes 2 x Vectorized<float>::size() (AVX-512) at a time
# Ops that a last-ulp change of an operand can move by a whole step (another integer): a quotient
# reaching one is divided exactly, never as a product with a reciprocal (``decided_divisions``).
# Comparisons are left out: most select between values that meet at the threshold (relu, clamp), and
# a batch norm's (x - mean) / std before a relu would divide every element.
DECIDING = frozenset({Op.FLOOR, Op.CEIL, Op.MOD, Op.FLOORDIV})


def decided_divisions(stores: list[Store]) -> frozenset[Expr]:
    """The divisions whose quotient reaches, through any ops, a DECIDING op on floats or a cast of a
    float to an integer or bool in these stores (users before operands: one pass over the kernel's
    expressions; integer steps on an argmax's index do not count, as comparisons do not)."""
    order: dict[Expr, None] = {}
    for store in stores:
        for e in store.value.walk():
            order.setdefault(e, None)
    feeds: set[Expr] = set()
    for e in reversed(order):
        decides = e.op in DECIDING or (e.op is Op.CAST and not e.dtype.is_floating_point)
        if e in feeds or (decides and e.src[0].dtype.is_floating_point):
            feeds.update(e.src)
    return frozenset(e for e in feeds if e.op is Op.DIV)


class ExprWriter:
    """Renders the values and stores of kernel ``k`` into the scope the loop emitters point it at."""

    def __init__(self, k: Kernel) -> None:
        self.k = k
        self.live = k.live_stores()
        self.decided = decided_divisions(self.live)
        self.params = Parameters(k, cpp_parameter_name)
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
        self.in_index = False  # rendering a load/store address (never overflows: no wrapping helpers)
        # a kernel over fewer points than two AVX-512 vectors calls libm's exp, erf and log, as ATen's
        # elementwise loop does below 2 x 16 floats (its scalar remainder loop). The prelude's
        # vectorizable exp is within an ulp, libm's expf correctly rounded: exp(exp(4)) was 1.98e18
        # off eager's, for a 0-d tensor, for 3 elements and for 7 beside a norm (fuzzer, crucible-cpp, seed 13)
        self.vector_math = not isinstance(k.xnumel * k.rnumel, int) or \
            k.xnumel * max(k.rnumel, 1) >= SCALAR_MATH_BELOW  # symbolic sizes: any size, vector math

    # --- names ----------------------------------------------------------------------------
    def fresh(self, prefix: str = "t") -> str:
        self.counter += 1
        return f"{prefix}{self.counter - 1}"

    def is_xr(self, e: Expr) -> bool:
        """Depends on a reduction index outside any REDUCE."""
        return self.levels.is_xr(e)

    # --- expressions --------------------------------------------------------------------------
    def value(self, e: Expr) -> str:
        code = leaf(e, literal)
        if code is not None:
            return code
        op = e.op
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
            buf = self.params.name(e.arg)
            code = f"{buf}[{self.index_code(e.src[0])}]"
            return f"{TO_FLOAT[e.dtype]}({code})" if e.dtype in TO_FLOAT else code
        a = [self.value(s) for s in e.src]
        src_dt = compute_dtype(e.src[0].dtype)
        dt = compute_dtype(e.dtype)
        t = cvalue_type(e.dtype)
        is_float = dt.is_floating_point
        if op is Op.CAST:
            inner = e.src[0]
            if (inner.op is Op.CAST and inner.dtype in (torch.int32, torch.int64) and dt.is_floating_point
                    and inner.src[0].dtype.is_floating_point and compute_dtype(inner.src[0].dtype) == dt):
                # float -> int -> the same float type: the prelude's int_round_trip (GCC folds the two
                # conversions into trunc, losing the +0.0 of a value in (-1, 0))
                code = f"crucible::int_round_trip<{cvalue_type(inner.dtype)}>({self.value(inner.src[0])})"
                return f"{TO_FLOAT[e.dtype]}({FROM_FLOAT[e.dtype]}({code}))" if e.dtype in FROM_FLOAT else code
            return self.cast(a[0], e.src[0].dtype, e.dtype)
        if op is Op.BITCAST:
            return f"crucible::bit_cast<{t}>({a[0]})"
        if op in WRAPPING and dt in WIDE_INTS and not self.in_index:
            return f"crucible::{WRAPPING[op]}<{t}>({a[0]}, {a[1]})"
        if op in INFIX:
            return f"{a[0]} {INFIX[op]} {a[1]}"
        if op is Op.DIV:
            if is_float and self.invariant_divisor(e) and e not in self.decided:
                # one division per row, a multiplication per element (as ATen's softmax does;
                # within an ulp of the quotient); vector division costs ~20x a multiplication.
                # Not where the quotient is decided on: trunc(x / y) of float32 values took another
                # integer where x * (1 / y) was an ulp below it (fuzzer, crucible-cpp, seed 363).
                # Only where 1 / d is a normal number: 1 / 2.9e-39 overflows, and -0.0 * inf was NaN
                # where -0.0 / 2.9e-39 is -0.0 (fuzzer, crucible-cpp, seed 28: addcdiv); the
                # row-invariant test lets the compiler unswitch the loop
                den = e.src[1]
                inv = ir.binary(Op.DIV, ir.const(1, den.dtype), den)
                info = torch.finfo(dt)
                mag = ir.unary(Op.ABS, inv)
                normal = ir.binary(Op.AND, ir.binary(Op.GE, mag, ir.const(info.tiny, den.dtype)),
                                   ir.binary(Op.LE, mag, ir.const(info.max, den.dtype)))
                return f"({self.value(normal)} ? {a[0]} * {self.value(inv)} : {a[0]} / {a[1]})"
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
            if op is Op.FLOORDIV and positive_divisor(e) and nonnegative(e.src[0]):
                return f"{a[0]} / {a[1]}"  # truncation is the floor
            return f"{INT_CALL[op]}<{t}>({a[0]}, {a[1]})"
        if op in (Op.MAX, Op.MIN):
            fn = "max_nan" if op is Op.MAX else "min_nan"
            return f"crucible::{fn}<{t}>({a[0]}, {a[1]})"
        if op is Op.WHERE:
            return f"{a[0]} ? {a[1]} : {a[2]}"
        if op is Op.POW:
            return f"std::pow({a[0]}, {a[1]})"
        if op is Op.FMA:
            return f"std::fma({a[0]}, {a[1]}, {a[2]})"
        if op is Op.NEG:
            return f"crucible::wrap_neg<{t}>({a[0]})" if dt in WIDE_INTS and not self.in_index else f"-{a[0]}"
        if op is Op.ABS:
            if is_float:
                return f"std::abs({a[0]})"
            # abs(INT_MIN) wraps to INT_MIN as in ATen; a plain -x is undefined there, and g++ took
            # the result as non-negative: tanh(abs(int32 min)) dropped its float abs and came out NaN
            # (fuzzer, crucible-cpp, seed 415)
            neg = f"crucible::wrap_neg<{t}>({a[0]})" if dt in WIDE_INTS and not self.in_index else f"{t}(-{a[0]})"
            return f"({a[0]} < 0 ? {neg} : {a[0]})"
        if op in VECTOR_MATH and dt == torch.float32 and self.vector_math:
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
        if src.is_floating_point and dst in (torch.int32, torch.int64):
            return f"crucible::float_to_int<{cvalue_type(dst)}>({code})"
        return f"static_cast<{cvalue_type(dst)}>({code})"

    def store(self, s: Store) -> None:
        buf = self.params.name(s.buffer)
        value = self.value(s.value)
        index = self.index_code(s.index)
        dt = s.value.dtype
        if dt in FROM_FLOAT:
            value = f"{FROM_FLOAT[dt]}({value})"
        self.scope.lines.append(f"{buf}[{index}] = {value};")

    def start_hoisting(self) -> Scope:
        """Values computed from here on that do not vary along the innermost outer dim go to the
        returned scope (emitted before the innermost loop)."""
        self.hoist = Scope(self.root)
        self.inner = ir.xvar(len(self.k.ranges) - 1)
        self._varies = {}
        return self.hoist


"""How the C++ writer spells the IR: types, literals, operators, reduction identities, blocks.

Shared by the C++ emitters (``cpp_expr``, ``cpp_loops``, ``cpp_accumulators``, ``cpp_reduction``).
"""

from __future__ import annotations

import math
import re
from typing import Any

import numpy as np
import torch

from compiler.codegen.shared import compute_dtype, reduction_identity
from compiler.ir import Expr, Op, ReduceOp

C_TYPE = {
    torch.float32: "float", torch.float64: "double", torch.float16: "uint16_t", torch.bfloat16: "uint16_t",
    torch.int8: "int8_t", torch.uint8: "uint8_t", torch.int16: "int16_t", torch.int32: "int32_t",
    torch.int64: "int64_t", torch.bool: "bool", torch.uint16: "uint16_t", torch.uint32: "uint32_t",
    torch.uint64: "uint64_t",
}
# How 16-bit floats enter and leave float32 arithmetic (bit-exact with c10::Half/BFloat16).
TO_FLOAT = {torch.float16: "crucible::half_to_float", torch.bfloat16: "crucible::bf16_to_float"}
FROM_FLOAT = {torch.float16: "crucible::float_to_half", torch.bfloat16: "crucible::float_to_bf16"}

INFIX = {Op.ADD: "+", Op.SUB: "-", Op.MUL: "*", Op.EQ: "==", Op.NE: "!=", Op.LT: "<", Op.LE: "<=",
         Op.GT: ">", Op.GE: ">=", Op.AND: "&", Op.OR: "|", Op.BITAND: "&", Op.BITOR: "|", Op.BITXOR: "^"}
CALL = {Op.EXP: "std::exp", Op.EXP2: "std::exp2", Op.LOG2: "std::log2", Op.LOG10: "std::log10", Op.LOG: "std::log", Op.SQRT: "std::sqrt", Op.SIN: "std::sin", Op.COS: "std::cos",
        Op.ERF: "std::erf", Op.FLOOR: "std::floor", Op.CEIL: "std::ceil"}
INT_CALL = {Op.FLOORDIV: "crucible::div_floor", Op.SHL: "crucible::shift_left", Op.SHR: "crucible::shift_right"}
FOLD = {ReduceOp.SUM: "crucible::fold_sum", ReduceOp.PROD: "crucible::fold_prod", ReduceOp.MAX: "crucible::fold_max",
        ReduceOp.MIN: "crucible::fold_min"}

def ctype(dtype: torch.dtype) -> str:
    try:
        return C_TYPE[dtype]
    except KeyError:
        raise ValueError(f"cpp renderer: no C++ type for {dtype}") from None


def cvalue_type(dtype: torch.dtype) -> str:
    """The C++ type values of ``dtype`` are computed in."""
    return ctype(compute_dtype(dtype))


def literal(value: Any, dtype: torch.dtype) -> str:
    """A C++ literal of the compute type of ``dtype``, exact for float32/float64."""
    dt = compute_dtype(dtype)
    if dt.is_floating_point:
        v = float(value)
        t = cvalue_type(dt)
        if math.isnan(v):
            return f"std::numeric_limits<{t}>::quiet_NaN()"
        if math.isinf(v):
            return f"{'' if v > 0 else '-'}std::numeric_limits<{t}>::infinity()"
        if dt == torch.float32:
            text = str(np.float32(v))  # the shortest text that reads back as this float32
            if not any(c in text for c in ".en"):
                text += ".0"
            return text + "f"
        return repr(v)
    if dt == torch.bool:
        return "true" if value else "false"
    v = int(value)
    if dt == torch.int64:
        return "INT64_MIN" if v == -(2**63) else f"INT64_C({v})"
    if dt == torch.uint64:
        return f"UINT64_C({v})"
    return f"{ctype(dt)}({v})"


def reduce_init(op: ReduceOp, dtype: torch.dtype) -> str:
    dt = compute_dtype(dtype)
    if op is ReduceOp.SUM:
        return literal(0, dt)
    if op is ReduceOp.PROD:
        return literal(1, dt)
    low = op in (ReduceOp.MAX, ReduceOp.ARGMAX)
    if dt.is_floating_point:
        return literal(reduction_identity(op, dt), dt)
    t = ctype(dt)  # the same extremes as reduction_identity, spelled by the type
    return f"std::numeric_limits<{t}>::{'lowest' if low else 'max'}()"


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


def _safe_divisor(e: Expr) -> bool:
    return e.op is Op.CONST and int(e.arg) not in (0, -1)


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


# A parallel loop's body runs inside a lambda that takes the kernel's pointers again as
# ``__restrict__`` parameters. OpenMP outlines the loop into a function that reaches the pointers
# through a shared struct, where g++ forgets the function's ``__restrict__``: it then versions
# every vectorized inner loop behind a run-time overlap test of input and output pointers, once
# per lane block, and keeps the fallback's accumulators in memory. Inlined, the lambda's
# parameters give the outlined body its no-alias facts back (softmax 8192x1024's kernel alone,
# 1 thread: 6.4-6.9 -> 5.8-5.9 ms; harness/bench/RESULTS.md). ``cpp_kernel.assemble`` fills the
# placeholders in once the parameters are known. Loops with ``simd`` (no dependences by
# assertion) or ``collapse`` (whose body must be the next loop) are left as they are.
RESTRICT_PARAMS = "/*restrict-params*/"
RESTRICT_ARGS = "/*restrict-args*/"


def block(head: str, body: list[str], pragma: str | None = None) -> list[str]:
    out = [pragma] if pragma else []
    if pragma and pragma.startswith("#pragma omp parallel for") and "simd" not in pragma \
            and "collapse" not in pragma:
        body = [f"[&]({RESTRICT_PARAMS}) {{", *["  " + line for line in body], f"}}({RESTRICT_ARGS});"]
    return out + [head + " {"] + ["  " + line for line in body] + ["}"]

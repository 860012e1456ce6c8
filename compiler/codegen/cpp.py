"""C++ renderer: a scheduled Kernel -> one ``extern "C"`` function over raw pointers.

The same scheduled kernels as the Triton renderer (same fusion decisions), rendered
as loop nests that g++ vectorizes and OpenMP spreads over cores:

* Pointwise kernels loop over ``kernel.ranges`` as nested loops (no div/mod per
  element): the outer loops are collapsed into one OpenMP ``parallel for`` when the
  work pays for threads, the innermost loop runs over the last dimension and gets
  ``#pragma omp simd`` when every access along it is contiguous or invariant.
* Reduction kernels run one outer point per iteration of a parallel loop. Per outer
  point the reductions are computed in *passes* over the reduced dims: a pass holds
  every reduction whose inputs are ready (softmax: max; exp-sum; then the xr-level
  store; layer_norm: mean; variance; normalize). Values of the reduced space
  (``xr`` level) that a later pass needs again are recomputed when cheap (rows stay in
  cache between passes) and kept in a per-thread row buffer when expensive (softmax's exp).
* Reductions over a leading dim (inputs contiguous along the outer dim) vectorize across
  a tile of outer points instead; reductions with few outer points and long rows are cut
  into chunks reduced in parallel and folded in chunk order (independent of thread count).
* A reduction keeps ``L`` lane accumulators (one per element of the vectorized inner
  loop), folded in a fixed order at the end; float sums flush their lanes into a
  cascade every block, so long rows keep log-like error growth like ATen's cascade
  sum. max/min/argmax/argmin follow ATen's NaN rules (NaN wins; argmax: first NaN,
  ties to the lowest index).

fp16/bf16 are stored as 16-bit and computed in float32 (casts to them round, as a
tensor would). Integer division by zero gives 0 instead of trapping. Every helper
the generated code calls lives in ``cpp_prelude.h``; building, caching and loading
live in ``compiler.cpp_build``.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np
import torch

from compiler.codegen.base import RenderedKernel, Renderer
from compiler.ir import Op, ReduceOp
from compiler.scheduler import Kernel

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
CALL = {Op.EXP: "std::exp", Op.LOG: "std::log", Op.SQRT: "std::sqrt", Op.SIN: "std::sin", Op.COS: "std::cos",
        Op.ERF: "std::erf", Op.FLOOR: "std::floor", Op.CEIL: "std::ceil"}
INT_CALL = {Op.FLOORDIV: "crucible::div_floor", Op.SHL: "crucible::shift_left", Op.SHR: "crucible::shift_right"}
FOLD = {ReduceOp.SUM: "crucible::fold_sum", ReduceOp.PROD: "crucible::fold_prod", ReduceOp.MAX: "crucible::fold_max",
        ReduceOp.MIN: "crucible::fold_min"}

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


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


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
        return literal(-math.inf if low else math.inf, dt)
    t = ctype(dt)
    return f"std::numeric_limits<{t}>::{'lowest' if low else 'max'}()"


class CppRenderer(Renderer):
    codegen = "cpp"
    # Every IR op has an explicit rendering below (expression ops in ``_KernelWriter.op_code``,
    # leaves and REDUCE in ``_KernelWriter.value``).
    OPS: ClassVar[frozenset[Op]] = frozenset({
        Op.CONST, Op.XVAR, Op.RVAR, Op.LOAD,
        Op.NEG, Op.ABS, Op.EXP, Op.LOG, Op.SQRT, Op.RSQRT, Op.SIN, Op.COS, Op.ERF, Op.FLOOR, Op.CEIL, Op.ISNAN,
        Op.NOT, Op.BITNOT, Op.CAST,
        Op.ADD, Op.SUB, Op.MUL, Op.DIV, Op.FLOORDIV, Op.MOD, Op.MAX, Op.MIN, Op.EQ, Op.NE, Op.LT, Op.LE, Op.GT,
        Op.GE, Op.AND, Op.OR, Op.BITAND, Op.BITOR, Op.BITXOR, Op.SHL, Op.SHR,
        Op.WHERE,
        Op.REDUCE,
    })

    def render(self, kernel: Kernel) -> RenderedKernel:
        self.check_ops(kernel)
        from compiler.codegen.cpp_kernel import KernelWriter

        return KernelWriter(kernel).write()

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

Where each part lives: the reduction's decisions (layout, passes, lanes, cascades, row
buffers, chunks) as data in ``cpp_plan``; values and stores in ``cpp_expr``; loop nests in
``cpp_loops`` and ``cpp_reduction``; accumulators in ``cpp_accumulators``; C++ spellings in
``cpp_lang``; the function around them in ``cpp_kernel``.

fp16/bf16 are stored as 16-bit and computed in float32 (casts to them round, as a
tensor would). Integer division by zero gives 0 instead of trapping. Every helper
the generated code calls lives in ``cpp_prelude.h``; building, caching and loading
live in ``compiler.cpp_build``.
"""

from __future__ import annotations

from typing import ClassVar

from compiler.capabilities import MAX_PERSISTENT_RNUMEL, Capabilities
from compiler.codegen.base import RenderedKernel, Renderer
from compiler.codegen.cpp_kernel import write_kernel
from compiler.ir import Op
from compiler.scheduler import Kernel


class CppRenderer(Renderer):
    codegen = "cpp"
    # Every IR op has an explicit rendering (expression ops in ``cpp_expr.ExprWriter.op_code``,
    # leaves in ``ExprWriter.value``, REDUCE by ``cpp_accumulators``).
    OPS: ClassVar[frozenset[Op]] = frozenset({
        Op.CONST, Op.XVAR, Op.RVAR, Op.LOAD, Op.SIZE,
        Op.NEG, Op.ABS, Op.EXP, Op.EXP2, Op.LOG2, Op.LOG10, Op.LOG, Op.SQRT, Op.RSQRT, Op.SIN, Op.COS, Op.ERF, Op.FLOOR, Op.CEIL, Op.ISNAN,
        Op.NOT, Op.BITNOT, Op.CAST, Op.BITCAST,
        Op.ADD, Op.SUB, Op.MUL, Op.DIV, Op.FLOORDIV, Op.MOD, Op.MAX, Op.MIN, Op.EQ, Op.NE, Op.LT, Op.LE, Op.GT,
        Op.GE, Op.AND, Op.OR, Op.BITAND, Op.BITOR, Op.BITXOR, Op.SHL, Op.SHR, Op.POW,
        Op.WHERE, Op.FMA,
        Op.REDUCE,
    })

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(self.codegen, self.OPS, MAX_PERSISTENT_RNUMEL, symbolic_persistent=True)

    def render(self, kernel: Kernel) -> RenderedKernel:
        self.check_ops(kernel)
        return write_kernel(kernel)

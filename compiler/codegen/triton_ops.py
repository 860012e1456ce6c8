"""How the Triton renderer spells IR operations: infix operators, ``tl``/libdevice calls, the
combine functions of reductions and their identities."""

from __future__ import annotations

from collections.abc import Callable

import torch

from compiler.codegen.shared import reduction_identity
from compiler.codegen.triton_literals import literal
from compiler.ir import Op, ReduceOp


def reduce_identity(op: ReduceOp, dtype: torch.dtype) -> str:
    value = reduction_identity(op, dtype)
    if op in (ReduceOp.SUM, ReduceOp.PROD) or dtype.is_floating_point:
        return literal(value, dtype)
    if op in (ReduceOp.MAX, ReduceOp.ARGMAX):
        return f"({value + 1} - 1)"  # the literal -2**63 would not parse as an int64 constant
    return str(value)


BINARY_INFIX = {Op.ADD: "+", Op.SUB: "-", Op.MUL: "*", Op.EQ: "==", Op.NE: "!=", Op.LT: "<", Op.LE: "<=",
                Op.GT: ">", Op.GE: ">=", Op.BITAND: "&", Op.BITOR: "|",
                Op.BITXOR: "^", Op.SHL: "<<", Op.SHR: ">>"}
UNARY_CALL = {Op.EXP: "tl.exp", Op.EXP2: "tl.exp2", Op.LOG2: "tl.log2", Op.LOG: "tl.log", Op.SQRT: "tl.sqrt", Op.RSQRT: "tl.rsqrt", Op.SIN: "tl.sin",
              Op.COS: "tl.cos", Op.ERF: "tl.erf", Op.FLOOR: "tl.floor", Op.CEIL: "tl.ceil", Op.ABS: "tl.abs"}
# Triton's float32 exp, log, sin, cos, sqrt and rsqrt are the approximate PTX instructions (ex2.approx
# after a product by log2(e), lg2.approx, sin.approx, sqrt.approx, ...): many ulps off for large
# arguments (cosh(sinh(x)) on the H200: RMSE against float64 3.2x eager's). Float32 results call
# libdevice's (CUDA's expf, logf, ...: what ATen's CUDA kernels call) and the IEEE square root; 16-bit
# results, computed in float32, keep the fast ones (their error is far under a 16-bit ulp), and so
# does the interpreter (numpy's).
PRECISE_FP32 = {Op.EXP: "libdevice.exp", Op.EXP2: "libdevice.exp2", Op.LOG2: "libdevice.log2", Op.LOG10: "libdevice.log10", Op.LOG: "libdevice.log", Op.SIN: "libdevice.sin", Op.COS: "libdevice.cos",
                Op.SQRT: "tl.sqrt_rn", Op.RSQRT: "libdevice.rsqrt"}
INTERPRETED_VIA_FP64 = frozenset({Op.EXP, Op.EXP2, Op.LOG2, Op.LOG, Op.SIN, Op.COS})
COMBINE = {ReduceOp.SUM: "tl.standard._sum_combine", ReduceOp.PROD: "tl.standard._prod_combine",
           ReduceOp.MAX: "tl.standard._elementwise_max", ReduceOp.MIN: "tl.standard._elementwise_min"}


def interpreted_fma(emit: Callable[[str], str], x: str, y: str, z: str, dtype: torch.dtype) -> str:
    """fma(x, y, z) rounded once, in Triton's interpreter, whose ``tl.fma`` is numpy's x * y + z: two
    roundings, and a product that overflows where the fma's result is finite. ``emit`` names a line.

    float32 goes through float64, where a product of float32s is exact. float64 has nothing wider:
    Dekker's product (x and y split into 26-bit halves) gives the product's rounding error exactly and
    Knuth's two-sum the sum's, and the sum plus both errors is the fma but in rare double-rounding
    ties. Two roundings put lerp(x0, x1, -0.5) an ulp off ATen's fused one at a third of the values,
    and fmod(x1, expm1(lerp(...))) multiplied that by the quotient: 22,479 ulps off eager (fuzzer,
    crucible-interpret --max-nodes 12, seed 477). Where a split or the product overflows (|x| or |y|
    above 2^996), a quarter of the product plus a quarter of z, times 4, rounded twice, is finite where
    the fma is (lerp(1.0, -finfo.max, -0.5) was inf, ATen finfo.max / 2; fuzzer, crucible-interpret);
    with an infinite z it is z, and an infinite or NaN x or y takes IEEE's x * y + z (addcmul(inf, -1e308,
    1e308) and addcmul(-1.0, 5e-324, inf) were NaN, ATen's inf: found testing this function)."""
    if dtype == torch.float32:
        return emit(f"tl.fma({', '.join(f'({v}).to(tl.float64)' for v in (x, y, z))}).to(tl.float32)")

    def split(v: str) -> tuple[str, str]:
        c = emit(f"{v} * 134217728.0 + {v}")  # v * (2^27 + 1) rounded once; 2^27 + 1 is no float32 literal
        high = emit(f"{c} - ({c} - {v})")
        return high, emit(f"{v} - {high}")

    product = emit(f"{x} * {y}")
    (xh, xl), (yh, yl) = split(x), split(y)
    product_error = emit(f"(({xh} * {yh} - {product}) + {xh} * {yl} + {xl} * {yh}) + {xl} * {yl}")
    total = emit(f"{product} + {z}")
    part = emit(f"{total} - {product}")
    tail = emit(f"(({product} - ({total} - {part})) + ({z} - {part})) + {product_error}")
    fused = emit(f"tl.where({tail} == 0.0, {total}, {total} + {tail})")  # a zero tail keeps -0.0 + -0.0
    infinite = lambda v: f"(({v} == float('inf')) | ({v} == -float('inf')))"  # noqa: E731
    finite = lambda v: f"({v} * 0.0 == 0.0)"  # noqa: E731
    # The scaled sum only where finite x and y overflow the product (|x| > 1: x / 4 is exact); an infinite
    # z plus that finite exact product is z (the scaled sum was inf - inf). Nested selects, not &: an
    # operand may be a Python float, and the interpreter's & of a Python bool and a tensor fails.
    scaled = emit(f"tl.where({infinite(z)}, {z}, ({x} * 0.25 * {y} + {z} * 0.25) * 4.0)")
    twice = emit(f"tl.where({infinite(product)}, tl.where({finite(x)}, tl.where({finite(y)}, {scaled}, {total}), "
                 f"{total}), {total})")
    return emit(f"tl.where({finite(fused)}, {fused}, {twice})")

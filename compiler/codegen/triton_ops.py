"""How the Triton renderer spells IR operations: infix operators, ``tl``/libdevice calls, the
combine functions of reductions and their identities."""

from __future__ import annotations

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

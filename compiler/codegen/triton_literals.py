"""Python values as Triton source: the constants a kernel's expressions spell.

Two Triton behaviours shape them. Triton turns every constant equal to 0 into +0.0
(``semantic.scalar_constant`` returns the type's null value: 3.6 on the H200 and 3.8's interpreter;
``harness/FINDINGS.md``), so -0.0 is built from its bit pattern. And it types a Python float as
float32, so a float64 constant that float32 cannot hold is a float64 ``tl.full``, and an operation's
literal operands are typed where Triton's typing would narrow them (``typed_operands``,
``libdevice_operands``).
"""

from __future__ import annotations

import math

import torch

from compiler.ir import Expr, Op

TL_DTYPE = {
    torch.float32: "tl.float32", torch.float16: "tl.float16", torch.bfloat16: "tl.bfloat16",
    torch.float64: "tl.float64", torch.int8: "tl.int8", torch.int16: "tl.int16", torch.int32: "tl.int32",
    torch.int64: "tl.int64", torch.uint8: "tl.uint8", torch.bool: "tl.int1",
}
NEGATIVE_ZERO_F32 = "tl.full([], -2147483648, tl.int32).to(tl.float32, bitcast=True)"
NEGATIVE_ZERO_F64 = "tl.full([], -9223372036854775808, tl.int64).to(tl.float64, bitcast=True)"


def literal(value: object, dtype: torch.dtype) -> str:
    if dtype.is_floating_point:
        v = float(value)  # type: ignore[arg-type]
        if math.isnan(v):
            return "float('nan')"
        if math.isinf(v):
            return "float('inf')" if v > 0 else "float('-inf')"
        if v == 0 and math.copysign(1.0, v) < 0:
            return NEGATIVE_ZERO_F64 if dtype == torch.float64 else NEGATIVE_ZERO_F32
        if dtype == torch.float64 and torch.tensor(v, dtype=torch.float32).item() != v:
            # Triton types a Python float as fp32: pi/2 in a float64 kernel was 1.5707963705
            return f"tl.full([], {v!r}, tl.float64)"
        return repr(v)
    if dtype == torch.bool:
        return "True" if value else "False"  # int1, so `mask & True` stays a mask
    return str(int(value))  # type: ignore[call-overload]


def tensor_literal(value: object, dtype: torch.dtype) -> str:
    """``value`` as a 0-d tensor of ``dtype`` (a bare literal is int32 or float32 to Triton)."""
    code = literal(value, dtype)
    return code if code.startswith("tl.") else f"tl.full([], {code}, {TL_DTYPE[dtype]})"


def typed_operands(e: Expr, codes: list[str], dtype: torch.dtype) -> list[str]:
    """``e``'s operand codes with each literal as a 0-d tensor of ``dtype``: a bare literal is float32
    to Triton, and libdevice picks its function by every operand's type (and a Python float has no
    ``.to``)."""
    return [tensor_literal(operand.arg, dtype) if operand.op is Op.CONST else code
            for operand, code in zip(e.src, codes)]


def literal_operands(e: Expr, codes: list[str]) -> list[str]:
    """The operands of an op over literals alone, each a 0-d tensor of its own dtype where that is
    wider than Triton's literal types (int64, float64). Triton computes such an op in int32 or
    float32: ``abs`` of an int64 0 (an argmax over a dim of size 1) was an int32 scalar, and the
    int64 argmax over it masked its lanes with int64's minimum, which int32 refused (fuzzer,
    crucible-interpret, seed 313). Other operands stay as they are (an op with a tensor operand
    takes its type)."""
    if not e.src or any(s.op is not Op.CONST for s in e.src):
        return codes
    return [tensor_literal(s.arg, s.dtype) if s.dtype in (torch.int64, torch.float64) else code
            for s, code in zip(e.src, codes)]


def libdevice_operands(e: Expr, codes: list[str], dtype: torch.dtype) -> list[str]:
    """``e``'s operands for a libdevice call computing in ``dtype``: literals typed (``typed_operands``)
    and every other operand cast to ``dtype``. libdevice has no mixed-type overloads (KeyError
    (fp32, fp64)), and an operand's Triton type can be narrower than its IR dtype: a select of float
    literals is float32 (fuzzer, crucible-triton on the H200: floor division of a float64 ``sign(x)``,
    which is ``where(x > 0, 1.0, ...)``, by a float16 tensor called libdevice.fmod with float32 and
    float64 operands). The cast of an operand already of ``dtype`` is no operation."""
    return [code if operand.op is Op.CONST else f"({code}).to({TL_DTYPE[dtype]})"
            for operand, code in zip(e.src, typed_operands(e, codes, dtype))]


def c_fmod(x: float, y: float) -> float:
    """C's fmod of two literals, which the renderer writes as its value: Python would evaluate a
    literal ``x % y`` itself, with the divisor's sign and ZeroDivisionError at 0 (a floor division of
    an empty sum by itself, 0.0 % 0.0, raised in Triton's interpreter; fuzzer, crucible-sim, seed 527),
    where ATen's fmod is NaN for a zero divisor or an infinite dividend."""
    if y == 0 or math.isinf(x) or math.isnan(x) or math.isnan(y):
        return math.nan
    return math.fmod(x, y)

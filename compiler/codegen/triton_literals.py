"""Python values as Triton source: the constants a kernel's expressions spell.

Two Triton behaviours shape them. Triton turns every constant equal to 0 into +0.0
(``semantic.scalar_constant`` returns the type's null value: 3.6 on the H200 and 3.8's interpreter;
``harness/FINDINGS.md``), so -0.0 is built from its bit pattern. And it types a Python float as
float32, so a float64 constant that float32 cannot hold is a float64 ``tl.full``.
"""

from __future__ import annotations

import math

import torch

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

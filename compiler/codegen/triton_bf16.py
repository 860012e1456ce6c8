"""bfloat16 conversions for kernels run in Triton's interpreter, written on the bits.

The interpreter converts between bfloat16 and float32 with a generic float-format routine that
gets subnormals wrong in both directions (Triton 3.6 and 3.8: bf16 9.2e-41 loads as 0.0 and
-1.0e-39 as -4.4e-39; a float32 9.2e-41 stores as 0.0; ``harness/FINDINGS.md``), and truncates
float32 -> bfloat16 instead of rounding. A bfloat16 is the upper half of a float32, so exact
conversions are a shift and a round-to-nearest-even on the bits. Compiled kernels keep
``.to()``: the GPU's conversions are exact.
"""

from __future__ import annotations

import torch

from compiler.codegen.shared import compute_dtype


def bf16_bits_to_f32(loaded: str) -> str:
    """The float32 value of a loaded bfloat16 block (exact, subnormals included)."""
    return f"(({loaded}).to(tl.uint16, bitcast=True).to(tl.uint32) << 16).to(tl.float32, bitcast=True)"


def _rounded_bits(value: str) -> str:
    # float32 bits rounded to nearest even at bit 16 (an overflow past max carries into inf)
    bits = f"({value}).to(tl.uint32, bitcast=True)"
    return f"(({bits} + 0x7FFF + (({bits} >> 16) & 1)) & 0xFFFF0000)"


def f32_rounded_to_bf16(code: str) -> str:
    """A float32 value rounded to bfloat16's precision, still a float32 (NaN kept)."""
    value = f"({code}).to(tl.float32)"
    return f"tl.where({value} != {value}, {value}, {_rounded_bits(value)}.to(tl.float32, bitcast=True))"


def f32_to_bf16(name: str) -> str:
    """The float32 block ``name`` as a bfloat16 block to store (rounded to nearest even; NaN as 0x7FC0)."""
    upper = f"({_rounded_bits(name)} >> 16).to(tl.uint16)"
    return f"tl.where({name} != {name}, 0x7FC0, {upper}).to(tl.uint16).to(tl.bfloat16, bitcast=True)"


def widened(loaded: str, dtype: torch.dtype, interpret: bool) -> str:
    """A loaded block of ``dtype`` in its compute dtype (16-bit floats in float32)."""
    if dtype == torch.bfloat16 and interpret:
        return bf16_bits_to_f32(loaded)
    return f"{loaded}.to(tl.float32)" if compute_dtype(dtype) != dtype else loaded


def interpreted_bf16_store(value: str, dtype: torch.dtype, interpret: bool, section: list[str]) -> str | None:
    """The interpreter's bfloat16 block to store for the float32 block ``value``, bound to a name in
    ``section`` first (the conversion reads it three times); None where ``.to()`` is exact."""
    if dtype != torch.bfloat16 or not interpret:
        return None
    section.append(f"bf{len(section)} = {value}")
    return f32_to_bf16(f"bf{len(section) - 1}")

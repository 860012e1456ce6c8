"""The parity oracle of the compiler tests (``tests.compiler.parity.assert_close``): what it lets
through and what it catches."""

from __future__ import annotations

import pytest
import torch

from tests.compiler.parity import Reference, assert_close, reference_for


def test_a_float32_result_of_an_fp16_chain_is_judged_by_fp16_rounding() -> None:
    """``(x_fp16 * y).float()``: eager rounds to fp16 after each op; a kernel rounding once may land
    one fp16 step away from eager. That passes; a value further from float64 than fp16's tolerance
    allows does not, and without a reference float32's own tolerance applies."""
    exact = torch.tensor([0.0690, 1.1085, -4.3392], dtype=torch.float64)
    eager = exact.half().float()
    step = torch.tensor([6.1035e-05, 9.765625e-04, 3.90625e-03])  # one fp16 step at each value
    reference = Reference(exact, torch.float16)
    assert_close(eager + step, eager, reference=reference)
    with pytest.raises(AssertionError, match="further from float64 than eager"):
        assert_close(eager + 0.05, eager, reference=reference)
    with pytest.raises(AssertionError):
        assert_close(eager + step, eager)  # float32 outputs of float32 work: no fp16 allowance


def test_the_reference_is_taken_in_float64_at_the_coarsest_input_dtype() -> None:
    x, y = torch.randn(4, dtype=torch.float16), torch.randn(4, dtype=torch.bfloat16)
    both = reference_for(lambda a, b: a * b, (x, y))
    assert both.dtype is torch.bfloat16 and both.value.dtype is torch.float64
    assert reference_for(lambda a: a * 2, (x,)).dtype is torch.float16
    assert reference_for(lambda a: a * 2, (torch.randn(4),)) is None

"""The sign of a NaN is unspecified: a ``signbit`` output may differ from eager's where its input is NaN.

IEEE 754 leaves the sign bit of a NaN an arithmetic operation returns unspecified (only copies,
negation, abs and copysign define it), and kernels differ: ATen's CPU exp of a bfloat16 NaN keeps
its sign, Crucible's float32 exp and bfloat16 rounding return the canonical (positive) quiet NaN
(fuzzer, crucible-cpp, seed 24: ``signbit(exp(x))``). ``nan_sign_only`` accepts such a difference
where eager's input to ``signbit`` is NaN at every differing position and nowhere else.
"""

from __future__ import annotations

import torch

from harness.fuzz.graph import FuzzGraph
from harness.fuzz.ties import value_of

SIGNBIT = "aten.signbit.default"


def nan_sign_only(graph: FuzzGraph, name: str, eager: torch.Tensor, compiled: torch.Tensor) -> bool:
    """Whether the ``signbit`` output ``name`` differs from eager only where its input is NaN."""
    node = next((n for n in graph.nodes if name in n.outputs), None)
    if node is None or node.op != SIGNBIT or eager.shape != compiled.shape or eager.dtype != torch.bool:
        return False
    source = node.expr.removeprefix(f"{SIGNBIT}(").removesuffix(")")
    if source not in graph.input_names() + [o for n in graph.nodes for o in n.outputs]:
        return False
    try:
        values = value_of(graph, source, eager.device)
    except Exception:  # noqa: BLE001 -- judged strictly
        return False
    if values is None or values[0].shape != eager.shape or not values[0].is_floating_point():
        return False
    differs = eager.cpu() != compiled.cpu()
    return bool(torch.isnan(values[0])[differs].all())

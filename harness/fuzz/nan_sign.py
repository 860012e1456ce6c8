"""The sign of a NaN is unspecified: a ``signbit`` output may differ from eager's where its input is
NaN, and a ``copysign`` output in sign where its sign operand is.

IEEE 754 leaves the sign bit of a NaN an arithmetic operation returns unspecified (only copies,
negation, abs and copysign define it), and kernels differ: ATen's CPU exp of a bfloat16 NaN keeps
its sign, Crucible's float32 exp and bfloat16 rounding return the canonical (positive) quiet NaN
(fuzzer, crucible-cpp, seed 24: ``signbit(exp(x))``). ``nan_sign_only`` accepts such a difference
where eager's input to ``signbit`` is NaN at every differing position and nowhere else, on the
``signbit`` output itself or on an elementwise logical op of it (fuzzer, crucible-interpret, seed 266:
``logical_and(x, signbit(log(x)))``, the interpreter's log of a negative number a NaN with the sign
bit set).
"""

from __future__ import annotations

import torch

from harness.fuzz.graph import FuzzGraph
from harness.fuzz.ties import value_of

SIGNBIT = "aten.signbit.default"
COPYSIGN = "aten.copysign.Tensor"
# elementwise ops of bools through which a signbit's NaN positions are followed to the output
LOGICAL = frozenset({"aten.logical_and.default", "aten.logical_or.default", "aten.logical_xor.default",
                     "aten.logical_not.default", "aten.bitwise_and.Tensor", "aten.bitwise_or.Tensor",
                     "aten.bitwise_xor.Tensor", "aten.bitwise_not.default"})


def _arguments(expr: str, op: str) -> list[str]:
    return [a.strip() for a in expr.removeprefix(f"{op}(").removesuffix(")").split(",")]


def nan_sign_only(graph: FuzzGraph, name: str, eager: torch.Tensor, compiled: torch.Tensor) -> bool:
    """Whether the ``signbit`` output ``name`` differs from eager only where its input is NaN, or the
    ``copysign`` output only in sign and only where its sign operand is NaN (fuzzer, crucible-cpp,
    seed 28: copysign(x, layer_norm(x)) over rows holding inf: eager's NaN negative, Crucible's not)."""
    node = next((n for n in graph.nodes if name in n.outputs), None)
    if node is not None and node.op in LOGICAL and eager.dtype == torch.bool:
        # a logical op of a signbit output: the differing positions are the signbit's NaN ones
        signbits = [n for n in graph.nodes if n.op == SIGNBIT and n.outputs[0] in _arguments(node.expr, node.op)]
        node = signbits[0] if len(signbits) == 1 else None
    if node is None or node.op not in (SIGNBIT, COPYSIGN) or eager.shape != compiled.shape:
        return False
    args = _arguments(node.expr, node.op)
    source = args[0] if node.op == SIGNBIT else (args[1] if len(args) == 2 else "")
    if source not in graph.input_names() + [o for n in graph.nodes for o in n.outputs]:
        return False
    if (eager.dtype == torch.bool) != (node.op == SIGNBIT):
        return False
    try:
        values = value_of(graph, source, eager.device)
    except Exception:  # noqa: BLE001 -- judged strictly
        return False
    if values is None or not values[0].is_floating_point():
        return False
    try:
        nan = torch.isnan(values[0]).expand(eager.shape)
    except RuntimeError:  # not broadcastable to the output: judged strictly
        return False
    e, c = eager.cpu(), compiled.cpu()
    if node.op == SIGNBIT:
        return bool(nan[e != c].all())
    differs = ~((e == c) | (torch.isnan(e) & torch.isnan(c)))
    same_magnitude = (e.abs() == c.abs()) | (torch.isnan(e) & torch.isnan(c))
    return bool((nan & same_magnitude)[differs].all())

"""The sign of a NaN is unspecified: a ``signbit`` output may differ from eager's where its input is
NaN, and a ``copysign`` output in sign where its sign operand is (and what is computed from either,
where eager with NaNs of one sign computes it).

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
    seed 28: copysign(x, layer_norm(x)) over rows holding inf: eager's NaN negative, Crucible's not);
    or, further downstream of either, ``name`` is what eager computes with every NaN of one sign."""
    return _at_the_sign_read(graph, name, eager, compiled) or _with_nans_of_one_sign(graph, name, compiled)


def _with_nans_of_one_sign(graph: FuzzGraph, name: str, compiled: torch.Tensor) -> bool:
    """Whether ``name``, downstream of a ``signbit`` or ``copysign``, equals at every position eager's
    graph run with every NaN a node computes made positive, or the run with every NaN negative
    (position by position: a kernel's NaN signs need not agree across positions). Fuzzer,
    crucible-interpret, seed 441: topk(copysign(x, pow(x, x)), 1, dim=0) over a dim of one, ATen's pow
    of a negative base a NaN with the sign bit set, the interpreter's without. The runs set the sign
    with copysign: a product with -1 keeps a NaN's sign on x86, so the negative run had kept eager's
    positive NaNs (fuzzer, crucible-cpp, seed 452: where(signbit(fmod(x, -0.0)), clamp_min(x, 2), x),
    ATen's float64 fmod by -0.0 a positive NaN, Crucible's a negative one)."""
    made = {out: n for n in graph.nodes for out in n.outputs}
    if not any(made[v].op in (SIGNBIT, COPYSIGN) for v in graph.upstream([name]) if v in made):
        return False
    index = graph.outputs.index(name) if name in graph.outputs else -1
    c = compiled.cpu()
    explained = torch.zeros(c.shape, dtype=torch.bool)
    for sign in (1.0, -1.0):
        def one_sign(value, dtype_name, position, sign=sign):  # noqa: ANN001, ANN202 -- a graph hook
            if not isinstance(value, torch.Tensor) or not value.is_floating_point():
                return value
            # copysign sets a NaN's sign; a product with -1 need not (x86 returns the NaN operand as it is)
            return torch.where(torch.isnan(value), torch.copysign(value, sign), value)
        try:
            outs = graph.function(hook=one_sign)(*graph.make_inputs("cpu"))
        except Exception:  # noqa: BLE001 -- judged strictly
            return False
        got = outs[index] if index >= 0 else None
        if not (isinstance(got, torch.Tensor) and got.shape == c.shape and got.dtype == c.dtype):
            return False
        explained |= (got == c) | (torch.isnan(got) & torch.isnan(c)) if got.is_floating_point() else got == c
    return bool(explained.all())


def _at_the_sign_read(graph: FuzzGraph, name: str, eager: torch.Tensor, compiled: torch.Tensor) -> bool:
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

"""Boolean and integer outputs that rounding noise decides, where neither eager nor the float64 reference can.

A comparison, a logical op or a cast to bool or an integer turns a float into a decision. On float32 and
16-bit operands the float64 reference usually decides too, and ``ParityOracle`` accepts a compiled
decision that agrees with it. ``noise_decisions`` accepts a compiled output that differs from eager's
only where rounding noise explains it, in two cases the reference cannot settle:

* **float64 operands**: the reference is eager's own computation. Where an operand is rounding noise
  around the threshold (a variance that is exactly 0 and that eager computes as 5e-32), neither knows
  the side. The noise is ``NOISE`` of the largest finite magnitude the operands were computed from
  (their inputs and every value between); a truth value (logical ops, a cast to bool) may flip where
  its operand is within it of 0, a comparison where the compared pair's difference is, and a cast to
  an integer may give any truncation of its operand give or take it.
* **a comparison of narrower floats within ``TIE_ULPS`` ulps of each other** in eager, that is not an
  exact tie in eager and the float64 reference alike: ``ge(x, sinh(x))`` of float32 values near 0,
  where eager's correctly rounded sinh equals x and a sinh an ulp off (within the value checks) falls
  on either side. A real tie must be decided as eager decides it (a ``ge`` compiled as ``gt`` fails).

A flip where the operands are real values still fails, and so does any output of another op (a
decision passed on through further ops is judged strictly).

Examples: (fuzzer, crucible-cpp, seed 150) ``logical_xor(var(x, [0]), var(x, [0, 1]))`` over an
expanded float64 tensor holding one value: both variances are exactly 0, Crucible computes 0, eager's
whole-tensor variance is 5.1e-32, so eager's xor is True everywhere and Crucible's False; (fuzzer,
crucible-interpret, seed 153) ``ge(x, sinh(x))`` over 65,535 float32 randn values differed at 3
positions |x| < 6e-4, where Crucible's sinh is an ulp from eager's.
"""

from __future__ import annotations

from typing import Any

import torch

from harness.fuzz.graph import FuzzGraph
from harness.fuzz.ties import _arguments, _Value, value_of

# 2^-40 of the magnitudes involved: thousands of float64 unit roundoffs (an accumulation of a few
# hundred terms stays well inside), while every value a float32 or narrower step could make is far out
NOISE = 2.0 ** -40
_TRUTH = ("aten.logical_and.default", "aten.logical_or.default", "aten.logical_xor.default",
          "aten.logical_not.default")
_COMPARE = tuple(f"aten.{op}.{kind}" for op in ("eq", "ne", "lt", "le", "gt", "ge") for kind in ("Tensor", "Scalar"))
# a comparison of float32 or narrower values that eager found within this many ulps of each other
TIE_ULPS = 4
DECIDERS = frozenset((*_TRUTH, *_COMPARE, "aten._to_copy.default"))


def noise_decisions(graph: FuzzGraph, name: str, eager: torch.Tensor, compiled: torch.Tensor) -> bool:
    """Whether ``compiled`` differs from ``eager`` (the output ``name``) only where float64 rounding
    noise decides it (see the module docstring). False on any doubt."""
    node = next((n for n in graph.nodes if name in n.outputs), None)
    if node is None or node.op not in DECIDERS or len(node.outputs) != 1:
        return False
    if eager.shape != compiled.shape or eager.dtype != compiled.dtype or eager.is_floating_point():
        return False
    args = _arguments(node.op, node.expr, graph.input_names() + [o for n in graph.nodes for o in n.outputs])
    if not args:
        return False
    operands = [args.get("self"), args.get("other")] if node.op != "aten._to_copy.default" else [args.get("self")]
    sources = [a.name for a in operands if isinstance(a, _Value)]
    try:
        values = _eager_values(graph, sources, eager.device)
    except Exception:  # noqa: BLE001 -- an upstream op that does not run again here: judged strictly
        return False
    tensors = [values[a.name] if isinstance(a, _Value) else a for a in operands if a is not None]
    if not any(isinstance(t, torch.Tensor) and t.dtype == torch.float64 for t in tensors):
        if node.op not in _COMPARE or len(tensors) != 2:
            return False
        try:
            return _near_tied_comparison(graph, operands, tensors, eager.cpu(), compiled.cpu())
        except RuntimeError:
            return False
    scale = max((_largest(v) for v in values.values()), default=0.0)
    scale = max([scale] + [abs(float(t)) for t in tensors if isinstance(t, (int, float))])
    try:
        explained = _explained(node.op, tensors, NOISE * scale, eager.cpu(), compiled.cpu())
    except RuntimeError:  # shapes that do not broadcast as the op's did: judged strictly
        return False
    return explained is not None and bool((eager.cpu() != compiled.cpu()).any()) and bool(explained.all())


def _explained(op: str, operands: list[Any], tol: float, eager: torch.Tensor,
               compiled: torch.Tensor) -> torch.Tensor | None:
    """Per position, whether ``compiled`` is eager's decision or one that flipping the decisions of
    eager's operands within ``tol`` of their threshold gives (None: not a decision on floats)."""
    double = [t.double() if isinstance(t, torch.Tensor) else torch.tensor(float(t), dtype=torch.float64)
              for t in operands]
    same = compiled == eager
    if op in _TRUTH:  # each float operand is decided against 0
        truths = [d != 0 for d in double]
        near = [d.abs() <= tol if isinstance(t, torch.Tensor) and t.is_floating_point() else torch.zeros((), dtype=torch.bool)
                for t, d in zip(operands, double)]
        explained = same
        for flips in range(1, 1 << len(truths)):  # every set of operands flipped where they are near
            flipped = [t ^ (n & bool(flips >> i & 1)) for i, (t, n) in enumerate(zip(truths, near))]
            explained = explained | (_truth_op(op, flipped).expand(eager.shape) == compiled)
        return explained
    if op in _COMPARE:  # the compared pair's difference against 0: either answer where it is noise
        return same | ((double[0] - double[1]).abs() <= tol).expand(eager.shape)
    x = double[0]  # a cast: to bool decided against 0, to an integer truncated at each integer
    if eager.dtype == torch.bool:
        return same | (x.abs() <= tol).expand(eager.shape)
    if eager.is_floating_point():
        return None
    low, high = (x - tol).trunc(), (x + tol).trunc()  # what a truncation of x give or take tol gives
    got = compiled.double()
    return same | ((got >= low) & (got <= high)).expand(eager.shape)


def _near_tied_comparison(graph: FuzzGraph, operands: list[Any], tensors: list[Any], eager: torch.Tensor,
                          compiled: torch.Tensor) -> bool:
    """A comparison of narrower floats: each differing position compares values within ``TIE_ULPS``
    ulps of each other in eager that are not an exact tie in eager and the float64 reference alike."""
    floats = [t for t in tensors if isinstance(t, torch.Tensor) and t.is_floating_point()]
    if not floats:
        return False
    eps = max(torch.finfo(t.dtype).eps for t in floats)
    a, b = (t.double() if isinstance(t, torch.Tensor) else torch.tensor(float(t), dtype=torch.float64)
            for t in tensors)
    refs = []
    for operand, value in zip(operands, (a, b)):
        if isinstance(operand, _Value):
            ref = value_of(graph, operand.name, eager.device)
            if ref is None:
                return False
            refs.append(ref[1].double())
        else:
            refs.append(value)
    near = (a - b).abs() <= TIE_ULPS * eps * torch.maximum(a.abs(), b.abs())
    true_tie = (a == b) & (refs[0] == refs[1])
    return bool(((compiled == eager) | (near & ~true_tie).expand(eager.shape)).all())


def _truth_op(op: str, truths: list[torch.Tensor]) -> torch.Tensor:
    if op == "aten.logical_not.default":
        return ~truths[0]
    a, b = torch.broadcast_tensors(*truths)
    return {"aten.logical_and.default": a & b, "aten.logical_or.default": a | b}.get(op, a ^ b)


def _eager_values(graph: FuzzGraph, sources: list[str], device: torch.device) -> dict[str, torch.Tensor]:
    """Eager's value (on the CPU) of ``sources`` and of every input and value they are computed from."""
    needed = graph.upstream(sources)
    nodes = [n for n in graph.nodes if any(o in needed for o in n.outputs)]
    outputs = [o for n in nodes for o in n.outputs]
    inputs = graph.make_inputs(str(device))
    values = dict(zip(graph.input_names(), inputs))
    if outputs:
        full = FuzzGraph(graph.inputs, nodes, outputs)
        values.update(zip(outputs, full.function()(*inputs)))
    return {k: v.cpu() for k, v in values.items() if k in needed and isinstance(v, torch.Tensor)}


def _largest(value: torch.Tensor) -> float:
    if not value.is_floating_point() or not value.numel():
        return 0.0
    finite = value[torch.isfinite(value)]
    return float(finite.abs().max()) if finite.numel() else 0.0

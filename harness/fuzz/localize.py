"""Where an accuracy failure of a generated graph starts: the first value that diverges.

The graph is run again with every intermediate value an output (``FuzzGraph.prefix``), through the
engine like any graph (so on ``crucible-sim`` under the simulator's checks too), and the oracle's
first failing value names the op to charge. Two differences the oracle excuses where they start are
charged there rather than where a later op shows them: eager's own overflow
(``_overflow_upstream``) and the sign of a zero (``_zero_sign_upstream``).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import torch

from harness.engine import Context, Grade, execute
from harness.fuzz.graph import FuzzGraph
from harness.fuzz.subject import GraphSubject, compare_outputs
from harness.oracle import nonfinite_mismatch
from harness.result import Result
from harness.status import Phase, Status
from harness.targets import Target


class LocalizeSubject(GraphSubject):
    """``graph`` with every intermediate an output; its grade charges the first diverging value."""

    def __init__(self, graph: FuzzGraph, capture: str = "fx", name: str | None = None, tiers: bool = True) -> None:
        super().__init__(graph.prefix(len(graph.nodes)), capture, name, tiers)

    def layers(self, target: Target) -> tuple:
        """None: localization says where a difference starts; the graph's verdict, attributed already,
        stands."""
        return ()

    def grade(self, ctx: Context, eager: Any, compiled: Any, reference: Any) -> Grade:
        full = self.graph
        failing, reason, fields = compare_outputs(full, full.outputs, eager, compiled, reference,
                                                  rounding_spread=True, references=self._allowance_references,
                                                  tiers=self.tiers)
        if not failing and self._sizes is not None:  # --dynamic: the first value diverging at a further size
            graded = self._sizes.grade(ctx, Grade(True, "", fields))
            if graded.passed:
                return graded
            return Grade(False, graded.reason, {**(graded.fields or {}), "diverged": graded.reason})
        if not failing:
            return Grade(True, "", fields)
        op, diverged = divergence(full, failing, reason, eager, compiled, reference)
        return Grade(False, diverged, {**fields, "op": op, "diverged": diverged,
                                       "failing_outputs": [full.outputs.index(failing)]})


def localize(graph: FuzzGraph, target: Target, name: str | None = None, capture: str = "fx",
             on_phase: Callable[[str], None] = lambda phase: None, tiers: bool = True) -> Result:
    """``fail_accuracy`` (phase ``localize``) with ``op`` and ``diverged`` when a value of ``graph``
    with every intermediate an output diverges, ``pass`` when none does (the failure needs the
    original fusion to show); any other status when that graph does not even run (the campaign then
    keeps the failure as it was)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = execute(LocalizeSubject(graph, capture, name, tiers), target, on_phase)
    if result.status in (Status.PASS, Status.FAIL_ACCURACY):
        result = result.replace(phase=Phase.LOCALIZE)
    return result


def localize_divergence(graph: FuzzGraph, target: Target, capture: str = "fx",
                        tiers: bool = True) -> tuple[str, str]:
    """(op, reason) of the first node whose value diverges when every intermediate is a graph
    output, the reason naming that value ("v2_1: NaN positions ..."); ("", "") when none does, or
    when that graph fails otherwise (localization is best effort: the verdict stands)."""
    result = localize(graph, target, capture=capture, tiers=tiers)
    if result.status != Status.FAIL_ACCURACY or not result.op:
        return "", ""
    return result.op, result.diverged or ""


def divergence(full: FuzzGraph, failing: str, reason: str, eager: tuple, compiled: tuple,
               reference: tuple | None) -> tuple[str, str]:
    """(op, why) for the first failing value ``failing`` of ``full`` (every value an output): the
    op of an upstream value whose difference the oracle excused, where it starts, else ``failing``'s."""
    root = _overflow_upstream(full, failing, eager, compiled, reference)
    if root:
        name, mismatch = root
        return (full.output_ops()[name],
                f"{name}: {mismatch} (eager overflowed there, excused; {failing} fails downstream)")
    zero = _zero_sign_upstream(full, failing, eager, compiled)
    if zero:
        return (full.output_ops()[zero],
                f"{zero}: signs of zeros differ from eager (equal values, so it passed; {failing} fails downstream)")
    return full.output_ops()[failing], reason


def _overflow_upstream(graph: FuzzGraph, failing: str, eager: tuple, compiled: tuple,
                       reference: tuple | None) -> tuple[str, str] | None:
    """(value, its NaN/inf mismatch) of the earliest value ``failing`` depends on that differs from
    eager only where eager overflowed (the oracle excuses it against float64): the difference from
    eager starts there, whatever a later op makes of it (1.3e-3 off after a cancellation, NaN where
    eager's inf meets another)."""
    index = {name: i for i, name in enumerate(graph.outputs)}
    upstream = graph.upstream([failing]) - {failing}
    for name in graph.outputs:  # node order
        e, c = eager[index[name]], compiled[index[name]]
        if name not in upstream or not isinstance(e, torch.Tensor) or not e.is_floating_point():
            continue
        mismatch = nonfinite_mismatch(e.cpu(), c.cpu())
        if mismatch:  # the value passed the oracle (it is before ``failing``): its differences were excused
            return name, mismatch
    return None


def _zero_sign_upstream(graph: FuzzGraph, failing: str, eager: tuple, compiled: tuple) -> str | None:
    """The earliest float value ``failing`` depends on whose zeros differ in sign from eager's: the
    oracle compares them equal (0 == -0), so a later op that tells them apart (atan2, signbit, 1/x)
    is where the difference shows, not where it starts (fuzzer, crucible-cpp, seed 24: ATen's
    softshrink's zeros, seen through atan2)."""
    index = {name: i for i, name in enumerate(graph.outputs)}
    upstream = graph.upstream([failing]) - {failing}
    for name in graph.outputs:  # node order
        e, c = eager[index[name]], compiled[index[name]]
        if (name not in upstream or not isinstance(e, torch.Tensor) or not isinstance(c, torch.Tensor)
                or not e.is_floating_point() or e.shape != c.shape):
            continue
        e, c = e.cpu(), c.cpu()
        if bool(((e == 0) & (c == 0) & (torch.signbit(e) != torch.signbit(c))).any()):
            return name
    return None

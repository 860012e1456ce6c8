"""Localization: the first divergent ATen node, and the compiler stage at fault.

*First divergent node* (accuracy failures): the graph is compiled once with every floating tensor
it computes as an output, and each is graded against eager and float64 by the parity oracle; the
first one that fails, in graph order, is the first divergent node. When materializing every node
hides the failure (a fusion bug), the answer is the end of the shortest failing prefix instead,
and the report says so.

*Stage* (Crucible targets), by elimination:

- ``decomposition``: the decomposed graphs run in eager already fail parity at the entry level
  (``capture.decomposition_verdict``);
- a compile error names its pass: ``lowering`` (lower), ``scheduling`` (schedule), ``renderer``
  (select_renderer, render, load), ``wrapper`` (wrap);
- otherwise the other codegen is tried: if it passes, the fault is the ``renderer`` of the failing
  codegen; if it fails alike, the IR-level reference (the scheduled kernels evaluated with torch
  ops) splits the shared fault: it passes = ``renderer`` (what both codegens share), it fails too =
  ``lowering/scheduling``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from harness.minify.case import GraphCase
from harness.minify.check import IR_REFERENCE_TARGET, failed, same_failure, signature
from harness.minify.reduce import GraphCut
from harness.result import Result
from harness.status import Status

Checker = Callable[[GraphCase, str], Result]

_PASS_STAGES = {"lower": "lowering", "schedule": "scheduling", "select_renderer": "renderer",
                "render": "renderer", "load": "renderer", "wrap": "wrapper"}
_OTHER_CODEGEN = {"crucible-cpp": "crucible-interpret", "crucible-interpret": "crucible-cpp",
                  "crucible-triton": "crucible-cpp"}


@dataclass(frozen=True)
class Localization:
    first_divergent: str | None = None  # "name (aten.op)"
    how: str = ""  # "node by node" | "shortest failing prefix"
    stage: str | None = None
    stage_evidence: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"first_divergent": self.first_divergent, "how": self.how, "stage": self.stage,
                "stage_evidence": self.stage_evidence}


def first_divergent_node(case: GraphCase, check: Checker) -> tuple[str | None, str]:
    """(node, how) for an accuracy failure of ``case``; (None, why) when node by node finds none."""
    cut = GraphCut(case)
    every = cut.build(range(len(cut.units)), all_outputs=True)
    result = check(every, case.target)
    if result.status == Status.FAIL_ACCURACY and result.failing_outputs:
        index = result.failing_outputs[0]
        return f"{every.notes['output_nodes'][index]} ({every.notes['output_ops'][index]})", "node by node"
    return None, f"node by node: every node passes when materialized ({result.status})"


def _ir_verdict(case: GraphCase, check: Checker) -> tuple[str, str]:
    """Split a fault both codegens share: the IR-level reference (``simulator.reference``: the
    scheduled kernels evaluated with torch ops, checked in the same isolated worker as every other
    check) right = the generated code is wrong; wrong too = lowering or scheduling."""
    verdict = check(case, IR_REFERENCE_TARGET)
    if verdict.status == Status.PASS:
        return "renderer", "the IR-level reference passes: the scheduled IR is right, the generated code is not"
    return "lowering/scheduling", f"the IR-level reference fails too ({signature(verdict)})"


def stage_at_fault(case: GraphCase, result: Result, check: Checker, decomposition_fails: bool = False
                   ) -> tuple[str | None, str]:
    """(stage, evidence) for a Crucible target; (None, why) for other targets."""
    if not case.target.startswith("crucible"):
        return None, "stage localization needs a crucible target"
    if decomposition_fails:
        return "decomposition", "the decomposed graphs run in eager already fail parity against float64"
    if result.failed_pass in _PASS_STAGES:
        return _PASS_STAGES[result.failed_pass], f"the compiler's {result.failed_pass!r} pass raised"
    base, colon, options = case.target.partition(":")
    other = _OTHER_CODEGEN.get(base)
    if other is not None:
        other += colon + options  # the same options (extern=...) on the other codegen
    if other is None:
        return None, f"no other codegen to compare {case.target} with"
    moved = case.to("cpu")
    on_other = check(moved, other)
    if on_other.status == Status.PASS:
        return "renderer", f"{other} passes on the same graph; {case.target} fails"
    if same_failure(on_other, result):
        stage, why = _ir_verdict(moved, check)
        return stage, f"{other} fails alike; {why}"
    return "lowering/scheduling", f"{other} fails differently ({signature(on_other)})"


def localize(case: GraphCase, result: Result, check: Checker, failing_prefix_end: str | None = None,
             decomposition_fails: bool = False) -> Localization:
    node, how = (None, "")
    if result.status == Status.FAIL_ACCURACY:
        node, how = first_divergent_node(case, check)
        if node is None and failing_prefix_end:
            node, how = failing_prefix_end, f"shortest failing prefix ({how})"
    elif failed(result):
        # A crash or error belongs to the last node of the shortest failing prefix.
        node, how = failing_prefix_end, "shortest failing prefix"
    stage, evidence = stage_at_fault(case, result, check, decomposition_fails)
    return Localization(node, how, stage, evidence)

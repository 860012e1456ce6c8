"""One case of a decomposition rule as a subject of the execution engine (``harness.engine``).

A case is the ATen op a rule replaces, on one set of inputs: a one-node generated graph
(``("graph", FuzzGraph)``) for ops of the fuzzer's op table, or a call captured from OpInfo sample
inputs with its float tensors optionally redrawn (``("call", index, profile, seed)``). Through the
engine it goes as every subject does:

    eager  = the op on fresh copies of the inputs (twice: an op that answers differently is no case);
             an op that rejects the inputs makes the case ``eager_fail``: not a valid case
    reference = the float64 op, and the float64 op on inputs moved by half an ulp
             (``decomps.to64_rounded``: the rounding noise ``compare`` allows)
    compile = the rule (its function, or the graph's source with ``RedirectedAten``), called on fresh
             copies: an exception in it is ``fail_run`` through the engine's classifier
    grade  = ``decomps.compare`` (no worse than the op, against float64)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from harness.engine import Context, Grade, Subject, execute
from harness.fuzz.conditioning import order_dependent
from harness.fuzz.decomps import RedirectedAten, Rule, compare, to64, to64_rounded
from harness.fuzz.graph import FuzzGraph, namespace
from harness.fuzz.values import make_input
from harness.result import Result
from harness.targets import Target

Case = tuple  # ("graph", FuzzGraph) or ("call", index into the captured calls, profile | None, seed)


def case_text(case: Case) -> str:
    """A case as text: the graph's JSON, or the captured call's (index, profile, seed)."""
    return case[1].to_json() if case[0] == "graph" else repr(case[1:])


class DecompCaseSubject(Subject):
    """``rule`` against its op on ``case`` (``captured``: the OpInfo calls a ``("call", i, ...)`` case indexes)."""

    # stateless stays False: the rule's first call is graded; it is Python over eager ATen, no compiled code

    def __init__(self, rule: Rule, case: Case, captured: list | None = None) -> None:
        self.rule, self.case, self.captured = rule, case, captured or []
        self.name = f"decomp/{rule.name}"
        self._thunks: tuple[Callable[[], Any], ...] = ()

    def runs_on(self, device: str) -> str | None:
        return None if device == "cpu" else "decomposition rules are checked on the CPU"

    def build(self, ctx: Context) -> None:
        if self.case[0] == "graph":
            self._thunks = graph_thunks(self.rule, self.case[1])
        else:
            _, index, profile, seed = self.case
            self._thunks = call_thunks(self.rule, self.captured[index], profile, seed)

    def eager(self, ctx: Context) -> Any:
        return self._thunks[0]()

    def reference(self, ctx: Context) -> tuple[Any, Any] | None:
        try:
            reference = self._thunks[2]()
        except Exception:  # noqa: BLE001 -- no float64 kernel: judged against the op only
            return None
        try:
            rounded = self._thunks[3]()
        except Exception:  # noqa: BLE001 -- as for the reference
            rounded = None
        return reference, rounded

    def compile(self, ctx: Context) -> Callable[[], Any]:
        return self._thunks[1]  # nothing to compile: the rule runs as it is

    def grade(self, ctx: Context, eager: Any, compiled: Any, reference: tuple[Any, Any] | None) -> Grade:
        ref, rounded = reference if reference is not None else (None, None)
        reason = compare(eager, compiled, ref, rounded)
        if reason and self.case[0] == "graph" and any(order_dependent(self.case[1], o) for o in self.case[1].outputs):
            # (fuzz-decomps, crucible:batch_norm_training: a float64 channel near 1.8e308, NaN in ATen's
            # order, 0 in the rule's; the graph fuzzer leaves such outputs unjudged too)
            reason = compare(eager, compiled, ref, rounded, floats=False)
        return Grade(not reason, reason)


def run_case(rule: Rule, case: Case, captured: list | None, target: Target,
             on_phase: Callable[[str], None] = lambda phase: None) -> Result:
    """``rule`` on ``case`` through the engine, in this process; ``op`` names the rule."""
    return execute(DecompCaseSubject(rule, case, captured), target, on_phase, op=rule.name)


def graph_thunks(rule: Rule, graph: FuzzGraph) -> tuple[Callable[[], Any], ...]:
    """(op, rule, float64 op, float64 op on half-ulp moved inputs) on a one-node graph's fresh inputs."""
    expr = graph.nodes[0].expr

    def run(ns: dict, inputs: list) -> Any:
        return eval(expr, {**ns, **dict(zip(graph.input_names(), inputs))})  # noqa: S307

    redirected = {**namespace(), "aten": RedirectedAten(rule)}
    return (lambda: run(namespace(), graph.make_inputs()), lambda: run(redirected, graph.make_inputs()),
            lambda: run(namespace(reference=True), graph.make_inputs(reference=True)),
            lambda: run(namespace(reference=True), to64_rounded(graph.make_inputs())))


def perturb(value: Any, profile: str | None, seed: int) -> Any:
    """A copy of a captured call's arguments, float tensors redrawn with ``profile`` (None: as captured)."""
    if isinstance(value, torch.Tensor) and value.is_floating_point() and profile is not None:
        fresh = make_input({"shape": list(value.shape), "dtype": str(value.dtype).removeprefix("torch."),
                            "profile": profile, "seed": seed})
        return value.detach().clone().copy_(fresh)
    if isinstance(value, (list, tuple)):
        return type(value)(perturb(v, profile, seed + i) for i, v in enumerate(value))
    return value.detach().clone() if isinstance(value, torch.Tensor) else value


def call_thunks(rule: Rule, call: tuple, profile: str | None, seed: int) -> tuple[Callable[[], Any], ...]:
    """As ``graph_thunks``, for a captured ``(args, kwargs)`` call."""
    args, kwargs = perturb(call, profile, seed)
    fresh = lambda: (perturb(args, None, 0), perturb(kwargs, None, 0))  # noqa: E731
    return (lambda: rule.op(*fresh()[0], **fresh()[1]), lambda: rule.fn(*fresh()[0], **fresh()[1]),
            lambda: rule.op(*to64(fresh()[0]), **to64(fresh()[1])),
            lambda: rule.op(*to64_rounded(fresh()[0]), **to64_rounded(fresh()[1])))

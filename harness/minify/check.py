"""The failure predicate: a minimizer case as a subject of the execution engine, and what makes two
failures the same.

A check runs one ``GraphCase`` on a target through ``harness.engine`` like any corpus entry or fuzz
graph (``CaseSubject``): eager twice on fresh copies of the case's real inputs (a candidate graph
eager cannot run is ``eager_fail``, which the minimizer discards), the graph on float64 inputs as
the reference, ``Target.compile(gm, inputs, capture="fx")`` with every option of the target, two
compiled calls, and the parity oracle output by output (``failing_outputs``, which localization
reads). On ``crucible-sim`` the engine runs every kernel under the simulator's memory checks, so a
memory-safety defect is a ``fail_memory`` to minimize like any other failure.

The outcome is a ``harness.result.Result``. Two results are the same failure when their
``signature``s agree: the status, plus the blurred error message except for accuracy failures
(whose figures change with every shrink).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.utils._pytree as pytree

from harness.engine import Context, Grade, Subject, execute, optional_reference
from harness.minify.case import GraphCase
from harness.oracle import ParityOracle, flatten_outputs
from harness.pool import WorkerContext
from harness.report import error_signature
from harness.result import Result
from harness.status import Status
from harness.targets import Target, parse_target

# A pseudo-target for localization: the graph as Crucible lowers and schedules it, every kernel
# evaluated from its IR with torch ops (``simulator.reference``), no generated code.
IR_REFERENCE_TARGET = "crucible-ir-reference"


def case_target(name: str, device: str | None = None) -> Target:
    """The Target a check runs on: ``name`` parsed (``device``: where a Dynamo backend runs, the
    case's inputs' device), or the IR-reference pseudo-target (CPU, no backend of its own)."""
    if name == IR_REFERENCE_TARGET:
        return Target(IR_REFERENCE_TARGET, "cpu", None)
    return parse_target(name, device)


def case_device(case: GraphCase) -> str:
    """Where the case's values live (its first tensor's device type)."""
    return next((v.device.type for v in case.inputs if isinstance(v, torch.Tensor)), "cpu")


def _clone(values: list[Any]) -> list[Any]:
    # A graph may mutate its inputs (copy_ epilogues): every run gets its own copy.
    return [v.clone() if isinstance(v, torch.Tensor) else copy.copy(v) for v in values]


def _float64(values: list[Any]) -> list[Any]:
    return [v.detach().cpu().double() if isinstance(v, torch.Tensor) and v.is_floating_point()
            else (v.detach().cpu() if isinstance(v, torch.Tensor) else v) for v in values]


def _ir_reference(gm: torch.fx.GraphModule, failing: Target) -> Callable[..., Any]:
    """The reference lowers with the failing target's ``extern`` option, so a graph whose matmuls
    ran as template kernels is judged with the same templates (not with ATen calls)."""
    from simulator.reference import reference_graph

    extern = failing.options.get("extern", "default") if failing.is_crucible else "default"
    if extern == "default":  # checks run on the CPU, where the default rule takes no templates
        return lambda *inputs: reference_graph(gm, list(inputs))
    codegen = failing.options["codegen"]
    return lambda *inputs: reference_graph(gm, list(inputs), codegen=codegen, extern=extern)


def flat_outputs(gm: torch.fx.GraphModule) -> tuple[torch.fx.GraphModule, pytree.TreeSpec | None]:
    """``gm`` returning one flat tuple, as Dynamo hands a backend its graphs (AOTAutograd, under
    Inductor and aot_eager, fails on nested outputs: "output spec mismatch"), and the spec that
    nests its results again; ``(gm, None)`` when its outputs are flat already."""
    output = next(n for n in reversed(gm.graph.nodes) if n.op == "output")
    value = output.args[0]
    if isinstance(value, (tuple, list)) and all(isinstance(v, torch.fx.Node) for v in value):
        return gm, None
    leaves, nesting = pytree.tree_flatten(value)
    graph, env = torch.fx.Graph(), {}
    for node in gm.graph.nodes:
        if node.op != "output":
            env[node] = graph.node_copy(node, lambda n: env[n])
    graph.output(tuple(env[v] if isinstance(v, torch.fx.Node) else v for v in leaves))
    return torch.fx.GraphModule(gm, graph), nesting


class CaseSubject(Subject):
    """A ``GraphCase`` as the engine runs it: a pure function of its real inputs."""

    stateless = True  # a graph is a pure function: the second compiled call is graded too

    def __init__(self, case: GraphCase) -> None:
        self.case, self.name = case, case.origin or "graph case"

    def runs_on(self, device: str) -> str | None:
        return None

    def build(self, ctx: Context) -> None:
        return None  # the graph module and its real inputs travel with the case

    def eager(self, ctx: Context) -> Any:
        return self.case.gm(*_clone(self.case.inputs))

    def reference(self, ctx: Context) -> Any:
        return optional_reference(ctx, lambda: self.case.gm(*_float64(self.case.inputs)))

    def compile(self, ctx: Context) -> Callable[[], Any]:
        inputs = self.case.inputs
        if ctx.target.name == IR_REFERENCE_TARGET:
            fn = _ir_reference(self.case.gm, parse_target(self.case.target))
            return lambda: fn(*_clone(inputs))
        gm, nesting = flat_outputs(self.case.gm)
        fn = ctx.target.compile(gm, inputs, capture="fx")
        if nesting is None:
            return lambda: fn(*_clone(inputs))
        return lambda: pytree.tree_unflatten(list(fn(*_clone(inputs))), nesting)

    def grade(self, ctx: Context, eager: Any, compiled: Any, reference: Any) -> Grade:
        return grade_outputs(self.case.dtype, eager, compiled, reference, self.case.tolerance)


def grade_outputs(dtype: str, eager: Any, out: Any, reference: Any, tolerance: Any = None) -> Grade:
    """The parity oracle, output by output (``failing_outputs``), so localization sees which diverge."""
    oracle = ParityOracle(dtype, tolerance)
    whole = oracle.compare(eager, out, reference)
    fields: dict[str, Any] = {"max_abs_err": whole.max_abs_err, "max_rel_err": whole.max_rel_err,
                              "rmse_ratio": whole.rmse_ratio, "cosine": whole.cosine}
    e_leaves, c_leaves = flatten_outputs(eager), flatten_outputs(out)
    if [p for p, _ in e_leaves] != [p for p, _ in c_leaves]:
        return Grade(False, whole.reason, fields)
    r_leaves = flatten_outputs(reference) if reference is not None else None
    if r_leaves is not None and [p for p, _ in r_leaves] != [p for p, _ in e_leaves]:
        r_leaves = None
    failing = [i for i, ((_, e), (_, c)) in enumerate(zip(e_leaves, c_leaves))
               if not oracle.compare(e, c, r_leaves[i][1] if r_leaves else None).passed]
    if whole.passed and not failing:
        return Grade(True, "", fields)
    return Grade(False, whole.reason or "an output fails parity", {**fields, "failing_outputs": failing})


def check_case(case: GraphCase, target: str | None = None,
               on_phase: Callable[[str], None] = lambda phase: None) -> Result:
    """Run the predicate in this process: ``case`` on ``target`` (default: the case's own), through
    the engine (at the working dtype's full precision, no TF32, as ``crucible run`` grades entries)."""
    return execute(CaseSubject(case), case_target(target or case.target, case_device(case)), on_phase)


@dataclass(frozen=True)
class CaseCheck:
    """One check as a worker task (``harness.pool.Task``): ``case`` on the target named ``target``,
    which the worker parses (``case_target``) and hands in as ``worker.target``."""

    case: GraphCase
    target: str
    imports: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return self.case.origin or "graph case"

    def __call__(self, worker: WorkerContext) -> Result:
        return execute(CaseSubject(self.case), worker.target, worker.progress)


# -- what makes two failures the same

def failed(result: Result) -> bool:
    """A failure of the target under test, something to minimize: not a pass, not a candidate that
    eager cannot run (``eager_fail``), not a death while running eager."""
    return result.against_compiler


def _message(result: Result) -> str:
    text = result.error or ""
    if result.status == Status.FAIL_MEMORY:  # the kernel's name changes as the graph around it shrinks
        text = re.sub(r"\bkernel [^\s:]+", "kernel <name>", text)
    return error_signature(text)


def signature(result: Result) -> str:
    """The failure's identity: the status, plus the blurred error message except for accuracy."""
    if result.status in (Status.PASS, Status.FAIL_ACCURACY):
        return result.status.value
    return f"{result.status.value}: {_message(result)}"


def same_failure(result: Result, original: Result) -> bool:
    """``result`` fails as ``original`` does (what every candidate of a reduction must keep)."""
    return failed(result) and signature(result) == signature(original)

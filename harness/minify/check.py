"""The failure predicate: compile and run one graph case on its target, grade it, name the failure.

A check compiles the graph as its target would (Crucible: ``compiler.compile_graph`` in strict mode;
any Dynamo backend: ``torch.compile`` of the graph module), runs it on the case's real inputs and
grades the outputs with the harness's parity oracle against eager and the graph run in float64.
Two outcomes are the same failure when status and error signature agree (for accuracy failures:
status only, since the error figures change with every shrink).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from harness.errors import describe_error, is_compile_error, is_oom
from harness.minify.case import GraphCase
from harness.oracle import ParityOracle, flatten_outputs, working_precision
from harness.report import error_signature
from harness.status import Status
from harness.targets import Target, check_available, parse_target, resolve_backend

# Not a failure of the target: the candidate graph itself does not run in eager (a shrink that
# broke the graph). The minimizer discards such candidates.
INVALID = "invalid"


@dataclass(frozen=True)
class Outcome:
    status: str  # harness Status value, or INVALID
    message: str = ""
    pass_name: str | None = None  # Crucible's failing pass (lower, schedule, render, load, wrap)
    failing_outputs: tuple[int, ...] = ()  # output leaves that failed parity, in output order
    detail: str = ""

    @property
    def failed(self) -> bool:
        return self.status not in (Status.PASS, INVALID)

    @property
    def signature(self) -> str:
        """The failure's identity: status, plus the blurred error message except for accuracy."""
        if self.status in (Status.PASS, Status.FAIL_ACCURACY):
            return self.status
        return f"{self.status}: {error_signature(self.message)}"

    def matches(self, other: Outcome) -> bool:
        return self.status == other.status and self.signature == other.signature

    def as_dict(self) -> dict[str, Any]:
        return {"status": self.status, "signature": self.signature, "message": self.message,
                "pass_name": self.pass_name}


def _clone(values: list[Any]) -> list[Any]:
    # A graph may mutate its inputs (copy_ epilogues): every run gets its own copy.
    return [v.clone() if isinstance(v, torch.Tensor) else copy.copy(v) for v in values]


def _float64(values: list[Any]) -> list[Any]:
    return [v.detach().cpu().double() if isinstance(v, torch.Tensor) and v.is_floating_point()
            else (v.detach().cpu() if isinstance(v, torch.Tensor) else v) for v in values]


def _failing_pass(exc: BaseException) -> str | None:
    from compiler.pipeline import CompilerError

    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        if isinstance(cur, CompilerError):
            return cur.pass_name
        cur = getattr(cur, "inner_exception", None) or cur.__cause__ or cur.__context__
    return None


def compile_for(target: Target, gm: torch.fx.GraphModule, inputs: list[Any]) -> Callable[..., Any]:
    """``fn(*inputs)`` running ``gm`` as ``target`` compiles it (Dynamo backends compile on the first call)."""
    if target.backend is None:
        return gm
    check_available(target)
    if target.is_crucible:
        import compiler

        return compiler.compile_graph(gm, inputs, codegen=target.options["codegen"], strict=True,
                                      extern=target.options.get("extern", "default"))
    torch._dynamo.reset()
    return torch.compile(gm, backend=resolve_backend(target), dynamic=False)


def _error(status: str, exc: BaseException) -> Outcome:
    message, detail = describe_error(exc)
    return Outcome(Status.OOM if is_oom(exc) else status, message, _failing_pass(exc), detail=detail)


# A pseudo-target for localization: the graph as Crucible lowers and schedules it, every kernel
# evaluated from its IR with torch ops (``simulator.reference``), no generated code.
IR_REFERENCE_TARGET = "crucible-ir-reference"


def _ir_reference(gm: torch.fx.GraphModule, failing: Target) -> Callable[..., Any]:
    """The reference lowers with the failing target's ``extern`` option, so a graph whose matmuls
    ran as template kernels is judged with the same templates (not with ATen calls)."""
    from simulator.reference import reference_graph

    extern = failing.options.get("extern", "default") if failing.is_crucible else "default"
    if extern == "default":  # checks run on the CPU, where the default rule takes no templates
        return lambda *inputs: reference_graph(gm, list(inputs))
    codegen = failing.options["codegen"]
    return lambda *inputs: reference_graph(gm, list(inputs), codegen=codegen, extern=extern)


def check_case(case: GraphCase, target: str | None = None) -> Outcome:
    """Run the predicate in this process (workers and repro scripts call it; see ``worker.py``).

    At the working dtype's full precision (no TF32), as ``crucible run`` grades entries."""
    with working_precision():
        return _check_case(case, target)


def _check_case(case: GraphCase, target: str | None) -> Outcome:
    ir_reference = target == IR_REFERENCE_TARGET
    tgt = parse_target("crucible-cpp" if ir_reference else target or case.target)
    gm = case.gm
    try:
        with torch.no_grad():
            eager = gm(*_clone(case.inputs))
    except Exception as exc:  # noqa: BLE001 -- a candidate that eager cannot run is no candidate
        return Outcome(INVALID, describe_error(exc)[0])
    try:
        with torch.no_grad():
            reference = gm(*_float64(case.inputs))
    except Exception:  # noqa: BLE001 -- no float64 kernel: the oracle compares with eager only
        reference = None
    try:
        with torch.no_grad():
            fn = _ir_reference(gm, parse_target(case.target)) if ir_reference else compile_for(tgt, gm, case.inputs)
    except Exception as exc:  # noqa: BLE001
        return _error(Status.FAIL_COMPILE, exc)
    try:
        with torch.no_grad():
            out = fn(*_clone(case.inputs))
        if tgt.device == "cuda":
            torch.cuda.synchronize()
    except Exception as exc:  # noqa: BLE001
        return _error(Status.FAIL_COMPILE if is_compile_error(exc) else Status.FAIL_RUN, exc)
    return grade(case.dtype, eager, out, reference, case.tolerance)


def grade(dtype: str, eager: Any, out: Any, reference: Any, tolerance: Any = None) -> Outcome:
    """The parity oracle, output by output, so localization can see which outputs diverge."""
    oracle = ParityOracle(dtype, tolerance)
    e_leaves, c_leaves = flatten_outputs(eager), flatten_outputs(out)
    r_leaves = flatten_outputs(reference) if reference is not None else None
    whole = oracle.compare(eager, out, reference)
    if [p for p, _ in e_leaves] != [p for p, _ in c_leaves]:
        return Outcome(Status.FAIL_ACCURACY, whole.reason)
    if r_leaves is not None and [p for p, _ in r_leaves] != [p for p, _ in e_leaves]:
        r_leaves = None
    failing = tuple(i for i, ((_, e), (_, c)) in enumerate(zip(e_leaves, c_leaves))
                    if not oracle.compare(e, c, r_leaves[i][1] if r_leaves else None).passed)
    if whole.passed and not failing:
        return Outcome(Status.PASS)
    return Outcome(Status.FAIL_ACCURACY, whole.reason or "an output fails parity", failing_outputs=failing)


def reproduce_main(forward: Callable[..., Any], inputs: list[Any], target: str, dtype: str,
                   expected: dict[str, Any], plugins: list[str], tolerance: Any = None) -> int:
    """What a written repro script runs: 1 when the expected failure reproduces, else 0."""
    from harness.minify.case import GraphCase
    from harness.minify.plugins import set_plugins

    set_plugins(plugins)
    gm = torch.fx.symbolic_trace(forward)
    case = GraphCase(gm, inputs, target, dtype, "repro", tolerance=tolerance)
    if expected["status"] in (Status.CRASH, Status.TIMEOUT, Status.OOM):
        from harness.minify.worker import CheckWorker

        with CheckWorker(device=parse_target(target).device, target=target) as worker:  # a crash must not be ours
            outcome = worker.check(case, target)
    else:
        outcome = check_case(case, target)
    want = Outcome(expected["status"], expected.get("message", ""))
    same = outcome.status == want.status and outcome.signature == expected.get("signature", want.signature)
    if same:
        print(f"REPRODUCED on {target}: {outcome.signature}\n  {outcome.message}")
        return 1
    print(f"NOT REPRODUCED on {target}: expected {expected.get('signature')}, got {outcome.signature}"
          + (f"\n  {outcome.message}" if outcome.message else ""))
    return 0

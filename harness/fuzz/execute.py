"""Run one fuzz graph on a target and grade it: the verdict a worker sends back.

Same phases and statuses as a corpus entry (``harness.execute``): build inputs -> eager twice
(different outputs: ``eager_nondeterministic``) -> float64 reference (the same graph source with
every float dtype, casts included, meaning float64) -> compile (first call) -> run (second call)
-> the parity oracle, per output in that output's dtype. Capture analysis is skipped: a fuzz
graph is one Dynamo graph by construction. The record also names the op a failure is charged to
(``op``): for accuracy failures, when ``localize`` is set, the first node whose value diverges
when every intermediate is an output (``diverged``: that value's name and why); otherwise the op
that produced the failing output.
"""

from __future__ import annotations

import importlib
import re
import time
import warnings
from collections.abc import Callable
from typing import Any

import torch

from harness.execute import describe_error, is_compile_error, is_oom
from harness.fuzz.graph import FuzzGraph
from harness.fuzz.conditioning import ill_conditioned, order_dependent
from harness.fuzz.nan_sign import nan_sign_only
from harness.fuzz.ties import near_tied_indices
from harness.oracle import ParityOracle, ParityResult, nonfinite_mismatch, outputs_identical
from harness.status import Status
from harness.targets import Target, check_available, compile_model


def _synchronize(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def _fail(result: dict, status: str, exc: BaseException) -> dict:
    result["status"] = Status.OOM if is_oom(exc) else status
    result["error"], result["error_detail"] = describe_error(exc)
    return result


def blamed_op(graph: FuzzGraph, text: str) -> str:
    """The graph op an error message names (its last mention wins), else the graph's last op."""
    found = ""
    for op in dict.fromkeys(graph.ops):
        base = op.removeprefix("aten.").split(".")[0]
        if re.search(rf"\baten[.:]+{re.escape(base)}\b", text):
            found = op
    return found or (graph.ops[-1] if graph.ops else "input")


NOISE_SAMPLES = 2  # rounding-noise references per judged output (the larger spread counts)


def compare_outputs(graph: FuzzGraph, names: list[str], eager: tuple, compiled: tuple,
                    reference: tuple | None, rounding_spread: bool = False) -> tuple[str, str, dict]:
    """(failing output name or "", reason, metrics) judging each output by its own dtype.

    ``rounding_spread``: an output failing only the RMSE-vs-fp64 check is judged again against the
    spread of rounding-noise references (``FuzzGraph.function(rounding_noise=...)``, run only then),
    and one failing on NaN/inf positions against the reference with every step rounded to its
    working dtype (``round_steps``); one still failing downstream of a sum, mean, cumsum or matrix
    product that cancels beyond its working precision is not compared
    (``harness.fuzz.conditioning.ill_conditioned``), and an index output (argmax, a sort's or a
    running max's indices) differing only where the values it indexes are tied to within rounding
    passes (``harness.fuzz.ties.near_tied_indices``), as does a ``signbit`` of a NaN
    (``harness.fuzz.nan_sign``: the sign of a NaN is unspecified).
    A float64 output downstream of an accumulating op (a reduction, scan or nn op) that inputs near
    the top of float64's range reach is not compared (``ParityOracle.compare``'s ``order_dependent``;
    ``unjudged`` in the metrics): its overflow and cancellation depend on the evaluation order."""
    metrics: dict[str, float] = {}
    noisy: list[tuple] = []
    steps: list[tuple | None] = []  # the rounded-steps reference, once computed
    for i, name in enumerate(names):
        e = eager[i]
        dtype = str(e.dtype).removeprefix("torch.") if isinstance(e, torch.Tensor) else "float32"
        oracle = ParityOracle(dtype if dtype in ("float16", "bfloat16", "float64") else "float32")
        ref = None if reference is None else reference[i]
        parity = oracle.compare(e, compiled[i], ref)
        # every allowance is looked for only after a strict failure (none costs a passing graph)
        unjudged = not parity.passed and dtype == "float64" and order_dependent(graph, name)
        if unjudged:
            parity = oracle.compare(e, compiled[i], ref, order_dependent=True)
        if not parity.passed and parity.needs_spread and rounding_spread and ref is not None:
            if not noisy:
                noisy = _noisy_references(graph)
            parity = oracle.compare(e, compiled[i], ref, spread=[s[i] for s in noisy], order_dependent=unjudged)
            if parity.passed:
                metrics["spread_passes"] = metrics.get("spread_passes", 0) + 1
        if not parity.passed and parity.needs_rounded_steps and rounding_spread and ref is not None:
            if not steps:
                steps.append(_rounded_steps(graph))
            if steps[0] is not None:
                parity = oracle.compare(e, compiled[i], ref, order_dependent=unjudged, rounded_steps=steps[0][i])
                if parity.passed:
                    metrics["rounded_step_passes"] = metrics.get("rounded_step_passes", 0) + 1
        if not parity.passed and not unjudged and rounding_spread and ill_conditioned(graph, name):
            parity = oracle.compare(e, compiled[i], ref, order_dependent=True)
            metrics["ill_conditioned"] = metrics.get("ill_conditioned", 0) + 1
        if (not parity.passed and rounding_spread and isinstance(e, torch.Tensor)
                and near_tied_indices(graph, name, e, compiled[i])):
            parity = ParityResult(True)
            metrics["near_ties"] = metrics.get("near_ties", 0) + 1
        if (not parity.passed and rounding_spread and isinstance(e, torch.Tensor)
                and nan_sign_only(graph, name, e, compiled[i])):
            parity = ParityResult(True)
            metrics["nan_signs"] = metrics.get("nan_signs", 0) + 1
        for key in ("max_abs_err", "rmse_ratio", "rounding_spread"):
            value = getattr(parity, key)
            if value is not None:
                metrics[key] = max(metrics.get(key, 0.0), value)
        if unjudged and parity.unjudged_outputs:
            metrics["unjudged"] = metrics.get("unjudged", 0) + parity.unjudged_outputs
        if not parity.passed:
            return name, parity.reason.replace("out: ", f"{name}: ", 1), metrics
    return "", "", metrics


def _rounded_steps(graph: FuzzGraph) -> tuple | None:
    """The float64 reference with every step rounded to its working dtype (None if it cannot run)."""
    try:
        return graph.function(reference=True, round_steps=True)(*graph.make_inputs("cpu", reference=True))
    except Exception:  # noqa: BLE001 -- as the plain reference
        return None


def _noisy_references(graph: FuzzGraph) -> list[tuple]:
    """The float64 reference run ``NOISE_SAMPLES`` times with rounding noise ([] if it cannot run)."""
    try:
        return [graph.function(reference=True, rounding_noise=seed)(*graph.make_inputs("cpu", reference=True))
                for seed in range(NOISE_SAMPLES)]
    except Exception:  # noqa: BLE001 -- as the plain reference: no float64 kernel for some op
        return []


CAPTURES = ("fx", "dynamo")


def compile_for_target(target: Target, fn: Callable, inputs: list, capture: str = "fx") -> Callable:
    """``fn`` compiled by ``target``.

    ``fx`` (default) hands the graph, already ATen, straight to the compiler: ``trace_aten`` +
    ``compile_graph`` for crucible targets (Crucible's decompositions applied, as in its backend),
    the registered backend called on the FX graph for any other target. It skips Dynamo's
    bytecode analysis, which the fuzzer does not test and which costs 2-5x the compile of a
    small graph. ``dynamo`` compiles through ``torch.compile`` exactly as corpus runs do."""
    if target.backend is None or capture == "dynamo":
        return compile_model(target, fn)
    if target.is_crucible:
        import compiler

        gm = compiler.trace_aten(fn, *inputs)
        return compiler.compile_graph(gm, inputs, codegen=target.options["codegen"], strict=True,
                                      extern=target.options.get("extern", "default"))
    import torch.fx
    from torch._dynamo.backends.registry import lookup_backend

    from harness.targets import resolve_backend

    backend = resolve_backend(target)
    backend = lookup_backend(backend) if isinstance(backend, str) else backend
    compiled = backend(torch.fx.symbolic_trace(fn), list(inputs))
    return compiled


def run_graph(graph: FuzzGraph, target: Target, on_phase: Callable[[str], None] = lambda p: None,
              localize: bool = False, capture: str = "fx") -> dict[str, Any]:
    """Execute ``graph`` on ``target`` in this process; returns a result record."""
    result: dict[str, Any] = {"target": target.name, "status": None, "phase": "build", "ops": graph.ops}
    if target.device == "cuda" and not torch.cuda.is_available():
        result.update(status=Status.SKIPPED, error=f"{target.name} needs a CUDA GPU and none is available")
        return result
    torch._dynamo.reset()
    try:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _run(graph, target, result, on_phase, localize, capture)
    finally:
        torch._dynamo.reset()
    return result


def _run(graph: FuzzGraph, target: Target, result: dict, on_phase: Callable[[str], None], localize: bool,
         capture: str) -> Any:
    def phase(name: str) -> None:
        result["phase"] = name
        on_phase(name)

    device = target.device
    phase("build")
    try:
        fn = graph.function()
        inputs = graph.make_inputs(device)
    except Exception as exc:  # noqa: BLE001
        return _fail(result, Status.EAGER_FAIL, exc)
    phase("eager")
    start = time.perf_counter()
    try:
        eager = fn(*graph.make_inputs(device))
        again = fn(*graph.make_inputs(device))
        _synchronize(device)
    except Exception as exc:  # noqa: BLE001 -- an invalid graph: counted by the validity rate
        return _fail(result, Status.EAGER_FAIL, exc)
    result["eager_s"] = time.perf_counter() - start
    if not outputs_identical(eager, again):
        result.update(status=Status.EAGER_NONDETERMINISTIC, error="two eager runs gave different outputs")
        return result
    phase("reference")
    try:
        reference = graph.function(reference=True)(*graph.make_inputs("cpu", reference=True))
    except Exception:  # noqa: BLE001 -- no float64 kernel for some op: judge against eager only
        reference = None
    phase("compile")
    start = time.perf_counter()
    try:
        check_available(target)
        compiled = compile_for_target(target, fn, inputs, capture)
    except Exception as exc:  # noqa: BLE001
        _fail(result, Status.FAIL_COMPILE, exc)
        result["op"] = blamed_op(graph, f"{result['error']}\n{result.get('error_detail', '')}")
        return result
    try:
        out = compiled(*inputs)
        _synchronize(device)
        result["compile_s"] = time.perf_counter() - start
    except Exception as exc:  # noqa: BLE001
        _fail(result, Status.FAIL_COMPILE if is_compile_error(exc) else Status.FAIL_RUN, exc)
        result["op"] = blamed_op(graph, f"{result['error']}\n{result.get('error_detail', '')}")
        return result
    phase("run")
    try:
        start = time.perf_counter()
        out = compiled(*graph.make_inputs(device))
        _synchronize(device)
        result["run_s"] = time.perf_counter() - start
    except Exception as exc:  # noqa: BLE001
        _fail(result, Status.FAIL_RUN, exc)
        result["op"] = blamed_op(graph, f"{result['error']}\n{result.get('error_detail', '')}")
        return result
    phase("compare")
    failing, reason, metrics = compare_outputs(graph, graph.outputs, eager, out, reference, rounding_spread=True)
    result.update(metrics)
    if not failing:
        result["status"] = Status.PASS
        return result
    result.update(status=Status.FAIL_ACCURACY, error=reason, op=graph.output_ops()[failing])
    if localize:
        op, diverged = localize_divergence(graph, target, capture)
        if op:
            result.update(op=op, diverged=diverged)
    return result


def localize_divergence(graph: FuzzGraph, target: Target, capture: str = "fx") -> tuple[str, str]:
    """(op, reason) of the first node whose value diverges when every intermediate is a graph
    output, the reason naming that value ("v2_1: NaN positions ..."); ("", "") when none does:
    the failure then needs the original fusion to show."""
    full = graph.prefix(len(graph.nodes))
    try:
        torch._dynamo.reset()
        device = target.device
        eager = full.function()(*full.make_inputs(device))
        try:
            reference = full.function(reference=True)(*full.make_inputs("cpu", reference=True))
        except Exception:  # noqa: BLE001
            reference = None
        inputs = full.make_inputs(device)
        out = compile_for_target(target, full.function(), inputs, capture)(*inputs)
    except Exception:  # noqa: BLE001 -- localization is best effort: the verdict stands
        return "", ""
    failing, reason, _ = compare_outputs(full, full.outputs, eager, out, reference, rounding_spread=True)
    if not failing:
        return "", ""
    root = _overflow_upstream(full, failing, eager, out, reference)
    if root:
        name, mismatch = root
        return (full.output_ops()[name],
                f"{name}: {mismatch} (eager overflowed there, excused; {failing} fails downstream)")
    zero = _zero_sign_upstream(full, failing, eager, out)
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


def localize_record(graph: FuzzGraph, target: Target, name: str, capture: str = "fx") -> dict[str, Any]:
    """``localize_divergence`` as a worker task: ``fail_accuracy`` with ``op`` and ``diverged``
    when a value of the graph with every intermediate an output diverges, else ``pass``. It does
    not run the graph itself again: the campaign sends it for a failure it already has."""
    result: dict[str, Any] = {"name": name, "target": target.name, "status": Status.PASS, "phase": "localize"}
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            op, diverged = localize_divergence(graph, target, capture)
        finally:
            torch._dynamo.reset()
    if op:
        result.update(status=Status.FAIL_ACCURACY, op=op, diverged=diverged, error=diverged)
    return result


_PLUGINS_CALLED: set[str] = set()


def load_plugin(spec: str) -> None:
    """Import ``MODULE`` or import ``MODULE:FUNCTION`` and call it (once per process)."""
    module_name, _, function = spec.partition(":")
    module = importlib.import_module(module_name)
    if function and spec not in _PLUGINS_CALLED:
        getattr(module, function)()
        _PLUGINS_CALLED.add(spec)


def execute_payload(payload: dict[str, Any], target: Target, on_phase: Callable[[str], None]) -> dict[str, Any]:
    """A worker task that is not a corpus entry: ``{"kind": "graph", "graph": ..., ...}``.

    ``imports`` names modules to import first, ``MODULE:FUNCTION`` also calls a function of it
    once per process (plugins: a backend to register, or, in the fuzzer's own tests, a bug to
    plant in the compiler)."""
    for spec in payload.get("imports") or ():
        load_plugin(spec)
    if payload["kind"] == "decomp_rule":  # crucible fuzz-decomps -j
        from harness.fuzz.decomp_campaign import run_rule_task

        return run_rule_task(payload)
    if payload["kind"] == "localize":  # a failure the campaign has the record of: which op diverges first
        return localize_record(FuzzGraph.from_json(payload["graph"]), target, payload["name"],
                               payload.get("capture", "fx"))
    if payload["kind"] != "graph":
        raise ValueError(f"unknown fuzz task kind {payload['kind']!r}")
    record = run_graph(FuzzGraph.from_json(payload["graph"]), target, on_phase,
                       localize=bool(payload.get("localize")), capture=payload.get("capture", "fx"))
    record["name"] = payload["name"]
    return record

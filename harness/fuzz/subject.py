"""A generated graph as a subject of the execution engine (``harness.engine``).

The engine runs it as it runs a corpus entry: build (the graph's function and its inputs) -> eager
twice (different outputs: ``eager_nondeterministic``) -> float64 reference (the same source with
every float dtype, casts included, meaning float64) -> compile on the target (``Target.compile``
with every target option: an ATen FX graph handed to the backend, or through Dynamo) and the first
call -> a second call on fresh inputs -> the fuzz oracle on both calls (``compare_outputs``: the
parity oracle per output, in that output's dtype, with the allowances below) -> on
``crucible-sim`` the simulator's memory checks around every kernel. Capture analysis is skipped:
a fuzz graph is one Dynamo graph by construction.

A result names the op a failure is charged to (``op``): for an accuracy failure the op that made
the failing output, for an error the op the message names (``blamed_op``). The campaign localizes
further (``harness.fuzz.localize``).
"""

from __future__ import annotations

import hashlib
import re
import warnings
from collections.abc import Callable, Iterable
from typing import Any

import torch

from harness.engine import Context, Grade, Subject, execute, optional_reference
from harness.fuzz.conditioning import ill_conditioned, order_dependent
from harness.fuzz.decisions import noise_decisions
from harness.fuzz.dynamic_run import DynamicSizes
from harness.fuzz.exact import bitwise_mismatch, exact_cone, node_is_exact, zero_sign_choice
from harness.fuzz.graph import FuzzGraph, round_step
from harness.fuzz.nan_sign import nan_sign_only
from harness.fuzz.ties import near_tied_indices
from harness.oracle import ParityOracle, ParityResult
from harness.result import Result
from harness.status import Layer
from harness.targets import CAPTURES, Target

# The oracle allowances (``compare_outputs``): the names a result's ``allowances`` counts, and the
# campaign summary prints.
SPREAD = "rounding spread"
ROUNDED_STEPS = "rounded steps"
EAGER_LAST_STEP = "eager's last step on rounded steps"
ILL_CONDITIONED = "ill-conditioned accumulation"
NEAR_TIES = "near-tied indices"
NAN_SIGN = "sign of a NaN"
ZERO_SIGN = "sign of a zero"
ORDER_DEPENDENT = "float64 order-dependent"
NOISE_DECISIONS = "decisions on rounding noise"
CANCELLATION = "relative error after a norm's cancellation"
# Ops whose result subtracts a statistic they accumulate ((x - mean) * rstd): their small outputs
# come from cancellation, so each one's error in ulps at its own magnitude is the statistic's absolute
# error over a tiny value, set by the accumulation order, not a defect. Measured (fuzzer,
# crucible-interpret, seed 112): group norm of 8192 randn values, Crucible's mean 1e-8 off float64
# where eager's is 1e-9, gave 130 ulps RMS against eager's 26 (the relative check's bound 119), while
# Crucible's outputs were closer to float64 than eager's by max abs error (1.7e-7 against 5.2e-7).
# The tolerance check still judges such outputs.
NORMALIZING = ("aten.native_layer_norm.", "aten.native_group_norm.", "aten.native_batch_norm.",
               "aten._native_batch_norm_legit", "aten.var", "aten.std")

NOISE_SAMPLES = 2  # rounding-noise references per judged output (the larger spread counts)
# An output of a few elements has a spread of a few draws: the mean of three correctly rounded
# bfloat16 values whose roundings happen to go one way is 0.0030 from float64, and a single sign
# pattern (+, -, -) put the spread at 0.0006, one time in four for those three terms (fuzzer,
# crucible-interpret:split_reductions=true, seed 531; eager's own error 0.0004). Such an output, still
# failing with the first draws, is judged again with SMALL_OUTPUT_NOISE_SAMPLES (antithetic pairs of
# independent sign patterns; the largest spread counts: one time in 4^8 for those terms).
SMALL_OUTPUT_ELEMENTS = 16
SMALL_OUTPUT_NOISE_SAMPLES = 16


def graph_name(graph: FuzzGraph) -> str:
    """A graph's result name: ``fuzz/`` and a digest of its JSON."""
    return "fuzz/" + hashlib.sha1(graph.to_json().encode()).hexdigest()[:12]


def blamed_op(graph: FuzzGraph, text: str) -> str:
    """The graph op an error message names (its last mention wins), else the graph's last op."""
    found = ""
    for op in dict.fromkeys(graph.ops):
        base = op.removeprefix("aten.").split(".")[0]
        if re.search(rf"\baten[.:]+{re.escape(base)}\b", text):
            found = op
    return found or (graph.ops[-1] if graph.ops else "input")


def capture_aten(fn: Callable[..., Any], inputs: list[torch.Tensor]) -> torch.fx.GraphModule:
    """``fn`` as the ATen graph Crucible's ``torch.compile`` backend receives: decomposed with the capture
    table, which leaves the ops of ``LATE_OPS`` (the norms) whole for the compile's late-decompositions
    pass. ``compiler.trace_aten`` decomposes them while tracing, so fx campaigns never ran that pass
    (4 of its 77 lines in a 600-graph crucible-cpp campaign) while every corpus run does."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from compiler.decompositions import capture_decomposition_table

    return make_fx(fn, decomposition_table=capture_decomposition_table(), tracing_mode="fake")(*inputs)


class GraphSubject(Subject):
    """One ``FuzzGraph`` on one target (``capture``: "fx", the ATen graph handed to the backend, or
    "dynamo", through ``torch.compile``)."""

    stateless = True  # a graph is a pure function: the second compiled call is graded too

    def __init__(self, graph: FuzzGraph, capture: str = "fx", name: str | None = None, tiers: bool = True) -> None:
        if capture not in CAPTURES:
            raise ValueError(f"capture={capture!r}: choose one of {', '.join(CAPTURES)}")
        self.graph, self.via = graph, capture
        self.tiers = tiers  # compare_outputs' exact tier, relative and bias checks
        self.name = name or graph_name(graph)
        self._fn: Callable[..., Any] | None = None
        self._inputs: list[torch.Tensor] = []
        self._allowance_references: dict[str, Any] = {}  # compare_outputs' extra references, once each
        self._sizes: DynamicSizes | None = None  # a graph with further calls: compiled with symbolic sizes

    def build(self, ctx: Context) -> None:
        self._fn = self.graph.function()
        self._inputs = self.graph.make_inputs(ctx.device)

    def eager(self, ctx: Context) -> Any:
        assert self._fn is not None
        return self._fn(*self.graph.make_inputs(ctx.device))

    def reference(self, ctx: Context) -> Any:
        return optional_reference(ctx, lambda: self.graph.function(reference=True)(
            *self.graph.make_inputs("cpu", reference=True)))

    def layers(self, target: Target) -> tuple[Layer, ...]:
        """An ATen graph handed over directly (fx) skips Dynamo: only AOTAutograd is below the target."""
        if target.backend is None:
            return ()
        return (Layer.CAPTURE, Layer.AOT_AUTOGRAD) if self.via == "dynamo" or self.graph.dynamic else \
            (Layer.AOT_AUTOGRAD,)

    def compile(self, ctx: Context) -> Callable[[], Any]:
        assert self._fn is not None
        if self.graph.dynamic:
            self._sizes = DynamicSizes(self.graph, self._fn, self._inputs, lambda g, names, e, c, r: compare_outputs(
                g, names, e, c, r, rounding_spread=True, references={}, tiers=self.tiers), capture_aten)
            return self._sizes.compile(ctx)
        fn = capture_aten(self._fn, self._inputs) if self.via == "fx" and ctx.target.is_crucible else self._fn
        compiled = ctx.target.compile(fn, self._inputs, capture=self.via)
        calls = [0]

        def call() -> Any:
            calls[0] += 1  # the first call runs on the inputs it was compiled for, later ones on fresh ones
            return compiled(*(self._inputs if calls[0] == 1 else self.graph.make_inputs(ctx.device)))

        return call

    def grade(self, ctx: Context, eager: Any, compiled: Any, reference: Any) -> Grade:
        failing, reason, fields = compare_outputs(self.graph, self.graph.outputs, eager, compiled, reference,
                                                  rounding_spread=True, references=self._allowance_references,
                                                  tiers=self.tiers)
        if failing:
            fields.update(op=self.graph.output_ops()[failing], failing_outputs=[self.graph.outputs.index(failing)])
        first = Grade(not failing, reason, fields)
        if self._sizes is None or not first.passed:
            return first
        return self._sizes.grade(ctx, first)

    def finish(self, ctx: Context) -> None:
        status = ctx.draft.get("status")
        if status is not None and status.failed and not ctx.draft.get("op"):
            ctx.draft["op"] = blamed_op(self.graph, f"{ctx.draft.get('error') or ''}\n"
                                                    f"{ctx.draft.get('error_detail') or ''}")


def run_graph(graph: FuzzGraph, target: Target, on_phase: Callable[[str], None] = lambda phase: None,
              capture: str = "fx", name: str | None = None, tiers: bool = True) -> Result:
    """Run ``graph`` on ``target`` in this process (what a worker does with a ``GraphTask``);
    ``tiers``: the oracle's exact tier, relative and bias checks (``compare_outputs``).

    Warnings are silenced: generated graphs call ops in every corner of their domains, and a
    campaign's log would be nothing else."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return execute(GraphSubject(graph, capture, name, tiers), target, on_phase)


def compare_outputs(graph: FuzzGraph, names: list[str], eager: tuple, compiled: tuple,
                    reference: tuple | None, rounding_spread: bool = False,
                    references: dict[str, Any] | None = None, tiers: bool = True) -> tuple[str, str, dict[str, Any]]:
    """(failing output name or "", reason, result fields) judging each output by its own dtype.

    The fields: ``max_abs_err``, ``rmse_ratio`` and ``rounding_spread`` (the worst over the outputs),
    and ``allowances`` ({allowance: outputs it passed}, None when none was needed).

    ``rounding_spread``: an output failing only the RMSE-vs-fp64 check is judged again against the
    spread of rounding-noise references (``FuzzGraph.function(rounding_noise=...)``, run only then),
    and one failing on NaN/inf positions against the reference with every step rounded to its
    working dtype (``_rounded_steps``); one still failing downstream of a sum, mean, cumsum or matrix
    product that cancels beyond its working precision is not compared
    (``harness.fuzz.conditioning.ill_conditioned``), and an index output (argmax, a sort's or a
    running max's indices) differing only where the values it indexes are tied to within rounding
    passes (``harness.fuzz.ties.near_tied_indices``), as does a ``signbit`` of a NaN
    (``harness.fuzz.nan_sign``: the sign of a NaN is unspecified); last, an integer or bool output
    equal to the rounded-steps reference's passes (eager's own overflow upstream changed its own).
    An output downstream of an accumulating op (a reduction, scan or nn op) that float64 inputs near
    the top of float64's range reach is not compared (``ParityOracle.compare``'s ``order_dependent``):
    its overflow and cancellation depend on the evaluation order.
    ``references``: a dict keeping the extra references between calls (a subject grades two calls).

    ``tiers`` (the default): an output whose every upstream op is exact (``harness.fuzz.exact``) must
    equal eager's bit for bit, whatever its error (only the sign of a NaN, and of a zero chosen among
    equal values, are excused there), and every other 16-bit or float32 output is also checked for relative error and bias (``ParityOracle(bias=True)``);
    ``tiers=False`` is the tolerance check alone (``crucible fuzz --oracle-tiers off``)."""
    references = {} if references is None else references
    metrics: dict[str, Any] = {}
    allowed: dict[str, int] = {}

    def allow(name: str, outputs: int = 1) -> None:
        allowed[name] = allowed.get(name, 0) + outputs

    for i, name in enumerate(names):
        e = eager[i]
        dtype = str(e.dtype).removeprefix("torch.") if isinstance(e, torch.Tensor) else "float32"
        oracle = ParityOracle(dtype if dtype in ("float16", "bfloat16", "float64") else "float32", bias=tiers)
        ref = None if reference is None else reference[i]
        if tiers and isinstance(e, torch.Tensor) and isinstance(compiled[i], torch.Tensor) and exact_cone(graph, name):
            mismatch = bitwise_mismatch(e, compiled[i])
            if mismatch and nan_sign_only(graph, name, e, compiled[i]):
                mismatch = ""
                allow(NAN_SIGN)
            if mismatch and zero_sign_choice(graph, name, e, compiled[i]):
                mismatch = ""
                allow(ZERO_SIGN)
            if mismatch:
                metrics["allowances"] = allowed or None
                return name, f"{name}: {mismatch}", metrics
            continue
        parity = oracle.compare(e, compiled[i], ref)
        # every allowance is looked for only after a strict failure (none costs a passing graph)
        # (any output dtype: a float64 accumulation over huge values cast to float32 afterwards is as
        # order-dependent; fuzzer, crucible-cpp:extern=none, seed 274: mean(layer_norm(-1.8e308), dtype=f32),
        # NaN in ATen's order, 0 in Crucible's)
        unjudged = not parity.passed and order_dependent(graph, name)
        if unjudged:
            parity = oracle.compare(e, compiled[i], ref, order_dependent=True)
        if not parity.passed and parity.needs_spread and rounding_spread and ref is not None:
            if "noisy" not in references:
                references["noisy"] = _noisy_references(graph)
            noisy = references["noisy"]
            parity = oracle.compare(e, compiled[i], ref, spread=[s[i] for s in noisy], order_dependent=unjudged)
            if not parity.passed and noisy and _elements(e) <= SMALL_OUTPUT_ELEMENTS:
                if "noisy_more" not in references:
                    references["noisy_more"] = _noisy_references(graph, range(len(noisy), SMALL_OUTPUT_NOISE_SAMPLES))
                noisy = noisy + references["noisy_more"]
                parity = oracle.compare(e, compiled[i], ref, spread=[s[i] for s in noisy], order_dependent=unjudged)
            if parity.passed:
                allow(SPREAD)
        if not parity.passed and parity.needs_rounded_steps and rounding_spread and ref is not None:
            steps = _rounded_steps(graph, references)
            if steps is not None:
                parity = oracle.compare(e, compiled[i], ref, order_dependent=unjudged, rounded_steps=steps[i])
                if parity.passed:
                    allow(ROUNDED_STEPS)
            last = _eager_last_step(graph, references, i) if not parity.passed else None
            if last is not None:
                parity = oracle.compare(e, compiled[i], ref, order_dependent=unjudged, rounded_steps=last)
                if parity.passed:
                    allow(EAGER_LAST_STEP)
        if not parity.passed and not unjudged and rounding_spread and ill_conditioned(graph, name):
            parity = oracle.compare(e, compiled[i], ref, order_dependent=True)
            allow(ILL_CONDITIONED)
        if (not parity.passed and "relative error" in parity.reason and rounding_spread
                and after_cancellation(graph, name)):
            parity = ParityOracle(oracle.dtype, bias=False).compare(e, compiled[i], ref)
            if parity.passed:
                allow(CANCELLATION)
        if (not parity.passed and rounding_spread and isinstance(e, torch.Tensor)
                and near_tied_indices(graph, name, e, compiled[i])):
            parity = ParityResult(True)
            allow(NEAR_TIES)
        if (not parity.passed and rounding_spread and isinstance(e, torch.Tensor)
                and isinstance(compiled[i], torch.Tensor) and noise_decisions(graph, name, e, compiled[i])):
            parity = ParityResult(True)
            allow(NOISE_DECISIONS)
        if (not parity.passed and rounding_spread and isinstance(e, torch.Tensor)
                and nan_sign_only(graph, name, e, compiled[i])):
            parity = ParityResult(True)
            allow(NAN_SIGN)
        if (not parity.passed and rounding_spread and ref is not None and isinstance(e, torch.Tensor)
                and not e.is_floating_point() and not e.is_complex()):
            # the last allowance: integers from floats (a max's indices) equal to those of the reference
            # with every step rounded to its working dtype (a correctly rounded eager) are right where
            # eager's differ by its own overflow (fuzzer, crucible-cpp, seed 253: a bfloat16 layer norm
            # NaN in eager, +-1 in float64, and a max over it chose other indices)
            steps = _rounded_steps(graph, references)
            if steps is not None and isinstance(steps[i], torch.Tensor) and torch.equal(compiled[i].cpu(), steps[i].cpu()):
                parity = ParityResult(True)
                allow(ROUNDED_STEPS)
        for key in ("max_abs_err", "rmse_ratio", "rounding_spread"):
            value = getattr(parity, key)
            if value is not None:
                metrics[key] = max(metrics.get(key, 0.0), value)
        if unjudged and parity.unjudged_outputs:
            allow(ORDER_DEPENDENT, parity.unjudged_outputs)
        if not parity.passed:
            metrics["allowances"] = allowed or None
            return name, parity.reason.replace("out: ", f"{name}: ", 1), metrics
    metrics["allowances"] = allowed or None
    return "", "", metrics


def after_cancellation(graph: FuzzGraph, name: str) -> bool:
    """Whether ``name`` depends on an op of ``NORMALIZING`` (its small values come from cancellation)."""
    upstream = graph.upstream([name])
    return any(n.op.startswith(NORMALIZING) for n in graph.nodes if any(o in upstream for o in n.outputs))


def _rounded_steps(graph: FuzzGraph, references: dict[str, Any]) -> tuple | None:
    """The float64 reference with every step rounded to its working dtype (None if it cannot run),
    computed once per graph and kept in ``references``, with every value it computed (by
    ``FuzzGraph.function``'s hook index) under ``"step values"``."""
    if "steps" not in references:
        values: dict[int, Any] = {}

        def record(value: Any, dtype_name: str, index: int) -> Any:
            values[index] = round_step(value, dtype_name, index)
            return values[index]

        try:
            references["steps"] = graph.function(reference=True, hook=record)(*graph.make_inputs("cpu", reference=True))
        except Exception:  # noqa: BLE001 -- as the plain reference
            references["steps"] = None
        references["step values"] = values
    return references["steps"]


def _eager_last_step(graph: FuzzGraph, references: dict[str, Any], i: int) -> Any:
    """Output ``i`` as eager's own op computes it in its working dtype from the correctly rounded
    values of its inputs (every earlier step of the float64 run rounded to its working dtype): where
    eager's NaN comes from an earlier step's overflow and the compiled value follows the last op's
    working-dtype arithmetic, not float64's (fuzzer, crucible-interpret, seed 394: a layer norm's rstd
    NaN in eager, 1.8e-37 rounded correctly, and its float32 vector norm 0 in ATen and Crucible alike,
    where the float64 run keeps 1.8e-37). None for an input or an output the run cannot give."""
    key = f"last step {i}"
    if key not in references:
        references[key] = None
        made = {out: k for k, n in enumerate(graph.nodes) for out in n.outputs}
        node = made.get(graph.outputs[i])
        if node is None or _rounded_steps(graph, references) is None:
            return None
        rounded = references["step values"]

        def substitute(value: Any, dtype_name: str, index: int) -> Any:
            if index // 64 == node or not isinstance(value, torch.Tensor) or not value.is_floating_point():
                return value
            return rounded[index].to(value.dtype)

        try:
            references[key] = graph.function(hook=substitute)(*graph.make_inputs("cpu"))[i]
        except Exception:  # noqa: BLE001 -- as the plain reference: some op fails on these values
            references[key] = None
    return references[key]


def _elements(value: Any) -> int:
    return value.numel() if isinstance(value, torch.Tensor) else 1


def _noisy_references(graph: FuzzGraph, seeds: Iterable[int] = range(NOISE_SAMPLES)) -> list[tuple]:
    """The float64 reference run with rounding noise, once a seed ([] if it cannot run), on float64
    values too where their op rounds (not an exact one: ``harness.fuzz.exact``)."""
    rounded = frozenset(out for n in graph.nodes if not node_is_exact(n.op, n.expr, [d for _, d in n.out_meta])
                        for out, (_, dtype) in zip(n.outputs, n.out_meta) if dtype == "float64")
    try:
        return [graph.function(reference=True, rounding_noise=seed, float64_rounded=rounded)(
            *graph.make_inputs("cpu", reference=True)) for seed in seeds]
    except Exception:  # noqa: BLE001 -- as the plain reference: no float64 kernel for some op
        return []

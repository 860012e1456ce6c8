"""A corpus entry as a subject of the engine (``harness.engine``): how each phase runs a model.

Build the entry (seeded), run eager twice on fresh copies, run a float64 copy as the reference,
analyse capture, compile on the target and call it twice, grade the first compiled output with the
parity oracle. A crucible target's capture analysis rides along its compile
(``harness.capture.CaptureProbe``: Dynamo traces the model once); where that compile does not finish
its first call, the capture analysis runs on its own afterwards, as it does before the compile for
every other target. In train mode each call is a training step (forward, seeded loss, backward: the
gradients are graded too) and the first compiled call's phases are ``forward`` and ``backward``.
``dynamic`` compiles with dynamic shapes and grades every batch size of ``harness.shapes``.

The model under test is never changed by the eager or reference runs: every run gets its own copy
(``harness.model_runs.ModelCopies``).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from corpus.entry import Entry, EntryUnavailable
from harness.capture import CaptureProbe, CaptureResult, analyze_capture, count_eager_ops
from harness.compile_reasons import entry_fields
from harness.engine import Context, Expectation, Grade, Subject, execute
from harness.errors import FIRST_CALL, SubjectFailed, SubjectSkipped, classify, describe_error
from harness.model_runs import (DTYPES, ModelCopies, StepOutput, TRAIN_PARAMS, call_seeded, cast, fresh_inputs,
                                identical, reference_runs, step)
from harness.oracle import ParityOracle
from harness.result import Result
from harness.shapes import SizeVariant, dynamo_counters, size_label, size_variants
from harness.status import Layer, Phase, Status
from harness.targets import MODES, REFERENCE_CHOICES, Target
from harness.training import NoGradient


@dataclass
class _Variant:
    """One input size: ``batch`` is None when the entry runs at its built size only."""

    batch: int | None
    args: tuple
    kwargs: dict
    raw: tuple  # (args, kwargs) as built, for the float64 reference
    seq: int | None = None  # the sequence length, where the entry has one (``harness.shapes``)
    name: str = ""  # what the entry's own size schedule calls this size

    @property
    def label(self) -> str:
        return size_label(self.batch, self.seq, self.name)


class EntrySubject(Subject):
    # stateless stays False: a model may keep state between calls, the first compiled call is graded

    def __init__(self, entry: Entry, mode: str = "inference", dynamic: bool = False, reference: str = "auto",
                 capture: bool = True) -> None:
        if reference not in REFERENCE_CHOICES:
            raise ValueError(f"reference={reference!r}: choose one of {', '.join(REFERENCE_CHOICES)}")
        if mode not in MODES:
            raise ValueError(f"mode={mode!r}: choose one of {', '.join(MODES)}")
        self.entry, self.name = entry, entry.name
        self.mode, self.dynamic, self.where, self.analyse = mode, dynamic, reference, capture
        self.models: ModelCopies | None = None
        self.variants: list[_Variant] = []
        self._eager: list[StepOutput] = []  # per variant
        self._references: list[StepOutput | None] = []
        self._probe: CaptureProbe | None = None
        self._captured = False
        self._eager_ops: int | None = None
        self._counters = (0, 0)
        self._compiled: Any = None  # the compiled model: --dynamic runs it again at the further sizes
        self._compiled_model: Any = None  # what was compiled: its state is restarted before each further size

    @property
    def dtype(self) -> torch.dtype | None:
        return DTYPES.get(self.entry.dtype)

    def expectation(self, target: Target) -> Expectation | None:
        expected = self.entry.expected_failure(target.name)
        return None if expected is None else Expectation(expected.status, expected.reason)

    def runs_on(self, device: str) -> str | None:
        return None if device in self.entry.devices else f"entry does not run on {device}"

    def _scale(self, device: str) -> str:
        return "full" if device == "cuda" else "small"

    def build(self, ctx: Context) -> None:
        scale = self._scale(ctx.device)
        try:
            built = self.entry.build(scale)
        except EntryUnavailable as exc:
            raise SubjectSkipped(f"unavailable here: {exc}") from None
        self.models = ModelCopies(self.entry, scale, built.model)
        sizes = size_variants(built.inputs, built.kwargs, built.sizes) if self.dynamic else \
            [SizeVariant(None, None, built.inputs, built.kwargs)]
        self.variants = [_Variant(v.batch, cast(v.args, ctx.device, self.dtype), cast(v.kwargs, ctx.device, self.dtype),
                                  (v.args, v.kwargs), v.seq, v.name) for v in sizes]

    def _model(self, device: str, dtype: torch.dtype | None) -> Any:
        assert self.models is not None
        return self.models.fresh(device, dtype)

    def eager(self, ctx: Context) -> StepOutput:
        first = self.variants[0]
        try:
            if self._eager_ops is None:  # the first call: count the forward's ATen ops (coverage's denominator)
                out = self._first_eager(ctx, first)
            else:
                out = step(self.mode, self._model(ctx.device, self.dtype), *fresh_inputs(first.args, first.kwargs),
                           self.entry.seed)
        except NoGradient as exc:
            raise SubjectSkipped(f"train mode: {exc}") from None
        if len(self._eager) == 1 and len(self.variants) > 1:
            self._further_sizes(ctx)
        if not self._eager:
            self._eager.append(out)
        return out

    def _first_eager(self, ctx: Context, first: _Variant) -> StepOutput:
        # counted on a copy made outside the op counter: copying dispatches ops too
        model = self._model(ctx.device, self.dtype)
        self._eager_ops, counted = count_eager_ops(lambda *a, **k: call_seeded(model, a, k, self.entry.seed),
                                                   *fresh_inputs(first.args, first.kwargs))
        if self.mode == "inference":
            return StepOutput(counted)
        try:
            return step(self.mode, self._model(ctx.device, self.dtype), *fresh_inputs(first.args, first.kwargs),
                        self.entry.seed)
        except NoGradient:
            raise
        except Exception as exc:
            # eager's backward fails when the inputs require grad (an in-place op on an input, .numpy()):
            # grade the parameters' gradients alone
            self.mode = TRAIN_PARAMS
            try:
                out = step(self.mode, self._model(ctx.device, self.dtype), *fresh_inputs(first.args, first.kwargs),
                           self.entry.seed)
            except NoGradient:
                raise exc from None  # no parameters either: eager's own failure is the result
            ctx.draft["grad_note"] = (f"gradients of parameters only: with inputs requiring grad eager "
                                      f"failed ({describe_error(exc)[0][:200]})")
            return out

    def _further_sizes(self, ctx: Context) -> None:
        """--dynamic: eager at the further batch sizes. A size eager fails at is dropped and noted, not
        an eager failure: the leading dimension of an op's input need not be a batch (cholesky)."""
        kept, notes = [self.variants[0]], []
        for variant in self.variants[1:]:
            try:
                self._eager.append(step(self.mode, self._model(ctx.device, self.dtype),
                                        *fresh_inputs(variant.args, variant.kwargs), self.entry.seed))
                kept.append(variant)
            except Exception as exc:  # noqa: BLE001
                notes.append(f"{variant.label} dropped: eager fails at it ({describe_error(exc)[0][:160]})")
        self.variants = kept
        if notes:
            ctx.draft["dynamic_note"] = "; ".join(notes)

    def identical(self, a: StepOutput, b: StepOutput) -> bool:
        return identical(a, b)

    def reference(self, ctx: Context) -> StepOutput | None:
        assert self.models is not None
        if self.models.copy_error:
            ctx.draft["model_copy"] = (f"rebuilt from the seeded factory for every run (deepcopy failed: "
                                       f"{self.models.copy_error})")
        self._references = reference_runs(self.models, [(v.batch, *v.raw) for v in self.variants], self.entry.seed,
                                          ctx.device, self.where, ctx.draft, self.mode)
        return self._references[0]

    def capture(self, ctx: Context) -> None:
        if not self.analyse:
            return
        if ctx.target.is_crucible:
            self._probe = CaptureProbe()  # rides along the compile
        else:
            self._capture_apart(ctx)

    def _capture_apart(self, ctx: Context) -> None:
        first = self.variants[0]
        self._captured = True
        ctx.phase(Phase.CAPTURE)  # a crash or hang in here is Dynamo's, and the parent must know it
        start = time.perf_counter()
        try:
            torch._dynamo.reset()
            cap, _ = analyze_capture(self._model(ctx.device, self.dtype), *fresh_inputs(first.args, first.kwargs))
            self._record_capture(ctx, cap)
        except Exception as exc:  # noqa: BLE001 -- capture analysis is information, not the verdict
            ctx.draft["capture_error"] = describe_error(exc)[0]
        finally:
            torch._dynamo.reset()
            ctx.draft["capture_s"] = time.perf_counter() - start

    def _record_capture(self, ctx: Context, cap: CaptureResult) -> None:
        cap.eager_ops = self._eager_ops
        ctx.draft.update(graphs=cap.graphs, graph_breaks=cap.graph_breaks, capture_coverage=cap.coverage,
                         captured_ops=cap.captured_ops, eager_ops=self._eager_ops,
                         break_reasons=[{"reason": b.reason, "category": b.category, "frame": b.frame}
                                        for b in cap.breaks])

    def layers(self, target: Target) -> tuple[Layer, ...]:
        return (Layer.CAPTURE, Layer.AOT_AUTOGRAD) if target.backend is not None else ()

    def compile(self, ctx: Context) -> Callable[[], StepOutput]:
        target = ctx.target
        # the capture probe rides along the target's compile only, not the attribution's re-runs
        probe = self._probe if target.is_crucible else None
        model = self._model(ctx.device, self.dtype)
        compiled = target.compile(model, capture="dynamo", dynamic=self.dynamic,
                                  wrap=probe.wrap if probe is not None else None)
        first = self.variants[0]
        calls = [0]

        def call() -> StepOutput:
            calls[0] += 1
            if calls[0] > 1:
                if self.mode != "inference":
                    _detach_state(model)
                return step(self.mode, compiled, *fresh_inputs(first.args, first.kwargs), self.entry.seed)
            self._counters = dynamo_counters()
            with _compile_reports(target) as reports:
                try:
                    out = step(self.mode, compiled, *fresh_inputs(first.args, first.kwargs), self.entry.seed,
                               lambda: ctx.phase(Phase.BACKWARD))
                finally:  # graphs compiled before a failure still count
                    if reports is not None:  # counts, extern ops and their reasons, fallbacks, refusals
                        ctx.draft.update(entry_fields(reports))
            if probe is not None:  # the capture is the first call's: later calls do not count
                probe.finish()
            if self.mode != "inference":
                ctx.draft["backward_graphs"] = out.backward_graphs
            return out

        self._compiled, self._compiled_model = compiled, model
        return call

    def grade(self, ctx: Context, eager: StepOutput, compiled: StepOutput, reference: StepOutput | None) -> Grade:
        first = _grade(self.entry, eager, compiled, reference)
        if not self.dynamic:
            return first
        return self._grade_sizes(ctx, first)

    def _grade_sizes(self, ctx: Context, first: Grade) -> Grade:
        """--dynamic: run the compiled model at every further size; grade each; record recompiles.

        ``recompiles`` counts the graphs Dynamo compiled after the first size (a backend that handles
        symbolic shapes compiles none for sizes >= 2); ``guard_failures`` the guards that failed."""
        graphs_first = dynamo_counters()[0] - self._counters[0]
        fields = first.fields or {}
        rows = [{"batch": self.variants[0].batch, "seq": self.variants[0].seq, "status": Status.PASS if first.passed else Status.FAIL_ACCURACY,
                 "rmse_ratio": fields.get("rmse_ratio"), "grad_rmse_ratio": fields.get("grad_rmse_ratio"),
                 "graphs": graphs_first, "error": first.reason or None}]
        worst: tuple[Status, str, str | None] | None = None if first.passed else (Status.FAIL_ACCURACY,
                                                                                  first.reason, None)
        for i, variant in enumerate(self.variants[1:], start=1):
            ctx.phase(Phase.RUN)
            graphs_before = dynamo_counters()[0]
            try:
                self._restart_state(ctx)
                out = step(self.mode, self._compiled, *fresh_inputs(variant.args, variant.kwargs), self.entry.seed)
                if ctx.device == "cuda":
                    torch.cuda.synchronize()
                ctx.phase(Phase.COMPARE)
                graded = _grade(self.entry, self._eager[i], out, self._references[i])
                status = Status.PASS if graded.passed else Status.FAIL_ACCURACY
                gfields = graded.fields or {}
                row = {"batch": variant.batch, "seq": variant.seq, "status": status,
                       "rmse_ratio": gfields.get("rmse_ratio"),
                       "grad_rmse_ratio": gfields.get("grad_rmse_ratio"), "error": graded.reason or None}
                reason, detail = graded.reason, None
            except Exception as exc:  # noqa: BLE001
                status = classify(exc, Phase.RUN, FIRST_CALL)  # a new size may compile
                reason, detail = describe_error(exc)
                row = {"batch": variant.batch, "seq": variant.seq, "status": status, "error": reason}
            row["graphs"] = dynamo_counters()[0] - graphs_before
            rows.append(row)
            if status != Status.PASS and worst is None:
                worst = (status, f"at {variant.label}: {reason}", detail)
        graphs_now, failures_now = dynamo_counters()
        fields = {**fields, "sizes": rows, "recompiles": graphs_now - self._counters[0] - graphs_first,
                  "guard_failures": failures_now - self._counters[1]}
        if len(self.variants) == 1 and self.variants[0].batch is None:
            fields["dynamic_note"] = "no common batch dimension: ran at the built size only"
        if worst is None:
            return Grade(True, "", fields)
        if worst[0] != Status.FAIL_ACCURACY:  # an error at a later size: the result says which
            ctx.draft.update(fields)
            raise SubjectFailed(worst[0], worst[1], worst[2])
        return Grade(False, worst[1], fields)

    def _restart_state(self, ctx: Context) -> None:
        """The compiled model's parameters and buffers set back to a fresh copy's, in place (Dynamo's
        guards see the same tensors): eager and the float64 reference run every further size on a
        fresh model, and a model that updates its state in forward (a step counter, running
        statistics) would otherwise meet each further size with the earlier calls' updates."""
        model = self._compiled_model
        if not isinstance(model, torch.nn.Module):
            return
        fresh = self._model(ctx.device, self.dtype)
        state = {**dict(fresh.named_parameters()), **dict(fresh.named_buffers())}
        with torch.no_grad():
            for name, tensor in [*model.named_parameters(), *model.named_buffers()]:
                source = state.get(name)
                if source is not None and source.shape == tensor.shape and source.dtype == tensor.dtype:
                    tensor.copy_(source)
        _detach_state(model)

    def finish(self, ctx: Context) -> None:
        if not self.analyse or self._captured:
            return
        if self._probe is not None and self._probe.finished:
            self._record_capture(ctx, self._probe.finish())
            return
        if self._probe is not None or ctx.draft.get("status") == Status.EAGER_NONDETERMINISTIC:
            # the compile stopped before its first call returned (or never started): capture on its own,
            # keeping the phase the result ended in
            where = ctx.draft.get("phase")
            if self.variants:
                self._capture_apart(ctx)
            ctx.draft["phase"] = where


def _detach_state(model: Any) -> None:
    """Buffers the last training step wrote from values that require grad (``buf.copy_(x)``) hold that
    step's autograd history; a later step would backward into it after it was freed ("Trying to
    backward through the graph a second time"), in eager as well. The compiled model's later steps
    start from detached buffers, as a fresh model's first step does (eager runs every step on one)."""
    if not isinstance(model, torch.nn.Module):
        return
    for tensor in model.buffers():
        if tensor.grad_fn is not None and tensor._base is None:
            tensor.detach_()


def _grade(entry: Entry, eager: StepOutput, compiled: StepOutput, reference: StepOutput | None) -> Grade:
    """Oracle verdict on outputs and (train mode) gradients."""
    oracle = ParityOracle(entry.dtype, entry.tolerance_for(entry.dtype))
    parity = oracle.compare(eager.out, compiled.out, reference.out if reference is not None else None)
    fields: dict[str, Any] = {"max_abs_err": parity.max_abs_err, "max_rel_err": parity.max_rel_err,
                              "rmse_ratio": parity.rmse_ratio, "cosine": parity.cosine}
    passed, reason = parity.passed, parity.reason
    if eager.grads is not None:
        grads = oracle.compare(eager.grads, compiled.grads or {}, reference.grads if reference is not None else None)
        fields.update(grad_max_abs_err=grads.max_abs_err, grad_max_rel_err=grads.max_rel_err,
                      grad_rmse_ratio=grads.rmse_ratio, grad_cosine=grads.cosine, grads=len(eager.grads))
        if passed and not grads.passed:
            passed, reason = False, f"gradient {grads.reason}"
    return Grade(passed, reason, fields)


def _compile_reports(target: Target) -> Any:
    """Crucible's compile reports (kernels, extern ops with reasons, fallbacks, refused fusions);
    other backends publish none."""
    if not target.is_crucible:
        return contextlib.nullcontext()
    from compiler.report import collect_reports

    return collect_reports()


def run_entry(entry: Entry, target: Target, on_phase: Callable[[str], None] = lambda phase: None,
              capture: bool = True, reference: str = "auto", mode: str = "inference", dynamic: bool = False,
              allow_tf32: bool = False, expectation: Expectation | None = None) -> Result:
    """Run ``entry`` on ``target`` in this process (what a worker does with an entry task)."""
    subject = EntrySubject(entry, mode, dynamic, reference, capture)
    result = execute(subject, target, on_phase, expectation or subject.expectation(target), allow_tf32,
                     mode=mode, dynamic=int(dynamic))
    return result

"""The execution engine: one subject on one target, through one sequence of phases, to one Result.

A subject is anything the harness runs and grades: a corpus entry (``harness.entry_subject``), a
generated graph (``harness.fuzz.subject``), a minimizer case (``harness.minify.check``), a
decomposition-rule case (``harness.fuzz.decomp_subject``), a corpus check (an entry that stops
after eager). The sequence is the same for every one of them:

    build -> eager (twice: different outputs are ``eager_nondeterministic``) -> float64 reference
    -> capture analysis (entries) -> compile (and the first compiled call) -> run (the second call)
    -> compare (the parity oracle) -> checks (the simulator's, on ``crucible-sim``)
    -> attribute (a failure of the target: which layer of the stack it is in)

and every exception goes through one classifier (``harness.errors.classify``). The subject says
how to do each step (its ``Subject`` methods); the engine says when, times each phase, tells the
caller where it is (``on_phase``, so the worker's parent knows where a crash or hang happened),
runs the simulator's memory checks wherever the target is ``crucible-sim``, and applies what was
expected of the subject (an expected-results file, an entry's ``ExpectedFailure``).

Attribution: a failure of a Dynamo-backend target is compiled and graded again on the Dynamo
backends that stop after each layer below the target (``eager``: capture only; ``aot_eager``: capture
and AOTAutograd), in the same worker, within a time box. The first layer failing with the same status
is the failing layer (``Result.failing_layer``); a failure in capture or AOTAutograd becomes
``fail_upstream``, which is not charged to the target.

Model and compiler code can raise anything, and every exception is a result to record, not an
engine bug: hence the broad ``except Exception`` clauses.
"""

from __future__ import annotations

import contextlib
import dataclasses
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

from harness.errors import CALL, COMPILE, FIRST_CALL, SubjectFailed, SubjectSkipped, classify, describe_error, failed_pass
from harness.oracle import outputs_identical, working_precision
from harness.result import FIELD_NAMES, Draft, Result
from harness.status import Layer, Phase, Status, against_compiler
from harness.targets import Target


@dataclass(frozen=True)
class Grade:
    """A subject's verdict on one compiled output: passed or not, why, and the figures (result fields)."""

    passed: bool
    reason: str = ""
    fields: dict | None = None


@dataclass(frozen=True)
class Expectation:
    """What a subject is expected to end as on this target: a failure status and why (an expected-results
    file's row, or an entry's ``ExpectedFailure``)."""

    status: str
    reason: str


class Subject:
    """What the engine asks of a subject; the defaults suit a pure function with nothing to analyse.
    Each method runs one step; raising is the step's failure (``harness.errors.classify``)."""

    name: str
    # phases after which the subject is done (a corpus check stops after eager)
    last_phase = Phase.COMPARE
    # eager calls: the last two must agree; the first one's output is the one graded against
    eager_calls = 2
    # grade the second compiled call too (pure functions: graphs, cases); a model with state grades
    # the first call only, as a user sees it
    stateless = False

    def runs_on(self, device: str) -> str | None:
        """None when the subject runs on ``device``, else why not (the result is ``skipped``)."""
        return None

    def build(self, ctx: Context) -> None:
        """Make the model or function and its inputs (raising ``SubjectSkipped`` skips the subject)."""
        raise NotImplementedError

    def eager(self, ctx: Context) -> Any:
        """One eager call on fresh copies; returns its output."""
        raise NotImplementedError

    def identical(self, a: Any, b: Any) -> bool:
        """Whether two eager outputs agree bit for bit (else the subject is nondeterministic)."""
        return outputs_identical(a, b)

    def reference(self, ctx: Context) -> Any:
        """The float64 output, or None without one (never raises: no reference is not a failure)."""
        return None

    def capture(self, ctx: Context) -> None:
        """The capture analysis, where it does not ride along the compile (information, never raises)."""
        return None

    def compile(self, ctx: Context) -> Callable[[], Any]:
        """Compile for ``ctx.target``; the callable runs the compiled code once on fresh inputs."""
        raise NotImplementedError

    def grade(self, ctx: Context, eager: Any, compiled: Any, reference: Any) -> Grade:
        """The oracle's verdict on one compiled output."""
        raise NotImplementedError

    def finish(self, ctx: Context) -> None:
        """After the sequence, whatever happened in it (a capture that did not ride along)."""
        return None

    def layers(self, target: Target) -> tuple[Layer, ...]:
        """The layers below ``target`` the subject passes through on it, in order (``Layer.CAPTURE``
        when ``compile`` goes through Dynamo, ``Layer.AOT_AUTOGRAD``); () is never attributed."""
        return ()


def optional_reference(ctx: Context, run: Callable[[], Any], where: str = "cpu") -> Any:
    """``run()``, the float64 reference, or None when it cannot run (no float64 kernel for some op: the
    oracle then judges against eager only); the result's ``reference`` says which."""
    try:
        out = run()
    except Exception as exc:  # noqa: BLE001 -- any op may lack a float64 kernel
        ctx.draft["reference"] = f"none: {type(exc).__name__}: {str(exc)[:200]}"
        return None
    ctx.draft["reference"] = where
    return out


class Context:
    """What a subject's steps see: the target, the result being filled, and the phase switch."""

    def __init__(self, target: Target, draft: Draft, on_phase: Callable[[str], None]) -> None:
        self.target, self.draft, self._on_phase = target, draft, on_phase
        self._phase: Phase | None = None
        self._started = time.perf_counter()
        self.graded: tuple[Any, Any] | None = None  # (eager, reference) outputs, kept for attribution
        self.failed_output: Any = None  # the target's output that failed the oracle, for attribution

    @property
    def device(self) -> str:
        return self.target.device

    def phase(self, phase: Phase) -> None:
        """Enter ``phase``: the time of the phase that ends is recorded (``build_s``, ``eager_s``, ...)."""
        now = time.perf_counter()
        if self._phase in _TIMED:
            self.draft[f"{self._phase.value}_s"] = now - self._started
        self._phase, self._started = phase, now
        self.draft["phase"] = phase.value
        self._on_phase(phase.value)

    @property
    def current(self) -> Phase:
        assert self._phase is not None
        return self._phase


# phases timed here; the capture analysis times itself (capture_s), where it runs apart
_TIMED = (Phase.BUILD, Phase.EAGER, Phase.REFERENCE)


class _Stop(Exception):
    """The sequence ends here: the draft holds the verdict."""


def execute(subject: Subject, target: Target, on_phase: Callable[[str], None] = lambda phase: None,
            expectation: Expectation | None = None, allow_tf32: bool = False, **fields: Any) -> Result:
    """Run ``subject`` on ``target`` in this process; the Result says how it ended.

    ``fields``: result fields known before the run (``mode``, ``dynamic``, ``suite``, ...).
    ``allow_tf32`` keeps torch's TF32 flags instead of grading float32 at full precision."""
    draft = Draft(name=subject.name, target=target.name, status=None, phase=Phase.BUILD.value, **fields)
    reason = subject.runs_on(target.device)
    if reason is None and target.device == "cuda" and not torch.cuda.is_available():
        reason = f"{target.name} needs a CUDA GPU and none is available"
    if reason is not None:
        draft.update(status=Status.SKIPPED, error=reason)
        return draft.freeze()
    torch._dynamo.reset()
    started = time.perf_counter()
    try:
        with _simulation(target, draft, on_phase) as on_phase, torch.no_grad(), working_precision(allow_tf32):
            ctx = Context(target, draft, on_phase)
            try:
                _sequence(subject, ctx)
            except _Stop:
                pass
            finally:
                _finish(subject, ctx)
            _attribute(subject, ctx, time.perf_counter() - started, on_phase, expectation)
    finally:
        torch._dynamo.reset()
    return _expected(draft.freeze(), expectation)


def _sequence(subject: Subject, ctx: Context) -> None:
    ctx.phase(Phase.BUILD)
    _step(ctx, lambda: subject.build(ctx))
    ctx.phase(Phase.EAGER)
    outputs = []
    for _ in range(subject.eager_calls):
        start = time.perf_counter()
        outputs.append(_step(ctx, lambda: subject.eager(ctx)))
        ctx.draft["eager_calls_s"] = [*ctx.draft.get("eager_calls_s", []), time.perf_counter() - start]
    _synchronize(ctx.device)
    if len(outputs) > 1 and not subject.identical(outputs[-2], outputs[-1]):
        ctx.draft.update(status=Status.EAGER_NONDETERMINISTIC, error="two eager runs gave different outputs")
        raise _Stop
    eager = outputs[0]
    del outputs
    if subject.last_phase is Phase.EAGER:
        ctx.draft["status"] = Status.PASS
        raise _Stop
    ctx.phase(Phase.REFERENCE)
    reference = subject.reference(ctx)
    ctx.graded = (eager, reference)
    ctx.phase(Phase.CAPTURE)
    subject.capture(ctx)
    ctx.phase(Phase.FORWARD if ctx.draft.get("mode") == "train" else Phase.COMPILE)
    start = time.perf_counter()  # compile_s: the compile step and the first call (Dynamo compiles lazily)
    compiled = _step(ctx, lambda: subject.compile(ctx), COMPILE)
    first = _step(ctx, compiled, FIRST_CALL)
    _synchronize(ctx.device)
    ctx.draft["compile_s"] = time.perf_counter() - start
    ctx.phase(Phase.RUN)
    start = time.perf_counter()
    second = _step(ctx, compiled)
    _synchronize(ctx.device)
    ctx.draft["run_s"] = time.perf_counter() - start
    ctx.phase(Phase.COMPARE)
    grade = _step(ctx, lambda: subject.grade(ctx, eager, first, reference))
    if grade.passed and subject.stateless:
        again = _step(ctx, lambda: subject.grade(ctx, eager, second, reference))
        if not again.passed:
            grade = Grade(False, f"second call: {again.reason}", again.fields)
    ctx.draft.update(grade.fields or {})
    if grade.passed:
        ctx.draft["status"] = Status.PASS
    else:
        ctx.failed_output = second if grade.reason.startswith("second call: ") else first
        ctx.draft.update(status=Status.FAIL_ACCURACY, error=grade.reason)


def _step(ctx: Context, step: Callable[[], Any], kind: str = CALL) -> Any:
    """Run one step; an exception decides the result (``classify``) and ends the sequence."""
    try:
        return step()
    except Exception as exc:  # noqa: BLE001 -- the subject's or the compiler's failure: a result
        fail(ctx.draft, classify(exc, ctx.current, kind), exc)
        raise _Stop from None


def fail(draft: Draft, status: Status, exc: BaseException) -> None:
    """Record ``exc`` as the result's failure with ``status``."""
    draft["status"] = status
    if isinstance(exc, (SubjectSkipped, SubjectFailed)):  # the subject's own words
        draft["error"], draft["error_detail"] = str(exc), getattr(exc, "detail", None)
        return
    draft["error"], draft["error_detail"] = describe_error(exc)
    where = failed_pass(exc)
    if where is not None:
        draft["failed_pass"] = where


def _finish(subject: Subject, ctx: Context) -> None:
    try:
        subject.finish(ctx)
    except Exception as exc:  # noqa: BLE001 -- after the verdict: information lost, verdict kept
        ctx.draft.setdefault("capture_error", f"finishing failed: {describe_error(exc)[0]}")


# The Dynamo backend that stops right after each layer: "eager" runs the captured graph as it is,
# "aot_eager" runs AOTAutograd's functional ATen graph with ATen's kernels.
LAYER_BACKENDS = {Layer.CAPTURE: "eager", Layer.AOT_AUTOGRAD: "aot_eager"}
# failures a re-run can tell apart (a dead worker's result is made by the parent, with nothing to re-run)
ATTRIBUTED = (Status.FAIL_ACCURACY, Status.FAIL_COMPILE, Status.FAIL_RUN)
# the re-runs' time box: the subject's own time so far, within these bounds (a Dynamo eager compile of a
# corpus model takes 0.5-5 s on 2 cores; the box keeps a slow one from costing its task's deadline)
ATTRIBUTION_MIN_S, ATTRIBUTION_MAX_S = 10.0, 60.0


class _OutOfTime(BaseException):
    """The attribution's time box is spent (a BaseException: compiler code catching Exception lets it by)."""


def _attribute(subject: Subject, ctx: Context, elapsed: float, on_phase: Callable[[str], None],
               expectation: Expectation | None) -> None:
    """Record which layer a failure of the target is in; a failure in capture or AOTAutograd becomes
    ``fail_upstream`` (not charged to the target). Not for a target that is itself one of the layers'
    backends (``eager``, ``aot_eager``: the layers are what it tests), nor for an expected failure."""
    draft = ctx.draft
    status = draft.get("status")
    if (status not in ATTRIBUTED or ctx.graded is None or not against_compiler(status, draft.get("phase"))
            or ctx.target.backend in LAYER_BACKENDS.values()
            or (expectation is not None and status == expectation.status)):
        return
    below = subject.layers(ctx.target)
    if not below:
        return
    on_phase(Phase.ATTRIBUTE.value)  # a death in here is the re-runs', and the parent must know it
    eager, reference = ctx.graded
    layer, start = Layer.TARGET, time.perf_counter()
    try:
        with _time_box(min(ATTRIBUTION_MAX_S, max(ATTRIBUTION_MIN_S, elapsed))):
            for candidate in below:
                backend = LAYER_BACKENDS[candidate]
                target = dataclasses.replace(ctx.target, name=f"dynamo-{backend}", backend=backend, options={})
                if _layer_failure(subject, target, eager, reference, ctx.failed_output) == _failure(draft):
                    layer = candidate
                    break
    except _OutOfTime:
        layer = Layer.UNKNOWN
    finally:
        torch._dynamo.reset()
    draft.update(failing_layer=layer.value, attribution_s=time.perf_counter() - start)
    if layer in LAYER_BACKENDS:
        draft["error"] = f"{draft['status']} on {LAYER_BACKENDS[layer]} too: {draft.get('error') or ''}"
        draft["status"] = Status.FAIL_UPSTREAM


def _failure(draft: Draft) -> tuple[Status, str]:
    """What "failing the same way" compares: the status, and for an error the exception's type (a
    layer raising something else, or a target that could not even be set up, is no match)."""
    status = draft["status"]
    return status, "" if status == Status.FAIL_ACCURACY else (draft.get("error") or "").split(":")[0].strip()


def _layer_failure(subject: Subject, target: Target, eager: Any, reference: Any,
                   failed_output: Any = None) -> tuple[Status, str]:
    """How ``subject`` ends compiled for ``target`` (a layer's backend), graded as the target was. An
    accuracy failure matches the target's only where the target's failing output agrees with the
    layer's (graded against it, without the float64 reference): the target computed what the layer
    handed it, so the difference is the layer's. Both differing from eager, each its own way, is no
    match (a failure of the target must not hide behind an unrelated one of a layer)."""
    ctx = Context(target, Draft(name=subject.name, target=target.name, status=None), lambda phase: None)
    torch._dynamo.reset()
    try:
        ctx.phase(Phase.COMPILE)
        compiled = _step(ctx, lambda: subject.compile(ctx), COMPILE)
        first = _step(ctx, compiled, FIRST_CALL)
        ctx.phase(Phase.RUN)
        second = _step(ctx, compiled) if subject.stateless else None
        ctx.phase(Phase.COMPARE)
        grade = _step(ctx, lambda: subject.grade(ctx, eager, first, reference))
        if grade.passed and second is not None:
            grade = _step(ctx, lambda: subject.grade(ctx, eager, second, reference))
        if grade.passed:
            return Status.PASS, ""
        # against the layer's output directly (no float64 reference: a ratio to a baseline that is
        # itself far from float64 forgives anything)
        if failed_output is not None and not _step(ctx, lambda: subject.grade(ctx, first, failed_output,
                                                                              None)).passed:
            return Status.FAIL_ACCURACY, "the target's output differs from this layer's too"
    except _Stop:
        return _failure(ctx.draft)
    return Status.FAIL_ACCURACY, ""


@contextlib.contextmanager
def _time_box(seconds: float) -> Iterator[None]:
    """Raise ``_OutOfTime`` in this thread after ``seconds`` (a timer signal: the main thread of a
    worker); elsewhere (a cluster's worker thread) the task's own deadline is the only bound."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        yield
        return

    def expire(signum: int, frame: Any) -> None:
        raise _OutOfTime

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _synchronize(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


@contextlib.contextmanager
def _simulation(target: Target, draft: Draft, on_phase: Callable[[str], None]) -> Iterator[Callable[[str], None]]:
    """``crucible-sim``: every interpreted kernel created inside runs checked, and the run phase's
    launches are counted (bytes moved, ideal bytes, roofline time) into the result; yields the phase
    callback to use. Other targets: ``on_phase`` as it is."""
    if not target.checked:
        yield on_phase
        return
    from simulator.session import checking

    with checking() as recorder:
        def phase(name: str) -> None:
            if name == Phase.RUN.value:  # the steady-state call's launches only
                recorder.reset()
            on_phase(name)

        try:
            yield phase
        finally:
            # the recorder's totals are named as the result fields that hold them (bytes_moved, ...)
            draft.update({k: v for k, v in recorder.summary().items() if k in FIELD_NAMES and v is not None})


def _expected(result: Result, expectation: Expectation | None) -> Result:
    """XFAIL when the subject failed as expected, XPASS when it was expected to fail and passed."""
    if expectation is None or not result.counts:
        return result
    note = f"{expectation.status}: {expectation.reason}"
    if result.status == expectation.status:
        return result.replace(status=Status.XFAIL, expected=note)
    if result.status.passed:
        return result.replace(status=Status.XPASS, expected=note)
    return result.replace(expected=note)  # failed otherwise than expected: a failure, and it says so

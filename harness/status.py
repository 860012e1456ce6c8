"""The status taxonomy of a harness result, and the phases a subject goes through.

Every output (the text report, the HTML report, JUnit, the pytest plugin, the exit status of
``crucible run``, ``diff``) reads what a status means from its member here: its ``kind`` (a pass,
a failure of the compiler under test, the model's own problem, expected, skipped), its colour and
its place in legends (definition order). A new status is added here and nowhere else.

Eager failures are never counted against the compiler: pass rates are over the results whose
eager run works (``counts``). A crash, hang or OOM is the model's own when it happened while
building or running it in eager (``Phase.eager_side``).
"""

from __future__ import annotations

from enum import Enum


class Kind(Enum):
    """What a status says about the compiler under test."""

    PASSED = "passed"
    FAILED = "failed"  # a failure of the compiler under test
    MODEL = "model"  # the model's own problem (eager fails or is nondeterministic): never counted
    UPSTREAM = "upstream"  # a layer below the compiler under test (Dynamo's capture, AOTAutograd): never counted
    EXPECTED = "expected"  # failed as an expected-results file or the entry says
    SKIPPED = "skipped"  # does not run here


class Status(str, Enum):
    """A result's status. A ``str`` enum: members compare equal to their value (``"pass"``)."""

    PASS = ("pass", Kind.PASSED, "#2e9d4a", "the compiled outputs agree with eager and float64")
    XPASS = ("xpass", Kind.PASSED, "#6fcf97", "expected to fail, and passed: improved (update the expected file)")
    FAIL_ACCURACY = ("fail_accuracy", Kind.FAILED, "#e8a33d", "the compiled outputs fail the parity oracle")
    FAIL_COMPILE = ("fail_compile", Kind.FAILED, "#d64541",
                    "Dynamo or the backend raised while compiling, or the target is unavailable")
    FAIL_RUN = ("fail_run", Kind.FAILED, "#a83279", "the compiled code raised while running")
    FAIL_MEMORY = ("fail_memory", Kind.FAILED, "#5b2c6f",
                   "the simulator found a memory-safety defect in a kernel (crucible-sim)")
    TIMEOUT = ("timeout", Kind.FAILED, "#7d5ba6", "the worker passed its deadline and was killed")
    CRASH = ("crash", Kind.FAILED, "#3b3b3b", "the worker died from a signal (segfault, abort, ...)")
    OOM = ("oom", Kind.FAILED, "#8c564b", "out of memory (allocation refused, or killed by the OOM killer)")
    FAIL_UPSTREAM = ("fail_upstream", Kind.UPSTREAM, "#b07aa1",
                     "it fails the same way on Dynamo's eager or aot_eager backend: the failure is in capture or "
                     "AOTAutograd, not the target (failing_layer says which)")
    EAGER_FAIL = ("eager_fail", Kind.MODEL, "#9fb3c8", "building or running the model in eager failed")
    EAGER_NONDETERMINISTIC = ("eager_nondeterministic", Kind.MODEL, "#c7d3e0", "two eager runs differ")
    XFAIL = ("xfail", Kind.EXPECTED, "#bcbd22",
             "failed as expected (the expected-results file, or the entry's ExpectedFailure)")
    SKIPPED = ("skipped", Kind.SKIPPED, "#dddddd", "does not run on this target, device or installation")

    def __new__(cls, value: str, kind: Kind, color: str, meaning: str) -> Status:
        member = str.__new__(cls, value)
        member._value_ = value
        member.kind, member.color, member.meaning = kind, color, meaning
        return member

    def __str__(self) -> str:
        return self.value

    __format__ = str.__format__

    @property
    def passed(self) -> bool:
        return self.kind is Kind.PASSED

    @property
    def failed(self) -> bool:
        """A failure of the target (before asking in which phase it happened: see ``counts``)."""
        return self.kind is Kind.FAILED


# Statuses whose meaning depends on the phase: in an eager-side phase they are the model's.
_WORKER_DEATHS = (Status.TIMEOUT, Status.CRASH, Status.OOM)


class Layer(str, Enum):
    """The layer of the stack a failure of the target is in (``harness.engine`` re-runs a failing
    subject on the Dynamo backends that stop after each layer below the target)."""

    CAPTURE = "capture"  # fails the same way on Dynamo's ``eager`` backend: TorchDynamo's capture
    AOT_AUTOGRAD = "aot_autograd"  # passes on ``eager``, fails the same way on ``aot_eager``
    TARGET = "target"  # every layer below passes (or fails otherwise): the target's own code
    UNKNOWN = "unknown"  # the re-runs passed their time box

    def __str__(self) -> str:
        return self.value

    __format__ = str.__format__


class Phase(str, Enum):
    """Where a subject was when its result was decided (in order of the engine's sequence)."""

    LOAD = "load"  # the worker looks the subject up (listing an entry's source)
    BUILD = "build"
    EAGER = "eager"
    REFERENCE = "reference"
    CAPTURE = "capture"
    COMPILE = "compile"  # compile and first call (inference)
    FORWARD = "forward"  # train mode: compile and the first forward
    BACKWARD = "backward"  # train mode: the first backward (compiles the backward graph)
    RUN = "run"  # the second call
    COMPARE = "compare"
    CHECKS = "checks"
    ATTRIBUTE = "attribute"  # a failure re-run on the layers below the target (harness.engine)
    LOCALIZE = "localize"  # the fuzzer's localization task
    HARNESS = "harness"  # the harness itself failed on this subject

    def __str__(self) -> str:
        return self.value

    __format__ = str.__format__

    @property
    def eager_side(self) -> bool:
        """Phases that run only the model itself: a crash, hang or OOM there is the model's fault."""
        return self in (Phase.LOAD, Phase.BUILD, Phase.EAGER, Phase.REFERENCE)


def counts(status: Status | str, phase: Phase | str | None) -> bool:
    """True when the result counts in pass rates: its eager run worked, it ran here, and the layers
    below the target handed it a graph they run correctly themselves."""
    status = Status(status)
    if status.kind in (Kind.MODEL, Kind.SKIPPED, Kind.UPSTREAM):
        return False
    return not (status in _WORKER_DEATHS and phase is not None and _phase(phase).eager_side)


def against_compiler(status: Status | str, phase: Phase | str | None) -> bool:
    """True when the result is a failure of the compiler under test (what fails a CI run)."""
    return Status(status).failed and counts(status, phase)


def _phase(phase: Phase | str) -> Phase:
    try:
        return Phase(phase)
    except ValueError:  # a phase written by a newer harness: not one of the model's
        return Phase.HARNESS


def status_of(value: str) -> Status:
    """``Status(value)`` with a clear error naming the value (stores and JSON exports hold strings)."""
    try:
        return Status(value)
    except ValueError:
        raise ValueError(f"unknown result status {value!r}; known: "
                         f"{', '.join(s.value for s in Status)}") from None

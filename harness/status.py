"""The status taxonomy of a harness result.

Eager failures are never counted against the compiler: pass rates are over the
entries whose eager run works (see ``eager_ok``).
"""

from __future__ import annotations


class Status:
    PASS = "pass"
    FAIL_ACCURACY = "fail_accuracy"
    FAIL_COMPILE = "fail_compile"
    FAIL_RUN = "fail_run"
    FAIL_MEMORY = "fail_memory"  # the simulator found a memory-safety defect in a kernel (crucible-sim)
    TIMEOUT = "timeout"
    CRASH = "crash"  # the worker died from a signal (segfault, abort, ...)
    OOM = "oom"
    EAGER_FAIL = "eager_fail"  # building or running the model in eager failed
    EAGER_NONDETERMINISTIC = "eager_nondeterministic"  # two eager runs differ
    XFAIL = "xfail"  # failed exactly as the entry's ExpectedFailure says
    SKIPPED = "skipped"  # the entry does not run on the target's device or in this installation


COMPILER_STATUSES = (Status.PASS, Status.FAIL_ACCURACY, Status.FAIL_COMPILE, Status.FAIL_RUN,
                     Status.FAIL_MEMORY, Status.TIMEOUT, Status.CRASH, Status.OOM)
EAGER_STATUSES = (Status.EAGER_FAIL, Status.EAGER_NONDETERMINISTIC)
ALL_STATUSES = COMPILER_STATUSES + EAGER_STATUSES + (Status.XFAIL, Status.SKIPPED)

# Phases in which a crash, hang or OOM is the model's fault, not the compiler's.
EAGER_PHASES = ("build", "eager", "reference")


def eager_ok(status: str, phase: str | None) -> bool:
    """True when the entry's eager run worked, i.e. the entry counts in pass rates."""
    if status in EAGER_STATUSES or status == Status.SKIPPED:
        return False
    return not (status in (Status.TIMEOUT, Status.CRASH, Status.OOM) and phase in EAGER_PHASES)

"""What an exception means for a result: the one classifier every subject's phases go through
(``classify``), the one-line message and traceback a result keeps (``describe_error``), and where
it was raised (``raised_at``, ``failed_pass``)."""

from __future__ import annotations

import re
import traceback
from pathlib import Path

from corpus.entry import EntryUnavailable
from harness.status import Phase, Status
from harness.targets import TargetUnavailable


def _innermost(exc: BaseException) -> BaseException:
    """The root error: Dynamo wraps a backend's exception (BackendCompilerFailed.inner_exception)."""
    seen = set()
    while id(exc) not in seen:
        seen.add(id(exc))
        inner = getattr(exc, "inner_exception", None) or exc.__cause__
        if not isinstance(inner, BaseException):
            break
        exc = inner
    return exc


def describe_error(exc: BaseException) -> tuple[str, str]:
    """(one-line message, traceback tail) for a result record."""
    inner = _innermost(exc)
    first = (str(inner).strip().splitlines() or [""])[0]
    line = f"{type(inner).__name__}: {first}"[:500]
    detail = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return line, detail[-4000:]


_CHAIN = re.compile(r"^(The above exception was the direct cause of the following exception:|"
                    r"During handling of the above exception, another exception occurred:)$", re.MULTILINE)
_PROJECT = f"{Path(__file__).resolve().parents[1]}/"
_FRAME = re.compile(r'^  File "([^"]+)", line (\d+), in (.+)$', re.MULTILINE)


def _short_path(path: str) -> str:
    # the project's files from the project root, installed packages from site-packages
    if path.startswith(_PROJECT):
        return path[len(_PROJECT):]
    return path.rsplit("/site-packages/", 1)[-1]


def raised_at(detail: str | None) -> str | None:
    """``path:line in function`` of the frame that raised the root error of a formatted traceback
    (``describe_error``'s detail): the last frame of the first exception printed, the one a chain
    of ``raise ... from`` starts with; None where the text holds no frame (a worker's log tail)."""
    for block in _CHAIN.split(detail or "")[::2]:
        frames = _FRAME.findall(block)
        if frames:
            path, line, function = frames[-1]
            return f"{_short_path(path)}:{line} in {function.strip()}"
    return None


def is_oom(exc: BaseException) -> bool:
    inner = _innermost(exc)
    if isinstance(inner, MemoryError) or type(inner).__name__ == "OutOfMemoryError":
        return True
    return bool(re.search(r"out of memory|can't allocate memory|std::bad_alloc", str(inner), re.IGNORECASE))


# Errors a backend raises while compiling a graph outside Dynamo's frame compilation: AOTAutograd
# compiles a backward graph lazily, at the first backward call, so those errors are not wrapped in
# Dynamo's BackendCompilerFailed.
# Triton's CompilationError: a kernel that does not build at its first launch (the compile was lazy).
_BACKEND_COMPILE_ERRORS = ("CompilerError", "InductorError", "LoweringException", "CompilationError")


def is_compile_error(exc: BaseException) -> bool:
    """Errors raised by Dynamo or by a backend while compiling (vs. running compiled code)."""
    from torch._dynamo.exc import TorchDynamoException

    if isinstance(exc, (TorchDynamoException, TargetUnavailable)):
        return True
    seen = set()
    while isinstance(exc, BaseException) and id(exc) not in seen:
        seen.add(id(exc))
        if type(exc).__name__ in _BACKEND_COMPILE_ERRORS:
            return True
        exc = getattr(exc, "inner_exception", None) or exc.__cause__
    return False


class SubjectSkipped(Exception):
    """A subject that does not run here (an entry whose optional package is missing, a train-mode run
    of a model without gradients): the result is ``skipped`` with this message, not a failure."""


class SubjectFailed(Exception):
    """A subject's step that decided the status itself (a later batch size of a ``--dynamic`` entry
    failed with an error): the result takes ``status``, this message and ``detail``."""

    def __init__(self, status: Status, message: str, detail: str | None = None) -> None:
        super().__init__(message)
        self.status, self.detail = status, detail


# Phases in which an exception means the subject itself (its model, its inputs) does not run.
_SUBJECT_PHASES = (Phase.LOAD, Phase.BUILD, Phase.EAGER)


# What a step of the engine is doing when it raises (``classify``'s ``step``).
COMPILE, FIRST_CALL, CALL = "compile", "first_call", "call"


def classify(exc: BaseException, phase: Phase | str, step: str = CALL) -> Status:
    """The status an exception raised in ``phase`` gives a result: the one classifier of the engine.

    ``step``: ``COMPILE`` when the compile step itself raised (nothing has run yet: ``fail_compile``,
    whatever the exception); ``FIRST_CALL`` when the first compiled call raised, where an error of
    Dynamo or a backend compiling lazily is ``fail_compile`` and anything else ``fail_run`` (AOTAutograd
    compiles a backward graph at the first backward: those errors arrive while running); ``CALL``
    otherwise."""
    if isinstance(exc, SubjectFailed):
        return exc.status
    if _is_skip(exc):
        return Status.SKIPPED
    if is_oom(exc):
        return Status.OOM
    if Phase(phase) in _SUBJECT_PHASES:
        return Status.EAGER_FAIL
    if is_memory_error(exc):
        return Status.FAIL_MEMORY
    if step == COMPILE or (step == FIRST_CALL and is_compile_error(exc)):
        return Status.FAIL_COMPILE
    return Status.FAIL_RUN


def _is_skip(exc: BaseException) -> bool:
    return isinstance(exc, (SubjectSkipped, EntryUnavailable))


def is_memory_error(exc: BaseException) -> bool:
    """True when ``exc`` or an exception it wraps is a simulator finding (its kernel's memory-safety
    defect), recognized by name: the simulator is a layer below, its checks reach here as exceptions."""
    return any(type(e).__name__ in ("SimulatorMemoryError", "SimulatorLivenessError") for e in _chain(exc))


def failed_pass(exc: BaseException) -> str | None:
    """The compiler pass that raised (Crucible's ``CompilerError.pass_name``), anywhere in the chain."""
    for e in _chain(exc):
        name = getattr(e, "pass_name", None)
        if type(e).__name__ == "CompilerError" and isinstance(name, str):
            return name
    return None


def _chain(exc: BaseException | None) -> list[BaseException]:
    """``exc`` and every exception it wraps (Dynamo's inner_exception, causes and contexts), once each."""
    seen: set[int] = set()
    out: list[BaseException] = []
    stack = [exc]
    while stack:
        e = stack.pop()
        if not isinstance(e, BaseException) or id(e) in seen:
            continue
        seen.add(id(e))
        out.append(e)
        stack += [getattr(e, "inner_exception", None), e.__cause__, e.__context__]
    return out

"""What an exception means for a result record: its one-line message, whether it is an OOM, whether
it was raised while compiling (``fail_compile``) rather than while running compiled code."""

from __future__ import annotations

import re
import traceback

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


def is_oom(exc: BaseException) -> bool:
    inner = _innermost(exc)
    if isinstance(inner, MemoryError) or type(inner).__name__ == "OutOfMemoryError":
        return True
    return bool(re.search(r"out of memory|can't allocate memory|std::bad_alloc", str(inner), re.IGNORECASE))


# Errors a backend raises while compiling a graph outside Dynamo's frame compilation: AOTAutograd
# compiles a backward graph lazily, at the first backward call, so those errors are not wrapped in
# Dynamo's BackendCompilerFailed.
_BACKEND_COMPILE_ERRORS = ("CompilerError", "InductorError", "LoweringException")


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

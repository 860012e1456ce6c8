"""What an exception means for a result record: its one-line message, whether it is an OOM, whether
it was raised while compiling (``fail_compile``) rather than while running compiled code."""

from __future__ import annotations

import re
import traceback
from pathlib import Path

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

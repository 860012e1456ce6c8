"""Hooks through which a checker (the simulator) wraps the kernels run in Triton's interpreter.

The compiler runs ordinary CPU Triton kernels in the interpreter (``compiler.interpreter``); a
layer above it may check those runs without the compiler importing it. It installs a
``KernelChecks``:

* ``launch``: called on each interpreted kernel the runtime creates; returns what the runtime
  launches as ``kernel[grid](*args, **meta)`` instead;
* ``allocation``: called by the generated wrapper on each CPU buffer it allocates or reuses
  (returns the buffer), e.g. to mark its bytes unwritten.

Two ways in. ``installed(checks)`` installs them for a block (``simulator.session.checking()``
does): kernels *created* inside are checked, wherever they run later. ``CRUCIBLE_SIM_CHECK=1``
(``compiler.config.simulator_checks``) asks for the checks registered under the entry-point group
``crucible.kernel_checks`` (the simulator registers ``simulator.hooks:kernel_checks`` in
pyproject.toml), so a plain ``torch.compile(model, backend="crucible")`` user gets them without
importing the simulator. Entry points come from installed package metadata: an uninstalled
checkout (``python -m harness`` from the source tree) has none, and the variable is then an error
that says so (``registered``), reported before a harness run by ``config.environment_problems``.

This module imports nothing else of the compiler.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

ENTRY_POINT_GROUP = "crucible.kernel_checks"


@dataclass(frozen=True)
class KernelChecks:
    name: str  # who checks (messages name it)
    launch: Callable[[Any], Any]  # interpreted kernel -> what is launched as ``kernel[grid](*args, **meta)``
    allocation: Callable[[Any], Any] | None = None  # each CPU buffer the wrapper allocates or reuses


class NoKernelChecks(RuntimeError):
    """``CRUCIBLE_SIM_CHECK`` is set but no checker can be found."""


# The checks of the ``installed`` blocks now open, innermost last. One list for the process, not a
# context variable: launchers are created on the compile threads (``runtime.parallel_map``), which
# would not see a block entered on the compiling thread.
_INSTALLED: list[KernelChecks] = []
_INSTALLED_LOCK = threading.Lock()


@contextmanager
def installed(checks: KernelChecks) -> Iterator[KernelChecks]:
    """``checks`` apply to the interpreted kernels and wrappers created inside the block."""
    with _INSTALLED_LOCK:
        _INSTALLED.append(checks)
    try:
        yield checks
    finally:
        with _INSTALLED_LOCK:
            # the last entry that is this object: blocks may close out of order (the harness keeps
            # one open across an entry's phases)
            del _INSTALLED[max(i for i, c in enumerate(_INSTALLED) if c is checks)]


def innermost() -> KernelChecks | None:
    """The checks of the innermost ``installed`` block open now, if any."""
    with _INSTALLED_LOCK:
        return _INSTALLED[-1] if _INSTALLED else None


@functools.cache
def registered() -> KernelChecks:
    """The checks registered under ``ENTRY_POINT_GROUP`` (loaded once per process); raises
    ``NoKernelChecks`` when none (or several different ones) are registered or one fails to load."""
    from importlib.metadata import distributions

    # every distribution's, not ``entry_points(group=...)``'s: that one keeps the first copy of each
    # package on sys.path, and a stale crucible.egg-info in the source tree (the working directory of
    # ``python -m harness``) then hides the installed metadata; a package seen twice counts once
    found = {ep.value: ep for dist in distributions() for ep in dist.entry_points if ep.group == ENTRY_POINT_GROUP}
    if not found:
        raise NoKernelChecks(
            f"CRUCIBLE_SIM_CHECK=1 asks for checked Triton kernels, but no kernel checker is registered "
            f"(entry-point group {ENTRY_POINT_GROUP!r}; the simulator registers itself when the package is "
            f"installed: pip install -e . in the source tree). Without installing, run the code inside "
            f"simulator.session.checking() or use the crucible-sim target; or unset CRUCIBLE_SIM_CHECK")
    if len(found) > 1:
        raise NoKernelChecks(f"CRUCIBLE_SIM_CHECK=1: several kernel checkers are registered in "
                             f"{ENTRY_POINT_GROUP!r} ({', '.join(sorted(found))}); uninstall all but one")
    (entry,) = found.values()
    try:
        checks = entry.load()()
    except Exception as error:
        raise NoKernelChecks(f"CRUCIBLE_SIM_CHECK=1: the kernel checker {entry.value} (entry point "
                             f"{entry.name!r} in {ENTRY_POINT_GROUP!r}) failed to load: "
                             f"{type(error).__name__}: {error}") from error
    if not isinstance(checks, KernelChecks):
        raise NoKernelChecks(f"CRUCIBLE_SIM_CHECK=1: {entry.value} returned {type(checks).__name__}, "
                             f"not compiler.kernel_checks.KernelChecks")
    return checks

"""Running generated Triton kernels in Triton's interpreter, on CPU tensors.

Triton picks interpreted vs compiled kernels when ``triton.jit`` runs (from the
``TRITON_INTERPRET`` environment variable). Crucible does not rely on that: it
wraps the plain Python function of a generated kernel in Triton's
``InterpretedFunction`` itself. Interpreted and compiled kernels therefore
coexist in one process: CUDA tensors get compiled kernels, CPU tensors get
interpreted ones, with no environment variable. This works because generated
kernels call only Triton builtins and ``tl.reduce`` with the standard combine
functions (which the interpreter recognizes); ``@triton.jit`` library helpers
such as ``tl.sum`` would fail here, since they were created in compiled mode.

This module is the one entry point through which the runtime creates interpreted kernels and
the wrapper allocates their buffers; checks (the simulator's) come in through the hooks of
``compiler.kernel_checks``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from compiler import config, kernel_checks
from compiler.kernel_checks import KernelChecks


def interpreted_function(kernel: Any) -> Any:
    """Triton's interpreter-mode function for a kernel made by ``triton.jit`` (or its Python function)."""
    from triton.runtime.interpreter import InterpretedFunction

    if isinstance(kernel, InterpretedFunction):
        return kernel
    return InterpretedFunction(getattr(kernel, "fn", kernel))


def active_checks() -> KernelChecks | None:
    """The checks that apply to kernels created now: the innermost installed ones, else with
    ``CRUCIBLE_SIM_CHECK=1`` the registered ones (``kernel_checks.registered``), else none."""
    checks = kernel_checks.innermost()
    if checks is None and config.simulator_checks():
        checks = kernel_checks.registered()
    return checks


def interpreted(kernel: Any) -> Any:
    """What the runtime launches for ``kernel`` on CPU tensors: its interpreted function, through the
    active checks' launch hook when there are any."""
    fn = interpreted_function(kernel)
    checks = active_checks()
    return fn if checks is None else checks.launch(fn)


def allocation_hook(device: Any) -> Callable[[Any], Any] | None:
    """What the wrapper calls on each buffer it allocates or reuses: None unless checks are active
    and kernels run on the CPU (in the interpreter)."""
    if str(device).split(":")[0] != "cpu":
        return None
    checks = active_checks()
    return None if checks is None else checks.allocation

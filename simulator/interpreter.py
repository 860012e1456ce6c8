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

This module is the one entry point through which interpreted kernels run. When
checks are on (``CRUCIBLE_SIM_CHECK=1``, or inside ``simulator.session.checking()``,
which the ``crucible-sim`` target uses) a kernel gets a ``CheckedKernel`` instead:
every launch goes through ``simulator.launch.check_launch``.
"""

from __future__ import annotations

from typing import Any


class CheckedKernel:
    """``kernel[grid](*args, **meta)`` as a checked launch (same call shape as a Triton kernel)."""

    def __init__(self, fn: Any) -> None:
        self.fn = fn

    def __getitem__(self, grid: Any) -> Any:
        def launch(*args: Any, **meta: Any) -> None:
            from simulator import session
            from simulator.launch import check_launch

            check_launch(self.fn, grid, args, meta, shuffle=session.current_shuffle())

        return launch

    @property
    def __name__(self) -> str:
        return self.fn.__name__


def checks_enabled() -> bool:
    from compiler import config
    from simulator import session

    return session.forced() or config.simulator_checks()


def allocation_hook(device: Any) -> Any:
    """What the compiler's wrapper calls on each buffer it allocates or reuses: None unless checks are on
    and kernels run on the CPU (in the interpreter)."""
    if str(device).split(":")[0] != "cpu" or not checks_enabled():
        return None
    from simulator.memory import mark_uninitialized

    return mark_uninitialized


def interpreted(kernel: Any) -> Any:
    """An interpreter-mode launcher for a kernel made by ``triton.jit`` (checked when checks are on)."""
    from triton.runtime.interpreter import InterpretedFunction

    if isinstance(kernel, (InterpretedFunction, CheckedKernel)):
        return kernel
    fn = InterpretedFunction(getattr(kernel, "fn", kernel))
    return CheckedKernel(fn) if checks_enabled() else fn

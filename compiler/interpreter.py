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

import contextlib
import dataclasses
import functools
from collections.abc import Callable, Iterator
from typing import Any

import torch

from compiler import config, kernel_checks
from compiler.kernel_checks import KernelChecks


@functools.cache
def _scalar_index_of_one_element_blocks() -> None:
    """Triton 3.6's interpreter turns a scalar into an int with ``int()`` of its one-element array,
    which newer NumPy refuses: ``range(0, s1, RBLOCK)``, the loop of a reduction over a row of
    symbolic length, raised TypeError there (triton 3.6 on the GPU host; 3.8 squeezes first). Each
    launch patches ``triton.language`` and restores it afterwards in reverse order; this adds one more
    attribute to the same scope, so it is restored with the rest. Installed once per process."""
    import triton.language as tl
    from triton.runtime import interpreter

    patch_lang = interpreter._patch_lang

    def patched(fn: Any) -> Any:
        scope = patch_lang(fn)
        if hasattr(scope, "set_attr"):
            scope.set_attr(tl.core.tensor, "__index__", lambda self: int(self.handle.data.reshape(-1)[0]))
        return scope

    interpreter._patch_lang = patched


def interpreted_function(kernel: Any) -> Any:
    """Triton's interpreter-mode function for a kernel made by ``triton.jit`` (or its Python function)."""
    from triton.runtime.interpreter import InterpretedFunction

    _scalar_index_of_one_element_blocks()

    if isinstance(kernel, InterpretedFunction):
        return kernel
    return InterpretedFunction(getattr(kernel, "fn", kernel))


@contextlib.contextmanager
def without_dead_overflow_checks() -> Iterator[None]:
    """Launches inside run without the interpreter's integer-overflow sanitizer while Triton's
    ``debug`` option is off.

    With ``sanitize_overflow`` on (the interpreter's default) every int32 add, sub and mul is done
    again in int64 and compared with both int32 bounds, and the result goes to ``device_assert``,
    which does nothing unless ``debug`` is on: five dead numpy ops per index op. A compiled kernel
    drops that code as dead; the interpreter runs it. Turning it off changes no result and made the
    four slowest interpreted kernels of torchvision googlenet 1.6-1.8x faster (a loaded 2-core CPU).
    The builder's options are global to Triton's interpreter, so they are restored on exit."""
    from triton.runtime.interpreter import interpreter_builder

    options = interpreter_builder.options
    if getattr(options, "debug", False) or not getattr(options, "sanitize_overflow", False):
        yield
        return
    interpreter_builder.options = dataclasses.replace(options, sanitize_overflow=False)
    try:
        yield
    finally:
        interpreter_builder.options = options


@functools.cache
def _lean_class() -> type:
    from triton.runtime.interpreter import InterpretedFunction

    class LeanInterpretedFunction(InterpretedFunction):
        """An ``InterpretedFunction`` whose launches skip the dead overflow checks
        (``without_dead_overflow_checks``)."""

        def run(self, *args: Any, grid: Any, warmup: bool, **kwargs: Any) -> Any:
            with without_dead_overflow_checks():
                return super().run(*args, grid=grid, warmup=warmup, **kwargs)

    return LeanInterpretedFunction


def lean_interpreted_function(kernel: Any) -> Any:
    """``interpreted_function`` whose launches skip the interpreter's dead overflow checks."""
    _scalar_index_of_one_element_blocks()
    cls = _lean_class()
    return kernel if isinstance(kernel, cls) else cls(getattr(kernel, "fn", kernel))


def on_one_aten_thread(call: Callable[[list], Any]) -> Callable[[list], Any]:
    """``call`` (a compiled graph with interpreted kernels) run with one intra-op thread, restored after.

    Its ATen calls (convolutions, matmuls: the externs) are small next to the interpreted kernels
    between them, which run on one thread in numpy for tens of milliseconds each; meanwhile ATen's
    OpenMP workers go to sleep, and waking them for the next extern costs a scheduler wake-up per
    call, long on a busy machine. timm inception_next_atto's second call on a loaded 2-core CPU: its
    64 convolutions took 3.3-4.9 s on 2 threads and 0.03-0.06 s on one (crucible-cpp's, whose kernels
    are short, 0.1-3.3 s on 2 threads). The thread count is process-wide: another Python thread running
    torch meanwhile runs on one thread too."""

    def run(args: list) -> Any:
        threads = torch.get_num_threads()
        if threads == 1:
            return call(args)
        torch.set_num_threads(1)
        try:
            return call(args)
        finally:
            torch.set_num_threads(threads)

    return run


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
    checks = active_checks()
    if checks is None:
        return lean_interpreted_function(kernel)
    return checks.launch(interpreted_function(kernel))


def allocation_hook(device: Any) -> Callable[[Any], Any] | None:
    """What the wrapper calls on each buffer it allocates or reuses: None unless checks are active
    and kernels run on the CPU (in the interpreter)."""
    if str(device).split(":")[0] != "cpu":
        return None
    checks = active_checks()
    return None if checks is None else checks.allocation

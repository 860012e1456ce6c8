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

This module is the one entry point through which interpreted kernels run, so
future checks (bounds of every load/store, poisoned masked lanes, bytes moved)
have a single place to hook in.
"""

from __future__ import annotations

from typing import Any


def interpreted(kernel: Any) -> Any:
    """An interpreter-mode launcher for a kernel made by ``triton.jit``."""
    from triton.runtime.interpreter import InterpretedFunction

    if isinstance(kernel, InterpretedFunction):
        return kernel
    fn = getattr(kernel, "fn", kernel)
    return InterpretedFunction(fn)

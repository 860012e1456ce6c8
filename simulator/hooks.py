"""The simulator's checks, as the compiler's kernel-check hooks (``compiler.kernel_checks``).

An interpreted kernel the compiler creates while checks are on becomes a ``CheckedKernel``: every
launch goes through ``simulator.launch.check_launch``; every CPU buffer the generated wrapper
allocates or reuses counts as unwritten (``simulator.memory.mark_uninitialized``), so a kernel
reading it before any write is reported. ``simulator.session.checking()`` installs these hooks for
a block; ``kernel_checks`` is also the entry point (``crucible.kernel_checks`` in pyproject.toml)
the compiler loads for ``CRUCIBLE_SIM_CHECK=1``, without importing the simulator itself.
"""

from __future__ import annotations

from typing import Any

from compiler.kernel_checks import KernelChecks
from simulator.launch import SHUFFLE_CHOICES, check_launch
from simulator.memory import mark_uninitialized


class CheckedKernel:
    """``kernel[grid](*args, **meta)`` as a checked launch (same call shape as a Triton kernel)."""

    def __init__(self, fn: Any, shuffle: str = "atomics") -> None:
        self.fn = fn
        self.shuffle = shuffle  # the order policy of the block that created it (simulator.launch)

    def __getitem__(self, grid: Any) -> Any:
        def launch(*args: Any, **meta: Any) -> None:
            check_launch(self.fn, grid, args, meta, shuffle=self.shuffle)

        return launch

    @property
    def __name__(self) -> str:
        return self.fn.__name__


def kernel_checks(shuffle: str = "atomics") -> KernelChecks:
    """The simulator's hooks; ``shuffle``: when a launch is rerun in shuffled program order."""
    if shuffle not in SHUFFLE_CHOICES:
        raise ValueError(f"shuffle={shuffle!r}: choose one of {', '.join(SHUFFLE_CHOICES)}")
    return KernelChecks("simulator", lambda fn: CheckedKernel(fn, shuffle), mark_uninitialized)

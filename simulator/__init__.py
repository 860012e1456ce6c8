"""A CPU stand-in for the GPU: Triton kernels in Triton's interpreter, with checks.

``simulator.run(kernel, grid, *args, **meta)`` runs a ``@triton.jit`` kernel on CPU tensors
and checks every load and store against the argument its pointer derives from, poisons
masked-off lanes of loads without ``other``, reports reads of uninitialized bytes (see
``simulator.empty``), races between program ids and programs that never finish; it returns
the launch's byte/FLOP accounting with a roofline estimate (``simulator.accounting.GPUS``).
Findings raise ``SimulatorMemoryError``. The compiler's generated kernels run checked when
``CRUCIBLE_SIM_CHECK=1`` or inside ``simulator.session.checking()`` (target ``crucible-sim``).
"""

from __future__ import annotations

from typing import Any

from simulator.accounting import GPUS, LaunchAccounting, gpu_spec
from simulator.findings import ALL_KINDS, Finding, Kind, SimulatorLivenessError, SimulatorMemoryError
from simulator.launch import LaunchReport, check_launch
from simulator.memory import empty, empty_like, mark_uninitialized


def run(kernel: Any, grid: Any, *args: Any, **meta: Any) -> LaunchReport:
    """``kernel[grid](*args, **meta)`` checked; raises SimulatorMemoryError on findings."""
    return check_launch(kernel, grid, args, meta)


__all__ = [
    "ALL_KINDS",
    "GPUS",
    "Finding",
    "Kind",
    "LaunchAccounting",
    "LaunchReport",
    "SimulatorLivenessError",
    "SimulatorMemoryError",
    "check_launch",
    "empty",
    "empty_like",
    "gpu_spec",
    "mark_uninitialized",
    "run",
]

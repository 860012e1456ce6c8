"""Checked execution for a stretch of code, and what its launches added up to.

``with checking() as rec:`` turns checks on for every interpreted kernel *created* inside
(the compiler creates its launchers when it compiles a graph; ``compiler.kernel_checks``) and
collects every checked launch's report: totals of bytes and estimated GPU time, kernels with
findings, and the kernels whose traffic most exceeds their ideal bytes. The harness's ``crucible-sim``
target runs each entry inside one.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from compiler import kernel_checks
from simulator import hooks, launch


@dataclass
class Recorder:
    reports: list[Any] = field(default_factory=list)

    def __call__(self, report: Any) -> None:
        self.reports.append(report)

    def reset(self) -> None:
        self.reports.clear()

    def summary(self, gpu: str = "H200") -> dict[str, Any]:
        """Totals for a result record: bytes moved, ideal bytes, estimated time, worst traffic ratio."""
        accts = [r.accounting for r in self.reports if r.accounting is not None]
        worst = max(accts, key=lambda a: a.traffic_ratio, default=None)
        return {
            "launches": len(self.reports),
            "bytes_moved": sum(a.moved_bytes for a in accts),
            "ideal_bytes": sum(a.ideal_bytes for a in accts),
            "est_h200_s": sum(a.estimate_s(gpu) for a in accts),
            "traffic_ratio": worst.traffic_ratio if worst else None,
            "traffic_kernel": worst.kernel if worst else None,
            "memory_kernels": ", ".join(sorted({r.kernel for r in self.reports if r.findings})) or None,
        }


@contextmanager
def checking(shuffle: str = "atomics") -> Iterator[Recorder]:
    """The simulator's hooks installed in the compiler for the block (``simulator.hooks``); every
    checked launch meanwhile is recorded. ``shuffle``: the order policy of the kernels created inside."""
    checks = hooks.kernel_checks(shuffle)
    recorder = Recorder()
    launch.OBSERVERS.append(recorder)
    try:
        with kernel_checks.installed(checks):
            yield recorder
    finally:
        launch.OBSERVERS.remove(recorder)


# Targets whose Triton kernels run checked (harness.targets names them).
CHECKED_TARGETS = ("crucible-sim",)


class EntrySimulation:
    """Checked execution around one harness entry: counts the launches of its ``run`` phase (the
    second, steady-state call) and hands the result record its fields."""

    def __init__(self, on_phase: Any) -> None:
        self._context = checking()
        self.recorder = self._context.__enter__()
        self._on_phase = on_phase

    def phase(self, name: str) -> None:
        if name == "run":
            self.recorder.reset()
        self._on_phase(name)

    def close(self, result: dict) -> None:
        self._context.__exit__(None, None, None)
        summary = self.recorder.summary()
        result.update({k: summary[k] for k in ("bytes_moved", "ideal_bytes", "est_h200_s", "traffic_ratio",
                                               "traffic_kernel", "memory_kernels") if summary[k] is not None})


def for_entry(target_name: str, on_phase: Any) -> EntrySimulation | None:
    # a target's options (``crucible-sim:extern=none``) do not change whether its kernels are checked
    return EntrySimulation(on_phase) if target_name.partition(":")[0] in CHECKED_TARGETS else None


def is_memory_error(exc: BaseException) -> bool:
    """True when ``exc`` or an exception it wraps is a simulator finding."""
    from simulator.findings import SimulatorMemoryError

    seen = set()
    stack = [exc]
    while stack:
        e = stack.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, SimulatorMemoryError):
            return True
        stack += [getattr(e, "inner_exception", None), e.__cause__, e.__context__]
    return False

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

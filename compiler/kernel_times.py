"""Per-kernel time (``CRUCIBLE_KERNEL_TIMES=1``): every generated kernel's launches and every extern
call timed, printed as one table per compiled graph when the process exits, and readable with
``kernel_times()``.

A graph's first call is not timed (it builds and tunes its kernels). On the GPU a launch is timed
with a pair of CUDA events around it (device time, not host time; launches inside a CUDA graph
capture are not timed); on the CPU a launch is synchronous and is timed with the wall clock. The
whole graph's calls are timed the same way, so the share outside kernels and extern calls (layout
copies, allocation, host gaps) is the difference. While timing, the wrapper calls extern ops through
their OpOverloads (``fast_externs=False``), where the timer can reach them.
"""

from __future__ import annotations

import atexit
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from compiler.report import GraphReport


@dataclass
class KernelTime:
    graph_id: int
    kernel: str  # the kernel's function name (what profilers show)
    ops: tuple[str, ...]
    calls: int = 0
    seconds: float = 0.0

    @property
    def mean_us(self) -> float:
        return self.seconds / self.calls * 1e6 if self.calls else 0.0


@dataclass
class _Timer:
    """Timed intervals of one thing: CUDA event pairs resolved lazily (no sync per launch)."""

    cuda: bool
    seconds: float = 0.0
    calls: int = 0
    pending: list[tuple[Any, Any]] = field(default_factory=list)

    def time(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)``, timed."""
        if self.cuda:
            if torch.cuda.is_current_stream_capturing():
                return fn(*args)
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            out = fn(*args)
            end.record()
            self.pending.append((start, end))
            self.calls += 1
            return out
        begin = time.perf_counter()
        out = fn(*args)
        self.seconds += time.perf_counter() - begin
        self.calls += 1
        return out

    def resolve(self) -> None:
        if self.pending:
            torch.cuda.synchronize()
            self.seconds += sum(s.elapsed_time(e) for s, e in self.pending) / 1e3
            self.pending.clear()


_TABLES: list[tuple[GraphReport, _Timer, dict[str, tuple[str, tuple[str, ...], _Timer]]]] = []


class _Armed:
    """Set after a graph's first call: that call builds and tunes kernels (on the GPU each launch
    config is timed inside a kernel's first launch), which is compile time, not kernel time."""

    on = False


class _TimedLaunch:
    def __init__(self, launch: Callable[..., None], timer: _Timer, armed: _Armed) -> None:
        self.launch = launch
        self.timer = timer
        self.armed = armed

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.armed.on:
            return self.timer.time(lambda: self.launch(*args, **kwargs))
        return self.launch(*args, **kwargs)


def instrument(call: Callable[[list], Any], launchers: dict[str, Any], consts: list[Any], report: GraphReport,
               device: torch.device) -> Callable[[list], Any]:
    """Time every launcher in ``launchers`` and every extern op in ``consts`` (the wrapper's own dict
    and list, replaced in place) and the graph call; returns the timed call."""
    cuda = device.type == "cuda"
    symbols = {k.name: (k.symbol, k.ops) for k in report.kernels} if report.kernels else {}
    kernels: dict[str, tuple[str, tuple[str, ...], _Timer]] = {}
    armed = _Armed()
    for name, launcher in list(launchers.items()):
        timer = _Timer(cuda)
        symbol, ops = symbols.get(name, (name, ()))
        kernels[name] = (symbol, ops, timer)
        launchers[name] = _TimedLaunch(launcher, timer, armed)
    for i, value in enumerate(consts):
        if isinstance(value, torch._ops.OpOverload):
            timer = _Timer(cuda)
            kernels[f"extern{i}"] = (str(value), ("extern",), timer)
            consts[i] = _TimedLaunch(value, timer, armed)
    whole = _Timer(cuda)
    if not _TABLES:
        atexit.register(print_kernel_times)
    _TABLES.append((report, whole, kernels))

    def timed(args: list) -> Any:
        if armed.on:
            return whole.time(call, args)
        out = call(args)
        armed.on = True
        return out

    return timed


def kernel_times() -> list[tuple[GraphReport, float, int, list[KernelTime]]]:
    """Per instrumented graph: its report, its seconds and calls, and its kernels slowest first."""
    out = []
    for report, whole, kernels in _TABLES:
        whole.resolve()
        rows = []
        for symbol, ops, timer in kernels.values():
            timer.resolve()
            rows.append(KernelTime(report.graph_id, symbol, ops, timer.calls, timer.seconds))
        out.append((report, whole.seconds, whole.calls, sorted(rows, key=lambda r: -r.seconds)))
    return out


def restart() -> None:
    """Zero every instrumented graph's figures (a benchmark times from here)."""
    for _, whole, kernels in _TABLES:
        for timer in (whole, *(t for _, _, t in kernels.values())):
            timer.resolve()
            timer.seconds, timer.calls = 0.0, 0


def clear() -> None:
    """Forget every instrumented graph (a benchmark that has read its figures; nothing printed at exit)."""
    _TABLES.clear()


def format_kernel_times() -> str:
    from tabulate import tabulate

    parts = []
    for report, seconds, calls, rows in kernel_times():
        if not calls:
            continue
        in_kernels = sum(r.seconds for r in rows)
        head = (f"[crucible] graph {report.graph_id} ({report.kind}): {calls} calls, {seconds / calls * 1e6:.1f} us "
                f"per call, {in_kernels / seconds * 100 if seconds else 0:.0f}% in kernels and extern calls")
        table = [(r.kernel, r.calls, f"{r.mean_us:.1f}", f"{r.seconds / seconds * 100 if seconds else 0:.1f}",
                  ", ".join(dict.fromkeys(r.ops))[:60]) for r in rows]
        parts.append(head + "\n" + tabulate(table, headers=["kernel", "launches", "us each", "% of graph", "ops"]))
    return "\n\n".join(parts)


def print_kernel_times() -> None:
    text = format_kernel_times()
    if text:
        print(text, file=sys.stderr, flush=True)
